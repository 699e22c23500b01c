//! What the host reads from disk is hostile input: compile-cache entries and
//! policy state files.
//!
//! Cache: an attacker who can write the cache directory as the host's user (or a
//! disk that damages a file) must never get a policy to run code other than
//! its own source's, nor crash the host: entries are bound to the SHA-256 of
//! their source and authenticated with the host's private key before
//! wasmtime sees a byte. Each test prepares a cache with real compiled
//! components, tampers with it, starts a new engine on it (a restart) and
//! checks that every policy behaves as its own source and was compiled
//! again rather than loaded.
//!
//! Pruning: the cache keeps a subscription record per version of a policy
//! it loaded (`policy/load/known.rs`) beside the compiled forms; records and
//! compiled forms of versions gone from the directory are removed after a
//! reload, once a day old, and the current ones stay however old.
//!
//! State: a FIFO named like a state file must not stop the chain from
//! loading and answering, and a save that fails (a full volume) must be
//! counted and shown, keep the state in memory and save it at the next
//! commit. These run the counting probe behind a policy dispatcher and the
//! runtime simulator over a real socket.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nri_sim::{PluginConn, RuntimeProfile};
use nri_wasm::files::sha256_hex;
use nri_wasm::metrics::Metrics;
use nri_wasm::policy::call::compiled::CompiledPolicy;
use nri_wasm::policy::call::state::StateStore;
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::engine::{CallEnv, EngineSettings, Facts, PolicyEngine};
use nri_wasm::policy::spec::manifest::{Mode, OnError, PolicySpec};
use nri_wasm::policy::PolicyLoader;
use nri_wasm::testing::StateWriter;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{create_event, guests, roomy};

/// A policy pinned to the file it is loaded from, as an operator pins it.
fn pinned(name: &str, wasm: &str, settings: &str) -> PolicySpec {
    let bytes = std::fs::read(wasm).unwrap();
    PolicySpec {
        settings: settings.into(),
        on_error: OnError::Ignore,
        mode: Mode::Enforce,
        sha256: Some(sha256_hex(&bytes)),
        ..PolicySpec::granting_all(name, Path::new(wasm))
    }
}

/// `annotate` adds an annotation to every container; `noop` changes
/// nothing: a policy running the other's code is seen at once.
fn specs() -> [PolicySpec; 2] {
    [pinned("10-annotate", guests::ANNOTATE, "team"), pinned("20-noop", guests::NOOP, "")]
}

fn facts() -> Arc<Facts> {
    Arc::new(nri_wasm_e2e::test_facts())
}

fn settings(cache: &Path) -> EngineSettings {
    EngineSettings { cache_dir: Some(cache.to_path_buf()), ..EngineSettings::default() }
}

/// The annotations a policy adds to a new container.
fn annotations(engine: &PolicyEngine, p: &CompiledPolicy) -> Vec<String> {
    let report = engine.call(p, create_event(), &CallEnv::detached(facts()), None, Duration::from_secs(5));
    let reply = report.outcome.expect("the call succeeds").expect("the policy does not deny");
    reply.adjust.map(|a| a.annotations.into_iter().map(|kv| kv.key).collect()).unwrap_or_default()
}

/// Loads both policies with a new engine on `cache` (a restart), checks
/// that each behaves as its own source, and says which came from the cache.
fn restart(cache: &Path) -> [bool; 2] {
    let loader = PolicyLoader::new(Arc::new(PolicyEngine::new(&settings(cache)).expect("engine")));
    let engine = loader.engine();
    let [annotate, noop] = specs().map(|s| loader.load(&s, &facts()).expect("the policy loads"));
    assert_eq!(annotations(engine, &annotate), ["example.com/team"], "10-annotate runs its own code");
    assert_eq!(annotations(engine, &noop), Vec::<String>::new(), "20-noop runs its own code");
    [annotate.timings().cached, noop.timings().cached]
}

/// The cache's entries, in name order.
fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    files.sort();
    files
}

/// A cache holding both policies' entries.
fn filled() -> (tempfile::TempDir, PathBuf, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    assert_eq!(restart(&cache), [false, false], "compiled the first time");
    assert_eq!(restart(&cache), [true, true], "then loaded from the cache");
    let files = entries(&cache);
    assert_eq!(files.len(), 2, "{files:?}");
    (dir, cache, files)
}

fn write_private(path: &Path, bytes: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn swapped_entries_never_run_for_the_other_policy() {
    nri_wasm_e2e::init_logging();
    let (_dir, cache, files) = filled();
    let (a, b) = (std::fs::read(&files[0]).unwrap(), std::fs::read(&files[1]).unwrap());
    // Same owner, mode 0600, valid entries: only their names are swapped.
    write_private(&files[0], &b);
    write_private(&files[1], &a);
    assert_eq!(restart(&cache), [false, false], "neither swapped entry is loaded");
    assert_eq!(restart(&cache), [true, true], "the recompiled entries are cached again");
}

#[test]
fn damaged_entries_are_compiled_again_never_loaded() {
    nri_wasm_e2e::init_logging();
    let (_dir, cache, files) = filled();
    let genuine = std::fs::read(&files[0]).unwrap();
    let mut damages: Vec<(&str, Vec<u8>)> = Vec::new();
    // A byte of code flipped: unauthenticated, this traps the host
    // (SIGTRAP) at every start.
    for at in [genuine.len() / 3, genuine.len() / 2, genuine.len() - 1] {
        let mut flipped = genuine.clone();
        flipped[at] ^= 0xff;
        damages.push(("a flipped byte", flipped));
    }
    damages.push(("truncated", genuine[..genuine.len() / 2].to_vec()));
    damages.push(("appended", [&genuine[..], &[0u8; 4096][..]].concat()));
    damages.push(("empty", Vec::new()));
    for (what, bytes) in damages {
        for file in &files {
            write_private(file, &bytes);
        }
        assert_eq!(restart(&cache), [false, false], "{what}: compiled again");
        assert_eq!(restart(&cache), [true, true], "{what}: and cached again");
    }
}

#[test]
fn entries_of_another_key_are_compiled_again() {
    nri_wasm_e2e::init_logging();
    let (_dir, cache, _files) = filled();
    // Another host's key (or a lost one): entries it did not write are
    // not believed.
    std::fs::remove_file(nri_wasm::policy::load::cache::key_path(&cache)).unwrap();
    assert_eq!(restart(&cache), [false, false]);
    assert_eq!(restart(&cache), [true, true]);
}

#[test]
fn symlinked_or_group_writable_entries_are_ignored() {
    use std::os::unix::fs::PermissionsExt;
    nri_wasm_e2e::init_logging();
    let (dir, cache, files) = filled();
    // A genuine entry, moved out and linked back in.
    let outside = dir.path().join("outside.cwasm");
    std::fs::rename(&files[0], &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &files[0]).unwrap();
    std::fs::set_permissions(&files[1], std::fs::Permissions::from_mode(0o660)).unwrap();
    assert_eq!(restart(&cache), [false, false], "neither is loaded");
    assert!(std::fs::symlink_metadata(&files[0]).unwrap().is_file(), "the link was replaced by a real entry");
    assert!(outside.exists(), "what it pointed to is left alone");
    assert_eq!(restart(&cache), [true, true]);
}

#[test]
fn a_pin_is_checked_against_the_file_at_every_load() {
    nri_wasm_e2e::init_logging();
    let (dir, cache, _files) = filled();
    // The file changes under a cached policy: its pin no longer matches,
    // whatever the cache holds.
    let wasm = dir.path().join("10-annotate.wasm");
    std::fs::copy(guests::NOOP, &wasm).unwrap();
    let spec = PolicySpec { wasm, ..specs()[0].clone() };
    let loader = PolicyLoader::new(Arc::new(PolicyEngine::new(&settings(&cache)).expect("engine")));
    let e = loader.load(&spec, &facts()).unwrap_err().to_string();
    assert!(e.contains("10-annotate") && e.contains("sha256"), "{e}");
}

// State.

/// A volume that is full while `full` is set.
#[derive(Debug, Default)]
struct Volume {
    full: std::sync::atomic::AtomicBool,
}

/// Writes through a [`Volume`] the test keeps a handle on.
#[derive(Debug)]
struct Through(Arc<Volume>);

impl StateWriter for Through {
    fn write(&self, file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        if self.0.full.load(std::sync::atomic::Ordering::SeqCst) {
            // What a full volume does: part of the data, then ENOSPC.
            file.write_all(&bytes[..bytes.len() / 2])?;
            return Err(std::io::Error::from_raw_os_error(28));
        }
        file.write_all(bytes)
    }
}

/// The counting probe (`n` in its state, `example.com/count` on the
/// container) behind a dispatcher keeping state in `states`, installed as
/// the host installs a loaded chain (state files read first), served to
/// the simulator.
struct Counting {
    h: nri_wasm_e2e::Harness,
    conn: PluginConn,
    metrics: Arc<Metrics>,
    states: Arc<StateStore>,
    created: u32,
}

impl Counting {
    async fn start(states: StateStore) -> Self {
        let loader = nri_wasm_e2e::shared_loader();
        let engine = loader.engine().clone();
        let spec = nri_wasm_e2e::policy_spec("20-count", guests::PROBE, "count", OnError::Fail, roomy());
        let probe = loader.load_async(&spec, &facts()).await.expect("the probe loads");
        let states = Arc::new(states);
        let metrics = Arc::new(Metrics::new());
        metrics.watch_states(states.clone());
        let empty = Chain::new(Vec::new(), ChainSettings::default());
        let dispatcher = Arc::new(
            PolicyDispatcher::new(engine, empty, (*facts()).clone(), 4)
                .with_states(states.clone())
                .with_metrics(metrics.clone())
                .pending(),
        );
        let chain = Chain::new(vec![probe], ChainSettings::default());
        // Bounded: a state file that blocks would hang here.
        tokio::time::timeout(Duration::from_secs(30), dispatcher.install(chain))
            .await
            .expect("the chain is installed: reading its state does not block");
        metrics.chain_installed(&dispatcher.chain(), false);
        let h = nri_wasm_e2e::Harness::start(RuntimeProfile::v0_12(), dispatcher).await;
        let conn = h.connect().await;
        Self { h, conn, metrics, states, created: 0 }
    }

    /// Creates a container; the count the probe gave it.
    async fn create(&mut self) -> u64 {
        self.created += 1;
        let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
        let pod = req.pod.clone().unwrap();
        let mut ctr = req.container.clone().unwrap();
        ctr.id = format!("ctr-{}", self.created);
        let resp = self.conn.create_container(&pod, &ctr).await.expect("the container is created");
        let adjust = resp.adjust.into_option().expect("the probe adjusts");
        adjust.annotations["example.com/count"].parse().unwrap()
    }

    /// Waits (up to 20 s) until the saves after the answers, done off the
    /// event's path, leave the policy's state as `settled` says.
    async fn settled(
        &self,
        settled: impl Fn(&nri_wasm::policy::call::state::SaveHealth) -> bool,
    ) -> nri_wasm::policy::call::state::SaveHealth {
        for _ in 0..1000 {
            let health = self.states.health().get("20-count").cloned().unwrap_or_default();
            if settled(&health) {
                return health;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("saves did not settle: {:?}", self.states.health());
    }

    async fn stop(self) {
        self.conn.close().await;
        self.h.shutdown().await;
    }
}

/// The count on disk, as the next start reads it.
fn count_on_disk(dir: &Path) -> Option<String> {
    StateStore::in_dir(dir.to_path_buf()).snapshot("20-count").get("n").map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_named_like_a_state_file_does_not_stop_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = std::process::Command::new("mkfifo").arg(dir.path().join("20-count.json")).status().unwrap();
    assert!(fifo.success());
    let mut served = Counting::start(StateStore::in_dir(dir.path().to_path_buf())).await;
    // The policy starts empty, runs, and its state is saved as a file.
    assert_eq!(served.create().await, 1);
    assert_eq!(served.create().await, 2);
    let status = served.metrics.status();
    let p = status.policies.iter().find(|p| p.name == "20-count").expect("listed");
    assert_eq!(p.status, "loaded");
    assert!(p.state_error.contains("a FIFO") && p.state_error.contains("20-count.json"), "{}", p.state_error);
    served.stop().await;
    let moved = std::fs::read_dir(dir.path())
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().starts_with("20-count.json.unreadable"));
    assert!(moved, "the FIFO is moved aside");
    // Saved off the event's path: wait up to 30 s for it.
    for _ in 0..1500 {
        if count_on_disk(dir.path()).as_deref() == Some("2") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the state was not saved: {:?}", count_on_disk(dir.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_volume_is_counted_shown_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let volume = Arc::new(Volume::default());
    let states = StateStore::in_dir_with(dir.path().to_path_buf(), Box::new(Through(volume.clone())));
    let mut served = Counting::start(states).await;
    assert_eq!(served.create().await, 1);
    assert_eq!(served.create().await, 2);
    served.settled(|h| !h.unsaved).await;
    volume.full.store(true, std::sync::atomic::Ordering::SeqCst);
    for n in 3..=12 {
        // The answer does not wait for the disk: every event succeeds.
        assert_eq!(served.create().await, n);
    }
    let health = served.settled(|h| h.failures == 10).await;
    assert!(health.unsaved && health.last_error.as_deref().is_some_and(|e| e.contains("No space left")), "{health:?}");
    let text = served.metrics.encode();
    assert!(text.contains("nri_wasm_state_save_failures_total{policy=\"20-count\"} 10"), "{text}");
    let p = served.metrics.status().policies.into_iter().find(|p| p.name == "20-count").unwrap();
    assert_eq!((p.state_save_failures, p.state_unsaved), (10, true));
    assert!(p.state_error.contains("20-count.json") && p.state_error.contains("No space left"), "{}", p.state_error);
    assert_eq!(count_on_disk(dir.path()).as_deref(), Some("2"), "the last save that worked");
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["20-count.json"], "no temporary file is left behind");
    // Room again: the next commit saves everything, the count resumes at 13.
    volume.full.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(served.create().await, 13);
    // The file is renamed into place a moment before the save is recorded.
    let health = served.settled(|h| !h.unsaved).await;
    assert_eq!((health.failures, health.last_error), (10, None));
    assert_eq!(count_on_disk(dir.path()).as_deref(), Some("13"));
    let p = served.metrics.status().policies.into_iter().find(|p| p.name == "20-count").unwrap();
    assert_eq!((p.state_save_failures, p.state_unsaved, p.state_error.as_str()), (10, false, ""));
    served.stop().await;
}

// ---------------------------------------------------------------- pruning

/// The files of `cache` ending in `.ext`, by name.
fn files_of(cache: &Path, ext: &str) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(&format!(".{ext}")) && !n.starts_with('.'))
        .collect()
}

/// Dates every file of `cache` two days back: older than what pruning spares.
fn age_everything(cache: &Path) {
    let past = std::time::SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
    for e in std::fs::read_dir(cache).unwrap() {
        let file = std::fs::File::options().append(true).open(e.unwrap().path()).unwrap();
        file.set_modified(past).unwrap();
    }
}

#[test]
fn records_and_compiled_forms_of_versions_gone_from_the_directory_are_pruned() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        let install = |name: &str, wasm: &str, settings: &str| {
            std::fs::copy(wasm, policies.join(format!("{name}.wasm"))).unwrap();
            std::fs::write(policies.join(format!("{name}.toml")), format!("settings = \"{settings}\"\n")).unwrap();
        };
        install("10-a", guests::ANNOTATE, "one");
        install("20-b", guests::REALISTIC, "1");
        let mut config = nri_wasm::config::Config::default();
        // No registry cache: root's default is the node's /var/cache/nri-wasm-oci.
        config.registry.cache_dir = None;
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = settings(&cache);
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone())
            .compiler(nri_wasm::policy::load::compile::Compiler::InProcess)
            .build()
            .unwrap();
        host.reloader.reloads().wait_for(|(n, _)| *n >= 1).await.unwrap();
        let first = files_of(&cache, "sub");
        assert_eq!(first.len(), 2, "one record per policy: {first:?}");
        let compiled = files_of(&cache, "cwasm");
        assert_eq!(compiled.len(), 2, "{compiled:?}");

        // New settings for 10-a (a new record, the same compiled form), and
        // 20-b removed: nothing goes yet, everything is younger than a day.
        install("10-a", guests::ANNOTATE, "two");
        let r = host.reloader.reload().await;
        assert_eq!(r.replaced, ["10-a"], "{r:?}");
        let second = files_of(&cache, "sub");
        let current_a: Vec<&String> = second.difference(&first).collect();
        assert_eq!(current_a.len(), 1, "10-a's new version has a record of its own: {second:?}");
        let current_a = current_a[0].clone();
        std::fs::remove_file(policies.join("20-b.wasm")).unwrap();
        std::fs::remove_file(policies.join("20-b.toml")).unwrap();
        let r = host.reloader.reload().await;
        assert_eq!(r.removed, ["20-b"], "{r:?}");
        assert_eq!(files_of(&cache, "sub"), second, "a day's grace");
        assert_eq!(files_of(&cache, "cwasm"), compiled, "a day's grace");

        // A day later, the next change prunes: the superseded record of
        // 10-a, the removed 20-b's record and compiled form go; 10-a's
        // current record and compiled form stay, however old.
        age_everything(&cache);
        install("30-c", guests::NOOP, "c");
        let r = host.reloader.reload().await;
        assert_eq!(r.added, ["30-c"], "{r:?}");
        let third = files_of(&cache, "sub");
        let new: Vec<&String> = third.difference(&second).collect();
        assert_eq!(new.len(), 1, "30-c's record: {third:?}");
        let expected: std::collections::BTreeSet<String> = [current_a, new[0].clone()].into();
        assert_eq!(third, expected, "only the records of the policies in the directory, as they are now");
        let after = files_of(&cache, "cwasm");
        assert_eq!(after.len(), 2, "annotate's and noop's compiled forms, not realistic's: {after:?}");
        assert_eq!(after.intersection(&compiled).count(), 1, "annotate's stays: {after:?} {compiled:?}");
    });
    runtime.shutdown_background();
}
