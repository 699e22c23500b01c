//! The fault matrix: every way a policy can misbehave, in both `on-error`
//! modes, 200 times in a row (1,000 with `NRI_WASM_MATRIX=full`) through the
//! simulated runtime, between two healthy policies.
//!
//! For every run: the host answers inside the runtime's request timeout
//! (the simulated runtime's own, which it enforces as a real one does: a
//! late answer is a timeout, which fails the run); with
//! `on-error = "ignore"` the healthy policies' changes arrive and the faulty
//! one's do not; with `on-error = "fail"` the event fails with an error that
//! names the policy, the event, the container and the limit or reason. After
//! the runs the host is still connected, and its resident memory did not
//! grow between the 100th and the last run.
//!
//! The cases run one at a time (a shared lock) so that memory readings and
//! timings are the host's own, not a neighbour test's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_sim::{RuntimeProfile, SimError};
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::load::directory;
use nri_wasm::policy::load::directory::Unloadable;
use nri_wasm::policy::load::errors::LoadError;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, matrix_runs, roomy, Harness};
use nri_wasm_test_support::heap::live;

/// Most resident-memory growth tolerated between the reading after the
/// warm-up (the first tenth of the runs) and the last one.
const MAX_GROWTH_BYTES: i64 = 16 << 20;
/// Most growth of the host's live heap over the same runs (this binary
/// counts every allocation: `nri_wasm_test_support::heap`), the finer check.
const MAX_HEAP_GROWTH: i64 = 2 << 20;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

use crate::ALONE as SERIAL;

use nri_wasm_e2e::{policy_spec as spec, shared_engine as engine, test_facts as facts};

/// How the faulty policy misbehaves and what its failure must say.
struct Fault {
    /// Settings of the faults guest, or `None` for the inline component.
    settings: Option<&'static str>,
    limits: Limits,
    /// Every one of these appears in the error of a failed event.
    says: &'static [&'static str],
}

fn resident_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: i64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("resident pages");
    pages * 4096
}

fn annotation<'a>(reply: &'a pb::CreateContainerResponse, key: &str) -> Option<&'a str> {
    reply.adjust.as_ref().and_then(|a| a.annotations.get(key)).map(String::as_str)
}

/// Builds the chain `10-before`, `20-faulty`, `30-after`.
fn chain(fault: &Fault, on_error: OnError) -> Chain {
    let loader = nri_wasm_e2e::shared_loader();
    let f = Arc::new(facts());
    let healthy = |name: &str, tag: &str| {
        // 250 ms: room on a busy machine, and small enough that the two of
        // them leave the faulty policy most of the chain's budget.
        let limits = Limits { timeout_ms: 250, ..roomy() };
        loader.load(&spec(name, guests::ANNOTATE, tag, OnError::Fail, limits), &f).expect("healthy policy")
    };
    let before = healthy("10-before", "before");
    let after = healthy("30-after", "after");
    let faulty = match fault.settings {
        Some(settings) => loader.load(&spec("20-faulty", guests::FAULTS, settings, on_error, fault.limits), &f),
        // A component importing an interface the host does not offer.
        None => loader.load_bytes(
            &spec("20-faulty", "inline", "", on_error, fault.limits),
            br#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#,
            &f,
        ),
    };
    // Every run must meet the fault itself, not a quarantine.
    let settings = ChainSettings { breaker_failures: u32::MAX, ..ChainSettings::default() };
    match faulty {
        Ok(p) => Chain::new(vec![before, p, after], settings),
        Err(e) => {
            let spec = spec("20-faulty", "faulty", "", on_error, fault.limits);
            let missing =
                Unloadable { name: spec.name.clone(), reason: e.to_string(), mandatory: directory::mandatory(&spec) };
            Chain::new(vec![before, after], settings).with_unloadable(vec![missing])
        }
    }
}

async fn run_matrix(fault: Fault) {
    let _serial = SERIAL.lock().await;
    let request: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    let (pod, ctr) = (request.pod.clone().unwrap(), request.container.clone().unwrap());
    for on_error in [OnError::Ignore, OnError::Fail] {
        let chain = chain(&fault, on_error);
        let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain, facts(), 4));
        let h = Harness::start(RuntimeProfile::v0_12().with_request_timeout(REQUEST_TIMEOUT), dispatcher).await;
        let conn = h.connect().await;
        conn.synchronize(&[], &[], 0).await.expect("synchronize");
        let (mut warm, mut warm_heap) = (0, 0);
        let mut slowest = Duration::ZERO;
        let warm_up = matrix_runs() / 10;
        for run in 0..matrix_runs() {
            if run == warm_up {
                warm = resident_bytes();
                warm_heap = live();
                assert!(warm_heap > 0, "the counting allocator is this binary's (memory.rs)");
            }
            let started = Instant::now();
            let result = conn.create_container(&pod, &ctr).await;
            let took = started.elapsed();
            slowest = slowest.max(took);
            match on_error {
                OnError::Ignore => {
                    let reply = result.unwrap_or_else(|e| panic!("run {run}: ignored fault failed the event: {e}"));
                    assert_eq!(annotation(&reply, "example.com/before"), Some(ctr.name.as_str()), "run {run}");
                    assert_eq!(annotation(&reply, "example.com/after"), Some(ctr.name.as_str()), "run {run}");
                    assert_eq!(annotation(&reply, "example.com/faults"), None, "run {run}");
                    let adjust = reply.adjust.as_ref().unwrap();
                    assert!(adjust.env.iter().all(|e| !e.key.starts_with('V')), "run {run}: faulty output leaked");
                }
                OnError::Fail => {
                    let err = result.expect_err("a failing policy with on-error = fail fails the event");
                    let SimError::Failed { status, .. } = &err else { panic!("run {run}: {err}") };
                    let message = status.message();
                    for part in ["20-faulty", "CreateContainer", &ctr.id, "on-error = fail"].iter().chain(fault.says) {
                        assert!(message.contains(part), "run {run}: {part:?} missing from {message:?}");
                    }
                }
            }
        }
        let growth = resident_bytes() - warm;
        assert!(
            growth < MAX_GROWTH_BYTES,
            "{on_error:?}: resident memory grew by {} KiB over {} runs",
            growth / 1024,
            matrix_runs() - warm_up
        );
        let heap_growth = live() - warm_heap;
        assert!(
            heap_growth < MAX_HEAP_GROWTH,
            "{on_error:?}: the host's heap grew by {heap_growth} bytes over {} runs",
            matrix_runs() - warm_up
        );
        assert!(!conn.is_closed() && !h.task.is_finished(), "the host is still connected and running");
        eprintln!("{:?} {on_error:?}: slowest answer {slowest:?}, memory growth {} KiB", fault.settings, growth / 1024);
        conn.close().await;
        h.shutdown().await;
    }
}

fn loose(fuel: u64, timeout_ms: u64) -> Limits {
    Limits { fuel, timeout_ms, ..Limits::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop() {
    let says = &["time limit of 5 ms"];
    run_matrix(Fault { settings: Some("loop"), limits: loose(u64::MAX / 2, 5), says }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel_exhaustion() {
    let says = &["fuel limit of 2000000"];
    run_matrix(Fault { settings: Some("loop"), limits: loose(2_000_000, 10_000), says }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_growth_past_the_cap() {
    // Time enough to reach the cap on a busy machine: the limit under test
    // is the memory's.
    let limits = Limits { memory_mib: 16, timeout_ms: 900, ..Limits::default() };
    run_matrix(Fault { settings: Some("grow"), limits, says: &["memory limit of 16 MiB"] }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_trap() {
    run_matrix(Fault { settings: Some("unreachable"), limits: roomy(), says: &["trapped", "unreachable"] }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_panic() {
    run_matrix(Fault { settings: Some("panic"), limits: roomy(), says: &["trapped"] }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_overflow() {
    run_matrix(Fault { settings: Some("native-stack"), limits: roomy(), says: &["stack overflow"] }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output() {
    // 90,000 env entries (about 1.1 MiB): within the guest's limits, past the reply limit.
    let says = &["invalid output", "exceeds the limit of 1048576 bytes"];
    run_matrix(Fault { settings: Some("huge:90000"), limits: loose(2_000_000_000, 2_000), says }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_output() {
    run_matrix(Fault { settings: Some("invalid"), limits: roomy(), says: &["invalid output", "mount"] }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_step_loops() {
    // The policy's 5 ms are for events; `configure` gets at least 2 s.
    let says = &["not loaded", "configure (its settings step) failed", "time limit of 2000 ms"];
    run_matrix(Fault { settings: Some("init-loop"), limits: loose(u64::MAX / 2, 5), says }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_import() {
    let says = &["not loaded", "wasi:http/outgoing-handler@0.2.0"];
    run_matrix(Fault { settings: None, limits: roomy(), says }).await;
}

/// A million env entries, as the issue puts it: the guest's own limits stop
/// it (memory or fuel) before any of it reaches the host, or the reply limit
/// does; either way the host answers and stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_env_entries() {
    let _serial = SERIAL.lock().await;
    let loader = nri_wasm_e2e::shared_loader();
    let f = Arc::new(facts());
    let limits = Limits { memory_mib: 256, fuel: 20_000_000_000, timeout_ms: 5_000, ..Limits::default() };
    let p = loader.load(&spec("20-faulty", guests::FAULTS, "huge", OnError::Fail, limits), &f).expect("load");
    let chain = Chain::new(vec![p], ChainSettings::default());
    let request: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    let cx = nri_wasm_e2e::eval_cx(Duration::from_secs(10));
    for _ in 0..3 {
        let err =
            chain.create_container(&cx, &request).await.expect_err("a million entries never make it to the runtime");
        let text = err.to_string();
        assert!(
            text.contains("exceeds the limit")
                || text.contains("memory limit")
                || text.contains("fuel limit")
                || text.contains("one transfer may carry"),
            "{text}"
        );
    }
}

#[test]
fn unloadable_policies_with_on_error_ignore_are_reported_and_fail_nothing() {
    let spec = spec("20-faulty", "x", "", OnError::Ignore, roomy());
    let e = LoadError::Compile { policy: "20-faulty".into(), reason: "bad".into() };
    let missing = Unloadable { name: spec.name.clone(), reason: e.to_string(), mandatory: directory::mandatory(&spec) };
    let chain = Chain::new(Vec::new(), ChainSettings::default()).with_unloadable(vec![missing]);
    assert_eq!(chain.unloadable().len(), 1, "reported");
    assert!(!chain.wants(nri_wasm::nri::EventKind::CreateContainer), "but it fails no container");
}
