//! One single-node cluster: etcd, the API server, the controller manager
//! and the scheduler on the node's loopback, containerd 2.3.4 with NRI at
//! its standard socket (`/var/run/nri/nri.sock`, in the node's `/run`), and
//! a kubelet on it with a bridge pod network.
//!
//! Settings this machine needs: cgroup v1 without systemd (`cgroupDriver:
//! cgroupfs`, `failCgroupV1: false`), no swap check, no image pulls (the
//! pause, busybox and nri-wasm images are imported), containerd's
//! `restrict_oom_score_adj` (no CAP_SYS_RESOURCE in the VM), eviction and
//! image garbage collection out of the way (a busy shared disk must not
//! evict the test's pods).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nri_wasm_runtimes::process::{self, Process};

use crate::kubectl::{clip, condition, Kubectl};
use crate::ns::{Namespaces, NODE_IP};
use crate::pki::Pki;
use crate::{etcd_bin, kube_bin, wait_for, Error};

/// The node's name.
pub const NODE: &str = "nri-wasm-node";
/// The pod network (one /24 on a bridge, addresses from host-local).
pub const POD_SUBNET: &str = "10.88.0.0/24";
/// The bridge's address in the pod network: the node, seen from a pod.
pub const POD_GATEWAY: &str = "10.88.0.1";
/// The key of the toleration annotation (docs/deploy/runtimes.md).
pub const TOLERATE: &str = "tolerate-missing-plugins.nri-wasm";
/// The busybox image the tests' pods run (`imagePullPolicy: Never`).
pub const BUSYBOX: &str = nri_wasm_runtimes::images::BUSYBOX;

/// How the node is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// containerd's default validator requires the plugin (the fail-closed
    /// set-up of docs/deploy/runtimes.md, its snippet as written there).
    pub fail_closed: bool,
    /// The kubelet's `syncFrequency` (what a ConfigMap edit waits for).
    pub sync_frequency_secs: u64,
    /// The kubelet's `maxPods`.
    pub max_pods: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options { fail_closed: false, sync_frequency_secs: 20, max_pods: 250 }
    }
}

static CLUSTERS: AtomicU32 = AtomicU32::new(0);

/// A running cluster. Dropping it stops everything it started, by pid, and
/// removes what it made.
#[derive(Debug)]
pub struct Cluster {
    pub kubectl: Kubectl,
    pub options: Options,
    ns: Arc<Namespaces>,
    pki: Pki,
    control: Vec<Process>,
    containerd: Option<Process>,
    kubelet: Option<Process>,
    containerd_bin: PathBuf,
    cgroup_root: String,
    images: Vec<PathBuf>,
    imported: bool,
    // Last: removed after everything in it is stopped.
    dir: tempfile::TempDir,
}

/// The machine's runc (Debian's package, installed by tests/runtimes/install.sh).
fn runc() -> Result<PathBuf, Error> {
    ["/usr/sbin/runc", "/usr/bin/runc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| Error::Missing { what: "runc (Debian's package)".into(), path: "/usr/sbin/runc".into() })
}

impl Cluster {
    /// Starts a cluster with `extra_images` (OCI archives) imported besides
    /// the pause and busybox images, and waits until the node is Ready and
    /// pods can be made.
    pub fn start(options: Options, extra_images: &[PathBuf]) -> Result<Cluster, Error> {
        nri_wasm_runtimes::runtime::become_subreaper();
        let runtimes = nri_wasm_runtimes::runtimes_dir();
        let base = nri_wasm_runtimes::images::ensure(&runtimes)?;
        let containerd_bin = crate::require("containerd 2.3.4", runtimes.join("containerd-2.3.4"))?;
        for bin in ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"] {
            kube_bin(bin)?;
        }
        etcd_bin()?;
        crate::require("the CNI bridge plugin (containernetworking-plugins)", "/usr/lib/cni/bridge".into())?;
        runc()?;

        let dir = tempfile::Builder::new()
            .prefix("nri-wasm-cluster-")
            .tempdir_in(if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" })
            .map_err(|e| Error::io("creating the cluster's directory", e))?;
        let d = dir.path();
        for sub in ["logs", "etcd", "containerd", "cni-conf", "kubelet"] {
            std::fs::create_dir_all(d.join(sub)).map_err(|e| Error::io(format!("creating {sub}"), e))?;
        }
        let ns = Arc::new(Namespaces::start(&d.join("node"))?);
        let pki = Pki::create(&d.join("pki"), NODE, NODE_IP)?;
        let admin = pki.kubeconfig(&d.join("admin.kubeconfig"), "https://127.0.0.1:6443", &pki.admin)?;
        let kubectl = Kubectl::new(&kube_bin("kubectl")?, &admin, ns.clone());
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let mut images = vec![base.pause, base.busybox];
        images.extend(extra_images.iter().cloned());
        let mut cluster = Cluster {
            kubectl,
            options,
            ns,
            pki,
            control: Vec::new(),
            containerd: None,
            kubelet: None,
            containerd_bin,
            cgroup_root: format!("/nri-wasm-cluster-{}-{n}", std::process::id()),
            images,
            imported: false,
            dir,
        };
        cluster.start_control_plane()?;
        cluster.write_cni()?;
        cluster.start_containerd()?;
        cluster.start_kubelet()?;
        if let Err(first) = cluster.wait_node_ready() {
            // Nothing of the project's runs yet: a node that does not come
            // up is the harness's or Kubernetes' failure, not the plugin's.
            // Said on stderr (with the kubelet's stacks) and tried once more.
            eprintln!("cluster: starting the node again: {first}");
            cluster.stop_kubelet();
            cluster.stop_containerd();
            cluster.start_containerd()?;
            cluster.start_kubelet()?;
            cluster
                .wait_node_ready()
                .map_err(|second| Error::Parse { what: format!("{second}"), detail: format!("first try: {first}") })?;
        }
        // Pods are refused until the service-account controller made the
        // namespace's default account.
        cluster.kubectl.wait_object("the default service account", &["serviceaccount", "default"], 120, |_| true)?;
        Ok(cluster)
    }

    /// The cluster's own directory (logs, configuration).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster's certificates (its CA signs others: a registry's).
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// The cgroup under which the kubelet puts the pods (`cgroupRoot`).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    /// The node's namespaces.
    pub fn ns(&self) -> &Namespaces {
        &self.ns
    }

    /// Where the node's `path` is on the machine (`/var/cache/nri-wasm` is
    /// the test's directory, not the machine's).
    pub fn node_path(&self, path: &str) -> PathBuf {
        self.ns.host_path(path)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(format!("{name}.log"))
    }

    /// The last `lines` of a component's log (`containerd`, `kubelet`, ...).
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        nri_wasm_runtimes::log::Log::new(&self.log(name)).tail(lines)
    }

    /// A component's whole log.
    pub fn log_text(&self, name: &str) -> String {
        std::fs::read_to_string(self.log(name)).unwrap_or_default()
    }

    /// Starts `program` inside the node (its namespaces), its output in the
    /// cluster's `logs/<name>.log`; stopped by pid when dropped.
    pub fn spawn_in_node(&self, name: &str, program: &Path, args: &[String]) -> Result<Process, Error> {
        self.spawn(name, program, args)
    }

    /// crictl against the node's containerd, for what the kubelet would not
    /// do (pods of its own, under the cluster's cgroup root). Stop the
    /// kubelet first: it removes the sandboxes it does not know.
    pub fn crictl(&self) -> Result<nri_wasm_runtimes::crictl::Crictl, Error> {
        let endpoint = format!("unix://{}", self.containerd_socket().display());
        Ok(nri_wasm_runtimes::crictl::Crictl::new(
            &nri_wasm_runtimes::runtimes_dir(),
            self.dir.path(),
            &endpoint,
            &self.cgroup_root,
        )?)
    }

    fn spawn(&self, name: &str, program: &Path, args: &[String]) -> Result<Process, Error> {
        let mut cmd = self.ns.command(program);
        cmd.args(args);
        // The shim of the pinned containerd first, then the machine's runc.
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", self.containerd_bin.display()));
        Ok(Process::spawn(name, cmd, &self.log(name))?)
    }

    fn start_control_plane(&mut self) -> Result<(), Error> {
        let d = self.dir.path().to_path_buf();
        let p = &self.pki.clone();
        let s = |p: &Path| p.display().to_string();
        let etcd = self.spawn(
            "etcd",
            &etcd_bin()?,
            &[
                format!("--data-dir={}", d.join("etcd").display()),
                "--listen-client-urls=http://127.0.0.1:2379".into(),
                "--advertise-client-urls=http://127.0.0.1:2379".into(),
                "--listen-peer-urls=http://127.0.0.1:2380".into(),
                "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
                "--initial-cluster=default=http://127.0.0.1:2380".into(),
                "--listen-metrics-urls=http://127.0.0.1:2381".into(),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
        )?;
        self.control.push(etcd);
        self.wait_up("etcd", |c| {
            c.ns.in_net(|| crate::http::get("127.0.0.1:2379".parse().expect("addr"), "/health"))
                .ok()
                .flatten()
                .is_some_and(|(code, _)| code == 200)
        })?;
        let apiserver = self.spawn(
            "kube-apiserver",
            &kube_bin("kube-apiserver")?,
            &[
                "--etcd-servers=http://127.0.0.1:2379".into(),
                "--bind-address=0.0.0.0".into(),
                "--secure-port=6443".into(),
                format!("--advertise-address={NODE_IP}"),
                format!("--tls-cert-file={}", s(&p.apiserver.cert)),
                format!("--tls-private-key-file={}", s(&p.apiserver.key)),
                format!("--client-ca-file={}", s(&p.ca.cert)),
                format!("--kubelet-client-certificate={}", s(&p.apiserver_kubelet_client.cert)),
                format!("--kubelet-client-key={}", s(&p.apiserver_kubelet_client.key)),
                format!("--kubelet-certificate-authority={}", s(&p.ca.cert)),
                "--kubelet-preferred-address-types=InternalIP".into(),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={}", s(&p.service_account_pub)),
                format!("--service-account-signing-key-file={}", s(&p.service_account_key)),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ],
        )?;
        self.control.push(apiserver);
        self.wait_up("kube-apiserver", |c| {
            c.kubectl.run(&["get", "--raw", "/readyz"]).is_ok_and(|o| o.trim() == "ok")
        })?;
        let cm_config =
            p.kubeconfig(&d.join("controller-manager.kubeconfig"), "https://127.0.0.1:6443", &p.controller_manager)?;
        let cm = self.spawn(
            "kube-controller-manager",
            &kube_bin("kube-controller-manager")?,
            &[
                format!("--kubeconfig={}", s(&cm_config)),
                format!("--authentication-kubeconfig={}", s(&cm_config)),
                format!("--authorization-kubeconfig={}", s(&cm_config)),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--service-account-private-key-file={}", s(&p.service_account_key)),
                format!("--root-ca-file={}", s(&p.ca.cert)),
                "--use-service-account-credentials=true".into(),
                "--controllers=*".into(),
                "--v=1".into(),
            ],
        )?;
        self.control.push(cm);
        let sched_config = p.kubeconfig(&d.join("scheduler.kubeconfig"), "https://127.0.0.1:6443", &p.scheduler)?;
        let sched = self.spawn(
            "kube-scheduler",
            &kube_bin("kube-scheduler")?,
            &[
                format!("--kubeconfig={}", s(&sched_config)),
                format!("--authentication-kubeconfig={}", s(&sched_config)),
                format!("--authorization-kubeconfig={}", s(&sched_config)),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                "--v=1".into(),
            ],
        )?;
        self.control.push(sched);
        Ok(())
    }

    /// Waits (backstop 120 s) until `up`, failing at once if a control
    /// plane process exited.
    fn wait_up(&mut self, what: &str, up: impl Fn(&Self) -> bool) -> Result<(), Error> {
        let start = std::time::Instant::now();
        loop {
            if let Some(i) = self.control.iter_mut().position(|p| !p.running()) {
                let name = self.control[i].name().to_string();
                return Err(Error::Command {
                    command: name.clone(),
                    status: "exited".into(),
                    stderr: self.log_tail(&name, 30),
                });
            }
            if up(self) {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(120) {
                return Err(nri_wasm_runtimes::Error::Timeout { what: what.into(), secs: 120 }.into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn write_cni(&self) -> Result<(), Error> {
        // A bridge with the gateway on it (pods reach the node, the kubelet's
        // probes reach the pods), no masquerade: nothing leaves the node.
        let conf = format!(
            r#"{{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{ "type": "host-local", "ranges": [[{{ "subnet": "{POD_SUBNET}", "gateway": "{POD_GATEWAY}" }}]], "routes": [{{ "dst": "0.0.0.0/0" }}] }}
    }}
  ]
}}
"#
        );
        let path = self.dir.path().join("cni-conf/10-pods.conflist");
        std::fs::write(&path, conf).map_err(|e| Error::io("writing the CNI configuration", e))
    }

    fn containerd_dir(&self) -> PathBuf {
        self.dir.path().join("containerd")
    }

    fn containerd_socket(&self) -> PathBuf {
        self.containerd_dir().join("containerd.sock")
    }

    fn containerd_config(&self) -> Result<String, Error> {
        let d = self.containerd_dir();
        let d = d.display();
        let runc_path = runc()?;
        let cni = self.dir.path().join("cni-conf");
        let cni = cni.display();
        let cni = nri_wasm_runtimes::containerd::Cni { bin_dir: "/usr/lib/cni".into(), conf_dir: cni.to_string() };
        // The runtime suite's configuration, as the kubelet's runtime: only
        // the annotations containerd passes by default reach the spec.
        let mut text =
            nri_wasm_runtimes::containerd::config_v3_without_nri(&self.containerd_dir(), &runc_path, &cni, false);
        // NRI at its standard socket, as docs/deploy/runtimes.md writes it
        // (the DaemonSet's hostPath is /var/run/nri), and with the fail-closed
        // validator, its snippet from there too: what the tests run is what
        // the docs say.
        text += &runtimes_md_snippet("[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false")?;
        text += &format!("  plugin_path = \"{d}/nri-plugins\"\n  plugin_config_path = \"{d}/nri-conf\"\n");
        if self.options.fail_closed {
            text += &runtimes_md_snippet("[plugins.\"io.containerd.nri.v1.nri\".default_validator]")?;
        }
        Ok(text)
    }

    /// Starts containerd (again) and waits until it serves; imports the
    /// images the first time.
    pub fn start_containerd(&mut self) -> Result<(), Error> {
        let config = self.containerd_dir().join("config.toml");
        std::fs::write(&config, self.containerd_config()?).map_err(|e| Error::io("writing containerd's config", e))?;
        let bin = self.containerd_bin.join("containerd");
        let mut proc = self.spawn("containerd", &bin, &["--config".into(), config.display().to_string()])?;
        let socket = self.containerd_socket();
        let up = wait_for("containerd serving its socket", Duration::from_secs(60), || {
            if !proc.running() {
                return Some(false);
            }
            if socket.exists() && self.ctr(&["version"]).is_ok() {
                return Some(true);
            }
            std::thread::sleep(Duration::from_millis(100));
            None
        })?;
        if !up {
            return Err(Error::Command {
                command: "containerd".into(),
                status: "exited".into(),
                stderr: self.log_tail("containerd", 30),
            });
        }
        self.containerd = Some(proc);
        if !self.imported {
            for archive in self.images.clone() {
                self.import(&archive)?;
            }
            self.imported = true;
        }
        Ok(())
    }

    /// `ctr` against the node's containerd, in the CRI's namespace.
    pub fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = self.ns.command(self.containerd_bin.join("ctr"));
        cmd.arg("--address").arg(self.containerd_socket()).args(["--namespace", "k8s.io"]).args(args);
        Ok(process::run(cmd, &format!("ctr {}", args.join(" ")))?)
    }

    /// Imports an OCI archive into containerd's `k8s.io` namespace, as an
    /// operator without a registry does (docs/deploy/README.md).
    pub fn import(&self, archive: &Path) -> Result<(), Error> {
        self.ctr(&["images", "import", &archive.display().to_string()]).map(drop)
    }

    /// Stops containerd (SIGTERM); the containers go on running.
    pub fn stop_containerd(&mut self) {
        if let Some(mut p) = self.containerd.take() {
            p.stop(Duration::from_secs(30));
        }
    }

    fn kubelet_config(&self) -> String {
        let p = &self.pki;
        format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzPort: 10248
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
cgroupDriver: cgroupfs
cgroupRoot: {root}
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
syncFrequency: {sync}s
maxPods: {max_pods}
serializeImagePulls: false
resolvConf: /etc/resolv.conf
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#,
            ca = p.ca.cert.display(),
            cert = p.kubelet_serving.cert.display(),
            key = p.kubelet_serving.key.display(),
            root = self.cgroup_root,
            socket = self.containerd_socket().display(),
            sync = self.options.sync_frequency_secs,
            max_pods = self.options.max_pods,
        )
    }

    /// Starts the kubelet (again).
    pub fn start_kubelet(&mut self) -> Result<(), Error> {
        // The kubelet wants its cgroup root to exist in every hierarchy.
        for dir in cgroup_dirs(&self.cgroup_root, true) {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        weigh_like_a_node(&self.cgroup_root);
        let d = self.dir.path().join("kubelet");
        let config = d.join("config.yaml");
        std::fs::write(&config, self.kubelet_config()).map_err(|e| Error::io("writing the kubelet's config", e))?;
        let kubeconfig =
            self.pki.kubeconfig(&d.join("kubelet.kubeconfig"), "https://127.0.0.1:6443", &self.pki.kubelet_client)?;
        let proc = self.spawn(
            "kubelet",
            &kube_bin("kubelet")?,
            &[
                format!("--config={}", config.display()),
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--hostname-override={NODE}"),
                format!("--node-ip={NODE_IP}"),
                "--v=1".into(),
            ],
        )?;
        self.kubelet = Some(proc);
        Ok(())
    }

    /// Stops the kubelet (SIGTERM); the pods go on running.
    pub fn stop_kubelet(&mut self) {
        if let Some(mut p) = self.kubelet.take() {
            p.stop(Duration::from_secs(30));
        }
    }

    /// The node goes down hard, as in a power cut: the kubelet and
    /// containerd stop, and every container with them (shims and the pods'
    /// processes killed by pid). [`Cluster::start_node`] brings it back.
    pub fn crash_node(&mut self) {
        self.stop_kubelet();
        self.stop_containerd();
        let socket = self.containerd_socket().display().to_string();
        for pid in process::pids_with_cmdline(&socket) {
            process::signal(pid, libc::SIGKILL);
        }
        nri_wasm_runtimes::runtime::kill_cgroup_tree(&self.cgroup_root);
        reap_zombie_children();
    }

    /// Starts containerd and the kubelet again and waits until the node is
    /// Ready.
    pub fn start_node(&mut self) -> Result<(), Error> {
        self.start_containerd()?;
        self.start_kubelet()?;
        self.wait_node_ready()
    }

    /// Whether the kubelet and containerd run.
    pub fn node_running(&mut self) -> bool {
        self.kubelet.as_mut().is_some_and(Process::running) && self.containerd.as_mut().is_some_and(Process::running)
    }

    /// Waits until the node reports Ready (backstop 120 s; a node is Ready
    /// about 2 s after its kubelet starts). Fails at once if the kubelet or
    /// containerd exits meanwhile; either way the error carries what the
    /// node said last: the node object, and the kubelet's and containerd's
    /// logs as they are when the wait gives up.
    pub fn wait_node_ready(&mut self) -> Result<(), Error> {
        const BACKSTOP: Duration = Duration::from_secs(120);
        let start = std::time::Instant::now();
        let mut last = String::new();
        let gave_up = loop {
            if let Some(name) = self.node_process_exited() {
                break format!("{name} exited while the node was not Ready");
            }
            match self.kubectl.get(&["node", NODE]) {
                Ok(node) if condition(&node, "Ready") => return Ok(()),
                Ok(node) => last = clip(&node["status"]["conditions"].to_string(), 2000),
                Err(e) => last = e.to_string(),
            }
            if start.elapsed() > BACKSTOP {
                break format!("the node was not Ready within {} s", BACKSTOP.as_secs());
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let logs = format!(
            "--- kubelet's log (last 40 lines):\n{}\n--- containerd's log (last 15 lines):\n{}",
            self.log_tail("kubelet", 40),
            self.log_tail("containerd", 15)
        );
        let stacks = self.kubelet_stacks();
        Err(Error::Parse { what: gave_up, detail: format!("last seen: {last}\n{logs}{stacks}") })
    }

    /// Where a running kubelet stands in registering the node: SIGQUIT makes
    /// it write every goroutine's stack to its log and exit; the stacks of
    /// its main goroutine and of those that register the node and report
    /// its status are returned (nothing if it had exited).
    fn kubelet_stacks(&mut self) -> String {
        let Some(mut kubelet) = self.kubelet.take() else { return String::new() };
        let Some(pid) = kubelet.pid().filter(|_| kubelet.running()) else { return String::new() };
        let before = self.log_text("kubelet").len();
        process::signal(pid, libc::SIGQUIT);
        let _ = wait_for("the kubelet's stacks", Duration::from_secs(10), || (!kubelet.running()).then_some(()));
        kubelet.stop(Duration::from_secs(5));
        let log = self.log_text("kubelet");
        let dump = log.get(before..).unwrap_or_default();
        let wanted: Vec<&str> = dump
            .split("\n\n")
            .filter(|g| {
                g.starts_with("goroutine 1 ")
                    || (g.starts_with("goroutine ")
                        && ["NodeStatus", "registerWithAPIServer", "fastStatusUpdateOnce"]
                            .iter()
                            .any(|f| g.contains(f)))
            })
            .collect();
        format!(
            "\n--- the kubelet's main and node-status goroutines (of its SIGQUIT dump):\n{}",
            clip(&wanted.join("\n\n"), 6000)
        )
    }

    /// The node's process (kubelet or containerd) that was started and has
    /// exited since.
    fn node_process_exited(&mut self) -> Option<&'static str> {
        if self.kubelet.as_mut().is_some_and(|p| !p.running()) {
            return Some("the kubelet");
        }
        if self.containerd.as_mut().is_some_and(|p| !p.running()) {
            return Some("containerd");
        }
        None
    }

    /// The containers of the node's pods, as containerd has them (id to
    /// the pod's name and namespace, container name, and labels).
    pub fn containers(&self) -> Result<Vec<serde_json::Value>, Error> {
        let text = self.ctr(&["containers", "ls", "-q"])?;
        let mut out = Vec::new();
        for id in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let info = self.ctr(&["containers", "info", id])?;
            out.push(
                serde_json::from_str(&info)
                    .map_err(|e| Error::Parse { what: format!("ctr containers info {id}"), detail: e.to_string() })?,
            );
        }
        Ok(out)
    }
}

/// A toml block of docs/deploy/runtimes.md's section on containerd 2.x
/// that starts with `head`, to the end of the block.
fn runtimes_md_snippet(head: &str) -> Result<String, Error> {
    let path = crate::repo().join("docs/deploy/runtimes.md");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let section = text.find("## containerd 2.x").ok_or_else(|| Error::Parse {
        what: format!("{}", path.display()),
        detail: "no section \"## containerd 2.x\"".into(),
    })?;
    let text = &text[section..];
    let start = text.find(head).ok_or_else(|| Error::Parse {
        what: format!("{}", path.display()),
        detail: format!("no block starting with {head:?}"),
    })?;
    let rest = &text[start..];
    let end = rest.find("```").unwrap_or(rest.len());
    Ok(format!("{}\n", rest[..end].trim_end()))
}

/// The cgroup directories of `root` in each mounted v1 hierarchy (and the
/// v2 one if `unified`).
/// Gives the cluster's cgroup root the CPU weight a real node's `kubepods`
/// has at the machine's root: the kubelet gives `kubepods` the node's CPUs
/// (1024 shares each), but here `kubepods` lies one level down, under a
/// root of the test's own that would otherwise weigh as one busy thread
/// against every other thread of the machine (its control plane, other
/// tests, a build). With that weight, two busy threads elsewhere on a
/// two-core machine left the plugin's pod without CPU for over two seconds
/// during a churn (its probes timed out), which no real node does to its
/// pods.
fn weigh_like_a_node(root: &str) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let shares = cpus * 1024;
    // cgroup v2's weight for those shares, as the kubelet converts them.
    let weight = 1 + (shares.saturating_sub(2) * 9999) / 262_142;
    for dir in cgroup_dirs(root, true) {
        for (file, value) in [("cpu.shares", shares), ("cpu.weight", weight)] {
            let path = dir.join(file);
            if path.exists() {
                if let Err(e) = std::fs::write(&path, value.to_string()) {
                    eprintln!("cluster: cannot set {}: {e}", path.display());
                }
            }
        }
    }
}

fn cgroup_dirs(root: &str, include_unified: bool) -> Vec<PathBuf> {
    let rel = root.trim_start_matches('/');
    let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").exists())
        .filter(|p| include_unified || p.file_name().is_some_and(|n| n != "unified"))
        .map(|p| p.join(rel))
        .collect()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The node first (its pods are left to the cgroup kill: a graceful
        // deletion of each would take its grace period).
        self.stop_kubelet();
        self.stop_containerd();
        let socket = self.containerd_socket().display().to_string();
        for pid in process::pids_with_cmdline(&socket) {
            process::signal(pid, libc::SIGKILL);
        }
        nri_wasm_runtimes::runtime::kill_cgroup_tree(&self.cgroup_root);
        for mut p in self.control.drain(..).rev() {
            p.stop(Duration::from_secs(10));
        }
        self.ns.stop();
        reap_zombie_children();
        // Nothing of the node's is mounted here (its mount namespace is
        // private); this is for a mount made by mistake.
        nri_wasm_runtimes::runtime::unmount_under(self.dir.path());
    }
}

/// Reaps the ended processes that were re-parented to this process (the
/// test is the subreaper of what containerd's shims leave when they are
/// killed: the containers' processes), by pid and only zombies, once every
/// process this cluster started was stopped and waited for.
fn reap_zombie_children() {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((_, tail)) = stat.rsplit_once(')') else { continue };
        let mut fields = tail.split_whitespace();
        let (state, ppid) = (fields.next(), fields.next().and_then(|p| p.parse::<u32>().ok()));
        if state == Some("Z") && ppid == Some(me) {
            // SAFETY: waitpid on a zombie child of ours, by its pid.
            unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}
