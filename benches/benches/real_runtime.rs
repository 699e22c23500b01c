//! CRI CreateContainer on a real runtime: what NRI plugins add to it.
//!
//! One node of the runtime `NRI_WASM_RUNTIME` names (containerd 2.3.4 by
//! default; see tests/runtimes), eight set-ups measured in rounds, their order
//! rotating from round to round:
//! - `none`: no plugin;
//! - `native-1`, `native-10`: one and ten native Go plugins
//!   (tests/runtimes/native-plugin), each setting one env variable and one
//!   annotation of its own;
//! - `host-0`, `host-1`, `host-10`: the nri-wasm host with no policy, one and
//!   ten realistic policies (tests/guests/realistic, the policy of the other
//!   benchmarks);
//! - `host-10-noop`: the host with ten policies that change nothing
//!   (tests/guests/noop): the floor of ten fresh instances per event, what
//!   ten SDK-built policies cost before they do any work;
//! - `host-10-bare`: the host with ten of the cheapest policy a component
//!   can be (tests/guests/bare: no standard library, no WASI): the floor of
//!   ten fresh instances per event.
//!
//! Each set-up's plugins are started, registered and warmed up, then
//! containers are created one after the other by cri-timer
//! (tests/runtimes/cri-timer), a CRI client that keeps one connection and
//! times each CreateContainer call around the call alone (crictl's start-up
//! per create and the runtime's millisecond log stamps hid differences under
//! a millisecond), and removes each before making the next (a pod's
//! creates slow down as its containers pile up). Per round: the median of
//! each set-up, and its difference from `none` in the same round ("added"),
//! and the plugin processes' CPU time (all their threads, from
//! `/proc/PID/task/*/schedstat`) per container, over the measured creates
//! and the removal of those containers, with how many times one of their
//! threads was put on a CPU (each a wake-up or a preemption), and the
//! host's own mean answer and chain time per CreateContainer (its metrics).
//! Reported: the median over rounds of each; the ratios to native-1's added
//! latency; and each set-up paired with native-1 round by round: the median
//! and the range over rounds of the difference of their medians, and of
//! the margin to issue #35's target, added(host-10) <= 1.5 x added(native-1).
//!
//! `cargo bench -p nri-wasm-benches --bench real_runtime` (after
//! tests/runtimes/install.sh); `cargo test --benches` runs one short round.
//! Rounds and creates per round: `NRI_WASM_BENCH_ROUNDS` (7),
//! `NRI_WASM_BENCH_CREATES` (200). `NRI_WASM_BENCH_SETUPS=host-10,native-1`
//! measures only the set-ups named (and `none`, which every "added" needs);
//! `NRI_WASM_BENCH_PERF=DIR` records each plugin set-up's measured creates
//! and removals with `perf record` into `DIR/r<round>-<set-up>.data`, to see
//! where a plugin's CPU goes on the real runtime.

use std::path::Path;
use std::time::Duration;

use nri_wasm_benches::{cpu_ns, runs_on_cpu};
use nri_wasm_runtimes::cri_timer::{Created, CriTimer};
use nri_wasm_runtimes::crictl::{Container, Pod, PodSandbox};
use nri_wasm_runtimes::host::{Answers, Host, HostConfig};
use nri_wasm_runtimes::native::{self, Adjustments, NativePlugin};
use nri_wasm_runtimes::runtime::Node;
use nri_wasm_test_support::guests;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    None,
    Native1,
    Native10,
    Host0,
    Host1,
    Host10,
    Host10Noop,
    Host10Bare,
}

impl Setup {
    const ALL: [Setup; 8] = [
        Setup::None,
        Setup::Native1,
        Setup::Native10,
        Setup::Host0,
        Setup::Host1,
        Setup::Host10,
        Setup::Host10Noop,
        Setup::Host10Bare,
    ];

    fn name(self) -> &'static str {
        match self {
            Setup::None => "none",
            Setup::Native1 => "native-1",
            Setup::Native10 => "native-10",
            Setup::Host0 => "host-0",
            Setup::Host1 => "host-1",
            Setup::Host10 => "host-10",
            Setup::Host10Noop => "host-10-noop",
            Setup::Host10Bare => "host-10-bare",
        }
    }
}

/// What runs for one set-up; stopped (by pid) when dropped.
#[allow(dead_code)] // held for their Drop
enum Plugins {
    None,
    Native(Vec<NativePlugin>),
    Host(Box<Host>),
}

impl Plugins {
    /// The host's account of its CreateContainer answers so far; `None`
    /// for native plugins.
    fn host_answers(&self) -> Option<Answers> {
        let Plugins::Host(h) = self else { return None };
        let answers = h.create_answers().unwrap_or_else(|| panic!("the host's /metrics did not answer"));
        Some(answers.unwrap_or_else(|e| panic!("{e}")))
    }

    /// The plugin processes' pids.
    fn pids(&self) -> Vec<u32> {
        match self {
            Plugins::None => Vec::new(),
            Plugins::Native(v) => v.iter().filter_map(NativePlugin::pid).collect(),
            Plugins::Host(h) => h.pid().into_iter().collect(),
        }
    }
}

/// Mean answer and chain time (µs) of the host's answers between `before`
/// and `after`; `None` if there were none (a host with no policy is not
/// called).
fn means_between(before: Answers, after: Answers) -> Option<(f64, f64)> {
    let n = after.count - before.count;
    (n > 0.0).then(|| ((after.answer_s - before.answer_s) / n * 1e6, (after.chain_s - before.chain_s) / n * 1e6))
}

fn start(setup: Setup, node: &Node, round: usize) -> Plugins {
    let native = |n: usize| {
        let bin = native::binary(node.kind()).unwrap_or_else(|e| panic!("{e}"));
        let plugins = (0..n)
            .map(|i| {
                let adj = Adjustments::new()
                    .env_set(&format!("NATIVE_{i}"), "1")
                    .annotation_set(&format!("example.com/native-{i}"), "1");
                let idx = format!("{}", 10 + i);
                let name = format!("bench{i}");
                let log = node.runtime_log();
                let mut p = NativePlugin::start(&bin, node.dir(), &node.nri_socket(), (&idx, &name), &adj, &log)
                    .unwrap_or_else(|e| panic!("starting native plugin {i}: {e}"));
                p.wait_synchronized().unwrap_or_else(|e| panic!("{e}"));
                p
            })
            .collect();
        Plugins::Native(plugins)
    };
    let host = |n: usize, guest: &str| {
        // A directory per round and set-up; the compile cache is shared.
        let mut config = HostConfig::new(host_bin(), node.dir(), &node.nri_socket());
        let kind = Path::new(guest).file_stem().and_then(|s| s.to_str()).unwrap_or("guest");
        config.policies = node.dir().join(format!("policies-{round}-{n}-{kind}"));
        std::fs::create_dir_all(&config.dir).unwrap_or_else(|e| panic!("creating {}: {e}", config.dir.display()));
        let policies = config.policy_dir();
        for i in 0..n {
            policies
                .install(
                    &format!("{:02}-realistic", 10 + i),
                    Path::new(guest),
                    &format!("on-error = \"fail\"\nsettings = \"{i}\"\n"),
                )
                .unwrap_or_else(|e| panic!("installing policy {i}: {e}"));
        }
        let before = native::synced_count(&node.runtime_log(), "10-nri-wasm");
        let mut host = Host::start(&config).unwrap_or_else(|e| panic!("starting the host: {e}"));
        host.wait_status("the host registered with every policy loaded", |s| {
            s["registered"].as_bool() == Some(true)
                && s["chain_loaded"].as_bool() == Some(true)
                && s["policies"].as_array().is_some_and(|p| p.len() == n && p.iter().all(|p| p["status"] == "loaded"))
        })
        .unwrap_or_else(|e| panic!("{e}: {}", host.log().tail(20)));
        let log = node.runtime_log();
        nri_wasm_runtimes::wait_for("the runtime synchronizing the host", Duration::from_secs(60), || {
            (native::synced_count(&log, "10-nri-wasm") > before).then_some(())
        })
        .unwrap_or_else(|e| panic!("{e}: {}", log.tail(20)));
        Plugins::Host(Box::new(host))
    };
    match setup {
        Setup::None => Plugins::None,
        Setup::Native1 => native(1),
        Setup::Native10 => native(10),
        Setup::Host0 => host(0, guests::REALISTIC),
        Setup::Host1 => host(1, guests::REALISTIC),
        Setup::Host10 => host(10, guests::REALISTIC),
        Setup::Host10Noop => host(10, guests::NOOP),
        Setup::Host10Bare => host(10, guests::BARE),
    }
}

fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_nri-wasm-host"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// What one set-up's measured creates gave.
struct Measured {
    /// Each CreateContainer as the CRI client saw it, ms.
    latencies: Vec<f64>,
    /// Per container (its creation and removal): the plugins' CPU time (µs)
    /// and the times one of their threads was put on a CPU.
    cpu_us: f64,
    runs: f64,
    /// The host's mean answer and chain time per CreateContainer (µs), by
    /// its own metrics; `None` for native plugins and a host not called.
    host: Option<(f64, f64)>,
}

/// Creates (and removes, one by one) `warm + creates` containers through
/// `timer` with `plugins` in place, and measures the last `creates`.
#[allow(clippy::too_many_arguments)]
fn measure(
    node: &Node,
    timer: &CriTimer,
    pod: &PodSandbox,
    tag: &str,
    warm: usize,
    creates: usize,
    plugins: &Plugins,
    perf: Option<&Path>,
) -> Measured {
    let pids = plugins.pids();
    let mut c = Container::sleeper(tag);
    c.memory_limit = Some(256 << 20);
    // Each container removed before the next is made: every create finds
    // the node as the first did (the removals are in the CPU window).
    let create = |name: &str, count: usize| -> Vec<Created> {
        if count == 0 {
            return Vec::new();
        }
        timer.create(&node.crictl, pod, &c, name, count, true).unwrap_or_else(|e| panic!("creating {name}-*: {e}"))
    };
    create(&format!("{tag}-warm"), warm);
    let recorder = perf.filter(|_| !pids.is_empty() && creates > 0).map(|dir| Recorder::start(dir, tag, &pids));
    let host_before = plugins.host_answers();
    let cpu_before = cpu_ns(&pids);
    let runs_before = runs_on_cpu(&pids);
    let measured = create(tag, creates);
    let spent = cpu_ns(&pids).saturating_sub(cpu_before);
    let runs = runs_on_cpu(&pids).saturating_sub(runs_before);
    let host = host_before.zip(plugins.host_answers()).and_then(|(before, after)| means_between(before, after));
    drop(recorder);
    let per = |n: u64| if creates == 0 { 0.0 } else { n as f64 / creates as f64 };
    Measured {
        latencies: measured.iter().map(|c| c.took.as_secs_f64() * 1e3).collect(),
        cpu_us: per(spent) / 1e3,
        runs: per(runs),
        host,
    }
}

/// `perf record` attached to the plugin processes until dropped.
struct Recorder(std::process::Child);

impl Recorder {
    fn start(dir: &Path, tag: &str, pids: &[u32]) -> Self {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        let child = std::process::Command::new("perf")
            .args(["record", "--quiet", "-F", "4999", "--call-graph", "dwarf,16384", "-p", &pids.join(",")])
            .arg("-o")
            .arg(dir.join(format!("{tag}.data")))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting perf record: {e}"));
        // perf attaches before the first measured create.
        std::thread::sleep(Duration::from_millis(500));
        Self(child)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // SIGINT makes perf write its file and exit.
        let _ = std::process::Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let (rounds, creates) =
        if full { (env_usize("NRI_WASM_BENCH_ROUNDS", 7), env_usize("NRI_WASM_BENCH_CREATES", 200)) } else { (1, 5) };
    let warm = if full { 10 } else { 2 };
    let wanted: Option<Vec<String>> =
        std::env::var("NRI_WASM_BENCH_SETUPS").ok().map(|v| v.split(',').map(str::to_string).collect());
    let perf = std::env::var_os("NRI_WASM_BENCH_PERF").map(std::path::PathBuf::from);

    let node = Node::start().unwrap_or_else(|e| panic!("starting the runtime: {e}"));
    let timer = CriTimer::new(&nri_wasm_runtimes::runtimes_dir(), &node.crictl).unwrap_or_else(|e| panic!("{e}"));
    let pod = node
        .crictl
        .run_pod(&Pod::new("bench").label("app", "bench").annotation("example.com/note-9", "a note"))
        .unwrap_or_else(|e| panic!("running the pod: {e}"));
    eprintln!(
        "real_runtime: {} on {} CPUs, {rounds} rounds of {creates} creates per set-up ({warm} warm-up)",
        node.kind().name(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // medians[setup][round], cpu[setup][round] (µs per container),
    // on_cpu[setup][round] (runs on a CPU per container)
    let mut medians = vec![Vec::new(); Setup::ALL.len()];
    let mut cpu = vec![Vec::new(); Setup::ALL.len()];
    let mut on_cpu = vec![Vec::new(); Setup::ALL.len()];
    // The host's mean answer and chain time per CreateContainer (µs).
    let mut answer = vec![Vec::new(); Setup::ALL.len()];
    let mut chain = vec![Vec::new(); Setup::ALL.len()];
    for round in 0..rounds {
        for k in 0..Setup::ALL.len() {
            let setup = Setup::ALL[(k + round) % Setup::ALL.len()];
            if !wanted.as_ref().is_none_or(|w| setup == Setup::None || w.iter().any(|n| n == setup.name())) {
                continue;
            }
            let plugins = start(setup, &node, round);
            let tag = format!("r{round}-{}", setup.name());
            let mut got = measure(&node, &timer, &pod, &tag, warm, creates, &plugins, perf.as_deref());
            drop(plugins);
            // The runtime drops a closed plugin at its next event: one
            // create, not measured, so the next set-up starts clean.
            measure(&node, &timer, &pod, &format!("r{round}-{}-flush", setup.name()), 1, 0, &Plugins::None, None);
            let i = Setup::ALL.iter().position(|s| *s == setup).expect("setup");
            let m = median(&mut got.latencies);
            let host = got.host.map_or(String::new(), |(a, c)| format!(", host answer {a:6.1} µs (chain {c:6.1})"));
            eprintln!(
                "  round {round} {:<12} p50 {m:7.3} ms, plugin CPU {:7.1} µs, {:5.1} runs on a CPU per container{host}",
                setup.name(),
                got.cpu_us,
                got.runs,
            );
            medians[i].push(m);
            cpu[i].push(got.cpu_us);
            on_cpu[i].push(got.runs);
            if let Some((a, c)) = got.host {
                answer[i].push(a);
                chain[i].push(c);
            }
        }
    }

    let none = &medians[0];
    let added = |i: usize| -> f64 {
        let mut d: Vec<f64> = medians[i].iter().zip(none).map(|(m, n)| m - n).collect();
        median(&mut d)
    };
    eprintln!("\nCRI CreateContainer on {} (median over {rounds} rounds of per-round p50):", node.kind().name());
    eprintln!(
        "{:<12} {:>9} {:>13} {:>24} {:>18}",
        "set-up", "p50 ms", "added ms", "plugin CPU µs/container", "runs on a CPU/c."
    );
    // Set-ups left out by NRI_WASM_BENCH_SETUPS have no rows.
    for (i, s) in Setup::ALL.iter().enumerate() {
        if medians[i].is_empty() {
            continue;
        }
        let mut m = medians[i].clone();
        let mut c = cpu[i].clone();
        let mut r = on_cpu[i].clone();
        eprintln!(
            "{:<12} {:>9.3} {:>13.3} {:>24.1} {:>18.1}",
            s.name(),
            median(&mut m),
            added(i),
            median(&mut c),
            median(&mut r)
        );
    }
    // What the host says it took: the rest of what it added is the
    // runtime's side (the socket, the wake-ups, applying the adjustments).
    eprintln!("\nthe host's own account per CreateContainer (µs; medians over rounds of its means):");
    eprintln!("{:<12} {:>10} {:>10} {:>16}", "set-up", "answer", "chain", "added - answer");
    for (i, s) in Setup::ALL.iter().enumerate() {
        if answer[i].is_empty() {
            continue;
        }
        let (a, c) = (median(&mut answer[i].clone()), median(&mut chain[i].clone()));
        eprintln!("{:<12} {a:>10.1} {c:>10.1} {:>16.1}", s.name(), added(i) * 1e3 - a);
    }
    let native1 = added(1);
    eprintln!("\nratios to native-1's added latency ({native1:.3} ms):");
    for (i, s) in Setup::ALL.iter().enumerate().skip(2) {
        if !medians[i].is_empty() {
            eprintln!("  {:<12} {:>6.2}", s.name(), added(i) / native1);
        }
    }
    // Paired by round: each set-up against native-1 measured in the same
    // round, so that what moves the runtime from round to round cancels.
    let native = &medians[1];
    if native.len() == rounds {
        eprintln!(
            "\npaired with native-1 round by round (ms; median [min, max] over {rounds} rounds):\n{:<12} {:>30} {:>34}",
            "set-up", "p50 - native-1's p50", "added - 1.5 x native-1's added"
        );
        for (i, s) in Setup::ALL.iter().enumerate().skip(2) {
            if medians[i].len() != rounds {
                continue;
            }
            let diff: Vec<f64> = medians[i].iter().zip(native).map(|(m, n)| m - n).collect();
            let margin: Vec<f64> =
                medians[i].iter().zip(native).zip(none).map(|((m, n), z)| (m - z) - 1.5 * (n - z)).collect();
            eprintln!("{:<12} {:>30} {:>34}", s.name(), spread(diff), spread(margin));
        }
        eprintln!("target (issue #35): host-10's margin <= 0, its median and most of its spread");
    }
    eprintln!("targets: host-10 <= 1.0, host-0 <= 0.2");
}

/// "median [min, max]" of `v`, in ms to the µs.
fn spread(mut v: Vec<f64>) -> String {
    // `median` sorts `v`: its ends are then the range.
    let m = median(&mut v);
    format!("{m:.3} [{:.3}, {:.3}]", v.first().copied().unwrap_or(f64::NAN), v.last().copied().unwrap_or(f64::NAN))
}
