//! NRI's field numbers (the `Field` enum of the NRI API), as the
//! validation step names the owner of each field
//! ([`FieldOwner::field`](crate::FieldOwner)), and lookups of owners on a
//! [`ValidationEvent`].
//!
//! ```ignore
//! use nri_wasm_sdk::*;
//!
//! fn validate_container_adjustment(e: &Event) -> Result<Reply, String> {
//!     let v = e.validation().ok_or("not a validation event")?;
//!     if let Some(by) = v.owner(field::SECCOMP_POLICY, "") {
//!         return Err(format!("{by} changed the seccomp policy"));
//!     }
//!     Ok(Reply::none())
//! }
//! ```

use crate::{FieldOwner, ValidationEvent};

pub const ANNOTATIONS: i32 = 1;
pub const MOUNTS: i32 = 2;
/// OCI hooks accumulate: the owner is every contributor, comma separated,
/// in chain order (`10-a,20-b`).
pub const OCI_HOOKS: i32 = 3;
pub const DEVICES: i32 = 4;
pub const CDI_DEVICES: i32 = 5;
pub const ENV: i32 = 6;
pub const ARGS: i32 = 7;
pub const MEM_LIMIT: i32 = 8;
pub const MEM_RESERVATION: i32 = 9;
pub const MEM_SWAP_LIMIT: i32 = 10;
pub const MEM_KERNEL_LIMIT: i32 = 11;
pub const MEM_TCP_LIMIT: i32 = 12;
pub const MEM_SWAPPINESS: i32 = 13;
pub const MEM_DISABLE_OOM_KILLER: i32 = 14;
pub const MEM_USE_HIERARCHY: i32 = 15;
pub const CPU_SHARES: i32 = 16;
pub const CPU_QUOTA: i32 = 17;
pub const CPU_PERIOD: i32 = 18;
pub const CPU_REALTIME_RUNTIME: i32 = 19;
pub const CPU_REALTIME_PERIOD: i32 = 20;
pub const CPUSET_CPUS: i32 = 21;
pub const CPUSET_MEMS: i32 = 22;
pub const PIDS_LIMIT: i32 = 23;
pub const HUGEPAGE_LIMITS: i32 = 24;
pub const BLOCKIO_CLASS: i32 = 25;
pub const RDT_CLASS: i32 = 26;
pub const CGROUPS_UNIFIED: i32 = 27;
pub const CGROUPS_PATH: i32 = 28;
pub const OOM_SCORE_ADJ: i32 = 29;
pub const RLIMITS: i32 = 30;
pub const IO_PRIORITY: i32 = 31;
pub const SECCOMP_POLICY: i32 = 32;
pub const NAMESPACE: i32 = 33;
pub const SYSCTL: i32 = 34;
pub const LINUX_NET_DEVICES: i32 = 35;
pub const LINUX_SCHED: i32 = 36;
pub const RDT_CLOS_ID: i32 = 37;
pub const RDT_SCHEMATA: i32 = 38;
pub const RDT_ENABLE_MONITORING: i32 = 39;
pub const MEMORY_POLICY: i32 = 40;

/// Whether NRI records `field` per key (annotations, mounts, env, ...)
/// rather than as one value.
pub fn is_compound(field: i32) -> bool {
    matches!(
        field,
        ANNOTATIONS
            | MOUNTS
            | DEVICES
            | CDI_DEVICES
            | ENV
            | HUGEPAGE_LIMITS
            | CGROUPS_UNIFIED
            | RLIMITS
            | NAMESPACE
            | SYSCTL
            | LINUX_NET_DEVICES
    )
}

/// A short name of `field` for messages (`"seccomp policy"`).
pub fn name(field: i32) -> &'static str {
    match field {
        ANNOTATIONS => "annotation",
        MOUNTS => "mount",
        OCI_HOOKS => "OCI hooks",
        DEVICES => "device",
        CDI_DEVICES => "CDI device",
        ENV => "environment variable",
        ARGS => "args",
        MEM_LIMIT => "memory limit",
        MEM_RESERVATION => "memory reservation",
        MEM_SWAP_LIMIT => "memory swap limit",
        MEM_KERNEL_LIMIT => "kernel memory limit",
        MEM_TCP_LIMIT => "kernel TCP memory limit",
        MEM_SWAPPINESS => "memory swappiness",
        MEM_DISABLE_OOM_KILLER => "memory disable_oom_killer",
        MEM_USE_HIERARCHY => "memory use_hierarchy",
        CPU_SHARES => "CPU shares",
        CPU_QUOTA => "CPU quota",
        CPU_PERIOD => "CPU period",
        CPU_REALTIME_RUNTIME => "CPU realtime runtime",
        CPU_REALTIME_PERIOD => "CPU realtime period",
        CPUSET_CPUS => "cpuset CPUs",
        CPUSET_MEMS => "cpuset memory nodes",
        PIDS_LIMIT => "pids limit",
        HUGEPAGE_LIMITS => "hugepage limit",
        BLOCKIO_CLASS => "block I/O class",
        RDT_CLASS => "RDT class",
        CGROUPS_UNIFIED => "unified cgroup",
        CGROUPS_PATH => "cgroups path",
        OOM_SCORE_ADJ => "OOM score adjustment",
        RLIMITS => "rlimit",
        IO_PRIORITY => "I/O priority",
        SECCOMP_POLICY => "seccomp policy",
        NAMESPACE => "namespace",
        SYSCTL => "sysctl",
        LINUX_NET_DEVICES => "net device",
        LINUX_SCHED => "scheduler",
        RDT_CLOS_ID => "RDT CLOS id",
        RDT_SCHEMATA => "RDT schemata",
        RDT_ENABLE_MONITORING => "RDT monitoring",
        MEMORY_POLICY => "memory policy",
        _ => "an unnamed field",
    }
}

impl ValidationEvent {
    /// The owners recorded for the container being created.
    pub fn own_owners(&self) -> impl Iterator<Item = &FieldOwner> {
        self.owners.iter().filter(move |o| o.container_id == self.container.id)
    }

    /// Who set `field` (and, for a compound field, `key`; `""` for a simple
    /// one) of the container being created: a policy's `NN-name` (for OCI
    /// hooks, every contributor, comma separated). A key some policy removed
    /// is recorded as `-NN-name`.
    pub fn owner(&self, field: i32, key: &str) -> Option<&str> {
        self.own_owners().find(|o| o.field == field && o.key == key).map(|o| o.plugin.as_str())
    }
}
