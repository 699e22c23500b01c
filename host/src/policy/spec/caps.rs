//! Least privilege: what each policy may change and read.
//!
//! A policy that injects environment variables has no business adding an
//! OCI hook, and a compromised or buggy one should not be able to. So every
//! part of a reply maps to one *capability*, and the host refuses, after
//! the policy returns and before anything is merged, a reply that uses a
//! capability the policy does not have (as the policy's invalid output,
//! naming the capability; its `on-error` applies). Reading the node view
//! is a capability too, checked on every call of the `node` interface.
//!
//! Two parties decide what a policy has:
//! - the author *declares* what it needs: the SDK records the list in the
//!   component, in a custom section named [`SECTION`] (names separated by
//!   commas or white space);
//! - the operator *grants* it in the policy's settings file (`grant = [...]`).
//!
//! What a policy may use is the grant, narrowed by the declaration when the
//! component has one (a policy that outputs what it did not declare is
//! refused even where the operator granted it: the declaration is what the
//! operator reviewed). The capabilities that can break out of a container
//! or reach other containers are [dangerous](Capability::dangerous) and off
//! unless granted; the rest are granted by default, and cover a field only
//! as far as the container's own pod could have asked for it (`bounds`):
//! a `unified` key that is a resource-control file, an OOM score at or
//! above the container's own, lower rlimits, a normal scheduling policy,
//! `domain/name` annotations. Past those bounds a field needs a dangerous
//! capability of its own (`cgroup-files`, `oom-protect`, ...). A
//! component without a declaration (one built before declarations, or by
//! an SDK that does not record one) is taken to declare nothing dangerous:
//! it gets the default grant unless the operator grants more, which the
//! host then warns about at load.
//!
//! An update of another container needs `updates`, and its resources need
//! what the same resources of the event's own container would: each its
//! capability, within the bounds measured against *that* container as the
//! host knows it (the node view), and past them the dangerous capability
//! that covers the field. `updates` reaches other containers; it does not
//! stand for `cgroup-files`, `realtime`, `swap-raise` or `cpuset-any`
//! there. A container the host has no record of has no cpuset or swap to
//! measure against: a cpuset for it needs `cpuset-any`, and a swap total
//! or memory limit that could give it swap, `swap-raise`.
//!
//! [`required`] is one exhaustive match over the reply's fields: every
//! record is destructured without `..`, so a field added to the WIT types
//! fails to compile here until someone maps it to a capability.

use std::fmt;

pub(crate) use super::bounds::Baseline;
use super::bounds::{self, Beyond, Current};
pub use super::capability::Capability;
use super::declared::{names, DeclarationError};
use crate::wit::wit;

/// The custom section a component declares its capabilities in.
pub const SECTION: &str = "nri-wasm:capabilities";

/// A set of capabilities.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CapSet(u64);

impl CapSet {
    /// No capability.
    pub const EMPTY: CapSet = CapSet(0);

    /// Every capability.
    pub fn all() -> Self {
        Capability::ALL.iter().copied().collect()
    }

    /// What a policy has when its settings file grants nothing: every
    /// capability that is not dangerous.
    pub fn default_grant() -> Self {
        Capability::ALL.iter().copied().filter(|c| !c.dangerous()).collect()
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: Capability) -> bool {
        self.0 & c.bit() != 0
    }

    /// Adds `c` to the set.
    pub fn insert(&mut self, c: Capability) {
        self.0 |= c.bit();
    }

    /// What is in both sets.
    pub fn intersect(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// What is in either set.
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// What is in `self` and not in `other`.
    pub fn minus(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// Whether the set has no capability.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The capabilities in the set, in [`Capability::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL.iter().copied().filter(move |c| self.contains(*c))
    }

    /// The dangerous capabilities of the set.
    pub fn dangerous(self) -> Self {
        self.iter().filter(|c| c.dangerous()).collect()
    }

    /// Names, comma-separated; `none` when empty.
    pub fn describe(self) -> String {
        if self.is_empty() {
            return "none".into();
        }
        self.iter().map(Capability::name).collect::<Vec<_>>().join(", ")
    }
}

impl FromIterator<Capability> for CapSet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let mut set = CapSet::EMPTY;
        for c in iter {
            set.insert(c);
        }
        set
    }
}

impl fmt::Debug for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Capability::name)).finish()
    }
}

/// Parses the text of a declaration section: names separated by commas or
/// white space. An unknown name is an error naming it (a component built
/// by a newer SDK for a newer host).
pub fn parse_declaration(text: &str) -> Result<CapSet, DeclarationError> {
    let mut set = CapSet::EMPTY;
    for name in names(text) {
        match Capability::from_name(name) {
            Some(c) => set.insert(c),
            None => return Err(DeclarationError::unknown("capability", name, Capability::names())),
        }
    }
    Ok(set)
}

/// A capability an operator's grant names that this host does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown capability {name:?} (allowed: {allowed})")]
pub struct UnknownCapability {
    /// The name, escaped and clipped.
    pub name: String,
    /// Every name a grant may use.
    pub allowed: String,
}

/// What one policy may use, as loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The operator's grant (the default grant if the settings file has none).
    pub granted: CapSet,
    /// The component's declaration, if it has one.
    pub declared: Option<CapSet>,
}

impl Allowed {
    /// What the policy may use: the grant, narrowed by the declaration.
    pub fn effective(&self) -> CapSet {
        match self.declared {
            Some(d) => self.granted.intersect(d),
            None => self.granted,
        }
    }

    /// What the component declares (nothing dangerous when it declares nothing).
    pub fn asks(&self) -> CapSet {
        self.declared.unwrap_or_else(CapSet::default_grant)
    }

    /// Declared but not granted: the policy loads, and its output that uses
    /// these is refused.
    pub fn ungranted(&self) -> CapSet {
        self.asks().minus(self.granted)
    }

    /// Dangerous capabilities granted but not declared (by a declaration,
    /// or at all): the operator gave more than was asked for.
    pub fn unasked(&self) -> CapSet {
        self.granted.dangerous().minus(self.asks())
    }
}

/// What a reply needs: the capabilities it uses, and for each one needed
/// only because a field went past what the default grant allows of it
/// ([`bounds`]), the first such field with why.
#[derive(Debug, Default)]
pub(crate) struct Needs {
    /// Every capability the reply uses.
    pub set: CapSet,
    beyond: Vec<Beyond>,
}

impl Needs {
    fn add(&mut self, c: Capability) {
        self.set.insert(c);
    }

    fn when(&mut self, used: bool, c: Capability) {
        if used {
            self.add(c);
        }
    }

    /// A field beyond the default grant: its capability, with the field.
    fn beyond(&mut self, b: Option<Beyond>) {
        if let Some((c, why)) = b {
            if !self.set.contains(c) {
                self.beyond.push((c, why));
            }
            self.add(c);
        }
    }
}

/// A reply refused for a capability the policy does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The capability it lacks.
    pub capability: Capability,
    /// The field past the default grant's bounds that needs it, if that is
    /// why (`adjust.linux.oom-score-adj: -1000 is below the container's own 0`).
    pub field: Option<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(field) = &self.field {
            write!(f, "{field}, which ")?;
        }
        write!(
            f,
            "needs capability `{}`, which its settings file does not grant or the policy does not declare",
            self.capability
        )
    }
}

/// The capabilities a reply uses. `base.own` is the event's container, as
/// the runtime sent it: the default grant's bounds are measured against it
/// (and, on UpdateContainer, against the resources asked for). An update of
/// any other container needs `updates`, and its resources are judged as the
/// own container's would be, against that container as `base.others` (the
/// node view) has it, or as unknown.
pub(crate) fn required(reply: &wit::Reply, base: Baseline<'_>) -> Needs {
    let own = base.own;
    let mut need = Needs::default();
    let wit::Reply { adjust, update, evict } = reply;
    if let Some(adjust) = adjust {
        adjustment(adjust, base, &mut need);
    }
    for (i, u) in update.iter().enumerate() {
        let wit::ContainerUpdate { container_id, resources, ignore_failure: _ } = u;
        let current = if own.is_some_and(|c| c.id == *container_id) {
            base.own_current()
        } else {
            need.add(Capability::Updates);
            base.other(container_id)
        };
        if let Some(r) = resources {
            linux_resources(&format!("update[{i}].resources"), r, current, &mut need);
        }
    }
    need.when(!evict.is_empty(), Capability::Evictions);
    need
}

/// Checks a reply against what the policy may use: the first capability
/// it lacks, if any, with the field that needs it. A dangerous capability
/// is named before one of the default grant (the policy lacks the latter
/// only where its declaration or settings file leaves it out): the refusal
/// of an update of another container says `updates` before `pids`.
pub(crate) fn missing(reply: &wit::Reply, base: Baseline<'_>, effective: CapSet) -> Option<Refusal> {
    let need = required(reply, base);
    let lacks = need.set.minus(effective);
    let capability = lacks.dangerous().iter().next().or_else(|| lacks.iter().next())?;
    let field = need.beyond.into_iter().find(|(c, _)| *c == capability).map(|(_, why)| why);
    Some(Refusal { capability, field })
}

fn adjustment(a: &wit::ContainerAdjustment, base: Baseline<'_>, need: &mut Needs) {
    let own = base.own;
    let wit::ContainerAdjustment { annotations, mounts, env, hooks, linux, rlimits, cdi_devices, args } = a;
    need.when(!annotations.is_empty(), Capability::Annotations);
    need.beyond(bounds::annotation_bytes(annotations));
    for kv in annotations {
        need.beyond(bounds::annotation_key(&kv.key));
    }
    need.when(!mounts.is_empty(), Capability::Mounts);
    need.when(!env.is_empty(), Capability::Env);
    if let Some(h) = hooks {
        let wit::Hooks { prestart, create_runtime, create_container, start_container, poststart, poststop } = h;
        let any = [prestart, create_runtime, create_container, start_container, poststart, poststop]
            .iter()
            .any(|l| !l.is_empty());
        need.when(any, Capability::Hooks);
    }
    if let Some(l) = linux {
        linux_adjustment(l, base, need);
    }
    need.when(!rlimits.is_empty(), Capability::Rlimits);
    for r in rlimits {
        need.beyond(bounds::rlimit(own, r));
    }
    need.when(!cdi_devices.is_empty(), Capability::CdiDevices);
    need.when(!args.is_empty(), Capability::Args);
}

fn linux_adjustment(l: &wit::LinuxContainerAdjustment, base: Baseline<'_>, need: &mut Needs) {
    let own = base.own;
    let wit::LinuxContainerAdjustment {
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
    } = l;
    need.when(!devices.is_empty(), Capability::Devices);
    if let Some(r) = resources {
        linux_resources("adjust.linux.resources", r, base.own_current(), need);
    }
    need.when(!cgroups_path.is_empty(), Capability::CgroupsPath);
    if let Some(v) = oom_score_adj {
        need.add(Capability::OomScoreAdj);
        need.beyond(bounds::oom_score_adj(own, *v));
    }
    if let Some(p) = io_priority {
        need.add(Capability::IoPriority);
        need.beyond(bounds::io_priority(p));
    }
    need.when(seccomp_policy.is_some(), Capability::Seccomp);
    need.when(!namespaces.is_empty(), Capability::Namespaces);
    need.when(!sysctl.is_empty(), Capability::Sysctl);
    need.when(!net_devices.is_empty(), Capability::NetDevices);
    if let Some(s) = scheduler {
        need.add(Capability::Scheduler);
        need.beyond(bounds::scheduler(s));
    }
    need.when(rdt.is_some(), Capability::Resctrl);
    need.when(memory_policy.is_some(), Capability::MemoryPolicy);
}

/// The resources of an adjustment or update, of the container `current`.
fn linux_resources(field: &str, r: &wit::LinuxResources, current: Current<'_>, need: &mut Needs) {
    let wit::LinuxResources { memory, cpu, hugepage_limits, blockio_class, rdt_class, unified, devices, pids } = r;
    if let Some(m) = memory {
        need.add(Capability::Memory);
        need.beyond(bounds::swap(field, current, m));
        need.beyond(bounds::oom_killer(field, m));
        need.beyond(bounds::swappiness(field, m));
    }
    if let Some(c) = cpu {
        need.add(Capability::Cpu);
        need.beyond(bounds::cpu_realtime(field, c));
        need.beyond(bounds::cpuset(field, current, c));
    }
    need.when(!hugepage_limits.is_empty(), Capability::Hugepages);
    need.when(blockio_class.is_some(), Capability::Blockio);
    need.when(rdt_class.is_some(), Capability::Rdt);
    need.when(!unified.is_empty(), Capability::Unified);
    for kv in unified {
        need.beyond(bounds::unified_key(field, &kv.key));
    }
    need.when(!devices.is_empty(), Capability::Devices);
    need.when(pids.is_some(), Capability::Pids);
}

#[cfg(test)]
mod tests {
    use nri_wasm_api::api as pb;

    use super::*;
    use crate::node::view::NodeView;

    fn kv(k: &str) -> wit::KeyValue {
        wit::KeyValue { key: k.into(), value: "v".into() }
    }

    fn adjust(f: impl FnOnce(&mut wit::ContainerAdjustment)) -> wit::Reply {
        let mut a = wit::ContainerAdjustment {
            annotations: vec![],
            mounts: vec![],
            env: vec![],
            hooks: None,
            linux: None,
            rlimits: vec![],
            cdi_devices: vec![],
            args: vec![],
        };
        f(&mut a);
        wit::Reply { adjust: Some(a), update: vec![], evict: vec![] }
    }

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for c in Capability::ALL {
            assert!(seen.insert(c.name()), "{c} twice");
            assert_eq!(Capability::from_name(c.name()), Some(*c));
        }
        assert!(Capability::ALL.len() <= 64, "a CapSet is one u64");
    }

    #[test]
    fn the_dangerous_ones_are_off_by_default() {
        let default = CapSet::default_grant();
        for c in [
            "hooks",
            "devices",
            "mounts",
            "namespaces",
            "seccomp",
            "sysctl",
            "updates",
            "evictions",
            "cgroup-files",
            "oom-protect",
            "rlimits-raise",
            "realtime",
            "runtime-annotations",
            "resctrl",
            "swap-raise",
            "cpuset-any",
        ] {
            let c = Capability::from_name(c).unwrap();
            assert!(c.dangerous() && !default.contains(c), "{c}");
        }
        for c in ["env", "annotations", "cpu", "memory", "deny", "node"] {
            assert!(default.contains(Capability::from_name(c).unwrap()), "{c}");
        }
    }

    #[test]
    fn each_field_maps_to_its_capability() {
        let r = adjust(|a| a.env.push(kv("A")));
        assert_eq!(required(&r, Baseline::default()).set.describe(), "env");
        let r = adjust(|a| a.cdi_devices.push("vendor.com/gpu=0".into()));
        assert_eq!(required(&r, Baseline::default()).set.describe(), "cdi-devices");
        // An empty hooks record changes nothing.
        let empty = wit::Hooks {
            prestart: vec![],
            create_runtime: vec![],
            create_container: vec![],
            start_container: vec![],
            poststart: vec![],
            poststop: vec![],
        };
        let r = adjust(|a| a.hooks = Some(empty.clone()));
        assert!(required(&r, Baseline::default()).set.is_empty());
        let hook = wit::Hook { path: "/bin/true".into(), args: vec![], env: vec![], timeout: None };
        let r = adjust(|a| a.hooks = Some(wit::Hooks { poststop: vec![hook], ..empty }));
        assert_eq!(required(&r, Baseline::default()).set.describe(), "hooks");
    }

    #[test]
    fn updates_of_the_own_container_are_resources_and_of_others_need_updates() {
        let cpu = resources(|r| {
            r.cpu = Some(wit::LinuxCpu {
                shares: Some(2),
                quota: None,
                period: None,
                realtime_runtime: None,
                realtime_period: None,
                cpus: String::new(),
                mems: String::new(),
            })
        });
        let update = |id: &str| wit::ContainerUpdate {
            container_id: id.into(),
            resources: Some(cpu.clone()),
            ignore_failure: false,
        };
        let r = wit::Reply { adjust: None, update: vec![update("me")], evict: vec![] };
        let container = |id: &str| pb::Container { id: id.into(), ..Default::default() };
        let (me, other) = (container("me"), container("other"));
        assert_eq!(required(&r, Baseline { own: Some(&me), ..Baseline::default() }).set.describe(), "cpu");
        assert_eq!(required(&r, Baseline { own: Some(&other), ..Baseline::default() }).set.describe(), "cpu, updates");
        let r = wit::Reply {
            adjust: None,
            update: vec![],
            evict: vec![wit::ContainerEviction { container_id: "x".into(), reason: "r".into() }],
        };
        assert_eq!(
            missing(&r, Baseline::default(), CapSet::default_grant()).map(|m| m.capability),
            Some(Capability::Evictions)
        );
    }

    fn resources(f: impl FnOnce(&mut wit::LinuxResources)) -> wit::LinuxResources {
        let mut r = wit::LinuxResources {
            memory: None,
            cpu: None,
            hugepage_limits: vec![],
            blockio_class: None,
            rdt_class: None,
            unified: vec![],
            devices: vec![],
            pids: None,
        };
        f(&mut r);
        r
    }

    fn cpus(list: &str) -> wit::LinuxResources {
        resources(|r| {
            r.cpu = Some(wit::LinuxCpu {
                shares: None,
                quota: None,
                period: None,
                realtime_runtime: None,
                realtime_period: None,
                cpus: list.into(),
                mems: String::new(),
            })
        })
    }

    fn memory(limit: Option<i64>, swap: Option<i64>) -> wit::LinuxResources {
        resources(|r| {
            r.memory = Some(wit::LinuxMemory {
                limit,
                reservation: None,
                swap,
                kernel: None,
                kernel_tcp: None,
                swappiness: None,
                disable_oom_killer: None,
                use_hierarchy: None,
            })
        })
    }

    fn update_of(id: &str, r: wit::LinuxResources) -> wit::Reply {
        let u = wit::ContainerUpdate { container_id: id.into(), resources: Some(r), ignore_failure: false };
        wit::Reply { adjust: None, update: vec![u], evict: vec![] }
    }

    /// A node view with `other`: the cpuset `2-3`, 64 bytes of memory and
    /// no swap.
    fn view() -> NodeView {
        let mut r = pb::LinuxResources::new();
        r.cpu.mut_or_insert_default().cpus = "2-3".into();
        let m = r.memory.mut_or_insert_default();
        m.limit = Some(pb::OptionalInt64 { value: 64, ..Default::default() }).into();
        m.swap = Some(pb::OptionalInt64 { value: 64, ..Default::default() }).into();
        let mut c = pb::Container { id: "other".into(), pod_sandbox_id: "pod".into(), ..Default::default() };
        c.linux.mut_or_insert_default().resources = Some(r).into();
        let mut v = NodeView::new(Default::default());
        v.synchronize(&[], &[c]);
        v
    }

    /// What an update of `other` needs, the event's container being `me`.
    fn other_needs(r: wit::LinuxResources, view: Option<&NodeView>) -> Needs {
        let me = pb::Container { id: "me".into(), ..Default::default() };
        required(&update_of("other", r), Baseline { own: Some(&me), requested: None, others: view })
    }

    /// `updates` reaches another container; the bounds of its resources
    /// still hold, each past them needing its own capability.
    #[test]
    fn an_update_of_another_container_is_held_to_the_bounds_of_its_fields() {
        let view = view();
        let updates = CapSet::default_grant().union(CapSet::from_iter([Capability::Updates]));
        let me = pb::Container { id: "me".into(), ..Default::default() };
        let base = Baseline { own: Some(&me), requested: None, others: Some(&view) };
        let procs = update_of("other", resources(|r| r.unified = vec![kv("cgroup.procs")]));
        assert_eq!(required(&procs, base).set.describe(), "unified, updates, cgroup-files");
        let refusal = missing(&procs, base, updates).expect("refused");
        assert_eq!(refusal.capability, Capability::CgroupFiles);
        let field = refusal.field.expect("the field is named");
        assert!(field.starts_with("update[0].resources.unified: \"cgroup.procs\" is not one of"), "{field}");
        // Without `updates` at all, that is what is named first.
        let refusal = missing(&procs, base, CapSet::default_grant()).expect("refused");
        assert_eq!(refusal.capability, Capability::Updates);

        let realtime =
            resources(|r| r.cpu = Some(wit::LinuxCpu { realtime_runtime: Some(950_000), ..cpus("").cpu.unwrap() }));
        assert_eq!(other_needs(realtime, Some(&view)).set.describe(), "cpu, updates, realtime");
        assert_eq!(other_needs(memory(Some(32), Some(32)), Some(&view)).set.describe(), "memory, updates");
        let pids = resources(|r| r.pids = Some(wit::LinuxPids { limit: 64 }));
        assert_eq!(other_needs(pids, Some(&view)).set.describe(), "pids, updates");
    }

    #[test]
    fn another_containers_cpuset_and_swap_are_measured_against_its_own() {
        let view = view();
        // Within its cpuset, no more swap: the resource and `updates`.
        assert_eq!(other_needs(cpus("3"), Some(&view)).set.describe(), "cpu, updates");
        assert_eq!(other_needs(memory(Some(128), None), Some(&view)).set.describe(), "memory, updates");
        // Outside it (`0` is the event's container's, and free to it).
        let me = pb::Container { id: "me".into(), ..Default::default() };
        let base = Baseline { own: Some(&me), requested: None, others: Some(&view) };
        let updates = CapSet::default_grant().union(CapSet::from_iter([Capability::Updates]));
        let refusal = missing(&update_of("other", cpus("0-3")), base, updates).expect("refused");
        assert_eq!(refusal.capability, Capability::CpusetAny);
        let field = refusal.field.unwrap();
        assert_eq!(field, "update[0].resources.cpu.cpus: \"0-3\" is outside the container's own \"2-3\"");
        let refusal = missing(&update_of("other", memory(Some(32), Some(64))), base, updates).expect("refused");
        assert_eq!(refusal.capability, Capability::SwapRaise);
        assert!(refusal.field.unwrap().contains("32 bytes of swap, more than the container's own 0"));
        // A lower limit alone keeps the total: 32 of swap.
        assert!(other_needs(memory(Some(32), None), Some(&view)).set.contains(Capability::SwapRaise));
        let swapped = other_needs(memory(Some(16), Some(0)), Some(&view));
        assert!(swapped.set.contains(Capability::SwapRaise), "a total of 0 is unset: the total it keeps");
    }

    /// Unknown is never within a bound: a container the host has no record
    /// of (not in the view, or no view) has no cpuset or swap to keep to.
    #[test]
    fn an_unknown_container_has_no_bounds_to_keep_within() {
        let view = view();
        for view in [None, Some(&view)] {
            let needs = |r: wit::LinuxResources| {
                let me = pb::Container { id: "me".into(), ..Default::default() };
                let reply = update_of("stranger", r);
                let base = Baseline { own: Some(&me), requested: None, others: view };
                (
                    required(&reply, base).set,
                    missing(
                        &reply,
                        base,
                        CapSet::all().minus(CapSet::from_iter([Capability::CpusetAny, Capability::SwapRaise])),
                    ),
                )
            };
            let (set, refusal) = needs(cpus("2"));
            assert_eq!(set.describe(), "cpu, updates, cpuset-any");
            let field = refusal.unwrap().field.unwrap();
            assert!(
                field.contains("update[0].resources.cpu.cpus: \"2\" for a container the host has no record of"),
                "{field}"
            );
            assert_eq!(needs(memory(None, Some(1 << 30))).0.describe(), "memory, updates, swap-raise");
            assert_eq!(needs(memory(Some(1 << 20), None)).0.describe(), "memory, updates, swap-raise");
            // A total equal to the limit leaves it no swap at all.
            assert_eq!(needs(memory(Some(1 << 20), Some(1 << 20))).0.describe(), "memory, updates");
            assert_eq!(needs(resources(|r| r.pids = Some(wit::LinuxPids { limit: 8 }))).0.describe(), "pids, updates");
        }
        // The event's own container is never looked up in the view.
        let me = pb::Container { id: "other".into(), ..Default::default() };
        let base = Baseline { own: Some(&me), requested: None, others: None };
        assert_eq!(required(&update_of("other", cpus("0-7")), base).set.describe(), "cpu");
    }

    /// A cpuset list too long to compare cheaply is past the bound: the
    /// check does no work proportional to what a hostile reply makes it.
    #[test]
    fn a_cpuset_list_too_long_to_compare_needs_cpuset_any() {
        let view = view();
        let long = "2,3,".repeat(4 << 20);
        let needs = other_needs(cpus(&long), Some(&view));
        assert!(needs.set.contains(Capability::CpusetAny), "{:?}", needs.set);
        assert!(needs.beyond[0].1.contains("longer than the 4096"), "{}", needs.beyond[0].1);
    }

    #[test]
    fn declarations_parse_and_unknown_names_are_named() {
        let d = parse_declaration("env, hooks\nmounts").unwrap();
        assert_eq!(d.describe(), "env, mounts, hooks");
        let e = parse_declaration("env teleport").unwrap_err();
        assert!(matches!(&e, DeclarationError::Unknown { what: "capability", name, .. } if name == "teleport"), "{e}");
        assert!(e.to_string().contains("known: env"), "{e}");
        assert!(parse_declaration("").unwrap().is_empty());
    }

    #[test]
    fn the_declaration_narrows_the_grant() {
        let hooks = CapSet::from_iter([Capability::Hooks]);
        let env = CapSet::from_iter([Capability::Env]);
        let lying = Allowed { granted: CapSet::default_grant().union(hooks), declared: Some(env) };
        assert_eq!(lying.effective(), env);
        let undeclared = Allowed { granted: CapSet::default_grant(), declared: None };
        assert_eq!(undeclared.effective(), CapSet::default_grant());
        assert!(undeclared.ungranted().is_empty());
        let asking = Allowed { granted: CapSet::default_grant(), declared: Some(env.union(hooks)) };
        assert_eq!(asking.ungranted(), hooks);
        let generous = Allowed { granted: CapSet::default_grant().union(hooks), declared: None };
        assert_eq!(generous.unasked(), hooks);
    }
}
