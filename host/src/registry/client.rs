//! Pulling a policy by reference, for the node (`resolve`), `check`,
//! `verify` and `pull` alike: bounds on every body, a deadline on the
//! whole pull, digests checked before anything is kept, and the node's
//! cache when the registry cannot be reached.
//!
//! Requests: `GET /v2/<repo>/manifests/<ref>` and `GET /v2/<repo>/blobs/<digest>`
//! through the one [`Transport`](super::transport) (trust, plain HTTP,
//! credentials, challenges). Proxies come from the environment
//! (`HTTPS_PROXY`, `NO_PROXY`), as `reqwest` reads them; redirects are
//! followed up to 10 times.
//!
//! A component is streamed, never held whole before it is verified: each
//! chunk is counted against the manifest's size (itself at most
//! `[engine] max-component-mib`, checked before the first byte is asked
//! for), hashed, and written where it is going (a temporary file in the
//! node's cache, a temporary file beside `pull`'s output, or, with no
//! cache, memory bounded by that size). Only a component whose digest
//! matches is renamed into place or handed on; anything else is removed.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::cache::{BlobCache, CacheError, RefRecord};
use super::manifest::{check_wasm, signature_layers, Component, ManifestError};
use super::sign::{self, TrustedKey};
use super::transport::{read_bounded, Fail, Request, Transport};
use super::{
    check_pinning, check_transport, keys_for, CacheUse, OciRef, Provenance, RegistryError, RegistrySettings, Resolved,
    Source, SourceRefused, MAX_MANIFEST_BYTES, MAX_SMALL_BYTES, OCI_MANIFEST,
};
use crate::files::{sha256_hex, FileError};

pub use super::transport::{crypto, read_ca, CaError, ClientError};

/// A registry client with the node's settings, and the cache.
#[derive(Debug)]
pub struct Registry {
    settings: RegistrySettings,
    transport: Transport,
    cache: Option<BlobCache>,
    /// Largest component (`[engine] max-component-mib`).
    max_blob: u64,
}

/// Where a component goes as it arrives.
enum Sink {
    /// Memory, for a node with no cache (bounded by the manifest's size).
    Memory(Vec<u8>),
    /// A temporary file (in the cache, or beside `pull`'s output).
    File { file: std::fs::File, path: PathBuf },
}

impl Sink {
    fn write(&mut self, chunk: &[u8]) -> Result<(), FileError> {
        match self {
            Self::Memory(bytes) => {
                bytes.extend_from_slice(chunk);
                Ok(())
            }
            Self::File { file, path } => {
                file.write_all(chunk).map_err(|source| FileError::Write { path: path.clone(), source })
            }
        }
    }

    /// Removes what was written (a failed download).
    fn discard(self) {
        if let Self::File { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What an online pull gives: the component's bytes (unless they went to a
/// file), its digest and where it came from.
struct Pulled {
    bytes: Option<Vec<u8>>,
    digest: String,
    provenance: Provenance,
}

/// Where an online pull puts the component.
enum Dest<'a> {
    /// In memory for the caller, through the node's cache if there is one.
    Node,
    /// Into this file (written whole or not at all).
    File(&'a Path),
}

impl Registry {
    /// A client for `settings`; `max_blob` bounds a component's size.
    pub fn new(settings: &RegistrySettings, max_blob: u64) -> Result<Self, ClientError> {
        let transport = Transport::new(settings)?;
        // A cache that cannot be made costs the start without the registry,
        // not the pulls: said once, and the client works without it.
        let cache = settings.cache_dir.as_ref().and_then(|dir| match BlobCache::open(dir) {
            Ok(cache) => Some(cache),
            Err(e) => {
                tracing::warn!(
                    error = %crate::text::chain(&e),
                    "the registry cache cannot be used: policies named by reference are pulled every time, and \
                     cannot load while their registry is unreachable"
                );
                None
            }
        });
        Ok(Self { settings: settings.clone(), transport, cache, max_blob })
    }

    /// The settings the client was made with.
    pub fn settings(&self) -> &RegistrySettings {
        &self.settings
    }

    /// The largest component it pulls.
    pub fn max_blob(&self) -> u64 {
        self.max_blob
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    /// A manifest: its bytes and digest (hex), checked against `expect`.
    pub(crate) async fn manifest(
        &self,
        r: &OciRef,
        reference: &str,
        expect: Option<&str>,
    ) -> Result<(Vec<u8>, String), Fail> {
        let url = self.transport.url(r, "manifests", reference);
        let resp = self.transport.send(r, &Request::get(url.clone(), OCI_MANIFEST)).await?;
        let header = resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()).map(str::to_string);
        // A body cut off is the registry going away; one too large is its answer.
        let bytes =
            read_bounded(resp, MAX_MANIFEST_BYTES).await.map_err(|e| Fail::answered(format!("manifest {url}: {e}")))?;
        let actual = sha256_hex(&bytes);
        if let Some(expected) = expect {
            if actual != expected {
                return Err(Fail::answered(format!(
                    "the registry sent a manifest with digest sha256:{actual}, not the sha256:{expected} asked for"
                )));
            }
        }
        if let Some(h) = header {
            if h.starts_with("sha256:") && h != format!("sha256:{actual}") {
                return Err(Fail::answered(format!(
                    "the registry says the manifest is {}, its content is sha256:{actual}",
                    crate::text::guest_text(&h, 80)
                )));
            }
        }
        Ok((bytes, actual))
    }

    /// A small blob (a signature payload), checked against its digest.
    async fn small_blob(&self, r: &OciRef, hex: &str) -> Result<Vec<u8>, Fail> {
        let url = self.transport.url(r, "blobs", &format!("sha256:{hex}"));
        let resp = self.transport.send(r, &Request::get(url.clone(), "*/*")).await?;
        let bytes =
            read_bounded(resp, MAX_SMALL_BYTES).await.map_err(|e| Fail::answered(format!("blob {url}: {e}")))?;
        if sha256_hex(&bytes) != hex {
            return Err(Fail::answered(format!("blob {url}: content does not have the digest it was asked by")));
        }
        Ok(bytes)
    }

    /// Streams the component into `sink`, counting, hashing: `Ok` only if
    /// exactly the manifest's size arrived with the manifest's digest.
    async fn download(&self, r: &OciRef, c: &Component, sink: &mut Sink) -> Result<(), Fail> {
        let url = self.transport.url(r, "blobs", &format!("sha256:{}", c.hex));
        let size = c.size;
        let mut resp = self.transport.send(r, &Request::get(url.clone(), "*/*")).await?;
        if let Some(len) = resp.content_length() {
            if len != size {
                return Err(Fail::answered(format!(
                    "blob {url}: the registry announces {len} bytes, the manifest says {size}; not downloaded"
                )));
            }
        }
        let mut hasher = Sha256::new();
        let mut received = 0u64;
        // A body that breaks off is the registry going away; anything
        // else is an answer.
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| Fail::unreachable(format!("blob {url}: {}", self.transport.describe(&e, &url))))?
        {
            if received + chunk.len() as u64 > size {
                return Err(Fail::answered(format!(
                    "blob {url}: the registry sends more than the manifest's {size} bytes"
                )));
            }
            received += chunk.len() as u64;
            hasher.update(&chunk);
            sink.write(&chunk)?;
        }
        if received < size {
            return Err(Fail::unreachable(format!("blob {url}: the body ended after {received} of {size} bytes")));
        }
        let actual = crate::files::hex(&hasher.finalize());
        if actual != c.hex {
            return Err(Fail::answered(format!(
                "blob {url}: content has digest sha256:{actual}, not sha256:{} (the manifest's)",
                c.hex
            )));
        }
        Ok(())
    }

    /// Finds a signature of `manifest_hex` by one of `keys` in the registry;
    /// returns the signer and the signature manifest's digest.
    async fn signature_online(
        &self,
        r: &OciRef,
        manifest_hex: &str,
        keys: &[TrustedKey],
    ) -> Result<(String, String), Fail> {
        let tag = sign::signature_tag(manifest_hex);
        let (bytes, sig_hex) = self
            .manifest(r, &tag, None)
            .await
            .map_err(|f| f.context(&format!("no signature could be read (tag {tag})")))?;
        let mut payloads = HashMap::new();
        for (hex, _) in signature_layers(&bytes)? {
            if let std::collections::hash_map::Entry::Vacant(v) = payloads.entry(hex.clone()) {
                v.insert(self.small_blob(r, &hex).await?);
            }
        }
        // The registry answered with a signature the host does not accept.
        let signer = check_signature(&bytes, &payloads, manifest_hex, keys, &repository_of(r))
            .map_err(|e| Fail::answered(crate::text::chain(&e)))?;
        if let Some(cache) = &self.cache {
            cache.put(&bytes)?;
            for p in payloads.values() {
                cache.put(p)?;
            }
        }
        Ok((signer, sig_hex))
    }

    /// What `source` needs before anything is asked: its keys, a pin or a
    /// key for a tag, and HTTPS for a signature unless allowed otherwise.
    fn preflight(&self, source: &Source) -> Result<Vec<TrustedKey>, SourceRefused> {
        let keys = keys_for(source, &self.settings)?;
        check_pinning(&source.reference, keys.len())?;
        check_transport(&self.settings, &source.reference, keys.len())?;
        Ok(keys)
    }

    /// Resolves a policy's source: from the registry, else from the cache
    /// (saying why). Runs under `[registry] timeout-ms`.
    pub async fn resolve(&self, source: &Source) -> Result<Resolved, RegistryError> {
        let reference = source.reference.to_string();
        let fail = |reason: String| RegistryError { reference: reference.clone(), reason };
        let keys = self.preflight(source).map_err(|e| fail(e.to_string()))?;
        // A pinned digest that the cache holds in full needs no registry.
        if source.reference.digest.is_some() {
            if let Ok(mut found) = self.cached(source, &keys) {
                found.provenance.from_cache = Some(CacheUse::Pinned);
                return Ok(found);
            }
        }
        let error = match self.online(source, &keys, Dest::Node).await {
            Ok(p) => {
                let bytes = p.bytes.expect("a pull for the node keeps the bytes");
                return Ok(Resolved { bytes, digest: p.digest, provenance: p.provenance });
            }
            // The registry answered (a missing or wrong signature, a
            // refused credential, a manifest that is not a wasm artifact):
            // that is the answer, and the cache does not overrule it.
            Err(f) if f.answered => return Err(fail(f.reason)),
            Err(f) => f.reason,
        };
        match self.cached(source, &keys) {
            Ok(mut found) => {
                tracing::warn!(
                    reference = %reference,
                    error = %error,
                    manifest = %found.provenance.manifest,
                    "registry unavailable: the policy is loaded from the node's cache"
                );
                found.provenance.from_cache = Some(CacheUse::Unreachable { error });
                Ok(found)
            }
            Err(cached) => Err(fail(match self.cache {
                Some(_) => {
                    format!("{error} (and the node's cache has no usable copy: {})", crate::text::chain(&cached))
                }
                None => error,
            })),
        }
    }

    /// Pulls `source` from the registry (never the cache) into `output`,
    /// written whole or not at all: the component streams into a
    /// temporary file beside it, renamed once its digest is right. Runs
    /// under `[registry] timeout-ms`. Returns the component's digest and
    /// where it came from.
    pub async fn pull_to_file(&self, source: &Source, output: &Path) -> Result<(String, Provenance), RegistryError> {
        let fail = |reason: String| RegistryError { reference: source.reference.to_string(), reason };
        let keys = self.preflight(source).map_err(|e| fail(e.to_string()))?;
        let pulled = self.online(source, &keys, Dest::File(output)).await.map_err(|f| fail(f.reason))?;
        Ok((pulled.digest, pulled.provenance))
    }

    /// The online pull under the deadline.
    async fn online(&self, source: &Source, keys: &[TrustedKey], dest: Dest<'_>) -> Result<Pulled, Fail> {
        let timeout = self.settings.timeout();
        match tokio::time::timeout(timeout, self.pull(source, keys, dest)).await {
            Ok(result) => result,
            Err(_) => Err(Fail::unreachable(format!(
                "the registry did not complete the pull within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    /// Manifest, signature, component: each checked before the next.
    async fn pull(&self, source: &Source, keys: &[TrustedKey], dest: Dest<'_>) -> Result<Pulled, Fail> {
        let r = &source.reference;
        let (manifest, manifest_hex) = self.manifest(r, &r.manifest_ref(), r.digest.as_deref()).await?;
        let component = check_wasm(&manifest, self.max_blob)?;
        let (signer, signature) = if keys.is_empty() {
            (None, None)
        } else {
            let (signer, sig) = self.signature_online(r, &manifest_hex, keys).await?;
            (Some(signer), Some(sig))
        };
        let bytes = match dest {
            Dest::Node => Some(self.component_for_node(r, &component).await?),
            Dest::File(output) => {
                let (file, temp) = temp_beside(output)?;
                let mut sink = Sink::File { file, path: temp.clone() };
                if let Err(f) = self.download(r, &component, &mut sink).await {
                    sink.discard();
                    return Err(f);
                }
                let Sink::File { file, .. } = sink else { unreachable!("made as a file") };
                let done = file.sync_all().and_then(|()| std::fs::rename(&temp, output));
                if let Err(e) = done {
                    let _ = std::fs::remove_file(&temp);
                    return Err(FileError::Write { path: output.to_path_buf(), source: e }.into());
                }
                None
            }
        };
        if let Some(cache) = &self.cache {
            cache.put(&manifest)?;
            cache.put_ref(&RefRecord { reference: r.to_string(), manifest: manifest_hex.clone(), signature })?;
        }
        Ok(Pulled {
            bytes,
            digest: component.hex,
            provenance: Provenance {
                source: r.to_string(),
                manifest: format!("sha256:{manifest_hex}"),
                signer,
                from_cache: None,
            },
        })
    }

    /// The component's bytes for the node: from the cache if it holds them
    /// (checked), else downloaded through the cache (a temporary file,
    /// renamed once verified, read back checked) or, with no cache, into
    /// memory.
    async fn component_for_node(&self, r: &OciRef, c: &Component) -> Result<Vec<u8>, Fail> {
        let Some(cache) = &self.cache else {
            let mut sink = Sink::Memory(Vec::with_capacity(c.size.min(1 << 20) as usize));
            self.download(r, c, &mut sink).await?;
            let Sink::Memory(bytes) = sink else { unreachable!("made in memory") };
            return Ok(bytes);
        };
        if let Ok(bytes) = cache.get(&c.hex, self.max_blob) {
            return Ok(bytes);
        }
        let (file, path) = cache.temp_file()?;
        let mut sink = Sink::File { file, path };
        if let Err(f) = self.download(r, c, &mut sink).await {
            sink.discard();
            return Err(f);
        }
        let Sink::File { file, path } = sink else { unreachable!("made as a file") };
        cache.commit(file, &path, &c.hex)?;
        Ok(cache.get(&c.hex, self.max_blob)?)
    }

    /// Everything checked again from the cache: the manifest by digest, the
    /// component by the manifest's digest, the signature by the keys.
    fn cached(&self, source: &Source, keys: &[TrustedKey]) -> Result<Resolved, NotCached> {
        let cache = self.cache.as_ref().ok_or(NotCached::NoCache)?;
        let r = &source.reference;
        let record = cache.get_ref(&r.to_string()).ok();
        let manifest_hex = match (&r.digest, &record) {
            (Some(d), _) => d.clone(),
            (None, Some(rec)) => rec.manifest.clone(),
            (None, None) => return Err(NotCached::NeverPulled),
        };
        let manifest = cache.get(&manifest_hex, MAX_MANIFEST_BYTES)?;
        let component = check_wasm(&manifest, self.max_blob)?;
        let signer = if keys.is_empty() {
            None
        } else {
            let sig_hex = record
                .as_ref()
                .filter(|rec| rec.manifest == manifest_hex)
                .and_then(|rec| rec.signature.clone())
                .ok_or(NotCached::NoSignature)?;
            let sig = cache.get(&sig_hex, MAX_MANIFEST_BYTES)?;
            let mut payloads = HashMap::new();
            for (hex, _) in signature_layers(&sig)? {
                let p = cache.get(&hex, MAX_SMALL_BYTES)?;
                payloads.insert(hex, p);
            }
            Some(check_signature(&sig, &payloads, &manifest_hex, keys, &repository_of(r))?)
        };
        let bytes = cache.get(&component.hex, self.max_blob)?;
        Ok(Resolved {
            bytes,
            digest: component.hex,
            provenance: Provenance {
                source: r.to_string(),
                manifest: format!("sha256:{manifest_hex}"),
                signer,
                from_cache: Some(CacheUse::Pinned),
            },
        })
    }

    /// Where a tag points now (digest hex), for the periodic tag check: a
    /// failure says whether the registry answered at all
    /// ([`TagCheckError::answered`]), so that a missing tag or a refused
    /// credential is not taken for an outage.
    pub async fn check_tag(&self, r: &OciRef) -> Result<String, TagCheckError> {
        let fail = |reason: String, answered: bool| TagCheckError {
            error: RegistryError { reference: r.to_string(), reason },
            answered,
        };
        let at = r.manifest_ref();
        let work = self.manifest(r, &at, r.digest.as_deref());
        match tokio::time::timeout(self.settings.timeout(), work).await {
            Ok(Ok((_, hex))) => Ok(hex),
            Ok(Err(f)) => Err(fail(f.reason, f.answered)),
            Err(_) => Err(fail(format!("no answer within {} ms", self.settings.timeout_ms), false)),
        }
    }

    /// The digest (hex) a reference names now, from the registry.
    pub async fn head(&self, r: &OciRef) -> Result<String, RegistryError> {
        self.check_tag(r).await.map_err(|e| e.error)
    }
}

/// A new file beside `output` for a download (mode 0644 less the umask).
fn temp_beside(output: &Path) -> Result<(std::fs::File, PathBuf), FileError> {
    let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Some(name) = output.file_name() else {
        let source = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name");
        return Err(FileError::Create { path: output.to_path_buf(), source });
    };
    let temp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), crate::files::unique_suffix()));
    match std::fs::File::options().write(true).create_new(true).open(&temp) {
        Ok(file) => Ok((file, temp)),
        Err(source) => Err(FileError::Create { path: temp, source }),
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
) -> Result<String, SignatureRefused> {
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
    Err(match (named_other, other_repository) {
        (_, Some(r)) => SignatureRefused::OtherRepository {
            want,
            signed_for: crate::text::guest_text(&r, 200),
            repository: repository.to_string(),
        },
        (Some(d), None) => SignatureRefused::OtherManifest { want, named: crate::text::guest_text(&d, 100) },
        (None, None) => SignatureRefused::NoKeyVerifies {
            want,
            keys: keys.iter().map(|k| k.path.display().to_string()).collect::<Vec<_>>().join(", "),
        },
    })
}

/// Why no signature of a manifest is accepted.
#[derive(Debug, thiserror::Error)]
pub enum SignatureRefused {
    /// The signature manifest is not one.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A trusted key signed it for another repository.
    #[error(
        "the signature of {want} was made for {signed_for}, not for {repository} \
         (critical.identity.docker-reference): refused"
    )]
    OtherRepository {
        /// `sha256:` and the manifest's digest.
        want: String,
        /// The repository the payload names (escaped, clipped).
        signed_for: String,
        /// The repository the policy is pulled from.
        repository: String,
    },
    /// The payload names another manifest.
    #[error("the signature payload names {named}, not {want}: refused")]
    OtherManifest {
        /// `sha256:` and the manifest's digest.
        want: String,
        /// What the payload names (escaped, clipped).
        named: String,
    },
    /// No signature verifies with a configured key.
    #[error("no signature of {want} verifies with the configured keys ({keys}): refused")]
    NoKeyVerifies {
        /// `sha256:` and the manifest's digest.
        want: String,
        /// The keys' files.
        keys: String,
    },
}

/// Why the node's cache has no usable copy of a policy.
#[derive(Debug, thiserror::Error)]
pub enum NotCached {
    /// The node keeps no cache.
    #[error("no cache")]
    NoCache,
    /// A tag never pulled on this node.
    #[error("the reference was never pulled on this node")]
    NeverPulled,
    /// A signature is required and none was kept with the copy.
    #[error("no signature of it was kept")]
    NoSignature,
    /// An entry could not be read or failed its check.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The kept manifest is not a wasm artifact's.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The kept signature is not accepted.
    #[error(transparent)]
    Signature(#[from] SignatureRefused),
}

/// `registry/repository`, as a signature payload names it.
fn repository_of(r: &OciRef) -> String {
    format!("{}/{}", r.registry, r.repository)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::manifest::{signature_manifest, Descriptor, OCI_CONFIG};

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
            let manifest = signature_manifest(
                Descriptor::of(OCI_CONFIG, b"{}"),
                Descriptor::of(sign::SIMPLE_SIGNING, &payload),
                key.sign(&payload),
            );
            (manifest.to_bytes(), HashMap::from([(sha256_hex(&payload), payload)]))
        };
        let (m, p) = signed_for("h:5000/team/p");
        assert!(check_signature(&m, &p, &manifest_hex, &keys, "h:5000/team/p").is_ok());
        let (m, p) = signed_for("h:5000/other/q");
        let e = check_signature(&m, &p, &manifest_hex, &keys, "h:5000/team/p").unwrap_err();
        let SignatureRefused::OtherRepository { signed_for, repository, .. } = &e else { panic!("{e}") };
        assert_eq!((signed_for.as_str(), repository.as_str()), ("h:5000/other/q", "h:5000/team/p"));
        assert!(e.to_string().contains("refused"), "{e}");
    }

    /// `pull`'s output is written whole or not at all: a download that
    /// fails leaves neither the output nor a temporary file.
    #[test]
    fn a_temporary_file_beside_the_output_is_unguessable_and_new() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p.wasm");
        let (_, a) = temp_beside(&out).unwrap();
        let (_, b) = temp_beside(&out).unwrap();
        assert_ne!(a, b);
        assert!(a.parent() == Some(dir.path()) && a.file_name().unwrap().to_string_lossy().starts_with(".p.wasm.tmp-"));
        Sink::File { file: std::fs::File::open(&a).unwrap(), path: a.clone() }.discard();
        assert!(!a.exists());
    }

    /// A cache directory that cannot be made (a read-only root, a path
    /// through a file) leaves the client working, without a cache.
    #[test]
    fn a_cache_that_cannot_be_made_leaves_the_client_working() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let settings = RegistrySettings { cache_dir: Some(file.join("oci")), ..RegistrySettings::default() };
        let registry = Registry::new(&settings, 1 << 20).unwrap();
        assert!(registry.cache.is_none());
    }
}
