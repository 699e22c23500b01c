//! Cosign-compatible signatures with keys the operator holds.
//!
//! A signature is an OCI artifact beside the policy, tagged
//! `sha256-<manifest hex>.sig`. Its layer is a "simple signing" JSON payload
//! that names the signed manifest's digest in
//! `critical.image.docker-manifest-digest`; the layer's annotation
//! `dev.cosignproject.cosign/signature` holds the base64 of a DER ECDSA
//! P-256 signature over the payload's exact bytes (SHA-256). That is the
//! layout cosign writes and reads with `--key`, so policies signed by either
//! tool verify with the other.
//!
//! Keys: public keys are PEM `PUBLIC KEY` (PKIX), private keys PEM
//! `PRIVATE KEY` (PKCS#8, unencrypted: pipelines keep them in a secret store).
//! Keyless signing (Fulcio certificates, Rekor inclusion proofs) is not
//! offered: it needs a trust root and a transparency log that a node cannot
//! reach offline, and that cannot be tested here honestly.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{DerSignature, Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Media type of the signed payload.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Layer annotation with the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// A key that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key {path}: {reason}")]
pub struct KeyError {
    /// The key's file.
    pub path: String,
    /// Why it cannot be used.
    pub reason: String,
}

/// A key pair that cannot be written as PEM.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// The private key as PKCS#8.
    #[error("cannot encode the private key as PKCS#8 PEM")]
    Private(#[source] p256::pkcs8::Error),
    /// The public key as PKIX.
    #[error("cannot encode the public key as PEM")]
    Public(#[source] p256::pkcs8::spki::Error),
}

/// Most bytes of a key file.
const MAX_KEY_BYTES: u64 = 64 << 10;

fn read_pem(path: &Path, trust: Option<crate::files::Trust>) -> Result<String, KeyError> {
    let err = |reason: String| KeyError { path: path.display().to_string(), reason };
    let bytes = crate::files::read_bounded_trusting(path, MAX_KEY_BYTES, trust).map_err(|e| match e {
        crate::files::FileError::Untrusted { why, .. } => {
            err(format!("{why}, and [policies] strict-permissions is on (the key decides what code runs)"))
        }
        e => err(e.reason()),
    })?;
    String::from_utf8(bytes).map_err(|_| err("not PEM text (not UTF-8)".into()))
}

/// A public key the operator trusts, named by its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// The key's file, as configured.
    pub path: PathBuf,
    key: VerifyingKey,
}

impl TrustedKey {
    /// Reads a PEM `PUBLIC KEY` (ECDSA P-256).
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        Self::read_trusting(path, None)
    }

    /// [`Self::read`], and with a rule, only a file that keeps it (a
    /// policy's own keys under `strict-permissions`: root's).
    pub fn read_trusting(path: &Path, trust: Option<crate::files::Trust>) -> Result<Self, KeyError> {
        let pem = read_pem(path, trust)?;
        let key = VerifyingKey::from_public_key_pem(pem.trim()).map_err(|e| KeyError {
            path: path.display().to_string(),
            reason: format!("not a PEM PUBLIC KEY of ECDSA P-256 ({e})"),
        })?;
        Ok(Self { path: path.to_path_buf(), key })
    }

    /// `sha256:` and the first 12 hex digits of the key's DER (SPKI): how
    /// `check` and `/status` name a signer without a path.
    pub fn fingerprint(&self) -> String {
        let der = self.key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default();
        let hex: String = Sha256::digest(der).iter().take(6).map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }

    /// Whether `signature_b64` (base64 DER, or raw r||s) signs `payload`.
    pub fn verifies(&self, payload: &[u8], signature_b64: &str) -> bool {
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(signature_b64.trim()) else {
            return false;
        };
        let signature = match Signature::from_der(&raw) {
            Ok(s) => s,
            Err(_) => match Signature::from_slice(&raw) {
                Ok(s) => s,
                Err(_) => return false,
            },
        };
        self.key.verify(payload, &signature).is_ok()
    }
}

/// A private key for `nri-wasm sign`.
#[derive(Debug)]
pub struct SigningKeyFile {
    key: SigningKey,
}

impl SigningKeyFile {
    /// Reads a PEM `PRIVATE KEY` (PKCS#8, ECDSA P-256).
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let pem = read_pem(path, None)?;
        let key = SigningKey::from_pkcs8_pem(pem.trim()).map_err(|e| KeyError {
            path: path.display().to_string(),
            reason: format!("not an unencrypted PEM PRIVATE KEY (PKCS#8) of ECDSA P-256 ({e})"),
        })?;
        Ok(Self { key })
    }

    /// A new key from the kernel's random source.
    pub fn generate() -> std::io::Result<Self> {
        loop {
            let bytes = crate::files::random_key()?;
            if let Ok(key) = SigningKey::from_bytes(&bytes.into()) {
                return Ok(Self { key });
            }
        }
    }

    /// The private key as PKCS#8 PEM, and the public key as PKIX PEM.
    pub fn to_pem(&self) -> Result<(String, String), PemError> {
        let private = self.key.to_pkcs8_pem(LineEnding::LF).map_err(PemError::Private)?.to_string();
        let public = self.key.verifying_key().to_public_key_pem(LineEnding::LF).map_err(PemError::Public)?;
        Ok((private, public))
    }

    /// The base64 of the DER signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> String {
        let signature: DerSignature = self.key.sign(payload);
        base64::engine::general_purpose::STANDARD.encode(signature.as_bytes())
    }
}

/// `type` of a cosign simple-signing payload.
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// A simple-signing payload: what a cosign signature signs.
#[derive(Debug, Serialize, Deserialize)]
struct Payload {
    critical: Critical,
    #[serde(default)]
    optional: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Critical {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity: Option<Identity>,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference", default, skip_serializing_if = "Option::is_none")]
    docker_reference: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// The simple-signing payload for a manifest digest (`sha256:<hex>`).
pub fn payload(docker_reference: &str, manifest_digest: &str) -> Vec<u8> {
    let payload = Payload {
        critical: Critical {
            identity: Some(Identity { docker_reference: Some(docker_reference.to_string()) }),
            image: Image { docker_manifest_digest: manifest_digest.to_string() },
            kind: PAYLOAD_TYPE.to_string(),
        },
        optional: None,
    };
    serde_json::to_vec(&payload).expect("a payload always serialises")
}

/// The manifest digest a payload signs, if it is a simple-signing payload.
pub fn signed_digest(payload: &[u8]) -> Option<String> {
    signed_identity(payload).map(|(digest, _)| digest)
}

/// The manifest digest a simple-signing payload signs, and the repository
/// it names (`critical.identity.docker-reference`), if it names one.
pub fn signed_identity(payload: &[u8]) -> Option<(String, Option<String>)> {
    let p: Payload = serde_json::from_slice(payload).ok()?;
    if p.critical.kind != PAYLOAD_TYPE {
        return None;
    }
    Some((p.critical.image.docker_manifest_digest, p.critical.identity.and_then(|i| i.docker_reference)))
}

/// Whether a payload's `docker-reference` names `repository`
/// (`registry/path`). cosign writes it without tag or digest; one written
/// with either still names the same repository.
pub fn names_repository(docker_reference: &str, repository: &str) -> bool {
    let bare = docker_reference.split('@').next().unwrap_or(docker_reference);
    let bare = match bare.rsplit_once(':') {
        Some((head, tag)) if !tag.contains('/') && head.contains('/') => head,
        _ => bare,
    };
    bare == repository
}

/// The tag under which cosign keeps the signatures of `manifest_hex`.
pub fn signature_tag(manifest_hex: &str) -> String {
    format!("sha256-{manifest_hex}.sig")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKeyFile::generate().unwrap();
        let (private, public) = key.to_pem().unwrap();
        assert!(private.contains("BEGIN PRIVATE KEY") && public.contains("BEGIN PUBLIC KEY"));
        std::fs::write(dir.path().join("k"), &private).unwrap();
        std::fs::write(dir.path().join("k.pub"), &public).unwrap();
        let signer = SigningKeyFile::read(&dir.path().join("k")).unwrap();
        let trusted = TrustedKey::read(&dir.path().join("k.pub")).unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let body = payload("h/p", &digest);
        assert_eq!(signed_digest(&body).as_deref(), Some(digest.as_str()));
        // As cosign writes it, byte for byte (the signature covers the bytes).
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"h/p"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
            )
        );
        assert_eq!(signed_digest(br#"{"critical":{"image":{"docker-manifest-digest":"x"},"type":"other"}}"#), None);
        let sig = signer.sign(&body);
        assert!(trusted.verifies(&body, &sig));
        let mut other = body.clone();
        other[10] ^= 1;
        assert!(!trusted.verifies(&other, &sig), "a changed payload must not verify");
        let stranger = SigningKeyFile::generate().unwrap();
        assert!(!trusted.verifies(&body, &stranger.sign(&body)), "another key's signature must not verify");
        assert!(!trusted.verifies(&body, "not base64!"));
        assert!(trusted.fingerprint().starts_with("sha256:") && trusted.fingerprint().len() == 19);
    }

    #[test]
    fn the_signed_repository_is_compared_without_tag_or_digest() {
        let body = payload("h:5000/team/p", "sha256:00");
        assert_eq!(signed_identity(&body).unwrap().1.as_deref(), Some("h:5000/team/p"));
        assert!(names_repository("h:5000/team/p", "h:5000/team/p"));
        assert!(names_repository("h:5000/team/p:v1", "h:5000/team/p"));
        assert!(names_repository("h:5000/team/p@sha256:00", "h:5000/team/p"));
        assert!(!names_repository("h:5000/team/other", "h:5000/team/p"));
        assert!(!names_repository("h:5001/team/p", "h:5000/team/p"));
        assert!(!names_repository("h:5000/team/p/sub", "h:5000/team/p"));
    }

    #[test]
    fn keys_of_the_wrong_kind_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKeyFile::generate().unwrap();
        let (private, public) = key.to_pem().unwrap();
        std::fs::write(dir.path().join("priv"), &private).unwrap();
        std::fs::write(dir.path().join("pub"), &public).unwrap();
        let e = TrustedKey::read(&dir.path().join("priv")).unwrap_err().to_string();
        assert!(e.contains("priv") && e.contains("PUBLIC KEY"), "{e}");
        let e = SigningKeyFile::read(&dir.path().join("pub")).unwrap_err().to_string();
        assert!(e.contains("pub") && e.contains("PRIVATE KEY"), "{e}");
    }
}
