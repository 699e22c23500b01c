//! The OCI manifests the host reads and writes, as types.
//!
//! Three kinds: a policy (a wasm artifact: config
//! `application/vnd.wasm.config.v0+json`, exactly one `application/wasm`
//! layer), its cosign signature (simple-signing payload layers, each with
//! the signature in an annotation) and what `push` and `sign` write. The
//! types are the project's own rather than a distribution crate's: they
//! hold the few fields the host acts on, are read leniently (registries and
//! other tools add fields, `subject`, `urls`, annotations; the host ignores
//! what it does not act on) and written exactly as pushed. A manifest body
//! is read with a bound before it gets here (`MAX_MANIFEST_BYTES`), which
//! bounds the number of descriptors too.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{digest_hex, MAX_SMALL_BYTES, OCI_MANIFEST, WASM_CONFIG, WASM_LAYER};

/// Config media type of a cosign signature manifest.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// An OCI image manifest (`schemaVersion` 2).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// `application/vnd.oci.image.manifest.v1+json` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// What the artifact is (a wasm artifact names its config type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers, in order.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

/// A blob named by a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// What the blob is.
    pub media_type: String,
    /// `sha256:<hex>` (another algorithm is read, and refused where it matters).
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// Annotations (a cosign signature is one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// A descriptor of `bytes`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.to_string(),
            digest: format!("sha256:{}", crate::files::sha256_hex(bytes)),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        }
    }
}

/// The config blob `push` writes for a component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// `wasm`.
    pub architecture: String,
    /// `wasip2`.
    pub os: String,
    /// The component layer's digest.
    pub layer_digests: Vec<String>,
}

/// Why a manifest is not one the host takes. `what` names which manifest
/// (`the manifest`, `the signature manifest`); JSON's own error is the
/// source of [`ManifestError::NotJson`].
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Not JSON of a manifest's shape.
    #[error("{what} is not an OCI manifest")]
    NotJson {
        /// Which manifest.
        what: &'static str,
        /// What the JSON reader found.
        #[source]
        source: serde_json::Error,
    },
    /// Another schema version.
    #[error("{what} is schemaVersion {version}, not 2")]
    Schema {
        /// Which manifest.
        what: &'static str,
        /// The version it declares.
        version: u32,
    },
    /// Another media type: an index or an image manifest.
    #[error("{what} media type is {found:?}, not {OCI_MANIFEST:?} (an index or an image?)")]
    MediaType {
        /// Which manifest.
        what: &'static str,
        /// The media type it declares.
        found: String,
    },
    /// The config is not a wasm config: not a wasm artifact.
    #[error("config media type is {found:?}, not {WASM_CONFIG:?}: not a wasm artifact")]
    NotWasm {
        /// The config's media type.
        found: String,
    },
    /// Not exactly one layer.
    #[error("manifest has {count} layers; a wasm artifact has exactly one")]
    Layers {
        /// How many it has.
        count: usize,
    },
    /// The layer is not a component.
    #[error("layer media type is {found:?}, not {WASM_LAYER:?}")]
    LayerMediaType {
        /// The layer's media type.
        found: String,
    },
    /// The layer's digest is not a SHA-256 digest.
    #[error("layer digest {digest:?} is not sha256:<64 hex digits>")]
    Digest {
        /// The digest as given, made safe to show and cut short.
        digest: String,
    },
    /// The component is larger than a policy may be; nothing of it was
    /// asked for.
    #[error(
        "the component is {size} bytes, more than the {max} bytes a policy may have ([engine] max-component-mib); \
         not downloaded"
    )]
    TooLarge {
        /// The size the manifest declares.
        size: u64,
        /// The most a policy may have.
        max: u64,
    },
    /// A signature manifest without a cosign signature layer.
    #[error("the signature manifest holds no cosign signature layer")]
    NoSignature,
}

impl Manifest {
    /// Parses a manifest body, saying what is wrong with it.
    pub fn parse(bytes: &[u8], what: &'static str) -> Result<Self, ManifestError> {
        let m: Self = serde_json::from_slice(bytes).map_err(|source| ManifestError::NotJson { what, source })?;
        if m.schema_version != 2 {
            return Err(ManifestError::Schema { what, version: m.schema_version });
        }
        if let Some(t) = &m.media_type {
            if t != OCI_MANIFEST {
                return Err(ManifestError::MediaType { what, found: t.clone() });
            }
        }
        Ok(m)
    }

    /// The manifest of a wasm artifact with this config and component layer.
    pub fn wasm(config: Descriptor, layer: Descriptor) -> Self {
        Self {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.to_string()),
            artifact_type: Some(WASM_CONFIG.to_string()),
            config,
            layers: vec![layer],
        }
    }

    /// The body as pushed.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest always serialises")
    }
}

/// The component a wasm artifact's manifest names: its digest (hex) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// sha256 hex.
    pub hex: String,
    /// Bytes, as the manifest declares them.
    pub size: u64,
}

/// Checks a wasm artifact's manifest; returns the component it names.
/// `max` bounds the size the manifest may declare: a larger component is
/// refused before a byte of it is asked for.
pub fn check_wasm(bytes: &[u8], max: u64) -> Result<Component, ManifestError> {
    let m = Manifest::parse(bytes, "the manifest")?;
    if m.config.media_type != WASM_CONFIG {
        return Err(ManifestError::NotWasm { found: m.config.media_type });
    }
    let [layer] = m.layers.as_slice() else {
        return Err(ManifestError::Layers { count: m.layers.len() });
    };
    if layer.media_type != WASM_LAYER {
        return Err(ManifestError::LayerMediaType { found: layer.media_type.clone() });
    }
    let hex = digest_hex(&layer.digest)
        .ok_or_else(|| ManifestError::Digest { digest: crate::text::guest_text(&layer.digest, 80) })?;
    if layer.size > max {
        return Err(ManifestError::TooLarge { size: layer.size, max });
    }
    Ok(Component { hex: hex.to_string(), size: layer.size })
}

/// Most layers of a signature manifest that are looked at.
const MAX_SIGNATURE_LAYERS: usize = 16;

/// The payload layers of a cosign signature manifest: (digest hex,
/// signature). Layers of another kind, without a signature, with another
/// digest algorithm or larger than a payload may be are skipped.
pub fn signature_layers(bytes: &[u8]) -> Result<Vec<(String, String)>, ManifestError> {
    let m = Manifest::parse(bytes, "the signature manifest")?;
    let mut out = Vec::new();
    for layer in m.layers.iter().take(MAX_SIGNATURE_LAYERS) {
        if layer.media_type != super::sign::SIMPLE_SIGNING || layer.size > MAX_SMALL_BYTES {
            continue;
        }
        let Some(signature) = layer.annotations.get(super::sign::SIGNATURE_ANNOTATION) else { continue };
        let Some(hex) = digest_hex(&layer.digest) else { continue };
        out.push((hex.to_string(), signature.clone()));
    }
    if out.is_empty() {
        return Err(ManifestError::NoSignature);
    }
    Ok(out)
}

/// The cosign signature manifest for one payload.
pub fn signature_manifest(config: Descriptor, payload: Descriptor, signature: String) -> Manifest {
    let mut layer = payload;
    layer.annotations.insert(super::sign::SIGNATURE_ANNOTATION.to_string(), signature);
    Manifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST.to_string()),
        artifact_type: None,
        config,
        layers: vec![layer],
    }
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
            "subject": {"mediaType": OCI_MANIFEST, "digest": format!("sha256:{}", "1".repeat(64)), "size": 9},
        }))
        .unwrap()
    }

    #[test]
    fn manifests_of_wasm_artifacts_are_checked() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(check_wasm(&manifest(WASM_CONFIG, &[(WASM_LAYER, &d, 10)]), 100).unwrap().size, 10);
        for (m, why) in [
            (manifest(OCI_CONFIG, &[(WASM_LAYER, &d, 10)]), "not a wasm artifact"),
            (manifest(WASM_CONFIG, &[("application/x-tar", &d, 10)]), "layer media type"),
            (manifest(WASM_CONFIG, &[(WASM_LAYER, &d, 10), (WASM_LAYER, &d, 10)]), "exactly one"),
            (manifest(WASM_CONFIG, &[]), "0 layers"),
            (manifest(WASM_CONFIG, &[(WASM_LAYER, "sha256:00", 10)]), "64 hex"),
            (manifest(WASM_CONFIG, &[(WASM_LAYER, &format!("sha512:{}", "a".repeat(128)), 10)]), "64 hex"),
            (manifest(WASM_CONFIG, &[(WASM_LAYER, &d, 101)]), "not downloaded"),
            (b"{".to_vec(), "not an OCI manifest"),
            (br#"{"schemaVersion": 1, "config": {"mediaType": "x", "digest": "y", "size": 1}}"#.to_vec(), "not 2"),
            (
                br#"{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}"#
                    .to_vec(),
                "not an OCI manifest",
            ),
            (
                br#"{"schemaVersion": 2, "config": {"mediaType": "x", "digest": "y", "size": -1}}"#.to_vec(),
                "not an OCI",
            ),
        ] {
            let e = crate::text::chain(&check_wasm(&m, 100).unwrap_err());
            assert!(e.contains(why), "{why}: {e}");
        }
        // Typed: what was wrong, not only how it reads.
        let big = check_wasm(&manifest(WASM_CONFIG, &[(WASM_LAYER, &d, 101)]), 100).unwrap_err();
        assert!(matches!(big, ManifestError::TooLarge { size: 101, max: 100 }), "{big}");
        let junk = check_wasm(b"{", 100).unwrap_err();
        assert!(matches!(&junk, ManifestError::NotJson { what: "the manifest", .. }), "{junk}");
        assert!(std::error::Error::source(&junk).is_some(), "the JSON error is kept as the source");
    }

    /// What `push` writes is what the node accepts, and reads back the same.
    #[test]
    fn a_pushed_manifest_round_trips() {
        let component = b"\0asm component";
        let config = serde_json::to_vec(&WasmConfig {
            architecture: "wasm".into(),
            os: "wasip2".into(),
            layer_digests: vec![format!("sha256:{}", crate::files::sha256_hex(component))],
        })
        .unwrap();
        let m = Manifest::wasm(Descriptor::of(WASM_CONFIG, &config), Descriptor::of(WASM_LAYER, component));
        let bytes = m.to_bytes();
        assert_eq!(Manifest::parse(&bytes, "m").unwrap(), m);
        let c = check_wasm(&bytes, 1 << 20).unwrap();
        assert_eq!((c.hex.as_str(), c.size), (crate::files::sha256_hex(component).as_str(), component.len() as u64));
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains(r#""artifactType":"application/vnd.wasm.config.v0+json""#), "{text}");
        assert!(!text.contains("annotations"), "empty annotations are not written: {text}");
    }

    #[test]
    fn signature_layers_are_read_and_odd_ones_skipped() {
        let payload = b"payload";
        let m = signature_manifest(
            Descriptor::of(OCI_CONFIG, b"{}"),
            Descriptor::of(crate::registry::sign::SIMPLE_SIGNING, payload),
            "c2ln".into(),
        );
        let layers = signature_layers(&m.to_bytes()).unwrap();
        assert_eq!(layers, [(crate::files::sha256_hex(payload), "c2ln".to_string())]);
        let mut odd = m.clone();
        odd.layers[0].size = MAX_SMALL_BYTES + 1;
        assert!(matches!(signature_layers(&odd.to_bytes()), Err(ManifestError::NoSignature)));
        let mut unsigned = m;
        unsigned.layers[0].annotations.clear();
        assert!(matches!(signature_layers(&unsigned.to_bytes()), Err(ManifestError::NoSignature)));
    }
}
