//! The node's side: pulling a policy by reference, with bounds on every
//! body, a deadline on the whole pull, digests checked before anything is
//! kept, and the cache when the registry cannot be reached.
//!
//! Requests: `GET /v2/<repo>/manifests/<ref>` and `GET /v2/<repo>/blobs/<digest>`,
//! over HTTPS, with the credentials of a docker `config.json`: HTTP basic
//! when the registry asks for it, or a bearer token from the realm its
//! challenge names. Proxies come from the environment (`HTTPS_PROXY`,
//! `NO_PROXY`), as `reqwest` reads them; redirects are followed up to 10
//! times (a loop fails with that number).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE};
use sha2::{Digest, Sha256};

use super::cache::{BlobCache, RefRecord};
use super::sign::{self, TrustedKey};
use super::{
    check_manifest, check_pinning, digest_hex, keys_for, Provenance, RegistryError, RegistrySettings, Resolved, Source,
    MAX_MANIFEST_BYTES, MAX_SMALL_BYTES, OCI_MANIFEST,
};
use crate::files::sha256_hex;

/// Installs the TLS crypto provider once (rustls on ring).
pub fn crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Reads a PEM file of CA certificates.
pub fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem = super::read_small(path)?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// Credentials per registry host, from a docker `config.json`.
pub fn read_auth_file(path: &Path) -> Result<HashMap<String, (String, String)>, String> {
    let bytes = super::read_small(path)?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: not JSON ({e})", path.display()))?;
    let mut out = HashMap::new();
    let Some(auths) = json.get("auths").and_then(|a| a.as_object()) else { return Ok(out) };
    for (host, entry) in auths {
        let host = host.trim_start_matches("https://").trim_start_matches("http://");
        let host = host.split('/').next().unwrap_or(host).to_string();
        let pair = if let Some(auth) = entry.get("auth").and_then(|a| a.as_str()) {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(auth)
                .map_err(|_| format!("{}: auths.{host}.auth is not base64", path.display()))?;
            let text =
                String::from_utf8(raw).map_err(|_| format!("{}: auths.{host}.auth is not UTF-8", path.display()))?;
            let (u, p) = text
                .split_once(':')
                .ok_or_else(|| format!("{}: auths.{host}.auth is not user:password", path.display()))?;
            (u.to_string(), p.to_string())
        } else {
            match (entry.get("username").and_then(|u| u.as_str()), entry.get("password").and_then(|p| p.as_str())) {
                (Some(u), Some(p)) => (u.to_string(), p.to_string()),
                _ => continue,
            }
        };
        out.insert(host, pair);
    }
    Ok(out)
}

/// A registry client with the node's settings, and the cache.
#[derive(Debug)]
pub struct Registry {
    settings: RegistrySettings,
    http: reqwest::Client,
    credentials: HashMap<String, (String, String)>,
    /// The `Authorization` that worked last, per registry and repository.
    authorization: Mutex<HashMap<String, HeaderValue>>,
    cache: Option<BlobCache>,
    /// Largest component (`[engine] max-component-mib`).
    max_blob: u64,
}

/// Why one step of a pull failed (the reference is added by `resolve`).
type Fail = String;

impl Registry {
    /// A client for `settings`; `max_blob` bounds a component's size.
    pub fn new(settings: &RegistrySettings, max_blob: u64) -> Result<Self, String> {
        crypto();
        let timeout = settings.timeout();
        let mut builder = reqwest::Client::builder()
            // The whole pull has a deadline (`resolve`), which bounds a
            // registry that stalls at any step.
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::limited(10))
            .user_agent(concat!("nri-wasm/", env!("CARGO_PKG_VERSION")))
            .https_only(true);
        if let Some(ca) = &settings.ca_file {
            builder = builder.tls_certs_merge(read_ca(ca)?);
        }
        let http = builder.build().map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        let credentials = match &settings.auth_file {
            Some(path) => read_auth_file(path)?,
            None => HashMap::new(),
        };
        let cache = match &settings.cache_dir {
            Some(dir) => Some(BlobCache::open(dir)?),
            None => None,
        };
        Ok(Self {
            settings: settings.clone(),
            http,
            credentials,
            authorization: Mutex::new(HashMap::new()),
            cache,
            max_blob,
        })
    }

    /// The settings the client was made with.
    pub fn settings(&self) -> &RegistrySettings {
        &self.settings
    }

    fn basic(&self, registry: &str) -> Option<HeaderValue> {
        let (u, p) = self.credentials.get(registry)?;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        HeaderValue::from_str(&format!("Basic {token}")).ok()
    }

    /// Sends a GET, answering one authentication challenge; returns a
    /// successful response, or why not (status and the start of the body).
    async fn get(&self, r: &super::OciRef, url: &str, accept: &str) -> Result<reqwest::Response, Fail> {
        self.get_reached(r, url, accept).await.map_err(|(e, _)| e)
    }

    /// [`Self::get`], saying with a failure whether the registry answered
    /// (`true`: an HTTP status or a refused challenge) or could not be
    /// reached (connection, TLS, no answer).
    async fn get_reached(&self, r: &super::OciRef, url: &str, accept: &str) -> Result<reqwest::Response, (Fail, bool)> {
        let key = format!("{}/{}", r.registry, r.repository);
        let mut tried_auth = false;
        loop {
            let auth = self.authorization.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
            let mut req = self.http.get(url).header(ACCEPT, accept);
            if let Some(a) = auth {
                req = req.header(AUTHORIZATION, a);
            }
            let resp = req.send().await.map_err(|e| (describe(&e), false))?;
            let status = resp.status();
            if status.is_success() {
                return Ok(resp);
            }
            if status == reqwest::StatusCode::UNAUTHORIZED && !tried_auth {
                tried_auth = true;
                let challenge =
                    resp.headers().get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                let header = self.answer(r, &challenge).await.map_err(|e| (e, true))?;
                self.authorization.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), header);
                continue;
            }
            let body = read_bounded(resp, 512).await.unwrap_or_default();
            let text = crate::text::guest_text(&String::from_utf8_lossy(&body), 200);
            // A 5xx says the registry is there but cannot serve now: as
            // good as unreachable (the cache may answer).
            return Err((
                format!("{url}: HTTP {status}{}", if text.is_empty() { String::new() } else { format!(": {text}") }),
                !status.is_server_error(),
            ));
        }
    }

    /// The `Authorization` for a challenge: basic, or a bearer token.
    async fn answer(&self, r: &super::OciRef, challenge: &str) -> Result<HeaderValue, Fail> {
        let basic = self.basic(&r.registry);
        let lower = challenge.to_ascii_lowercase();
        if lower.starts_with("basic") {
            return basic.ok_or_else(|| {
                format!("the registry asks for a password and the auth file has none for {}", r.registry)
            });
        }
        if !lower.starts_with("bearer") {
            return Err(format!("the registry refused access with an unknown challenge {:?}", clip(challenge)));
        }
        let params = challenge_params(&challenge[6..]);
        let realm = params.get("realm").ok_or("the registry's bearer challenge names no realm")?;
        let scope = params.get("scope").cloned().unwrap_or_else(|| format!("repository:{}:pull", r.repository));
        let mut query = vec![("scope", scope)];
        if let Some(service) = params.get("service") {
            query.push(("service", service.clone()));
        }
        let mut req = self.http.get(realm.as_str()).query(&query);
        if let Some(b) = basic {
            req = req.header(AUTHORIZATION, b);
        }
        let resp = req.send().await.map_err(|e| format!("token from {realm}: {}", describe(&e)))?;
        let status = resp.status();
        let body = read_bounded(resp, MAX_SMALL_BYTES).await.map_err(|e| format!("token from {realm}: {e}"))?;
        if !status.is_success() {
            return Err(format!("token from {realm}: HTTP {status}"));
        }
        let json: serde_json::Value =
            serde_json::from_slice(&body).map_err(|_| format!("token from {realm}: the answer is not JSON"))?;
        let token = json
            .get("token")
            .or_else(|| json.get("access_token"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| format!("token from {realm}: the answer has no token"))?;
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| format!("token from {realm}: not a header value"))
    }

    fn url(r: &super::OciRef, what: &str, name: &str) -> String {
        format!("https://{}/v2/{}/{what}/{name}", r.registry, r.repository)
    }

    /// A manifest: its bytes and digest (hex), checked against `expect`.
    pub async fn manifest(
        &self,
        r: &super::OciRef,
        reference: &str,
        expect: Option<&str>,
    ) -> Result<(Vec<u8>, String), Fail> {
        self.manifest_reached(r, reference, expect).await.map_err(|(e, _)| e)
    }

    /// [`Self::manifest`], saying with a failure whether the registry
    /// answered (see [`Self::get_reached`]).
    async fn manifest_reached(
        &self,
        r: &super::OciRef,
        reference: &str,
        expect: Option<&str>,
    ) -> Result<(Vec<u8>, String), (Fail, bool)> {
        let url = Self::url(r, "manifests", reference);
        let resp = self.get_reached(r, &url, OCI_MANIFEST).await?;
        let header = resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()).map(str::to_string);
        let bytes = read_bounded(resp, MAX_MANIFEST_BYTES).await.map_err(|e| (format!("manifest {url}: {e}"), true))?;
        let actual = sha256_hex(&bytes);
        if let Some(expected) = expect {
            if actual != expected {
                return Err((
                    format!(
                        "the registry sent a manifest with digest sha256:{actual}, not the sha256:{expected} asked for"
                    ),
                    true,
                ));
            }
        }
        if let Some(h) = header {
            if h.starts_with("sha256:") && h != format!("sha256:{actual}") {
                return Err((format!("the registry says the manifest is {h}, its content is sha256:{actual}"), true));
            }
        }
        Ok((bytes, actual))
    }

    /// A small blob (a signature payload), checked against its digest.
    async fn small_blob(&self, r: &super::OciRef, hex: &str) -> Result<Vec<u8>, Fail> {
        let url = Self::url(r, "blobs", &format!("sha256:{hex}"));
        let resp = self.get(r, &url, "*/*").await?;
        let bytes = read_bounded(resp, MAX_SMALL_BYTES).await.map_err(|e| format!("blob {url}: {e}"))?;
        if sha256_hex(&bytes) != hex {
            return Err(format!("blob {url}: content does not have the digest it was asked by"));
        }
        Ok(bytes)
    }

    /// Downloads a component of `size` bytes into the cache under its
    /// digest (temporary file, checked, renamed), or into memory when there
    /// is no cache.
    async fn component(&self, r: &super::OciRef, hex: &str, size: u64) -> Result<Vec<u8>, (Fail, bool)> {
        let url = Self::url(r, "blobs", &format!("sha256:{hex}"));
        let mut resp = self.get_reached(r, &url, "*/*").await?;
        if let Some(len) = resp.content_length() {
            if len != size {
                return Err((
                    format!("blob {url}: the registry announces {len} bytes, the manifest says {size}; not downloaded"),
                    true,
                ));
            }
        }
        let mut temp = match &self.cache {
            Some(c) => Some(c.temp_file().map_err(|e| (e, true))?),
            None => None,
        };
        // A body that breaks off is the registry going away; any other
        // failure is an answer.
        let mut cut = false;
        let mut hasher = Sha256::new();
        // Grown as bytes arrive: a manifest's declared size alone reserves
        // no more than a MiB.
        let mut bytes = Vec::with_capacity(size.min(self.max_blob).min(1 << 20) as usize);
        let result: Result<(), String> = async {
            while let Some(chunk) = resp.chunk().await.map_err(|e| {
                cut = true;
                describe(&e)
            })? {
                if bytes.len() as u64 + chunk.len() as u64 > size {
                    return Err(format!("blob {url}: the registry sends more than the manifest's {size} bytes"));
                }
                hasher.update(&chunk);
                bytes.extend_from_slice(&chunk);
                if let Some((file, path)) = temp.as_mut() {
                    file.write_all(&chunk).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                }
            }
            if (bytes.len() as u64) < size {
                return Err(format!("blob {url}: the body ended after {} of {size} bytes", bytes.len()));
            }
            let actual: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
            if actual != hex {
                return Err(format!("blob {url}: content has digest sha256:{actual}, not sha256:{hex}"));
            }
            Ok(())
        }
        .await;
        match (result, temp) {
            (Err(e), Some((_, path))) => {
                let _ = std::fs::remove_file(path);
                Err((e, !cut))
            }
            (Err(e), None) => Err((e, !cut)),
            (Ok(()), Some((file, path))) => {
                self.cache.as_ref().map_or(Ok(()), |c| c.commit(file, &path, hex)).map_err(|e| (e, true))?;
                Ok(bytes)
            }
            (Ok(()), None) => Ok(bytes),
        }
    }

    /// Finds a signature of `manifest_hex` by one of `keys` in the registry;
    /// returns the signer and the signature manifest's digest.
    async fn signature_online(
        &self,
        r: &super::OciRef,
        manifest_hex: &str,
        keys: &[TrustedKey],
    ) -> Result<(String, String), (Fail, bool)> {
        let tag = sign::signature_tag(manifest_hex);
        let (bytes, sig_hex) = self
            .manifest_reached(r, &tag, None)
            .await
            .map_err(|(e, answered)| (format!("no signature could be read (tag {tag}): {e}"), answered))?;
        let answer = |e: String| (e, true);
        let mut payloads = HashMap::new();
        for (hex, _) in signature_layers(&bytes).map_err(answer)? {
            if let std::collections::hash_map::Entry::Vacant(v) = payloads.entry(hex.clone()) {
                v.insert(self.small_blob(r, &hex).await.map_err(answer)?);
            }
        }
        let signer = check_signature(&bytes, &payloads, manifest_hex, keys, &repository_of(r)).map_err(answer)?;
        if let Some(cache) = &self.cache {
            cache.put(&bytes).map_err(answer)?;
            for p in payloads.values() {
                cache.put(p).map_err(answer)?;
            }
        }
        Ok((signer, sig_hex))
    }

    /// Resolves a policy's source: from the registry, else from the cache
    /// (saying why). Runs under `[registry] timeout-ms`.
    pub async fn resolve(&self, source: &Source) -> Result<Resolved, RegistryError> {
        let reference = source.reference.to_string();
        let fail = |reason: String| RegistryError { reference: reference.clone(), reason };
        let keys = keys_for(source, &self.settings).map_err(&fail)?;
        check_pinning(&source.reference, keys.len()).map_err(&fail)?;
        // A pinned digest that the cache holds in full needs no registry.
        if source.reference.digest.is_some() {
            if let Ok(found) = self.cached(source, &keys) {
                return Ok(found);
            }
        }
        let timeout = self.settings.timeout();
        let online = match tokio::time::timeout(timeout, self.pull(source, &keys)).await {
            Ok(result) => result,
            Err(_) => Err((format!("the registry did not complete the pull within {} ms", timeout.as_millis()), false)),
        };
        let error = match online {
            Ok(found) => return Ok(found),
            // The registry answered (a missing or wrong signature, a
            // refused credential, a manifest that is not a wasm artifact):
            // that is the answer, and the cache does not overrule it.
            Err((e, true)) => return Err(fail(e)),
            Err((e, false)) => e,
        };
        match self.cached(source, &keys) {
            Ok(mut found) => {
                tracing::warn!(
                    reference = %reference,
                    error = %error,
                    manifest = %found.provenance.manifest,
                    "registry unavailable: the policy is loaded from the node's cache"
                );
                found.provenance.from_cache = true;
                Ok(found)
            }
            Err(cached) => Err(fail(match self.cache {
                Some(_) => format!("{error} (and the node's cache has no usable copy: {cached})"),
                None => error,
            })),
        }
    }

    /// The online pull.
    /// The online pull; a failure says whether the registry answered (see
    /// [`Self::get_reached`]).
    async fn pull(&self, source: &Source, keys: &[TrustedKey]) -> Result<Resolved, (Fail, bool)> {
        let r = &source.reference;
        let answer = |e: String| (e, true);
        let (manifest, manifest_hex) = self.manifest_reached(r, &r.manifest_ref(), r.digest.as_deref()).await?;
        let (layer_hex, size) = check_manifest(&manifest, self.max_blob).map_err(answer)?;
        let (signer, signature) = if keys.is_empty() {
            (None, None)
        } else {
            let (signer, sig) = self.signature_online(r, &manifest_hex, keys).await?;
            (Some(signer), Some(sig))
        };
        let cached = self.cache.as_ref().and_then(|c| c.get(&layer_hex, self.max_blob).ok());
        let bytes = match cached {
            Some(b) => b,
            None => self.component(r, &layer_hex, size).await?,
        };
        if let Some(cache) = &self.cache {
            cache.put(&manifest).map_err(answer)?;
            cache
                .put_ref(&RefRecord { reference: r.to_string(), manifest: manifest_hex.clone(), signature })
                .map_err(answer)?;
        }
        Ok(Resolved {
            bytes,
            digest: layer_hex,
            provenance: Provenance {
                source: r.to_string(),
                manifest: format!("sha256:{manifest_hex}"),
                signer,
                from_cache: false,
            },
        })
    }

    /// Everything checked again from the cache: the manifest by digest, the
    /// component by the manifest's digest, the signature by the keys.
    fn cached(&self, source: &Source, keys: &[TrustedKey]) -> Result<Resolved, String> {
        let cache = self.cache.as_ref().ok_or("no cache")?;
        let r = &source.reference;
        let record = cache.get_ref(&r.to_string()).ok();
        let manifest_hex = match (&r.digest, &record) {
            (Some(d), _) => d.clone(),
            (None, Some(rec)) => rec.manifest.clone(),
            (None, None) => return Err("the reference was never pulled on this node".into()),
        };
        let manifest = cache.get(&manifest_hex, MAX_MANIFEST_BYTES)?;
        let (layer_hex, _) = check_manifest(&manifest, self.max_blob)?;
        let signer = if keys.is_empty() {
            None
        } else {
            let sig_hex = record
                .as_ref()
                .filter(|rec| rec.manifest == manifest_hex)
                .and_then(|rec| rec.signature.clone())
                .ok_or("no signature of it was kept")?;
            let sig = cache.get(&sig_hex, MAX_MANIFEST_BYTES)?;
            let mut payloads = HashMap::new();
            for (hex, _) in signature_layers(&sig)? {
                let p = cache.get(&hex, MAX_SMALL_BYTES)?;
                payloads.insert(hex, p);
            }
            Some(check_signature(&sig, &payloads, &manifest_hex, keys, &repository_of(r))?)
        };
        let bytes = cache.get(&layer_hex, self.max_blob)?;
        Ok(Resolved {
            bytes,
            digest: layer_hex,
            provenance: Provenance {
                source: r.to_string(),
                manifest: format!("sha256:{manifest_hex}"),
                signer,
                from_cache: true,
            },
        })
    }

    /// Where a tag points now (digest hex), for the periodic tag check: a
    /// failure says whether the registry answered at all
    /// ([`TagCheckError::answered`]), so that a missing tag or a refused
    /// credential is not taken for an outage.
    pub async fn check_tag(&self, r: &super::OciRef) -> Result<String, TagCheckError> {
        let fail = |reason: String, answered: bool| TagCheckError {
            error: RegistryError { reference: r.to_string(), reason },
            answered,
        };
        let at = r.manifest_ref();
        let work = self.manifest_reached(r, &at, r.digest.as_deref());
        match tokio::time::timeout(self.settings.timeout(), work).await {
            Ok(Ok((_, hex))) => Ok(hex),
            Ok(Err((e, answered))) => Err(fail(e, answered)),
            Err(_) => Err(fail(format!("no answer within {} ms", self.settings.timeout_ms), false)),
        }
    }

    /// The digest (hex) a reference names now, from the registry.
    pub async fn head(&self, r: &super::OciRef) -> Result<String, RegistryError> {
        let fail = |reason: String| RegistryError { reference: r.to_string(), reason };
        let at = r.manifest_ref();
        let work = self.manifest(r, &at, r.digest.as_deref());
        match tokio::time::timeout(self.settings.timeout(), work).await {
            Ok(Ok((_, hex))) => Ok(hex),
            Ok(Err(e)) => Err(fail(e)),
            Err(_) => Err(fail(format!("no answer within {} ms", self.settings.timeout_ms))),
        }
    }
}

/// Why a tag could not be checked.
#[derive(Debug, Clone)]
pub struct TagCheckError {
    /// The failure, naming the reference.
    pub error: RegistryError,
    /// The registry answered (an HTTP status, a refused challenge, a
    /// manifest that does not match its digest); `false`: it could not be
    /// reached (connection, TLS, no answer in time).
    pub answered: bool,
}

/// The payload layers of a signature manifest: (digest hex, signature).
fn signature_layers(manifest: &[u8]) -> Result<Vec<(String, String)>, String> {
    let m: serde_json::Value =
        serde_json::from_slice(manifest).map_err(|e| format!("the signature manifest is not JSON ({e})"))?;
    let layers = m.get("layers").and_then(|l| l.as_array()).ok_or("the signature manifest has no layers")?;
    let mut out = Vec::new();
    for layer in layers.iter().take(16) {
        if layer.get("mediaType").and_then(|v| v.as_str()) != Some(sign::SIMPLE_SIGNING) {
            continue;
        }
        let Some(sig) =
            layer.get("annotations").and_then(|a| a.get(sign::SIGNATURE_ANNOTATION)).and_then(|s| s.as_str())
        else {
            continue;
        };
        let Some(hex) = layer.get("digest").and_then(|d| d.as_str()).and_then(digest_hex) else { continue };
        if layer.get("size").and_then(|s| s.as_u64()).is_some_and(|s| s > MAX_SMALL_BYTES) {
            continue;
        }
        out.push((hex.to_string(), sig.to_string()));
    }
    if out.is_empty() {
        return Err("the signature manifest holds no cosign signature layer".into());
    }
    Ok(out)
}

/// The signer of `manifest_hex` among `keys`, from a signature manifest and
/// its payloads (already checked against their digests).
/// The payload must name the repository the policy is pulled from
/// (`critical.identity.docker-reference`): a signature copied from another
/// repository (signed there, for something else) is refused.
fn check_signature(
    sig_manifest: &[u8],
    payloads: &HashMap<String, Vec<u8>>,
    manifest_hex: &str,
    keys: &[TrustedKey],
    repository: &str,
) -> Result<String, String> {
    let want = format!("sha256:{manifest_hex}");
    let mut named_other = None;
    let mut other_repository = None;
    for (hex, signature) in signature_layers(sig_manifest)? {
        let Some(payload) = payloads.get(&hex) else { continue };
        match sign::signed_identity(payload) {
            Some((d, _)) if d != want => {
                named_other = Some(d);
                continue;
            }
            Some((_, Some(r))) if sign::names_repository(&r, repository) => {}
            Some((_, r)) => {
                other_repository = Some(r.unwrap_or_else(|| "no repository".into()));
                continue;
            }
            None => continue,
        }
        if let Some(key) = keys.iter().find(|k| k.verifies(payload, &signature)) {
            return Ok(format!("{} ({})", key.path.display(), key.fingerprint()));
        }
    }
    let keys: Vec<String> = keys.iter().map(|k| k.path.display().to_string()).collect();
    Err(match (named_other, other_repository) {
        (_, Some(r)) => format!(
            "the signature of {want} was made for {r}, not for {repository} (critical.identity.docker-reference): \
             refused"
        ),
        (Some(d), None) => format!("the signature payload names {d}, not {want}: refused"),
        (None, None) => {
            format!("no signature of {want} verifies with the configured keys ({}): refused", keys.join(", "))
        }
    })
}

/// `registry/repository`, as a signature payload names it.
fn repository_of(r: &super::OciRef) -> String {
    format!("{}/{}", r.registry, r.repository)
}

/// Reads a response's body, failing past `max` bytes.
pub async fn read_bounded(mut resp: reqwest::Response, max: u64) -> Result<Vec<u8>, String> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(format!("the body is larger than {max} bytes; not read"));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e))? {
        if out.len() as u64 + chunk.len() as u64 > max {
            return Err(format!("the body is larger than {max} bytes; not read further"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A transport error with its causes on one line.
pub fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    if e.is_redirect() {
        text.push_str(" (redirect loop or more than 10 redirects)");
    }
    text
}

fn clip(s: &str) -> String {
    crate::text::guest_text(s, 120)
}

/// `key="value", key=value` of a challenge.
fn challenge_params(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else { break };
        let key = key.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.split_once('"') {
                Some((v, n)) => (v.to_string(), n),
                None => (quoted.to_string(), ""),
            }
        } else {
            match after.split_once(',') {
                Some((v, n)) => (v.trim().to_string(), n),
                None => (after.trim().to_string(), ""),
            }
        };
        out.insert(key, value);
        rest = next.trim_start_matches([',', ' ']);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_split() {
        let p = challenge_params(
            r#" realm="https://auth.example/token",service="registry.example",scope="repository:p:pull""#,
        );
        assert_eq!(p["realm"], "https://auth.example/token");
        assert_eq!(p["service"], "registry.example");
        assert_eq!(p["scope"], "repository:p:pull");
    }

    /// A signature made (by a trusted key) for the same manifest in
    /// another repository is refused, naming both repositories.
    #[test]
    fn a_signature_copied_from_another_repository_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let key = sign::SigningKeyFile::generate().unwrap();
        let (_, public) = key.to_pem().unwrap();
        let path = dir.path().join("k.pub");
        std::fs::write(&path, public).unwrap();
        let keys = vec![TrustedKey::read(&path).unwrap()];
        let manifest_hex = "ab".repeat(32);
        let signed_for = |repository: &str| {
            let payload = sign::payload(repository, &format!("sha256:{manifest_hex}"));
            let hex = sha256_hex(&payload);
            let manifest = serde_json::to_vec(&serde_json::json!({
                "schemaVersion": 2,
                "layers": [{
                    "mediaType": sign::SIMPLE_SIGNING,
                    "digest": format!("sha256:{hex}"),
                    "size": payload.len(),
                    "annotations": { sign::SIGNATURE_ANNOTATION: key.sign(&payload) },
                }],
            }))
            .unwrap();
            (manifest, HashMap::from([(hex, payload)]))
        };
        let (m, p) = signed_for("h:5000/team/p");
        assert!(check_signature(&m, &p, &manifest_hex, &keys, "h:5000/team/p").is_ok());
        let (m, p) = signed_for("h:5000/other/q");
        let e = check_signature(&m, &p, &manifest_hex, &keys, "h:5000/team/p").unwrap_err();
        assert!(e.contains("h:5000/other/q") && e.contains("h:5000/team/p") && e.contains("refused"), "{e}");
    }

    #[test]
    fn auth_files_give_credentials_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:x");
        std::fs::write(
            &path,
            format!(
                r#"{{"auths":{{"https://h:5000/v1/":{{"auth":"{auth}"}},"other":{{"username":"u","password":"p"}}}}}}"#
            ),
        )
        .unwrap();
        let c = read_auth_file(&path).unwrap();
        assert_eq!(c["h:5000"], ("alice".to_string(), "s3cret:x".to_string()));
        assert_eq!(c["other"], ("u".to_string(), "p".to_string()));
    }
}
