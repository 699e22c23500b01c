//! `qos-class`: online/offline co-location by pod annotation.
//!
//! The operator describes QoS classes in the settings (CPU shares, quota and
//! period, memory limit, cgroup v2 `unified` files such as `cpu.weight` or
//! `memory.high`, a cpuset and memory nodes for latency-critical work, an
//! OOM score adjustment). A pod picks its class with the annotation
//! `qos.example.com/class: <class>` (a container may pick another with the
//! container annotation `qos.example.com/container-class`), and each of its
//! containers is created with the class's settings. A pod without the
//! annotation gets the `default` class if the settings name one, else it is
//! left alone; a class the settings do not describe denies the container,
//! so that a typo does not silently run a latency-critical service as
//! best effort. See README.md.
use std::collections::BTreeMap;

use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Class {
    cpu_shares: Option<u64>,
    /// Microseconds per period; -1 for no quota.
    cpu_quota: Option<i64>,
    /// Microseconds.
    cpu_period: Option<u64>,
    /// Bytes; -1 for no limit.
    memory_limit: Option<i64>,
    /// CPUs, e.g. `2-3`.
    cpuset: Option<String>,
    /// Memory nodes, e.g. `0`.
    cpuset_mems: Option<String>,
    /// cgroup v2 files.
    #[serde(default)]
    unified: BTreeMap<String, String>,
    oom_score_adj: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Settings {
    #[serde(default = "default_annotation")]
    annotation: String,
    #[serde(default = "default_container_annotation")]
    container_annotation: String,
    /// The class of pods without the annotation.
    default: Option<String>,
    classes: BTreeMap<String, Class>,
}

fn default_annotation() -> String {
    "qos.example.com/class".into()
}

fn default_container_annotation() -> String {
    "qos.example.com/container-class".into()
}

/// A cpuset list the kernel takes, written back in its canonical form.
fn cpu_list(what: &str, text: &str) -> Result<String, String> {
    let cpus = parse_cpu_list(text).map_err(|e| format!("invalid settings: {what}: {e}"))?;
    if cpus.is_empty() || cpus.iter().any(|c| *c >= 1 << 16) {
        return Err(format!("invalid settings: {what}: {text:?} names no CPU or node below 65536"));
    }
    Ok(format_cpu_list(&cpus))
}

fn check_class(name: &str, c: &Class) -> Result<(), String> {
    let at = format!("invalid settings: classes.{name}");
    if let Some(s) = c.cpu_shares.filter(|s| !(2..=262_144).contains(s)) {
        return Err(format!("{at}.cpu-shares: {s} is outside 2..=262144"));
    }
    if let Some(q) = c.cpu_quota.filter(|q| *q != -1 && *q < 1000) {
        return Err(format!("{at}.cpu-quota: {q} is neither at least 1000 microseconds nor -1 (no quota)"));
    }
    if let Some(p) = c.cpu_period.filter(|p| !(1000..=1_000_000).contains(p)) {
        return Err(format!("{at}.cpu-period: {p} is outside 1000..=1000000 microseconds"));
    }
    if c.cpu_quota.is_some_and(|q| q > 0) && c.cpu_period.is_none() {
        return Err(format!("{at}: cpu-quota needs cpu-period (the quota is per period)"));
    }
    if let Some(m) = c.memory_limit.filter(|m| *m != -1 && *m < 4096) {
        return Err(format!("{at}.memory-limit: {m} is neither at least 4096 bytes nor -1 (no limit)"));
    }
    if let Some(adj) = c.oom_score_adj.filter(|a| !(-1000..=1000).contains(a)) {
        return Err(format!("{at}.oom-score-adj: {adj} is outside -1000..=1000"));
    }
    for (file, value) in &c.unified {
        let file_ok = !file.is_empty()
            && !file.starts_with('-')
            && !file.contains("..")
            && file.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !file_ok {
            return Err(format!("{at}.unified: {file:?} is not a cgroup file name such as cpu.weight"));
        }
        if value.is_empty() || value.contains(['\0', '\n']) {
            return Err(format!("{at}.unified.{file}: {value:?} is not a value the kernel takes"));
        }
    }
    Ok(())
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let mut s: Settings = settings::parse(text)?;
    if s.classes.is_empty() {
        return Err("invalid settings: classes describes no class".into());
    }
    for (name, class) in &mut s.classes {
        check_class(name, class)?;
        if let Some(cpus) = &class.cpuset {
            class.cpuset = Some(cpu_list(&format!("classes.{name}.cpuset"), cpus)?);
        }
        if let Some(mems) = &class.cpuset_mems {
            class.cpuset_mems = Some(cpu_list(&format!("classes.{name}.cpuset-mems"), mems)?);
        }
    }
    if let Some(d) = s.default.as_ref().filter(|d| !s.classes.contains_key(*d)) {
        return Err(format!("invalid settings: default {d:?} is not one of the classes ({})", known(&s)));
    }
    Ok(s)
}

fn known(s: &Settings) -> String {
    s.classes.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
}

/// The adjustment that puts a container in `class`.
fn adjustment(class: &Class) -> ContainerAdjustment {
    let mut a = ContainerAdjustment::new();
    if let Some(shares) = class.cpu_shares {
        a = a.set_cpu_shares(shares);
    }
    if let Some(quota) = class.cpu_quota {
        let cpu = a.resources_mut().cpu.get_or_insert_with(LinuxCpu::default);
        cpu.quota = Some(quota);
    }
    if let Some(period) = class.cpu_period {
        a.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).period = Some(period);
    }
    if let Some(limit) = class.memory_limit {
        // Memory plus swap may not be below the memory limit (the OCI
        // runtime refuses the container): no swap, as containerd sets it.
        a = a.set_memory_limit(limit);
        a.resources_mut().memory.get_or_insert_with(LinuxMemory::default).swap = Some(limit);
    }
    if let Some(cpus) = &class.cpuset {
        a = a.set_cpuset(cpus);
    }
    if let Some(mems) = &class.cpuset_mems {
        a = a.set_cpuset_mems(mems);
    }
    for (file, value) in &class.unified {
        a = a.set_unified(file, value);
    }
    if let Some(adj) = class.oom_score_adj {
        a = a.set_oom_score_adj(adj);
    }
    a
}

struct QosClass;

impl Policy for QosClass {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = parse_settings(settings())?;
        let (name, source) = match e.container_annotation(&s.container_annotation) {
            Some(class) => (Some(class), format!("container annotation {}", s.container_annotation)),
            None => (e.pod_annotation(&s.annotation), format!("pod annotation {}", s.annotation)),
        };
        let Some(name) = name.or_else(|| s.default.clone()) else {
            return Ok(Reply::none());
        };
        let Some(class) = s.classes.get(&name) else {
            return Err(format!("{source}: unknown QoS class {name:?} (known: {})", known(&s)));
        };
        log(LogLevel::Info, &format!("{}: QoS class {name}", e.container_meta().name));
        Ok(Reply::adjust(adjustment(class)))
    }
}

// What it may change and read (docs/wit.md); nothing dangerous.
nri_wasm_sdk::capabilities!("cpu", "cpuset-any", "memory", "unified", "oom-score-adj", "oom-protect", "deny");

export_policy!(QosClass);
