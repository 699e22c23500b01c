//! The DaemonSet as an operator applies it: the kustomization unchanged,
//! policies from a ConfigMap, pods made by Deployments (issue #32, tests 1
//! to 3).

use std::time::{Duration, Instant};

use nri_wasm_cluster::cluster::{Options, BUSYBOX};
use nri_wasm_cluster::kubectl::{clip, pod_ready};
use nri_wasm_cluster::wait_for;
use serde_json::Value;

use crate::support::*;

/// 1. `kubectl apply -k` of the project's overlay: the pod is Ready (which
///    means registered), `/metrics` answers, `nri-wasm status` works inside
///    the pod, nothing at WARN or ERROR at start; the compile cache works in
///    the pod (its key inside the mounted directory, on a read-only root),
///    so a deleted pod's replacement loads every policy from it.
#[test]
fn the_kustomization_as_shipped_runs_registered_and_restarts_warm() {
    let c = start(Options::default());
    set_policies(&c, &[metadata_env(), allowed_images(&["localhost/nri-wasm", "registry.example.com"])]);
    deploy(&c);
    let pod = host_pod(&c);
    let first = name(&pod);
    let status = wait_status(&c, &pod, "both policies loaded", 120, |s| all_loaded(s, 2));
    assert_eq!(status["registered"], true, "{status}");

    let (code, _) = host_get(&c, &pod, "/readyz").expect("/readyz answers");
    assert_eq!(code, 200);
    let (code, metrics) = host_get(&c, &pod, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    assert_eq!(
        nri_wasm_cluster::http::sample(&metrics, "nri_wasm_registered", &[]),
        Some(1.0),
        "{}",
        clip(&metrics, 2000)
    );

    // `nri-wasm status` inside the pod, as docs/deploy/README.md runs it.
    let table = c
        .kubectl
        .run(&["-n", NS, "exec", "ds/nri-wasm", "--", "nri-wasm", "status", "--address", "127.0.0.1:9580"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(table.contains("runtime: registered"), "{table}");
    for p in ["10-pod-metadata-env", "20-allowed-images"] {
        assert!(table.lines().any(|l| l.starts_with(p) && l.contains("loaded")), "{p} in:\n{table}");
    }

    let log = host_log(&c, &first);
    // A cold start compiles: on this machine longer than the host waits
    // before it registers ([runtime] start-wait-ms), so the runtime's
    // Synchronize finds the policies still loading. That, and only that,
    // is reported (issue #31, section 2, is about what it fails).
    let cold_start_only = |r: &String| {
        let v: Value = serde_json::from_str(r).unwrap_or(Value::Null);
        let not_ready = v["error"].as_str().is_some_and(|e| e.contains("not ready yet"));
        v["message"]
            == "registering before the subscription of every policy is known; a reconnect follows if they need more"
            || (v["message"] == "policy not ready: the event goes on without it" && not_ready)
            || (v["message"] == "policies failed to reconcile on Synchronize; answering without updates" && not_ready)
    };
    let unexpected: Vec<_> = problems(&log).into_iter().filter(|r| !cold_start_only(r)).collect();
    assert_eq!(unexpected, Vec::<String>::new(), "nothing else at WARN or ERROR at a cold start:\n{log}");
    let loads = records(&log, "policy loaded");
    assert_eq!(loads.len(), 2, "{log}");
    assert!(loads.iter().all(|r| r["cached"] == false), "a cold start compiles: {loads:?}");
    // The host knows its own pod by the UID the downward API hands it: no
    // policy may update or evict its containers (tests/e2e own_pod).
    let own = records(&log, "running in this pod: no policy may update or evict its containers");
    assert_eq!(own.len(), 1, "{log}");
    assert_eq!(own[0]["pod_uid"], pod["metadata"]["uid"], "{pod}");

    // The cache and its key are in the mounted directory; nothing beside it.
    let cache = c.node_path("/var/cache/nri-wasm");
    let files: Vec<String> =
        std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(files.iter().any(|f| f == "key"), "{files:?}");
    assert_eq!(files.iter().filter(|f| f.ends_with(".cwasm")).count(), 2, "{files:?}");
    let beside: Vec<String> = std::fs::read_dir(c.node_path("/var/cache"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside, ["nri-wasm"], "nothing written beside the cache directory");

    // The pod's replacement starts warm.
    c.kubectl.run(&["-n", NS, "delete", "pod", &first, "--wait=true"]).unwrap_or_else(|e| panic!("{e}"));
    let pod = wait_for("a replacement pod", Duration::from_secs(180), || {
        let p = host_pod(&c);
        (name(&p) != first).then_some(p)
    })
    .unwrap();
    wait_status(&c, &pod, "both policies loaded again", 120, |s| all_loaded(s, 2) && s["registered"] == true);
    let log = host_log(&c, &name(&pod));
    assert_eq!(problems(&log), Vec::<String>::new(), "{log}");
    let loads = records(&log, "policy loaded");
    assert_eq!(loads.len(), 2, "{log}");
    assert!(loads.iter().all(|r| r["cached"] == true), "every policy from the compile cache: {loads:?}");
}

/// 2. Pods made by a Deployment get their policies' adjustments, seen inside
///    the running container; a denial is a Kubernetes event on the pod
///    naming the policy and its reason; the pod recovers once the policy
///    changes.
#[test]
fn deployments_get_their_policies_and_a_denial_is_an_event_until_the_policy_changes() {
    let c = start(Options::default());
    set_policies(&c, &[metadata_env(), allowed_images(&["localhost/nri-wasm"])]);
    deploy(&c);
    let host = host_pod(&c);
    wait_status(&c, &host, "both policies loaded", 120, |s| all_loaded(s, 2));

    c.kubectl.apply(&deployment("web", 2, BUSYBOX, &[("example.com/owner", "team-web")])).unwrap();
    for p in wait_ready(&c, "web", 2, 180) {
        let env = env_in(&c, "default", &name(&p));
        assert_eq!(env_value(&env, "APP_NAME").as_deref(), Some("web"), "{env}");
        assert_eq!(env_value(&env, "POD_TIER").as_deref(), Some("backend"), "{env}");
        assert_eq!(env_value(&env, "TEAM").as_deref(), Some("team-web"), "{env}");
    }

    // The same image under a name from a registry the policy does not allow.
    let other = "localhost/other/busybox:1";
    c.ctr(&["images", "tag", "--force", BUSYBOX, other]).unwrap();
    c.kubectl.apply(&deployment("other", 1, other, &[])).unwrap();
    let denied = wait_for("the denial as an event on the pod", Duration::from_secs(180), || {
        let pod = pods_of(&c, "other").into_iter().next()?;
        let events = events_of(&c, "default", &name(&pod));
        let found = events.iter().find_map(|e| {
            let m = e["message"].as_str()?;
            m.contains("20-allowed-images").then(|| (name(&pod), m.to_string(), e.clone()))
        });
        if found.is_none() {
            std::thread::sleep(Duration::from_millis(500));
        }
        found
    })
    .unwrap_or_else(|e| panic!("{e}; events: {:?}", c.kubectl.items(&["events", "-n", "default"])));
    let (pod, message, event) = denied;
    assert_eq!(event["type"], "Warning", "{event}");
    assert!(message.contains(other) && message.contains("registr"), "names the image and why: {message}");
    assert!(!pods_of(&c, "other").iter().any(pod_ready));

    // The operator allows the registry: the kubelet's next attempt succeeds.
    let changed = Instant::now();
    set_policies(&c, &[metadata_env(), allowed_images(&["localhost/nri-wasm", "localhost/other"])]);
    let ready = wait_ready(&c, "other", 1, 300);
    assert_eq!(name(&ready[0]), pod, "the same pod recovered");
    eprintln!("the denied pod was created {:.1} s after the policy changed", since(changed));
    let env = env_in(&c, "default", &pod);
    assert_eq!(env_value(&env, "APP_NAME").as_deref(), Some("other"), "{env}");
}

/// 3. A ConfigMap edit reaches the host through the kubelet's `..data`
///    symlink swap, without a restart, and is applied; a broken version never
///    displaces the good one, and status says so.
#[test]
fn a_configmap_edit_reaches_the_host_and_a_broken_one_never_displaces_the_good() {
    let c = start(Options::default());
    set_policies(&c, &[metadata_env()]);
    deploy(&c);
    let host = host_pod(&c);
    let host_name = name(&host);
    wait_status(&c, &host, "the policy loaded", 120, |s| all_loaded(s, 1));
    let loads_before = records(&host_log(&c, &host_name), "policy loaded").len();

    // New settings: the label `app` as APPLICATION.
    let edited = metadata_env().with_toml(
        "on-error = \"ignore\"\n\n[settings.labels]\napp = \"APPLICATION\"\n\n[settings.annotations]\n\"example.com/owner\" = \"TEAM\"\n",
    );
    let edit = Instant::now();
    set_policies(&c, std::slice::from_ref(&edited));
    wait_for(
        "the host reloading the edited policy",
        Duration::from_secs(c.options.sync_frequency_secs * 3 + 120),
        || {
            let n = records(&host_log(&c, &host_name), "policy loaded").len();
            if n > loads_before {
                return Some(());
            }
            std::thread::sleep(Duration::from_millis(250));
            None
        },
    )
    .unwrap();
    let applied = since(edit);
    let sync = c.options.sync_frequency_secs;
    eprintln!("ConfigMap edit applied {applied:.1} s after kubectl apply (kubelet syncFrequency {sync} s)");
    let now = host_pod(&c);
    assert_eq!(name(&now), host_name, "no restart: the same pod");
    assert_eq!(now["status"]["containerStatuses"][0]["restartCount"], 0, "{now}");
    c.kubectl.apply(&pod("after-edit", &[("app", "after-edit")], &[])).unwrap();
    let p = wait_ready_pod(&c, "after-edit");
    let env = env_in(&c, "default", &p);
    assert_eq!(env_value(&env, "APPLICATION").as_deref(), Some("after-edit"), "{env}");
    assert_eq!(env_value(&env, "APP_NAME"), None, "{env}");

    // A broken component: refused, the edited version keeps running.
    let mut broken = edited.clone();
    broken.wasm = b"\0asm not a component".to_vec();
    set_policies(&c, &[broken]);
    let status = wait_status(&c, &host, "the broken version refused", sync * 3 + 120, |s| {
        let p = policy(s, "10-pod-metadata-env");
        p["status"] == "loaded" && !p["refused"].as_str().unwrap_or("").is_empty()
    });
    eprintln!("refused: {}", policy(&status, "10-pod-metadata-env")["refused"]);
    let table = c
        .kubectl
        .run(&["-n", NS, "exec", &host_name, "--", "nri-wasm", "status", "--address", "127.0.0.1:9580"])
        .unwrap();
    assert!(table.contains("new version refused, this one keeps running"), "{table}");
    c.kubectl.apply(&pod("after-broken", &[("app", "after-broken")], &[])).unwrap();
    let p = wait_ready_pod(&c, "after-broken");
    let env = env_in(&c, "default", &p);
    assert_eq!(env_value(&env, "APPLICATION").as_deref(), Some("after-broken"), "the good version applies: {env}");
}

/// Waits until the bare pod `name` is Ready; its name.
fn wait_ready_pod(c: &nri_wasm_cluster::cluster::Cluster, name: &str) -> String {
    c.kubectl
        .wait_object(&format!("pod {name} Ready"), &["pod", "-n", "default", name], 180, pod_ready)
        .map(|p: Value| p["metadata"]["name"].as_str().unwrap().to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}
