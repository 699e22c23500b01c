//! Replies in words: what a policy or the merged chain did to a container,
//! one short phrase per change, for the demo's report.
//!
//! The chain describes each policy's reply as NRI's JSON; this module reads
//! it back as a message and names the changes the way an operator thinks of
//! them (`env APP_NAME=storefront`, `hook prestart /usr/local/bin/audit`),
//! containers by name rather than by their 64-digit ids.

use std::collections::HashMap;

use nri_wasm_api::api as pb;

/// Longest value shown in full.
const MAX_VALUE: usize = 48;

/// The phrases of a reply given as NRI JSON (the chain's description of a
/// step); the JSON itself, shortened, if it is not a reply.
pub(super) fn json_reply(json: &str, names: &HashMap<String, String>) -> Vec<String> {
    let options = protobuf_json_mapping::ParseOptions { ignore_unknown_fields: true, ..Default::default() };
    match protobuf_json_mapping::parse_from_str_with_options::<pb::CreateContainerResponse>(json, &options) {
        Ok(reply) => reply_phrases(&reply, names),
        Err(_) => vec![clip(json)],
    }
}

/// The phrases of a reply: the adjustment, then updates and evictions.
pub(super) fn reply_phrases(reply: &pb::CreateContainerResponse, names: &HashMap<String, String>) -> Vec<String> {
    let mut out = reply.adjust.as_ref().map(adjustment).unwrap_or_default();
    out.extend(updates(&reply.update, &reply.evict, names));
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

    #[test]
    fn a_reply_reads_as_phrases_with_container_names() {
        let mut adjust = pb::ContainerAdjustment::default();
        adjust.env.push(pb::KeyValue { key: "APP".into(), value: "web".into(), ..Default::default() });
        adjust.env.push(pb::KeyValue { key: "-DEBUG".into(), ..Default::default() });
        adjust.rlimits.push(pb::POSIXRlimit { type_: "RLIMIT_NOFILE".into(), soft: 1, hard: 2, ..Default::default() });
        let cpu = pb::LinuxCPU { cpus: "1".into(), ..Default::default() };
        let resources = pb::LinuxResources { cpu: MessageField::some(cpu), ..Default::default() };
        let update = pb::ContainerUpdate {
            container_id: "abc".into(),
            linux: MessageField::some(pb::LinuxContainerUpdate {
                resources: MessageField::some(resources),
                ..Default::default()
            }),
            ..Default::default()
        };
        let reply = pb::CreateContainerResponse {
            adjust: MessageField::some(adjust),
            update: vec![update],
            ..Default::default()
        };
        let names = HashMap::from([("abc".to_string(), "shop/db/postgres".to_string())]);
        let json = protobuf_json_mapping::print_to_string(&reply).unwrap();
        assert_eq!(
            json_reply(&json, &names),
            [
                "env APP=web",
                "unset env DEBUG",
                "rlimit RLIMIT_NOFILE soft 1 hard 2",
                "update shop/db/postgres: cpuset 1"
            ]
        );
    }

    #[test]
    fn long_and_multi_line_values_are_cut_and_marked() {
        assert_eq!(clip("a\nb"), "a...");
        assert_eq!(clip(&"x".repeat(100)), format!("{}...", "x".repeat(MAX_VALUE)));
        assert_eq!(json_reply("not json", &HashMap::new()), ["not json"]);
        assert_eq!(bytes(268_435_456), "256 MiB");
    }
}
