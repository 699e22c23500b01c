//! Pre-initialised policies (`preinitialize = true`,
//! `host/src/policy/load/snapshot.rs`), with the real rewrite and compiled
//! guests: a call starts from the state `configure` left and from nothing
//! any earlier call wrote, and a snapshot that cannot be taken honestly is
//! refused, named, and the policy runs as built.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::engine::{CallEnv, EngineSettings, Facts, PolicyEngine};
use nri_wasm::policy::spec::manifest::PolicySpec;
use nri_wasm::policy::{CompiledPolicy, PolicyLoader};
use nri_wasm_e2e::{create_event, guests, roomy};

fn spec(settings: &str, preinitialize: bool) -> PolicySpec {
    PolicySpec {
        settings: settings.into(),
        limits: roomy(),
        preinitialize,
        ..PolicySpec::new("30-preinit", Path::new(guests::PREINIT))
    }
}

fn facts() -> Arc<Facts> {
    Arc::new(nri_wasm_e2e::test_facts())
}

fn loader(settings: EngineSettings) -> PolicyLoader {
    PolicyLoader::new(Arc::new(PolicyEngine::new(&settings).expect("engine")))
}

/// The annotations `(configured, calls, heap)` of one call.
fn call(loader: &PolicyLoader, policy: &CompiledPolicy, facts: &Arc<Facts>) -> (String, String, String) {
    let report =
        loader.engine().call(policy, create_event(), &CallEnv::detached(facts.clone()), None, Duration::from_secs(2));
    let reply = report.outcome.expect("the call succeeds").expect("the policy allows");
    let annotations = reply.adjust.expect("an adjustment").annotations;
    let get = |key: &str| annotations.iter().find(|kv| kv.key == key).map(|kv| kv.value.clone()).expect(key);
    (get("preinit/configured"), get("preinit/calls"), get("preinit/heap"))
}

/// Loads `spec`, whose snapshot the host must refuse: checks that the
/// policy loads and runs as built (no call sees configure's mark, and each
/// counts itself once), and returns why.
fn refused(loader: &PolicyLoader, spec: &PolicySpec, facts: &Arc<Facts>) -> String {
    let p = loader.load(spec, facts).expect("the policy still loads");
    assert!(!p.preinitialized());
    assert_eq!(call(loader, &p, facts), ("0".into(), "1".into(), "1".into()), "as built");
    p.preinitialize_refused().expect("a reason").to_string()
}

#[test]
fn every_call_starts_from_the_state_configure_left_and_from_no_other_call() {
    let loader = loader(nri_wasm_e2e::engine_settings());
    let f = facts();
    // As built: no call has seen configure's writes, and none sees another's.
    let plain = loader.load(&spec("abc", false), &f).expect("load");
    assert!(!plain.preinitialized());
    for _ in 0..3 {
        assert_eq!(call(&loader, &plain, &f), ("0".into(), "1".into(), "1".into()));
    }
    // Pre-initialised: every call sees what configure stored (the length of
    // "abc" plus one, and its heap entry), and still nothing of the calls
    // before it, however many ran.
    let snap = loader.load(&spec("abc", true), &f).expect("load");
    assert!(snap.preinitialized(), "{:?}", snap.preinitialize_refused());
    assert_eq!(snap.preinitialize_refused(), None);
    assert_eq!(snap.events(), plain.events(), "the same subscription");
    for _ in 0..5 {
        assert_eq!(call(&loader, &snap, &f), ("4".into(), "1".into(), "2".into()));
    }
    // Interleaved with the plain policy, on the same engine and pool.
    for _ in 0..3 {
        assert_eq!(call(&loader, &plain, &f).0, "0");
        assert_eq!(call(&loader, &snap, &f), ("4".into(), "1".into(), "2".into()));
    }
}

#[test]
fn a_configure_that_keeps_a_host_handle_is_refused_a_snapshot_and_runs_as_built() {
    let loader = loader(nri_wasm_e2e::engine_settings());
    let f = facts();
    let why = refused(&loader, &spec("hold-stdout", true), &f);
    assert!(why.contains("host handles open"), "{why}");
}

#[test]
fn a_snapshot_larger_than_a_policy_file_may_be_is_refused() {
    // `fill` leaves 2 MiB of noise in memory: the snapshot's data segments
    // are over a `max-component-mib` of 1, though the component is not.
    let f = facts();
    let tight = loader(EngineSettings { max_component_mib: 1, ..nri_wasm_e2e::engine_settings() });
    let why = refused(&tight, &spec("fill", true), &f);
    assert!(why.contains("over max-component-mib (1 MiB)"), "{why}");
    // With room for it, the same policy is pre-initialised.
    let roomy = loader(nri_wasm_e2e::engine_settings());
    let p = roomy.load(&spec("fill", true), &f).expect("load");
    assert!(p.preinitialized(), "{:?}", p.preinitialize_refused());
    assert_eq!(call(&roomy, &p, &f), ("5".into(), "1".into(), "2".into()));
}

#[test]
fn a_failing_settings_step_still_fails_the_load() {
    // The plain `configure` runs first and decides whether the policy loads;
    // the snapshot is only tried for a policy that does.
    let loader = loader(nri_wasm_e2e::engine_settings());
    let spec = PolicySpec {
        settings: "two words".into(),
        limits: roomy(),
        preinitialize: true,
        ..PolicySpec::new("10-annotate", Path::new(guests::ANNOTATE))
    };
    let err = loader.load(&spec, &facts()).expect_err("bad settings");
    assert!(err.to_string().contains("configure (its settings step) failed"), "{err}");
}

#[test]
fn the_snapshot_step_is_bounded_like_a_call_and_names_the_limit() {
    // The plain `configure` of the faults guest passes with `ok`; the
    // snapshot step then runs the same policy with `init-loop`, as a
    // `configure` that behaves differently the second time would. It is
    // cut off at the policy's time limit, and the error says so.
    let loader = loader(nri_wasm_e2e::engine_settings());
    let f = facts();
    let spec = PolicySpec {
        settings: "ok".into(),
        limits: nri_wasm::policy::spec::limits::Limits { fuel: u64::MAX / 2, ..roomy() },
        ..PolicySpec::new("40-faulty", Path::new(guests::FAULTS))
    };
    let mut policy = loader.load(&spec, &f).expect("load");
    policy.spec.settings = "init-loop".into();
    let bytes = std::fs::read(guests::FAULTS).unwrap();
    let kinds = [wit::EventKind::CreateContainer];
    let err = loader.engine().block_on(loader.snapshot_for_tests(&policy, &bytes, &kinds, &f)).expect_err("cut off");
    let text = err.to_string();
    assert!(text.contains("configure failed in the instrumented instance") && text.contains("time limit"), "{text}");
    // The engine goes on: the policy as loaded still answers.
    let report =
        loader.engine().call(&policy, create_event(), &CallEnv::detached(f.clone()), None, Duration::from_secs(2));
    assert!(report.outcome.is_ok(), "{:?}", report.outcome);
}

#[test]
fn memories_of_millions_of_separate_runs_are_refused_before_the_rewrite() {
    // Every other byte over 12 MiB: the rewrite would keep a record of each
    // of 6.3 million runs; the host counts them while it copies the memory
    // out and stops at its limit.
    let loader = loader(nri_wasm_e2e::engine_settings());
    let f = facts();
    let why = refused(&loader, &spec("sparse", true), &f);
    let max = nri_wasm::policy::load::snapshot::MAX_RUNS;
    assert!(why.contains(&format!("more than {max} separate runs of non-zero bytes")), "{why}");
}

#[test]
fn a_memory_at_its_cap_is_refused_a_snapshot_not_a_panic() {
    // `configure` grows its memory to the cap: the accessor that hands the
    // memory over cannot take its page, and the snapshot is refused with
    // what failed.
    let loader = loader(nri_wasm_e2e::engine_settings());
    let f = facts();
    let limits = nri_wasm::policy::spec::limits::Limits { memory_mib: 16, ..roomy() };
    let why = refused(&loader, &PolicySpec { limits, ..spec("full", true) }, &f);
    assert!(why.contains("reading the instance's state failed") && why.contains("wasmtime:wizer/access"), "{why}");
}

#[test]
fn the_cache_keeps_what_the_next_load_of_a_pre_initialised_policy_needs() {
    // The component as built and the instrumented one are no loaded
    // policy's component once the snapshot replaces them, but the next load
    // needs both: pruning keeps them while the policy is in the directory,
    // and lets them go once it is not. Every entry is made two days old, so
    // pruning removes whatever it does not keep.
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let settings = EngineSettings { cache_dir: Some(cache.clone()), ..nri_wasm_e2e::engine_settings() };
    let loader = loader(settings);
    let f = facts();
    let p = loader.load(&spec("abc", true), &f).expect("load");
    assert!(p.preinitialized());
    let artifacts = || {
        let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .collect();
        found.sort();
        found
    };
    let age = || {
        let old = std::time::SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
        for path in artifacts() {
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        }
    };
    let before = artifacts();
    assert_eq!(before.len(), 2, "as built and instrumented: {before:?}");
    // A policy loaded and gone: its entry is what pruning may remove.
    drop(loader.load(&PolicySpec::new("10-noop", Path::new(guests::NOOP)), &f).expect("load"));
    assert_eq!(artifacts().len(), 3);
    age();
    let pruned = loader.prune_cache(&["30-preinit".to_string()]);
    assert_eq!(pruned.entries, 1, "the gone policy's entry only");
    assert_eq!(artifacts(), before);
    // The policy leaves the directory: nothing keeps its entries.
    drop(p);
    age();
    let pruned = loader.prune_cache(&[]);
    assert_eq!(pruned.entries, 2);
    assert!(artifacts().is_empty());
}

#[test]
fn a_configure_that_answers_other_events_the_second_time_is_refused_a_snapshot() {
    // The snapshot step compares what the instrumented `configure` answers
    // with what the plain one answered at load; given a plain answer of
    // no events, the guest's CreateContainer is a difference, named.
    let loader = loader(nri_wasm_e2e::engine_settings());
    let f = facts();
    let policy = loader.load(&spec("abc", false), &f).expect("load");
    let bytes = std::fs::read(guests::PREINIT).unwrap();
    let err = loader.engine().block_on(loader.snapshot_for_tests(&policy, &bytes, &[], &f)).expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("configure answered create-container in the instrumented instance"), "{text}");
    let kinds = [wit::EventKind::CreateContainer];
    let size =
        loader.engine().block_on(loader.snapshot_for_tests(&policy, &bytes, &kinds, &f)).expect("the same answer");
    assert!(size > bytes.len() / 2, "a whole component: {size} bytes");
}
