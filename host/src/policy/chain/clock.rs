//! The time the circuit breaker reads.
//!
//! A breaker's back-off is counted in seconds to minutes (30 s doubling to
//! 16 min by default): a test of it that sleeps is slow, and one that
//! sleeps less is at the mercy of a busy machine. So the breaker reads a
//! [`Clock`] that its chain is built with ([`super::Chain::with_clock`]):
//! the [`SystemClock`] unless said otherwise, a [`ManualClock`] in tests,
//! which moves only when told to.
//!
//! The breaker's time is its own, not the call's: a policy's time limit,
//! the watchdog that enforces it, the meter that charges it and the chain's
//! budget bound real work against the runtime's real request timeout, and
//! stay on the real clock whatever the chain's clock says.

use std::time::Instant;
#[cfg(any(test, feature = "testing"))]
use std::{sync::Mutex, time::Duration};

/// Where the breaker reads the time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The time now.
    fn now(&self) -> Instant;
}

/// The real time: [`Instant::now`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

#[cfg(any(test, feature = "testing"))]
/// A clock that stands still until it is [advanced](ManualClock::advance):
/// a fixed start plus the time it has been moved on.
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    offset: Mutex<Duration>,
}

#[cfg(any(test, feature = "testing"))]
impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(any(test, feature = "testing"))]
impl ManualClock {
    /// A clock that reads the real time now, and then stands still.
    pub fn new() -> Self {
        Self::starting_at(Instant::now())
    }

    /// A clock that reads `start`, and then stands still.
    pub fn starting_at(start: Instant) -> Self {
        Self { start, offset: Mutex::new(Duration::ZERO) }
    }

    /// Moves the clock on by `by`.
    pub fn advance(&self, by: Duration) {
        let mut offset = self.offset.lock().unwrap_or_else(|p| p.into_inner());
        *offset = offset.saturating_add(by);
    }

    /// How far the clock has been moved on since its start.
    pub fn elapsed(&self) -> Duration {
        *self.offset.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(any(test, feature = "testing"))]
impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + self.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::policy::chain::{Breaker, Chain, ChainSettings};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_manual_clock_stands_still_until_advanced() {
        let start = Instant::now();
        let clock = ManualClock::starting_at(start);
        assert_eq!((clock.now(), clock.now()), (start, start), "no time passes by itself");
        clock.advance(Duration::from_secs(30));
        assert_eq!(clock.now(), start + Duration::from_secs(30));
        clock.advance(MS);
        clock.advance(Duration::ZERO);
        assert_eq!(clock.now(), start + Duration::from_secs(30) + MS);
        assert_eq!(clock.elapsed(), Duration::from_secs(30) + MS);
    }

    #[test]
    fn the_system_clock_is_the_real_time() {
        let before = Instant::now();
        let now = SystemClock.now();
        assert!(before <= now && now <= Instant::now());
    }

    #[test]
    fn a_breaker_opened_at_t_stays_open_until_t_plus_its_back_off_by_the_manual_clock() {
        let clock = ManualClock::new();
        let base = Duration::from_secs(30);
        let mut b = Breaker::default();
        assert_eq!(b.fail(clock.now(), 1, base), Some(base));
        clock.advance(base - MS);
        assert!(b.open_at(clock.now()), "one millisecond short of its back-off");
        clock.advance(MS);
        assert!(!b.open_at(clock.now()), "open until t + back-off, not at it");
        // On probation: the next failure opens it for twice as long, from now.
        assert_eq!(b.fail(clock.now(), 1, base), Some(base * 2));
        clock.advance(base * 2 - MS);
        assert!(b.open_at(clock.now()));
        clock.advance(MS);
        assert!(!b.open_at(clock.now()));
    }

    #[test]
    fn a_chain_is_on_the_system_clock_unless_given_another() {
        let chain = Chain::new(Vec::new(), ChainSettings::default());
        let before = Instant::now();
        let now = chain.clock().now();
        assert!(before <= now && now <= Instant::now());
        let manual = Arc::new(ManualClock::new());
        let chain = Chain::default().with_clock(manual.clone());
        assert_eq!(chain.clock().now(), manual.now());
        manual.advance(Duration::from_secs(3600));
        assert_eq!(chain.clock().now(), manual.now(), "the chain reads the clock it was given");
    }
}
