//! Merging the outputs of a chain of policies the way the runtime merges
//! the outputs of several NRI plugins.
//!
//! # Why mirror the runtime
//!
//! To the runtime, nri-wasm is one plugin; behind it, a chain of policies
//! each returns what an NRI plugin would return. An operator who moves two
//! plugins into the chain, or writes policies that cooperate with native
//! plugins, must get what NRI would have given them: the same adjustments,
//! the same winner when several policies touch one container, and the same
//! conflicts, at the same point. So this module folds the replies in exactly
//! as the runtime's own merge folds plugin replies:
//! - every field of a container has at most one owner. A simple field (the
//!   memory limit, the cgroups path, the args, ...) is set by one policy
//!   only; a compound field (annotations, mounts, devices, env, ...) is owned
//!   key by key. A second setter is a [`MergeError::Conflict`] naming both.
//!   OCI hooks accumulate; device cgroup rules are appended.
//! - a removal (a key starting with `-`) clears the owner in the cases the
//!   runtime clears it, and is recorded as done by that policy: the remover
//!   may set the key again (in the same reply), anyone else conflicts with
//!   the remover.
//! - each policy sees the container (for UpdateContainer: the requested
//!   resources) as modified by the policies before it, modified exactly as
//!   the runtime modifies the request it shows the next plugin.
//!
//! The combined reply is then merged *again* by the runtime, as the reply of
//! the single plugin nri-wasm, together with the other plugins' replies. It
//! is built so that this second merge lands where the policies would have
//! landed as separate plugins; the few places where that takes more than
//! replaying the runtime's merge are documented on [`CreateMerge::finish`]
//! and [`UpdateMerge::finish`].
//!
//! # What differs from the runtime's merge, on purpose
//!
//! - [`CreateMerge::apply`] and the others are transactional: a failing
//!   policy leaves the merge as it was, so the chain may skip that policy
//!   (the runtime, failing the whole event, never needs to).
//! - Evictions are kept and forwarded (the runtime's merge drops them).
//! - Where the runtime iterates a Go map, keys are taken in sorted order, so
//!   the first conflict reported and every output order are deterministic.
//! - Empty parts (unset memory settings, an empty hooks message, ...) are left
//!   out of the combined reply; they mean nothing to the runtime.
//!
//! # Keys set and removed inside the chain
//!
//! One difference cannot be avoided with a single reply. When one policy sets
//! a key of a compound field (a mount, an env variable, a device) and a later
//! policy removes it, separate plugins would leave the key "removed by the
//! second plugin" at the runtime, and a native plugin running after them
//! would conflict when it sets the key again. The combined reply can only say
//! "remove it" (`-key`), and the runtime records an owner for a removal only
//! when an earlier plugin had set the key; so a native plugin after nri-wasm
//! may set that key without a conflict. What the chain itself produces is
//! unchanged. `tests/e2e/tests/merge_plugins.rs` pins this behaviour down.
//!
//! Layout: `owners` keeps the ownership records, `adjust` merges
//! adjustments of a new container, `update` merges updates and evictions,
//! `validate` checks a single reply before it is merged.

mod adjust;
mod owners;
mod update;
mod validate;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use adjust::Adjuster;
use owners::Owners;
use update::Updates;
pub use validate::{
    is_cgroup_file, validate_create_reply, validate_updates, BadField, KnownContainers, Unknown, MAX_UPDATES,
};

/// What a merge knows of the node's containers, to refuse updates of
/// containers the node does not have.
pub type Known = Arc<dyn KnownContainers + Send + Sync>;

fn unknown() -> Known {
    Arc::new(Unknown)
}

/// Why one policy's output could not be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// Two policies set the same field. `first` set (or removed) it before,
    /// `second` is the policy whose output was being merged. `field` names
    /// the key of a compound field (`annotation "foo"`, `mount "/data"`) and
    /// the container when it is not the one being created.
    #[error("policies {first:?} and {second:?} both tried to set {field}")]
    Conflict {
        /// The field, with its key and container where it has them.
        field: String,
        /// The policy that set the field first.
        first: String,
        /// The policy whose output was being merged.
        second: String,
    },
    /// A CreateContainer reply tried to update the container being created
    /// (which only an adjustment can change).
    #[error("policy {policy:?} asked to update container {container:?} during its creation")]
    UpdatesCreatedContainer {
        /// The policy whose reply it was.
        policy: String,
        /// The ID of the container being created.
        container: String,
    },
    /// The output is malformed (see [`validate_create_reply`]).
    #[error("invalid output of policy {policy:?}: {reason}")]
    Invalid {
        /// The policy whose reply it was.
        policy: String,
        /// The field that is wrong, and what is wrong with it.
        reason: Box<BadField>,
    },
}

/// The merge of a CreateContainer event.
///
/// Replies are merged in place; a reply that cannot be merged (a conflict
/// found half-way) is undone by replaying the replies merged before it onto
/// the request. Failures are rare, so the common path copies nothing.
#[derive(Clone)]
pub struct CreateMerge<'r> {
    req: &'r pb::CreateContainerRequest,
    state: CreateState,
    /// The replies merged so far, for the replay.
    applied: Vec<(String, pb::CreateContainerResponse)>,
    known: Known,
}

/// Merges are equal when their states are (what they know of the node aside).
impl PartialEq for CreateMerge<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.req == other.req && self.state == other.state && self.applied == other.applied
    }
}

impl PartialEq for UpdateMerge {
    fn eq(&self, other: &Self) -> bool {
        self.updates == other.updates && self.owners == other.owners
    }
}

impl PartialEq for UpdatesMerge {
    fn eq(&self, other: &Self) -> bool {
        self.updates == other.updates && self.owners == other.owners
    }
}

impl std::fmt::Debug for CreateMerge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateMerge").field("state", &self.state).field("applied", &self.applied.len()).finish()
    }
}

#[derive(Debug, Clone, PartialEq)]
struct CreateState {
    adjuster: Adjuster,
    updates: Updates,
    owners: Owners,
}

impl CreateState {
    fn new(container: &pb::Container) -> Self {
        Self {
            adjuster: Adjuster::new(container),
            updates: Updates::for_create(&container.id),
            owners: Owners::default(),
        }
    }

    fn apply(&mut self, policy: &str, reply: &pb::CreateContainerResponse) -> Result<(), MergeError> {
        if let Some(adjust) = reply.adjust.as_ref() {
            self.adjuster.apply(&mut self.owners, policy, adjust)?;
        }
        self.updates.apply(&mut self.owners, policy, &reply.update)?;
        self.updates.evict(&reply.evict);
        Ok(())
    }
}

impl<'r> CreateMerge<'r> {
    /// A merge of the replies to `req`, starting from its container as the
    /// runtime sent it.
    pub fn new(req: &'r pb::CreateContainerRequest) -> Self {
        Self { req, state: CreateState::new(&req.container), applied: Vec::new(), known: unknown() }
    }

    /// Refuses updates and evictions of containers `known` says the node
    /// does not have.
    pub fn knowing(mut self, known: Known) -> Self {
        self.known = known;
        self
    }

    /// The container as the policies so far have modified it (what the next policy sees).
    pub fn container(&self) -> &pb::Container {
        &self.state.adjuster.container
    }

    /// [`Self::container`], shared: a reference held while the next reply
    /// is applied makes the merge copy the container first.
    pub fn shared_container(&self) -> &Arc<pb::Container> {
        &self.state.adjuster.container
    }

    /// The pod of the container being created.
    pub fn pod(&self) -> &pb::PodSandbox {
        &self.req.pod
    }

    /// Applies one policy's reply. Transactional: on Err the merge state is unchanged,
    /// so the caller may skip that policy and go on.
    pub fn apply(&mut self, policy: &str, reply: &pb::CreateContainerResponse) -> Result<(), MergeError> {
        validate_create_reply(policy, reply, &*self.known)?;
        match self.state.apply(policy, reply) {
            Ok(()) => {
                self.applied.push((policy.to_string(), reply.clone()));
                Ok(())
            }
            Err(e) => {
                let mut state = CreateState::new(&self.req.container);
                for (p, r) in &self.applied {
                    state.apply(p, r).expect("a reply that merged once merges again the same way");
                }
                self.state = state;
                Err(e)
            }
        }
    }

    /// The combined reply for the runtime: the adjustment (`None` if nothing
    /// was adjusted), the merged updates of other containers in first-seen
    /// order, and the evictions.
    ///
    /// Beyond replaying the runtime's merge, device and environment removals
    /// are passed on and args cleared with `[""]` stay `[""]` (see
    /// `adjust::Adjuster::finish`), so that the runtime, merging this as one plugin's reply,
    /// does to its container what the separate replies would have done.
    pub fn finish(self) -> pb::CreateContainerResponse {
        let (update, evict) = self.state.updates.finish();
        pb::CreateContainerResponse {
            adjust: MessageField::from_option(self.state.adjuster.finish()),
            update,
            evict,
            ..Default::default()
        }
    }

    /// The field owners recorded so far, in NRI's OwningPlugins form (for a validation step).
    pub fn owners(&self) -> pb::OwningPlugins {
        self.state.owners.to_proto()
    }
}

/// The merge of an UpdateContainer event.
#[derive(Clone)]
pub struct UpdateMerge {
    updates: Updates,
    owners: Owners,
    known: Known,
}

impl std::fmt::Debug for UpdateMerge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateMerge").field("updates", &self.updates).finish_non_exhaustive()
    }
}

impl UpdateMerge {
    /// A merge of the replies to `req`, starting from the resources the
    /// runtime asked for.
    pub fn new(req: &pb::UpdateContainerRequest) -> Self {
        Self {
            updates: Updates::for_update(&req.container.id, req.linux_resources.as_ref()),
            owners: Owners::default(),
            known: unknown(),
        }
    }

    /// See [`CreateMerge::knowing`].
    pub fn knowing(mut self, known: Known) -> Self {
        self.known = known;
        self
    }

    /// The requested resources as the policies so far have modified them.
    pub fn resources(&self) -> &pb::LinuxResources {
        self.updates.requested_resources().expect("an update merge has a requested container")
    }

    /// Applies one policy's reply; transactional like [`CreateMerge::apply`].
    pub fn apply(&mut self, policy: &str, reply: &pb::UpdateContainerResponse) -> Result<(), MergeError> {
        validate_updates(policy, &reply.update, &reply.evict, &*self.known)?;
        let mut next = self.clone();
        next.updates.apply(&mut next.owners, policy, &reply.update)?;
        next.updates.evict(&reply.evict);
        *self = next;
        Ok(())
    }

    /// The merged updates: other containers in first-seen order, then the
    /// updated container's own (if any policy updated it), and the evictions.
    ///
    /// The updated container's entry carries only the policies' changes; the
    /// runtime applies it on top of the requested resources itself (why not
    /// the full resources: see `update::Updates::finish`).
    pub fn finish(self) -> pb::UpdateContainerResponse {
        let (update, evict) = self.updates.finish();
        pb::UpdateContainerResponse { update, evict, ..Default::default() }
    }

    /// The field owners recorded so far, in NRI's OwningPlugins form.
    pub fn owners(&self) -> pb::OwningPlugins {
        self.owners.to_proto()
    }
}

/// The merge of a StopContainer event: updates of any container (the one
/// stopping included, as the runtime allows).
#[derive(Debug, Clone, PartialEq)]
pub struct StopMerge {
    inner: UpdatesMerge,
}

impl StopMerge {
    /// A merge of the replies to a StopContainer request (which brings no
    /// state of its own to start from).
    pub fn new(_req: &pb::StopContainerRequest) -> Self {
        Self { inner: UpdatesMerge::new() }
    }

    /// See [`CreateMerge::knowing`].
    pub fn knowing(mut self, known: Known) -> Self {
        self.inner.known = known;
        self
    }

    /// Applies one policy's reply; transactional like [`CreateMerge::apply`].
    pub fn apply(&mut self, policy: &str, reply: &pb::StopContainerResponse) -> Result<(), MergeError> {
        self.inner.apply(policy, &reply.update, &[])
    }

    /// [`Self::apply`] of a reply's updates.
    pub fn apply_updates(&mut self, policy: &str, updates: &[pb::ContainerUpdate]) -> Result<(), MergeError> {
        self.inner.apply(policy, updates, &[])
    }

    /// The merged reply to send the runtime.
    pub fn finish(self) -> pb::StopContainerResponse {
        let (update, _) = self.inner.finish();
        pb::StopContainerResponse { update, ..Default::default() }
    }
}

/// Merges plain lists of updates and evictions (Synchronize, unsolicited
/// UpdateContainers) with the same rules, no container being special.
#[derive(Clone)]
pub struct UpdatesMerge {
    updates: Updates,
    owners: Owners,
    known: Known,
}

impl std::fmt::Debug for UpdatesMerge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdatesMerge").field("updates", &self.updates).finish_non_exhaustive()
    }
}

impl Default for UpdatesMerge {
    fn default() -> Self {
        Self::new()
    }
}

impl UpdatesMerge {
    /// An empty merge.
    pub fn new() -> Self {
        Self { updates: Updates::default(), owners: Owners::default(), known: unknown() }
    }

    /// See [`CreateMerge::knowing`].
    pub fn knowing(mut self, known: Known) -> Self {
        self.known = known;
        self
    }

    /// Applies one policy's output; transactional like [`CreateMerge::apply`].
    pub fn apply(
        &mut self,
        policy: &str,
        updates: &[pb::ContainerUpdate],
        evictions: &[pb::ContainerEviction],
    ) -> Result<(), MergeError> {
        validate_updates(policy, updates, evictions, &*self.known)?;
        let mut next = self.clone();
        next.updates.apply(&mut next.owners, policy, updates)?;
        next.updates.evict(evictions);
        *self = next;
        Ok(())
    }

    /// The merged updates in first-seen order, and the evictions.
    pub fn finish(self) -> (Vec<pb::ContainerUpdate>, Vec<pb::ContainerEviction>) {
        self.updates.finish()
    }
}
