//! The author's side: `nri-wasm push` and `nri-wasm sign`, through the same
//! client as every pull ([`Transport`](super::transport): trust, plain
//! HTTP, credentials and their helpers, challenges), so that what an author
//! can push is what a node can pull with the same settings.
//!
//! A policy is pushed as a wasm OCI artifact: a config blob of media type
//! `application/vnd.wasm.config.v0+json` and one `application/wasm` layer,
//! in an OCI image manifest. A signature is pushed as cosign does: a
//! simple-signing payload layer carrying the signature in an annotation, in
//! a manifest tagged `sha256-<hex>.sig` in the same repository. An existing
//! signature manifest under that tag is replaced, not extended.
//!
//! A blob is uploaded in one request after the registry hands out an
//! upload location (`POST …/blobs/uploads/`, then `PUT <location>?digest=`),
//! unless the registry already holds it (`HEAD …/blobs/<digest>`).

use reqwest::{Method, StatusCode, Url};

use super::client::Registry;
use super::manifest::{signature_manifest, Descriptor, Manifest, WasmConfig, OCI_CONFIG};
use super::sign::{self, SigningKeyFile};
use super::transport::{Fail, Request};
use super::{OciRef, RegistryError, RegistrySettings, OCI_MANIFEST, WASM_CONFIG, WASM_LAYER};

/// Uploads `bytes` to `r`'s repository unless it is there already.
async fn upload(registry: &Registry, r: &OciRef, media_type: &str, bytes: Vec<u8>) -> Result<Descriptor, Fail> {
    let t = registry.transport();
    let descriptor = Descriptor::of(media_type, &bytes);
    let push =
        |method: Method, url: String| Request { method, url, accept: None, content_type: None, body: None, push: true };
    let head = push(Method::HEAD, t.url(r, "blobs", &descriptor.digest));
    let resp = t.send_any(r, &head).await?;
    if resp.status().is_success() {
        return Ok(descriptor);
    }
    if resp.status() != StatusCode::NOT_FOUND {
        return Err(t.refusal(&head, resp).await);
    }
    let start = push(Method::POST, format!("{}/v2/{}/blobs/uploads/", t.base(&r.registry), r.repository));
    let resp = t.send(r, &start).await?;
    let location = resp
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Fail::answered(format!("POST {}: the registry gave no upload location", start.url)))?;
    // A location may be relative to the registry, and may hold a query.
    let base = Url::parse(&start.url).map_err(|e| Fail::answered(e.to_string()))?;
    let mut url = base
        .join(location)
        .map_err(|e| Fail::answered(format!("the upload location {location:?} is not a URL ({e})")))?;
    url.query_pairs_mut().append_pair("digest", &descriptor.digest);
    let put = Request {
        content_type: Some("application/octet-stream"),
        body: Some(bytes.into()),
        ..push(Method::PUT, url.to_string())
    };
    t.send(r, &put).await?;
    Ok(descriptor)
}

/// Puts a manifest under `tag`; returns its digest (hex).
async fn put_manifest(registry: &Registry, r: &OciRef, tag: &str, manifest: &Manifest) -> Result<String, Fail> {
    let t = registry.transport();
    let body = manifest.to_bytes();
    let hex = crate::files::sha256_hex(&body);
    let req = Request {
        method: Method::PUT,
        url: t.url(r, "manifests", tag),
        accept: None,
        content_type: Some(OCI_MANIFEST),
        body: Some(body.into()),
        push: true,
    };
    t.send(r, &req).await?;
    Ok(hex)
}

/// Runs `work` under the settings' deadline, naming the reference.
async fn deadline<T>(
    settings: &RegistrySettings,
    reference: &OciRef,
    what: &str,
    work: impl std::future::Future<Output = Result<T, Fail>>,
) -> Result<T, RegistryError> {
    let fail = |reason: String| RegistryError { reference: reference.to_string(), reason };
    match tokio::time::timeout(settings.timeout(), work).await {
        Ok(r) => r.map_err(|f| fail(f.reason)),
        Err(_) => Err(fail(format!("{what} did not complete within {} ms", settings.timeout_ms))),
    }
}

/// A client for the author's commands: the settings without the node's cache.
fn client(settings: &RegistrySettings, reference: &OciRef) -> Result<Registry, RegistryError> {
    let settings = RegistrySettings { cache_dir: None, ..settings.clone() };
    Registry::new(&settings, 1 << 30)
        .map_err(|e| RegistryError { reference: reference.to_string(), reason: crate::text::chain(&e) })
}

/// Pushes a component under a tag; returns the manifest's digest (hex).
pub async fn push(
    settings: &RegistrySettings,
    component: Vec<u8>,
    reference: &OciRef,
) -> Result<String, RegistryError> {
    let Some(tag) = reference.tag.clone().filter(|_| reference.digest.is_none()) else {
        return Err(RegistryError {
            reference: reference.to_string(),
            reason: "push needs a tag and no digest (oci://host/repository:tag)".into(),
        });
    };
    let registry = client(settings, reference)?;
    let work = async {
        let layer = upload(&registry, reference, WASM_LAYER, component)
            .await
            .map_err(|f| f.context("uploading the component"))?;
        let config = serde_json::to_vec(&WasmConfig {
            architecture: "wasm".into(),
            os: "wasip2".into(),
            layer_digests: vec![layer.digest.clone()],
        })
        .map_err(|e| Fail::answered(e.to_string()))?;
        let config =
            upload(&registry, reference, WASM_CONFIG, config).await.map_err(|f| f.context("uploading the config"))?;
        put_manifest(&registry, reference, &tag, &Manifest::wasm(config, layer))
            .await
            .map_err(|f| f.context("pushing the manifest"))
    };
    deadline(settings, reference, "the push", work).await
}

/// Signs the manifest `reference` names with `key`; returns the manifest's
/// digest (hex) and the tag the signature was pushed under.
pub async fn sign(
    settings: &RegistrySettings,
    key: &SigningKeyFile,
    reference: &OciRef,
) -> Result<(String, String), RegistryError> {
    let registry = client(settings, reference)?;
    let manifest_hex = registry.head(reference).await?;
    let work = async {
        let identity = format!("{}/{}", reference.registry, reference.repository);
        let payload = sign::payload(&identity, &format!("sha256:{manifest_hex}"));
        let signature = key.sign(&payload);
        let payload = upload(&registry, reference, sign::SIMPLE_SIGNING, payload)
            .await
            .map_err(|f| f.context("uploading the signature payload"))?;
        let config = upload(&registry, reference, OCI_CONFIG, b"{}".to_vec())
            .await
            .map_err(|f| f.context("uploading the signature's config"))?;
        let tag = sign::signature_tag(&manifest_hex);
        put_manifest(&registry, reference, &tag, &signature_manifest(config, payload, signature))
            .await
            .map_err(|f| f.context("pushing the signature"))?;
        Ok::<_, Fail>(tag)
    };
    let tag = deadline(settings, reference, "signing", work).await?;
    Ok((manifest_hex, tag))
}
