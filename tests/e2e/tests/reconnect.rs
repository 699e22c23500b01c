//! Staying connected: the runtime goes away again and again, the host comes
//! back every time and serves events after each registration; a reconnect
//! the host makes itself (to subscribe anew) answers what is in flight
//! first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nri_sim::workload::Workload;
use nri_sim::{PluginConn, RuntimeProfile, Simulator};
use nri_wasm::config::Config;
use nri_wasm::nri::{Dispatcher, Endpoint, Phase, Supervisor};
use nri_wasm::policy::compile::Compiler;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{options, Harness, Recorder, Replies, Seen};
use nri_wasm_test_support::guests;
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

/// The host's own dispatcher, watched: says when a CreateContainer has
/// reached it (the request is in flight from then until its answer).
/// Everything else goes to the policies unchanged.
struct Watched {
    policies: std::sync::Arc<nri_wasm::policy::dispatcher::PolicyDispatcher>,
    create_entered: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Dispatcher for Watched {
    fn events(&self) -> nri_wasm::nri::EventMask {
        self.policies.events()
    }
    fn events_version(&self) -> u64 {
        self.policies.events_version()
    }
    async fn events_changed(&self, since: u64) {
        self.policies.events_changed(since).await
    }
    async fn configure(&self, runtime: &nri_wasm::nri::RuntimeInfo) -> Result<(), nri_wasm::nri::DispatchError> {
        self.policies.configure(runtime).await
    }
    async fn synchronize(
        &self,
        pods: Vec<pb::PodSandbox>,
        containers: Vec<pb::Container>,
    ) -> Result<Vec<pb::ContainerUpdate>, nri_wasm::nri::DispatchError> {
        self.policies.synchronize(pods, containers).await
    }
    async fn create_container(
        &self,
        req: pb::CreateContainerRequest,
    ) -> Result<pb::CreateContainerResponse, nri_wasm::nri::DispatchError> {
        self.create_entered.notify_one();
        self.policies.create_container(req).await
    }
    fn answered(&self, answer: &nri_wasm::nri::mux::AnswerTime) {
        self.policies.answered(answer)
    }
    fn answer_overrun(&self, event: &'static str, budget: Duration) {
        self.policies.answer_overrun(event, budget)
    }
    async fn disconnected(&self) {
        self.policies.disconnected().await
    }
}

/// Accepts the host as the runtime does: registration, Configure, an
/// empty Synchronize.
async fn accept(sim: &Simulator) -> PluginConn {
    sim.accept_started(Duration::from_secs(120)).await
}

/// A reconnect the host chooses (its policies' subscription changed: a
/// policy of every lifecycle event was dropped in the directory) answers
/// the request in flight before the connection goes (`nri/session.rs`,
/// `drain`), then registers with the new subscription. The request in
/// flight is held by a real policy whose call sleeps until its limit (5 s,
/// then answered without it: `on-error = "ignore"`); the runtime's request
/// timeout is 10 s. The new policy may be compiled when it is dropped in:
/// on a machine so busy that its load takes longer than the 5 s, the
/// answer comes first, and the test takes the policy out again (nothing to
/// load) with another create in flight, up to three rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_change_answers_the_request_in_flight_before_reconnecting() {
    nri_wasm_e2e::init_logging();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::copy(guests::HOSTILE, policies.join("10-slow.wasm")).unwrap();
    let slow = "settings = \"sleep\"\non-error = \"ignore\"\n[limits]\ntimeout-ms = 5000\n";
    std::fs::write(policies.join("10-slow.toml"), slow).unwrap();
    let mut config = Config::default();
    // No registry cache: root's default is the node's /var/cache/nri-wasm-oci.
    config.registry.cache_dir = None;
    config.policies.dir = Some(policies.clone());
    config.policies.reload_debounce_ms = 50;
    // The build's shared cache: compiled once for all the tests.
    config.engine.cache_dir = Some(nri_wasm_components::COMPONENT_CACHE.into());
    config.chain.budget_fraction = 0.9;
    config.metrics.address = String::new();
    config.validate().unwrap();

    let socket = dir.path().join("nri.sock");
    let profile = RuntimeProfile::v0_12().with_request_timeout(Duration::from_secs(10));
    let sim = Simulator::listen(&socket, profile).await.unwrap();
    let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
    let stop = CancellationToken::new();
    let debounce = Duration::from_millis(config.policies.reload_debounce_ms);
    host.dispatcher.engine().handle().spawn(nri_wasm::policy::reload::watch(
        host.reloader.clone(),
        debounce,
        true,
        stop.clone(),
    ));
    // Loaded before the host registers: the first registration is the one
    // with the slow policy's subscription (start-up is another test's).
    tokio::time::timeout(Duration::from_secs(120), host.dispatcher.loaded())
        .await
        .expect("the policies load within two minutes");
    let watched = Arc::new(Watched { policies: host.dispatcher.clone(), create_entered: tokio::sync::Notify::new() });
    let supervisor = Supervisor::new(options(Endpoint::Socket(socket.clone())), watched.clone(), stop.clone())
        .with_link(host.dispatcher.link());
    let mut status = supervisor.handles().status;
    let task = tokio::spawn(supervisor.run());

    let mut conn = accept(&sim).await;
    assert!(!conn.is_subscribed(pb::Event::POST_START_CONTAINER), "the slow policy alone: {:?}", conn.subscribed());
    let pod = nri_sim::workload::pod(1);
    let mut tested = false;
    for round in 0..3u64 {
        let adding = round % 2 == 0;
        let before = host.dispatcher.events();
        let answered = AtomicBool::new(false);
        let ctr = nri_sim::workload::container(&pod, round as usize);
        let create = async {
            let reply = conn.create_container(&pod, &ctr).await;
            answered.store(true, Ordering::SeqCst);
            reply
        };
        let change = async {
            // The create is in the host before the directory changes.
            watched.create_entered.notified().await;
            if adding {
                // Renamed into place: the reload never sees half a file.
                let staged = dir.path().join("20-every.wasm");
                std::fs::copy(guests::NOOP, &staged).unwrap();
                std::fs::rename(&staged, policies.join("20-every.wasm")).unwrap();
            } else {
                std::fs::remove_file(policies.join("20-every.wasm")).unwrap();
            }
            for _ in 0..1200 {
                if host.dispatcher.events() != before {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_ne!(host.dispatcher.events(), before, "the reload did not change the subscription in a minute");
            // Whether the request was still in flight when the host's
            // subscription changed (and the session began to reconnect).
            !answered.load(Ordering::SeqCst)
        };
        let (reply, in_flight) = tokio::join!(create, change);
        let reply = reply.unwrap_or_else(|e| panic!("round {round}: the request in flight was not answered: {e}"));
        assert!(reply.adjust.as_ref().is_none_or(|a| a.annotations.is_empty()), "the slow policy was cut at its limit");
        eprintln!(
            "round {round} ({}): the create was in flight when the subscription changed: {in_flight}",
            if adding { "added" } else { "removed" }
        );
        tested |= in_flight;
        // The host reconnects, and subscribes to what the policies need now.
        tokio::time::timeout(Duration::from_secs(30), conn.closed())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the host kept the connection after the subscription changed"));
        conn = accept(&sim).await;
        assert_eq!(conn.is_subscribed(pb::Event::POST_START_CONTAINER), adding, "round {round}: the new subscription");
        tokio::time::timeout(Duration::from_secs(5), status.wait_for(|s| s.registrations == round + 2))
            .await
            .expect("the new registration is counted")
            .unwrap();
        if tested {
            break;
        }
    }
    assert!(tested, "in three rounds, no reload landed while a create was in flight (each waited 5 s)");
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("host stops").unwrap().unwrap();
}
