//! The nine example policies of `example-policies/`, each on the captured
//! containerd CreateContainer (the shared fixture), annotated so that the
//! policy does its work: what each costs to ship, compile, load and call.
//!
//! Per example:
//! - **size** of the component file;
//! - **compile**: compiling the component to native code (in process, as
//!   the benchmarks' engine does; the binary compiles in a child process,
//!   which adds the process's start), median of a few compilations by an
//!   engine without a cache;
//! - **load (cached)**: a whole load of a component already in the compile
//!   cache (read, inspect, deserialize, link, `configure` with its
//!   settings), what a restart or a reload costs, median;
//! - **call**: one call on the event by the engine (a fresh instance, the
//!   event read on demand, the reply converted), p50 and p99 of a
//!   percentile pass, and its ratio to the no-op test guest's call on the
//!   same event, measured in the same run (machines differ, ratios less);
//! - **fuel** of that call (deterministic), and the smallest `memory-mib`
//!   with which the call still succeeds.
//!
//! The settings are each example's `policy.toml`, as an operator installs
//! it. `exclusive-cpus` and `colocation-qos` see the node of the captured
//! Synchronize (one pod, two containers); `exclusive-cpus` also runs on a
//! node of 100 containers (every shared container gets an update), and
//! `colocation-qos` on the StartContainer of a latency-critical container
//! among 100 offline ones (every one is throttled).
//! `adjustment-validator` gets the validation event of the same container
//! after an earlier policy added an OCI hook and a bind mount, on a pod that
//! opted in to hooks (so it checks everything and accepts).
//!
//! `cargo bench -p nri-wasm-benches --bench examples` runs criterion on the
//! calls, then the measuring pass, which prints the table of
//! `docs/performance.md`. Run as a test (`cargo test --benches`, or
//! `cargo bench -- --test`), every part runs only a few times.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use nri_sim::workload::Workload;
use nri_wasm::merge::CreateMerge;
use nri_wasm::node::view::{container_entry, ContainerEntry, NodeView, ViewLimits};
use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::call::event::CallEvent;
use nri_wasm::policy::call::state::{StateSnapshot, StateStore, StateTxn};
use nri_wasm::policy::engine::{CallEnv, CompiledPolicy, EngineSettings, PolicyEngine};
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::{read_spec, PolicySpec, ReadOptions};
use nri_wasm::policy::PolicyLoader;
use nri_wasm_api::api as pb;
use nri_wasm_benches::{bench_limits, guests, Bench};
use protobuf::{Message, MessageField};

/// The allocator of the `nri-wasm` binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BUDGET: Duration = Duration::from_secs(10);

/// One example, set up to do its work.
struct Example {
    /// The row's name.
    label: String,
    /// The directory in `example-policies/`.
    dir: &'static str,
    wasm: PathBuf,
    spec: PolicySpec,
    policy: CompiledPolicy,
    event: CallEvent,
    env: CallEnv,
    current: Option<Arc<ContainerEntry>>,
}

impl Example {
    fn call(&self, engine: &PolicyEngine) -> nri_wasm::policy::engine::CallReport {
        engine.call(&self.policy, black_box(self.event.clone()), &self.env, self.current.as_ref(), BUDGET)
    }
}

/// The example components, built by `nri-wasm-components` into one
/// directory (the benchmarks see two of them by name).
fn component(dir: &str) -> PathBuf {
    let built = Path::new(guests::EXCLUSIVE_CPUS).parent().expect("the components' directory");
    let path = built.join(format!("{}.wasm", dir.replace('-', "_")));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

fn policy_toml(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../example-policies").join(dir).join("policy.toml")
}

/// The example's spec from its `policy.toml`, with the benchmarks' limits.
fn spec(dir: &str, limits: Limits) -> PolicySpec {
    let name = format!("50-{dir}");
    let mut spec = read_spec(&name, &component(dir), Some(&policy_toml(dir)), ReadOptions::lenient(Limits::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    spec.limits = limits;
    spec
}

/// The captured CreateContainer.
fn captured() -> pb::CreateContainerRequest {
    nri_sim::fixtures::load("CreateContainer").expect("fixture CreateContainer")
}

fn captured_view() -> NodeView {
    let sync: pb::SynchronizeRequest = nri_sim::fixtures::load("Synchronize").expect("fixture Synchronize");
    let mut view = NodeView::new(ViewLimits::default());
    view.synchronize(&sync.pods, &sync.containers);
    view
}

/// A node of `pods` × `per_pod` containers of the simulator's workload,
/// every pod labelled `labels`.
fn big_view(pods: usize, per_pod: usize, labels: &[(&str, &str)]) -> NodeView {
    let mut w = Workload::generate(pods, per_pod);
    for p in &mut w.pods {
        p.labels.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    }
    let mut view = NodeView::new(ViewLimits::default());
    view.synchronize(&w.pods, &w.containers);
    view
}

fn create_event(req: &pb::CreateContainerRequest) -> CallEvent {
    CallEvent::container(
        wit::EventKind::CreateContainer,
        Arc::new((*req.pod).clone()),
        Arc::new((*req.container).clone()),
    )
}

/// The validation event of the captured container after a policy added an
/// OCI hook and a bind mount, for a pod that opted in to hooks.
fn validation_event() -> CallEvent {
    let mut req = captured();
    req.pod.mut_or_insert_default().annotations.insert("adjustments.example.com/allow".into(), "hooks".into());
    let mut adjust = pb::ContainerAdjustment::default();
    adjust.hooks.mut_or_insert_default().prestart.push(pb::Hook {
        path: "/usr/local/bin/audit-hook".into(),
        args: vec!["audit-hook".into()],
        ..Default::default()
    });
    adjust.mounts.push(pb::Mount {
        destination: "/data".into(),
        type_: "bind".into(),
        source: "/srv/data".into(),
        options: vec!["rbind".into(), "ro".into()],
        ..Default::default()
    });
    let mut merge = CreateMerge::new(&req);
    let reply = pb::CreateContainerResponse { adjust: MessageField::some(adjust), ..Default::default() };
    merge.apply("30-hook-injector", &reply).expect("merge");
    let owners = merge.owners();
    let response = merge.finish();
    CallEvent::validation(pb::ValidateContainerAdjustmentRequest {
        pod: req.pod.clone(),
        container: req.container.clone(),
        adjust: response.adjust,
        update: response.update,
        owners: MessageField::some(owners),
        ..Default::default()
    })
}

/// The state of a policy that keeps one: `keys` committed.
fn states_with(policy: &str, keys: &[(&str, &str)]) -> Arc<StateStore> {
    let states = StateStore::in_memory();
    let mut txn = StateTxn::new(Arc::new(StateSnapshot::default()), 1 << 20);
    for (k, v) in keys {
        txn.set(k.to_string(), v.to_string()).expect("state write");
    }
    if let Some(writes) = txn.take_writes() {
        states.commit(policy, writes);
    }
    Arc::new(states)
}

/// The examples, each with its event and node.
fn examples(bench: &Bench) -> Vec<Example> {
    let facts = bench.facts.clone();
    let env = |view: NodeView, states: Arc<StateStore>| CallEnv { facts: facts.clone(), view: Arc::new(view), states };
    let annotated = |pairs: &[(&str, &str)]| {
        let mut req = captured();
        let pod = req.pod.mut_or_insert_default();
        for (k, v) in pairs {
            pod.annotations.insert(k.to_string(), v.to_string());
        }
        req
    };
    let labelled = |key: &str, value: &str| {
        let mut req = captured();
        req.pod.mut_or_insert_default().labels.insert(key.into(), value.into());
        req
    };
    let exclusive = annotated(&[("exclusive-cpus.nri-wasm.io/count", "2")]);
    let cases: Vec<(String, &'static str, CallEvent, CallEnv, Option<&pb::CreateContainerRequest>)> = vec![
        (
            "exclusive-cpus".into(),
            "exclusive-cpus",
            create_event(&exclusive),
            env(captured_view(), Arc::new(StateStore::in_memory())),
            Some(&exclusive),
        ),
        (
            "exclusive-cpus (100 containers)".into(),
            "exclusive-cpus",
            create_event(&exclusive),
            env(big_view(50, 2, &[]), Arc::new(StateStore::in_memory())),
            Some(&exclusive),
        ),
        (
            "colocation-qos".into(),
            "colocation-qos",
            create_event(&labelled("qos.nri-wasm.io/class", "offline")),
            env(captured_view(), states_with("50-colocation-qos", &[("online/lc", "1")])),
            None,
        ),
        (
            "colocation-qos (start, 100 offline)".into(),
            "colocation-qos",
            {
                let lc = labelled("qos.nri-wasm.io/class", "latency-critical");
                CallEvent::container(
                    wit::EventKind::StartContainer,
                    Arc::new((*lc.pod).clone()),
                    Arc::new((*lc.container).clone()),
                )
            },
            env(big_view(50, 2, &[("qos.nri-wasm.io/class", "offline")]), Arc::new(StateStore::in_memory())),
            None,
        ),
        (
            "ulimit-adjuster".into(),
            "ulimit-adjuster",
            create_event(&annotated(&[
                ("ulimits.example.com/log-shipper.nofile", "soft=1024,hard=4096"),
                ("ulimits.example.com/log-shipper.nproc", "soft=512,hard=1024"),
            ])),
            CallEnv::detached(facts.clone()),
            None,
        ),
        (
            "device-injector".into(),
            "device-injector",
            create_event(&annotated(&[
                ("devices.example.com/log-shipper.devices", "/dev/fuse,/dev/net/tun"),
                ("devices.example.com/log-shipper.mounts", "shared-cache"),
                ("devices.example.com/log-shipper.cdi", "vendor.com/gpu=0"),
            ])),
            CallEnv::detached(facts.clone()),
            None,
        ),
        (
            "hook-injector".into(),
            "hook-injector",
            create_event(&labelled("gpu", "true")),
            CallEnv::detached(facts.clone()),
            None,
        ),
        ("qos-class".into(), "qos-class", create_event(&captured()), CallEnv::detached(facts.clone()), None),
        (
            "deny-host-sockets".into(),
            "deny-host-sockets",
            create_event(&captured()),
            CallEnv::detached(facts.clone()),
            None,
        ),
        (
            "pod-metadata-env".into(),
            "pod-metadata-env",
            create_event(&captured()),
            CallEnv::detached(facts.clone()),
            None,
        ),
        (
            "adjustment-validator".into(),
            "adjustment-validator",
            validation_event(),
            CallEnv::detached(facts.clone()),
            None,
        ),
    ];
    cases
        .into_iter()
        .map(|(label, dir, event, env, node_req)| {
            let spec = spec(dir, bench_limits());
            let policy = bench.loader.load(&spec, &bench.facts).unwrap_or_else(|e| panic!("{e}"));
            // As the chain does: the container being created, for policies
            // that read the node.
            let current = node_req.map(|r| Arc::new(container_entry(&r.container)));
            Example { label, dir, wasm: component(dir), spec, policy, event, env, current }
        })
        .collect()
}

/// What one example's call did, to check that it did its work.
fn outcome(report: &nri_wasm::policy::engine::CallReport) -> String {
    match &report.outcome {
        Ok(Ok(reply)) => {
            let mut did = Vec::new();
            if reply.adjust.is_some() {
                did.push("adjusts the container".to_string());
            }
            if !reply.update.is_empty() {
                did.push(format!("updates {} others", reply.update.len()));
            }
            if did.is_empty() {
                "accepts, changes nothing".into()
            } else {
                did.join(", ")
            }
        }
        Ok(Err(reason)) => format!("denied: {reason}"),
        Err(e) => format!("failed: {e}"),
    }
}

fn criterion_benches(c: &mut Criterion, bench: &Bench, noop: &Example, all: &[Example]) {
    let mut g = c.benchmark_group("examples");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    for e in std::iter::once(noop).chain(all) {
        g.bench_function(format!("call/{}", e.label), |b| {
            b.iter(|| {
                let report = e.call(&bench.engine);
                assert!(matches!(report.outcome, Ok(Ok(_))), "{}: {}", e.label, outcome(&report));
                report
            })
        });
    }
    g.finish();
}

/// A duration in microseconds, one decimal.
fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// p50 and p99 of `n` calls after `warm` calls.
fn call_times(e: &Example, engine: &PolicyEngine, warm: usize, n: usize) -> (Duration, Duration) {
    for _ in 0..warm {
        e.call(engine);
    }
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            let report = e.call(engine);
            let took = start.elapsed();
            assert!(matches!(report.outcome, Ok(Ok(_))), "{}: {}", e.label, outcome(&report));
            took
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];
    (at(0.5), at(0.99))
}

/// The smallest `memory-mib` with which the example loads and its call
/// succeeds.
fn smallest_memory(e: &Example, loader: &PolicyLoader, bench: &Bench) -> Option<u64> {
    (1..=64).find(|&mib| {
        let mut spec = e.spec.clone();
        spec.limits.memory_mib = mib;
        let Ok(policy) = loader.load(&spec, &bench.facts) else { return false };
        let report = loader.engine().call(&policy, e.event.clone(), &e.env, e.current.as_ref(), BUDGET);
        matches!(report.outcome, Ok(Ok(_)))
    })
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().into())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn table(bench: &Bench, noop: &Example, all: &[Example], full: bool) {
    let (compiles, loads, warm, calls) = if full { (3, 20, 200, 3000) } else { (1, 2, 2, 5) };
    // A second engine without a cache compiles every time; one with a cache
    // of its own holds every example once compiled.
    let compiler = PolicyEngine::new(&EngineSettings { cache_dir: None, ..nri_wasm_e2e::engine_settings() })
        .map(|engine| PolicyLoader::new(Arc::new(engine)))
        .expect("engine without a cache");
    let cache_dir = tempfile::tempdir().expect("cache directory");
    let cached = PolicyEngine::new(&EngineSettings {
        cache_dir: Some(cache_dir.path().to_path_buf()),
        ..nri_wasm_e2e::engine_settings()
    })
    .map(|engine| PolicyLoader::new(Arc::new(engine)))
    .expect("engine with a cache");

    let (noop_p50, _) = call_times(noop, &bench.engine, warm, calls);
    let noop_fuel = noop.call(&bench.engine).fuel_used;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    eprintln!("\nCPU: {} ({cpus} threads available)", cpu_model());
    eprintln!(
        "event: the captured CreateContainer, {} bytes encoded; no-op guest call on it: {} µs p50, {} fuel\n",
        captured().write_to_bytes().map_or(0, |b| b.len()),
        us(noop_p50),
        noop_fuel
    );
    eprintln!(
        "| example | size KiB | compile ms | load (cached) ms | call p50 µs | call p99 µs | × no-op | fuel | min memory-mib | \
         the call |"
    );
    eprintln!("|---|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    let mut compiled: Vec<&str> = Vec::new();
    for e in all {
        let size = std::fs::metadata(&e.wasm).map_or(0, |m| m.len());
        // Compile and load figures once per component.
        let (compile, load) = if compiled.contains(&e.dir) {
            ("″".to_string(), "″".to_string())
        } else {
            compiled.push(e.dir);
            let compile = median(
                (0..compiles)
                    .map(|_| {
                        let p = compiler.load(&e.spec, &bench.facts).unwrap_or_else(|err| panic!("{err}"));
                        assert!(!p.timings().cached);
                        p.timings().compile
                    })
                    .collect(),
            );
            cached.load(&e.spec, &bench.facts).unwrap_or_else(|err| panic!("{err}"));
            let load = median(
                (0..loads)
                    .map(|_| {
                        let start = Instant::now();
                        let p = cached.load(&e.spec, &bench.facts).unwrap_or_else(|err| panic!("{err}"));
                        let took = start.elapsed();
                        assert!(p.timings().cached, "{} loaded from the cache", e.label);
                        took
                    })
                    .collect(),
            );
            (ms(compile), ms(load))
        };
        let (p50, p99) = call_times(e, &bench.engine, warm, calls);
        let report = e.call(&bench.engine);
        let memory = smallest_memory(e, &cached, bench).map_or("> 64".into(), |m| m.to_string());
        eprintln!(
            "| {} | {:.1} | {compile} | {load} | {} | {} | {:.1} | {} | {memory} | {} |",
            e.label,
            size as f64 / 1024.0,
            us(p50),
            us(p99),
            p50.as_secs_f64() / noop_p50.as_secs_f64(),
            report.fuel_used,
            outcome(&report)
        );
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` and `-- --test` want a quick run.
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let bench = Bench::new();
    let all = examples(&bench);
    let noop_spec = PolicySpec { limits: bench_limits(), ..PolicySpec::granting_all("00-noop", guests::NOOP) };
    let noop = Example {
        label: "no-op test guest (baseline)".into(),
        dir: "noop",
        wasm: PathBuf::from(guests::NOOP),
        policy: bench.loader.load(&noop_spec, &bench.facts).unwrap_or_else(|e| panic!("{e}")),
        spec: noop_spec,
        event: create_event(&captured()),
        env: CallEnv::detached(bench.facts.clone()),
        current: None,
    };
    for e in std::iter::once(&noop).chain(&all) {
        eprintln!("{:<34} {}", e.label, outcome(&e.call(&bench.engine)));
    }
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c, &bench, &noop, &all);
    c.final_summary();
    if std::env::var("NRI_WASM_BENCH_TABLE").as_deref() != Ok("0") {
        table(&bench, &noop, &all, full);
    }
}
