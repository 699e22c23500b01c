//! Replies as lines: one line per thing a reply sets, sorted, in the format
//! of the Rust SDK's `nri_wasm_sdk::testing::describe`.
//!
//! An author tests a handler natively and asserts on `out.lines()`; `eval`
//! prints what the real host did in the same lines, so a native test's
//! expectation and the host's answer compare by eye or by `diff`, and the
//! examples' cases are checked through `eval` against the very lines their
//! native tests expect. The format is the SDK's (see its module
//! documentation); enumerations are their NRI numbers, string lists in
//! Rust's debug form, absent values `-`.

use nri_wasm_api::api as pb;
use protobuf::MessageField;

/// A reply's parts as lines, sorted.
pub fn lines(
    adjust: Option<&pb::ContainerAdjustment>,
    update: &[pb::ContainerUpdate],
    evict: &[pb::ContainerEviction],
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(a) = adjust {
        adjustment(a, &mut out);
    }
    for u in update {
        out.push(format!("update {} ignore_failure={}", u.container_id, u.ignore_failure));
        if let Some(r) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) {
            resources(&format!("update {} resources", u.container_id), r, &mut out);
        }
    }
    for e in evict {
        out.push(format!("evict {} reason={}", e.container_id, e.reason));
    }
    out.sort();
    out
}

/// A CreateContainer reply as lines, sorted.
pub fn reply(r: &pb::CreateContainerResponse) -> Vec<String> {
    lines(r.adjust.as_ref(), &r.update, &r.evict)
}

/// The value of an optional wrapper, or `-`.
fn opt<M, T: std::fmt::Display>(field: &MessageField<M>, value: impl Fn(&M) -> T) -> String {
    field.as_ref().map_or_else(|| "-".to_string(), |m| value(m).to_string())
}

fn adjustment(a: &pb::ContainerAdjustment, out: &mut Vec<String>) {
    out.extend(a.annotations.iter().map(|(k, v)| format!("annotation {k}={v}")));
    for m in &a.mounts {
        out.push(format!("mount {} type={} source={} options={:?}", m.destination, m.type_, m.source, m.options));
    }
    out.extend(a.env.iter().map(|kv| format!("env {}={}", kv.key, kv.value)));
    if let Some(h) = a.hooks.as_ref() {
        let stages = [
            ("prestart", &h.prestart),
            ("createRuntime", &h.create_runtime),
            ("createContainer", &h.create_container),
            ("startContainer", &h.start_container),
            ("poststart", &h.poststart),
            ("poststop", &h.poststop),
        ];
        for (stage, hooks) in stages {
            for (i, hook) in hooks.iter().enumerate() {
                out.push(format!(
                    "hook {stage}[{i}] {} args={:?} env={:?} timeout={}",
                    hook.path,
                    hook.args,
                    hook.env,
                    opt(&hook.timeout, |t| t.value)
                ));
            }
        }
    }
    out.extend(a.rlimits.iter().map(|r| format!("rlimit {} soft={} hard={}", r.type_, r.soft, r.hard)));
    out.extend(a.CDI_devices.iter().map(|d| format!("cdi {}", d.name)));
    if !a.args.is_empty() {
        out.push(format!("args {:?}", a.args));
    }
    if let Some(l) = a.linux.as_ref() {
        linux(l, out);
    }
}

fn linux(l: &pb::LinuxContainerAdjustment, out: &mut Vec<String>) {
    for d in &l.devices {
        out.push(format!(
            "device {} type={} major={} minor={} mode={} uid={} gid={}",
            d.path,
            d.type_,
            d.major,
            d.minor,
            opt(&d.file_mode, |m| format!("{:o}", m.value)),
            opt(&d.uid, |v| v.value),
            opt(&d.gid, |v| v.value)
        ));
    }
    if let Some(r) = l.resources.as_ref() {
        resources("resources", r, out);
    }
    if !l.cgroups_path.is_empty() {
        out.push(format!("cgroups_path={}", l.cgroups_path));
    }
    if let Some(v) = l.oom_score_adj.as_ref() {
        out.push(format!("oom_score_adj={}", v.value));
    }
    if let Some(io) = l.io_priority.as_ref() {
        out.push(format!("io_priority class={} priority={}", io.class.value(), io.priority));
    }
    if let Some(s) = l.seccomp_policy.as_ref() {
        out.push(format!(
            "seccomp default_action={} default_errno={} architectures={:?} flags={:?} listener_path={} listener_metadata={}",
            s.default_action,
            opt(&s.default_errno, |v| v.value),
            s.architectures,
            s.flags,
            s.listener_path,
            s.listener_metadata
        ));
        for (i, call) in s.syscalls.iter().enumerate() {
            let args: Vec<String> =
                call.args.iter().map(|a| format!("{}:{}:{}:{}", a.index, a.value, a.value_two, a.op)).collect();
            out.push(format!(
                "seccomp.syscalls[{i}] names={:?} action={} errno={} args={args:?}",
                call.names,
                call.action,
                opt(&call.errno_ret, |v| v.value)
            ));
        }
    }
    out.extend(l.namespaces.iter().map(|n| format!("namespace {} path={}", n.type_, n.path)));
    out.extend(l.sysctl.iter().map(|(k, v)| format!("sysctl {k}={v}")));
    out.extend(l.net_devices.iter().map(|(host, d)| format!("net_device {host}={}", d.name)));
    if let Some(s) = l.scheduler.as_ref() {
        let flags: Vec<i32> = s.flags.iter().map(|f| f.value()).collect();
        out.push(format!(
            "scheduler policy={} nice={} priority={} flags={flags:?} runtime={} deadline={} period={}",
            s.policy.value(),
            s.nice,
            s.priority,
            s.runtime,
            s.deadline,
            s.period
        ));
    }
    if let Some(r) = l.rdt.as_ref() {
        out.push(format!(
            "rdt clos_id={} schemata={} monitoring={} remove={}",
            opt(&r.clos_id, |v| v.value.clone()),
            opt(&r.schemata, |v| format!("{:?}", v.value)),
            opt(&r.enable_monitoring, |v| v.value),
            r.remove
        ));
    }
    if let Some(m) = l.memory_policy.as_ref() {
        let flags: Vec<i32> = m.flags.iter().map(|f| f.value()).collect();
        out.push(format!("memory_policy mode={} nodes={} flags={flags:?}", m.mode.value(), m.nodes));
    }
}

fn resources(prefix: &str, r: &pb::LinuxResources, out: &mut Vec<String>) {
    if let Some(m) = r.memory.as_ref() {
        let ints = [
            ("limit", &m.limit),
            ("reservation", &m.reservation),
            ("swap", &m.swap),
            ("kernel", &m.kernel),
            ("kernel_tcp", &m.kernel_tcp),
        ];
        for (name, v) in ints {
            if let Some(v) = v.as_ref() {
                out.push(format!("{prefix}.memory.{name}={}", v.value));
            }
        }
        if let Some(v) = m.swappiness.as_ref() {
            out.push(format!("{prefix}.memory.swappiness={}", v.value));
        }
        for (name, v) in [("disable_oom_killer", &m.disable_oom_killer), ("use_hierarchy", &m.use_hierarchy)] {
            if let Some(v) = v.as_ref() {
                out.push(format!("{prefix}.memory.{name}={}", v.value));
            }
        }
    }
    if let Some(c) = r.cpu.as_ref() {
        for (name, v) in [("shares", &c.shares), ("period", &c.period), ("realtime_period", &c.realtime_period)] {
            if let Some(v) = v.as_ref() {
                out.push(format!("{prefix}.cpu.{name}={}", v.value));
            }
        }
        for (name, v) in [("quota", &c.quota), ("realtime_runtime", &c.realtime_runtime)] {
            if let Some(v) = v.as_ref() {
                out.push(format!("{prefix}.cpu.{name}={}", v.value));
            }
        }
        for (name, v) in [("cpus", &c.cpus), ("mems", &c.mems)] {
            if !v.is_empty() {
                out.push(format!("{prefix}.cpu.{name}={v}"));
            }
        }
    }
    out.extend(r.hugepage_limits.iter().map(|h| format!("{prefix}.hugepage {}={}", h.page_size, h.limit)));
    if let Some(c) = r.blockio_class.as_ref() {
        out.push(format!("{prefix}.blockio_class={}", c.value));
    }
    if let Some(c) = r.rdt_class.as_ref() {
        out.push(format!("{prefix}.rdt_class={}", c.value));
    }
    out.extend(r.unified.iter().map(|(k, v)| format!("{prefix}.unified {k}={v}")));
    for (i, d) in r.devices.iter().enumerate() {
        out.push(format!(
            "{prefix}.devices[{i}] allow={} type={} major={} minor={} access={}",
            d.allow,
            d.type_,
            opt(&d.major, |v| v.value),
            opt(&d.minor, |v| v.value),
            d.access
        ));
    }
    if let Some(p) = r.pids.as_ref() {
        out.push(format!("{prefix}.pids.limit={}", p.limit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_one_sorted_line_per_setting() {
        let mut adjust = pb::ContainerAdjustment::default();
        adjust.env.push(pb::KeyValue { key: "TEAM".into(), value: "payments".into(), ..Default::default() });
        adjust.annotations.insert("example.com/x".into(), "1".into());
        adjust.rlimits.push(pb::POSIXRlimit { type_: "RLIMIT_NOFILE".into(), soft: 1, hard: 2, ..Default::default() });
        let hooks = adjust.hooks.mut_or_insert_default();
        hooks.prestart.push(pb::Hook { path: "/bin/audit".into(), ..Default::default() });
        let linux = adjust.linux.mut_or_insert_default();
        linux.oom_score_adj = MessageField::some(pb::OptionalInt { value: -10, ..Default::default() });
        let cpu = linux.resources.mut_or_insert_default().cpu.mut_or_insert_default();
        cpu.shares = MessageField::some(pb::OptionalUInt64 { value: 2, ..Default::default() });
        cpu.cpus = "0-1".into();
        let mut update = pb::ContainerUpdate { container_id: "c2".into(), ignore_failure: true, ..Default::default() };
        let memory =
            update.linux.mut_or_insert_default().resources.mut_or_insert_default().memory.mut_or_insert_default();
        memory.limit = MessageField::some(pb::OptionalInt64 { value: 1 << 20, ..Default::default() });
        let evict =
            pb::ContainerEviction { container_id: "c3".into(), reason: "make room".into(), ..Default::default() };
        assert_eq!(
            lines(Some(&adjust), &[update], &[evict]),
            [
                "annotation example.com/x=1",
                "env TEAM=payments",
                "evict c3 reason=make room",
                "hook prestart[0] /bin/audit args=[] env=[] timeout=-",
                "oom_score_adj=-10",
                "resources.cpu.cpus=0-1",
                "resources.cpu.shares=2",
                "rlimit RLIMIT_NOFILE soft=1 hard=2",
                "update c2 ignore_failure=true",
                "update c2 resources.memory.limit=1048576",
            ]
        );
        assert!(lines(None, &[], &[]).is_empty());
    }
}
