//! `{{name}}`: an nri-wasm policy.
//!
//! As generated (make it your own): every container of a pod labelled
//! `team=<value>` gets the environment variable `TEAM=<value>`; with
//! `"required": true`, a container whose pod has no such label is refused.
//!
//! Settings are JSON (the `[settings]` table of the policy file an operator
//! installs as `NN-{{name}}.toml` reaches the policy as JSON); every key is
//! optional:
//!
//! ```json
//! {"label": "team", "env": "TEAM", "required": false}
//! ```
//!
//! The host calls the policy in a fresh instance for every event: nothing a
//! handler keeps in memory survives to the next call. `init` runs once, when
//! the host loads the policy, and refuses settings it cannot use; handlers
//! read the settings again with [`settings`].
use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

/// What the operator configures.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Settings {
    /// The pod label to read.
    label: String,
    /// The environment variable to set to the label's value.
    env: String,
    /// Refuse containers whose pod lacks the label.
    required: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { label: "team".into(), env: "TEAM".into(), required: false }
    }
}

/// Reads and checks the settings: the error keeps the policy from loading,
/// and the operator sees it (`nri-wasm check` shows it too).
fn parse_settings(text: &str) -> Result<Settings, String> {
    // No settings at all is every default; a misspelt key is refused, named.
    let settings: Settings = settings::parse(text)?;
    if settings.label.is_empty() {
        return Err("invalid settings: label is empty".into());
    }
    let variable = settings.env.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && settings.env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !variable {
        return Err(format!("invalid settings: env {:?} is not a variable name", settings.env));
    }
    Ok(settings)
}

struct MyPolicy;

impl Policy for MyPolicy {
    /// The events the host sends this policy; every other handler keeps its
    /// default, which changes nothing. Recorded in the component, where the
    /// host reads it before compiling the policy.
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(event: &Event) -> Result<Reply, String> {
        let settings = parse_settings(settings())?;
        // One label asked of the host, not the whole pod.
        match event.pod_label(&settings.label) {
            Some(value) => Ok(Reply::adjust(ContainerAdjustment::new().set_env(&settings.env, &value))),
            None if settings.required => {
                let pod = event.pod_meta();
                Err(format!("pod {}/{} has no label {}", pod.namespace, pod.name, settings.label))
            }
            None => Ok(Reply::none()),
        }
    }
}

// What this policy may change and read (docs/wit.md, "Declaring
// capabilities"): it sets an environment variable and may deny. The host
// refuses anything else it returns; dangerous ones (hooks, mounts, devices,
// updates of other containers, ...) also need a `grant` in policy.toml.
nri_wasm_sdk::capabilities!("env", "deny");

export_policy!(MyPolicy);
