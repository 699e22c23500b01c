//! The default grant covers a field only as far as the container's own pod
//! could have asked for it. A policy that declares every capability
//! (`tests/guests/bounds`) returns, one field at a time, a value just past
//! that bound: with the default grant the reply is refused as the policy's
//! invalid output naming the field and the capability that covers it; with
//! that capability granted it goes through to the runtime. Values just
//! inside every bound go through under the default grant, and names that are
//! no cgroup file are refused whatever is granted. An update of another
//! container needs `updates` and is held to the same bounds, measured
//! against that container as the node view has it.

use std::sync::Arc;
use std::time::Duration;

use nri_wasm::node::view::{NodeView, ViewLimits};
use nri_wasm::policy::chain::{Chain, ChainError, ChainSettings, EvalContext, Evaluated, Outcome};
use nri_wasm::policy::engine::CompiledPolicy;
use nri_wasm::policy::spec::caps::{CapSet, Capability};
use nri_wasm::policy::spec::manifest::{OnError, PolicySpec};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, policy_spec, roomy, shared_loader};

/// A generous chain budget: these tests are about what is refused, not when.
const BUDGET: Duration = Duration::from_secs(10);

fn load(mode: &str, on_error: OnError, grant: CapSet) -> CompiledPolicy {
    let spec = PolicySpec { grant, ..policy_spec("20-bounds", guests::BOUNDS, mode, on_error, roomy()) };
    shared_loader().load(&spec, &Arc::new(nri_wasm_e2e::test_facts())).unwrap_or_else(|e| panic!("{e}"))
}

/// The captured request, its container given what the bounds are measured
/// against: an OOM score of 500, `RLIMIT_NOFILE` 1024, the cpuset `0-1` on
/// memory node 0 (the capture has 32 MiB of memory and no swap).
fn request() -> pb::CreateContainerRequest {
    let mut req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    let c = req.container.mut_or_insert_default();
    c.rlimits = vec![pb::POSIXRlimit { type_: "RLIMIT_NOFILE".into(), hard: 1024, soft: 1024, ..Default::default() }];
    let linux = c.linux.mut_or_insert_default();
    linux.oom_score_adj = Some(pb::OptionalInt { value: 500, ..Default::default() }).into();
    let cpu = linux.resources.mut_or_insert_default().cpu.mut_or_insert_default();
    cpu.cpus = "0-1".into();
    cpu.mems = "0".into();
    let memory = linux.resources.as_ref().and_then(|r| r.memory.as_ref()).expect("the capture has memory limits");
    assert_eq!(memory.limit.value, memory.swap.value, "the capture's container has no swap");
    req
}

fn create(policy: CompiledPolicy) -> Result<Evaluated<pb::CreateContainerResponse>, ChainError> {
    create_in(policy, nri_wasm_e2e::eval_cx(BUDGET))
}

fn create_in(policy: CompiledPolicy, cx: EvalContext) -> Result<Evaluated<pb::CreateContainerResponse>, ChainError> {
    let chain = Chain::new(vec![policy], ChainSettings::default());
    nri_wasm_e2e::block_on(chain.create_container(&cx, &request()))
}

/// A context whose node view (synchronized, so the host knows every
/// container) has `c-other`, on the cpuset `2-3`.
fn with_c_other() -> EvalContext {
    let mut other = pb::Container { id: "c-other".into(), pod_sandbox_id: "pod-other".into(), ..Default::default() };
    let resources = other.linux.mut_or_insert_default().resources.mut_or_insert_default();
    resources.cpu.mut_or_insert_default().cpus = "2-3".into();
    let mut view = NodeView::new(ViewLimits::default());
    view.synchronize(&[], &[other]);
    let view = Arc::new(view);
    let mut cx = nri_wasm_e2e::eval_cx(BUDGET);
    let known: nri_wasm::merge::Known = view.clone();
    cx.env.view = view;
    cx.known = known;
    cx
}

/// The refusal of `mode` under `grant`: the policy's invalid output, naming
/// it, the event, each of `says` and the capability.
fn refused(mode: &str, grant: CapSet, cx: EvalContext, capability: &str, says: &[&str]) {
    let err = create_in(load(mode, OnError::Fail, grant), cx).unwrap_err();
    let ChainError::Failed { failure, .. } = &err else { panic!("{mode}: {err:?}") };
    let message = failure.to_string();
    assert_eq!(failure.kind(), "invalid", "{mode}: {message}");
    assert!(message.contains("20-bounds") && message.contains("CreateContainer"), "{mode}: {message}");
    assert!(message.contains(&format!("capability `{capability}`")), "{mode}: {message}");
    for s in says {
        assert!(message.contains(s), "{mode}: the refusal says {s:?}: {message}");
    }
}

/// Each mode of the guest past a bound: the capability that covers it, and
/// what the refusal must say of the field.
const BEYOND: &[(&str, &str, &str)] = &[
    ("unified-procs", "cgroup-files", "\"cgroup.procs\""),
    ("unified-kill", "cgroup-files", "\"cgroup.kill\""),
    ("unified-subtree", "cgroup-files", "\"cgroup.subtree_control\""),
    ("unified-partition", "cgroup-files", "\"cpuset.cpus.partition\""),
    ("unified-swap", "cgroup-files", "\"memory.swap.max\""),
    ("update-own-unified", "cgroup-files", "update[0].resources.unified"),
    ("oom-protect", "oom-protect", "-1000 is below the container's own 500"),
    ("oom-killer-off", "oom-protect", "memory.disable-oom-killer: the OOM killer off"),
    ("swappiness", "swap-raise", "memory.swappiness: 0, which no pod can ask for"),
    ("rlimit-raise", "rlimits-raise", "above the container's own hard limit 1024"),
    ("rlimit-new-type", "rlimits-raise", "RLIMIT_RTPRIO"),
    ("sched-fifo", "realtime", "adjust.linux.scheduler"),
    ("sched-nice", "realtime", "nice -20"),
    ("sched-uclamp", "realtime", "UtilClampMin"),
    ("io-rt", "realtime", "adjust.linux.io-priority"),
    ("cpu-rt", "realtime", "real-time runtime"),
    ("annotation-runtime", "runtime-annotations", "run.oci.keep_original_groups"),
    ("annotation-systemd", "runtime-annotations", "org.systemd.property.DeviceAllow"),
    ("annotation-remove-cri", "runtime-annotations", "io.kubernetes.cri.container-type"),
    ("annotation-kubernetes", "runtime-annotations", "kubernetes.io/config.source"),
    ("annotation-wasm", "runtime-annotations", "\"module.wasm.image/variant\" is read by OCI runtimes"),
    ("annotation-bytes", "runtime-annotations", "adjust.annotations: 266266 bytes, more than the 262144"),
    ("resctrl", "resctrl", ""),
    ("swap-unlimited", "swap-raise", "-1 (unlimited)"),
    ("swap-more", "swap-raise", "more than the container's own 0"),
    ("swap-by-lower-limit", "swap-raise", "16777216 bytes of swap, more than the container's own 0"),
    ("cpuset-outside", "cpuset-any", "outside the container's own \"0-1\""),
    ("mems-outside", "cpuset-any", "cpu.mems"),
];

fn with(capability: &str) -> CapSet {
    CapSet::default_grant().union(CapSet::from_iter([Capability::from_name(capability).expect(capability)]))
}

#[test]
fn past_the_default_grant_each_field_needs_its_own_capability() {
    for (mode, capability, field) in BEYOND {
        let cap = Capability::from_name(capability).unwrap();
        assert!(cap.dangerous() && !CapSet::default_grant().contains(cap), "{capability} is off by default");
        let err = create(load(mode, OnError::Fail, CapSet::default_grant())).unwrap_err();
        let ChainError::Failed { failure, .. } = &err else { panic!("{mode}: {err:?}") };
        let message = failure.to_string();
        assert_eq!(failure.kind(), "invalid", "{mode}: {message}");
        assert!(message.contains("20-bounds") && message.contains("CreateContainer"), "{mode}: {message}");
        assert!(message.contains(&format!("capability `{capability}`")), "{mode}: {message}");
        assert!(message.contains(field), "{mode}: the refusal names the field ({field}): {message}");
    }
}

#[test]
fn granted_its_capability_each_field_reaches_the_runtime() {
    for (mode, capability, _) in BEYOND {
        if *mode == "update-own-unified" {
            // Past the capability check, the merge refuses what NRI refuses:
            // an update of the container being created.
            let err = create(load(mode, OnError::Fail, with(capability))).unwrap_err();
            assert!(err.to_string().contains("during its creation"), "{mode}: {err}");
            continue;
        }
        let Evaluated { value, .. } =
            create(load(mode, OnError::Fail, with(capability))).unwrap_or_else(|e| panic!("{mode}: {e}"));
        let adjust = value.adjust.as_ref().unwrap_or_else(|| panic!("{mode}: {value:?}"));
        assert!(adjust.env.iter().any(|e| e.key == "BOUNDS" && e.value == *mode), "{mode}: {adjust:?}");
        let linux = adjust.linux.as_ref();
        let resources = linux.and_then(|l| l.resources.as_ref());
        let reached = match *mode {
            "unified-procs" => resources.is_some_and(|r| r.unified.contains_key("cgroup.procs")),
            "oom-protect" => linux.and_then(|l| l.oom_score_adj.as_ref()).is_some_and(|o| o.value == -1000),
            "oom-killer-off" => resources
                .and_then(|r| r.memory.as_ref())
                .is_some_and(|m| m.disable_oom_killer.as_ref().is_some_and(|d| d.value)),
            "swappiness" => resources
                .and_then(|r| r.memory.as_ref())
                .is_some_and(|m| m.swappiness.as_ref().is_some_and(|s| s.value == 0)),
            "rlimit-raise" => adjust.rlimits.iter().any(|r| r.type_ == "RLIMIT_NOFILE" && r.hard == 1_048_576),
            "annotation-runtime" => adjust.annotations.contains_key("run.oci.keep_original_groups"),
            "cpuset-outside" => resources.and_then(|r| r.cpu.as_ref()).is_some_and(|c| c.cpus == "0-7"),
            "resctrl" => linux.is_some_and(|l| l.rdt.is_some()),
            _ => true,
        };
        assert!(reached, "{mode}: the granted field is in the reply: {value:?}");
    }
}

#[test]
fn a_refused_field_drops_the_whole_reply_under_on_error_ignore() {
    for (mode, capability, _) in BEYOND {
        let Evaluated { value, steps, .. } = create(load(mode, OnError::Ignore, CapSet::default_grant())).unwrap();
        assert!(value.adjust.as_ref().is_none_or(|a| a.env.is_empty()), "{mode}: nothing applied: {value:?}");
        assert!(value.update.is_empty(), "{mode}: {value:?}");
        match &steps[0].outcome {
            Outcome::Failed { failure, ignored: true } => {
                assert!(failure.to_string().contains(&format!("capability `{capability}`")), "{mode}: {failure}")
            }
            other => panic!("{mode}: {other:?}"),
        }
    }
}

#[test]
fn just_inside_every_bound_the_default_grant_takes_it_all() {
    let Evaluated { value, .. } =
        create(load("within", OnError::Fail, CapSet::default_grant())).unwrap_or_else(|e| panic!("{e}"));
    let adjust = value.adjust.into_option().expect("adjusted");
    let linux = adjust.linux.as_ref().expect("linux");
    let resources = linux.resources.as_ref().expect("resources");
    for file in ["memory.max", "cpu.weight", "hugetlb.2MB.max", "pids.max"] {
        assert!(resources.unified.contains_key(file), "{file}: {resources:?}");
    }
    assert_eq!(linux.oom_score_adj.as_ref().map(|o| o.value), Some(1000));
    assert_eq!(resources.cpu.as_ref().map(|c| c.cpus.as_str()), Some("1"));
    assert!(adjust.rlimits.iter().any(|r| r.type_ == "RLIMIT_NOFILE" && r.hard == 1024 && r.soft == 512));
    assert!(adjust.annotations.contains_key("example.com/bounded"));
    assert_eq!(adjust.annotations.get("example.com/full").map(String::len), Some((256 << 10) - 38), "at the bound");
    assert!(linux.scheduler.is_some() && linux.io_priority.is_some());
    let memory = resources.memory.as_ref().expect("memory");
    assert_eq!(memory.limit.value, memory.swap.value, "a limit set with its total: still no swap {memory:?}");
    // A lower limit with its total lowered too: no swap given, nothing
    // to grant (a lower limit alone is `swap-by-lower-limit` above).
    let Evaluated { value, .. } =
        create(load("lower-with-total", OnError::Fail, CapSet::default_grant())).unwrap_or_else(|e| panic!("{e}"));
    let adjust = value.adjust.into_option().expect("adjusted");
    let memory = adjust.linux.as_ref().and_then(|l| l.resources.as_ref()).and_then(|r| r.memory.as_ref());
    let memory = memory.expect("memory");
    assert_eq!((memory.limit.value, memory.swap.value), (16_777_216, 16_777_216));
}

#[test]
fn names_that_are_no_cgroup_file_are_refused_whatever_is_granted() {
    for mode in ["unified-traversal", "unified-v1"] {
        let err = create(load(mode, OnError::Fail, CapSet::all())).unwrap_err();
        let ChainError::Failed { failure, .. } = &err else { panic!("{mode}: {err:?}") };
        let message = failure.to_string();
        assert_eq!(failure.kind(), "invalid", "{mode}: {message}");
        assert!(message.contains("is not a cgroup interface file name"), "{mode}: {message}");
    }
}

/// `updates` lets a policy reach other containers, not past the bounds of
/// what it writes there: `cgroup.procs` in another container's cgroup
/// needs `cgroup-files` as in its own, and goes through once granted.
#[test]
fn an_update_of_another_container_needs_the_capabilities_of_its_fields() {
    let updates = with("updates");
    let says = ["update[0].resources.unified", "\"cgroup.procs\" is not one of the resource-control files"];
    refused("update-other-procs", updates, nri_wasm_e2e::eval_cx(BUDGET), "cgroup-files", &says);
    refused("update-other-procs", updates, with_c_other(), "cgroup-files", &says);
    // Without `updates`, that is what it lacks first.
    refused("update-other-procs", with("cgroup-files"), with_c_other(), "updates", &[]);

    let both = updates.union(with("cgroup-files"));
    for cx in [nri_wasm_e2e::eval_cx(BUDGET), with_c_other()] {
        let Evaluated { value, .. } =
            create_in(load("update-other-procs", OnError::Fail, both), cx).unwrap_or_else(|e| panic!("{e}"));
        let [update] = &value.update[..] else { panic!("one update: {value:?}") };
        assert_eq!(update.container_id, "c-other");
        let unified = update.linux.as_ref().and_then(|l| l.resources.as_ref()).map(|r| &r.unified);
        assert!(unified.is_some_and(|u| u.get("cgroup.procs").map(String::as_str) == Some("1")), "{value:?}");
    }
}

/// Another container's cpuset is its own in the node view: within it,
/// `updates` is enough; outside it, or for a container the host has no
/// record of, the update needs `cpuset-any`.
#[test]
fn another_containers_cpuset_is_measured_against_its_own() {
    let updates = with("updates");
    let Evaluated { value, .. } = create_in(load("update-other-cpus:3", OnError::Fail, updates), with_c_other())
        .unwrap_or_else(|e| panic!("{e}"));
    let cpus = value.update.first().and_then(|u| u.linux.as_ref()).and_then(|l| l.resources.as_ref());
    assert_eq!(cpus.and_then(|r| r.cpu.as_ref()).map(|c| c.cpus.as_str()), Some("3"), "{value:?}");
    let outside = ["update[0].resources.cpu.cpus: \"0-3\" is outside the container's own \"2-3\""];
    refused("update-other-cpus:0-3", updates, with_c_other(), "cpuset-any", &outside);
    let unknown = ["update[0].resources.cpu.cpus: \"3\" for a container the host has no record of"];
    refused("update-other-cpus:3", updates, nri_wasm_e2e::eval_cx(BUDGET), "cpuset-any", &unknown);
    let granted = updates.union(with("cpuset-any"));
    create_in(load("update-other-cpus:0-3", OnError::Fail, granted), with_c_other()).unwrap_or_else(|e| panic!("{e}"));
}
