//! The chain answers inside the runtime's request timeout at any
//! `budget-fraction`: its deadline (with the dispatcher's grace) ends before
//! the transport's backstop, counted from the same instant. And on
//! Synchronize, which a runtime drops the plugin for failing (and sends
//! again on the reconnection, which can loop), a backstop that fires anyway
//! answers without updates instead of failing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_sim::RuntimeProfile;
use nri_wasm::nri::answer::AnswerScope;
use nri_wasm::nri::Dispatcher as _;
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, policy_spec, roomy, shared_engine, shared_loader, test_facts, Harness, Recorder, Replies};

fn fixture() -> (pb::PodSandbox, pb::Container) {
    let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    (req.pod.unwrap(), req.container.unwrap())
}

/// A policy that stalls on Synchronize (an hour in a WASI sleep, where
/// epochs cannot reach; its own limit of 10 s far off) under the largest
/// budget fraction, 0.9: the Synchronize is answered, without updates,
/// within the runtime's request timeout, the plugin stays registered and
/// the next event is served. The transport's backstop (900 ms at 1 s,
/// 1,800 ms at 2 s) came no later than the chain's deadline (900 and
/// 1,800 ms from a later start, plus 20 ms of grace) and failed the
/// Synchronize. The chain now ends 30 ms before it, leaving 130 and 230 ms
/// to the runtime's timeout for a busy machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_stalling_on_synchronize_at_the_largest_budget_fraction_is_answered_in_time() {
    let (pod, ctr) = fixture();
    for timeout in [Duration::from_secs(1), Duration::from_secs(2)] {
        let limits = Limits { timeout_ms: 10_000, ..roomy() };
        let spec = policy_spec("10-stall", guests::HOSTILE, "sync-sleep", OnError::Fail, limits);
        let policy = shared_loader().load(&spec, &Arc::new(test_facts())).unwrap_or_else(|e| panic!("{e}"));
        let settings = ChainSettings { budget_fraction: 0.9, ..ChainSettings::default() };
        let chain = Chain::new(vec![policy], settings);
        let d = Arc::new(PolicyDispatcher::new(shared_engine(), chain, test_facts(), 4));
        let h = Harness::start_policies(RuntimeProfile::v0_12().with_request_timeout(timeout), d.clone()).await;
        let conn = h.connect().await;
        let started = Instant::now();
        let synchronized = conn.synchronize(&[], &[], 0).await;
        let took = started.elapsed();
        let updates = synchronized.unwrap_or_else(|e| panic!("{timeout:?}: Synchronize failed after {took:?}: {e}"));
        assert!(updates.is_empty(), "{timeout:?}: {updates:?}");
        assert!(took < timeout, "{timeout:?}: answered after {took:?}");
        assert!(!conn.is_closed(), "{timeout:?}: the runtime dropped the plugin");
        let reply = conn.create_container(&pod, &ctr).await.unwrap_or_else(|e| panic!("{timeout:?}: {e}"));
        let annotation = reply.adjust.as_ref().and_then(|a| a.annotations.get("example.com/hostile").cloned());
        assert_eq!(annotation.as_deref(), Some("sync-sleep"), "{timeout:?}: the policy serves the next event");
        conn.close().await;
        h.shutdown().await;
    }
}

/// A dispatcher that overruns the answer budget on Synchronize anyway: the
/// transport answers it without updates at its backstop (and says so in
/// the log) instead of failing it, so the runtime keeps the plugin; the
/// next event is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronize_past_the_backstop_is_answered_without_updates() {
    let timeout = Duration::from_millis(500);
    let update = pb::ContainerUpdate { container_id: "c1".into(), ..Default::default() };
    let slow = Replies { sync: vec![update], delay: Some(Duration::from_secs(3)), ..Default::default() };
    let recorder = Recorder::new(slow);
    let h = Harness::start(RuntimeProfile::v0_12().with_request_timeout(timeout), recorder.clone()).await;
    let conn = h.connect().await;
    let started = Instant::now();
    let updates = conn.synchronize(&[], &[], 0).await.expect("Synchronize answered, not failed");
    let took = started.elapsed();
    assert!(updates.is_empty(), "answered without the late updates: {updates:?}");
    assert!(took < timeout, "answered after {took:?}");
    assert!(!conn.is_closed(), "the runtime dropped the plugin");
    recorder.replies.lock().unwrap().delay = None;
    let (pod, ctr) = fixture();
    conn.create_container(&pod, &ctr).await.expect("the next event is served");
    conn.close().await;
    h.shutdown().await;
}

/// While its chain runs, an answer says which policy is running: what the
/// transport logs if its backstop ends the answer anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_says_which_policy_is_running() {
    let facts = Arc::new(test_facts());
    let trap = policy_spec("10-trap", guests::PROBE, "sync-trap", OnError::Ignore, roomy());
    let stall = policy_spec("20-stall", guests::HOSTILE, "sync-sleep", OnError::Ignore, roomy());
    let policies = [trap, stall].map(|s| shared_loader().load(&s, &facts).unwrap_or_else(|e| panic!("{e}")));
    let chain = Chain::new(policies.into(), ChainSettings::default());
    let d = Arc::new(PolicyDispatcher::new(shared_engine(), chain, test_facts(), 4));
    // The default request timeout (2 s): a chain budget of 1 s.
    let scope = AnswerScope::new(Instant::now() + Duration::from_millis(1800));
    let answer = tokio::spawn(scope.clone().run(async move { d.synchronize(Vec::new(), Vec::new()).await }));
    // 10-trap fails at once; 20-stall then sleeps until the chain's deadline.
    let running = "Synchronize: policy 20-stall, after 10-trap (of 10-trap, 20-stall)";
    let mut seen: Vec<String> = Vec::new();
    while seen.last().map(String::as_str) != Some(running) {
        assert!(!answer.is_finished(), "never described as {running:?} while it ran: {seen:?}");
        let now = scope.describe();
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let updates = answer.await.unwrap().expect("Synchronize never fails");
    assert!(updates.is_empty());
    assert_eq!(scope.describe(), "Synchronize: the host's work after policy 20-stall (of 10-trap, 20-stall)");
}
