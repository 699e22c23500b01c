//! Merging adjustments into a validation event, with the owner of every
//! field recorded as the host records it (`host/src/merge/owners.rs`,
//! `host/src/merge/adjust.rs`), and the conflicts the host refuses.
//!
//! Kept equal to the host by a property test
//! (`tests/e2e/tests/sdk_agrees.rs`): chains of up to four policies'
//! adjustments of env, annotations, sysctl (keys and removal markers given
//! twice included), mounts, devices, namespaces, rlimits, memory limit,
//! CPU shares, OOM score, hooks, unified and args, passed through the
//! host's conversion and merge and through [`super::Validation::try_adjust`],
//! must be refused by both (invalid output, or a conflict naming the same
//! two policies) or accepted by both, with the same owners and the same
//! merged annotations, sysctl, namespaces, env, mounts (destination and
//! source) and devices (path and type), removal markers included. The
//! other fields of the merged adjustment are not compared.

use crate::field as f;
use crate::*;

/// Two policies set one field (or one policy set it twice): the host
/// refuses the output of `second` and merges nothing of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The field's NRI number ([`crate::field`]).
    pub field: i32,
    /// The key of a compound field (annotation name, mount destination,
    /// ...); empty for a simple field.
    pub key: String,
    /// The policy that set (or removed) it before.
    pub first: String,
    /// The policy whose output was being merged.
    pub second: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = crate::field::name(self.field);
        write!(f, "policies {:?} and {:?} both tried to set {field}", self.first, self.second)?;
        if !self.key.is_empty() {
            write!(f, " {:?}", self.key)?;
        }
        Ok(())
    }
}

type Claimed = Result<(), Conflict>;

/// One policy's claims on one container's fields, by the host's rules
/// (`host/src/merge/owners.rs`): a claim of a field somebody holds
/// conflicts (with the holder; with the remover if another policy removed
/// it; a policy's own removal does not stand in its way); with `lenient`,
/// conflicts are recorded over instead.
struct Step<'a> {
    owners: &'a mut Vec<FieldOwner>,
    id: &'a str,
    policy: &'a str,
    lenient: bool,
}

impl Step<'_> {
    fn record(&mut self, field: i32, key: &str, plugin: String) {
        let compound = f::is_compound(field);
        let id = self.id;
        match self.owners.iter_mut().find(|o| o.container_id == id && o.field == field && o.key == key) {
            Some(o) => o.plugin = plugin,
            None => self.owners.push(FieldOwner { container_id: id.into(), field, compound, key: key.into(), plugin }),
        }
    }

    fn claim_key(&mut self, field: i32, key: &str) -> Claimed {
        let id = self.id;
        let owner = self.owners.iter().find(|o| o.container_id == id && o.field == field && o.key == key);
        let holder = owner.and_then(|o| match o.plugin.strip_prefix('-') {
            Some(remover) if remover == self.policy => None,
            Some(remover) => Some(remover.to_string()),
            None => Some(o.plugin.clone()),
        });
        if let (Some(first), false) = (holder, self.lenient) {
            return Err(Conflict { field, key: key.into(), first, second: self.policy.into() });
        }
        self.record(field, key, self.policy.into());
        Ok(())
    }

    fn claim(&mut self, field: i32) -> Claimed {
        self.claim_key(field, "")
    }

    fn clear_key(&mut self, field: i32, key: &str) {
        self.record(field, key, format!("-{}", self.policy));
    }

    fn set<T: Clone>(&mut self, to: &mut Option<T>, from: &Option<T>, field: i32) -> Claimed {
        if from.is_some() {
            self.claim(field)?;
            *to = from.clone();
        }
        Ok(())
    }

    /// A keyed map (annotations, sysctls, net devices): a key both removed
    /// and set in one adjustment is cleared first, so the policy overrides
    /// whoever set it; a key only removed changes no owner. The merged map
    /// takes every key as given, exactly: a removal alone leaves an earlier
    /// policy's value and adds the marker (the runtime applies both).
    fn keyed_map<T: Clone>(
        &mut self,
        list: &mut Vec<T>,
        items: &[T],
        name: impl Fn(&T) -> &str,
        cleared: impl Fn(&str) -> T,
        field: i32,
    ) -> Claimed {
        let removed: Vec<&str> = items.iter().filter_map(|x| name(x).strip_prefix('-')).collect();
        let mut set: Vec<&T> = items.iter().filter(|x| !name(x).starts_with('-')).collect();
        set.sort_by(|a, b| name(a).cmp(name(b)));
        for item in set {
            if removed.contains(&name(item)) {
                self.clear_key(field, name(item));
            }
            self.claim_key(field, name(item))?;
        }
        for item in items {
            let key = name(item);
            let entry = if key.starts_with('-') { cleared(key) } else { item.clone() };
            match list.iter_mut().find(|x| name(x) == key) {
                Some(x) => *x = entry,
                None => list.push(entry),
            }
        }
        Ok(())
    }

    /// A keyed list (mounts, devices, environment): removing a key that an
    /// earlier policy set clears it (recorded as removed by this policy);
    /// removing one nobody set changes no owner.
    fn keyed_list<T: Clone>(
        &mut self,
        list: &mut Vec<T>,
        items: &[T],
        name: impl Fn(&T) -> &str,
        field: i32,
    ) -> Claimed {
        for plain in items.iter().filter_map(|x| name(x).strip_prefix('-')) {
            if list.iter().any(|x| name(x) == plain) {
                self.clear_key(field, plain);
            }
        }
        for item in items.iter().filter(|x| !name(x).starts_with('-')) {
            self.claim_key(field, name(item))?;
        }
        merge_keyed(list, items, name, field == f::MOUNTS);
        Ok(())
    }
}

/// Folds one adjustment's entries of a keyed list field into `list`, as
/// the host does: what the adjustment sets wins over its own removal of the
/// same key, whatever their order; a removal alone drops the key and
/// leaves its marker, once per key.
///
/// Earlier policies' markers of the keys it touches are replaced, except for
/// mounts (`markers_stay`): the runtime passes a mount's removal on to the
/// plugins after it, so the host keeps every policy's mount markers, even
/// where a later policy mounts the destination again.
fn merge_keyed<T: Clone>(list: &mut Vec<T>, items: &[T], name: impl Fn(&T) -> &str, markers_stay: bool) {
    let plain = |k: &str| k.strip_prefix('-').unwrap_or(k).to_string();
    let touched: Vec<String> = items.iter().map(|x| plain(name(x))).collect();
    let set: Vec<&T> = items.iter().filter(|x| !name(x).starts_with('-')).collect();
    list.retain(|x| (markers_stay && name(x).starts_with('-')) || !touched.contains(&plain(name(x))));
    let mut markers: Vec<&T> = Vec::new();
    for item in items.iter().filter(|x| name(x).starts_with('-')) {
        let key = plain(name(item));
        if !set.iter().any(|x| name(x) == key) && !markers.iter().any(|m| name(m) == name(item)) {
            markers.push(item);
        }
    }
    list.extend(set.into_iter().cloned());
    list.extend(markers.into_iter().cloned());
}

/// A removal marker of a string map, as the host's merge writes it.
fn cleared_kv(key: &str) -> KeyValue {
    KeyValue { key: key.into(), value: String::new() }
}

/// Replaces (by key, markers aside) or adds each item of `items` in `list`.
fn replace_by_key<T: Clone>(list: &mut Vec<T>, items: &[T], name: impl Fn(&T) -> &str) {
    for item in items {
        let plain = name(item).strip_prefix('-').unwrap_or(name(item)).to_string();
        list.retain(|x| name(x).strip_prefix('-').unwrap_or(name(x)) != plain);
        list.push(item.clone());
    }
}

/// Merges `adjust` of `policy` into `merged`, recording owners, in the
/// host's order of fields. `Err` at the first conflict (unless `lenient`),
/// with `merged` and `owners` partly changed: the caller works on copies.
pub(super) fn merge(
    owners: &mut Vec<FieldOwner>,
    id: &str,
    policy: &str,
    merged: &mut ContainerAdjustment,
    adjust: &ContainerAdjustment,
    lenient: bool,
) -> Claimed {
    let mut s = Step { owners, id, policy, lenient };
    s.keyed_map(&mut merged.annotations, &adjust.annotations, |kv| &kv.key, cleared_kv, f::ANNOTATIONS)?;
    s.keyed_list(&mut merged.mounts, &adjust.mounts, |m| &m.destination, f::MOUNTS)?;
    s.keyed_list(&mut merged.env, &adjust.env, |kv| &kv.key, f::ENV)?;
    if let Some(first) = adjust.args.first() {
        if first.is_empty() {
            s.clear_key(f::ARGS, "");
        }
        s.claim(f::ARGS)?;
        merged.args = adjust.args.clone();
    }
    if let Some(hooks) = adjust.hooks.as_ref().filter(|h| !h.is_empty()) {
        let into = merged.hooks.get_or_insert_with(Hooks::default);
        for stage in HookStage::ALL {
            stage.of_mut(into).extend(stage.of(hooks).iter().cloned());
        }
        // Hooks accumulate: never a conflict, every contributor recorded.
        let id = s.id;
        match s.owners.iter_mut().find(|x| x.container_id == id && x.field == f::OCI_HOOKS) {
            Some(x) => x.plugin = format!("{},{policy}", x.plugin),
            None => s.record(f::OCI_HOOKS, "", policy.into()),
        }
    }
    if let Some(linux) = &adjust.linux {
        let into = merged.linux_mut();
        s.keyed_list(&mut into.devices, &linux.devices, |d| &d.path, f::DEVICES)?;
        if let Some(r) = &linux.resources {
            claim_resources(&mut s, r)?;
            apply_resources(into.resources.get_or_insert_with(LinuxResources::default), r);
        }
        if !linux.cgroups_path.is_empty() {
            s.claim(f::CGROUPS_PATH)?;
            into.cgroups_path = linux.cgroups_path.clone();
        }
        s.set(&mut into.oom_score_adj, &linux.oom_score_adj, f::OOM_SCORE_ADJ)?;
        s.set(&mut into.io_priority, &linux.io_priority, f::IO_PRIORITY)?;
        s.set(&mut into.seccomp_policy, &linux.seccomp_policy, f::SECCOMP_POLICY)?;
        // A namespace removal is itself a claim on the type.
        for ns in &linux.namespaces {
            s.claim_key(f::NAMESPACE, ns.type_.strip_prefix('-').unwrap_or(&ns.type_))?;
        }
        replace_by_key(&mut into.namespaces, &linux.namespaces, |n| &n.type_);
        s.keyed_map(&mut into.sysctl, &linux.sysctl, |kv| &kv.key, cleared_kv, f::SYSCTL)?;
        let cleared = |k: &str| NetDeviceEntry { host_name: k.into(), name: String::new() };
        s.keyed_map(&mut into.net_devices, &linux.net_devices, |d| &d.host_name, cleared, f::LINUX_NET_DEVICES)?;
        s.set(&mut into.scheduler, &linux.scheduler, f::LINUX_SCHED)?;
        if let Some(rdt) = &linux.rdt {
            let to = into.rdt.get_or_insert(LinuxRdt {
                clos_id: None,
                schemata: None,
                enable_monitoring: None,
                remove: false,
            });
            if rdt.remove {
                for field in [f::RDT_CLOS_ID, f::RDT_SCHEMATA, f::RDT_ENABLE_MONITORING] {
                    s.clear_key(field, "");
                }
            }
            to.remove |= rdt.remove;
            s.set(&mut to.clos_id, &rdt.clos_id, f::RDT_CLOS_ID)?;
            s.set(&mut to.schemata, &rdt.schemata, f::RDT_SCHEMATA)?;
            s.set(&mut to.enable_monitoring, &rdt.enable_monitoring, f::RDT_ENABLE_MONITORING)?;
        }
        s.set(&mut into.memory_policy, &linux.memory_policy, f::MEMORY_POLICY)?;
    }
    for r in &adjust.rlimits {
        s.claim_key(f::RLIMITS, &r.type_)?;
    }
    replace_by_key(&mut merged.rlimits, &adjust.rlimits, |r| &r.type_);
    for d in &adjust.cdi_devices {
        s.claim_key(f::CDI_DEVICES, d)?;
    }
    replace_by_key(&mut merged.cdi_devices, &adjust.cdi_devices, |d| d);
    Ok(())
}

/// Claims what `r` sets, in the host's order; the merge's resources.
fn claim_resources(s: &mut Step<'_>, r: &LinuxResources) -> Claimed {
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
        for (_, field) in fields.into_iter().filter(|(set, _)| *set) {
            s.claim(field)?;
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
        for (_, field) in fields.into_iter().filter(|(set, _)| *set) {
            s.claim(field)?;
        }
    }
    for h in &r.hugepage_limits {
        s.claim_key(f::HUGEPAGE_LIMITS, &h.page_size)?;
    }
    let mut unified: Vec<&str> = r.unified.iter().map(|kv| kv.key.as_str()).collect();
    unified.sort_unstable();
    for key in unified {
        s.claim_key(f::CGROUPS_UNIFIED, key)?;
    }
    if r.blockio_class.is_some() {
        s.claim(f::BLOCKIO_CLASS)?;
    }
    if r.rdt_class.is_some() {
        s.claim(f::RDT_CLASS)?;
    }
    if r.pids.is_some() {
        s.claim(f::PIDS_LIMIT)?;
    }
    Ok(())
}

/// Records `policy` as the owner of what `r` sets (an update of another
/// container: conflicts are the host's to find, recorded over here).
pub(super) fn resources(owners: &mut Vec<FieldOwner>, id: &str, policy: &str, r: &LinuxResources) {
    let mut s = Step { owners, id, policy, lenient: true };
    claim_resources(&mut s, r).expect("a lenient step records over conflicts");
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
