//! What the host refuses in a reply, checked natively: the parts an event
//! does not allow, repeated keys, and what NRI or the OCI runtime would
//! refuse (`host/src/merge/validate.rs`): relative or `..` paths, NUL bytes,
//! values out of range, malformed cpusets, unknown rlimits.

use std::collections::HashSet;

use crate::*;

type Checked = Result<(), String>;

/// Checks `reply` to an event of `kind` as the host checks a policy's
/// output; `Err` names the field and what is wrong, as the host's
/// "invalid output" failure does.
pub fn check_reply(kind: EventKind, reply: &Reply) -> Checked {
    check(kind, reply, true)
}

/// [`check_reply`] but for keys set twice: in a chain the host finds those
/// in its merge, field by field, after the conflicts of the fields before.
pub(super) fn check_values(kind: EventKind, reply: &Reply) -> Checked {
    check(kind, reply, false)
}

fn check(kind: EventKind, reply: &Reply, dups: bool) -> Checked {
    if kind == EventKind::ValidateContainerAdjustment {
        if reply.adjust.is_some() || !reply.update.is_empty() || !reply.evict.is_empty() {
            return Err("a validation reply may carry nothing (accept with an empty reply, reject with Err)".into());
        }
        return Ok(());
    }
    if reply.adjust.is_some() && kind != EventKind::CreateContainer {
        return Err(format!("adjust: only create-container may adjust, not {}", kind.name()));
    }
    if let Some(a) = &reply.adjust {
        adjustment(a, dups)?;
    }
    if reply.update.len() > 4096 || reply.evict.len() > 4096 {
        return Err("update/evict: at most 4096 per reply".into());
    }
    for (i, u) in reply.update.iter().enumerate() {
        container_id(&format!("update[{i}].container_id"), &u.container_id)?;
        if let Some(r) = &u.resources {
            resources(&format!("update[{i}] ({}).linux.resources", u.container_id), r, dups)?;
        }
    }
    for (i, e) in reply.evict.iter().enumerate() {
        container_id(&format!("evict[{i}].container_id"), &e.container_id)?;
        text(&format!("evict[{i}].reason"), &e.reason)?;
    }
    Ok(())
}

/// A create-container reply may not update the container being created.
pub(super) fn no_self_update(event: &WholeEvent, reply: &Reply) -> Checked {
    if let (EventKind::CreateContainer, Some(c)) = (event.kind(), event.container()) {
        if reply.update.iter().any(|u| u.container_id == c.id) {
            return Err(format!("update: names the container being created ({}); adjust it instead", c.id));
        }
    }
    Ok(())
}

fn bad(field: impl std::fmt::Display, what: impl std::fmt::Display) -> String {
    format!("{field}: {what}")
}

fn container_id(field: &str, id: &str) -> Checked {
    if id.is_empty() {
        return Err(bad(field, "no container id"));
    }
    if id.len() > 256 || !id.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(bad(field, format!("{id:?} is not a container id")));
    }
    Ok(())
}

fn text(field: &str, s: &str) -> Checked {
    if s.contains('\0') {
        return Err(bad(field, "contains a NUL byte"));
    }
    Ok(())
}

fn path(field: &str, p: &str) -> Checked {
    text(field, p)?;
    if !p.starts_with('/') {
        return Err(bad(field, format!("{p:?} is not an absolute path")));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(bad(field, format!("{p:?} contains \"..\"")));
    }
    Ok(())
}

fn removable(what: &str, name: &str, key: &str) -> Checked {
    match key {
        "" => Err(format!("{what}: an empty {name}")),
        "-" => Err(format!("{what}: removal marker \"-\" names no {name}")),
        _ => Ok(()),
    }
}

fn literal(what: &str, name: &str, key: &str) -> Checked {
    if key.is_empty() {
        return Err(format!("{what}: an empty {name}"));
    }
    if key.starts_with('-') {
        return Err(format!("{what}: {name} {key:?} starts with '-', but NRI cannot remove these"));
    }
    Ok(())
}

/// A key set twice within one reply of a list field (mounts, env,
/// devices, ...): the policy conflicts with itself, which the host
/// refuses as invalid output. Removal markers are no claim (removing a
/// key and setting it again is how a policy overrides an earlier one).
fn unique<'a>(dups: bool, what: &str, keys: impl Iterator<Item = &'a str>) -> Checked {
    claimed_once(dups, what, keys.filter(|k| !k.starts_with('-')))
}

/// Like [`unique`], for fields whose removal claims the key (namespaces).
fn claimed_once<'a>(dups: bool, what: &str, keys: impl Iterator<Item = &'a str>) -> Checked {
    if !dups {
        return Ok(());
    }
    let mut seen = HashSet::new();
    for k in keys {
        let plain = k.strip_prefix('-').unwrap_or(k);
        if !seen.insert(plain) {
            return Err(format!("{what}: {plain:?} is set twice"));
        }
    }
    Ok(())
}

/// A map field (annotations, sysctl, net devices, unified): the host turns the
/// list into a map before anything else and refuses a key given twice,
/// removal markers included, in a single reply and in a chain alike.
/// Keys are compared exactly: `-k` and `k` are two keys (remove, then
/// set), `-k` twice is one key given twice.
fn map_keys<'a>(what: &str, keys: impl Iterator<Item = &'a str>) -> Checked {
    let mut seen = HashSet::new();
    for k in keys {
        if !seen.insert(k) {
            return Err(format!("{what}: key {k:?} is given twice"));
        }
    }
    Ok(())
}

const RLIMITS: [&str; 16] = [
    "RLIMIT_AS",
    "RLIMIT_CORE",
    "RLIMIT_CPU",
    "RLIMIT_DATA",
    "RLIMIT_FSIZE",
    "RLIMIT_LOCKS",
    "RLIMIT_MEMLOCK",
    "RLIMIT_MSGQUEUE",
    "RLIMIT_NICE",
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "RLIMIT_RSS",
    "RLIMIT_RTPRIO",
    "RLIMIT_RTTIME",
    "RLIMIT_SIGPENDING",
    "RLIMIT_STACK",
];

fn adjustment(a: &ContainerAdjustment, dups: bool) -> Checked {
    map_keys("adjust.annotations", a.annotations.iter().map(|kv| kv.key.as_str()))?;
    for kv in &a.annotations {
        removable("adjust.annotations", "key", &kv.key)?;
        text(&format!("adjust.annotations[{:?}] (its key)", kv.key), &kv.key)?;
        text(&format!("adjust.annotations[{:?}]", kv.key), &kv.value)?;
    }
    unique(dups, "adjust.mounts", a.mounts.iter().map(|m| m.destination.as_str()))?;
    for (i, m) in a.mounts.iter().enumerate() {
        let field = format!("adjust.mounts[{i}]");
        removable(&field, "destination", &m.destination)?;
        path(&format!("{field}.destination"), m.destination.strip_prefix('-').unwrap_or(&m.destination))?;
        text(&format!("{field}.type"), &m.type_)?;
        text(&format!("{field}.source"), &m.source)?;
        if m.source.split('/').any(|c| c == "..") {
            return Err(bad(format!("{field}.source"), format!("{:?} contains \"..\"", m.source)));
        }
        for (j, o) in m.options.iter().enumerate() {
            text(&format!("{field}.options[{j}]"), o)?;
        }
    }
    unique(dups, "adjust.env", a.env.iter().map(|kv| kv.key.as_str()))?;
    for (i, kv) in a.env.iter().enumerate() {
        let field = format!("adjust.env[{i}]");
        removable(&field, "name", &kv.key)?;
        text(&format!("{field}.key"), &kv.key)?;
        if kv.key.contains('=') {
            return Err(bad(format!("{field}.key"), format!("{:?}: a name cannot contain '='", kv.key)));
        }
        text(&format!("{field}.value"), &kv.value)?;
    }
    for (i, arg) in a.args.iter().enumerate() {
        if i > 0 && arg.is_empty() {
            return Err(bad(format!("adjust.args[{i}]"), "empty (only args[0] may be, to replace earlier args)"));
        }
        text(&format!("adjust.args[{i}]"), arg)?;
    }
    if let Some(h) = &a.hooks {
        for stage in HookStage::ALL {
            for (i, hook) in stage.of(h).iter().enumerate() {
                self::hook(&format!("adjust.hooks.{}[{i}]", stage.name()), hook)?;
            }
        }
    }
    if let Some(l) = &a.linux {
        linux(l, dups)?;
    }
    unique(dups, "adjust.rlimits", a.rlimits.iter().map(|r| r.type_.as_str()))?;
    for (i, r) in a.rlimits.iter().enumerate() {
        let field = format!("adjust.rlimits[{i}]");
        literal(&field, "type", &r.type_)?;
        if !RLIMITS.contains(&r.type_.as_str()) {
            return Err(bad(format!("{field}.type"), format!("{:?} is not an RLIMIT_* name", r.type_)));
        }
        if r.soft > r.hard {
            return Err(bad(&field, format!("soft limit {} is above the hard limit {}", r.soft, r.hard)));
        }
    }
    unique(dups, "adjust.CDI_devices", a.cdi_devices.iter().map(String::as_str))?;
    for (i, name) in a.cdi_devices.iter().enumerate() {
        let field = format!("adjust.CDI_devices[{i}]");
        literal(&field, "name", name)?;
        text(&format!("{field}.name"), name)?;
        let qualified = name.split_once('=').is_some_and(|(kind, n)| kind.contains('/') && !n.is_empty());
        if !qualified {
            return Err(bad(format!("{field}.name"), format!("{name:?} is not vendor/class=name")));
        }
    }
    Ok(())
}

fn hook(field: &str, h: &Hook) -> Checked {
    literal(field, "path", &h.path)?;
    path(&format!("{field}.path"), &h.path)?;
    for (i, a) in h.args.iter().enumerate() {
        text(&format!("{field}.args[{i}]"), a)?;
    }
    for (i, e) in h.env.iter().enumerate() {
        text(&format!("{field}.env[{i}]"), e)?;
        if e.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
            return Err(bad(format!("{field}.env[{i}]"), format!("{e:?} is not NAME=value")));
        }
    }
    if let Some(t) = h.timeout {
        if t <= 0 {
            return Err(bad(format!("{field}.timeout"), format!("{t} is not a positive number of seconds")));
        }
    }
    Ok(())
}

fn linux(l: &LinuxContainerAdjustment, dups: bool) -> Checked {
    unique(dups, "adjust.linux.devices", l.devices.iter().map(|d| d.path.as_str()))?;
    for (i, d) in l.devices.iter().enumerate() {
        let field = format!("adjust.linux.devices[{i}]");
        removable(&field, "path", &d.path)?;
        path(&format!("{field}.path"), d.path.strip_prefix('-').unwrap_or(&d.path))?;
        if !d.path.starts_with('-') {
            if !["c", "b", "u", "p"].contains(&d.type_.as_str()) {
                return Err(bad(format!("{field}.type"), format!("{:?} is not one of c, b, u, p", d.type_)));
            }
            if d.major < 0 || d.minor < 0 {
                return Err(bad(&field, format!("device number {}:{} is negative", d.major, d.minor)));
            }
        }
    }
    if let Some(r) = &l.resources {
        resources("adjust.linux.resources", r, dups)?;
    }
    text("adjust.linux.cgroups_path", &l.cgroups_path)?;
    if l.cgroups_path.split('/').any(|c| c == "..") {
        return Err(bad("adjust.linux.cgroups_path", format!("{:?} contains \"..\"", l.cgroups_path)));
    }
    if let Some(adj) = l.oom_score_adj {
        if !(-1000..=1000).contains(&adj) {
            return Err(bad("adjust.linux.oom_score_adj", format!("{adj} is outside -1000..=1000")));
        }
    }
    if let Some(io) = &l.io_priority {
        if !(0..=7).contains(&io.priority) {
            return Err(bad("adjust.linux.io_priority.priority", format!("{} is outside 0..=7", io.priority)));
        }
    }
    if let Some(s) = &l.seccomp_policy {
        let field = "adjust.linux.seccomp_policy";
        text(&format!("{field}.default_action"), &s.default_action)?;
        for t in s.architectures.iter().chain(&s.flags).chain([&s.listener_metadata]) {
            text(field, t)?;
        }
        if !s.listener_path.is_empty() {
            path(&format!("{field}.listener_path"), &s.listener_path)?;
        }
        for (i, sc) in s.syscalls.iter().enumerate() {
            for t in sc.names.iter().chain([&sc.action]).chain(sc.args.iter().map(|a| &a.op)) {
                text(&format!("{field}.syscalls[{i}]"), t)?;
            }
        }
    }
    claimed_once(dups, "adjust.linux.namespaces", l.namespaces.iter().map(|n| n.type_.as_str()))?;
    for (i, ns) in l.namespaces.iter().enumerate() {
        let field = format!("adjust.linux.namespaces[{i}]");
        removable(&field, "type", &ns.type_)?;
        text(&format!("{field}.type"), &ns.type_)?;
        if !ns.path.is_empty() {
            path(&format!("{field}.path"), &ns.path)?;
        }
    }
    map_keys("adjust.linux.sysctl", l.sysctl.iter().map(|kv| kv.key.as_str()))?;
    for kv in &l.sysctl {
        removable("adjust.linux.sysctl", "key", &kv.key)?;
        text(&format!("adjust.linux.sysctl[{:?}]", kv.key), &kv.value)?;
        let name = kv.key.strip_prefix('-').unwrap_or(&kv.key);
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b)) || name.contains("..") {
            return Err(bad("adjust.linux.sysctl", format!("{:?} is not a sysctl name", kv.key)));
        }
    }
    map_keys("adjust.linux.net_devices", l.net_devices.iter().map(|d| d.host_name.as_str()))?;
    for d in &l.net_devices {
        removable("adjust.linux.net_devices", "host device name", &d.host_name)?;
        let host = d.host_name.strip_prefix('-').unwrap_or(&d.host_name);
        for (what, n) in [("host device name", host), ("name", d.name.as_str())] {
            if n.len() > 15 || n.contains('/') || n.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err(bad(
                    format!("adjust.linux.net_devices[{:?}]", d.host_name),
                    format!("{what} {n:?} is not an interface name"),
                ));
            }
        }
    }
    if let Some(s) = &l.scheduler {
        if !(-20..=19).contains(&s.nice) {
            return Err(bad("adjust.linux.scheduler.nice", format!("{} is outside -20..=19", s.nice)));
        }
        if !(0..=99).contains(&s.priority) {
            return Err(bad("adjust.linux.scheduler.priority", format!("{} is outside 0..=99", s.priority)));
        }
    }
    if let Some(m) = &l.memory_policy {
        if !m.nodes.is_empty() {
            cpuset("adjust.linux.memory_policy.nodes", &m.nodes)?;
        }
    }
    Ok(())
}

fn resources(field: &str, r: &LinuxResources, dups: bool) -> Checked {
    if let Some(m) = &r.memory {
        let sizes = [
            ("limit", m.limit),
            ("reservation", m.reservation),
            ("swap", m.swap),
            ("kernel", m.kernel),
            ("kernel_tcp", m.kernel_tcp),
        ];
        for (name, v) in sizes {
            if let Some(v) = v.filter(|v| *v < -1) {
                return Err(bad(
                    format!("{field}.memory.{name}"),
                    format!("{v} is neither a number of bytes nor -1 (unlimited)"),
                ));
            }
        }
        if let Some(s) = m.swappiness.filter(|s| *s > 100) {
            return Err(bad(format!("{field}.memory.swappiness"), format!("{s} is above 100")));
        }
    }
    if let Some(c) = &r.cpu {
        if let Some(s) = c.shares.filter(|s| *s > 262_144) {
            return Err(bad(format!("{field}.cpu.shares"), format!("{s} is above 262144")));
        }
        if let Some(q) = c.quota.filter(|q| *q < -1 || (1..1000).contains(q)) {
            return Err(bad(
                format!("{field}.cpu.quota"),
                format!("{q} is neither at least 1000 microseconds nor -1 (unlimited)"),
            ));
        }
        if let Some(p) = c.period.filter(|p| !(1000..=1_000_000).contains(p)) {
            return Err(bad(format!("{field}.cpu.period"), format!("{p} is outside 1000..=1000000 microseconds")));
        }
        if let Some(r) = c.realtime_runtime.filter(|r| *r < -1) {
            return Err(bad(format!("{field}.cpu.realtime_runtime"), format!("{r} is below -1")));
        }
        if c.realtime_period == Some(0) {
            return Err(bad(format!("{field}.cpu.realtime_period"), "0 is not a period"));
        }
        if !c.cpus.is_empty() {
            cpuset(&format!("{field}.cpu.cpus"), &c.cpus)?;
        }
        if !c.mems.is_empty() {
            cpuset(&format!("{field}.cpu.mems"), &c.mems)?;
        }
    }
    unique(dups, &format!("{field}.hugepage_limits"), r.hugepage_limits.iter().map(|h| h.page_size.as_str()))?;
    for (i, h) in r.hugepage_limits.iter().enumerate() {
        let f = format!("{field}.hugepage_limits[{i}]");
        literal(&f, "page_size", &h.page_size)?;
        let valid = h
            .page_size
            .strip_suffix('B')
            .and_then(|s| s.strip_suffix(['K', 'M', 'G']))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !valid {
            return Err(bad(format!("{f}.page_size"), format!("{:?} is not a page size like 2MB or 1GB", h.page_size)));
        }
    }
    for c in r.blockio_class.iter().chain(&r.rdt_class) {
        text(field, c)?;
    }
    map_keys(&format!("{field}.unified"), r.unified.iter().map(|kv| kv.key.as_str()))?;
    for kv in &r.unified {
        literal(&format!("{field}.unified"), "key", &kv.key)?;
        let k = &kv.key;
        if k.contains('/') || k.contains("..") || k.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(bad(format!("{field}.unified"), format!("{k:?} is not a cgroup file name")));
        }
        text(&format!("{field}.unified[{k:?}]"), &kv.value)?;
    }
    for (i, d) in r.devices.iter().enumerate() {
        let f = format!("{field}.devices[{i}]");
        if !["", "a", "c", "b"].contains(&d.type_.as_str()) {
            return Err(bad(format!("{f}.type"), format!("{:?} is not one of a, c, b", d.type_)));
        }
        if !d.access.bytes().all(|b| b"rwm".contains(&b)) {
            return Err(bad(format!("{f}.access"), format!("{:?} is not a combination of r, w, m", d.access)));
        }
        for (name, n) in [("major", d.major), ("minor", d.minor)] {
            if let Some(v) = n.filter(|v| *v < -1) {
                return Err(bad(format!("{f}.{name}"), format!("{v} is below -1 (any)")));
            }
        }
    }
    if let Some(p) = r.pids.as_ref().filter(|p| p.limit < -1) {
        return Err(bad(
            format!("{field}.pids.limit"),
            format!("{} is neither a number of processes nor -1 (unlimited)", p.limit),
        ));
    }
    Ok(())
}

/// A cpuset list: `0-3,5,7-8`, ascending ranges of numbers below 65536.
fn cpuset(field: &str, list: &str) -> Checked {
    for part in list.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let parse = |s: &str| -> Option<u32> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
        };
        match (parse(lo), parse(hi)) {
            (Some(lo), Some(hi)) if lo <= hi && hi < 1 << 16 => {}
            _ => return Err(bad(field, format!("{list:?} is not a list like 0-3,5"))),
        }
    }
    Ok(())
}
