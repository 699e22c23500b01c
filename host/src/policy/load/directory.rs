//! Loading a policy directory: the policies it holds and those the host
//! configuration names by reference, as specs, then as loaded policies.
//!
//! Every `NN-name.wasm` is read, checked, compiled (or taken from the
//! compile cache), linked and initialised with its settings
//! (`prepare.rs`), a few at a time. A file that fails any of these steps is
//! reported and left out; the others still run. One broken policy must never
//! keep the node's other policies from running; a broken policy that is
//! mandatory (`on-error = "fail"`, or whose settings cannot be read) fails
//! container creation until it is fixed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::policy::call::compiled::CompiledPolicy;
use crate::policy::call::env::Facts;
use crate::policy::load::errors::LoadError;
use crate::policy::load::known::Subscription;
use crate::policy::load::loader::PolicyLoader;
use crate::policy::spec::manifest::{self, Mode, OnError, PolicySpec, ReadOptions, SpecError};

/// A policy file that was left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadProblem {
    /// The directory could not be read, or the file's name or its settings
    /// file was refused, before loading began.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// Named by its file, which the error itself may not name.
    #[error("{}: {error}", path.display())]
    Load {
        /// The policy's `.wasm` file (or its settings file, for one named by reference).
        path: std::path::PathBuf,
        /// Which step of the load failed.
        error: LoadError,
    },
}

/// A policy that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unloadable {
    /// The policy's name (`NN-name`).
    pub name: String,
    /// Why it could not be loaded.
    pub reason: String,
    /// It fails container creation until it loads (`on-error = "fail"` in
    /// enforce mode, or settings that could not be read).
    pub mandatory: bool,
}

/// What is known of a policy before it loads: what a chain needs to treat
/// it as not ready yet (`chain::Pending`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The policy's name (`NN-name`).
    pub name: String,
    /// It fails the events it would see until it loads ([`mandatory`]).
    pub mandatory: bool,
    /// Its subscription as recorded at its last load, if the host may trust
    /// a record of it (`known.rs`).
    pub recorded: Option<Subscription>,
    /// What its component declares it may subscribe to, if it declares it.
    pub declared: Option<Subscription>,
}

/// What loading a directory produced.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Usable policies, in chain order.
    pub policies: Vec<CompiledPolicy>,
    /// Policies that were found but could not be loaded.
    pub unloadable: Vec<Unloadable>,
    /// Everything that was left out, for the log.
    pub problems: Vec<LoadProblem>,
}

/// Whether a policy that cannot load must fail container creation.
pub fn mandatory(spec: &PolicySpec) -> bool {
    spec.on_error == OnError::Fail && spec.mode == Mode::Enforce
}

/// The specs of every policy in `dir`, and the problems of those that have none.
pub fn scan(dir: &Path, options: ReadOptions) -> (Vec<PolicySpec>, Vec<SpecError>) {
    manifest::scan(dir, options)
}

/// Adds the policies the host configuration names by reference
/// (`[policies.sources]`) to what [`scan`] found in `dir`: each with its
/// `NN-name.toml` when `dir` has one (an orphan settings file no more), and
/// refused (with the problem) when `dir` also has its `NN-name.wasm` or its
/// settings file names a source too.
pub fn add_config_sources(
    specs: &mut Vec<PolicySpec>,
    errors: &mut Vec<SpecError>,
    dir: Option<&Path>,
    sources: &[(String, crate::registry::OciRef)],
    options: ReadOptions,
) {
    for (name, reference) in sources {
        let toml = dir.map(|d| d.join(format!("{name}.toml"))).filter(|p| p.exists());
        let wasm = dir.map(|d| d.join(format!("{name}.wasm"))).filter(|p| p.exists());
        specs.retain(|s| s.name != *name);
        errors.retain(|e| match e {
            SpecError::Orphan { path, .. } => Some(path) != toml.as_ref(),
            other => other.policy() != Some(name.as_str()),
        });
        if let Some(wasm) = wasm {
            errors.push(SpecError::Settings {
                policy: name.clone(),
                path: wasm.clone(),
                reason: format!(
                    "the host configuration names a source for {name} ([policies.sources]), and {} is there too: \
                     remove one of them",
                    wasm.display()
                ),
            });
            continue;
        }
        let at = PathBuf::from(format!("[policies.sources] {name}"));
        match manifest::read_spec_sourced(name, &at, toml.as_deref(), options, reference) {
            Ok(spec) => specs.push(spec),
            Err(e) => errors.push(e),
        }
    }
    specs.sort_by(|a, b| a.name.cmp(&b.name));
}

/// Loads every policy of `specs`, a few at a time, in chain order.
pub async fn load_specs(
    loader: &PolicyLoader,
    specs: Vec<PolicySpec>,
    errors: Vec<SpecError>,
    facts: &Arc<Facts>,
) -> Loaded {
    let mut loaded = Loaded::default();
    for e in errors {
        if let Some(policy) = e.policy() {
            loaded.unloadable.push(Unloadable { name: policy.to_string(), reason: e.to_string(), mandatory: true });
        }
        loaded.problems.push(e.into());
    }
    let results = load_each(loader, &specs, facts).await;
    for (spec, result) in specs.into_iter().zip(results) {
        match result {
            Ok(policy) => loaded.policies.push(policy),
            Err(error) => {
                let problem = LoadProblem::Load { path: spec.wasm.clone(), error };
                let reason = problem.to_string();
                loaded.unloadable.push(Unloadable { name: spec.name.clone(), reason, mandatory: mandatory(&spec) });
                loaded.problems.push(problem);
            }
        }
    }
    loaded.unloadable.sort_by(|a, b| a.name.cmp(&b.name));
    for problem in &loaded.problems {
        tracing::error!(error = %problem, "policy left out");
    }
    loaded
}

/// Loads each of `specs` (together; the loader bounds how many compile at
/// once), logging each policy that loaded.
pub async fn load_each(
    loader: &PolicyLoader,
    specs: &[PolicySpec],
    facts: &Arc<Facts>,
) -> Vec<Result<CompiledPolicy, LoadError>> {
    futures::future::join_all(specs.iter().map(|spec| load_one(loader, spec, facts))).await
}

/// Loads one policy, logging it if it loaded.
pub async fn load_one(
    loader: &PolicyLoader,
    spec: &PolicySpec,
    facts: &Arc<Facts>,
) -> Result<CompiledPolicy, LoadError> {
    let started = std::time::Instant::now();
    let result = loader.load_async(spec, facts).await;
    if let Err(error) = &result {
        record_failure(loader, spec, error).await;
    }
    if let Ok(policy) = &result {
        // Where a slow start went, step by step (`compile_ms` is the cache's
        // read and check when `cached`, the wait for another load's when
        // `shared`).
        let t = policy.timings();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::info!(
            policy = policy.name(),
            events = %policy.events(),
            on_error = ?spec.on_error,
            mode = ?spec.mode,
            cached = t.cached,
            shared = t.shared,
            load_ms = started.elapsed().as_millis() as u64,
            read_ms = ms(t.read),
            inspect_ms = ms(t.inspect),
            compile_ms = ms(t.compile),
            link_ms = ms(t.link),
            configure_ms = ms(t.configure),
            preinitialized = policy.preinitialized(),
            preinitialize_ms = ms(t.preinitialize),
            "policy loaded"
        );
    }
    result
}

/// Records that this version of a policy failed to load (it subscribes to
/// nothing), so that the next start does not wait for it before
/// registering (`known.rs`). A file that could not be read has no version.
async fn record_failure(loader: &PolicyLoader, spec: &PolicySpec, error: &LoadError) {
    if matches!(error, LoadError::Read { .. } | LoadError::NotAFile { .. } | LoadError::TooLarge { .. }) {
        return;
    }
    let Some(dir) = loader.cache().map(|c| c.dir().to_path_buf()) else { return };
    let max = loader.settings().max_component_mib << 20;
    let owned = spec.clone();
    match tokio::task::spawn_blocking(move || crate::policy::load::known::record_failed(&dir, &owned, max)).await {
        Ok(Some(record)) => loader.keep_record(&spec.name, record),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "failed load not recorded"),
    }
}

/// What is known of each policy of `specs` before it loads: what its
/// component declares and its subscription as recorded at its last load, if
/// the host may trust a record of it (`known.rs`). Reads, hashes and
/// inspects each file: run it off the event path.
pub fn expected(loader: &PolicyLoader, specs: &[PolicySpec]) -> Vec<Expected> {
    let dir = loader.cache().map(crate::policy::load::cache::Cache::dir);
    let max = loader.settings().max_component_mib << 20;
    specs
        .iter()
        .map(|spec| {
            let found = crate::policy::load::known::foreknown(dir, spec, max);
            let recorded = found.record.map(|(subscription, record)| {
                loader.keep_record(&spec.name, record);
                subscription
            });
            Expected { name: spec.name.clone(), mandatory: mandatory(spec), recorded, declared: found.declared }
        })
        .collect()
}

/// Loads every policy in `dir` (tests, with the `testing` feature; the host
/// loads through `reload`).
#[cfg(any(test, feature = "testing"))]
pub async fn load_dir(loader: &PolicyLoader, dir: &Path, options: ReadOptions, facts: &Arc<Facts>) -> Loaded {
    let (specs, errors) = scan(dir, options);
    load_specs(loader, specs, errors, facts).await
}
