//! Loading a policy directory into a chain.
//!
//! Every `NN-name.wasm` is read, compiled (or taken from the compile cache),
//! checked against the policy world, linked and initialised with its
//! settings. A file that fails any of these steps is reported and left out;
//! the others still run. One broken policy must never keep the node's other
//! policies from running.

use std::path::Path;
use std::sync::Arc;

use super::engine::{CompiledPolicy, Facts, LoadError, PolicyEngine};
use super::limits::Limits;
use super::manifest::{self, PolicySpec, SpecError};

/// A policy file that was left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadProblem {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// What loading a directory produced.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Usable policies, in chain order.
    pub policies: Vec<CompiledPolicy>,
    /// Policies whose file was found and whose settings were read, but which
    /// failed to compile, link or initialise. Those with `on-error = "fail"`
    /// keep failing container creation until they are fixed (fail-closed).
    pub unloadable: Vec<(PolicySpec, LoadError)>,
    /// Everything that was left out, for the log.
    pub problems: Vec<LoadProblem>,
}

/// Loads every policy in `dir` with `defaults` as limits where a policy's
/// settings file does not override them.
pub fn load_dir(engine: &PolicyEngine, dir: &Path, defaults: Limits, facts: &Arc<Facts>) -> Loaded {
    let (specs, errors) = manifest::scan(dir, defaults);
    let mut loaded = Loaded { problems: errors.into_iter().map(LoadProblem::from).collect(), ..Default::default() };
    for spec in specs {
        let started = std::time::Instant::now();
        match engine.load(&spec, facts) {
            Ok(policy) => {
                tracing::info!(
                    policy = policy.name(),
                    events = %policy.events(),
                    on_error = ?spec.on_error,
                    mode = ?spec.mode,
                    load_ms = started.elapsed().as_millis() as u64,
                    "policy loaded"
                );
                loaded.policies.push(policy);
            }
            Err(e) => {
                loaded.problems.push(e.clone().into());
                loaded.unloadable.push((spec, e));
            }
        }
    }
    for problem in &loaded.problems {
        tracing::error!(error = %problem, "policy left out");
    }
    loaded
}
