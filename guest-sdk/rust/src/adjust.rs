//! Building a reply: [`Reply`] and the builders of the adjustment of the
//! container being created ([`ContainerAdjustment`] and the records it
//! holds: hooks, mounts, devices).
//!
//! The generated records follow NRI's wire conventions, which are easy to get
//! wrong by hand: a key prefixed with `-` removes, replacing the arguments
//! takes an empty first element, resources sit three options deep. The
//! builders write those conventions once, so a policy says what it means
//! (`remove_env("DEBUG")`, `set_cpu_shares(512)`).

use crate::{
    ContainerAdjustment, ContainerEviction, ContainerUpdate, Hook, Hooks, KeyValue, LinuxContainerAdjustment, LinuxCpu,
    LinuxDevice, LinuxDeviceCgroup, LinuxMemory, LinuxResources, Mount, NetDeviceEntry, PosixRlimit, Reply,
};

pub(crate) fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue { key: key.to_string(), value: value.to_string() }
}

impl Reply {
    /// A reply that changes nothing.
    pub fn none() -> Self {
        Reply { adjust: None, update: Vec::new(), evict: Vec::new() }
    }

    /// A reply that adjusts the container being created.
    pub fn adjust(adjust: ContainerAdjustment) -> Self {
        Reply { adjust: Some(adjust), ..Self::none() }
    }

    /// Adds an update of another container.
    pub fn with_update(mut self, update: ContainerUpdate) -> Self {
        self.update.push(update);
        self
    }

    /// Adds an eviction.
    pub fn with_eviction(mut self, container_id: &str, reason: &str) -> Self {
        self.evict.push(ContainerEviction { container_id: container_id.into(), reason: reason.into() });
        self
    }
}

impl ContainerAdjustment {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set_annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.push(kv(key, value));
        self
    }

    pub fn remove_annotation(mut self, key: &str) -> Self {
        self.annotations.push(kv(&format!("-{key}"), ""));
        self
    }

    pub fn set_env(mut self, name: &str, value: &str) -> Self {
        self.env.push(kv(name, value));
        self
    }

    pub fn remove_env(mut self, name: &str) -> Self {
        self.env.push(kv(&format!("-{name}"), ""));
        self
    }

    pub fn add_mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }

    pub fn remove_mount(mut self, destination: &str) -> Self {
        self.mounts.push(Mount {
            destination: format!("-{destination}"),
            type_: String::new(),
            source: String::new(),
            options: Vec::new(),
        });
        self
    }

    pub fn set_rlimit(mut self, kind: &str, soft: u64, hard: u64) -> Self {
        self.rlimits.push(PosixRlimit { type_: kind.into(), soft, hard });
        self
    }

    /// Replaces the container's arguments.
    pub fn replace_args(mut self, args: &[&str]) -> Self {
        self.args = std::iter::once(String::new()).chain(args.iter().map(|a| a.to_string())).collect();
        self
    }

    /// The Linux part, created on first use.
    pub fn linux_mut(&mut self) -> &mut LinuxContainerAdjustment {
        self.linux.get_or_insert_with(LinuxContainerAdjustment::default)
    }

    /// The resources, created on first use.
    pub fn resources_mut(&mut self) -> &mut LinuxResources {
        self.linux_mut().resources.get_or_insert_with(LinuxResources::default)
    }

    /// Sets the memory limit. The container keeps its memory-and-swap
    /// total unless the reply sets it too, so a lower limit alone turns the
    /// difference into swap, which the default grant refuses
    /// (`swap-raise`): to keep the container without swap, set the swap
    /// total of `resources_mut().memory` to the same value.
    pub fn set_memory_limit(mut self, bytes: i64) -> Self {
        self.resources_mut().memory.get_or_insert_with(LinuxMemory::default).limit = Some(bytes);
        self
    }

    pub fn set_cpu_shares(mut self, shares: u64) -> Self {
        self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).shares = Some(shares);
        self
    }

    pub fn set_cpuset(mut self, cpus: &str) -> Self {
        self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).cpus = cpus.into();
        self
    }

    pub fn set_oom_score_adj(mut self, value: i64) -> Self {
        self.linux_mut().oom_score_adj = Some(value);
        self
    }
}

/// The points in a container's life where an OCI hook runs, for
/// [`ContainerAdjustment::add_hook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStage {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl HookStage {
    /// Every stage, in the order the runtime runs them.
    pub const ALL: [HookStage; 6] = [
        HookStage::Prestart,
        HookStage::CreateRuntime,
        HookStage::CreateContainer,
        HookStage::StartContainer,
        HookStage::Poststart,
        HookStage::Poststop,
    ];

    /// The stage's name as the OCI runtime specification writes it
    /// (`prestart`, `createRuntime`, `createContainer`, `startContainer`,
    /// `poststart`, `poststop`).
    pub fn name(self) -> &'static str {
        match self {
            HookStage::Prestart => "prestart",
            HookStage::CreateRuntime => "createRuntime",
            HookStage::CreateContainer => "createContainer",
            HookStage::StartContainer => "startContainer",
            HookStage::Poststart => "poststart",
            HookStage::Poststop => "poststop",
        }
    }

    /// The stage named `name` (the OCI name, or the same in kebab or snake
    /// case: `create-runtime`, `create_runtime`).
    pub fn parse(name: &str) -> Option<HookStage> {
        let plain: String = name.chars().filter(|c| *c != '-' && *c != '_').collect::<String>().to_ascii_lowercase();
        HookStage::ALL.into_iter().find(|s| s.name().to_ascii_lowercase() == plain)
    }

    /// The hooks of this stage in `hooks`.
    pub fn of(self, hooks: &Hooks) -> &Vec<Hook> {
        match self {
            HookStage::Prestart => &hooks.prestart,
            HookStage::CreateRuntime => &hooks.create_runtime,
            HookStage::CreateContainer => &hooks.create_container,
            HookStage::StartContainer => &hooks.start_container,
            HookStage::Poststart => &hooks.poststart,
            HookStage::Poststop => &hooks.poststop,
        }
    }

    /// The hooks of this stage in `hooks`, to change.
    pub fn of_mut(self, hooks: &mut Hooks) -> &mut Vec<Hook> {
        match self {
            HookStage::Prestart => &mut hooks.prestart,
            HookStage::CreateRuntime => &mut hooks.create_runtime,
            HookStage::CreateContainer => &mut hooks.create_container,
            HookStage::StartContainer => &mut hooks.start_container,
            HookStage::Poststart => &mut hooks.poststart,
            HookStage::Poststop => &mut hooks.poststop,
        }
    }
}

impl Hooks {
    /// Whether no stage has a hook.
    pub fn is_empty(&self) -> bool {
        HookStage::ALL.iter().all(|s| s.of(self).is_empty())
    }

    /// Every hook with its stage, stage by stage.
    pub fn iter(&self) -> impl Iterator<Item = (HookStage, &Hook)> {
        HookStage::ALL.into_iter().flat_map(move |s| s.of(self).iter().map(move |h| (s, h)))
    }
}

impl Hook {
    /// A hook running the program at `path` (absolute) without arguments.
    pub fn new(path: &str) -> Self {
        Hook { path: path.into(), args: Vec::new(), env: Vec::new(), timeout: None }
    }

    /// Its command line, `args[0]` included (as in the OCI specification).
    pub fn with_args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.args = args.iter().map(|a| a.as_ref().to_string()).collect();
        self
    }

    /// Adds `NAME=value` to its environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push(format!("{name}={value}"));
        self
    }

    /// Seconds the runtime waits for it (positive).
    pub fn with_timeout(mut self, seconds: i64) -> Self {
        self.timeout = Some(seconds);
        self
    }
}

impl Mount {
    /// A bind mount of host path `source` at `destination` in the container.
    pub fn bind(source: &str, destination: &str, options: &[&str]) -> Self {
        Mount {
            destination: destination.into(),
            type_: "bind".into(),
            source: source.into(),
            options: options.iter().map(|o| o.to_string()).collect(),
        }
    }
}

impl LinuxDevice {
    /// A device node: `kind` is `c` (character), `b` (block), `u` or `p`.
    pub fn new(path: &str, kind: &str, major: i64, minor: i64) -> Self {
        LinuxDevice { path: path.into(), type_: kind.into(), major, minor, file_mode: None, uid: None, gid: None }
    }

    /// Its permission bits (`0o666`).
    pub fn with_file_mode(mut self, mode: u32) -> Self {
        self.file_mode = Some(mode);
        self
    }

    /// Its owner.
    pub fn with_owner(mut self, uid: u32, gid: u32) -> Self {
        self.uid = Some(uid);
        self.gid = Some(gid);
        self
    }
}

impl LinuxDeviceCgroup {
    /// A rule allowing `access` (some of `r`, `w`, `m`) to the device
    /// `kind` (`c` or `b`) `major:minor`.
    pub fn allow(kind: &str, major: i64, minor: i64, access: &str) -> Self {
        LinuxDeviceCgroup {
            allow: true,
            type_: kind.into(),
            major: Some(major),
            minor: Some(minor),
            access: access.into(),
        }
    }
}

impl ContainerAdjustment {
    /// Adds (or replaces, by path) a device node.
    pub fn add_device(mut self, device: LinuxDevice) -> Self {
        self.linux_mut().devices.push(device);
        self
    }

    /// Adds a rule to the container's device cgroup.
    pub fn allow_device(mut self, rule: LinuxDeviceCgroup) -> Self {
        self.resources_mut().devices.push(rule);
        self
    }

    /// Injects a CDI device by its fully qualified name (`vendor/class=name`).
    pub fn add_cdi_device(mut self, name: &str) -> Self {
        self.cdi_devices.push(name.into());
        self
    }

    /// Adds an OCI hook at `stage` (hooks accumulate across policies).
    pub fn add_hook(mut self, stage: HookStage, hook: Hook) -> Self {
        stage.of_mut(self.hooks.get_or_insert_with(Hooks::default)).push(hook);
        self
    }

    /// Sets the CPU quota and its period, in microseconds.
    pub fn set_cpu_quota(mut self, quota: i64, period: u64) -> Self {
        let cpu = self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default);
        cpu.quota = Some(quota);
        cpu.period = Some(period);
        self
    }

    /// Sets the memory nodes the container may allocate from (`0-1`).
    pub fn set_cpuset_mems(mut self, mems: &str) -> Self {
        self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).mems = mems.into();
        self
    }

    /// Sets a kernel parameter of the container (`net.core.somaxconn`).
    /// sysctl is a map: a key given twice in one adjustment is refused.
    pub fn set_sysctl(mut self, key: &str, value: &str) -> Self {
        self.linux_mut().sysctl.push(kv(key, value));
        self
    }

    /// Removes a kernel parameter an earlier policy set.
    pub fn remove_sysctl(mut self, key: &str) -> Self {
        self.linux_mut().sysctl.push(kv(&format!("-{key}"), ""));
        self
    }

    /// Moves host network device `host_name` into the container as `name`.
    pub fn add_net_device(mut self, host_name: &str, name: &str) -> Self {
        self.linux_mut().net_devices.push(NetDeviceEntry { host_name: host_name.into(), name: name.into() });
        self
    }

    /// Removes a network device an earlier policy added.
    pub fn remove_net_device(mut self, host_name: &str) -> Self {
        let host_name = format!("-{host_name}");
        self.linux_mut().net_devices.push(NetDeviceEntry { host_name, name: String::new() });
        self
    }

    /// Sets a cgroup v2 file (`cpu.weight`, `memory.high`, ...).
    pub fn set_unified(mut self, file: &str, value: &str) -> Self {
        self.resources_mut().unified.push(kv(file, value));
        self
    }
}
