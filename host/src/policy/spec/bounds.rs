//! What the default grant allows of a field: what the container's own pod
//! could have asked for.
//!
//! A capability in the default grant (`docs/configuration.md`) covers a
//! field only as far as the pod being created could have set it itself,
//! through its spec or from inside its own processes without privilege. The
//! reasons, field by field, are in `docs/reliability.md` ("The default
//! grant"); in short:
//! - a container's cgroup limits sit under its pod's cgroup, which the
//!   kubelet bounds, so memory, CPU, pids and hugepage limits are any value
//!   a pod could ask for; but a `unified` key is written as a file in the
//!   container's cgroup, and most cgroup files are not limits at all
//!   (`cgroup.procs` moves processes, `cgroup.kill` kills them), so only the
//!   resource-control files ([`RESOURCE_FILES`]) are in the default grant;
//! - per-process settings are not bounded by the pod's cgroup, so the
//!   default allows only what a process may do to itself without privilege:
//!   raise its OOM score, lower its rlimits, a normal scheduling policy at
//!   a nice value of 0 or more, a best-effort or idle I/O class;
//! - what the kubelet decides and a pod cannot ask for (which CPUs, how much
//!   swap, resctrl schemata) may be narrowed, never widened;
//! - annotations the runtimes and shims read (`run.oci.*`,
//!   `io.kubernetes.*`, `org.systemd.property.*`, ...) are not the pod's to
//!   set: by default a policy sets or removes only `domain/name` keys
//!   outside Kubernetes' own domains.
//!
//! Going past these bounds needs a capability of its own, off by default
//! ([`Capability::dangerous`]). An update of another container is held to
//! the same bounds, measured against that container ([`Current`]), and
//! needs `updates` besides. Each check here looks only at the policy's
//! reply and the container as the runtime sent it (for another container,
//! the host's record of it: the node view), in time linear in the reply: a
//! cpuset list is compared only up to [`MAX_CPUSET_BYTES`].

use nri_wasm_api::api as pb;

use super::capability::Capability;
use crate::merge::is_cgroup_file;
use crate::node::view::NodeView;
use crate::wit::wit;

/// The cgroup v2 files a `unified` key may name under the default grant:
/// the files that limit or weigh the container's own use of memory, CPU,
/// I/O, processes, huge pages and RDMA, which its pod's resources
/// correspond to. `{size}` stands for a huge page size (`2MB`, `1GB`).
/// Swap files are not here (the swap a container gets is the kubelet's
/// decision), nor cpuset files (which CPUs are the kubelet's), nor
/// utilisation clamps, pressure triggers or any `cgroup.*` file.
pub(crate) const RESOURCE_FILES: &[&str] = &[
    "memory.min",
    "memory.low",
    "memory.high",
    "memory.max",
    "memory.oom.group",
    "cpu.weight",
    "cpu.weight.nice",
    "cpu.max",
    "cpu.max.burst",
    "cpu.idle",
    "io.weight",
    "io.bfq.weight",
    "io.max",
    "io.latency",
    "pids.max",
    "hugetlb.{size}.max",
    "hugetlb.{size}.rsvd.max",
    "rdma.max",
];

/// A reason the default grant does not cover a field: the capability that
/// does, and the field with why.
pub(crate) type Beyond = (Capability, String);

/// The longest cpuset list (`cpus`, `mems`) the bounds compare: far more
/// than a kubelet writes (it writes ranges: `0-3,64-67`), little enough that
/// parsing it is no work. A longer list, in the reply or in the container's
/// record, is not compared: past the container's own cpuset it needs
/// `cpuset-any` (the output checks bound its numbers, not its length).
pub(crate) const MAX_CPUSET_BYTES: usize = 4096;

/// What the bounds are measured against: the event's container as the
/// runtime sent it and, on UpdateContainer, the resources the runtime asks
/// for it now (the kubelet's newest word on its CPUs and memory, which
/// replaces the container's own); for an update of another container, the
/// host's record of that one (`others`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Baseline<'a> {
    /// The event's container.
    pub own: Option<&'a pb::Container>,
    /// On UpdateContainer, the resources asked for.
    pub requested: Option<&'a pb::LinuxResources>,
    /// The node view as of before the event, where the host keeps one:
    /// the other containers' resources.
    pub others: Option<&'a NodeView>,
}

impl<'a> Baseline<'a> {
    /// The event's own container, to measure its adjustment or update
    /// against: the resources asked for first, then its own. Unknown when
    /// the event has no container.
    pub(crate) fn own_current(self) -> Current<'a> {
        match self.own {
            Some(c) => {
                Current::Known { requested: self.requested, own: c.linux.as_ref().and_then(|l| l.resources.as_ref()) }
            }
            None => Current::Unknown,
        }
    }

    /// The container `id` (not the event's own), as the node view has it;
    /// unknown when the view does not have it, has it without resources
    /// (a runtime's report that left them out says nothing of its cpuset),
    /// or the host keeps none.
    pub(crate) fn other(self, id: &str) -> Current<'a> {
        match self.others.and_then(|v| v.container(id)).and_then(|c| c.resources.as_ref()) {
            Some(resources) => Current::Recorded(resources),
            None => Current::Unknown,
        }
    }
}

/// The container a field of the reply changes, as far as the host knows
/// it: what the bounds that depend on it (cpuset, swap) measure against.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Current<'a> {
    /// The host's record of the container: on UpdateContainer the
    /// resources asked for, then its own. A record without a cpuset or a
    /// swap limit is a container that has every CPU, or all the swap it
    /// wants (no bound).
    Known {
        /// On UpdateContainer, the resources asked for the event's container.
        requested: Option<&'a pb::LinuxResources>,
        /// The container's own resources.
        own: Option<&'a pb::LinuxResources>,
    },
    /// Another container, as the node view records it. The view's record
    /// may be partial (resources it learnt from a policy's update of a
    /// container it had none for), so a part it lacks is unknown, not
    /// unbounded: no cpuset, or no swap total, is measured as
    /// [`Current::Unknown`] is.
    Recorded(&'a pb::LinuxResources),
    /// A container the host has no record of (not in the node view, or no
    /// view kept): a bound that needs a record is past the default grant,
    /// never within it.
    Unknown,
}

impl<'a> Current<'a> {
    /// The container's resources, the ones asked for first; `None` when
    /// the container is unknown.
    fn resources(self) -> Option<impl Iterator<Item = &'a pb::LinuxResources>> {
        match self {
            Current::Known { requested, own } => Some(requested.into_iter().chain(own)),
            Current::Recorded(own) => Some(None.into_iter().chain(Some(own))),
            Current::Unknown => None,
        }
    }

    /// The container's cpuset list (`pick` chooses cpus or mems): the one
    /// asked for if any, else its own; empty if it has none, `None` if the
    /// container is unknown.
    fn cpuset(self, pick: fn(&pb::LinuxCPU) -> &str) -> Option<&'a str> {
        let found = self.resources()?.filter_map(|r| r.cpu.as_ref()).map(pick).find(|s| !s.is_empty());
        match (self, found) {
            (Current::Recorded(_), None) => None,
            (_, found) => Some(found.unwrap_or("")),
        }
    }

    /// The container's memory-and-swap total (the one asked for if any,
    /// else its own) and memory limit (likewise); `None` if the container
    /// is unknown.
    fn memory(self) -> Option<(Option<i64>, Option<i64>)> {
        let total = self.resources()?.filter_map(|r| r.memory.as_ref()).find_map(|m| m.swap.as_ref());
        let limit = self.resources()?.filter_map(|r| r.memory.as_ref()).find_map(|m| m.limit.as_ref());
        if matches!(self, Current::Recorded(_)) && total.is_none() {
            return None;
        }
        Some((total.map(|t| t.value), limit.map(|l| l.value)))
    }
}

/// Whether `key` is one of [`RESOURCE_FILES`].
pub(crate) fn is_resource_file(key: &str) -> bool {
    if RESOURCE_FILES.contains(&key) {
        return true;
    }
    // hugetlb.<size>.max and hugetlb.<size>.rsvd.max, <size> like 2MB or 1GB.
    let Some(rest) = key.strip_prefix("hugetlb.") else { return false };
    let Some(size) = rest.strip_suffix(".rsvd.max").or_else(|| rest.strip_suffix(".max")) else { return false };
    let digits = size.trim_end_matches(['K', 'M', 'G', 'T', 'B']);
    !digits.is_empty() && digits.len() < size.len() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A `unified` key beyond the default grant (a well-formed file that is not
/// a resource-control file; a malformed one is refused by the output checks).
pub(crate) fn unified_key(field: &str, key: &str) -> Option<Beyond> {
    (is_cgroup_file(key) && !is_resource_file(key)).then(|| {
        (
            Capability::CgroupFiles,
            format!("{field}.unified: {:?} is not one of the resource-control files a pod's limits set", clip(key)),
        )
    })
}

/// The Kubernetes domains whose annotations only Kubernetes sets.
const RESERVED_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io"];
/// Domains of annotations OCI runtimes act on: `module.wasm.image/variant`
/// makes crun and youki run the container's image as WebAssembly. A pod's
/// own annotations reach the OCI spec only through the runtime handler's
/// allow-list, which names these where an operator wants them.
const RUNTIME_DOMAINS: &[&str] = &["module.wasm.image"];
/// Most bytes (keys and values) all of a pod's annotations may hold: the
/// API server's limit. An adjustment that sets more than a pod could carry
/// is past the default grant.
pub(crate) const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// Annotations set (not removed) by one adjustment, in more bytes than all
/// of a pod's annotations may hold.
pub(crate) fn annotation_bytes(annotations: &[wit::KeyValue]) -> Option<Beyond> {
    let set = annotations.iter().filter(|kv| !kv.key.starts_with('-'));
    let bytes = set.fold(0usize, |n, kv| n.saturating_add(kv.key.len()).saturating_add(kv.value.len()));
    (bytes > MAX_ANNOTATION_BYTES).then(|| {
        let why = format!("{bytes} bytes, more than the {MAX_ANNOTATION_BYTES} all of a pod's annotations may hold");
        (Capability::RuntimeAnnotations, format!("adjust.annotations: {why}"))
    })
}

/// An annotation key (without a removal marker) beyond the default grant:
/// a key without a `domain/` prefix (the form runtimes, shims and systemd
/// read: `run.oci.*`, `io.containerd.*`, `io.katacontainers.*`,
/// `org.systemd.property.*`), or one in Kubernetes' own domains.
pub(crate) fn annotation_key(key: &str) -> Option<Beyond> {
    let name = key.strip_prefix('-').unwrap_or(key);
    let why = match name.split_once('/') {
        None => "has no domain/ prefix: runtimes, shims and systemd read such keys",
        Some((domain, _)) => {
            let domain = domain.to_ascii_lowercase();
            let within = |domains: &[&str]| domains.iter().any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
            if within(RUNTIME_DOMAINS) {
                "is read by OCI runtimes (it can make them run the image as WebAssembly)"
            } else if within(RESERVED_DOMAINS) || domain.is_empty() {
                "is in a domain only Kubernetes sets"
            } else {
                return None;
            }
        }
    };
    Some((Capability::RuntimeAnnotations, format!("adjust.annotations: {:?} {why}", clip(key))))
}

/// An OOM score below the container's own (0 when the runtime gave none):
/// a process may raise its own score without privilege, never lower it.
pub(crate) fn oom_score_adj(own: Option<&pb::Container>, value: i64) -> Option<Beyond> {
    let floor = own.and_then(|c| c.linux.as_ref()).and_then(|l| l.oom_score_adj.as_ref()).map_or(0, |o| o.value);
    (value < floor).then(|| {
        (Capability::OomProtect, format!("adjust.linux.oom-score-adj: {value} is below the container's own {floor}"))
    })
}

/// An rlimit above the container's own of that type, or of a type the
/// container has none of (its value is the runtime's, unknown here): a
/// process may lower its own limits without privilege, never raise them.
pub(crate) fn rlimit(own: Option<&pb::Container>, r: &wit::PosixRlimit) -> Option<Beyond> {
    let field = format!("adjust.rlimits[{}]", clip(&r.type_));
    let current = own.and_then(|c| c.rlimits.iter().find(|o| o.type_ == r.type_));
    let why = match current {
        None => "the container has no limit of this type to lower".to_string(),
        Some(o) if r.hard > o.hard || r.soft > o.hard => {
            format!("soft {} / hard {} above the container's own hard limit {}", r.soft, r.hard, o.hard)
        }
        Some(_) => return None,
    };
    Some((Capability::RlimitsRaise, format!("{field}: {why}")))
}

/// A scheduling setting that needs `CAP_SYS_NICE`: a real-time, deadline or
/// isochronous policy, a negative nice value, a static priority, deadline
/// parameters, or a flag other than reset-on-fork and keep-policy/params.
pub(crate) fn scheduler(s: &wit::LinuxScheduler) -> Option<Beyond> {
    use wit::{SchedulerFlag as F, SchedulerPolicy as P};
    let wit::LinuxScheduler { policy, nice, priority, flags, runtime, deadline, period } = s;
    let why = if !matches!(policy, P::None | P::Other | P::Batch | P::Idle) {
        format!("policy {policy:?} is real-time")
    } else if *nice < 0 {
        format!("nice {nice} is below 0")
    } else if *priority != 0 {
        format!("priority {priority} is a real-time priority")
    } else if *runtime != 0 || *deadline != 0 || *period != 0 {
        "deadline parameters are real-time".to_string()
    } else if let Some(f) = flags.iter().find(|f| !matches!(f, F::ResetOnFork | F::KeepPolicy | F::KeepParams)) {
        format!("flag {f:?} needs CAP_SYS_NICE")
    } else {
        return None;
    };
    Some((Capability::Realtime, format!("adjust.linux.scheduler: {why}")))
}

/// The real-time I/O class.
pub(crate) fn io_priority(p: &wit::IoPriority) -> Option<Beyond> {
    matches!(p.class, wit::IoPriorityClass::Rt)
        .then(|| (Capability::Realtime, "adjust.linux.io-priority: the real-time class".to_string()))
}

/// The OOM killer turned off (cgroup v1), which no pod can ask for: a
/// container at its limit then hangs rather than being killed. It needs
/// `oom-protect`, the OOM score's own capability; turning the killer on,
/// as it is, is no change.
pub(crate) fn oom_killer(field: &str, m: &wit::LinuxMemory) -> Option<Beyond> {
    (m.disable_oom_killer == Some(true))
        .then(|| (Capability::OomProtect, format!("{field}.memory.disable-oom-killer: the OOM killer off")))
}

/// A swappiness of the container's own (cgroup v1), how readily it is
/// swapped out, which no pod can ask for: `swap-raise`, the capability
/// over its swap.
pub(crate) fn swappiness(field: &str, m: &wit::LinuxMemory) -> Option<Beyond> {
    m.swappiness.map(|s| (Capability::SwapRaise, format!("{field}.memory.swappiness: {s}, which no pod can ask for")))
}

/// Real-time CPU bandwidth (cgroup v1 `cpu.rt_*`), which no pod is given.
pub(crate) fn cpu_realtime(field: &str, c: &wit::LinuxCpu) -> Option<Beyond> {
    (c.realtime_runtime.is_some() || c.realtime_period.is_some())
        .then(|| (Capability::Realtime, format!("{field}.cpu: real-time runtime or period")))
}

/// CPUs or memory nodes outside the container's own cpuset (on
/// UpdateContainer, the one asked for), when it has one: which CPUs a
/// container runs on is the kubelet's choice (another pod may hold some
/// exclusively), so the default only narrows it. Any list for a container
/// the host has no record of is past it, and so is a list (the reply's or
/// the container's) longer than [`MAX_CPUSET_BYTES`], which is not
/// compared. An unreadable list is left to the output checks, which refuse
/// it.
pub(crate) fn cpuset(field: &str, current: Current<'_>, c: &wit::LinuxCpu) -> Option<Beyond> {
    for (what, new, own) in [
        ("cpus", c.cpus.as_str(), current.cpuset(|o| o.cpus.as_str())),
        ("mems", c.mems.as_str(), current.cpuset(|o| o.mems.as_str())),
    ] {
        if new.is_empty() {
            continue;
        }
        let why = match own {
            None => format!("{:?} for a container the host has no record of (no cpuset to measure it against)", clip(new)),
            Some("") => continue,
            Some(_) if new.len() > MAX_CPUSET_BYTES => {
                format!("a list of {} bytes, longer than the {MAX_CPUSET_BYTES} the host compares", new.len())
            }
            Some(own) if own.len() > MAX_CPUSET_BYTES => format!(
                "{:?} against the container's own list of {} bytes, longer than the {MAX_CPUSET_BYTES} the host compares",
                clip(new),
                own.len()
            ),
            Some(own) => match (parse_set(new), parse_set(own)) {
                (None, _) => continue,
                (Some(new_set), Some(own_set)) if is_subset(&new_set, &own_set) => continue,
                (Some(_), Some(_)) => format!("{:?} is outside the container's own {:?}", clip(new), clip(own)),
                (Some(_), None) => {
                    format!("{:?} against the container's own {:?}, which does not read", clip(new), clip(own))
                }
            },
        };
        return Some((Capability::CpusetAny, format!("{field}.cpu.{what}: {why}")));
    }
    None
}

/// More swap than the container had. The swap a container may use is its
/// memory-and-swap limit less its memory limit; with no swap limit of its
/// own (or -1) it already has as much as it wants. A reply that lowers the
/// memory limit and leaves the total as it was gives the difference to
/// swap, so the total it keeps is checked as if it had set it. For a
/// container the host has no record of, only a total equal to (or below)
/// the memory limit set with it, which leaves no swap at all, is within the
/// default.
pub(crate) fn swap(field: &str, current: Current<'_>, m: &wit::LinuxMemory) -> Option<Beyond> {
    // A limit or total of 0 is unset to runc (the total it keeps); a limit
    // of -1 is no limit to measure swap under (-1 with a total is refused
    // by the runtime itself).
    let new_limit = m.limit.filter(|l| *l > 0);
    let new_total = m.swap.filter(|t| *t != 0);
    if new_total.is_none() && new_limit.is_none() {
        return None;
    }
    let kept = "memory.limit (under the total it keeps)";
    let Some((own_total, own_limit)) = current.memory() else {
        let (what, value) = match (new_total, new_limit) {
            (Some(total), Some(limit)) if (1..=limit).contains(&total) => return None,
            (Some(total), _) => ("memory.swap", total),
            (None, limit) => (kept, limit.unwrap_or_default()),
        };
        return Some((
            Capability::SwapRaise,
            format!(
                "{field}.{what}: {value} for a container the host has no record of (no swap to measure it against)"
            ),
        ));
    };
    let own_total = match own_total {
        None | Some(-1) => return None,
        Some(t) => t,
    };
    let own_swap = own_total.saturating_sub(own_limit.unwrap_or(0)).max(0);
    let (what, new_total) = match new_total {
        Some(total) => ("memory.swap", total),
        None => (kept, own_total),
    };
    let why = if new_total == -1 {
        "-1 (unlimited)".to_string()
    } else {
        let new_swap = new_total.saturating_sub(new_limit.or(own_limit).unwrap_or(0)).max(0);
        if new_swap <= own_swap {
            return None;
        }
        format!("{new_swap} bytes of swap")
    };
    Some((Capability::SwapRaise, format!("{field}.{what}: {why}, more than the container's own {own_swap}")))
}

/// A cpuset list as sorted, merged ranges; `None` if it does not read.
fn parse_set(list: &str) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi) = (lo.trim().parse::<u32>().ok()?, hi.trim().parse::<u32>().ok()?);
        if lo > hi {
            return None;
        }
        out.push((lo, hi));
    }
    out.sort_unstable();
    Some(out)
}

/// Whether every range of `a` lies within the union of `b` (both sorted),
/// in time `O((a + b) log b)`.
fn is_subset(a: &[(u32, u32)], b: &[(u32, u32)]) -> bool {
    // Merge b into disjoint ranges, then find each range of a among them.
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(b.len());
    for &(lo, hi) in b {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    a.iter().all(|&(lo, hi)| {
        // The first merged range that ends at or after `lo`: the only one
        // that can hold it.
        let at = merged.partition_point(|&(_, mhi)| mhi < lo);
        merged.get(at).is_some_and(|&(mlo, mhi)| lo >= mlo && hi <= mhi)
    })
}

fn clip(s: &str) -> String {
    crate::text::guest_text(s, 128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_keys_are_files_and_only_limits_are_in_the_default() {
        for ok in ["memory.max", "cpu.weight", "io.max", "pids.max", "hugetlb.2MB.max", "hugetlb.1GB.rsvd.max"] {
            assert!(is_cgroup_file(ok) && is_resource_file(ok), "{ok}");
            assert!(unified_key("f", ok).is_none(), "{ok}");
        }
        for beyond in [
            "cgroup.procs",
            "cgroup.kill",
            "cgroup.freeze",
            "cgroup.subtree_control",
            "cgroup.type",
            "cgroup.max.depth",
            "cgroup.max.descendants",
            "memory.swap.max",
            "cpuset.cpus",
            "cpuset.cpus.partition",
            "cpu.uclamp.min",
            "memory.pressure",
            "io.prio.class",
            "hugetlb.max",
            "hugetlb.xMB.max",
        ] {
            assert!(is_cgroup_file(beyond), "{beyond}");
            let (c, why) = unified_key("adjust.linux.resources", beyond).expect(beyond);
            assert_eq!(c, Capability::CgroupFiles);
            assert!(why.contains(beyond), "{why}");
        }
        for not_a_file in
            ["tasks", "../../etc/passwd", "memory./max", "memory..max", ".max", "Memory.max", "memory.", ""]
        {
            assert!(!is_cgroup_file(not_a_file), "{not_a_file}");
        }
    }

    #[test]
    fn annotations_past_what_a_pod_may_hold_need_a_capability() {
        let kv = |k: &str, n: usize| wit::KeyValue { key: k.into(), value: "v".repeat(n) };
        let at = MAX_ANNOTATION_BYTES - "example.com/a".len() - "example.com/b".len() - 10;
        assert!(annotation_bytes(&[kv("example.com/a", at), kv("example.com/b", 10)]).is_none());
        let (c, why) = annotation_bytes(&[kv("example.com/a", at), kv("example.com/b", 11)]).unwrap();
        assert_eq!(c, Capability::RuntimeAnnotations);
        assert!(why.contains("262145 bytes, more than the 262144"), "{why}");
        // Removals carry nothing into the spec.
        assert!(annotation_bytes(&[kv("example.com/a", at), kv("-example.com/b", 1 << 20)]).is_none());
    }

    #[test]
    fn annotations_need_a_domain_outside_kubernetes() {
        for ok in ["example.com/team", "-example.com/team", "qos.example.com/class", "exclusive-cpus.nri-wasm.io/cpus"]
        {
            assert!(annotation_key(ok).is_none(), "{ok}");
        }
        for beyond in [
            "run.oci.keep_original_groups",
            "io.kubernetes.cri.container-type",
            "-io.kubernetes.cri.sandbox-id",
            "org.systemd.property.DeviceAllow",
            "io.katacontainers.config.hypervisor.path",
            "kubernetes.io/config.seen",
            "cdi.k8s.io/vendor",
            "Node.K8S.io/x",
            "/x",
            "module.wasm.image/variant",
            "-Module.Wasm.Image/variant",
        ] {
            assert_eq!(annotation_key(beyond).map(|b| b.0), Some(Capability::RuntimeAnnotations), "{beyond}");
        }
    }

    fn container(oom: Option<i64>, rlimits: &[(&str, u64)], cpus: &str, memory: Option<(i64, i64)>) -> pb::Container {
        let mut c = pb::Container::new();
        let mut linux = pb::LinuxContainer::new();
        if let Some(v) = oom {
            linux.oom_score_adj = Some(pb::OptionalInt { value: v, ..Default::default() }).into();
        }
        let mut r = pb::LinuxResources::new();
        let mut cpu = pb::LinuxCPU::new();
        cpu.cpus = cpus.into();
        r.cpu = Some(cpu).into();
        if let Some((limit, swap)) = memory {
            let mut m = pb::LinuxMemory::new();
            m.limit = Some(pb::OptionalInt64 { value: limit, ..Default::default() }).into();
            m.swap = Some(pb::OptionalInt64 { value: swap, ..Default::default() }).into();
            r.memory = Some(m).into();
        }
        linux.resources = Some(r).into();
        c.linux = Some(linux).into();
        c.rlimits = rlimits
            .iter()
            .map(|(t, hard)| pb::POSIXRlimit { type_: t.to_string(), hard: *hard, soft: *hard, ..Default::default() })
            .collect();
        c
    }

    fn base(c: &pb::Container) -> Current<'_> {
        Baseline { own: Some(c), ..Baseline::default() }.own_current()
    }

    #[test]
    fn on_update_the_requested_resources_are_the_baseline() {
        let shared = container(None, &[], "0-3", Some((100, 100)));
        let mut requested = pb::LinuxResources::new();
        requested.cpu.mut_or_insert_default().cpus = "4-7".into();
        let asked = Baseline { own: Some(&shared), requested: Some(&requested), others: None }.own_current();
        let cpu = |cpus: &str| wit::LinuxCpu {
            shares: None,
            quota: None,
            period: None,
            realtime_runtime: None,
            realtime_period: None,
            cpus: cpus.into(),
            mems: String::new(),
        };
        assert!(cpuset("f", asked, &cpu("5")).is_none(), "within what the kubelet asks for now");
        assert!(cpuset("f", asked, &cpu("1")).is_some(), "the old cpuset is no longer the container's");
        // No memory asked for: the container's own swap is the baseline.
        let more = wit::LinuxMemory {
            limit: Some(100),
            reservation: None,
            swap: Some(200),
            kernel: None,
            kernel_tcp: None,
            swappiness: None,
            disable_oom_killer: None,
            use_hierarchy: None,
        };
        assert!(swap("f", asked, &more).is_some());
    }

    #[test]
    fn oom_scores_may_only_rise() {
        let burstable = container(Some(968), &[], "", None);
        assert!(oom_score_adj(Some(&burstable), 1000).is_none());
        assert!(oom_score_adj(Some(&burstable), 968).is_none());
        let (c, why) = oom_score_adj(Some(&burstable), -1000).unwrap();
        assert_eq!(c, Capability::OomProtect);
        assert!(why.contains("-1000") && why.contains("968"), "{why}");
        // No score of its own: 0 is the floor.
        let none = container(None, &[], "", None);
        assert!(oom_score_adj(Some(&none), -1).is_some());
        assert!(oom_score_adj(None, 5).is_none());
    }

    #[test]
    fn rlimits_may_only_fall() {
        let c = container(None, &[("RLIMIT_NOFILE", 1024)], "", None);
        let r = |t: &str, soft, hard| wit::PosixRlimit { type_: t.into(), soft, hard };
        assert!(rlimit(Some(&c), &r("RLIMIT_NOFILE", 512, 1024)).is_none());
        assert!(rlimit(Some(&c), &r("RLIMIT_NOFILE", 2048, 2048)).is_some());
        assert!(rlimit(Some(&c), &r("RLIMIT_NOFILE", 2048, 1024)).is_some(), "soft above the own hard limit");
        let (cap, why) = rlimit(Some(&c), &r("RLIMIT_RTPRIO", 0, 0)).unwrap();
        assert_eq!(cap, Capability::RlimitsRaise);
        assert!(why.contains("RLIMIT_RTPRIO"), "{why}");
    }

    #[test]
    fn cpusets_may_only_narrow() {
        let shared = container(None, &[], "0-3,6", None);
        let cpu = |cpus: &str| wit::LinuxCpu {
            shares: None,
            quota: None,
            period: None,
            realtime_runtime: None,
            realtime_period: None,
            cpus: cpus.into(),
            mems: String::new(),
        };
        assert!(cpuset("f", base(&shared), &cpu("1-2,6")).is_none());
        assert!(cpuset("f", base(&shared), &cpu("3,0,6")).is_none());
        assert_eq!(cpuset("f", base(&shared), &cpu("4")).map(|b| b.0), Some(Capability::CpusetAny));
        assert!(cpuset("f", base(&shared), &cpu("3-6")).is_some());
        assert!(cpuset("f", base(&shared), &cpu("6")).is_none());
        assert!(cpuset("f", base(&shared), &cpu("5")).is_some(), "between two ranges of its own");
        assert!(cpuset("f", base(&shared), &cpu("7")).is_some(), "past its last range");
        let overlapping = container(None, &[], "4-5,0-2,1-3,8", None);
        assert!(cpuset("f", base(&overlapping), &cpu("0-5,8")).is_none(), "its ranges merged");
        assert!(cpuset("f", base(&overlapping), &cpu("2-8")).is_some());
        // No cpuset of its own: every CPU is its own.
        let unset = container(None, &[], "", None);
        assert!(cpuset("f", base(&unset), &cpu("7")).is_none());
        // Unknown: no cpuset to keep within, whatever the list.
        let (c, why) = cpuset("f", Current::Unknown, &cpu("0")).unwrap();
        assert_eq!(c, Capability::CpusetAny);
        assert!(why.contains("no record"), "{why}");
        // Another container's record without a cpuset (the view may have
        // learnt only a policy's partial update of it): unknown, not every
        // CPU; with one, measured against it.
        let partial = pb::LinuxResources { pids: protobuf::MessageField::none(), ..Default::default() };
        assert_eq!(cpuset("f", Current::Recorded(&partial), &cpu("0")).map(|b| b.0), Some(Capability::CpusetAny));
        let mut pinned = partial.clone();
        pinned.cpu = protobuf::MessageField::some(pb::LinuxCPU { cpus: "2-3".into(), ..Default::default() });
        assert!(cpuset("f", Current::Recorded(&pinned), &cpu("3")).is_none());
        assert!(cpuset("f", Current::Recorded(&pinned), &cpu("0")).is_some());
        // Too long to compare, the reply's list or the container's own.
        assert!(cpuset("f", base(&shared), &cpu(&"1,".repeat(MAX_CPUSET_BYTES))).is_some());
        let long = container(None, &[], &"1,".repeat(MAX_CPUSET_BYTES), None);
        assert!(cpuset("f", base(&long), &cpu("1")).is_some());
        assert!(cpu_realtime("f", &wit::LinuxCpu { realtime_runtime: Some(1000), ..cpu("") }).is_some());
    }

    #[test]
    fn the_oom_killer_off_and_a_swappiness_are_past_the_default() {
        let knobs = |swappiness, disable_oom_killer| wit::LinuxMemory {
            limit: Some(64),
            reservation: Some(32),
            swap: None,
            kernel: None,
            kernel_tcp: None,
            swappiness,
            disable_oom_killer,
            use_hierarchy: None,
        };
        assert_eq!(oom_killer("f", &knobs(None, Some(true))).map(|b| b.0), Some(Capability::OomProtect));
        assert!(oom_killer("f", &knobs(None, Some(false))).is_none(), "on, as it is: no change");
        assert!(oom_killer("f", &knobs(Some(0), None)).is_none());
        let (c, why) = swappiness("f", &knobs(Some(60), Some(true))).unwrap();
        assert_eq!((c, why.as_str()), (Capability::SwapRaise, "f.memory.swappiness: 60, which no pod can ask for"));
        assert!(swappiness("f", &knobs(None, Some(true))).is_none());
    }

    #[test]
    fn swap_may_only_shrink() {
        let mem = |limit, swap| wit::LinuxMemory {
            limit,
            reservation: None,
            swap,
            kernel: None,
            kernel_tcp: None,
            swappiness: None,
            disable_oom_killer: None,
            use_hierarchy: None,
        };
        let no_swap = container(None, &[], "", Some((100, 100)));
        assert!(swap("f", base(&no_swap), &mem(Some(200), Some(200))).is_none(), "a bigger limit, still no swap");
        assert_eq!(swap("f", base(&no_swap), &mem(None, Some(-1))).map(|b| b.0), Some(Capability::SwapRaise));
        assert!(swap("f", base(&no_swap), &mem(Some(100), Some(150))).is_some());
        assert!(swap("f", base(&no_swap), &mem(None, None)).is_none());
        // A lower limit under the total it had: the difference is swap.
        let lowered = swap("f", base(&no_swap), &mem(Some(40), None)).expect("60 bytes of swap given");
        assert_eq!(lowered.0, Capability::SwapRaise);
        assert_eq!(
            lowered.1,
            "f.memory.limit (under the total it keeps): 60 bytes of swap, more than the container's own 0"
        );
        // No limit to measure swap under: nothing given.
        assert!(swap("f", base(&no_swap), &mem(Some(0), None)).is_none(), "0 is unset");
        assert!(swap("f", base(&no_swap), &mem(Some(-1), None)).is_none(), "-1 with a total: the runtime's to refuse");
        assert!(swap("f", base(&no_swap), &mem(Some(40), Some(40))).is_none(), "lowered with its total");
        assert!(swap("f", base(&no_swap), &mem(Some(400), None)).is_none(), "a higher limit takes swap away");
        let some_swap = container(None, &[], "", Some((100, 150)));
        assert!(swap("f", base(&some_swap), &mem(Some(80), None)).is_some(), "50 of swap became 70");
        assert!(swap("f", base(&some_swap), &mem(Some(80), Some(130))).is_none(), "50 of swap kept");
        // On UpdateContainer the kubelet's new limit is the baseline, the
        // total the container keeps is its own: a policy that repeats the
        // lower limit gives no swap the kubelet did not.
        let mut requested = pb::LinuxResources::new();
        requested.memory.mut_or_insert_default().limit =
            Some(pb::OptionalInt64 { value: 50, ..Default::default() }).into();
        let asked = Baseline { own: Some(&no_swap), requested: Some(&requested), others: None }.own_current();
        assert!(swap("f", asked, &mem(Some(50), None)).is_none(), "the kubelet's own limit");
        assert!(swap("f", asked, &mem(Some(40), None)).is_some(), "lower still: 60 of swap against 50");
        let unlimited = container(None, &[], "", Some((100, -1)));
        assert!(swap("f", base(&unlimited), &mem(None, Some(-1))).is_none());
        // A total of 0 is unset to runc: the total the container keeps.
        assert!(swap("f", base(&no_swap), &mem(Some(40), Some(0))).is_some(), "60 of swap, as without a total");
        assert!(swap("f", base(&no_swap), &mem(None, Some(0))).is_none());
        // Unknown: only a total at the limit set with it (no swap) is within.
        for (limit, total) in [(None, Some(-1)), (None, Some(100)), (Some(100), None), (Some(100), Some(0))] {
            let beyond = swap("f", Current::Unknown, &mem(limit, total));
            assert_eq!(beyond.map(|b| b.0), Some(Capability::SwapRaise), "{limit:?} {total:?}");
        }
        assert!(swap("f", Current::Unknown, &mem(Some(100), Some(100))).is_none());
        assert!(swap("f", Current::Unknown, &mem(None, None)).is_none());
        // Another container's record without a swap total: unknown too.
        let partial = pb::LinuxResources::default();
        let beyond = swap("f", Current::Recorded(&partial), &mem(Some(100), None));
        assert_eq!(beyond.map(|b| b.0), Some(Capability::SwapRaise));
    }

    #[test]
    fn only_a_normal_scheduler_without_privilege() {
        use wit::{SchedulerFlag as F, SchedulerPolicy as P};
        let s = |policy, nice, flags: Vec<F>| wit::LinuxScheduler {
            policy,
            nice,
            priority: 0,
            flags,
            runtime: 0,
            deadline: 0,
            period: 0,
        };
        assert!(scheduler(&s(P::Batch, 5, vec![F::ResetOnFork])).is_none());
        assert!(scheduler(&s(P::Idle, 0, vec![])).is_none());
        for bad in [s(P::Fifo, 0, vec![]), s(P::Other, -5, vec![]), s(P::Other, 0, vec![F::UtilClampMin])] {
            assert_eq!(scheduler(&bad).map(|b| b.0), Some(Capability::Realtime), "{bad:?}");
        }
        let rt = wit::IoPriority { class: wit::IoPriorityClass::Rt, priority: 0 };
        assert!(io_priority(&rt).is_some());
        assert!(io_priority(&wit::IoPriority { class: wit::IoPriorityClass::Be, priority: 0 }).is_none());
    }
}
