//! The runtime under test, chosen by `NRI_WASM_RUNTIME`, and the node each
//! test runs on.
//!
//! A [`Node`] is one runtime instance with everything in a temporary
//! directory (root, state, sockets, log), its pods under a cgroup parent of
//! their own, and a [`Crictl`] pointed at it. Dropping it removes the pods,
//! stops the runtime, then stops by pid whatever is left of what it started
//! (shims, container processes in its cgroups) and unmounts what it
//! mounted: a test that panics half-way leaves nothing behind.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::crictl::Crictl;
use crate::log::Log;
use crate::{containerd, images, Error};

/// The runtimes the suite knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// containerd 2.3.4 (NRI 0.12.0): the default, and what CI runs.
    Containerd23,
    /// containerd 1.7.34 (NRI 0.8.0, NRI off unless configured).
    Containerd17,
    /// CRI-O (src/crio.rs).
    Crio,
}

impl RuntimeKind {
    /// From `NRI_WASM_RUNTIME`: `containerd-2.3` (the default),
    /// `containerd-1.7` or `crio`.
    pub fn from_env() -> Result<Self, Error> {
        match std::env::var("NRI_WASM_RUNTIME").as_deref() {
            Err(_) | Ok("") | Ok("containerd-2.3") => Ok(RuntimeKind::Containerd23),
            Ok("containerd-1.7") => Ok(RuntimeKind::Containerd17),
            Ok("crio") => Ok(RuntimeKind::Crio),
            Ok(other) => Err(Error::Unsupported(format!(
                "NRI_WASM_RUNTIME={other:?} is not a runtime of this suite (known: containerd-2.3, containerd-1.7, crio)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Containerd23 => "containerd-2.3",
            RuntimeKind::Containerd17 => "containerd-1.7",
            RuntimeKind::Crio => "crio",
        }
    }

    /// Whether the runtime logs "closing plugin" when it drops one.
    pub fn is_containerd(self) -> bool {
        matches!(self, RuntimeKind::Containerd23 | RuntimeKind::Containerd17)
    }
}

/// What the suite needs of a runtime. A runtime keeps its containers
/// running across [`Runtime::stop`] and [`Runtime::start`], as a real
/// runtime restart does.
pub trait Runtime: std::fmt::Debug + Send + Sync {
    fn kind(&self) -> RuntimeKind;
    /// The CRI endpoint, `unix:///...`.
    fn cri_endpoint(&self) -> String;
    /// Where the runtime serves NRI.
    fn nri_socket(&self) -> PathBuf;
    /// The runtime's own log (all its runs).
    fn log(&self) -> Log;
    /// Its pid while it runs.
    fn pid(&self) -> Option<u32>;
    /// Starts it (again), and waits until it serves the CRI.
    fn start(&mut self) -> Result<(), Error>;
    /// Stops it as a service manager would (SIGTERM); containers go on.
    fn stop(&mut self);
    /// Stops by pid what the runtime started and left behind (shims,
    /// monitors), after [`Runtime::stop`].
    fn stop_leftovers(&mut self);
}

static NODES: AtomicU32 = AtomicU32::new(0);

/// One runtime instance for one test.
#[derive(Debug)]
pub struct Node {
    pub crictl: Crictl,
    runtime: Box<dyn Runtime>,
    cgroup_parent: String,
    // Last: removed after everything in it is stopped and unmounted.
    dir: tempfile::TempDir,
}

impl Node {
    /// Starts the runtime `NRI_WASM_RUNTIME` names, in a new temporary
    /// directory, with the images imported.
    pub fn start() -> Result<Node, Error> {
        Node::start_kind(RuntimeKind::from_env()?)
    }

    pub fn start_kind(kind: RuntimeKind) -> Result<Node, Error> {
        become_subreaper();
        let runtimes = crate::runtimes_dir();
        let images = images::ensure(&runtimes)?;
        let dir = crate::node_tempdir()?;
        let n = NODES.fetch_add(1, Ordering::Relaxed);
        let cgroup_parent = format!("/nri-wasm-test-{}-{n}", std::process::id());
        let runtime: Box<dyn Runtime> = match kind {
            RuntimeKind::Containerd23 | RuntimeKind::Containerd17 => {
                Box::new(containerd::Containerd::new(kind, &runtimes, dir.path(), &images)?)
            }
            RuntimeKind::Crio => Box::new(crate::crio::Crio::new(&runtimes, dir.path(), &images)?),
        };
        let crictl = Crictl::new(&runtimes, dir.path(), &runtime.cri_endpoint(), &cgroup_parent)?;
        let mut node = Node { crictl, runtime, cgroup_parent, dir };
        node.runtime.start()?;
        node.wait_cri()?;
        Ok(node)
    }

    pub fn kind(&self) -> RuntimeKind {
        self.runtime.kind()
    }

    /// The node's temporary directory (the host of a test may keep its
    /// files here too).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn nri_socket(&self) -> PathBuf {
        self.runtime.nri_socket()
    }

    pub fn runtime_log(&self) -> Log {
        self.runtime.log()
    }

    pub fn runtime_pid(&self) -> Option<u32> {
        self.runtime.pid()
    }

    /// Stops the runtime and starts it again on the same state.
    pub fn restart_runtime(&mut self) -> Result<(), Error> {
        self.runtime.stop();
        self.runtime.start()?;
        self.wait_cri()
    }

    /// Waits until the CRI answers (backstop 60 s).
    fn wait_cri(&self) -> Result<(), Error> {
        crate::wait_for("the runtime's CRI answering", Duration::from_secs(60), || self.crictl.run(&["info"]).ok())
            .map(drop)
    }

    /// The cgroup parent of this node's pods (cgroupfs).
    pub fn cgroup_parent(&self) -> &str {
        &self.cgroup_parent
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.runtime.pid().is_some() {
            let _ = self.crictl.remove_all_pods();
        }
        self.runtime.stop();
        self.runtime.stop_leftovers();
        kill_cgroup_tree(&self.cgroup_parent);
        unmount_under(self.dir.path());
        reap_orphaned_monitors();
    }
}

/// Makes this process the reaper of its orphaned descendants. A runtime's
/// shims (and CRI-O's conmon) detach from the runtime by forking twice; on
/// a machine whose PID 1 does not reap, they would stay as zombies after
/// they end. As their subreaper, the test process reaps them itself.
pub fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments only.
        unsafe {
            libc::prctl(
                libc::PR_SET_CHILD_SUBREAPER,
                1 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            );
        }
    });
}

/// Reaps the ended shims and monitors that were re-parented to this
/// process, by pid: only zombies of those names, so that no other child
/// of the test (a host, a runtime) is reaped behind its owner's back.
fn reap_orphaned_monitors() {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...; comm may hold spaces, so split at its ')'.
        let Some((head, tail)) = stat.rsplit_once(')') else { continue };
        let comm = head.split_once('(').map(|(_, c)| c).unwrap_or("");
        let mut fields = tail.split_whitespace();
        let (state, ppid) = (fields.next(), fields.next().and_then(|p| p.parse::<u32>().ok()));
        let monitor = comm.starts_with("containerd-shim") || comm == "conmon";
        if monitor && state == Some("Z") && ppid == Some(me) {
            // SAFETY: waitpid on a zombie child of ours, by its pid.
            unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}

/// Every cgroup directory of `parent`, in each mounted hierarchy.
fn cgroup_dirs(parent: &str) -> Vec<PathBuf> {
    let rel = parent.trim_start_matches('/');
    let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") else { return Vec::new() };
    let mut dirs: Vec<PathBuf> =
        entries.filter_map(|e| Some(e.ok()?.path().join(rel))).filter(|p| p.is_dir()).collect();
    let root = Path::new("/sys/fs/cgroup").join(rel);
    if root.join("cgroup.procs").exists() && !dirs.contains(&root) {
        dirs.push(root);
    }
    dirs
}

/// SIGKILLs every process left in the node's cgroups (by pid), then removes
/// the cgroups, deepest first.
pub fn kill_cgroup_tree(parent: &str) {
    for _ in 0..50 {
        let mut any = false;
        for dir in cgroup_dirs(parent) {
            for procs in walk(&dir).into_iter().map(|d| d.join("cgroup.procs")) {
                for pid in std::fs::read_to_string(&procs).unwrap_or_default().lines() {
                    if let Ok(pid) = pid.trim().parse::<u32>() {
                        crate::process::signal(pid, libc::SIGKILL);
                        any = true;
                    }
                }
            }
        }
        if !any {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for dir in cgroup_dirs(parent) {
        let mut all = walk(&dir);
        all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for d in all {
            let _ = std::fs::remove_dir(&d);
        }
    }
}

/// `dir` and every directory below it.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(entries) = std::fs::read_dir(&out[i]) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// Unmounts (lazily) every mount point under `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let prefix = dir.to_string_lossy().into_owned();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        if let Ok(c) = std::ffi::CString::new(p) {
            // SAFETY: umount2 with a valid C string; a failure is ignored.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}
