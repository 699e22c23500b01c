//! `hook-injector`: OCI hooks for the containers of the pods an operator's
//! rule selects.
//!
//! Each rule of the settings names a hook (an absolute path, its command
//! line, environment and timeout) and the stage it runs at (`prestart`,
//! `createRuntime`, `createContainer`, `startContainer`, `poststart`,
//! `poststop`), and selects pods by namespace and labels. Every container of
//! a selected pod gets the hooks of every rule that selects it, in the
//! order of the rules. Nothing is denied. See README.md.
use std::collections::BTreeMap;

use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Rule {
    name: String,
    stage: String,
    path: String,
    /// The command line, `args[0]` included; empty runs `path` alone.
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Seconds.
    timeout: Option<i64>,
    /// Namespaces whose pods get the hook (empty: every namespace).
    #[serde(default)]
    namespaces: Vec<String>,
    /// Namespaces whose pods never get it.
    #[serde(default)]
    exclude_namespaces: Vec<String>,
    /// Pod labels that must all be there, with these values.
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    hooks: Vec<Rule>,
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let s: Settings = settings::parse(text)?;
    if s.hooks.is_empty() {
        return Err("invalid settings: hooks is empty, so this policy would do nothing".into());
    }
    for (i, rule) in s.hooks.iter().enumerate() {
        let at = format!("invalid settings: hooks[{i}] ({:?})", rule.name);
        if rule.name.is_empty() {
            return Err(format!("invalid settings: hooks[{i}]: a rule needs a name"));
        }
        if s.hooks[..i].iter().any(|r| r.name == rule.name) {
            return Err(format!("{at}: the name is used twice"));
        }
        if HookStage::parse(&rule.stage).is_none() {
            return Err(format!(
                "{at}.stage: {:?} is not one of prestart, createRuntime, createContainer, startContainer, \
                 poststart, poststop",
                rule.stage
            ));
        }
        if !rule.path.starts_with('/') || rule.path.split('/').any(|c| c == "..") || rule.path.contains('\0') {
            return Err(format!("{at}.path: {:?} is not an absolute path without \"..\"", rule.path));
        }
        if rule.args.iter().any(|a| a.contains('\0')) {
            return Err(format!("{at}.args: an argument has a NUL byte"));
        }
        for (name, value) in &rule.env {
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                return Err(format!("{at}.env: {name:?} is not a variable name (or its value has a NUL byte)"));
            }
        }
        if let Some(t) = rule.timeout.filter(|t| *t <= 0) {
            return Err(format!("{at}.timeout: {t} is not a positive number of seconds"));
        }
    }
    Ok(s)
}

impl Rule {
    fn selects(&self, namespace: &str, labels: &[KeyValue]) -> bool {
        let label = |key: &str| labels.iter().find(|kv| kv.key == key).map(|kv| kv.value.as_str());
        (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace))
            && !self.exclude_namespaces.iter().any(|n| n == namespace)
            && self.labels.iter().all(|(k, v)| label(k) == Some(v))
    }

    fn hook(&self) -> Hook {
        let mut hook = Hook::new(&self.path).with_args(&self.args);
        for (name, value) in &self.env {
            hook = hook.with_env(name, value);
        }
        hook.timeout = self.timeout;
        hook
    }
}

struct HookInjector;

impl Policy for HookInjector {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = parse_settings(settings())?;
        let namespace = &e.pod_meta().namespace;
        let labels = e.pod_labels();
        let mut adjust = ContainerAdjustment::new();
        let mut names = Vec::new();
        for rule in s.hooks.iter().filter(|r| r.selects(namespace, &labels)) {
            let stage = HookStage::parse(&rule.stage).expect("stages were checked at load");
            adjust = adjust.add_hook(stage, rule.hook());
            names.push(rule.name.as_str());
        }
        if names.is_empty() {
            return Ok(Reply::none());
        }
        log(LogLevel::Info, &format!("{}: hooks {}", e.container_meta().name, names.join(", ")));
        Ok(Reply::adjust(adjust))
    }
}

// What it may change and read; the dangerous ones need a `grant` in its
// settings file (policy.toml).
nri_wasm_sdk::capabilities!("hooks", "deny");

export_policy!(HookInjector);
