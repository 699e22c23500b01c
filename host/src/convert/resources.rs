//! Cgroup resources: `LinuxResources` and everything inside it.

use nri_wasm_api::api as pb;

use super::{get, kv_to_pb, kv_to_wit, list_to_pb, list_to_wit, opt_to_pb, opt_to_wit, wrap, ConvertError};
use crate::wit::wit;

impl From<&pb::LinuxResources> for wit::LinuxResources {
    fn from(r: &pb::LinuxResources) -> Self {
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
        } = r;
        Self {
            memory: opt_to_wit(memory),
            cpu: opt_to_wit(cpu),
            hugepage_limits: list_to_wit(hugepage_limits),
            blockio_class: get(blockio_class),
            rdt_class: get(rdt_class),
            unified: kv_to_wit(unified),
            devices: list_to_wit(devices),
            pids: opt_to_wit(pids),
        }
    }
}

impl TryFrom<wit::LinuxResources> for pb::LinuxResources {
    type Error = ConvertError;
    fn try_from(r: wit::LinuxResources) -> Result<Self, ConvertError> {
        let wit::LinuxResources { memory, cpu, hugepage_limits, blockio_class, rdt_class, unified, devices, pids } = r;
        Ok(Self {
            memory: opt_to_pb(memory),
            cpu: opt_to_pb(cpu),
            hugepage_limits: list_to_pb(hugepage_limits),
            blockio_class: wrap(blockio_class),
            rdt_class: wrap(rdt_class),
            unified: kv_to_pb("LinuxResources.unified", unified)?,
            devices: list_to_pb(devices),
            pids: opt_to_pb(pids),
            ..Default::default()
        })
    }
}

impl From<&pb::LinuxMemory> for wit::LinuxMemory {
    fn from(m: &pb::LinuxMemory) -> Self {
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
        Self {
            limit: get(limit),
            reservation: get(reservation),
            swap: get(swap),
            kernel: get(kernel),
            kernel_tcp: get(kernel_tcp),
            swappiness: get(swappiness),
            disable_oom_killer: get(disable_oom_killer),
            use_hierarchy: get(use_hierarchy),
        }
    }
}

impl From<wit::LinuxMemory> for pb::LinuxMemory {
    fn from(m: wit::LinuxMemory) -> Self {
        let wit::LinuxMemory {
            limit,
            reservation,
            swap,
            kernel,
            kernel_tcp,
            swappiness,
            disable_oom_killer,
            use_hierarchy,
        } = m;
        Self {
            limit: wrap(limit),
            reservation: wrap(reservation),
            swap: wrap(swap),
            kernel: wrap(kernel),
            kernel_tcp: wrap(kernel_tcp),
            swappiness: wrap(swappiness),
            disable_oom_killer: wrap(disable_oom_killer),
            use_hierarchy: wrap(use_hierarchy),
            ..Default::default()
        }
    }
}

impl From<&pb::LinuxCPU> for wit::LinuxCpu {
    fn from(c: &pb::LinuxCPU) -> Self {
        let pb::LinuxCPU { shares, quota, period, realtime_runtime, realtime_period, cpus, mems, special_fields: _ } =
            c;
        Self {
            shares: get(shares),
            quota: get(quota),
            period: get(period),
            realtime_runtime: get(realtime_runtime),
            realtime_period: get(realtime_period),
            cpus: cpus.clone(),
            mems: mems.clone(),
        }
    }
}

impl From<wit::LinuxCpu> for pb::LinuxCPU {
    fn from(c: wit::LinuxCpu) -> Self {
        let wit::LinuxCpu { shares, quota, period, realtime_runtime, realtime_period, cpus, mems } = c;
        Self {
            shares: wrap(shares),
            quota: wrap(quota),
            period: wrap(period),
            realtime_runtime: wrap(realtime_runtime),
            realtime_period: wrap(realtime_period),
            cpus,
            mems,
            ..Default::default()
        }
    }
}

impl From<&pb::HugepageLimit> for wit::HugepageLimit {
    fn from(h: &pb::HugepageLimit) -> Self {
        let pb::HugepageLimit { page_size, limit, special_fields: _ } = h;
        Self { page_size: page_size.clone(), limit: *limit }
    }
}

impl From<wit::HugepageLimit> for pb::HugepageLimit {
    fn from(h: wit::HugepageLimit) -> Self {
        let wit::HugepageLimit { page_size, limit } = h;
        Self { page_size, limit, ..Default::default() }
    }
}

impl From<&pb::LinuxDeviceCgroup> for wit::LinuxDeviceCgroup {
    fn from(d: &pb::LinuxDeviceCgroup) -> Self {
        let pb::LinuxDeviceCgroup { allow, type_, major, minor, access, special_fields: _ } = d;
        Self { allow: *allow, type_: type_.clone(), major: get(major), minor: get(minor), access: access.clone() }
    }
}

impl From<wit::LinuxDeviceCgroup> for pb::LinuxDeviceCgroup {
    fn from(d: wit::LinuxDeviceCgroup) -> Self {
        let wit::LinuxDeviceCgroup { allow, type_, major, minor, access } = d;
        Self { allow, type_, major: wrap(major), minor: wrap(minor), access, ..Default::default() }
    }
}

impl From<&pb::LinuxPids> for wit::LinuxPids {
    fn from(p: &pb::LinuxPids) -> Self {
        let pb::LinuxPids { limit, special_fields: _ } = p;
        Self { limit: *limit }
    }
}

impl From<wit::LinuxPids> for pb::LinuxPids {
    fn from(p: wit::LinuxPids) -> Self {
        let wit::LinuxPids { limit } = p;
        Self { limit, ..Default::default() }
    }
}
