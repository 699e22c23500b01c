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

use std::collections::BTreeMap;

use imbl::{OrdMap, OrdSet};

use nri_wasm_api::api as pb;
use protobuf::MessageField;

/// A pod as the view keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodEntry {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Ids of its containers the view knows.
    pub containers: OrdSet<String>,
}

/// A container as the view keeps it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContainerEntry {
    pub id: String,
    pub pod_id: String,
    pub name: String,
    pub state: pb::ContainerState,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Effective Linux resources: as created, then adjusted, then updated.
    pub resources: Option<pb::LinuxResources>,
}

/// How many entries the view holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewLimits {
    pub max_pods: usize,
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
    pub pod_id: Option<String>,
    /// Any of these states (empty: any state).
    pub states: Vec<pb::ContainerState>,
    pub labels: Vec<(String, String)>,
    pub pod_labels: Vec<(String, String)>,
}

impl ContainerFilter {
    /// Every container.
    pub fn all() -> Self {
        Self::default()
    }

    fn matches(&self, c: &ContainerEntry, pods: &OrdMap<String, PodEntry>) -> bool {
        self.pod_id.as_ref().is_none_or(|p| *p == c.pod_id)
            && (self.states.is_empty() || self.states.contains(&c.state))
            && self.labels.iter().all(|(k, v)| c.labels.get(k) == Some(v))
            && (self.pod_labels.is_empty()
                || pods.get(&c.pod_id).is_some_and(|p| self.pod_labels.iter().all(|(k, v)| p.labels.get(k) == Some(v))))
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

    pub fn pod(&self, id: &str) -> Option<&PodEntry> {
        self.pods.get(id)
    }

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
        let cur_id = current.map(|c| c.id.as_str());
        let mut current = current.filter(|c| filter.matches(c, &self.pods));
        let mut rest = self
            .containers
            .values()
            .filter(move |c| Some(c.id.as_str()) != cur_id && filter.matches(c, &self.pods))
            .peekable();
        // Merge the one overlay entry into the sorted stream.
        std::iter::from_fn(move || match (current, rest.peek()) {
            (Some(c), Some(r)) if c.id < r.id => current.take(),
            (Some(_), None) => current.take(),
            _ => rest.next(),
        })
    }

    /// Entries refused because the view was full, since the last rebuild.
    pub fn refused(&self) -> u64 {
        self.refused
    }

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
