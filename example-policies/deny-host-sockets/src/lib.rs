//! `deny-host-sockets`: no container mounts the container runtime's or
//! NRI's sockets, the host's root, `/proc` or `/sys`, or another host path
//! the operator protects.
//!
//! A bind mount whose host path (its `source`) is a protected path, lies
//! beneath one, or is a directory holding one (mounting `/run` would hand
//! out `/run/containerd/containerd.sock`) denies the container's creation.
//! The host's root `/` is protected only as itself (mounting `/srv` is not
//! refused because `/srv` lies beneath `/`). Per-namespace exceptions let
//! the few system pods that need a socket have it; a mount is allowed only
//! when its namespace has an exception for every protected path it
//! exposes. Meant for `on-error = "fail"`: a container must not be created
//! unchecked. See README.md.
use std::collections::BTreeMap;

use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

/// What is protected unless the settings say `builtin = false`.
const BUILTIN: [&str; 15] = [
    "/",
    "/proc",
    "/sys",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/nri/nri.sock",
    "/var/run/nri/nri.sock",
    "/run/crio/crio.sock",
    "/var/run/crio/crio.sock",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock.ttrpc",
    "/var/run/containerd/containerd.sock.ttrpc",
    "/run/cri-dockerd.sock",
    "/var/run/cri-dockerd.sock",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Settings {
    /// Protect the built-in paths too.
    #[serde(default = "yes")]
    builtin: bool,
    /// More protected host paths.
    #[serde(default)]
    paths: Vec<String>,
    /// Also refuse directories that hold a protected path.
    #[serde(default = "yes")]
    deny_parents: bool,
    /// Namespace → protected paths its pods may mount (`*`: all of them).
    #[serde(default)]
    exceptions: BTreeMap<String, Vec<String>>,
}

fn yes() -> bool {
    true
}

/// `path` with `.` and empty components dropped and `..` resolved, as the
/// kernel reads it (symbolic links aside); `None` if it is not absolute.
fn normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
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
    Some(format!("/{}", parts.join("/")))
}

/// Whether `path` is `base` or lies beneath it.
fn within(path: &str, base: &str) -> bool {
    path == base || (path.starts_with(base) && (base == "/" || path[base.len()..].starts_with('/')))
}

impl Settings {
    fn protected(&self) -> Vec<String> {
        let builtin = BUILTIN.iter().filter(|_| self.builtin).map(|p| p.to_string());
        let mut all: Vec<String> = Vec::new();
        for p in builtin.chain(self.paths.iter().filter_map(|p| normalize(p))) {
            if !all.contains(&p) {
                all.push(p);
            }
        }
        all
    }

    /// Every protected path a mount of host path `source` exposes, in the
    /// order of [`Settings::protected`].
    fn exposes(&self, source: &str) -> Vec<String> {
        let Some(source) = normalize(source) else { return Vec::new() };
        self.protected()
            .into_iter()
            .filter(|p| {
                if p == "/" {
                    return source == "/";
                }
                within(&source, p) || (self.deny_parents && within(p, &source))
            })
            .collect()
    }

    fn excepted(&self, namespace: &str, protected: &str) -> bool {
        self.exceptions
            .get(namespace)
            .is_some_and(|list| list.iter().any(|p| p == "*" || normalize(p).as_deref() == Some(protected)))
    }
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let s: Settings = settings::parse(text)?;
    for p in &s.paths {
        if normalize(p).is_none() || p.contains('\0') {
            return Err(format!("invalid settings: paths: {p:?} is not an absolute path"));
        }
    }
    if s.protected().is_empty() {
        return Err("invalid settings: builtin = false and no paths: nothing would be protected".into());
    }
    let protected = s.protected();
    for (namespace, list) in &s.exceptions {
        for p in list {
            let known = p == "*" || normalize(p).is_some_and(|n| protected.contains(&n));
            if !known {
                return Err(format!(
                    "invalid settings: exceptions.{namespace}: {p:?} is not a protected path (or \"*\")"
                ));
            }
        }
    }
    Ok(s)
}

/// Whether the mount takes a host path (rather than a file system such as
/// proc or tmpfs, whose `source` is just a name).
fn is_bind(m: &Mount) -> bool {
    m.type_ == "bind" || m.type_ == "rbind" || m.options.iter().any(|o| o == "bind" || o == "rbind")
}

struct DenyHostSockets;

impl Policy for DenyHostSockets {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = parse_settings(settings())?;
        let namespace = &e.pod_meta().namespace;
        for m in e.container().mounts.iter().filter(|m| is_bind(m)) {
            let exposed = s.exposes(&m.source);
            if exposed.is_empty() {
                continue;
            }
            // Allowed only if the namespace has an exception for every
            // protected path the mount exposes (`/run/containerd` holds
            // both of containerd's sockets).
            let Some(protected) = exposed.into_iter().find(|p| !s.excepted(namespace, p)) else {
                log(
                    LogLevel::Info,
                    &format!("{}: {} allowed in namespace {namespace}", e.container_meta().name, m.source),
                );
                continue;
            };
            let what = if normalize(&m.source).as_deref() == Some(protected.as_str()) {
                String::new()
            } else {
                format!(", which exposes {protected},")
            };
            return Err(format!(
                "mount of host path {} at {}{what} is not allowed (protected host path; namespace {namespace} has no \
                 exception for it)",
                m.source, m.destination
            ));
        }
        Ok(Reply::none())
    }
}

// What it may change and read (docs/wit.md); nothing dangerous.
nri_wasm_sdk::capabilities!("deny");

export_policy!(DenyHostSockets);
