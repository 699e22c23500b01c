//! A reply described line by line: one line per setting, sorted.
//!
//! Lines name what is set and nothing else (an empty or `none` field has no
//! line), so two replies that mean the same to the runtime describe alike,
//! whatever their order or empty parts. The format (the end-to-end tests
//! describe the host's protobuf replies in exactly this format):
//!
//! ```text
//! annotation KEY=VALUE                      env NAME=VALUE
//! mount DEST type=T source=S options=["a", "b"]
//! hook STAGE[I] PATH args=[..] env=[..] timeout=N|-     (STAGE: prestart, createRuntime, ...)
//! rlimit RLIMIT_X soft=N hard=N             cdi VENDOR/CLASS=NAME
//! args ["", "a"]                            device PATH type=c major=N minor=N mode=OCTAL|- uid=N|- gid=N|-
//! resources.memory.limit=N  (reservation, swap, kernel, kernel_tcp, swappiness, disable_oom_killer, use_hierarchy)
//! resources.cpu.shares=N    (quota, period, realtime_runtime, realtime_period, cpus, mems)
//! resources.hugepage SIZE=N                 resources.unified FILE=VALUE
//! resources.blockio_class=C                 resources.rdt_class=C
//! resources.devices[I] allow=B type=T major=N|- minor=N|- access=A
//! resources.pids.limit=N                    cgroups_path=P
//! oom_score_adj=N                           io_priority class=N priority=N
//! seccomp default_action=A default_errno=N|- architectures=[..] flags=[..] listener_path=P listener_metadata=M
//! seccomp.syscalls[I] names=[..] action=A errno=N|- args=["index:value:value_two:op", ..]
//! namespace TYPE path=P                     sysctl KEY=VALUE
//! net_device HOST=NAME                      memory_policy mode=N nodes=S flags=[N, ..]
//! scheduler policy=N nice=N priority=N flags=[N, ..] runtime=N deadline=N period=N
//! rdt clos_id=C|- schemata=[..]|- monitoring=B|- remove=B
//! update ID ignore_failure=B                update ID resources.cpu.shares=N (every resources line)
//! evict ID reason=R
//! ```
//!
//! Enumerations are written as their NRI numbers (`io_priority class=2` is
//! best effort); lists of strings in Rust's debug format.

use crate::*;

/// Every setting of `reply`, one line each, sorted.
pub fn describe(reply: &Reply) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(a) = &reply.adjust {
        adjustment(a, &mut out);
    }
    for u in &reply.update {
        out.push(format!("update {} ignore_failure={}", u.container_id, u.ignore_failure));
        if let Some(r) = &u.resources {
            resources(&format!("update {} resources", u.container_id), r, &mut out);
        }
    }
    for e in &reply.evict {
        out.push(format!("evict {} reason={}", e.container_id, e.reason));
    }
    out.sort();
    out
}

/// Every setting of an adjustment, one line each, sorted.
pub fn describe_adjustment(adjust: &ContainerAdjustment) -> Vec<String> {
    let mut out = Vec::new();
    adjustment(adjust, &mut out);
    out.sort();
    out
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn adjustment(a: &ContainerAdjustment, out: &mut Vec<String>) {
    for kv in &a.annotations {
        out.push(format!("annotation {}={}", kv.key, kv.value));
    }
    for m in &a.mounts {
        out.push(format!("mount {} type={} source={} options={:?}", m.destination, m.type_, m.source, m.options));
    }
    for kv in &a.env {
        out.push(format!("env {}={}", kv.key, kv.value));
    }
    if let Some(h) = &a.hooks {
        for stage in HookStage::ALL {
            for (i, hook) in stage.of(h).iter().enumerate() {
                out.push(format!(
                    "hook {}[{i}] {} args={:?} env={:?} timeout={}",
                    stage.name(),
                    hook.path,
                    hook.args,
                    hook.env,
                    opt(&hook.timeout)
                ));
            }
        }
    }
    for r in &a.rlimits {
        out.push(format!("rlimit {} soft={} hard={}", r.type_, r.soft, r.hard));
    }
    for d in &a.cdi_devices {
        out.push(format!("cdi {d}"));
    }
    if !a.args.is_empty() {
        out.push(format!("args {:?}", a.args));
    }
    if let Some(l) = &a.linux {
        linux(l, out);
    }
}

fn linux(l: &LinuxContainerAdjustment, out: &mut Vec<String>) {
    for d in &l.devices {
        out.push(format!(
            "device {} type={} major={} minor={} mode={} uid={} gid={}",
            d.path,
            d.type_,
            d.major,
            d.minor,
            d.file_mode.map_or_else(|| "-".to_string(), |m| format!("{m:o}")),
            opt(&d.uid),
            opt(&d.gid)
        ));
    }
    if let Some(r) = &l.resources {
        resources("resources", r, out);
    }
    if !l.cgroups_path.is_empty() {
        out.push(format!("cgroups_path={}", l.cgroups_path));
    }
    if let Some(v) = l.oom_score_adj {
        out.push(format!("oom_score_adj={v}"));
    }
    if let Some(io) = &l.io_priority {
        out.push(format!("io_priority class={} priority={}", io.class as u8, io.priority));
    }
    if let Some(s) = &l.seccomp_policy {
        out.push(format!(
            "seccomp default_action={} default_errno={} architectures={:?} flags={:?} listener_path={} listener_metadata={}",
            s.default_action,
            opt(&s.default_errno),
            s.architectures,
            s.flags,
            s.listener_path,
            s.listener_metadata
        ));
        for (i, sc) in s.syscalls.iter().enumerate() {
            let args: Vec<String> =
                sc.args.iter().map(|a| format!("{}:{}:{}:{}", a.index, a.value, a.value_two, a.op)).collect();
            out.push(format!(
                "seccomp.syscalls[{i}] names={:?} action={} errno={} args={args:?}",
                sc.names,
                sc.action,
                opt(&sc.errno_ret)
            ));
        }
    }
    for n in &l.namespaces {
        out.push(format!("namespace {} path={}", n.type_, n.path));
    }
    for kv in &l.sysctl {
        out.push(format!("sysctl {}={}", kv.key, kv.value));
    }
    for d in &l.net_devices {
        out.push(format!("net_device {}={}", d.host_name, d.name));
    }
    if let Some(s) = &l.scheduler {
        let flags: Vec<i32> = s.flags.iter().map(|f| *f as i32).collect();
        out.push(format!(
            "scheduler policy={} nice={} priority={} flags={flags:?} runtime={} deadline={} period={}",
            s.policy as u8, s.nice, s.priority, s.runtime, s.deadline, s.period
        ));
    }
    if let Some(r) = &l.rdt {
        out.push(format!(
            "rdt clos_id={} schemata={} monitoring={} remove={}",
            opt(&r.clos_id),
            r.schemata.as_ref().map_or_else(|| "-".to_string(), |s| format!("{s:?}")),
            opt(&r.enable_monitoring),
            r.remove
        ));
    }
    if let Some(m) = &l.memory_policy {
        let flags: Vec<i32> = m.flags.iter().map(|f| *f as i32).collect();
        out.push(format!("memory_policy mode={} nodes={} flags={flags:?}", m.mode as u8, m.nodes));
    }
}

fn resources(prefix: &str, r: &LinuxResources, out: &mut Vec<String>) {
    if let Some(m) = &r.memory {
        let ints = [
            ("limit", m.limit),
            ("reservation", m.reservation),
            ("swap", m.swap),
            ("kernel", m.kernel),
            ("kernel_tcp", m.kernel_tcp),
        ];
        for (name, v) in ints {
            if let Some(v) = v {
                out.push(format!("{prefix}.memory.{name}={v}"));
            }
        }
        if let Some(v) = m.swappiness {
            out.push(format!("{prefix}.memory.swappiness={v}"));
        }
        for (name, v) in [("disable_oom_killer", m.disable_oom_killer), ("use_hierarchy", m.use_hierarchy)] {
            if let Some(v) = v {
                out.push(format!("{prefix}.memory.{name}={v}"));
            }
        }
    }
    if let Some(c) = &r.cpu {
        for (name, v) in [("shares", c.shares), ("period", c.period), ("realtime_period", c.realtime_period)] {
            if let Some(v) = v {
                out.push(format!("{prefix}.cpu.{name}={v}"));
            }
        }
        for (name, v) in [("quota", c.quota), ("realtime_runtime", c.realtime_runtime)] {
            if let Some(v) = v {
                out.push(format!("{prefix}.cpu.{name}={v}"));
            }
        }
        for (name, v) in [("cpus", &c.cpus), ("mems", &c.mems)] {
            if !v.is_empty() {
                out.push(format!("{prefix}.cpu.{name}={v}"));
            }
        }
    }
    for h in &r.hugepage_limits {
        out.push(format!("{prefix}.hugepage {}={}", h.page_size, h.limit));
    }
    if let Some(c) = &r.blockio_class {
        out.push(format!("{prefix}.blockio_class={c}"));
    }
    if let Some(c) = &r.rdt_class {
        out.push(format!("{prefix}.rdt_class={c}"));
    }
    for kv in &r.unified {
        out.push(format!("{prefix}.unified {}={}", kv.key, kv.value));
    }
    for (i, d) in r.devices.iter().enumerate() {
        out.push(format!(
            "{prefix}.devices[{i}] allow={} type={} major={} minor={} access={}",
            d.allow,
            d.type_,
            opt(&d.major),
            opt(&d.minor),
            d.access
        ));
    }
    if let Some(p) = &r.pids {
        out.push(format!("{prefix}.pids.limit={}", p.limit));
    }
}
