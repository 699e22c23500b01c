//! CRI-O as the runtime under test (`NRI_WASM_RUNTIME=crio`): its
//! configuration, start and stop by pid, and the images put into its
//! storage with skopeo.
//!
//! CRI-O is the one runtime of the suite that does not share containerd's
//! code above the NRI library, so it is where a containerd habit of the host
//! would show. What this machine needs of it (install-crio.sh builds it):
//!
//! - every path CRI-O would otherwise take from `/var`, `/run` or `/etc`
//!   (storage, sockets, exits, pinned namespaces, runc's state, logs, auth and
//!   policy directories) points into the node's directory, so nodes run side
//!   by side and leave nothing behind;
//! - `vfs` storage (no overlay on the tmpfs), the `cgroupfs` cgroup manager
//!   (no systemd), runc and Debian's conmon;
//! - no CNI configuration at all: host-network pods never ask for one, and
//!   CRI-O starts with its network "not ready" without complaint;
//! - CRI-O gives its infra (pause) container an `oom_score_adj` of -998, a
//!   constant, and this VM has no CAP_SYS_RESOURCE, so runc cannot create it.
//!   CRI-O drops the infra container when the pod does not share one PID
//!   namespace: pods and containers must ask for a PID namespace per
//!   container (as the kubelet does unless `shareProcessNamespace`);
//! - no registry: the pause and busybox archives are copied into the node's
//!   containers/storage with `skopeo copy oci-archive:… containers-storage:…`
//!   before CRI-O first starts, and the pause image is the one the
//!   configuration names, so no pod ever pulls.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::images::{self, Images};
use crate::log::Log;
use crate::process::{self, Process};
use crate::runtime::{Runtime, RuntimeKind};
use crate::{require, wait_for, Error};

/// The pinned CRI-O (install-crio.sh); it speaks NRI v0.11.0.
pub const VERSION: &str = "1.36.3";

/// Annotations CRI-O writes into every container's spec whose values
/// change from one create to the next even when nothing else does: the
/// creation time, the rootfs, and three that carry the CRI attempt number.
pub const PER_CREATE_ANNOTATIONS: &[&str] = &[
    "io.kubernetes.cri-o.Created",
    "io.kubernetes.cri-o.MountPoint",
    "io.kubernetes.cri-o.LogPath",
    "io.kubernetes.cri-o.Metadata",
    "io.kubernetes.cri-o.Name",
];

/// Replaces, in an OCI spec CRI-O made, what differs between two creates of
/// the same container (the [`PER_CREATE_ANNOTATIONS`], `root.path`, and the
/// paths of the namespaces it pinned) with placeholders, so that two specs
/// compare equal exactly when the runtime and its plugins made the same
/// container. Ids, pids and the node's directory are the caller's to
/// replace: they are not CRI-O's alone.
pub fn normalize_spec(spec: &mut Value) {
    if let Some(annotations) = spec.get_mut("annotations").and_then(Value::as_object_mut) {
        for key in PER_CREATE_ANNOTATIONS {
            if let Some(v) = annotations.get_mut(*key) {
                *v = json!(format!("<{key}>"));
            }
        }
    }
    if let Some(path) = spec.pointer_mut("/root/path") {
        *path = json!("<rootfs>");
    }
    if let Some(namespaces) = spec.pointer_mut("/linux/namespaces").and_then(Value::as_array_mut) {
        for ns in namespaces {
            if let Some(path) = ns.get_mut("path") {
                *path = json!("<pinned namespace>");
            }
        }
    }
}

/// What install.sh must be given to install CRI-O.
const INSTALL_ARGS: &str = " --crio";

/// The node's directories CRI-O writes to, created before it starts.
const DIRS: &[&str] = &[
    "root",
    "runroot",
    "logs",
    "exits",
    "attach",
    "ns",
    "runc",
    "cni",
    "nri-plugins",
    "nri-conf",
    "conf.d",
    "hooks",
    "auth",
    "policies",
    "tmp",
];

/// One CRI-O instance.
#[derive(Debug)]
pub struct Crio {
    bin_dir: PathBuf,
    skopeo: PathBuf,
    dir: PathBuf,
    images: Images,
    imported: bool,
    process: Option<Process>,
}

impl Crio {
    pub fn new(runtimes: &Path, node_dir: &Path, images: &Images) -> Result<Self, Error> {
        let bin_dir = runtimes.join(format!("crio-{VERSION}"));
        for bin in ["crio", "pinns"] {
            require(&format!("CRI-O {VERSION}'s {bin}"), bin_dir.join(bin), INSTALL_ARGS)?;
        }
        let runc = debian_binary("runc", &["/usr/sbin/runc", "/usr/bin/runc"])?;
        let conmon = debian_binary("conmon", &["/usr/bin/conmon", "/usr/libexec/crio/conmon"])?;
        let skopeo = debian_binary("skopeo", &["/usr/bin/skopeo"])?;
        let dir = node_dir.join("crio");
        for sub in DIRS {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| Error::io(format!("creating the node's crio/{sub}"), e))?;
        }
        // Images come only from the archives: accept them unsigned.
        std::fs::write(dir.join("policy.json"), br#"{"default":[{"type":"insecureAcceptAnything"}]}"#)
            .map_err(|e| Error::io("writing CRI-O's signature policy", e))?;
        std::fs::write(dir.join("crio.conf"), config(&dir, &bin_dir, &runc, &conmon))
            .map_err(|e| Error::io("writing CRI-O's configuration", e))?;
        Ok(Crio { bin_dir, skopeo, dir, images: images.clone(), imported: false, process: None })
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("crio.sock")
    }

    /// Copies both archives into the node's storage (CRI-O need not run).
    fn import_images(&mut self) -> Result<(), Error> {
        let store = format!(
            "containers-storage:[vfs@{}+{}]",
            self.dir.join("root").display(),
            self.dir.join("runroot").display()
        );
        for (archive, name) in [(&self.images.pause, images::PAUSE), (&self.images.busybox, images::BUSYBOX)] {
            let mut cmd = Command::new(&self.skopeo);
            cmd.arg("--policy")
                .arg(self.dir.join("policy.json"))
                .args(["copy", "--quiet"])
                .arg(format!("oci-archive:{}", archive.display()))
                .arg(format!("{store}{name}"))
                // skopeo unpacks the archive under TMPDIR (/var/tmp otherwise).
                .env("TMPDIR", self.dir.join("tmp"));
            process::run(cmd, &format!("skopeo copy of {} into CRI-O's storage", archive.display()))?;
        }
        self.imported = true;
        Ok(())
    }
}

/// A binary from one of Debian's packages, where the package puts it.
fn debian_binary(package: &str, candidates: &[&str]) -> Result<PathBuf, Error> {
    candidates.iter().map(PathBuf::from).find(|p| p.exists()).ok_or_else(|| Error::Missing {
        what: format!("{package} (Debian's package)"),
        path: PathBuf::from(candidates[0]),
        args: INSTALL_ARGS,
    })
}

/// CRI-O's configuration for one node (module docs say why each setting).
fn config(dir: &Path, bin_dir: &Path, runc: &Path, conmon: &Path) -> String {
    let d = dir.display();
    let pinns = bin_dir.join("pinns");
    let (pinns, runc, conmon) = (pinns.display(), runc.display(), conmon.display());
    let pause = images::PAUSE;
    format!(
        r#"[crio]
root = "{d}/root"
runroot = "{d}/runroot"
storage_driver = "vfs"
log_dir = "{d}/logs"
version_file = "{d}/version"
version_file_persist = "{d}/version-persist"
clean_shutdown_file = "{d}/clean.shutdown"

[crio.api]
listen = "{d}/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
pinns_path = "{pinns}"
namespaces_dir = "{d}/ns"
container_exits_dir = "{d}/exits"
container_attach_socket_dir = "{d}/attach"
hooks_dir = ["{d}/hooks"]
decryption_keys_path = "{d}/keys"
irqbalance_config_file = "{d}/irqbalance"
irqbalance_config_restore_file = "disable"
apparmor_profile = ""

[crio.runtime.runtimes.runc]
runtime_path = "{runc}"
runtime_root = "{d}/runc"
monitor_path = "{conmon}"
monitor_cgroup = "pod"

[crio.image]
pause_image = "{pause}"
signature_policy = "{d}/policy.json"
signature_policy_dir = "{d}/policies"
namespaced_auth_dir = "{d}/auth"

[crio.network]
network_dir = "{d}/cni"
plugin_dirs = ["{d}/cni"]

[crio.nri]
enable_nri = true
nri_listen = "{d}/nri.sock"
nri_plugin_dir = "{d}/nri-plugins"
nri_plugin_config_dir = "{d}/nri-conf"
"#
    )
}

impl Runtime for Crio {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Crio
    }

    fn cri_endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn nri_socket(&self) -> PathBuf {
        self.dir.join("nri.sock")
    }

    fn log(&self) -> Log {
        Log::new(&self.dir.join("crio.log"))
    }

    fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Process::pid)
    }

    fn start(&mut self) -> Result<(), Error> {
        if !self.imported {
            self.import_images()?;
        }
        let mut cmd = Command::new(self.bin_dir.join("crio"));
        cmd.arg("--config")
            .arg(self.dir.join("crio.conf"))
            // An empty drop-in directory: nothing from /etc/crio.
            .arg("--config-dir")
            .arg(self.dir.join("conf.d"))
            .args(["--log-level", "info"]);
        // A socket left by an earlier run would look like readiness.
        let socket = self.socket();
        let _ = std::fs::remove_file(&socket);
        let log = self.log();
        let mut proc = Process::spawn("crio", cmd, log.path())?;
        let ready = wait_for("CRI-O serving its socket", Duration::from_secs(60), || {
            if !proc.running() {
                return Some(false);
            }
            socket.exists().then_some(true)
        })?;
        if !ready {
            return Err(Error::Command {
                command: "crio".into(),
                status: "exited at start".into(),
                stderr: log.tail(30),
            });
        }
        self.process = Some(proc);
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop(Duration::from_secs(20));
        }
    }

    fn stop_leftovers(&mut self) {
        // A conmon per container outlives CRI-O (that is how containers
        // survive a restart); each is started with `--exit-dir <node>/exits`.
        let needle = format!("{}/exits", self.dir.display());
        for pid in process::pids_with_cmdline(&needle) {
            process::signal(pid, libc::SIGKILL);
        }
    }
}

#[cfg(all(test, feature = "runtimes"))]
mod tests {
    use super::*;

    /// Two specs of one container from two creates, as CRI-O makes them
    /// (trimmed): only the per-create values differ.
    fn spec(created: &str, rootfs: &str, ns: &str, attempt: u32, env: &str) -> Value {
        json!({
            "annotations": {
                "io.kubernetes.cri-o.Created": created,
                "io.kubernetes.cri-o.MountPoint": rootfs,
                "io.kubernetes.cri-o.LogPath": format!("/logs/c-{attempt}.log"),
                "io.kubernetes.cri-o.Metadata": format!("{{\"name\":\"c\",\"attempt\":{attempt}}}"),
                "io.kubernetes.cri-o.Name": format!("k8s_c_p_default_uid_{attempt}"),
                "example.com/from-a-plugin": "1",
            },
            "root": { "path": rootfs },
            "process": { "env": [env] },
            "linux": { "namespaces": [
                { "type": "pid" },
                { "type": "ipc", "path": format!("/ns/ipcns/{ns}") },
            ] },
        })
    }

    #[test]
    fn per_create_values_compare_equal_and_the_rest_does_not() {
        let mut a = spec("2026-01-01T00:00:00Z", "/vfs/dir/aaa", "u1", 0, "A=1");
        let mut b = spec("2026-01-01T00:00:05Z", "/vfs/dir/bbb", "u2", 1, "A=1");
        let mut c = spec("2026-01-01T00:00:09Z", "/vfs/dir/ccc", "u3", 2, "A=2");
        assert_ne!(a, b);
        for s in [&mut a, &mut b, &mut c] {
            normalize_spec(s);
        }
        assert_eq!(a, b, "only per-create values differed");
        assert_ne!(a, c, "a plugin's different env must still show");
        assert_eq!(a["annotations"]["example.com/from-a-plugin"], "1");
        assert_eq!(a["linux"]["namespaces"][0], json!({ "type": "pid" }), "a namespace without a path stays as it is");
    }
}
