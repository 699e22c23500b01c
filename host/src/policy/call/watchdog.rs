//! Ends policy calls at their deadlines, and is idle otherwise.
//!
//! Wasmtime interrupts running WebAssembly when the engine's *epoch* passes
//! a store's deadline. The usual way to use that is a ticker thread that
//! advances the epoch every millisecond, forever: a thousand wake-ups a
//! second on an idle node, and a share of a small node's CPU under load.
//! Here the epoch moves only when it must: each call registers the first
//! instant a limit could end it ([`Arming::arm`]), one thread sleeps until
//! the earliest registered instant and advances the epoch when it passes,
//! and every store's epoch callback looks at its own call's time
//! (`meter.rs`), registering the next instant if some is left (`store.rs`). With no call under way the thread sleeps without a timeout;
//! with calls that end in time it wakes at most once per call's time limit.
//!
//! Guest code in a host call (a WASI sleep, a poll) is not interrupted by
//! epochs; the call's future is cancelled when its time runs out instead
//! (`meter.rs`). Between the two, a call ends at its limit whatever the
//! guest does.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// The deadline thread of one engine. Dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// How soon a registered instant that passed fires again, while its call
/// has not withdrawn it. A store's epoch callback registers its next
/// instant and only then tells the engine to wait for the next epoch; if
/// the thread advances the epoch in between (an instant that close), the
/// store waits for one more advance, which this gives it.
const REFIRE: Duration = Duration::from_millis(2);

#[derive(Debug, Default)]
struct State {
    /// Deadlines of the calls under way, by when they fire (with a sequence
    /// number: two calls may have the same deadline).
    deadlines: BTreeSet<(Instant, u64)>,
    /// When each registered deadline fires next, by sequence number.
    by_seq: HashMap<u64, Instant>,
    next: u64,
    /// When the thread will wake by itself; `None` while it waits for a call.
    sleeping_until: Option<Instant>,
    /// Epoch advances so far (for tests and metrics).
    advances: u64,
    stop: bool,
}

/// A registered deadline; dropping it withdraws the deadline.
#[derive(Debug)]
pub(crate) struct Armed {
    shared: Arc<Shared>,
    seq: u64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        // No wake-up: the thread may wake once at the withdrawn deadline and
        // find nothing to do, which costs less than waking it now.
        let mut state = lock(&self.shared);
        if let Some(at) = state.by_seq.remove(&self.seq) {
            state.deadlines.remove(&(at, self.seq));
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // The state is a set of instants: nothing a panic could leave half-done.
    shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Watchdog {
    /// Starts the thread that advances `engine`'s epoch at deadlines.
    pub(crate) fn start(engine: &Engine) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let thread_shared = shared.clone();
        let engine = engine.weak();
        std::thread::Builder::new().name("nri-wasm-deadline".into()).spawn(move || {
            real_time_priority();
            run(&thread_shared, || match engine.upgrade() {
                Some(e) => {
                    e.increment_epoch();
                    true
                }
                None => false,
            })
        })?;
        Ok(Self { shared })
    }

    /// Registers a call's deadline until the returned guard is dropped.
    #[cfg(test)]
    pub(crate) fn arm(&self, deadline: Instant) -> Armed {
        self.arming().arm(deadline)
    }

    /// A handle that registers deadlines (a store keeps one, to ask for the
    /// next check from its epoch callback).
    pub(crate) fn arming(&self) -> Arming {
        Arming { shared: self.shared.clone() }
    }

    /// How many times the epoch was advanced so far.
    #[cfg(test)]
    pub(crate) fn advances(&self) -> u64 {
        lock(&self.shared).advances
    }
}

/// Registers deadlines with a [`Watchdog`]; keeps its thread's state alive,
/// not the thread (a handle outliving the watchdog arms nothing that fires).
#[derive(Debug, Clone)]
pub(crate) struct Arming {
    shared: Arc<Shared>,
}

impl Arming {
    /// Registers a deadline until the returned guard is dropped.
    pub(crate) fn arm(&self, deadline: Instant) -> Armed {
        let mut state = lock(&self.shared);
        let seq = state.next;
        state.next += 1;
        state.deadlines.insert((deadline, seq));
        state.by_seq.insert(seq, deadline);
        if state.sleeping_until.is_none_or(|t| deadline < t) {
            self.shared.wake.notify_one();
        }
        Armed { shared: self.shared.clone(), seq }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.wake.notify_one();
    }
}

/// The thread's loop: sleep until the earliest deadline, advance the epoch
/// when one has passed, and again every [`REFIRE`] while it stays
/// registered. `advance` returns false once the engine is gone.
fn run(shared: &Shared, mut advance: impl FnMut() -> bool) {
    let mut state = lock(shared);
    loop {
        if state.stop {
            return;
        }
        let now = Instant::now();
        let mut due = false;
        let mut again = Vec::new();
        while let Some(&(at, seq)) = state.deadlines.first() {
            if at > now {
                break;
            }
            // Its store sees the advance at its next check, and registers
            // its next instant (or ends) in place of this one.
            state.deadlines.pop_first();
            again.push(seq);
            due = true;
        }
        for seq in again {
            let at = now + REFIRE;
            state.deadlines.insert((at, seq));
            state.by_seq.insert(seq, at);
        }
        if due {
            state.advances += 1;
            if !advance() {
                return;
            }
        }
        match state.deadlines.first() {
            Some(&(at, _)) => {
                state.sleeping_until = Some(at);
                let wait = at.saturating_duration_since(now);
                state = shared.wake.wait_timeout(state, wait).unwrap_or_else(|p| p.into_inner()).0;
            }
            None => {
                state.sleeping_until = None;
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

/// Asks for the lowest real-time priority (`SCHED_FIFO` 1), so that a busy
/// node does not delay the end of a call that overran. The thread wakes only
/// at deadlines and does almost nothing then, so it cannot starve anything.
/// Without the privilege (no `CAP_SYS_NICE`) it stays a normal thread.
fn real_time_priority() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: a plain system call on the calling thread (pid 0), with a
    // valid parameter struct that outlives it.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        tracing::debug!(error = %err, "deadline thread runs without real-time priority");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn voluntary_switches(tid: libc::pid_t) -> u64 {
        let path = format!("/proc/self/task/{tid}/status");
        let status = std::fs::read_to_string(path).expect("thread status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("voluntary_ctxt_switches")
    }

    #[test]
    fn advances_for_a_passed_deadline_until_it_is_withdrawn() {
        let engine = Engine::default();
        let dog = Watchdog::start(&engine).unwrap();
        // A call that ends in time: no advance.
        let armed = dog.arm(Instant::now() + Duration::from_secs(3600));
        drop(armed);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(dog.advances(), 0);
        // A call that overruns: an advance soon after its deadline, and
        // more while it stays registered (its store may have missed one).
        let overrun = dog.arm(Instant::now() + Duration::from_millis(5));
        let waited = Instant::now();
        while dog.advances() < 2 {
            assert!(waited.elapsed() < Duration::from_secs(10), "deadline never fired again");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Withdrawn: no more.
        drop(overrun);
        std::thread::sleep(Duration::from_millis(20));
        let after = dog.advances();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(dog.advances(), after, "a withdrawn deadline fires no more");
    }

    #[test]
    fn an_earlier_deadline_wakes_a_thread_sleeping_for_a_later_one() {
        let engine = Engine::default();
        let dog = Watchdog::start(&engine).unwrap();
        let _late = dog.arm(Instant::now() + Duration::from_secs(3600));
        std::thread::sleep(Duration::from_millis(10));
        let _early = dog.arm(Instant::now() + Duration::from_millis(5));
        let waited = Instant::now();
        while dog.advances() == 0 {
            assert!(waited.elapsed() < Duration::from_secs(10), "the earlier deadline was missed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn an_idle_watchdog_does_not_wake_up() {
        let engine = Engine::default();
        let shared = Arc::new(Shared::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread_shared = shared.clone();
        let weak = engine.weak();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            run(&thread_shared, || weak.upgrade().is_some());
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = voluntary_switches(tid);
        std::thread::sleep(Duration::from_millis(500));
        let after = voluntary_switches(tid);
        assert_eq!(after, before, "an idle deadline thread slept through");
        lock(&shared).stop = true;
        shared.wake.notify_one();
        handle.join().unwrap();
    }
}
