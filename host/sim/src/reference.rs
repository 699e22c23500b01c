//! The simulator's reference merge: how a runtime folds the replies of
//! several NRI plugins into one result.
//!
//! This is an oracle for tests, written independently of the host's own
//! merge (`nri_wasm::merge`) and kept deliberately plain: one function per
//! field, no attempt at sharing code between cases that merely look alike.
//! It follows the behaviour of NRI's runtime-side result collection
//! (containerd/nri, `pkg/adaptation/result.go` and the owner records of
//! `pkg/api/owners.go`):
//!
//! - Every field of a container is owned by at most one plugin. Simple
//!   fields (memory limit, args, cgroups path, ...) have one owner; compound
//!   fields (annotations, mounts, env, devices, ...) have one owner per key.
//!   A second claim fails the event with a conflict naming both plugins; a
//!   plugin claiming a field it already owns conflicts with itself.
//! - A removal (key prefixed with `-`) may record the field as cleared by the
//!   remover: the remover may claim it again, anyone else conflicts with the
//!   remover. When it does so depends on the field (see each function).
//! - OCI hooks never conflict, they accumulate in plugin order; device cgroup
//!   rules are appended.
//! - Updates of other containers are merged per container id in order of
//!   first mention; `ignore_failure` is the AND of every plugin's flag; an
//!   update that conflicts is skipped (not an error) when the plugin marked it
//!   `ignore_failure`.
//! - A CreateContainer reply may not update the container being created.
//!
//! Where the runtime walks a Go map (random order) the reference takes keys
//! in sorted order. The runtime's merge ignores evictions; the reference
//! records them (once per container, first reason kept) so that tests can
//! compare what was asked for.
//!
//! Besides the merged reply, [`CreateRun::spec`] shows the container as the
//! runtime finally creates it: the original container with the merged
//! adjustment applied the way NRI's OCI spec generator applies it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use nri_wasm_api::api as pb;
use pb::Field as F;
use protobuf::MessageField;

/// Why the reference runtime failed an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// `second` claimed `field`, which `first` had set (or removed) before.
    #[error("conflict on {field}: plugin {first:?} owns it, plugin {second:?} tried to set it too")]
    Conflict { field: String, first: String, second: String },
    /// A CreateContainer reply named the container being created in an update.
    #[error("plugin {plugin:?} tried to update container {container:?} while it is being created")]
    UpdatesCreatedContainer { plugin: String, container: String },
}

impl RefError {
    /// The plugins a conflict names (first owner, second claimer).
    pub fn plugins(&self) -> Vec<&str> {
        match self {
            Self::Conflict { first, second, .. } => vec![first, second],
            Self::UpdatesCreatedContainer { plugin, .. } => vec![plugin],
        }
    }
}

/// What the owner record of one field (or one key of a field) says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    Set(String),
    ClearedBy(String),
}

/// Ownership of every field of every container touched by the event.
#[derive(Debug, Clone, Default)]
struct Ledger {
    /// (container id, field number, key; "" for simple fields) -> owner.
    records: BTreeMap<(String, i32, String), Owner>,
}

impl Ledger {
    fn claim(&mut self, id: &str, field: F, key: &str, plugin: &str) -> Result<(), RefError> {
        let slot = (id.to_string(), field as i32, key.to_string());
        let blocker = match self.records.get(&slot) {
            None => None,
            Some(Owner::ClearedBy(p)) if p == plugin => None,
            Some(Owner::ClearedBy(p)) | Some(Owner::Set(p)) => Some(p.clone()),
        };
        if let Some(first) = blocker {
            let what = if key.is_empty() { format!("{field:?}") } else { format!("{field:?} {key:?}") };
            return Err(RefError::Conflict {
                field: format!("{what} of container {id:?}"),
                first,
                second: plugin.to_string(),
            });
        }
        self.records.insert(slot, Owner::Set(plugin.to_string()));
        Ok(())
    }

    fn clear(&mut self, id: &str, field: F, key: &str, plugin: &str) {
        self.records.insert((id.to_string(), field as i32, key.to_string()), Owner::ClearedBy(plugin.to_string()));
    }
}

fn unmarked(key: &str) -> Option<&str> {
    key.strip_prefix('-')
}

fn env_key(entry: &str) -> &str {
    entry.split_once('=').map_or(entry, |(k, _)| k)
}

/// A CreateContainer event as the runtime collects its plugins' replies.
#[derive(Debug, Clone)]
pub struct CreateRun {
    original: pb::Container,
    /// The container as shown to the next plugin.
    container: pb::Container,
    /// The merged adjustment.
    adjust: pb::ContainerAdjustment,
    updates: UpdateList,
    evictions: Vec<pb::ContainerEviction>,
    ledger: Ledger,
}

/// The result of a CreateContainer event.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateResult {
    /// The container as a plugin after the last one would see it.
    pub container: pb::Container,
    /// The merged adjustment the runtime applies.
    pub adjust: pb::ContainerAdjustment,
    /// The container with the adjustment applied (see [`CreateRun::spec`]).
    pub spec: pb::Container,
    pub updates: Vec<pb::ContainerUpdate>,
    pub evictions: Vec<pb::ContainerEviction>,
}

/// Entry point: `ReferenceRuntime::create(&req)` and so on.
#[derive(Debug, Clone, Copy)]
pub struct ReferenceRuntime;

impl ReferenceRuntime {
    pub fn create(req: &pb::CreateContainerRequest) -> CreateRun {
        CreateRun::new(req)
    }

    pub fn update(req: &pb::UpdateContainerRequest) -> UpdateRun {
        UpdateRun::new(req)
    }

    pub fn stop(req: &pb::StopContainerRequest) -> StopRun {
        StopRun::new(req)
    }
}

fn fresh_adjustment() -> pb::ContainerAdjustment {
    let mut adjust = pb::ContainerAdjustment::default();
    adjust.hooks.mut_or_insert_default();
    let resources = adjust.linux.mut_or_insert_default().resources.mut_or_insert_default();
    resources.memory.mut_or_insert_default();
    resources.cpu.mut_or_insert_default();
    adjust
}

impl CreateRun {
    pub fn new(req: &pb::CreateContainerRequest) -> Self {
        let original = (*req.container).clone();
        // The runtime fills in the sub-messages before the first plugin runs.
        let mut container = original.clone();
        container.hooks.mut_or_insert_default();
        let resources = container.linux.mut_or_insert_default().resources.mut_or_insert_default();
        resources.memory.mut_or_insert_default();
        resources.cpu.mut_or_insert_default();
        Self {
            updates: UpdateList { creating: Some(original.id.clone()), ..Default::default() },
            original,
            container,
            adjust: fresh_adjustment(),
            evictions: Vec::new(),
            ledger: Ledger::default(),
        }
    }

    /// The container as the next plugin would see it.
    pub fn container(&self) -> &pb::Container {
        &self.container
    }

    /// Folds in the reply of `plugin`. On error the event has failed; the
    /// state is then meaningless (the runtime throws it away).
    pub fn apply(&mut self, plugin: &str, reply: &pb::CreateContainerResponse) -> Result<(), RefError> {
        if let Some(adjust) = reply.adjust.as_ref() {
            self.adjust(plugin, adjust)?;
        }
        self.updates.merge(&mut self.ledger, plugin, &reply.update)?;
        record_evictions(&mut self.evictions, &reply.evict);
        Ok(())
    }

    pub fn result(&self) -> CreateResult {
        CreateResult {
            container: self.container.clone(),
            adjust: self.adjust.clone(),
            spec: self.spec(),
            updates: self.updates.list(),
            evictions: self.evictions.clone(),
        }
    }

    fn adjust(&mut self, plugin: &str, a: &pb::ContainerAdjustment) -> Result<(), RefError> {
        let id = self.container.id.clone();
        self.annotations(&id, plugin, &a.annotations)?;
        self.mounts(&id, plugin, &a.mounts)?;
        self.env(&id, plugin, &a.env)?;
        self.args(&id, plugin, &a.args)?;
        if let Some(hooks) = a.hooks.as_ref() {
            self.hooks(hooks);
        }
        if let Some(linux) = a.linux.as_ref() {
            self.devices(&id, plugin, &linux.devices)?;
            if let Some(res) = linux.resources.as_ref() {
                self.resources(&id, plugin, res)?;
            }
            self.linux_simple(&id, plugin, linux)?;
            self.namespaces(&id, plugin, &linux.namespaces)?;
            let (ctr, rep) = (self.container.linux.mut_or_insert_default(), self.adjust.linux.mut_or_insert_default());
            merge_keyed_map(
                &mut self.ledger,
                &id,
                plugin,
                F::Sysctl,
                &linux.sysctl,
                &mut ctr.sysctl,
                &mut rep.sysctl,
                String::new(),
            )?;
            merge_keyed_map(
                &mut self.ledger,
                &id,
                plugin,
                F::LinuxNetDevices,
                &linux.net_devices,
                &mut ctr.net_devices,
                &mut rep.net_devices,
                pb::LinuxNetDevice::default(),
            )?;
            if let Some(s) = linux.scheduler.as_ref() {
                self.ledger.claim(&id, F::LinuxSched, "", plugin)?;
                ctr.scheduler = MessageField::some(s.clone());
                rep.scheduler = MessageField::some(s.clone());
            }
            if let Some(rdt) = linux.rdt.as_ref() {
                self.rdt(&id, plugin, rdt)?;
            }
            if let Some(mp) = linux.memory_policy.as_ref() {
                // The container shown to plugins has no memory policy field.
                self.ledger.claim(&id, F::MemoryPolicy, "", plugin)?;
                self.adjust.linux.mut_or_insert_default().memory_policy = MessageField::some(mp.clone());
            }
        }
        for limit in &a.rlimits {
            self.ledger.claim(&id, F::Rlimits, &limit.type_, plugin)?;
            self.container.rlimits.push(limit.clone());
            self.adjust.rlimits.push(limit.clone());
        }
        for dev in &a.CDI_devices {
            // Resolved by the runtime later: recorded in the reply only.
            self.ledger.claim(&id, F::CdiDevices, &dev.name, plugin)?;
            self.adjust.CDI_devices.push(dev.clone());
        }
        Ok(())
    }

    /// Annotations: a key both removed and set by one plugin is cleared
    /// first (so that plugin overrides an earlier owner). A key only removed
    /// just leaves the marker in the reply: owner and container untouched.
    fn annotations(&mut self, id: &str, plugin: &str, input: &HashMap<String, String>) -> Result<(), RefError> {
        merge_keyed_map(
            &mut self.ledger,
            id,
            plugin,
            F::Annotations,
            input,
            &mut self.container.annotations,
            &mut self.adjust.annotations,
            String::new(),
        )
    }

    /// Mounts by destination. A removal takes the mount out of the reply (if
    /// an earlier plugin added it, releasing its owner to the remover) and
    /// out of the container; additions replace the container's mount at
    /// that destination. Removals the same plugin does not re-add stay in
    /// the reply as markers.
    fn mounts(&mut self, id: &str, plugin: &str, input: &[pb::Mount]) -> Result<(), RefError> {
        if input.is_empty() {
            return Ok(());
        }
        let removed: Vec<&pb::Mount> = input.iter().filter(|m| unmarked(&m.destination).is_some()).collect();
        let added: Vec<&pb::Mount> = input.iter().filter(|m| unmarked(&m.destination).is_none()).collect();
        let is_removed = |d: &str| removed.iter().any(|m| unmarked(&m.destination) == Some(d));
        let is_added = |d: &str| added.iter().any(|m| m.destination == d);

        let mut kept = Vec::new();
        for m in std::mem::take(&mut self.adjust.mounts) {
            if is_removed(&m.destination) {
                self.ledger.clear(id, F::Mounts, &m.destination, plugin);
            } else {
                kept.push(m);
            }
        }
        self.adjust.mounts = kept;
        self.container.mounts.retain(|m| !is_removed(&m.destination) && !is_added(&m.destination));
        for m in &added {
            self.ledger.claim(id, F::Mounts, &m.destination, plugin)?;
            self.adjust.mounts.push((*m).clone());
        }
        let mut seen = BTreeSet::new();
        for m in &removed {
            let dest = unmarked(&m.destination).unwrap_or_default();
            if !is_added(dest) && seen.insert(dest) {
                self.adjust.mounts.push((*m).clone());
            }
        }
        self.container.mounts.extend(added.into_iter().cloned());
        Ok(())
    }

    /// Environment by name, like mounts, except that removal markers are not
    /// kept in the reply: the removal only reaches the container shown to
    /// later plugins.
    fn env(&mut self, id: &str, plugin: &str, input: &[pb::KeyValue]) -> Result<(), RefError> {
        if input.is_empty() {
            return Ok(());
        }
        let removed: BTreeSet<&str> = input.iter().filter_map(|kv| unmarked(&kv.key)).collect();
        let added: Vec<&pb::KeyValue> = input.iter().filter(|kv| unmarked(&kv.key).is_none()).collect();
        let touched: BTreeSet<&str> = added.iter().map(|kv| kv.key.as_str()).collect();

        let mut kept = Vec::new();
        for kv in std::mem::take(&mut self.adjust.env) {
            if removed.contains(kv.key.as_str()) {
                self.ledger.clear(id, F::Env, &kv.key, plugin);
            } else {
                kept.push(kv);
            }
        }
        self.adjust.env = kept;
        self.container.env.retain(|e| !removed.contains(env_key(e)) && !touched.contains(env_key(e)));
        for kv in &added {
            self.ledger.claim(id, F::Env, &kv.key, plugin)?;
            self.adjust.env.push((*kv).clone());
        }
        for kv in &added {
            self.container.env.push(format!("{}={}", kv.key, kv.value));
        }
        Ok(())
    }

    /// Args: one simple field; a leading empty string releases it first.
    fn args(&mut self, id: &str, plugin: &str, input: &[String]) -> Result<(), RefError> {
        let Some(first) = input.first() else { return Ok(()) };
        let rest = if first.is_empty() {
            self.ledger.clear(id, F::Args, "", plugin);
            &input[1..]
        } else {
            input
        };
        self.ledger.claim(id, F::Args, "", plugin)?;
        self.adjust.args = rest.to_vec();
        self.container.args = rest.to_vec();
        Ok(())
    }

    /// Hooks: appended, kind by kind, to both reply and container.
    fn hooks(&mut self, h: &pb::Hooks) {
        for target in [self.adjust.hooks.mut_or_insert_default(), self.container.hooks.mut_or_insert_default()] {
            target.prestart.extend(h.prestart.iter().cloned());
            target.poststart.extend(h.poststart.iter().cloned());
            target.poststop.extend(h.poststop.iter().cloned());
            target.create_runtime.extend(h.create_runtime.iter().cloned());
            target.create_container.extend(h.create_container.iter().cloned());
            target.start_container.extend(h.start_container.iter().cloned());
        }
    }

    /// Devices by path: like env (removal markers are not kept in the reply).
    fn devices(&mut self, id: &str, plugin: &str, input: &[pb::LinuxDevice]) -> Result<(), RefError> {
        if input.is_empty() {
            return Ok(());
        }
        let removed: BTreeSet<&str> = input.iter().filter_map(|d| unmarked(&d.path)).collect();
        let added: Vec<&pb::LinuxDevice> = input.iter().filter(|d| unmarked(&d.path).is_none()).collect();
        let touched: BTreeSet<&str> = added.iter().map(|d| d.path.as_str()).collect();
        let reply = &mut self.adjust.linux.mut_or_insert_default().devices;
        let mut kept = Vec::new();
        for d in std::mem::take(reply) {
            if removed.contains(d.path.as_str()) {
                self.ledger.clear(id, F::Devices, &d.path, plugin);
            } else {
                kept.push(d);
            }
        }
        *reply = kept;
        let ctr = &mut self.container.linux.mut_or_insert_default().devices;
        ctr.retain(|d| !removed.contains(d.path.as_str()) && !touched.contains(d.path.as_str()));
        for d in &added {
            self.ledger.claim(id, F::Devices, &d.path, plugin)?;
            reply.push((*d).clone());
        }
        ctr.extend(added.into_iter().cloned());
        Ok(())
    }

    fn resources(&mut self, id: &str, plugin: &str, r: &pb::LinuxResources) -> Result<(), RefError> {
        let ctr = self.container.linux.mut_or_insert_default().resources.mut_or_insert_default();
        let rep = self.adjust.linux.mut_or_insert_default().resources.mut_or_insert_default();
        if let Some(m) = r.memory.as_ref() {
            let mut both = [ctr.memory.mut_or_insert_default(), rep.memory.mut_or_insert_default()];
            merge_memory(&mut self.ledger, id, plugin, m, &mut both)?;
        }
        if let Some(c) = r.cpu.as_ref() {
            let mut both = [ctr.cpu.mut_or_insert_default(), rep.cpu.mut_or_insert_default()];
            merge_cpu(&mut self.ledger, id, plugin, c, &mut both)?;
        }
        for l in &r.hugepage_limits {
            self.ledger.claim(id, F::HugepageLimits, &l.page_size, plugin)?;
            ctr.hugepage_limits.push(l.clone());
            rep.hugepage_limits.push(l.clone());
        }
        ctr.devices.extend(r.devices.iter().cloned());
        rep.devices.extend(r.devices.iter().cloned());
        for (k, v) in r.unified.iter().collect::<BTreeMap<_, _>>() {
            self.ledger.claim(id, F::CgroupsUnified, k, plugin)?;
            ctr.unified.insert(k.clone(), v.clone());
            rep.unified.insert(k.clone(), v.clone());
        }
        if let Some(v) = r.blockio_class.as_ref() {
            self.ledger.claim(id, F::BlockioClass, "", plugin)?;
            ctr.blockio_class = MessageField::some(v.clone());
            rep.blockio_class = MessageField::some(v.clone());
        }
        if let Some(v) = r.rdt_class.as_ref() {
            self.ledger.claim(id, F::RdtClass, "", plugin)?;
            ctr.rdt_class = MessageField::some(v.clone());
            rep.rdt_class = MessageField::some(v.clone());
        }
        if let Some(v) = r.pids.as_ref() {
            self.ledger.claim(id, F::PidsLimit, "", plugin)?;
            ctr.pids = MessageField::some(v.clone());
            rep.pids = MessageField::some(v.clone());
        }
        Ok(())
    }

    /// cgroups path, OOM score, I/O priority and seccomp policy.
    fn linux_simple(&mut self, id: &str, plugin: &str, l: &pb::LinuxContainerAdjustment) -> Result<(), RefError> {
        let ctr = self.container.linux.mut_or_insert_default();
        let rep = self.adjust.linux.mut_or_insert_default();
        if !l.cgroups_path.is_empty() {
            self.ledger.claim(id, F::CgroupsPath, "", plugin)?;
            ctr.cgroups_path.clone_from(&l.cgroups_path);
            rep.cgroups_path.clone_from(&l.cgroups_path);
        }
        if let Some(v) = l.oom_score_adj.as_ref() {
            self.ledger.claim(id, F::OomScoreAdj, "", plugin)?;
            ctr.oom_score_adj = MessageField::some(v.clone());
            rep.oom_score_adj = MessageField::some(v.clone());
        }
        if let Some(v) = l.io_priority.as_ref() {
            self.ledger.claim(id, F::IoPriority, "", plugin)?;
            ctr.io_priority = MessageField::some(v.clone());
            rep.io_priority = MessageField::some(v.clone());
        }
        if let Some(v) = l.seccomp_policy.as_ref() {
            self.ledger.claim(id, F::SeccompPolicy, "", plugin)?;
            ctr.seccomp_policy = MessageField::some(v.clone());
            rep.seccomp_policy = MessageField::some(v.clone());
        }
        Ok(())
    }

    /// Namespaces by type: every entry, removal or not, claims its type and
    /// goes into the reply as given.
    fn namespaces(&mut self, id: &str, plugin: &str, input: &[pb::LinuxNamespace]) -> Result<(), RefError> {
        if input.is_empty() {
            return Ok(());
        }
        let ctr = self.container.linux.mut_or_insert_default();
        let mut by_type: Vec<(String, Option<pb::LinuxNamespace>)> = Vec::new();
        let mut set = |t: &str, ns: Option<pb::LinuxNamespace>| {
            if let Some(slot) = by_type.iter_mut().find(|(k, _)| k == t) {
                slot.1 = ns;
            } else {
                by_type.push((t.to_string(), ns));
            }
        };
        for ns in &ctr.namespaces {
            set(&ns.type_, Some(ns.clone()));
        }
        for ns in input {
            let (t, gone) = match unmarked(&ns.type_) {
                Some(t) => (t, true),
                None => (ns.type_.as_str(), false),
            };
            self.ledger.claim(id, F::Namespace, t, plugin)?;
            set(t, if gone { None } else { Some(ns.clone()) });
            self.adjust.linux.mut_or_insert_default().namespaces.push(ns.clone());
        }
        ctr.namespaces = by_type.into_iter().filter_map(|(_, ns)| ns).collect();
        Ok(())
    }

    /// RDT: `remove` releases the three RDT fields to this plugin and resets
    /// the reply's RDT to a removal, which any value set afterwards cancels.
    fn rdt(&mut self, id: &str, plugin: &str, rdt: &pb::LinuxRdt) -> Result<(), RefError> {
        let rep = self.adjust.linux.mut_or_insert_default();
        if rdt.remove {
            for f in [F::RdtClosID, F::RdtSchemata, F::RdtEnableMonitoring] {
                self.ledger.clear(id, f, "", plugin);
            }
            rep.rdt = MessageField::some(pb::LinuxRdt { remove: true, ..Default::default() });
        }
        let out = rep.rdt.mut_or_insert_default();
        if let Some(v) = rdt.clos_id.as_ref() {
            self.ledger.claim(id, F::RdtClosID, "", plugin)?;
            out.clos_id = MessageField::some(v.clone());
            out.remove = false;
        }
        if let Some(v) = rdt.schemata.as_ref() {
            self.ledger.claim(id, F::RdtSchemata, "", plugin)?;
            out.schemata = MessageField::some(v.clone());
            out.remove = false;
        }
        if let Some(v) = rdt.enable_monitoring.as_ref() {
            self.ledger.claim(id, F::RdtEnableMonitoring, "", plugin)?;
            out.enable_monitoring = MessageField::some(v.clone());
            out.remove = false;
        }
        Ok(())
    }

    /// The container the runtime creates: the original container with the
    /// merged adjustment applied as NRI's spec generator applies it
    /// (annotation and sysctl markers are applied before values, where the
    /// generator's order depends on Go map iteration).
    pub fn spec(&self) -> pb::Container {
        let mut c = self.original.clone();
        let a = &self.adjust;
        apply_keyed_map(&mut c.annotations, &a.annotations);
        apply_env(&mut c.env, &a.env);
        if !a.args.is_empty() {
            c.args = a.args.clone();
        }
        if let Some(h) = a.hooks.as_ref() {
            if *h != pb::Hooks::default() {
                let t = c.hooks.mut_or_insert_default();
                t.prestart.extend(h.prestart.iter().cloned());
                t.poststart.extend(h.poststart.iter().cloned());
                t.poststop.extend(h.poststop.iter().cloned());
                t.create_runtime.extend(h.create_runtime.iter().cloned());
                t.create_container.extend(h.create_container.iter().cloned());
                t.start_container.extend(h.start_container.iter().cloned());
            }
        }
        c.CDI_devices.extend(a.CDI_devices.iter().cloned());
        if let Some(l) = a.linux.as_ref() {
            apply_linux(&mut c, l);
        }
        for m in &a.mounts {
            match unmarked(&m.destination) {
                Some(d) => c.mounts.retain(|x| x.destination != d),
                None => {
                    c.mounts.retain(|x| x.destination != m.destination);
                    c.mounts.push(m.clone());
                }
            }
        }
        // The generator orders mounts so that parents come before children.
        c.mounts.sort_by_key(|m| m.destination.split('/').filter(|s| !s.is_empty()).count());
        c.rlimits.extend(a.rlimits.iter().cloned());
        c
    }
}

fn apply_linux(c: &mut pb::Container, l: &pb::LinuxContainerAdjustment) {
    let has_any = *l != pb::LinuxContainerAdjustment::default();
    if !has_any {
        return;
    }
    let cl = c.linux.mut_or_insert_default();
    for d in &l.devices {
        let path = unmarked(&d.path).unwrap_or(&d.path);
        cl.devices.retain(|x| x.path != path);
        if unmarked(&d.path).is_none() {
            cl.devices.push(d.clone());
        }
    }
    if !l.cgroups_path.is_empty() {
        cl.cgroups_path.clone_from(&l.cgroups_path);
    }
    if l.oom_score_adj.is_some() {
        cl.oom_score_adj.clone_from(&l.oom_score_adj);
    }
    if l.io_priority.is_some() {
        cl.io_priority.clone_from(&l.io_priority);
    }
    if l.scheduler.is_some() {
        cl.scheduler.clone_from(&l.scheduler);
    }
    if l.seccomp_policy.is_some() {
        cl.seccomp_policy.clone_from(&l.seccomp_policy);
    }
    for ns in &l.namespaces {
        let t = unmarked(&ns.type_).unwrap_or(&ns.type_);
        match cl.namespaces.iter().position(|x| x.type_ == t) {
            Some(i) if unmarked(&ns.type_).is_some() => {
                cl.namespaces.remove(i);
            }
            Some(i) => cl.namespaces[i] = ns.clone(),
            None if unmarked(&ns.type_).is_none() => cl.namespaces.push(ns.clone()),
            None => {}
        }
    }
    apply_keyed_map(&mut cl.sysctl, &l.sysctl);
    apply_keyed_map(&mut cl.net_devices, &l.net_devices);
    if let Some(r) = l.resources.as_ref() {
        let has_resources = {
            let mut probe = r.clone();
            probe.memory.clear();
            probe.cpu.clear();
            probe != pb::LinuxResources::default()
                || r.memory.as_ref().is_some_and(|m| *m != pb::LinuxMemory::default())
                || r.cpu.as_ref().is_some_and(|m| *m != pb::LinuxCPU::default())
        };
        if has_resources {
            apply_resources(cl.resources.mut_or_insert_default(), r);
        }
    }
}

pub(crate) fn apply_resources(t: &mut pb::LinuxResources, r: &pb::LinuxResources) {
    if let Some(m) = r.memory.as_ref().filter(|m| **m != pb::LinuxMemory::default()) {
        let tm = t.memory.mut_or_insert_default();
        let mut dst = [tm];
        let mut scratch = Ledger::default();
        // Claims cannot fail on a fresh ledger: reuse the field-by-field setter.
        let _ = merge_memory(&mut scratch, "", "spec", m, &mut dst);
    }
    if let Some(cpu) = r.cpu.as_ref().filter(|c| **c != pb::LinuxCPU::default()) {
        let tc = t.cpu.mut_or_insert_default();
        let mut dst = [tc];
        let mut scratch = Ledger::default();
        let _ = merge_cpu(&mut scratch, "", "spec", cpu, &mut dst);
    }
    for l in &r.hugepage_limits {
        t.hugepage_limits.retain(|x| x.page_size != l.page_size);
        t.hugepage_limits.push(l.clone());
    }
    t.devices.extend(r.devices.iter().cloned());
    for (k, v) in &r.unified {
        t.unified.insert(k.clone(), v.clone());
    }
    if r.blockio_class.is_some() {
        t.blockio_class.clone_from(&r.blockio_class);
    }
    if r.rdt_class.is_some() {
        t.rdt_class.clone_from(&r.rdt_class);
    }
    if r.pids.is_some() {
        t.pids.clone_from(&r.pids);
    }
}

/// Removal markers first, then values.
fn apply_keyed_map<V: Clone>(target: &mut HashMap<String, V>, adjust: &HashMap<String, V>) {
    for k in adjust.keys().filter_map(|k| unmarked(k)) {
        target.remove(k);
    }
    for (k, v) in adjust.iter().filter(|(k, _)| unmarked(k).is_none()) {
        target.insert(k.clone(), v.clone());
    }
}

/// Environment as the generator edits it: existing variables are replaced
/// or dropped in place, new ones appended in adjustment order.
fn apply_env(env: &mut Vec<String>, adjust: &[pb::KeyValue]) {
    if adjust.is_empty() {
        return;
    }
    let mut pending: HashMap<&str, &pb::KeyValue> = HashMap::new();
    for kv in adjust {
        pending.insert(unmarked(&kv.key).unwrap_or(&kv.key), kv);
    }
    let mut out = Vec::new();
    for e in env.iter() {
        let Some((k, v)) = e.split_once('=') else { continue };
        match pending.remove(k) {
            Some(kv) if unmarked(&kv.key).is_none() => out.push(format!("{}={}", kv.key, kv.value)),
            Some(_) => {}
            None => out.push(format!("{k}={v}")),
        }
    }
    for kv in adjust {
        if unmarked(&kv.key).is_none() && pending.contains_key(kv.key.as_str()) {
            out.push(format!("{}={}", kv.key, kv.value));
        }
    }
    *env = out;
}

/// The annotation rule, shared by sysctls and net devices.
#[allow(clippy::too_many_arguments)]
fn merge_keyed_map<V: Clone>(
    ledger: &mut Ledger,
    id: &str,
    plugin: &str,
    field: F,
    input: &HashMap<String, V>,
    container: &mut HashMap<String, V>,
    reply: &mut HashMap<String, V>,
    blank: V,
) -> Result<(), RefError> {
    let mut only_removed: BTreeSet<&str> = input.keys().filter_map(|k| unmarked(k)).collect();
    let values: BTreeMap<&String, &V> = input.iter().filter(|(k, _)| unmarked(k).is_none()).collect();
    for (k, v) in values {
        if only_removed.remove(k.as_str()) {
            ledger.clear(id, field, k, plugin);
            container.remove(k.as_str());
            reply.insert(format!("-{k}"), blank.clone());
        }
        ledger.claim(id, field, k, plugin)?;
        container.insert(k.clone(), v.clone());
        reply.insert(k.clone(), v.clone());
    }
    for k in only_removed {
        reply.insert(format!("-{k}"), blank.clone());
    }
    Ok(())
}

/// Memory settings one by one, each claimed, written to every target.
fn merge_memory(
    ledger: &mut Ledger,
    id: &str,
    plugin: &str,
    m: &pb::LinuxMemory,
    targets: &mut [&mut pb::LinuxMemory],
) -> Result<(), RefError> {
    macro_rules! field {
        ($name:ident, $f:expr) => {
            if let Some(v) = m.$name.as_ref() {
                ledger.claim(id, $f, "", plugin)?;
                for t in targets.iter_mut() {
                    t.$name = MessageField::some(v.clone());
                }
            }
        };
    }
    field!(limit, F::MemLimit);
    field!(reservation, F::MemReservation);
    field!(swap, F::MemSwapLimit);
    field!(kernel, F::MemKernelLimit);
    field!(kernel_tcp, F::MemTCPLimit);
    field!(swappiness, F::MemSwappiness);
    field!(disable_oom_killer, F::MemDisableOomKiller);
    field!(use_hierarchy, F::MemUseHierarchy);
    Ok(())
}

/// CPU settings one by one; cpuset strings count when not empty.
fn merge_cpu(
    ledger: &mut Ledger,
    id: &str,
    plugin: &str,
    c: &pb::LinuxCPU,
    targets: &mut [&mut pb::LinuxCPU],
) -> Result<(), RefError> {
    macro_rules! field {
        ($name:ident, $f:expr) => {
            if let Some(v) = c.$name.as_ref() {
                ledger.claim(id, $f, "", plugin)?;
                for t in targets.iter_mut() {
                    t.$name = MessageField::some(v.clone());
                }
            }
        };
    }
    field!(shares, F::CPUShares);
    field!(quota, F::CPUQuota);
    field!(period, F::CPUPeriod);
    field!(realtime_runtime, F::CPURealtimeRuntime);
    field!(realtime_period, F::CPURealtimePeriod);
    if !c.cpus.is_empty() {
        ledger.claim(id, F::CPUSetCPUs, "", plugin)?;
        for t in targets.iter_mut() {
            t.cpus.clone_from(&c.cpus);
        }
    }
    if !c.mems.is_empty() {
        ledger.claim(id, F::CPUSetMems, "", plugin)?;
        for t in targets.iter_mut() {
            t.mems.clone_from(&c.mems);
        }
    }
    Ok(())
}

fn record_evictions(into: &mut Vec<pb::ContainerEviction>, from: &[pb::ContainerEviction]) {
    for e in from {
        if !into.iter().any(|x| x.container_id == e.container_id) {
            into.push(e.clone());
        }
    }
}

/// Updates of containers, merged per id.
#[derive(Debug, Clone, Default)]
struct UpdateList {
    /// CreateContainer: the id that may not be updated.
    creating: Option<String>,
    /// UpdateContainer: the requested container and its (current) resources.
    requested: Option<(String, pb::LinuxResources)>,
    /// Merged updates, in order of first mention (the requested container
    /// included; [`UpdateList::list`] moves it last).
    entries: Vec<pb::ContainerUpdate>,
}

impl UpdateList {
    fn merge(&mut self, ledger: &mut Ledger, plugin: &str, updates: &[pb::ContainerUpdate]) -> Result<(), RefError> {
        for u in updates {
            let id = u.container_id.as_str();
            if self.creating.as_deref() == Some(id) {
                return Err(RefError::UpdatesCreatedContainer { plugin: plugin.into(), container: id.into() });
            }
            let idx = match self.entries.iter().position(|e| e.container_id == id) {
                Some(i) => {
                    self.entries[i].ignore_failure = self.entries[i].ignore_failure && u.ignore_failure;
                    i
                }
                None => {
                    let mut fresh = pb::ContainerUpdate {
                        container_id: id.to_string(),
                        ignore_failure: u.ignore_failure,
                        ..Default::default()
                    };
                    let res = fresh.linux.mut_or_insert_default().resources.mut_or_insert_default();
                    res.memory.mut_or_insert_default();
                    res.cpu.mut_or_insert_default();
                    self.entries.push(fresh);
                    self.entries.len() - 1
                }
            };
            if let Err(e) = self.merge_resources(ledger, plugin, idx, u) {
                if !u.ignore_failure {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Applies one update's resources to a copy; the copy replaces the
    /// entry (and, for the requested container, its resources) on success.
    /// Device rules are not carried over and a pids limit given by the
    /// update is not applied; a pids limit already present is claimed.
    fn merge_resources(
        &mut self,
        ledger: &mut Ledger,
        plugin: &str,
        idx: usize,
        u: &pb::ContainerUpdate,
    ) -> Result<(), RefError> {
        let Some(input) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else { return Ok(()) };
        let id = u.container_id.as_str();
        let is_requested = self.requested.as_ref().is_some_and(|(rid, _)| rid == id);
        let mut work = match &self.requested {
            Some((rid, res)) if rid == id => res.clone(),
            _ => (*self.entries[idx].linux.resources).clone(),
        };
        if let Some(m) = input.memory.as_ref() {
            merge_memory(ledger, id, plugin, m, &mut [work.memory.mut_or_insert_default()])?;
        }
        if let Some(c) = input.cpu.as_ref() {
            merge_cpu(ledger, id, plugin, c, &mut [work.cpu.mut_or_insert_default()])?;
        }
        for l in &input.hugepage_limits {
            ledger.claim(id, F::HugepageLimits, &l.page_size, plugin)?;
            work.hugepage_limits.push(l.clone());
        }
        for (k, v) in input.unified.iter().collect::<BTreeMap<_, _>>() {
            ledger.claim(id, F::CgroupsUnified, k, plugin)?;
            work.unified.insert(k.clone(), v.clone());
        }
        if let Some(v) = input.blockio_class.as_ref() {
            ledger.claim(id, F::BlockioClass, "", plugin)?;
            work.blockio_class = MessageField::some(v.clone());
        }
        if let Some(v) = input.rdt_class.as_ref() {
            ledger.claim(id, F::RdtClass, "", plugin)?;
            work.rdt_class = MessageField::some(v.clone());
        }
        if work.pids.is_some() {
            ledger.claim(id, F::PidsLimit, "", plugin)?;
        }
        self.entries[idx].linux.mut_or_insert_default().resources = MessageField::some(work.clone());
        if is_requested {
            if let Some((_, res)) = self.requested.as_mut() {
                *res = work;
            }
        }
        Ok(())
    }

    /// Other containers in order of first mention, then the requested one.
    fn list(&self) -> Vec<pb::ContainerUpdate> {
        let rid = self.requested.as_ref().map(|(id, _)| id.as_str());
        let mut out: Vec<_> = self.entries.iter().filter(|e| Some(e.container_id.as_str()) != rid).cloned().collect();
        out.extend(self.entries.iter().filter(|e| Some(e.container_id.as_str()) == rid).cloned());
        out
    }
}

/// An UpdateContainer event.
#[derive(Debug, Clone)]
pub struct UpdateRun {
    updates: UpdateList,
    evictions: Vec<pb::ContainerEviction>,
    ledger: Ledger,
}

/// The result of an UpdateContainer or StopContainer event.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdatesResult {
    /// Other containers first, then (UpdateContainer) the requested one,
    /// carrying its full resources with every plugin's change applied.
    pub updates: Vec<pb::ContainerUpdate>,
    pub evictions: Vec<pb::ContainerEviction>,
}

impl UpdateRun {
    pub fn new(req: &pb::UpdateContainerRequest) -> Self {
        let mut res = req.linux_resources.clone().unwrap_or_default();
        res.memory.mut_or_insert_default();
        res.cpu.mut_or_insert_default();
        Self {
            updates: UpdateList { requested: Some((req.container.id.clone(), res)), ..Default::default() },
            evictions: Vec::new(),
            ledger: Ledger::default(),
        }
    }

    /// The requested resources as the next plugin would see them.
    pub fn resources(&self) -> Option<&pb::LinuxResources> {
        self.updates.requested.as_ref().map(|(_, r)| r)
    }

    pub fn apply(&mut self, plugin: &str, reply: &pb::UpdateContainerResponse) -> Result<(), RefError> {
        self.updates.merge(&mut self.ledger, plugin, &reply.update)?;
        record_evictions(&mut self.evictions, &reply.evict);
        Ok(())
    }

    pub fn result(&self) -> UpdatesResult {
        UpdatesResult { updates: self.updates.list(), evictions: self.evictions.clone() }
    }
}

/// A StopContainer event: updates of any container.
#[derive(Debug, Clone)]
pub struct StopRun {
    updates: UpdateList,
    ledger: Ledger,
}

impl StopRun {
    pub fn new(_req: &pb::StopContainerRequest) -> Self {
        Self { updates: UpdateList::default(), ledger: Ledger::default() }
    }

    pub fn apply(&mut self, plugin: &str, reply: &pb::StopContainerResponse) -> Result<(), RefError> {
        self.updates.merge(&mut self.ledger, plugin, &reply.update)
    }

    pub fn result(&self) -> UpdatesResult {
        UpdatesResult { updates: self.updates.list(), evictions: Vec::new() }
    }
}
