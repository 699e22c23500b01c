//! Exploration aid: `PROBE=x.wasm PROBE_SETTINGS='a|b' cargo test -p nri-wasm-languages --test languages probe:: -- --nocapture`
//! loads a component through the host with each settings text and runs the
//! captured CreateContainer through it. Does nothing without `PROBE`.
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::call::event::CallEvent;
use nri_wasm::policy::engine::{CallEnv, EngineSettings, PolicyEngine};
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::PolicySpec;
use nri_wasm_api::api as pb;

#[test]
fn probe() {
    let Ok(path) = std::env::var("PROBE") else { return };
    let all = std::env::var("PROBE_SETTINGS").unwrap_or_default();
    let settings = EngineSettings {
        cache_dir: Some(std::env::temp_dir().join("nri-wasm-probe-cache")),
        compile_timeout_ms: 600_000,
        ..Default::default()
    };
    let loader = nri_wasm::policy::PolicyLoader::new(Arc::new(PolicyEngine::new(&settings).unwrap()));
    let engine = loader.engine();
    let bytes = std::fs::read(&path).unwrap();
    let pool = nri_wasm::policy::engine::PoolShape {
        core_instances: 1000,
        memories: 1000,
        tables: 1000,
        max_memory_bytes: 1 << 32,
    };
    let big = Limits { instances: 1000, memories: 1000, tables: 1000, memory_mib: 4000, ..Limits::default() };
    match nri_wasm::policy::load::inspect::inspect("probe", &bytes, &big, &pool) {
        Ok(i) => eprintln!(
            "inspection: core_instances={} memories={} tables={} largest_memory={} largest_table={} imports={:?}",
            i.core_instances, i.memories, i.tables, i.largest_initial_memory, i.largest_initial_table, i.imports
        ),
        Err(e) => eprintln!("inspection: {e}"),
    }
    let facts = Arc::new(nri_wasm_e2e::test_facts());
    for settings in all.split('|') {
        eprintln!("== settings {settings:?}");
        let spec = PolicySpec {
            settings: settings.into(),
            limits: Limits { memory_mib: 128, ..Limits::default() },
            ..PolicySpec::granting_all("10-probe", Path::new(&path))
        };
        let t = std::time::Instant::now();
        let p = match loader.load(&spec, &facts) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("LOAD ERROR: {e}");
                continue;
            }
        };
        eprintln!("loaded in {:?}", t.elapsed());
        let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").unwrap();
        for _ in 0..2 {
            let ev = CallEvent::container(
                wit::EventKind::CreateContainer,
                Arc::new(req.pod.clone().unwrap()),
                Arc::new(req.container.clone().unwrap()),
            );
            let r = engine.call(&p, ev, &CallEnv::detached(facts.clone()), None, Duration::from_secs(2));
            let text = format!("{:?}", r.outcome);
            eprintln!("{} fuel={} elapsed={:?}", &text[..text.len().min(600)], r.fuel_used, r.elapsed);
        }
    }
}
