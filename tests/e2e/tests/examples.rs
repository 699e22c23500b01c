//! The example policies of `example-policies/` through the real host: each
//! compiled component runs, behind the policies the case puts before it in
//! the chain, on the captured containerd CreateContainer edited as the case
//! says, and must give exactly what its native unit tests expect.
//!
//! The cases are the examples' own `src/cases.rs`, included here as they
//! are included by the examples' native tests: one table, two runs, so the
//! native build (the SDK's test host) and the WebAssembly build (this host)
//! are held to the same adjustments, denials and settings errors. A reply
//! is compared as the sorted lines of `nri_wasm_sdk::testing::describe`,
//! written here for the host's protobuf reply in the same format.
//! Policies earlier in the chain (`Edit::Earlier*`) are played by the test
//! guest `replay`. Every case runs once more over the wire, through the
//! runtime simulator; all seven stateless examples run together as an
//! operator would deploy them; and the two stateful ones, `exclusive-cpus`
//! and `colocation-qos`, run on the captured node against the simulator's
//! ground truth (`node_state.rs` has their long randomised runs).

use std::sync::Arc;
use std::time::Duration;

use nri_sim::node::{NodeModel, SimRuntime};
use nri_sim::RuntimeProfile;
use nri_wasm::policy::call::errors::CallErrorKind;
use nri_wasm::policy::chain::{Chain, ChainError, ChainSettings, Evaluated};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::engine::{CompiledPolicy, Facts};
use nri_wasm::policy::load::errors::LoadError;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_components::examples;
use nri_wasm_e2e::{guests, policy_spec, shared_engine as engine, shared_loader, Harness};
use protobuf::MessageField;

use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_test_support::cases::{earlier, request};

mod ulimit_adjuster {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/ulimit-adjuster/src/cases.rs");
}

mod device_injector {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/device-injector/src/cases.rs");
}

mod hook_injector {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/hook-injector/src/cases.rs");
}

mod qos_class {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/qos-class/src/cases.rs");
}

mod deny_host_sockets {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/deny-host-sockets/src/cases.rs");
}

mod pod_metadata_env {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/pod-metadata-env/src/cases.rs");
}

mod adjustment_validator {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/adjustment-validator/src/cases.rs");
}

mod exclusive_cpus {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/exclusive-cpus/src/cases.rs");
}

mod allowed_images {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/allowed-images/src/cases.rs");
}

mod colocation_qos {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/colocation-qos/src/cases.rs");
}

/// An example: its component, its name in the chain, settings and cases.
#[derive(Debug, Clone, Copy)]
struct Example {
    wasm: &'static str,
    policy: &'static str,
    settings: &'static str,
    cases: &'static [Case],
}

const ULIMIT_ADJUSTER: Example = Example {
    wasm: examples::ULIMIT_ADJUSTER,
    policy: ulimit_adjuster::POLICY,
    settings: ulimit_adjuster::SETTINGS,
    cases: ulimit_adjuster::CASES,
};
const DEVICE_INJECTOR: Example = Example {
    wasm: examples::DEVICE_INJECTOR,
    policy: device_injector::POLICY,
    settings: device_injector::SETTINGS,
    cases: device_injector::CASES,
};
const HOOK_INJECTOR: Example = Example {
    wasm: examples::HOOK_INJECTOR,
    policy: hook_injector::POLICY,
    settings: hook_injector::SETTINGS,
    cases: hook_injector::CASES,
};
const QOS_CLASS: Example = Example {
    wasm: examples::QOS_CLASS,
    policy: qos_class::POLICY,
    settings: qos_class::SETTINGS,
    cases: qos_class::CASES,
};
const DENY_HOST_SOCKETS: Example = Example {
    wasm: examples::DENY_HOST_SOCKETS,
    policy: deny_host_sockets::POLICY,
    settings: deny_host_sockets::SETTINGS,
    cases: deny_host_sockets::CASES,
};
const POD_METADATA_ENV: Example = Example {
    wasm: examples::POD_METADATA_ENV,
    policy: pod_metadata_env::POLICY,
    settings: pod_metadata_env::SETTINGS,
    cases: pod_metadata_env::CASES,
};
const ADJUSTMENT_VALIDATOR: Example = Example {
    wasm: examples::ADJUSTMENT_VALIDATOR,
    policy: adjustment_validator::POLICY,
    settings: adjustment_validator::SETTINGS,
    cases: adjustment_validator::CASES,
};

const EXCLUSIVE_CPUS: Example = Example {
    wasm: examples::EXCLUSIVE_CPUS,
    policy: exclusive_cpus::POLICY,
    settings: exclusive_cpus::SETTINGS,
    cases: exclusive_cpus::CASES,
};
const COLOCATION_QOS: Example = Example {
    wasm: examples::COLOCATION_QOS,
    policy: colocation_qos::POLICY,
    settings: colocation_qos::SETTINGS,
    cases: colocation_qos::CASES,
};

const ALLOWED_IMAGES: Example = Example {
    wasm: examples::ALLOWED_IMAGES,
    policy: allowed_images::POLICY,
    settings: allowed_images::SETTINGS,
    cases: allowed_images::CASES,
};

/// All seven, in chain order (`allowed-images` is left out: it refuses the
/// captured container, whose image is Docker Hub's).
const ALL: [Example; 7] = [
    DENY_HOST_SOCKETS,
    QOS_CLASS,
    HOOK_INJECTOR,
    DEVICE_INJECTOR,
    ULIMIT_ADJUSTER,
    POD_METADATA_ENV,
    ADJUSTMENT_VALIDATOR,
];

fn facts() -> Arc<Facts> {
    Arc::new(nri_wasm_e2e::test_facts())
}

/// Limits no loaded machine reaches: these tests are about answers, not
/// time.
fn limits() -> Limits {
    Limits { timeout_ms: 5_000, ..Limits::default() }
}

fn load(name: &str, wasm: &str, settings: &str) -> Result<CompiledPolicy, LoadError> {
    shared_loader().load(&policy_spec(name, wasm, settings, OnError::Fail, limits()), &facts())
}

fn create(chain: &Chain, req: &pb::CreateContainerRequest) -> Result<pb::CreateContainerResponse, ChainError> {
    let cx = nri_wasm_e2e::eval_cx(Duration::from_secs(10));
    nri_wasm_e2e::block_on(chain.create_container(&cx, req)).map(|Evaluated { value, .. }| value)
}

/// The chain of a case: the earlier policies it names, then the example.
fn chain_of(example: &Example, case: &Case) -> Chain {
    let mut policies: Vec<CompiledPolicy> = earlier(case)
        .into_iter()
        .map(|(name, script)| load(name, guests::REPLAY, &script).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    policies.push(load(example.policy, example.wasm, case.settings).unwrap_or_else(|e| panic!("{}: {e}", case.name)));
    Chain::new(policies, ChainSettings::default())
}

/// Runs a case through the host: `Ok(lines)` of the chain's reply, or the
/// example's denial.
fn run(example: &Example, case: &Case) -> Result<Vec<String>, String> {
    let chain = chain_of(example, case);
    match create(&chain, &request(case)) {
        Ok(resp) => Ok(describe(&resp)),
        Err(ChainError::Denied { policy, reason, .. }) if policy == example.policy => Err(reason),
        Err(other) => panic!("case {:?}: {other}", case.name),
    }
}

/// The error `configure` gave for `settings`, as the host reports it when
/// loading the policy (the policy's own text, after the host's prefix).
fn settings_error(policy: &str, wasm: &str, settings: &str) -> String {
    match load(policy, wasm, settings) {
        Err(LoadError::Init { error, .. }) => match error.kind {
            CallErrorKind::Init { reason } => reason,
            other => panic!("settings {settings:?}: {policy}'s configure failed otherwise: {other}"),
        },
        Err(other) => panic!("settings {settings:?}: {other}"),
        Ok(_) => panic!("settings {settings:?} were accepted"),
    }
}

fn check(example: &Example) {
    assert!(!example.cases.is_empty());
    for case in example.cases {
        match case.expect {
            Expect::Settings(error) => {
                assert_eq!(settings_error(example.policy, example.wasm, case.settings), error, "case {:?}", case.name)
            }
            Expect::Deny(reason) => assert_eq!(run(example, case), Err(reason.to_string()), "case {:?}", case.name),
            Expect::Lines(lines) => {
                let mut want: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                want.sort();
                assert_eq!(run(example, case), Ok(want), "case {:?}", case.name);
            }
        }
    }
}

#[test]
fn ulimit_adjuster() {
    check(&ULIMIT_ADJUSTER);
}

#[test]
fn device_injector() {
    check(&DEVICE_INJECTOR);
}

#[test]
fn hook_injector() {
    check(&HOOK_INJECTOR);
}

#[test]
fn qos_class() {
    check(&QOS_CLASS);
}

#[test]
fn deny_host_sockets() {
    check(&DENY_HOST_SOCKETS);
}

#[test]
fn pod_metadata_env() {
    check(&POD_METADATA_ENV);
}

#[test]
fn adjustment_validator() {
    check(&ADJUSTMENT_VALIDATOR);
}

#[test]
fn exclusive_cpus() {
    check(&EXCLUSIVE_CPUS);
}

#[test]
fn colocation_qos() {
    check(&COLOCATION_QOS);
}

/// The image field (NRI 0.12.2) and the CRI annotation that stands in for
/// it on NRI 0.12.0 runtimes, through the real host.
#[test]
fn allowed_images() {
    check(&ALLOWED_IMAGES);
}

/// The first case of every example is the captured request with the
/// README's settings.
fn as_captured(example: &Example) -> &'static [&'static str] {
    let case = &example.cases[0];
    assert!(case.edits.is_empty() && case.settings == example.settings, "{}: {:?}", example.policy, case.name);
    match case.expect {
        Expect::Lines(lines) => lines,
        other => panic!("{}: {other:?}", example.policy),
    }
}

fn all_seven() -> Chain {
    let policies =
        ALL.iter().map(|e| load(e.policy, e.wasm, e.settings).unwrap_or_else(|err| panic!("{err}"))).collect();
    Chain::new(policies, ChainSettings::default())
}

/// All seven as an operator would deploy them, through the runtime
/// simulator: the captured pod gets the audit hook, which the validator
/// refuses until the pod opts in; then it gets what each example gives it
/// alone. A container mounting containerd's socket is refused first of all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_seven_through_the_runtime_simulator() {
    all_seven_on(RuntimeProfile::v0_12()).await;
}

/// The same on iSulad (NRI v0.6.1, no validation, events through
/// StateChange): the validator still refuses, inside the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_seven_through_an_isulad_runtime() {
    all_seven_on(RuntimeProfile::isulad()).await;
}

async fn all_seven_on(profile: RuntimeProfile) {
    let chain = all_seven();
    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain, (*facts()).clone(), 4));
    let h = Harness::start(profile, dispatcher).await;
    let conn = h.connect().await;
    let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    let (mut pod, mut ctr) = (req.pod.clone().unwrap(), req.container.clone().unwrap());

    let err = conn.create_container(&pod, &ctr).await.unwrap_err();
    let message = err.status().map(|s| s.message().to_string()).unwrap_or_else(|| err.to_string());
    assert!(message.contains("policy 90-adjustment-validator denied"), "{message}");
    assert!(
        message.contains(
            "30-hook-injector added OCI hooks (prestart /usr/local/bin/audit-hook); pod \
             payments/billing-worker-7f9c5 has not opted in (adjustments.example.com/allow: hooks)"
        ),
        "{message}"
    );

    pod.annotations.insert("adjustments.example.com/allow".into(), "hooks".into());
    let reply = conn.create_container(&pod, &ctr).await.expect("accepted once the pod opts in");
    let mut want: Vec<String> = ALL.iter().flat_map(as_captured).map(|l| l.to_string()).collect();
    want.sort();
    assert_eq!(describe(&reply), want);
    assert!(want.iter().any(|l| l.starts_with("hook prestart[0] /usr/local/bin/audit-hook")), "{want:?}");
    assert!(want.iter().any(|l| l.starts_with("resources.unified cpu.idle")), "{want:?}");
    assert!(want.iter().any(|l| l.starts_with("env TEAM=")), "{want:?}");

    ctr.mounts.push(pb::Mount {
        destination: "/run/containerd/containerd.sock".into(),
        type_: "bind".into(),
        source: "/run/containerd/containerd.sock".into(),
        options: vec!["rbind".into()],
        ..Default::default()
    });
    let err = conn.create_container(&pod, &ctr).await.unwrap_err();
    let message = err.status().map(|s| s.message().to_string()).unwrap_or_else(|| err.to_string());
    assert!(message.contains("policy 10-deny-host-sockets denied"), "{message}");
    assert!(message.contains("mount of host path /run/containerd/containerd.sock"), "{message}");
    conn.close().await;
    h.shutdown().await;
}

/// Every case of every example once more, over the wire, each on a fresh
/// host (the stateful examples remember what they handed out): what the
/// runtime receives is what the chain answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cases_through_the_runtime_simulator() {
    let all = ALL.iter().chain([&EXCLUSIVE_CPUS, &COLOCATION_QOS]);
    for example in all {
        for case in example.cases.iter().filter(|c| !matches!(c.expect, Expect::Settings(_))) {
            let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain_of(example, case), (*facts()).clone(), 4));
            let h = Harness::start(RuntimeProfile::v0_12(), dispatcher).await;
            let conn = h.connect().await;
            let req = request(case);
            let result = conn.create_container(&req.pod, &req.container).await;
            match (case.expect, result) {
                (Expect::Lines(lines), Ok(reply)) => {
                    let mut want: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                    want.sort();
                    assert_eq!(describe(&reply), want, "case {:?}", case.name);
                }
                (Expect::Deny(reason), Err(err)) => {
                    let message = err.status().map(|s| s.message().to_string()).unwrap_or_default();
                    let denied = format!("policy {} denied ", example.policy);
                    assert!(message.contains(&denied) && message.ends_with(reason), "case {:?}: {message}", case.name);
                }
                (expect, got) => panic!("case {:?}: expected {expect:?}, got {got:?}", case.name),
            }
            conn.close().await;
            h.shutdown().await;
        }
    }
}

/// The captured Synchronize: one pod, its `worker` running on CPU 0 with a
/// quota of half a CPU, its `log-shipper` created.
fn captured_node() -> (Vec<pb::PodSandbox>, Vec<pb::Container>) {
    let sync: pb::SynchronizeRequest = nri_sim::fixtures::load("Synchronize").expect("fixture");
    (sync.pods, sync.containers)
}

const WORKER: &str = "c38113f0a74908b8f7db304db10360efc2620ad9fa7bb6390d77cdf1b9a14e05";
const SHIPPER: &str = "30b0437f019ae30f78454cc0837f6a9a921e3233c889a5e61dc889e74744cc46";

fn stateful_dispatcher(policy: CompiledPolicy) -> Arc<PolicyDispatcher> {
    Arc::new(PolicyDispatcher::new(engine(), Chain::new(vec![policy], ChainSettings::default()), (*facts()).clone(), 2))
}

/// `exclusive-cpus` on the captured node, against the runtime's ground
/// truth: the captured container gets two CPUs of its own and the node's
/// other containers leave them (in the CreateContainer reply); when it
/// stops they get them back (in the StopContainer reply), and a container
/// created to replace it gets them again; a removal the host did not see
/// the stop of releases them with UpdateContainers. The exact reply is the
/// one the native tests expect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_cpus_on_the_captured_node() {
    let policy = load(EXCLUSIVE_CPUS.policy, EXCLUSIVE_CPUS.wasm, EXCLUSIVE_CPUS.settings).unwrap();
    let d = stateful_dispatcher(policy);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let model = NodeModel::shared();
    let (pods, containers) = captured_node();
    {
        let mut m = model.lock().unwrap();
        m.pods.extend(pods.into_iter().map(|p| (p.id.clone(), p)));
        m.containers.extend(containers.into_iter().map(|c| (c.id.clone(), c)));
    }
    let rt = SimRuntime::new(h.connect().await, model.clone());
    rt.synchronize().await.unwrap();
    // Synchronize puts every container on the shared CPUs, all of them
    // while nothing is handed out (the worker was captured on CPU 0).
    for id in [WORKER, SHIPPER] {
        assert_eq!(rt.model().cpuset(id).as_deref(), Some("0-7"), "{id}");
    }

    let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    let mut pod = req.pod.clone().unwrap();
    pod.annotations.insert("exclusive-cpus.nri-wasm.io/count".into(), "2".into());
    rt.run_pod(&pod).await.unwrap();
    let reply = rt.conn.create_container(&pod, &req.container).await.expect("created");
    let mut want =
        vec!["annotation exclusive-cpus.nri-wasm.io/cpus=1-2".to_string(), "resources.cpu.cpus=1-2".to_string()];
    for id in [WORKER, SHIPPER] {
        want.push(format!("update {id} ignore_failure=true"));
        want.push(format!("update {id} resources.cpu.cpus=0,3-7"));
    }
    want.sort();
    assert_eq!(describe(&reply), want);
    // The runtime creates it with that reply.
    let created = {
        let mut m = rt.model();
        let done = pb::CreateContainerRequest { pod: MessageField::some(pod.clone()), ..req.clone() };
        m.create(&done, &reply)
    };
    assert_eq!(rt.model().cpuset(&created.id).as_deref(), Some("1-2"));
    assert_eq!(rt.model().cpuset(SHIPPER).as_deref(), Some("0,3-7"));
    rt.start(&created.id).await.unwrap();

    // It exits: the others grow back in the StopContainer reply, and the
    // kubelet's new container (the stopped one is kept a while) gets the
    // same CPUs.
    rt.stop(&created.id).await.unwrap();
    for id in [WORKER, SHIPPER] {
        assert_eq!(rt.model().cpuset(id).as_deref(), Some("0-7"), "{id} grew back");
    }
    assert!(d.states().snapshot(EXCLUSIVE_CPUS.policy).is_empty(), "every CPU is back in the pool");
    let mut again = req.container.clone().unwrap();
    again.id = "restarted".into();
    let restarted = rt.create(&again).await.expect("the CPUs are free again");
    assert_eq!(rt.model().cpuset(&restarted.id).as_deref(), Some("1-2"));
    assert_eq!(rt.model().cpuset(WORKER).as_deref(), Some("0,3-7"));

    // Removed without a stop the host saw (it was away, say): released too,
    // with UpdateContainers, since RemoveContainer has no reply.
    rt.remove(&created.id).await.unwrap();
    rt.remove(&restarted.id).await.unwrap();
    d.outbox_flushed(Duration::from_secs(2)).await;
    for id in [WORKER, SHIPPER] {
        assert_eq!(rt.model().cpuset(id).as_deref(), Some("0-7"), "{id} grew back");
    }
    assert!(d.states().snapshot(EXCLUSIVE_CPUS.policy).is_empty(), "every CPU is back in the pool");
    rt.close().await;
    h.shutdown().await;
}

fn cpu_of(model: &NodeModel, id: &str) -> (Option<i64>, Option<u64>, Option<String>) {
    let r = model.containers[id].linux.as_ref().and_then(|l| l.resources.as_ref());
    let cpu = r.and_then(|r| r.cpu.as_ref());
    (
        cpu.and_then(|c| c.quota.as_ref()).map(|q| q.value),
        cpu.and_then(|c| c.period.as_ref()).map(|p| p.value),
        r.and_then(|r| r.unified.get("memory.high").cloned()),
    )
}

/// `colocation-qos` on the captured node, its pod labelled offline: a
/// latency-critical pod starts (the captured CreateContainer) and the two
/// offline containers are throttled; a new offline container is created
/// throttled; then the latency-critical pod goes away while the host is
/// disconnected, and the Synchronize after the reconnection restores the
/// offline containers' own quota and period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocation_qos_on_the_captured_node_across_a_reconnection() {
    const CLASS: &str = "qos.nri-wasm.io/class";
    // policy.toml's settings with memory.high on, as on a cgroup v2 node.
    let settings = format!("{} memory-high=256M", COLOCATION_QOS.settings);
    let policy = load(COLOCATION_QOS.policy, COLOCATION_QOS.wasm, &settings).unwrap();
    let d = stateful_dispatcher(policy);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let model = NodeModel::shared();
    let (pods, containers) = captured_node();
    let offline_pod = {
        let mut m = model.lock().unwrap();
        for mut p in pods {
            p.labels.insert(CLASS.into(), "offline".into());
            m.pods.insert(p.id.clone(), p);
        }
        m.containers.extend(containers.into_iter().map(|c| (c.id.clone(), c)));
        m.pods.values().next().unwrap().clone()
    };
    let mut rt = SimRuntime::new(h.connect().await, model.clone());
    rt.synchronize().await.unwrap();
    assert_eq!(cpu_of(&rt.model(), WORKER), (Some(50_000), Some(100_000), None), "as captured");

    let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    let mut lc_pod = req.pod.clone().unwrap();
    lc_pod.labels.insert(CLASS.into(), "latency-critical".into());
    rt.run_pod(&lc_pod).await.unwrap();
    let lc = rt.create(&req.container).await.expect("created as it is");
    assert_eq!(cpu_of(&rt.model(), &lc.id), (None, None, None));
    rt.start(&lc.id).await.unwrap();
    d.outbox_flushed(Duration::from_secs(2)).await;
    for id in [WORKER, SHIPPER] {
        assert_eq!(cpu_of(&rt.model(), id), (Some(20_000), Some(100_000), Some("256M".into())), "{id} throttled");
    }

    // An offline container created now is created throttled.
    let mut late = captured_node().1.into_iter().find(|c| c.id == SHIPPER).unwrap();
    late.id = "late-offline".into();
    late.name = "late".into();
    late.linux.mut_or_insert_default().resources.mut_or_insert_default().cpu.mut_or_insert_default().quota =
        Some(pb::OptionalInt64 { value: 30_000, ..Default::default() }).into();
    assert_eq!(late.pod_sandbox_id, offline_pod.id);
    let late = rt.create(&late).await.unwrap();
    assert_eq!(cpu_of(&rt.model(), &late.id), (Some(20_000), Some(100_000), Some("256M".into())));
    rt.start(&late.id).await.unwrap();

    // The latency-critical pod goes away while the host is disconnected.
    rt.close().await;
    model.lock().unwrap().remove_pod(&lc_pod.id);
    rt = SimRuntime::new(h.connect().await, model.clone());
    rt.synchronize().await.unwrap();
    assert_eq!(cpu_of(&rt.model(), WORKER), (Some(50_000), Some(100_000), Some("max".into())), "restored");
    assert_eq!(cpu_of(&rt.model(), SHIPPER), (Some(-1), Some(100_000), Some("max".into())), "no quota again");
    assert_eq!(cpu_of(&rt.model(), "late-offline"), (Some(30_000), Some(100_000), Some("max".into())));
    let left = d.states().snapshot(COLOCATION_QOS.policy);
    assert!(left.is_empty(), "nothing left to restore: {:?}", left.iter().collect::<Vec<_>>());
    rt.close().await;
    h.shutdown().await;
}

/// The reply as the lines of `nri_wasm_sdk::testing::describe`, as `eval`
/// prints it.
fn describe(resp: &pb::CreateContainerResponse) -> Vec<String> {
    nri_wasm::cli::author::describe::reply(resp)
}
