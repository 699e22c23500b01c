//! A slow load holds back nothing but itself.
//!
//! The engine bounds loads step by step (`policy/engine/`): compiling
//! takes one of two permits for the compile only, `configure` one of a few
//! instance slots until its instance is gone, and reading files or the
//! cache takes none. Here two policies never finish `configure` (one
//! computes without a pause, one sleeps in WASI), each until its time limit
//! of 60 s, and two ordinary policies of the same directory must load
//! meanwhile, through the host's own first load (`cli::HostBuilder`), which
//! polls every load from one task.
//!
//! The slow policies are compiled beforehand (they are in the cache), the
//! ordinary ones are not: the slow ones are in `configure` within
//! milliseconds, while the ordinary ones still compile. Asserted by order,
//! not by time: when the two ordinary policies are in the chain, the two
//! slow ones are still loading. Before, the load permit (two of them, held
//! from the first step to the end of `configure`) was taken by the slow
//! policies and the others waited out their 60 s; and without its yields, a
//! `configure` computing without a pause stops the task that polls every
//! load until its deadline.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nri_wasm::config::Config;
use nri_wasm::policy::engine::{EngineSettings, PolicyEngine};
use nri_wasm::policy::load::compile::Compiler;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm::policy::PolicyLoader;
use nri_wasm_e2e::{policy_spec, test_facts};
use nri_wasm_test_support::guests;

/// The slow policies' time limit: the most a policy may have. The ordinary
/// policies must load within it (a second or two on an idle machine).
const SLOW_LIMIT_MS: u64 = 60_000;

fn install(dir: &Path, name: &str, wasm: &str, policy_file: &str) {
    std::fs::copy(wasm, dir.join(format!("{name}.wasm"))).unwrap();
    std::fs::write(dir.join(format!("{name}.toml")), policy_file).unwrap();
}

#[test]
fn ordinary_policies_load_while_two_others_are_still_in_configure() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        let slow = |settings: &str| {
            // Fuel for a minute of computing: what ends it is its time.
            format!(
                "settings = \"{settings}\"\non-error = \"ignore\"\n\
                 [limits]\ntimeout-ms = {SLOW_LIMIT_MS}\nfuel = 1000000000000000\n"
            )
        };
        install(&policies, "10-spin", guests::FAULTS, &slow("init-loop"));
        install(&policies, "20-sleep", guests::HOSTILE, &slow("init-sleep"));
        install(&policies, "30-a", guests::ANNOTATE, "settings = \"a\"\n");
        install(&policies, "40-b", guests::ANNOTATE, "settings = \"b\"\n");

        // The slow ones' compiled forms in a cache of this test's own (their
        // `configure` cut at once: a load that fails after the compile).
        let engine = EngineSettings { cache_dir: Some(dir.path().join("cache")), ..EngineSettings::default() };
        let warm = PolicyLoader::new(Arc::new(PolicyEngine::new(&engine).unwrap()));
        for (name, settings) in [("10-spin", "init-loop"), ("20-sleep", "init-sleep")] {
            let limits = Limits { timeout_ms: 1, ..Limits::default() };
            let spec = policy_spec(
                name,
                policies.join(format!("{name}.wasm")).to_str().unwrap(),
                settings,
                OnError::Ignore,
                limits,
            );
            let loaded = warm.load_async(&spec, &Arc::new(test_facts())).await;
            assert!(loaded.is_err_and(|e| e.step() == "configure"), "{name} compiled, then cut in configure");
        }
        drop(warm);

        let mut config = Config::default();
        // No registry cache: root's default is the node's /var/cache/nri-wasm-oci.
        config.registry.cache_dir = None;
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = engine;
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();

        loop {
            let chain = host.dispatcher.chain();
            let loaded: Vec<&str> = chain.policies().map(|p| p.name()).collect();
            let mut pending: Vec<&str> = chain.pending().iter().map(|p| p.name.as_str()).collect();
            pending.sort_unstable();
            let failed: Vec<&str> = chain.unloadable().iter().map(|u| u.name.as_str()).collect();
            assert!(
                !failed.iter().any(|n| *n == "30-a" || *n == "40-b"),
                "an ordinary policy failed to load: {:?}",
                chain.unloadable()
            );
            assert!(
                !loaded.iter().chain(&failed).any(|n| *n == "10-spin" || *n == "20-sleep"),
                "a slow policy's load ended ({SLOW_LIMIT_MS} ms) before both ordinary policies loaded: \
                 loaded {loaded:?}, failed {failed:?}, pending {pending:?}"
            );
            if loaded.contains(&"30-a") && loaded.contains(&"40-b") {
                assert_eq!(pending, ["10-spin", "20-sleep"], "the slow policies are still loading");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The slow loads go on in the engine's runtime until their limit;
        // the process ends with this test (the only one in this binary).
    });
    // Dropping a runtime waits for its blocking tasks; there are none here
    // that outlive their work, and the policy runtime is the engine's own.
    runtime.shutdown_background();
}
