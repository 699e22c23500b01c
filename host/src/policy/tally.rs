//! What the host counts about the policies' work, named from the policy
//! side: events answered, answers sent, budgets overrun, reloads, chains
//! installed.
//!
//! The dispatcher and the reloader report here; `crate::metrics` implements
//! it (and [`Observer`]) and turns the reports into Prometheus series. The
//! trait lives in `policy` so that `policy` never imports `metrics`: the
//! metrics read the chain and the state store, so they sit above the
//! policies, and the policies only know someone is counting.

use std::sync::Arc;
use std::time::Duration;

use super::chain::{Chain, Observer, Step};

/// Told of what the dispatcher and the reloader did, to count it.
pub trait Tally: Send + Sync + std::fmt::Debug {
    /// An event was answered: `result` is ok, denied or failed; the chain
    /// took `chain`.
    fn event(&self, event: &str, result: &str, chain: Duration);
    /// An event's answer is out, `total` after its request arrived.
    fn answer(&self, event: &str, total: Duration);
    /// An answer ran out of the answer budget.
    fn budget_overrun(&self);
    /// A chain was installed; `loading` policies are still being loaded.
    fn chain_installed(&self, chain: &Arc<Chain>, loading: bool);
    /// A reload of the policy directory ended.
    fn reload(&self, ok: bool);
    /// New versions a reload refused (policy, why); the previous versions
    /// run. Replaces what the last reload said.
    fn versions_refused(&self, refused: &[(String, String)]);
}

/// Counts and observes nothing: a dispatcher's until it is given the
/// metrics ([`super::dispatcher::PolicyDispatcher::with_metrics`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Uncounted;

impl Tally for Uncounted {
    fn event(&self, _: &str, _: &str, _: Duration) {}
    fn answer(&self, _: &str, _: Duration) {}
    fn budget_overrun(&self) {}
    fn chain_installed(&self, _: &Arc<Chain>, _: bool) {}
    fn reload(&self, _: bool) {}
    fn versions_refused(&self, _: &[(String, String)]) {}
}

impl Observer for Uncounted {
    fn step(&self, _: &str, _: &str, _: &Step) {}
}
