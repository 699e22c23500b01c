//! Policies named by an OCI reference instead of a file.
//!
//! A settings file may say `source = "oci://host/repo:tag@sha256:…"`; the
//! policy is then pulled from the registry when it loads (off the event
//! path, under `[registry] timeout-ms`), checked against the digests the
//! reference and its manifest name, optionally against a cosign-style
//! signature, and kept in a cache by digest so that the host starts without
//! the registry.
//!
//! One client for every use, pulls (the node, `check`, `pull`, `verify`)
//! and pushes (`push`, `sign`): a few requests of the distribution API of
//! our own on `reqwest` (`transport.rs`, `client.rs`, `push.rs`), one way
//! to trust, authenticate and report. Why not a distribution client crate
//! (`oci-client`, which served pushes before): every body a registry sends
//! must be read with a bound (manifests 256 KiB, tokens and error bodies
//! 64 KiB, the component its manifest's size, itself at most
//! `[engine] max-component-mib`, streamed and hashed on its way to a file),
//! and that crate reads manifests, tokens and error bodies whole and holds a
//! blob in memory, so a registry that sends an endless body would grow the
//! host's memory until the deadline; its TLS set-up needs the system's
//! roots, and its errors do not keep their TLS cause. The requests are few
//! and the distribution spec's; the manifests are typed (`manifest.rs`).
//!
//! The artifact layout is the CNCF wasm OCI artifact's (config
//! `application/vnd.wasm.config.v0+json`, one `application/wasm` layer), so
//! components pushed by other wasm tools load as they are.
//!
//! What is trusted: nothing the registry says that is not checked against
//! a digest (the manifest against the reference's digest, the component
//! against the manifest's) or a configured key (a tag's manifest). The
//! cache is not trusted either: everything read from it is checked the same
//! way, signatures included. Nor is a credential helper's output (bounded,
//! with a deadline, `auth.rs`).

pub mod auth;
pub mod cache;
pub mod client;
pub mod manifest;
pub mod push;
pub mod reference;
pub mod sign;
pub mod tags;
pub(crate) mod transport;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::invalid::Invalid;

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
    /// A docker `config.json` with the registries' credentials (or the
    /// credential helpers that have them).
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
    /// Registries (`host[:port]`, exactly as references name them) reached
    /// over plain HTTP instead of HTTPS.
    pub plain_http: Vec<String>,
    /// Whether a policy that requires a signature may be pulled from a
    /// `plain-http` registry too.
    pub plain_http_signed: bool,
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
            // HTTPS unless the operator names a registry.
            plain_http: Vec::new(),
            plain_http_signed: false,
        }
    }
}

/// The registry cache of a host that sets none: `oci/` inside the default
/// compile cache directory ([`crate::files::default_cache_dir`]), so that
/// the one writable cache directory a pod mounts (`/var/cache/nri-wasm`)
/// holds both, and nothing is written beside it on a read-only root. The
/// compile cache only ever touches its own entries there.
pub fn default_cache_dir() -> Option<PathBuf> {
    crate::files::default_cache_dir().map(|d| d.join("oci"))
}

impl RegistrySettings {
    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), Invalid> {
        const T: &str = "[registry]";
        if !(100..=600_000).contains(&self.timeout_ms) {
            return Err(Invalid::key(T, "timeout-ms", format!("{} must be within 100..=600000", self.timeout_ms)));
        }
        if self.tag_recheck_ms != 0 && !(1_000..=86_400_000).contains(&self.tag_recheck_ms) {
            let rule = format!("{} must be 0 (off) or within 1000..=86400000 (a second to a day)", self.tag_recheck_ms);
            return Err(Invalid::key(T, "tag-recheck-ms", rule));
        }
        if let Some(dir) = self.cache_dir.as_ref().filter(|d| !d.is_absolute()) {
            return Err(Invalid::key(T, "cache-dir", format!("{} must be an absolute path", dir.display())));
        }
        for key in &self.public_keys {
            TrustedKey::read(key)
                .map_err(|e| Invalid::key(T, "public-keys", "names a key the host cannot use").because(e))?;
        }
        if let Some(ca) = &self.ca_file {
            transport::read_ca(ca).map_err(|e| Invalid::key(T, "ca-file", "names no usable CA bundle").because(e))?;
        }
        for (i, entry) in self.plain_http.iter().enumerate() {
            if let Some(why) = reference::host_problem(entry) {
                let rule = format!("{entry:?} must be a registry as references name it, no scheme, no path: {why}");
                return Err(Invalid::key(T, "plain-http", rule));
            }
            if self.plain_http[..i].contains(entry) {
                return Err(Invalid::key(T, "plain-http", format!("names {entry:?} twice")));
            }
        }
        if self.plain_http_signed && self.plain_http.is_empty() {
            let rule = "= true needs registries in plain-http: it only allows signed policies from those";
            return Err(Invalid::key(T, "plain-http-signed", rule));
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
    /// Its own `public-keys` files are used only if root owns them and no
    /// one else may write them (`[policies] strict-permissions`, as for
    /// the settings file that names them).
    pub strict_permissions: bool,
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
    /// Read from the node's cache, and why; `None`: pulled from the registry.
    pub from_cache: Option<CacheUse>,
}

/// Why a version was read from the node's cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "kebab-case")]
pub enum CacheUse {
    /// The reference pins a digest the cache holds in full (checked): the
    /// registry was not asked.
    Pinned,
    /// The registry could not be reached (connection, TLS, a `5xx`, a body
    /// cut off, the deadline).
    Unreachable {
        /// The registry's failure.
        error: String,
    },
}

impl CacheUse {
    /// `pinned-digest` or `registry-unreachable` (for `/status`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Pinned => "pinned-digest",
            Self::Unreachable { .. } => "registry-unreachable",
        }
    }

    /// In words, for `nri-wasm status`.
    pub fn describe(&self) -> String {
        match self {
            Self::Pinned => "its pinned digest is there; the registry was not asked".into(),
            Self::Unreachable { error } => format!("registry unreachable: {error}"),
        }
    }
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

/// The hex of a `sha256:<hex>` digest, lowercase, 64 digits.
pub fn digest_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(hex)
}

/// Why a policy's source may not be used, before the registry is asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceRefused {
    /// A key that applies to it cannot be read or used.
    #[error(transparent)]
    Key(#[from] sign::KeyError),
    /// A tag with neither a digest nor a key to check it by.
    #[error("a tag alone can change under the node: pin its digest (…@sha256:…) or require a signature (public-keys)")]
    Unpinned,
    /// A signature is required and the registry is reached over plain
    /// HTTP, which `plain-http-signed` has not accepted.
    #[error(
        "the policy requires a signature and {registry} is reached over plain HTTP ([registry] plain-http), where \
         anyone on the path may serve an older signed version: serve the registry over HTTPS, or set \
         [registry] plain-http-signed = true to accept that"
    )]
    SignedOverPlainHttp {
        /// The registry, as `plain-http` names it.
        registry: String,
    },
}

/// The keys that apply to `source`: its own, else the global ones.
pub fn keys_for(source: &Source, settings: &RegistrySettings) -> Result<Vec<TrustedKey>, SourceRefused> {
    let (paths, trust) = match &source.public_keys {
        Some(own) => (own.as_slice(), source.strict_permissions.then(crate::files::Trust::root)),
        None => (settings.public_keys.as_slice(), None),
    };
    Ok(paths.iter().map(|p| TrustedKey::read_trusting(p, trust)).collect::<Result<_, _>>()?)
}

/// Whether a reference may be used: a tag only with a digest or a key.
pub fn check_pinning(reference: &OciRef, keys: usize) -> Result<(), SourceRefused> {
    if reference.digest.is_none() && keys == 0 {
        return Err(SourceRefused::Unpinned);
    }
    Ok(())
}

/// Whether `reference` may be pulled over the transport its registry
/// gets: a policy that requires a signature (`keys` > 0) not over plain
/// HTTP unless `plain-http-signed` says so. A signature proves who made a
/// version, not that it is the current one: over plain HTTP anyone on the
/// path can keep serving an older signed version (or none), which HTTPS
/// to the registry rules out.
pub fn check_transport(settings: &RegistrySettings, reference: &OciRef, keys: usize) -> Result<(), SourceRefused> {
    if keys > 0 && settings.plain_http.contains(&reference.registry) && !settings.plain_http_signed {
        return Err(SourceRefused::SignedOverPlainHttp { registry: reference.registry.clone() });
    }
    Ok(())
}

/// Most bytes of a file the operator names for the registry (a credential
/// file, a CA bundle, a key).
pub(crate) const MAX_NAMED_FILE: u64 = 1 << 20;

/// Reads a file the operator names (credentials, a CA, a key), bounded.
pub(crate) fn read_small(path: &Path) -> Result<Vec<u8>, crate::files::FileError> {
    crate::files::read_bounded(path, MAX_NAMED_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under `strict-permissions` a policy's own key files are held to the
    /// rule its settings file is (they decide which component runs); the
    /// host's `[registry] public-keys` are the configuration's, as before.
    #[test]
    fn a_policys_own_keys_are_roots_under_strict_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (_, public) = sign::SigningKeyFile::generate().unwrap().to_pem().unwrap();
        let path = dir.path().join("team.pub");
        std::fs::write(&path, public).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let reference = OciRef::parse("oci://h/p:v1").unwrap();
        let own = |strict| Source {
            reference: reference.clone(),
            public_keys: Some(vec![path.clone()]),
            strict_permissions: strict,
        };
        let settings = RegistrySettings { public_keys: vec![path.clone()], ..RegistrySettings::default() };
        assert_eq!(keys_for(&own(false), &settings).unwrap().len(), 1, "not strict");
        let e = keys_for(&own(true), &settings).unwrap_err().to_string();
        let why = if crate::files::Trust::effective_uid() == 0 { "writable by group or others" } else { "not by root" };
        assert!(e.contains("team.pub") && e.contains(why) && e.contains("strict-permissions"), "{e}");
        let global = Source { public_keys: None, ..own(true) };
        assert_eq!(keys_for(&global, &settings).unwrap().len(), 1, "the host's keys: the configuration's");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let owned_by_root = crate::files::Trust::effective_uid() == 0;
        assert_eq!(keys_for(&own(true), &settings).is_ok(), owned_by_root);
    }

    #[test]
    fn a_tag_alone_needs_a_key() {
        let tag = OciRef::parse("oci://h/p:v1").unwrap();
        assert_eq!(check_pinning(&tag, 0), Err(SourceRefused::Unpinned));
        assert!(SourceRefused::Unpinned.to_string().contains("pin its digest"));
        assert!(check_pinning(&tag, 1).is_ok());
        let pinned = OciRef::parse(&format!("oci://h/p:v1@sha256:{}", "a".repeat(64))).unwrap();
        assert!(check_pinning(&pinned, 0).is_ok());
    }

    #[test]
    fn settings_are_validated() {
        let ok = RegistrySettings::default();
        assert!(ok.validate().is_ok());
        let bad = RegistrySettings { timeout_ms: 5, ..ok.clone() };
        assert_eq!(bad.validate().unwrap_err().key.as_deref(), Some("timeout-ms"));
        for ms in [0, 1_000, 86_400_000] {
            assert!(RegistrySettings { tag_recheck_ms: ms, ..ok.clone() }.validate().is_ok(), "{ms}");
        }
        for ms in [1, 999, 86_400_001] {
            let e = RegistrySettings { tag_recheck_ms: ms, ..ok.clone() }.validate().unwrap_err();
            assert_eq!(e.key.as_deref(), Some("tag-recheck-ms"));
            assert!(e.rule.contains(&ms.to_string()), "{e}");
        }
        let bad = RegistrySettings { public_keys: vec!["/nonexistent/k.pub".into()], ..ok.clone() };
        let e = bad.validate().unwrap_err();
        assert_eq!(e.key.as_deref(), Some("public-keys"));
        assert!(e.cause.is_some() && e.text().contains("/nonexistent/k.pub"), "{}", e.text());
        // Credentials are read when a registry asks for them (a mounted
        // secret may come later, and is read again as it rotates).
        let later = RegistrySettings { auth_file: Some("/nonexistent/config.json".into()), ..ok };
        assert!(later.validate().is_ok());
    }

    #[test]
    fn plain_http_is_named_exactly_and_signed_policies_need_a_second_yes() {
        let plain = |entries: &[&str], signed: bool| RegistrySettings {
            plain_http: entries.iter().map(|e| e.to_string()).collect(),
            plain_http_signed: signed,
            ..RegistrySettings::default()
        };
        assert!(RegistrySettings::default().plain_http.is_empty(), "off by default");
        assert!(plain(&["localhost:5000", "registry.kube-system.svc:5000", "10.0.0.7", "[::1]:5000"], false)
            .validate()
            .is_ok());
        for (entry, why) in [
            ("http://localhost:5000", "no scheme"),
            ("localhost:5000/v2", "no path"),
            ("*", "optional :port"),
            ("", "optional :port"),
            ("localhost:99999", "optional :port"),
            ("::1", "IPv6 address in brackets"),
            ("[0::1]:5000", "RFC 5952: lowercase, zeros compressed): [::1]:5000"),
            ("localhost:05000", "optional :port"),
        ] {
            let e = plain(&[entry], false).validate().unwrap_err();
            assert!(e.key.as_deref() == Some("plain-http") && e.rule.contains(why), "{entry}: {e}");
        }
        let e = plain(&["h:1", "h:1"], false).validate().unwrap_err();
        assert!(e.rule.contains("twice"), "{e}");
        let e = plain(&[], true).validate().unwrap_err();
        assert_eq!(e.key.as_deref(), Some("plain-http-signed"), "{e}");

        let tag = OciRef::parse("oci://localhost:5000/p:v1").unwrap();
        let other = OciRef::parse("oci://localhost:5001/p:v1").unwrap();
        let s = plain(&["localhost:5000"], false);
        assert!(check_transport(&s, &tag, 0).is_ok(), "no signature required: plain HTTP is the operator's choice");
        let e = check_transport(&s, &tag, 1).unwrap_err();
        assert_eq!(e, SourceRefused::SignedOverPlainHttp { registry: "localhost:5000".into() });
        let e = e.to_string();
        assert!(e.contains("plain-http-signed") && e.contains("localhost:5000"), "{e}");
        assert!(check_transport(&s, &other, 1).is_ok(), "over HTTPS");
        assert!(check_transport(&plain(&["localhost:5000"], true), &tag, 1).is_ok());
    }

    /// The registry cache lives inside the compile cache's default
    /// directory (the one a pod mounts writable), not beside it.
    #[test]
    fn the_default_cache_is_inside_the_compile_cache_directory() {
        let compile = crate::files::default_cache_dir().expect("a user with a home has one");
        let oci = default_cache_dir().unwrap();
        assert_eq!(oci, compile.join("oci"));
        assert_eq!(RegistrySettings::default().cache_dir, Some(oci));
    }
}
