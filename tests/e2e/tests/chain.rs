//! The chain's own rules with real components: order and visibility, audit
//! mode, the circuit breaker, the chain deadline (30 looping policies), the
//! validation step, determinism, and loading a directory.

use std::sync::Arc;
use std::time::Duration;

use nri_sim::{PluginConn, RuntimeProfile, SimError};
use nri_wasm::policy::chain::{
    Chain, ChainError, ChainSettings, EvalContext, Evaluated, ManualClock, Outcome, Pending, PolicyFailure, Step,
};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::engine::{CompiledPolicy, Facts};
use nri_wasm::policy::load::directory::{self, Unloadable};
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::{Mode, OnError, PolicySpec};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, roomy, shared_loader, Harness};

use nri_wasm_e2e::{policy_spec, shared_engine as engine};

fn facts() -> Arc<Facts> {
    Arc::new(nri_wasm_e2e::test_facts())
}

fn load(name: &str, wasm: &str, settings: &str, on_error: OnError, mode: Mode, limits: Limits) -> CompiledPolicy {
    let spec = PolicySpec { mode, ..policy_spec(name, wasm, settings, on_error, limits) };
    shared_loader().load(&spec, &facts()).unwrap_or_else(|e| panic!("{e}"))
}

/// A small healthy policy: 250 ms is room on a busy machine, and small
/// enough that its neighbours in a chain keep most of the budget.
fn annotate(name: &str, tag: &str) -> CompiledPolicy {
    load(name, guests::ANNOTATE, tag, OnError::Fail, Mode::Enforce, Limits { timeout_ms: 250, ..roomy() })
}

fn faulty(name: &str, settings: &str, on_error: OnError, limits: Limits) -> CompiledPolicy {
    load(name, guests::FAULTS, settings, on_error, Mode::Enforce, limits)
}

fn request() -> pb::CreateContainerRequest {
    nri_sim::fixtures::load("CreateContainer").expect("fixture")
}

/// The request timeout of the runtimes the simulator plays by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

fn cx(budget: Duration) -> EvalContext {
    nri_wasm_e2e::eval_cx(budget)
}

/// Runs CreateContainer through `chain` with a chain budget of `budget`.
fn create(
    chain: &Chain,
    budget: Duration,
    req: &pb::CreateContainerRequest,
) -> Result<Evaluated<pb::CreateContainerResponse>, ChainError> {
    nri_wasm_e2e::block_on(chain.create_container(&cx(budget), req))
}

const TWO_S: Duration = Duration::from_secs(2);

/// The chain behind a policy dispatcher, connected to the runtime simulator
/// (a runtime with `request_timeout`), and the fixture's pod and container.
struct Served {
    h: Harness,
    conn: PluginConn,
    dispatcher: Arc<PolicyDispatcher>,
    pod: pb::PodSandbox,
    ctr: pb::Container,
}

async fn serve(chain: Chain, request_timeout: Duration) -> Served {
    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain, (*facts()).clone(), 4));
    let h = Harness::start(RuntimeProfile::v0_12().with_request_timeout(request_timeout), dispatcher.clone()).await;
    let conn = h.connect().await;
    let req = request();
    let (pod, ctr) = (req.pod.clone().unwrap(), req.container.clone().unwrap());
    Served { h, conn, dispatcher, pod, ctr }
}

fn annotations(resp: &pb::CreateContainerResponse) -> Vec<(String, String)> {
    let mut a: Vec<_> = resp
        .adjust
        .as_ref()
        .map(|a| a.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    a.sort();
    a
}

fn env(resp: &pb::CreateContainerResponse) -> Vec<(String, String)> {
    resp.adjust.as_ref().map(|a| a.env.iter().map(|e| (e.key.clone(), e.value.clone())).collect()).unwrap_or_default()
}

#[test]
fn each_policy_sees_the_container_as_the_policies_before_it_left_it() {
    let chain = Chain::new(vec![annotate("10-a", "a"), annotate("20-b", "b")], ChainSettings::default());
    let req = request();
    let before = req.container.env.len();
    let Evaluated { value: resp, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    // The annotate guest reports how many env variables it saw: the second
    // policy sees the first one's variable.
    assert_eq!(
        env(&resp),
        [("POLICY_A".to_string(), before.to_string()), ("POLICY_B".to_string(), (before + 1).to_string())]
    );
    assert_eq!(steps.len(), 2);
    assert!(steps.iter().all(|s| matches!(s.outcome, Outcome::Changed { .. })), "{steps:?}");
}

/// Through the runtime simulator: a policy reading the event piece by piece
/// (`event` interface) finds exactly what the whole event holds, and both
/// show the container as the policy before it left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pieces_of_the_event_agree_with_the_whole_as_earlier_policies_left_it() {
    let probe = load("20-probe", guests::PROBE, "read-all", OnError::Fail, Mode::Enforce, roomy());
    let chain = Chain::new(vec![annotate("10-a", "a"), probe], ChainSettings::default());
    let Served { h, conn, dispatcher: _, pod, ctr } = serve(chain, DEFAULT_TIMEOUT).await;
    let reply = conn.create_container(&pod, &ctr).await.expect("the probe finds no difference");
    // 10-a added one annotation and one env variable before the probe ran.
    let seen = format!("{}/{}/{}", pod.labels.len(), ctr.annotations.len() + 1, ctr.env.len() + 1);
    assert!(annotations(&reply).contains(&("example.com/read".to_string(), seen.clone())), "{:?}", annotations(&reply));
    conn.close().await;
    h.shutdown().await;
}

/// Every NRI event (and synchronize) reaches a policy subscribed to it, with
/// a pod and container as the runtime sent them: the probe checks each piece
/// of every event against the whole one and counts the event in its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_a_policy_and_its_pieces_agree_with_the_whole() {
    let probe = load("20-probe", guests::PROBE, "every-event", OnError::Fail, Mode::Enforce, roomy());
    let chain = Chain::new(vec![annotate("10-a", "a"), probe], ChainSettings::default());
    let Served { h, conn, dispatcher, pod, ctr } = serve(chain, DEFAULT_TIMEOUT).await;
    conn.synchronize(&[], &[], 0).await.unwrap();
    conn.run_pod_sandbox(&pod).await.unwrap();
    let update_pod = pb::UpdatePodSandboxRequest {
        pod: Some(pod.clone()).into(),
        linux_resources: Some(pb::LinuxResources::default()).into(),
        ..Default::default()
    };
    conn.update_pod_sandbox(&update_pod).await.unwrap();
    conn.post_update_pod_sandbox(&pod).await.unwrap();
    // Create-container also runs the validation step.
    conn.create_container(&pod, &ctr).await.unwrap();
    conn.post_create_container(&pod, &ctr).await.unwrap();
    conn.start_container(&pod, &ctr).await.unwrap();
    conn.post_start_container(&pod, &ctr).await.unwrap();
    let mut resources = pb::LinuxResources::default();
    resources.cpu.mut_or_insert_default().shares = Some(pb::OptionalUInt64 { value: 512, ..Default::default() }).into();
    let update = pb::UpdateContainerRequest {
        pod: Some(pod.clone()).into(),
        container: Some(ctr.clone()).into(),
        linux_resources: Some(resources).into(),
        ..Default::default()
    };
    conn.update_container(&update).await.unwrap();
    conn.post_update_container(&pod, &ctr).await.unwrap();
    conn.stop_container(&pod, &ctr).await.unwrap();
    conn.remove_container(&pod, &ctr).await.unwrap();
    conn.stop_pod_sandbox(&pod).await.unwrap();
    conn.remove_pod_sandbox(&pod).await.unwrap();
    let state = dispatcher.states().snapshot("20-probe");
    let seen: Vec<_> =
        state.iter().filter(|(k, _)| k.starts_with("seen/")).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(seen.len(), 15, "13 events, validation and synchronize: {seen:?}");
    assert!(seen.iter().all(|(_, n)| n == "1"), "each exactly once: {seen:?}");
    conn.close().await;
    h.shutdown().await;
}

/// Nothing survives from one call to the next, though the engine keeps each
/// policy's memory slot warm: a global counter reads 1 in every call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_of_a_policy_starts_afresh_in_every_call() {
    let probe = load("20-probe", guests::PROBE, "global", OnError::Fail, Mode::Enforce, roomy());
    let chain = Chain::new(vec![probe], ChainSettings::default());
    let Served { h, conn, dispatcher: _, pod, ctr } = serve(chain, DEFAULT_TIMEOUT).await;
    for run in 0..20 {
        let reply = conn.create_container(&pod, &ctr).await.unwrap();
        assert!(annotations(&reply).contains(&("example.com/global".to_string(), "1".to_string())), "run {run}");
    }
    conn.close().await;
    h.shutdown().await;
}

/// A reply of tens of thousands of removal markers, updates and evictions,
/// within the 1 MiB reply limit, is merged in linear time: the runtime gets
/// its answer inside its request timeout (the simulated runtime's own: a
/// quadratic merge of this reply takes seconds, and a late answer is a
/// timeout, which fails the run), and the conflict at the end of the reply
/// is that policy's failure, handled by its on-error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_markers_updates_and_evictions_is_merged_in_time() {
    let request_timeout = Duration::from_secs(2);
    for on_error in [OnError::Ignore, OnError::Fail] {
        // A time limit no busy machine reaches: this is about the work being
        // linear, which the limit of the host work test below checks.
        let generous = Limits { timeout_ms: 900, ..Limits::default() };
        let flood = load("20-flood", guests::FAULTS, "flood", on_error, Mode::Enforce, generous);
        let chain = Chain::new(vec![annotate("10-a", "a"), flood, annotate("30-c", "c")], ChainSettings::default());
        let Served { h, conn, dispatcher: _, pod, ctr } = serve(chain, request_timeout).await;
        for run in 0..3 {
            let result = conn.create_container(&pod, &ctr).await;
            match on_error {
                OnError::Ignore => {
                    let reply = result.unwrap_or_else(|e| panic!("run {run}: {e}"));
                    let keys: Vec<_> = annotations(&reply).into_iter().map(|(k, _)| k).collect();
                    assert_eq!(keys, ["example.com/a", "example.com/c"], "run {run}");
                    assert!(reply.update.is_empty() && reply.evict.is_empty(), "nothing of the flood is kept");
                    assert!(env(&reply).iter().all(|(k, _)| !k.starts_with('-')), "no marker of the flood");
                }
                OnError::Fail => {
                    let err = result.expect_err("the flood's conflict fails the event");
                    let SimError::Failed { status, .. } = &err else { panic!("run {run}: {err}") };
                    let message = status.message();
                    assert!(message.contains("20-flood") && message.contains("invalid output"), "run {run}: {message}");
                    assert!(message.contains("memory limit") && message.contains("twice"), "{message}");
                }
            }
        }
        conn.close().await;
        h.shutdown().await;
    }
}

/// Audit mode fails nothing either: a trap of an audited policy with
/// `on-error = "fail"` is reported, and the event goes on; so does an audited
/// policy that cannot be loaded.
#[test]
fn an_audited_policy_that_fails_does_not_fail_the_event() {
    let trapping = load("20-audit", guests::FAULTS, "unreachable", OnError::Fail, Mode::Audit, roomy());
    let spec = PolicySpec { mode: Mode::Audit, ..policy_spec("30-broken", "broken", "", OnError::Fail, roomy()) };
    let e = shared_loader()
        .load_bytes(&policy_spec("30-broken", "inline", "", OnError::Fail, roomy()), b"junk", &facts())
        .unwrap_err();
    let broken = Unloadable { name: spec.name.clone(), reason: e.to_string(), mandatory: directory::mandatory(&spec) };
    let chain =
        Chain::new(vec![annotate("10-a", "a"), trapping], ChainSettings::default()).with_unloadable(vec![broken]);
    assert!(!chain.unloadable()[0].mandatory, "an audited policy that failed to load blocks nothing");
    let Evaluated { value: resp, steps, .. } = create(&chain, TWO_S, &request()).unwrap();
    assert_eq!(annotations(&resp).iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["example.com/a"]);
    assert!(steps[1].audit);
    assert!(
        matches!(&steps[1].outcome, Outcome::Failed { failure: PolicyFailure::Call(_), ignored: true }),
        "reported, not fatal: {steps:?}"
    );
}

#[test]
fn audit_mode_reports_but_changes_and_denies_nothing() {
    let audited = load("20-audit", guests::ANNOTATE, "audited", OnError::Fail, Mode::Audit, roomy());
    let chain = Chain::new(vec![annotate("10-a", "a"), audited], ChainSettings::default());
    let mut req = request();
    let Evaluated { value: resp, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    assert_eq!(annotations(&resp).iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["example.com/a"]);
    // It reports what it would have changed.
    let Step { policy, audit: true, outcome: Outcome::Changed { change: Some(would) }, .. } = &steps[1] else {
        panic!("{steps:?}")
    };
    assert_eq!(policy, "20-audit");
    let annotations = would.adjust().map(|a| a.annotations.clone()).unwrap_or_default();
    assert!(annotations.contains_key("example.com/audited"), "{would}");
    assert!(would.to_string().contains("example.com/audited"), "the log line's text: {would}");

    // The annotate guest denies containers annotated example.com/deny.
    req.container.mut_or_insert_default().annotations.insert("example.com/deny".into(), "no".into());
    let audit_only = load("20-audit", guests::ANNOTATE, "audited", OnError::Fail, Mode::Audit, roomy());
    let chain = Chain::new(vec![audit_only], ChainSettings::default());
    let Evaluated { value: _, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    assert!(steps[0].audit);
    assert!(matches!(&steps[0].outcome, Outcome::Denied { reason } if reason.contains("denied by annotation")));

    let chain = Chain::new(vec![annotate("20-enforce", "x")], ChainSettings::default());
    let err = create(&chain, TWO_S, &req).unwrap_err();
    assert!(matches!(&err, ChainError::Denied { policy, .. } if policy == "20-enforce"), "{err}");
    let text = err.to_string();
    assert!(text.contains(&req.container.id) && text.contains("denied by annotation: no"), "{text}");
}

/// Three failures in a row quarantine a policy for its back-off, by the
/// chain's clock: a manual one here, moved on instead of slept through.
#[test]
fn a_failing_policy_is_quarantined_then_retried() {
    const BACKOFF_MS: u64 = 30_000;
    let settings = ChainSettings { breaker_failures: 3, breaker_backoff_ms: BACKOFF_MS, ..ChainSettings::default() };
    let p = faulty("20-trap", "unreachable", OnError::Ignore, roomy());
    let clock = Arc::new(ManualClock::new());
    let chain = Chain::new(vec![annotate("10-a", "a"), p], settings).with_clock(clock.clone());
    let req = request();
    let failure_of = |steps: &[Step]| match steps.last().map(|s| &s.outcome) {
        Some(Outcome::Failed { failure, ignored: true }) => failure.clone(),
        other => panic!("expected an ignored failure, got {other:?}"),
    };
    for _ in 0..3 {
        let Evaluated { value: _, steps, .. } = create(&chain, TWO_S, &req).unwrap();
        assert!(matches!(failure_of(&steps), PolicyFailure::Call(_)));
    }
    // Open: the policy is not called (no fuel, no time), its on-error applies.
    let Evaluated { value: resp, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    assert!(matches!(failure_of(&steps), PolicyFailure::Quarantined { failures: 3, .. }));
    let last = steps.last().unwrap();
    assert_eq!((last.fuel, last.elapsed), (0, Duration::ZERO), "a quarantined policy is not called");
    assert_eq!(annotations(&resp).len(), 1, "the healthy policy still applies");
    // A millisecond short of the back-off it is still quarantined.
    clock.advance(Duration::from_millis(BACKOFF_MS - 1));
    let Evaluated { value: _, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    assert!(matches!(failure_of(&steps), PolicyFailure::Quarantined { .. }), "{steps:?}");
    // After the back-off the policy is tried again (and fails again), on
    // probation: that one failure sends it straight back.
    clock.advance(Duration::from_millis(1));
    let Evaluated { value: _, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    assert!(matches!(failure_of(&steps), PolicyFailure::Call(_)), "{steps:?}");
    let Evaluated { value: _, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    assert!(matches!(failure_of(&steps), PolicyFailure::Quarantined { .. }), "{steps:?}");

    // With on-error = fail a quarantined policy fails the event, and says so.
    let settings = ChainSettings { breaker_failures: 1, breaker_backoff_ms: 60_000, ..ChainSettings::default() };
    let chain = Chain::new(vec![faulty("20-trap", "unreachable", OnError::Fail, roomy())], settings);
    assert!(create(&chain, TWO_S, &req).is_err());
    let err = create(&chain, TWO_S, &req).unwrap_err().to_string();
    assert!(err.contains("20-trap") && err.contains("quarantined after 1 consecutive failures"), "{err}");
}

/// A chain built to replace another (a reload) keeps the failure history of
/// every policy it keeps: a quarantined policy stays quarantined for the
/// rest of its back-off however often the directory is reloaded, and its
/// count goes on. A policy whose component or spec changed starts afresh,
/// as does a new one; where the component came from does not count.
#[test]
fn a_reload_keeps_the_quarantine_of_the_policies_it_keeps() {
    const BACKOFF_MS: u64 = 30_000;
    let settings = ChainSettings { breaker_failures: 2, breaker_backoff_ms: BACKOFF_MS, ..ChainSettings::default() };
    let trap = Arc::new(faulty("20-trap", "unreachable", OnError::Ignore, roomy()));
    let healthy = Arc::new(annotate("10-a", "a"));
    let clock = Arc::new(ManualClock::new());
    let first = Chain::of(vec![healthy.clone(), trap.clone()], settings).with_clock(clock.clone());
    let req = request();
    let last_outcome = |chain: &Chain| {
        let Evaluated { value: _, steps, .. } = create(chain, TWO_S, &req).unwrap();
        match steps.last().map(|s| &s.outcome) {
            Some(Outcome::Failed { failure, ignored: true }) => failure.clone(),
            other => panic!("expected an ignored failure, got {other:?}"),
        }
    };
    // One failure, then a reload that adds a policy: the count goes on, so
    // the next failure trips the breaker.
    assert!(matches!(last_outcome(&first), PolicyFailure::Call(_)));
    let added = Arc::new(annotate("15-b", "b"));
    let second = Chain::of(vec![healthy.clone(), added.clone(), trap.clone()], settings).after(&first);
    assert_eq!(second.entries()[2].failures(), 1, "the count survives the reload");
    assert!(matches!(last_outcome(&second), PolicyFailure::Call(_)));
    assert!(second.entries()[2].quarantined());
    // Reloaded again, the trap loaded anew from the same files (another
    // compiled copy of the same component and spec): still quarantined, by
    // the clock of the chain it replaced.
    let reloaded = Arc::new(faulty("20-trap", "unreachable", OnError::Ignore, roomy()));
    assert!(!Arc::ptr_eq(&reloaded, &trap));
    let third = Chain::of(vec![healthy.clone(), added.clone(), reloaded.clone()], settings).after(&second);
    assert!(third.entries()[2].quarantined(), "a reload is no way out of quarantine");
    assert!(matches!(last_outcome(&third), PolicyFailure::Quarantined { failures: 2, .. }));
    assert!(!third.entries()[1].quarantined() && third.entries()[1].failures() == 0, "a new policy starts afresh");
    clock.advance(Duration::from_millis(BACKOFF_MS - 1));
    assert!(third.entries()[2].quarantined(), "the back-off is counted from the trip, on the same clock");
    clock.advance(Duration::from_millis(1));
    assert!(!third.entries()[2].quarantined());
    // On probation after its back-off: one failure sends it back.
    assert!(matches!(last_outcome(&third), PolicyFailure::Call(_)));
    assert!(third.entries()[2].quarantined());

    // The same component under another spec is another policy: fresh.
    let changed = Arc::new(faulty("20-trap", "unreachable", OnError::Fail, roomy()));
    let fourth = Chain::of(vec![healthy.clone(), changed], settings).after(&third);
    assert!(!fourth.entries()[1].quarantined() && fourth.entries()[1].failures() == 0);
    // So is another component under the same name and settings.
    let other = Arc::new(load("20-trap", guests::ANNOTATE, "unreachable", OnError::Ignore, Mode::Enforce, roomy()));
    let fifth = Chain::of(vec![healthy.clone(), other], settings).after(&third);
    assert!(!fifth.entries()[1].quarantined());
    // A new provenance alone (a moved tag that resolved to what runs) is
    // still the same policy.
    let mut moved = CompiledPolicy::clone(&reloaded);
    moved.spec.provenance = Some(nri_wasm::registry::Provenance {
        source: "registry.invalid/trap:v1".into(),
        manifest: format!("sha256:{}", "0".repeat(64)),
        signer: None,
        from_cache: None,
    });
    let sixth = Chain::of(vec![healthy, Arc::new(moved)], settings).after(&third);
    assert!(sixth.entries()[1].quarantined());
}

/// An early policy with a long time limit that loops cannot eat the time of
/// the policies after it: it is cut where the later ones' shares begin, the
/// later policy runs, and the loop's error names the limit it really had.
#[test]
fn a_looping_policy_leaves_the_later_ones_their_share() {
    let looping = Limits { fuel: u64::MAX / 2, timeout_ms: 10_000, ..Limits::default() };
    for on_error in [OnError::Ignore, OnError::Fail] {
        let chain = Chain::new(
            vec![
                faulty("10-loop", "loop", on_error, looping),
                load("20-a", guests::ANNOTATE, "a", OnError::Fail, Mode::Enforce, roomy()),
            ],
            ChainSettings::default(),
        );
        // A budget of 1 s for 10 s + 2 s of limits: shares of 500 ms each (each limit capped at one level).
        match (on_error, create(&chain, Duration::from_secs(1), &request())) {
            (OnError::Ignore, Ok(Evaluated { value: resp, steps, .. })) => {
                assert_eq!(annotations(&resp).iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["example.com/a"]);
                let Outcome::Failed { failure, ignored: true } = &steps[0].outcome else { panic!("{steps:?}") };
                let text = failure.to_string();
                assert!(text.contains("its timeout-ms is 10000; the chain's budget left it"), "{text}");
                assert!(!text.contains("time limit of 10000 ms"), "{text}");
            }
            (OnError::Fail, Err(err)) => {
                let text = err.to_string();
                assert!(text.contains("10-loop") && text.contains("the chain's budget left it"), "{text}");
            }
            (_, other) => panic!("{on_error:?}: {other:?}"),
        }
    }
}

#[test]
fn the_same_input_gives_the_same_output_and_the_same_fuel() {
    let chain = Chain::new(vec![annotate("10-a", "a"), annotate("20-b", "b")], ChainSettings::default());
    let req = request();
    let fuel = |steps: &[Step]| -> Vec<u64> { steps.iter().map(|s| s.fuel).collect() };
    let Evaluated { value: first, steps, .. } = create(&chain, TWO_S, &req).unwrap();
    let first_fuel = fuel(&steps);
    assert!(first_fuel.iter().all(|f| *f > 0));
    for _ in 0..50 {
        let Evaluated { value: again, steps, .. } = create(&chain, TWO_S, &req).unwrap();
        assert_eq!(again, first);
        assert_eq!(fuel(&steps), first_fuel);
    }
}

#[test]
fn randomness_is_seeded_per_policy_so_results_repeat() {
    let chain = Chain::new(vec![faulty("10-random", "random", OnError::Fail, roomy())], ChainSettings::default());
    let Evaluated { value: first, steps: _, .. } = create(&chain, TWO_S, &request()).unwrap();
    let order = annotations(&first);
    assert_eq!(order.len(), 1);
    let sorted: Vec<String> = (0..32).map(|i: u32| i.to_string()).collect();
    assert_ne!(order[0].1, sorted.join(","), "the hash map really is randomised");
    for _ in 0..10 {
        let Evaluated { value: again, steps: _, .. } = create(&chain, TWO_S, &request()).unwrap();
        assert_eq!(annotations(&again), order);
    }
}

#[test]
fn policy_validation_sees_the_merged_result_and_may_reject_it() {
    let validator = || faulty("90-validate", "validate", OnError::Fail, roomy());
    let chain = Chain::new(vec![annotate("10-a", "a"), validator()], ChainSettings::default());
    assert!(chain.wants(nri_wasm::nri::EventKind::CreateContainer));
    let Evaluated { value: resp, steps, .. } = create(&chain, TWO_S, &request()).unwrap();
    assert_eq!(annotations(&resp).len(), 1);
    assert!(
        matches!(&steps[1], Step { policy, outcome: Outcome::Unchanged, .. } if policy == "90-validate"),
        "{steps:?}"
    );

    let chain =
        Chain::new(vec![annotate("10-a", "a"), annotate("20-f", "forbidden"), validator()], ChainSettings::default());
    let err = create(&chain, TWO_S, &request()).unwrap_err();
    assert!(
        matches!(&err, ChainError::Denied { policy, event, .. } if policy == "90-validate" && event == "ValidateContainerAdjustment"),
        "{err}"
    );
    assert!(err.to_string().contains("example.com/forbidden set by 20-f"), "{err}");
}

#[test]
fn a_directory_loads_in_order_and_bad_files_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(guests::ANNOTATE, dir.path().join("20-second.wasm")).unwrap();
    std::fs::write(dir.path().join("20-second.toml"), "settings = \"second\"\n").unwrap();
    std::fs::copy(guests::ANNOTATE, dir.path().join("10-first.wasm")).unwrap();
    std::fs::write(dir.path().join("10-first.toml"), "settings = \"first\"\n").unwrap();
    std::fs::write(dir.path().join("30-junk.wasm"), b"password=hunter2\nnot a component").unwrap();
    std::fs::write(dir.path().join("30-junk.toml"), "on-error = \"fail\"\n").unwrap();
    std::fs::copy(guests::ANNOTATE, dir.path().join("40-bad-settings.wasm")).unwrap();
    std::fs::write(dir.path().join("40-bad-settings.toml"), "settings = \"two words\"\n").unwrap();
    let options = nri_wasm::policy::spec::manifest::ReadOptions { defaults: roomy(), strict_permissions: false };
    let loaded = nri_wasm_e2e::block_on(directory::load_dir(&shared_loader(), dir.path(), options, &facts()));
    let names: Vec<_> = loaded.policies.iter().map(|p| p.name().to_string()).collect();
    assert_eq!(names, ["10-first", "20-second"]);
    let problems: Vec<String> = loaded.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("30-junk") && problems[0].contains("not a WebAssembly file"), "{problems:?}");
    assert!(!problems[0].contains("hunter2"), "nothing of a mistaken file is echoed: {problems:?}");
    assert!(problems[1].contains("40-bad-settings") && problems[1].contains("single word"));
    // 30-junk is mandatory (on-error = fail): creation fails until it is fixed.
    let chain = Chain::new(loaded.policies, ChainSettings::default()).with_unloadable(loaded.unloadable);
    assert_eq!(chain.unloadable().iter().filter(|u| u.mandatory).count(), 1);
    let err = create(&chain, TWO_S, &request()).unwrap_err().to_string();
    assert!(err.contains("30-junk") && err.contains("not loaded"), "{err}");
}

/// With `strict-permissions`, a directory's files are the operator's only
/// if root owns them and no one else may write them: a policy file or a
/// settings file (its grant, its limits) someone else could have written
/// leaves that policy out, named with its file and what breaks the rule,
/// and a mandatory one fails creation until it is fixed. The same files
/// load once they keep the rule. Running as another user than root, only
/// the owner's rule can be shown (no file of root's can be made).
#[test]
fn strict_permissions_leave_out_policies_whose_files_others_may_write() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);
    let mode = |name: &str, m: u32| std::fs::set_permissions(file(name), std::fs::Permissions::from_mode(m)).unwrap();
    std::fs::copy(guests::ANNOTATE, file("10-wasm-open.wasm")).unwrap();
    std::fs::write(file("10-wasm-open.toml"), "settings = \"a\"\non-error = \"fail\"\n").unwrap();
    std::fs::copy(guests::ANNOTATE, file("20-toml-open.wasm")).unwrap();
    std::fs::write(file("20-toml-open.toml"), "settings = \"b\"\ngrant = [\"hooks\"]\n").unwrap();
    std::fs::copy(guests::ANNOTATE, file("30-kept.wasm")).unwrap();
    std::fs::write(file("30-kept.toml"), "settings = \"c\"\n").unwrap();
    for name in ["10-wasm-open.toml", "20-toml-open.wasm", "30-kept.wasm", "30-kept.toml"] {
        mode(name, 0o644);
    }
    mode("10-wasm-open.wasm", 0o666);
    mode("20-toml-open.toml", 0o620);
    let options = nri_wasm::policy::spec::manifest::ReadOptions { defaults: roomy(), strict_permissions: true };
    let load = || nri_wasm_e2e::block_on(directory::load_dir(&shared_loader(), dir.path(), options, &facts()));
    let loaded = load();
    let names: Vec<_> = loaded.policies.iter().map(|p| p.name().to_string()).collect();
    let problems: Vec<String> = loaded.problems.iter().map(|p| p.to_string()).collect();
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(names.is_empty(), "no file of root's: {names:?}");
        assert!(problems.iter().all(|p| p.contains("not by root")), "{problems:?}");
        return;
    }
    assert_eq!(names, ["30-kept"], "{problems:?}");
    assert_eq!(problems.len(), 2, "{problems:?}");
    let about = |name: &str| problems.iter().find(|p| p.contains(&format!("policy {name}"))).expect(name).clone();
    let (wasm, toml) =
        (file("10-wasm-open.wasm").display().to_string(), file("20-toml-open.toml").display().to_string());
    for (problem, path, bits) in [(about("10-wasm-open"), &wasm, "666"), (about("20-toml-open"), &toml, "620")] {
        assert!(
            problem.contains(path.as_str())
                && problem.contains(&format!("writable by group or others (mode {bits})"))
                && problem.contains("strict-permissions"),
            "{problem}"
        );
    }
    // A settings file refused counts as mandatory (what it says is not
    // known); the policy file's own on-error = fail makes it so too.
    let chain = Chain::new(loaded.policies, ChainSettings::default()).with_unloadable(loaded.unloadable);
    assert_eq!(chain.unloadable().iter().filter(|u| u.mandatory).count(), 2);
    let err = create(&chain, TWO_S, &request()).unwrap_err().to_string();
    assert!(err.contains("not loaded"), "{err}");
    // Someone else's, however its bits read.
    mode("20-toml-open.toml", 0o644);
    std::os::unix::fs::chown(file("20-toml-open.toml"), Some(1000), None).unwrap();
    let problems: Vec<String> = load().problems.iter().map(|p| p.to_string()).collect();
    assert!(problems.iter().any(|p| p.contains(&toml) && p.contains("owned by uid 1000, not by root")), "{problems:?}");
    std::os::unix::fs::chown(file("20-toml-open.toml"), Some(0), None).unwrap();
    mode("10-wasm-open.wasm", 0o644);
    let loaded = load();
    let names: Vec<_> = loaded.policies.iter().map(|p| p.name().to_string()).collect();
    assert_eq!(names, ["10-wasm-open", "20-toml-open", "30-kept"], "{:?}", loaded.problems);
}

/// 30 policies that loop forever: the runtime still gets its answer in
/// time, and the policy after them still gets its share of the budget. The
/// simulated runtime's own request timeout is the judge of "in time".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_looping_policies_answer_inside_the_request_timeout() {
    let request_timeout = Duration::from_millis(4_000);
    for on_error in [OnError::Ignore, OnError::Fail] {
        // The loops' own limits add up to 6 s, past the request timeout:
        // only the budget's shares keep the answer in time.
        let looping = Limits { fuel: u64::MAX / 2, timeout_ms: 200, ..roomy() };
        let mut policies: Vec<_> =
            (0..30).map(|i| faulty(&format!("{:02}-loop", i + 10), "loop", on_error, looping)).collect();
        policies.push(load("90-last", guests::ANNOTATE, "last", on_error, Mode::Enforce, roomy()));
        let chain = Chain::new(policies, ChainSettings { budget_fraction: 0.9, ..ChainSettings::default() });
        let Served { h, conn, dispatcher: _, pod, ctr } = serve(chain, request_timeout).await;
        for run in 0..3 {
            // The runtime's own request timeout is the bound: an answer too
            // late is its timeout error (and the plugin dropped), which
            // neither arm below takes.
            let result = conn.create_container(&pod, &ctr).await;
            assert!(!conn.is_closed(), "{on_error:?} run {run}: the runtime dropped the plugin: {result:?}");
            match on_error {
                // Limits of 30 x 200 ms + 2 s in a budget of 3.6 s: every
                // limit is cut to a share of about 116 ms; each loop is cut
                // at its share, and the last policy runs in its own.
                OnError::Ignore => {
                    let reply = result.unwrap_or_else(|e| panic!("run {run}: {e}"));
                    assert!(
                        annotations(&reply).contains(&("example.com/last".to_string(), ctr.name.clone())),
                        "90-last got its share: {:?}",
                        annotations(&reply)
                    );
                }
                OnError::Fail => {
                    // The policy's failure, not the runtime's timeout.
                    let err = result.unwrap_err();
                    let SimError::Failed { status, .. } = &err else { panic!("run {run}: {err}") };
                    let message = status.message();
                    assert!(message.contains("10-loop") && message.contains("time limit"), "run {run}: {message}");
                }
            }
        }
        conn.close().await;
        h.shutdown().await;
    }
}

/// Two policies setting the memory limit conflict as two native plugins
/// would: the event fails, whatever the later policy's `on-error` (a
/// conflict is the chain's, not one policy's failure). A later policy with
/// `on-conflict = "yield"` loses instead: its whole reply is dropped (its
/// unrelated env too) and the conflict is reported; so it is in audit mode.
#[test]
fn a_conflict_fails_the_event_unless_the_later_policy_yields() {
    use nri_wasm::policy::spec::manifest::OnConflict;
    let first = load("10-a", guests::REPLAY, "memory-limit 1000", OnError::Fail, Mode::Enforce, roomy());
    let second = |on_error, on_conflict, mode| {
        let spec = PolicySpec {
            mode,
            on_conflict,
            ..policy_spec("20-b", guests::REPLAY, "memory-limit 2000; env X=1", on_error, roomy())
        };
        shared_loader().load(&spec, &facts()).unwrap()
    };
    for on_error in [OnError::Ignore, OnError::Fail] {
        let chain = Chain::new(
            vec![first.clone(), second(on_error, OnConflict::Fail, Mode::Enforce)],
            ChainSettings::default(),
        );
        let err = create(&chain, TWO_S, &request()).unwrap_err();
        assert!(matches!(err, ChainError::Conflict { .. }), "{on_error:?}: {err}");
        let text = err.to_string();
        assert!(text.contains("policies \"10-a\" and \"20-b\" both tried to set") && text.contains("memory"), "{text}");
    }
    for (on_conflict, mode) in [(OnConflict::Yield, Mode::Enforce), (OnConflict::Fail, Mode::Audit)] {
        let chain = Chain::new(vec![first.clone(), second(OnError::Fail, on_conflict, mode)], ChainSettings::default());
        let Evaluated { value: resp, steps, .. } = create(&chain, TWO_S, &request()).unwrap();
        let adjust = resp.adjust.as_ref().unwrap();
        assert_eq!(adjust.linux.resources.memory.limit.value, 1000, "the first setter keeps the field");
        assert!(adjust.env.iter().all(|e| e.key != "X"), "the loser's whole reply is dropped");
        assert!(
            matches!(&steps[1].outcome, Outcome::Yielded { conflict } if conflict.contains("both tried to set")),
            "{on_conflict:?} {mode:?}: reported: {steps:?}"
        );
    }
}

/// The warnings that a policy's time limit exceeds the chain's budget are
/// logged when a chain is installed, not only when the runtime configures
/// the host (which is usually before the policies have loaded): a policy
/// whose `timeout-ms` (5 s) is longer than the budget (1 s of the runtime's
/// 2 s) loaded after Configure is warned about once, and installing the
/// same chain again, or Configure again, says nothing new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_warnings_are_logged_when_a_chain_is_installed_after_configure() {
    #[derive(Clone, Default)]
    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), Chain::default(), (*facts()).clone(), 2).pending());
    let h = Harness::start_policies(RuntimeProfile::v0_12(), dispatcher.clone()).await;
    let _conn = h.connect().await;
    let slow = || {
        let limits = Limits { timeout_ms: 5_000, ..roomy() };
        Chain::new(
            vec![load("10-slow", guests::ANNOTATE, "slow", OnError::Ignore, Mode::Enforce, limits)],
            ChainSettings::default(),
        )
    };
    let (first, again) = (slow(), slow());
    let sink = Sink::default();
    let writer = {
        let sink = sink.clone();
        move || sink.clone()
    };
    let subscriber = tracing_subscriber::fmt().with_writer(writer).with_ansi(false).finish();
    {
        use tracing_subscriber::util::SubscriberInitExt as _;
        let _logging = subscriber.set_default();
        dispatcher.replace_chain(first);
        dispatcher.replace_chain(again);
    }
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    let warning = "policy 10-slow: timeout-ms 5000 is longer than the chain's budget of 1000 ms";
    assert_eq!(log.matches(warning).count(), 1, "warned once when the chain was installed:\n{log}");
    h.shutdown().await;
}

/// A policy skipped for want of time says where the chain's budget went:
/// here, two creates at once with one call slot (`max-concurrent-calls =
/// 1`); the first holds the slot while its policy loops through the whole
/// budget, so the second waits for the slot until its deadline, and its
/// policy is skipped naming that wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_skipped_for_time_says_where_the_budget_went() {
    use nri_wasm::nri::Dispatcher as _;
    let looping = Limits { fuel: u64::MAX / 2, timeout_ms: 10_000, ..roomy() };
    // A call needs 900 ms left to start: the second create, whatever the
    // machine's load, finds less once the first lets the slot go.
    let settings = ChainSettings { min_call_ms: 900, ..ChainSettings::default() };
    let chain = Chain::new(vec![faulty("10-loop", "loop", OnError::Fail, looping)], settings);
    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain, (*facts()).clone(), 1));
    let (first, second) = (dispatcher.clone(), dispatcher.clone());
    let holds = tokio::spawn(async move { first.create_container(request()).await });
    // The first takes the slot before the second asks for it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waits = tokio::spawn(async move { second.create_container(request()).await });
    let held = holds.await.unwrap().unwrap_err().to_string();
    assert!(held.contains("10-loop") && held.contains("time limit"), "{held}");
    let waited = waits.await.unwrap().unwrap_err().to_string();
    assert!(waited.contains("10-loop") && waited.contains("no time left in the chain's budget"), "{waited}");
    // The default budget is half of a 2 s request timeout: the second
    // waited for the slot until the first's 1,000 ms were over (about
    // 900 ms, less if this thread was slow to send it); no policy ran
    // before this one, so none is blamed, however slow the machine.
    let slot_ms = waited
        .split(" ms for a call slot")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no slot wait in: {waited}"));
    assert!(slot_ms >= 200, "{waited}");
    assert!(waited.contains("(max-concurrent-calls); no policy ran before this one, the chain's own work"), "{waited}");
}

/// A policy skipped for want of time after another one ran names what the
/// one before it took: a first policy loops until its 2,000 ms are over,
/// which leaves the second less than the 1,000 ms a call needs to start
/// (`min-call-ms`), however fast or slow the machine is. An optional policy
/// still loading (reported, not called) is not counted among those before.
#[test]
fn a_policy_skipped_after_a_slow_one_names_what_that_one_took() {
    let looping = Limits { fuel: u64::MAX / 2, timeout_ms: 2_000, ..roomy() };
    let next =
        load("20-next", guests::ANNOTATE, "n", OnError::Fail, Mode::Enforce, Limits { timeout_ms: 1_000, ..roomy() });
    let settings = ChainSettings { min_call_ms: 1_000, ..ChainSettings::default() };
    let loading = Pending::new("05-loading", false, std::time::Instant::now());
    let chain = Chain::new(vec![faulty("10-loop", "loop", OnError::Ignore, looping), next], settings)
        .with_pending(vec![loading]);
    let skipped = create(&chain, Duration::from_secs(3), &request()).unwrap_err().to_string();
    assert!(skipped.contains("20-next") && skipped.contains("no time left in the chain's budget"), "{skipped}");
    let took = skipped
        .split("the policy before this one took ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no time of the policy before in: {skipped}"));
    // The loop ran until its own limit or its share of the wall clock, both
    // 2,000 ms when the plan was made (unless the plan came more than a
    // second after the event's deadline was set).
    assert!(took >= 1_000, "{skipped}");
}
