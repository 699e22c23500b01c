//! What an operator sees of the host as a process: how fast it is ready
//! after a restart, how much memory it holds, and whether that grows.
//!
//! The host runs as its own process (`nri-wasm run`, built with the
//! benchmarks), against the runtime simulator over a real socket:
//! - **start-up**: 20 policies, one of them a 10 MiB+ component, from an
//!   empty compile cache (cold) and from the cache the cold start filled
//!   (warm): the time from starting the process until the runtime has
//!   configured it with the loaded chain's subscription. Twice: with Rust
//!   components only (the baseline), and with one of them replaced by the
//!   JavaScript example (`example-policies/js/deny-host-sockets`, QuickJS),
//!   built as `tests/languages` builds it: `guest-sdk/js/build.sh` with the
//!   tools `guest-sdk/install-tools.sh` installed (`NRI_WASM_GUEST_TOOLS`,
//!   or `guest-tools` in the target directory). Without the tools the
//!   JavaScript case is skipped, with a message that says why;
//! - **resident memory** with 20 small policies after 2,000 containers;
//! - **growth**: resident memory after 10 % and after 100 % of 1,000,000
//!   events (the life of 250,000 containers, one policy subscribed to every
//!   lifecycle event), which must not grow.
//!
//! `cargo bench -p nri-wasm-benches --bench operations`; `cargo test
//! --benches` runs a short version; `NRI_WASM_OPS_EVENTS=0` skips the
//! growth check, `NRI_WASM_OPS_STARTS=0` the start-up, and
//! `NRI_WASM_OPS_IDLE_STARTS=N` sets how many starts the idle memory is the
//! median of.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nri_sim::node::{NodeModel, SimRuntime};
use nri_sim::{RuntimeProfile, Simulator};
use nri_wasm_api::api as pb;
use nri_wasm_components::examples;
use nri_wasm_test_support::guests;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent().and_then(Path::parent).expect("target profile directory").join(name)
}

/// The target directory (the profile directory's parent).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors().nth(3).expect("target directory").to_path_buf()
}

/// The JavaScript example policy, built from source as `tests/languages`
/// builds it (the SDK's build script, the QuickJS engine, the tools of
/// `guest-sdk/install-tools.sh`), and its policy file; why not, if it
/// cannot be built here.
fn js_policy() -> Result<(Vec<u8>, String), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let source = root.join("example-policies/js/deny-host-sockets");
    let tools =
        std::env::var_os("NRI_WASM_GUEST_TOOLS").map(PathBuf::from).unwrap_or_else(|| target_dir().join("guest-tools"));
    if !tools.is_dir() {
        return Err(format!(
            "no language tools in {} (guest-sdk/install-tools.sh installs them; NRI_WASM_GUEST_TOOLS names another place)",
            tools.display()
        ));
    }
    let out = target_dir().join("bench-guests/js-deny-host-sockets.wasm");
    let built = Command::new("bash")
        .arg(root.join("guest-sdk/js/build.sh"))
        .args(["--engine", "quickjs"])
        .arg(&source)
        .arg(&out)
        .env("NRI_WASM_GUEST_TOOLS", &tools)
        .output()
        .map_err(|e| format!("cannot run guest-sdk/js/build.sh: {e}"))?;
    if !built.status.success() {
        return Err(format!(
            "guest-sdk/js/build.sh failed: {}",
            String::from_utf8_lossy(&built.stderr).trim().lines().last().unwrap_or("no message")
        ));
    }
    let bytes = std::fs::read(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let file = std::fs::read_to_string(source.join("policy.toml")).map_err(|e| format!("policy.toml: {e}"))?;
    Ok((bytes, file))
}

/// A policy directory's content: file stem, component bytes, policy file.
type Policies = Vec<(String, Vec<u8>, String)>;

/// Twenty small policies of every kind the project has (the ten
/// examples with their settings, the test guests with several settings)
/// and, if `big`, one component of more than 10 MiB: the realistic guest
/// carrying 10 MiB of data in a custom section (as a policy shipping its
/// own allow-list database would).
fn policies(big: bool) -> Policies {
    let mut out: Policies = Vec::new();
    for (name, _, bytes) in examples::ALL {
        let file = examples::POLICY_FILES.iter().find(|(n, _)| n == name).map_or("", |(_, t)| t);
        out.push((name.to_string(), bytes.to_vec(), file.to_string()));
    }
    for i in 0..5 {
        out.push((
            format!("realistic-{i}"),
            std::fs::read(guests::REALISTIC).unwrap(),
            format!("settings = \"{i}\"\n"),
        ));
        out.push((format!("annotate-{i}"), std::fs::read(guests::ANNOTATE).unwrap(), format!("settings = \"a{i}\"\n")));
    }
    if big {
        let mut bytes = std::fs::read(guests::REALISTIC).unwrap();
        let payload = vec![0x5a; 10 << 20];
        let name = b"allow-list";
        let size = name.len() + 1 + payload.len();
        bytes.push(0);
        let mut n = size;
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            bytes.push(if n == 0 { byte } else { byte | 0x80 });
            if n == 0 {
                break;
            }
        }
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(&payload);
        out.push(("big".into(), bytes, "settings = \"7\"\n".into()));
    } else {
        out.push(("noop".into(), std::fs::read(guests::NOOP).unwrap(), String::new()));
    }
    out
}

/// A host process and the runtime it registered with.
struct Host {
    child: Child,
    runtime: SimRuntime,
    _sim: Simulator,
    _dir: tempfile::TempDir,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a host on `policies`; returns it once the runtime configured it
/// with `wanted` subscribed and the host says it is ready (registered, all
/// its policies loaded), and the time that took.
async fn start(policies: &Policies, cache: &Path, wanted: pb::Event) -> (Host, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::containerd("v2.3.4", "v0.12.0")).await.unwrap();
    let pdir = dir.path().join("policies");
    std::fs::create_dir(&pdir).unwrap();
    for (i, (name, bytes, file)) in policies.iter().enumerate() {
        std::fs::write(pdir.join(format!("{i:02}-{name}.wasm")), bytes).unwrap();
        // A time limit no stall of the machine reaches.
        let file = format!("{file}\n[limits]\ntimeout-ms = 900\n");
        std::fs::write(pdir.join(format!("{i:02}-{name}.toml")), file).unwrap();
    }
    let config = dir.path().join("config.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let text = format!(
        "[runtime]\nsocket = {socket:?}\n[policies]\ndir = {pdir:?}\nwatch = false\n[engine]\ncache-dir = {cache:?}\n\
         [metrics]\naddress = \"{endpoint}\"\n"
    );
    std::fs::write(&config, text).unwrap();
    let started = Instant::now();
    let child = Command::new(bin("nri-wasm-host"))
        .args(["--log", "warn", "run", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the host");
    // A host registers once it knows its policies' subscription (at once
    // when they are recorded with their compiled forms, a warm start) and
    // reconnects only when a policy unknown then needs other events.
    // Ready: registered with the final subscription, and every policy
    // loaded (`/readyz`).
    let ready = || async {
        loop {
            if matches!(nri_wasm::metrics::get(endpoint, "/readyz").await, Ok((200, _))) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let conn = loop {
        let mut conn = tokio::time::timeout(Duration::from_secs(300), sim.accept()).await.unwrap().unwrap();
        // A host that registered before it knew every subscription may
        // close this connection at any step to register again.
        if conn.configure().await.is_err() || conn.synchronize(&[], &[], 0).await.is_err() {
            continue;
        }
        tokio::select! {
            _ = ready() => {}
            _ = conn.closed() => continue,
        }
        let ready = started.elapsed();
        // A subscription that changes with the last load closes this
        // connection right after the host said it is ready: the time that
        // counts is then the next connection's. The wait to see that is
        // not part of the start-up.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !conn.is_closed() && conn.is_subscribed(wanted) {
            break (conn, ready);
        }
    };
    let (conn, ready) = conn;
    // Every policy loaded (a policy that failed would make the start look
    // faster than it is).
    let (_, body) = nri_wasm::metrics::get(endpoint, "/status").await.expect("/status");
    let status: nri_wasm::metrics::HostStatus = serde_json::from_str(&body).expect("/status is JSON");
    let not_loaded: Vec<String> =
        status.policies.iter().filter(|p| p.status != "loaded").map(|p| format!("{}: {}", p.name, p.reason)).collect();
    assert!(
        not_loaded.is_empty() && status.policies.len() == policies.len(),
        "not every policy loaded: {not_loaded:?}"
    );
    let host = Host { child, runtime: SimRuntime::new(conn, NodeModel::shared()), _sim: sim, _dir: dir };
    (host, ready)
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `n` containers through their whole life (4 events each when subscribed).
async fn lives(host: &Host, n: usize, offset: usize) {
    let pod = nri_sim::workload::pod(offset % 1000);
    if !host.runtime.model().pods.contains_key(&pod.id) {
        host.runtime.run_pod(&pod).await.unwrap();
    }
    for i in 0..n {
        let mut ctr = nri_sim::workload::container(&pod, i);
        ctr.id = format!("{:064x}", offset + i);
        let created = host.runtime.create(&ctr).await.expect("create");
        host.runtime.start(&created.id).await.expect("start");
        host.runtime.stop(&created.id).await.expect("stop");
        host.runtime.remove(&created.id).await.expect("remove");
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let (mut starts, containers, mut events) = if full { (3, 2000, 1_000_000) } else { (1, 20, 400) };
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    // NRI_WASM_OPS_EVENTS=N: another number of events for the growth check
    // (0 skips it); NRI_WASM_OPS_STARTS=N: another number of starts for
    // the start-up and memory figures (0 skips the start-up).
    if let Some(n) = env("NRI_WASM_OPS_EVENTS") {
        events = n;
    }
    if let Some(n) = env("NRI_WASM_OPS_STARTS") {
        starts = n;
    }
    let idle_starts = env("NRI_WASM_OPS_IDLE_STARTS").unwrap_or(if full { 5 } else { 1 }).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        // Start-up, cold and warm: Rust only, and with a JavaScript policy
        // in place of one of the annotate guests, alternately, so that both
        // see the same machine.
        let with_big = policies(true);
        let js = if starts > 0 { js_policy() } else { Err("no start-up measured".into()) };
        let with_js = js.as_ref().ok().map(|(bytes, file)| {
            let mut set = with_big.clone();
            let at = set.iter().position(|(n, _, _)| n == "annotate-4").expect("annotate-4 is in the set");
            set[at] = ("js-deny-host-sockets".into(), bytes.clone(), file.clone());
            set
        });
        if let Err(why) = &js {
            eprintln!("JavaScript start-up skipped: {why}");
        }
        let mut times: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
        for _ in 0..starts {
            for (set, (cold, warm)) in std::iter::once(&with_big).chain(with_js.as_ref()).zip(&mut times) {
                let cache = tempfile::tempdir().unwrap();
                let (host, t) = start(set, cache.path(), pb::Event::CREATE_CONTAINER).await;
                cold.push(t);
                drop(host);
                let (host, t) = start(set, cache.path(), pb::Event::CREATE_CONTAINER).await;
                warm.push(t);
                drop(host);
            }
        }
        eprintln!();
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut baseline_warm = None;
        for (set, (cold, warm)) in std::iter::once(&with_big).chain(with_js.as_ref()).zip(times) {
            if cold.is_empty() {
                continue;
            }
            let (cold, warm) = (median(cold), median(warm));
            let size: usize = set.iter().map(|(_, b, _)| b.len()).sum();
            let js = set.iter().find(|(n, _, _)| n.starts_with("js-"));
            eprintln!(
                "start-up with 20 policies ({:.1} MiB, the largest {:.1} MiB{}), process start to configured with them, median of {starts}:",
                mib(size),
                mib(set.iter().map(|(_, b, _)| b.len()).max().unwrap()),
                js.map(|(_, b, _)| format!("; one JavaScript, {:.1} MiB", mib(b.len()))).unwrap_or(", Rust only".into())
            );
            eprintln!(
                "  cold (empty cache) {:.0} ms, warm (from the cache) {:.0} ms: warm = {:.3} x cold{}",
                ms(cold),
                ms(warm),
                warm.as_secs_f64() / cold.as_secs_f64(),
                baseline_warm
                    .map(|b: Duration| format!(", {:.2} x the Rust-only warm start", warm.as_secs_f64() / b.as_secs_f64()))
                    .unwrap_or_default()
            );
            baseline_warm.get_or_insert(warm);
        }

        // Resident memory with 20 small policies: idle after each of
        // several starts (it varies with how the loads interleave), then
        // after `containers` containers on the last one.
        let cache = tempfile::tempdir().unwrap();
        let small = policies(false);
        let mut idle = Vec::new();
        let mut host = None;
        for _ in 0..idle_starts {
            drop(host.take());
            let (h, _) = start(&small, cache.path(), pb::Event::CREATE_CONTAINER).await;
            // Settled: the allocator returns freed pages after a delay.
            tokio::time::sleep(Duration::from_millis(500)).await;
            idle.push(rss_kib(h.child.id()).0);
            host = Some(h);
        }
        let host = host.unwrap();
        lives(&host, containers, 0).await;
        let (rss, hwm) = rss_kib(host.child.id());
        idle.sort_unstable();
        let mib = |kib: u64| kib as f64 / 1024.0;
        eprintln!(
            "resident memory with 20 small policies: {:.1} MiB loaded and idle (median of {}, largest {:.1} MiB), {:.1} MiB after {containers} containers (peak {:.1} MiB)",
            mib(idle[idle.len() / 2]),
            idle.len(),
            mib(*idle.last().unwrap()),
            mib(rss),
            mib(hwm)
        );
        drop(host);

        if events == 0 {
            return;
        }
        // Growth over a million events.
        let one = vec![("noop".to_string(), std::fs::read(guests::NOOP).unwrap(), String::new())];
        let (host, _) = start(&one, cache.path(), pb::Event::START_CONTAINER).await;
        let cycles = events / 4;
        let tenth = cycles / 10;
        let started = Instant::now();
        lives(&host, tenth, 1 << 40).await;
        let (at_tenth, _) = rss_kib(host.child.id());
        lives(&host, cycles - tenth, (1 << 40) + tenth).await;
        let (at_end, hwm) = rss_kib(host.child.id());
        eprintln!(
            "{events} events ({cycles} container lives, one policy on every event) in {:.0} s: resident {:.1} MiB after 10 %, {:.1} MiB at the end ({:+.1} MiB, peak {:.1} MiB)",
            started.elapsed().as_secs_f64(),
            at_tenth as f64 / 1024.0,
            at_end as f64 / 1024.0,
            (at_end as f64 - at_tenth as f64) / 1024.0,
            hwm as f64 / 1024.0
        );
        drop(host);
    });
}
