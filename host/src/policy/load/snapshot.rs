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
//! cost the host far more than the memory itself). The instrumentation and
//! the rewrite are CPU work linear in the component and the memories: they
//! run on a blocking thread, one of the loader's compile slots at a time,
//! with their panics caught. The snapshot is refused (and the policy loaded
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

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, Instance, InstancePre, Type, WasmList};
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wizer::{ComponentInstanceState, Wizer};

use super::cache::Binding;
use super::loader::PolicyLoader;
use super::prepare::{subscription, Linked};
use crate::policy::call::compiled::CompiledPolicy;
use crate::policy::call::env::Facts;
use crate::policy::call::errors::CallError;
use crate::policy::call::store::CallState;
use crate::wit::wit;

/// Most runs of non-zero bytes (separated by zeros, or by a page's end)
/// the memories of one snapshot may hold. The rewrite keeps a record of
/// some 24 bytes per run, copied and sorted (about 100 bytes a run at its
/// peak, for an instant), before it merges them into at most 10,000 data
/// segments. Real language runtimes need many: the parity policy's
/// memories after `configure` hold 1.4 and 2.3 million runs in Python and
/// SpiderMonkey, 175,000 in Go and under a thousand in Rust and C
/// (docs/performance.md). This admits them with room and keeps the
/// rewrite's record under about 400 MiB; without it, a 64 MiB memory of
/// alternating bytes would cost it some 3 GiB.
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
    /// The rewrite failed or panicked.
    #[error("writing the snapshot failed: {0}")]
    Rewrite(String),
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

/// The rewrite's settings: the instrumentation's own names, and any export
/// of the component left as it is (by default the rewrite removes an export
/// named `wizer-initialize`).
fn wizer() -> Wizer {
    let mut wizer = Wizer::new();
    wizer.keep_init_func(true);
    wizer
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
        let source = binary.clone();
        let instrumented = self
            .offload(move || wizer().instrument_component(&source).map(|(_, wasm)| wasm))
            .await
            .map_err(SnapshotError::Instrument)?
            .map_err(|e| SnapshotError::Instrument(crate::text::one_line(&e)))?;

        let what = "instrumented component";
        let binding = Binding::new(self.engine().engine(), &instrumented);
        let instrumented_key = binding.key();
        let (component, _) = self
            .component(name, &binding, instrumented.into(), true)
            .await
            .map_err(|e| SnapshotError::Compile { what, reason: e.to_string() })?;
        let Linked { instance_pre, handle, configure } = self.linked(&component, what)?;
        let instrumented =
            CompiledPolicy { instance_pre, handle, configure, _component: Arc::new(component), ..policy.clone() };

        let fuel = policy.profile.limits.fuel;
        let (second, read) = self
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
        let read = read?;

        let max_mib = self.settings().max_component_mib;
        let snapshot = self
            .offload(move || {
                // What the rewrite would make of the memories, bounded
                // before it starts (the module docs).
                let (mut runs, mut data) = (0, 0);
                for answer in read.values() {
                    if let Answer::Bytes(bytes) = answer {
                        let (r, d) = count_runs(bytes, MAX_RUNS + 1 - runs);
                        (runs, data) = (runs + r, data + d);
                        if runs > MAX_RUNS {
                            return Err(SnapshotError::Runs { max: MAX_RUNS });
                        }
                    }
                }
                if data > (max_mib << 20) as usize {
                    return Err(SnapshotError::TooLarge { size: data, max_mib });
                }
                let rewrite = |e: wasmtime::Error| SnapshotError::Rewrite(crate::text::one_line(&e));
                // Instrumented again (it is deterministic): the context the
                // rewrite needs borrows the bytes, so the first one could
                // not be kept across the compile and `configure` above.
                let wizer = wizer();
                let (cx, _) = wizer.instrument_component(&binary).map_err(rewrite)?;
                let mut replay = Replay { read, missing: None };
                let written = futures::executor::block_on(wizer.snapshot_component(&cx, &mut replay));
                match replay.missing {
                    Some(missing) => Err(SnapshotError::Rewrite(format!("the instance has no accessor {missing}"))),
                    None => written.map_err(rewrite),
                }
            })
            .await
            .map_err(SnapshotError::Rewrite)??;
        if snapshot.len() > (max_mib << 20) as usize {
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

    /// Runs `work` (the instrumentation or the rewrite: CPU work on the
    /// guest's bytes) on a blocking thread, in one of the loader's compile
    /// slots, and turns a panic into an error.
    async fn offload<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> Result<R, String> {
        let _slot = self.compiles.acquire().await.expect("the compile semaphore is never closed");
        let joined = tokio::task::spawn_blocking(move || std::panic::catch_unwind(AssertUnwindSafe(work))).await;
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(format!("it panicked: {}", panic_text(&*panic))),
            Err(join) => Err(format!("it panicked: {join}")),
        }
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

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// One accessor's answer.
#[derive(Debug)]
enum Answer {
    Bytes(Vec<u8>),
    S32(i32),
    S64(i64),
    F32(u32),
    F64(u64),
}

/// Every accessor's answer, by function name.
type Read = HashMap<String, Answer>;

/// Copies the configured instance's state out through every accessor the
/// instrumentation exported, within the bounds the module docs give.
async fn read_state(store: &mut Store<CallState>, instance: Instance, fuel: u64) -> Result<Read, SnapshotError> {
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
    let mut read = Read::new();
    for (func, item) in funcs {
        let ComponentItem::ComponentFunc(f) = item else { continue };
        let (_, index) = instance
            .get_export(&mut *store, Some(&access), &func)
            .ok_or_else(|| fail(format!("no export {ACCESS}#{func}")))?;
        let result = f.results().next();
        let called = |e: wasmtime::Error| fail(format!("{ACCESS}#{func}: {}", crate::text::one_line(&e)));
        let answer = match result {
            Some(Type::List(list)) if list.ty() == Type::U8 => {
                let typed = instance.get_typed_func::<(), (WasmList<u8>,)>(&mut *store, index).map_err(called)?;
                let (bytes,) = typed.call_async(&mut *store, ()).await.map_err(called)?;
                Answer::Bytes(bytes.as_le_slice(&*store).to_vec())
            }
            Some(Type::S32) => Answer::S32(call(store, instance, index).await.map_err(called)?),
            Some(Type::S64) => Answer::S64(call(store, instance, index).await.map_err(called)?),
            Some(Type::Float32) => Answer::F32(call::<f32>(store, instance, index).await.map_err(called)?.to_bits()),
            Some(Type::Float64) => Answer::F64(call::<f64>(store, instance, index).await.map_err(called)?.to_bits()),
            other => return Err(fail(format!("{ACCESS}#{func} answers {other:?}"))),
        };
        read.insert(func, answer);
    }
    Ok(read)
}

/// Calls one accessor that answers a number.
async fn call<R>(store: &mut Store<CallState>, instance: Instance, index: ComponentExportIndex) -> wasmtime::Result<R>
where
    R: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
{
    let typed = instance.get_typed_func::<(), (R,)>(&mut *store, index)?;
    Ok(typed.call_async(&mut *store, ()).await?.0)
}

/// Runs of non-zero bytes in `memory` as the rewrite counts them (a run
/// also ends at every 64 KiB page's end: the engine takes no custom page
/// sizes), stopping once `max` are counted; and its non-zero bytes.
fn count_runs(memory: &[u8], max: usize) -> (usize, usize) {
    let (mut runs, mut data) = (0, 0);
    for page in memory.chunks(1 << 16) {
        let mut previous = 0u8;
        for &byte in page {
            if byte != 0 {
                data += 1;
                if previous == 0 {
                    runs += 1;
                    if runs >= max {
                        return (runs, data);
                    }
                }
            }
            previous = byte;
        }
    }
    (runs, data)
}

/// The instance as it was read: the rewrite asks its accessors again and
/// gets the copies. An accessor that was not read is a defect of ours,
/// kept and reported (the trait has no errors).
struct Replay {
    read: Read,
    missing: Option<String>,
}

impl Replay {
    fn get(&mut self, func: &str) -> Option<&Answer> {
        if !self.read.contains_key(func) && self.missing.is_none() {
            self.missing = Some(func.to_string());
        }
        self.read.get(func)
    }
}

impl ComponentInstanceState for Replay {
    async fn call_func_ret_list_u8(&mut self, _instance: &str, func: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.get(func) {
            Some(Answer::Bytes(bytes)) => contents(bytes),
            _ => contents(&[]),
        }
    }

    async fn call_func_ret_s32(&mut self, _instance: &str, func: &str) -> i32 {
        match self.get(func) {
            Some(Answer::S32(v)) => *v,
            _ => 0,
        }
    }

    async fn call_func_ret_s64(&mut self, _instance: &str, func: &str) -> i64 {
        match self.get(func) {
            Some(Answer::S64(v)) => *v,
            _ => 0,
        }
    }

    async fn call_func_ret_f32(&mut self, _instance: &str, func: &str) -> u32 {
        match self.get(func) {
            Some(Answer::F32(v)) => *v,
            _ => 0,
        }
    }

    async fn call_func_ret_f64(&mut self, _instance: &str, func: &str) -> u64 {
        match self.get(func) {
            Some(Answer::F64(v)) => *v,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::count_runs;

    #[test]
    fn runs_are_counted_as_the_rewrite_counts_them() {
        assert_eq!(count_runs(&[], 10), (0, 0));
        assert_eq!(count_runs(&[0, 0, 0], 10), (0, 0));
        assert_eq!(count_runs(&[1, 2, 0, 3, 0, 0, 4], 10), (3, 4));
        // A run across a page's end is two.
        let mut two_pages = vec![0u8; 2 << 16];
        two_pages[(1 << 16) - 1] = 1;
        two_pages[1 << 16] = 1;
        assert_eq!(count_runs(&two_pages, 10), (2, 2));
        // One non-zero byte in six, over 6 MiB: a million runs, counted
        // only up to the limit given.
        let sparse: Vec<u8> = (0..6 << 20).map(|i| u8::from(i % 6 == 0)).collect();
        assert_eq!(count_runs(&sparse, usize::MAX), ((6 << 20) / 6, (6 << 20) / 6));
        assert_eq!(count_runs(&sparse, 1000).0, 1000);
    }
}
