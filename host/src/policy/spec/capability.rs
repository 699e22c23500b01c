//! The capabilities: one table of what a policy may change or read, with
//! each one's name and whether it is dangerous (off unless granted).
//!
//! `caps.rs` decides what a policy has and checks its replies against it;
//! `bounds.rs` says how far the default grant of each goes. Both name
//! capabilities, so the table is a file of its own below them.

use std::fmt;

macro_rules! capabilities {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $dangerous:literal;)*) => {
        /// One thing a policy may change or read.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Capability {
            $($(#[$doc])* $variant,)*
        }

        impl Capability {
            /// Every capability, in the order of this table.
            pub const ALL: &'static [Capability] = &[$(Capability::$variant,)*];

            /// Its name in settings files, declarations and messages.
            pub fn name(self) -> &'static str {
                match self {
                    $(Capability::$variant => $name,)*
                }
            }

            /// Off unless the operator grants it.
            pub fn dangerous(self) -> bool {
                match self {
                    $(Capability::$variant => $dangerous,)*
                }
            }
        }
    };
}

capabilities! {
    /// `adjust.env`.
    Env = "env", false;
    /// `adjust.annotations` with `domain/name` keys outside Kubernetes' domains.
    Annotations = "annotations", false;
    /// `adjust.args`.
    Args = "args", false;
    /// `adjust.rlimits` at or below the container's own.
    Rlimits = "rlimits", false;
    /// `resources.cpu` (of the container's own adjustment or update): shares,
    /// quota, period, and a cpuset within the container's own.
    Cpu = "cpu", false;
    /// `resources.memory`, with no more swap than the container had.
    Memory = "memory", false;
    /// `resources.hugepage-limits`.
    Hugepages = "hugepages", false;
    /// `resources.blockio-class`.
    Blockio = "blockio", false;
    /// `resources.rdt-class` (a class the operator configured).
    Rdt = "rdt", false;
    /// `resources.unified`: the resource-control files of cgroup v2.
    Unified = "unified", false;
    /// `resources.pids`.
    Pids = "pids", false;
    /// `linux.oom-score-adj` at or above the container's own.
    OomScoreAdj = "oom-score-adj", false;
    /// `linux.io-priority` in the best-effort or idle class.
    IoPriority = "io-priority", false;
    /// `linux.scheduler`: a normal policy at a nice value of 0 or more.
    Scheduler = "scheduler", false;
    /// `linux.memory-policy`.
    MemoryPolicy = "memory-policy", false;
    /// Refusing the event (`handle` returning an error).
    Deny = "deny", false;
    /// Reading the node view (the `node` interface).
    Node = "node", false;
    /// `adjust.mounts`: host paths into the container.
    Mounts = "mounts", true;
    /// `adjust.hooks`: programs the runtime runs on the host, as root.
    Hooks = "hooks", true;
    /// `linux.devices` and `resources.devices` (device cgroup rules).
    Devices = "devices", true;
    /// `adjust.cdi-devices`: whatever the CDI spec injects.
    CdiDevices = "cdi-devices", true;
    /// `linux.namespaces`: joining or leaving the host's namespaces.
    Namespaces = "namespaces", true;
    /// `linux.seccomp-policy`.
    Seccomp = "seccomp", true;
    /// `linux.sysctl`.
    Sysctl = "sysctl", true;
    /// `linux.net-devices`: host network devices moved into the container.
    NetDevices = "net-devices", true;
    /// `linux.cgroups-path`: placing the container in another cgroup.
    CgroupsPath = "cgroups-path", true;
    /// Updates of containers other than the event's own.
    Updates = "updates", true;
    /// Evictions of containers.
    Evictions = "evictions", true;
    /// `resources.unified` keys other than the resource-control files
    /// (`cgroup.procs`, `cgroup.kill`, `cpuset.cpus.partition`, ...).
    CgroupFiles = "cgroup-files", true;
    /// `linux.oom-score-adj` below the container's own.
    OomProtect = "oom-protect", true;
    /// `adjust.rlimits` above the container's own, or of a type it has none of.
    RlimitsRaise = "rlimits-raise", true;
    /// Real-time or deadline scheduling, a negative nice value, the
    /// real-time I/O class, real-time CPU bandwidth.
    Realtime = "realtime", true;
    /// Annotations the runtime, its shims or systemd read: keys without a
    /// `domain/` prefix, or in Kubernetes' own domains.
    RuntimeAnnotations = "runtime-annotations", true;
    /// `linux.rdt`: the container's resctrl class, schemata and monitoring.
    Resctrl = "resctrl", true;
    /// More swap than the container had.
    SwapRaise = "swap-raise", true;
    /// CPUs or memory nodes outside the container's own cpuset.
    CpusetAny = "cpuset-any", true;
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Capability {
    /// The capability called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// Every name, comma-separated, for messages.
    pub fn names() -> String {
        Self::ALL.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
    }

    /// Its bit in a [`CapSet`](super::caps::CapSet).
    pub(super) fn bit(self) -> u64 {
        1 << self as u8
    }
}
