//! What the cluster tests share: the image, the policies as a ConfigMap,
//! the kustomization applied as the docs say, the host's pod and its
//! endpoint, and workloads.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nri_wasm_cluster::cluster::{Cluster, Options, BUSYBOX};
use nri_wasm_cluster::kubectl::{clip, pod_ready};
use nri_wasm_cluster::{http, image, wait_for};
use serde_json::Value;

pub const NS: &str = "kube-system";
pub const HOST_LABEL: &str = "app.kubernetes.io/name=nri-wasm";

pub fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_nri-wasm-cluster-host"))
}

/// The nri-wasm image tagged `tag`, as an OCI archive.
pub fn image(tag: &str) -> PathBuf {
    image::ensure(host_bin(), tag).unwrap_or_else(|e| panic!("building the image: {e}"))
}

/// A cluster with the nri-wasm image of the kustomization imported.
pub fn start(options: Options) -> Cluster {
    start_with_images(options, &[image(image::TAG)])
}

pub fn start_with_images(options: Options, images: &[PathBuf]) -> Cluster {
    Cluster::start(options, images).unwrap_or_else(|e| panic!("starting the cluster: {e}"))
}

/// A policy file set: `NN-name.wasm` and its `NN-name.toml`.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub wasm: Vec<u8>,
    pub toml: String,
}

impl Policy {
    pub fn new(name: &str, wasm_path: &str, toml: &str) -> Policy {
        let wasm = std::fs::read(wasm_path).unwrap_or_else(|e| panic!("{wasm_path}: {e}"));
        Policy { name: name.into(), wasm, toml: toml.into() }
    }

    /// An example policy with the `policy.toml` it ships.
    pub fn example(name: &str, index: &str) -> Policy {
        let (_, path, _) = nri_wasm_components::examples::ALL
            .iter()
            .find(|(n, _, _)| *n == name)
            .unwrap_or_else(|| panic!("no example {name}"));
        let toml = nri_wasm_components::examples::POLICY_FILES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .unwrap_or_else(|| panic!("example {name} has no policy.toml"));
        Policy::new(&format!("{index}-{name}"), path, toml)
    }

    pub fn with_toml(mut self, toml: &str) -> Policy {
        self.toml = toml.into();
        self
    }
}

/// pod-metadata-env: `app` label as APP_NAME, `example.com/owner` as TEAM.
pub fn metadata_env() -> Policy {
    Policy::example("pod-metadata-env", "10")
}

/// allowed-images allowing `registries` (tags allowed).
pub fn allowed_images(registries: &[&str]) -> Policy {
    let list = registries.iter().map(|r| format!("{r:?}")).collect::<Vec<_>>().join(", ");
    Policy::example("allowed-images", "20")
        .with_toml(&format!("on-error = \"fail\"\n\n[settings]\nregistries = [{list}]\nrequire-digest = false\n"))
}

/// Creates or updates the ConfigMap `nri-wasm-policies` from `policies`, as
/// the overlay's comment tells an operator (`kubectl create configmap
/// --from-file=DIR --dry-run=client -o yaml | kubectl apply --server-side
/// -f -`: a client-side apply keeps a copy of the whole object in an
/// annotation, limited to 256 KiB, which two policies already exceed).
pub fn set_policies(c: &Cluster, policies: &[Policy]) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = c.dir().join(format!("policies-{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    for p in policies {
        std::fs::write(dir.join(format!("{}.wasm", p.name)), &p.wasm).unwrap();
        std::fs::write(dir.join(format!("{}.toml", p.name)), &p.toml).unwrap();
    }
    let from = format!("--from-file={}", dir.display());
    let yaml = c
        .kubectl
        .run(&["-n", NS, "create", "configmap", "nri-wasm-policies", &from, "--dry-run=client", "-o", "yaml"])
        .unwrap_or_else(|e| panic!("{e}"));
    c.kubectl
        .run_with(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&yaml))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// `kubectl apply -k` of the project's overlay, unchanged, then `rollout
/// status` as the docs say.
pub fn deploy(c: &Cluster) {
    let overlay = nri_wasm_cluster::repo().join("docs/deploy/kustomize/overlays/configmap-policies");
    c.kubectl.run(&["apply", "-k", &overlay.display().to_string()]).unwrap_or_else(|e| panic!("{e}"));
    rollout(c);
}

/// Waits for the DaemonSet's rollout to finish.
pub fn rollout(c: &Cluster) {
    c.kubectl
        .run(&["-n", NS, "rollout", "status", "ds/nri-wasm", "--timeout=300s"])
        .unwrap_or_else(|e| panic!("{e}\nkubelet: {}", c.log_tail("kubelet", 30)));
}

/// The DaemonSet's pods.
pub fn host_pods(c: &Cluster) -> Vec<Value> {
    c.kubectl.items(&["pods", "-n", NS, "-l", HOST_LABEL]).unwrap_or_else(|e| panic!("{e}"))
}

/// The one Ready pod of the DaemonSet, waiting for it (backstop 180 s).
pub fn host_pod(c: &Cluster) -> Value {
    wait_for("one Ready nri-wasm pod", Duration::from_secs(180), || {
        let pods = host_pods(c);
        let ready: Vec<_> =
            pods.into_iter().filter(|p| pod_ready(p) && p["metadata"]["deletionTimestamp"].is_null()).collect();
        if ready.len() == 1 {
            return ready.into_iter().next();
        }
        std::thread::sleep(Duration::from_millis(300));
        None
    })
    .unwrap_or_else(|e| panic!("{e}: {}", clip(&format!("{:?}", host_pods(c)), 2000)))
}

pub fn name(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().expect("metadata.name").to_string()
}

/// The host's endpoint in `pod`.
pub fn host_addr(pod: &Value) -> SocketAddr {
    let ip = pod["status"]["podIP"].as_str().expect("a pod IP");
    format!("{ip}:9580").parse().expect("address")
}

/// `GET path` on the host of `pod`, from the node.
pub fn host_get(c: &Cluster, pod: &Value, path: &str) -> Option<(u16, String)> {
    let addr = host_addr(pod);
    let path = path.to_string();
    c.ns().in_net(move || http::get(addr, &path)).unwrap_or_else(|e| panic!("{e}"))
}

/// The host's `/status` in `pod`.
pub fn host_status(c: &Cluster, pod: &Value) -> Option<Value> {
    let (code, body) = host_get(c, pod, "/status")?;
    (code == 200).then(|| serde_json::from_str(&body).ok()).flatten()
}

/// Waits (backstop `secs`) until the host's `/status` satisfies `check`.
pub fn wait_status(c: &Cluster, pod: &Value, what: &str, secs: u64, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = None;
    wait_for(what, Duration::from_secs(secs), || {
        let s = host_status(c, pod);
        if let Some(s) = s.filter(|s| check(s)) {
            return Some(s);
        }
        last = host_status(c, pod);
        std::thread::sleep(Duration::from_millis(250));
        None
    })
    .unwrap_or_else(|e| panic!("{e}; last status: {last:?}"))
}

/// Every policy in `status` loaded, and as many as `n`.
pub fn all_loaded(s: &Value, n: usize) -> bool {
    s["policies"].as_array().is_some_and(|ps| ps.len() == n && ps.iter().all(|p| p["status"] == "loaded"))
}

/// The policy `name` in `status`.
pub fn policy<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["policies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no policy {name} in {s}"))
}

/// The host's log in `pod` (JSON lines).
pub fn host_log(c: &Cluster, pod: &str) -> String {
    c.kubectl.run(&["-n", NS, "logs", pod]).unwrap_or_else(|e| panic!("{e}"))
}

/// The records of a JSON log at WARN or ERROR.
pub fn problems(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
            matches!(v["level"].as_str(), Some("WARN" | "ERROR"))
        })
        .map(str::to_string)
        .collect()
}

/// The log records whose message is `message`.
pub fn records(log: &str, message: &str) -> Vec<Value> {
    log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["message"] == message).collect()
}

/// A Deployment of busybox pods that sleep, labelled for pod-metadata-env.
pub fn deployment(name: &str, replicas: u32, image: &str, annotations: &[(&str, &str)]) -> String {
    let ann: String = annotations.iter().map(|(k, v)| format!("        {k}: {v:?}\n")).collect();
    let ann = if ann.is_empty() { String::new() } else { format!("      annotations:\n{ann}") };
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
        tier: backend
{ann}    spec:
      terminationGracePeriodSeconds: 1
      automountServiceAccountToken: false
      enableServiceLinks: false
      containers:
        - name: main
          image: {image}
          imagePullPolicy: Never
          command: ["sleep", "3600"]
"#
    )
}

/// A bare pod of busybox that sleeps.
pub fn pod(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> String {
    let lab: String = labels.iter().map(|(k, v)| format!("    {k}: {v:?}\n")).collect();
    let ann: String = annotations.iter().map(|(k, v)| format!("    {k}: {v:?}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n    test: cluster\n{lab}  annotations:\n    test: cluster\n{ann}\
         spec:\n  terminationGracePeriodSeconds: 1\n  automountServiceAccountToken: false\n  enableServiceLinks: false\n\
         \x20 containers:\n    - name: main\n      image: {BUSYBOX}\n      imagePullPolicy: Never\n      command: [\"sleep\", \"3600\"]\n"
    )
}

/// The pods of namespace `default` with label `app=<app>`.
pub fn pods_of(c: &Cluster, app: &str) -> Vec<Value> {
    c.kubectl.items(&["pods", "-n", "default", "-l", &format!("app={app}")]).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `n` pods of `app` are Ready (backstop `secs`).
pub fn wait_ready(c: &Cluster, app: &str, n: usize, secs: u64) -> Vec<Value> {
    wait_for(&format!("{n} Ready pods of {app}"), Duration::from_secs(secs), || {
        let pods: Vec<_> = pods_of(c, app).into_iter().filter(pod_ready).collect();
        if pods.len() == n {
            return Some(pods);
        }
        std::thread::sleep(Duration::from_millis(300));
        None
    })
    .unwrap_or_else(|e| panic!("{e}: {}", clip(&format!("{:?}", pods_of(c, app)), 3000)))
}

/// The environment of `pod`'s running container, read inside it.
pub fn env_in(c: &Cluster, namespace: &str, pod: &str) -> String {
    c.kubectl.run(&["-n", namespace, "exec", pod, "--", "env"]).unwrap_or_else(|e| panic!("{e}"))
}

/// The value of `key` in `env` output.
pub fn env_value(env: &str, key: &str) -> Option<String> {
    env.lines().find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// The events of the object `name` in `namespace`.
pub fn events_of(c: &Cluster, namespace: &str, name: &str) -> Vec<Value> {
    c.kubectl
        .items(&["events", "-n", namespace, "--field-selector", &format!("involvedObject.name={name}")])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Seconds since `t`, for messages.
pub fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// A host run as a process inside the node (not as a pod), for what a pod
/// cannot show: a SIGKILL at a chosen moment, with the kubelet stopped.
#[derive(Debug)]
pub struct NodeHost {
    process: Option<nri_wasm_runtimes::process::Process>,
    addr: SocketAddr,
    name: String,
    log: PathBuf,
    args: Vec<String>,
}

impl NodeHost {
    /// Starts a host registered as `10-nri-wasm` on the node's NRI socket,
    /// with `policies`, directories of its own under the cluster's.
    pub fn start(c: &Cluster, name: &str, port: u16, policies: &[Policy]) -> NodeHost {
        let dir = c.dir().join(name);
        let pdir = dir.join("policies");
        std::fs::create_dir_all(&pdir).unwrap();
        for p in policies {
            std::fs::write(pdir.join(format!("{}.wasm", p.name)), &p.wasm).unwrap();
            std::fs::write(pdir.join(format!("{}.toml", p.name)), &p.toml).unwrap();
        }
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[plugin]\nname = \"nri-wasm\"\nindex = \"10\"\n\n\
                 [runtime]\nsocket = \"/var/run/nri/nri.sock\"\nreconnect-initial-ms = 100\nreconnect-max-ms = 1000\n\n\
                 [policies]\ndir = {pdir:?}\n\n[engine]\ncache-dir = {:?}\n\n[registry]\ncache-dir = {:?}\n\n\
                 [metrics]\naddress = \"{addr}\"\n\n[logging]\nformat = \"json\"\n",
                dir.join("cache"),
                dir.join("registry"),
            ),
        )
        .unwrap();
        let args = vec!["run".to_string(), "--config".into(), config.display().to_string()];
        let mut host =
            NodeHost { process: None, addr, name: name.into(), log: c.dir().join(format!("logs/{name}.log")), args };
        host.spawn(c);
        host
    }

    fn spawn(&mut self, c: &Cluster) {
        self.process = Some(c.spawn_in_node(&self.name, host_bin(), &self.args).unwrap_or_else(|e| panic!("{e}")));
    }

    /// Starts it again (same configuration and cache).
    pub fn restart(&mut self, c: &Cluster) {
        self.terminate();
        self.spawn(c);
    }

    pub fn status(&self, c: &Cluster) -> Option<Value> {
        let addr = self.addr;
        let (code, body) = c.ns().in_net(move || http::get(addr, "/status")).ok()??;
        (code == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }

    /// Waits until it is registered with every policy loaded.
    pub fn wait_ready(&mut self, c: &Cluster, policies: usize) {
        let log = self.log.clone();
        wait_for("the node's host registered and loaded", Duration::from_secs(120), || {
            let s = self.status(c)?;
            if s["registered"] == true && all_loaded(&s, policies) {
                return Some(());
            }
            std::thread::sleep(Duration::from_millis(100));
            None
        })
        .unwrap_or_else(|e| panic!("{e}: {}", std::fs::read_to_string(&log).unwrap_or_default()));
    }

    /// SIGKILL, as the OOM killer or a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
    }

    /// SIGTERM, and waits for it to exit.
    pub fn terminate(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop(Duration::from_secs(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
