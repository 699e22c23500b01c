//! Series bound once, so that a policy call's numbers cost a few atomic adds.
//!
//! A labelled family finds its series by building the label set (owned
//! strings), hashing it and looking it up under a lock: three families per
//! policy call made ten policies' calls cost a few µs of the host's CPU per
//! event in allocations and hashing alone. The names a call's labels come
//! from are few and known (the policies of the chain, the NRI events, the
//! outcomes), so each policy's series are bound here at its first call and
//! found again with one read-locked lookup by the policy's name; a call
//! then adds to atomics (and takes the time histogram's own lock). A bound
//! series is the family's own (a handle to the same number), so a scrape
//! sees one value whichever way it was added to. Events' series (their
//! results, the chain's time, the answer's) are bound the same way, by
//! event.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::{CallLabels, EventLabel, EventLabels, PolicyLabel, OUTCOMES};
use crate::nri::EventKind;

/// The events a call can be made for: every NRI event and `Synchronize`.
pub(super) fn events() -> impl Iterator<Item = &'static str> {
    EventKind::ALL.iter().map(|e| e.name()).chain(["Synchronize"])
}

const EVENTS: usize = EventKind::ALL.len() + 1;

fn event_index(event: &str) -> Option<usize> {
    events().position(|e| e == event)
}

fn outcome_index(outcome: &str) -> Option<usize> {
    OUTCOMES.iter().position(|o| *o == outcome)
}

/// One policy's per-call series.
struct PolicySeries {
    /// Bound at its first call that ran: a policy never called (not
    /// loaded, skipped, quarantined) has no time or fuel series.
    ran: OnceLock<(Histogram, Counter)>,
    /// Calls by event and outcome (`EVENTS` × `OUTCOMES`), each bound at
    /// its first use: a series appears once it counts something.
    calls: Box<[OnceLock<Counter>]>,
}

/// The families a call adds to, and each policy's series in them.
pub(super) struct CallSeries {
    calls: Family<CallLabels, Counter>,
    duration: Family<PolicyLabel, Histogram>,
    fuel: Family<PolicyLabel, Counter>,
    /// By policy name. Grows with the names of policies ever called, as
    /// the families themselves do (a series is never removed).
    bound: RwLock<HashMap<String, Arc<PolicySeries>>>,
}

impl CallSeries {
    pub(super) fn new(
        calls: Family<CallLabels, Counter>,
        duration: Family<PolicyLabel, Histogram>,
        fuel: Family<PolicyLabel, Counter>,
    ) -> Self {
        Self { calls, duration, fuel, bound: RwLock::default() }
    }

    fn policy(&self, policy: &str) -> Arc<PolicySeries> {
        // A panic cannot leave the map half-changed: entries are only added.
        if let Some(series) = self.bound.read().unwrap_or_else(|p| p.into_inner()).get(policy) {
            return series.clone();
        }
        let mut bound = self.bound.write().unwrap_or_else(|p| p.into_inner());
        bound
            .entry(policy.to_string())
            .or_insert_with(|| {
                Arc::new(PolicySeries {
                    ran: OnceLock::new(),
                    calls: (0..EVENTS * OUTCOMES.len()).map(|_| OnceLock::new()).collect(),
                })
            })
            .clone()
    }

    /// Counts one call of `policy` for `event` with `outcome`, and its time
    /// and fuel when it ran.
    pub(super) fn record(&self, policy: &str, event: &str, outcome: &str, ran: Option<(Duration, u64)>) {
        let series = self.policy(policy);
        match (event_index(event), outcome_index(outcome)) {
            (Some(e), Some(o)) => series.calls[e * OUTCOMES.len() + o]
                .get_or_init(|| self.calls.get_or_create(&labels(policy, event, outcome)).clone())
                .inc(),
            // A name outside the lists (none is made today) still counts.
            _ => self.calls.get_or_create(&labels(policy, event, outcome)).inc(),
        };
        if let Some((elapsed, fuel)) = ran {
            let (duration, consumed) = series.ran.get_or_init(|| {
                let label = PolicyLabel { policy: policy.to_string() };
                (self.duration.get_or_create(&label).clone(), self.fuel.get_or_create(&label).clone())
            });
            duration.observe(elapsed.as_secs_f64());
            consumed.inc_by(fuel);
        }
    }

    /// How many calls of `policy` for `event` ended with `outcome`.
    pub(super) fn count(&self, policy: &str, event: &str, outcome: &str) -> u64 {
        self.calls.get(&labels(policy, event, outcome)).map_or(0, |c| c.get())
    }
}

/// What an event can come to (`Metrics::event`).
const RESULTS: [&str; 4] = ["ok", "denied", "failed", "deadline"];

/// One event's series, each bound at its first use.
#[derive(Default)]
struct EventSlots {
    chain: OnceLock<Histogram>,
    answer: OnceLock<Histogram>,
    results: [OnceLock<Counter>; RESULTS.len()],
}

/// The families an event adds to, and each event's series in them.
pub(super) struct EventSeries {
    events: Family<EventLabels, Counter>,
    chain: Family<EventLabel, Histogram>,
    answer: Family<EventLabel, Histogram>,
    bound: Box<[EventSlots]>,
}

impl EventSeries {
    pub(super) fn new(
        events: Family<EventLabels, Counter>,
        chain: Family<EventLabel, Histogram>,
        answer: Family<EventLabel, Histogram>,
    ) -> Self {
        Self { events, chain, answer, bound: (0..EVENTS).map(|_| EventSlots::default()).collect() }
    }

    /// Counts one `event` that came to `result`, its chain done in `chain`.
    pub(super) fn record(&self, event: &str, result: &str, chain: Duration) {
        let label = || EventLabel { event: event.into() };
        let results = || EventLabels { event: event.into(), result: result.into() };
        let Some(slots) = event_index(event).map(|e| &self.bound[e]) else {
            self.events.get_or_create(&results()).inc();
            self.chain.get_or_create(&label()).observe(chain.as_secs_f64());
            return;
        };
        match RESULTS.iter().position(|r| *r == result) {
            Some(r) => slots.results[r].get_or_init(|| self.events.get_or_create(&results()).clone()).inc(),
            None => self.events.get_or_create(&results()).inc(),
        };
        slots.chain.get_or_init(|| self.chain.get_or_create(&label()).clone()).observe(chain.as_secs_f64());
    }

    /// One `event`'s answer went out `total` after its request arrived.
    pub(super) fn answered(&self, event: &str, total: Duration) {
        let label = || EventLabel { event: event.into() };
        let seconds = total.as_secs_f64();
        match event_index(event) {
            Some(e) => {
                self.bound[e].answer.get_or_init(|| self.answer.get_or_create(&label()).clone()).observe(seconds)
            }
            None => self.answer.get_or_create(&label()).observe(seconds),
        }
    }
}

fn labels(policy: &str, event: &str, outcome: &str) -> CallLabels {
    CallLabels { policy: policy.into(), event: event.into(), outcome: outcome.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series() -> CallSeries {
        CallSeries::new(Family::default(), Family::new_with_constructor(super::super::latency), Family::default())
    }

    #[test]
    fn a_bound_series_is_the_familys_own() {
        let s = series();
        s.record("10-a", "CreateContainer", "changed", Some((Duration::from_micros(30), 7)));
        s.record("10-a", "CreateContainer", "changed", Some((Duration::from_micros(30), 5)));
        s.record("10-a", "RemoveContainer", "ok", None);
        let created = s.calls.get_or_create(&labels("10-a", "CreateContainer", "changed")).get();
        assert_eq!(created, 2);
        assert_eq!(s.calls.get_or_create(&labels("10-a", "RemoveContainer", "ok")).get(), 1);
        assert_eq!(s.fuel.get_or_create(&PolicyLabel { policy: "10-a".into() }).get(), 12);
        // Added to through the family, read through the bound handle.
        s.calls.get_or_create(&labels("10-a", "CreateContainer", "changed")).inc();
        s.record("10-a", "CreateContainer", "changed", None);
        assert_eq!(s.calls.get_or_create(&labels("10-a", "CreateContainer", "changed")).get(), 4);
    }

    #[test]
    fn a_policy_that_never_ran_has_no_time_or_fuel_series() {
        let s = series();
        s.record("40-d", "CreateContainer", "not-loaded", None);
        s.record("40-d", "CreateContainer", "skipped", None);
        let label = PolicyLabel { policy: "40-d".into() };
        assert!(s.fuel.get(&label).is_none(), "a fuel series for a policy that never ran");
        assert!(s.duration.get(&label).is_none(), "a time series for a policy that never ran");
        s.record("40-d", "CreateContainer", "ok", Some((Duration::from_micros(5), 3)));
        assert_eq!(s.fuel.get(&label).map(|c| c.get()), Some(3));
    }

    #[test]
    fn every_event_and_outcome_has_a_slot_of_its_own() {
        let s = series();
        let events: Vec<_> = events().collect();
        assert_eq!(events.len(), EVENTS);
        for (i, event) in events.iter().enumerate() {
            for (j, outcome) in OUTCOMES.iter().enumerate() {
                for _ in 0..=(i * OUTCOMES.len() + j) {
                    s.record("20-b", event, outcome, None);
                }
            }
        }
        for (i, event) in events.iter().enumerate() {
            for (j, outcome) in OUTCOMES.iter().enumerate() {
                let n = s.calls.get_or_create(&labels("20-b", event, outcome)).get();
                assert_eq!(n, (i * OUTCOMES.len() + j + 1) as u64, "{event} {outcome}");
            }
        }
    }

    #[test]
    fn events_are_counted_by_result_in_the_familys_series() {
        let e = EventSeries::new(
            Family::default(),
            Family::new_with_constructor(super::super::latency),
            Family::new_with_constructor(super::super::latency),
        );
        for result in RESULTS.iter().chain(&["other"]) {
            e.record("CreateContainer", result, Duration::from_micros(80));
        }
        e.record("CreateContainer", "ok", Duration::from_micros(80));
        e.record("NoSuchEvent", "ok", Duration::from_micros(80));
        e.answered("CreateContainer", Duration::from_micros(90));
        e.answered("NoSuchEvent", Duration::from_micros(90));
        let count = |event: &str, result: &str| {
            e.events.get_or_create(&EventLabels { event: event.into(), result: result.into() }).get()
        };
        assert_eq!(count("CreateContainer", "ok"), 2);
        for result in ["denied", "failed", "deadline", "other"] {
            assert_eq!(count("CreateContainer", result), 1, "{result}");
        }
        assert_eq!(count("NoSuchEvent", "ok"), 1);
        let mut text = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("chain", "", e.chain.clone());
        registry.register("answer", "", e.answer.clone());
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "chain_count{event=\"CreateContainer\"} 6",
            "chain_count{event=\"NoSuchEvent\"} 1",
            "answer_count{event=\"CreateContainer\"} 1",
            "answer_count{event=\"NoSuchEvent\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn names_outside_the_lists_are_counted_too() {
        let s = series();
        s.record("30-c", "NoSuchEvent", "ok", None);
        s.record("30-c", "CreateContainer", "no-such-outcome", None);
        assert_eq!(s.calls.get_or_create(&labels("30-c", "NoSuchEvent", "ok")).get(), 1);
        assert_eq!(s.calls.get_or_create(&labels("30-c", "CreateContainer", "no-such-outcome")).get(), 1);
    }
}
