//! The time a call is charged, and the wall clock it may not outlive.
//!
//! A policy's `timeout-ms` bounds the time the policy takes: the CPU time of
//! the thread running it (its own code, the host functions it calls, its
//! instantiation) and the time it waits in host calls (a WASI sleep or
//! poll). It does not count the time the node's scheduler gives to other
//! work while the call could run: on a node whose CPUs are busy, a call
//! that needs 5 ms can take 150 ms of wall-clock time, and failing the
//! policy for that (and, with `on-error = "fail"`, the container) would make
//! its verdict depend on its neighbours. On an idle node the two are the
//! same.
//!
//! The runtime's deadline is wall-clock time, though, and the answer must
//! beat it however busy the node is. So a call also has a wall-clock
//! deadline: the time the chain's plan leaves it (`chain/budget.rs`), which
//! never eats into the shares of the policies after it nor past the chain's
//! budget. Whichever comes first ends the call, and the error says which:
//! the policy's own limit, or the chain's budget on a busy node.
//!
//! How it is measured. A call is a future that the host polls on whatever
//! worker thread runs it, so [`metered`] reads the thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`) when each poll starts; code inside the poll
//! (the store's epoch callback, a host function's [`WorkClock`]) adds what
//! the thread used since. Between polls the call waits: that time is
//! charged by the wall clock, unless the call asked to be polled again at
//! once (a cooperative yield, as `configure` makes to let other loads run),
//! when the wait is only the scheduler's.
//!
//! What it costs: charged time never runs ahead of the wall clock, so until
//! the call's wall-clock time reaches its limit nothing needs the CPU
//! clock beyond the one read per poll, and the deadline thread
//! (`watchdog.rs`) first wakes at that instant. Then the epoch callback
//! reads the charged time and, if some is left, asks to be woken again at
//! the earliest instant it could run out.
//!
//! [`WorkClock`]: crate::node::view::WorkClock

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::node::view::Expiry;

/// `poll_cpu_ns` when no poll is under way.
const NO_POLL: u64 = u64::MAX;

/// The CPU time of the calling thread, in nanoseconds. Should the kernel
/// refuse that clock, the monotonic clock stands in (wall-clock time is
/// charged then, as before this module): differences stay consistent.
fn thread_cpu_ns() -> u64 {
    let read = |clock| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid clock id and a pointer to a timespec that
        // outlives the call.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        (rc == 0).then(|| (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64))
    };
    read(libc::CLOCK_THREAD_CPUTIME_ID).or_else(|| read(libc::CLOCK_MONOTONIC)).unwrap_or(0)
}

/// Runs `work` and returns what it took of the thread's CPU time (of the
/// wall clock's if the CPU clock cannot be read): the host's own work for
/// a policy, charged to it as its call is.
pub(crate) fn cpu_time<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let before = thread_cpu_ns();
    let out = work();
    (out, Duration::from_nanos(thread_cpu_ns().saturating_sub(before)))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Which limit ended a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The policy used its own time limit.
    Limit,
    /// The wall-clock time the chain left it ran out first.
    Wall,
}

/// Where a call stands against its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Time is left; nothing can run out before `check_at`.
    Within {
        /// The earliest instant a limit could be reached.
        check_at: Instant,
    },
    /// A limit was reached.
    Over(Cut),
}

/// The time one call has, resolved once where the call is planned: by the
/// chain's budget plan for a call in a chain (`chain/budget.rs`), by the
/// engine for a `configure`, by the caller for a call on its own. The
/// engine enforces it as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTime {
    /// The limit on the time the call uses (charged as this module says):
    /// the policy's `timeout-ms`.
    pub limit: Duration,
    /// The wall-clock time it may take at most, from its start.
    pub wall: Duration,
}

impl CallTime {
    /// A call that may use `limit` and take `wall` of wall-clock time.
    pub fn new(limit: Duration, wall: Duration) -> Self {
        Self { limit, wall }
    }
}

/// The time of one call: what it was charged, against its own limit and
/// its wall-clock deadline.
#[derive(Debug)]
pub(crate) struct CallClock {
    limit: Duration,
    wall_deadline: Instant,
    started: Instant,
    /// Charged time of the finished polls and waits.
    charged_ns: AtomicU64,
    /// The polling thread's CPU time when the poll under way started
    /// ([`NO_POLL`] between polls).
    poll_cpu_ns: AtomicU64,
}

impl CallClock {
    /// A call that starts now, may be charged `time.limit`, and must end
    /// `time.wall` from now in any case.
    pub(crate) fn new(time: CallTime) -> Self {
        let started = Instant::now();
        Self {
            limit: time.limit,
            wall_deadline: started + time.wall,
            started,
            charged_ns: AtomicU64::new(0),
            poll_cpu_ns: AtomicU64::new(NO_POLL),
        }
    }

    /// The policy's own limit on charged time.
    pub(crate) fn limit(&self) -> Duration {
        self.limit
    }

    /// The wall-clock time the call may take at most.
    pub(crate) fn wall_limit(&self) -> Duration {
        self.wall_deadline.saturating_duration_since(self.started)
    }

    fn add(&self, d: Duration) {
        self.charged_ns.fetch_add(nanos(d), Ordering::Relaxed);
    }

    /// The time charged so far; with a poll under way, read on its thread,
    /// what that poll used until now.
    pub(crate) fn charged(&self) -> Duration {
        Duration::from_nanos(self.charged_ns.load(Ordering::Relaxed).saturating_add(self.running_ns()))
    }

    /// What the poll under way used so far (read on its thread).
    fn running_ns(&self) -> u64 {
        match self.poll_cpu_ns.load(Ordering::Relaxed) {
            NO_POLL => 0,
            at => thread_cpu_ns().saturating_sub(at),
        }
    }

    /// The first instant a limit could be reached: charged time grows no
    /// faster than the wall clock.
    pub(crate) fn first_check(&self) -> Instant {
        (self.started + self.limit).min(self.wall_deadline)
    }

    /// Where the call stands now. Reads the CPU clock only once the call's
    /// wall-clock time has reached its limit.
    pub(crate) fn verdict(&self) -> Verdict {
        let now = Instant::now();
        let first = self.first_check();
        if now < first {
            return Verdict::Within { check_at: first };
        }
        let charged = self.charged();
        if charged >= self.limit {
            return Verdict::Over(Cut::Limit);
        }
        if now >= self.wall_deadline {
            return Verdict::Over(Cut::Wall);
        }
        Verdict::Within { check_at: (now + (self.limit - charged)).min(self.wall_deadline) }
    }

    /// Which limit ended a call that was interrupted.
    pub(crate) fn cut(&self) -> Cut {
        match self.charged() >= self.limit {
            true => Cut::Limit,
            false => Cut::Wall,
        }
    }

    fn poll_started(&self) {
        self.poll_cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }

    fn poll_ended(&self) {
        let running = self.running_ns();
        self.poll_cpu_ns.store(NO_POLL, Ordering::Relaxed);
        self.charged_ns.fetch_add(running, Ordering::Relaxed);
    }
}

impl Expiry for CallClock {
    fn expired(&self) -> bool {
        matches!(self.verdict(), Verdict::Over(_))
    }
}

/// A waker that remembers whether the call asked to be polled again
/// before its poll returned (a yield, not a wait).
struct Flagged {
    inner: Waker,
    woken: AtomicBool,
}

impl Wake for Flagged {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Relaxed);
        self.inner.wake_by_ref();
    }
}

/// Runs `call`, charging `clock`, and ends it as an interrupt once a limit
/// is reached while it waits in a host call (guest code itself is
/// interrupted through the epoch, `store.rs`). A timer is armed only once
/// the call waits: most calls never do.
pub(crate) async fn metered<T>(
    clock: &CallClock,
    call: impl Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    let mut call = std::pin::pin!(call);
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut waiting_since: Option<Instant> = None;
    std::future::poll_fn(|cx| {
        if let Some(since) = waiting_since.take() {
            clock.add(since.elapsed());
        }
        let flag = Arc::new(Flagged { inner: cx.waker().clone(), woken: AtomicBool::new(false) });
        let waker = Waker::from(flag.clone());
        clock.poll_started();
        let polled = call.as_mut().poll(&mut Context::from_waker(&waker));
        clock.poll_ended();
        if let Poll::Ready(result) = polled {
            return Poll::Ready(result);
        }
        let check_at = match clock.verdict() {
            Verdict::Over(_) => return Poll::Ready(Err(wasmtime::Trap::Interrupt.into())),
            Verdict::Within { check_at } => check_at,
        };
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(check_at.into())));
        timer.as_mut().reset(check_at.into());
        if timer.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        if !flag.woken.load(Ordering::Relaxed) {
            waiting_since = Some(Instant::now());
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Uses `d` of this thread's CPU time, however long that takes on a
    /// busy machine.
    fn spin(d: Duration) {
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < nanos(d) {
            std::hint::black_box(0u64);
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    #[test]
    fn time_without_the_cpu_is_not_charged_in_a_poll() {
        // A thread descheduled in the middle of a call looks like this: wall
        // time passes inside the poll, the thread's CPU clock stands still.
        let clock = CallClock::new(CallTime::new(ms(100), ms(5_000)));
        let result = rt().block_on(metered(&clock, async {
            std::thread::sleep(ms(150));
            spin(ms(5));
            Ok(7)
        }));
        assert_eq!(result.unwrap(), 7);
        let charged = clock.charged();
        assert!(charged >= ms(5) && charged < ms(60), "charged {charged:?} for 5 ms of CPU in 155 ms");
        assert!(matches!(clock.verdict(), Verdict::Within { .. }));
    }

    #[test]
    fn cpu_time_in_a_poll_is_charged() {
        let clock = CallClock::new(CallTime::new(ms(30), ms(5_000)));
        let result = rt().block_on(metered(&clock, async {
            spin(ms(40));
            Ok(())
        }));
        assert!(result.is_ok(), "the poll ended by itself");
        assert!(clock.charged() >= ms(30), "{:?}", clock.charged());
        assert_eq!(clock.verdict(), Verdict::Over(Cut::Limit));
        assert_eq!(clock.cut(), Cut::Limit);
    }

    #[test]
    fn a_wait_is_charged_and_cut_at_the_limit() {
        // Cut near its limit, not at the end of its sleep (which would end
        // the poll with `Ok`) nor at the wall deadline (`Cut::Wall`).
        let clock = CallClock::new(CallTime::new(ms(50), ms(5_000)));
        let result = rt().block_on(metered(&clock, async {
            tokio::time::sleep(ms(3_000)).await;
            Ok(())
        }));
        let err = result.expect_err("cut while it waits");
        assert_eq!(err.downcast_ref::<wasmtime::Trap>(), Some(&wasmtime::Trap::Interrupt));
        assert_eq!(clock.cut(), Cut::Limit);
    }

    #[test]
    fn the_wall_deadline_ends_a_call_whatever_it_was_charged() {
        // Charged almost nothing (it waits on something that yields back at
        // once, as a cooperative yield does), yet its wall-clock time ends.
        let clock = CallClock::new(CallTime::new(ms(10_000), ms(80)));
        let result = rt().block_on(metered(&clock, async {
            loop {
                tokio::task::yield_now().await;
                std::thread::sleep(ms(5));
            }
            #[allow(unreachable_code)]
            Ok(())
        }));
        assert!(result.is_err(), "ended at the wall-clock deadline");
        assert_eq!(clock.cut(), Cut::Wall);
        assert!(clock.charged() < ms(80), "the yields were not charged as waits: {:?}", clock.charged());
    }

    #[test]
    fn nothing_can_run_out_before_the_first_check() {
        let clock = CallClock::new(CallTime::new(ms(200), ms(100)));
        match clock.verdict() {
            Verdict::Within { check_at } => assert_eq!(check_at, clock.first_check()),
            other => panic!("{other:?}"),
        }
        assert!(clock.first_check() <= Instant::now() + ms(100));
        assert_eq!(clock.wall_limit(), clock.wall_deadline.saturating_duration_since(clock.started));
    }
}
