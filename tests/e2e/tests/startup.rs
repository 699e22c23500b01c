//! Start-up, as an operator runs the host (`nri-wasm run` with a policy
//! directory and a compile cache), against the runtime simulator: the
//! first 50 CreateContainer after the host registers, on a cold cache and
//! again on a warm one, on an idle machine and with every CPU saturated by
//! busy processes the test starts (and kills).
//!
//! The start-up contract (`policy/dispatcher.rs`) is what is asserted, in
//! outcomes and counts, never in durations (how fast the policies load
//! depends on the machine; what each create gets must not):
//! - no create succeeds without the output of a mandatory policy
//!   (`on-error = "fail"`); a create that fails names that policy and says
//!   it is not ready yet;
//! - a create without the output of an `on-error = "ignore"` policy is one
//!   the host reported as skipped for it (a metric per skip);
//! - every create is answered (none times out, none is lost to a
//!   reconnect);
//! - a warm restart registers once and keeps its connection;
//! - a policy whose load never ends (its `configure` sleeps until its
//!   limit) holds back nothing but itself;
//! - `[runtime] start-wait-ms` is how long the host waits, before
//!   registering, for a policy whose subscription is not known yet (its
//!   component declares no events, and no load of it was recorded);
//! - a cold start registers at once for the events the components declare,
//!   and while mandatory policies load, only the events they declare and
//!   that a policy still loading refuses (creates here) fail: every other
//!   event the runtime sends is answered.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nri_sim::{RuntimeProfile, SimError, Simulator};
use nri_wasm::config::Config;
use nri_wasm::metrics::Metrics;
use nri_wasm::nri::transport::Endpoint;
use nri_wasm::policy::load::compile::Compiler;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{init_logging, options};
use nri_wasm_test_support::guests;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Creates sent right after each start.
const CREATES: usize = 50;

/// Busy processes on every CPU (four per CPU: a load of 8 on two cores),
/// killed by their pids when dropped.
struct Saturated(Vec<Child>);

impl Saturated {
    fn start() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let children = (0..cpus * 4)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("start a busy process")
            })
            .collect();
        Self(children)
    }
}

impl Drop for Saturated {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A running `nri-wasm run`.
struct Host {
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Host {
    fn start(policies: &Path, cache: &Path, socket: &Path) -> Self {
        Self::start_with(policies, cache, socket, |_| {})
    }

    /// [`Host::start`] with `edit` applied to the configuration.
    fn start_with(policies: &Path, cache: &Path, socket: &Path, edit: impl FnOnce(&mut Config)) -> Self {
        init_logging();
        let mut config = Config::default();
        // No registry cache: root's default is the node's /var/cache/nri-wasm-oci.
        config.registry.cache_dir = None;
        config.policies.dir = Some(policies.to_path_buf());
        config.policies.watch = false;
        config.engine.cache_dir = Some(cache.to_path_buf());
        config.metrics.address = String::new();
        edit(&mut config);
        config.validate().unwrap();
        let metrics = Arc::new(Metrics::new());
        let stop = CancellationToken::new();
        let options = options(Endpoint::Socket(socket.to_path_buf()));
        let host = nri_wasm::cli::HostBuilder::new(config).compiler(Compiler::InProcess).metrics(metrics.clone());
        let serving = stop.clone();
        let task = tokio::spawn(async move { host.build()?.serve(options, serving).await });
        Self { metrics, stop, task }
    }

    /// Skips of `policy` on CreateContainer the host reported.
    fn skipped(&self, policy: &str) -> usize {
        let text = self.metrics.encode();
        let line = text.lines().find(|l| {
            l.starts_with("nri_wasm_policy_calls_total{")
                && l.contains(&format!("policy=\"{policy}\""))
                && l.contains("event=\"CreateContainer\"")
                && l.contains("outcome=\"skipped\"")
        });
        line.map_or(0, |l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap() as usize)
    }

    async fn stop(self) {
        self.stop.cancel();
        let done = tokio::time::timeout(Duration::from_secs(30), self.task).await.expect("host stops within 30 s");
        done.expect("host task").expect("host stops cleanly");
    }
}

fn install(dir: &Path, name: &str, wasm: &str, policy_file: &str) {
    std::fs::copy(wasm, dir.join(format!("{name}.wasm"))).unwrap();
    std::fs::write(dir.join(format!("{name}.toml")), policy_file).unwrap();
}

/// [`install`] of the component as built before event declarations: the
/// host cannot know its subscription before it loads it.
fn install_undeclared(dir: &Path, name: &str, wasm: &str, policy_file: &str) {
    install(dir, name, wasm, policy_file);
    let undeclared = nri_wasm_test_support::without_event_declaration(&std::fs::read(wasm).unwrap());
    std::fs::write(dir.join(format!("{name}.wasm")), undeclared).unwrap();
}

fn annotation<'a>(reply: &'a pb::CreateContainerResponse, key: &str) -> Option<&'a str> {
    reply.adjust.as_ref().and_then(|a| a.annotations.get(key)).map(String::as_str)
}

/// What the first creates after a start got.
struct Creates {
    replies: Vec<(String, pb::CreateContainerResponse)>,
    /// Refusals: the status message of each.
    refused: Vec<String>,
    /// Connections the host made (registrations).
    registrations: usize,
}

/// Accepts the host (as the runtime would: configure, synchronize), then
/// creates [`CREATES`] containers at once, one after the other. A
/// reconnect, which the contract allows only for a policy whose
/// subscription was unknown at registration, is followed; any answer that
/// is neither a reply nor a refusal fails the test.
async fn first_creates(sim: &Simulator) -> Creates {
    let mut conn = sim.accept_started(Duration::from_secs(120)).await;
    let mut out = Creates { replies: Vec::new(), refused: Vec::new(), registrations: 1 };
    let pod = nri_sim::workload::pod(1);
    for n in 0..CREATES {
        let ctr = nri_sim::workload::container(&pod, n);
        loop {
            match conn.create_container(&pod, &ctr).await {
                Ok(reply) => out.replies.push((ctr.name.clone(), reply)),
                Err(SimError::Failed { status, .. }) => out.refused.push(status.message().to_string()),
                Err(e) if conn.is_closed() && matches!(e, SimError::Disconnected { .. }) => {
                    panic!("a create in flight was lost to a reconnect: {e}")
                }
                Err(SimError::NotSubscribed(_)) if conn.is_closed() => {
                    conn = sim.accept_started(Duration::from_secs(120)).await;
                    out.registrations += 1;
                    continue;
                }
                Err(e) => panic!("create {n}: {e}"),
            }
            break;
        }
        if conn.is_closed() {
            conn = sim.accept_started(Duration::from_secs(120)).await;
            out.registrations += 1;
        }
    }
    conn.close().await;
    out
}

/// The contract for a chain of `10-first` (mandatory) and `20-second`
/// (ignore), checked on what the creates got: returns how many replies
/// lacked 20-second's output.
fn check(creates: &Creates, host: &Host) -> usize {
    assert_eq!(creates.replies.len() + creates.refused.len(), CREATES);
    for message in &creates.refused {
        assert!(
            message.contains("10-first") && message.contains("not ready yet"),
            "a create was refused for something else than the mandatory policy not being ready: {message}"
        );
    }
    let mut without_second = 0;
    for (name, reply) in &creates.replies {
        assert_eq!(
            annotation(reply, "example.com/first"),
            Some(name.as_str()),
            "a create succeeded without the mandatory policy's output: {reply:?}"
        );
        if annotation(reply, "example.com/second").is_none() {
            without_second += 1;
        }
    }
    assert_eq!(
        without_second,
        host.skipped("20-second"),
        "every create without 20-second's output is one the host reported as skipped for it"
    );
    without_second
}

/// Cold, then warm: the cold start records each policy's subscription with
/// its compiled form, and the warm one registers once, at once, with it.
async fn cold_then_warm() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    let cache = dir.path().join("cache");
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "10-first", guests::ANNOTATE, "settings = \"first\"\non-error = \"fail\"\n");
    install(&policies, "20-second", guests::ANNOTATE, "settings = \"second\"\non-error = \"ignore\"\n");
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();

    let host = Host::start(&policies, &cache, &socket);
    let cold = first_creates(&sim).await;
    check(&cold, &host);
    // Wait for the loads to end (a create answered means nothing about
    // when they do), then stop: the next start is warm.
    // Ten minutes: compiling on a machine whose every CPU is taken by
    // other builds has been seen to take more than two.
    for _ in 0..6000 {
        if host.metrics.status().chain_loaded {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(host.metrics.status().chain_loaded, "the cold load did not end within ten minutes");
    host.stop().await;
    let records = std::fs::read_dir(&cache)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sub"))
        .count();
    assert_eq!(records, 2, "one subscription record per policy version");

    // A runtime of its own: the stopped host may have begun connecting
    // to the first one again before it stopped.
    drop(sim);
    let socket = dir.path().join("nri-warm.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&policies, &cache, &socket);
    let warm = first_creates(&sim).await;
    check(&warm, &host);
    assert_eq!(warm.registrations, 1, "a warm start registers once: the subscription was known");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_creates_after_a_cold_and_a_warm_start_all_get_their_policies() {
    cold_then_warm().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_creates_after_a_cold_and_a_warm_start_with_every_cpu_busy() {
    let _busy = Saturated::start();
    cold_then_warm().await;
}

/// A policy whose `configure` sleeps until its limit (a minute) never
/// becomes ready during the test. With `on-error = "ignore"` it is skipped,
/// reported, for every create, and the other policies apply; with
/// `on-error = "fail"` every create is refused naming it; neither delays an
/// answer.
async fn a_stuck_load_holds_back_only_itself(on_error: &str) {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    // The build's shared compile cache: a cache of its own would compile
    // the large hostile guest once per test, and the tests' compiles share
    // one pool of threads, so that the cold start of the test above waited
    // behind three of them on a busy machine (over two minutes). What is
    // tested here does not depend on the cache: the stuck policy's
    // subscription is never recorded (its `configure` never ends).
    let cache = std::path::PathBuf::from(nri_wasm_components::COMPONENT_CACHE);
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "10-first", guests::ANNOTATE, "settings = \"first\"\non-error = \"fail\"\n");
    install(&policies, "20-second", guests::ANNOTATE, "settings = \"second\"\non-error = \"ignore\"\n");
    let stuck = format!("settings = \"init-sleep\"\non-error = \"{on_error}\"\n[limits]\ntimeout-ms = 60000\n");
    install(&policies, "30-stuck", guests::HOSTILE, &stuck);
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&policies, &cache, &socket);
    let creates = first_creates(&sim).await;
    assert_eq!(creates.replies.len() + creates.refused.len(), CREATES);
    if on_error == "fail" {
        assert!(creates.replies.is_empty(), "a create succeeded without the mandatory 30-stuck");
        for message in &creates.refused {
            let named =
                (message.contains("30-stuck") || message.contains("10-first")) && message.contains("not ready yet");
            assert!(named, "{message}");
        }
    } else {
        let (replies, refused) = (creates.replies.clone(), creates.refused.clone());
        let others = Creates { replies, refused, registrations: creates.registrations };
        check(&others, &host);
        assert!(creates.refused.iter().all(|m| !m.contains("30-stuck")), "{:?}", creates.refused);
        assert_eq!(host.skipped("30-stuck"), creates.replies.len(), "30-stuck is reported skipped on every reply");
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_policy_that_may_be_ignored_is_skipped_and_reported() {
    a_stuck_load_holds_back_only_itself("ignore").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_mandatory_policy_refuses_every_create_naming_itself() {
    a_stuck_load_holds_back_only_itself("fail").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_policy_holds_back_only_itself_with_every_cpu_busy() {
    let _busy = Saturated::start();
    a_stuck_load_holds_back_only_itself("ignore").await;
}

/// `[runtime] start-wait-ms`, with a policy whose `configure` sleeps for a
/// minute (its subscription unknown all along: its component declares no
/// events, and no load of it ever ends, so none recorded it): the host
/// registers once the wait is over, not
/// before, and while that policy is still loading; the other policies'
/// creates are answered. Returns how long after the start the host
/// registered. The build's shared compile cache spares the machine a
/// compile of each policy per test.
async fn registers_after_the_start_wait(start_wait_ms: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    let cache = Path::new(nri_wasm_components::COMPONENT_CACHE);
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "10-first", guests::ANNOTATE, "settings = \"first\"\non-error = \"ignore\"\n");
    let stuck = "settings = \"init-sleep\"\non-error = \"ignore\"\n[limits]\ntimeout-ms = 60000\n";
    install_undeclared(&policies, "30-stuck", guests::HOSTILE, stuck);
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let started = std::time::Instant::now();
    let host = Host::start_with(&policies, cache, &socket, |c| c.runtime.start_wait_ms = start_wait_ms);
    let mut conn = tokio::time::timeout(Duration::from_secs(120), sim.accept())
        .await
        .expect("the host registers within two minutes")
        .expect("registration");
    let registered = started.elapsed();
    // Still loading: neither loaded nor failed, and the chain not complete.
    let status = host.metrics.status();
    let stuck_done = status.policies.iter().any(|p| p.name == "30-stuck");
    assert!(!status.chain_loaded && !stuck_done, "the host registered once 30-stuck was done: {status:?}");
    assert!(
        registered >= Duration::from_millis(start_wait_ms),
        "registered {registered:?} after the start, before the start wait of {start_wait_ms} ms was over"
    );
    conn.configure().await.expect("configure");
    conn.synchronize(&[], &[], 0).await.expect("synchronize");
    let pod = nri_sim::workload::pod(1);
    conn.create_container(&pod, &nri_sim::workload::container(&pod, 0)).await.expect("a create is answered");
    conn.close().await;
    host.stop().await;
    registered
}

/// A small start wait: the host registers while a policy is still loading
/// (it would load a minute later), at the earliest after the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_start_wait_registers_while_a_policy_is_still_loading() {
    let registered = registers_after_the_start_wait(200).await;
    eprintln!("start-wait-ms 200: registered after {registered:?}");
}

/// A start wait above the default (3000 ms) is waited in full: the setting,
/// not the default, decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_wait_above_the_default_is_waited_in_full() {
    let default = Config::default().runtime.start_wait_ms;
    assert_eq!(default, 3000);
    let registered = registers_after_the_start_wait(4500).await;
    eprintln!("start-wait-ms 4500: registered after {registered:?}");
}

/// The events the simulator was told to send, by name, from a Configure
/// answer's mask.
fn events_of(mask: i32) -> Vec<&'static str> {
    (1..=14)
        .filter(|n| mask & (1 << (n - 1)) != 0)
        .map(|n| nri_sim::event_name(<pb::Event as protobuf::Enum>::from_i32(n).expect("an event number")))
        .collect()
}

/// A cold start with a compile cache of its own, empty: mandatory policies
/// (`on-error = "fail"`) whose components declare CreateContainer only,
/// `10-first` compiling meanwhile and `20-slow` with a `configure` that
/// takes a minute (it is never ready during the test); with `viewer`, also
/// a mandatory `30-viewer` that reads the node view (so the host takes the
/// view's events: pods, starts, updates, stops, removals) and whose
/// `configure` sleeps too. The host registers at once, for the union of
/// what the components declare; the runtime then sends every kind of
/// event for each of [`CREATES`] pods, as it would while the node runs.
/// Only creates fail, each naming a policy not ready yet; every other event
/// the runtime sends is answered, and no event is sent that no policy may
/// see.
async fn a_cold_start_fails_only_what_its_policies_declare(viewer: bool) {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    let cache = dir.path().join("cache");
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "10-first", guests::ANNOTATE, "settings = \"first\"\non-error = \"fail\"\n");
    let slow = "settings = \"slow-start\"\non-error = \"fail\"\n[limits]\ntimeout-ms = 60000\n";
    install(&policies, "20-slow", guests::ANNOTATE, slow);
    if viewer {
        let sleeps = "settings = \"init-sleep\"\non-error = \"fail\"\n[limits]\ntimeout-ms = 60000\n";
        install(&policies, "30-viewer", guests::HOSTILE, sleeps);
    }
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&policies, &cache, &socket);
    let mut conn = tokio::time::timeout(Duration::from_secs(120), sim.accept())
        .await
        .expect("the host registers within two minutes")
        .expect("registration");
    let configured = conn.configure().await.expect("configure");
    let mut expected = vec!["CreateContainer"];
    if viewer {
        expected = vec![
            "RunPodSandbox",
            "RemovePodSandbox",
            "CreateContainer",
            "StartContainer",
            "UpdateContainer",
            "StopContainer",
            "RemoveContainer",
        ];
    }
    assert_eq!(events_of(configured.events), expected, "the first Configure answers what the components declare");
    assert!(!host.metrics.status().chain_loaded, "registered while policies still load");
    conn.synchronize(&[], &[], 0).await.expect("Synchronize is never refused for a policy still loading");

    // Per event: answered, refused (with the messages), or not sent (the
    // runtime sends no event the plugin did not subscribe to).
    let mut answered: BTreeMap<&str, usize> = BTreeMap::new();
    let mut refused: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut unsent: BTreeMap<&str, usize> = BTreeMap::new();
    let mut record = |event: &'static str, result: Result<(), SimError>| match result {
        Ok(()) => *answered.entry(event).or_default() += 1,
        Err(SimError::Failed { status, .. }) => refused.entry(event).or_default().push(status.message().to_string()),
        Err(SimError::NotSubscribed(_)) => *unsent.entry(event).or_default() += 1,
        Err(e) => panic!("{event}: {e}"),
    };
    for n in 0..CREATES {
        let pod = nri_sim::workload::pod(n);
        let ctr = nri_sim::workload::container(&pod, 0);
        let update = pb::UpdateContainerRequest {
            pod: protobuf::MessageField::some(pod.clone()),
            container: protobuf::MessageField::some(ctr.clone()),
            ..Default::default()
        };
        let pod_update =
            pb::UpdatePodSandboxRequest { pod: protobuf::MessageField::some(pod.clone()), ..Default::default() };
        record("RunPodSandbox", conn.run_pod_sandbox(&pod).await);
        record("CreateContainer", conn.create_container(&pod, &ctr).await.map(drop));
        record("PostCreateContainer", conn.post_create_container(&pod, &ctr).await);
        record("StartContainer", conn.start_container(&pod, &ctr).await);
        record("PostStartContainer", conn.post_start_container(&pod, &ctr).await);
        record("UpdateContainer", conn.update_container(&update).await.map(drop));
        record("PostUpdateContainer", conn.post_update_container(&pod, &ctr).await);
        record("UpdatePodSandbox", conn.update_pod_sandbox(&pod_update).await);
        record("PostUpdatePodSandbox", conn.post_update_pod_sandbox(&pod).await);
        record("StopContainer", conn.stop_container(&pod, &ctr).await.map(drop));
        record("RemoveContainer", conn.remove_container(&pod, &ctr).await);
        record("StopPodSandbox", conn.stop_pod_sandbox(&pod).await);
        record("RemovePodSandbox", conn.remove_pod_sandbox(&pod).await);
    }
    assert!(!conn.is_closed(), "no reconnect: the subscription was right from the start");
    assert_eq!(refused.keys().copied().collect::<Vec<_>>(), ["CreateContainer"], "only creates fail: {refused:?}");
    let creates = &refused["CreateContainer"];
    assert_eq!(creates.len(), CREATES, "every create fails while a mandatory policy is not ready");
    for message in creates {
        let named = ["10-first", "20-slow", "30-viewer"]
            .iter()
            .any(|p| message.contains(&format!("policy {p} on CreateContainer")));
        assert!(named && message.contains("not ready yet"), "{message}");
    }
    let sent: Vec<&str> = answered.keys().copied().chain(["CreateContainer"]).collect();
    for event in sent.iter().filter(|e| **e != "CreateContainer") {
        assert!(expected.contains(event), "{event} was sent, which no policy declares");
        assert_eq!(answered[event], CREATES, "every {event} answered");
    }
    for event in &expected {
        assert!(sent.contains(event), "{event} is subscribed to and was sent");
    }
    for (event, n) in &unsent {
        assert!(!expected.contains(event) && *n == CREATES, "{event}: not sent {n} times");
    }
    assert!(!host.metrics.status().chain_loaded, "the mandatory policies were loading all along");
    conn.close().await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_fails_only_the_creates_its_policies_declare() {
    a_cold_start_fails_only_what_its_policies_declare(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_never_refuses_a_stop_or_remove_for_a_policy_loading() {
    a_cold_start_fails_only_what_its_policies_declare(true).await;
}

/// A custom section: id 0, size, name length, name, content (sizes in
/// unsigned LEB128).
fn custom_section(name: &str, content: &[u8]) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                return;
            }
        }
    }
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(content);
    let mut out = vec![0];
    leb128(body.len(), &mut out);
    out.extend(body);
    out
}

/// Components whose event declaration lies or is malformed, made by hand
/// from the annotate guest (which declares and answers CreateContainer):
/// one declaring less than its `configure` answers, an unknown event name,
/// a section of 1 MiB, two sections, and a section with control
/// characters. Each is refused with one line naming the policy, its file
/// and what is wrong; the host loads and runs the others, and a create
/// gets the good policy's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_event_declarations_are_refused_naming_the_policy_and_the_file() {
    use nri_wasm::nri::Dispatcher as _;
    init_logging();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let annotate = std::fs::read(guests::ANNOTATE).unwrap();
    let undeclared = nri_wasm_test_support::without_event_declaration(&annotate);
    let with = |base: &[u8], content: &[u8]| [base, &custom_section("nri-wasm:events", content)].concat();
    let hostile: [(&str, Vec<u8>, &str); 5] = [
        (
            "20-narrower",
            with(&undeclared, b"stop-container"),
            "configure subscribes to create-container, which its event declaration (nri-wasm:events) does not \
             list: it declares stop-container",
        ),
        (
            "30-unknown",
            with(&undeclared, b"create-container run-as-root"),
            "event declaration (nri-wasm:events): declares event \"run-as-root\", which this host does not know",
        ),
        (
            "40-huge",
            with(&undeclared, &b"create-container ".repeat(1 << 16)),
            "event declaration (nri-wasm:events): 1114112 bytes, more than the 1024 a declaration may have",
        ),
        (
            "50-twice",
            with(&annotate, b"stop-container"),
            "event declaration (nri-wasm:events): the component has 2 such sections",
        ),
        (
            "60-control",
            with(&undeclared, b"create-container\x1b]0;owned\x07\n\x1b[2J"),
            "event declaration (nri-wasm:events): holds the control character U+001B at byte 16",
        ),
    ];
    std::fs::copy(guests::ANNOTATE, policies.join("10-good.wasm")).unwrap();
    std::fs::write(policies.join("10-good.toml"), "settings = \"good\"\non-error = \"fail\"\n").unwrap();
    for (name, bytes, _) in &hostile {
        std::fs::write(policies.join(format!("{name}.wasm")), bytes).unwrap();
        std::fs::write(policies.join(format!("{name}.toml")), "on-error = \"ignore\"\n").unwrap();
    }
    let mut config = Config::default();
    config.policies.dir = Some(policies.clone());
    config.policies.watch = false;
    config.engine.cache_dir = Some(std::path::PathBuf::from(nri_wasm_components::COMPONENT_CACHE));
    config.metrics.address = String::new();
    let metrics = Arc::new(Metrics::new());
    let host = nri_wasm::cli::HostBuilder::new(config)
        .compiler(Compiler::InProcess)
        .metrics(metrics.clone())
        .build()
        .expect("the host builds");
    tokio::time::timeout(Duration::from_secs(600), host.dispatcher.loaded()).await.expect("the load ends");
    let status = metrics.status();
    for (name, _, says) in &hostile {
        let entry = status.policies.iter().find(|p| p.name == *name).unwrap_or_else(|| panic!("{name}: {status:?}"));
        assert_eq!(entry.status, "failed", "{name}: {entry:?}");
        let file = policies.join(format!("{name}.wasm")).display().to_string();
        let reason = &entry.reason;
        assert!(reason.starts_with(&format!("{file}: policy {name}: ")), "{name}: {reason}");
        assert!(reason.contains(says), "{name}: {reason}");
        assert!(
            !reason.contains('\n') && !reason.contains('\u{1b}') && !reason.contains("owned"),
            "{name}: {reason:?}"
        );
        assert!(reason.len() < 1024, "{name}: one line, bounded: {} bytes", reason.len());
    }
    let good = status.policies.iter().find(|p| p.name == "10-good").expect("10-good");
    assert_eq!(good.status, "loaded", "{good:?}");
    let pod = nri_sim::workload::pod(1);
    let ctr = nri_sim::workload::container(&pod, 0);
    let req = pb::CreateContainerRequest {
        pod: protobuf::MessageField::some(pod),
        container: protobuf::MessageField::some(ctr.clone()),
        ..Default::default()
    };
    let reply = host.dispatcher.create_container(req).await.expect("the others run");
    assert_eq!(annotation(&reply, "example.com/good"), Some(ctr.name.as_str()), "{reply:?}");
}
