//! `colocation-qos`: offline work yields while latency-critical work runs.
//!
//! Pods are classed by the pod label `qos.nri-wasm.io/class`:
//! `latency-critical` (online) or `offline`. While at least one
//! latency-critical container runs on the node, every offline container is
//! throttled: its CPU quota is cut to a share of its period and, when
//! `memory-high` is set, its cgroup v2 `memory.high` too, so it is reclaimed
//! first. When the last
//! latency-critical container stops, the offline containers get their
//! original settings back.
//!
//! - a latency-critical container starting (StartContainer) throttles the
//!   offline containers: StartContainer has no reply, so the host sends the
//!   updates with UpdateContainers;
//! - its stop (StopContainer) or removal restores them when it was the last:
//!   in the StopContainer reply, or with UpdateContainers on removal;
//! - an offline container created while throttling is on is created
//!   throttled (its adjustment), and forgotten when it is removed.
//!
//! Settings, words separated by spaces or a `[settings]` table with the
//! same keys (all optional):
//! `cpu-percent=20` (quota as a share of the period, 1 to 100; never below
//! the kernel's 1 ms), `period=100000` (microseconds, 1000 to 1000000, used
//! when a container has none), `memory-high=256M` (a `memory.high` value:
//! `max` or bytes with an optional K, M, G, T suffix; not set by default:
//! `memory.high` is a cgroup v2 file, and on a cgroup v1 node runc refuses
//! an update that carries one, CPU quota and all),
//! `label=qos.nri-wasm.io/class`. See README.md.
//!
//! State: `online/<id>` for every running latency-critical container, and
//! `saved/<id>` = `quota,period` for every throttled offline container (its
//! original CPU quota and period, `-` for none), so a restore needs nothing
//! but the state.
use nri_wasm_sdk::view::{self, ContainerFilter, ContainerInfo};
use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

const ONLINE: &str = "online/";
const SAVED: &str = "saved/";
const DEFAULT_PERIOD: u64 = 100_000;
/// The CPU controller's bounds of a period, and its smallest quota, in
/// microseconds.
const MIN_PERIOD: u64 = 1_000;
const MAX_PERIOD: u64 = 1_000_000;
const MIN_QUOTA: u64 = 1_000;

struct ColocationQos;

/// The settings: words (`cpu-percent=20 label=tier`) or a `[settings]`
/// table, every key optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Settings {
    #[serde(default = "default_cpu_percent")]
    cpu_percent: u64,
    #[serde(default = "default_period")]
    period: u64,
    /// `memory.high` while throttled; `None` leaves memory alone (cgroup v1).
    memory_high: Option<String>,
    #[serde(default = "default_label")]
    label: String,
}

fn default_cpu_percent() -> u64 {
    20
}

fn default_period() -> u64 {
    DEFAULT_PERIOD
}

fn default_label() -> String {
    "qos.nri-wasm.io/class".into()
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let s: Settings = settings::parse(text)?;
    if !(1..=100).contains(&s.cpu_percent) {
        return Err(format!("invalid settings: cpu-percent {} is outside 1..=100", s.cpu_percent));
    }
    if !(MIN_PERIOD..=MAX_PERIOD).contains(&s.period) {
        return Err(format!(
            "invalid settings: period {} is outside {MIN_PERIOD}..={MAX_PERIOD} microseconds",
            s.period
        ));
    }
    if let Some(high) = s.memory_high.as_deref().filter(|h| !memory_high_ok(h)) {
        return Err(format!(
            "invalid settings: memory-high {high:?} is neither max nor a size such as 256M (bytes, or K, M, G, T)"
        ));
    }
    if s.label.is_empty() {
        return Err("invalid settings: label needs a pod label key".into());
    }
    Ok(s)
}

/// What the kernel takes in `memory.high`: `max`, or bytes with an
/// optional K, M, G or T suffix.
fn memory_high_ok(value: &str) -> bool {
    let digits = value.strip_suffix(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']).unwrap_or(value);
    value == "max" || (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

fn settings_now() -> Settings {
    parse_settings(settings()).expect("settings were checked at load")
}

fn class(e: &Event, s: &Settings) -> Option<String> {
    e.pod_label(&s.label)
}

fn throttled_cpu(period: Option<u64>, s: &Settings) -> LinuxCpu {
    // A container's own period, if it has one the kernel takes.
    let period = period.filter(|p| (MIN_PERIOD..=MAX_PERIOD).contains(p)).unwrap_or(s.period);
    // The kernel refuses a quota below 1 ms: a container would not be
    // created, an update would fail.
    let quota = (period * s.cpu_percent / 100).max(MIN_QUOTA);
    LinuxCpu { quota: Some(quota as i64), period: Some(period), ..LinuxCpu::default() }
}

fn throttled(period: Option<u64>, s: &Settings) -> LinuxResources {
    LinuxResources { cpu: Some(throttled_cpu(period, s)), unified: memory_high(s, false), ..LinuxResources::default() }
}

/// `quota,period` of a container's current CPU settings.
fn saved_cpu(c: &ContainerInfo) -> String {
    let cpu = c.resources.as_ref().and_then(|r| r.cpu.as_ref());
    let q = cpu.and_then(|c| c.quota).map_or("-".to_string(), |q| q.to_string());
    let p = cpu.and_then(|c| c.period).map_or("-".to_string(), |p| p.to_string());
    format!("{q},{p}")
}

/// The `memory.high` entry, only where the operator configured one: runc
/// refuses any cgroup v2 file on a cgroup v1 node, and with it the whole
/// update.
/// `max` when restoring.
fn memory_high(s: &Settings, restore: bool) -> Vec<KeyValue> {
    let Some(high) = s.memory_high.as_deref() else { return Vec::new() };
    vec![KeyValue { key: "memory.high".into(), value: if restore { "max" } else { high }.into() }]
}

fn restored(saved: &str, s: &Settings) -> LinuxResources {
    let (q, p) = saved.split_once(',').unwrap_or(("-", "-"));
    // No quota before: -1 is "unlimited" for the CPU controller.
    let quota = q.parse::<i64>().unwrap_or(-1);
    let period = p.parse::<u64>().unwrap_or(DEFAULT_PERIOD);
    LinuxResources {
        cpu: Some(LinuxCpu { quota: Some(quota), period: Some(period), ..LinuxCpu::default() }),
        unified: memory_high(s, true),
        ..LinuxResources::default()
    }
}

fn offline_containers(s: &Settings) -> Vec<ContainerInfo> {
    let filter = ContainerFilter::all()
        .with_pod_label(&s.label, "offline")
        .in_states(&[ContainerState::Created, ContainerState::Running]);
    view::containers(&filter)
}

fn save(key: &str, value: &str) -> Result<(), String> {
    state::set(key, value).map_err(|e| format!("cannot record {key}: {e:?}"))
}

/// Throttles every offline container not throttled yet.
fn throttle_all(s: &Settings) -> Result<Vec<ContainerUpdate>, String> {
    let mut updates = Vec::new();
    for c in offline_containers(s) {
        let key = format!("{SAVED}{}", c.id);
        if state::get(&key).is_some() {
            continue;
        }
        save(&key, &saved_cpu(&c))?;
        let period = c.resources.as_ref().and_then(|r| r.cpu.as_ref()).and_then(|c| c.period);
        updates.push(ContainerUpdate::new(&c.id, throttled(period, s)).ignoring_failure());
    }
    Ok(updates)
}

/// Gives every throttled container its settings back.
fn restore_all(s: &Settings) -> Vec<ContainerUpdate> {
    let mut updates = Vec::new();
    for key in state::keys(SAVED) {
        let id = &key[SAVED.len()..];
        if let Some(saved) = state::get(&key) {
            if view::container(id).is_some() {
                updates.push(ContainerUpdate::new(id, restored(&saved, s)).ignoring_failure());
            }
        }
        state::remove(&key);
    }
    updates
}

/// An online container is gone: restore if it was the last one.
fn online_gone(id: &str, s: &Settings) -> Vec<ContainerUpdate> {
    let key = format!("{ONLINE}{id}");
    if state::get(&key).is_none() {
        return Vec::new();
    }
    state::remove(&key);
    if !state::keys(ONLINE).is_empty() {
        return Vec::new();
    }
    log(LogLevel::Info, "last latency-critical container gone: restoring offline containers");
    restore_all(s)
}

fn updates(update: Vec<ContainerUpdate>) -> Reply {
    Reply { adjust: None, update, evict: Vec::new() }
}

impl Policy for ColocationQos {
    const EVENTS: &'static [EventKind] = &[
        EventKind::CreateContainer,
        EventKind::StartContainer,
        EventKind::StopContainer,
        EventKind::RemoveContainer,
        EventKind::Synchronize,
    ];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = settings_now();
        if class(e, &s).as_deref() != Some("offline") || state::keys(ONLINE).is_empty() {
            return Ok(Reply::none());
        }
        let cpu = e.resources().and_then(|r| r.cpu.as_ref());
        let (quota, period) = (cpu.and_then(|c| c.quota), cpu.and_then(|c| c.period));
        let saved =
            format!("{},{}", quota.map_or("-".into(), |q| q.to_string()), period.map_or("-".into(), |p| p.to_string()));
        save(&format!("{SAVED}{}", e.container_meta().id), &saved)?;
        let mut adjust = ContainerAdjustment::new();
        *adjust.resources_mut() = throttled(period, &s);
        Ok(Reply::adjust(adjust))
    }

    fn start_container(e: &Event) -> Result<Reply, String> {
        let s = settings_now();
        if class(e, &s).as_deref() != Some("latency-critical") {
            return Ok(Reply::none());
        }
        let first = state::keys(ONLINE).is_empty();
        save(&format!("{ONLINE}{}", e.container_meta().id), "1")?;
        if !first {
            return Ok(Reply::none());
        }
        log(
            LogLevel::Info,
            &format!("latency-critical {} started: throttling offline containers", e.container_meta().name),
        );
        Ok(updates(throttle_all(&s)?))
    }

    fn stop_container(e: &Event) -> Result<Reply, String> {
        Ok(updates(online_gone(&e.container_meta().id, &settings_now())))
    }

    fn remove_container(e: &Event) -> Result<Reply, String> {
        state::remove(&format!("{SAVED}{}", e.container_meta().id));
        Ok(updates(online_gone(&e.container_meta().id, &settings_now())))
    }

    fn synchronize() -> Result<Reply, String> {
        // Forget containers that went away while the host was disconnected.
        for key in state::keys(ONLINE).into_iter().chain(state::keys(SAVED)) {
            let id = key.split_once('/').map_or("", |(_, id)| id);
            let alive = view::container(id)
                .is_some_and(|c| matches!(c.state, ContainerState::Created | ContainerState::Running));
            if !alive {
                state::remove(&key);
            }
        }
        let s = settings_now();
        if state::keys(ONLINE).is_empty() {
            Ok(updates(restore_all(&s)))
        } else {
            Ok(updates(throttle_all(&s)?))
        }
    }
}

// What it may change and read; the dangerous ones need a `grant` in its
// settings file (policy.toml).
nri_wasm_sdk::capabilities!("cpu", "unified", "updates", "node", "deny");

export_policy!(ColocationQos);
