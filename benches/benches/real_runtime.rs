//! CRI CreateContainer on a real runtime: what NRI plugins add to it.
//!
//! One node of the runtime `NRI_WASM_RUNTIME` names (containerd 2.3.4 by
//! default; see tests/runtimes), six set-ups measured in rounds, their order
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
//! containers are created one after the other with crictl; the latency of
//! each CreateContainer is read from the runtime's own log (the time between
//! its "CreateContainer within sandbox" line and its "returns container id"
//! line), so crictl's start-up is not in it. Per round: the median of each
//! set-up, and its difference from `none` in the same round ("added"),
//! and the plugin processes' CPU time (all their threads, from
//! `/proc/PID/task/*/schedstat`) per container, over the measured creates
//! and the removal of those containers, with how many times one of their
//! threads was put on a CPU (each a wake-up or a preemption).
//! Reported: the median over rounds of each, and the ratios the project
//! targets: added(host-10) / added(native-1) <= 1.0 and
//! added(host-0) / added(native-1) <= 0.2.
//!
//! `cargo bench -p nri-wasm-benches --bench real_runtime` (after
//! tests/runtimes/install.sh); `cargo test --benches` runs one short round.
//! Rounds and creates per round: `NRI_WASM_BENCH_ROUNDS` (7),
//! `NRI_WASM_BENCH_CREATES` (100). `NRI_WASM_BENCH_SETUPS=host-10,native-1`
//! measures only the set-ups named (and `none`, which every "added" needs);
//! `NRI_WASM_BENCH_PERF=DIR` records each plugin set-up's measured creates
//! and removals with `perf record` into `DIR/r<round>-<set-up>.data`, to see
//! where a plugin's CPU goes on the real runtime.

use std::path::Path;
use std::time::Duration;

use nri_wasm_benches::{cpu_ns, runs_on_cpu};
use nri_wasm_runtimes::crictl::{Container, Pod, PodSandbox};
use nri_wasm_runtimes::host::{Host, HostConfig};
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
    /// The plugin processes' pids.
    fn pids(&self) -> Vec<u32> {
        match self {
            Plugins::None => Vec::new(),
            Plugins::Native(v) => v.iter().filter_map(NativePlugin::pid).collect(),
            Plugins::Host(h) => h.pid().into_iter().collect(),
        }
    }
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

/// Seconds since midnight of a containerd log line's `time="...T12:34:56.123456789Z"`.
fn line_time(line: &str) -> Option<f64> {
    let t = line.split("time=\"").nth(1)?.split('"').next()?;
    let clock = t.split('T').nth(1)?.trim_end_matches('Z');
    let clock = clock.split(['+', '-']).next()?;
    let mut parts = clock.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// The runtime's CreateContainer latency (ms) for container `name`, from its log.
fn latency_ms(log: &str, name: &str) -> Option<f64> {
    // containerd 2.x prints the metadata as `name:\"NAME\"` (escaped in
    // logfmt), 1.7 as `&ContainerMetadata{Name:NAME,`.
    let tags = [format!("name:\\\"{name}\\\""), format!("&ContainerMetadata{{Name:{name},")];
    let mut start = None;
    let mut end = None;
    let lines = log.lines().filter(|l| l.contains("CreateContainer within sandbox"));
    for line in lines.filter(|l| tags.iter().any(|t| l.contains(t.as_str()))) {
        if line.contains("returns container id") {
            end = line_time(line);
        } else {
            start = line_time(line);
        }
    }
    let (s, e) = (start?, end?);
    let d = if e >= s { e - s } else { e + 86_400.0 - s };
    Some(d * 1000.0)
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

/// Creates `warm + creates` containers; the latencies of the last `creates`,
/// and per container over their creation and removal, the CPU time (ns)
/// `pids` spent and the times one of their threads was put on a CPU.
fn measure(
    node: &Node,
    pod: &PodSandbox,
    tag: &str,
    warm: usize,
    creates: usize,
    pids: &[u32],
    perf: Option<&Path>,
) -> (Vec<f64>, f64, f64) {
    let mut names = Vec::new();
    let mut ids = Vec::new();
    // Taken when the measured creates begin (never, with none).
    let mut cpu_before = 0;
    let mut runs_before = 0;
    let mut recorder = None;
    for i in 0..warm + creates {
        if i == warm {
            recorder = perf.filter(|_| !pids.is_empty() && creates > 0).map(|dir| Recorder::start(dir, tag, pids));
            cpu_before = cpu_ns(pids);
            runs_before = runs_on_cpu(pids);
        }
        let name = format!("{tag}-{i}");
        let mut c = Container::sleeper(&name);
        c.memory_limit = Some(256 << 20);
        let id = node.crictl.create(pod, &c).unwrap_or_else(|e| panic!("creating {name}: {e}"));
        ids.push(id);
        if i >= warm {
            names.push(name);
        }
    }
    let log = node.runtime_log().text();
    let out = names
        .iter()
        .map(|n| {
            latency_ms(&log, n).unwrap_or_else(|| {
                let lines: Vec<&str> = log.lines().filter(|l| l.contains("CreateContainer")).rev().take(4).collect();
                panic!("no CreateContainer lines for {n} in the runtime's log; its last ones: {lines:#?}")
            })
        })
        .collect();
    // The measured containers first, inside the CPU window; the warm-up's after.
    let remove = |ids: &[String]| {
        if !ids.is_empty() {
            let mut args = vec!["rm"];
            args.extend(ids.iter().map(String::as_str));
            node.crictl.run(&args).unwrap_or_else(|e| panic!("removing the containers: {e}"));
        }
    };
    let (warmed, measured) = ids.split_at(warm);
    remove(measured);
    let spent = cpu_ns(pids).saturating_sub(cpu_before);
    let runs = runs_on_cpu(pids).saturating_sub(runs_before);
    drop(recorder);
    remove(warmed);
    let per = |n: u64| if creates == 0 { 0.0 } else { n as f64 / creates as f64 };
    (out, per(spent), per(runs))
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
        if full { (env_usize("NRI_WASM_BENCH_ROUNDS", 7), env_usize("NRI_WASM_BENCH_CREATES", 100)) } else { (1, 5) };
    let warm = if full { 10 } else { 2 };
    let wanted: Option<Vec<String>> =
        std::env::var("NRI_WASM_BENCH_SETUPS").ok().map(|v| v.split(',').map(str::to_string).collect());
    let perf = std::env::var_os("NRI_WASM_BENCH_PERF").map(std::path::PathBuf::from);

    let node = Node::start().unwrap_or_else(|e| panic!("starting the runtime: {e}"));
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
    for round in 0..rounds {
        for k in 0..Setup::ALL.len() {
            let setup = Setup::ALL[(k + round) % Setup::ALL.len()];
            if !wanted.as_ref().is_none_or(|w| setup == Setup::None || w.iter().any(|n| n == setup.name())) {
                continue;
            }
            let plugins = start(setup, &node, round);
            let pids = plugins.pids();
            let tag = format!("r{round}-{}", setup.name());
            let (mut lat, ns, runs) = measure(&node, &pod, &tag, warm, creates, &pids, perf.as_deref());
            drop(plugins);
            // The runtime drops a closed plugin at its next event: one
            // create, not measured, so the next set-up starts clean.
            measure(&node, &pod, &format!("r{round}-{}-flush", setup.name()), 1, 0, &[], None);
            let i = Setup::ALL.iter().position(|s| *s == setup).expect("setup");
            let m = median(&mut lat);
            eprintln!(
                "  round {round} {:<12} p50 {m:7.3} ms, plugin CPU {:7.1} µs, {runs:5.1} runs on a CPU per container",
                setup.name(),
                ns / 1e3
            );
            medians[i].push(m);
            cpu[i].push(ns / 1e3);
            on_cpu[i].push(runs);
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
    for (i, s) in Setup::ALL.iter().enumerate() {
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
    let native1 = added(1);
    eprintln!("\nratios to native-1's added latency ({native1:.3} ms):");
    for (i, s) in Setup::ALL.iter().enumerate().skip(2) {
        eprintln!("  {:<12} {:>6.2}", s.name(), added(i) / native1);
    }
    eprintln!("targets: host-10 <= 1.0, host-0 <= 0.2");
}
