//! The cost on the runtime's path: what the runtime waits for, per CRI call,
//! and what the plugin process spends, per container's life.
//!
//! The runtime simulator plays what containerd sends a plugin for CRI
//! CreateContainer, StartContainer, StopContainer and RemoveContainer of a
//! container (the same NRI events in the same order, one at a time,
//! synchronously, only those the plugin subscribed to), against plugins run
//! as processes of their own:
//! - (a) `floor`: a minimal native plugin on the project's own transport,
//!   subscribed to CreateContainer, setting one env variable;
//! - (b) `empty`: nri-wasm with no policy;
//! - (c) `one`: nri-wasm with one realistic policy;
//! - (d) `ten`: nri-wasm with ten realistic policies;
//! - (e) `ten no-ops`: nri-wasm with ten SDK-built policies that change
//!   nothing (tests/guests/noop; subscribed to every lifecycle event);
//! - (f) `ten bare no-ops`: nri-wasm with ten of the cheapest policy a
//!   component can be (tests/guests/bare: no standard library, no WASI),
//!   subscribed to CreateContainer: the floor of ten fresh instances per
//!   event, before any policy does any work.
//!
//! In rounds of 200 containers, in rotating order, it records for every CRI
//! call the time the simulated runtime spent in the plugin, and the plugin's
//! CPU time per container (the sum over its threads of
//! `/proc/PID/task/*/schedstat`), and reports medians over rounds as ratios
//! to (a) in the same run. It also times the in-process chain of ten
//! realistic policies, for the target "(d) at most 1.5 × (in-process chain
//! + (a))", and counts each plugin's wake-ups while idle for 30 s.
//!
//! The transport's own cost is taken per CreateContainer at both ends of
//! the socket: the simulated runtime's wire layer times the round trip
//! (from the write of the request's last frame to the response's last byte
//! read), and the plugin traces its answer (`nri_wasm::answer`: from the
//! request's last byte read to the answer handed to the socket, and the
//! dispatcher's part of it, the chain). Paired by ttrpc stream: the round
//! trip less the chain is everything but the chain, in the same event with
//! the same caches. Where the plugin and the runtime ran (one CPU or two)
//! is read after each event; the baseline is a plain echo of the same
//! sizes between two processes (`floor-plugin --echo`) on one CPU and on
//! two, the kernel's part of any plugin.
//!
//! Every other event the plugin was sent is paired the same way (the
//! simulated runtime's round trips in the order it sent them, the event's
//! name from the plugin's trace), in a table by event: a CRI call that sends
//! two events (CreateContainer and PostCreateContainer, StartContainer and
//! PostStartContainer) is timed event by event, and the CreateContainer of
//! the table above is the call's first request, not its last.
//!
//! `cargo bench -p nri-wasm-benches --bench real_path`; `cargo test
//! --benches` runs one short round. `NRI_WASM_REAL_PATH_GAP_US` and
//! `NRI_WASM_REAL_PATH_SWEEP_KIB` play a real runtime's time between two
//! containers (idle, and memory written): what a chain costs found cold.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nri_sim::node::{NodeModel, SimRuntime};
use nri_sim::{RuntimeProfile, Simulator};
use nri_wasm_api::api as pb;
use nri_wasm_benches::{cpu_ns, guests, Bench};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The plugins measured, in the order of the first round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    Floor,
    Empty,
    One,
    Ten,
    TenNoop,
    TenBare,
}

impl Setup {
    const ALL: [Setup; 6] = [Setup::Floor, Setup::Empty, Setup::One, Setup::Ten, Setup::TenNoop, Setup::TenBare];

    fn name(self) -> &'static str {
        match self {
            Self::Floor => "(a) floor",
            Self::Empty => "(b) no policy",
            Self::One => "(c) one policy",
            Self::Ten => "(d) ten policies",
            Self::TenNoop => "(e) ten no-ops",
            Self::TenBare => "(f) ten bare no-ops",
        }
    }

    fn policies(self) -> usize {
        match self {
            Self::Floor | Self::Empty => 0,
            Self::One => 1,
            Self::Ten | Self::TenNoop | Self::TenBare => 10,
        }
    }

    /// The policy its host runs (`policies()` copies of it), by name and path.
    fn guest(self) -> (&'static str, &'static str) {
        match self {
            Self::TenNoop => ("noop", guests::NOOP),
            Self::TenBare => ("bare", guests::BARE),
            _ => ("realistic", guests::REALISTIC),
        }
    }
}

/// The CRI calls of one container's life.
const CALLS: [&str; 4] = ["create", "start", "stop", "remove"];

/// What a plugin traced about one answer (`nri_wasm::answer`), in µs.
#[derive(Debug, Clone)]
struct Answer {
    /// The RPC it answered.
    event: String,
    total: f64,
    handler: f64,
}

/// A plugin's log file (its stderr), read from where the last read ended:
/// the answer lines by ttrpc stream, every other line passed on to ours.
/// A file, not a pipe: a reader woken at every line would compete with
/// the simulated runtime for the CPUs.
struct Log {
    file: std::fs::File,
    /// What was read of a line still being written.
    partial: Vec<u8>,
}

impl Log {
    fn answers(&mut self) -> HashMap<u32, Answer> {
        use std::io::Read as _;
        let mut answers = HashMap::new();
        if self.file.read_to_end(&mut self.partial).is_err() {
            return answers;
        }
        // Only whole lines; a line being written is read next time.
        let whole = self.partial.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let lines: Vec<u8> = self.partial.drain(..whole).collect();
        for line in String::from_utf8_lossy(&lines).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            let answer = (v["target"] == "nri_wasm::answer")
                .then(|| Some((v["stream"].as_u64()?, v["total_us"].as_f64()?, v["handler_us"].as_f64()?)))
                .flatten();
            match answer {
                Some((stream, total, handler)) => {
                    let event = v["event"].as_str().unwrap_or("").to_string();
                    answers.insert(stream as u32, Answer { event, total, handler });
                }
                None => eprintln!("{line}"),
            }
        }
        answers
    }
}

/// One CreateContainer at both ends of the socket, µs.
#[derive(Debug, Clone, Copy)]
struct Split {
    /// The time the runtime waited.
    waited: f64,
    /// Its wire layer's round trip.
    wire: f64,
    /// The plugin's answer, socket to socket.
    total: f64,
    /// The chain's part of it (the dispatcher).
    chain: f64,
    /// Whether the plugin answered on the CPU the runtime ran on.
    one_cpu: bool,
}

/// The CPU the plugin's main thread (its transport) last ran on.
fn last_cpu(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses, `processor` is field 39.
    stat.rsplit_once(')')?.1.split_whitespace().nth(36)?.parse().ok()
}

/// One event the plugin was sent, whatever its kind, at both ends of the
/// socket, µs.
#[derive(Debug, Clone)]
struct EventTime {
    event: String,
    /// The wire layer's round trip.
    wire: f64,
    /// The plugin's answer, socket to socket.
    total: f64,
    /// The dispatcher's part of it.
    chain: f64,
}

/// A plugin process and the simulated runtime it is connected to.
struct Plugin {
    setup: Setup,
    child: Child,
    log: Mutex<Log>,
    runtime: SimRuntime,
    _sim: Simulator,
    _dir: tempfile::TempDir,
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bin(name: &str) -> PathBuf {
    // The benchmarks' own binaries, built with them.
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target profile directory");
    dir.join(name)
}

/// Context switches (voluntary and not) so far of every thread of a
/// process, by thread id.
fn switches(pid: u32) -> std::collections::HashMap<String, u64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Default::default() };
    tasks
        .flatten()
        .filter_map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let n = status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split(':').nth(1).and_then(|v| v.trim().parse::<u64>().ok()))
                .sum::<u64>();
            Some((t.file_name().to_string_lossy().into_owned(), n))
        })
        .collect()
}

/// Wake-ups between two readings: each thread's increase (threads that
/// ended in between are not counted; threads that started count whole).
fn wakeups(before: &std::collections::HashMap<String, u64>, after: &std::collections::HashMap<String, u64>) -> u64 {
    after.iter().map(|(tid, n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0))).sum()
}

async fn start(setup: Setup, cache: &Path) -> Plugin {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::containerd("v2.3.4", "v0.12.0")).await.expect("listen");
    let mut command = match setup {
        Setup::Floor => {
            let mut c = Command::new(bin("floor-plugin"));
            c.arg(&socket);
            c
        }
        _ => {
            let policies = dir.path().join("policies");
            std::fs::create_dir(&policies).unwrap();
            for i in 0..setup.policies() {
                let (kind, guest) = setup.guest();
                std::fs::copy(guest, policies.join(format!("{i:02}-{kind}.wasm"))).unwrap();
                // A time limit a stall of the machine does not reach: the
                // benchmark measures costs, not the hypervisor.
                let toml = format!("settings = \"{i}\"\n[limits]\ntimeout-ms = 900\n");
                std::fs::write(policies.join(format!("{i:02}-{kind}.toml")), toml).unwrap();
            }
            let config = dir.path().join("config.toml");
            let text = format!(
                "[runtime]\nsocket = {socket:?}\n[policies]\ndir = {policies:?}\n[engine]\ncache-dir = {cache:?}\n\
                 [metrics]\naddress = \"\"\n"
            );
            std::fs::write(&config, text).unwrap();
            let mut c = Command::new(bin("nri-wasm-host"));
            c.args(["--log", "warn,nri_wasm::answer=trace", "--log-format", "json", "run", "--config"]).arg(&config);
            c
        }
    };
    let log = dir.path().join("plugin.log");
    let stderr = std::fs::File::create(&log).expect("log file");
    let child = command.stdout(Stdio::null()).stderr(stderr).spawn().expect("start the plugin");
    let log = Mutex::new(Log { file: std::fs::File::open(&log).expect("log file"), partial: Vec::new() });
    // The host reconnects once its policies are loaded if the subscription
    // changes: take the connection that stays.
    let conn = loop {
        let mut conn = tokio::time::timeout(Duration::from_secs(60), sim.accept())
            .await
            .expect("the plugin connects")
            .expect("the plugin registers");
        conn.configure().await.expect("configure");
        conn.synchronize(&[], &[], 0).await.expect("synchronize");
        let wanted = setup.policies() > 0 || setup == Setup::Floor;
        if !wanted || conn.is_subscribed(pb::Event::CREATE_CONTAINER) {
            break conn;
        }
    };
    let runtime = SimRuntime::new(conn, NodeModel::shared());
    Plugin { setup, child, log, runtime, _sim: sim, _dir: dir }
}

/// What a real runtime does between two containers, played when asked:
/// `NRI_WASM_REAL_PATH_GAP_US` idles that long (the plugin sleeps between
/// events, as it does on a real node), `NRI_WASM_REAL_PATH_SWEEP_KIB` writes
/// that much memory on the simulated runtime's thread (as the runtime, runc
/// and the kernel do; it evicts what the caches the two threads share hold
/// of the plugin, not what the plugin's own CPU keeps). Neither by default:
/// the events then come back to back, with the plugin's caches warm.
fn between_containers() {
    static PLAY: std::sync::OnceLock<(Duration, Mutex<Vec<u8>>)> = std::sync::OnceLock::new();
    let (gap, sweep) = PLAY.get_or_init(|| {
        let var =
            |name: &str| std::env::var(name).ok().map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{name}={v:?}")));
        let gap = Duration::from_micros(var("NRI_WASM_REAL_PATH_GAP_US").unwrap_or(0));
        let kib = var("NRI_WASM_REAL_PATH_SWEEP_KIB").unwrap_or(0) as usize;
        (gap, Mutex::new(vec![0u8; kib * 1024]))
    });
    let mut sweep = sweep.lock().unwrap();
    for (i, line) in sweep.chunks_mut(64).enumerate() {
        line[0] = line[0].wrapping_add(i as u8);
    }
    std::hint::black_box(&mut *sweep);
    if !gap.is_zero() {
        std::thread::sleep(*gap);
    }
}

/// One round: `n` containers through their life; per CRI call the time spent
/// in the plugin, the plugin's CPU time per container, each CreateContainer
/// the plugin was sent at both ends of the socket, and every event it was
/// sent (CreateContainer, PostCreateContainer, StartContainer, ...) there.
async fn round(p: &Plugin, n: usize, round: usize) -> ([Vec<Duration>; 4], f64, Vec<Split>, Vec<EventTime>) {
    let pod = nri_sim::workload::pod(3);
    p.runtime.run_pod(&pod).await.expect("run pod");
    let stats = p.runtime.conn.stats();
    // Those of the previous round's pod and of this one: not the containers'.
    stats.take_round_trips();
    let mut times: [Vec<Duration>; 4] = Default::default();
    let mut sent = Vec::new();
    let mut trips = Vec::new();
    let cpu_before = cpu_ns(&[p.child.id()]);
    for i in 0..n {
        let mut ctr = nri_sim::workload::container(&pod, i);
        ctr.id = format!("{:064x}", (round << 32) | i);
        let t = Instant::now();
        let created = p.runtime.create(&ctr).await.expect("create");
        times[0].push(t.elapsed());
        let created_trips = stats.take_round_trips();
        // CreateContainer is the first the runtime sends for the call; a
        // plugin subscribed to PostCreateContainer gets that one after it.
        let trip = p.runtime.conn.is_subscribed(pb::Event::CREATE_CONTAINER).then(|| created_trips.first()).flatten();
        trips.extend(created_trips.iter().copied());
        if let Some(trip) = trip.copied() {
            // SAFETY: sched_getcpu only reads the calling thread's CPU.
            let runtime_cpu = unsafe { libc::sched_getcpu() };
            let one_cpu = last_cpu(p.child.id()) == Some(runtime_cpu);
            sent.push((times[0][i], trip, one_cpu));
        }
        let t = Instant::now();
        p.runtime.start(&created.id).await.expect("start");
        times[1].push(t.elapsed());
        let t = Instant::now();
        p.runtime.stop(&created.id).await.expect("stop");
        times[2].push(t.elapsed());
        let t = Instant::now();
        p.runtime.remove(&created.id).await.expect("remove");
        times[3].push(t.elapsed());
        trips.extend(stats.take_round_trips());
        between_containers();
    }
    let cpu = cpu_ns(&[p.child.id()]).saturating_sub(cpu_before) as f64 / n as f64;
    p.runtime.remove_pod(&pod.id).await.expect("remove pod");
    // The plugin traces an answer just after writing it.
    let traced = Instant::now();
    let mut answers = HashMap::new();
    loop {
        answers.extend(p.log.lock().unwrap().answers());
        if trips.iter().all(|t| answers.contains_key(&t.stream)) {
            break;
        }
        assert!(traced.elapsed() < Duration::from_secs(10), "{} did not trace every answer", p.setup.name());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let splits = sent
        .iter()
        .map(|(waited, trip, one_cpu)| {
            let a = &answers[&trip.stream];
            Split { waited: us(*waited), wire: us(trip.took), total: a.total, chain: a.handler, one_cpu: *one_cpu }
        })
        .collect();
    let events = trips
        .iter()
        .map(|t| {
            let a = &answers[&t.stream];
            EventTime { event: a.event.clone(), wire: us(t.took), total: a.total, chain: a.handler }
        })
        .collect();
    (times, cpu, splits, events)
}

/// The kernel's round trip between two processes: `floor-plugin --echo`
/// answers `answer` bytes to each `request` bytes after computing for
/// `hold`, blocking on both sides; p50 in µs of the round trip less the
/// hold. Both processes are kept on the first CPU, or with `apart` on the first
/// two, so that every message wakes the other CPU.
fn echo_round_trip(request: usize, answer: usize, hold: Duration, apart: bool, iterations: usize) -> f64 {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                pin_to_cpu(0).expect("keep the echo's runtime side on CPU 0");
                echo_on_this_thread(request, answer, hold, apart, iterations)
            })
            .join()
            .expect("echo thread")
    })
}

/// Keeps the calling thread (or, in a child before exec, the process) on
/// one CPU.
fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a cpu_set_t filled by the libc macros, passed by pointer for
    // the duration of the call.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn echo_on_this_thread(request: usize, answer: usize, hold: Duration, apart: bool, iterations: usize) -> f64 {
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("echo.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let mut command = Command::new(bin("floor-plugin"));
    command.arg("--echo").arg(&path);
    let cpu = usize::from(apart);
    // SAFETY: only an async-signal-safe system call between fork and exec.
    unsafe {
        command.pre_exec(move || pin_to_cpu(cpu));
    }
    let mut child = command.spawn().expect("start the echo");
    let (mut s, _) = listener.accept().expect("the echo connects");
    let mut message = (request as u32).to_be_bytes().to_vec();
    message.extend_from_slice(&(answer as u32).to_be_bytes());
    message.extend_from_slice(&(hold.as_micros() as u32).to_be_bytes());
    message.resize(12 + request, 7);
    let mut back = vec![0u8; answer];
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations + iterations / 10 {
        let t = Instant::now();
        s.write_all(&message).expect("echo write");
        s.read_exact(&mut back).expect("echo read");
        if i >= iterations / 10 {
            times.push(t.elapsed().saturating_sub(hold));
        }
        // The runtime does its own work between two events.
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(s);
    let _ = child.wait();
    p50(&mut times)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    v[v.len() / 2]
}

fn p50(v: &mut [Duration]) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// The in-process chain of ten realistic policies, p50 in µs: called in a
/// loop (`cold` false), or with the caches flushed before every call
/// (`cold`), as they are on the real path, where the runtime and the
/// kernel run between two events.
fn in_process_ten(iterations: usize, cold: bool) -> f64 {
    let bench = Bench::new();
    let chain = bench.realistic(10);
    let req = nri_wasm_benches::request();
    let mut times = Vec::with_capacity(iterations);
    // Larger than the last-level cache of the machines this runs on.
    let mut sweep = if cold { vec![0u8; 64 << 20] } else { Vec::new() };
    for i in 0..iterations + iterations / 10 {
        for line in sweep.iter_mut().step_by(64) {
            *line = line.wrapping_add(1);
        }
        std::hint::black_box(&sweep);
        let t = Instant::now();
        bench.create(&chain, Duration::from_secs(60), &req).expect("chain answers");
        if i >= iterations / 10 {
            times.push(t.elapsed());
        }
    }
    p50(&mut times)
}

/// What protobuf costs the host per CreateContainer, in-process: decoding
/// the request from its bytes and encoding ten policies' answer; p50 µs.
fn codec(iterations: usize) -> f64 {
    use protobuf::Message as _;
    let bench = Bench::new();
    let chain = bench.realistic(10);
    let req = nri_wasm_benches::request();
    let answer = bench.create(&chain, Duration::from_secs(60), &req).expect("chain answers").value;
    let bytes = req.write_to_bytes().expect("encode the request");
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations + iterations / 10 {
        let t = Instant::now();
        let decoded = pb::CreateContainerRequest::parse_from_bytes(&bytes).expect("decode the request");
        let encoded = answer.write_to_bytes().expect("encode the answer");
        std::hint::black_box((decoded, encoded));
        if i >= iterations / 10 {
            times.push(t.elapsed());
        }
    }
    p50(&mut times)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let (mut rounds, per_round, idle) =
        if full { (6, 200, Duration::from_secs(30)) } else { (1, 5, Duration::from_secs(1)) };
    // NRI_WASM_REAL_PATH_ROUNDS=N: more rounds (for profiling a plugin).
    if let Some(n) = std::env::var("NRI_WASM_REAL_PATH_ROUNDS").ok().and_then(|v| v.parse().ok()) {
        rounds = n;
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let cache = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let mut plugins = Vec::new();
        for setup in Setup::ALL {
            plugins.push(start(setup, cache.path()).await);
        }
        // Per setup: per CRI call, the p50 of each round; CPU per container of each round.
        let mut per_call: Vec<[Vec<f64>; 4]> = vec![Default::default(); Setup::ALL.len()];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); Setup::ALL.len()];
        // Per setup, per round: each CreateContainer at both ends of the socket.
        let mut split: Vec<Vec<Vec<Split>>> = vec![Vec::new(); Setup::ALL.len()];
        // Per setup, per round: every event the plugin was sent.
        let mut events: Vec<Vec<Vec<EventTime>>> = vec![Vec::new(); Setup::ALL.len()];
        // Per setup: every CreateContainer's wait, for the tail.
        let mut creates: Vec<Vec<Duration>> = vec![Vec::new(); Setup::ALL.len()];
        for r in 0..rounds {
            for k in 0..Setup::ALL.len() {
                let s = (r + k) % Setup::ALL.len();
                let (mut times, c, splits, sent) = round(&plugins[s], per_round, r).await;
                events[s].push(sent);
                creates[s].extend_from_slice(&times[0]);
                for (call, t) in times.iter_mut().enumerate() {
                    per_call[s][call].push(p50(t));
                }
                cpu[s].push(c);
                if !splits.is_empty() {
                    split[s].push(splits);
                }
            }
        }
        let chain_ten = in_process_ten(if full { 2000 } else { 20 }, false);
        let chain_ten_cold = in_process_ten(if full { 1000 } else { 10 }, true);
        let codec = codec(if full { 2000 } else { 20 });
        let request_bytes = protobuf::Message::compute_size(&nri_wasm_benches::request()) as usize;
        // Median over rounds of each round's p50 of a per-event figure.
        let over_rounds = |rounds: &[Vec<Split>], f: &dyn Fn(&Split) -> f64| {
            let mut p50s: Vec<f64> = rounds.iter().map(|r| median(&mut r.iter().map(f).collect::<Vec<_>>())).collect();
            median(&mut p50s)
        };
        // Per set-up: the echo holding each request as long as its chain
        // took, on one CPU and on two.
        let two_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
        let echo: Vec<(f64, f64)> = split
            .iter()
            .map(|rounds| {
                if rounds.is_empty() {
                    return (0.0, 0.0);
                }
                let chain = over_rounds(rounds, &|x| x.chain);
                let hold = Duration::from_secs_f64(chain.max(0.0) / 1e6);
                let n = if full { 1000 } else { 20 };
                let one = echo_round_trip(request_bytes, 1024, hold, false, n);
                let two = if two_cpus { echo_round_trip(request_bytes, 1024, hold, true, n) } else { one };
                (one, two)
            })
            .collect();
        eprintln!();
        eprintln!(
            "real path: median over {rounds} rounds of {per_round} containers; time the runtime waited per CRI call (p50, µs), plugin CPU per container (µs)"
        );
        eprintln!("{:<18} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9}", "", "create", "start", "stop", "remove", "CPU/cycle", "vs (a)");
        let floor_cpu = median(&mut cpu[0].clone());
        let mut medians = Vec::new();
        for (s, p) in plugins.iter().enumerate() {
            let m: Vec<f64> = (0..4).map(|c| median(&mut per_call[s][c].clone())).collect();
            let c = median(&mut cpu[s].clone());
            eprintln!(
                "{:<18} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11.1} {:>8.2}x",
                p.setup.name(),
                m[0],
                m[1],
                m[2],
                m[3],
                c / 1e3,
                c / floor_cpu
            );
            medians.push(m);
        }
        let floor_create = medians[0][0];
        // What each set-up adds to CreateContainer over (b), which the
        // runtime does not call (no subscription): the runtime's bookkeeping
        // is the same in both, so the difference is the plugin's round trip
        // and the runtime's own messaging for it (its encoding, its ttrpc
        // stack), which any subscribed plugin costs. Paired by round: each
        // round's p50 less (b)'s p50 in the same round, median over rounds.
        let added = |s: usize| {
            let mut d: Vec<f64> = per_call[s][0].iter().zip(&per_call[1][0]).map(|(x, b)| x - b).collect();
            median(&mut d)
        };
        let floor_added = added(0);
        eprintln!("CreateContainer added over (b), paired by round, and as a ratio to what the floor plugin adds: {}", {
            let parts: Vec<String> = plugins
                .iter()
                .enumerate()
                .filter(|(_, p)| p.setup != Setup::Empty)
                .map(|(s, p)| format!("{} +{:.1} µs = {:.2}", p.setup.name(), added(s), added(s) / floor_added))
                .collect();
            parts.join("; ")
        });
        eprintln!(
            "in-process chain of ten realistic policies: p50 {chain_ten:.1} µs; (d) create {:.1} µs = {:.2} × (chain + (a) = {:.1} µs)",
            medians[3][0],
            medians[3][0] / (chain_ten + floor_create),
            chain_ten + floor_create
        );
        eprintln!(
            "what the transport and the process add over the chain and the floor's round trip, (d) − chain − (a): {:.1} µs with the chain timed in a loop; {:.1} µs with it timed with cold caches (p50 {chain_ten_cold:.1} µs)",
            medians[3][0] - chain_ten - floor_create,
            medians[3][0] - chain_ten_cold - floor_create
        );
        eprintln!(
            "the transport's own cost, per CreateContainer at both ends of the socket (median over rounds of the p50 of each event's figure, µs):"
        );
        eprintln!(
            "{:<18} {:>8} {:>8} {:>8} {:>8} {:>11} {:>13} {:>12} {:>9} {:>10} {:>10} {:>8} {:>9}",
            "",
            "waited",
            "wire",
            "answer",
            "chain",
            "wire-chain",
            "answer-chain",
            "wire-answer",
            "one CPU",
            "echo 1CPU",
            "echo 2CPU",
            "own",
            "own-echo"
        );
        for (s, p) in plugins.iter().enumerate().filter(|(s, _)| !split[*s].is_empty()) {
            let rounds = &split[s];
            let (one, two) = echo[s];
            let on_one: usize = rounds.iter().flatten().filter(|x| x.one_cpu).count();
            let events: usize = rounds.iter().map(Vec::len).sum();
            eprintln!(
                "{:<18} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>11.1} {:>13.1} {:>12.1} {:>8.0}% {:>10.1} {:>10.1} {:>8.1} {:>9.1}",
                p.setup.name(),
                over_rounds(rounds, &|x| x.waited),
                over_rounds(rounds, &|x| x.wire),
                over_rounds(rounds, &|x| x.total),
                over_rounds(rounds, &|x| x.chain),
                over_rounds(rounds, &|x| x.wire - x.chain),
                over_rounds(rounds, &|x| x.total - x.chain),
                over_rounds(rounds, &|x| x.wire - x.total),
                100.0 * on_one as f64 / events.max(1) as f64,
                one,
                two,
                over_rounds(rounds, &|x| x.wire - x.chain - codec),
                // Each event less the echo of its own placement.
                over_rounds(rounds, &|x| x.wire - x.chain - codec - if x.one_cpu { one } else { two })
            );
        }
        eprintln!(
            "protobuf in-process (decode the {request_bytes}-byte request, encode ten policies' answer): p50 {codec:.1} µs; \
             one CPU: events the plugin answered on the CPU the runtime ran on; \
             echo: {request_bytes} bytes to a process that computes as long as the chain, 1024 back, blocking, p50 less the hold, \
             both on one CPU or kept on two; own = wire-chain less protobuf; own-echo = own less the echo of the event's placement"
        );
        eprintln!(
            "every event at both ends of the socket (median over rounds of each round's p50, µs): wire, the plugin's answer, the chain (dispatcher), wire − answer"
        );
        for (s, p) in plugins.iter().enumerate() {
            let mut names: Vec<&str> = Vec::new();
            for e in events[s].iter().flatten() {
                if !names.contains(&e.event.as_str()) {
                    names.push(&e.event);
                }
            }
            for name in names {
                let per_round = |f: &dyn Fn(&EventTime) -> f64| {
                    let mut p50s: Vec<f64> = events[s]
                        .iter()
                        .map(|r| median(&mut r.iter().filter(|e| e.event == name).map(f).collect::<Vec<_>>()))
                        .collect();
                    median(&mut p50s)
                };
                eprintln!(
                    "{:<18} {:<20} wire {:>8.1} answer {:>8.1} chain {:>8.1} wire-answer {:>8.1}",
                    p.setup.name(),
                    name,
                    per_round(&|e| e.wire),
                    per_round(&|e| e.total),
                    per_round(&|e| e.chain),
                    per_round(&|e| e.wire - e.total)
                );
            }
        }
        eprintln!("CreateContainer over all rounds, what the runtime waited: {}", {
            let parts: Vec<String> = plugins
                .iter()
                .zip(creates.iter_mut())
                .map(|(p, t)| {
                    t.sort();
                    let q = |f: f64| t.get(((t.len() as f64 * f) as usize).min(t.len().saturating_sub(1)));
                    let us = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e6);
                    format!("{} p50 {:.1} µs, p99 {:.1} µs", p.setup.name(), us(q(0.5)), us(q(0.99)))
                })
                .collect();
            parts.join("; ")
        });
        eprintln!("ratios to (a) per CRI call: {}", {
            let r: Vec<String> = (1..Setup::ALL.len())
                .map(|s| {
                    let parts: Vec<String> = (0..4)
                        .map(|c| {
                            if medians[0][c] > 0.0 {
                                format!("{} {:.2}x", CALLS[c], medians[s][c] / medians[0][c])
                            } else {
                                format!("{} +{:.1} µs", CALLS[c], medians[s][c] - medians[0][c])
                            }
                        })
                        .collect();
                    format!("{}: {}", plugins[s].setup.name(), parts.join(", "))
                })
                .collect();
            r.join("; ")
        });
        // Idle: wake-ups per second of each plugin with nothing to do.
        let before: Vec<_> = plugins.iter().map(|p| switches(p.child.id())).collect();
        tokio::time::sleep(idle).await;
        for (p, b) in plugins.iter().zip(before) {
            let rate = wakeups(&b, &switches(p.child.id())) as f64 / idle.as_secs_f64();
            eprintln!("idle wake-ups, {:<18} {rate:>6.1} per second over {:?}", p.setup.name(), idle);
        }
    });
}
