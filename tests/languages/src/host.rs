//! The production engine and chain, set up for the language tests, and the
//! events they run.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::call::errors::CallErrorKind;
use nri_wasm::policy::call::event::CallEvent;
use nri_wasm::policy::chain::{Chain, ChainError, ChainSettings, EvalContext, Evaluated};
use nri_wasm::policy::engine::{CallEnv, CallReport, CompiledPolicy, EngineSettings, Facts, PolicyEngine};
use nri_wasm::policy::load::errors::LoadError;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::{OnError, PolicySpec};
use nri_wasm::policy::PolicyLoader;
use nri_wasm_api::api as pb;

/// The engine settings of the tests: the production defaults, with a cache
/// of compiled components under the build's target directory, and a longer
/// compile limit: SpiderMonkey's 25 MB component takes 10 s to compile on
/// an idle 2-core machine and well over the default 60 s on a busy one.
pub fn engine_settings() -> EngineSettings {
    EngineSettings {
        cache_dir: Some(PathBuf::from(crate::LANGUAGE_GUESTS).join("cache")),
        compile_timeout_ms: 600_000,
        ..EngineSettings::default()
    }
}

/// One engine per test binary.
pub fn engine() -> Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE.get_or_init(|| Arc::new(PolicyEngine::new(&engine_settings()).expect("engine"))).clone()
}

/// The loader over [`engine`], one per test binary.
pub fn loader() -> Arc<PolicyLoader> {
    static LOADER: OnceLock<Arc<PolicyLoader>> = OnceLock::new();
    LOADER.get_or_init(|| Arc::new(PolicyLoader::new(engine()))).clone()
}

/// The facts every test shows policies (the e2e tests' small node).
pub fn facts() -> Arc<Facts> {
    Arc::new(nri_wasm_e2e::test_facts())
}

/// The limits of the tests: the defaults, with time no loaded machine
/// reaches (these tests are about answers, not time).
pub fn limits() -> Limits {
    Limits { timeout_ms: 5_000, ..Limits::default() }
}

/// Loads a component as the loader would, with `settings`.
pub fn load(name: &str, wasm: &str, settings: &str) -> Result<CompiledPolicy, LoadError> {
    load_with(name, wasm, settings, limits(), OnError::Fail)
}

/// [`load`], pre-initialised (`preinitialize = true`): its calls start
/// from a snapshot taken after `configure`, if the host could take one
/// ([`CompiledPolicy::preinitialized`] says).
pub fn load_preinitialized(name: &str, wasm: &str, settings: &str) -> Result<CompiledPolicy, LoadError> {
    let spec = PolicySpec {
        settings: settings.into(),
        on_error: OnError::Fail,
        limits: limits(),
        preinitialize: true,
        ..PolicySpec::granting_all(name, wasm)
    };
    loader().load(&spec, &facts())
}

/// Loads a component with the given limits and on-error.
pub fn load_with(
    name: &str,
    wasm: &str,
    settings: &str,
    limits: Limits,
    on_error: OnError,
) -> Result<CompiledPolicy, LoadError> {
    let spec = PolicySpec { settings: settings.into(), on_error, limits, ..PolicySpec::granting_all(name, wasm) };
    loader().load(&spec, &facts())
}

/// The message a policy's `configure` refused its settings with, if that
/// is why it did not load.
pub fn settings_error(e: &LoadError) -> Option<String> {
    match e {
        LoadError::Init { error, .. } => match &error.kind {
            CallErrorKind::Init { reason } => Some(reason.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Runs CreateContainer through a chain as the host does for a runtime.
pub fn create(chain: &Chain, req: &pb::CreateContainerRequest) -> Result<pb::CreateContainerResponse, ChainError> {
    let engine = engine();
    let cx = EvalContext::new(engine.clone(), CallEnv::detached(facts()), Instant::now() + Duration::from_secs(30));
    engine.block_on(chain.create_container(&cx, req)).map(|Evaluated { value, .. }| value)
}

/// A chain of these policies, with the default chain settings.
pub fn chain(policies: Vec<CompiledPolicy>) -> Chain {
    Chain::new(policies, ChainSettings::default())
}

/// One call of `policy` on CreateContainer, outside a chain.
pub fn call(policy: &CompiledPolicy, req: &pb::CreateContainerRequest) -> CallReport {
    let event = CallEvent::container(
        wit::EventKind::CreateContainer,
        Arc::new(req.pod.clone().unwrap_or_default()),
        Arc::new(req.container.clone().unwrap_or_default()),
    );
    engine().call(policy, event, &CallEnv::detached(facts()), None, Duration::from_secs(30))
}

/// Every captured request of the shared fixtures that is a CreateContainer
/// (`{"event": "CreateContainer", "request": {...}}`), by file name.
pub fn create_container_fixtures() -> Vec<(String, pb::CreateContainerRequest)> {
    let dir = nri_sim::fixtures::dir().expect("fixture directory");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("reading the fixture directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if doc.get("event").and_then(|e| e.as_str()) != Some("CreateContainer") {
            continue;
        }
        let request = doc.get("request").unwrap_or_else(|| panic!("{}: no request", path.display()));
        let req: pb::CreateContainerRequest = protobuf_json_mapping::parse_from_str(&request.to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        out.push((name, req));
    }
    assert!(!out.is_empty(), "no CreateContainer fixture in {}", dir.display());
    out
}

/// Generated pods and containers shaped like containerd's, as requests.
pub fn generated(pods: usize, per_pod: usize) -> Vec<(String, pb::CreateContainerRequest)> {
    let w = nri_sim::workload::Workload::generate(pods, per_pod);
    w.containers
        .iter()
        .map(|c| {
            let pod = w.pods.iter().find(|p| p.id == c.pod_sandbox_id).expect("the container's pod").clone();
            let name = format!("generated {}/{}", pod.name, c.name);
            (
                name,
                pb::CreateContainerRequest {
                    pod: Some(pod).into(),
                    container: Some(c.clone()).into(),
                    ..Default::default()
                },
            )
        })
        .collect()
}

/// The reply as the lines of `nri_wasm_sdk::testing::describe`, as `eval`
/// prints it.
pub fn describe(resp: &pb::CreateContainerResponse) -> Vec<String> {
    nri_wasm::cli::author::describe::reply(resp)
}
