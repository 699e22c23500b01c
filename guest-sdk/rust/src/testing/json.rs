//! NRI's protobuf JSON (proto field names, as the captured fixtures are
//! written) mapped to the SDK's WIT records, the way the host maps the
//! protobuf messages themselves (`host/src/convert/`).
//!
//! The JSON mapping of protobuf: 64-bit integers are strings (numbers are
//! accepted too), zero values may be left out, an optional wrapper
//! (`OptionalInt64`, ...) is an object `{"value": ...}` whose `{}` means
//! "present, zero", enums are names (or numbers), maps are objects. The
//! lowerCamelCase JSON names are accepted beside the proto names; any
//! other field is an error naming the message, so a typo in a
//! hand-written event does not pass unnoticed.

use serde_json::{Map, Value};

use crate::view::{ContainerInfo, PodInfo};
use crate::*;

type R<T> = Result<T, String>;

/// A JSON object read as the protobuf message `name`.
struct Obj<'a> {
    name: &'static str,
    map: Option<&'a Map<String, Value>>,
}

/// protobuf's JSON name of a proto field name: `pod_sandbox_id` →
/// `podSandboxId`, `CDI_devices` → `CDIDevices`.
fn camel(field: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in field.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn obj<'a>(v: &'a Value, name: &'static str, fields: &[&str]) -> R<Obj<'a>> {
    let map = match v {
        Value::Null => None,
        Value::Object(m) => Some(m),
        other => return Err(format!("{name}: expected an object, got {other}")),
    };
    if let Some(m) = map {
        for key in m.keys() {
            if !fields.iter().any(|f| f == key || camel(f) == *key) {
                return Err(format!("{name}: unknown field {key:?} (known: {})", fields.join(", ")));
            }
        }
    }
    Ok(Obj { name, map })
}

impl<'a> Obj<'a> {
    fn get(&self, field: &str) -> Option<&'a Value> {
        let m = self.map?;
        m.get(field).or_else(|| m.get(&camel(field))).filter(|v| !v.is_null())
    }

    fn err(&self, field: &str, what: &str, v: &Value) -> String {
        format!("{}.{field}: expected {what}, got {v}", self.name)
    }

    fn string(&self, field: &str) -> R<String> {
        match self.get(field) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(self.err(field, "a string", v)),
        }
    }

    fn boolean(&self, field: &str) -> R<bool> {
        match self.get(field) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(field, "true or false", v)),
        }
    }

    fn int<T: TryFrom<i128> + Default>(&self, field: &str) -> R<T> {
        match self.get(field) {
            None => Ok(T::default()),
            Some(v) => {
                int(v).and_then(|n| T::try_from(n).ok()).ok_or_else(|| self.err(field, "an integer in range", v))
            }
        }
    }

    fn strings(&self, field: &str) -> R<Vec<String>> {
        self.list(field, |v| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!("expected a string, got {other}")),
        })
    }

    fn list<T>(&self, field: &str, item: impl Fn(&Value) -> R<T>) -> R<Vec<T>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| item(v).map_err(|e| format!("{}.{field}[{i}]: {e}", self.name)))
                .collect(),
            Some(v) => Err(self.err(field, "a list", v)),
        }
    }

    /// A `map<string, string>`, as key-values sorted by key.
    fn map(&self, field: &str) -> R<Vec<KeyValue>> {
        self.entries(field, |k, v| match v {
            Value::String(s) => Ok(KeyValue { key: k.to_string(), value: s.clone() }),
            other => Err(format!("expected a string, got {other}")),
        })
    }

    fn entries<T>(&self, field: &str, entry: impl Fn(&str, &Value) -> R<T>) -> R<Vec<T>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Object(m)) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                keys.into_iter()
                    .map(|k| entry(k, &m[k]).map_err(|e| format!("{}.{field}[{k:?}]: {e}", self.name)))
                    .collect()
            }
            Some(v) => Err(self.err(field, "an object (a map)", v)),
        }
    }

    /// An optional sub-message: present (even `{}`) is `Some`.
    fn msg<T>(&self, field: &str, parse: impl Fn(&Value) -> R<T>) -> R<Option<T>> {
        self.get(field).map(parse).transpose()
    }

    /// An optional wrapper `{"value": ...}` of an integer.
    fn opt_int<T: TryFrom<i128> + Default>(&self, field: &str) -> R<Option<T>> {
        self.msg(field, |v| obj(v, "Optional", &["value"])?.int::<T>("value"))
    }

    fn opt_bool(&self, field: &str) -> R<Option<bool>> {
        self.msg(field, |v| obj(v, "OptionalBool", &["value"])?.boolean("value"))
    }

    fn opt_string(&self, field: &str) -> R<Option<String>> {
        self.msg(field, |v| obj(v, "OptionalString", &["value"])?.string("value"))
    }

    /// An enum: its name in `names` (by number) or its number.
    fn enumeration(&self, field: &str, names: &[&str]) -> R<usize> {
        match self.get(field) {
            None => Ok(0),
            Some(v) => enum_index(v, names).map_err(|e| format!("{}.{field}: {e}", self.name)),
        }
    }

    fn enums(&self, field: &str, names: &[&str]) -> R<Vec<usize>> {
        self.list(field, |v| enum_index(v, names))
    }
}

fn int(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn enum_index(v: &Value, names: &[&str]) -> R<usize> {
    let found = match v {
        Value::String(s) => names.iter().position(|n| n == s),
        v => int(v).and_then(|n| usize::try_from(n).ok()).filter(|n| *n < names.len()),
    };
    found.ok_or_else(|| format!("{v} is not one of {}", names.join(", ")))
}

const CONTAINER_STATES: [&str; 5] =
    ["CONTAINER_UNKNOWN", "CONTAINER_CREATED", "CONTAINER_PAUSED", "CONTAINER_RUNNING", "CONTAINER_STOPPED"];

fn container_state(i: usize) -> ContainerState {
    [
        ContainerState::Unknown,
        ContainerState::Created,
        ContainerState::Paused,
        ContainerState::Running,
        ContainerState::Stopped,
    ][i]
}

fn pod(v: &Value) -> R<PodSandbox> {
    let o = obj(
        v,
        "PodSandbox",
        &["id", "name", "uid", "namespace", "labels", "annotations", "runtime_handler", "linux", "pid", "ips"],
    )?;
    Ok(PodSandbox {
        id: o.string("id")?,
        name: o.string("name")?,
        uid: o.string("uid")?,
        namespace: o.string("namespace")?,
        labels: o.map("labels")?,
        annotations: o.map("annotations")?,
        runtime_handler: o.string("runtime_handler")?,
        linux: o.msg("linux", linux_pod)?,
        pid: o.int("pid")?,
        ips: o.strings("ips")?,
    })
}

fn linux_pod(v: &Value) -> R<LinuxPodSandbox> {
    let o = obj(
        v,
        "LinuxPodSandbox",
        &["pod_overhead", "pod_resources", "cgroup_parent", "cgroups_path", "namespaces", "resources"],
    )?;
    Ok(LinuxPodSandbox {
        pod_overhead: o.msg("pod_overhead", resources)?,
        pod_resources: o.msg("pod_resources", resources)?,
        cgroup_parent: o.string("cgroup_parent")?,
        cgroups_path: o.string("cgroups_path")?,
        namespaces: o.list("namespaces", namespace)?,
        resources: o.msg("resources", resources)?,
    })
}

fn namespace(v: &Value) -> R<LinuxNamespace> {
    let o = obj(v, "LinuxNamespace", &["type", "path"])?;
    Ok(LinuxNamespace { type_: o.string("type")?, path: o.string("path")? })
}

fn container(v: &Value) -> R<Container> {
    let o = obj(
        v,
        "Container",
        &[
            "id",
            "pod_sandbox_id",
            "name",
            "state",
            "labels",
            "annotations",
            "args",
            "env",
            "mounts",
            "hooks",
            "linux",
            "pid",
            "rlimits",
            "created_at",
            "started_at",
            "finished_at",
            "exit_code",
            "status_reason",
            "status_message",
            "CDI_devices",
            "user",
            "image",
        ],
    )?;
    Ok(Container {
        id: o.string("id")?,
        pod_sandbox_id: o.string("pod_sandbox_id")?,
        name: o.string("name")?,
        state: container_state(o.enumeration("state", &CONTAINER_STATES)?),
        labels: o.map("labels")?,
        annotations: o.map("annotations")?,
        args: o.strings("args")?,
        env: o.strings("env")?,
        mounts: o.list("mounts", mount)?,
        hooks: o.msg("hooks", hooks)?,
        linux: o.msg("linux", linux_container)?,
        pid: o.int("pid")?,
        rlimits: o.list("rlimits", rlimit)?,
        created_at: o.int("created_at")?,
        started_at: o.int("started_at")?,
        finished_at: o.int("finished_at")?,
        exit_code: o.int("exit_code")?,
        status_reason: o.string("status_reason")?,
        status_message: o.string("status_message")?,
        cdi_devices: o.list("CDI_devices", cdi)?,
        user: o.msg("user", user)?,
        image: o.msg("image", image)?,
    })
}

fn cdi(v: &Value) -> R<String> {
    obj(v, "CDIDevice", &["name"])?.string("name")
}

fn user(v: &Value) -> R<User> {
    let o = obj(v, "User", &["uid", "gid", "additional_gids"])?;
    Ok(User {
        uid: o.int("uid")?,
        gid: o.int("gid")?,
        additional_gids: o.list("additional_gids", |v| {
            int(v).and_then(|n| u32::try_from(n).ok()).ok_or_else(|| format!("expected a gid, got {v}"))
        })?,
    })
}

fn image(v: &Value) -> R<Image> {
    let o = obj(v, "Image", &["name", "digest", "config_digest"])?;
    Ok(Image { name: o.string("name")?, digest: o.string("digest")?, config_digest: o.string("config_digest")? })
}

fn mount(v: &Value) -> R<Mount> {
    let o = obj(v, "Mount", &["destination", "type", "source", "options"])?;
    Ok(Mount {
        destination: o.string("destination")?,
        type_: o.string("type")?,
        source: o.string("source")?,
        options: o.strings("options")?,
    })
}

fn hooks(v: &Value) -> R<Hooks> {
    let o = obj(
        v,
        "Hooks",
        &["prestart", "create_runtime", "create_container", "start_container", "poststart", "poststop"],
    )?;
    Ok(Hooks {
        prestart: o.list("prestart", hook)?,
        create_runtime: o.list("create_runtime", hook)?,
        create_container: o.list("create_container", hook)?,
        start_container: o.list("start_container", hook)?,
        poststart: o.list("poststart", hook)?,
        poststop: o.list("poststop", hook)?,
    })
}

fn hook(v: &Value) -> R<Hook> {
    let o = obj(v, "Hook", &["path", "args", "env", "timeout"])?;
    Ok(Hook {
        path: o.string("path")?,
        args: o.strings("args")?,
        env: o.strings("env")?,
        timeout: o.opt_int("timeout")?,
    })
}

fn linux_container(v: &Value) -> R<LinuxContainer> {
    let o = obj(
        v,
        "LinuxContainer",
        &[
            "namespaces",
            "devices",
            "resources",
            "oom_score_adj",
            "cgroups_path",
            "io_priority",
            "seccomp_profile",
            "seccomp_policy",
            "sysctl",
            "net_devices",
            "scheduler",
            "rdt",
        ],
    )?;
    Ok(LinuxContainer {
        namespaces: o.list("namespaces", namespace)?,
        devices: o.list("devices", device)?,
        resources: o.msg("resources", resources)?,
        oom_score_adj: o.opt_int("oom_score_adj")?,
        cgroups_path: o.string("cgroups_path")?,
        io_priority: o.msg("io_priority", io_priority)?,
        seccomp_profile: o.msg("seccomp_profile", security_profile)?,
        seccomp_policy: o.msg("seccomp_policy", seccomp)?,
        sysctl: o.map("sysctl")?,
        net_devices: net_devices(&o)?,
        scheduler: o.msg("scheduler", scheduler)?,
        rdt: o.msg("rdt", rdt)?,
    })
}

fn net_devices(o: &Obj<'_>) -> R<Vec<NetDeviceEntry>> {
    o.entries("net_devices", |host, v| {
        Ok(NetDeviceEntry { host_name: host.into(), name: obj(v, "LinuxNetDevice", &["name"])?.string("name")? })
    })
}

fn device(v: &Value) -> R<LinuxDevice> {
    let o = obj(v, "LinuxDevice", &["path", "type", "major", "minor", "file_mode", "uid", "gid"])?;
    Ok(LinuxDevice {
        path: o.string("path")?,
        type_: o.string("type")?,
        major: o.int("major")?,
        minor: o.int("minor")?,
        file_mode: o.opt_int("file_mode")?,
        uid: o.opt_int("uid")?,
        gid: o.opt_int("gid")?,
    })
}

fn io_priority(v: &Value) -> R<IoPriority> {
    let o = obj(v, "LinuxIOPriority", &["class", "priority"])?;
    let classes = ["IOPRIO_CLASS_NONE", "IOPRIO_CLASS_RT", "IOPRIO_CLASS_BE", "IOPRIO_CLASS_IDLE"];
    let class = [IoPriorityClass::None, IoPriorityClass::Rt, IoPriorityClass::Be, IoPriorityClass::Idle]
        [o.enumeration("class", &classes)?];
    Ok(IoPriority { class, priority: o.int("priority")? })
}

fn security_profile(v: &Value) -> R<SecurityProfile> {
    let o = obj(v, "SecurityProfile", &["profile_type", "localhost_ref"])?;
    let types = [SeccompProfileType::RuntimeDefault, SeccompProfileType::Unconfined, SeccompProfileType::Localhost];
    let profile_type = types[o.enumeration("profile_type", &["RUNTIME_DEFAULT", "UNCONFINED", "LOCALHOST"])?];
    Ok(SecurityProfile { profile_type, localhost_ref: o.string("localhost_ref")? })
}

fn seccomp(v: &Value) -> R<LinuxSeccomp> {
    let o = obj(
        v,
        "LinuxSeccomp",
        &[
            "default_action",
            "default_errno",
            "architectures",
            "flags",
            "listener_path",
            "listener_metadata",
            "syscalls",
        ],
    )?;
    Ok(LinuxSeccomp {
        default_action: o.string("default_action")?,
        default_errno: o.opt_int("default_errno")?,
        architectures: o.strings("architectures")?,
        flags: o.strings("flags")?,
        listener_path: o.string("listener_path")?,
        listener_metadata: o.string("listener_metadata")?,
        syscalls: o.list("syscalls", syscall)?,
    })
}

fn syscall(v: &Value) -> R<LinuxSyscall> {
    let o = obj(v, "LinuxSyscall", &["names", "action", "errno_ret", "args"])?;
    Ok(LinuxSyscall {
        names: o.strings("names")?,
        action: o.string("action")?,
        errno_ret: o.opt_int("errno_ret")?,
        args: o.list("args", |v| {
            let a = obj(v, "LinuxSeccompArg", &["index", "value", "value_two", "op"])?;
            Ok(LinuxSeccompArg {
                index: a.int("index")?,
                value: a.int("value")?,
                value_two: a.int("value_two")?,
                op: a.string("op")?,
            })
        })?,
    })
}

fn scheduler(v: &Value) -> R<LinuxScheduler> {
    let o = obj(v, "LinuxScheduler", &["policy", "nice", "priority", "flags", "runtime", "deadline", "period"])?;
    let policies = [
        SchedulerPolicy::None,
        SchedulerPolicy::Other,
        SchedulerPolicy::Fifo,
        SchedulerPolicy::Rr,
        SchedulerPolicy::Batch,
        SchedulerPolicy::Iso,
        SchedulerPolicy::Idle,
        SchedulerPolicy::Deadline,
    ];
    let policy_names = [
        "SCHED_NONE",
        "SCHED_OTHER",
        "SCHED_FIFO",
        "SCHED_RR",
        "SCHED_BATCH",
        "SCHED_ISO",
        "SCHED_IDLE",
        "SCHED_DEADLINE",
    ];
    let flags = [
        SchedulerFlag::ResetOnFork,
        SchedulerFlag::Reclaim,
        SchedulerFlag::DlOverrun,
        SchedulerFlag::KeepPolicy,
        SchedulerFlag::KeepParams,
        SchedulerFlag::UtilClampMin,
        SchedulerFlag::UtilClampMax,
    ];
    let flag_names = [
        "SCHED_FLAG_RESET_ON_FORK",
        "SCHED_FLAG_RECLAIM",
        "SCHED_FLAG_DL_OVERRUN",
        "SCHED_FLAG_KEEP_POLICY",
        "SCHED_FLAG_KEEP_PARAMS",
        "SCHED_FLAG_UTIL_CLAMP_MIN",
        "SCHED_FLAG_UTIL_CLAMP_MAX",
    ];
    Ok(LinuxScheduler {
        policy: policies[o.enumeration("policy", &policy_names)?],
        nice: o.int("nice")?,
        priority: o.int("priority")?,
        flags: o.enums("flags", &flag_names)?.into_iter().map(|i| flags[i]).collect(),
        runtime: o.int("runtime")?,
        deadline: o.int("deadline")?,
        period: o.int("period")?,
    })
}

fn rdt(v: &Value) -> R<LinuxRdt> {
    let o = obj(v, "LinuxRdt", &["clos_id", "schemata", "enable_monitoring", "remove"])?;
    Ok(LinuxRdt {
        clos_id: o.opt_string("clos_id")?,
        schemata: o.msg("schemata", |v| obj(v, "OptionalRepeatedString", &["value"])?.strings("value"))?,
        enable_monitoring: o.opt_bool("enable_monitoring")?,
        remove: o.boolean("remove")?,
    })
}

fn rlimit(v: &Value) -> R<PosixRlimit> {
    let o = obj(v, "POSIXRlimit", &["type", "hard", "soft"])?;
    Ok(PosixRlimit { type_: o.string("type")?, hard: o.int("hard")?, soft: o.int("soft")? })
}

fn resources(v: &Value) -> R<LinuxResources> {
    let o = obj(
        v,
        "LinuxResources",
        &["memory", "cpu", "hugepage_limits", "blockio_class", "rdt_class", "unified", "devices", "pids"],
    )?;
    Ok(LinuxResources {
        memory: o.msg("memory", memory)?,
        cpu: o.msg("cpu", cpu)?,
        hugepage_limits: o.list("hugepage_limits", |v| {
            let h = obj(v, "HugepageLimit", &["page_size", "limit"])?;
            Ok(HugepageLimit { page_size: h.string("page_size")?, limit: h.int("limit")? })
        })?,
        blockio_class: o.opt_string("blockio_class")?,
        rdt_class: o.opt_string("rdt_class")?,
        unified: o.map("unified")?,
        devices: o.list("devices", |v| {
            let d = obj(v, "LinuxDeviceCgroup", &["allow", "type", "major", "minor", "access"])?;
            Ok(LinuxDeviceCgroup {
                allow: d.boolean("allow")?,
                type_: d.string("type")?,
                major: d.opt_int("major")?,
                minor: d.opt_int("minor")?,
                access: d.string("access")?,
            })
        })?,
        pids: o.msg("pids", |v| Ok(LinuxPids { limit: obj(v, "LinuxPids", &["limit"])?.int("limit")? }))?,
    })
}

fn memory(v: &Value) -> R<LinuxMemory> {
    let o = obj(
        v,
        "LinuxMemory",
        &["limit", "reservation", "swap", "kernel", "kernel_tcp", "swappiness", "disable_oom_killer", "use_hierarchy"],
    )?;
    Ok(LinuxMemory {
        limit: o.opt_int("limit")?,
        reservation: o.opt_int("reservation")?,
        swap: o.opt_int("swap")?,
        kernel: o.opt_int("kernel")?,
        kernel_tcp: o.opt_int("kernel_tcp")?,
        swappiness: o.opt_int("swappiness")?,
        disable_oom_killer: o.opt_bool("disable_oom_killer")?,
        use_hierarchy: o.opt_bool("use_hierarchy")?,
    })
}

fn cpu(v: &Value) -> R<LinuxCpu> {
    let o = obj(v, "LinuxCPU", &["shares", "quota", "period", "realtime_runtime", "realtime_period", "cpus", "mems"])?;
    Ok(LinuxCpu {
        shares: o.opt_int("shares")?,
        quota: o.opt_int("quota")?,
        period: o.opt_int("period")?,
        realtime_runtime: o.opt_int("realtime_runtime")?,
        realtime_period: o.opt_int("realtime_period")?,
        cpus: o.string("cpus")?,
        mems: o.string("mems")?,
    })
}

fn adjustment(v: &Value) -> R<ContainerAdjustment> {
    let o = obj(
        v,
        "ContainerAdjustment",
        &["annotations", "mounts", "env", "hooks", "linux", "rlimits", "CDI_devices", "args"],
    )?;
    Ok(ContainerAdjustment {
        annotations: o.map("annotations")?,
        mounts: o.list("mounts", mount)?,
        env: o.list("env", |v| {
            let kv = obj(v, "KeyValue", &["key", "value"])?;
            Ok(KeyValue { key: kv.string("key")?, value: kv.string("value")? })
        })?,
        hooks: o.msg("hooks", hooks)?,
        linux: o.msg("linux", linux_adjustment)?,
        rlimits: o.list("rlimits", rlimit)?,
        cdi_devices: o.list("CDI_devices", cdi)?,
        args: o.strings("args")?,
    })
}

fn linux_adjustment(v: &Value) -> R<LinuxContainerAdjustment> {
    let o = obj(
        v,
        "LinuxContainerAdjustment",
        &[
            "devices",
            "resources",
            "cgroups_path",
            "oom_score_adj",
            "io_priority",
            "seccomp_policy",
            "namespaces",
            "sysctl",
            "net_devices",
            "scheduler",
            "rdt",
            "memory_policy",
        ],
    )?;
    Ok(LinuxContainerAdjustment {
        devices: o.list("devices", device)?,
        resources: o.msg("resources", resources)?,
        cgroups_path: o.string("cgroups_path")?,
        oom_score_adj: o.opt_int("oom_score_adj")?,
        io_priority: o.msg("io_priority", io_priority)?,
        seccomp_policy: o.msg("seccomp_policy", seccomp)?,
        namespaces: o.list("namespaces", namespace)?,
        sysctl: o.map("sysctl")?,
        net_devices: net_devices(&o)?,
        scheduler: o.msg("scheduler", scheduler)?,
        rdt: o.msg("rdt", rdt)?,
        memory_policy: o.msg("memory_policy", memory_policy)?,
    })
}

fn memory_policy(v: &Value) -> R<LinuxMemoryPolicy> {
    let o = obj(v, "LinuxMemoryPolicy", &["mode", "nodes", "flags"])?;
    let modes = [
        MemoryPolicyMode::Default,
        MemoryPolicyMode::Preferred,
        MemoryPolicyMode::Bind,
        MemoryPolicyMode::Interleave,
        MemoryPolicyMode::Local,
        MemoryPolicyMode::PreferredMany,
        MemoryPolicyMode::WeightedInterleave,
    ];
    let mode_names = [
        "MPOL_DEFAULT",
        "MPOL_PREFERRED",
        "MPOL_BIND",
        "MPOL_INTERLEAVE",
        "MPOL_LOCAL",
        "MPOL_PREFERRED_MANY",
        "MPOL_WEIGHTED_INTERLEAVE",
    ];
    let flags = [MemoryPolicyFlag::StaticNodes, MemoryPolicyFlag::RelativeNodes, MemoryPolicyFlag::NumaBalancing];
    let flag_names = ["MPOL_F_STATIC_NODES", "MPOL_F_RELATIVE_NODES", "MPOL_F_NUMA_BALANCING"];
    Ok(LinuxMemoryPolicy {
        mode: modes[o.enumeration("mode", &mode_names)?],
        nodes: o.string("nodes")?,
        flags: o.enums("flags", &flag_names)?.into_iter().map(|i| flags[i]).collect(),
    })
}

fn update(v: &Value) -> R<ContainerUpdate> {
    let o = obj(v, "ContainerUpdate", &["container_id", "linux", "ignore_failure"])?;
    let linux = o.msg("linux", |v| obj(v, "LinuxContainerUpdate", &["resources"])?.msg("resources", resources))?;
    Ok(ContainerUpdate {
        container_id: o.string("container_id")?,
        resources: linux.flatten(),
        ignore_failure: o.boolean("ignore_failure")?,
    })
}

/// Field owners as the host flattens them: by container id, simple fields
/// before compound ones, by field number, then key.
fn owners(v: &Value) -> R<Vec<FieldOwner>> {
    let o = obj(v, "OwningPlugins", &["owners"])?;
    let per_container = o.entries("owners", |id, v| {
        let f = obj(v, "FieldOwners", &["simple", "compound"])?;
        let number = |k: &str| k.parse::<i32>().map_err(|_| format!("field number {k:?} is not a number"));
        let mut simple = f.entries("simple", |k, v| match v {
            Value::String(p) => Ok((number(k)?, p.clone())),
            other => Err(format!("expected a plugin name, got {other}")),
        })?;
        simple.sort();
        let mut compound = f.entries("compound", |k, v| {
            let keys = obj(v, "CompoundFieldOwners", &["owners"])?.map("owners")?;
            Ok((number(k)?, keys))
        })?;
        compound.sort_by_key(|(n, _)| *n);
        let entry = |field: i32, compound: bool, key: String, plugin: String| FieldOwner {
            container_id: id.to_string(),
            field,
            compound,
            key,
            plugin,
        };
        let mut out: Vec<FieldOwner> = simple.into_iter().map(|(n, p)| entry(n, false, String::new(), p)).collect();
        for (n, keys) in compound {
            out.extend(keys.into_iter().map(|kv| entry(n, true, kv.key, kv.value)));
        }
        Ok(out)
    })?;
    Ok(per_container.into_iter().flatten().collect())
}

fn parse_doc(text: &str) -> R<(String, Value)> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let o = obj(&doc, "event file", &["event", "request"])?;
    let event = o.string("event")?;
    let request = o.get("request").cloned().ok_or("no \"request\"")?;
    Ok((event, request))
}

/// The event of `{"event": "<RPC name>", "request": {...}}`: a request of
/// any of NRI's events (the RPC names: `RunPodSandbox`, `CreateContainer`,
/// `ValidateContainerAdjustment`, ..., and `Synchronize`, whose pods and
/// containers make a view, see [`view_from_json`]), as the host shows it to
/// a policy. A missing pod or container is the empty record, as in the
/// host.
pub fn event_from_json(text: &str) -> R<WholeEvent> {
    let (event, request) = parse_doc(text)?;
    let name: &'static str = match event.as_str() {
        "UpdatePodSandbox" => "UpdatePodSandboxRequest",
        "UpdateContainer" => "UpdateContainerRequest",
        "ValidateContainerAdjustment" => "ValidateContainerAdjustmentRequest",
        "Synchronize" => "SynchronizeRequest",
        _ => "Request",
    };
    let fields: &[&str] = match event.as_str() {
        "RunPodSandbox" | "StopPodSandbox" | "RemovePodSandbox" | "PostUpdatePodSandbox" => &["pod"],
        "UpdatePodSandbox" => &["pod", "overhead_linux_resources", "linux_resources"],
        "UpdateContainer" => &["pod", "container", "linux_resources"],
        "ValidateContainerAdjustment" => &["pod", "container", "adjust", "update", "owners", "plugins"],
        "Synchronize" => &["pods", "containers", "more"],
        _ => &["pod", "container"],
    };
    let o = obj(&request, name, fields)?;
    let the_pod = || -> R<PodSandbox> { Ok(o.msg("pod", pod)?.unwrap_or_default()) };
    let the_container = || -> R<Container> { Ok(o.msg("container", container)?.unwrap_or_default()) };
    let pod_event = || -> R<PodEvent> { Ok(PodEvent { pod: the_pod()? }) };
    let container_event =
        || -> R<ContainerEvent> { Ok(ContainerEvent { pod: the_pod()?, container: the_container()? }) };
    Ok(match event.as_str() {
        "RunPodSandbox" => WholeEvent::RunPodSandbox(pod_event()?),
        "StopPodSandbox" => WholeEvent::StopPodSandbox(pod_event()?),
        "RemovePodSandbox" => WholeEvent::RemovePodSandbox(pod_event()?),
        "PostUpdatePodSandbox" => WholeEvent::PostUpdatePodSandbox(pod_event()?),
        "UpdatePodSandbox" => WholeEvent::UpdatePodSandbox(UpdatePodSandboxEvent {
            pod: the_pod()?,
            overhead_linux_resources: o.msg("overhead_linux_resources", resources)?,
            linux_resources: o.msg("linux_resources", resources)?,
        }),
        "CreateContainer" => WholeEvent::CreateContainer(container_event()?),
        "PostCreateContainer" => WholeEvent::PostCreateContainer(container_event()?),
        "StartContainer" => WholeEvent::StartContainer(container_event()?),
        "PostStartContainer" => WholeEvent::PostStartContainer(container_event()?),
        "PostUpdateContainer" => WholeEvent::PostUpdateContainer(container_event()?),
        "StopContainer" => WholeEvent::StopContainer(container_event()?),
        "RemoveContainer" => WholeEvent::RemoveContainer(container_event()?),
        "UpdateContainer" => WholeEvent::UpdateContainer(UpdateContainerEvent {
            pod: the_pod()?,
            container: the_container()?,
            linux_resources: o.msg("linux_resources", resources)?,
        }),
        "ValidateContainerAdjustment" => WholeEvent::ValidateContainerAdjustment(ValidationEvent {
            pod: the_pod()?,
            container: the_container()?,
            adjust: o.msg("adjust", adjustment)?,
            update: o.list("update", update)?,
            owners: o.msg("owners", owners)?.unwrap_or_default(),
            plugins: o.list("plugins", |v| {
                let p = obj(v, "PluginInstance", &["name", "index"])?;
                Ok(PluginInstance { name: p.string("name")?, index: p.string("index")? })
            })?,
        }),
        "Synchronize" => WholeEvent::Synchronize,
        other => return Err(format!("{other:?} is not an NRI event a policy sees")),
    })
}

/// The pods and containers of a Synchronize request in NRI's JSON (such as
/// the captured `Synchronize.json`), as the node view keeps them.
pub fn view_from_json(text: &str) -> R<(Vec<PodInfo>, Vec<ContainerInfo>)> {
    let (event, request) = parse_doc(text)?;
    if event != "Synchronize" {
        return Err(format!("a view is made of a Synchronize request, not {event}"));
    }
    let o = obj(&request, "SynchronizeRequest", &["pods", "containers", "more"])?;
    let pods = o.list("pods", pod)?;
    let containers = o.list("containers", container)?;
    Ok((pods.iter().map(PodInfo::of).collect(), containers.iter().map(ContainerInfo::of).collect()))
}

/// A `ContainerAdjustment` in NRI's JSON (what an NRI plugin returns).
pub fn adjustment_from_json(text: &str) -> R<ContainerAdjustment> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    adjustment(&v)
}
