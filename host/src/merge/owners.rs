//! Who set what: the runtime's ownership records, per container and per field.
//!
//! The records are kept in NRI's own shape (`pb::OwningPlugins`) so that a
//! validation step sees exactly what a runtime would show its validators:
//! - a simple field maps to the policy that set it;
//! - a compound field maps each key (annotation name, mount destination, ...)
//!   to the policy that set that key;
//! - a field or key cleared by a removal is recorded as `-<policy>`: the
//!   remover may set it afterwards, anybody else conflicts *with the remover*;
//! - OCI hooks never conflict; their record lists every contributor, comma
//!   separated, in chain order.
//!
//! A policy that claims a field it already holds conflicts with itself, as in
//! the runtime (two mounts with one destination in one reply, for instance).

use nri_wasm_api::api as pb;

use super::MergeError;

/// The container a claim is about, and how a conflict message names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub id: &'a str,
    /// Name the container in conflict messages: true for every container but
    /// the one being created (whose id the caller already knows).
    pub qualify: bool,
}

impl<'a> Scope<'a> {
    /// The container being created (by CreateContainer).
    pub(super) fn created(id: &'a str) -> Self {
        Self { id, qualify: false }
    }

    /// Any container named by a `ContainerUpdate`.
    pub(super) fn updated(id: &'a str) -> Self {
        Self { id, qualify: true }
    }
}

/// Field owners of every container touched so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Owners {
    records: pb::OwningPlugins,
}

impl Owners {
    pub(super) fn to_proto(&self) -> pb::OwningPlugins {
        self.records.clone()
    }

    fn of(&mut self, id: &str) -> &mut pb::FieldOwners {
        // Most claims are about a container already recorded: look it up
        // before allocating its key.
        if !self.records.owners.contains_key(id) {
            self.records.owners.insert(id.to_string(), pb::FieldOwners::default());
        }
        self.records.owners.get_mut(id).expect("inserted above")
    }

    /// `policy` sets the simple `field`.
    pub(super) fn claim(&mut self, scope: Scope<'_>, field: pb::Field, policy: &str) -> Result<(), MergeError> {
        let owners = self.of(scope.id);
        if let Some(first) = owners.simple.get(&(field as i32)).and_then(|o| holder(o, policy)) {
            return Err(conflict(scope, field, None, first, policy));
        }
        owners.simple.insert(field as i32, policy.to_string());
        Ok(())
    }

    /// `policy` sets `key` of the compound `field`.
    pub(super) fn claim_key(
        &mut self,
        scope: Scope<'_>,
        field: pb::Field,
        key: &str,
        policy: &str,
    ) -> Result<(), MergeError> {
        let keys = &mut self.of(scope.id).compound.entry(field as i32).or_default().owners;
        if let Some(first) = keys.get(key).and_then(|o| holder(o, policy)) {
            return Err(conflict(scope, field, Some(key), first, policy));
        }
        keys.insert(key.to_string(), policy.to_string());
        Ok(())
    }

    /// `policy` removed the simple `field`: whoever owned it no longer does.
    pub(super) fn clear(&mut self, id: &str, field: pb::Field, policy: &str) {
        self.of(id).simple.insert(field as i32, removed_by(policy));
    }

    /// `policy` removed `key` of the compound `field`.
    pub(super) fn clear_key(&mut self, id: &str, field: pb::Field, key: &str, policy: &str) {
        self.of(id).compound.entry(field as i32).or_default().owners.insert(key.to_string(), removed_by(policy));
    }

    /// `policy` added to an accumulating field (OCI hooks): never a conflict.
    pub(super) fn accumulate(&mut self, id: &str, field: pb::Field, policy: &str) {
        let owner = self.of(id).simple.entry(field as i32).or_default();
        if !owner.is_empty() {
            owner.push(',');
        }
        owner.push_str(policy);
    }
}

fn removed_by(policy: &str) -> String {
    format!("-{policy}")
}

/// Who stands in the way of `policy` given the recorded `owner`: nobody if
/// `policy` itself cleared the field, the remover if another policy cleared
/// it, else the owner (possibly `policy` itself).
fn holder(owner: &str, policy: &str) -> Option<String> {
    match owner.strip_prefix('-') {
        Some(remover) if remover == policy => None,
        Some(remover) => Some(remover.to_string()),
        None => Some(owner.to_string()),
    }
}

fn conflict(scope: Scope<'_>, field: pb::Field, key: Option<&str>, first: String, second: &str) -> MergeError {
    let mut field = describe(field, key);
    if scope.qualify {
        field.push_str(&format!(" of container {:?}", scope.id));
    }
    MergeError::Conflict { field, first, second: second.to_string() }
}

/// A field (and key) as conflict messages name it.
pub(crate) fn describe(field: pb::Field, key: Option<&str>) -> String {
    use pb::Field as F;
    let name = match field {
        F::None => "an unnamed field",
        F::Annotations => "annotation",
        F::Mounts => "mount",
        F::OciHooks => "OCI hooks",
        F::Devices => "device",
        F::CdiDevices => "CDI device",
        F::Env => "environment variable",
        F::Args => "args",
        F::MemLimit => "memory limit",
        F::MemReservation => "memory reservation",
        F::MemSwapLimit => "memory swap limit",
        F::MemKernelLimit => "kernel memory limit",
        F::MemTCPLimit => "kernel TCP memory limit",
        F::MemSwappiness => "memory swappiness",
        F::MemDisableOomKiller => "memory disable_oom_killer",
        F::MemUseHierarchy => "memory use_hierarchy",
        F::CPUShares => "CPU shares",
        F::CPUQuota => "CPU quota",
        F::CPUPeriod => "CPU period",
        F::CPURealtimeRuntime => "CPU realtime runtime",
        F::CPURealtimePeriod => "CPU realtime period",
        F::CPUSetCPUs => "cpuset CPUs",
        F::CPUSetMems => "cpuset memory nodes",
        F::PidsLimit => "pids limit",
        F::HugepageLimits => "hugepage limit",
        F::BlockioClass => "block I/O class",
        F::RdtClass => "RDT class",
        F::CgroupsUnified => "unified cgroup",
        F::CgroupsPath => "cgroups path",
        F::OomScoreAdj => "OOM score adjustment",
        F::Rlimits => "rlimit",
        F::IoPriority => "I/O priority",
        F::SeccompPolicy => "seccomp policy",
        F::Namespace => "namespace",
        F::Sysctl => "sysctl",
        F::LinuxNetDevices => "net device",
        F::LinuxSched => "scheduler",
        F::RdtClosID => "RDT CLOS id",
        F::RdtSchemata => "RDT schemata",
        F::RdtEnableMonitoring => "RDT monitoring",
        F::MemoryPolicy => "memory policy",
    };
    match key {
        Some(key) => format!("{name} {key:?}"),
        None => name.to_string(),
    }
}
