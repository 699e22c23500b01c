//! `allowed-images`: a container runs only an image from an allowed
//! registry, pinned by digest, unless its pod carries the exception
//! annotation.
//!
//! Which image: NRI 0.12.2 sends the container's image (`name`, the
//! reference the pod asked for, and `digest`, what the runtime resolved);
//! a runtime of NRI 0.12.0 (containerd 2.3.4) sends none, and then the
//! CRI annotation `io.kubernetes.cri.image-name` carries the reference. The
//! field wins when present: the annotation is the pod's own, the field the
//! runtime's.
//!
//! Pinned means the reference names a digest (`…@sha256:<64 hex>`): a tag
//! can be moved to other content after review, a digest cannot. When the
//! runtime also reports the digest it resolved, the two must agree.
//!
//! A registry entry matches the reference's registry host (`ghcr.io`), or
//! a host and path prefix at a `/` boundary (`ghcr.io/example` allows
//! `ghcr.io/example/app`, not `ghcr.io/examples/app`). A reference without
//! a registry host is Docker Hub's (`docker.io`), as the runtimes read it.
//!
//! A pod annotated with the exception key (any non-empty value, the
//! reason) is let through, and the exception is logged.

use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

/// The CRI annotation that names the image on runtimes without the field.
pub const CRI_IMAGE_NAME: &str = "io.kubernetes.cri.image-name";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Settings {
    /// Registry hosts, or host/path prefixes, images may come from.
    registries: Vec<String>,
    /// Refuse references without a digest.
    #[serde(default = "yes")]
    require_digest: bool,
    /// The pod annotation that exempts a pod.
    #[serde(default = "default_exception")]
    exception_annotation: String,
}

fn yes() -> bool {
    true
}

fn default_exception() -> String {
    "images.example.com/exception".into()
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let s: Settings = settings::parse(text)?;
    if s.registries.is_empty() {
        return Err("invalid settings: registries is empty, so every image would be refused".into());
    }
    for r in &s.registries {
        let bad = r.is_empty() || r.ends_with('/') || r.contains("://") || r.contains(['@', ' ']);
        if bad {
            return Err(format!(
                "invalid settings: registries: {r:?} is not a registry host or host/path (e.g. ghcr.io/example)"
            ));
        }
    }
    if s.exception_annotation.is_empty() {
        return Err("invalid settings: exception-annotation is empty".into());
    }
    Ok(s)
}

/// A reference split into registry host, repository path and digest.
#[derive(Debug, PartialEq, Eq)]
struct Reference<'a> {
    host: &'a str,
    path: &'a str,
    digest: Option<&'a str>,
}

/// Reads an image reference as the runtimes do: the first component is a
/// registry host if it has a `.` or a `:` or is `localhost`; otherwise the
/// image is Docker Hub's.
fn parse_reference(reference: &str) -> Reference<'_> {
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    };
    let (host, path) = match rest.split_once('/') {
        Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => (first, path),
        _ => ("docker.io", rest),
    };
    // The tag is not part of the path.
    let path = match path.rsplit_once(':') {
        Some((p, tag)) if !tag.contains('/') => p,
        _ => path,
    };
    Reference { host, path, digest }
}

fn valid_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `entry` (host, or host/path prefix) allows `r`.
fn allows(entry: &str, r: &Reference<'_>) -> bool {
    match entry.split_once('/') {
        None => entry.eq_ignore_ascii_case(r.host),
        Some((host, prefix)) => {
            host.eq_ignore_ascii_case(r.host)
                && r.path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        }
    }
}

/// Why the image is refused, if it is.
fn judge(s: &Settings, name: &str, resolved: Option<&str>) -> Result<(), String> {
    let r = parse_reference(name);
    if !s.registries.iter().any(|e| allows(e, &r)) {
        return Err(format!("image {name} is not from an allowed registry (allowed: {})", s.registries.join(", ")));
    }
    match r.digest {
        Some(d) if !valid_digest(d) => return Err(format!("image {name}: {d:?} is not a sha256 digest")),
        None if s.require_digest => {
            return Err(format!("image {name} is not pinned by digest (use {}/{}@sha256:…)", r.host, r.path))
        }
        _ => {}
    }
    if let (Some(pinned), Some(resolved)) = (r.digest, resolved) {
        if !pinned.eq_ignore_ascii_case(resolved) {
            return Err(format!("image {name}: the runtime resolved it to {resolved}, not the pinned digest"));
        }
    }
    Ok(())
}

struct AllowedImages;

impl Policy for AllowedImages {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = parse_settings(settings())?;
        let container = e.container();
        let ctr = &container.name;
        let field = container.image.as_ref().filter(|i| !i.name.is_empty());
        let (name, resolved) = match field {
            Some(i) => (i.name.clone(), Some(i.digest.as_str()).filter(|d| !d.is_empty())),
            None => match container.annotation(CRI_IMAGE_NAME) {
                Some(n) if !n.is_empty() => (n.to_string(), None),
                _ => return Err(format!("container {ctr}: the runtime names no image, so it cannot be checked")),
            },
        };
        let verdict = judge(&s, &name, resolved);
        if let Err(why) = verdict {
            if let Some(reason) = e.pod_annotation(&s.exception_annotation).filter(|r| !r.is_empty()) {
                log(LogLevel::Info, &format!("{ctr}: allowed by exception ({reason}): {why}"));
                return Ok(Reply::none());
            }
            return Err(format!("container {ctr}: {why}"));
        }
        Ok(Reply::none())
    }
}

// What it may change and read (docs/wit.md): it only refuses.
nri_wasm_sdk::capabilities!("deny");

export_policy!(AllowedImages);
