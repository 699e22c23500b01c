//! What a call's store takes of its policy, and nothing more.
//!
//! A store used to be built from the whole `CompiledPolicy`, which holds
//! the store's own type in its pre-linked component: the two files needed
//! each other, and a store could read anything a policy carries (its file's
//! digest, its cache key, its load timings). A profile is the part a call
//! uses, fixed when the policy is loaded: its name, its settings, the seed of
//! its random sources, its limits and whether it may see the node. A call
//! is built from it, and `store.rs` knows nothing of how a policy is loaded.

use std::sync::Arc;

use crate::policy::spec::caps::{Allowed, Capability};
use crate::policy::spec::limits::Limits;

/// What a call needs of its policy (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct CallProfile {
    /// The policy's name (`NN-name`), in every error and log line.
    pub(crate) name: Arc<str>,
    /// Its settings, as its `settings` import returns them.
    pub(crate) settings: Arc<str>,
    /// Seed of its random sources (from its name).
    pub(crate) seed: u64,
    /// Its limits, as its spec resolved them.
    pub(crate) limits: Limits,
    /// Whether it reads the node view: it imports the interface and is
    /// allowed to (`Imports::reads_node` in `compiled.rs`).
    pub(crate) reads_node: bool,
    /// Whether its grant allows the node view at all (a call that asks
    /// without it is refused, naming the capability).
    pub(crate) node_allowed: bool,
}

impl CallProfile {
    /// The profile of a policy named `name`, with `settings` and `limits`,
    /// allowed `allowed`, that imports the node interface or not.
    pub(crate) fn new(name: &str, settings: &str, limits: Limits, allowed: Allowed, imports_node: bool) -> Self {
        let node_allowed = allowed.effective().contains(Capability::Node);
        Self {
            name: name.into(),
            settings: settings.into(),
            seed: seed_of(name),
            limits,
            reads_node: imports_node && node_allowed,
            node_allowed,
        }
    }
}

/// A stable seed from a policy's name (FNV-1a): the same policy draws the
/// same random numbers on every node, and two policies different ones.
fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
