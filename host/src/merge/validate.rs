//! Checks of one policy's output before it is merged: what NRI or the OCI
//! runtime would refuse, or should never see.
//!
//! The runtime trusts its plugins' replies; a malformed one would fail (or
//! worse, half-apply) only once the runtime or runc applies it, for every
//! policy of the chain at once, and some (a relative mount destination, a
//! `..` in a path) are dangerous rather than merely wrong. These checks
//! reject the reply up front as that one policy's invalid output, naming the
//! field by its path in NRI's messages (`adjust.linux.resources.cpu.quota`).
//!
//! Every message is destructured field by field, so a field added to the
//! protocol fails to compile here until someone decides how to check it.
//! The work is linear in the size of the reply.

use std::collections::BTreeSet;
use std::fmt::Display;

use nri_wasm_api::api as pb;

use super::MergeError;

/// Most updates, and most evictions, one reply may carry: far more than the
/// containers of any node, far fewer than a flood.
pub const MAX_UPDATES: usize = 4096;
/// Longest container id accepted in an update or eviction.
const MAX_ID_BYTES: usize = 256;
/// Largest number in a cpuset list (`cpus`, `mems`, memory policy nodes).
const MAX_CPUSET_INDEX: u32 = 1 << 16;

/// What the checks may know of the node: whether a container exists.
pub trait KnownContainers {
    /// `None` if the host does not know (no Synchronize yet, or no view kept).
    fn exists(&self, id: &str) -> Option<bool>;

    /// Whether the container is one of the host's own (`node::own`), which
    /// no policy may update or evict.
    fn is_hosts(&self, _id: &str) -> bool {
        false
    }
}

/// Knows nothing: existence is not checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unknown;

impl KnownContainers for Unknown {
    fn exists(&self, _id: &str) -> Option<bool> {
        None
    }
}

/// A field of a reply that NRI or the OCI runtime would refuse: its path in
/// NRI's messages (`adjust.linux.resources.cpu.quota`) and what is wrong
/// with it (guest text clipped and escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {what}")]
pub struct BadField {
    /// The field's path.
    pub field: String,
    /// What is wrong with its value.
    pub what: String,
}

type Checked = Result<(), BadField>;

fn bad(field: impl Display, what: impl Display) -> BadField {
    BadField { field: field.to_string(), what: what.to_string() }
}

/// Checks a CreateContainer reply: its adjustment, updates and evictions.
pub fn validate_create_reply(
    policy: &str,
    reply: &pb::CreateContainerResponse,
    node: &dyn KnownContainers,
) -> Result<(), MergeError> {
    let pb::CreateContainerResponse { adjust, update, evict, special_fields: _ } = reply;
    let checked = match adjust.as_ref() {
        Some(adjust) => adjustment(adjust),
        None => Ok(()),
    };
    checked
        .and_then(|()| updates(update, node))
        .and_then(|()| evictions(evict, node))
        .map_err(|reason| invalid(policy, reason))
}

/// Checks updates of containers and evictions.
pub fn validate_updates(
    policy: &str,
    update: &[pb::ContainerUpdate],
    evict: &[pb::ContainerEviction],
    node: &dyn KnownContainers,
) -> Result<(), MergeError> {
    updates(update, node).and_then(|()| evictions(evict, node)).map_err(|reason| invalid(policy, reason))
}

fn invalid(policy: &str, reason: BadField) -> MergeError {
    MergeError::Invalid { policy: policy.to_string(), reason: Box::new(reason) }
}

fn container_id(field: &str, id: &str, node: &dyn KnownContainers) -> Checked {
    if id.is_empty() {
        return Err(bad(field, "no container id"));
    }
    if id.len() > MAX_ID_BYTES || !id.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(bad(field, format!("{:?} is not a container id", clip(id))));
    }
    if node.exists(id) == Some(false) {
        return Err(bad(field, format!("no container {id} on this node")));
    }
    if node.is_hosts(id) {
        return Err(bad(
            field,
            format!("{id} is a container of nri-wasm's own pod, which no policy may update or evict"),
        ));
    }
    Ok(())
}

fn updates(list: &[pb::ContainerUpdate], node: &dyn KnownContainers) -> Checked {
    if list.len() > MAX_UPDATES {
        return Err(bad("update", format!("{} updates; at most {MAX_UPDATES} per reply", list.len())));
    }
    for (i, u) in list.iter().enumerate() {
        let pb::ContainerUpdate { container_id: id, linux, ignore_failure: _, special_fields: _ } = u;
        container_id(&format!("update[{i}].container_id"), id, node)?;
        if let Some(linux) = linux.as_ref() {
            let pb::LinuxContainerUpdate { resources, special_fields: _ } = linux;
            if let Some(r) = resources.as_ref() {
                self::resources(&format!("update[{i}] ({id}).linux.resources"), r)?;
            }
        }
    }
    Ok(())
}

fn evictions(list: &[pb::ContainerEviction], node: &dyn KnownContainers) -> Checked {
    if list.len() > MAX_UPDATES {
        return Err(bad("evict", format!("{} evictions; at most {MAX_UPDATES} per reply", list.len())));
    }
    for (i, e) in list.iter().enumerate() {
        let pb::ContainerEviction { container_id: id, reason, special_fields: _ } = e;
        container_id(&format!("evict[{i}].container_id"), id, node)?;
        text(&format!("evict[{i}].reason"), reason)?;
    }
    Ok(())
}

fn adjustment(adjust: &pb::ContainerAdjustment) -> Checked {
    let pb::ContainerAdjustment {
        annotations,
        mounts,
        env,
        hooks,
        linux,
        rlimits,
        CDI_devices,
        args,
        special_fields: _,
    } = adjust;
    for (key, value) in annotations.iter().collect::<std::collections::BTreeMap<_, _>>() {
        removable("adjust.annotations", "key", key)?;
        text(&format!("adjust.annotations[{:?}] (its key)", clip(key)), key)?;
        text(&format!("adjust.annotations[{key:?}]"), value)?;
    }
    for (i, m) in mounts.iter().enumerate() {
        let pb::Mount { destination, type_, source, options, special_fields: _ } = m;
        let field = format!("adjust.mounts[{i}]");
        removable(&field, "destination", destination)?;
        path(&format!("{field}.destination"), destination.strip_prefix('-').unwrap_or(destination))?;
        text(&format!("{field}.type"), type_)?;
        text(&format!("{field}.source"), source)?;
        if !source.is_empty() && source.split('/').any(|c| c == "..") {
            return Err(bad(format!("{field}.source"), format!("{:?} contains \"..\"", clip(source))));
        }
        for (j, o) in options.iter().enumerate() {
            text(&format!("{field}.options[{j}]"), o)?;
        }
    }
    for (i, kv) in env.iter().enumerate() {
        let pb::KeyValue { key, value, special_fields: _ } = kv;
        let field = format!("adjust.env[{i}]");
        removable(&field, "name", key)?;
        text(&format!("{field}.key"), key)?;
        if key.contains('=') {
            return Err(bad(format!("{field}.key"), format!("{:?}: a name cannot contain '='", clip(key))));
        }
        text(&format!("{field}.value"), value)?;
    }
    for (i, arg) in args.iter().enumerate() {
        if i > 0 && arg.is_empty() {
            return Err(bad(format!("adjust.args[{i}]"), "empty (only args[0] may be, to replace earlier args)"));
        }
        text(&format!("adjust.args[{i}]"), arg)?;
    }
    if let Some(h) = hooks.as_ref() {
        let pb::Hooks {
            prestart,
            create_runtime,
            create_container,
            start_container,
            poststart,
            poststop,
            special_fields: _,
        } = h;
        let lists = [
            ("prestart", prestart),
            ("create_runtime", create_runtime),
            ("create_container", create_container),
            ("start_container", start_container),
            ("poststart", poststart),
            ("poststop", poststop),
        ];
        for (kind, list) in lists {
            for (i, hook) in list.iter().enumerate() {
                self::hook(&format!("adjust.hooks.{kind}[{i}]"), hook)?;
            }
        }
    }
    if let Some(linux) = linux.as_ref() {
        linux_adjustment(linux)?;
    }
    for (i, r) in rlimits.iter().enumerate() {
        let pb::POSIXRlimit { type_, hard, soft, special_fields: _ } = r;
        let field = format!("adjust.rlimits[{i}]");
        literal(&field, "type", type_)?;
        if !RLIMITS.contains(&type_.as_str()) {
            return Err(bad(format!("{field}.type"), format!("{:?} is not an RLIMIT_* name", clip(type_))));
        }
        if soft > hard {
            return Err(bad(&field, format!("soft limit {soft} is above the hard limit {hard}")));
        }
    }
    for (i, d) in CDI_devices.iter().enumerate() {
        let pb::CDIDevice { name, special_fields: _ } = d;
        let field = format!("adjust.CDI_devices[{i}]");
        literal(&field, "name", name)?;
        text(&format!("{field}.name"), name)?;
        let qualified = name.split_once('=').is_some_and(|(kind, n)| kind.contains('/') && !n.is_empty());
        if !qualified {
            return Err(bad(format!("{field}.name"), format!("{:?} is not vendor/class=name", clip(name))));
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

fn hook(field: &str, hook: &pb::Hook) -> Checked {
    let pb::Hook { path: p, args, env, timeout, special_fields: _ } = hook;
    literal(field, "path", p)?;
    path(&format!("{field}.path"), p)?;
    for (i, a) in args.iter().enumerate() {
        text(&format!("{field}.args[{i}]"), a)?;
    }
    for (i, e) in env.iter().enumerate() {
        text(&format!("{field}.env[{i}]"), e)?;
        if e.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
            return Err(bad(format!("{field}.env[{i}]"), format!("{:?} is not NAME=value", clip(e))));
        }
    }
    if let Some(t) = timeout.as_ref() {
        if t.value <= 0 {
            return Err(bad(format!("{field}.timeout"), format!("{} is not a positive number of seconds", t.value)));
        }
    }
    Ok(())
}

fn linux_adjustment(linux: &pb::LinuxContainerAdjustment) -> Checked {
    let pb::LinuxContainerAdjustment {
        devices,
        resources,
        cgroups_path,
        oom_score_adj,
        io_priority,
        seccomp_policy,
        namespaces,
        sysctl,
        net_devices,
        scheduler,
        rdt,
        memory_policy,
        special_fields: _,
    } = linux;
    for (i, d) in devices.iter().enumerate() {
        let pb::LinuxDevice { path: p, type_, major, minor, file_mode: _, uid: _, gid: _, special_fields: _ } = d;
        let field = format!("adjust.linux.devices[{i}]");
        removable(&field, "path", p)?;
        path(&format!("{field}.path"), p.strip_prefix('-').unwrap_or(p))?;
        if !p.starts_with('-') {
            if !["c", "b", "u", "p"].contains(&type_.as_str()) {
                return Err(bad(format!("{field}.type"), format!("{:?} is not one of c, b, u, p", clip(type_))));
            }
            if *major < 0 || *minor < 0 {
                return Err(bad(&field, format!("device number {major}:{minor} is negative")));
            }
        }
    }
    if let Some(r) = resources.as_ref() {
        self::resources("adjust.linux.resources", r)?;
    }
    text("adjust.linux.cgroups_path", cgroups_path)?;
    if cgroups_path.split('/').any(|c| c == "..") {
        return Err(bad("adjust.linux.cgroups_path", format!("{:?} contains \"..\"", clip(cgroups_path))));
    }
    if let Some(adj) = oom_score_adj.as_ref() {
        if !(-1000..=1000).contains(&adj.value) {
            return Err(bad("adjust.linux.oom_score_adj", format!("{} is outside -1000..=1000", adj.value)));
        }
    }
    if let Some(io) = io_priority.as_ref() {
        let pb::LinuxIOPriority { class: _, priority, special_fields: _ } = io;
        if !(0..=7).contains(priority) {
            return Err(bad("adjust.linux.io_priority.priority", format!("{priority} is outside 0..=7")));
        }
    }
    if let Some(s) = seccomp_policy.as_ref() {
        seccomp(s)?;
    }
    for (i, ns) in namespaces.iter().enumerate() {
        let pb::LinuxNamespace { type_, path: p, special_fields: _ } = ns;
        let field = format!("adjust.linux.namespaces[{i}]");
        removable(&field, "type", type_)?;
        text(&format!("{field}.type"), type_)?;
        if !p.is_empty() {
            path(&format!("{field}.path"), p)?;
        }
    }
    for (key, value) in sysctl.iter().collect::<std::collections::BTreeMap<_, _>>() {
        removable("adjust.linux.sysctl", "key", key)?;
        text(&format!("adjust.linux.sysctl[{key:?}]"), value)?;
        let name = key.strip_prefix('-').unwrap_or(key);
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b)) || name.contains("..") {
            return Err(bad("adjust.linux.sysctl", format!("{:?} is not a sysctl name", clip(key))));
        }
    }
    for (host, dev) in net_devices.iter().collect::<std::collections::BTreeMap<_, _>>() {
        removable("adjust.linux.net_devices", "host device name", host)?;
        let pb::LinuxNetDevice { name, special_fields: _ } = dev;
        for (what, n) in [("host device name", host.strip_prefix('-').unwrap_or(host)), ("name", name.as_str())] {
            if n.len() > 15 || n.contains('/') || n.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err(bad(
                    format!("adjust.linux.net_devices[{host:?}]"),
                    format!("{what} {:?} is not an interface name", clip(n)),
                ));
            }
        }
    }
    if let Some(s) = scheduler.as_ref() {
        let pb::LinuxScheduler {
            policy: _,
            nice,
            priority,
            flags: _,
            runtime: _,
            deadline: _,
            period: _,
            special_fields: _,
        } = s;
        if !(-20..=19).contains(nice) {
            return Err(bad("adjust.linux.scheduler.nice", format!("{nice} is outside -20..=19")));
        }
        if !(0..=99).contains(priority) {
            return Err(bad("adjust.linux.scheduler.priority", format!("{priority} is outside 0..=99")));
        }
    }
    if let Some(r) = rdt.as_ref() {
        let pb::LinuxRdt { clos_id, schemata, enable_monitoring: _, remove: _, special_fields: _ } = r;
        if let Some(c) = clos_id.as_ref() {
            text("adjust.linux.rdt.clos_id", &c.value)?;
        }
        if let Some(s) = schemata.as_ref() {
            for (i, line) in s.value.iter().enumerate() {
                text(&format!("adjust.linux.rdt.schemata[{i}]"), line)?;
            }
        }
    }
    if let Some(m) = memory_policy.as_ref() {
        let pb::LinuxMemoryPolicy { mode: _, nodes, flags: _, special_fields: _ } = m;
        if !nodes.is_empty() {
            cpuset("adjust.linux.memory_policy.nodes", nodes)?;
        }
    }
    Ok(())
}

fn seccomp(s: &pb::LinuxSeccomp) -> Checked {
    let pb::LinuxSeccomp {
        default_action,
        default_errno: _,
        architectures,
        flags,
        listener_path,
        listener_metadata,
        syscalls,
        special_fields: _,
    } = s;
    let field = "adjust.linux.seccomp_policy";
    text(&format!("{field}.default_action"), default_action)?;
    for (i, a) in architectures.iter().enumerate() {
        text(&format!("{field}.architectures[{i}]"), a)?;
    }
    for (i, f) in flags.iter().enumerate() {
        text(&format!("{field}.flags[{i}]"), f)?;
    }
    if !listener_path.is_empty() {
        path(&format!("{field}.listener_path"), listener_path)?;
    }
    text(&format!("{field}.listener_metadata"), listener_metadata)?;
    for (i, sc) in syscalls.iter().enumerate() {
        let pb::LinuxSyscall { names, action, errno_ret: _, args, special_fields: _ } = sc;
        for (j, n) in names.iter().enumerate() {
            text(&format!("{field}.syscalls[{i}].names[{j}]"), n)?;
        }
        text(&format!("{field}.syscalls[{i}].action"), action)?;
        for (j, a) in args.iter().enumerate() {
            let pb::LinuxSeccompArg { index: _, value: _, value_two: _, op, special_fields: _ } = a;
            text(&format!("{field}.syscalls[{i}].args[{j}].op"), op)?;
        }
    }
    Ok(())
}

/// Checks resources (of an adjustment or an update).
fn resources(field: &str, r: &pb::LinuxResources) -> Checked {
    let pb::LinuxResources {
        memory,
        cpu,
        hugepage_limits,
        blockio_class,
        rdt_class,
        unified,
        devices,
        pids,
        special_fields: _,
    } = r;
    if let Some(m) = memory.as_ref() {
        let pb::LinuxMemory {
            limit,
            reservation,
            swap,
            kernel,
            kernel_tcp,
            swappiness,
            disable_oom_killer: _,
            use_hierarchy: _,
            special_fields: _,
        } = m;
        let sizes = [
            ("limit", limit),
            ("reservation", reservation),
            ("swap", swap),
            ("kernel", kernel),
            ("kernel_tcp", kernel_tcp),
        ];
        for (name, value) in sizes {
            if let Some(v) = value.as_ref() {
                if v.value < -1 {
                    return Err(bad(
                        format!("{field}.memory.{name}"),
                        format!("{} is neither a number of bytes nor -1 (unlimited)", v.value),
                    ));
                }
            }
        }
        if let Some(s) = swappiness.as_ref() {
            if s.value > 100 {
                return Err(bad(format!("{field}.memory.swappiness"), format!("{} is above 100", s.value)));
            }
        }
    }
    if let Some(c) = cpu.as_ref() {
        let pb::LinuxCPU { shares, quota, period, realtime_runtime, realtime_period, cpus, mems, special_fields: _ } =
            c;
        if let Some(s) = shares.as_ref() {
            if s.value > 262_144 {
                return Err(bad(format!("{field}.cpu.shares"), format!("{} is above 262144", s.value)));
            }
        }
        if let Some(q) = quota.as_ref() {
            if q.value < -1 || (1..1000).contains(&q.value) {
                return Err(bad(
                    format!("{field}.cpu.quota"),
                    format!("{} is neither at least 1000 microseconds nor -1 (unlimited)", q.value),
                ));
            }
        }
        if let Some(p) = period.as_ref() {
            if !(1000..=1_000_000).contains(&p.value) {
                return Err(bad(
                    format!("{field}.cpu.period"),
                    format!("{} is outside 1000..=1000000 microseconds", p.value),
                ));
            }
        }
        if let Some(r) = realtime_runtime.as_ref() {
            if r.value < -1 {
                return Err(bad(format!("{field}.cpu.realtime_runtime"), format!("{} is below -1", r.value)));
            }
        }
        if let Some(p) = realtime_period.as_ref() {
            if p.value == 0 {
                return Err(bad(format!("{field}.cpu.realtime_period"), "0 is not a period"));
            }
        }
        if !cpus.is_empty() {
            cpuset(&format!("{field}.cpu.cpus"), cpus)?;
        }
        if !mems.is_empty() {
            cpuset(&format!("{field}.cpu.mems"), mems)?;
        }
    }
    for (i, h) in hugepage_limits.iter().enumerate() {
        let pb::HugepageLimit { page_size, limit: _, special_fields: _ } = h;
        let f = format!("{field}.hugepage_limits[{i}]");
        literal(&f, "page_size", page_size)?;
        let valid = page_size
            .strip_suffix("B")
            .and_then(|s| s.strip_suffix(['K', 'M', 'G']))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !valid {
            return Err(bad(
                format!("{f}.page_size"),
                format!("{:?} is not a page size like 2MB or 1GB", clip(page_size)),
            ));
        }
    }
    if let Some(c) = blockio_class.as_ref() {
        text(&format!("{field}.blockio_class"), &c.value)?;
    }
    if let Some(c) = rdt_class.as_ref() {
        text(&format!("{field}.rdt_class"), &c.value)?;
    }
    for (key, value) in unified.iter().collect::<BTreeSet<_>>() {
        literal(&format!("{field}.unified"), "key", key)?;
        if !is_cgroup_file(key) {
            return Err(bad(
                format!("{field}.unified"),
                format!("{:?} is not a cgroup interface file name (controller.file, like memory.max)", clip(key)),
            ));
        }
        text(&format!("{field}.unified[{key:?}]"), value)?;
    }
    for (i, d) in devices.iter().enumerate() {
        let pb::LinuxDeviceCgroup { allow: _, type_, major, minor, access, special_fields: _ } = d;
        let f = format!("{field}.devices[{i}]");
        if !["", "a", "c", "b"].contains(&type_.as_str()) {
            return Err(bad(format!("{f}.type"), format!("{:?} is not one of a, c, b", clip(type_))));
        }
        if !access.bytes().all(|b| b"rwm".contains(&b)) {
            return Err(bad(format!("{f}.access"), format!("{:?} is not a combination of r, w, m", clip(access))));
        }
        for (name, n) in [("major", major), ("minor", minor)] {
            if let Some(v) = n.as_ref() {
                if v.value < -1 {
                    return Err(bad(format!("{f}.{name}"), format!("{} is below -1 (any)", v.value)));
                }
            }
        }
    }
    if let Some(p) = pids.as_ref() {
        let pb::LinuxPids { limit, special_fields: _ } = p;
        if *limit < -1 {
            return Err(bad(
                format!("{field}.pids.limit"),
                format!("{limit} is neither a number of processes nor -1 (unlimited)"),
            ));
        }
    }
    Ok(())
}

/// Whether `key` names a cgroup v2 interface file: a controller (`memory`,
/// `cgroup`, ...) in lower-case letters, a dot, then dot-separated words of
/// letters, digits and `_` (`hugetlb.2MB.max`), at most 64 bytes. runc
/// writes each `unified` key as a file in the container's cgroup directory,
/// so anything else (a path, `..`, a cgroup v1 name like `tasks`) is
/// refused, whatever the policy was granted.
pub fn is_cgroup_file(key: &str) -> bool {
    let Some((controller, rest)) = key.split_once('.') else { return false };
    key.len() <= 64
        && !controller.is_empty()
        && controller.bytes().all(|b| b.is_ascii_lowercase())
        && rest.split('.').all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

/// A cpuset list: `0-3,5,7-8`, ascending ranges of numbers below 65536.
fn cpuset(field: &str, list: &str) -> Checked {
    let refuse = || bad(field, format!("{:?} is not a list like 0-3,5", clip(list)));
    for part in list.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let parse = |s: &str| -> Option<u32> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
        };
        match (parse(lo), parse(hi)) {
            (Some(lo), Some(hi)) if lo <= hi && hi < MAX_CPUSET_INDEX => {}
            _ => return Err(refuse()),
        }
    }
    Ok(())
}

/// An absolute path without NUL and without `..` components.
fn path(field: &str, p: &str) -> Checked {
    text(field, p)?;
    if !p.starts_with('/') {
        return Err(bad(field, format!("{:?} is not an absolute path", clip(p))));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(bad(field, format!("{:?} contains \"..\"", clip(p))));
    }
    Ok(())
}

/// A string the runtime passes to C: no NUL bytes.
fn text(field: &str, s: &str) -> Checked {
    if s.contains('\0') {
        return Err(bad(field, "contains a NUL byte"));
    }
    Ok(())
}

/// A key that may carry a removal marker: neither empty nor a bare `-`.
fn removable(what: &str, name: &str, key: &str) -> Checked {
    match key {
        "" => Err(bad(what, format!("an empty {name}"))),
        "-" => Err(bad(what, format!("removal marker \"-\" names no {name}"))),
        _ => Ok(()),
    }
}

/// A key NRI has no removal for: neither empty nor starting with `-`.
fn literal(what: &str, name: &str, key: &str) -> Checked {
    if key.is_empty() {
        return Err(bad(what, format!("an empty {name}")));
    }
    if key.starts_with('-') {
        return Err(bad(what, format!("{name} {:?} starts with '-', but NRI cannot remove these", clip(key))));
    }
    Ok(())
}

/// A guest string shown in an error: short, one line.
fn clip(s: &str) -> String {
    crate::text::guest_text(s, 128)
}
