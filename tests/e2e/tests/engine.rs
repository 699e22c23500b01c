//! The engine with real compiled components: limits cut misbehaving policies
//! off with the right classification, and load-time checks refuse bad ones.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::engine::{
    Allocator, CallEnv, CallError, CallErrorKind, Denial, EngineSettings, Facts, LimitKind, PolicyEngine, TrapCode,
};
use nri_wasm::policy::load::errors::LoadError;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::{Mode, OnError, PolicySpec};
use nri_wasm::policy::PolicyLoader;
use nri_wasm_e2e::{create_event, guests, roomy};

fn spec(name: &str, wasm: &str, settings: &str, limits: Limits) -> PolicySpec {
    PolicySpec {
        settings: settings.into(),
        on_error: OnError::Ignore,
        mode: Mode::Enforce,
        limits,
        ..PolicySpec::granting_all(name, Path::new(wasm))
    }
}

fn facts() -> Arc<Facts> {
    Arc::new(Facts {
        runtime: wit::RuntimeInfo {
            name: "containerd".into(),
            version: "v2.3.4".into(),
            nri_version: "v0.12.0".into(),
        },
        node: Facts::node_from_system(),
        topology: (&nri_wasm_e2e::test_topology()).into(),
    })
}

/// A loader over an engine of its own, with the test build's compile cache.
fn loader() -> PolicyLoader {
    loader_with(&nri_wasm_e2e::engine_settings())
}

fn loader_with(settings: &EngineSettings) -> PolicyLoader {
    PolicyLoader::new(Arc::new(PolicyEngine::new(settings).expect("engine")))
}

#[test]
fn compiled_components_are_cached_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let settings = EngineSettings { cache_dir: Some(dir.path().join("cache")), ..EngineSettings::default() };
    let f = facts();
    let s = spec("10-noop", guests::NOOP, "", roomy());
    let first = loader_with(&settings);
    first.load(&s, &f).unwrap();
    // Beside each artifact (`.cwasm`) the cache keeps the subscription the
    // policy's `configure` returned (`.sub`, see `policy/load/known.rs`).
    let artifacts = || -> Vec<std::path::PathBuf> {
        let entries = std::fs::read_dir(dir.path().join("cache")).unwrap();
        entries.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cwasm")).collect()
    };
    assert_eq!(artifacts().len(), 1, "one artifact per component");
    // A new engine (a restart) loads from the cache and works.
    let second = loader_with(&settings);
    let p = second.load(&s, &f).unwrap();
    let r = second.engine().call(&p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(1));
    assert!(r.outcome.unwrap().is_ok());
    // A corrupt artifact is ignored, not trusted.
    drop((p, second, first));
    std::fs::write(&artifacts()[0], b"garbage").unwrap();
    loader_with(&settings).load(&s, &f).unwrap();
}

/// Loads `n` policies of the realistic guest at once through `loader`.
fn load_together(loader: &Arc<PolicyLoader>, n: usize) -> Vec<Result<nri_wasm::policy::CompiledPolicy, LoadError>> {
    let f = facts();
    loader.engine().clone().block_on(async {
        let loads: Vec<_> = (0..n)
            .map(|i| {
                let (loader, f) = (loader.clone(), f.clone());
                let s = spec(&format!("{}-realistic", 10 + i), guests::REALISTIC, &i.to_string(), roomy());
                tokio::spawn(async move { loader.load_async(&s, &f).await })
            })
            .collect();
        let mut loaded = Vec::new();
        for load in loads {
            loaded.push(load.await.expect("load task"));
        }
        loaded
    })
}

/// Ten policies of one file, loaded together on a first start (nothing
/// cached, nothing loaded yet), compile it once and run one copy of its
/// code: each compiling on its own, as they did, took ten compiles and kept
/// ten copies of the same code, which every event then ran through.
#[test]
fn policies_of_one_file_loaded_together_compile_it_once() {
    for cache in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = cache.then(|| dir.path().join("cache"));
        let loader = Arc::new(loader_with(&EngineSettings { cache_dir, ..EngineSettings::default() }));
        let loaded: Vec<_> = load_together(&loader, 10).into_iter().map(|l| l.expect("policy loads")).collect();
        let made = loaded.iter().filter(|p| !p.timings().shared).count();
        assert_eq!(made, 1, "cache {cache}: one load makes the component, the others take it");
        assert!(loaded.iter().all(|p| !p.timings().cached), "cache {cache}: nothing was cached before");
        for p in &loaded[1..] {
            assert!(p.shares_code_with(&loaded[0]), "cache {cache}: {} has a copy of its own", p.name());
        }
        // Each answers.
        let f = facts();
        for p in &loaded {
            let r =
                loader.engine().call(p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(1));
            if let Err(e) = r.outcome {
                panic!("{}: {e}", p.name());
            }
        }
    }
}

/// A compile failure the bytes decide is shared with the loads waiting for
/// it (one compile, every policy of the file refused with its reason); a
/// failure of the moment is not: each waiting load tries again.
#[test]
fn loads_waiting_for_a_compile_share_its_failure_only_if_the_bytes_decided_it() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let compiler = |name: &str, then: &str| {
        let exe = dir.path().join(name);
        std::fs::write(&exe, format!("#!/bin/sh\necho run >> '{}'\n{then}\n", counter.display())).unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        exe
    };
    let runs = || std::fs::read_to_string(&counter).map_or(0, |t| t.lines().count());
    // The smallest CPU budget: the wall-clock backstop is ten times it.
    let settings = EngineSettings { cache_dir: None, compile_timeout_ms: 100, ..EngineSettings::default() };
    let cases = [
        // The compiler's own error: the bytes decide it.
        (compiler("refuses", "echo 'error: this component is refused' >&2; exit 1"), 1, "this component is refused"),
        // Stuck past the backstop: the node's moment, tried again by each.
        (compiler("stalls", "exec sleep 30"), 3, "wall-clock time"),
    ];
    for (exe, expected_runs, reason) in cases {
        let _ = std::fs::remove_file(&counter);
        let engine = Arc::new(PolicyEngine::new(&settings).expect("engine"));
        let compiler = nri_wasm::policy::load::compile::Compiler::Subprocess { exe: exe.clone() };
        let loader = Arc::new(PolicyLoader::new(engine).with_compiler(compiler));
        for (i, load) in load_together(&loader, 3).into_iter().enumerate() {
            let err = load.err().unwrap_or_else(|| panic!("load {i} with {} succeeded", exe.display())).to_string();
            assert!(err.contains(reason), "load {i}: {err}");
            assert!(err.contains(&format!("{}-realistic", 10 + i)), "the error names its own policy: {err}");
        }
        assert_eq!(runs(), expected_runs, "{}", exe.display());
    }
}

#[test]
fn a_policy_answers_and_consumes_deterministic_fuel() {
    let loader = loader();
    let engine = loader.engine();
    let f = facts();
    let p = loader.load(&spec("10-annotate", guests::ANNOTATE, "team", roomy()), &f).unwrap();
    assert_eq!(p.events().iter().map(|e| e.name()).collect::<Vec<_>>(), ["CreateContainer"]);
    let first = engine.call(&p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(1));
    let reply = first.outcome.clone().unwrap().unwrap();
    let adjust = reply.adjust.unwrap();
    assert_eq!(adjust.annotations, vec![wit::KeyValue { key: "example.com/team".into(), value: "app".into() }]);
    assert_eq!(adjust.env, vec![wit::KeyValue { key: "POLICY_TEAM".into(), value: "1".into() }]);
    assert!(first.fuel_used > 0);
    for _ in 0..20 {
        let again = engine.call(&p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(1));
        assert_eq!(again.outcome, first.outcome);
        assert_eq!(again.fuel_used, first.fuel_used, "same input, same fuel");
    }
}

#[test]
fn a_component_without_the_standard_library_or_wasi_runs_like_any_other() {
    // tests/guests/bare: no std, no WASI imports, its own allocator and
    // `cabi_realloc`; the benchmarks' floor of a policy.
    let loader = loader();
    let engine = loader.engine();
    let f = facts();
    let p = loader.load(&spec("10-bare", guests::BARE, "", roomy()), &f).unwrap();
    assert_eq!(p.events().iter().map(|e| e.name()).collect::<Vec<_>>(), ["CreateContainer"]);
    for _ in 0..5 {
        let report = engine.call(&p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(1));
        let reply = report.outcome.expect("the call succeeds").expect("the policy allows");
        assert_eq!(reply, wit::Reply { adjust: None, update: Vec::new(), evict: Vec::new() });
        assert!(report.fuel_used > 0, "fuel is metered for it too");
    }
}

#[test]
fn settings_are_validated_at_load() {
    let loader = loader();
    let err = loader.load(&spec("10-annotate", guests::ANNOTATE, "two words", roomy()), &facts()).unwrap_err();
    assert!(
        matches!(&err, LoadError::Init { policy, error: CallError { kind: CallErrorKind::Init { reason }, event, .. }, }
            if policy == "10-annotate" && event == "configure" && reason.contains("single word")),
        "{err}"
    );
}

fn run_fault(mode: &str, limits: Limits) -> CallError {
    run_fault_charged(mode, limits).0
}

/// The error, and the time the call was charged.
fn run_fault_charged(mode: &str, limits: Limits) -> (CallError, Duration) {
    let loader = loader();
    let engine = loader.engine();
    let f = facts();
    let p = loader.load(&spec("20-faults", guests::FAULTS, mode, limits), &f).unwrap();
    let report = engine.call(&p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(5));
    (report.outcome.expect_err("the call fails"), report.charged)
}

#[test]
fn an_infinite_loop_is_interrupted_by_the_time_limit() {
    let limits = Limits { fuel: u64::MAX / 2, timeout_ms: 30, ..Limits::default() };
    let (err, charged) = run_fault_charged("loop", limits);
    assert_eq!(err.limit(), Some(LimitKind::Time), "{err}");
    assert!(err.to_string().contains("20-faults") && err.to_string().contains("CreateContainer"), "{err}");
    assert!(err.to_string().contains("time limit of 30 ms exceeded"), "its own limit ended it: {err}");
    // Cut once it used its 30 ms (however long a busy machine took to give
    // it them): the error names its time limit, not the 5 s of wall-clock
    // time it was left, which would have ended it otherwise.
    assert!(charged >= Duration::from_millis(30) && charged < Duration::from_millis(30 + 50), "charged {charged:?}");
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it;
    // sched_setaffinity reads it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0, "pinning to {cpu}");
    }
}

/// Threads that compute without a pause on one CPU until dropped: a busy
/// CPU for the calling thread, whatever else the machine does.
struct BusyCpu {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyCpu {
    /// `n` busy threads on the CPU the caller runs on; the caller is pinned
    /// there too.
    fn here(n: usize) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).expect("a CPU");
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    pin_to(cpu);
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::black_box(0u64);
                    }
                })
            })
            .collect();
        pin_to(cpu);
        Self { stop, threads }
    }
}

impl Drop for BusyCpu {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.threads.drain(..).for_each(|t| t.join().unwrap());
    }
}

/// Sets the calling thread's scheduling policy (threads it starts inherit it).
fn schedule(policy: libc::c_int) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid parameter for SCHED_IDLE and SCHED_OTHER, for the
    // calling thread (pid 0); lowering one's own priority needs no privilege.
    assert_eq!(unsafe { libc::sched_setscheduler(0, policy, &param) }, 0, "sched_setscheduler({policy})");
}

/// A node whose CPUs are busy keeps a call from running for many times what
/// it needs: the policy is not failed for that. Its `timeout-ms` counts the
/// time it uses (its CPU time and its waits), and only the wall-clock time
/// the chain leaves it bounds the rest (`policy/call/meter.rs`). Made busy
/// here, whatever the machine: the calling thread shares one CPU with two
/// threads that compute without a pause, at the lowest priority
/// (`SCHED_IDLE`), so that calls are descheduled in the middle for tens of
/// milliseconds. Each of those used to fail as a timeout.
#[test]
fn a_call_kept_waiting_by_a_busy_cpu_is_not_charged_for_the_wait() {
    let loader = loader();
    let engine = loader.engine();
    let f = facts();
    // Far above what a call uses on an idle machine (well under a
    // millisecond), far below what the busy CPU makes calls take (seconds).
    // A starved thread is charged about a millisecond for each second it
    // waits (it runs in slivers, on cold caches): at 10 ms, every call but
    // the first was charged its whole limit on some runs, and none was left
    // to show a stretched call.
    let limit = Duration::from_millis(100);
    let limits = Limits { timeout_ms: 100, ..Limits::default() };
    let p = loader.load(&spec("10-annotate", guests::ANNOTATE, "team", limits), &f).unwrap();
    let env = CallEnv::detached(f.clone());
    let warm = engine.call(&p, create_event(), &env, None, Duration::from_secs(10));
    assert!(matches!(warm.outcome, Ok(Ok(_))), "{:?}", warm.outcome);

    let busy = BusyCpu::here(2);
    schedule(libc::SCHED_IDLE);
    let mut stretched = Vec::new();
    let mut wrong = Vec::new();
    let started = Instant::now();
    let mut calls = 0;
    while stretched.len() < 3 && started.elapsed() < Duration::from_secs(120) {
        let r = engine.call(&p, create_event(), &env, None, Duration::from_secs(600));
        calls += 1;
        let ok = matches!(r.outcome, Ok(Ok(_)));
        // A thrashing node can make a call use its limit (a starved thread
        // runs on cold caches): then, and only then, it fails for time.
        let used_its_time = r.charged >= limit;
        if !ok && !used_its_time {
            wrong.push(format!("{:?} after {:?} ({:?} charged)", r.outcome, r.elapsed, r.charged));
        }
        if r.elapsed > limit && !used_its_time {
            stretched.push((r.elapsed, r.charged));
        }
    }
    schedule(libc::SCHED_OTHER);
    drop(busy);
    eprintln!("{calls} calls; longer than the limit of {limit:?}: {stretched:?}");
    assert!(wrong.is_empty(), "failed for time it did not use: {wrong:#?}");
    assert!(!stretched.is_empty(), "the busy CPU never kept a call past its limit in {calls} calls");
}

#[test]
fn an_infinite_loop_runs_out_of_fuel() {
    let limits = Limits { fuel: 5_000_000, timeout_ms: 10_000, ..Limits::default() };
    let err = run_fault("loop", limits);
    assert_eq!(err.limit(), Some(LimitKind::Fuel), "{err}");
}

#[test]
fn memory_growth_stops_at_the_cap() {
    let limits = Limits { memory_mib: 16, ..roomy() };
    let err = run_fault("grow", limits);
    assert_eq!(err.limit(), Some(LimitKind::Memory), "{err}");
    assert!(err.to_string().contains("16 MiB"), "{err}");
}

#[test]
fn traps_panics_and_stack_overflows_are_reported() {
    // The trap's code is kept as wasmtime gives it, not read from the text.
    let err = run_fault("unreachable", roomy());
    assert!(matches!(err.kind, CallErrorKind::Trap { code: Some(TrapCode::UnreachableCodeReached), .. }), "{err:?}");
    // A Rust panic aborts through `unreachable` too.
    let err = run_fault("panic", roomy());
    assert!(matches!(err.kind, CallErrorKind::Trap { code: Some(TrapCode::UnreachableCodeReached), .. }), "{err:?}");
    // The panic message the guest wrote to stderr is part of the error.
    assert!(err.to_string().contains("policy panicked on purpose for app"), "{err}");
    // Rust keeps its stack in linear memory: overflowing it faults below
    // address 0 rather than exhausting the engine's call stack.
    let err = run_fault("stack", roomy());
    let text = err.to_string();
    assert!(err.limit() == Some(LimitKind::Stack) || text.contains("out of bounds"), "{err}");
}

#[test]
fn a_policy_can_deny() {
    let loader = loader();
    let engine = loader.engine();
    let f = facts();
    let p = loader.load(&spec("20-faults", guests::FAULTS, "deny", roomy()), &f).unwrap();
    let r = engine.call(&p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(1));
    assert_eq!(r.outcome, Ok(Err(Denial("denied on purpose".to_string()))));
}

#[test]
fn a_looping_init_fails_the_load_within_the_limit() {
    let loader = loader();
    let limits = Limits { timeout_ms: 20, fuel: u64::MAX / 2, ..Limits::default() };
    let err = loader.load(&spec("20-faults", guests::FAULTS, "init-loop", limits), &facts()).unwrap_err();
    // The call's own error is kept: typed, its limit is time.
    assert!(matches!(&err, LoadError::Init { error, .. } if error.limit() == Some(LimitKind::Time)), "{err}");
    assert!(err.to_string().contains("time limit"), "{err}");
}

/// A policy that writes far more to stdout and stderr than the host keeps is
/// not failed for it; the end of stderr (a panic message) still reaches the
/// trap's error.
#[test]
fn output_past_what_the_host_keeps_is_dropped_not_fatal() {
    let loader = loader();
    let engine = loader.engine();
    let f = facts();
    let env = CallEnv::detached(f.clone());
    let chatty = loader.load(&spec("20-faults", guests::FAULTS, "chatty", roomy()), &f).unwrap();
    let reply = engine.call(&chatty, create_event(), &env, None, Duration::from_secs(5)).outcome.unwrap().unwrap();
    let adjust = reply.adjust.expect("an answer");
    assert_eq!(adjust.annotations, vec![wit::KeyValue { key: "example.com/faults".into(), value: "ok".into() }]);

    let panics = loader.load(&spec("20-faults", guests::FAULTS, "chatty-panic", roomy()), &f).unwrap();
    let err = engine.call(&panics, create_event(), &env, None, Duration::from_secs(5)).outcome.unwrap_err();
    let CallErrorKind::Trap { trap, .. } = &err.kind else { panic!("{err}") };
    assert!(trap.contains("panicked on purpose after logging too much"), "{trap}");
}

/// The event exists only in `handle`: reading it from `configure` traps, and
/// the policy does not load, with the reason.
#[test]
fn reading_the_event_in_configure_keeps_the_policy_from_loading() {
    let err = loader().load(&spec("20-probe", guests::PROBE, "event-in-configure", roomy()), &facts()).unwrap_err();
    assert!(matches!(err, LoadError::Init { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("20-probe") && text.contains("read outside handle"), "{text}");
}

#[test]
fn forbidden_imports_are_refused_with_the_import_named() {
    let wat = r#"(component
        (import "wasi:http/outgoing-handler@0.2.0" (instance))
    )"#;
    let loader = loader();
    let err = loader.load_bytes(&spec("30-http", "inline", "", roomy()), wat.as_bytes(), &facts()).unwrap_err();
    assert!(
        matches!(&err, LoadError::ForbiddenImport { import, .. } if import == "wasi:http/outgoing-handler@0.2.0"),
        "{err}"
    );
}

#[test]
fn components_built_against_another_package_version_are_refused_with_the_reason() {
    // 0.1 (records only) and 0.2 (whole event handed to `handle`) are both
    // incompatible with the current package.
    for old in ["0.1.0", "0.2.0"] {
        let import = format!("nri-wasm:policy/host@{old}");
        let wat = format!(r#"(component (import "{import}" (instance)))"#);
        let err = loader().load_bytes(&spec("31-old", "inline", "", roomy()), wat.as_bytes(), &facts()).unwrap_err();
        assert!(matches!(&err, LoadError::Version { import: i, .. } if *i == import), "{err}");
        let text = err.to_string();
        let current = format!("nri-wasm:policy@{}.x", nri_wasm::policy::load::errors::WIT_VERSION);
        assert!(text.contains("31-old") && text.contains(&current) && text.contains("rebuild"), "{text}");
    }
}

#[test]
fn garbage_and_wrong_worlds_are_refused() {
    let loader = loader();
    let err = loader.load_bytes(&spec("40-junk", "inline", "", roomy()), b"not wasm", &facts()).unwrap_err();
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err}");
    assert_eq!(err.to_string(), "policy 40-junk: not a WebAssembly file (no \\0asm header)");
    let core = loader.load_bytes(&spec("42-core", "inline", "", roomy()), b"(module)", &facts()).unwrap_err();
    assert!(matches!(core, LoadError::CoreModule { .. }), "{core}");
    let err = loader.load_bytes(&spec("41-empty", "inline", "", roomy()), b"(component)", &facts()).unwrap_err();
    assert!(matches!(err, LoadError::World { .. }), "{err}");
}

#[test]
fn the_engine_falls_back_to_on_demand_allocation_when_the_pool_cannot_be_reserved() {
    // A million concurrent calls of 4 GiB memories: far more address space
    // than any machine has.
    let settings = EngineSettings {
        max_concurrent_calls: 1_000_000,
        max_memory_mib: 4096,
        cache_dir: None,
        ..EngineSettings::default()
    };
    let loader = PolicyLoader::new(Arc::new(PolicyEngine::new(&settings).expect("the engine still starts")));
    let engine = loader.engine();
    assert!(matches!(engine.allocator(), Allocator::OnDemand(why) if !why.is_empty()), "{:?}", engine.allocator());
    let f = facts();
    let p = loader.load(&spec("10-annotate", guests::ANNOTATE, "x", roomy()), &f).unwrap();
    assert!(engine
        .call(&p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(1))
        .outcome
        .unwrap()
        .is_ok());
    // The default settings get the pool.
    let defaults = EngineSettings { cache_dir: None, ..EngineSettings::default() };
    assert_eq!(PolicyEngine::new(&defaults).unwrap().allocator(), &Allocator::Pooling);
}

/// A call that keeps returning to the host (here, reading its settings and
/// the node's facts, or logging a 16 MiB line, without a pause) on a CPU it
/// shares is checked ever more often as it nears its limit, each check
/// registering the next one: however close the last one falls, the call is
/// interrupted at its limit. (The deadline thread once advanced the epoch
/// for a check in the instant between its registration and the store's
/// wait for the next epoch; the store then waited for an advance that never
/// came, and such a policy ran on until its memory ran out, 8 s later.)
#[test]
fn a_call_is_interrupted_however_close_its_last_check_falls() {
    let loader = loader();
    let engine = loader.engine();
    let f = facts();
    let policies: Vec<_> = ["facts", "log"]
        .iter()
        .map(|case| {
            let limits = Limits { timeout_ms: 50, fuel: u64::MAX / 2, memory_mib: 64, ..Limits::default() };
            let p = loader.load(&spec("20-hostile", guests::HOSTILE, &format!("host-call:{case}"), limits), &f);
            (*case, p.unwrap())
        })
        .collect();
    let busy = BusyCpu::here(1);
    let mut wrong = Vec::new();
    for (case, p) in &policies {
        for run in 0..20 {
            let r = engine.call(p, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(30));
            match r.outcome {
                // Cut for time, past the limit by at most one host call. A
                // 16 MiB line costs the host tens of milliseconds to take in,
                // and a few hundred in a debug build on a CPU shared with the
                // other tests and the busy loop; the failure this guards
                // against ran on for seconds, until the memory ran out (a
                // memory limit, not a time limit), so the bound is loose.
                Err(e) if e.limit() == Some(LimitKind::Time) && r.charged < Duration::from_millis(50 + 1500) => {
                    assert!(e.to_string().contains("time limit of 50 ms exceeded"), "{case} run {run}: {e}");
                }
                other => {
                    wrong.push(format!("{case} run {run}: {other:?} after {:?}, {:?} charged", r.elapsed, r.charged))
                }
            }
        }
    }
    drop(busy);
    assert!(wrong.is_empty(), "not cut at the time limit: {wrong:#?}");
}

/// A loader is given its registry client by whoever makes it (the host's
/// composition root); one made without it does not make one of its own
/// with default settings: a policy named by reference fails to load, named,
/// at the pull step, and nothing is asked of any registry.
#[test]
fn a_loader_without_a_registry_client_refuses_a_policy_named_by_reference() {
    let reference = nri_wasm::registry::OciRef::parse("oci://registry.invalid/policies/annotate:1").unwrap();
    let spec = PolicySpec {
        source: Some(nri_wasm::registry::Source { reference, public_keys: None, strict_permissions: false }),
        ..spec("10-remote", "unused.wasm", "", roomy())
    };
    let err = loader().load(&spec, &facts()).unwrap_err();
    assert!(matches!(&err, LoadError::Registry { policy, .. } if policy == "10-remote"), "{err}");
    assert_eq!(err.step(), "pull");
    assert!(err.to_string().contains(nri_wasm::policy::load::loader::NO_REGISTRY), "{err}");
}
