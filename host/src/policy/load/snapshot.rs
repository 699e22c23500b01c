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
//! What the snapshot may hold is what the start-up and `configure` could
//! reach: the operator's settings, the node facts, the clock readings they
//! took at load, and their random source as far as they drew from it
//! (seeded per policy, as in every call). `configure` runs detached, as at
//! every load: an empty node view and no state.
//!
//! Bounds, since everything the instance holds is the guest's: the second
//! start-up and `configure` run as the plain one does (the policy's fuel
//! and memory cap, its time limit but at least 2 s); the host then copies
//! the instance's memories and globals out through the accessors the
//! instrumentation added (no guest code of the policy's own runs) and drops
//! the instance. Memories whose non-zero bytes fall into more than
//! [`MAX_RUNS`] separate runs are refused before the rewrite sees them (the
//! rewrite keeps a record per run: a memory of alternating bytes would
//! cost far more than the memory itself). The instrumentation and the
//! rewrite parse and rebuild the operator's file with the policy's state:
//! they run as a compile does (`rewrite.rs`), in the compiling child under
//! its address-space and CPU limits, in one of the loader's compile slots,
//! so that the host's own memory holds no more than the instance's copied
//! state. The snapshot is refused (and the policy loaded
//! as built, with a warning naming it and the reason) if any step fails,
//! if `configure` then leaves a host handle open (a WASI stream kept in a
//! global: a snapshot cannot carry one), if it answers other events than
//! the plain `configure` did, or if the snapshot is larger than
//! `max-component-mib`.
//!
//! The instrumented component is deterministic, so its compiled form is
//! cached like any component's (and kept from pruning while the policy is
//! in the directory, with the component as built); the snapshot is not
//! cached (it holds the load's clock readings), and is compiled at every
//! load.

use std::sync::Arc;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, Instance, InstancePre, Type, WasmList};
use wasmtime::{Store, UpdateDeadline};

use super::cache::Binding;
use super::compile::CompileError;
use super::loader::PolicyLoader;
use super::prepare::{subscription, Linked};
use super::rewrite::{Number, SnapshotStep, State};
use crate::policy::call::compiled::CompiledPolicy;
use crate::policy::call::env::Facts;
use crate::policy::call::errors::CallError;
use crate::policy::call::store::CallState;
use crate::wit::wit;

/// Most runs of non-zero bytes (separated by zeros, or by a page's end)
/// the memories of one snapshot may hold. The rewrite keeps a record of
/// each, copied and sorted, before it merges them into at most 10,000 data
/// segments: 3.1 million runs took the rewriting child 140 MB. Real
/// language runtimes need many: the parity policy's memories after
/// `configure` hold 1.4 and 2.3 million runs in Python and SpiderMonkey,
/// 175,000 in Go and under a thousand in Rust and C (docs/performance.md).
/// This admits them with room; a state past it is refused with that
/// reason, before a child is started (the child's memory limit would
/// refuse a far larger one too, but could not say why).
pub const MAX_RUNS: usize = 1 << 22;

/// Most accessors (one per mutable global and per memory of every module)
/// a snapshot takes. The rewrite finds each global's accessor by a walk
/// of the whole list, so its time grows with the square of their number;
/// real components have a few per module.
pub const MAX_ACCESSORS: usize = 1 << 14;

/// The instance exporting the instrumentation's accessors.
const ACCESS: &str = "wasmtime:wizer/access";

/// Why a policy could not be pre-initialised. Each leaves the policy
/// loaded as built.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Instrumenting the component failed (it uses something the rewrite
    /// does not support, say), or went past the compile bounds.
    #[error("instrumenting the component {0}")]
    Instrument(CompileError),
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
    /// `configure` answered other events in the instrumented instance.
    #[error("configure answered {second} in the instrumented instance, {first} in the plain one")]
    Subscription {
        /// What the plain `configure` answered.
        first: String,
        /// What the instrumented one answered.
        second: String,
    },
    /// `configure` left host resources (WASI streams, say) open.
    #[error("configure left host handles open (a WASI stream kept in a global, say): a snapshot cannot carry them")]
    Handles,
    /// Reading the instance's memories and globals failed.
    #[error("reading the instance's state failed: {0}")]
    Read(String),
    /// The memories hold too many separate runs of data.
    #[error("its memories hold more than {max} separate runs of non-zero bytes, the most a snapshot takes")]
    Runs {
        /// [`MAX_RUNS`].
        max: usize,
    },
    /// The instrumentation exported too many accessors.
    #[error("it has {count} mutable globals and memories, over the {max} a snapshot takes")]
    Accessors {
        /// How many.
        count: usize,
        /// [`MAX_ACCESSORS`].
        max: usize,
    },
    /// The rewrite failed or panicked, or went past the compile bounds.
    #[error("writing the snapshot {0}")]
    Rewrite(CompileError),
    /// The snapshot is larger than a policy file may be (or its memories'
    /// data alone is, counted before the rewrite).
    #[error("the snapshot is {size} bytes or more, over max-component-mib ({max_mib} MiB)")]
    TooLarge {
        /// Its size in bytes (the memories' non-zero bytes if the rewrite
        /// was not reached).
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
    /// The instrumented component's compile-cache key: the next load
    /// needs it (`loader.rs`'s `pinned`).
    pub instrumented_key: String,
}

impl PolicyLoader {
    /// Takes a snapshot of `policy` (compiled from `binary`, configured,
    /// answering `kinds`) after its start-up and `configure`, as the module
    /// docs say.
    pub(crate) async fn snapshot(
        &self,
        policy: &CompiledPolicy,
        binary: Arc<[u8]>,
        kinds: &[wit::EventKind],
        facts: &Arc<Facts>,
    ) -> Result<Snapshot, SnapshotError> {
        let name = policy.name();
        let instrumented =
            self.snapshot_step(SnapshotStep::Instrument, binary.to_vec()).await.map_err(SnapshotError::Instrument)?;
        let max_mib = self.settings().max_component_mib;
        let max_bytes = (max_mib << 20) as usize;
        if instrumented.len() > max_bytes {
            let reason = format!("it is {} bytes or more, over max-component-mib ({max_mib} MiB)", instrumented.len());
            return Err(SnapshotError::Instrument(CompileError::Failed(reason)));
        }

        let what = "instrumented component";
        let binding = Binding::new(self.engine().engine(), &instrumented);
        let instrumented_key = binding.key();
        // The same for every policy of one file: compiled once for those
        // pre-initialised together (`prepare.rs`, `component_shared`).
        let component = self
            .component_shared(name, &binding, instrumented.into())
            .await
            .map_err(|e| SnapshotError::Compile { what, reason: e.to_string() })?
            .component;
        let Linked { instance_pre, handle, configure } = self.linked(&component, what)?;
        let instrumented = CompiledPolicy { instance_pre, handle, configure, _component: component, ..policy.clone() };

        let fuel = policy.profile.limits.fuel;
        let (second, state) = self
            .engine()
            .configure_then(&instrumented, facts, async |store, instance| read_state(store, instance, fuel).await)
            .await
            .map_err(SnapshotError::Configure)?;
        if subscription(&second) != subscription(kinds) {
            let names = |k: &[wit::EventKind]| {
                k.iter().map(|k| crate::policy::spec::declared::answer_name(*k)).collect::<Vec<_>>().join(", ")
            };
            return Err(SnapshotError::Subscription { first: names(kinds), second: names(&second) });
        }
        let state = state?;

        // What the rewrite would make of the memories, bounded before it
        // starts (the module docs): a pass over the copies, off the
        // runtime's threads.
        let input = tokio::task::spawn_blocking(move || {
            let (runs, data) = state.measure(MAX_RUNS);
            if runs > MAX_RUNS {
                return Err(SnapshotError::Runs { max: MAX_RUNS });
            }
            if data > max_bytes {
                return Err(SnapshotError::TooLarge { size: data, max_mib });
            }
            Ok(state.finish(&binary))
        })
        .await
        .map_err(|e| SnapshotError::Read(format!("measuring the state panicked: {e}")))??;
        let snapshot = self.snapshot_step(SnapshotStep::Rewrite, input).await.map_err(SnapshotError::Rewrite)?;
        if snapshot.len() > max_bytes {
            return Err(SnapshotError::TooLarge { size: snapshot.len(), max_mib });
        }

        let what = "snapshot";
        let size = snapshot.len();
        let binding = Binding::new(self.engine().engine(), &snapshot);
        let (component, _) = self
            .component(name, &binding, snapshot.into(), false)
            .await
            .map_err(|e| SnapshotError::Compile { what, reason: e.to_string() })?;
        let Linked { instance_pre, handle, configure } = self.linked(&component, what)?;
        Ok(Snapshot { component: Arc::new(component), instance_pre, handle, configure, size, instrumented_key })
    }

    /// [`Self::snapshot`] of a loaded policy (whose spec a test may have
    /// changed since), for tests: the step's own bounds, without the plain
    /// `configure` that runs before it at load.
    #[cfg(any(test, feature = "testing"))]
    pub async fn snapshot_for_tests(
        &self,
        policy: &CompiledPolicy,
        binary: &[u8],
        kinds: &[wit::EventKind],
        facts: &Arc<Facts>,
    ) -> Result<usize, SnapshotError> {
        self.snapshot(policy, binary.into(), kinds, facts).await.map(|s| s.size)
    }

    /// `component` linked as a policy's is (`prepare.rs`).
    fn linked(&self, component: &Component, what: &'static str) -> Result<Linked, SnapshotError> {
        self.link(component).map_err(|failure| SnapshotError::Link { what, reason: failure.reason() })
    }
}

/// Copies the configured instance's state out through every accessor the
/// instrumentation exported, within the bounds the module docs give.
async fn read_state(store: &mut Store<CallState>, instance: Instance, fuel: u64) -> Result<State, SnapshotError> {
    let fail = |what: String| SnapshotError::Read(what);
    if store.data().holds_handles() {
        return Err(SnapshotError::Handles);
    }
    store.data_mut().disarm();
    // The accessors read one global, or return one memory (growing it by a
    // page for the answer's place): a few instructions each, whatever time
    // `configure` used. A memory is handed over whole, which the memory cap
    // bounds; a call's transfer limit is for what a guest sends.
    store.set_fuel(fuel).map_err(|e| fail(crate::text::one_line(&e)))?;
    store.set_hostcall_fuel(usize::MAX);
    store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Continue(1)));
    let (item, access) =
        instance.get_export(&mut *store, None, ACCESS).ok_or_else(|| fail(format!("no export {ACCESS}")))?;
    let ComponentItem::ComponentInstance(ty) = item else {
        return Err(fail(format!("{ACCESS} is not an instance")));
    };
    let funcs: Vec<(String, ComponentItem)> =
        ty.exports(store.engine()).map(|(name, item)| (name.to_string(), item.ty)).collect();
    if funcs.len() > MAX_ACCESSORS {
        return Err(SnapshotError::Accessors { count: funcs.len(), max: MAX_ACCESSORS });
    }
    let mut state = State::default();
    for (func, item) in funcs {
        let ComponentItem::ComponentFunc(f) = item else { continue };
        let (_, index) = instance
            .get_export(&mut *store, Some(&access), &func)
            .ok_or_else(|| fail(format!("no export {ACCESS}#{func}")))?;
        let result = f.results().next();
        let called = |e: wasmtime::Error| fail(format!("{ACCESS}#{func}: {}", crate::text::one_line(&e)));
        let number = match result {
            Some(Type::List(list)) if list.ty() == Type::U8 => {
                let typed = instance.get_typed_func::<(), (WasmList<u8>,)>(&mut *store, index).map_err(called)?;
                let (bytes,) = typed.call_async(&mut *store, ()).await.map_err(called)?;
                state.memory(&func, bytes.as_le_slice(&*store));
                continue;
            }
            Some(Type::S32) => Number::S32(call(store, instance, index).await.map_err(called)?),
            Some(Type::S64) => Number::S64(call(store, instance, index).await.map_err(called)?),
            Some(Type::Float32) => Number::F32(call::<f32>(store, instance, index).await.map_err(called)?.to_bits()),
            Some(Type::Float64) => Number::F64(call::<f64>(store, instance, index).await.map_err(called)?.to_bits()),
            other => return Err(fail(format!("{ACCESS}#{func} answers {other:?}"))),
        };
        state.number(&func, number);
    }
    Ok(state)
}

/// Calls one accessor that answers a number.
async fn call<R>(store: &mut Store<CallState>, instance: Instance, index: ComponentExportIndex) -> wasmtime::Result<R>
where
    R: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
{
    let typed = instance.get_typed_func::<(), (R,)>(&mut *store, index)?;
    Ok(typed.call_async(&mut *store, ()).await?.0)
}
