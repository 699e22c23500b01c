//! Hot reload under load: while the simulator sends CreateContainer after
//! CreateContainer, the policy directory goes through 500 cycles of add,
//! replace, break, fix and remove, each followed by a reload.
//!
//! What must hold:
//! - no event fails or goes unanswered because of a reload;
//! - every event is answered by exactly one chain: the two cycling policies
//!   always change version together (in one reload), so a reply carrying
//!   one's version N and the other's version M != N was served by a mix of
//!   two chains;
//! - the policy that never changes answers every event (a reload never
//!   leaves a gap), and unchanged policies keep their compiled form;
//! - a broken file never displaces the good version it was meant to
//!   replace: the event right after the break still carries that version;
//! - the host's heap returns to its baseline: what 500 cycles of compiled
//!   versions, chains and reports allocated is all freed.
//!
//! The test binary (`memory.rs`) counts its heap with a global allocator of
//! its own; the test holds the binary alone so that nothing else allocates
//! meanwhile.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nri_sim::RuntimeProfile;
use nri_wasm::config::Config;
use nri_wasm::policy::load::compile::Compiler;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{engine_settings, Harness};
use nri_wasm_test_support::guests;
use nri_wasm_test_support::heap::live;

const CYCLES: usize = 500;

/// The annotate guest, and the same component with a custom section
/// appended: another file, another digest, the same behaviour.
fn variants() -> [Vec<u8>; 2] {
    let bytes = std::fs::read(guests::ANNOTATE).expect("annotate guest");
    let mut other = bytes.clone();
    // A custom section (id 0): size, name length, name, payload.
    let payload = b"nri-wasm reload test";
    let name = b"note";
    other.push(0);
    other.push((1 + name.len() + payload.len()) as u8);
    other.push(name.len() as u8);
    other.extend_from_slice(name);
    other.extend_from_slice(payload);
    [bytes, other]
}

fn install(dir: &Path, policy: &str, wasm: &[u8], tag: &str) {
    std::fs::write(dir.join(format!("{policy}.toml")), format!("settings = \"{tag}\"\n")).unwrap();
    std::fs::write(dir.join(format!("{policy}.wasm")), wasm).unwrap();
}

fn remove(dir: &Path, policy: &str) {
    std::fs::remove_file(dir.join(format!("{policy}.wasm"))).unwrap();
    std::fs::remove_file(dir.join(format!("{policy}.toml"))).unwrap();
}

/// The versions of the cycling policies `a` and `b` a reply carries (the
/// annotate guest sets `example.com/<settings>`), and whether the steady
/// policy answered.
fn versions(reply: &pb::CreateContainerResponse) -> (Option<String>, Option<String>, bool) {
    let keys: Vec<&String> = reply.adjust.as_ref().map(|a| a.annotations.keys().collect()).unwrap_or_default();
    let version = |p: &str| keys.iter().find_map(|k| k.strip_prefix(&format!("example.com/{p}-")).map(String::from));
    (version("a"), version("b"), keys.iter().any(|k| *k == "example.com/steady"))
}

#[test]
fn five_hundred_reload_cycles_under_load_keep_every_answer_consistent() {
    let _alone = crate::ALONE.blocking_lock();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        let [plain, marked] = variants();
        install(&policies, "10-steady", &plain, "steady");

        let mut config = Config::default();
        // No registry cache: root's default is the node's /var/cache/nri-wasm-oci.
        config.registry.cache_dir = None;
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = engine_settings();
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let mut reloads = host.reloader.reloads();
        reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
        let h = Harness::start_policies(RuntimeProfile::v0_12(), host.dispatcher.clone()).await;
        let conn = h.connect().await;
        conn.synchronize(&[], &[], 0).await.unwrap();

        // Load: CreateContainer after CreateContainer until told to stop,
        // polled with the cycles in this task (the connection is not Send).
        let stop = AtomicBool::new(false);
        let answered = AtomicU64::new(0);
        let load = async {
            let mut n = 0;
            let mut problems = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let pod = nri_sim::workload::pod(n % 50);
                let ctr = nri_sim::workload::container(&pod, n);
                n += 1;
                match conn.create_container(&pod, &ctr).await {
                    Ok(reply) => {
                        let (a, b, steady) = versions(&reply);
                        if a != b {
                            problems.push(format!("event {n}: a at {a:?}, b at {b:?}: two chains"));
                        }
                        if !steady {
                            problems.push(format!("event {n}: the steady policy did not answer"));
                        }
                    }
                    Err(e) => problems.push(format!("event {n} failed: {e}")),
                }
                answered.fetch_add(1, Ordering::Relaxed);
                if problems.len() > 20 {
                    break;
                }
            }
            problems
        };
        // One event, in step with the test: what the chain does now.
        let probe = |n: usize| {
            let conn = &conn;
            async move {
                let pod = nri_sim::workload::pod(100 + n % 10);
                let ctr = nri_sim::workload::container(&pod, 10_000 + n);
                versions(&conn.create_container(&pod, &ctr).await.expect("probe event answered"))
            }
        };

        let cycles = async {
            let mut baseline = None;
            for cycle in 0..CYCLES {
                // A warm-up of 20 cycles fills what is filled once (thread
                // stacks, the pool, the cache index, the simulator's buffers).
                if cycle == 20 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    baseline = Some(live());
                    assert!(baseline > Some(0), "the counting allocator is this binary's (memory.rs)");
                }
                let (v, w) = (format!("v{cycle}"), format!("v{cycle}r"));
                let wasm = if cycle % 2 == 0 { &plain } else { &marked };

                install(&policies, "20-a", &plain, &format!("a-{v}"));
                install(&policies, "30-b", &plain, &format!("b-{v}"));
                let r = host.reloader.reload().await;
                assert_eq!(r.added, ["20-a", "30-b"], "cycle {cycle}, add: {r:?}");
                assert_eq!(r.unchanged, ["10-steady"], "cycle {cycle}, add: {r:?}");
                assert_eq!(probe(cycle).await, (Some(v.clone()), Some(v.clone()), true));

                install(&policies, "20-a", wasm, &format!("a-{w}"));
                install(&policies, "30-b", wasm, &format!("b-{w}"));
                let r = host.reloader.reload().await;
                assert_eq!(r.replaced, ["20-a", "30-b"], "cycle {cycle}, replace: {r:?}");
                assert!(r.is_clean(), "cycle {cycle}, replace: {r:?}");
                assert_eq!(probe(cycle).await, (Some(w.clone()), Some(w.clone()), true));

                std::fs::write(policies.join("20-a.wasm"), b"\0asm\x0d\0\x01\0 truncated by a careless copy").unwrap();
                let r = host.reloader.reload().await;
                assert_eq!(r.refused.len(), 1, "cycle {cycle}, break: {r:?}");
                assert_eq!(r.refused[0].0, "20-a");
                assert!(!r.installed, "cycle {cycle}: a refused version installed a chain: {r:?}");
                assert_eq!(
                    probe(cycle).await,
                    (Some(w.clone()), Some(w.clone()), true),
                    "cycle {cycle}: broken file won"
                );

                std::fs::write(policies.join("20-a.wasm"), wasm).unwrap();
                let r = host.reloader.reload().await;
                assert!(r.is_clean(), "cycle {cycle}, fix: {r:?}");
                assert_eq!(probe(cycle).await, (Some(w.clone()), Some(w.clone()), true));

                remove(&policies, "20-a");
                remove(&policies, "30-b");
                let r = host.reloader.reload().await;
                assert_eq!(r.removed, ["20-a", "30-b"], "cycle {cycle}, remove: {r:?}");
                assert_eq!(probe(cycle).await, (None, None, true));
            }
            stop.store(true, Ordering::Relaxed);
            baseline.unwrap()
        };
        let (problems, baseline) = tokio::join!(load, cycles);
        assert!(problems.is_empty(), "{problems:#?}");
        let events = answered.load(Ordering::Relaxed);
        assert!(events >= CYCLES as u64, "only {events} events ran alongside the reloads");

        tokio::time::sleep(Duration::from_millis(50)).await;
        let end = live();
        // Slack for what grows with the number of events, not reloads (the
        // simulator's and the test's own counters) and allocator rounding.
        let slack = 512 * 1024;
        assert!(
            end <= baseline + slack,
            "the heap grew from {baseline} to {end} bytes over {CYCLES} reload cycles ({events} events)"
        );
        eprintln!("{CYCLES} cycles, {events} events under load; heap {baseline} -> {end} bytes");
        drop(conn);
        h.shutdown().await;
    });
}
