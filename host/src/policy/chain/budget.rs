//! Sharing the chain's time budget among the policies of one event.
//!
//! Each policy has its own time limit (`timeout-ms`), and the chain as a
//! whole has a budget (a share of the runtime's request timeout). When the
//! limits of the policies subscribed to an event add up to no more than the
//! budget, every policy gets its whole limit whatever the others do. When
//! they add up to more, each policy's *share* is its limit scaled down so
//! that the shares fit, and a policy may run past its share only into time
//! that no later policy's share needs: an early policy that loops can never
//! leave a later one without time (which, for an `on-error = "fail"` policy,
//! would fail the event, and for an `ignore` one would skip it silently).

use std::time::{Duration, Instant};

use super::{Chain, ChainEntry};
use crate::nri::version::EventKind;

/// The guaranteed share of `budget` of each of `limits`, in order: the
/// limits themselves if they fit, else each scaled down in proportion.
pub fn shares(limits: &[Duration], budget: Duration) -> Vec<Duration> {
    let total: Duration = limits.iter().sum();
    if total <= budget || total.is_zero() {
        return limits.to_vec();
    }
    let scale = budget.as_secs_f64() / total.as_secs_f64();
    limits.iter().map(|l| l.mul_f64(scale)).collect()
}

/// The time plan of one evaluation: what must stay free after each policy.
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    /// For the i-th policy to run, the sum of the shares of those after it.
    reserve_after: Vec<Duration>,
}

impl Plan {
    /// A plan for `entries` (in the order they will run) within `budget`.
    /// Quarantined policies will not run and need nothing.
    pub fn new<'e>(entries: impl IntoIterator<Item = &'e ChainEntry>, budget: Duration) -> Self {
        let limits: Vec<Duration> = entries
            .into_iter()
            .map(|e| if e.quarantined() { Duration::ZERO } else { e.policy.spec.limits.timeout() })
            .collect();
        let shares = shares(&limits, budget);
        let mut reserve_after = vec![Duration::ZERO; shares.len()];
        let mut sum = Duration::ZERO;
        for i in (0..shares.len()).rev() {
            reserve_after[i] = sum;
            sum += shares[i];
        }
        Self { reserve_after }
    }

    /// The time the `i`-th policy may take now: its own limit, but no more
    /// than leaves the later policies their shares before `deadline`.
    pub fn allowance(&self, i: usize, own: Duration, deadline: Instant) -> Duration {
        let left = deadline.saturating_duration_since(Instant::now());
        let reserve = self.reserve_after.get(i).copied().unwrap_or_default();
        own.min(left.saturating_sub(reserve))
    }
}

impl Chain {
    /// Configuration warnings about time for a chain `budget`: policies
    /// whose own limit exceeds the budget, and events whose policies' limits
    /// add up to more than it (each then gets a scaled share).
    pub fn time_warnings(&self, budget: Duration) -> Vec<String> {
        let mut warnings = Vec::new();
        for e in &self.entries {
            let own = e.policy.spec.limits.timeout();
            if own > budget {
                warnings.push(format!(
                    "policy {}: timeout-ms {} is longer than the chain's budget of {} ms; it can never use it all",
                    e.policy.name(),
                    own.as_millis(),
                    budget.as_millis()
                ));
            }
        }
        for kind in EventKind::ALL {
            let total: Duration = self.subscribed(kind).map(|e| e.policy.spec.limits.timeout()).sum();
            if total > budget && self.subscribed(kind).count() > 1 {
                warnings.push(format!(
                    "{kind}: the time limits of its policies add up to {} ms, more than the chain's budget of {} ms; each is guaranteed a proportional share",
                    total.as_millis(),
                    budget.as_millis()
                ));
            }
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn limits_that_fit_are_kept_and_others_scaled_to_fit() {
        assert_eq!(shares(&[ms(100), ms(200)], ms(1000)), [ms(100), ms(200)]);
        assert_eq!(shares(&[ms(10_000), ms(100), ms(100)], ms(1020)), [ms(1000), ms(10), ms(10)]);
        assert_eq!(shares(&[], ms(1000)), Vec::<Duration>::new());
    }

    #[test]
    fn a_policy_may_not_take_the_later_policies_shares() {
        let plan = Plan { reserve_after: vec![ms(200), ms(100), ms(0)] };
        let deadline = Instant::now() + ms(1000);
        // The first policy's own 10 s are cut to what leaves 200 ms.
        let first = plan.allowance(0, ms(10_000), deadline);
        assert!(first <= ms(800) && first > ms(700), "{first:?}");
        // A policy whose own limit fits keeps it.
        assert_eq!(plan.allowance(1, ms(50), deadline), ms(50));
        // The last one gets what is left, up to its own limit.
        assert!(plan.allowance(2, ms(10_000), deadline) > ms(900));
        // Past the deadline, nothing.
        assert_eq!(plan.allowance(0, ms(100), Instant::now()), Duration::ZERO);
    }
}
