//! The node's namespaces: a network namespace (its own loopback, a bridge
//! with the node's address, the pod bridge the CNI plugin makes) and a mount
//! namespace in which `/run`, `/var/lib`, `/var/cache` and `/var/log` are
//! directories of the test, and `/etc` an overlay whose changes (a hostPath
//! the kubelet creates there, the policies of the hostPath overlay) go to a
//! directory of the test.
//!
//! A holder process (`unshare`, then `sleep`) keeps them alive; every other
//! process of the node enters them before it runs ([`Namespaces::command`]).
//! The mount namespace is private: nothing mounted in it (the kubelet's
//! volumes, containerd's network namespace files, the overlay mounts of the
//! containers) is seen outside, and all of it goes when its last process
//! ends. The test reaches the node's network from a thread that entered the
//! network namespace ([`Namespaces::in_net`]).

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nri_wasm_runtimes::process::Process;

use crate::{wait_for, Error};

/// The node's own address (on a bridge with no ports: an interface to hold
/// it, as the kubelet refuses a loopback node IP).
pub const NODE_IP: &str = "192.168.250.1";
/// The directories of the test mounted over the machine's, in the node.
pub const PRIVATE_DIRS: [&str; 4] = ["/run", "/var/lib", "/var/cache", "/var/log"];

/// The namespaces of one node.
#[derive(Debug)]
pub struct Namespaces {
    holder: std::sync::Mutex<Process>,
    net: File,
    mnt: File,
    root: PathBuf,
}

impl Namespaces {
    /// Makes the namespaces, with the private directories under `root`
    /// (`root/run`, `root/var/lib`, ...).
    pub fn start(root: &Path) -> Result<Self, Error> {
        let mut script = String::from("set -e\n");
        for dir in PRIVATE_DIRS {
            let own = root.join(dir.trim_start_matches('/'));
            std::fs::create_dir_all(&own).map_err(|e| Error::io(format!("creating {}", own.display()), e))?;
            script += &format!("mount --bind '{}' '{dir}'\n", own.display());
        }
        let (upper, work) = (root.join("etc-upper"), root.join("etc-work"));
        for dir in [&upper, &work] {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        script += &format!(
            "mount -t overlay overlay -o lowerdir=/etc,upperdir='{}',workdir='{}' /etc\n",
            upper.display(),
            work.display()
        );
        let ready = root.join("namespaces-ready");
        script += &format!(
            "ip link set lo up\n\
             ip link add node0 type bridge\n\
             ip addr add {NODE_IP}/24 dev node0\n\
             ip link set node0 up\n\
             ip route add default dev node0\n\
             touch '{}'\n\
             exec sleep infinity\n",
            ready.display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--net", "--propagation", "private", "--", "sh", "-c", &script]);
        let mut holder = Process::spawn("the node's namespaces", cmd, &root.join("namespaces.log"))?;
        let up = wait_for("the node's namespaces", Duration::from_secs(30), || {
            if !holder.running() {
                return Some(false);
            }
            ready.exists().then_some(true)
        })?;
        let log = std::fs::read_to_string(root.join("namespaces.log")).unwrap_or_default();
        if !up {
            return Err(Error::Command {
                command: "unshare (the node's namespaces)".into(),
                status: "exited".into(),
                stderr: log,
            });
        }
        let pid = holder.pid().expect("running");
        let holder = std::sync::Mutex::new(holder);
        let open = |kind: &str| {
            let path = format!("/proc/{pid}/ns/{kind}");
            File::open(&path).map_err(|e| Error::io(format!("opening {path}"), e))
        };
        let (net, mnt) = (open("net")?, open("mnt")?);
        Ok(Namespaces { holder, net, mnt, root: root.to_path_buf() })
    }

    /// A command that runs inside the node's namespaces.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        let (net, mnt) = (self.net.as_raw_fd(), self.mnt.as_raw_fd());
        // SAFETY: between fork and exec only setns(2), which is
        // async-signal-safe, on descriptors this process keeps open.
        unsafe {
            cmd.pre_exec(move || {
                enter(net, libc::CLONE_NEWNET)?;
                enter(mnt, libc::CLONE_NEWNS)
            });
        }
        cmd
    }

    /// Runs `f` on a thread inside the node's network namespace (to reach
    /// the node's addresses and the pods').
    pub fn in_net<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, Error> {
        let net = self.net.as_raw_fd();
        std::thread::scope(|s| {
            s.spawn(move || {
                enter(net, libc::CLONE_NEWNET).map_err(|e| Error::io("entering the node's network namespace", e))?;
                Ok(f())
            })
            .join()
            .expect("a thread in the node's network namespace panicked")
        })
    }

    /// Where `path` of the node is on the machine (for the private
    /// directories; other paths are the machine's own).
    pub fn host_path(&self, path: &str) -> PathBuf {
        for dir in PRIVATE_DIRS {
            if let Some(rest) = path.strip_prefix(dir) {
                if rest.is_empty() || rest.starts_with('/') {
                    return self.root.join(dir.trim_start_matches('/')).join(rest.trim_start_matches('/'));
                }
            }
        }
        if let Some(rest) = path.strip_prefix("/var/run/") {
            return self.host_path(&format!("/run/{rest}"));
        }
        PathBuf::from(path)
    }

    /// `path` as the node sees it, reachable from the machine (through the
    /// holder's `/proc/<pid>/root`): to read and write the node's files.
    pub fn node_file(&self, path: &str) -> PathBuf {
        let pid = self.pid().expect("the namespaces' holder runs");
        PathBuf::from(format!("/proc/{pid}/root")).join(path.trim_start_matches('/'))
    }

    /// The holder's pid (its `/proc/<pid>/root` is the node's view).
    pub fn pid(&self) -> Option<u32> {
        self.holder.lock().unwrap_or_else(|p| p.into_inner()).pid()
    }

    /// Ends the holder (and waits for it): once the node's other processes
    /// are gone, the namespaces and their mounts go with it.
    pub fn stop(&self) {
        self.holder.lock().unwrap_or_else(|p| p.into_inner()).kill9();
    }
}

fn enter(fd: RawFd, kind: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setns with a namespace descriptor we hold open.
    if unsafe { libc::setns(fd, kind) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
