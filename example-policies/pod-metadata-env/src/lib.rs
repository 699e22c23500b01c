//! `pod-metadata-env`: selected pod labels and annotations as environment
//! variables of every container of the pod.
//!
//! The settings map label and annotation keys to variable names; a key
//! mapped to `""` gets a name made from the key (with the settings'
//! `prefix`): upper case, every character other than a letter, digit or
//! `_` written as `_`, and a `_` in front of a leading digit, so
//! `app.kubernetes.io/name` becomes `POD_APP_KUBERNETES_IO_NAME`. A pod
//! without the label or annotation gets no variable; a variable the
//! container already sets is left alone unless `overwrite = true`. Nothing
//! is denied. See README.md.
use std::collections::BTreeMap;

use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    /// Label key → variable name (`""`: made from the key).
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Annotation key → variable name (`""`: made from the key).
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    /// Put in front of the names made from keys.
    #[serde(default = "default_prefix")]
    prefix: String,
    /// Replace variables the container sets itself.
    #[serde(default)]
    overwrite: bool,
}

fn default_prefix() -> String {
    "POD_".into()
}

/// A variable name from any key: `example.com/owner` → `EXAMPLE_COM_OWNER`.
fn sanitize(key: &str) -> String {
    let mut name: String =
        key.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// A portable variable name: a letter or `_`, then letters, digits, `_`.
fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One variable to set: where its value comes from and its name.
struct Mapping {
    label: bool,
    key: String,
    name: String,
}

fn parse_settings(text: &str) -> Result<(Settings, Vec<Mapping>), String> {
    let s: Settings = settings::parse(text)?;
    if !s.prefix.is_empty() && !valid_name(&s.prefix) {
        return Err(format!("invalid settings: prefix {:?} cannot start a variable name", s.prefix));
    }
    let mut mappings: Vec<Mapping> = Vec::new();
    let all = s.labels.iter().map(|kv| (true, kv)).chain(s.annotations.iter().map(|kv| (false, kv)));
    for (label, (key, name)) in all {
        let what = if label { "labels" } else { "annotations" };
        if key.is_empty() {
            return Err(format!("invalid settings: {what}: an empty key"));
        }
        let name = if name.is_empty() { format!("{}{}", s.prefix, sanitize(key)) } else { name.clone() };
        if !valid_name(&name) {
            return Err(format!(
                "invalid settings: {what}.{key:?}: {name:?} is not a variable name (letters, digits, _; not \
                 starting with a digit)"
            ));
        }
        if let Some(other) = mappings.iter().find(|m| m.name == name) {
            return Err(format!("invalid settings: {key:?} and {:?} would both set {name}", other.key));
        }
        mappings.push(Mapping { label, key: key.clone(), name });
    }
    if mappings.is_empty() {
        return Err("invalid settings: no labels or annotations to map, so this policy would do nothing".into());
    }
    Ok((s, mappings))
}

struct PodMetadataEnv;

impl Policy for PodMetadataEnv {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let (s, mappings) = parse_settings(settings())?;
        let container = &e.container_meta().name;
        let mut adjust = ContainerAdjustment::new();
        for m in &mappings {
            let value = if m.label { e.pod_label(&m.key) } else { e.pod_annotation(&m.key) };
            let Some(value) = value else { continue };
            if value.contains('\0') {
                log(LogLevel::Warn, &format!("{container}: {} has a NUL byte; {} not set", m.key, m.name));
                continue;
            }
            if !s.overwrite && e.env_var(&m.name).is_some() {
                log(LogLevel::Debug, &format!("{container}: sets {} itself; left alone", m.name));
                continue;
            }
            adjust = adjust.set_env(&m.name, &value);
        }
        if adjust.env.is_empty() {
            return Ok(Reply::none());
        }
        Ok(Reply::adjust(adjust))
    }
}

// What it may change and read (docs/wit.md); nothing dangerous.
nri_wasm_sdk::capabilities!("env", "deny");

export_policy!(PodMetadataEnv);
