//! `Default` for the generated records.
//!
//! The records come from the WIT bindings, which cannot carry derives of
//! ours beyond those the generator offers, so the empty value of each (every
//! list empty, every option unset) is written out here. The builders and
//! the tests start from these.

// Written out because they cannot be derived on generated types.
#![allow(clippy::derivable_impls)]

use crate::{
    Container, ContainerAdjustment, ContainerState, Hooks, LinuxContainer, LinuxContainerAdjustment, LinuxCpu,
    LinuxMemory, LinuxPodSandbox, LinuxResources, PodSandbox,
};

impl Default for ContainerAdjustment {
    fn default() -> Self {
        ContainerAdjustment {
            annotations: Vec::new(),
            mounts: Vec::new(),
            env: Vec::new(),
            hooks: None,
            linux: None,
            rlimits: Vec::new(),
            cdi_devices: Vec::new(),
            args: Vec::new(),
        }
    }
}

impl Default for LinuxContainerAdjustment {
    fn default() -> Self {
        LinuxContainerAdjustment {
            devices: Vec::new(),
            resources: None,
            cgroups_path: String::new(),
            oom_score_adj: None,
            io_priority: None,
            seccomp_policy: None,
            namespaces: Vec::new(),
            sysctl: Vec::new(),
            net_devices: Vec::new(),
            scheduler: None,
            rdt: None,
            memory_policy: None,
        }
    }
}

impl Default for LinuxResources {
    fn default() -> Self {
        LinuxResources {
            memory: None,
            cpu: None,
            hugepage_limits: Vec::new(),
            blockio_class: None,
            rdt_class: None,
            unified: Vec::new(),
            devices: Vec::new(),
            pids: None,
        }
    }
}

impl Default for LinuxMemory {
    fn default() -> Self {
        LinuxMemory {
            limit: None,
            reservation: None,
            swap: None,
            kernel: None,
            kernel_tcp: None,
            swappiness: None,
            disable_oom_killer: None,
            use_hierarchy: None,
        }
    }
}

impl Default for LinuxCpu {
    fn default() -> Self {
        LinuxCpu {
            shares: None,
            quota: None,
            period: None,
            realtime_runtime: None,
            realtime_period: None,
            cpus: String::new(),
            mems: String::new(),
        }
    }
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            prestart: Vec::new(),
            create_runtime: Vec::new(),
            create_container: Vec::new(),
            start_container: Vec::new(),
            poststart: Vec::new(),
            poststop: Vec::new(),
        }
    }
}

impl Default for PodSandbox {
    fn default() -> Self {
        PodSandbox {
            id: String::new(),
            name: String::new(),
            uid: String::new(),
            namespace: String::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
            runtime_handler: String::new(),
            linux: None,
            pid: 0,
            ips: Vec::new(),
        }
    }
}

impl Default for Container {
    fn default() -> Self {
        Container {
            id: String::new(),
            pod_sandbox_id: String::new(),
            name: String::new(),
            state: ContainerState::Unknown,
            labels: Vec::new(),
            annotations: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            mounts: Vec::new(),
            hooks: None,
            linux: None,
            pid: 0,
            rlimits: Vec::new(),
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            status_reason: String::new(),
            status_message: String::new(),
            cdi_devices: Vec::new(),
            user: None,
            image: None,
        }
    }
}

impl Default for LinuxContainer {
    fn default() -> Self {
        LinuxContainer {
            namespaces: Vec::new(),
            devices: Vec::new(),
            resources: None,
            oom_score_adj: None,
            cgroups_path: String::new(),
            io_priority: None,
            seccomp_profile: None,
            seccomp_policy: None,
            sysctl: Vec::new(),
            net_devices: Vec::new(),
            scheduler: None,
            rdt: None,
        }
    }
}

impl Default for LinuxPodSandbox {
    fn default() -> Self {
        LinuxPodSandbox {
            pod_overhead: None,
            pod_resources: None,
            cgroup_parent: String::new(),
            cgroups_path: String::new(),
            namespaces: Vec::new(),
            resources: None,
        }
    }
}
