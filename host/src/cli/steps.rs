//! The policies' steps of the event under way, as an observer collects them.
//!
//! `eval` and the demo both report, for each event, what every policy did
//! (changed what, denied why, failed with which limit). The chain tells an
//! [`Observer`]; this one keeps the steps until the report of the event
//! takes them. One type for both, so that the two reports read the same
//! steps the same way.

use std::sync::Mutex;

use crate::policy::chain::{Observer, Step};

/// A policy's turn on an event, as the observer saw it.
#[derive(Debug, Clone)]
pub struct SeenStep {
    /// The event the policy ran on (validation runs inside CreateContainer).
    pub event: String,
    /// The policy, its outcome, the fuel and time it took.
    pub step: Step,
}

/// Collects the steps of the event under way.
#[derive(Debug, Default)]
pub struct StepLog(Mutex<Vec<SeenStep>>);

impl Observer for StepLog {
    fn step(&self, event: &str, _target: &str, step: &Step) {
        let seen = SeenStep { event: event.to_string(), step: step.clone() };
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(seen);
    }
}

impl StepLog {
    /// The steps seen since the last call, oldest first.
    pub fn take(&self) -> Vec<SeenStep> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::chain::Outcome;

    #[test]
    fn steps_are_taken_once_in_order() {
        let log = StepLog::default();
        let step = |policy: &str| Step {
            policy: policy.into(),
            audit: false,
            fuel: 0,
            elapsed: std::time::Duration::ZERO,
            outcome: Outcome::Unchanged,
        };
        log.step("CreateContainer", "default/p/c", &step("10-a"));
        log.step("ValidateContainerAdjustment", "default/p/c", &step("20-b"));
        let taken = log.take();
        let names: Vec<(&str, &str)> = taken.iter().map(|s| (s.event.as_str(), s.step.policy.as_str())).collect();
        assert_eq!(names, [("CreateContainer", "10-a"), ("ValidateContainerAdjustment", "20-b")]);
        assert!(log.take().is_empty());
    }
}
