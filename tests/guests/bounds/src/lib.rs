//! A policy that declares every capability and, on CreateContainer, returns
//! one field past what the default grant allows of it, in the way its
//! settings name (or, with `within`, every field just inside those bounds).
//! The default grant covers a field only as far as the container's own pod
//! could have asked for it (`host/src/policy/spec/bounds.rs`); past that the
//! host must refuse the reply naming the capability that covers it, and
//! accept it once that capability is granted (`tests/e2e/tests/bounds.rs`).
//! The test's container has an OOM score of 500, `RLIMIT_NOFILE` 1024, the
//! cpuset `0-1` on memory node 0, and 32 MiB of memory with no swap. The
//! `update-other-` modes update another container, `c-other`, which needs
//! `updates` and is held to the same bounds, measured against that one.
use nri_wasm_sdk::*;

nri_wasm_sdk::capabilities!(
    "env",
    "annotations",
    "args",
    "rlimits",
    "cpu",
    "memory",
    "hugepages",
    "blockio",
    "rdt",
    "unified",
    "pids",
    "oom-score-adj",
    "io-priority",
    "scheduler",
    "memory-policy",
    "deny",
    "cgroup-files",
    "oom-protect",
    "rlimits-raise",
    "realtime",
    "runtime-annotations",
    "resctrl",
    "swap-raise",
    "cpuset-any",
    "updates",
);

struct Bounds;

fn scheduler(policy: SchedulerPolicy, nice: i32, priority: i32, flags: Vec<SchedulerFlag>) -> LinuxScheduler {
    LinuxScheduler { policy, nice, priority, flags, runtime: 0, deadline: 0, period: 0 }
}

fn swap(limit: Option<i64>, swap: i64) -> LinuxMemory {
    LinuxMemory { limit, swap: Some(swap), ..LinuxMemory::default() }
}

/// The reply for `mode`, built on an adjustment that sets one env var.
fn reply(mode: &str, own: &str) -> Result<Reply, String> {
    let mut a = ContainerAdjustment::new().set_env("BOUNDS", mode);
    // Another container's cpuset, as the mode names it.
    if let Some(cpus) = mode.strip_prefix("update-other-cpus:") {
        let r = LinuxResources {
            cpu: Some(LinuxCpu { cpus: cpus.into(), ..LinuxCpu::default() }),
            ..LinuxResources::default()
        };
        return Ok(Reply::adjust(a).with_update(ContainerUpdate::new("c-other", r)));
    }
    match mode {
        // Past the default grant: each needs a capability of its own.
        "unified-procs" => a = a.set_unified("cgroup.procs", "1"),
        "unified-kill" => a = a.set_unified("cgroup.kill", "1"),
        "unified-subtree" => a = a.set_unified("cgroup.subtree_control", "+cpu +memory"),
        "unified-partition" => a = a.set_unified("cpuset.cpus.partition", "root"),
        "unified-swap" => a = a.set_unified("memory.swap.max", "max"),
        "oom-protect" => a = a.set_oom_score_adj(-1000),
        "rlimit-raise" => a = a.set_rlimit("RLIMIT_NOFILE", 1_048_576, 1_048_576),
        "rlimit-new-type" => a = a.set_rlimit("RLIMIT_RTPRIO", 99, 99),
        "sched-fifo" => a.linux_mut().scheduler = Some(scheduler(SchedulerPolicy::Fifo, 0, 50, vec![])),
        "sched-nice" => a.linux_mut().scheduler = Some(scheduler(SchedulerPolicy::Other, -20, 0, vec![])),
        "sched-uclamp" => {
            a.linux_mut().scheduler = Some(scheduler(SchedulerPolicy::Other, 0, 0, vec![SchedulerFlag::UtilClampMin]))
        }
        "io-rt" => a.linux_mut().io_priority = Some(IoPriority { class: IoPriorityClass::Rt, priority: 0 }),
        "cpu-rt" => {
            a.resources_mut().cpu = Some(LinuxCpu {
                realtime_runtime: Some(950_000),
                realtime_period: Some(1_000_000),
                ..LinuxCpu::default()
            })
        }
        "annotation-runtime" => a = a.set_annotation("run.oci.keep_original_groups", "1"),
        "annotation-systemd" => a = a.set_annotation("org.systemd.property.DeviceAllow", "'char-* rwm'"),
        "annotation-remove-cri" => a = a.remove_annotation("io.kubernetes.cri.container-type"),
        "annotation-kubernetes" => a = a.set_annotation("kubernetes.io/config.source", "file"),
        "annotation-wasm" => a = a.set_annotation("module.wasm.image/variant", "compat-smart"),
        // More than all of a pod's annotations may hold (256 KiB), in two.
        "annotation-bytes" => {
            a = a
                .set_annotation("example.com/a", &"a".repeat(200 << 10))
                .set_annotation("example.com/b", &"b".repeat(60 << 10))
        }
        "resctrl" => {
            a.linux_mut().rdt = Some(LinuxRdt {
                clos_id: Some("/".into()),
                schemata: Some(vec!["L3:0=fffff".into()]),
                enable_monitoring: None,
                remove: false,
            })
        }
        "swap-unlimited" => a.resources_mut().memory = Some(swap(None, -1)),
        // cgroup v1 knobs no pod can ask for.
        "oom-killer-off" => {
            a.resources_mut().memory = Some(LinuxMemory { disable_oom_killer: Some(true), ..LinuxMemory::default() })
        }
        "swappiness" => a.resources_mut().memory = Some(LinuxMemory { swappiness: Some(0), ..LinuxMemory::default() }),
        "swap-more" => a.resources_mut().memory = Some(swap(Some(33_554_432), 1_073_741_824)),
        // Half the memory limit, the total left as it was: the other half
        // becomes swap.
        "swap-by-lower-limit" => {
            a.resources_mut().memory = Some(LinuxMemory { limit: Some(16_777_216), ..LinuxMemory::default() })
        }
        "cpuset-outside" => a = a.set_cpuset("0-7"),
        "mems-outside" => a = a.set_cpuset_mems("1"),
        // An update of its own container goes through the same bounds.
        "update-own-unified" => {
            let r = LinuxResources {
                unified: vec![KeyValue { key: "cgroup.procs".into(), value: "1".into() }],
                ..LinuxResources::default()
            };
            return Ok(Reply::adjust(a).with_update(ContainerUpdate::new(own, r)));
        }
        // An update of another container: `updates` does not stand for
        // `cgroup-files`.
        "update-other-procs" => {
            let r = LinuxResources {
                unified: vec![KeyValue { key: "cgroup.procs".into(), value: "1".into() }],
                ..LinuxResources::default()
            };
            return Ok(Reply::adjust(a).with_update(ContainerUpdate::new("c-other", r)));
        }
        // Never a cgroup file, whatever is granted: refused as invalid output.
        "unified-traversal" => a = a.set_unified("../../../cgroup.procs", "1"),
        "unified-v1" => a = a.set_unified("tasks", "1"),
        // Just inside every bound: the default grant takes all of it.
        "within" => {
            a = a
                .set_unified("memory.max", "67108864")
                .set_unified("cpu.weight", "50")
                .set_unified("hugetlb.2MB.max", "0")
                .set_unified("pids.max", "64")
                .set_oom_score_adj(1000)
                .set_rlimit("RLIMIT_NOFILE", 512, 1024)
                .set_annotation("example.com/bounded", "yes")
                // With this one, exactly what a pod's annotations may hold.
                .set_annotation("example.com/full", &"f".repeat((256 << 10) - 19 - 3 - 16))
                .remove_annotation("example.com/ctr-role")
                .set_cpuset("1")
                .set_cpuset_mems("0");
            a.linux_mut().scheduler = Some(scheduler(SchedulerPolicy::Batch, 5, 0, vec![SchedulerFlag::ResetOnFork]));
            a.linux_mut().io_priority = Some(IoPriority { class: IoPriorityClass::Be, priority: 7 });
            let cpu = a.resources_mut().cpu.get_or_insert_with(LinuxCpu::default);
            cpu.shares = Some(2);
            // A bigger memory limit with still no swap.
            a.resources_mut().memory = Some(LinuxMemory {
                // The OOM killer on, as it is: no change.
                disable_oom_killer: Some(false),
                ..swap(Some(67_108_864), 67_108_864)
            });
        }
        // Half the memory, and its total with it: still no swap.
        "lower-with-total" => a.resources_mut().memory = Some(swap(Some(16_777_216), 16_777_216)),
        other => return Err(format!("unknown mode {other:?}")),
    }
    Ok(Reply::adjust(a))
}

impl Policy for Bounds {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn create_container(e: &Event) -> Result<Reply, String> {
        reply(settings(), &e.container_meta().id)
    }
}

export_policy!(Bounds);
