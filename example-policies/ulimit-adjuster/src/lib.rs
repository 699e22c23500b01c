//! `ulimit-adjuster`: resource limits (rlimits) for containers, asked for by
//! pod annotations and bounded by the operator.
//!
//! A pod annotation `ulimits.example.com/<container-name>.<resource>` with
//! the value `soft=<n>,hard=<n>` gives the container of that name the
//! rlimit `RLIMIT_<RESOURCE>` (`ulimits.example.com/worker.nofile:
//! soft=1024,hard=4096` gives container `worker` 1024 open files, 4096 at
//! most). Annotations of other containers of the pod are left to them.
//!
//! Only the resources the settings bound may be set, and only within their
//! bounds; a value that cannot be read, a soft limit above the hard one, a
//! resource that is not bounded or a limit above its bound denies the
//! container's creation with the reason. See README.md for the settings.
use std::collections::BTreeMap;

use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

/// The resources Linux limits, as annotations name them.
const RESOURCES: [&str; 16] = [
    "as",
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// The most a container may ask for one resource.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct Bound {
    soft: u64,
    hard: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Settings {
    /// The annotation prefix, without the `/`.
    #[serde(default = "default_prefix")]
    prefix: String,
    /// Bounds per resource (`nofile`, `nproc`, ...); only these may be set.
    #[serde(default)]
    max: BTreeMap<String, Bound>,
}

fn default_prefix() -> String {
    "ulimits.example.com".into()
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let s: Settings = settings::parse(text)?;
    let prefix_ok = !s.prefix.is_empty()
        && s.prefix.len() <= 253
        && s.prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !prefix_ok {
        return Err(format!("invalid settings: prefix {:?} is not a DNS name such as ulimits.example.com", s.prefix));
    }
    if s.max.is_empty() {
        return Err("invalid settings: max bounds no resource, so no annotation could ever apply \
                    (e.g. max = { nofile = { soft = 65536, hard = 65536 } })"
            .into());
    }
    for (resource, bound) in &s.max {
        if !RESOURCES.contains(&resource.as_str()) {
            return Err(format!(
                "invalid settings: max.{resource}: not a resource Linux limits (known: {})",
                RESOURCES.join(", ")
            ));
        }
        if bound.soft > bound.hard {
            return Err(format!("invalid settings: max.{resource}: soft {} is above hard {}", bound.soft, bound.hard));
        }
    }
    Ok(s)
}

/// `soft=<n>,hard=<n>` (in this order or the other, each once).
fn parse_value(value: &str) -> Option<(u64, u64)> {
    let (mut soft, mut hard) = (None, None);
    for part in value.split(',') {
        let (key, number) = part.trim().split_once('=')?;
        let slot = match key.trim() {
            "soft" => &mut soft,
            "hard" => &mut hard,
            _ => return None,
        };
        if slot.is_some() {
            return None;
        }
        let number = number.trim();
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = Some(number.parse().ok()?);
    }
    Some((soft?, hard?))
}

/// The rlimits the pod's annotations ask for `container`, checked against
/// the bounds, in resource order.
fn rlimits(s: &Settings, annotations: &[KeyValue], container: &str) -> Result<Vec<PosixRlimit>, String> {
    let prefix = format!("{}/", s.prefix);
    let mut out = Vec::new();
    for kv in annotations {
        let Some(target) = kv.key.strip_prefix(&prefix) else { continue };
        let Some((name, resource)) = target.rsplit_once('.') else {
            return Err(format!("annotation {}: the key must be {prefix}<container-name>.<resource>", kv.key));
        };
        if name != container {
            continue;
        }
        if !RESOURCES.contains(&resource) {
            return Err(format!(
                "annotation {}: {resource:?} is not a resource Linux limits (known: {})",
                kv.key,
                RESOURCES.join(", ")
            ));
        }
        let Some((soft, hard)) = parse_value(&kv.value) else {
            return Err(format!("annotation {}: {:?} is not soft=<number>,hard=<number>", kv.key, kv.value));
        };
        if soft > hard {
            return Err(format!("annotation {}: soft limit {soft} is above the hard limit {hard}", kv.key));
        }
        let Some(bound) = s.max.get(resource) else {
            let allowed: Vec<&str> = s.max.keys().map(String::as_str).collect();
            return Err(format!(
                "annotation {}: {resource} limits may not be set on this node (allowed: {})",
                kv.key,
                allowed.join(", ")
            ));
        };
        if soft > bound.soft || hard > bound.hard {
            return Err(format!(
                "annotation {}: soft={soft},hard={hard} exceeds the node's maximum soft={},hard={}",
                kv.key, bound.soft, bound.hard
            ));
        }
        out.push(PosixRlimit { type_: format!("RLIMIT_{}", resource.to_ascii_uppercase()), soft, hard });
    }
    Ok(out)
}

struct UlimitAdjuster;

impl Policy for UlimitAdjuster {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = parse_settings(settings())?;
        let name = &e.container_meta().name;
        let limits = rlimits(&s, &e.pod_annotations(), name)?;
        if limits.is_empty() {
            return Ok(Reply::none());
        }
        let mut adjust = ContainerAdjustment::new();
        for l in &limits {
            log(LogLevel::Info, &format!("{name}: {} soft={} hard={}", l.type_, l.soft, l.hard));
            adjust = adjust.set_rlimit(&l.type_, l.soft, l.hard);
        }
        Ok(Reply::adjust(adjust))
    }
}

// What it may change and read (docs/wit.md); nothing dangerous.
nri_wasm_sdk::capabilities!("rlimits", "rlimits-raise", "deny");

export_policy!(UlimitAdjuster);
