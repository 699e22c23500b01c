//! The Rust SDK's offline checks agree with the host.
//!
//! A policy's native tests trust `nri_wasm_sdk::testing` to say what the
//! host would do with its output: refuse it (output the host does not
//! accept, or a field another policy set) or merge it, and who then owns
//! each field of the container, as a validating policy sees it. The SDK
//! repeats the host's rules in its own code (`testing/check.rs`,
//! `testing/owners.rs`), so nothing but a test keeps the two equal.
//!
//! This one generates chains of adjustments from up to four policies,
//! drawn from a few keys so that policies collide often, with some values
//! the host refuses, and folds every chain twice: with the host's
//! conversion of the policy's reply (`nri_wasm::convert`, WIT lists into
//! protobuf maps, which refuses a map key given twice) and merge
//! (`nri_wasm::merge::CreateMerge`), and with the SDK's
//! `Validation::try_adjust` (on the same adjustment built with the SDK's
//! builders). After every policy both must have refused (for the same
//! reason: invalid output, or a conflict with the same earlier policy) or
//! accepted, both must record the same owner of every field, and what a
//! validating policy sees of the merged adjustment must be equal: the map
//! fields (annotations, sysctl) and namespaces, and env, mounts and
//! devices by key (removal markers included).

use std::collections::BTreeMap;

use nri_wasm::merge::{CreateMerge, MergeError};
use nri_wasm::policy::bindings::wit;
use nri_wasm_api::api as pb;
use nri_wasm_sdk::testing::{Refusal, Validation};
use nri_wasm_sdk::{ContainerAdjustment, Hook, HookStage, LinuxDevice, LinuxNamespace, Mount};
use proptest::prelude::*;
use protobuf::MessageField;

const POLICIES: [&str; 4] = ["10-a", "20-b", "30-c", "40-d"];
const POD: &str = "pod-1";
const CREATED: &str = "ctr-new";

/// One change a policy's adjustment makes. Keys come from small sets so
/// that policies meet on them; some values are ones the host refuses.
#[derive(Debug, Clone)]
enum Op {
    SetEnv(&'static str, String),
    RemoveEnv(&'static str),
    SetAnnotation(&'static str, String),
    RemoveAnnotation(&'static str),
    SetSysctl(&'static str, String),
    RemoveSysctl(&'static str),
    AddDevice(&'static str),
    RemoveDevice(&'static str),
    SetNamespace(&'static str, &'static str),
    RemoveNamespace(&'static str),
    AddMount(&'static str),
    RemoveMount(&'static str),
    Rlimit(&'static str, u64),
    MemoryLimit(i64),
    CpuShares(u64),
    OomScoreAdj(i64),
    AddHook(&'static str),
    Unified(&'static str, String),
    ReplaceArgs(Vec<&'static str>),
    SetArgs(Vec<&'static str>),
}

fn op() -> impl Strategy<Value = Op> {
    let env = prop::sample::select(vec!["A", "B", "C", "BAD=NAME"]);
    let annotation = prop::sample::select(vec!["example.com/a", "example.com/b"]);
    let mount = prop::sample::select(vec!["/data", "/cache", "relative/path"]);
    let rlimit = prop::sample::select(vec!["RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_BOGUS"]);
    let unified = prop::sample::select(vec!["cpu.weight", "memory.high"]);
    let sysctl = prop::sample::select(vec!["net.core.somaxconn", "kernel.shm_rmid_forced"]);
    let device = prop::sample::select(vec!["/dev/fuse", "/dev/kvm", "dev/relative"]);
    let namespace = prop::sample::select(vec!["network", "ipc"]);
    let ns_path = prop::sample::select(vec!["", "/proc/1/ns/net", "relative"]);
    let hook = prop::sample::select(vec!["/bin/audit", "/bin/gpu", "not-absolute"]);
    let value = prop::sample::select(vec!["1", "x", "with space", ""]).prop_map(str::to_string);
    let args = prop::collection::vec(prop::sample::select(vec!["run", "--fast", ""]), 0..3);
    prop_oneof![
        (env.clone(), value.clone()).prop_map(|(k, v)| Op::SetEnv(k, v)),
        env.prop_map(Op::RemoveEnv),
        (annotation.clone(), value.clone()).prop_map(|(k, v)| Op::SetAnnotation(k, v)),
        annotation.prop_map(Op::RemoveAnnotation),
        (sysctl.clone(), value.clone()).prop_map(|(k, v)| Op::SetSysctl(k, v)),
        sysctl.prop_map(Op::RemoveSysctl),
        device.clone().prop_map(Op::AddDevice),
        device.prop_map(Op::RemoveDevice),
        (namespace.clone(), ns_path).prop_map(|(k, p)| Op::SetNamespace(k, p)),
        namespace.prop_map(Op::RemoveNamespace),
        mount.clone().prop_map(Op::AddMount),
        mount.prop_map(Op::RemoveMount),
        (rlimit, 0u64..5000).prop_map(|(k, v)| Op::Rlimit(k, v)),
        prop_oneof![Just(-1i64), Just(0i64), 4096i64..1 << 32].prop_map(Op::MemoryLimit),
        prop_oneof![Just(0u64), 2u64..262_144, Just(1u64 << 40)].prop_map(Op::CpuShares),
        prop_oneof![-1000i64..=1000, Just(-1001i64), Just(1001i64)].prop_map(Op::OomScoreAdj),
        hook.prop_map(Op::AddHook),
        (unified, value).prop_map(|(k, v)| Op::Unified(k, v)),
        args.clone().prop_map(Op::ReplaceArgs),
        args.prop_map(Op::SetArgs),
    ]
}

/// The chain: each policy's ops, in order.
fn chain() -> impl Strategy<Value = Vec<Vec<Op>>> {
    prop::collection::vec(prop::collection::vec(op(), 0..5), 1..=POLICIES.len())
}

/// One policy's adjustment, built twice: with the SDK's builders, and as
/// the list form a policy hands the host (the host's WIT record), which
/// the host converts to its protobuf reply as it converts a policy's
/// output: `Err` where that conversion refuses it (a key given twice in a
/// map field, removal markers included).
fn build(ops: &[Op]) -> (ContainerAdjustment, Result<pb::ContainerAdjustment, String>) {
    let mut sdk = ContainerAdjustment::new();
    let mut host = pb::ContainerAdjustment::default();
    let (mut annotations, mut sysctl, mut unified) = (Vec::new(), Vec::new(), Vec::new());
    for op in ops {
        match op {
            Op::SetEnv(k, v) => {
                sdk = sdk.set_env(k, v);
                host.env.push(kv(k, v));
            }
            Op::RemoveEnv(k) => {
                sdk = sdk.remove_env(k);
                host.env.push(kv(&format!("-{k}"), ""));
            }
            Op::SetAnnotation(k, v) => {
                sdk = sdk.set_annotation(k, v);
                annotations.push(wit_kv(k, v));
            }
            Op::RemoveAnnotation(k) => {
                sdk = sdk.remove_annotation(k);
                annotations.push(wit_kv(&format!("-{k}"), ""));
            }
            Op::SetSysctl(k, v) => {
                sdk = sdk.set_sysctl(k, v);
                sysctl.push(wit_kv(k, v));
            }
            Op::RemoveSysctl(k) => {
                sdk = sdk.remove_sysctl(k);
                sysctl.push(wit_kv(&format!("-{k}"), ""));
            }
            Op::AddDevice(p) => {
                sdk = sdk.add_device(LinuxDevice::new(p, "c", 10, 229));
                host.linux.mut_or_insert_default().devices.push(pb::LinuxDevice {
                    path: p.to_string(),
                    type_: "c".into(),
                    major: 10,
                    minor: 229,
                    ..Default::default()
                });
            }
            Op::RemoveDevice(p) => {
                sdk.linux_mut().devices.push(LinuxDevice::new(&format!("-{p}"), "", 0, 0));
                host.linux
                    .mut_or_insert_default()
                    .devices
                    .push(pb::LinuxDevice { path: format!("-{p}"), ..Default::default() });
            }
            Op::SetNamespace(t, path) => {
                sdk.linux_mut().namespaces.push(LinuxNamespace { type_: t.to_string(), path: path.to_string() });
                host.linux.mut_or_insert_default().namespaces.push(pb::LinuxNamespace {
                    type_: t.to_string(),
                    path: path.to_string(),
                    ..Default::default()
                });
            }
            Op::RemoveNamespace(t) => {
                sdk.linux_mut().namespaces.push(LinuxNamespace { type_: format!("-{t}"), path: String::new() });
                host.linux
                    .mut_or_insert_default()
                    .namespaces
                    .push(pb::LinuxNamespace { type_: format!("-{t}"), ..Default::default() });
            }
            Op::AddMount(d) => {
                sdk = sdk.add_mount(Mount::bind("/srv", d, &["rbind"]));
                host.mounts.push(pb::Mount {
                    destination: d.to_string(),
                    source: "/srv".into(),
                    type_: "bind".into(),
                    options: vec!["rbind".into()],
                    ..Default::default()
                });
            }
            Op::RemoveMount(d) => {
                sdk = sdk.remove_mount(d);
                host.mounts.push(pb::Mount { destination: format!("-{d}"), ..Default::default() });
            }
            Op::Rlimit(k, v) => {
                sdk = sdk.set_rlimit(k, *v, *v);
                host.rlimits.push(pb::POSIXRlimit { type_: k.to_string(), soft: *v, hard: *v, ..Default::default() });
            }
            Op::MemoryLimit(v) => {
                sdk = sdk.set_memory_limit(*v);
                resources(&mut host).memory.mut_or_insert_default().limit =
                    MessageField::some(pb::OptionalInt64 { value: *v, ..Default::default() });
            }
            Op::CpuShares(v) => {
                sdk = sdk.set_cpu_shares(*v);
                resources(&mut host).cpu.mut_or_insert_default().shares =
                    MessageField::some(pb::OptionalUInt64 { value: *v, ..Default::default() });
            }
            Op::OomScoreAdj(v) => {
                sdk = sdk.set_oom_score_adj(*v);
                host.linux.mut_or_insert_default().oom_score_adj =
                    MessageField::some(pb::OptionalInt { value: *v, ..Default::default() });
            }
            Op::AddHook(path) => {
                sdk = sdk.add_hook(HookStage::Prestart, Hook::new(path));
                host.hooks
                    .mut_or_insert_default()
                    .prestart
                    .push(pb::Hook { path: path.to_string(), ..Default::default() });
            }
            Op::Unified(k, v) => {
                sdk = sdk.set_unified(k, v);
                resources(&mut host);
                unified.push(wit_kv(k, v));
            }
            Op::ReplaceArgs(args) => {
                sdk = sdk.replace_args(args);
                host.args = std::iter::once(String::new()).chain(args.iter().map(|a| a.to_string())).collect();
            }
            Op::SetArgs(args) => {
                sdk.args = args.iter().map(|a| a.to_string()).collect();
                host.args = sdk.args.clone();
            }
        }
    }
    if !sysctl.is_empty() {
        host.linux.mut_or_insert_default();
    }
    let mut list = wit::ContainerAdjustment::from(&host);
    list.annotations = annotations;
    if let Some(linux) = list.linux.as_mut() {
        linux.sysctl = sysctl;
        if let Some(r) = linux.resources.as_mut() {
            r.unified = unified;
        }
    }
    (sdk, pb::ContainerAdjustment::try_from(list).map_err(|e| e.to_string()))
}

fn wit_kv(key: &str, value: &str) -> wit::KeyValue {
    wit::KeyValue { key: key.into(), value: value.into() }
}

fn kv(key: &str, value: &str) -> pb::KeyValue {
    pb::KeyValue { key: key.into(), value: value.into(), ..Default::default() }
}

fn resources(a: &mut pb::ContainerAdjustment) -> &mut pb::LinuxResources {
    a.linux.mut_or_insert_default().resources.mut_or_insert_default()
}

/// What became of one policy's output.
#[derive(Debug, PartialEq)]
enum Verdict {
    Merged,
    Invalid,
    /// Refused for a field set before by `first` (the policy merged, `second`).
    Conflict {
        first: String,
        second: String,
    },
    /// The host refused the created container's update (not generated here).
    Other(String),
}

fn host_verdict(result: Result<(), MergeError>) -> Verdict {
    match result {
        Ok(()) => Verdict::Merged,
        Err(MergeError::Invalid { .. }) => Verdict::Invalid,
        // A policy that contradicts itself made an invalid reply: the
        // chain refuses it as such (policy/chain/pipeline.rs).
        Err(MergeError::Conflict { first, second, .. }) if first == second => Verdict::Invalid,
        Err(MergeError::Conflict { first, second, .. }) => Verdict::Conflict { first, second },
        Err(e) => Verdict::Other(e.to_string()),
    }
}

fn sdk_verdict(result: Result<(), Refusal>) -> Verdict {
    match result {
        Ok(()) => Verdict::Merged,
        Err(Refusal::Invalid(_)) => Verdict::Invalid,
        Err(Refusal::Conflict(c)) => Verdict::Conflict { first: c.first, second: c.second },
    }
}

/// (field, key) -> owner, of the created container.
type Owners = BTreeMap<(i32, String), String>;

fn host_owners(merge: &CreateMerge<'_>) -> Owners {
    let mut out = Owners::new();
    if let Some(owners) = merge.owners().owners.get(CREATED) {
        for (field, plugin) in &owners.simple {
            out.insert((*field, String::new()), plugin.clone());
        }
        for (field, compound) in &owners.compound {
            for (key, plugin) in &compound.owners {
                out.insert((*field, key.clone()), plugin.clone());
            }
        }
    }
    out
}

fn sdk_owners(v: &Validation) -> Owners {
    v.owners()
        .iter()
        .filter(|o| o.container_id == CREATED)
        .map(|o| ((o.field, o.key.clone()), o.plugin.clone()))
        .collect()
}

fn request() -> pb::CreateContainerRequest {
    pb::CreateContainerRequest {
        pod: MessageField::some(pb::PodSandbox { id: POD.into(), name: "pod".into(), ..Default::default() }),
        container: MessageField::some(pb::Container {
            id: CREATED.into(),
            pod_sandbox_id: POD.into(),
            name: "app".into(),
            env: vec!["A=0".into(), "PATH=/bin".into()],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn validation() -> Validation {
    let pod = nri_wasm_sdk::PodSandbox { id: POD.into(), name: "pod".into(), ..Default::default() };
    let container = nri_wasm_sdk::Container {
        id: CREATED.into(),
        pod_sandbox_id: POD.into(),
        name: "app".into(),
        env: vec!["A=0".into(), "PATH=/bin".into()],
        ..Default::default()
    };
    Validation::new(pod, container)
}

/// What a validating policy sees of the merged adjustment, markers
/// included: annotations and sysctl, namespaces by type, env, mounts by
/// destination (their source), devices by path (their type).
type Merged = [BTreeMap<String, String>; 6];

fn host_merged(merge: &CreateMerge<'_>) -> Merged {
    let adjust = merge.clone().finish().adjust.into_option().unwrap_or_default();
    let linux = adjust.linux.into_option().unwrap_or_default();
    let map = |m: std::collections::HashMap<String, String>| m.into_iter().collect();
    let namespaces = linux.namespaces.into_iter().map(|n| (n.type_, n.path)).collect();
    let env = adjust.env.into_iter().map(|kv| (kv.key, kv.value)).collect();
    let mounts = adjust.mounts.into_iter().map(|m| (m.destination, m.source)).collect();
    let devices = linux.devices.into_iter().map(|d| (d.path, d.type_)).collect();
    [map(adjust.annotations), map(linux.sysctl), namespaces, env, mounts, devices]
}

fn sdk_merged(v: &Validation) -> Merged {
    let adjust = v.clone().build().adjust.unwrap_or_default();
    let linux = adjust.linux.unwrap_or_default();
    let map = |l: Vec<nri_wasm_sdk::KeyValue>| l.into_iter().map(|kv| (kv.key, kv.value)).collect();
    let namespaces = linux.namespaces.into_iter().map(|n| (n.type_, n.path)).collect();
    let env = map(adjust.env);
    let mounts = adjust.mounts.into_iter().map(|m| (m.destination, m.source)).collect();
    let devices = linux.devices.into_iter().map(|d| (d.path, d.type_)).collect();
    [map(adjust.annotations), map(linux.sysctl), namespaces, env, mounts, devices]
}

/// Folds `chain` both ways; the first disagreement, described.
fn disagreement(chain: &[Vec<Op>]) -> Option<String> {
    let req = request();
    let mut host = CreateMerge::new(&req);
    let mut sdk = validation();
    for (policy, ops) in POLICIES.iter().zip(chain) {
        let (sdk_adjust, host_adjust) = build(ops);
        let (h, host_text) = match host_adjust {
            Ok(adjust) => {
                let reply = pb::CreateContainerResponse { adjust: MessageField::some(adjust), ..Default::default() };
                let result = host.apply(policy, &reply);
                let text = format!("{result:?}");
                (host_verdict(result), text)
            }
            Err(e) => (Verdict::Invalid, format!("conversion: {e}")),
        };
        let sdk_result = sdk.try_adjust(policy, &sdk_adjust);
        let sdk_text = format!("{sdk_result:?}");
        let s = sdk_verdict(sdk_result);
        if h != s {
            return Some(format!("{policy} {ops:?}: host {host_text}, SDK {sdk_text}"));
        }
        let (h, s) = (host_owners(&host), sdk_owners(&sdk));
        if h != s {
            return Some(format!("after {policy} {ops:?}: owners by the host {h:?}, by the SDK {s:?}"));
        }
        let (h, s) = (host_merged(&host), sdk_merged(&sdk));
        if h != s {
            return Some(format!("after {policy} {ops:?}: merged by the host {h:?}, by the SDK {s:?}"));
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_sdk_refuses_and_records_owners_as_the_host_does(chain in chain()) {
        if let Some(why) = disagreement(&chain) {
            prop_assert!(false, "{}", why);
        }
    }
}

/// The cases the property depends on, written out: a test that could not
/// fail would not show that the generator reaches them.
#[test]
fn conflicts_removals_and_invalid_output_are_reached() {
    use Op::*;
    let cases: Vec<Vec<Vec<Op>>> = vec![
        // Two policies set one variable: the second is refused, naming the first.
        vec![vec![SetEnv("A", "1".into())], vec![SetEnv("A", "2".into())]],
        // A removal of what an earlier policy set clears it; the remover may set it again.
        vec![vec![SetEnv("B", "1".into())], vec![RemoveEnv("B"), SetEnv("B", "2".into())]],
        // A removal of what nobody set changes no owner.
        vec![vec![RemoveEnv("C")], vec![SetEnv("C", "1".into())]],
        // Removed and set in one reply: the annotation's owner is overridden.
        vec![
            vec![SetAnnotation("example.com/a", "1".into())],
            vec![RemoveAnnotation("example.com/a"), SetAnnotation("example.com/a", "2".into())],
        ],
        // Hooks accumulate; args cleared with a leading "" are taken over.
        vec![vec![AddHook("/bin/audit"), SetArgs(vec!["run"])], vec![AddHook("/bin/gpu"), ReplaceArgs(vec!["--fast"])]],
        // Output the host refuses.
        vec![vec![AddMount("relative/path")], vec![OomScoreAdj(1001)], vec![Rlimit("RLIMIT_BOGUS", 1)]],
        // A map key given twice is refused by the conversion, before the
        // merge could find the conflict on env; markers count as keys.
        vec![
            vec![SetEnv("A", "1".into())],
            vec![
                SetEnv("A", "2".into()),
                SetSysctl("net.core.somaxconn", "1".into()),
                SetSysctl("net.core.somaxconn", "2".into()),
            ],
            vec![RemoveAnnotation("example.com/a"), RemoveAnnotation("example.com/a")],
        ],
        // A removal alone keeps the earlier value and adds the marker.
        vec![vec![SetAnnotation("example.com/a", "1".into())], vec![RemoveAnnotation("example.com/a")]],
        // Removing a namespace claims it; so does adding a device.
        vec![vec![SetNamespace("network", "")], vec![RemoveNamespace("network")]],
        vec![vec![AddDevice("/dev/fuse")], vec![AddDevice("/dev/fuse")]],
    ];
    let mut verdicts = Vec::new();
    for chain in &cases {
        assert_eq!(disagreement(chain), None);
        let req = request();
        let mut host = CreateMerge::new(&req);
        for (policy, ops) in POLICIES.iter().zip(chain) {
            let verdict = match build(ops).1 {
                Ok(adjust) => {
                    let reply =
                        pb::CreateContainerResponse { adjust: MessageField::some(adjust), ..Default::default() };
                    host_verdict(host.apply(policy, &reply))
                }
                Err(_) => Verdict::Invalid,
            };
            verdicts.push(verdict);
        }
    }
    assert_eq!(
        verdicts,
        [
            Verdict::Merged,
            Verdict::Conflict { first: "10-a".into(), second: "20-b".into() },
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Invalid,
            Verdict::Invalid,
            Verdict::Invalid,
            Verdict::Merged,
            Verdict::Invalid,
            Verdict::Invalid,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Merged,
            Verdict::Conflict { first: "10-a".into(), second: "20-b".into() },
            Verdict::Merged,
            Verdict::Conflict { first: "10-a".into(), second: "20-b".into() },
        ]
    );
}
