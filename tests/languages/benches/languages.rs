//! The parity reference policy in every language, on the realistic
//! CreateContainer (the captured containerd request), through the
//! production engine:
//!
//! - the component's size;
//! - compile time (an engine without a cache, once);
//! - load time from the compiled cache (the median of 10 loads);
//! - instantiate + call, p50 and p99 of many calls (`engine.call`, which
//!   instantiates a fresh instance per call as the host does);
//! - a chain of ten copies through the chain's CreateContainer, p50/p99
//!   (the first one's reply taken, the nine others yielding on the conflict);
//! - the same policy pre-initialised (`preinitialize = true`): the load with
//!   its snapshot, and instantiate + call.
//!
//! It prints those as a markdown table first, then runs criterion on the
//! call and the chain of ten.
//!
//!     cargo bench -p nri-wasm-languages --features languages --bench languages
//!
//! A component the host refuses (Python, while the host's pool allows 16 core
//! instances per component) gets a row with the reason.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use nri_wasm::policy::chain::Chain;
use nri_wasm::policy::engine::{CompiledPolicy, EngineSettings, PolicyEngine};
use nri_wasm::policy::spec::manifest::{OnConflict, OnError, PolicySpec};
use nri_wasm::policy::PolicyLoader;
use nri_wasm_api::api as pb;
use nri_wasm_languages::{call, chain, create, create_container_fixtures, facts, limits, parity};

/// The reference policy's settings with every kind of work (the parity
/// test's FULL).
const SETTINGS: &str = r#"{
    "labels": {"app": "APP_NAME", "tier": "", "zone-é": "", "3d-renderer": "", "app.kubernetes.io/name": ""},
    "annotations": {"example.com/owner": "TEAM", "kubernetes.io/config.source": ""},
    "deny-namespaces": ["team-3", "kube-system"],
    "memory-cap": 268435456
}"#;

/// A loader over an engine without a cache, to time compiling.
fn uncached_loader() -> PolicyLoader {
    let settings = EngineSettings { cache_dir: None, compile_timeout_ms: 600_000, ..EngineSettings::default() };
    PolicyLoader::new(Arc::new(PolicyEngine::new(&settings).expect("engine")))
}

fn spec(name: &str, wasm: &str) -> PolicySpec {
    PolicySpec {
        settings: SETTINGS.into(),
        on_error: OnError::Fail,
        limits: limits(),
        ..PolicySpec::granting_all(name, wasm)
    }
}

fn request() -> pb::CreateContainerRequest {
    create_container_fixtures().into_iter().find(|(n, _)| n == "CreateContainer").expect("the captured request").1
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.0} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// Times `n` runs of `f` and returns (p50, p99).
fn sample(n: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..n.min(20) {
        f();
    }
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

/// The loaded policies of one language: one, and a chain of ten.
struct Loaded {
    lang: &'static str,
    one: CompiledPolicy,
    /// The same, pre-initialised (`preinitialize = true`), if the host
    /// could take its snapshot.
    pre: Option<CompiledPolicy>,
    ten: Chain,
}

fn table(cached: &Arc<PolicyLoader>, req: &pb::CreateContainerRequest) -> Vec<Loaded> {
    let mut rows = vec![
        "| language | component | compile | load (cached) | instantiate + call p50 / p99 | per call, x Rust | chain of ten p50 / p99 |"
            .to_string(),
        "|---|---|---|---|---|---|---|".to_string(),
    ];
    // Each language's median call as a multiple of Rust's, measured in
    // this run: Rust first.
    let mut rust_p50: Option<Duration> = None;
    let rust_first =
        parity::ALL.iter().filter(|(l, _)| *l == "RUST").chain(parity::ALL.iter().filter(|(l, _)| *l != "RUST"));
    let mut loaded = Vec::new();
    let facts = facts();
    for (lang, wasm) in rust_first.copied() {
        let size = std::fs::metadata(wasm).map(|m| m.len()).unwrap_or(0);
        let size = format!("{:.2} MB", size as f64 / 1e6);
        // Compile: an engine with no cache, once.
        let fresh = uncached_loader();
        let t = Instant::now();
        let compiled = fresh.load(&spec("50-parity", wasm), &facts);
        let compile = t.elapsed();
        drop(fresh);
        if let Err(e) = compiled {
            rows.push(format!("| {lang} | {size} | refused: {e} | | | | |"));
            continue;
        }
        // Load from the compiled cache: fill it, then the median of 10.
        cached.load(&spec("50-parity", wasm), &facts).expect("load");
        let mut loads: Vec<Duration> = (0..10)
            .map(|_| {
                let t = Instant::now();
                cached.load(&spec("50-parity", wasm), &facts).expect("load");
                t.elapsed()
            })
            .collect();
        loads.sort();
        let one = cached.load(&spec("50-parity", wasm), &facts).expect("load");
        let slow = lang == "JS_SPIDERMONKEY" || lang == "PYTHON";
        let (p50, p99) = sample(if slow { 300 } else { 2000 }, || {
            let r = call(&one, req);
            assert!(matches!(r.outcome, Ok(Ok(_))), "{lang}: {:?}", r.outcome);
        });
        // Ten copies set the same fields: every one runs, the first's
        // reply is taken, the others yield (their replies are merged and
        // dropped, as a chain of default-setting policies does).
        let policies: Vec<CompiledPolicy> = (10..20)
            .map(|i| {
                let spec = PolicySpec { on_conflict: OnConflict::Yield, ..spec(&format!("{i}-parity"), wasm) };
                cached.load(&spec, &facts).expect("load")
            })
            .collect();
        let ten = chain(policies);
        let (c50, c99) = sample(if slow { 50 } else { 300 }, || {
            create(&ten, req).expect("the chain answers");
        });
        if lang == "RUST" {
            rust_p50 = Some(p50);
        }
        let ratio = rust_p50.map_or("-".to_string(), |r| format!("{:.1}", p50.as_secs_f64() / r.as_secs_f64()));
        rows.push(format!(
            "| {lang} | {size} | {} | {} | {} / {} | {ratio} | {} / {} |",
            fmt(compile),
            fmt(loads[loads.len() / 2]),
            fmt(p50),
            fmt(p99),
            fmt(c50),
            fmt(c99)
        ));
        // Pre-initialised: its calls start from a snapshot taken after
        // `configure`; the load (cached) includes taking the snapshot and
        // compiling it.
        let t = Instant::now();
        let pre = cached.load(&PolicySpec { preinitialize: true, ..spec("50-parity", wasm) }, &facts).expect("load");
        let pre_load = t.elapsed();
        let pre = match pre.preinitialize_refused() {
            Some(why) => {
                rows.push(format!("| {lang}, pre-initialised | | | refused: {why} | | | |"));
                None
            }
            None => {
                let (p50, p99) = sample(if slow { 300 } else { 2000 }, || {
                    let r = call(&pre, req);
                    assert!(matches!(r.outcome, Ok(Ok(_))), "{lang}: {:?}", r.outcome);
                });
                let ratio = rust_p50.map_or("-".to_string(), |r| format!("{:.1}", p50.as_secs_f64() / r.as_secs_f64()));
                rows.push(format!(
                    "| {lang}, pre-initialised | | | {} | {} / {} | {ratio} | |",
                    fmt(pre_load),
                    fmt(p50),
                    fmt(p99)
                ));
                Some(pre)
            }
        };
        loaded.push(Loaded { lang, one, pre, ten });
    }
    eprintln!("\nThe parity reference policy on the captured containerd CreateContainer:\n\n{}\n", rows.join("\n"));
    loaded
}

fn benches(c: &mut Criterion) {
    // The engine the tests use (production settings, a compiled cache).
    let cached = nri_wasm_languages::loader();
    let req = request();
    let loaded = table(&cached, &req);
    let mut group = c.benchmark_group("call");
    group.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for l in &loaded {
        group.bench_function(l.lang, |b| b.iter(|| call(&l.one, &req)));
        if let Some(pre) = &l.pre {
            group.bench_function(format!("{}_PREINIT", l.lang), |b| b.iter(|| call(pre, &req)));
        }
    }
    group.finish();
    let mut group = c.benchmark_group("chain-of-ten");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for l in &loaded {
        group.bench_function(l.lang, |b| b.iter(|| create(&l.ten, &req).expect("the chain answers")));
    }
    group.finish();
}

criterion_group!(languages, benches);
criterion_main!(languages);
