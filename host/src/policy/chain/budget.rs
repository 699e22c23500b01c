//! Sharing the chain's time budget among the policies of one event.
//!
//! Each policy has its own time limit (`timeout-ms`, the time it uses:
//! `policy/call/meter.rs`), and the chain as a whole has a budget of
//! wall-clock time (a share of the runtime's request timeout). When the
//! limits of the policies subscribed to an event add up to no more than the
//! budget, every policy gets its whole limit whatever the others do. When
//! they add up to more, each policy is guaranteed a *share*: its own limit
//! if that is below a common level, the level otherwise, the level chosen so
//! that the shares fill the budget exactly (the largest limits are cut
//! first). A policy may run past its share only into time that no later
//! policy's share needs: before an earlier policy starts, the shares of
//! every policy after it are set aside, so an early policy that loops can
//! never leave a later one without time (which, for an `on-error = "fail"`
//! policy, would fail the event, and for an `ignore` one would skip it).
//!
//! On a busy node the policies' calls take longer in wall-clock time than
//! the time they use (`meter.rs` charges only the latter), so an event can
//! fall behind its plan with most of its budget still left: ten policies of
//! 100 ms in a budget of 1 s, the first one stretched to 200 ms by the
//! scheduler, left the second policy nothing once the 800 ms of the eight
//! after it were set aside, and the event failed with 80 % of its time
//! unused (seen on a saturated Kubernetes node). So a policy behind the plan
//! gets what is left in proportion to its share: a looping policy still
//! leaves the later ones their part of what is left, and a policy is skipped
//! only when the time left, so shared, is below `min-call-ms`.
//!
//! Why a level rather than shares in proportion to the limits: with
//! proportional shares a policy that asks for more than the whole budget
//! takes nearly all of it. A looping first policy with `timeout-ms = 10000`
//! in a budget of 1 s left a later policy of 100 ms a share of 10 ms, which
//! a loaded node does not honour, and the event went ahead without the
//! later policy's changes. With a level, the later policy keeps its 100 ms
//! and the first gets the 900 ms left.

use std::time::{Duration, Instant};

use super::{Chain, ChainEntry};
use crate::nri::version::EventKind;
use crate::policy::call::meter::CallTime;

/// The guaranteed share of `budget` of each of `limits`, in order: the
/// limits themselves if they fit, else each limit capped at the one level
/// at which the capped limits add up to the budget.
pub fn shares(limits: &[Duration], budget: Duration) -> Vec<Duration> {
    let total: Duration = limits.iter().sum();
    if total <= budget {
        return limits.to_vec();
    }
    let mut ascending: Vec<Duration> = limits.to_vec();
    ascending.sort_unstable();
    // Limits below an equal split of what is left keep their whole limit;
    // the first that does not fit sets the level for it and every larger one.
    let mut left = budget;
    let mut level = Duration::ZERO;
    for (i, &limit) in ascending.iter().enumerate() {
        let rest = (ascending.len() - i) as u32;
        let fair = left / rest;
        if limit > fair {
            level = fair;
            break;
        }
        left -= limit;
    }
    limits.iter().map(|&l| l.min(level)).collect()
}

/// The time plan of one evaluation: what must stay free after each policy,
/// and so the time each call gets ([`Plan::time`]). The one place a call in
/// a chain has its time limit resolved: the engine enforces what it is
/// given.
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    /// The time limit (`timeout-ms`) of the i-th policy to run.
    limits: Vec<Duration>,
    /// The guaranteed share of the i-th policy to run.
    shares: Vec<Duration>,
    /// For the i-th policy to run, the sum of the shares of those after it.
    reserve_after: Vec<Duration>,
}

impl Plan {
    /// A plan for `entries` (in the order they will run) within `budget`.
    /// Quarantined policies will not run and need nothing.
    pub(super) fn new<'e>(entries: impl IntoIterator<Item = &'e ChainEntry>, budget: Duration) -> Self {
        let (limits, needs): (Vec<Duration>, Vec<Duration>) = entries
            .into_iter()
            .map(|e| {
                let limit = e.policy.spec.limits.timeout();
                (limit, if e.quarantined() { Duration::ZERO } else { limit })
            })
            .unzip();
        Self::planned(limits, &needs, budget)
    }

    /// A plan for policies of `limits` (in the order they will run) that
    /// all will run.
    #[cfg(test)]
    fn from_limits(limits: &[Duration], budget: Duration) -> Self {
        Self::planned(limits.to_vec(), limits, budget)
    }

    /// A plan for policies of `limits` whose shares are planned for `needs`
    /// (zero for one that will not run).
    fn planned(limits: Vec<Duration>, needs: &[Duration], budget: Duration) -> Self {
        let shares = shares(needs, budget);
        let mut reserve_after = vec![Duration::ZERO; shares.len()];
        let mut sum = Duration::ZERO;
        for i in (0..shares.len()).rev() {
            reserve_after[i] = sum;
            sum += shares[i];
        }
        Self { limits, shares, reserve_after }
    }

    /// The time of the `i`-th policy's call, if it starts now: its own
    /// limit, and its [`Plan::allowance`] of wall-clock time.
    pub(super) fn time(&self, i: usize, deadline: Instant) -> CallTime {
        CallTime::new(self.limits.get(i).copied().unwrap_or_default(), self.allowance(i, deadline))
    }

    /// The wall-clock time the `i`-th policy may take now: what leaves the
    /// later policies their shares before `deadline`, or, when less is left
    /// than its share and theirs (the event is behind its plan), its part
    /// of what is left in proportion to the shares. Its own limit counts the
    /// time it uses (`meter.rs`), so on an idle node it ends there; on a
    /// busy one its call may stretch into this, never further.
    pub(super) fn allowance(&self, i: usize, deadline: Instant) -> Duration {
        let left = deadline.saturating_duration_since(Instant::now());
        let reserve = self.reserve_after.get(i).copied().unwrap_or_default();
        let share = self.shares.get(i).copied().unwrap_or_default();
        let ahead = left.saturating_sub(reserve);
        let planned = share + reserve;
        let behind = match planned.is_zero() {
            true => left,
            false => left.mul_f64(share.as_secs_f64() / planned.as_secs_f64()),
        };
        ahead.max(behind)
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
                    "{kind}: the time limits of its policies add up to {} ms, more than the chain's budget of {} ms; the largest are cut to a common share",
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
        // A limit over the whole budget does not take the small ones' time.
        assert_eq!(shares(&[ms(10_000), ms(100), ms(100)], ms(1020)), [ms(820), ms(100), ms(100)]);
        assert_eq!(shares(&[ms(10_000), ms(100)], ms(1000)), [ms(900), ms(100)]);
        // Equal limits: equal shares.
        assert_eq!(shares(&[ms(100); 4], ms(200)), [ms(50); 4]);
        // Two large ones share what the small one leaves.
        assert_eq!(shares(&[ms(2000), ms(100), ms(600)], ms(1000)), [ms(450), ms(100), ms(450)]);
        assert_eq!(shares(&[], ms(1000)), Vec::<Duration>::new());
    }

    #[test]
    fn shares_never_exceed_the_budget_or_a_limit() {
        let cases: [&[u64]; 5] = [&[1, 2, 3], &[10_000, 1], &[500, 500, 500], &[0, 0, 7_000], &[1_000_000, 3, 999]];
        for limits in cases {
            let limits: Vec<Duration> = limits.iter().map(|&l| ms(l)).collect();
            for budget in [ms(1), ms(5), ms(1000)] {
                let s = shares(&limits, budget);
                let sum: Duration = s.iter().sum();
                assert!(sum <= budget || s == limits, "{limits:?} in {budget:?}: {s:?}");
                assert!(s.iter().zip(&limits).all(|(s, l)| s <= l), "{limits:?}: {s:?}");
                // Nothing left unused that a cut limit could have had.
                if s != limits {
                    assert!(budget - sum < ms(1), "{limits:?} in {budget:?}: {s:?}");
                }
            }
        }
    }

    #[test]
    fn a_policy_may_not_take_the_later_policies_shares() {
        let plan = Plan {
            limits: vec![ms(100); 3],
            shares: vec![ms(100), ms(100), ms(100)],
            reserve_after: vec![ms(200), ms(100), ms(0)],
        };
        let deadline = Instant::now() + ms(1000);
        // The first policy may take what leaves the later ones 200 ms.
        let first = plan.allowance(0, deadline);
        assert!(first <= ms(800) && first > ms(700), "{first:?}");
        let second = plan.allowance(1, deadline);
        assert!(second <= ms(900) && second > ms(800), "{second:?}");
        // The last one gets what is left.
        assert!(plan.allowance(2, deadline) > ms(900));
        // Past the deadline, nothing.
        assert_eq!(plan.allowance(0, Instant::now()), Duration::ZERO);
    }

    /// A call's time: its own limit whole, whatever its share; its share
    /// bounds only its wall-clock time.
    #[test]
    fn a_call_gets_its_own_limit_and_its_allowance() {
        let plan = Plan::from_limits(&[ms(2000), ms(100)], ms(1000));
        let deadline = Instant::now() + ms(1000);
        let first = plan.time(0, deadline);
        assert_eq!(first.limit, ms(2000), "the policy's own limit, not its share");
        assert!(first.wall <= ms(900) && first.wall > ms(800), "{first:?}");
        let second = plan.time(1, deadline);
        assert_eq!(second.limit, ms(100));
        assert!(second.wall > ms(900), "the last one may use what is left: {second:?}");
        assert_eq!(plan.time(5, deadline).limit, Duration::ZERO, "no such policy, no time");
    }

    /// Behind the plan, what is left is shared in proportion to the shares:
    /// nobody is skipped while time is left, nobody takes the others' part.
    #[test]
    fn an_event_behind_its_plan_shares_what_is_left() {
        let plan = Plan::from_limits(&[ms(100); 10], ms(1000));
        // The first policy took 200 ms instead of 100: 800 ms are left for
        // nine shares of 100 ms. The second gets a ninth, not nothing.
        let deadline = Instant::now() + ms(800);
        let second = plan.allowance(1, deadline);
        assert!(second > ms(85) && second <= ms(89), "{second:?}");
        // The last one gets all that is left.
        assert!(plan.allowance(9, deadline) > ms(790));
        // On schedule, the plan's own figures: 1,000 ms left before the
        // first, which may take what leaves the other nine their 900 ms.
        let first = plan.allowance(0, Instant::now() + ms(1000));
        assert!(first > ms(95) && first <= ms(100), "{first:?}");
        // With 5 ms left for nine shares, each gets its ninth: below a
        // call's minimum it is skipped, as before.
        let late = plan.allowance(1, Instant::now() + ms(5));
        assert!(late <= ms(1), "{late:?}");
    }
}
