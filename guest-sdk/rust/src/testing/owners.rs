//! Merging adjustments into a validation event, with the owner of every
//! field recorded as the host records it (`host/src/merge/owners.rs`).

use crate::field as f;
use crate::*;

fn record(owners: &mut Vec<FieldOwner>, id: &str, field: i32, key: &str, plugin: String) {
    let compound = f::is_compound(field);
    match owners.iter_mut().find(|o| o.container_id == id && o.field == field && o.key == key) {
        Some(o) => o.plugin = plugin,
        None => owners.push(FieldOwner { container_id: id.into(), field, compound, key: key.into(), plugin }),
    }
}

fn simple(owners: &mut Vec<FieldOwner>, id: &str, field: i32, policy: &str) {
    record(owners, id, field, "", policy.into());
}

/// A key of a compound field; a removal (`-key`) records `-policy` for
/// `key`. Returns the key without its marker.
fn key<'a>(owners: &mut Vec<FieldOwner>, id: &str, field: i32, key: &'a str, policy: &str) -> &'a str {
    match key.strip_prefix('-') {
        Some(plain) => {
            record(owners, id, field, plain, format!("-{policy}"));
            plain
        }
        None => {
            record(owners, id, field, key, policy.into());
            key
        }
    }
}

/// Replaces (by key, markers aside) or adds each item of `items` in `list`.
fn keyed<T: Clone>(
    list: &mut Vec<T>,
    items: &[T],
    name: impl Fn(&T) -> &str,
    owners: &mut Vec<FieldOwner>,
    id: &str,
    field: i32,
    policy: &str,
) {
    for item in items {
        let plain = key(owners, id, field, name(item), policy).to_string();
        list.retain(|x| name(x).strip_prefix('-').unwrap_or(name(x)) != plain);
        list.push(item.clone());
    }
}

fn set<T: Clone>(to: &mut Option<T>, from: &Option<T>, owners: &mut Vec<FieldOwner>, id: &str, field: i32, p: &str) {
    if from.is_some() {
        *to = from.clone();
        simple(owners, id, field, p);
    }
}

/// Merges `adjust` of `policy` into `merged`, recording owners.
pub(super) fn merge(
    owners: &mut Vec<FieldOwner>,
    id: &str,
    policy: &str,
    merged: &mut ContainerAdjustment,
    adjust: &ContainerAdjustment,
) {
    let o = owners;
    keyed(&mut merged.annotations, &adjust.annotations, |kv| &kv.key, o, id, f::ANNOTATIONS, policy);
    keyed(&mut merged.mounts, &adjust.mounts, |m| &m.destination, o, id, f::MOUNTS, policy);
    keyed(&mut merged.env, &adjust.env, |kv| &kv.key, o, id, f::ENV, policy);
    if let Some(hooks) = adjust.hooks.as_ref().filter(|h| !h.is_empty()) {
        let into = merged.hooks.get_or_insert_with(Hooks::default);
        for stage in HookStage::ALL {
            stage.of_mut(into).extend(stage.of(hooks).iter().cloned());
        }
        match o.iter_mut().find(|x| x.container_id == id && x.field == f::OCI_HOOKS) {
            Some(x) => x.plugin = format!("{},{policy}", x.plugin),
            None => simple(o, id, f::OCI_HOOKS, policy),
        }
    }
    keyed(&mut merged.rlimits, &adjust.rlimits, |r| &r.type_, o, id, f::RLIMITS, policy);
    keyed(&mut merged.cdi_devices, &adjust.cdi_devices, |d| d, o, id, f::CDI_DEVICES, policy);
    if !adjust.args.is_empty() {
        merged.args = adjust.args.clone();
        simple(o, id, f::ARGS, policy);
    }
    let Some(linux) = &adjust.linux else { return };
    let into = merged.linux_mut();
    keyed(&mut into.devices, &linux.devices, |d| &d.path, o, id, f::DEVICES, policy);
    if let Some(r) = &linux.resources {
        resources(o, id, policy, r);
        apply_resources(into.resources.get_or_insert_with(LinuxResources::default), r);
    }
    if !linux.cgroups_path.is_empty() {
        into.cgroups_path = linux.cgroups_path.clone();
        simple(o, id, f::CGROUPS_PATH, policy);
    }
    set(&mut into.oom_score_adj, &linux.oom_score_adj, o, id, f::OOM_SCORE_ADJ, policy);
    set(&mut into.io_priority, &linux.io_priority, o, id, f::IO_PRIORITY, policy);
    set(&mut into.seccomp_policy, &linux.seccomp_policy, o, id, f::SECCOMP_POLICY, policy);
    keyed(&mut into.namespaces, &linux.namespaces, |n| &n.type_, o, id, f::NAMESPACE, policy);
    keyed(&mut into.sysctl, &linux.sysctl, |kv| &kv.key, o, id, f::SYSCTL, policy);
    keyed(&mut into.net_devices, &linux.net_devices, |d| &d.host_name, o, id, f::LINUX_NET_DEVICES, policy);
    set(&mut into.scheduler, &linux.scheduler, o, id, f::LINUX_SCHED, policy);
    if let Some(rdt) = &linux.rdt {
        let to =
            into.rdt.get_or_insert(LinuxRdt { clos_id: None, schemata: None, enable_monitoring: None, remove: false });
        to.remove |= rdt.remove;
        set(&mut to.clos_id, &rdt.clos_id, o, id, f::RDT_CLOS_ID, policy);
        set(&mut to.schemata, &rdt.schemata, o, id, f::RDT_SCHEMATA, policy);
        set(&mut to.enable_monitoring, &rdt.enable_monitoring, o, id, f::RDT_ENABLE_MONITORING, policy);
    }
    set(&mut into.memory_policy, &linux.memory_policy, o, id, f::MEMORY_POLICY, policy);
}

/// Records `policy` as the owner of what `r` sets.
pub(super) fn resources(o: &mut Vec<FieldOwner>, id: &str, policy: &str, r: &LinuxResources) {
    if let Some(m) = &r.memory {
        let fields = [
            (m.limit.is_some(), f::MEM_LIMIT),
            (m.reservation.is_some(), f::MEM_RESERVATION),
            (m.swap.is_some(), f::MEM_SWAP_LIMIT),
            (m.kernel.is_some(), f::MEM_KERNEL_LIMIT),
            (m.kernel_tcp.is_some(), f::MEM_TCP_LIMIT),
            (m.swappiness.is_some(), f::MEM_SWAPPINESS),
            (m.disable_oom_killer.is_some(), f::MEM_DISABLE_OOM_KILLER),
            (m.use_hierarchy.is_some(), f::MEM_USE_HIERARCHY),
        ];
        for (is_set, field) in fields {
            if is_set {
                simple(o, id, field, policy);
            }
        }
    }
    if let Some(c) = &r.cpu {
        let fields = [
            (c.shares.is_some(), f::CPU_SHARES),
            (c.quota.is_some(), f::CPU_QUOTA),
            (c.period.is_some(), f::CPU_PERIOD),
            (c.realtime_runtime.is_some(), f::CPU_REALTIME_RUNTIME),
            (c.realtime_period.is_some(), f::CPU_REALTIME_PERIOD),
            (!c.cpus.is_empty(), f::CPUSET_CPUS),
            (!c.mems.is_empty(), f::CPUSET_MEMS),
        ];
        for (is_set, field) in fields {
            if is_set {
                simple(o, id, field, policy);
            }
        }
    }
    for h in &r.hugepage_limits {
        key(o, id, f::HUGEPAGE_LIMITS, &h.page_size, policy);
    }
    if r.blockio_class.is_some() {
        simple(o, id, f::BLOCKIO_CLASS, policy);
    }
    if r.rdt_class.is_some() {
        simple(o, id, f::RDT_CLASS, policy);
    }
    for kv in &r.unified {
        key(o, id, f::CGROUPS_UNIFIED, &kv.key, policy);
    }
    if r.pids.is_some() {
        simple(o, id, f::PIDS_LIMIT, policy);
    }
}

/// Sets in `to` what `r` sets (device rules are appended, hugepage limits
/// replaced by page size).
fn apply_resources(to: &mut LinuxResources, r: &LinuxResources) {
    let mut devices = std::mem::take(&mut to.devices);
    let mut hugepages = std::mem::take(&mut to.hugepage_limits);
    super::overlay(to, &LinuxResources { devices: Vec::new(), hugepage_limits: Vec::new(), ..r.clone() });
    devices.extend(r.devices.iter().cloned());
    for h in &r.hugepage_limits {
        hugepages.retain(|x| x.page_size != h.page_size);
        hugepages.push(h.clone());
    }
    to.devices = devices;
    to.hugepage_limits = hugepages;
}
