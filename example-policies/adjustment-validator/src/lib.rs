//! `adjustment-validator`: a last look at what the chain's policies did to a
//! container before it is created.
//!
//! Subscribed only to the validation step, it sees the merged adjustment of
//! every create-container policy and who made each change, and rejects it
//! when a policy
//!
//! - added OCI hooks (programs the runtime runs as root on the host),
//! - changed the seccomp policy, or
//! - bind-mounted a privileged host path (`/`, `/proc`, `/sys`, `/dev`,
//!   `/etc`, `/run`, `/var/run`, `/var/lib/kubelet`, ... or what the
//!   settings list),
//!
//! unless the pod opts in with the annotation the settings name, listing
//! what it accepts (`hooks`, `seccomp`, `mounts`, or `all`). The reason
//! names the policy that made the change. See README.md.
use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

/// Host paths a policy may not mount unless the pod opts in.
const PRIVILEGED: [&str; 13] = [
    "/",
    "/boot",
    "/dev",
    "/etc",
    "/proc",
    "/root",
    "/run",
    "/sys",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/kubelet",
    "/var/run",
    "/var/lib/crio",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Settings {
    /// The pod annotation that opts in, e.g. `hooks,mounts`.
    opt_in_annotation: String,
    /// Host paths that count as privileged besides the built-in ones.
    #[serde(default)]
    privileged_paths: Vec<String>,
    #[serde(default = "yes")]
    check_hooks: bool,
    #[serde(default = "yes")]
    check_seccomp: bool,
    #[serde(default = "yes")]
    check_mounts: bool,
}

fn yes() -> bool {
    true
}

const CHANGES: [&str; 4] = ["hooks", "seccomp", "mounts", "all"];

fn parse_settings(text: &str) -> Result<Settings, String> {
    let s: Settings = settings::parse(text)?;
    let key_ok = s
        .opt_in_annotation
        .split_once('/')
        .is_some_and(|(prefix, name)| !prefix.is_empty() && !name.is_empty() && !name.contains('/'));
    if !key_ok {
        return Err(format!(
            "invalid settings: opt-in-annotation {:?} is not an annotation key such as example.com/allow",
            s.opt_in_annotation
        ));
    }
    for p in &s.privileged_paths {
        if !p.starts_with('/') || p.split('/').any(|c| c == "..") {
            return Err(format!("invalid settings: privileged-paths: {p:?} is not an absolute path"));
        }
    }
    if !(s.check_hooks || s.check_seccomp || s.check_mounts) {
        return Err("invalid settings: every check is off, so this policy would accept everything".into());
    }
    Ok(s)
}

/// `path` without `.`, empty and `..` components (lexically).
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

impl Settings {
    /// The privileged path host path `source` is or lies beneath.
    fn privileged(&self, source: &str) -> Option<String> {
        if !source.starts_with('/') {
            return None;
        }
        let source = normalize(source);
        let extra = self.privileged_paths.iter().map(|p| normalize(p));
        PRIVILEGED.iter().map(|p| p.to_string()).chain(extra).find(|p| {
            if p == "/" {
                source == "/"
            } else {
                source == *p || source.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with('/'))
            }
        })
    }
}

/// The owner of `field` (and `key`), for a reason.
fn by(v: &ValidationEvent, field: i32, key: &str) -> String {
    match v.owner(field, key) {
        Some(owner) => owner.to_string(),
        None => "an unknown policy".to_string(),
    }
}

struct AdjustmentValidator;

impl Policy for AdjustmentValidator {
    const EVENTS: &'static [EventKind] = &[EventKind::ValidateContainerAdjustment];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn validate_container_adjustment(e: &Event) -> Result<Reply, String> {
        let s = parse_settings(settings())?;
        let v = e.validation().ok_or("not a validation event")?;
        let Some(adjust) = &v.adjust else { return Ok(Reply::none()) };
        let opted: Vec<String> = v
            .pod
            .annotation(&s.opt_in_annotation)
            .map(|a| a.split(',').map(|w| w.trim().to_string()).filter(|w| CHANGES.contains(&w.as_str())).collect())
            .unwrap_or_default();
        let allows = |change: &str| opted.iter().any(|o| o == change || o == "all");
        let pod = format!("{}/{}", v.pod.namespace, v.pod.name);
        let refuse = |what: String, change: &str| {
            Err(format!("{what}; pod {pod} has not opted in ({}: {change})", s.opt_in_annotation))
        };
        if s.check_hooks && !allows("hooks") {
            let hooks: Vec<String> = adjust
                .hooks
                .iter()
                .flat_map(|h| h.iter())
                .map(|(stage, h)| format!("{} {}", stage.name(), h.path))
                .collect();
            if !hooks.is_empty() {
                let owner = by(v, field::OCI_HOOKS, "");
                return refuse(format!("{owner} added OCI hooks ({})", hooks.join(", ")), "hooks");
            }
        }
        let seccomp = adjust.linux.as_ref().is_some_and(|l| l.seccomp_policy.is_some());
        if s.check_seccomp && !allows("seccomp") && seccomp {
            let owner = by(v, field::SECCOMP_POLICY, "");
            return refuse(format!("{owner} changed the seccomp policy"), "seccomp");
        }
        if s.check_mounts && !allows("mounts") {
            for m in adjust.mounts.iter().filter(|m| !m.destination.starts_with('-')) {
                if let Some(p) = s.privileged(&m.source) {
                    let owner = by(v, field::MOUNTS, &m.destination);
                    let what = if normalize(&m.source) == p { String::new() } else { format!(" (under {p})") };
                    let text = format!("{owner} mounted privileged host path {}{what} at {}", m.source, m.destination);
                    return refuse(text, "mounts");
                }
            }
        }
        Ok(Reply::none())
    }
}

// What it may change and read (docs/wit.md); nothing dangerous.
nri_wasm_sdk::capabilities!("deny");

export_policy!(AdjustmentValidator);
