//! What a call runs: a policy after loading, pre-linked and subscribed.
//!
//! Loading (`load/prepare.rs`) makes these and the chain holds them; a call
//! only reads them. They are defined here, on the call side, so that the
//! store and the engine's call can name them without importing the loader.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, ComponentExportIndex, InstancePre};

use super::profile::CallProfile;
use super::store::CallState;
use crate::nri::version::EventMask;
use crate::policy::spec::caps::{Allowed, Capability};
use crate::policy::spec::inspection::Inspection;
use crate::policy::spec::manifest::PolicySpec;

/// Which optional host interfaces a policy imports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imports {
    /// `nri-wasm:policy/node`: the policy reads the node view.
    pub node: bool,
    /// `nri-wasm:policy/state`: the policy keeps state.
    pub state: bool,
}

impl Imports {
    /// Whether a policy with these imports, allowed `allowed`, reads the
    /// node view: it imports the interface and may call it (its grant,
    /// narrowed by its declaration if it has one). Toolchains such as
    /// componentize-js and componentize-py import every interface of the
    /// world, so the import alone overstates it; a policy without a
    /// declaration is judged by its imports and grant, as `caps.rs` treats
    /// it. The host subscribes to the view's events and keeps the view
    /// only for policies that do, and `check` and `eval` say the same.
    pub fn reads_node(self, allowed: Allowed) -> bool {
        self.node && allowed.effective().contains(Capability::Node)
    }
}

/// How long each step of a load took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadTimings {
    /// Reading the file (or pulling it).
    pub read: Duration,
    /// Checking the component's structure and imports before compiling it.
    pub inspect: Duration,
    /// Compiling, or loading the compiled form from the cache.
    pub compile: Duration,
    /// Whether the compiled form came from the cache.
    pub cached: bool,
    /// Whether another load of the same file made the compiled form (or
    /// held it already) and this one took it: `compile` is then the wait.
    pub shared: bool,
    /// Linking it to the host's functions and checking its exports.
    pub link: Duration,
    /// Its `configure` call.
    pub configure: Duration,
    /// Pre-initialising it (`load/snapshot.rs`), if its settings ask.
    pub preinitialize: Duration,
}

/// A loaded policy: its spec, its pre-linked component and its subscription.
#[derive(Clone)]
pub struct CompiledPolicy {
    /// What it was loaded from, with its settings.
    pub spec: PolicySpec,
    /// What each call takes of it.
    pub(crate) profile: CallProfile,
    pub(crate) instance_pre: InstancePre<CallState>,
    pub(crate) handle: ComponentExportIndex,
    pub(crate) configure: ComponentExportIndex,
    pub(crate) imports: Imports,
    pub(crate) events: EventMask,
    pub(crate) synchronize: bool,
    /// SHA-256 of the file, hex.
    pub(crate) digest: String,
    /// Its key in the compile cache.
    pub(crate) cache_key: String,
    pub(crate) inspection: Inspection,
    /// What it may change and read (`caps.rs`).
    pub(crate) allowed: Allowed,
    pub(crate) timings: LoadTimings,
    /// Whether its calls start from a snapshot taken after `configure`.
    pub(crate) preinitialized: bool,
    /// Why it was not pre-initialised although its settings asked.
    pub(crate) preinitialize_refused: Option<String>,
    /// Keeps the component shared with other policies of the same file.
    pub(crate) _component: Arc<Component>,
}

impl std::fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPolicy")
            .field("name", &self.profile.name)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

impl CompiledPolicy {
    /// The policy's name (`NN-name`).
    pub fn name(&self) -> &str {
        &self.profile.name
    }

    /// NRI events the policy subscribed to in `configure`.
    pub fn events(&self) -> EventMask {
        self.events
    }

    /// Whether the policy subscribed to `synchronize`.
    pub fn wants_synchronize(&self) -> bool {
        self.synchronize
    }

    /// Which optional host interfaces it imports.
    pub fn imports(&self) -> Imports {
        self.imports
    }

    /// SHA-256 of the policy file, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Its entry's name in the compile cache: a digest of the engine's
    /// configuration and the component.
    pub fn cache_key(&self) -> &str {
        &self.cache_key
    }

    /// What it declares, what it is granted, and so what it may use.
    pub fn allowed(&self) -> Allowed {
        self.allowed
    }

    /// Whether it reads the node view ([`Imports::reads_node`]).
    pub fn reads_node(&self) -> bool {
        debug_assert_eq!(self.profile.reads_node, self.imports.reads_node(self.allowed));
        self.profile.reads_node
    }

    /// Whether its calls start from a snapshot of the state `configure`
    /// left (`preinitialize = true`, and the snapshot could be taken).
    pub fn preinitialized(&self) -> bool {
        self.preinitialized
    }

    /// Why it was not pre-initialised although its settings file asked
    /// (it then runs as built).
    pub fn preinitialize_refused(&self) -> Option<&str> {
        self.preinitialize_refused.as_deref()
    }

    /// What inspecting the file found.
    pub fn inspection(&self) -> &Inspection {
        &self.inspection
    }

    /// How long each step of its load took.
    pub fn timings(&self) -> &LoadTimings {
        &self.timings
    }

    /// Whether it runs the very same compiled code as `other` (one copy in
    /// memory, not two of the same).
    #[cfg(any(test, feature = "testing"))]
    pub fn shares_code_with(&self, other: &CompiledPolicy) -> bool {
        Arc::ptr_eq(&self._component, &other._component)
    }
}
