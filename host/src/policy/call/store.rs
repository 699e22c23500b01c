//! The store of one call: its limits, its deadline, and everything the guest
//! can reach (the host state behind the imports in `policy/imports/`).
//!
//! A store lives for exactly one call (`configure` at load, `handle` per
//! event) and is dropped with everything the guest did. What it may cost is
//! fixed here, before the guest runs:
//! - fuel, and time: the time the call is charged against the policy's
//!   limit and the wall-clock time the chain leaves it (`meter.rs`),
//!   checked by the epoch callback when the deadline thread advances the
//!   epoch (`watchdog.rs`);
//! - memory and table growth ([`CallLimiter`]);
//! - how much the guest may hand the host in one transfer (wasmtime's
//!   *hostcall fuel*, which bounds the copy of every string and list the
//!   host lifts, the reply included, before the host sees any of it);
//! - how many resource handles it may hold (pollables, streams);
//! - how much it may log ([`LogBudget`]), and write to stdout and stderr
//!   ([`GuestOutput`]).
//!
//! Epochs interrupt guest code only: a host function runs to its end on the
//! thread that made the call. So the call's time is also the host's: every
//! host function whose work grows with the node or with its arguments
//! charges a [`WorkClock`] made from the call's clock ([`CallState::clock`]),
//! and one that reaches a limit gives up ([`CallState::gave_up`]), which
//! ends the call as the policy's timeout. The store remembers which
//! function gave up, so that the error the runtime gets says where the
//! policy's time went ("... exceeded inside host call node.containers"),
//! not only the host's log.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::env::CallEnv;
use super::event::CallEvent;
use super::limiter::CallLimiter;
use super::meter::{CallClock, Cut, Verdict};
use super::output::{GuestOutput, Written};
use super::profile::CallProfile;
use super::state::StateTxn;
use super::watchdog::{Armed, Arming};
use crate::node::view::{ContainerEntry, Expired, NodeView, WorkClock};
use crate::text as clip;

/// Most bytes of stdout, and of stderr, kept per call (the first and the
/// last half of what was written; see `output.rs`).
pub(crate) const OUTPUT_CAPACITY: usize = 16 << 10;
/// Most bytes the guest may hand the host in one transfer: one argument
/// list of a host call, or the reply of `handle`. Counted as wasmtime
/// counts it (the host memory the lifted strings and lists take), which is
/// up to ten times the size of the same data encoded for the runtime (an
/// update of a container is a large record, mostly empty), whose limit
/// (1 MiB per policy) is checked after.
pub(crate) const TRANSFER_LIMIT: usize = 16 << 20;
/// Most resource handles (pollables, streams) a call may hold at once.
pub(crate) const HANDLE_LIMIT: usize = 1024;
/// Most random bytes one WASI call may ask for.
pub(crate) const RANDOM_LIMIT: u64 = 64 << 10;
/// Most `host.log` lines per call, and most bytes of them.
const LOG_LINES: usize = 64;
const LOG_BYTES: usize = 16 << 10;

/// Per-call state of a store.
pub(crate) struct CallState {
    pub(crate) limiter: CallLimiter,
    /// Built on the guest's first WASI call: most calls make none, and an
    /// empty context still costs the seeding of its random sources.
    wasi: Option<Box<Wasi>>,
    /// Seed of the policy's random sources.
    seed: u64,
    table: ResourceTable,
    pub(crate) policy: Arc<str>,
    pub(crate) settings: Arc<str>,
    pub(crate) env: CallEnv,
    /// The event's container as the chain has it now, standing in for the
    /// view's entry.
    pub(crate) current: Option<Arc<ContainerEntry>>,
    pub(crate) state: StateTxn,
    /// The event being handled; `None` in `configure`.
    pub(crate) event: Option<CallEvent>,
    /// The call's time: what it was charged, its limit, its wall-clock
    /// deadline.
    time: Arc<CallClock>,
    /// Registers the next instant the call's time could run out.
    arming: Arming,
    /// The instant registered now; withdrawn when the store is dropped.
    armed: Option<Armed>,
    /// The engine, to end the call at once when a host function gives up.
    engine: wasmtime::Engine,
    /// The first host function that stopped at the deadline.
    stopped_in: std::cell::Cell<Option<&'static str>>,
    /// Whether the policy may read the node view (`caps.rs`).
    node_allowed: bool,
    /// The first `node` function called without the capability.
    refused_in: std::cell::Cell<Option<&'static str>>,
    /// The first host function whose answer was over the transfer limit.
    oversized_in: std::cell::Cell<Option<&'static str>>,
    pub(crate) logs: LogBudget,
}

impl std::fmt::Debug for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallState").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl CallState {
    /// The event of this call (`None` in `configure`).
    pub(crate) fn event(&self) -> Option<&CallEvent> {
        self.event.as_ref()
    }

    pub(crate) fn policy_name(&self) -> &str {
        &self.policy
    }

    pub(crate) fn view(&self) -> &NodeView {
        &self.env.view
    }

    /// The clock host functions charge their work to: it ends when the
    /// call's time does.
    pub(crate) fn clock(&self) -> WorkClock {
        WorkClock::charged_to(self.time.clone())
    }

    /// Whether the call's time is up.
    pub(crate) fn past_deadline(&self) -> bool {
        matches!(self.time.verdict(), Verdict::Over(_))
    }

    /// A host function reached the call's deadline and stops: says so,
    /// naming the policy, the function and the limit, and makes sure the
    /// call ends as a timeout the moment the guest runs again. (The deadline
    /// thread advances the epoch at the deadline too; advancing it here
    /// does not depend on that thread having run yet. Other calls' stores
    /// check their own deadlines and go on.)
    pub(crate) fn gave_up(&self, function: &'static str, expired: Expired) {
        if self.stopped_in.get().is_none() {
            self.stopped_in.set(Some(function));
        }
        let event = self.event.as_ref().map_or("configure", CallEvent::name);
        let (limit_ms, what) = match self.time.cut() {
            Cut::Limit => (self.time.limit().as_millis() as u64, "the policy's time limit"),
            Cut::Wall => (self.time.wall_limit().as_millis() as u64, "the wall-clock time the chain left the policy"),
        };
        tracing::warn!(
            policy = &*self.policy,
            event,
            function,
            limit_ms,
            work = expired.units,
            "host call stopped at {what} of {limit_ms} ms"
        );
        self.engine.increment_epoch();
    }

    /// Whether the policy may read the node view; if not, records that
    /// `function` was refused: the call then fails naming the capability,
    /// whatever the guest made of the empty answer it gets.
    pub(crate) fn may_read_node(&self, function: &'static str) -> bool {
        if !self.node_allowed && self.refused_in.get().is_none() {
            self.refused_in.set(Some(function));
        }
        self.node_allowed
    }

    /// The `node` function called without the capability, if one was.
    pub(crate) fn refused_in(&self) -> Option<&'static str> {
        self.refused_in.get()
    }

    /// A host function's answer would have carried more than a transfer
    /// may (its copy in the host's memory is where the limit bites, before
    /// the guest's memory limit could): records `function`, and the call
    /// ends the moment the guest runs again, failing with an error that
    /// names the function and the limit.
    pub(crate) fn answer_too_large(&self, function: &'static str) {
        if self.oversized_in.get().is_none() {
            self.oversized_in.set(Some(function));
        }
        tracing::warn!(
            policy = &*self.policy,
            event = self.event.as_ref().map_or("configure", CallEvent::name),
            function,
            limit = TRANSFER_LIMIT,
            "host call's answer over the transfer limit: the call ends"
        );
        self.engine.increment_epoch();
    }

    /// The host function whose answer was over the transfer limit, if one was.
    pub(crate) fn oversized_in(&self) -> Option<&'static str> {
        self.oversized_in.get()
    }

    /// The host function that stopped at the call's deadline, if one did:
    /// the call then ends as a timeout, whatever the guest did after.
    pub(crate) fn stopped_in(&self) -> Option<&'static str> {
        self.stopped_in.get()
    }

    /// The trap that ends a call whose deadline passed in a host function
    /// (classified as the policy's timeout).
    pub(crate) fn timeout_trap(&self, function: &'static str, expired: Expired) -> wasmtime::Error {
        self.gave_up(function, expired);
        Trap::Interrupt.into()
    }
}

/// The empty WASI context of a call, and the guest's stdout and stderr.
struct Wasi {
    ctx: WasiCtx,
    stdout: GuestOutput,
    stderr: GuestOutput,
}

impl Wasi {
    /// No files, environment, arguments, sockets or name lookup; stdin is
    /// empty. Randomness is seeded per policy, not per call: a policy's
    /// language runtime (hash maps, for one) draws on it, and the same input
    /// must give the same output and cost the same fuel every time.
    fn new(seed: u64) -> Self {
        let (stdout, stderr) = (GuestOutput::new(OUTPUT_CAPACITY), GuestOutput::new(OUTPUT_CAPACITY));
        let ctx = WasiCtxBuilder::new()
            .secure_random(StdRng::seed_from_u64(seed))
            .insecure_random(StdRng::seed_from_u64(seed.rotate_left(32)))
            .insecure_random_seed(u128::from(seed))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            // A guest asking for gigabytes of random bytes would make the
            // host allocate them.
            .max_random_size(RANDOM_LIMIT)
            .build();
        Self { ctx, stdout, stderr }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let seed = self.seed;
        let wasi = self.wasi.get_or_insert_with(|| Box::new(Wasi::new(seed)));
        WasiCtxView { ctx: &mut wasi.ctx, table: &mut self.table }
    }
}

/// What a call may still log through `host.log`.
#[derive(Debug, Default)]
pub(crate) struct LogBudget {
    lines: usize,
    bytes: usize,
    dropped: usize,
}

impl LogBudget {
    /// Whether a line of `len` bytes may still be logged; counts it either way.
    pub(crate) fn take(&mut self, len: usize) -> bool {
        if self.lines < LOG_LINES && self.bytes + len.min(clip::MAX_LOG_LINE_BYTES) <= LOG_BYTES {
            self.lines += 1;
            self.bytes += len.min(clip::MAX_LOG_LINE_BYTES);
            true
        } else {
            self.dropped += 1;
            false
        }
    }

    pub(crate) fn dropped(&self) -> usize {
        self.dropped
    }
}

impl CallState {
    /// Whether the guest holds any host resource (a WASI stream, a
    /// pollable): pre-initialisation refuses to snapshot an instance that
    /// does (`load/snapshot.rs`).
    pub(crate) fn holds_handles(&self) -> bool {
        !self.table.is_empty()
    }

    /// Withdraws the store's registered deadline check: what runs in it
    /// next is the host's, outside any call's time (`load/snapshot.rs`).
    pub(crate) fn disarm(&mut self) {
        self.armed = None;
    }
}

/// A fresh store for one call of `policy`, timed by `time`, with the first
/// check of its time registered through `arming`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn new_store(
    engine: &wasmtime::Engine,
    policy: &CallProfile,
    env: &CallEnv,
    state: StateTxn,
    current: Option<Arc<ContainerEntry>>,
    event: Option<CallEvent>,
    time: Arc<CallClock>,
    arming: &Arming,
) -> Store<CallState> {
    let limits = &policy.limits;
    let data = CallState {
        limiter: CallLimiter::new(limits),
        wasi: None,
        seed: policy.seed,
        table: ResourceTable::new(),
        policy: policy.name.clone(),
        settings: policy.settings.clone(),
        env: env.clone(),
        current: if policy.reads_node { current } else { None },
        state,
        event,
        armed: Some(arming.arm(time.first_check())),
        time,
        arming: arming.clone(),
        engine: engine.clone(),
        stopped_in: std::cell::Cell::new(None),
        node_allowed: policy.node_allowed,
        refused_in: std::cell::Cell::new(None),
        oversized_in: std::cell::Cell::new(None),
        logs: LogBudget::default(),
    };
    let mut store = Store::new(engine, data);
    store.limiter(|s| &mut s.limiter);
    store.set_fuel(limits.fuel).expect("fuel is enabled");
    store.set_hostcall_fuel(TRANSFER_LIMIT);
    store.set_max_component_handles(HANDLE_LIMIT);
    // The epoch moves only when some call's time could run out; every
    // store then checks its own, and one with time left registers the next
    // instant it could run out. (The deadline thread may advance the epoch
    // for that instant before this callback returns: it advances again for
    // a registered instant until the instant is withdrawn, `watchdog.rs`.)
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|mut cx| match cx.data().time.verdict() {
        // A host function refused an answer over the transfer limit: the
        // call ends here, failing for that.
        _ if cx.data().oversized_in.get().is_some() => Err(Trap::Interrupt.into()),
        Verdict::Over(_) => Err(Trap::Interrupt.into()),
        Verdict::Within { check_at } => {
            let data = cx.data_mut();
            data.armed = Some(data.arming.arm(check_at));
            Ok(UpdateDeadline::Continue(1))
        }
    });
    store
}

/// Most characters of the end of stderr added to a trap's error.
const TRAP_STDERR_CHARS: usize = 800;

/// Logs what the guest wrote to stdout and stderr (one clipped line each,
/// tagged with the policy and the event), and returns the end of stderr,
/// where a panic leaves its message, as one line.
pub(crate) fn drain_output(state: &CallState, event: &str) -> Option<String> {
    let policy = &*state.policy;
    if state.logs.dropped() > 0 {
        tracing::warn!(
            policy,
            event,
            dropped = state.logs.dropped(),
            "policy log lines dropped (over the per-call budget)"
        );
    }
    let wasi = state.wasi.as_ref()?;
    let text = |w: Written| {
        if w.dropped == 0 {
            return String::from_utf8_lossy(&[w.head, w.tail].concat()).into_owned();
        }
        // Whole lines only on either side of the cut.
        let head = w.head.iter().rposition(|&b| b == b'\n').map_or(&w.head[..0], |i| &w.head[..=i]);
        let tail = w.tail.iter().position(|&b| b == b'\n').map_or(&w.tail[..], |i| &w.tail[i + 1..]);
        let dropped = w.dropped + (w.head.len() - head.len()) + (w.tail.len() - tail.len());
        format!("{}[{dropped} bytes dropped]\n{}", String::from_utf8_lossy(head), String::from_utf8_lossy(tail))
    };
    let (stdout, stderr) = (text(wasi.stdout.contents()), super::output::tidy_stderr(&text(wasi.stderr.contents())));
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        super::output::log_output(policy, event, super::output::Stream::Stdout, line);
    }
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        super::output::log_output(policy, event, super::output::Stream::Stderr, line);
    }
    let tail = stderr.trim();
    if tail.is_empty() {
        return None;
    }
    // The last 800 characters: where a panic message is, and a Python
    // traceback from the author's file (see the SDK) of a few frames.
    let start = tail.char_indices().rev().nth(TRAP_STDERR_CHARS - 1).map_or(0, |(i, _)| i);
    Some(clip::guest_text_tail(&tail[start..].replace('\n', " | "), clip::MAX_ERROR_BYTES))
}
