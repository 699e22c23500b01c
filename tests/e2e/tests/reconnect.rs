//! Staying connected: the runtime goes away again and again, the host comes
//! back every time and serves events after each registration. A new
//! subscription is made before the old one is broken: a second connection
//! registers with it while the first serves, takes over at the first event
//! the runtime sends it, and the first is closed; each event is evaluated
//! once, whatever order the runtime calls the two in
//! (`host/src/nri/handover.rs`), and none goes ahead without the policies.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use nri_sim::plugins::{Outcome, Plugins, Ties};
use nri_sim::workload::Workload;
use nri_sim::{PluginConn, RuntimeProfile, Simulator};
use nri_wasm::config::Config;
use nri_wasm::nri::{EventKind, EventMask, Phase, Status, Supervisor};
use nri_wasm::policy::load::compile::Compiler;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{options, Harness, Recorder, Replies, Seen};
use nri_wasm_test_support::guests;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_closes_in_a_row_twenty_re_registrations() {
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let w = Workload::generate(2, 1);
    let mut status = h.handles.status.clone();
    for round in 0..=20u64 {
        let conn = h.connect().await;
        conn.synchronize(&w.pods, &w.containers, 0).await.unwrap();
        conn.create_container(&w.pods[0], &w.containers[0]).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), status.wait_for(|s| s.registrations == round + 1))
            .await
            .expect("registration counted")
            .unwrap();
        assert!(h.handles.link.is_connected());
        conn.close().await;
        tokio::time::timeout(Duration::from_secs(5), status.wait_for(|s| s.phase != Phase::Registered))
            .await
            .expect("host notices the closed connection")
            .unwrap();
    }
    let seen = recorder.seen();
    let creates = seen.iter().filter(|s| matches!(s, Seen::CreateContainer(_))).count();
    let disconnects = seen.iter().filter(|s| matches!(s, Seen::Disconnected)).count();
    assert_eq!(creates, 21, "an event served after every registration");
    assert_eq!(disconnects, 21, "the dispatcher is told of every lost connection");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_waits_for_a_runtime_that_is_not_there_yet() {
    let recorder = Recorder::new(Replies::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.sock");
    let stop = tokio_util::sync::CancellationToken::new();
    let sup = nri_wasm::nri::Supervisor::new(
        nri_wasm_e2e::options(nri_wasm::nri::Endpoint::Socket(path.clone())),
        recorder.clone(),
        stop.clone(),
    );
    let task = tokio::spawn(sup.run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished());
    let sim = nri_sim::Simulator::listen(&path, RuntimeProfile::v0_12()).await.unwrap();
    let mut conn = tokio::time::timeout(Duration::from_secs(5), sim.accept()).await.unwrap().unwrap();
    conn.configure().await.unwrap();
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_containers_reaches_the_runtime_and_reports_failures() {
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder).await;
    let mut conn = h.connect().await;
    // The host takes the link once its registration call returns, which
    // may be after the runtime's Configure reached it on a loaded machine.
    for _ in 0..500 {
        if h.handles.link.is_connected() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    conn.fail_updates_for(&["b"]);
    let update = |id: &str| nri_wasm_api::api::ContainerUpdate { container_id: id.into(), ..Default::default() };
    let evict =
        nri_wasm_api::api::ContainerEviction { container_id: "c".into(), reason: "oom".into(), ..Default::default() };
    let failed = h
        .handles
        .link
        .update_containers(vec![update("a"), update("b")], vec![evict.clone()], Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(failed, vec![update("b")]);
    let req = conn.next_update_request(Duration::from_secs(2)).await.unwrap();
    assert_eq!(req.update, vec![update("a"), update("b")]);
    assert_eq!(req.evict, vec![evict]);
    conn.close().await;
    let mut status = h.handles.status.clone();
    status.wait_for(|s| s.phase != Phase::Registered).await.unwrap();
    let err = h.handles.link.update_containers(vec![update("a")], vec![], Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, nri_wasm::nri::session::LinkError::NotConnected), "{err}");
    h.shutdown().await;
}

/// The recorder's answer to every CreateContainer: one annotation, so that
/// an answer that carries it twice (two connections' evaluations) is a
/// conflict at the runtime, and one that lacks it shows.
fn annotating() -> Replies {
    let mut create = pb::CreateContainerResponse::default();
    create.adjust.mut_or_insert_default().annotations.insert("example.com/evaluated".into(), "yes".into());
    Replies { events: Some(EventMask::EMPTY.with(EventKind::CreateContainer)), create, ..Default::default() }
}

fn evaluated(reply: &pb::CreateContainerResponse) -> bool {
    reply.adjust.as_ref().is_some_and(|a| a.annotations.contains_key("example.com/evaluated"))
}

fn creates(recorder: &Recorder) -> usize {
    recorder.seen().iter().filter(|s| matches!(s, Seen::CreateContainer(_))).count()
}

/// The events a reload adds: the recorder then wants StartContainer too.
fn with_start() -> EventMask {
    EventMask::EMPTY.with(EventKind::CreateContainer).with(EventKind::StartContainer)
}

async fn wait_status(status: &mut watch::Receiver<Status>, what: &str, check: impl Fn(&Status) -> bool) {
    tokio::time::timeout(Duration::from_secs(30), status.wait_for(check))
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 30 s"))
        .unwrap();
}

/// The first connection, registered, configured and synchronised; the
/// subscription then changes and the host registers a second connection
/// while the first still serves.
async fn old_and_new(h: &Harness, recorder: &Recorder) -> (PluginConn, PluginConn) {
    let old = h.connect().await;
    old.synchronize(&[], &[], 0).await.unwrap();
    assert!(!old.is_subscribed(pb::Event::START_CONTAINER));
    recorder.set_events(with_start());
    let new = h.connect().await;
    assert!(new.is_subscribed(pb::Event::START_CONTAINER), "the second connection has the new subscription");
    assert_eq!(new.registration().plugin_name, old.registration().plugin_name);
    assert_eq!(new.registration().plugin_idx, old.registration().plugin_idx);
    (old, new)
}

/// The runtime calls the old connection first (the order plugins of one
/// index keep in a short list): it evaluates, the new connection's call
/// for the same event is answered empty and takes over, and the host
/// closes the old one. Nothing is lost, nothing evaluated twice, and the
/// dispatcher is never told of a disconnection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_subscription_takes_over_from_the_old_connection_old_called_first() {
    let recorder = Recorder::new(annotating());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let w = Workload::generate(1, 4);
    let (pod, c) = (&w.pods[0], &w.containers);
    let (old, new) = old_and_new(&h, &recorder).await;
    // Registered and configured, not yet synchronised: the old one serves.
    assert!(evaluated(&old.create_container(pod, &c[0]).await.unwrap()));
    new.synchronize(&[], &[], 0).await.unwrap();
    // Synchronised but not yet called: still the old one, alone.
    assert!(evaluated(&old.create_container(pod, &c[1]).await.unwrap()));
    assert_eq!(creates(&recorder), 2);
    // One event through both, old first: evaluated once.
    assert!(evaluated(&old.create_container(pod, &c[2]).await.unwrap()));
    let second = new.create_container(pod, &c[2]).await.unwrap();
    assert!(!evaluated(&second), "the second call of one event is answered empty: {second:?}");
    assert_eq!(creates(&recorder), 3);
    tokio::time::timeout(Duration::from_secs(30), old.closed()).await.expect("the host closes the old connection");
    // The new one evaluates from now on, its new events too.
    assert!(evaluated(&new.create_container(pod, &c[3]).await.unwrap()));
    new.start_container(pod, &c[3]).await.unwrap();
    assert_eq!(creates(&recorder), 4);
    let mut status = h.handles.status.clone();
    wait_status(&mut status, "the handover is counted", |s| s.handovers == 1).await;
    let s = *status.borrow();
    assert_eq!((s.phase, s.registrations, s.registration_failures), (Phase::Registered, 2, 0));
    assert!(h.handles.link.is_connected());
    assert!(!recorder.seen().contains(&Seen::Disconnected), "the view is kept across a handover");
    h.shutdown().await;
}

/// The runtime calls the new connection first (a long list may sort it
/// so): its call evaluates and takes over, the old one's call for the same
/// event is answered empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_subscription_takes_over_from_the_old_connection_new_called_first() {
    let recorder = Recorder::new(annotating());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let w = Workload::generate(1, 2);
    let (pod, c) = (&w.pods[0], &w.containers);
    let (old, new) = old_and_new(&h, &recorder).await;
    new.synchronize(&[], &[], 0).await.unwrap();
    assert!(evaluated(&new.create_container(pod, &c[0]).await.unwrap()));
    let second = old.create_container(pod, &c[0]);
    // The host may close the old connection as soon as the new one took
    // over: then the runtime finds it closed, which changes nothing.
    if let Ok(reply) = second.await {
        assert!(!evaluated(&reply), "the old connection answers empty once the new one evaluates: {reply:?}");
    }
    assert_eq!(creates(&recorder), 1);
    tokio::time::timeout(Duration::from_secs(30), old.closed()).await.expect("the host closes the old connection");
    assert!(evaluated(&new.create_container(pod, &c[1]).await.unwrap()));
    assert_eq!(creates(&recorder), 2);
    h.shutdown().await;
}

/// The old connection is lost (the runtime dropped it) after the new one
/// was synchronised and before the runtime called it: the new one serves
/// alone, and the dispatcher keeps its view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_connection_lost_during_a_handover_leaves_the_new_one_serving() {
    let recorder = Recorder::new(annotating());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let w = Workload::generate(1, 1);
    let (old, new) = old_and_new(&h, &recorder).await;
    new.synchronize(&[], &[], 0).await.unwrap();
    old.close().await;
    assert!(evaluated(&new.create_container(&w.pods[0], &w.containers[0]).await.unwrap()));
    let mut status = h.handles.status.clone();
    wait_status(&mut status, "registered on the new connection", |s| s.phase == Phase::Registered).await;
    assert!(h.handles.link.is_connected());
    assert!(!recorder.seen().contains(&Seen::Disconnected));
    h.shutdown().await;
}

/// The runtime refuses the second registration: the old connection keeps
/// serving (with the old subscription), and the host tries again after its
/// back-off, and hands over once the runtime accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_second_registration_keeps_the_old_connection_serving() {
    let recorder = Recorder::new(annotating());
    let mut h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let w = Workload::generate(1, 3);
    let (pod, c) = (&w.pods[0], &w.containers);
    let old = h.connect().await;
    old.synchronize(&[], &[], 0).await.unwrap();
    let accepting = h.sim.profile().clone();
    let mut refusing = accepting.clone();
    refusing.refuse_registration = Some("a plugin of that name is already registered".into());
    h.sim.set_profile(refusing);
    recorder.set_events(with_start());
    let refused = tokio::time::timeout(Duration::from_secs(30), h.sim.accept()).await.expect("a second connection");
    assert!(refused.is_err(), "the simulator refused the registration");
    let mut status = h.handles.status.clone();
    wait_status(&mut status, "the refusal is counted", |s| s.registration_failures >= 1).await;
    // The old connection serves meanwhile.
    assert!(evaluated(&old.create_container(pod, &c[0]).await.unwrap()));
    assert!(!old.is_closed());
    h.sim.set_profile(accepting);
    let new = h.connect().await;
    assert!(new.is_subscribed(pb::Event::START_CONTAINER));
    new.synchronize(&[], &[], 0).await.unwrap();
    assert!(evaluated(&old.create_container(pod, &c[1]).await.unwrap()));
    assert!(!evaluated(&new.create_container(pod, &c[1]).await.unwrap()));
    tokio::time::timeout(Duration::from_secs(30), old.closed()).await.expect("the host closes the old connection");
    assert!(evaluated(&new.create_container(pod, &c[2]).await.unwrap()));
    assert_eq!(creates(&recorder), 3);
    wait_status(&mut status, "the handover is counted", |s| s.handovers == 1).await;
    h.shutdown().await;
}

/// The subscription goes back before the second connection took over: the
/// host gives the second one up and the first serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_changed_back_gives_the_second_connection_up() {
    let recorder = Recorder::new(annotating());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let w = Workload::generate(1, 2);
    let (pod, c) = (&w.pods[0], &w.containers);
    let (old, new) = old_and_new(&h, &recorder).await;
    new.synchronize(&[], &[], 0).await.unwrap();
    recorder.set_events(EventMask::EMPTY.with(EventKind::CreateContainer));
    tokio::time::timeout(Duration::from_secs(30), new.closed()).await.expect("the host gives the second one up");
    assert!(evaluated(&old.create_container(pod, &c[0]).await.unwrap()));
    assert!(!old.is_closed());
    assert_eq!(h.handles.status.borrow().handovers, 0);
    assert!(evaluated(&old.create_container(pod, &c[1]).await.unwrap()));
    assert_eq!(creates(&recorder), 2);
    h.shutdown().await;
}

/// Creates the tasks send while policies are added to and removed from
/// the directory, one round at a time.
const CREATE_TASKS: usize = 3;

/// Polls `check` every 20 ms until it holds (a backstop of two minutes:
/// a busy machine is slow, not wrong); `detail` says what there was then.
async fn eventually<F, Fut>(what: &str, mut check: F, detail: impl Fn() -> String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..6000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within two minutes; {}", detail());
}

/// The acceptance test of make before break: creates sent continuously
/// (from [`CREATE_TASKS`] tasks) through a runtime that calls its plugins
/// in order under one lock, while a policy subscribed to every lifecycle
/// event is added to and removed from the directory, `rounds` times: the
/// subscription changes each time, and each time a second connection
/// registers with it and takes over. The chain's one enforcing policy
/// counts its calls in its state and answers each create with the count:
/// every create must be answered, with a count, the counts 1..=N each once
/// (a create evaluated twice would skip one, and its two answers would be
/// a conflict at the runtime; one that went ahead without the policies
/// has none). A request the runtime sent and got no answer to may only be
/// one to a connection another had already taken over from.
async fn subscription_changes_under_load(rounds: usize, ties: Ties) {
    nri_wasm_e2e::init_logging();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::copy(guests::PROBE, policies.join("10-count.wasm")).unwrap();
    let count = "settings = \"count\"\non-error = \"fail\"\n[limits]\ntimeout-ms = 5000\n";
    std::fs::write(policies.join("10-count.toml"), count).unwrap();
    let mut config = Config::default();
    // No registry cache: root's default is the node's /var/cache/nri-wasm-oci.
    config.registry.cache_dir = None;
    config.policies.dir = Some(policies.clone());
    config.policies.reload_debounce_ms = 20;
    // The build's shared cache: compiled once for all the tests.
    config.engine.cache_dir = Some(nri_wasm_components::COMPONENT_CACHE.into());
    config.chain.budget_fraction = 0.9;
    config.metrics.address = String::new();
    config.validate().unwrap();

    let socket = dir.path().join("nri.sock");
    // Room for a machine whose CPUs are saturated: the limit is not what
    // this test is about.
    let profile = RuntimeProfile::v0_12().with_request_timeout(Duration::from_secs(10));
    let runtime = Arc::new(Plugins::serve(Simulator::listen(&socket, profile).await.unwrap(), ties));
    let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
    let stop = CancellationToken::new();
    let debounce = Duration::from_millis(config.policies.reload_debounce_ms);
    host.dispatcher.engine().handle().spawn(nri_wasm::policy::reload::watch(
        host.reloader.clone(),
        debounce,
        true,
        stop.clone(),
    ));
    tokio::time::timeout(Duration::from_secs(120), host.dispatcher.loaded())
        .await
        .expect("the policies load within two minutes");
    let supervisor = Supervisor::new(
        options(nri_wasm::nri::Endpoint::Socket(socket.clone())),
        host.dispatcher.clone(),
        stop.clone(),
    )
    .with_link(host.dispatcher.link());
    let status = supervisor.handles().status;
    let task = tokio::spawn(supervisor.run());
    tokio::time::timeout(Duration::from_secs(120), runtime.joined(1)).await.expect("the host joins");
    let pod = nri_sim::workload::pod(1);
    runtime.run_pod_sandbox(&pod).await.unwrap();

    let done = CancellationToken::new();
    let senders: Vec<_> = (0..CREATE_TASKS)
        .map(|t| {
            let (runtime, pod, done) = (runtime.clone(), pod.clone(), done.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for n in 0.. {
                    if done.is_cancelled() {
                        break;
                    }
                    let ctr = nri_sim::workload::container(&pod, t * 1_000_000 + n);
                    let result = runtime.create_container(&pod, &ctr).await;
                    out.push((ctr.id.clone(), result.map(|r| r.adjust)));
                }
                out
            })
        })
        .collect();

    let every = policies.join("20-every.wasm");
    for round in 0..rounds {
        let adding = round % 2 == 0;
        if adding {
            // Renamed into place: the reload never sees half a file.
            let staged = dir.path().join("20-every.wasm");
            std::fs::copy(guests::NOOP, &staged).unwrap();
            std::fs::rename(&staged, &every).unwrap();
        } else {
            std::fs::remove_file(&every).unwrap();
        }
        // The subscription really changes, and the connection registered
        // with it is the one left serving.
        eventually(
            &format!("round {round}: a connection with the new subscription took over"),
            || async {
                let joined = runtime.journal().joined;
                let Some(last) = joined.last().cloned().filter(|_| joined.len() >= round + 2) else { return false };
                let list = runtime.list().await;
                let open: Vec<_> = list.iter().filter(|l| !l.closed).collect();
                let serving = matches!(open.as_slice(), [only] if only.conn == last.conn);
                serving && (last.events & POST_START != 0) == adding
            },
            || {
                let j = runtime.journal();
                format!(
                    "joined {:?}; refused {:?}",
                    j.joined.iter().rev().take(3).collect::<Vec<_>>(),
                    j.refused.iter().rev().take(5).collect::<Vec<_>>()
                )
            },
        )
        .await;
    }
    done.cancel();
    let mut results = Vec::new();
    for s in senders {
        results.extend(s.await.unwrap());
    }
    let status = *status.borrow();
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("host stops").unwrap().unwrap();

    // Every create answered, with the policy's count, each count once.
    let mut counts = Vec::new();
    for (id, result) in &results {
        let adjust = result.as_ref().unwrap_or_else(|e| panic!("create {id} failed: {e}"));
        let count = adjust
            .annotations
            .get("example.com/count")
            .unwrap_or_else(|| panic!("create {id} went ahead without the policy: {:?}", adjust.annotations));
        counts.push(count.parse::<usize>().unwrap());
    }
    counts.sort_unstable();
    let n = counts.len();
    assert!(counts.iter().copied().eq(1..=n), "counts are not 1..={n} each once: {counts:?}");

    // Every connection joined; a request that got no answer was one to a
    // connection another had taken over from (its answer would have been
    // empty), and its event still got the policy's answer (above).
    let journal = runtime.journal();
    assert!(journal.refused.is_empty(), "connections refused: {:?}", journal.refused);
    assert!(journal.joined.len() > rounds, "{} connections joined for {rounds} changes", journal.joined.len());
    let mut lost = (0, 0);
    for (i, call) in journal.calls.iter().enumerate() {
        let Outcome::Unanswered { sent, reason } = &call.outcome else { continue };
        let taken_over = journal.calls[..i]
            .iter()
            .any(|d| d.conn > call.conn && d.plugin == call.plugin && d.outcome == Outcome::Answered);
        assert!(
            taken_over,
            "event {} ({}): connection {} got no answer ({reason}) before another took over from it",
            call.event, call.name, call.conn
        );
        if *sent {
            lost.0 += 1;
        } else {
            lost.1 += 1;
        }
    }
    // Events that called two connections: where the handover was at work
    // (each change makes at least one, since the runtime removes a closed
    // plugin only after calling it), and those both answered.
    let (mut called, mut answered) = (0, 0);
    for e in 1..=journal.events {
        let conns = |answered_only: bool| {
            journal
                .event(e)
                .filter(|c| !answered_only || c.outcome == Outcome::Answered)
                .map(|c| c.conn)
                .collect::<BTreeSet<u64>>()
                .len()
        };
        called += usize::from(conns(false) > 1);
        answered += usize::from(conns(true) > 1);
    }
    eprintln!(
        "{rounds} subscription changes ({ties:?}): {n} creates, all with the policy's count; {} connections; \
         {called} events called two connections, {answered} answered by both; unanswered requests to retired \
         connections: {} sent, {} never sent; status {status:?}",
        journal.joined.len(),
        lost.0,
        lost.1
    );
    assert!(called >= rounds, "{called} events reached two connections for {rounds} changes");
    assert!(status.handovers as usize >= rounds, "{status:?}");
    assert_eq!(status.registration_failures, 0, "{status:?}");
}

/// The bit of PostStartContainer in a subscription: the policy added and
/// removed subscribes to it, the counting one does not (nor do the events
/// that keep its node view).
const POST_START: i32 = 1 << (pb::Event::POST_START_CONTAINER as i32 - 1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_subscription_changes_under_continuous_creates_lose_no_create() {
    subscription_changes_under_load(50, Ties::Joined).await;
}

/// The same with the runtime calling the newest connection of an index
/// first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_changes_with_the_new_connection_called_first_lose_no_create() {
    subscription_changes_under_load(20, Ties::NewestFirst).await;
}
