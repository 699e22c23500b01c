//! Pre-initialisation: a policy's calls started from the state its
//! `configure` left, instead of from the component as built.
//!
//! Why: every call runs in a fresh instance, so whatever a policy computes
//! before it reads its event (its language runtime's start, its settings
//! decoded, the tables those build) it computes again at every call. For a
//! Go policy that is a quarter of the call, half once the policy keeps its
//! decoded settings (docs/performance.md, "Guests initialised ahead of
//! time"). With `preinitialize = true` in its settings file, the loader
//! runs the component's start-up and `configure` once more at load, in an
//! instrumented instance, and makes the memories and globals it leaves the
//! component's initial state (`wasmtime-wizer`'s component rewrite: the
//! same code, new data segments and global initialisers, no start
//! functions). Every call still gets a fresh instance, of the snapshot:
//! nothing one call does is seen by the next.
//!
//! What the snapshot may hold is what `configure` could reach: the
//! operator's settings, the node facts, the policy's state and the node
//! view (if it imports and is granted them) as they were at load, the
//! clock readings its start-up took then, and its random source as far as
//! `configure` drew from it (seeded per policy, as in every call). The
//! steps are bounded as a call is: the instrumented instance runs under
//! the policy's own fuel, memory and time limits (the engine's
//! `configure`), the snapshot is no larger than `max-component-mib`, and
//! it is compiled within the compile bounds. A snapshot is refused (and the
//! policy loaded as built, with a warning naming it and the reason) if any
//! step fails, including `configure` leaving a host handle open (a WASI
//! stream kept in a global): a snapshot cannot carry one.
//!
//! The instrumented component is deterministic, so its compiled form is
//! cached like any component's; the snapshot is not (it holds the load's
//! clock readings), and is compiled at every load.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt as _;
use wasmtime::component::{Component, ComponentExportIndex, Instance, InstancePre, WasmList};
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wizer::{ComponentInstanceState, Wizer};

use super::cache::Binding;
use super::loader::PolicyLoader;
use crate::policy::call::compiled::CompiledPolicy;
use crate::policy::call::env::Facts;
use crate::policy::call::errors::CallError;
use crate::policy::call::store::CallState;

/// Why a policy could not be pre-initialised. Each leaves the policy
/// loaded as built.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The component uses something the rewrite does not support.
    #[error("the component cannot be instrumented: {0}")]
    Instrument(String),
    /// Compiling the instrumented component, or the snapshot, failed.
    #[error("compiling the {what} failed: {reason}")]
    Compile {
        /// `instrumented component` or `snapshot`.
        what: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// Linking the instrumented component, or the snapshot, failed.
    #[error("linking the {what} failed: {reason}")]
    Link {
        /// `instrumented component` or `snapshot`.
        what: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// `configure` failed in the instrumented instance (it passed in the
    /// plain one just before).
    #[error("configure failed in the instrumented instance: {}", .0.kind)]
    Configure(CallError),
    /// `configure` left host resources (WASI streams, say) open.
    #[error("configure left host handles open (a WASI stream kept in a global, say): a snapshot cannot carry them")]
    Handles,
    /// Reading the instance's memories and globals failed.
    #[error("reading the instance's state failed: {0}")]
    Read(String),
    /// The rewrite failed or panicked.
    #[error("writing the snapshot failed: {0}")]
    Rewrite(String),
    /// The snapshot is larger than a policy file may be.
    #[error("the snapshot is {size} bytes, over max-component-mib ({max_mib} MiB)")]
    TooLarge {
        /// Its size in bytes.
        size: usize,
        /// `max-component-mib`.
        max_mib: u64,
    },
}

/// The snapshot, compiled and linked: what replaces the component of a
/// [`CompiledPolicy`].
pub(crate) struct Snapshot {
    pub component: Arc<Component>,
    pub instance_pre: InstancePre<CallState>,
    pub handle: ComponentExportIndex,
    pub configure: ComponentExportIndex,
    /// Bytes of the rewritten component.
    pub size: usize,
}

impl PolicyLoader {
    /// Takes a snapshot of `policy` (compiled from `binary`, configured)
    /// after its start-up and `configure`, as the module docs say.
    pub(crate) async fn snapshot(
        &self,
        policy: &CompiledPolicy,
        binary: Arc<[u8]>,
        facts: &Arc<Facts>,
    ) -> Result<Snapshot, SnapshotError> {
        let name = policy.name();
        // Parsing and re-encoding: linear in the component, which is at most
        // `max-component-mib`; off the runtime's worker threads.
        let source = binary.clone();
        let instrumented = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(|| Wizer::new().instrument_component(&source).map(|(_, wasm)| wasm))
        })
        .await
        .map_err(|e| SnapshotError::Instrument(format!("the instrumentation panicked: {e}")))?
        .map_err(|_| SnapshotError::Instrument("the instrumentation panicked".into()))?
        .map_err(|e| SnapshotError::Instrument(crate::text::one_line(&e)))?;

        let what = "instrumented component";
        let binding = Binding::new(self.engine().engine(), &instrumented);
        let (component, _) = self
            .component(name, &binding, instrumented.into(), true)
            .await
            .map_err(|e| SnapshotError::Compile { what, reason: e.to_string() })?;
        let linked = self.linked(&component, what)?;
        let instrumented = CompiledPolicy {
            instance_pre: linked.0,
            handle: linked.1,
            configure: linked.2,
            _component: Arc::new(component),
            ..policy.clone()
        };

        let max_bytes = (self.settings().max_component_mib << 20) as usize;
        let fuel = policy.profile.limits.fuel;
        let taken = self
            .engine()
            .configure_then(&instrumented, facts, async |store, instance| take(store, instance, &binary, fuel).await)
            .await
            .map_err(SnapshotError::Configure)?;
        let snapshot = taken.1?;
        if snapshot.len() > max_bytes {
            return Err(SnapshotError::TooLarge { size: snapshot.len(), max_mib: self.settings().max_component_mib });
        }

        let what = "snapshot";
        let size = snapshot.len();
        let binding = Binding::new(self.engine().engine(), &snapshot);
        let (component, _) = self
            .component(name, &binding, snapshot.into(), false)
            .await
            .map_err(|e| SnapshotError::Compile { what, reason: e.to_string() })?;
        let (instance_pre, handle, configure) = self.linked(&component, what)?;
        Ok(Snapshot { component: Arc::new(component), instance_pre, handle, configure, size })
    }

    /// [`Self::snapshot`] of a loaded policy (whose spec a test may have
    /// changed since), for tests: the step's own bounds, without the plain
    /// `configure` that runs before it at load.
    #[cfg(any(test, feature = "testing"))]
    pub async fn snapshot_for_tests(
        &self,
        policy: &CompiledPolicy,
        binary: &[u8],
        facts: &Arc<Facts>,
    ) -> Result<usize, SnapshotError> {
        self.snapshot(policy, binary.into(), facts).await.map(|s| s.size)
    }

    /// `component` linked against the engine's linker, and its two exports.
    fn linked(
        &self,
        component: &Component,
        what: &'static str,
    ) -> Result<(InstancePre<CallState>, ComponentExportIndex, ComponentExportIndex), SnapshotError> {
        let link = |reason: String| SnapshotError::Link { what, reason };
        let instance_pre =
            self.engine().linker().instantiate_pre(component).map_err(|e| link(crate::text::one_line(&e)))?;
        crate::wit::PolicyPre::new(instance_pre.clone()).map_err(|e| link(crate::text::one_line(&e)))?;
        let export =
            |func: &str| component.get_export_index(None, func).ok_or_else(|| link(format!("no export {func}")));
        Ok((instance_pre, export("handle")?, export("configure")?))
    }
}

/// Reads the configured instance's state and writes the snapshot of
/// `binary` from it.
async fn take(
    store: &mut Store<CallState>,
    instance: Instance,
    binary: &[u8],
    fuel: u64,
) -> Result<Vec<u8>, SnapshotError> {
    if store.data().holds_handles() {
        return Err(SnapshotError::Handles);
    }
    // The accessors the instrumentation added read one global or return one
    // memory: a few instructions each, whatever time `configure` used.
    store.set_fuel(fuel).map_err(|e| SnapshotError::Read(crate::text::one_line(&e)))?;
    // A memory accessor hands over a whole memory, which the memory cap
    // already bounds; a call's transfer limit is for what a guest sends.
    store.set_hostcall_fuel(usize::MAX);
    store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Continue(1)));
    let wizer = Wizer::new();
    let (cx, _) =
        wizer.instrument_component(binary).map_err(|e| SnapshotError::Instrument(crate::text::one_line(&e)))?;
    let mut access = Access { store, instance, failed: None };
    let written = AssertUnwindSafe(wizer.snapshot_component(&cx, &mut access)).catch_unwind().await;
    if let Some(failed) = access.failed {
        return Err(SnapshotError::Read(failed));
    }
    match written {
        Ok(Ok(wasm)) => Ok(wasm),
        Ok(Err(e)) => Err(SnapshotError::Rewrite(crate::text::one_line(&e))),
        Err(panic) => {
            let message =
                panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            Err(SnapshotError::Rewrite(format!("it panicked: {}", message.unwrap_or_default())))
        }
    }
}

/// The instrumented instance, read through the accessors the
/// instrumentation exported. A failure is kept (the snapshot is then
/// refused) and a neutral value returned: the trait has no errors.
struct Access<'a> {
    store: &'a mut Store<CallState>,
    instance: Instance,
    failed: Option<String>,
}

impl Access<'_> {
    async fn call<R>(&mut self, interface: &str, func: &str) -> Option<R>
    where
        R: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
    {
        if self.failed.is_some() {
            return None;
        }
        let result: Result<R, String> = async {
            let (_, exported) = self
                .instance
                .get_export(&mut *self.store, None, interface)
                .ok_or_else(|| format!("no export {interface}"))?;
            let (_, index) = self
                .instance
                .get_export(&mut *self.store, Some(&exported), func)
                .ok_or_else(|| format!("no export {interface}#{func}"))?;
            let typed = self
                .instance
                .get_typed_func::<(), (R,)>(&mut *self.store, index)
                .map_err(|e| format!("{interface}#{func}: {}", crate::text::one_line(&e)))?;
            let (value,) = typed
                .call_async(&mut *self.store, ())
                .await
                .map_err(|e| format!("{interface}#{func}: {}", crate::text::one_line(&e)))?;
            Ok(value)
        }
        .await;
        result.map_err(|e| self.failed = Some(e)).ok()
    }
}

impl ComponentInstanceState for Access<'_> {
    async fn call_func_ret_list_u8(&mut self, instance: &str, func: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.call::<WasmList<u8>>(instance, func).await {
            Some(list) => contents(list.as_le_slice(&*self.store)),
            None => contents(&[]),
        }
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func).await.unwrap_or_default()
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call::<f32>(instance, func).await.unwrap_or_default().to_bits()
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call::<f64>(instance, func).await.unwrap_or_default().to_bits()
    }
}
