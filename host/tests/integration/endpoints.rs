//! The metrics and health endpoint of the binary under attack: anyone who
//! can reach its address can open connections and send nothing, or flood
//! it with requests, and the kubelet restarts the plugin (with every policy)
//! when a liveness probe goes unanswered. `/healthz` and `/readyz` must
//! answer within 1 s (the issue's requirement; the probes in
//! `docs/deploy` allow 2 s):
//!
//! - with 1,000 idle connections held open (and opened again as soon as the
//!   host closes them) and four tasks requesting `/metrics` without a
//!   pause: the host sheds the oldest idle connections past its cap;
//! - with the host's descriptors exhausted (its `ulimit -n` is 64): accept
//!   fails with EMFILE, and the host sheds idle connections instead of
//!   spinning or leaving the probes in the kernel's queue.
//!
//! Both are counted where an operator can see them without the log:
//! `nri_wasm_http_connections_shed_total` and
//! `nri_wasm_http_accept_errors_total` on `/metrics`.
//!
//! Each probe is timed on a thread of its own with blocking sockets, so
//! that the measure is the host's answer, not the test's own scheduler
//! under the flood it makes. What could make a probe slower is bounded by
//! the host's design (a thread of its own for the endpoint, at most 256
//! connections, each answered in microseconds), not by this machine's
//! speed: the margin to 1 s is wide.

use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nri_sim::{PluginConn, RuntimeProfile, Simulator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The issue's requirement for one probe.
const PROBE_LIMIT: Duration = Duration::from_secs(1);
const IDLE: usize = 1000;
/// The host's cap on connections (`metrics/http.rs`).
const HOST_CAP: usize = 256;

/// The host binary, its log collected as it is written.
struct Host {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("host log:\n{}", self.log.lock().unwrap().join("\n"));
        }
    }
}

impl Host {
    /// Starts `nri-wasm run` with at most `max_fds` descriptors (or the
    /// test's own limit).
    fn start(config: &Path, max_fds: Option<u32>) -> Self {
        let binary = env!("CARGO_BIN_EXE_nri-wasm");
        let mut cmd = match max_fds {
            None => Command::new(binary),
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c").arg(format!("ulimit -n {n} && exec \"$0\" \"$@\"")).arg(binary);
                sh
            }
        };
        let mut child = cmd
            .args(["--log-format", "json", "run", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nri-wasm");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Self { child, log }
    }

    /// The first log record with `message`, as JSON, waiting up to 30 s.
    fn record(&self, message: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let found = self.log.lock().unwrap().iter().find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                (field(&v, "message") == message).then_some(v)
            });
            if let Some(v) = found {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the host never logged {message:?}");
    }

    fn endpoint(&self) -> SocketAddr {
        let v = self.record("metrics and health endpoint listening");
        field(&v, "address").parse().unwrap()
    }

    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, |d| d.count())
    }
}

/// A field of a JSON log record (flattened or under `fields`).
fn field<'a>(record: &'a serde_json::Value, name: &str) -> &'a str {
    record.get(name).or_else(|| record["fields"].get(name)).and_then(|v| v.as_str()).unwrap_or_default()
}

fn config(dir: &Path, socket: &Path) -> PathBuf {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    let path = dir.join("config.toml");
    let text = format!(
        "[runtime]\nsocket = {socket:?}\nreconnect-initial-ms = 50\nreconnect-max-ms = 200\n\
         [metrics]\naddress = \"127.0.0.1:0\"\n[policies]\ndir = {policies:?}\nwatch = false\n\
         [engine]\ncache-dir = \"\"\n[registry]\ncache-dir = {:?}\n",
        // Root's default registry cache is the node's /var/cache.
        dir.join("registry")
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Raises this process's soft limit of descriptors to its hard limit
/// (the test holds 1,000 connections, and the host's side of them is in
/// another process).
fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid resource and struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    limit.rlim_cur
}

/// One probe, as the kubelet makes it: connect, GET, read the response,
/// and give up (a failed probe) once [`PROBE_LIMIT`] has passed since it
/// started, as the kubelet does at the probe's `timeoutSeconds` (1 s is
/// the requirement this file tests, stricter than the 2 s the deployed
/// probes allow). The status code and how long it took, or why it failed.
fn probe(addr: SocketAddr, path: &str) -> Result<(u16, Duration), String> {
    let started = Instant::now();
    let deadline = started + PROBE_LIMIT;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer within the probe's timeout of {PROBE_LIMIT:?}"))
    };
    let mut s = std::net::TcpStream::connect_timeout(&addr, left()?).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(Some(left()?)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\n\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        s.set_read_timeout(Some(left()?)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read after {:?}: {e}", started.elapsed())),
        }
    }
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&response);
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or(format!("no status: {text:?}"))?;
    Ok((code, took))
}

/// Probes `/healthz` and `/readyz` `rounds` times, a few hundred
/// milliseconds apart, on a thread of its own; every answer must be
/// `ready` (200 or 503 as expected) and come within [`PROBE_LIMIT`].
async fn probe_rounds(addr: SocketAddr, rounds: usize, ready: u16) {
    let results = tokio::task::spawn_blocking(move || {
        let mut results = Vec::new();
        for _ in 0..rounds {
            for (path, want) in [("/healthz", 200), ("/readyz", ready)] {
                results.push((path, want, probe(addr, path)));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        results
    })
    .await
    .unwrap();
    for (path, want, result) in results {
        let (code, took) = result.unwrap_or_else(|e| panic!("{path} was not answered: {e}"));
        eprintln!("{path}: {code} in {took:?}");
        assert_eq!(code, want, "{path}");
    }
}

/// What the attackers saw.
#[derive(Default)]
struct Attack {
    stop: AtomicBool,
    /// Idle connections that reached the host.
    connected: AtomicU64,
    /// Idle connections the host closed without a word (shed past its cap).
    shed: AtomicU64,
    /// Idle connections answered `408` (their head's time was up).
    timed_out: AtomicU64,
    /// Flood requests answered.
    answered: AtomicU64,
}

/// `n` idle connections, each opened again a second after the host closes
/// it, until the attack stops.
fn idle_connections(addr: SocketAddr, n: usize, attack: &Arc<Attack>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let attack = attack.clone();
            tokio::spawn(async move {
                while !attack.stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr).await else {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    };
                    attack.connected.fetch_add(1, Ordering::Relaxed);
                    let mut out = Vec::new();
                    // Held until the host closes it (or the attack ends).
                    let read = tokio::select! {
                        r = s.read_to_end(&mut out) => r,
                        () = async { while !attack.stop.load(Ordering::Relaxed) { tokio::time::sleep(Duration::from_millis(100)).await } } => break,
                    };
                    if read.is_ok() && out.is_empty() {
                        attack.shed.fetch_add(1, Ordering::Relaxed);
                    } else if out.starts_with(b"HTTP/1.1 408") {
                        attack.timed_out.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        })
        .collect()
}

/// `n` tasks requesting `/metrics` as fast as they are answered.
fn flood(addr: SocketAddr, n: usize, attack: &Arc<Attack>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let attack = attack.clone();
            tokio::spawn(async move {
                while !attack.stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await;
                    let mut out = Vec::new();
                    if s.read_to_end(&mut out).await.is_ok() && out.starts_with(b"HTTP/1.1 200") {
                        attack.answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect()
}

async fn registered(sim: &Simulator) -> PluginConn {
    let mut conn = tokio::time::timeout(Duration::from_secs(30), sim.accept())
        .await
        .expect("the host connects")
        .expect("the host registers");
    conn.configure().await.expect("configure");
    conn.synchronize(&[], &[], 0).await.expect("synchronize");
    conn
}

/// `/readyz` says ready (registered, policies loaded), within 30 s.
async fn until_ready(addr: SocketAddr) {
    for _ in 0..300 {
        if nri_wasm::metrics::get(addr, "/readyz").await.is_ok_and(|(code, _)| code == 200) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the host never became ready");
}

/// The value of the counter `name` on the host's `/metrics`.
async fn counter(addr: SocketAddr, name: &str) -> u64 {
    let (code, text) = nri_wasm::metrics::get(addr, "/metrics").await.expect("/metrics answers");
    assert_eq!(code, 200, "/metrics: {text}");
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

async fn stop(attack: &Arc<Attack>, tasks: Vec<tokio::task::JoinHandle<()>>) {
    attack.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_answer_within_a_second_under_a_thousand_idle_connections_and_a_flood() {
    let _alone = crate::alone_async().await;
    let fds = raise_fd_limit();
    assert!(fds >= 2 * IDLE as u64, "this test needs {} descriptors; the hard limit is {fds}", 2 * IDLE);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&config(dir.path(), &socket), None);
    let addr = host.endpoint();
    let _conn = registered(&sim).await;
    until_ready(addr).await;

    let attack = Arc::new(Attack::default());
    let mut tasks = idle_connections(addr, IDLE, &attack);
    // All of them connected before the probes start.
    let deadline = Instant::now() + Duration::from_secs(60);
    while attack.connected.load(Ordering::Relaxed) < IDLE as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(attack.connected.load(Ordering::Relaxed) >= IDLE as u64, "the idle connections did not connect");
    tasks.extend(flood(addr, 4, &attack));
    probe_rounds(addr, 8, 200).await;

    let (answered, shed) = (attack.answered.load(Ordering::Relaxed), attack.shed.load(Ordering::Relaxed));
    stop(&attack, tasks).await;
    // The limit that fired is the cap: idle connections were closed by the
    // host without an answer, as new ones came.
    assert!(shed >= (IDLE - HOST_CAP) as u64, "only {shed} idle connections were shed");
    assert!(answered > 0, "the flood was never answered");
    let log = host.log.lock().unwrap().join("\n");
    assert!(log.contains("connections past the cap shed"), "the shedding is logged: {log}");
    // And counted: every connection the attackers saw shed, at least.
    let counted = counter(addr, "nri_wasm_http_connections_shed_total").await;
    assert!(counted >= shed, "the host counted {counted} shed connections; the attackers saw {shed}");
    assert_eq!(counter(addr, "nri_wasm_http_accept_errors_total").await, 0, "descriptors to spare: no accept failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_answer_within_a_second_when_the_host_is_out_of_descriptors() {
    let _alone = crate::alone_async().await;
    raise_fd_limit();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&config(dir.path(), &socket), Some(64));
    let addr = host.endpoint();
    let _conn = registered(&sim).await;
    until_ready(addr).await;
    let baseline = host.open_fds();
    assert!(baseline < 48, "the host uses {baseline} descriptors before any connection; 64 leaves too few");

    // Far more idle connections than the host has descriptors for.
    let attack = Arc::new(Attack::default());
    let mut tasks = idle_connections(addr, 300, &attack);
    tasks.extend(flood(addr, 2, &attack));
    tokio::time::sleep(Duration::from_secs(1)).await;
    probe_rounds(addr, 8, 200).await;
    stop(&attack, tasks).await;

    // The limit that fired is the descriptors': accept failed, was logged
    // once, and the host shed idle connections to go on.
    let failed = host.record("metrics endpoint: accepting connections failed (idle ones are shed, or it backs off)");
    let error = field(&failed, "error");
    assert!(error.contains("Too many open files"), "{failed}");
    let shed = attack.shed.load(Ordering::Relaxed);
    assert!(shed > 0, "no idle connection was shed");
    // And counted, though logged only once every 10 s.
    let failures = counter(addr, "nri_wasm_http_accept_errors_total").await;
    assert!(failures >= 1, "accept failed, and the counter says {failures}");
    let counted = counter(addr, "nri_wasm_http_connections_shed_total").await;
    assert!(counted >= shed, "the host counted {counted} shed connections; the attackers saw {shed}");
}

/// What an operator reads about a broken settings file (`/status`, the
/// log) locates the mistake and never repeats the file's text, which may
/// hold a secret; a policy file whose name is not UTF-8 is reported, not
/// skipped in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_settings_file_and_a_name_that_is_not_utf8_are_reported_without_the_text() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let config = config(dir.path(), &socket);
    let policies = dir.path().join("policies");
    std::fs::write(policies.join("10-x.wasm"), b"not loaded: its settings fail first").unwrap();
    std::fs::write(policies.join("10-x.toml"), "mode = \"audit\"\nsettings = \"hunter2-token\n").unwrap();
    std::fs::write(policies.join(std::ffi::OsStr::from_bytes(b"20-caf\xe9.wasm")), b"").unwrap();
    let host = Host::start(&config, None);
    let addr = host.endpoint();
    let mut reason = String::new();
    for _ in 0..300 {
        let (_, body) = nri_wasm::metrics::get(addr, "/status").await.unwrap();
        let status: nri_wasm::metrics::HostStatus = serde_json::from_str(&body).unwrap();
        if let Some(p) = status.policies.iter().find(|p| p.name == "10-x" && p.status == "failed") {
            reason = p.reason.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reason.contains("10-x.toml") && reason.contains("line 2, column"), "/status: {reason:?}");
    assert!(!reason.contains("hunter2"), "/status repeats the settings: {reason}");
    let problem = host.record("policy directory problem");
    assert!(field(&problem, "error").contains(r"20-caf\xe9.wasm: file name is not UTF-8"), "{problem}");
    let log = host.log.lock().unwrap().join("\n");
    assert!(log.contains("line 2, column") && !log.contains("hunter2"), "the log repeats the settings: {log}");
}

/// The number of log records with `message` so far.
fn records(host: &Host, message: &str) -> usize {
    host.log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| field(v, "message") == message)
        .count()
}

/// What `/readyz` answers, polled until its body is `want` (at most 30 s).
async fn readyz_until(addr: SocketAddr, want: &str) -> (u16, String) {
    let mut last = (0, String::new());
    for _ in 0..300 {
        last = nri_wasm::metrics::get(addr, "/readyz").await.expect("/readyz answers");
        if last.1.trim() == want {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("/readyz never said {want:?}; last: {last:?}");
}

/// A runtime that refuses the registration (another plugin holds the
/// name, say): `/readyz` says the host is not registered, every refused
/// connection counts as a reconnect, and the log warns once, not at every
/// attempt; once the runtime accepts, the host is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_registration_is_counted_summarised_and_named_by_readyz() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let refusing = RuntimeProfile {
        refuse_registration: Some("plugin 10-nri-wasm already registered".into()),
        ..RuntimeProfile::v0_12()
    };
    let mut sim = Simulator::listen(&socket, refusing).await.unwrap();
    let host = Host::start(&config(dir.path(), &socket), None);
    let addr = host.endpoint();
    for _ in 0..4 {
        let refused = tokio::time::timeout(Duration::from_secs(30), sim.accept()).await.expect("the host tries");
        assert!(refused.is_err(), "the simulator refused the registration");
    }
    let (code, body) = readyz_until(addr, "not ready: not registered with the runtime").await;
    assert_eq!((code, body.trim()), (503, "not ready: not registered with the runtime"));
    let reconnects = counter(addr, "nri_wasm_reconnects_total").await;
    assert!(reconnects >= 3, "4 refused registrations, {reconnects} reconnects counted");
    let first = host.record("registration with the runtime failed; retrying");
    assert!(field(&first, "error").contains("already registered"), "{first}");
    assert_eq!(records(&host, "registration with the runtime failed; retrying"), 1);
    assert_eq!(records(&host, "registration with the runtime still fails"), 0);
    assert_eq!(records(&host, "disconnected from the runtime; reconnecting"), 0);

    sim.set_profile(RuntimeProfile::v0_12());
    let conn = loop {
        // An attempt may be under way with the refusing profile.
        if let Ok(conn) = tokio::time::timeout(Duration::from_secs(30), sim.accept()).await.expect("the host tries") {
            break conn;
        }
    };
    let mut conn = conn;
    conn.configure().await.unwrap();
    conn.synchronize(&[], &[], 0).await.unwrap();
    let (code, body) = readyz_until(addr, "ready").await;
    assert_eq!((code, body.trim()), (200, "ready"));
    conn.close().await;
}

/// A new version of a running policy that fails to load: `/status` and
/// `nri-wasm status` say so beside the version that keeps running, and the
/// log says it once, not at every reload; the same for a settings file
/// whose policy is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_new_version_is_shown_by_status_and_logged_once() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let config = config(dir.path(), &socket);
    let policies = dir.path().join("policies");
    std::fs::copy(nri_wasm_test_support::guests::ANNOTATE, policies.join("10-a.wasm")).unwrap();
    std::fs::write(policies.join("10-a.toml"), "settings = \"x\"\n").unwrap();
    std::fs::write(policies.join("20-gone.toml"), "mode = \"audit\"\n").unwrap();
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&config, None);
    let addr = host.endpoint();
    let _conn = sim.accept_started(Duration::from_secs(60)).await;
    readyz_until(addr, "ready").await;
    let reloads = |n: u64| async move {
        for _ in 0..600 {
            let (_, text) = nri_wasm::metrics::get(addr, "/metrics").await.expect("/metrics answers");
            let failed = text
                .lines()
                .find_map(|l| l.strip_prefix("nri_wasm_reloads_total{result=\"failed\"} "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
            if failed >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{n} reloads did not end within a minute");
    };
    reloads(1).await;

    std::fs::write(policies.join("10-a.wasm"), b"not a component any more").unwrap();
    for n in 2..=4 {
        // SAFETY: kill with the child's pid and a valid signal.
        unsafe { libc::kill(host.child.id() as i32, libc::SIGHUP) };
        reloads(n).await;
    }
    let (_, body) = nri_wasm::metrics::get(addr, "/status").await.unwrap();
    let status: nri_wasm::metrics::HostStatus = serde_json::from_str(&body).unwrap();
    let a = status.policies.iter().find(|p| p.name == "10-a").expect("10-a in /status");
    assert_eq!(a.status, "loaded", "the old version runs: {a:?}");
    assert!(a.refused.contains("10-a.wasm"), "{a:?}");
    let output =
        Command::new(env!("CARGO_BIN_EXE_nri-wasm")).args(["status", "--address", &addr.to_string()]).output().unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("new version refused, this one keeps running") && table.contains("10-a.wasm"), "{table}");

    // The log reaches the test through the host's stderr, read by a thread
    // of the test: the record may trail the metric that counted the reload.
    let refused = "new version of the policy refused; the previous version stays";
    for _ in 0..100 {
        if records(&host, refused) > 0 && records(&host, "policy directory problem") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(records(&host, refused), 1);
    let problems: Vec<String> = host
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("policy directory problem") && l.contains("20-gone.toml"))
        .cloned()
        .collect();
    assert_eq!(problems.len(), 1, "the orphan settings file is reported once: {problems:?}");
}

/// `nri-wasm status` with nothing listening: one line saying so, even with
/// `RUST_BACKTRACE` set, and a failed exit.
#[test]
fn status_of_a_host_that_is_not_running_is_one_line() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
        .args(["status", "--address", &free.to_string()])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no host answers on") && stderr.contains(&free.to_string()), "{stderr}");
}
