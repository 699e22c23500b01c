//! Merging `ContainerUpdate`s (resource changes of existing containers) and
//! `ContainerEviction`s.
//!
//! Updates are merged per container id, in the order containers are first
//! named, with the same field claims as adjustments (scoped to that
//! container). `ignore_failure` of a container's merged update is the AND of
//! every policy's flag for it. An update that conflicts is an error unless
//! the policy itself marked it `ignore_failure`; then that update is skipped,
//! as the runtime skips it: its resources are left as they were, but claims
//! it made before the conflicting one stay recorded, and the container keeps
//! its (possibly empty) entry in the merged list.
//!
//! Two quirks of the runtime's update merge are kept, because they decide
//! what conflicts and what the runtime ends up applying:
//! - a pids limit in an update is never applied; instead, an update claims
//!   the pids limit whenever the resources it is merged into already have
//!   one (for UpdateContainer: the requested resources);
//! - device cgroup rules in an update are dropped.

use std::collections::{HashMap, HashSet};

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use super::adjust::{set_cpu, set_memory, strip_resources, Step};
use super::owners::{Owners, Scope};
use super::MergeError;
use pb::Field as F;

/// Updates and evictions collected so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Updates {
    /// CreateContainer: the container being created, which may not be updated.
    creating: Option<String>,
    /// UpdateContainer: the container whose update was requested.
    requested: Option<Requested>,
    /// Merged updates of every other container, in first-seen order.
    others: Vec<pb::ContainerUpdate>,
    /// Where each container's entry is in `others`.
    index: HashMap<String, usize>,
    evictions: Vec<pb::ContainerEviction>,
    /// Containers already in `evictions`.
    evicted: HashSet<String>,
}

#[derive(Debug, Clone, PartialEq)]
struct Requested {
    id: String,
    /// The requested resources with every update so far applied: what the
    /// next policy sees.
    resources: pb::LinuxResources,
    /// The policies' own changes to it, as one merged update.
    update: Option<pb::ContainerUpdate>,
}

impl Updates {
    pub(super) fn for_create(id: &str) -> Self {
        Self { creating: Some(id.to_string()), ..Default::default() }
    }

    /// For UpdateContainer of `id` to `resources`; like the runtime, makes
    /// sure memory and CPU settings are present.
    pub(super) fn for_update(id: &str, resources: Option<&pb::LinuxResources>) -> Self {
        let mut resources = resources.cloned().unwrap_or_default();
        resources.memory.mut_or_insert_default();
        resources.cpu.mut_or_insert_default();
        Self { requested: Some(Requested { id: id.to_string(), resources, update: None }), ..Default::default() }
    }

    pub(super) fn requested_resources(&self) -> Option<&pb::LinuxResources> {
        self.requested.as_ref().map(|r| &r.resources)
    }

    /// Merges one policy's updates. On error the state is partly changed:
    /// the caller works on a copy.
    pub(super) fn apply(
        &mut self,
        owners: &mut Owners,
        policy: &str,
        updates: &[pb::ContainerUpdate],
    ) -> Result<(), MergeError> {
        for update in updates {
            let id = update.container_id.as_str();
            if self.creating.as_deref() == Some(id) {
                return Err(MergeError::UpdatesCreatedContainer { policy: policy.into(), container: id.into() });
            }
            let mut step = Step { owners: &mut *owners, scope: Scope::updated(id), policy };
            if let Err(e) = self.merge_one(&mut step, update) {
                if !update.ignore_failure {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn merge_one(&mut self, step: &mut Step<'_, '_>, update: &pb::ContainerUpdate) -> Result<(), MergeError> {
        let id = update.container_id.as_str();
        let entry = match &mut self.requested {
            Some(requested) if requested.id == id => {
                requested.update.get_or_insert_with(|| empty_update(id, update.ignore_failure))
            }
            _ => {
                let i = match self.index.get(id) {
                    Some(&i) => i,
                    None => {
                        self.index.insert(id.to_string(), self.others.len());
                        self.others.push(empty_update(id, update.ignore_failure));
                        self.others.len() - 1
                    }
                };
                &mut self.others[i]
            }
        };
        entry.ignore_failure &= update.ignore_failure;

        let entry_has_pids = entry.linux.as_ref().and_then(|l| l.resources.as_ref()).is_some_and(|r| r.pids.is_some());
        let Some(input) = update.linux.as_ref().and_then(|l| l.resources.as_ref()) else { return Ok(()) };
        // Claims first, against a scratch copy the size of this update: an
        // ignored failure must leave the resources alone, and copying the
        // resources merged so far for every update would make a reply of N
        // updates of one container cost N^2. Claims never depend on what
        // was merged before, so the second pass, which changes the real
        // resources, cannot fail (its claims go to a throwaway record).
        let pids = match &self.requested {
            Some(requested) if requested.id == id => requested.resources.pids.is_some(),
            _ => entry_has_pids,
        };
        let mut scratch = pb::LinuxResources::default();
        if pids {
            scratch.pids.mut_or_insert_default();
        }
        update_resources(step, input, &mut scratch, None)?;
        let mut unclaimed = Owners::default();
        let mut apply = Step { owners: &mut unclaimed, scope: Scope::updated(id), policy: step.policy };
        let outcome = match &mut self.requested {
            Some(requested) if requested.id == id => {
                let mirror = requested.update.as_mut().expect("entry created first");
                let mirror = mirror.linux.mut_or_insert_default().resources.mut_or_insert_default();
                update_resources(&mut apply, input, &mut requested.resources, Some(mirror))
            }
            _ => {
                let entry = &mut self.others[self.index[id]];
                let target = entry.linux.mut_or_insert_default().resources.mut_or_insert_default();
                update_resources(&mut apply, input, target, None)
            }
        };
        debug_assert!(outcome.is_ok(), "the second pass claims nothing that conflicts: {outcome:?}");
        Ok(())
    }

    /// Keeps every eviction, once per container (the first reason wins).
    pub(super) fn evict(&mut self, evictions: &[pb::ContainerEviction]) {
        for eviction in evictions {
            if self.evicted.insert(eviction.container_id.clone()) {
                self.evictions.push(eviction.clone());
            }
        }
    }

    /// The merged updates (other containers first, in first-seen order, then
    /// the requested container's) and evictions.
    ///
    /// The requested container's update holds only what the policies changed,
    /// not the requested resources with those changes applied (the runtime's
    /// own result for that container). The runtime applies a plugin's update
    /// of the requested container on top of the requested resources anyway;
    /// sending the full resources would make it record nri-wasm as the setter
    /// of every requested field and reject any other plugin that changes one
    /// of them, which the same policies as separate plugins would not cause.
    pub(super) fn finish(self) -> (Vec<pb::ContainerUpdate>, Vec<pb::ContainerEviction>) {
        let mut updates = self.others;
        updates.extend(self.requested.and_then(|r| r.update));
        for update in &mut updates {
            if let Some(resources) = update.linux.as_mut().and_then(|l| l.resources.as_mut()) {
                strip_resources(resources);
            }
        }
        (updates, self.evictions)
    }
}

/// A container's update before any resources are merged into it.
fn empty_update(id: &str, ignore_failure: bool) -> pb::ContainerUpdate {
    pb::ContainerUpdate {
        container_id: id.to_string(),
        linux: MessageField::some(pb::LinuxContainerUpdate {
            resources: MessageField::some(pb::LinuxResources::default()),
            ..Default::default()
        }),
        ignore_failure,
        ..Default::default()
    }
}

/// Applies one update's resources to `target`, claiming each field in the
/// runtime's order; `mirror` receives the same changes (the requested
/// container's merged update). Hugepage limits are appended, unified entries
/// set by key; pids and device rules: see the module documentation.
fn update_resources(
    step: &mut Step<'_, '_>,
    input: &pb::LinuxResources,
    target: &mut pb::LinuxResources,
    mut mirror: Option<&mut pb::LinuxResources>,
) -> Result<(), MergeError> {
    if let Some(memory) = input.memory.as_ref() {
        let mirror = mirror.as_deref_mut().map(|m| m.memory.mut_or_insert_default());
        set_memory(step, memory, target.memory.mut_or_insert_default(), mirror)?;
    }
    if let Some(cpu) = input.cpu.as_ref() {
        let mirror = mirror.as_deref_mut().map(|m| m.cpu.mut_or_insert_default());
        set_cpu(step, cpu, target.cpu.mut_or_insert_default(), mirror)?;
    }
    for limit in &input.hugepage_limits {
        step.claim_key(F::HugepageLimits, &limit.page_size)?;
        target.hugepage_limits.push(limit.clone());
        if let Some(m) = mirror.as_deref_mut() {
            m.hugepage_limits.push(limit.clone());
        }
    }
    let mut unified: Vec<_> = input.unified.iter().collect();
    unified.sort();
    for (key, value) in unified {
        step.claim_key(F::CgroupsUnified, key)?;
        target.unified.insert(key.clone(), value.clone());
        if let Some(m) = mirror.as_deref_mut() {
            m.unified.insert(key.clone(), value.clone());
        }
    }
    if let Some(class) = input.blockio_class.as_ref() {
        step.claim(F::BlockioClass)?;
        target.blockio_class = MessageField::some(class.clone());
        if let Some(m) = mirror.as_deref_mut() {
            m.blockio_class = MessageField::some(class.clone());
        }
    }
    if let Some(class) = input.rdt_class.as_ref() {
        step.claim(F::RdtClass)?;
        target.rdt_class = MessageField::some(class.clone());
        if let Some(m) = mirror {
            m.rdt_class = MessageField::some(class.clone());
        }
    }
    if target.pids.is_some() {
        step.claim(F::PidsLimit)?;
    }
    Ok(())
}
