//! Keeping the chain in step with the policy directory.
//!
//! A reload reads the directory again and builds the next chain to the side
//! while events keep flowing on the current one, then swaps it in with one
//! pointer store: an event in flight finishes on the chain it started with,
//! the next one sees the new chain. The rules an operator relies on:
//! - a policy whose file and settings did not change keeps its compiled
//!   form, its instance pool and its state (nothing is compiled or
//!   configured again; its `Arc` moves into the new chain);
//! - a new version that fails to load (not a component, wrong world, compile
//!   error, settings rejected, `sha256` pin, permissions) is reported and the
//!   version it was meant to replace stays; a version refused once is not
//!   tried again until its file or settings change;
//! - a policy whose file is removed leaves the chain;
//! - a directory that cannot be read changes nothing (a volume being
//!   remounted must not empty the chain);
//! - one reload at a time; a reload that finds nothing changed installs
//!   nothing, so a stray event costs a directory listing and a few `stat`s.
//!
//! The first load is a reload from nothing. The dispatcher reconnects to the
//! runtime if the union of subscriptions changed (see `dispatcher.rs`).
//!
//! A policy named by a tag alone (`oci://…:stable`, signed) has a settings
//! file that does not change when the tag moves in the registry, so the
//! directory alone would never bring the new version. The tag check, which
//! [`watch()`] runs, asks the registry where each such tag points (a GET of
//! the manifest, no other download; all tags at once under one deadline, in a task of its
//! own so that a stalled registry holds no reload), every
//! `[registry] tag-recheck-ms` and at SIGHUP; a tag that
//! moved marks its policy, and the reload that follows resolves it again
//! with the same guarantees as a changed file (the running version answers
//! until the new one is verified and loaded). A registry that cannot be
//! reached changes nothing and is logged once until it answers again; one
//! that answers with a refusal (404, 401) is not unreachable: the policy's
//! tag "cannot be checked", logged once per reason. A tag
//! moved to a version that does not verify (pushed, not signed yet) is tried
//! again at each check, so the signature that follows is picked up; what
//! runs stays until then. What the checks remember between them (marks,
//! moves logged, versions that failed, outages) is one value,
//! `registry/tags.rs`'s `TagWatch`; the reloader only gathers the tagged
//! policies of the running chain and takes the marks.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::policy::call::compiled::CompiledPolicy;
use crate::policy::call::env::Facts;
use crate::policy::chain::{Chain, ChainSettings, Pending};
use crate::policy::dispatcher::PolicyDispatcher;
use crate::policy::load::directory::{self, LoadProblem, Unloadable};
use crate::policy::load::errors::LoadError;
use crate::policy::load::loader::PolicyLoader;
use crate::policy::spec::manifest::ReadOptions;
use crate::policy::spec::manifest::{PolicySpec, SpecError};
use crate::policy::tally::Tally;
use crate::registry::tags::{TagWatch, Tagged};

/// What identifies the content of a policy file without reading it: a file
/// replaced or rewritten changes at least one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileId {
    fn of(path: &std::path::Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

/// A file whose metadata did not change may still have new content if it
/// was written again within the file system's timestamp granularity (a
/// clock tick): for files changed in the last two seconds, compare contents.
fn rewritten_lately(origin: &Origin, policy: &CompiledPolicy) -> bool {
    let Some(file) = origin.file else { return false };
    if origin.spec.source.is_some() {
        // Its file is the settings file, which names the component; the
        // reference itself is compared with the spec.
        return false;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
    if now - file.mtime_ns.max(file.ctime_ns) > 2_000_000_000 {
        return false;
    }
    !holds(&origin.spec.wasm, file.len, policy.digest())
}

/// Whether `path` holds exactly the `len` bytes of SHA-256 `digest`. Read
/// as a load reads it: one descriptor, a regular file, no more than `len`
/// bytes (a FIFO or `/dev/zero` put in its place after the scan would
/// hold the reload or fill the host). Anything else is a change, which
/// the load then judges.
fn holds(path: &std::path::Path, len: u64, digest: &str) -> bool {
    crate::files::read_bounded(path, len).is_ok_and(|bytes| crate::files::sha256_hex(&bytes) == digest)
}

/// Where a version of a policy came from.
#[derive(Debug, Clone, PartialEq)]
struct Origin {
    spec: PolicySpec,
    file: Option<FileId>,
}

/// What one reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Policies that joined the chain.
    pub added: Vec<String>,
    /// Policies whose new version replaced the old one.
    pub replaced: Vec<String>,
    /// Policies kept as they were (unchanged).
    pub unchanged: Vec<String>,
    /// Policies whose file went away.
    pub removed: Vec<String>,
    /// New versions refused: the previous version stays. (policy, why)
    pub refused: Vec<(String, String)>,
    /// Policies found but not loaded, with no previous version. (policy, why)
    pub failed: Vec<(String, String)>,
    /// Problems that are not about one policy (bad file names, orphan
    /// settings, an unreadable directory).
    pub problems: Vec<String>,
    /// Policies in `refused` or `failed` whose file was not tried again
    /// (refused before, unchanged since): already reported.
    pub not_retried: Vec<String>,
    /// A new chain was installed.
    pub installed: bool,
    /// The events the runtime should send changed.
    pub resubscribe: bool,
}

impl ReloadReport {
    /// Every policy found is loaded in its newest version.
    pub fn is_clean(&self) -> bool {
        self.refused.is_empty() && self.failed.is_empty() && self.problems.is_empty()
    }
}

/// Where policies come from and how they are loaded.
#[derive(Debug, Clone)]
pub struct PolicySource {
    /// The policy directory; `None` when every policy is named by reference.
    pub dir: Option<PathBuf>,
    /// How the directory is read: default limits, strict permissions.
    pub options: ReadOptions,
    /// The settings each chain is built with.
    pub chain: ChainSettings,
    /// Policies the host configuration names by reference (`[policies.sources]`).
    pub sources: Vec<(String, crate::registry::OciRef)>,
    /// Policies given one by one rather than found (`nri-wasm eval`'s
    /// component with the settings of its command line): each joins the
    /// chain as if its files were in `dir`.
    pub given: Vec<PolicySpec>,
}

impl PolicySource {
    /// Adds the policies given one by one to those found, replacing any of
    /// the same name (and its problem), in chain order.
    pub fn add_given(&self, specs: &mut Vec<PolicySpec>, errors: &mut Vec<SpecError>) {
        if self.given.is_empty() {
            return;
        }
        let given = |name: &str| self.given.iter().any(|g| g.name == name);
        specs.retain(|s| !given(&s.name));
        errors.retain(|e| !e.policy().is_some_and(given));
        specs.extend(self.given.iter().cloned());
        specs.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// Loads the policy directory into a dispatcher, again and again.
#[derive(Debug)]
pub struct Reloader {
    loader: Arc<PolicyLoader>,
    dispatcher: Arc<PolicyDispatcher>,
    metrics: Arc<dyn Tally>,
    source: PolicySource,
    facts: Arc<Facts>,
    /// Where each policy of the installed chain came from.
    installed: Mutex<HashMap<String, Origin>>,
    /// Versions refused, so they are not tried again until they change.
    refused: Mutex<HashMap<String, (Origin, String)>>,
    /// One reload at a time.
    running: tokio::sync::Mutex<()>,
    /// Reloads finished so far, and the report of the last one.
    done: watch::Sender<(u64, Arc<ReloadReport>)>,
    /// How often [`Self::check_tags`] runs in [`watch`]; zero: only at SIGHUP.
    tag_recheck: std::time::Duration,
    /// Where the tags of the policies named by a tag alone were found.
    tags: TagWatch,
}

impl Reloader {
    /// A reloader that loads `source` with `loader` and installs each chain
    /// it builds in `dispatcher`, counting in `metrics`. It loads nothing
    /// until asked to.
    pub fn new(
        loader: Arc<PolicyLoader>,
        dispatcher: Arc<PolicyDispatcher>,
        metrics: Arc<dyn Tally>,
        source: PolicySource,
        facts: Arc<Facts>,
    ) -> Self {
        Self {
            loader,
            dispatcher,
            metrics,
            source,
            facts,
            installed: Mutex::default(),
            refused: Mutex::default(),
            running: tokio::sync::Mutex::new(()),
            done: watch::Sender::new((0, Arc::default())),
            tag_recheck: std::time::Duration::ZERO,
            tags: TagWatch::default(),
        }
    }

    /// Checks the tags of policies named by a tag alone every `every` (zero:
    /// only at SIGHUP), when `watch` runs.
    pub fn with_tag_recheck(mut self, every: std::time::Duration) -> Self {
        self.tag_recheck = every;
        self
    }

    /// Asks the registry where the tag of each policy of the chain named by
    /// a tag alone points now (one manifest request each, all at once under
    /// one deadline; nothing is downloaded), and marks those whose tag moved
    /// for the next reload. Returns their names. Runs on the engine's
    /// runtime; a check that fails in the host is logged and finds nothing.
    /// With the `testing` feature: the host's own checks run from
    /// [`watch()`] on a timer or SIGHUP.
    #[cfg(any(test, feature = "testing"))]
    pub async fn check_tags(self: &Arc<Self>) -> Vec<String> {
        match self.spawn_tag_check().await {
            Ok(moved) => moved,
            Err(e) => {
                tracing::error!(error = %e, "checking the tags failed in the host: nothing is marked moved");
                Vec::new()
            }
        }
    }

    /// The tag check as a task of its own, so that a registry that stalls
    /// holds nothing but the check (see [`watch`]).
    fn spawn_tag_check(self: &Arc<Self>) -> tokio::task::JoinHandle<Vec<String>> {
        let this = self.clone();
        self.loader.engine().handle().spawn(async move { this.check_tags_here().await })
    }

    async fn check_tags_here(&self) -> Vec<String> {
        let tagged: Vec<Tagged> = self
            .dispatcher
            .chain()
            .policies()
            .filter_map(|p| {
                let source = p.spec.source.as_ref().filter(|s| s.reference.digest.is_none())?;
                let running = p.spec.provenance.as_ref()?.manifest.strip_prefix("sha256:")?.to_string();
                Some(Tagged { policy: p.name().to_string(), reference: source.reference.clone(), running })
            })
            .collect();
        self.tags.keep_only(&tagged);
        if tagged.is_empty() {
            return Vec::new();
        }
        let registry = match self.loader.registry() {
            Some(Ok(r)) => r.clone(),
            Some(Err(e)) => {
                tracing::debug!(error = %crate::text::chain(&**e), "tags not checked: the registry client cannot be used");
                return Vec::new();
            }
            None => {
                tracing::debug!("tags not checked: the host has no registry client");
                return Vec::new();
            }
        };
        // One deadline for all: the registry's timeout, and never more than
        // half the interval, so that a check ends before the next is due.
        let mut budget = registry.settings().timeout();
        if !self.tag_recheck.is_zero() {
            budget = budget.min(self.tag_recheck / 2);
        }
        self.tags.check(&registry, &tagged, budget).await
    }

    /// Where it loads policies from.
    pub fn source(&self) -> &PolicySource {
        &self.source
    }

    /// Reloads finished so far and the last one's report (watch it to wait
    /// for the next one).
    pub fn reloads(&self) -> watch::Receiver<(u64, Arc<ReloadReport>)> {
        self.done.subscribe()
    }

    /// Reads the directory and installs what changed. Runs on the engine's
    /// runtime (compiling is CPU work that must not share the transport's
    /// thread).
    pub async fn reload(self: &Arc<Self>) -> ReloadReport {
        let this = self.clone();
        match self.loader.engine().handle().spawn(async move { this.reload_here().await }).await {
            Ok(report) => report,
            Err(e) => {
                tracing::error!(error = %e, "reloading the policies failed in the host");
                self.metrics.reload(false);
                ReloadReport { problems: vec![format!("the host failed to reload: {e}")], ..Default::default() }
            }
        }
    }

    async fn reload_here(&self) -> ReloadReport {
        let _one = self.running.lock().await;
        let started = std::time::Instant::now();
        let (report, in_use) = self.build_and_install().await;
        self.metrics.reload(report.is_clean());
        self.metrics.versions_refused(&report.refused);
        let before = self.done.borrow().1.clone();
        log_report(&report, &before, started.elapsed());
        let shared = Arc::new(report.clone());
        self.done.send_modify(|(n, last)| {
            *n += 1;
            *last = shared;
        });
        // What the new chain no longer uses (compiled forms, subscription
        // records) goes once the reload is counted and reported: pruning a
        // large cache must not delay what watchers of the reload see.
        if let Some(names) = in_use {
            let loader = self.loader.clone();
            let _ = tokio::task::spawn_blocking(move || loader.prune_cache(&names)).await;
        }
        report
    }

    /// The report, and the names of the installed chain's policies when a
    /// chain was installed.
    async fn build_and_install(&self) -> (ReloadReport, Option<Vec<String>>) {
        let mut report = ReloadReport::default();
        let (mut specs, mut errors) = match &self.source.dir {
            Some(dir) => directory::scan(dir, self.source.options),
            None => Default::default(),
        };
        let current = self.dispatcher.chain();
        if let Some(SpecError::Directory { .. }) = errors.first() {
            // Nothing was read: what the last reload found refused still is.
            let last = self.done.borrow().1.clone();
            report.problems = errors.iter().map(ToString::to_string).collect();
            report.unchanged = current.policies().map(|p| p.name().to_string()).collect();
            report.refused = last.refused.clone();
            report.not_retried = last.refused.iter().map(|(n, _)| n.clone()).collect();
            return (report, None);
        }
        // Tags found moved since the last reload: resolved again even though
        // their settings files did not change. Taken once the directory was
        // read: a move found while it could not be read waits for the next.
        let moved: HashSet<String> = self.tags.take_moved();
        let dir = self.source.dir.as_deref();
        directory::add_config_sources(&mut specs, &mut errors, dir, &self.source.sources, self.source.options);
        self.source.add_given(&mut specs, &mut errors);
        let live: HashMap<&str, &Arc<CompiledPolicy>> =
            current.entries().iter().map(|e| (e.policy.name(), &e.policy)).collect();
        let installed = lock(&self.installed).clone();
        let mut next: Vec<(Arc<CompiledPolicy>, Origin)> = Vec::new();
        let mut unloadable: Vec<Unloadable> = Vec::new();
        let mut to_load: Vec<(PolicySpec, Origin)> = Vec::new();
        let mut seen: Vec<String> = Vec::new();

        for spec in specs {
            seen.push(spec.name.clone());
            let origin = Origin { file: FileId::of(&spec.wasm), spec };
            let name = origin.spec.name.clone();
            let old = live.get(name.as_str()).zip(installed.get(&name));
            if let Some((policy, was)) = old {
                if *was == origin && !rewritten_lately(&origin, policy) && !moved.contains(&name) {
                    next.push(((*policy).clone(), origin));
                    report.unchanged.push(name);
                    continue;
                }
            }
            let refused = lock(&self.refused).get(&name).cloned();
            if let Some((was, why)) = refused.filter(|(was, _)| *was == origin && !moved.contains(&name)) {
                // Refused before, unchanged since: not tried again.
                report.not_retried.push(name.clone());
                match old {
                    Some((policy, old_origin)) => {
                        next.push(((*policy).clone(), old_origin.clone()));
                        report.refused.push((name, why));
                    }
                    None => {
                        let mandatory = directory::mandatory(&was.spec);
                        unloadable.push(Unloadable { name: name.clone(), reason: why.clone(), mandatory });
                        report.failed.push((name, why));
                    }
                }
                continue;
            }
            to_load.push((origin.spec.clone(), origin));
        }

        // Policies whose settings file cannot be used.
        for e in &errors {
            let Some(name) = e.policy() else {
                report.problems.push(e.to_string());
                continue;
            };
            seen.push(name.to_string());
            match live.get(name).zip(installed.get(name)) {
                Some((policy, origin)) => {
                    next.push(((*policy).clone(), origin.clone()));
                    report.refused.push((name.to_string(), e.to_string()));
                }
                None => {
                    unloadable.push(Unloadable { name: name.to_string(), reason: e.to_string(), mandatory: true });
                    report.failed.push((name.to_string(), e.to_string()));
                }
            }
        }

        // New and changed versions, loaded together.
        let specs: Vec<PolicySpec> = to_load.iter().map(|(s, _)| s.clone()).collect();
        let results = if self.dispatcher.is_loaded() {
            directory::load_each(&self.loader, &specs, &self.facts).await
        } else {
            self.first_load(&specs, &next, &unloadable).await
        };
        for ((spec, origin), result) in to_load.into_iter().zip(results) {
            let name = spec.name.clone();
            let old = live.get(name.as_str()).zip(installed.get(&name));
            match result {
                // A moved tag that resolved to what runs: nothing to
                // replace. If it came from another manifest (the same
                // component pushed again, or signed again), the running
                // policy takes that provenance, so that the next check does
                // not find the tag moved again; its compiled form stays.
                Ok(policy) if moved.contains(&name) && old.is_some_and(|(p, _)| p.digest() == policy.digest()) => {
                    let (p, o) = old.expect("checked");
                    let fresh = policy.spec.provenance.as_ref().filter(|n| n.from_cache.is_none());
                    let same = p.spec.provenance.as_ref().map(|v| &v.manifest) == fresh.map(|n| &n.manifest);
                    match fresh {
                        Some(now) if !same => {
                            let mut kept = CompiledPolicy::clone(p);
                            kept.spec.provenance = Some(now.clone());
                            next.push((Arc::new(kept), origin));
                        }
                        _ => next.push(((*p).clone(), o.clone())),
                    }
                    report.unchanged.push(name);
                }
                Ok(policy) => {
                    lock(&self.refused).remove(&name);
                    if old.is_some() {
                        report.replaced.push(name);
                    } else {
                        report.added.push(name);
                    }
                    next.push((Arc::new(policy), origin));
                }
                Err(error) => {
                    // A registry that could not be reached is tried again at
                    // the next reload; a file that failed, only once changed.
                    let unreachable = matches!(error, LoadError::Registry { .. });
                    let why = LoadProblem::Load { path: spec.wasm.clone(), error }.to_string();
                    if !unreachable {
                        lock(&self.refused).insert(name.clone(), (origin, why.clone()));
                        // A moved tag whose version verified and failed to
                        // load: not tried again until the tag moves again.
                        if moved.contains(&name) {
                            self.tags.failed_to_load(&name);
                        }
                    }
                    match old {
                        Some((policy, old_origin)) => {
                            next.push(((*policy).clone(), old_origin.clone()));
                            report.refused.push((name, why));
                        }
                        None => {
                            unloadable.push(Unloadable {
                                name: name.clone(),
                                reason: why.clone(),
                                mandatory: directory::mandatory(&spec),
                            });
                            report.failed.push((name, why));
                        }
                    }
                }
            }
        }

        report.removed = live.keys().filter(|n| !seen.iter().any(|s| s == *n)).map(|n| n.to_string()).collect();
        report.removed.sort();
        lock(&self.refused).retain(|n, _| seen.contains(n));

        next.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        unloadable.sort_by(|a, b| a.name.cmp(&b.name));
        let same = next.len() == current.len()
            && next.iter().zip(current.entries()).all(|((p, _), e)| Arc::ptr_eq(p, &e.policy))
            && unloadable == current.unloadable();
        if same && self.dispatcher.is_loaded() {
            return (report, None);
        }
        *lock(&self.installed) = next.iter().map(|(p, o)| (p.name().to_string(), o.clone())).collect();
        let policies = next.into_iter().map(|(p, _)| p).collect();
        // The policies kept keep their failure history (and a quarantine).
        let chain = Chain::of(policies, self.source.chain).with_unloadable(unloadable).after(&current);
        for u in chain.unloadable().iter().filter(|u| u.mandatory) {
            tracing::error!(
                policy = u.name,
                reason = u.reason,
                "mandatory policy not loaded: container creation fails until it is fixed"
            );
        }
        let chain = Arc::new(chain);
        self.metrics.chain_installed(&chain, false);
        report.resubscribe = self.dispatcher.install_shared(chain).await;
        report.installed = true;
        (report, Some(seen))
    }
}

impl Reloader {
    /// The first load, policy by policy: each policy joins the chain as soon
    /// as it is ready (or is reported failed), so that a slow or hostile
    /// file holds back nothing but itself; the others wait in the chain as
    /// [`Pending`] (see the start-up contract in `dispatcher.rs`). Policies
    /// whose subscription is recorded (most likely compiled before, so
    /// quick to load) start first, so that they never queue behind a long
    /// compile for the loader's compile permits.
    async fn first_load(
        &self,
        specs: &[PolicySpec],
        kept: &[(Arc<CompiledPolicy>, Origin)],
        failed: &[Unloadable],
    ) -> Vec<Result<CompiledPolicy, LoadError>> {
        use futures::StreamExt as _;
        let current = self.dispatcher.chain();
        // The placeholder chain of the start already looked each one up.
        let known: HashMap<&str, &Pending> = current.pending().iter().map(|p| (p.name.as_str(), p)).collect();
        let mut pending: Vec<Pending> = if specs.iter().all(|s| known.contains_key(s.name.as_str())) {
            specs.iter().filter_map(|s| known.get(s.name.as_str()).map(|p| (*p).clone())).collect()
        } else {
            let (this, owned) = (self.loader.clone(), specs.to_vec());
            let looked_up =
                self.loader.engine().handle().spawn_blocking(move || directory::expected(&this, &owned)).await;
            Pending::all(looked_up.unwrap_or_else(|_| directory::expected(&self.loader, specs)))
        };
        let mut order: Vec<usize> = (0..specs.len()).collect();
        order.sort_by_key(|&i| pending[i].expected.is_none());
        let mut loading: futures::stream::FuturesUnordered<_> = order
            .into_iter()
            .map(|i| {
                let spec = &specs[i];
                async move { (i, directory::load_one(&self.loader, spec, &self.facts).await) }
            })
            .collect();
        let mut results: Vec<Option<Result<CompiledPolicy, LoadError>>> = specs.iter().map(|_| None).collect();
        let mut ready: Vec<Arc<CompiledPolicy>> = kept.iter().map(|(p, _)| p.clone()).collect();
        let mut unloadable = failed.to_vec();
        while let Some((i, result)) = loading.next().await {
            let spec = &specs[i];
            pending.retain(|p| p.name != spec.name);
            match &result {
                Ok(policy) => ready.push(Arc::new(policy.clone())),
                Err(error) => unloadable.push(Unloadable {
                    name: spec.name.clone(),
                    reason: LoadProblem::Load { path: spec.wasm.clone(), error: error.clone() }.to_string(),
                    mandatory: directory::mandatory(spec),
                }),
            }
            results[i] = Some(result);
            if pending.is_empty() {
                // The last one: the reload installs the whole chain.
                continue;
            }
            ready.sort_by(|a, b| a.name().cmp(b.name()));
            let chain = Chain::of(ready.clone(), self.source.chain)
                .with_unloadable(unloadable.clone())
                .with_pending(pending.clone())
                .after(&self.dispatcher.chain());
            let chain = Arc::new(chain);
            // Still loading: the health endpoint says not ready until all are.
            self.metrics.chain_installed(&chain, true);
            self.dispatcher.install_shared(chain).await;
        }
        // Every load ended: one result for each spec, in order.
        results.into_iter().flatten().collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Logs what a reload did. A version not tried again because it was
/// refused before and has not changed, and a directory problem the
/// previous reload reported in the same words (a settings file left behind
/// by a removed policy), are not errors again at every reload: `/status`
/// keeps showing them, the log says them at debug level. A file that was
/// tried and failed is an error every time.
fn log_report(r: &ReloadReport, before: &ReloadReport, took: std::time::Duration) {
    let repeated = |policy: &String| r.not_retried.contains(policy);
    for (policy, why) in &r.refused {
        if repeated(policy) {
            tracing::debug!(policy, error = why, "new version of the policy still refused");
        } else {
            tracing::error!(policy, error = why, "new version of the policy refused; the previous version stays");
        }
    }
    for (policy, why) in &r.failed {
        if repeated(policy) {
            tracing::debug!(policy, error = why, "policy still left out");
        } else {
            tracing::error!(policy, error = why, "policy left out");
        }
    }
    for problem in &r.problems {
        if before.problems.contains(problem) {
            tracing::debug!(error = problem, "policy directory problem, still");
        } else {
            tracing::error!(error = problem, "policy directory problem");
        }
    }
    if r.installed {
        tracing::info!(
            added = ?r.added,
            replaced = ?r.replaced,
            removed = ?r.removed,
            unchanged = r.unchanged.len(),
            took_ms = took.as_millis() as u64,
            resubscribe = r.resubscribe,
            "policy chain installed"
        );
    } else {
        tracing::debug!(took_ms = took.as_millis() as u64, "policy directory unchanged");
    }
}

/// Reloads on every change of the policy directory (debounced) and on
/// SIGHUP, until `stop`. Tags of policies named by a tag alone are checked
/// at SIGHUP and every [`Reloader::with_tag_recheck`] interval; a moved one
/// is reloaded at once.
pub async fn watch(
    reloader: Arc<Reloader>,
    debounce: std::time::Duration,
    watch_dir: bool,
    stop: tokio_util::sync::CancellationToken,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "SIGHUP will not reload the policies");
            None
        }
    };
    let dir = reloader.source.dir.clone().filter(|_| watch_dir);
    let mut watcher: Option<crate::watch::DirWatch> = None;
    // The first check one interval after the start: the start resolved every tag.
    let every = reloader.tag_recheck;
    let mut tags = (!every.is_zero()).then(|| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    // The tag check in flight, if any: its own task, so that a registry
    // that stalls delays no reload, SIGHUP or stop; never two at once.
    let mut check: Option<tokio::task::JoinHandle<Vec<String>>> = None;
    loop {
        if watcher.as_ref().is_none_or(|w| w.is_gone()) {
            watcher = dir.as_deref().and_then(|d| match crate::watch::DirWatch::new(d) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::debug!(dir = %d.display(), error = %e, "policy directory not watched (yet)");
                    None
                }
            });
        }
        // Without a watch on a directory that should be watched (it is
        // missing), look for it again every few seconds, and reload once it
        // is back.
        let missing = dir.is_some() && watcher.is_none();
        let mut debounced = true;
        let woke = tokio::select! {
            _ = stop.cancelled() => {
                if let Some(c) = check.take() {
                    c.abort();
                }
                return;
            }
            _ = async { hup.as_mut().expect("checked").recv().await }, if hup.is_some() => {
                // The directory at once; the tags then, and a moved one
                // reloads again when the check returns.
                tracing::info!("SIGHUP: reloading the policies");
                if check.is_none() {
                    check = Some(reloader.spawn_tag_check());
                }
                debounced = false;
                true
            }
            _ = async { tags.as_mut().expect("checked").tick().await }, if tags.is_some() => {
                if check.is_none() {
                    check = Some(reloader.spawn_tag_check());
                } else {
                    tracing::debug!("the last tag check has not ended: none started");
                }
                false
            }
            done = async { check.as_mut().expect("checked").await }, if check.is_some() => {
                check = None;
                debounced = false;
                match done {
                    Ok(moved) => !moved.is_empty(),
                    Err(e) => {
                        tracing::error!(error = %e, "checking the tags failed in the host: nothing is marked moved");
                        false
                    }
                }
            }
            changed = async { watcher.as_mut().expect("checked").changed().await }, if watcher.is_some() => changed.is_ok(),
            _ = tokio::time::sleep(std::time::Duration::from_secs(5)), if missing => {
                dir.as_deref().is_some_and(|d| d.is_dir())
            }
        };
        if !woke {
            continue;
        }
        // Quiet for `debounce`, but never wait more than ten of them.
        if let Some(w) = watcher.as_mut().filter(|_| debounced && !debounce.is_zero()) {
            let until = tokio::time::Instant::now() + debounce * 10;
            loop {
                let quiet = tokio::time::timeout(debounce, w.changed());
                tokio::select! {
                    _ = stop.cancelled() => return,
                    r = tokio::time::timeout_at(until, quiet) => match r {
                        Ok(Ok(Ok(_))) => continue,
                        _ => break,
                    },
                }
            }
        }
        reloader.reload().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The content check of a file rewritten within a clock tick reads it
    /// as a load does: whatever was put in its place since the scan, it
    /// answers at once, and only the same bytes are "unchanged".
    #[test]
    fn a_lately_rewritten_file_is_compared_without_being_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("10-a.wasm");
        std::fs::write(&path, b"component").unwrap();
        let digest = crate::files::sha256_hex(b"component");
        assert!(holds(&path, 9, &digest));
        std::fs::write(&path, b"componenT").unwrap();
        assert!(!holds(&path, 9, &digest), "other bytes of the same length");
        std::fs::write(&path, b"component and more").unwrap();
        assert!(!holds(&path, 9, &digest), "grown");

        // A FIFO no one writes to would block a plain read forever.
        std::fs::remove_file(&path).unwrap();
        crate::files::mkfifo(&path);
        assert!(!holds(&path, 9, &digest), "a FIFO");
        // An endless device would fill the memory of a plain read.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(!holds(&path, 9, &digest), "a device");
        std::fs::remove_file(&path).unwrap();
        assert!(!holds(&path, 9, &digest), "gone");
    }
}
