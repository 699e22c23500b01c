//! The author's side: `nri-wasm push` and `nri-wasm sign`, through
//! `oci-client` (blob uploads, manifests, the registry's token dance).
//!
//! A policy is pushed as a wasm OCI artifact: a config blob of media type
//! `application/vnd.wasm.config.v0+json` and one `application/wasm` layer,
//! in an OCI image manifest. A signature is pushed as cosign does: a
//! simple-signing payload layer carrying the signature in an annotation, in
//! a manifest tagged `sha256-<hex>.sig` in the same repository. An existing
//! signature manifest under that tag is replaced, not extended.

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use reqwest::header::HeaderValue;

use super::client::{crypto, read_auth_file, Registry};
use super::sign::{self, SigningKeyFile};
use super::{OciRef, RegistryError, RegistrySettings, OCI_MANIFEST, WASM_CONFIG, WASM_LAYER};
use crate::files::sha256_hex;

/// Config media type of a cosign signature manifest.
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

struct Pusher {
    client: Client,
    auth: RegistryAuth,
    target: Reference,
    reference: OciRef,
}

impl Pusher {
    fn new(settings: &RegistrySettings, reference: &OciRef) -> Result<Self, String> {
        crypto();
        let mut config = ClientConfig { protocol: ClientProtocol::Https, ..Default::default() };
        if let Some(ca) = &settings.ca_file {
            let data = super::read_small(ca)?;
            config.extra_root_certificates.push(Certificate { encoding: CertificateEncoding::Pem, data });
        }
        config.read_timeout = Some(settings.timeout());
        config.connect_timeout = Some(settings.timeout().min(std::time::Duration::from_secs(10)));
        let auth = match &settings.auth_file {
            Some(path) => match read_auth_file(path)?.remove(&reference.registry) {
                Some((u, p)) => RegistryAuth::Basic(u, p),
                None => RegistryAuth::Anonymous,
            },
            None => RegistryAuth::Anonymous,
        };
        let target: Reference = reference.plain().parse().map_err(|e| format!("{e}"))?;
        Ok(Self { client: Client::new(config), auth, target, reference: reference.clone() })
    }

    fn at_tag(&self, tag: &str) -> Result<Reference, String> {
        self.reference.with_tag(tag).plain().parse().map_err(|e| format!("{e}"))
    }

    async fn blob(&self, bytes: Vec<u8>) -> Result<String, String> {
        let digest = format!("sha256:{}", sha256_hex(&bytes));
        self.client.push_blob(&self.target, bytes, &digest).await.map_err(|e| format!("uploading {digest}: {e}"))?;
        Ok(digest)
    }

    async fn manifest(&self, at: &Reference, body: Vec<u8>) -> Result<String, String> {
        let hex = sha256_hex(&body);
        self.client
            .push_manifest_raw(at, body, HeaderValue::from_static(OCI_MANIFEST))
            .await
            .map_err(|e| format!("pushing the manifest: {e}"))?;
        Ok(hex)
    }

    async fn login(&self) -> Result<(), String> {
        self.client
            .auth(&self.target, &self.auth, RegistryOperation::Push)
            .await
            .map(drop)
            .map_err(|e| format!("authenticating: {e}"))
    }
}

fn descriptor(media: &str, digest: &str, size: usize) -> serde_json::Value {
    serde_json::json!({ "mediaType": media, "digest": digest, "size": size })
}

/// Pushes a component under a tag; returns the manifest's digest (hex).
pub async fn push(
    settings: &RegistrySettings,
    component: Vec<u8>,
    reference: &OciRef,
) -> Result<String, RegistryError> {
    let fail = |reason: String| RegistryError { reference: reference.to_string(), reason };
    if reference.tag.is_none() || reference.digest.is_some() {
        return Err(fail("push needs a tag and no digest (oci://host/repository:tag)".into()));
    }
    let work = async {
        let p = Pusher::new(settings, reference)?;
        p.login().await?;
        let layer_size = component.len();
        let layer = p.blob(component).await?;
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer],
        }))
        .map_err(|e| e.to_string())?;
        let config_size = config.len();
        let config_digest = p.blob(config).await?;
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": WASM_CONFIG,
            "config": descriptor(WASM_CONFIG, &config_digest, config_size),
            "layers": [descriptor(WASM_LAYER, &layer, layer_size)],
        }))
        .map_err(|e| e.to_string())?;
        p.manifest(&p.target, manifest).await
    };
    match tokio::time::timeout(settings.timeout(), work).await {
        Ok(r) => r.map_err(fail),
        Err(_) => Err(fail(format!("the push did not complete within {} ms", settings.timeout_ms))),
    }
}

/// Signs the manifest `reference` names with `key`; returns the manifest's
/// digest (hex) and the tag the signature was pushed under.
pub async fn sign(
    settings: &RegistrySettings,
    key: &SigningKeyFile,
    reference: &OciRef,
) -> Result<(String, String), RegistryError> {
    let fail = |reason: String| RegistryError { reference: reference.to_string(), reason };
    let registry = Registry::new(settings, 1 << 30).map_err(fail)?;
    let manifest_hex = registry.head(reference).await?;
    let work = async {
        let p = Pusher::new(settings, reference)?;
        p.login().await?;
        let identity = format!("{}/{}", reference.registry, reference.repository);
        let payload = sign::payload(&identity, &format!("sha256:{manifest_hex}"));
        let signature = key.sign(&payload);
        let payload_size = payload.len();
        let payload_digest = p.blob(payload).await?;
        let config = b"{}".to_vec();
        let config_digest = p.blob(config).await?;
        let mut layer = descriptor(sign::SIMPLE_SIGNING, &payload_digest, payload_size);
        layer["annotations"] = serde_json::json!({ sign::SIGNATURE_ANNOTATION: signature });
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": descriptor(OCI_CONFIG, &config_digest, 2),
            "layers": [layer],
        }))
        .map_err(|e| e.to_string())?;
        let tag = sign::signature_tag(&manifest_hex);
        p.manifest(&p.at_tag(&tag)?, manifest).await?;
        Ok::<_, String>(tag)
    };
    match tokio::time::timeout(settings.timeout(), work).await {
        Ok(r) => r.map(|tag| (manifest_hex, tag)).map_err(fail),
        Err(_) => Err(fail(format!("signing did not complete within {} ms", settings.timeout_ms))),
    }
}
