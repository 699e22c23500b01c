//! containerd as the runtime under test: its configuration for each
//! version, start and stop by pid, and the images imported with `ctr`.
//!
//! Settings this machine needs (docs in tests/runtimes/README facts):
//! `restrict_oom_score_adj` (no CAP_SYS_RESOURCE in the VM), host-network
//! pods only (no CNI), annotations allowed through to the OCI spec, the
//! sandbox image we import, and NRI on with its socket in the node's
//! directory (1.7 has NRI off by default). Root and state live in the
//! node's directory, on a tmpfs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::images::{self, Images};
use crate::log::Log;
use crate::process::{self, Process};
use crate::runtime::{Runtime, RuntimeKind};
use crate::{require, wait_for, Error};

/// The pinned versions (as install.sh has them).
pub const VERSION_2_3: &str = "2.3.4";
pub const VERSION_1_7: &str = "1.7.34";

/// One containerd instance.
#[derive(Debug)]
pub struct Containerd {
    kind: RuntimeKind,
    bin_dir: PathBuf,
    dir: PathBuf,
    images: Images,
    imported: bool,
    process: Option<Process>,
}

impl Containerd {
    pub fn new(kind: RuntimeKind, runtimes: &Path, node_dir: &Path, images: &Images) -> Result<Self, Error> {
        let (version, args) = match kind {
            RuntimeKind::Containerd23 => (VERSION_2_3, ""),
            RuntimeKind::Containerd17 => (VERSION_1_7, " --containerd-1.7"),
            RuntimeKind::Crio => return Err(Error::Unsupported("containerd driver asked for CRI-O".into())),
        };
        let bin_dir = runtimes.join(format!("containerd-{version}"));
        for bin in ["containerd", "containerd-shim-runc-v2", "ctr"] {
            require(&format!("containerd {version}'s {bin}"), bin_dir.join(bin), args)?;
        }
        let runc = runc()?;
        let dir = node_dir.join("containerd");
        for sub in ["root", "state", "cni-bin", "cni-conf", "nri-plugins", "nri-conf", "opt"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| Error::io(format!("creating {sub}"), e))?;
        }
        let config = match kind {
            RuntimeKind::Containerd23 => config_v3(&dir, &runc),
            _ => config_v2(&dir, &runc),
        };
        std::fs::write(dir.join("config.toml"), config).map_err(|e| Error::io("writing containerd's config", e))?;
        Ok(Containerd { kind, bin_dir, dir, images: images.clone(), imported: false, process: None })
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// `ctr` against this instance, in the CRI's namespace.
    pub fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = Command::new(self.bin_dir.join("ctr"));
        cmd.arg("--address").arg(self.socket()).args(["--namespace", "k8s.io"]).args(args);
        process::run(cmd, &format!("ctr {}", args.join(" ")))
    }

    fn import_images(&mut self) -> Result<(), Error> {
        for archive in [&self.images.pause, &self.images.busybox] {
            let path = archive.to_string_lossy().into_owned();
            self.ctr(&["images", "import", &path])?;
        }
        let list = self.ctr(&["images", "ls", "-q"])?;
        for name in [images::PAUSE, images::BUSYBOX] {
            if !list.lines().any(|l| l.trim() == name) {
                return Err(Error::Parse { what: "ctr images ls after the import".into(), detail: list.clone() });
            }
        }
        self.imported = true;
        Ok(())
    }
}

fn runc() -> Result<PathBuf, Error> {
    ["/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| Error::Missing {
            what: "runc (Debian's package)".into(),
            path: "/usr/sbin/runc".into(),
            args: "",
        })
}

/// containerd 2.x: configuration version 3.
fn config_v3(dir: &Path, runc: &Path) -> String {
    let d = dir.display();
    let cni = Cni { bin_dir: format!("{d}/cni-bin"), conf_dir: format!("{d}/cni-conf") };
    let mut text = config_v3_without_nri(dir, runc, &cni, true);
    text += &format!(
        r#"[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
"#
    );
    text
}

/// Where containerd finds the CNI plugins and their configuration.
#[derive(Debug, Clone)]
pub struct Cni {
    /// The plugins' directory.
    pub bin_dir: String,
    /// The configuration directory.
    pub conf_dir: String,
}

/// containerd 2.x's configuration (version 3) for a node in `dir` with
/// `runc`, up to the NRI section, which the caller adds: its own socket for
/// this suite, the standard one with the docs' validator for the cluster
/// suite. `all_annotations` passes every pod and container annotation to
/// the OCI spec (the suite's tests read them there).
pub fn config_v3_without_nri(dir: &Path, runc: &Path, cni: &Cni, all_annotations: bool) -> String {
    let d = dir.display();
    let runc = runc.display();
    let pause = images::PAUSE;
    let annotations = match all_annotations {
        true => "\n      pod_annotations = [\"*\"]\n      container_annotations = [\"*\"]",
        false => "",
    };
    let (cni_bin, cni_conf) = (&cni.bin_dir, &cni.conf_dir);
    format!(
        r#"version = 3
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  level = "info"

[plugins.'io.containerd.internal.v1.opt']
  path = "{d}/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"{annotations}
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#
    )
}

/// containerd 1.7: configuration version 2, NRI turned on.
fn config_v2(dir: &Path, runc: &Path) -> String {
    let d = dir.display();
    let runc = runc.display();
    let pause = images::PAUSE;
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["*"]
      container_annotations = ["*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni-bin"
    conf_dir = "{d}/cni-conf"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
"#
    )
}

impl Runtime for Containerd {
    fn kind(&self) -> RuntimeKind {
        self.kind
    }

    fn cri_endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn nri_socket(&self) -> PathBuf {
        self.dir.join("nri.sock")
    }

    fn log(&self) -> Log {
        Log::new(&self.dir.join("containerd.log"))
    }

    fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Process::pid)
    }

    fn start(&mut self) -> Result<(), Error> {
        let mut cmd = Command::new(self.bin_dir.join("containerd"));
        cmd.arg("--config").arg(self.dir.join("config.toml"));
        // The shim of the same version, before any other on the PATH.
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", self.bin_dir.display()));
        let log = self.log();
        let mut proc = Process::spawn(&format!("containerd {}", self.kind.name()), cmd, log.path())?;
        let socket = self.socket();
        let ready = wait_for("containerd serving its socket", Duration::from_secs(60), || {
            if !proc.running() {
                return Some(false);
            }
            (socket.exists() && self.ctr(&["version"]).is_ok()).then_some(true)
        })?;
        if !ready {
            return Err(Error::Command {
                command: "containerd".into(),
                status: "exited at start".into(),
                stderr: log.tail(30),
            });
        }
        self.process = Some(proc);
        if !self.imported {
            self.import_images()?;
        }
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop(Duration::from_secs(20));
        }
    }

    fn stop_leftovers(&mut self) {
        // Shims are started with `-address <our socket>`; they would keep
        // running (and keep their containers) after containerd.
        let needle = self.socket().to_string_lossy().into_owned();
        for pid in process::pids_with_cmdline(&needle) {
            process::signal(pid, libc::SIGKILL);
        }
    }
}
