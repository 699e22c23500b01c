//! The plugin on a busy node: a start-up among 100 running pods, and 500
//! pods created and deleted under ten policies (issue #32, tests 7 and 8).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nri_wasm_cluster::cluster::{Cluster, Options, BUSYBOX};
use nri_wasm_cluster::http::sample;
use nri_wasm_cluster::kubectl::clip;
use nri_wasm_cluster::wait_for;
use serde_json::Value;

use crate::support::*;

/// 7. The host starts on a node that already runs 100 pods: the runtime's
///    Synchronize is answered (the runtime keeps the plugin), and a policy
///    that reads the node view sees those pods from the first event on: the
///    `mirror` test policy updates every other container named `main` when
///    one is created, and all 100 from before the host get the update.
#[test]
fn a_start_among_a_hundred_pods_synchronizes_and_policies_see_them() {
    let c = start(Options::default());
    c.kubectl.apply(&deployment("crowd", 100, BUSYBOX, &[])).unwrap();
    let started = Instant::now();
    let crowd = wait_ready(&c, "crowd", 100, 900);
    eprintln!("100 pods Ready in {:.0} s", since(started));

    let mirror = Policy::new(
        "30-mirror",
        nri_wasm_test_support::guests::MIRROR,
        "on-error = \"fail\"\ngrant = [\"updates\"]\nsettings = \"-update=main:cpu-period=100000,cpu-quota=50000\"\n",
    );
    set_policies(&c, &[mirror]);
    deploy(&c);
    let host = host_pod(&c);
    let status = wait_status(&c, &host, "the policy loaded", 120, |s| all_loaded(s, 1) && s["registered"] == true);
    assert_eq!(status["reconnects"], 0, "{status}");
    let log = host_log(&c, &name(&host));
    let sync = records(&log, "synchronized with runtime");
    assert_eq!(sync.len(), 1, "{log}");
    assert!(sync[0]["pods"].as_u64() >= Some(101) && sync[0]["containers"].as_u64() >= Some(100), "{}", sync[0]);
    let containerd = c.log_text("containerd");
    assert!(
        containerd.contains("plugin \\\"10-nri-wasm\\\" connected and synchronized"),
        "{}",
        clip(&containerd, 3000)
    );
    assert!(!containerd.contains("closing plugin"), "the runtime kept the plugin:\n{}", clip(&containerd, 3000));

    let ids: Vec<String> = crowd.iter().map(container_id).collect();
    assert!(quotas(&c, &ids).iter().all(|q| *q == -1), "no quota before");
    c.kubectl.apply(&pod("newcomer", &[("app", "newcomer")], &[])).unwrap();
    c.kubectl
        .wait_object(
            "the newcomer Ready",
            &["pod", "-n", "default", "newcomer"],
            180,
            nri_wasm_cluster::kubectl::pod_ready,
        )
        .unwrap();
    let q = quotas(&c, &ids);
    assert_eq!(q.len(), 100, "every container of the crowd found");
    assert!(q.iter().all(|q| *q == 50_000), "every pod from before the host was updated: {q:?}");
}

/// The container id of a pod's first container.
fn container_id(pod: &Value) -> String {
    let id = pod["status"]["containerStatuses"][0]["containerID"].as_str().expect("a container id");
    id.trim_start_matches("containerd://").to_string()
}

/// `cpu.cfs_quota_us` of each container in `ids`, from its cgroup (v1).
fn quotas(c: &Cluster, ids: &[String]) -> Vec<i64> {
    let root = std::path::Path::new("/sys/fs/cgroup/cpu").join(c.cgroup_root().trim_start_matches('/'));
    let mut found = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        if dir.file_name().is_some_and(|n| ids.iter().any(|id| *id == n.to_string_lossy())) {
            let text = std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).unwrap_or_default();
            found.push(text.trim().parse().unwrap_or(i64::MIN));
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    found
}

/// The ten example policies, with settings for this node, installed on the
/// node's `/etc/nri-wasm/policies` as the hostPath overlay expects (ten
/// Rust policies, about 2.3 MB, are more than a ConfigMap holds).
fn ten_examples() -> Vec<Policy> {
    let mut all: Vec<Policy> = nri_wasm_components::examples::ALL
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| Policy::example(name, &format!("{:02}", 10 + i)))
        .collect();
    for p in &mut all {
        if p.name.ends_with("allowed-images") {
            p.toml = allowed_images(&["localhost/nri-wasm", "registry.example.com"]).toml;
        }
    }
    assert_eq!(all.len(), 10);
    all
}

/// 8. Under churn, 500 pods created and deleted with ten policies: the
///    plugin pod's memory stays under the DaemonSet's limit, its liveness
///    probe never restarts it, and no answer is late (no overrun, the
///    runtime never drops it).
#[test]
fn five_hundred_pods_of_churn_under_ten_policies() {
    let c = start(Options::default());
    let dir = c.ns().node_file("/etc/nri-wasm/policies");
    std::fs::create_dir_all(&dir).unwrap();
    let policies = ten_examples();
    for p in &policies {
        std::fs::write(dir.join(format!("{}.wasm", p.name)), &p.wasm).unwrap();
        std::fs::write(dir.join(format!("{}.toml", p.name)), &p.toml).unwrap();
    }
    let overlay = nri_wasm_cluster::repo().join("docs/deploy/kustomize/overlays/hostpath-policies");
    c.kubectl.run(&["apply", "-k", &overlay.display().to_string()]).unwrap();
    rollout(&c);
    let host = host_pod(&c);
    wait_status(&c, &host, "ten policies loaded", 300, |s| all_loaded(s, 10) && s["registered"] == true);
    let uid = host["metadata"]["uid"].as_str().unwrap().to_string();
    let limit = host["spec"]["containers"][0]["resources"]["limits"]["memory"].as_str().unwrap().to_string();

    // The probes' record before the churn (a readiness probe fails while
    // the policies load at start, as it should).
    let probe_events = |c: &Cluster| -> BTreeMap<String, (u64, String)> {
        events_of(c, NS, &name(&host))
            .into_iter()
            .filter(|e| e["reason"] == "Unhealthy" || e["reason"] == "Killing")
            .map(|e| (name(&e), (e["count"].as_u64().unwrap_or(1), e["message"].as_str().unwrap_or("").to_string())))
            .collect()
    };
    let before = probe_events(&c);
    eprintln!("probe events before the churn: {before:?}");
    // A cold start may reconnect once to subscribe to what the policies
    // need; the churn must add none.
    let reconnects = host_status(&c, &host).unwrap()["reconnects"].as_u64();
    let dropped = |c: &Cluster| c.log_text("containerd").matches("closing plugin").count();
    let dropped_before = dropped(&c);
    const ROUNDS: usize = 10;
    const BATCH: usize = 50;
    let churn = Instant::now();
    c.kubectl.apply(&deployment("churn", 0, BUSYBOX, &[("example.com/owner", "churn")])).unwrap();
    let mut peak = 0u64;
    for round in 0..ROUNDS {
        c.kubectl.run(&["-n", "default", "scale", "deployment/churn", &format!("--replicas={BATCH}")]).unwrap();
        let pods = wait_ready(&c, "churn", BATCH, 600);
        // One pod of each batch, read inside: the policies applied.
        let env = env_in(&c, "default", &name(&pods[round % pods.len()]));
        assert_eq!(env_value(&env, "TEAM").as_deref(), Some("churn"), "round {round}: {env}");
        c.kubectl.run(&["-n", "default", "scale", "deployment/churn", "--replicas=0"]).unwrap();
        wait_for("the batch gone", Duration::from_secs(300), || {
            let left = pods_of(&c, "churn").len();
            peak = peak.max(memory_peak(&c, &uid).unwrap_or(0));
            if left == 0 {
                return Some(());
            }
            std::thread::sleep(Duration::from_millis(500));
            None
        })
        .unwrap();
    }
    peak = peak.max(memory_peak(&c, &uid).unwrap_or(0));
    eprintln!(
        "{} pods created and deleted in {:.0} s; the host's container peaked at {} MiB (limit {limit})",
        ROUNDS * BATCH,
        since(churn),
        peak >> 20
    );
    let limit_bytes = parse_quantity(&limit);
    assert!(peak > 0 && peak < limit_bytes, "peak {peak} under the limit {limit_bytes}");

    let now = host_pod(&c);
    assert_eq!(name(&now), name(&host));
    let (_, metrics) = host_get(&c, &now, "/metrics").expect("/metrics");
    assert_eq!(sample(&metrics, "nri_wasm_answer_budget_overruns_total", &[]), Some(0.0), "no answer late");
    let created = sample(&metrics, "nri_wasm_events_total", &[("event", "CreateContainer"), ("result", "ok")]);
    assert!(created >= Some((ROUNDS * BATCH) as f64), "every create answered: {created:?}");
    for bad in ["failed", "deadline"] {
        let n = sample(&metrics, "nri_wasm_events_total", &[("event", "CreateContainer"), ("result", bad)]);
        if n.is_some() {
            let lines: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("nri_wasm_") && !l.contains("result=\"ok\"") && !l.contains("outcome=\"ok\""))
                .filter(|l| l.contains("events_total") || l.contains("calls_total"))
                .collect();
            // What the host said about them: its warnings and errors (its
            // info lines, one per decision, would bury them).
            let log = c.kubectl.run(&["-n", NS, "logs", &name(&now)]).unwrap_or_default();
            let said: Vec<&str> = log.lines().filter(|l| !l.contains("\"level\":\"INFO\"")).collect();
            let said = said[said.len().saturating_sub(40)..].join("\n");
            panic!("{n:?} {bad} create(s); the host's counts:\n{}\nits warnings and errors:\n{said}", lines.join("\n"));
        }
    }
    assert_eq!(now["status"]["containerStatuses"][0]["restartCount"], 0, "never restarted: {now}");
    let during: Vec<_> =
        probe_events(&c).into_iter().filter(|(k, (n, _))| before.get(k).is_none_or(|(m, _)| n > m)).collect();
    assert!(during.is_empty(), "no probe failed during the churn, none restarted it: {during:?}");
    let s = host_status(&c, &now).unwrap();
    assert_eq!(s["reconnects"].as_u64(), reconnects, "the runtime never dropped the host: {s}");
    assert_eq!(dropped(&c), dropped_before, "containerd closed no plugin during the churn");
}

/// The highest memory use of the host pod's containers so far
/// (`memory.max_usage_in_bytes` of the pod's cgroup, v1).
fn memory_peak(c: &Cluster, pod_uid: &str) -> Option<u64> {
    let pattern = format!("pod{pod_uid}");
    let root = std::path::Path::new("/sys/fs/cgroup/memory").join(c.cgroup_root().trim_start_matches('/'));
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        if dir.file_name().is_some_and(|n| n.to_string_lossy() == pattern) {
            let text = std::fs::read_to_string(dir.join("memory.max_usage_in_bytes")).ok()?;
            return text.trim().parse().ok();
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    None
}

/// A Kubernetes memory quantity (`3584Mi`, `2Gi`, bytes) in bytes.
fn parse_quantity(q: &str) -> u64 {
    let (num, mul) = match q {
        _ if q.ends_with("Gi") => (&q[..q.len() - 2], 1 << 30),
        _ if q.ends_with("Mi") => (&q[..q.len() - 2], 1 << 20),
        _ if q.ends_with("Ki") => (&q[..q.len() - 2], 1 << 10),
        _ => (q, 1),
    };
    num.parse::<u64>().unwrap_or_else(|_| panic!("quantity {q}")) * mul
}
