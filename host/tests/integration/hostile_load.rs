//! Loading hostile policies with the binary itself, against the runtime
//! simulator: whatever a policy does while it is loaded (writes, panics,
//! sleeps, exits, or is built to take the compiler's time and memory), the
//! host registers within its start wait, stays up, runs the other policies,
//! and names the one it could not load.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nri_sim::{PluginConn, RuntimeProfile, SimError, Simulator};
use nri_wasm_api::api as pb;
use nri_wasm_test_support::guests;

/// The host's binary, its log read as it is written.
///
/// The log is read while the host runs, so that the test sees every line:
/// a pipe nobody reads fills up (64 KiB), and the host then drops records
/// (its log queue never blocks an answer: `log_pipe.rs`).
struct Host {
    child: Child,
    log: Option<std::thread::JoinHandle<String>>,
    /// What the host has logged so far.
    so_far: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(log) = self.log.take().and_then(|l| l.join().ok()) {
            if std::thread::panicking() {
                eprintln!("host log:\n{log}");
            }
        }
    }
}

impl Host {
    fn start(config: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
            .args(["run", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nri-wasm");
        let stderr = child.stderr.take().expect("piped stderr");
        let so_far = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let shared = so_far.clone();
        let log = std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut text = shared.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
            shared.lock().unwrap().clone()
        });
        Self { child, log: Some(log), so_far }
    }

    /// Waits (at most two minutes) until the host has logged a line with
    /// every one of `parts`: policies load one by one, and a create may
    /// succeed while a policy that may be ignored is still loading.
    async fn logged(&self, parts: &[&str]) {
        for _ in 0..1200 {
            let seen = self.so_far.lock().unwrap().lines().any(|l| parts.iter().all(|p| l.contains(p)));
            if seen {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the host did not log {parts:?} within two minutes");
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    fn stop(mut self) -> String {
        // SAFETY: kill with a valid pid and signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("wait");
        let log = self.log.take().expect("log reader").join().expect("log reader");
        assert!(status.success(), "the host stops cleanly on SIGTERM: {log}");
        log
    }
}

fn policy(dir: &Path, name: &str, wasm: &str, toml: &str) {
    std::fs::copy(wasm, dir.join(format!("{name}.wasm"))).unwrap();
    std::fs::write(dir.join(format!("{name}.toml")), toml).unwrap();
}

/// The host's configuration; `extra` adds keys to `[engine]`. No compile
/// cache: every load compiles, as the attacks need, and the default cache
/// directory of the machine is left alone.
fn config(dir: &Path, socket: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    let text = format!(
        "[runtime]\nsocket = {socket:?}\nreconnect-initial-ms = 50\nreconnect-max-ms = 200\n\
         [metrics]\naddress = \"\"\n[policies]\ndir = {:?}\n[registry]\ncache-dir = {:?}\n\
         [engine]\ncache-dir = \"\"\n{extra}",
        dir.join("policies"),
        // Root's default registry cache is the node's /var/cache.
        dir.join("registry")
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn annotation<'a>(reply: &'a pb::CreateContainerResponse, key: &str) -> Option<&'a str> {
    reply.adjust.as_ref().and_then(|a| a.annotations.get(key)).map(String::as_str)
}

fn request() -> pb::CreateContainerRequest {
    nri_sim::fixtures::load("CreateContainer").expect("fixture")
}

/// CreateContainer once no policy is still loading. The host reconnects when
/// the loaded policies need another subscription: the new connection is
/// taken then.
async fn create_when_loaded(sim: &Simulator, mut conn: PluginConn) -> Result<pb::CreateContainerResponse, SimError> {
    let req = request();
    for _ in 0..1200 {
        if conn.is_closed() {
            conn = connect(sim).await;
            conn.synchronize(&[], &[], 0).await.expect("synchronize");
        }
        match conn.create_container(&req.pod, &req.container).await {
            Err(SimError::Failed { status, .. }) if status.message().contains("not ready yet") => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) if conn.is_closed() => eprintln!("the host reconnected: {e}"),
            other => {
                conn.close().await;
                return other;
            }
        }
    }
    panic!("the policies did not load within two minutes")
}

async fn connect(sim: &Simulator) -> PluginConn {
    let mut conn = tokio::time::timeout(Duration::from_secs(30), sim.accept())
        .await
        .expect("the host connects")
        .expect("the host registers");
    conn.configure().await.expect("configure");
    conn
}

/// Writes, a panic, an hour's sleep and an exit in `configure`, with the
/// host's own binary: it used to abort with exit 101 ("Cannot start a
/// runtime from within a runtime") before registering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_that_write_panic_sleep_or_exit_while_loading_do_not_stop_the_host() {
    let _alone = crate::alone_async().await;
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    policy(&policies, "10-print", guests::HOSTILE, "settings = \"init-print\"\non-error = \"fail\"\n");
    policy(&policies, "20-panic", guests::HOSTILE, "settings = \"init-panic\"\n");
    policy(&policies, "30-sleep", guests::HOSTILE, "settings = \"init-sleep\"\n[limits]\ntimeout-ms = 200\n");
    policy(&policies, "40-exit", guests::HOSTILE, "settings = \"init-exit\"\nmode = \"audit\"\non-error = \"fail\"\n");
    policy(&policies, "50-annotate", guests::ANNOTATE, "settings = \"after\"\non-error = \"fail\"\n");
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let mut host = Host::start(&config(dir.path(), &socket, ""));
    let conn = connect(&sim).await;
    conn.synchronize(&[], &[], 0).await.unwrap();
    // 10-print is mandatory: the host asks for CreateContainer from the start.
    assert!(conn.is_subscribed(pb::Event::CREATE_CONTAINER));
    let reply = create_when_loaded(&sim, conn).await.expect("the loadable policies run");
    assert_eq!(annotation(&reply, "example.com/hostile"), Some("init-print"), "10-print loaded: {reply:?}");
    assert_eq!(annotation(&reply, "example.com/after"), Some("log-shipper"), "{reply:?}");
    assert!(host.is_running(), "the host is still up");
    for policy in ["20-panic", "30-sleep", "40-exit"] {
        host.logged(&[policy, "policy left out"]).await;
    }
    let log = host.stop();
    for (policy, says) in [
        ("20-panic", "configure panics on purpose"),
        ("30-sleep", "time limit of 2000 ms"),
        ("40-exit", "called exit(0)"),
    ] {
        let line = log.lines().find(|l| l.contains(policy) && l.contains("policy left out"));
        let line = line.unwrap_or_else(|| panic!("{policy} is reported: {log}"));
        assert!(line.contains(says), "{policy}: {line}");
    }
    assert!(log.contains("configure writes to stderr"), "a policy's output is logged: {log}");
}

/// A policy whose load takes its full time limit (a sleep in `configure`)
/// and whose component declares no events (as built before declarations)
/// delays registration by the start wait at most (its subscription is
/// unknown): the host then registers, with CreateContainer, answers at
/// once, and refuses containers naming it until it is loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_load_delays_registration_by_the_start_wait_at_most() {
    let _alone = crate::alone_async().await;
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let slow = "settings = \"init-sleep\"\non-error = \"fail\"\n[limits]\ntimeout-ms = 60000\n";
    policy(&policies, "10-slow", guests::HOSTILE, slow);
    let undeclared = nri_wasm_test_support::without_event_declaration(&std::fs::read(guests::HOSTILE).unwrap());
    std::fs::write(policies.join("10-slow.wasm"), undeclared).unwrap();
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let host = Host::start(&config(dir.path(), &socket, ""));
    let conn = connect(&sim).await;
    conn.synchronize(&[], &[], 0).await.unwrap();
    let req = request();
    let err = conn.create_container(&req.pod, &req.container).await.expect_err("a mandatory policy is still loading");
    let SimError::Failed { status, .. } = &err else { panic!("{err}") };
    assert!(status.message().contains("10-slow") && status.message().contains("not ready yet"), "{err}");
    conn.close().await;
    drop(host);
}

/// A component built to make the compiler take gigabytes (200,000
/// functions) is compiled in a child process with a memory limit: it is
/// refused, named, and the host and its other policies carry on. A file
/// over the size limit is refused before anything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiler_bomb_is_refused_within_bounds() {
    let _alone = crate::alone_async().await;
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let mut wat = String::from("(component (core module $m (memory (export \"memory\") 1)");
    for i in 0..200_000 {
        wat.push_str(&format!(
            "(func $f{i} (param i32) (result i32) local.get 0 i32.const {i} i32.add i32.const 7 i32.mul)"
        ));
    }
    wat.push_str(
        "(func (export \"realloc\") (param i32 i32 i32 i32) (result i32) i32.const 0) \
         (func (export \"configure\") (param i32 i32) (result i32) unreachable) \
         (func (export \"handle\") (param i32) (result i32) unreachable)) \
         (core instance $i (instantiate $m)) \
         (func (export \"configure\") (param \"s\" string) (result u32) (canon lift (core func $i \"configure\") (memory (core memory $i \"memory\")) (realloc (core func $i \"realloc\")))) \
         (func (export \"handle\") (param \"k\" u32) (result u32) (canon lift (core func $i \"handle\"))))",
    );
    let bomb = wat::parse_str(&wat).unwrap_or_else(|e| panic!("the bomb does not parse: {:.300}", format!("{e:?}")));
    std::fs::write(policies.join("10-bomb.wasm"), &bomb).unwrap();
    std::fs::write(policies.join("10-bomb.toml"), "on-error = \"fail\"\n").unwrap();
    let huge = vec![0u8; 8 << 20];
    std::fs::write(policies.join("20-huge.wasm"), [&b"\0asm"[..], &huge].concat()).unwrap();
    policy(&policies, "50-annotate", guests::ANNOTATE, "settings = \"after\"\non-error = \"fail\"\n");
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let extra = "compile-memory-mib = 256\ncompile-timeout-ms = 120000\nmax-component-mib = 6\n";
    let mut host = Host::start(&config(dir.path(), &socket, extra));
    // The bomb is mandatory: creation fails while it loads, then with why it did not.
    let conn = connect(&sim).await;
    conn.synchronize(&[], &[], 0).await.unwrap();
    let err = create_when_loaded(&sim, conn).await.expect_err("the bomb is mandatory");
    let SimError::Failed { status, .. } = &err else { panic!("{err}") };
    let message = status.message().to_string();
    assert!(message.contains("10-bomb") && message.contains("compiling it"), "{message}");
    assert!(message.contains("compile-memory-mib") || message.contains("compile-timeout-ms"), "{message}");
    assert!(host.is_running());
    let log = host.stop();
    let huge = log.lines().find(|l| l.contains("20-huge")).unwrap_or_else(|| panic!("{log}"));
    assert!(huge.contains("is more than the 6291456 bytes"), "{huge}");
}
