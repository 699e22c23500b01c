//! The binary with a log reader that stops reading: stderr is a pipe the
//! test does not read, so it fills (64 KiB) and stays full. A host that
//! wrote its log from the thread that answers the runtime would block on
//! the next record, and the runtime would drop it. The host's log goes
//! through a queue a thread of its own writes out (`cli/log.rs`):
//!
//! - with the pipe full, 200 CreateContainer, each logging about 100 KB at
//!   `debug` (a policy that writes 200 KiB to stdout and to stderr, of
//!   which the host logs what it keeps), are all answered, none of them
//!   after the simulated runtime's 2 s request timeout (a blocked host
//!   misses it by far: it never answers);
//! - once the pipe is read again, the log says how many records were
//!   dropped while it was full;
//! - with the pipe still full, SIGTERM stops the host: its flush at exit
//!   waits a bounded time, not for a reader.
//!
//! Nothing here is timed but the runtime's own deadline, which the
//! simulator keeps.

use std::io::BufRead as _;
use std::os::fd::{AsRawFd as _, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

use nri_sim::{PluginConn, RuntimeProfile, SimError, Simulator};
use nri_wasm_test_support::guests;

/// Creates sent with the pipe full.
const CREATES: usize = 200;
/// What the host's line about lost records says.
const DROPPED: &str = "log records dropped: the log reader was not keeping up";

/// The host's binary with its stderr a pipe nobody reads (until the test
/// takes it); killed by its pid when dropped.
struct Host {
    child: Child,
    stderr: Option<ChildStderr>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    fn start(config: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
            .args(["--log", "debug", "--log-format", "json", "run", "--config"])
            .arg(config)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nri-wasm");
        let stderr = child.stderr.take();
        Self { child, stderr }
    }

    fn pipe(&self) -> RawFd {
        self.stderr.as_ref().expect("the pipe is not read yet").as_raw_fd()
    }

    /// Bytes waiting in the pipe, and how many it holds.
    fn pipe_fill(&self) -> (usize, usize) {
        let fd = self.pipe();
        let mut waiting: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int; F_GETPIPE_SZ reads nothing of ours.
        let (read, size) =
            unsafe { (libc::ioctl(fd, libc::FIONREAD, &mut waiting), libc::fcntl(fd, libc::F_GETPIPE_SZ)) };
        assert!(read == 0 && size > 0, "cannot inspect the pipe: {}", std::io::Error::last_os_error());
        (waiting as usize, size as usize)
    }
}

/// A policy that writes 200 KiB to stdout and to stderr on every
/// CreateContainer and then annotates it: the host logs what it keeps of
/// both (16 KiB each), one record per line.
fn config(dir: &Path, socket: &Path) -> PathBuf {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::copy(guests::FAULTS, policies.join("10-chatty.wasm")).unwrap();
    // The limit leaves room for a busy machine: the test is about the log.
    std::fs::write(policies.join("10-chatty.toml"), "settings = \"chatty\"\n[limits]\ntimeout-ms = 900\n").unwrap();
    let path = dir.join("config.toml");
    let text = format!(
        "[runtime]\nsocket = {socket:?}\nreconnect-initial-ms = 50\nreconnect-max-ms = 200\n\
         [metrics]\naddress = \"\"\n[policies]\ndir = {policies:?}\nwatch = false\n\
         [engine]\ncache-dir = {:?}\n[registry]\ncache-dir = {:?}\n",
        // The build's shared cache: the policy is compiled once for all tests.
        nri_wasm_components::COMPONENT_CACHE,
        // Root's default registry cache is the node's /var/cache.
        dir.join("registry")
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Accepts the host once its policy is loaded (it registers only once it
/// knows what the policy subscribes to).
async fn registered(sim: &Simulator) -> PluginConn {
    sim.accept_started(Duration::from_secs(120)).await
}

/// One create, which must be answered; the policy's annotation, if it ran.
async fn create_reply(conn: &PluginConn, n: usize) -> Option<String> {
    let pod = nri_sim::workload::pod(1);
    let ctr = nri_sim::workload::container(&pod, n);
    match conn.create_container(&pod, &ctr).await {
        Ok(reply) => reply.adjust.as_ref().and_then(|a| a.annotations.get("example.com/faults")).cloned(),
        Err(e @ SimError::Timeout { .. }) => panic!("create {n} missed the runtime's request timeout: {e}"),
        Err(e) => panic!("create {n} was not answered: {e}"),
    }
}

/// One create, which must be answered with the policy's annotation.
async fn create(conn: &PluginConn, n: usize) {
    assert_eq!(create_reply(conn, n).await.as_deref(), Some("ok"), "create {n}: the policy's output");
}

/// Creates until the policy is ready (it may still be compiling: the host
/// registers after its start wait whether or not it is done); each create
/// answered, with or without the policy.
async fn until_ready(conn: &PluginConn) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for n in 30_000.. {
        if create_reply(conn, n).await.is_some() {
            return;
        }
        assert!(Instant::now() < deadline, "the policy was not ready within two minutes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates until the pipe is full, each answered; how many it took. Full
/// is less than a page free, or nothing more in it after three creates
/// that each log about 100 KB: a write of more than a page waits for whole
/// pages, and writes that do not fit the last page leave its end unused.
async fn fill(host: &Host, conn: &PluginConn) -> usize {
    let (mut last, mut unchanged) = (host.pipe_fill().0, 0);
    for n in 0..1000 {
        let (waiting, size) = host.pipe_fill();
        if waiting + 4096 > size || unchanged == 3 {
            return n;
        }
        create(conn, 10_000 + n).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = host.pipe_fill().0;
        unchanged = if now == last { unchanged + 1 } else { 0 };
        last = now;
    }
    panic!("a thousand creates did not fill the pipe: {:?}", host.pipe_fill());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_reader_that_stops_reading_costs_log_records_never_an_answer() {
    let _alone = crate::alone_async().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let mut host = Host::start(&config(dir.path(), &socket));
    let conn = registered(&sim).await;
    until_ready(&conn).await;
    let filled_after = fill(&host, &conn).await;
    eprintln!("the pipe was full after {filled_after} creates: {:?}", host.pipe_fill());
    for n in 0..CREATES {
        create(&conn, n).await;
    }

    // The reader is back: what the host queued comes out, then how much it
    // could not keep.
    let stderr = host.stderr.take().unwrap();
    let mut reader = tokio::task::spawn_blocking(move || {
        let mut lines = 0usize;
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.expect("the log is text");
            lines += 1;
            if line.contains(DROPPED) {
                return (Some(line), lines);
            }
        }
        (None, lines)
    });
    // The line comes after what was queued before it, within a minute
    // however busy the machine is; the host goes on serving meanwhile.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 20_000;
    let (found, lines) = loop {
        tokio::select! {
            r = &mut reader => break r.unwrap(),
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                assert!(Instant::now() < deadline, "the host did not say within a minute how many records it dropped");
                create(&conn, n).await;
                n += 1;
            }
        }
    };
    let line = found.unwrap_or_else(|| panic!("the log ended after {lines} lines without saying what it dropped"));
    let record: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let dropped = record["dropped"].as_u64().unwrap_or_else(|| panic!("no count: {line}"));
    assert!(dropped > 0, "{line}");
    assert_eq!(record["message"], format!("{dropped} {DROPPED}"), "{line}");
    assert_eq!(record["level"], "WARN", "{line}");
    eprintln!("after {lines} lines: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_stops_on_sigterm_with_its_log_pipe_full() {
    let _alone = crate::alone_async().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let mut host = Host::start(&config(dir.path(), &socket));
    let conn = registered(&sim).await;
    until_ready(&conn).await;
    fill(&host, &conn).await;
    // Records queued behind the full pipe.
    for n in 0..5 {
        create(&conn, n).await;
    }
    // SAFETY: a signal to the child this test started, by its pid.
    assert_eq!(unsafe { libc::kill(host.child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    // Generous: the host waits at most 2 s for its log (FLUSH_WAIT), then
    // exits; a host waiting for the reader never does.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = host.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the host did not exit within a minute of SIGTERM with its log pipe full");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    drop(conn);
}
