//! A policy's time covers all the host's work for it, inside host calls
//! too; later policies keep their time; a policy that keeps failing stays
//! in quarantine.
//!
//! Host calls run inline on the host's transport thread, where epochs do
//! not reach: a host function that works too long makes the runtime time
//! the request out and drop the plugin, with every policy, whatever their
//! `on-error`. Here every host function a policy can import is called over
//! and over (`tests/guests/hostile`, `host-call:<case>`) with the largest
//! argument one transfer carries (16 MiB as the host counts it), on a node
//! of 1,000 pods and 10,000 containers set up through Synchronize, by a
//! policy with a time limit of 500 ms between the chain's budget of 2 s and
//! the runtime's request timeout of 4 s (room for the Synchronize of that
//! node on a busy machine). For every case, in both `on-error`
//! modes: the runtime gets its answer (it did not drop the plugin), with
//! `ignore` the later policy's change arrives, and with `fail` the event
//! fails with an error naming the attacker and its time limit, and, when
//! the time ran out inside a host function, that function (never another).
//! A filter that matches the whole node asks for more than one transfer
//! (10,000 realistic containers are over 16 MiB as the host counts them):
//! that call may instead end in the refusal of its answer, by the function
//! the case calls.
//! Outcomes are asserted, not durations: the simulated runtime's own
//! request timeout is the judge of "in time".

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nri_sim::workload::Workload;
use nri_sim::{PluginConn, RuntimeProfile, SimError};
use nri_wasm::policy::chain::{
    Chain, ChainSettings, EvalContext, Evaluated, ManualClock, Outcome, PolicyFailure, Step,
};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::engine::CompiledPolicy;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, policy_spec, roomy, shared_engine as engine, shared_loader, test_facts, Harness};

/// The tests run one at a time: each is about time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);
/// The attacker's own time limit: well inside the chain's budget (2 s), so
/// that what ends its call is its own limit, and the later policy's share
/// (400 ms) is untouched.
const ATTACKER_MS: u64 = 500;
/// Creates per case and mode.
const RUNS: usize = 2;

/// 1,000 pods of 10 containers, realistic records; every container is
/// labelled `app=web` and every pod `tier=x`, so that a filter of copies of
/// these matches everything and cannot stop at the first container.
fn node() -> &'static Workload {
    static NODE: OnceLock<Workload> = OnceLock::new();
    NODE.get_or_init(|| {
        let mut w = Workload::generate(1000, 10);
        for p in &mut w.pods {
            p.labels.insert("tier".into(), "x".into());
        }
        for c in &mut w.containers {
            c.labels.insert("app".into(), "web".into());
        }
        w
    })
}

fn load(name: &str, wasm: &str, settings: &str, on_error: OnError, limits: Limits) -> CompiledPolicy {
    let spec = policy_spec(name, wasm, settings, on_error, limits);
    shared_loader().load(&spec, &Arc::new(test_facts())).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn after() -> CompiledPolicy {
    // 400 ms: room on a busy machine, and with the attacker's 500 ms
    // inside the chain's budget of 2 s, so that each keeps its own limit.
    load("30-after", guests::ANNOTATE, "after", OnError::Fail, Limits { timeout_ms: 400, ..roomy() })
}

fn attacker(case: &str, on_error: OnError) -> CompiledPolicy {
    // Memory for its 16 MiB argument and the 10,000 containers it gets
    // back: what ends its call must be time, not memory.
    let limits = Limits { timeout_ms: ATTACKER_MS, fuel: u64::MAX / 2, memory_mib: 200, ..Limits::default() };
    load("20-hostile", guests::HOSTILE, &format!("host-call:{case}"), on_error, limits)
}

fn chain_of(policies: Vec<CompiledPolicy>) -> Chain {
    // Every run must meet the attack itself, not a quarantine.
    Chain::new(policies, ChainSettings { breaker_failures: u32::MAX, ..ChainSettings::default() })
}

fn annotation<'a>(reply: &'a pb::CreateContainerResponse, key: &str) -> Option<&'a str> {
    reply.adjust.as_ref().and_then(|a| a.annotations.get(key)).map(String::as_str)
}

/// A node served by the host, synchronised, with `dispatcher`'s chain.
struct Node {
    h: Harness,
    conn: PluginConn,
    dispatcher: Arc<PolicyDispatcher>,
}

async fn serve(chain: Chain) -> Node {
    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain, test_facts(), 1));
    let h = Harness::start_policies(RuntimeProfile::v0_12().with_request_timeout(REQUEST_TIMEOUT), dispatcher.clone())
        .await;
    let conn = h.connect().await;
    let w = node();
    // Split as a runtime splits a large node: 4 MiB messages at most.
    conn.synchronize(&w.pods, &w.containers, 500).await.expect("synchronize");
    assert_eq!(dispatcher.view().len(), (1000, 10_000), "the host knows the whole node");
    Node { h, conn, dispatcher }
}

/// The host function a `host-call:` case calls (for the event reads, the
/// prefix of the dozen it calls), if it is one that stops at the deadline.
fn host_function(case: &str) -> Option<&'static str> {
    Some(match case {
        c if c.starts_with("containers-") => "node.containers",
        c if c.starts_with("ids-") => "node.container-ids",
        "pods" => "node.pods",
        "pod-label" => "event.pod-label",
        "pod-annotation" => "event.pod-annotation",
        "container-label" => "event.container-label",
        "container-annotation" => "event.container-annotation",
        "container-env-var" => "event.container-env-var",
        "event-reads" => "event.",
        _ => return None,
    })
}

/// The host function a timeout's message says the time ran out in.
fn named_host_call(message: &str) -> Option<&str> {
    let rest = message.split_once("inside host call ")?.1;
    rest.split(|c: char| c.is_whitespace() || c == ';' || c == ')').next()
}

/// The host function whose answer a refusal says was over one transfer.
fn refused_answer(message: &str) -> Option<&str> {
    let rest = message.split_once("asked host call ")?.1;
    let (function, tail) = rest.split_once(' ')?;
    tail.starts_with("for more than the 16777216 bytes one transfer may carry").then_some(function)
}

/// Runs each case in both modes on one synchronised node, and checks every
/// answer.
async fn attack(cases: &[&str]) {
    let _serial = SERIAL.lock().await;
    let node_ = serve(chain_of(vec![attacker(cases[0], OnError::Ignore), after()])).await;
    let w = node();
    let pod = w.pods[0].clone();
    let mut ctr = w.containers[0].clone();
    ctr.id = "new-container".into();
    ctr.name = "new".into();
    for case in cases {
        for on_error in [OnError::Ignore, OnError::Fail] {
            let changed = node_.dispatcher.replace_chain(chain_of(vec![attacker(case, on_error), after()]));
            assert!(!changed, "the same subscription: no reconnection");
            let label = format!("{case} ({on_error:?})");
            for run in 0..RUNS {
                let result = node_.conn.create_container(&pod, &ctr).await;
                match (on_error, result) {
                    (OnError::Ignore, Ok(reply)) => {
                        assert_eq!(annotation(&reply, "example.com/after"), Some("new"), "{label} run {run}");
                    }
                    (OnError::Fail, Err(SimError::Failed { status, .. })) => {
                        let message = status.message();
                        for part in ["20-hostile", "CreateContainer", "new-container"] {
                            assert!(message.contains(part), "{label} run {run}: {part:?} missing from {message:?}");
                        }
                        // What ended the call: its time limit, or, for a
                        // case whose answer is the whole node, the refusal
                        // of an answer over one transfer, by the function
                        // the case calls (never another).
                        if let Some(refused) = refused_answer(message) {
                            let called = host_function(case);
                            assert!(
                                called == Some(refused) && refused.starts_with("node."),
                                "{label} run {run}: refused {refused}, the case calls {called:?}: {message:?}"
                            );
                        } else {
                            assert!(
                                message.contains("time limit of 500 ms"),
                                "{label} run {run}: neither the time limit nor an answer too large: {message:?}"
                            );
                        }
                        // Where the time ran out, if in a host function: the
                        // one the case calls.
                        if let Some(named) = named_host_call(message) {
                            let called = host_function(case);
                            assert!(
                                called.is_some_and(|f| named.starts_with(f)),
                                "{label} run {run}: names {named}, the case calls {called:?}: {message:?}"
                            );
                        }
                    }
                    (_, other) => panic!("{label} run {run}: the runtime got {other:?}"),
                }
                assert!(!node_.conn.is_closed(), "{label} run {run}: the runtime dropped the plugin");
            }
        }
    }
    assert!(!node_.h.task.is_finished(), "the host is still serving");
    node_.conn.close().await;
    node_.h.shutdown().await;
}

// ---------------------------------------------------------------- node

/// Filters at the transfer limit: 16 million states (`running` last), or
/// 300,000 copies of a label every container (or pod) carries, or 260,000
/// distinct labels. Tested element by element against every container, as
/// the host once did, the first two were minutes of work per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_containers_with_a_filter_at_the_transfer_limit() {
    attack(&["containers-states", "containers-labels", "containers-distinct-labels", "containers-pod-labels"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_containers_of_a_pod_id_at_the_transfer_limit() {
    attack(&["containers-pod-id"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_container_ids_with_a_filter_at_the_transfer_limit() {
    attack(&["ids-states", "ids-labels", "ids-pod-labels"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pods_over_and_over() {
    attack(&["pods"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_pod_and_container_of_an_id_at_the_transfer_limit() {
    attack(&["pod", "container"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_topology_over_and_over() {
    attack(&["topology"]).await;
}

// ---------------------------------------------------------------- state, host

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_functions_with_keys_and_values_at_the_transfer_limit() {
    attack(&["state-get", "state-set-key", "state-set-value", "state-remove", "state-keys"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_log_and_facts_at_the_transfer_limit() {
    attack(&["log", "facts"]).await;
}

// ---------------------------------------------------------------- event

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_lookups_of_a_key_at_the_transfer_limit() {
    attack(&["pod-label", "pod-annotation", "container-label", "container-annotation", "container-env-var"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_reads_over_and_over() {
    attack(&["event-reads"]).await;
}

/// The error the runtime gets says where the policy's time went: inside
/// `node.container-ids`, which the attacker calls without a pause with a
/// filter of 16 million states (tens of milliseconds of the host's work per
/// call, against microseconds of its own code between calls), not only
/// "time limit exceeded", which an operator would read as a loop in the
/// policy. The deadline may still fall between two calls, in the guest's
/// own code (that error names no function, and is right); a few creates
/// make sure one is seen inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_inside_a_host_call_names_the_function_to_the_runtime() {
    const TRIES: usize = 20;
    let _serial = SERIAL.lock().await;
    let node_ = serve(chain_of(vec![attacker("ids-states", OnError::Fail), after()])).await;
    let w = node();
    let mut ctr = w.containers[0].clone();
    ctr.id = "new-container".into();
    let mut messages = Vec::new();
    for _ in 0..TRIES {
        let message = match node_.conn.create_container(&w.pods[0], &ctr).await {
            Err(SimError::Failed { status, .. }) => status.message().to_string(),
            other => panic!("the runtime got {other:?}"),
        };
        assert!(message.contains("20-hostile") && message.contains("time limit of 500 ms exceeded"), "{message}");
        if let Some(named) = named_host_call(&message) {
            eprintln!("the runtime got: {message}");
            assert_eq!(named, "node.container-ids", "{message}");
            assert!(message.contains("time limit of 500 ms exceeded inside host call node.container-ids"), "{message}");
            break;
        }
        messages.push(message);
    }
    assert!(messages.len() < TRIES, "no error named the host function: {messages:#?}");
    node_.conn.close().await;
    node_.h.shutdown().await;
}

/// A node whose containers carry a megabyte of annotations each, as four
/// policies may add to every container they see created (each within its
/// default grant of 256 KiB):
/// twenty of them are more than one transfer carries. Copying them out for
/// `node.containers` would cost the host 20 MiB per call, outside every
/// limit of the policy's, before the guest's memory limit could refuse
/// them: the host stops copying at the transfer limit and the call fails
/// naming the function and the limit. (`node.pods` counts the same way;
/// pods cannot be grown past it here, since a Synchronize sends them all
/// in its first message, which the runtime keeps under 4 MiB.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answer_over_the_transfer_limit_is_refused_not_copied() {
    const BIG: usize = 1 << 20;
    let _serial = SERIAL.lock().await;
    let mut w = Workload::generate(20, 1);
    for c in &mut w.containers {
        c.labels.insert("app".into(), "web".into());
        c.annotations.insert("example.com/big".into(), "c".repeat(BIG));
    }
    let chain = |case: &str, on_error| chain_of(vec![attacker(case, on_error), after()]);
    let dispatcher =
        Arc::new(PolicyDispatcher::new(engine(), chain("containers-labels", OnError::Fail), test_facts(), 1));
    let h = Harness::start_policies(RuntimeProfile::v0_12().with_request_timeout(REQUEST_TIMEOUT), dispatcher.clone())
        .await;
    let conn = h.connect().await;
    // Two containers a message: each under the runtime's 4 MiB.
    conn.synchronize(&w.pods, &w.containers, 2).await.expect("synchronize");
    assert_eq!(dispatcher.view().len(), (20, 20), "the host knows the whole node");
    let mut ctr = w.containers[0].clone();
    ctr.id = "new-container".into();
    ctr.name = "new".into();
    ctr.annotations.clear();
    for on_error in [OnError::Ignore, OnError::Fail] {
        assert!(!dispatcher.replace_chain(chain("containers-labels", on_error)), "the same subscription");
        match (on_error, conn.create_container(&w.pods[0], &ctr).await) {
            (OnError::Ignore, Ok(reply)) => assert_eq!(annotation(&reply, "example.com/after"), Some("new")),
            (OnError::Fail, Err(SimError::Failed { status, .. })) => {
                let message = status.message();
                let expected =
                    "asked host call node.containers for more than the 16777216 bytes one transfer may carry";
                for part in ["20-hostile", "CreateContainer", expected] {
                    assert!(message.contains(part), "{part:?} missing from {message:?}");
                }
            }
            (_, other) => panic!("{on_error:?}: the runtime got {other:?}"),
        }
        assert!(!conn.is_closed(), "the runtime dropped the plugin");
    }
    conn.close().await;
    h.shutdown().await;
}

// ---------------------------------------------------------------- time plan

/// A first policy that loops with a time limit five times the chain's budget
/// does not take the time of the policy after it: the later policy's own
/// 300 ms are set aside before the first starts, so a later policy that
/// needs 50 ms of them gets its change into every create. (With shares in
/// proportion to the limits, the later policy was left 29 ms, and never
/// made it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_first_policy_leaves_the_later_policy_its_own_time() {
    let _serial = SERIAL.lock().await;
    for on_error in [OnError::Ignore, OnError::Fail] {
        let looping = Limits { fuel: u64::MAX / 2, timeout_ms: 10_000, ..Limits::default() };
        // The later policy spins on the clock for 50 ms: how much fuel that
        // burns depends on how fast the machine reads its clock, and fuel is
        // not what this test is about, so it gets all it could want.
        let later = Limits { fuel: u64::MAX / 2, timeout_ms: 300, ..Limits::default() };
        let chain = chain_of(vec![
            load("10-loop", guests::FAULTS, "loop", on_error, looping),
            load("20-spin", guests::HOSTILE, "spin:50", OnError::Fail, later),
        ]);
        let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain, test_facts(), 1));
        let h =
            Harness::start_policies(RuntimeProfile::v0_12().with_request_timeout(REQUEST_TIMEOUT), dispatcher.clone())
                .await;
        let conn = h.connect().await;
        let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
        let (pod, ctr) = (req.pod.clone().unwrap(), req.container.clone().unwrap());
        for run in 0..5 {
            let result = conn.create_container(&pod, &ctr).await;
            match (on_error, result) {
                (OnError::Ignore, Ok(reply)) => {
                    assert_eq!(annotation(&reply, "example.com/spun"), Some("50"), "run {run}: {reply:?}");
                }
                (OnError::Fail, Err(SimError::Failed { status, .. })) => {
                    // The loop was cut where the later policy's time begins:
                    // at most the budget (2 s) less its 300 ms, and more than
                    // an even split of the budget (1000 ms) would leave it;
                    // what lies between is the time the event took before the
                    // loop started, which a stalled machine stretches.
                    let message = status.message();
                    let left = message
                        .split("the chain's budget left it ")
                        .nth(1)
                        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                        .and_then(|n| n.parse::<u64>().ok())
                        .unwrap_or_else(|| panic!("run {run}: no cut limit in {message:?}"));
                    assert!(message.contains("10-loop") && message.contains("its timeout-ms is 10000"), "{message}");
                    assert!((1100..=1700).contains(&left), "run {run}: the loop was left {left} ms: {message}");
                }
                (_, other) => panic!("{on_error:?} run {run}: {other:?}"),
            }
            assert!(!conn.is_closed(), "run {run}: the runtime dropped the plugin");
        }
        conn.close().await;
        h.shutdown().await;
    }
}

// ---------------------------------------------------------------- breaker

fn failure_of(steps: &[Step]) -> PolicyFailure {
    match steps.last().map(|s| &s.outcome) {
        Some(Outcome::Failed { failure, ignored: true }) => failure.clone(),
        other => panic!("expected an ignored failure, got {other:?}"),
    }
}

/// A policy that fails again after its back-off goes straight back into
/// quarantine, for twice as long; it used to be called, and fail, on every
/// event after its first back-off. The breaker reads a manual clock, moved
/// on instead of slept through, to a millisecond short of each back-off's
/// end and then to its end.
#[test]
fn a_policy_failing_after_its_back_off_is_quarantined_again_for_longer() {
    const BASE_MS: u64 = 30_000;
    let base = Duration::from_millis(BASE_MS);
    let ms = Duration::from_millis(1);
    let settings = ChainSettings { breaker_failures: 2, breaker_backoff_ms: BASE_MS, ..ChainSettings::default() };
    let trap = load("20-trap", guests::FAULTS, "unreachable", OnError::Ignore, roomy());
    let clock = Arc::new(ManualClock::new());
    let chain = Chain::new(vec![load("10-a", guests::ANNOTATE, "a", OnError::Fail, roomy()), trap], settings)
        .with_clock(clock.clone());
    let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    let create = || {
        let cx = EvalContext::new(
            engine(),
            nri_wasm::policy::engine::CallEnv::detached(Arc::new(test_facts())),
            Instant::now() + REQUEST_TIMEOUT,
        );
        let Evaluated { steps, .. } = nri_wasm_e2e::block_on(chain.create_container(&cx, &req)).expect("ignored");
        failure_of(&steps)
    };
    let ran = |f: &PolicyFailure| matches!(f, PolicyFailure::Call(_));
    let quarantined = |f: &PolicyFailure| matches!(f, PolicyFailure::Quarantined { .. });

    assert!(ran(&create()));
    assert!(ran(&create()));
    assert!(quarantined(&create()), "two failures in a row trip the breaker");
    clock.advance(base - ms);
    assert!(quarantined(&create()), "still quarantined a millisecond before its back-off ends");
    // The back-off is over: the policy is called again, fails, and is back
    // in quarantine at once.
    clock.advance(ms);
    assert!(ran(&create()), "called again after its back-off");
    let f = create();
    assert!(quarantined(&f), "one failure after the back-off sends it back: {f}");
    // For twice as long: still quarantined well past the first back-off's length.
    clock.advance(base + base / 2);
    assert!(quarantined(&create()), "the second back-off is longer than the first");
    clock.advance(base / 2 - ms);
    assert!(quarantined(&create()), "still quarantined a millisecond before the doubled back-off ends");
    clock.advance(ms);
    assert!(ran(&create()), "called again after the doubled back-off");
    assert!(quarantined(&create()));
}
