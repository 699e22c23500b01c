//! The host's view of every pod and container on the node.
//!
//! Policies run in a fresh instance per event and keep nothing; resource
//! policies still need to know what else runs on the node. The host keeps that
//! knowledge here: built from Synchronize, kept current from every event
//! (with the resources a container really got, i.e. after the adjustments and
//! updates that were answered), dropped on disconnect and rebuilt from the
//! next Synchronize. Only what policies need is kept (identity, state, labels,
//! annotations, resources), and the number of entries is bounded, so a
//! runtime with a runaway number of pods cannot make the host grow without
//! limit.
//!
//! The maps are persistent (`imbl`): an evaluation reads a snapshot of the
//! view while the next event changes it, and a change then copies only the
//! path to the entry it touches, not the node's thousands of entries.
//!
//! Queries run on behalf of policies, inside a host call, where epochs
//! cannot interrupt: a query must be bounded by what it is given and by the
//! node, and must stop at the caller's deadline. A filter is therefore
//! compiled once into a bounded form ([`ContainerQuery`]: the states as a
//! set of bits, the required labels as one map with a duplicate key
//! resolved once), in time linear in its size; each container then costs at
//! most as many label lookups as the container has labels, and a pod filter
//! is evaluated once per pod, not once per container. Every loop over the
//! filter or the node charges a [`WorkClock`], which looks at the clock every
//! few hundred steps and ends the query at the deadline.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use imbl::{OrdMap, OrdSet};

use nri_wasm_api::api as pb;
use protobuf::MessageField;

/// A pod as the view keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodEntry {
    /// The pod's ID (the sandbox ID).
    pub id: String,
    /// The pod's name.
    pub name: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's Kubernetes UID.
    pub uid: String,
    /// The pod's labels.
    pub labels: BTreeMap<String, String>,
    /// The pod's annotations.
    pub annotations: BTreeMap<String, String>,
    /// Ids of its containers the view knows.
    pub containers: OrdSet<String>,
}

/// A container as the view keeps it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContainerEntry {
    /// The container's ID.
    pub id: String,
    /// The ID of its pod.
    pub pod_id: String,
    /// The container's name.
    pub name: String,
    /// Its state, as the runtime last told.
    pub state: pb::ContainerState,
    /// The container's labels.
    pub labels: BTreeMap<String, String>,
    /// The container's annotations.
    pub annotations: BTreeMap<String, String>,
    /// Effective Linux resources: as created, then adjusted, then updated.
    pub resources: Option<pb::LinuxResources>,
}

/// What a key-value pair costs copied out besides its bytes: the record
/// of two strings it becomes (three words each).
const PAIR_OVERHEAD: usize = 48;

/// The bytes of a map's keys and values, and of the pairs they become.
fn map_bytes(map: &BTreeMap<String, String>) -> usize {
    map.iter().map(|(k, v)| k.len() + v.len() + PAIR_OVERHEAD).sum()
}

impl PodEntry {
    /// About how many bytes the pod takes copied out for a policy: its
    /// strings, not what holding them costs.
    pub fn bytes(&self) -> usize {
        let Self { id, name, namespace, uid, labels, annotations, containers } = self;
        id.len()
            + name.len()
            + namespace.len()
            + uid.len()
            + map_bytes(labels)
            + map_bytes(annotations)
            + containers.iter().map(String::len).sum::<usize>()
    }
}

impl ContainerEntry {
    /// About how many bytes the container takes copied out for a policy:
    /// its strings and its resources as encoded.
    pub fn bytes(&self) -> usize {
        use protobuf::Message;
        let Self { id, pod_id, name, state: _, labels, annotations, resources } = self;
        id.len()
            + pod_id.len()
            + name.len()
            + map_bytes(labels)
            + map_bytes(annotations)
            + resources.as_ref().map_or(0, |r| r.compute_size() as usize)
    }
}

/// How many entries the view holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewLimits {
    /// Pods at most; more are refused and counted.
    pub max_pods: usize,
    /// Containers at most; more are refused and counted.
    pub max_containers: usize,
}

impl Default for ViewLimits {
    fn default() -> Self {
        // Far above the pod limit of any Kubernetes node (110 by default).
        Self { max_pods: 4_096, max_containers: 16_384 }
    }
}

/// Pods and containers of the node, current as of the last event.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    pods: OrdMap<String, PodEntry>,
    containers: OrdMap<String, ContainerEntry>,
    /// Containers whose pod the view does not know, by pod id.
    orphans: OrdMap<String, OrdSet<String>>,
    limits: ViewLimits,
    /// Entries refused because the view was full (since the last rebuild).
    refused: u64,
    /// Built from a Synchronize: the view knows every container.
    synchronized: bool,
}

impl crate::merge::KnownContainers for NodeView {
    fn exists(&self, id: &str) -> Option<bool> {
        self.synchronized.then(|| self.containers.contains_key(id))
    }
}

fn pod_entry(p: &pb::PodSandbox) -> PodEntry {
    PodEntry {
        id: p.id.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        uid: p.uid.clone(),
        labels: p.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        annotations: p.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        containers: OrdSet::new(),
    }
}

/// The view's entry of a container the runtime sent.
pub fn container_entry(c: &pb::Container) -> ContainerEntry {
    ContainerEntry {
        id: c.id.clone(),
        pod_id: c.pod_sandbox_id.clone(),
        name: c.name.clone(),
        state: c.state.enum_value_or_default(),
        labels: c.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        annotations: c.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        resources: c.linux.as_ref().and_then(|l| l.resources.as_ref()).cloned(),
    }
}

/// Which containers to list; every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFilter {
    /// Only the containers of this pod.
    pub pod_id: Option<String>,
    /// Any of these states (empty: any state).
    pub states: Vec<pb::ContainerState>,
    /// Only containers with all these labels.
    pub labels: Vec<(String, String)>,
    /// Only containers whose pod has all these labels.
    pub pod_labels: Vec<(String, String)>,
}

impl ContainerFilter {
    /// Every container.
    pub fn all() -> Self {
        Self::default()
    }

    /// The filter in its bounded form (no deadline: the host's own use).
    pub fn query(&self) -> ContainerQuery<'_> {
        fn pairs(l: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
            l.iter().map(|(k, v)| (k.as_str(), v.as_str()))
        }
        ContainerQuery::new(
            self.pod_id.as_deref(),
            self.states.iter().copied(),
            pairs(&self.labels),
            pairs(&self.pod_labels),
            &mut WorkClock::unbounded(),
        )
        .expect("an unbounded clock never expires")
    }
}

/// Units of work between two looks at the clock (a look costs tens of
/// nanoseconds; a unit is about one cheap step, a lookup or a bit set).
const CLOCK_EVERY: u64 = 1024;
/// Units one container costs to visit and test against a filter.
pub const VISIT_UNITS: u64 = 4;
/// Units one container or pod costs to copy out for a policy.
pub const COPY_UNITS: u64 = 64;

/// Work done for a caller that has a deadline: every loop charges it, and
/// it ends the work once the deadline has passed. It looks at the clock
/// every `CLOCK_EVERY` units, so a query stops within microseconds of the
/// deadline, whatever the filter and the node.
#[derive(Debug)]
pub struct WorkClock {
    deadline: Bound,
    /// Units since the clock was last read.
    pending: u64,
    /// Units in all.
    spent: u64,
}

/// The deadline passed before the work was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline reached after {units} units of work")]
pub struct Expired {
    /// Units of work done by then.
    pub units: u64,
}

/// Whatever says when work for a caller must stop: a policy call's clock,
/// which charges the time the call used rather than the wall clock's
/// (`policy/call/meter.rs`).
pub trait Expiry: Send + Sync + std::fmt::Debug {
    /// Whether the caller's time is up.
    fn expired(&self) -> bool;
}

#[derive(Debug)]
enum Bound {
    None,
    At(Instant),
    By(std::sync::Arc<dyn Expiry>),
}

impl WorkClock {
    /// Work that must end by `deadline`.
    pub fn until(deadline: Instant) -> Self {
        Self { deadline: Bound::At(deadline), pending: 0, spent: 0 }
    }

    /// Work that must end when `expiry` says so.
    pub fn charged_to(expiry: std::sync::Arc<dyn Expiry>) -> Self {
        Self { deadline: Bound::By(expiry), pending: 0, spent: 0 }
    }

    /// Work without a deadline (the host's own, bounded by the node).
    pub fn unbounded() -> Self {
        Self { deadline: Bound::None, pending: 0, spent: 0 }
    }

    /// Charges `units` of work; fails once the deadline has passed.
    #[inline]
    pub fn spend(&mut self, units: u64) -> Result<(), Expired> {
        self.pending += units;
        if self.pending >= CLOCK_EVERY {
            return self.check();
        }
        Ok(())
    }

    /// Reads the clock now.
    pub fn check(&mut self) -> Result<(), Expired> {
        self.spent += std::mem::take(&mut self.pending);
        let expired = match &self.deadline {
            Bound::None => false,
            Bound::At(at) => Instant::now() >= *at,
            Bound::By(expiry) => expiry.expired(),
        };
        match expired {
            true => Err(Expired { units: self.spent }),
            false => Ok(()),
        }
    }

    /// Units of work charged so far.
    pub fn spent(&self) -> u64 {
        self.spent + self.pending
    }
}

/// Container states as a set of bits: a filter of any length becomes one
/// word, and testing a container costs one instruction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateSet(u64);

impl StateSet {
    fn bit(state: pb::ContainerState) -> u64 {
        // The protocol's states are 0 to 4; anything else the runtime might
        // send one day shares the last bit rather than being lost.
        1 << (state as i32).clamp(0, 63)
    }

    /// Adds a state to the set.
    pub fn insert(&mut self, state: pb::ContainerState) {
        self.0 |= Self::bit(state);
    }

    /// Whether the set has this state.
    pub fn contains(&self, state: pb::ContainerState) -> bool {
        self.0 & Self::bit(state) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }
}

/// Labels a filter requires, deduplicated: each key once. A key required
/// with two different values matches nothing.
#[derive(Debug, Clone, Default)]
struct Required<'f> {
    pairs: HashMap<&'f str, &'f str>,
    contradictory: bool,
}

impl<'f> Required<'f> {
    fn new(list: impl IntoIterator<Item = (&'f str, &'f str)>, clock: &mut WorkClock) -> Result<Self, Expired> {
        let mut required = Required::default();
        for (k, v) in list {
            clock.spend(1)?;
            match required.pairs.entry(k) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    if *e.get() != v {
                        required.contradictory = true;
                    }
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(v);
                }
            }
        }
        Ok(required)
    }

    fn is_empty(&self) -> bool {
        self.pairs.is_empty() && !self.contradictory
    }

    /// Whether `labels` carry every required pair. Costs at most as many
    /// lookups as `labels` has entries: a filter requiring more keys than
    /// the labels have cannot hold.
    fn hold_in(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.contradictory
            && self.pairs.len() <= labels.len()
            && self.pairs.iter().all(|(k, v)| labels.get(*k).is_some_and(|have| have == v))
    }
}

/// A container filter in its bounded form, built once per query in time
/// linear in the filter (see the module documentation).
#[derive(Debug, Clone)]
pub struct ContainerQuery<'f> {
    pod_id: Option<&'f str>,
    states: StateSet,
    labels: Required<'f>,
    pod_labels: Required<'f>,
}

impl<'f> ContainerQuery<'f> {
    /// Compiles a filter, charging `clock` for each of its elements.
    pub fn new(
        pod_id: Option<&'f str>,
        states: impl IntoIterator<Item = pb::ContainerState>,
        labels: impl IntoIterator<Item = (&'f str, &'f str)>,
        pod_labels: impl IntoIterator<Item = (&'f str, &'f str)>,
        clock: &mut WorkClock,
    ) -> Result<Self, Expired> {
        let mut set = StateSet::default();
        for s in states {
            clock.spend(1)?;
            set.insert(s);
        }
        Ok(Self {
            pod_id,
            states: set,
            labels: Required::new(labels, clock)?,
            pod_labels: Required::new(pod_labels, clock)?,
        })
    }

    /// Whether `c` passes the conditions on the container itself.
    fn own(&self, c: &ContainerEntry) -> bool {
        self.pod_id.is_none_or(|p| p == c.pod_id)
            && (self.states.is_empty() || self.states.contains(c.state))
            && (self.labels.is_empty() || self.labels.hold_in(&c.labels))
    }
}

/// Sets in `base` every field `over` sets (the way the runtime applies an
/// adjustment or an update to a container's resources).
pub fn overlay_resources(base: &mut pb::LinuxResources, over: &pb::LinuxResources) {
    fn opt<T: Clone>(b: &mut MessageField<T>, o: &MessageField<T>) {
        if o.is_some() {
            *b = o.clone();
        }
    }
    // Destructured field by field: a field added to the protocol does not
    // compile until it is decided how it overlays.
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
    } = over;
    if let Some(m) = memory.as_ref() {
        let pb::LinuxMemory {
            limit,
            reservation,
            swap,
            kernel,
            kernel_tcp,
            swappiness,
            disable_oom_killer,
            use_hierarchy,
            special_fields: _,
        } = m;
        let b = base.memory.mut_or_insert_default();
        opt(&mut b.limit, limit);
        opt(&mut b.reservation, reservation);
        opt(&mut b.swap, swap);
        opt(&mut b.kernel, kernel);
        opt(&mut b.kernel_tcp, kernel_tcp);
        opt(&mut b.swappiness, swappiness);
        opt(&mut b.disable_oom_killer, disable_oom_killer);
        opt(&mut b.use_hierarchy, use_hierarchy);
    }
    if let Some(c) = cpu.as_ref() {
        let pb::LinuxCPU { shares, quota, period, realtime_runtime, realtime_period, cpus, mems, special_fields: _ } =
            c;
        let b = base.cpu.mut_or_insert_default();
        opt(&mut b.shares, shares);
        opt(&mut b.quota, quota);
        opt(&mut b.period, period);
        opt(&mut b.realtime_runtime, realtime_runtime);
        opt(&mut b.realtime_period, realtime_period);
        if !cpus.is_empty() {
            b.cpus.clone_from(cpus);
        }
        if !mems.is_empty() {
            b.mems.clone_from(mems);
        }
    }
    for h in hugepage_limits {
        match base.hugepage_limits.iter_mut().find(|b| b.page_size == h.page_size) {
            Some(b) => b.limit = h.limit,
            None => base.hugepage_limits.push(h.clone()),
        }
    }
    opt(&mut base.blockio_class, blockio_class);
    opt(&mut base.rdt_class, rdt_class);
    for (k, v) in unified {
        base.unified.insert(k.clone(), v.clone());
    }
    base.devices.extend(devices.iter().cloned());
    opt(&mut base.pids, pids);
}

/// Applies a map adjustment with NRI's removal convention (`-key` removes).
fn adjust_map(map: &mut BTreeMap<String, String>, adjust: &std::collections::HashMap<String, String>) {
    let mut keys: Vec<&String> = adjust.keys().collect();
    // Removals first, then sets, so that "-k" and "k" in one adjustment set k.
    keys.sort_by_key(|k| (!k.starts_with('-'), k.as_str()));
    for k in keys {
        match k.strip_prefix('-') {
            Some(removed) => {
                map.remove(removed);
            }
            None => {
                map.insert(k.clone(), adjust[k].clone());
            }
        }
    }
}

impl NodeView {
    /// An empty view holding at most `limits`.
    pub fn new(limits: ViewLimits) -> Self {
        Self { limits, ..Self::default() }
    }

    /// Replaces everything with what Synchronize reported.
    pub fn synchronize(&mut self, pods: &[pb::PodSandbox], containers: &[pb::Container]) {
        self.clear();
        self.synchronized = true;
        for p in pods {
            self.pod_started(p);
        }
        for c in containers {
            self.add_container(container_entry(c));
        }
    }

    /// Forgets everything (the runtime went away).
    pub fn clear(&mut self) {
        self.pods.clear();
        self.containers.clear();
        self.orphans.clear();
        self.refused = 0;
        self.synchronized = false;
    }

    /// A pod was created or started (RunPodSandbox), or changed.
    pub fn pod_started(&mut self, pod: &pb::PodSandbox) {
        if let Some(existing) = self.pods.get_mut(&pod.id) {
            let containers = std::mem::take(&mut existing.containers);
            *existing = PodEntry { containers, ..pod_entry(pod) };
            return;
        }
        if self.pods.len() >= self.limits.max_pods {
            self.refused += 1;
            return;
        }
        let mut entry = pod_entry(pod);
        entry.containers = self.orphans.remove(&pod.id).unwrap_or_default();
        self.pods.insert(pod.id.clone(), entry);
    }

    /// A pod and its containers are gone (RemovePodSandbox).
    pub fn pod_removed(&mut self, id: &str) {
        let known = self.pods.remove(id).map(|p| p.containers).unwrap_or_default();
        let orphans = self.orphans.remove(id).unwrap_or_default();
        for c in known.iter().chain(orphans.iter()) {
            self.containers.remove(c);
        }
    }

    fn add_container(&mut self, entry: ContainerEntry) {
        if !self.containers.contains_key(&entry.id) && self.containers.len() >= self.limits.max_containers {
            self.refused += 1;
            return;
        }
        match self.pods.get_mut(&entry.pod_id) {
            Some(pod) => {
                pod.containers.insert(entry.id.clone());
            }
            None => {
                self.orphans.entry(entry.pod_id.clone()).or_default().insert(entry.id.clone());
            }
        }
        self.containers.insert(entry.id.clone(), entry);
    }

    /// A container was created with the adjustment the host answered.
    pub fn container_created(&mut self, container: &pb::Container, adjust: Option<&pb::ContainerAdjustment>) {
        let mut entry = container_entry(container);
        entry.state = pb::ContainerState::CONTAINER_CREATED;
        if let Some(a) = adjust {
            adjust_map(&mut entry.annotations, &a.annotations);
            if let Some(r) = a.linux.as_ref().and_then(|l| l.resources.as_ref()) {
                overlay_resources(entry.resources.get_or_insert_with(Default::default), r);
            }
        }
        self.add_container(entry);
    }

    /// The runtime reported a container's state (start, stop, post-events).
    pub fn container_seen(&mut self, container: &pb::Container) {
        match self.containers.get_mut(&container.id) {
            Some(entry) => {
                let state = container.state.enum_value_or_default();
                if state != pb::ContainerState::CONTAINER_UNKNOWN {
                    entry.state = state;
                }
            }
            None => self.add_container(container_entry(container)),
        }
    }

    /// The runtime reported a container after changing it (PostUpdate):
    /// its state, and its resources where the report carries them.
    pub fn container_reported(&mut self, container: &pb::Container) {
        self.container_seen(container);
        if let (Some(entry), Some(r)) =
            (self.containers.get_mut(&container.id), container.linux.as_ref().and_then(|l| l.resources.as_ref()))
        {
            entry.resources = Some(r.clone());
        }
    }

    /// The runtime applies `resources` to a container (UpdateContainer).
    pub fn update_resources(&mut self, id: &str, resources: &pb::LinuxResources) {
        if let Some(entry) = self.containers.get_mut(id) {
            overlay_resources(entry.resources.get_or_insert_with(Default::default), resources);
        }
    }

    /// Sets a container's state.
    pub fn set_state(&mut self, id: &str, state: pb::ContainerState) {
        if let Some(entry) = self.containers.get_mut(id) {
            entry.state = state;
        }
    }

    /// Updates answered for containers (their resources change).
    pub fn apply_updates(&mut self, updates: &[pb::ContainerUpdate]) {
        for u in updates {
            let (Some(entry), Some(r)) =
                (self.containers.get_mut(&u.container_id), u.linux.as_ref().and_then(|l| l.resources.as_ref()))
            else {
                continue;
            };
            overlay_resources(entry.resources.get_or_insert_with(Default::default), r);
        }
    }

    /// A container is gone (RemoveContainer).
    pub fn container_removed(&mut self, id: &str) {
        if let Some(c) = self.containers.remove(id) {
            if let Some(pod) = self.pods.get_mut(&c.pod_id) {
                pod.containers.remove(id);
            } else if let Some(orphans) = self.orphans.get_mut(&c.pod_id) {
                orphans.remove(id);
                if orphans.is_empty() {
                    self.orphans.remove(&c.pod_id);
                }
            }
        }
    }

    /// Whether the view was built from a Synchronize (and knows every container).
    pub fn is_synchronized(&self) -> bool {
        self.synchronized
    }

    /// The pod with this ID, if the view has it.
    pub fn pod(&self, id: &str) -> Option<&PodEntry> {
        self.pods.get(id)
    }

    /// The container with this ID, if the view has it.
    pub fn container(&self, id: &str) -> Option<&ContainerEntry> {
        self.containers.get(id)
    }

    /// Every pod, by id.
    pub fn pods(&self) -> impl Iterator<Item = &PodEntry> {
        self.pods.values()
    }

    /// The containers `filter` selects, by id. `current` stands in for the
    /// view's entry of the same id (or is added): the container of the event
    /// being evaluated, as the policies so far changed it.
    pub fn containers<'a>(
        &'a self,
        filter: &'a ContainerFilter,
        current: Option<&'a ContainerEntry>,
    ) -> impl Iterator<Item = &'a ContainerEntry> + 'a {
        let query = filter.query();
        let mut found = Vec::new();
        self.query(&query, current, &mut WorkClock::unbounded(), |c| {
            found.push(c);
            0
        })
        .expect("an unbounded clock never expires");
        found.into_iter()
    }

    /// Calls `each` with every container `query` selects, by id, charging
    /// `clock` for every container visited and for what `each` reports it
    /// spent; stops at the clock's deadline. `current` stands in for the
    /// view's entry of the same id (or is added), as in [`Self::containers`].
    pub fn query<'a>(
        &'a self,
        query: &ContainerQuery<'_>,
        current: Option<&'a ContainerEntry>,
        clock: &mut WorkClock,
        mut each: impl FnMut(&'a ContainerEntry) -> u64,
    ) -> Result<(), Expired> {
        // Pods carrying the required pod labels, found once.
        let pods_ok: Option<HashSet<&str>> = match query.pod_labels.is_empty() {
            true => None,
            false => {
                let mut ok = HashSet::new();
                let candidates: Box<dyn Iterator<Item = &PodEntry>> = match query.pod_id {
                    Some(id) => Box::new(self.pods.get(id).into_iter()),
                    None => Box::new(self.pods.values()),
                };
                for p in candidates {
                    clock.spend(VISIT_UNITS)?;
                    if query.pod_labels.hold_in(&p.labels) {
                        ok.insert(p.id.as_str());
                    }
                }
                Some(ok)
            }
        };
        let selected =
            |c: &ContainerEntry| query.own(c) && pods_ok.as_ref().is_none_or(|ok| ok.contains(c.pod_id.as_str()));
        let cur_id = current.map(|c| c.id.as_str());
        let mut current = current.filter(|c| selected(c));
        let mut visit = |c: &'a ContainerEntry, clock: &mut WorkClock| -> Result<(), Expired> {
            clock.spend(VISIT_UNITS)?;
            // Merge the one overlay entry into the sorted stream.
            if let Some(cur) = current.filter(|cur| cur.id < c.id) {
                current = None;
                clock.spend(each(cur))?;
            }
            if Some(c.id.as_str()) != cur_id && selected(c) {
                clock.spend(each(c))?;
            }
            Ok(())
        };
        match query.pod_id {
            // One pod's containers: its own sorted set, not the whole node.
            Some(pod) => {
                let ids = self.pods.get(pod).map(|p| &p.containers).or_else(|| self.orphans.get(pod));
                for id in ids.into_iter().flatten() {
                    if let Some(c) = self.containers.get(id) {
                        visit(c, clock)?;
                    }
                }
            }
            None => {
                for c in self.containers.values() {
                    visit(c, clock)?;
                }
            }
        }
        if let Some(cur) = current {
            clock.spend(each(cur))?;
        }
        Ok(())
    }

    /// Calls `each` with every pod, by id, within `clock`'s deadline.
    pub fn each_pod<'a>(
        &'a self,
        clock: &mut WorkClock,
        mut each: impl FnMut(&'a PodEntry) -> u64,
    ) -> Result<(), Expired> {
        for p in self.pods.values() {
            clock.spend(VISIT_UNITS + each(p))?;
        }
        Ok(())
    }

    /// Entries refused because the view was full, since the last rebuild.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// How many pods and containers the view holds.
    pub fn len(&self) -> (usize, usize) {
        (self.pods.len(), self.containers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(id: &str) -> pb::PodSandbox {
        let mut p =
            pb::PodSandbox { id: id.into(), name: format!("{id}-name"), namespace: "ns".into(), ..Default::default() };
        p.labels.insert("app".into(), id.into());
        p
    }

    fn ctr(id: &str, pod: &str, app: &str) -> pb::Container {
        let mut c = pb::Container {
            id: id.into(),
            pod_sandbox_id: pod.into(),
            name: id.into(),
            state: pb::ContainerState::CONTAINER_RUNNING.into(),
            ..Default::default()
        };
        c.labels.insert("app".into(), app.into());
        c.annotations.insert("keep".into(), "1".into());
        c.annotations.insert("drop".into(), "1".into());
        let res = c.linux.mut_or_insert_default().resources.mut_or_insert_default();
        res.cpu.mut_or_insert_default().cpus = "0-3".into();
        res.memory.mut_or_insert_default().limit =
            MessageField::some(pb::OptionalInt64 { value: 100, ..Default::default() });
        c
    }

    fn resources(cpus: &str, shares: u64) -> pb::LinuxResources {
        let mut r = pb::LinuxResources::default();
        let cpu = r.cpu.mut_or_insert_default();
        cpu.cpus = cpus.into();
        cpu.shares = MessageField::some(pb::OptionalUInt64 { value: shares, ..Default::default() });
        r
    }

    #[test]
    fn synchronize_builds_and_events_keep_it_current() {
        let mut v = NodeView::new(ViewLimits::default());
        v.synchronize(&[pod("p1"), pod("p2")], &[ctr("c1", "p1", "web"), ctr("c2", "p2", "db")]);
        assert_eq!(v.len(), (2, 2));
        assert_eq!(v.pod("p1").unwrap().containers.iter().collect::<Vec<_>>(), ["c1"]);

        let mut adjust = pb::ContainerAdjustment::default();
        adjust.annotations.insert("-drop".into(), String::new());
        adjust.annotations.insert("added".into(), "yes".into());
        adjust.linux.mut_or_insert_default().resources = MessageField::some(resources("4-5", 512));
        v.container_created(&ctr("c3", "p1", "web"), Some(&adjust));
        let c3 = v.container("c3").unwrap();
        assert_eq!(c3.state, pb::ContainerState::CONTAINER_CREATED);
        assert_eq!(c3.annotations.keys().collect::<Vec<_>>(), ["added", "keep"]);
        let cpu = c3.resources.as_ref().unwrap().cpu.as_ref().unwrap();
        assert_eq!((cpu.cpus.as_str(), cpu.shares.value), ("4-5", 512));
        assert_eq!(c3.resources.as_ref().unwrap().memory.limit.value, 100, "untouched fields stay");

        v.container_seen(&ctr("c3", "p1", "web"));
        assert_eq!(v.container("c3").unwrap().state, pb::ContainerState::CONTAINER_RUNNING);
        let update = pb::ContainerUpdate {
            container_id: "c1".into(),
            linux: MessageField::some(pb::LinuxContainerUpdate {
                resources: MessageField::some(resources("6", 2)),
                ..Default::default()
            }),
            ..Default::default()
        };
        v.apply_updates(&[update]);
        assert_eq!(v.container("c1").unwrap().resources.as_ref().unwrap().cpu.cpus, "6");

        let by_label = ContainerFilter { labels: vec![("app".into(), "web".into())], ..ContainerFilter::all() };
        let web: Vec<_> = v.containers(&by_label, None).map(|c| c.id.clone()).collect();
        assert_eq!(web, ["c1", "c3"]);
        let of_p1 = ContainerFilter { pod_id: Some("p1".into()), ..ContainerFilter::all() };
        assert_eq!(v.containers(&of_p1, None).count(), 2);
        let by_pod_label = ContainerFilter { pod_labels: vec![("app".into(), "p2".into())], ..ContainerFilter::all() };
        assert_eq!(v.containers(&by_pod_label, None).map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c2"]);
        let running = ContainerFilter { states: vec![pb::ContainerState::CONTAINER_RUNNING], ..ContainerFilter::all() };
        assert_eq!(v.containers(&running, None).count(), 3);

        // The event's own container stands in for the view's entry, in order.
        let mut overlay = container_entry(&ctr("c2", "p2", "web"));
        overlay.labels.insert("new".into(), "1".into());
        let all = ContainerFilter::all();
        let listed: Vec<_> = v.containers(&all, Some(&overlay)).map(|c| (c.id.as_str(), c.labels.len())).collect();
        assert_eq!(listed, [("c1", 1), ("c2", 2), ("c3", 1)]);
        let fresh = container_entry(&ctr("c0", "p1", "web"));
        let ids: Vec<_> = v.containers(&all, Some(&fresh)).map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["c0", "c1", "c2", "c3"]);
        let ids: Vec<_> = v.containers(&by_pod_label, Some(&fresh)).map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["c2"], "the overlay is filtered like any entry");

        v.container_removed("c1");
        assert!(v.container("c1").is_none());
        assert_eq!(v.pod("p1").unwrap().containers.iter().collect::<Vec<_>>(), ["c3"]);
        v.pod_removed("p1");
        assert_eq!(v.len(), (1, 1));
        v.clear();
        assert_eq!(v.len(), (0, 0));
    }

    /// A node of `pods` pods of `per_pod` running containers labelled
    /// `app=web`, in pods labelled `tier=x`.
    fn big(pods: usize, per_pod: usize) -> NodeView {
        let mut v = NodeView::new(ViewLimits::default());
        let pods_list: Vec<_> = (0..pods)
            .map(|i| {
                let mut p = pod(&format!("p{i:05}"));
                p.labels.insert("tier".into(), "x".into());
                p
            })
            .collect();
        let ctrs: Vec<_> =
            (0..pods * per_pod).map(|i| ctr(&format!("c{i:06}"), &format!("p{:05}", i / per_pod), "web")).collect();
        v.synchronize(&pods_list, &ctrs);
        v
    }

    fn ids(v: &NodeView, q: &ContainerQuery<'_>, current: Option<&ContainerEntry>) -> Vec<String> {
        let mut out = Vec::new();
        v.query(q, current, &mut WorkClock::unbounded(), |c| {
            out.push(c.id.clone());
            0
        })
        .unwrap();
        out
    }

    #[test]
    fn a_filter_is_a_set_repeats_count_once_and_contradictions_match_nothing() {
        let v = big(3, 2);
        let running = [pb::ContainerState::CONTAINER_RUNNING];
        let q = |labels: &[(&'static str, &'static str)], pod_labels: &[(&'static str, &'static str)]| {
            ContainerQuery::new(
                None,
                running.iter().copied().cycle().take(1000),
                labels.iter().copied(),
                pod_labels.iter().copied(),
                &mut WorkClock::unbounded(),
            )
            .unwrap()
        };
        assert_eq!(ids(&v, &q(&[("app", "web"); 50], &[]), None).len(), 6, "a repeated label is one condition");
        assert!(ids(&v, &q(&[("app", "web"), ("app", "db")], &[]), None).is_empty(), "two values of one key");
        assert!(ids(&v, &q(&[], &[("tier", "x"), ("tier", "y")]), None).is_empty());
        assert_eq!(ids(&v, &q(&[], &[("tier", "x"); 7]), None).len(), 6);
        assert!(ids(&v, &q(&[("app", "web"), ("keep", "no"), ("more", "keys")], &[]), None).is_empty());
        let stopped =
            ContainerQuery::new(None, [pb::ContainerState::CONTAINER_STOPPED; 10], [], [], &mut WorkClock::unbounded())
                .unwrap();
        assert!(ids(&v, &stopped, None).is_empty());
        // One pod's containers come from the pod, with the overlay merged in
        // order and filtered like any entry.
        let of_p1 = ContainerQuery::new(Some("p00001"), [], [], [], &mut WorkClock::unbounded()).unwrap();
        assert_eq!(ids(&v, &of_p1, None), ["c000002", "c000003"]);
        let new = container_entry(&ctr("c000002a", "p00001", "web"));
        assert_eq!(ids(&v, &of_p1, Some(&new)), ["c000002", "c000002a", "c000003"]);
        let elsewhere = container_entry(&ctr("c000000a", "p00002", "web"));
        assert_eq!(ids(&v, &of_p1, Some(&elsewhere)), ["c000002", "c000003"]);
        let orphan = ContainerQuery::new(Some("gone"), [], [], [], &mut WorkClock::unbounded()).unwrap();
        assert!(ids(&v, &orphan, None).is_empty());
    }

    /// The work of a query is linear in the filter plus the node: a filter
    /// of a million copies of a condition every container meets, on 10,000
    /// containers, costs about a million steps, not ten billion.
    #[test]
    fn a_huge_filter_on_a_big_node_costs_the_sum_not_the_product() {
        let v = big(1000, 10);
        assert_eq!(v.len(), (1000, 10_000));
        let n = 1_000_000;
        let mut clock = WorkClock::unbounded();
        let q = ContainerQuery::new(
            None,
            [pb::ContainerState::CONTAINER_RUNNING].into_iter().cycle().take(n),
            std::iter::repeat_n(("app", "web"), n),
            std::iter::repeat_n(("tier", "x"), n),
            &mut clock,
        )
        .unwrap();
        let mut found = 0;
        v.query(&q, None, &mut clock, |_| {
            found += 1;
            0
        })
        .unwrap();
        assert_eq!(found, 10_000);
        let bound = 3 * n as u64 + (1000 + 10_000) * VISIT_UNITS;
        assert!(clock.spent() <= bound, "{} units for a bound of {bound}", clock.spent());
    }

    /// A query stops at its deadline, within one look at the clock.
    #[test]
    fn a_query_stops_at_the_deadline() {
        let v = big(100, 100);
        let mut clock = WorkClock::until(Instant::now());
        let q = ContainerFilter::all();
        let mut copied = 0;
        let err = v
            .query(&q.query(), None, &mut clock, |_| {
                copied += 1;
                COPY_UNITS
            })
            .unwrap_err();
        assert!(err.units <= 2 * CLOCK_EVERY, "{err:?}");
        assert!(copied < 100, "stopped after {copied} of 10,000 containers");
        let mut clock = WorkClock::until(Instant::now());
        let states = std::iter::repeat_n(pb::ContainerState::CONTAINER_RUNNING, 10_000_000);
        let err = ContainerQuery::new(None, states, [], [], &mut clock).unwrap_err();
        assert!(err.units <= 2 * CLOCK_EVERY, "building the filter stops too: {err:?}");
        let mut clock = WorkClock::until(Instant::now());
        let mut pods = 0;
        assert!(v
            .each_pod(&mut clock, |_| {
                pods += 1;
                COPY_UNITS
            })
            .is_err());
        assert!(pods < 100);
    }

    #[test]
    fn the_view_is_bounded() {
        let mut v = NodeView::new(ViewLimits { max_pods: 2, max_containers: 3 });
        for i in 0..5 {
            v.pod_started(&pod(&format!("p{i}")));
            v.container_created(&ctr(&format!("c{i}"), &format!("p{i}"), "x"), None);
        }
        assert_eq!(v.len(), (2, 3));
        assert_eq!(v.refused(), 3 + 2);
        // Known entries still update when full.
        v.container_seen(&ctr("c0", "p0", "x"));
        v.synchronize(&[], &[]);
        assert_eq!((v.len(), v.refused()), ((0, 0), 0));
    }

    #[test]
    fn overlays_set_only_what_they_carry() {
        let mut base = resources("0-1", 10);
        base.unified.insert("memory.high".into(), "1G".into());
        let mut over = pb::LinuxResources::default();
        over.memory.mut_or_insert_default().limit =
            MessageField::some(pb::OptionalInt64 { value: 7, ..Default::default() });
        over.unified.insert("memory.max".into(), "2G".into());
        over.hugepage_limits.push(pb::HugepageLimit { page_size: "2MB".into(), limit: 4, ..Default::default() });
        overlay_resources(&mut base, &over);
        assert_eq!(base.cpu.cpus, "0-1");
        assert_eq!(base.cpu.shares.value, 10);
        assert_eq!(base.memory.limit.value, 7);
        assert_eq!(base.unified.len(), 2);
        over.hugepage_limits[0].limit = 8;
        overlay_resources(&mut base, &over);
        assert_eq!(base.hugepage_limits.len(), 1);
        assert_eq!(base.hugepage_limits[0].limit, 8);
    }
}
