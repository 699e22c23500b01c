//! Replies in words: what a policy or the merged chain did to a container,
//! one short phrase per change, for the demo's report.
//!
//! The chain keeps each policy's reply as the message it merged
//! ([`Change`]); this module names its changes the way an operator thinks
//! of them (`env APP_NAME=storefront`, `hook prestart /usr/local/bin/audit`),
//! containers by name rather than by their 64-digit ids.

use std::collections::HashMap;

use nri_wasm_api::api as pb;

use crate::policy::chain::Change;

/// Longest value shown in full.
const MAX_VALUE: usize = 48;

/// The phrases of one policy's change: the adjustment, then updates and
/// evictions.
pub(super) fn change_phrases(change: &Change, names: &HashMap<String, String>) -> Vec<String> {
    phrases(change.adjust(), change.update(), change.evict(), names)
}

/// The phrases of a reply: the adjustment, then updates and evictions.
pub(super) fn reply_phrases(reply: &pb::CreateContainerResponse, names: &HashMap<String, String>) -> Vec<String> {
    phrases(reply.adjust.as_ref(), &reply.update, &reply.evict, names)
}

fn phrases(
    adjust: Option<&pb::ContainerAdjustment>,
    update: &[pb::ContainerUpdate],
    evict: &[pb::ContainerEviction],
    names: &HashMap<String, String>,
) -> Vec<String> {
    let mut out = adjust.map(adjustment).unwrap_or_default();
    out.extend(updates(update, evict, names));
    out
}

/// The phrases of updates and evictions of other containers.
pub(super) fn updates(
    update: &[pb::ContainerUpdate],
    evict: &[pb::ContainerEviction],
    names: &HashMap<String, String>,
) -> Vec<String> {
    let name = |id: &str| names.get(id).cloned().unwrap_or_else(|| id.chars().take(12).collect());
    let mut out = Vec::new();
    for u in update {
        let parts = u.linux.resources.as_ref().map(resources).unwrap_or_default();
        let what = if parts.is_empty() { "no change".to_string() } else { parts.join(", ") };
        out.push(format!("update {}: {what}", name(&u.container_id)));
    }
    for e in evict {
        out.push(format!("evict {}: {}", name(&e.container_id), clip(&e.reason)));
    }
    out
}

fn adjustment(a: &pb::ContainerAdjustment) -> Vec<String> {
    let mut out = Vec::new();
    for kv in &a.env {
        match kv.key.strip_prefix('-') {
            Some(key) => out.push(format!("unset env {key}")),
            None => out.push(format!("env {}={}", kv.key, clip(&kv.value))),
        }
    }
    let mut annotations: Vec<_> = a.annotations.iter().collect();
    annotations.sort();
    for (k, v) in annotations {
        out.push(format!("annotation {k}={}", clip(v)));
    }
    for m in &a.mounts {
        match m.destination.strip_prefix('-') {
            Some(dest) => out.push(format!("remove mount {dest}")),
            None => out.push(format!("mount {} at {}", m.source, m.destination)),
        }
    }
    if let Some(h) = a.hooks.as_ref() {
        for (stage, hooks) in [
            ("prestart", &h.prestart),
            ("createRuntime", &h.create_runtime),
            ("createContainer", &h.create_container),
            ("startContainer", &h.start_container),
            ("poststart", &h.poststart),
            ("poststop", &h.poststop),
        ] {
            out.extend(hooks.iter().map(|hook| format!("hook {stage} {}", hook.path)));
        }
    }
    for r in &a.rlimits {
        out.push(format!("rlimit {} soft {} hard {}", r.type_, r.soft, r.hard));
    }
    out.extend(a.CDI_devices.iter().map(|d| format!("CDI device {}", d.name)));
    if !a.args.is_empty() {
        out.push(format!("command {}", clip(&a.args.join(" "))));
    }
    if let Some(l) = a.linux.as_ref() {
        for d in &l.devices {
            out.push(format!("device {} ({} {}:{})", d.path, d.type_, d.major, d.minor));
        }
        out.extend(l.resources.as_ref().map(resources).unwrap_or_default());
        if let Some(o) = l.oom_score_adj.as_ref() {
            out.push(format!("oom-score-adj {}", o.value));
        }
        if !l.cgroups_path.is_empty() {
            out.push(format!("cgroups path {}", l.cgroups_path));
        }
        if l.seccomp_policy.is_some() {
            out.push("seccomp policy".into());
        }
        let mut sysctl: Vec<_> = l.sysctl.iter().collect();
        sysctl.sort();
        out.extend(sysctl.into_iter().map(|(k, v)| format!("sysctl {k}={v}")));
        out.extend(l.namespaces.iter().map(|n| format!("namespace {} {}", n.type_, n.path)));
        for (present, what) in [
            (l.io_priority.is_some(), "I/O priority"),
            (l.scheduler.is_some(), "scheduler"),
            (l.rdt.is_some(), "RDT"),
            (l.memory_policy.is_some(), "memory policy"),
            (!l.net_devices.is_empty(), "network devices"),
        ] {
            if present {
                out.push(what.into());
            }
        }
    }
    out
}

/// Cgroup resources, as `cpu shares 2`, `memory limit 256 MiB`, ...
pub(super) fn resources(r: &pb::LinuxResources) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(c) = r.cpu.as_ref() {
        if let Some(v) = c.shares.as_ref() {
            out.push(format!("cpu shares {}", v.value));
        }
        if let Some(v) = c.quota.as_ref() {
            out.push(format!("cpu quota {}", v.value));
        }
        if let Some(v) = c.period.as_ref() {
            out.push(format!("cpu period {}", v.value));
        }
        if !c.cpus.is_empty() {
            out.push(format!("cpuset {}", c.cpus));
        }
        if !c.mems.is_empty() {
            out.push(format!("memory nodes {}", c.mems));
        }
        if c.realtime_runtime.is_some() || c.realtime_period.is_some() {
            out.push("real-time CPU".into());
        }
    }
    if let Some(m) = r.memory.as_ref() {
        for (v, what) in [(&m.limit, "memory limit"), (&m.reservation, "memory reservation"), (&m.swap, "swap limit")] {
            if let Some(v) = v.as_ref() {
                out.push(format!("{what} {}", bytes(v.value)));
            }
        }
    }
    let mut unified: Vec<_> = r.unified.iter().collect();
    unified.sort();
    out.extend(unified.into_iter().map(|(k, v)| format!("{k}={v}")));
    for h in &r.hugepage_limits {
        out.push(format!("hugepages {} {}", h.page_size, bytes(h.limit as i64)));
    }
    for d in &r.devices {
        let verb = if d.allow { "allow" } else { "deny" };
        let n = |v: &protobuf::MessageField<pb::OptionalInt64>| v.as_ref().map_or("*".into(), |v| v.value.to_string());
        out.push(format!("{verb} device {} {}:{} {}", d.type_, n(&d.major), n(&d.minor), d.access));
    }
    if let Some(p) = r.pids.as_ref() {
        out.push(format!("pids limit {}", p.limit));
    }
    for (v, what) in [(&r.blockio_class, "block I/O class"), (&r.rdt_class, "RDT class")] {
        if let Some(v) = v.as_ref() {
            out.push(format!("{what} {}", v.value));
        }
    }
    out
}

fn bytes(v: i64) -> String {
    const MIB: i64 = 1 << 20;
    match v {
        v if v > 0 && v % (1 << 30) == 0 => format!("{} GiB", v >> 30),
        v if v > 0 && v % MIB == 0 => format!("{} MiB", v / MIB),
        v => v.to_string(),
    }
}

fn clip(s: &str) -> String {
    let line = s.lines().next().unwrap_or_default();
    match line.char_indices().nth(MAX_VALUE) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None if line.len() < s.len() => format!("{line}..."),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protobuf::MessageField;

    fn cpuset(id: &str, cpus: &str) -> pb::ContainerUpdate {
        let cpu = pb::LinuxCPU { cpus: cpus.into(), ..Default::default() };
        let resources = pb::LinuxResources { cpu: MessageField::some(cpu), ..Default::default() };
        pb::ContainerUpdate {
            container_id: id.into(),
            linux: MessageField::some(pb::LinuxContainerUpdate {
                resources: MessageField::some(resources),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn eviction(id: &str, reason: &str) -> pb::ContainerEviction {
        pb::ContainerEviction { container_id: id.into(), reason: reason.into(), ..Default::default() }
    }

    fn names() -> HashMap<String, String> {
        HashMap::from([("abc".to_string(), "shop/db/postgres".to_string())])
    }

    #[test]
    fn an_adjustment_reads_as_phrases_with_container_names() {
        let mut adjust = pb::ContainerAdjustment::default();
        adjust.env.push(pb::KeyValue { key: "APP".into(), value: "web".into(), ..Default::default() });
        adjust.env.push(pb::KeyValue { key: "-DEBUG".into(), ..Default::default() });
        adjust.rlimits.push(pb::POSIXRlimit { type_: "RLIMIT_NOFILE".into(), soft: 1, hard: 2, ..Default::default() });
        let reply = pb::CreateContainerResponse {
            adjust: MessageField::some(adjust),
            update: vec![cpuset("abc", "1")],
            ..Default::default()
        };
        let want = [
            "env APP=web",
            "unset env DEBUG",
            "rlimit RLIMIT_NOFILE soft 1 hard 2",
            "update shop/db/postgres: cpuset 1",
        ];
        assert_eq!(reply_phrases(&reply, &names()), want);
        assert_eq!(change_phrases(&Change::from(reply), &names()), want);
    }

    #[test]
    fn an_update_reads_as_the_containers_and_their_resources() {
        let reply = pb::UpdateContainerResponse {
            update: vec![cpuset("abc", "0-3"), cpuset("0123456789abcdef", "")],
            evict: vec![eviction("abc", "too big")],
            ..Default::default()
        };
        assert_eq!(
            change_phrases(&Change::from(reply), &names()),
            [
                "update shop/db/postgres: cpuset 0-3",
                "update 0123456789ab: no change",
                "evict shop/db/postgres: too big"
            ]
        );
    }

    #[test]
    fn an_eviction_reads_as_the_container_and_its_reason() {
        let reply =
            pb::UpdateContainersRequest { evict: vec![eviction("abc", "line one\nline two")], ..Default::default() };
        assert_eq!(change_phrases(&Change::from(reply), &names()), ["evict shop/db/postgres: line one..."]);
    }

    #[test]
    fn a_reply_that_changes_nothing_has_no_phrases() {
        let empty =
            pb::CreateContainerResponse { adjust: MessageField::some(Default::default()), ..Default::default() };
        assert!(change_phrases(&Change::from(empty), &names()).is_empty());
        assert!(change_phrases(&Change::from(pb::UpdateContainersRequest::default()), &names()).is_empty());
    }

    #[test]
    fn long_and_multi_line_values_are_cut_and_marked() {
        assert_eq!(clip("a\nb"), "a...");
        assert_eq!(clip(&"x".repeat(100)), format!("{}...", "x".repeat(MAX_VALUE)));
        assert_eq!(bytes(268_435_456), "256 MiB");
    }
}
