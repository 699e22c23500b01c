//! `device-injector`: device nodes, host mounts and CDI devices for the
//! containers whose pod asks for them, from an allow-list the operator
//! keeps.
//!
//! Pod annotations, one per container and kind, values comma separated:
//!
//! - `devices.example.com/<container>.devices: /dev/fuse,/dev/net/tun`
//!   creates those device nodes (as the allow-list describes them) and
//!   allows them in the container's device cgroup;
//! - `devices.example.com/<container>.mounts: shared-cache` bind-mounts the
//!   allow-list's mount of that name;
//! - `devices.example.com/<container>.cdi: vendor.com/gpu=0` injects the
//!   CDI device (the allow-list may name a whole class, `vendor.com/gpu=*`).
//!
//! Anything asked for outside the allow-list denies the container's
//! creation, naming what was asked and what is allowed. See README.md.
use std::collections::BTreeMap;

use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Device {
    /// `c`, `b`, `u` or `p`.
    #[serde(rename = "type")]
    kind: String,
    major: i64,
    minor: i64,
    file_mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    /// What the device cgroup allows (`rwm` by default).
    #[serde(default = "default_access")]
    access: String,
}

fn default_access() -> String {
    "rwm".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostMount {
    source: String,
    destination: String,
    #[serde(default = "default_options")]
    options: Vec<String>,
}

fn default_options() -> Vec<String> {
    vec!["rbind".into(), "ro".into()]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Settings {
    #[serde(default = "default_prefix")]
    prefix: String,
    /// Device nodes by path.
    #[serde(default)]
    devices: BTreeMap<String, Device>,
    /// Host mounts by name.
    #[serde(default)]
    mounts: BTreeMap<String, HostMount>,
    /// Fully qualified CDI names, or `vendor/class=*` for every device of a
    /// class.
    #[serde(default)]
    cdi_devices: Vec<String>,
}

fn default_prefix() -> String {
    "devices.example.com".into()
}

/// An absolute path without `..`, NUL or `,` (annotations list paths with
/// commas).
fn check_path(what: &str, path: &str) -> Result<(), String> {
    if !path.starts_with('/') || path.split('/').any(|c| c == "..") || path.contains(['\0', ',']) {
        return Err(format!("invalid settings: {what}: {path:?} is not an absolute path without \"..\" or \",\""));
    }
    Ok(())
}

fn cdi_name_ok(name: &str) -> bool {
    name.split_once('=').is_some_and(|(kind, n)| {
        kind.split_once('/').is_some_and(|(vendor, class)| !vendor.is_empty() && !class.is_empty())
            && !n.is_empty()
            && !name.contains(['\0', ',', ' '])
    })
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let s: Settings = settings::parse(text)?;
    let prefix_ok = !s.prefix.is_empty()
        && s.prefix.len() <= 253
        && s.prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if !prefix_ok {
        return Err(format!("invalid settings: prefix {:?} is not a DNS name such as devices.example.com", s.prefix));
    }
    if s.devices.is_empty() && s.mounts.is_empty() && s.cdi_devices.is_empty() {
        return Err("invalid settings: the allow-list is empty (devices, mounts, cdi-devices), so every request \
                    would be denied"
            .into());
    }
    for (path, d) in &s.devices {
        check_path(&format!("devices.{path:?}"), path)?;
        if !["c", "b", "u", "p"].contains(&d.kind.as_str()) {
            return Err(format!("invalid settings: devices.{path:?}.type: {:?} is not one of c, b, u, p", d.kind));
        }
        if d.major < 0 || d.minor < 0 {
            return Err(format!(
                "invalid settings: devices.{path:?}: device number {}:{} is negative",
                d.major, d.minor
            ));
        }
        if d.access.is_empty() || !d.access.bytes().all(|b| b"rwm".contains(&b)) {
            return Err(format!("invalid settings: devices.{path:?}.access: {:?} is not made of r, w, m", d.access));
        }
        if d.file_mode.is_some_and(|m| m > 0o7777) {
            return Err(format!("invalid settings: devices.{path:?}.file-mode: not a permission mode"));
        }
    }
    for (name, m) in &s.mounts {
        if name.is_empty() || name.contains([',', ' ']) {
            return Err(format!("invalid settings: mounts: {name:?} is not a name (no commas or spaces)"));
        }
        check_path(&format!("mounts.{name}.source"), &m.source)?;
        check_path(&format!("mounts.{name}.destination"), &m.destination)?;
        if m.options.iter().any(|o| o.is_empty() || o.contains('\0')) {
            return Err(format!("invalid settings: mounts.{name}.options: an option is empty or has a NUL byte"));
        }
    }
    for name in &s.cdi_devices {
        if !cdi_name_ok(name) {
            return Err(format!("invalid settings: cdi-devices: {name:?} is not vendor.com/class=name"));
        }
    }
    Ok(s)
}

/// Whether the allow-list entry `allowed` covers CDI device `name`.
fn cdi_allowed(allowed: &str, name: &str) -> bool {
    match allowed.strip_suffix("=*") {
        Some(class) => name.strip_prefix(class).and_then(|rest| rest.strip_prefix('=')).is_some_and(|n| !n.is_empty()),
        None => allowed == name,
    }
}

fn not_allowed(key: &str, what: &str, allowed: Vec<&str>) -> String {
    let allowed = if allowed.is_empty() { "nothing".to_string() } else { allowed.join(", ") };
    format!("annotation {key}: {what} is not in this node's allow-list (allowed: {allowed})")
}

/// What the pod's annotations ask for `container`, as an adjustment.
fn requests(s: &Settings, annotations: &[KeyValue], container: &str) -> Result<ContainerAdjustment, String> {
    let prefix = format!("{}/", s.prefix);
    let mut adjust = ContainerAdjustment::new();
    for kv in annotations {
        let Some(target) = kv.key.strip_prefix(&prefix) else { continue };
        let Some((name, kind)) = target.rsplit_once('.') else {
            return Err(format!(
                "annotation {}: the key must be {prefix}<container-name>.<devices|mounts|cdi>",
                kv.key
            ));
        };
        if name != container {
            continue;
        }
        let mut items: Vec<&str> = Vec::new();
        for item in kv.value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            if !items.contains(&item) {
                items.push(item);
            }
        }
        match kind {
            "devices" => {
                for path in items {
                    let Some(d) = s.devices.get(path) else {
                        return Err(not_allowed(&kv.key, path, s.devices.keys().map(String::as_str).collect()));
                    };
                    let mut device = LinuxDevice::new(path, &d.kind, d.major, d.minor);
                    device.file_mode = d.file_mode;
                    (device.uid, device.gid) = (d.uid, d.gid);
                    adjust = adjust.add_device(device);
                    // Named pipes need no cgroup rule; `u` is a character device.
                    if d.kind != "p" {
                        let class = if d.kind == "b" { "b" } else { "c" };
                        adjust = adjust.allow_device(LinuxDeviceCgroup::allow(class, d.major, d.minor, &d.access));
                    }
                }
            }
            "mounts" => {
                for mount in items {
                    let Some(m) = s.mounts.get(mount) else {
                        return Err(not_allowed(&kv.key, mount, s.mounts.keys().map(String::as_str).collect()));
                    };
                    let options: Vec<&str> = m.options.iter().map(String::as_str).collect();
                    adjust = adjust.add_mount(Mount::bind(&m.source, &m.destination, &options));
                }
            }
            "cdi" => {
                for device in items {
                    if !s.cdi_devices.iter().any(|a| cdi_allowed(a, device)) {
                        return Err(not_allowed(&kv.key, device, s.cdi_devices.iter().map(String::as_str).collect()));
                    }
                    adjust = adjust.add_cdi_device(device);
                }
            }
            other => {
                return Err(format!(
                    "annotation {}: {other:?} is not something this policy injects (devices, mounts, cdi)",
                    kv.key
                ))
            }
        }
    }
    Ok(adjust)
}

struct DeviceInjector;

impl Policy for DeviceInjector {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = parse_settings(settings())?;
        let name = &e.container_meta().name;
        let adjust = requests(&s, &e.pod_annotations(), name)?;
        if adjust == ContainerAdjustment::new() {
            return Ok(Reply::none());
        }
        let devices = adjust.linux.as_ref().map_or(0, |l| l.devices.len());
        log(
            LogLevel::Info,
            &format!(
                "{name}: {devices} devices, {} mounts, {} CDI devices",
                adjust.mounts.len(),
                adjust.cdi_devices.len()
            ),
        );
        Ok(Reply::adjust(adjust))
    }
}

// What it may change and read; the dangerous ones need a `grant` in its
// settings file (policy.toml).
nri_wasm_sdk::capabilities!("devices", "mounts", "cdi-devices", "deny");

export_policy!(DeviceInjector);
