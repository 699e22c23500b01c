//! Synchronize of a large node: 1,000 pods and 10,000 containers (realistic
//! records, sent in chunks of 500 containers as a runtime splits a large
//! node), through the runtime simulator over a real socket, with ten
//! policies that read the node view on Synchronize (every pod, every
//! container's id, every running container in full: `tests/guests/hostile`
//! in its `read-view` mode), against the same Synchronize with no policy,
//! measured in the same run.
//!
//! A plugin that misses Synchronize is dropped by the runtime, and misses
//! every create after it, so the figure that matters is how far below the
//! runtime's request timeout (2 s) the answer comes.
//!
//! `cargo bench -p nri-wasm-benches --bench synchronize` (20 Synchronizes
//! per case; `NRI_WASM_SYNC_RUNS=N` for another number). Run as a test
//! (`cargo test --benches`, or with `--test`) it synchronises twice per case.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_sim::workload::Workload;
use nri_sim::RuntimeProfile;
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_benches::{bench_limits, guests, Bench};
use nri_wasm_e2e::Harness;

/// The allocator of the `nri-wasm` binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Containers per Synchronize message.
const CHUNK: usize = 500;

/// Times of `runs` Synchronizes of `node` through a host serving `chain`.
async fn synchronize(chain: Chain, bench: &Bench, node: &Workload, runs: usize) -> Vec<Duration> {
    let dispatcher = Arc::new(PolicyDispatcher::new(bench.engine.clone(), chain, (*bench.facts).clone(), 4));
    let h = Harness::start_policies(RuntimeProfile::v0_12().with_request_timeout(REQUEST_TIMEOUT), dispatcher.clone())
        .await;
    let mut times = Vec::with_capacity(runs);
    // A runtime synchronises once per connection: reconnect for each run.
    for _ in 0..runs {
        let conn = h.connect().await;
        let started = Instant::now();
        let updates = conn.synchronize(&node.pods, &node.containers, CHUNK).await.expect("Synchronize answered");
        times.push(started.elapsed());
        assert!(updates.is_empty(), "the readers change nothing");
        assert!(!conn.is_closed(), "the runtime kept the plugin");
        conn.close().await;
    }
    h.shutdown().await;
    times
}

fn readers(bench: &Bench, n: usize) -> Chain {
    let policies = (0..n)
        .map(|i| {
            bench.load(&format!("{:02}-reader", 10 + i), guests::HOSTILE, "read-view", OnError::Fail, bench_limits())
        })
        .collect();
    Chain::new(policies, ChainSettings::default())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(mut times: Vec<Duration>) -> (Duration, Duration, Duration) {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), *times.last().expect("at least one run"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let runs =
        std::env::var("NRI_WASM_SYNC_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(if full { 20 } else { 2 });
    let bench = Bench::new();
    let node = Workload::generate(1000, 10);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cases = [
        ("no policy", Chain::default()),
        ("1 view reader", readers(&bench, 1)),
        ("10 view readers", readers(&bench, 10)),
    ];
    let mut results = Vec::new();
    runtime.block_on(async {
        for (name, chain) in cases {
            let times = synchronize(chain, &bench, &node, runs).await;
            results.push((name, summary(times)));
        }
    });
    let baseline = results[0].1 .0;
    eprintln!();
    eprintln!(
        "Synchronize of {} pods and {} containers in chunks of {CHUNK}, {runs} runs per case (request timeout {} ms):",
        node.pods.len(),
        node.containers.len(),
        REQUEST_TIMEOUT.as_millis()
    );
    for (name, (p50, p90, max)) in &results {
        eprintln!(
            "  {name:<16} median {:7.1} ms  p90 {:7.1} ms  max {:7.1} ms  (+{:.1} ms over no policy)",
            ms(*p50),
            ms(*p90),
            ms(*max),
            ms(p50.saturating_sub(baseline))
        );
    }
}
