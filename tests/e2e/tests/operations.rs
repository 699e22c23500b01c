//! The host as an operator runs it (`nri-wasm run`: policy directory,
//! reload watch, metrics endpoint, supervised connection), against the
//! runtime simulator, with real files and real HTTP.
//!
//! - `/metrics` is scraped and parsed, and every counter is exactly what
//!   the test's events and faults dictate; `/healthz`, `/readyz` and
//!   `/status` say what they should before and after registration;
//! - a policy dropped into the directory that subscribes to more events
//!   makes the host reconnect: the runtime configures and synchronizes it
//!   again with the new mask;
//! - a host started before its runtime connects within about a second of
//!   the socket appearing, even with a long back-off, and even when the
//!   socket's directory does not exist yet.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nri_sim::{RuntimeProfile, Simulator};
use nri_wasm::config::Config;
use nri_wasm::metrics::{self as http, HostStatus, Metrics};
use nri_wasm::nri::transport::Endpoint;
use nri_wasm::policy::load::compile::Compiler;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{engine_settings, init_logging, options};
use nri_wasm_test_support::guests;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running `nri-wasm run`.
struct Host {
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Host {
    fn start(policies: &Path, socket: &Path, watch: bool, backoff: (Duration, Duration)) -> Self {
        Self::start_with(policies, socket, watch, backoff, |_| {})
    }

    /// [`Host::start`] with `tune` applied to the configuration.
    fn start_with(
        policies: &Path,
        socket: &Path,
        watch: bool,
        backoff: (Duration, Duration),
        tune: impl FnOnce(&mut Config),
    ) -> Self {
        init_logging();
        let mut config = Config::default();
        // No registry cache: root's default is the node's /var/cache/nri-wasm-oci.
        config.registry.cache_dir = None;
        config.policies.dir = Some(policies.to_path_buf());
        config.policies.watch = watch;
        config.policies.reload_debounce_ms = 100;
        config.metrics.address = "127.0.0.1:0".into();
        config.engine = engine_settings();
        tune(&mut config);
        config.validate().unwrap();
        let mut options = options(Endpoint::Socket(socket.to_path_buf()));
        (options.backoff_initial, options.backoff_max) = backoff;
        let metrics = Arc::new(Metrics::new());
        let stop = CancellationToken::new();
        let host = nri_wasm::cli::HostBuilder::new(config).compiler(Compiler::InProcess).metrics(metrics.clone());
        let serving = stop.clone();
        let task = tokio::spawn(async move { host.build()?.serve(options, serving).await });
        Self { metrics, stop, task }
    }

    async fn endpoint(&self) -> SocketAddr {
        for _ in 0..500 {
            if let Some(addr) = self.metrics.endpoint() {
                return addr;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the metrics endpoint did not start");
    }

    async fn get(&self, path: &str) -> (u16, String) {
        http::get(self.endpoint().await, path).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    async fn status(&self) -> HostStatus {
        serde_json::from_str(&self.get("/status").await.1).expect("/status is a HostStatus")
    }

    /// A runtime at `socket` once the first load is done, so that the host
    /// registers with its final subscription (a load that ends after the
    /// registration reconnects, which a test of its own covers): the
    /// connection, configured and synchronized with an empty node.
    async fn runtime_once_loaded(&self, socket: &Path) -> (Simulator, nri_sim::PluginConn) {
        self.status_until("the first load", |s| s.chain_loaded).await;
        let sim = Simulator::listen(socket, RuntimeProfile::v0_12()).await.unwrap();
        let mut conn = tokio::time::timeout(Duration::from_secs(10), sim.accept()).await.unwrap().unwrap();
        conn.configure().await.unwrap();
        conn.synchronize(&[], &[], 0).await.unwrap();
        (sim, conn)
    }

    /// Waits (up to 60 s) until the status satisfies `ok`.
    async fn status_until(&self, what: &str, ok: impl Fn(&HostStatus) -> bool) -> HostStatus {
        for _ in 0..6000 {
            let status = self.status().await;
            if ok(&status) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what}: not within 60 s: {:?}", self.status().await);
    }

    async fn stop(self) {
        self.stop.cancel();
        let done = tokio::time::timeout(Duration::from_secs(10), self.task).await.expect("host stops within 10 s");
        done.expect("host task").expect("host stops cleanly");
    }
}

const FAST: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(200));

fn install(dir: &Path, name: &str, wasm: &str, policy_file: &str) {
    std::fs::copy(wasm, dir.join(format!("{name}.wasm"))).unwrap();
    std::fs::write(dir.join(format!("{name}.toml")), policy_file).unwrap();
}

/// The samples of a Prometheus text exposition: `name{labels}` -> value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {l:?}"));
            (series.to_string(), value.parse().unwrap_or_else(|_| panic!("not a value: {l:?}")))
        })
        .collect()
}

/// The value of the series `name` whose labels include every one of
/// `labels` (0 when there is none: a counter not yet moved).
fn value(samples: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series.as_str(), ""));
            n == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(_, v)| *v)
        .collect();
    assert!(matching.len() <= 1, "{name} {labels:?} matches several series");
    matching.first().copied().unwrap_or(0.0)
}

fn container_with(pod: &pb::PodSandbox, n: usize, annotation: Option<(&str, &str)>) -> pb::Container {
    let mut c = nri_sim::workload::container(pod, n);
    if let Some((k, v)) = annotation {
        c.annotations.insert(k.into(), v.into());
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_status_say_exactly_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "10-annotate", guests::ANNOTATE, "settings = \"tagged\"\n");
    install(&policies, "20-faults", guests::FAULTS, "settings = \"unreachable\"\non-error = \"ignore\"\n");
    std::fs::write(policies.join("30-broken.wasm"), b"not a component").unwrap();
    let socket = dir.path().join("nri.sock");
    let host = Host::start(&policies, &socket, false, FAST);

    // Alive before the runtime is there, not ready.
    assert_eq!(host.get("/healthz").await.0, 200);
    assert_eq!(host.get("/readyz").await.0, 503);
    let (code, _) = host.get("/nothing-here").await;
    assert_eq!(code, 404);

    let (_sim, conn) = host.runtime_once_loaded(&socket).await;
    let mut ready = false;
    for _ in 0..500 {
        if host.get("/readyz").await.0 == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ready, "/readyz never said ready after registration and loading: {}", host.get("/status").await.1);

    // Six plain containers: annotate changes each; faults traps five
    // times, then its breaker opens and the sixth call is skipped as
    // quarantined. One container annotated to be denied: annotate denies,
    // and the chain stops there.
    let pod = nri_sim::workload::pod(1);
    conn.run_pod_sandbox(&pod).await.ok();
    for n in 0..6 {
        conn.create_container(&pod, &container_with(&pod, n, None)).await.expect("created");
    }
    let denied = conn.create_container(&pod, &container_with(&pod, 6, Some(("example.com/deny", "not here")))).await;
    assert!(denied.is_err(), "the annotated container was created");

    let (code, text) = host.get("/metrics").await;
    assert_eq!(code, 200);
    let s = samples(&text);
    let calls = |policy: &str, outcome: &str| {
        value(
            &s,
            "nri_wasm_policy_calls_total",
            &[("policy", policy), ("event", "CreateContainer"), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("10-annotate", "changed"), 6.0, "{text}");
    assert_eq!(calls("10-annotate", "denied"), 1.0);
    assert_eq!(calls("10-annotate", "ok"), 0.0);
    assert_eq!(calls("20-faults", "trap"), 5.0, "{text}");
    assert_eq!(calls("20-faults", "quarantined"), 1.0, "{text}");
    assert_eq!(calls("20-faults", "denied"), 0.0);
    assert_eq!(value(&s, "nri_wasm_events_total", &[("event", "CreateContainer"), ("result", "ok")]), 6.0);
    assert_eq!(value(&s, "nri_wasm_events_total", &[("event", "CreateContainer"), ("result", "denied")]), 1.0);
    assert_eq!(value(&s, "nri_wasm_chain_duration_seconds_count", &[("event", "CreateContainer")]), 7.0);
    assert_eq!(value(&s, "nri_wasm_policy_call_duration_seconds_count", &[("policy", "10-annotate")]), 7.0);
    assert!(value(&s, "nri_wasm_policy_fuel_consumed_total", &[("policy", "10-annotate")]) > 0.0);
    assert_eq!(value(&s, "nri_wasm_registered", &[]), 1.0);
    assert_eq!(value(&s, "nri_wasm_reconnects_total", &[]), 0.0);
    assert_eq!(value(&s, "nri_wasm_answer_budget_overruns_total", &[]), 0.0);
    assert_eq!(value(&s, "nri_wasm_policies", &[("status", "loaded")]), 2.0, "{text}");
    assert_eq!(value(&s, "nri_wasm_policies", &[("status", "failed")]), 1.0, "{text}");
    assert_eq!(value(&s, "nri_wasm_reloads_total", &[("result", "failed")]), 1.0, "{text}");
    assert_eq!(value(&s, "nri_wasm_policy_info", &[("policy", "10-annotate"), ("on_error", "ignore")]), 1.0);

    // Every answer is timed at the socket once it is out (just after the
    // runtime could read it): one per event, each at least its chain.
    let create = [("event", "CreateContainer")];
    let mut s = s;
    for _ in 0..200 {
        if value(&s, "nri_wasm_answer_duration_seconds_count", &create) >= 7.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        s = samples(&host.get("/metrics").await.1);
    }
    assert_eq!(value(&s, "nri_wasm_answer_duration_seconds_count", &create), 7.0);
    let (answers, chains) = (
        value(&s, "nri_wasm_answer_duration_seconds_sum", &create),
        value(&s, "nri_wasm_chain_duration_seconds_sum", &create),
    );
    assert!(answers >= chains && chains > 0.0, "answers {answers} s, chains {chains} s");

    // The same, per policy, as `nri-wasm status` reads it.
    let (code, body) = host.get("/status").await;
    assert_eq!(code, 200);
    let status: HostStatus = serde_json::from_str(&body).unwrap();
    assert!(status.registered && status.chain_loaded, "{status:?}");
    let names: Vec<&str> = status.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["10-annotate", "20-faults", "30-broken"]);
    assert_eq!(status.policies[0].calls.get("changed"), Some(&6));
    assert_eq!(status.policies[1].calls.get("trap"), Some(&5));
    assert!(status.policies[1].quarantined, "{:?}", status.policies[1]);
    assert_eq!(status.policies[2].status, "failed");
    assert!(status.policies[2].reason.contains("not a WebAssembly file"), "{:?}", status.policies[2]);
    let mut printed = Vec::new();
    nri_wasm::cli::print_status(&status, &mut printed).unwrap();
    let printed = String::from_utf8(printed).unwrap();
    assert!(printed.contains("20-faults") && printed.contains("quarantined"), "{printed}");

    // The runtime goes away: not ready any more, still alive.
    conn.close().await;
    let mut unready = false;
    for _ in 0..500 {
        if host.get("/readyz").await.0 == 503 {
            unready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(unready, "/readyz still ready with no runtime");
    assert_eq!(host.get("/healthz").await.0, 200);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_needs_more_events_makes_the_host_resubscribe() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "10-annotate", guests::ANNOTATE, "settings = \"tagged\"\n");
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&policies, &socket, true, FAST);

    let accept = || async { tokio::time::timeout(Duration::from_secs(20), sim.accept()).await.unwrap().unwrap() };
    // The first registration may come before the first load is done (the
    // host registers at once, with what it needs so far); wait for the
    // subscription of the loaded chain.
    let mut conn = accept().await;
    let mut events = conn.configure().await.unwrap().events;
    let create = 1 << (pb::Event::CREATE_CONTAINER as i32 - 1);
    let start = 1 << (pb::Event::START_CONTAINER as i32 - 1);
    while events != create {
        conn.synchronize(&[], &[], 0).await.ok();
        conn = accept().await;
        events = conn.configure().await.unwrap().events;
    }
    conn.synchronize(&[], &[], 0).await.unwrap();
    let w = nri_sim::workload::Workload::generate(2, 1);
    conn.create_container(&w.pods[0], &w.containers[0]).await.unwrap();
    assert!(!conn.is_subscribed(pb::Event::START_CONTAINER));

    // A policy for every lifecycle event arrives.
    std::fs::copy(guests::NOOP, policies.join("20-noop.wasm")).unwrap();
    let mut again = accept().await;
    let events = again.configure().await.unwrap().events;
    assert_eq!(events & start, start, "new mask {events:#x} lacks StartContainer");
    assert_eq!(events & create, create);
    again.synchronize(&w.pods, &w.containers, 0).await.expect("synchronized again");
    again.start_container(&w.pods[0], &w.containers[0]).await.expect("StartContainer now served");
    // Make before break: the old connection goes once the new one serves.
    tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.expect("the old connection is closed");
    let (_, text) = host.get("/metrics").await;
    let s = samples(&text);
    assert!(value(&s, "nri_wasm_reconnects_total", &[]) >= 1.0, "{text}");
    assert_eq!(value(&s, "nri_wasm_policy_calls_total", &[("policy", "20-noop"), ("event", "StartContainer")]), 1.0);
    host.stop().await;
}

/// A policy quarantined by its breaker stays quarantined when a reload
/// changes something else in the directory: the reload keeps its failure
/// history along with its compiled form. Changing the policy's own files
/// gives it a fresh start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_policy_stays_quarantined_across_a_reload_of_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "10-annotate", guests::ANNOTATE, "settings = \"tagged\"\n");
    install(&policies, "20-faults", guests::FAULTS, "settings = \"unreachable\"\non-error = \"ignore\"\n");
    let socket = dir.path().join("nri.sock");
    // One failure trips the breaker for an hour: the test ends long before.
    let host = Host::start_with(&policies, &socket, true, FAST, |c| {
        c.chain.breaker_failures = 1;
        c.chain.breaker_backoff_ms = 3_600_000;
    });
    let (_sim, conn) = host.runtime_once_loaded(&socket).await;
    let w = nri_sim::workload::Workload::generate(1, 3);
    let faults = |s: &HostStatus| s.policies.iter().find(|p| p.name == "20-faults").cloned().expect("20-faults");
    conn.create_container(&w.pods[0], &w.containers[0]).await.expect("the failure is ignored");
    let status = host.status().await;
    assert!(faults(&status).quarantined, "{status:?}");

    // Another policy arrives: the reload keeps 20-faults as it was.
    install(&policies, "15-more", guests::ANNOTATE, "settings = \"more\"\n");
    let status = host.status_until("15-more loaded", |s| s.policies.iter().any(|p| p.name == "15-more")).await;
    assert!(faults(&status).quarantined, "a reload let the policy out of quarantine: {status:?}");
    conn.create_container(&w.pods[0], &w.containers[1]).await.expect("answered");
    let calls = faults(&host.status().await).calls;
    let skipped = calls.get("quarantined").copied().unwrap_or(0);
    assert!(skipped >= 1, "not skipped after the reload: {calls:?}");
    assert_eq!(calls.values().sum::<u64>(), skipped + 1, "called once only: {calls:?}");

    // Its own settings change: another policy, with a fresh breaker.
    std::fs::write(policies.join("20-faults.toml"), "settings = \"unreachable\"\non-error = \"fail\"\n").unwrap();
    let status = host.status_until("20-faults reloaded", |s| faults(s).on_error == "fail").await;
    assert!(!faults(&status).quarantined && faults(&status).failures == 0, "{status:?}");
    host.stop().await;
}

/// A long back-off would keep the host away for 30 s; the socket appearing
/// brings it at once.
const SLOW: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(60));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_started_first_connects_when_the_socket_appears() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let socket = dir.path().join("nri.sock");
    let host = Host::start(&policies, &socket, false, SLOW);
    // Let it fail once and settle into its back-off.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let mut conn = tokio::time::timeout(Duration::from_secs(10), sim.accept())
        .await
        .expect("connected long before the 30 s back-off")
        .unwrap();
    conn.configure().await.unwrap();
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_started_before_the_socket_directory_exists_connects_when_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let run = dir.path().join("run/nri");
    let socket = run.join("nri.sock");
    let host = Host::start(&policies, &socket, false, SLOW);
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::create_dir_all(&run).unwrap();
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let mut conn = tokio::time::timeout(Duration::from_secs(10), sim.accept())
        .await
        .expect("connected long before the 30 s back-off")
        .unwrap();
    conn.configure().await.unwrap();
    host.stop().await;
}
