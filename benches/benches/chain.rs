//! CreateContainer through the policy chain, on a realistic request.
//!
//! Criterion measures the means; a second pass after criterion collects
//! per-iteration times to print percentiles (p50, p90, p99, max), which
//! criterion does not report, and the time a looping policy takes to be cut
//! off by its 10 ms limit. `docs/performance.md` records the figures.
//!
//! `cargo bench -p nri-wasm-benches` runs everything; a criterion filter
//! (`cargo bench -p nri-wasm-benches -- realistic`) selects benchmarks and
//! the percentile pass is skipped with `NRI_WASM_BENCH_PERCENTILES=0`, or
//! narrowed to the cases whose name contains its value
//! (`NRI_WASM_BENCH_PERCENTILES=realistic_50`). Run as a
//! test (`cargo test --benches`, or `cargo bench -- --test`), every part runs
//! only a few times.

use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, SamplingMode};
use nri_wasm::merge::CreateMerge;
use nri_wasm::nri::Dispatcher;
use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::call::event::CallEvent;
use nri_wasm::policy::chain::{Chain, ChainSettings, Outcome, PolicyFailure, Step};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::engine::{CallEnv, CallError, CallErrorKind};
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_benches::{bench_limits, guests, native_chain, request, Bench};
use protobuf::Message;

/// Time every chain evaluation may take (never reached by the benchmarks).
/// The allocator of the `nri-wasm` binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BUDGET: Duration = Duration::from_secs(10);

/// Everything the benchmarks share, loaded once.
struct Setup {
    bench: Bench,
    req: pb::CreateContainerRequest,
    bytes: Vec<u8>,
    empty: Chain,
    noop: Chain,
    /// The cheapest policy a component can be (tests/guests/bare: no std,
    /// no WASI): the sandbox's own cost of a call.
    bare: Chain,
    realistic: Vec<(usize, Chain)>,
    /// 10 realistic policies that each read the whole pod and container.
    full_10: Chain,
}

impl Setup {
    fn new() -> Self {
        let bench = Bench::new();
        let req = request();
        let bytes = req.write_to_bytes().expect("encode request");
        eprintln!("CreateContainerRequest: {} bytes encoded", bytes.len());
        let realistic = [1, 10, 50].into_iter().map(|n| (n, bench.realistic(n))).collect();
        Self {
            empty: Chain::default(),
            noop: bench.noop(),
            bare: Chain::new(
                vec![bench.load("00-bare", guests::BARE, "", OnError::Fail, bench_limits())],
                ChainSettings::default(),
            ),
            realistic,
            full_10: bench.realistic_full(10),
            bench,
            req,
            bytes,
        }
    }

    fn chain(&self, n: usize) -> &Chain {
        &self.realistic.iter().find(|(k, _)| *k == n).expect("chain of that length").1
    }

    /// Decode, evaluate, encode: what one CreateContainer costs the host
    /// besides the transport.
    fn round_trip(&self, chain: &Chain) -> Vec<u8> {
        let req = pb::CreateContainerRequest::parse_from_bytes(&self.bytes).expect("decode request");
        let resp = self.bench.create(chain, BUDGET, &req).expect("chain answers").value;
        resp.write_to_bytes().expect("encode response")
    }

    /// The chain alone, on an already decoded request.
    fn evaluate(&self, chain: &Chain) -> pb::CreateContainerResponse {
        self.evaluate_steps(chain).0
    }

    fn evaluate_steps(&self, chain: &Chain) -> (pb::CreateContainerResponse, Vec<Step>) {
        let done = self.bench.create(chain, BUDGET, &self.req).expect("chain answers");
        (done.value, done.steps)
    }
}

/// Logs from now on as the serving host does: its default filter and
/// format, through the log queue (`nri_wasm::cli::log`), whose writer
/// writes to nowhere, counting the decisions. For the whole process: the
/// policy runtime's threads log too. Only the dispatcher's benchmarks run
/// after it; the others (no observer, no failing policy) log nothing
/// either way.
fn serve_logging() -> (nri_wasm::cli::log::LogGuard, Arc<AtomicU64>) {
    use nri_wasm::cli::log;
    use nri_wasm::config::LogFormat;
    let written = Arc::new(AtomicU64::new(0));
    let out = Box::new(Counted(written.clone()));
    let (queue, guard) = log::queue(out, LogFormat::Text, log::QUEUE_BYTES, log::LINGER).expect("log writer");
    let dispatch = nri_wasm::cli::log_dispatch("info", LogFormat::Text, queue, false).expect("log set-up");
    tracing::dispatcher::set_global_default(dispatch).expect("nothing logged before");
    (guard, written)
}

/// Writes to nowhere, counting the decision lines (the queue writes whole
/// records).
struct Counted(Arc<AtomicU64>);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let decisions = String::from_utf8_lossy(buf).matches("policy decision: changed").count();
        self.0.fetch_add(decisions as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The dispatcher's benchmarks, last: they log as the serving host does
/// (`serve_logging`), which is set up for the whole process.
fn dispatcher_benches(c: &mut Criterion, s: &Setup) {
    let (log, decisions) = serve_logging();
    // The same 10 policies behind the dispatcher: permit, blocking pool,
    // async deadline.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let chain = s.bench.realistic(10);
    let dispatcher = Arc::new(PolicyDispatcher::new(s.bench.engine.clone(), chain, (*s.bench.facts).clone(), 4));
    let mut g = c.benchmark_group("dispatcher");
    g.bench_function("realistic_10", |b| {
        b.iter_batched(
            || s.req.clone(),
            |req| rt.block_on(dispatcher.create_container(req)).expect("dispatcher answers"),
            BatchSize::SmallInput,
        )
    });
    // And as the serving host runs them: every call and event counted in
    // the metrics, every decision logged at the default level through the
    // log queue (its writer writing to nowhere). The difference from
    // `realistic_10` is the host's bookkeeping of ten decisions.
    let counted = Arc::new(
        PolicyDispatcher::new(s.bench.engine.clone(), s.bench.realistic(10), (*s.bench.facts).clone(), 4)
            .with_metrics(Arc::new(nri_wasm::metrics::Metrics::new())),
    );
    let mut ran = false;
    g.bench_function("realistic_10_counted_logged", |b| {
        ran = true;
        b.iter_batched(
            || s.req.clone(),
            |req| rt.block_on(counted.create_container(req)).expect("dispatcher answers"),
            BatchSize::SmallInput,
        )
    });
    check_logged(&log, &decisions, ran, "realistic_10_counted_logged");
    // The bookkeeping alone: what the metrics and the log do with one
    // event's ten decisions (each changed something), the event and its
    // answer.
    let metrics = nri_wasm::metrics::Metrics::new();
    let steps: Vec<Step> = (0..10)
        .map(|i| Step {
            policy: format!("{i:02}-realistic"),
            audit: false,
            fuel: 123_456,
            elapsed: Duration::from_micros(25),
            outcome: Outcome::Changed { change: None },
        })
        .collect();
    let mut ran = false;
    g.bench_function("bookkeeping_10", |b| {
        ran = true;
        b.iter(|| {
            for step in &steps {
                nri_wasm::policy::chain::Observer::step(&metrics, "CreateContainer", "default/pod/c", step);
            }
            metrics.event("CreateContainer", "ok", Duration::from_micros(250));
            metrics.answer("CreateContainer", Duration::from_micros(300));
        })
    });
    check_logged(&log, &decisions, ran, "bookkeeping_10");
    g.finish();
}

/// That `bench` (if it ran) logged decisions, and lost none: it measured
/// the logging it claims to (`RUST_LOG` at `warn` or above leaves the
/// lines out on purpose).
fn check_logged(log: &nri_wasm::cli::log::LogGuard, decisions: &AtomicU64, ran: bool, bench: &str) {
    use std::sync::atomic::Ordering;
    assert!(log.flush(Duration::from_secs(10)), "{bench}: the log was not written out");
    let logged = decisions.swap(0, Ordering::Relaxed);
    assert!(!ran || logged > 0 || std::env::var_os("RUST_LOG").is_some(), "{bench} logged no decision");
    assert_eq!(log.dropped(), 0, "{bench}: the log queue dropped records");
}

fn criterion_benches(c: &mut Criterion, s: &Setup) {
    let mut g = c.benchmark_group("create_container");
    g.bench_function("empty_chain_decode_merge_encode", |b| b.iter(|| black_box(s.round_trip(&s.empty))));
    g.bench_function("noop_1", |b| b.iter(|| black_box(s.round_trip(&s.noop))));
    for (n, chain) in &s.realistic {
        heavy(&mut g, *n);
        g.bench_function(format!("realistic_{n}"), |b| b.iter(|| black_box(s.round_trip(chain))));
    }
    heavy(&mut g, 10);
    g.bench_function("realistic_full_read_10", |b| b.iter(|| black_box(s.round_trip(&s.full_10))));
    for n in [1, 10, 50] {
        heavy(&mut g, n);
        g.bench_function(format!("native_{n}"), |b| b.iter(|| black_box(native_chain(n, black_box(&s.req)))));
    }
    g.finish();

    // Where the time of one policy call goes.
    let mut g = c.benchmark_group("parts");
    let response = s.evaluate(s.chain(10));
    let merge = CreateMerge::new(&s.req);
    let event = CallEvent::container(
        wit::EventKind::CreateContainer,
        Arc::new((*s.req.pod).clone()),
        Arc::new((*s.req.container).clone()),
    );
    g.bench_function("decode_request", |b| {
        b.iter(|| pb::CreateContainerRequest::parse_from_bytes(black_box(&s.bytes)).expect("decode"))
    });
    g.bench_function("encode_response_10", |b| b.iter(|| black_box(&response).write_to_bytes().expect("encode")));
    g.bench_function("merge_new", |b| b.iter(|| CreateMerge::new(black_box(&s.req))));
    g.bench_function("merge_clone", |b| b.iter(|| black_box(&merge).clone()));
    g.bench_function("merge_finish", |b| b.iter_batched(|| merge.clone(), CreateMerge::finish, BatchSize::SmallInput));
    g.bench_function("to_wit_pod_and_container", |b| {
        b.iter(|| (wit::PodSandbox::from(black_box(&*s.req.pod)), wit::Container::from(black_box(&*s.req.container))))
    });
    let env = CallEnv::detached(s.bench.facts.clone());
    let noop = s.noop.policies().next().expect("noop policy");
    let bare = s.bare.policies().next().expect("bare policy");
    let realistic = s.chain(1).policies().next().expect("realistic policy");
    let full = s.full_10.policies().next().expect("realistic policy reading everything");
    // The realistic policy's work at the sandbox's floor, then taken apart
    // one part at a time (tests/guests/lean): each step's difference is what
    // that part costs.
    let steps: Vec<(String, Chain)> = ["", "e", "er", "erm", "erma", "ermap", "z"]
        .into_iter()
        .map(|skip| {
            let name = match skip {
                "" => "engine_call_lean".to_string(),
                "z" => "engine_call_lean_settings_only".to_string(),
                _ => format!("engine_call_lean_without_{skip}"),
            };
            (name, s.bench.lean(1, skip))
        })
        .collect();
    for (name, chain) in &steps {
        let policy = chain.policies().next().expect("lean policy");
        g.bench_function(name, |b| {
            b.iter(|| {
                let report = s.bench.engine.call(policy, black_box(event.clone()), &env, None, BUDGET);
                assert!(report.outcome.is_ok());
                report
            })
        });
    }
    for (name, policy) in [
        ("engine_call_bare", bare),
        ("engine_call_noop", noop),
        ("engine_call_realistic", realistic),
        ("engine_call_realistic_full_read", full),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let report = s.bench.engine.call(policy, black_box(event.clone()), &env, None, BUDGET);
                assert!(report.outcome.is_ok());
                report
            })
        });
    }
    let ten: Vec<_> = s.chain(10).policies().collect();
    g.bench_function("engine_call_realistic_ten_components", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % ten.len();
            let report = s.bench.engine.call(ten[i], black_box(event.clone()), &env, None, BUDGET);
            assert!(report.outcome.is_ok());
            report
        })
    });
    // The fixed cost of a call: the same no-op policy on an empty container.
    let empty = CallEvent::container(wit::EventKind::CreateContainer, Arc::default(), Arc::default());
    g.bench_function("engine_call_noop_empty_event", |b| {
        b.iter(|| {
            let report = s.bench.engine.call(noop, black_box(empty.clone()), &env, None, BUDGET);
            assert!(report.outcome.is_ok());
            report
        })
    });
    g.finish();

    // The same calls as the real path finds them: the caches swept before
    // each one (the runtime and the kernel run between two events).
    let mut g = c.benchmark_group("cold");
    g.sample_size(30).sampling_mode(SamplingMode::Flat);
    let mut sweep = vec![0u8; SWEEP_BYTES];
    let lean = s.bench.lean(1, "");
    let lean_settings = s.bench.lean(1, "z");
    let lean_policy = lean.policies().next().expect("lean policy");
    let lean_settings_policy = lean_settings.policies().next().expect("lean policy");
    for (name, policy) in [
        ("engine_call_bare", bare),
        ("engine_call_lean_settings_only", lean_settings_policy),
        ("engine_call_lean", lean_policy),
        ("engine_call_noop", noop),
        ("engine_call_realistic", realistic),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    sweep_caches(&mut sweep);
                    event.clone()
                },
                |event| {
                    let report = s.bench.engine.call(policy, event, &env, None, BUDGET);
                    assert!(report.outcome.is_ok());
                    report
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// Larger than the last-level cache of the machines this runs on.
const SWEEP_BYTES: usize = 64 << 20;

/// Writes one byte of every cache line of `sweep`, evicting what the last
/// call left in the caches.
fn sweep_caches(sweep: &mut [u8]) {
    for line in sweep.iter_mut().step_by(64) {
        *line = line.wrapping_add(1);
    }
    black_box(&*sweep);
}

/// Fewer, flat samples for the slow benchmarks (criterion's default of 100
/// linearly growing samples would take minutes at 50 policies).
fn heavy(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, n: usize) {
    if n >= 10 {
        g.sample_size(30).sampling_mode(SamplingMode::Flat);
    } else {
        g.sample_size(100).sampling_mode(SamplingMode::Auto);
    }
}

/// A duration in microseconds, one decimal: comparable across the table.
fn us(d: Duration) -> String {
    format!("{:.1}µs", d.as_secs_f64() * 1e6)
}

/// Which cases of the percentile pass run: all of them, or those whose name
/// contains the text of `NRI_WASM_BENCH_PERCENTILES` (`0` skips the pass).
struct Only(Option<String>);

impl Only {
    fn from_env() -> Option<Self> {
        match std::env::var("NRI_WASM_BENCH_PERCENTILES") {
            Ok(v) if v == "0" => None,
            Ok(v) if !v.is_empty() && v != "1" => Some(Self(Some(v))),
            _ => Some(Self(None)),
        }
    }

    fn wants(&self, name: &str) -> bool {
        self.0.as_deref().is_none_or(|only| name.contains(only))
    }
}

/// Median, p90, p99 and max of `iters` runs of `f` after `warm_up` runs;
/// fewer runs (at least 300) when `iters` would take more than 15 s.
fn percentiles(name: &str, warm_up: usize, iters: usize, mut f: impl FnMut()) -> Vec<Duration> {
    let start = Instant::now();
    for _ in 0..warm_up {
        f();
    }
    let each = start.elapsed() / warm_up.max(1) as u32;
    let iters = if warm_up >= 100 {
        iters.min((Duration::from_secs(15).as_nanos() / each.as_nanos().max(1)) as usize).max(300)
    } else {
        iters
    };
    let mut times: Vec<Duration> = (0..iters)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];
    let stats = vec![at(0.5), at(0.9), at(0.99), times[times.len() - 1]];
    eprintln!(
        "{name:<40} n={iters:<5} p50 {:>10}  p90 {:>10}  p99 {:>10}  max {:>10}",
        us(stats[0]),
        us(stats[1]),
        us(stats[2]),
        us(stats[3])
    );
    stats
}

fn percentile_pass(s: &Setup, full: bool, only: &Only) {
    let (warm, n) = if full { (200, 2000) } else { (2, 5) };
    eprintln!("\npercentiles (per iteration, wall clock):");
    let run = |name: &str, f: &mut dyn FnMut()| only.wants(name).then(|| percentiles(name, warm, n, f));
    let empty = run("empty_chain_decode_merge_encode", &mut || drop(black_box(s.round_trip(&s.empty))));
    let noop = run("noop_1", &mut || drop(black_box(s.round_trip(&s.noop))));
    if let (Some(empty), Some(noop)) = (empty, noop) {
        let added = us(noop[0] - empty[0]);
        eprintln!("{:<40} {added:>10} (p50 of noop_1 minus p50 of the empty chain)", "added by one no-op policy");
    }
    for (k, chain) in &s.realistic {
        run(&format!("realistic_{k}"), &mut || drop(black_box(s.round_trip(chain))));
    }
    run("realistic_full_read_10", &mut || drop(black_box(s.round_trip(&s.full_10))));
    for k in [1, 10, 50] {
        run(&format!("native_{k}"), &mut || drop(black_box(native_chain(k, &s.req))));
    }
    // The chain alone, without decode and encode, for the per-policy figure.
    let eval = |k: usize| {
        let chain = s.chain(k);
        run(&format!("realistic_{k} (evaluate only)"), &mut || drop(black_box(s.evaluate(chain))))
    };
    if let (Some(one), Some(ten), Some(fifty)) = (eval(1), eval(10), eval(50)) {
        eprintln!(
            "{:<40} {:>10} (p50 of 50 minus p50 of 10, over 40); first policy {}",
            "each further realistic policy",
            us((fifty[0] - ten[0]) / 40),
            us(one[0])
        );
    }
    if only.wants("loop with timeout-ms = 10") {
        time_limit(s, full);
    }
}

/// A policy that loops forever, with a 10 ms limit: how long until the chain
/// has control back.
fn time_limit(s: &Setup, full: bool) {
    let limits = Limits { timeout_ms: 10, fuel: u64::MAX / 2, ..Limits::default() };
    let looping = s.bench.load("00-loop", guests::FAULTS, "loop", OnError::Ignore, limits);
    // The breaker would quarantine the policy after a few timeouts.
    let settings = ChainSettings { breaker_failures: u32::MAX, ..ChainSettings::default() };
    let chain = Chain::new(vec![looping], settings);
    let (warm, n) = if full { (5, 200) } else { (1, 3) };
    let stats = percentiles("loop with timeout-ms = 10", warm, n, || {
        let (_, steps) = s.evaluate_steps(&chain);
        let timed_out = matches!(
            steps.as_slice(),
            [Step {
                outcome: Outcome::Failed {
                    failure: PolicyFailure::Call(CallError { kind: CallErrorKind::Timeout { .. }, .. }),
                    ignored: true
                },
                ..
            }]
        );
        assert!(timed_out, "the looping policy was not cut off by its time limit: {steps:?}");
    });
    eprintln!(
        "{:<40} {:>10} (max minus the 10 ms limit)",
        "overrun of the time limit",
        us(stats[3].saturating_sub(Duration::from_millis(10)))
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` and `-- --test` want a quick run.
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let setup = Setup::new();
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c, &setup);
    if let Some(only) = Only::from_env() {
        percentile_pass(&setup, full, &only);
    }
    dispatcher_benches(&mut c, &setup);
    c.final_summary();
}
