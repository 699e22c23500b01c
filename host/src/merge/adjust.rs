//! Merging the `ContainerAdjustment`s of CreateContainer replies.
//!
//! Two things are kept side by side, as the runtime keeps them:
//! - the combined adjustment that goes back to the runtime;
//! - the working container: the request's container with every adjustment
//!   so far applied, which is what the next policy is shown.
//!
//! Each kind of field is folded in the way the runtime folds it, including
//! where the working container and the combined adjustment are treated
//! differently (see the notes on each step). Where the runtime iterates a Go
//! map, keys are taken in sorted order so that the first conflict reported
//! and the resulting order are deterministic.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use super::owners::{Owners, Scope};
use super::MergeError;
use pb::Field as F;

/// The create-side state: working container and combined adjustment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Adjuster {
    /// Shared with the calls of the policies that read it; they end before
    /// the next reply is folded in, so `make_mut` finds it unshared.
    pub container: Arc<pb::Container>,
    reply: pb::ContainerAdjustment,
    /// Removal markers of devices and environment variables that no later
    /// addition re-set; the runtime's merge does not carry these itself (see
    /// [`Adjuster::finish`]).
    removed_devices: Vec<pb::LinuxDevice>,
    removed_env: Vec<pb::KeyValue>,
    /// Some policy adjusted the args (possibly to nothing, with `[""]`).
    args_claimed: bool,
}

impl Adjuster {
    /// Starts from the request's container, with the sub-messages the runtime
    /// fills in before the first plugin runs (so policies see them as it
    /// would show them).
    pub(super) fn new(container: &pb::Container) -> Self {
        let mut container = container.clone();
        container.hooks.mut_or_insert_default();
        let resources = container.linux.mut_or_insert_default().resources.mut_or_insert_default();
        resources.memory.mut_or_insert_default();
        resources.cpu.mut_or_insert_default();
        Self {
            container: Arc::new(container),
            reply: pb::ContainerAdjustment::default(),
            removed_devices: Vec::new(),
            removed_env: Vec::new(),
            args_claimed: false,
        }
    }

    /// Folds in one policy's adjustment, in the runtime's order of fields.
    /// On error the state is partly changed: the caller works on a copy.
    pub(super) fn apply(
        &mut self,
        owners: &mut Owners,
        policy: &str,
        adjust: &pb::ContainerAdjustment,
    ) -> Result<(), MergeError> {
        let id = self.container.id.clone();
        let mut step = Step { owners, scope: Scope::created(&id), policy };
        self.annotations(&mut step, &adjust.annotations)?;
        self.mounts(&mut step, &adjust.mounts)?;
        self.env(&mut step, &adjust.env)?;
        self.args(&mut step, &adjust.args)?;
        if let Some(hooks) = adjust.hooks.as_ref() {
            self.hooks(&mut step, hooks);
        }
        if let Some(linux) = adjust.linux.as_ref() {
            self.linux(&mut step, linux)?;
        }
        self.rlimits(&mut step, &adjust.rlimits)?;
        self.cdi_devices(&mut step, &adjust.CDI_devices)
    }

    /// The combined adjustment, without empty parts; `None` if nothing was
    /// adjusted.
    ///
    /// Two additions make the combined reply, once the runtime merges it as a
    /// single plugin's, act as the policies' replies would have acted as
    /// separate plugins:
    /// - device and environment removal markers that no later policy re-set
    ///   are appended. The runtime's merge applies such a removal to the
    ///   container it shows the following plugins but does not pass it on;
    ///   unless our reply carries the marker, the runtime never sees it at
    ///   all, and plugins after nri-wasm would still see the removed entry.
    /// - args adjusted to nothing (a policy's `[""]`) go out as `[""]`: an
    ///   empty list would not reach the runtime, which would keep earlier
    ///   plugins' args instead of dropping them.
    pub(super) fn finish(self) -> Option<pb::ContainerAdjustment> {
        let Self { mut reply, removed_devices, removed_env, args_claimed, .. } = self;
        if !removed_devices.is_empty() {
            reply.linux.mut_or_insert_default().devices.extend(removed_devices);
        }
        reply.env.extend(removed_env);
        if args_claimed && reply.args.is_empty() {
            reply.args.push(String::new());
        }
        strip_adjustment(reply)
    }

    /// Annotations (and, alike, sysctls and net devices) are keyed maps:
    /// - a key both removed and set in one reply clears the key's owner
    ///   first, so the policy overrides whoever set it before; the reply keeps
    ///   the removal marker next to the new value;
    /// - a key only removed adds the marker to the reply and nothing else: it
    ///   neither clears the owner nor leaves the working container.
    fn annotations(&mut self, step: &mut Step<'_, '_>, input: &HashMap<String, String>) -> Result<(), MergeError> {
        keyed_map(
            step,
            F::Annotations,
            input,
            &mut Arc::make_mut(&mut self.container).annotations,
            &mut self.reply.annotations,
            String::new(),
        )
    }

    /// Mounts, by destination: a removal drops the destination from the
    /// working container, and from the combined reply (clearing its owner) if
    /// an earlier policy had added it; an addition replaces the container's
    /// mount at its destination (moved to the end). A removal that the same
    /// reply does not re-set goes into the reply as the marker mount.
    fn mounts(&mut self, step: &mut Step<'_, '_>, input: &[pb::Mount]) -> Result<(), MergeError> {
        let mut removed = Vec::new();
        keyed_list(
            step,
            F::Mounts,
            input,
            |m| &m.destination,
            &mut Arc::make_mut(&mut self.container).mounts,
            &mut self.reply.mounts,
            &mut removed,
        )?;
        self.reply.mounts.extend(removed);
        Ok(())
    }

    /// Environment variables, by name, like mounts; the working container
    /// holds them as `NAME=value` strings.
    fn env(&mut self, step: &mut Step<'_, '_>, input: &[pb::KeyValue]) -> Result<(), MergeError> {
        if input.is_empty() {
            return Ok(());
        }
        let (mut add, mut removed) = (Vec::new(), Ordered::default());
        for kv in input {
            match removal(&kv.key) {
                Some(name) => removed.insert(name, kv),
                None => add.push(kv),
            }
        }
        let modified: HashSet<&str> = add.iter().map(|kv| kv.key.as_str()).collect();
        let Step { owners, scope, policy } = step;

        self.reply.env.retain(|kv| {
            let drop = removed.contains(kv.key.as_str());
            if drop {
                owners.clear_key(scope.id, F::Env, &kv.key, policy);
            }
            !drop
        });
        Arc::make_mut(&mut self.container).env.retain(|e| {
            let name = env_name(e);
            !removed.contains(name) && !modified.contains(name)
        });
        for kv in &add {
            owners.claim_key(*scope, F::Env, &kv.key, policy)?;
            self.reply.env.push((*kv).clone());
        }
        Arc::make_mut(&mut self.container).env.extend(add.iter().map(|kv| format!("{}={}", kv.key, kv.value)));

        // Markers of names this reply set again are dropped; this reply's
        // own markers replace earlier ones of the same name.
        let markers: Vec<&pb::KeyValue> =
            removed.entries.iter().filter(|(name, _)| !modified.contains(name)).map(|(_, m)| *m).collect();
        let replaced: HashSet<&str> = markers.iter().filter_map(|m| removal(&m.key)).collect();
        self.removed_env
            .retain(|kv| removal(&kv.key).is_some_and(|name| !modified.contains(name) && !replaced.contains(name)));
        self.removed_env.extend(markers.into_iter().cloned());
        Ok(())
    }

    /// Args are one simple field. A leading `""` first clears the owner, so
    /// the policy replaces whatever args an earlier policy set.
    fn args(&mut self, step: &mut Step<'_, '_>, input: &[String]) -> Result<(), MergeError> {
        let Some(first) = input.first() else { return Ok(()) };
        let mut args = input;
        if first.is_empty() {
            step.owners.clear(step.scope.id, F::Args, step.policy);
            args = &input[1..];
        }
        step.owners.claim(step.scope, F::Args, step.policy)?;
        self.reply.args = args.to_vec();
        Arc::make_mut(&mut self.container).args = args.to_vec();
        self.args_claimed = true;
        Ok(())
    }

    /// OCI hooks accumulate, in chain order, in both reply and container.
    fn hooks(&mut self, step: &mut Step<'_, '_>, hooks: &pb::Hooks) {
        let reply = self.reply.hooks.mut_or_insert_default();
        let container = Arc::make_mut(&mut self.container).hooks.mut_or_insert_default();
        let added = [
            append(&hooks.prestart, &mut reply.prestart, &mut container.prestart),
            append(&hooks.poststart, &mut reply.poststart, &mut container.poststart),
            append(&hooks.poststop, &mut reply.poststop, &mut container.poststop),
            append(&hooks.create_runtime, &mut reply.create_runtime, &mut container.create_runtime),
            append(&hooks.create_container, &mut reply.create_container, &mut container.create_container),
            append(&hooks.start_container, &mut reply.start_container, &mut container.start_container),
        ];
        if added.contains(&true) {
            step.owners.accumulate(step.scope.id, F::OciHooks, step.policy);
        }
    }

    fn linux(&mut self, step: &mut Step<'_, '_>, linux: &pb::LinuxContainerAdjustment) -> Result<(), MergeError> {
        self.devices(step, &linux.devices)?;
        if let Some(resources) = linux.resources.as_ref() {
            self.resources(step, resources)?;
        }
        let (container, reply) = (
            Arc::make_mut(&mut self.container).linux.mut_or_insert_default(),
            self.reply.linux.mut_or_insert_default(),
        );
        if !linux.cgroups_path.is_empty() {
            step.claim(F::CgroupsPath)?;
            container.cgroups_path.clone_from(&linux.cgroups_path);
            reply.cgroups_path.clone_from(&linux.cgroups_path);
        }
        set_both(step, F::OomScoreAdj, &linux.oom_score_adj, &mut container.oom_score_adj, &mut reply.oom_score_adj)?;
        set_both(step, F::IoPriority, &linux.io_priority, &mut container.io_priority, &mut reply.io_priority)?;
        set_both(
            step,
            F::SeccompPolicy,
            &linux.seccomp_policy,
            &mut container.seccomp_policy,
            &mut reply.seccomp_policy,
        )?;
        self.namespaces(step, &linux.namespaces)?;
        let (container, reply) = (
            Arc::make_mut(&mut self.container).linux.mut_or_insert_default(),
            self.reply.linux.mut_or_insert_default(),
        );
        keyed_map(step, F::Sysctl, &linux.sysctl, &mut container.sysctl, &mut reply.sysctl, String::new())?;
        keyed_map(
            step,
            F::LinuxNetDevices,
            &linux.net_devices,
            &mut container.net_devices,
            &mut reply.net_devices,
            pb::LinuxNetDevice::default(),
        )?;
        set_both(step, F::LinuxSched, &linux.scheduler, &mut container.scheduler, &mut reply.scheduler)?;
        if let Some(rdt) = linux.rdt.as_ref() {
            self.rdt(step, rdt)?;
        }
        // The runtime records the memory policy in the reply only; the
        // container it shows plugins has no such field.
        if let Some(policy) = linux.memory_policy.as_ref() {
            step.claim(F::MemoryPolicy)?;
            self.reply.linux.mut_or_insert_default().memory_policy = MessageField::some(policy.clone());
        }
        Ok(())
    }

    /// Devices, by path, like mounts (removal markers: see [`Adjuster::finish`]).
    fn devices(&mut self, step: &mut Step<'_, '_>, input: &[pb::LinuxDevice]) -> Result<(), MergeError> {
        if input.is_empty() {
            return Ok(());
        }
        let container = &mut Arc::make_mut(&mut self.container).linux.mut_or_insert_default().devices;
        let reply = &mut self.reply.linux.mut_or_insert_default().devices;
        let mut removed = Vec::new();
        keyed_list(step, F::Devices, input, |d| &d.path, container, reply, &mut removed)?;
        let added: HashSet<&str> =
            input.iter().filter(|d| removal(&d.path).is_none()).map(|d| d.path.as_str()).collect();
        let replaced: HashSet<String> = removed.iter().map(|d| d.path.clone()).collect();
        self.removed_devices
            .retain(|d| removal(&d.path).is_some_and(|path| !added.contains(path)) && !replaced.contains(&d.path));
        self.removed_devices.extend(removed);
        Ok(())
    }

    /// Resources of the new container: simple fields claimed one by one,
    /// hugepage limits by page size and unified entries by key (both
    /// appended/set in reply and container), device cgroup rules appended
    /// without any claim.
    fn resources(&mut self, step: &mut Step<'_, '_>, input: &pb::LinuxResources) -> Result<(), MergeError> {
        let container =
            Arc::make_mut(&mut self.container).linux.mut_or_insert_default().resources.mut_or_insert_default();
        let reply = self.reply.linux.mut_or_insert_default().resources.mut_or_insert_default();
        if let Some(memory) = input.memory.as_ref() {
            set_memory(
                step,
                memory,
                container.memory.mut_or_insert_default(),
                Some(reply.memory.mut_or_insert_default()),
            )?;
        }
        if let Some(cpu) = input.cpu.as_ref() {
            set_cpu(step, cpu, container.cpu.mut_or_insert_default(), Some(reply.cpu.mut_or_insert_default()))?;
        }
        for limit in &input.hugepage_limits {
            step.claim_key(F::HugepageLimits, &limit.page_size)?;
            container.hugepage_limits.push(limit.clone());
            reply.hugepage_limits.push(limit.clone());
        }
        container.devices.extend(input.devices.iter().cloned());
        reply.devices.extend(input.devices.iter().cloned());
        for (key, value) in sorted(&input.unified) {
            step.claim_key(F::CgroupsUnified, key)?;
            container.unified.insert(key.clone(), value.clone());
            reply.unified.insert(key.clone(), value.clone());
        }
        set_both(step, F::BlockioClass, &input.blockio_class, &mut container.blockio_class, &mut reply.blockio_class)?;
        set_both(step, F::RdtClass, &input.rdt_class, &mut container.rdt_class, &mut reply.rdt_class)?;
        set_both(step, F::PidsLimit, &input.pids, &mut container.pids, &mut reply.pids)
    }

    /// Namespaces, by type. Unlike the other keyed fields, a removal
    /// (`-type`) is itself a claim on the type, so removing a namespace
    /// another policy set (or removed) conflicts. Every entry, markers
    /// included, is appended to the reply. In the working container a set
    /// replaces the namespace of that type in place (or is appended) and a
    /// removal drops it; duplicate types in the container collapse to the
    /// last one, as they do in the runtime.
    fn namespaces(&mut self, step: &mut Step<'_, '_>, input: &[pb::LinuxNamespace]) -> Result<(), MergeError> {
        if input.is_empty() {
            return Ok(());
        }
        let linux = Arc::make_mut(&mut self.container).linux.mut_or_insert_default();
        let mut by_type: Ordered<String, Option<pb::LinuxNamespace>> = Ordered::default();
        for ns in &linux.namespaces {
            by_type.insert(ns.type_.clone(), Some(ns.clone()));
        }
        let reply = self.reply.linux.mut_or_insert_default();
        for ns in input {
            let (kind, remove) = match removal(&ns.type_) {
                Some(kind) => (kind, true),
                None => (ns.type_.as_str(), false),
            };
            step.claim_key(F::Namespace, kind)?;
            by_type.insert(kind.to_string(), (!remove).then(|| ns.clone()));
            reply.namespaces.push(ns.clone());
        }
        linux.namespaces = by_type.entries.into_iter().filter_map(|(_, ns)| ns).collect();
        Ok(())
    }

    /// RDT: `remove` clears all three RDT fields (recorded as cleared by this
    /// policy) and replaces whatever the reply held with a bare removal;
    /// CLOS id, schemata and monitoring are then claimed one by one, and any
    /// of them set turns the removal off again. The working container's RDT
    /// is left alone, as the runtime leaves it.
    fn rdt(&mut self, step: &mut Step<'_, '_>, rdt: &pb::LinuxRdt) -> Result<(), MergeError> {
        let reply = self.reply.linux.mut_or_insert_default();
        if rdt.remove {
            for field in [F::RdtClosID, F::RdtSchemata, F::RdtEnableMonitoring] {
                step.owners.clear(step.scope.id, field, step.policy);
            }
            reply.rdt = MessageField::some(pb::LinuxRdt { remove: true, ..Default::default() });
        }
        let target = reply.rdt.mut_or_insert_default();
        if let Some(v) = rdt.clos_id.as_ref() {
            step.claim(F::RdtClosID)?;
            target.clos_id = MessageField::some(v.clone());
            target.remove = false;
        }
        if let Some(v) = rdt.schemata.as_ref() {
            step.claim(F::RdtSchemata)?;
            target.schemata = MessageField::some(v.clone());
            target.remove = false;
        }
        if let Some(v) = rdt.enable_monitoring.as_ref() {
            step.claim(F::RdtEnableMonitoring)?;
            target.enable_monitoring = MessageField::some(v.clone());
            target.remove = false;
        }
        Ok(())
    }

    /// Rlimits, by type, appended to reply and container (no removal).
    fn rlimits(&mut self, step: &mut Step<'_, '_>, input: &[pb::POSIXRlimit]) -> Result<(), MergeError> {
        for limit in input {
            step.claim_key(F::Rlimits, &limit.type_)?;
            Arc::make_mut(&mut self.container).rlimits.push(limit.clone());
            self.reply.rlimits.push(limit.clone());
        }
        Ok(())
    }

    /// CDI devices, by name: injected by the runtime, so they go into the
    /// reply only, never into the working container; no removal.
    fn cdi_devices(&mut self, step: &mut Step<'_, '_>, input: &[pb::CDIDevice]) -> Result<(), MergeError> {
        for device in input {
            step.claim_key(F::CdiDevices, &device.name)?;
            self.reply.CDI_devices.push(device.clone());
        }
        Ok(())
    }
}

/// One policy's claims on one container.
pub(crate) struct Step<'o, 'a> {
    pub owners: &'o mut Owners,
    pub scope: Scope<'a>,
    pub policy: &'a str,
}

impl Step<'_, '_> {
    pub(super) fn claim(&mut self, field: pb::Field) -> Result<(), MergeError> {
        self.owners.claim(self.scope, field, self.policy)
    }

    pub(super) fn claim_key(&mut self, field: pb::Field, key: &str) -> Result<(), MergeError> {
        self.owners.claim_key(self.scope, field, key, self.policy)
    }
}

/// The key a removal marker removes, or `None` if `key` is no marker.
pub(crate) fn removal(key: &str) -> Option<&str> {
    key.strip_prefix('-')
}

fn marker(key: &str) -> String {
    format!("-{key}")
}

/// The name of a `NAME=value` environment entry.
fn env_name(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(name, _)| name)
}

fn sorted<V>(map: &HashMap<String, V>) -> BTreeMap<&String, &V> {
    map.iter().collect()
}

/// Entries by key in first-seen order; a key inserted twice keeps its last
/// value (as a Go map would). Indexed, so that a reply of many entries
/// merges in linear time.
struct Ordered<K, V> {
    entries: Vec<(K, V)>,
    index: HashMap<K, usize>,
}

impl<K, V> Default for Ordered<K, V> {
    fn default() -> Self {
        Self { entries: Vec::new(), index: HashMap::new() }
    }
}

impl<K: Hash + Eq + Clone, V> Ordered<K, V> {
    fn insert(&mut self, key: K, value: V) {
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }

    fn contains<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.index.contains_key(key)
    }
}

/// The keyed-map rule of annotations, sysctls and net devices (see
/// [`Adjuster::annotations`]); `cleared` is the reply's value for a marker.
fn keyed_map<V: Clone>(
    step: &mut Step<'_, '_>,
    field: pb::Field,
    input: &HashMap<String, V>,
    container: &mut HashMap<String, V>,
    reply: &mut HashMap<String, V>,
    cleared: V,
) -> Result<(), MergeError> {
    let mut removed: BTreeSet<&str> = input.keys().filter_map(|k| removal(k)).collect();
    for (key, value) in sorted(input).into_iter().filter(|(k, _)| removal(k).is_none()) {
        if removed.remove(key.as_str()) {
            step.owners.clear_key(step.scope.id, field, key, step.policy);
            container.remove(key);
            reply.insert(marker(key), cleared.clone());
        }
        step.claim_key(field, key)?;
        container.insert(key.clone(), value.clone());
        reply.insert(key.clone(), value.clone());
    }
    for key in removed {
        reply.insert(marker(key), cleared.clone());
    }
    Ok(())
}

/// The keyed-list rule of mounts and devices (see [`Adjuster::mounts`]).
/// Removal markers the same input does not re-set are pushed to `removed`.
fn keyed_list<T: Clone>(
    step: &mut Step<'_, '_>,
    field: pb::Field,
    input: &[T],
    key: fn(&T) -> &String,
    container: &mut Vec<T>,
    reply: &mut Vec<T>,
    removed: &mut Vec<T>,
) -> Result<(), MergeError> {
    if input.is_empty() {
        return Ok(());
    }
    let (mut add, mut del) = (Vec::new(), Ordered::default());
    for item in input {
        match removal(key(item)) {
            Some(k) => del.insert(k, item),
            None => add.push(item),
        }
    }
    let modified: HashSet<&str> = add.iter().map(|item| key(item).as_str()).collect();

    reply.retain(|item| {
        let drop = del.contains(key(item).as_str());
        if drop {
            step.owners.clear_key(step.scope.id, field, key(item), step.policy);
        }
        !drop
    });
    container.retain(|item| !del.contains(key(item).as_str()) && !modified.contains(key(item).as_str()));
    for item in &add {
        step.claim_key(field, key(item))?;
        reply.push((*item).clone());
    }
    removed.extend(del.entries.iter().filter(|(k, _)| !modified.contains(k)).map(|(_, item)| (*item).clone()));
    container.extend(add.into_iter().cloned());
    Ok(())
}

/// Appends hooks to both lists; true if there were any.
fn append(hooks: &[pb::Hook], reply: &mut Vec<pb::Hook>, container: &mut Vec<pb::Hook>) -> bool {
    reply.extend(hooks.iter().cloned());
    container.extend(hooks.iter().cloned());
    !hooks.is_empty()
}

/// A simple optional field: claimed and set in the container and the reply.
fn set_both<T: Clone>(
    step: &mut Step<'_, '_>,
    field: pb::Field,
    input: &MessageField<T>,
    container: &mut MessageField<T>,
    reply: &mut MessageField<T>,
) -> Result<(), MergeError> {
    if let Some(value) = input.as_ref() {
        step.claim(field)?;
        *container = MessageField::some(value.clone());
        *reply = MessageField::some(value.clone());
    }
    Ok(())
}

/// A simple optional field: claimed and set in `target` and, if given, `mirror`.
fn set_opt<T: Clone>(
    step: &mut Step<'_, '_>,
    field: pb::Field,
    input: &MessageField<T>,
    target: &mut MessageField<T>,
    mirror: Option<&mut MessageField<T>>,
) -> Result<(), MergeError> {
    if let Some(value) = input.as_ref() {
        step.claim(field)?;
        *target = MessageField::some(value.clone());
        if let Some(mirror) = mirror {
            *mirror = MessageField::some(value.clone());
        }
    }
    Ok(())
}

/// Memory settings, field by field in the runtime's order. `target` is the
/// container's (or updated container's) memory, `mirror` the reply's.
pub(crate) fn set_memory(
    step: &mut Step<'_, '_>,
    input: &pb::LinuxMemory,
    target: &mut pb::LinuxMemory,
    mut mirror: Option<&mut pb::LinuxMemory>,
) -> Result<(), MergeError> {
    set_opt(step, F::MemLimit, &input.limit, &mut target.limit, mirror.as_deref_mut().map(|m| &mut m.limit))?;
    set_opt(
        step,
        F::MemReservation,
        &input.reservation,
        &mut target.reservation,
        mirror.as_deref_mut().map(|m| &mut m.reservation),
    )?;
    set_opt(step, F::MemSwapLimit, &input.swap, &mut target.swap, mirror.as_deref_mut().map(|m| &mut m.swap))?;
    set_opt(step, F::MemKernelLimit, &input.kernel, &mut target.kernel, mirror.as_deref_mut().map(|m| &mut m.kernel))?;
    set_opt(
        step,
        F::MemTCPLimit,
        &input.kernel_tcp,
        &mut target.kernel_tcp,
        mirror.as_deref_mut().map(|m| &mut m.kernel_tcp),
    )?;
    set_opt(
        step,
        F::MemSwappiness,
        &input.swappiness,
        &mut target.swappiness,
        mirror.as_deref_mut().map(|m| &mut m.swappiness),
    )?;
    set_opt(
        step,
        F::MemDisableOomKiller,
        &input.disable_oom_killer,
        &mut target.disable_oom_killer,
        mirror.as_deref_mut().map(|m| &mut m.disable_oom_killer),
    )?;
    set_opt(
        step,
        F::MemUseHierarchy,
        &input.use_hierarchy,
        &mut target.use_hierarchy,
        mirror.map(|m| &mut m.use_hierarchy),
    )
}

/// CPU settings, field by field in the runtime's order; cpuset strings
/// count as set when not empty.
pub(crate) fn set_cpu(
    step: &mut Step<'_, '_>,
    input: &pb::LinuxCPU,
    target: &mut pb::LinuxCPU,
    mut mirror: Option<&mut pb::LinuxCPU>,
) -> Result<(), MergeError> {
    set_opt(step, F::CPUShares, &input.shares, &mut target.shares, mirror.as_deref_mut().map(|c| &mut c.shares))?;
    set_opt(step, F::CPUQuota, &input.quota, &mut target.quota, mirror.as_deref_mut().map(|c| &mut c.quota))?;
    set_opt(step, F::CPUPeriod, &input.period, &mut target.period, mirror.as_deref_mut().map(|c| &mut c.period))?;
    set_opt(
        step,
        F::CPURealtimeRuntime,
        &input.realtime_runtime,
        &mut target.realtime_runtime,
        mirror.as_deref_mut().map(|c| &mut c.realtime_runtime),
    )?;
    set_opt(
        step,
        F::CPURealtimePeriod,
        &input.realtime_period,
        &mut target.realtime_period,
        mirror.as_deref_mut().map(|c| &mut c.realtime_period),
    )?;
    if !input.cpus.is_empty() {
        step.claim(F::CPUSetCPUs)?;
        target.cpus.clone_from(&input.cpus);
        if let Some(m) = mirror.as_deref_mut() {
            m.cpus.clone_from(&input.cpus);
        }
    }
    if !input.mems.is_empty() {
        step.claim(F::CPUSetMems)?;
        target.mems.clone_from(&input.mems);
        if let Some(m) = mirror {
            m.mems.clone_from(&input.mems);
        }
    }
    Ok(())
}

/// Drops the empty parts of an adjustment; `None` if nothing is left.
fn strip_adjustment(mut adjust: pb::ContainerAdjustment) -> Option<pb::ContainerAdjustment> {
    clear_if_default(&mut adjust.hooks);
    if let Some(linux) = adjust.linux.as_mut() {
        if let Some(resources) = linux.resources.as_mut() {
            strip_resources(resources);
        }
        clear_if_default(&mut linux.resources);
        clear_if_default(&mut linux.rdt);
    }
    clear_if_default(&mut adjust.linux);
    (adjust != pb::ContainerAdjustment::default()).then_some(adjust)
}

/// Drops empty memory and CPU settings.
pub(crate) fn strip_resources(resources: &mut pb::LinuxResources) {
    clear_if_default(&mut resources.memory);
    clear_if_default(&mut resources.cpu);
}

fn clear_if_default<T: protobuf::Message + PartialEq>(field: &mut MessageField<T>) {
    if field.as_ref().is_some_and(|v| *v == T::default()) {
        field.clear();
    }
}
