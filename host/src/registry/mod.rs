//! Policies named by an OCI reference instead of a file.
//!
//! A settings file may say `source = "oci://host/repo:tag@sha256:…"`; the
//! policy is then pulled from the registry when it loads (off the event
//! path, under `[registry] timeout-ms`), checked against the digests the
//! reference and its manifest name, optionally against a cosign-style
//! signature, and kept in a cache by digest so that the host starts without
//! the registry.
//!
//! Why the node's pull path is a few requests of our own on `reqwest`
//! rather than `oci-client`'s pull: every body a registry sends is read
//! with a bound here (manifests 256 KiB, tokens and error bodies 64 KiB,
//! the component its manifest's size, itself at most
//! `[engine] max-component-mib`), and `oci-client` reads manifests, tokens
//! and error bodies whole, so a registry that sends an endless body would
//! grow the host's memory until the deadline. `oci-client` (the ORAS
//! project's distribution client, kept up to date with the distribution
//! spec and used by wasm tools) serves the author's side: `nri-wasm push`
//! and `sign`, where the operator is the one who chose the registry.
//!
//! The artifact layout is the CNCF wasm OCI artifact's (config
//! `application/vnd.wasm.config.v0+json`, one `application/wasm` layer), so
//! components pushed by other wasm tools load as they are.
//!
//! What is trusted: nothing the registry says that is not checked against
//! a digest (the manifest against the reference's digest, the component
//! against the manifest's) or a configured key (a tag's manifest). The
//! cache is not trusted either: everything read from it is checked the same
//! way, signatures included.

pub mod cache;
pub mod client;
pub mod push;
pub mod reference;
pub mod sign;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use reference::OciRef;
use sign::TrustedKey;

/// Config media type of a wasm OCI artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// Layer media type of a wasm component.
pub const WASM_LAYER: &str = "application/wasm";
/// Media type of an OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// Most bytes of a manifest.
pub const MAX_MANIFEST_BYTES: u64 = 256 << 10;
/// Most bytes of a token answer, a signature payload or an error body.
pub const MAX_SMALL_BYTES: u64 = 64 << 10;

/// `[registry]`: how policies named by reference are pulled and checked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct RegistrySettings {
    /// Where pulled components are kept by digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// A docker `config.json` with the registries' credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_file: Option<PathBuf>,
    /// PEM certificates trusted for registries besides the system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The whole pull of one policy (every request, the component included).
    pub timeout_ms: u64,
    /// Public keys (PEM) whose signature a policy needs; a policy's own
    /// `public-keys` replace these.
    pub public_keys: Vec<PathBuf>,
    /// How often the host asks where the tag of a policy named by a tag
    /// alone points now (one manifest request, no download), so that a tag
    /// moved in the registry reaches the node; 0: only at start, SIGHUP
    /// and a change of the settings file.
    pub tag_recheck_ms: u64,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            auth_file: None,
            ca_file: None,
            timeout_ms: 30_000,
            public_keys: Vec::new(),
            // A fleet of nodes asks the registry this often per tag: a few
            // minutes is quick enough for a roll-out, and light on the registry.
            tag_recheck_ms: 300_000,
        }
    }
}

/// The cache of a host that sets none: beside the compile cache.
pub fn default_cache_dir() -> Option<PathBuf> {
    crate::files::default_cache_dir().map(|d| d.with_file_name("nri-wasm-oci"))
}

impl RegistrySettings {
    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), String> {
        if !(100..=600_000).contains(&self.timeout_ms) {
            return Err(format!("[registry] timeout-ms {} must be within 100..=600000", self.timeout_ms));
        }
        if self.tag_recheck_ms != 0 && !(1_000..=86_400_000).contains(&self.tag_recheck_ms) {
            return Err(format!(
                "[registry] tag-recheck-ms {} must be 0 (off) or within 1000..=86400000 (a second to a day)",
                self.tag_recheck_ms
            ));
        }
        if let Some(dir) = &self.cache_dir {
            if !dir.is_absolute() {
                return Err(format!("[registry] cache-dir {} must be an absolute path", dir.display()));
            }
        }
        for key in &self.public_keys {
            TrustedKey::read(key).map_err(|e| format!("[registry] public-keys: {e}"))?;
        }
        if let Some(ca) = &self.ca_file {
            client::read_ca(ca).map_err(|e| format!("[registry] ca-file: {e}"))?;
        }
        Ok(())
    }

    /// How long one request to a registry may take.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// How often tags are checked; zero: never on a timer.
    pub fn tag_recheck(&self) -> Duration {
        Duration::from_millis(self.tag_recheck_ms)
    }
}

/// A pull or a check that failed, naming the reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference}: {reason}")]
pub struct RegistryError {
    /// The reference as configured.
    pub reference: String,
    /// What went wrong.
    pub reason: String,
}

/// What a policy's settings file names: the reference and the keys whose
/// signature it needs (the policy's own, else the global ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The reference.
    pub reference: OciRef,
    /// `public-keys` of the settings file; `None`: `[registry] public-keys`.
    pub public_keys: Option<Vec<PathBuf>>,
}

/// Where a loaded version came from, for `check`, `/status` and metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// The reference as configured.
    pub source: String,
    /// `sha256:<hex>` of the manifest.
    pub manifest: String,
    /// The key that signed it (file and fingerprint), if one was required.
    pub signer: Option<String>,
    /// Read from the cache because the registry could not be reached.
    pub from_cache: bool,
}

/// A verified component and where it came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The component's bytes, verified against the manifest.
    pub bytes: Vec<u8>,
    /// sha256 hex of `bytes`.
    pub digest: String,
    /// Where they came from.
    pub provenance: Provenance,
}

/// Checks a wasm artifact's manifest; returns the component's digest (hex)
/// and size. `max` bounds the size the manifest may declare.
pub fn check_manifest(bytes: &[u8], max: u64) -> Result<(String, u64), String> {
    let m: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| format!("manifest is not JSON ({e})"))?;
    if m.get("schemaVersion").and_then(|v| v.as_u64()) != Some(2) {
        return Err("manifest is not schemaVersion 2".into());
    }
    if let Some(t) = m.get("mediaType").and_then(|v| v.as_str()) {
        if t != OCI_MANIFEST {
            return Err(format!("manifest media type is {t:?}, not {OCI_MANIFEST:?} (an index or an image?)"));
        }
    }
    let config = m.get("config").and_then(|c| c.get("mediaType")).and_then(|v| v.as_str()).unwrap_or("");
    if config != WASM_CONFIG {
        return Err(format!("config media type is {config:?}, not {WASM_CONFIG:?}: not a wasm artifact"));
    }
    let layers = m.get("layers").and_then(|l| l.as_array()).ok_or("manifest has no layers")?;
    let [layer] = layers.as_slice() else {
        return Err(format!("manifest has {} layers; a wasm artifact has exactly one", layers.len()));
    };
    let media = layer.get("mediaType").and_then(|v| v.as_str()).unwrap_or("");
    if media != WASM_LAYER {
        return Err(format!("layer media type is {media:?}, not {WASM_LAYER:?}"));
    }
    let digest = layer.get("digest").and_then(|v| v.as_str()).unwrap_or("");
    let hex = digest_hex(digest).ok_or_else(|| format!("layer digest {digest:?} is not sha256:<64 hex digits>"))?;
    let size = layer.get("size").and_then(|v| v.as_u64()).ok_or("layer has no size")?;
    if size > max {
        return Err(format!(
            "the component is {size} bytes, more than the {max} bytes a policy may have ([engine] max-component-mib); \
             not downloaded"
        ));
    }
    Ok((hex.to_string(), size))
}

/// The hex of a `sha256:<hex>` digest, lowercase, 64 digits.
pub fn digest_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(hex)
}

/// The keys that apply to `source`: its own, else the global ones.
pub fn keys_for(source: &Source, settings: &RegistrySettings) -> Result<Vec<TrustedKey>, String> {
    let paths: &[PathBuf] = source.public_keys.as_deref().unwrap_or(&settings.public_keys);
    paths.iter().map(|p| TrustedKey::read(p).map_err(|e| e.to_string())).collect()
}

/// Whether a reference may be used: a tag only with a digest or a key.
pub fn check_pinning(reference: &OciRef, keys: usize) -> Result<(), String> {
    if reference.digest.is_none() && keys == 0 {
        return Err("a tag alone can change under the node: pin its digest (…@sha256:…) or require a \
                    signature (public-keys)"
            .into());
    }
    Ok(())
}

/// Reads a file the operator names (credentials, a CA), bounded.
pub(crate) fn read_small(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(format!("{}: must be a regular file of at most 1 MiB", path.display()));
    }
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a file of at most `max` bytes.
pub fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Err(format!("{}: larger than {max} bytes", path.display()));
    }
    Ok(bytes)
}

/// Writes `bytes` to `path` whole or not at all (a temporary file beside
/// it, synced, renamed).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let temp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), crate::files::unique_suffix()));
    let result = (|| {
        let mut f = std::fs::File::options().write(true).create_new(true).open(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Creates `path` (which must not exist) with `mode`.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[(&str, &str, u64)]) -> Vec<u8> {
        let layers: Vec<_> =
            layers.iter().map(|(m, d, s)| serde_json::json!({"mediaType": m, "digest": d, "size": s})).collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config, "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn manifests_of_wasm_artifacts_are_checked() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(check_manifest(&manifest(WASM_CONFIG, &[(WASM_LAYER, &d, 10)]), 100).unwrap().1, 10);
        for (m, why) in [
            (manifest("application/vnd.oci.image.config.v1+json", &[(WASM_LAYER, &d, 10)]), "not a wasm artifact"),
            (manifest(WASM_CONFIG, &[("application/x-tar", &d, 10)]), "layer media type"),
            (manifest(WASM_CONFIG, &[(WASM_LAYER, &d, 10), (WASM_LAYER, &d, 10)]), "exactly one"),
            (manifest(WASM_CONFIG, &[(WASM_LAYER, "sha256:00", 10)]), "64 hex"),
            (manifest(WASM_CONFIG, &[(WASM_LAYER, &d, 101)]), "not downloaded"),
            (b"{".to_vec(), "not JSON"),
        ] {
            let e = check_manifest(&m, 100).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn a_tag_alone_needs_a_key() {
        let tag = OciRef::parse("oci://h/p:v1").unwrap();
        assert!(check_pinning(&tag, 0).unwrap_err().contains("pin its digest"));
        assert!(check_pinning(&tag, 1).is_ok());
        let pinned = OciRef::parse(&format!("oci://h/p:v1@sha256:{}", "a".repeat(64))).unwrap();
        assert!(check_pinning(&pinned, 0).is_ok());
    }

    #[test]
    fn settings_are_validated() {
        let ok = RegistrySettings::default();
        assert!(ok.validate().is_ok());
        let bad = RegistrySettings { timeout_ms: 5, ..ok.clone() };
        assert!(bad.validate().unwrap_err().contains("timeout-ms"));
        for ms in [0, 1_000, 86_400_000] {
            assert!(RegistrySettings { tag_recheck_ms: ms, ..ok.clone() }.validate().is_ok(), "{ms}");
        }
        for ms in [1, 999, 86_400_001] {
            let e = RegistrySettings { tag_recheck_ms: ms, ..ok.clone() }.validate().unwrap_err();
            assert!(e.contains("tag-recheck-ms") && e.contains(&ms.to_string()), "{e}");
        }
        let bad = RegistrySettings { public_keys: vec!["/nonexistent/k.pub".into()], ..ok };
        assert!(bad.validate().unwrap_err().contains("/nonexistent/k.pub"));
    }
}
