//! The one HTTP client the host speaks to registries with, for pulls (the
//! node, `check`, `pull`, `verify`) and pushes (`push`, `sign`) alike:
//! which scheme a registry is reached with, which CAs are trusted, how a
//! challenge is answered, and what a failure says.
//!
//! Trust is assembled here rather than left to the platform verifier, so
//! that the client builds on a host with no CA certificates at all (a
//! minimal container image): the roots are `[registry] ca-file`'s
//! certificates and the system's store if there is one (`SSL_CERT_FILE`,
//! `SSL_CERT_DIR`, the distribution's bundle). No root set is compiled in:
//! which CAs a node trusts to hand it code is the operator's choice, kept
//! current by the node's own CA package (or a mounted bundle), not frozen
//! into a binary that cannot drop a distrusted CA until it is rebuilt. A
//! host with no root at all still starts; a pull over HTTPS then fails
//! saying so and what to do.
//!
//! A TLS failure is reported with its cause in words (the certificate is
//! not signed by a trusted CA, is a CA certificate used as a server's, is
//! for another name, has expired; the server does not speak TLS) and what
//! to do about it, found from the typed TLS error, never its text.
//!
//! Plain HTTP only for the registries `[registry] plain-http` lists, by
//! exact `host[:port]`: their URLs are `http://`, a redirect may lead to
//! `http://` only on such a registry, and credentials travel over plain
//! HTTP only to a loopback address. Everything else is HTTPS.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};

use super::auth::{AuthFile, Credentials};
use super::{OciRef, RegistrySettings, MAX_SMALL_BYTES};
use crate::files::FileError;

/// Installs the TLS crypto provider once (rustls on ring).
pub fn crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Why one step failed, and whether the registry answered (an HTTP status,
/// a refused challenge, a body that does not match its digest) or could
/// not be reached (connection, TLS, a `5xx`, no answer): only the latter
/// lets the node's cache stand in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fail {
    /// What went wrong.
    pub(crate) reason: String,
    /// The registry answered.
    pub(crate) answered: bool,
}

impl Fail {
    /// The registry's answer (or a check of it) refused it.
    pub(crate) fn answered(reason: impl Into<String>) -> Self {
        Self { reason: reason.into(), answered: true }
    }

    /// The registry could not be reached.
    pub(crate) fn unreachable(reason: impl Into<String>) -> Self {
        Self { reason: reason.into(), answered: false }
    }

    /// The same failure, its reason prefixed.
    pub(crate) fn context(self, prefix: &str) -> Self {
        Self { reason: format!("{prefix}: {}", self.reason), ..self }
    }
}

/// The node's cache failed while the registry had answered: the pull
/// fails as if the answer were refused.
impl From<super::cache::CacheError> for Fail {
    fn from(e: super::cache::CacheError) -> Self {
        Self::answered(crate::text::chain(&e))
    }
}

/// The registry answered with a manifest the host does not take.
impl From<super::manifest::ManifestError> for Fail {
    fn from(e: super::manifest::ManifestError) -> Self {
        Self::answered(crate::text::chain(&e))
    }
}

/// A file of ours (a download's) failed while the registry had answered.
impl From<FileError> for Fail {
    fn from(e: FileError) -> Self {
        Self::answered(crate::text::chain(&e))
    }
}

impl From<String> for Fail {
    fn from(reason: String) -> Self {
        Self::answered(reason)
    }
}

/// Which CAs are trusted, for errors.
#[derive(Debug, Clone, Default)]
struct Trust {
    ca_file: Option<PathBuf>,
    from_ca_file: usize,
    from_system: usize,
}

impl Trust {
    fn describe(&self) -> String {
        let file = self.ca_file.as_ref().map(|p| p.display().to_string());
        match (self.from_ca_file, self.from_system, file) {
            (0, 0, _) => "this host trusts no CA at all: the system has no CA certificates (SSL_CERT_FILE, \
                          SSL_CERT_DIR, /etc/ssl/certs) and no ca-file is given"
                .to_string(),
            (0, n, _) => format!("trusted: the system's {n} CA certificates, no ca-file"),
            (m, 0, Some(f)) => format!("trusted: {m} certificate(s) of {f}, no system CA certificates"),
            (m, n, f) => format!("trusted: {m} certificate(s) of {}, and the system's {n}", f.unwrap_or_default()),
        }
    }
}

/// Why a CA file cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// It cannot be read, is not a regular file, or is too large.
    #[error(transparent)]
    Read(FileError),
    /// It is not PEM.
    #[error("{}: not PEM certificates", path.display())]
    NotPem {
        /// The file.
        path: PathBuf,
        /// What the PEM reader said.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// It is PEM, without a certificate.
    #[error("{}: holds no PEM certificate", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A certificate of it cannot anchor trust.
    #[error("{}: certificate {index} cannot be a trust anchor", path.display())]
    NotAnchor {
        /// The file.
        path: PathBuf,
        /// Which, from 1.
        index: usize,
        /// What the TLS library said.
        #[source]
        source: rustls::Error,
    },
}

/// Why a registry client cannot be made from `[registry]`.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `[registry] ca-file` cannot be used.
    #[error("[registry] ca-file")]
    Ca(#[source] CaError),
    /// The TLS library refused its configuration.
    #[error("[registry]: setting up TLS failed")]
    Tls(#[source] rustls::Error),
    /// The HTTP client could not be built.
    #[error("[registry]: setting up the HTTP client failed")]
    Http(#[source] reqwest::Error),
}

/// Reads a PEM file of CA certificates.
pub fn read_ca(path: &std::path::Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, CaError> {
    use rustls::pki_types::pem::PemObject;
    let pem = super::read_small(path).map_err(CaError::Read)?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| CaError::NotPem { path: path.to_path_buf(), source })?;
    if certs.is_empty() {
        return Err(CaError::Empty { path: path.to_path_buf() });
    }
    Ok(certs)
}

/// The TLS configuration: the ca-file's certificates and the system's.
fn tls(settings: &RegistrySettings) -> Result<(rustls::ClientConfig, Trust), ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    let mut trust = Trust { ca_file: settings.ca_file.clone(), ..Trust::default() };
    if let Some(path) = &settings.ca_file {
        for (i, cert) in read_ca(path).map_err(ClientError::Ca)?.into_iter().enumerate() {
            roots.add(cert).map_err(|source| {
                ClientError::Ca(CaError::NotAnchor { path: path.to_path_buf(), index: i + 1, source })
            })?;
            trust.from_ca_file += 1;
        }
    }
    // Unreadable or odd system certificates are skipped: the system's
    // store is what it is, and the ca-file may be all that is needed.
    let system = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(system.certs);
    trust.from_system = added;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ClientError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((config, trust))
}

/// The one client.
#[derive(Debug)]
pub(crate) struct Transport {
    http: reqwest::Client,
    trust: Trust,
    plain: Arc<Vec<String>>,
    auth: Option<AuthFile>,
    timeout: Duration,
    /// The `Authorization` that worked last, per registry and repository.
    authorization: Mutex<HashMap<String, HeaderValue>>,
}

/// A request to a registry.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// GET, HEAD, POST, PUT.
    pub(crate) method: Method,
    /// Where.
    pub(crate) url: String,
    /// `Accept`.
    pub(crate) accept: Option<&'static str>,
    /// `Content-Type` of the body.
    pub(crate) content_type: Option<&'static str>,
    /// The body (cloned for the retry after a challenge).
    pub(crate) body: Option<bytes::Bytes>,
    /// Whether push access is asked for (the default scope of a token).
    pub(crate) push: bool,
}

impl Request {
    /// A GET of `url` accepting `accept`.
    pub(crate) fn get(url: String, accept: &'static str) -> Self {
        Self { method: Method::GET, url, accept: Some(accept), content_type: None, body: None, push: false }
    }
}

/// Whether `host[:port]` is a loopback address or `localhost`. An IPv6
/// address is written in brackets (`[::1]:5000`), as in a URL.
pub(crate) fn is_loopback(registry: &str) -> bool {
    if let Some(rest) = registry.strip_prefix('[') {
        let Some((address, after)) = rest.split_once(']') else { return false };
        let port_only =
            after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
        return port_only && address.parse::<std::net::Ipv6Addr>().is_ok_and(|a| a.is_loopback());
    }
    let host = match registry.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => registry,
    };
    host == "localhost" || host.parse::<std::net::Ipv4Addr>().is_ok_and(|a| a.is_loopback())
}

/// Whether `registry` is one of `plain` (the `plain-http` list). A URL
/// leaves HTTP's own port out of its authority, so `host:80` and `host`
/// are the same registry here.
fn listed(plain: &[String], registry: &str) -> bool {
    let bare = |r: &str| r.strip_suffix(":80").unwrap_or(r).to_string();
    plain.iter().any(|p| bare(p) == bare(registry))
}

/// `host[:port]` of a URL, as a registry is named.
fn authority(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        _ => String::new(),
    }
}

impl Transport {
    /// A client for `settings`.
    pub(crate) fn new(settings: &RegistrySettings) -> Result<Self, ClientError> {
        crypto();
        let (tls, trust) = tls(settings)?;
        let plain = Arc::new(settings.plain_http.clone());
        let allowed = plain.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 10 {
                return attempt.error("redirect loop or more than 10 redirects");
            }
            let url = attempt.url();
            if url.scheme() == "https" || (url.scheme() == "http" && listed(&allowed, &authority(url))) {
                attempt.follow()
            } else {
                let to = url.to_string();
                attempt.error(format!("redirected to {to}, which is not HTTPS (nor a [registry] plain-http registry)"))
            }
        });
        let timeout = settings.timeout();
        let http = reqwest::Client::builder()
            // Every operation has a deadline of its own (`timeout-ms`),
            // which bounds a registry that stalls at any step.
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .redirect(redirects)
            .user_agent(concat!("nri-wasm/", env!("CARGO_PKG_VERSION")))
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(ClientError::Http)?;
        Ok(Self {
            http,
            trust,
            plain,
            auth: settings.auth_file.as_deref().map(AuthFile::new),
            timeout,
            authorization: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `registry` is reached over plain HTTP.
    pub(crate) fn is_plain(&self, registry: &str) -> bool {
        listed(&self.plain, registry)
    }

    /// `https://host[:port]` (or `http://` for a plain-http registry).
    pub(crate) fn base(&self, registry: &str) -> String {
        format!("{}://{registry}", if self.is_plain(registry) { "http" } else { "https" })
    }

    /// `<base>/v2/<repository>/<what>/<name>`.
    pub(crate) fn url(&self, r: &OciRef, what: &str, name: &str) -> String {
        format!("{}/v2/{}/{what}/{name}", self.base(&r.registry), r.repository)
    }

    /// Whether a URL may be used: HTTPS, or HTTP on a plain-http registry.
    fn allowed(&self, url: &str) -> Result<Url, Fail> {
        let parsed = Url::parse(url).map_err(|e| Fail::answered(format!("{:?} is not a URL ({e})", clip(url))))?;
        match parsed.scheme() {
            "https" => Ok(parsed),
            "http" if self.is_plain(&authority(&parsed)) => Ok(parsed),
            _ => Err(Fail::answered(format!(
                "{} is not HTTPS, and {} is not listed in [registry] plain-http: refused",
                clip(url),
                authority(&parsed)
            ))),
        }
    }

    /// Sends `req` for the repository of `r`, answering one authentication
    /// challenge; returns the response whatever its status (but 401 after
    /// the challenge was answered).
    pub(crate) async fn send_any(&self, r: &OciRef, req: &Request) -> Result<reqwest::Response, Fail> {
        let url = self.allowed(&req.url)?;
        let key = format!("{}/{}", r.registry, r.repository);
        let mut tried_auth = false;
        loop {
            let auth = self.authorization.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
            let mut builder = self.http.request(req.method.clone(), url.clone());
            if let Some(a) = req.accept {
                builder = builder.header(ACCEPT, a);
            }
            if let Some(t) = req.content_type {
                builder = builder.header(CONTENT_TYPE, t);
            }
            if let Some(a) = auth {
                builder = builder.header(AUTHORIZATION, a);
            }
            if let Some(b) = &req.body {
                builder = builder.body(b.clone());
            }
            let resp = builder.send().await.map_err(|e| Fail::unreachable(self.describe(&e, &req.url)))?;
            if resp.status() == StatusCode::UNAUTHORIZED && !tried_auth {
                tried_auth = true;
                let challenge =
                    resp.headers().get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                let header = self.answer(r, &challenge, req.push).await?;
                self.authorization.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), header);
                continue;
            }
            return Ok(resp);
        }
    }

    /// [`Self::send_any`], a status other than success being a failure
    /// (with the start of the body).
    pub(crate) async fn send(&self, r: &OciRef, req: &Request) -> Result<reqwest::Response, Fail> {
        let resp = self.send_any(r, req).await?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.refusal(req, resp).await)
    }

    /// A response that is not a success, as a failure: a `5xx` says the
    /// registry is there but cannot serve now, as good as unreachable.
    pub(crate) async fn refusal(&self, req: &Request, resp: reqwest::Response) -> Fail {
        let status = resp.status();
        let body = read_bounded(resp, 512).await.unwrap_or_default();
        let text = crate::text::guest_text(&String::from_utf8_lossy(&body), 200);
        let reason = format!(
            "{}{}: HTTP {status}{}",
            if req.method == Method::GET { String::new() } else { format!("{} ", req.method) },
            req.url,
            if text.is_empty() { String::new() } else { format!(": {text}") }
        );
        Fail { reason, answered: !status.is_server_error() }
    }

    /// The credentials for `registry`, if any; refused if they, or what
    /// they buy, would go over plain HTTP to anything but loopback. `over`
    /// is every place they go: the registry for a password, and for a
    /// token both the realm (the credentials) and the registry (the token,
    /// as good as the credentials for its lifetime and scope).
    async fn credentials(&self, registry: &str, over: &[&Url]) -> Result<Option<(Credentials, String)>, Fail> {
        let Some(auth) = &self.auth else { return Ok(None) };
        let found =
            auth.credentials(registry, self.timeout).await.map_err(|e| Fail::answered(crate::text::chain(&e)))?;
        let Some(found) = found else { return Ok(None) };
        if let Some(plain) = over.iter().find(|u| u.scheme() != "https" && !is_loopback(&authority(u))) {
            return Err(Fail::answered(format!(
                "the credentials for {registry} ({}){} would be sent over plain HTTP to {}: refused (serve the \
                 registry over HTTPS, or use it without credentials)",
                found.from,
                if std::ptr::eq(*plain, over[0]) { "" } else { ", as the token they buy," },
                authority(plain)
            )));
        }
        Ok(Some((found.credentials, found.from)))
    }

    /// The `Authorization` for a challenge: basic, or a bearer token.
    async fn answer(&self, r: &OciRef, challenge: &str, push: bool) -> Result<HeaderValue, Fail> {
        let lower = challenge.to_ascii_lowercase();
        let base = Url::parse(&self.base(&r.registry)).map_err(|e| Fail::answered(e.to_string()))?;
        if lower.starts_with("basic") {
            let where_from = match &self.auth {
                Some(a) => format!("the auth file {}", a.path().display()),
                None => "no auth file is given ([registry] auth-file, --auth-file)".to_string(),
            };
            return match self.credentials(&r.registry, &[&base]).await? {
                Some((Credentials::Basic { username, password }, _)) => basic(&username, &password),
                Some((Credentials::IdentityToken(_), from)) => Err(Fail::answered(format!(
                    "the registry asks for a password and {from} gives an identity token, which only a token \
                     realm takes"
                ))),
                None => Err(Fail::answered(format!(
                    "the registry asks for a password and there are no credentials for {} ({where_from})",
                    r.registry
                ))),
            };
        }
        if !lower.starts_with("bearer") {
            return Err(Fail::answered(format!(
                "the registry refused access with an unknown challenge {:?}",
                clip(challenge)
            )));
        }
        let params = challenge_params(&challenge[6..]);
        let realm = params.get("realm").ok_or(Fail::answered("the registry's bearer challenge names no realm"))?;
        let realm_url = self.allowed(realm).map_err(|f| f.context("the token realm"))?;
        let actions = if push { "pull,push" } else { "pull" };
        let scope = params.get("scope").cloned().unwrap_or_else(|| format!("repository:{}:{actions}", r.repository));
        let service = params.get("service").cloned();
        let fail = |e: String| Fail::answered(format!("token from {realm}: {e}"));
        let req = match self.credentials(&r.registry, &[&realm_url, &base]).await? {
            // OAuth2 with a refresh token, as docker uses an identity token.
            Some((Credentials::IdentityToken(token), _)) => {
                let mut form = Url::parse("http://form/").expect("a constant URL");
                {
                    let mut q = form.query_pairs_mut();
                    q.append_pair("grant_type", "refresh_token")
                        .append_pair("client_id", "nri-wasm")
                        .append_pair("refresh_token", &token)
                        .append_pair("scope", &scope);
                    if let Some(s) = &service {
                        q.append_pair("service", s);
                    }
                }
                let body = form.query().unwrap_or_default().to_string();
                self.http.post(realm_url).header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(body)
            }
            other => {
                let mut url = realm_url;
                {
                    let mut q = url.query_pairs_mut();
                    q.append_pair("scope", &scope);
                    if let Some(s) = &service {
                        q.append_pair("service", s);
                    }
                }
                let mut req = self.http.get(url);
                if let Some((Credentials::Basic { username, password }, _)) = other {
                    req = req.header(AUTHORIZATION, basic(&username, &password)?);
                }
                req
            }
        };
        let resp = req
            .send()
            .await
            .map_err(|e| Fail::unreachable(format!("token from {realm}: {}", self.describe(&e, realm))))?;
        let status = resp.status();
        let body = read_bounded(resp, MAX_SMALL_BYTES).await.map_err(|e| fail(e.to_string()))?;
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}")));
        }
        let json: serde_json::Value =
            serde_json::from_slice(&body).map_err(|_| fail("the answer is not JSON".into()))?;
        let token = json
            .get("token")
            .or_else(|| json.get("access_token"))
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| fail("the answer has no token".into()))?;
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| fail("the token is not a header value".into()))
    }

    /// A transport error with its cause in words, and for a TLS failure,
    /// what to do about it.
    pub(crate) fn describe(&self, e: &reqwest::Error, url: &str) -> String {
        let host = Url::parse(url).map(|u| authority(&u)).unwrap_or_default();
        if let Some(tls) = tls_cause(e) {
            return format!("{url}: {}", self.explain_tls(tls, &host));
        }
        let mut text = chain(e);
        if e.is_redirect() && !text.contains("redirect") {
            text.push_str(" (redirect loop or more than 10 redirects)");
        }
        text
    }

    fn explain_tls(&self, e: &rustls::Error, host: &str) -> String {
        use rustls::CertificateError as C;
        let trust_it = "give the certificate (PEM) of the CA that signed it with --ca-file or [registry] ca-file";
        match e {
            rustls::Error::InvalidCertificate(C::UnknownIssuer) => format!(
                "TLS: the registry's certificate is not signed by a CA this host trusts (UnknownIssuer); {}: \
                 {trust_it}",
                self.trust.describe()
            ),
            rustls::Error::InvalidCertificate(C::Other(other))
                if matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity)) =>
            {
                format!(
                    "TLS: the registry presents a CA certificate as its own (CaUsedAsEndEntity), as one made by \
                     `openssl req -x509` alone is: give the registry a leaf certificate (basicConstraints \
                     CA:FALSE, subjectAltName naming {host}) signed by a CA, and {trust_it} (docs/operations.md, \
                     \"A local registry\", shows both openssl commands)"
                )
            }
            rustls::Error::InvalidCertificate(C::NotValidForName) => format!(
                "TLS: the registry's certificate is not for {host} (NotValidForName): make one whose \
                 subjectAltName names {host} (DNS: for a name, IP: for an address)"
            ),
            rustls::Error::InvalidCertificate(C::NotValidForNameContext { presented, .. }) => format!(
                "TLS: the registry's certificate is not for {host} but for {} (NotValidForName): make one whose \
                 subjectAltName names {host} (DNS: for a name, IP: for an address)",
                if presented.is_empty() { "no name at all".to_string() } else { presented.join(", ") }
            ),
            rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
                "TLS: the registry's certificate has expired: renew it (or check this host's clock)".to_string()
            }
            rustls::Error::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
                "TLS: the registry's certificate is not valid yet: check this host's clock".to_string()
            }
            rustls::Error::InvalidCertificate(C::InvalidPurpose | C::InvalidPurposeContext { .. }) => {
                "TLS: the registry's certificate is not for TLS servers: give it extendedKeyUsage serverAuth"
                    .to_string()
            }
            rustls::Error::InvalidCertificate(other) => {
                format!("TLS: the registry's certificate is refused ({other:?}); {}", self.trust.describe())
            }
            rustls::Error::InvalidMessage(_) => format!(
                "TLS: the registry did not answer in TLS ({e}): if {host} serves plain HTTP on purpose, list it in \
                 [registry] plain-http"
            ),
            other => format!("TLS: {other}"),
        }
    }
}

/// The TLS error somewhere in `e`'s causes (inside an `io::Error` too).
fn tls_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        // `io::Error::source` skips the error it wraps: look inside.
        if let Some(inner) = err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            if let Some(t) = tls_cause(inner) {
                return Some(t);
            }
        }
        next = err.source();
    }
    None
}

/// An error and its causes on one line.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

fn basic(username: &str, password: &str) -> Result<HeaderValue, Fail> {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    HeaderValue::from_str(&format!("Basic {token}"))
        .map_err(|_| Fail::answered("the credentials are not a header value"))
}

/// A response's body that was not read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Larger than the bound: said so up front (`read: false`), or found
    /// on the way.
    #[error("the body is larger than {max} bytes; not read{}", if *read { " further" } else { "" })]
    TooLarge { max: u64, read: bool },
    /// The connection failed while it was read.
    #[error("{}", chain(.0))]
    Read(reqwest::Error),
}

/// Reads a response's body, failing past `max` bytes.
pub(crate) async fn read_bounded(mut resp: reqwest::Response, max: u64) -> Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(BodyError::TooLarge { max, read: false });
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(BodyError::Read)? {
        if out.len() as u64 + chunk.len() as u64 > max {
            return Err(BodyError::TooLarge { max, read: true });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
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

    #[test]
    fn loopback_is_recognised() {
        for (r, yes) in [
            ("localhost:5000", true),
            ("127.0.0.1:5000", true),
            ("127.1.2.3", true),
            ("localhost", true),
            ("10.0.0.1:5000", false),
            ("registry.local:5000", false),
            ("localhost.example.com", false),
            ("[::1]:5000", true),
            ("[::1]", true),
            ("[0:0:0:0:0:0:0:1]:443", true),
            ("[::2]:5000", false),
            ("[::ffff:10.0.0.1]:5000", false),
            ("[::1]x:5000", false),
            ("[::1]:50a0", false),
            ("[::1", false),
        ] {
            assert_eq!(is_loopback(r), yes, "{r}");
        }
    }

    /// Only HTTPS, and HTTP to a listed registry; the scheme of the
    /// registry's URLs follows the list.
    #[test]
    fn plain_http_only_where_listed() {
        let settings = RegistrySettings {
            cache_dir: None,
            plain_http: vec!["localhost:5000".into(), "[::1]:80".into(), "10.0.0.7".into()],
            ..RegistrySettings::default()
        };
        let t = Transport::new(&settings).unwrap();
        assert_eq!(t.base("localhost:5000"), "http://localhost:5000");
        // HTTP's own port, which a URL leaves out, named or not.
        assert_eq!(t.base("[::1]:80"), "http://[::1]:80");
        assert!(t.allowed("http://[::1]:80/v2/").is_ok() && t.allowed("http://[::1]/v2/").is_ok());
        assert!(t.allowed("http://10.0.0.7:80/v2/").is_ok());
        assert!(t.allowed("http://[::1]:5000/v2/").is_err());
        assert_eq!(t.base("localhost:5001"), "https://localhost:5001");
        assert!(t.allowed("http://localhost:5000/v2/").is_ok());
        assert!(t.allowed("https://localhost:5001/v2/").is_ok());
        let e = t.allowed("http://localhost:5001/v2/").unwrap_err();
        assert!(e.reason.contains("plain-http") && e.reason.contains("localhost:5001"), "{e:?}");
        assert!(t.allowed("ftp://localhost:5000/").is_err());
    }

    /// A CA file that cannot anchor trust keeps the client from being made,
    /// and says why in one line, each cause once; the kind of failure is
    /// the error's type, not its text.
    #[test]
    fn a_ca_file_that_cannot_be_used_is_named_with_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let client = |path: &std::path::Path| {
            let settings = RegistrySettings { ca_file: Some(path.to_path_buf()), ..RegistrySettings::default() };
            Transport::new(&settings).map(|_| ()).unwrap_err()
        };
        let missing = dir.path().join("missing.pem");
        let e = client(&missing);
        assert!(
            matches!(&e, ClientError::Ca(CaError::Read(f)) if f.io().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)),
            "{e:?}"
        );
        let shown = crate::text::chain(&e);
        assert!(shown.starts_with(&format!("[registry] ca-file: cannot read {}: ", missing.display())), "{shown}");

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        assert!(matches!(client(&empty), ClientError::Ca(CaError::Empty { .. })));

        let broken = dir.path().join("broken.pem");
        std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n").unwrap();
        let e = client(&broken);
        assert!(matches!(&e, ClientError::Ca(CaError::NotPem { .. })), "{e:?}");
        let shown = crate::text::chain(&e);
        assert!(
            shown.starts_with(&format!("[registry] ca-file: {}: not PEM certificates: ", broken.display())),
            "{shown}"
        );

        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
        let e = client(&garbage);
        assert!(matches!(&e, ClientError::Ca(CaError::NotAnchor { index: 1, .. })), "{e:?}");
    }

    /// The client builds with no CA anywhere (a minimal image), and says so
    /// when asked about trust.
    #[test]
    fn trust_is_described() {
        let none = Trust::default();
        assert!(none.describe().contains("trusts no CA at all"), "{}", none.describe());
        let file = Trust { ca_file: Some("/etc/ca.pem".into()), from_ca_file: 1, from_system: 0 };
        assert!(file.describe().contains("/etc/ca.pem"), "{}", file.describe());
    }

    /// Credentials travel over plain HTTP only to loopback; over HTTPS to
    /// anyone the file names.
    #[test]
    fn credentials_are_not_sent_in_clear_beyond_loopback() {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode("u:p");
        let file = dir.path().join("config.json");
        std::fs::write(
            &file,
            format!(r#"{{"auths":{{"reg.example:5000":{{"auth":"{auth}"}},"127.0.0.1:5000":{{"auth":"{auth}"}}}}}}"#),
        )
        .unwrap();
        let settings = RegistrySettings {
            cache_dir: None,
            auth_file: Some(file),
            plain_http: vec!["reg.example:5000".into(), "127.0.0.1:5000".into()],
            ..RegistrySettings::default()
        };
        let t = Transport::new(&settings).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let over = |u: &str| Url::parse(u).unwrap();
        let e = rt.block_on(t.credentials("reg.example:5000", &[&over("http://reg.example:5000/")])).unwrap_err();
        assert!(e.answered && e.reason.contains("plain HTTP") && e.reason.contains("config.json"), "{e:?}");
        let https = over("https://reg.example:5000/");
        assert!(rt.block_on(t.credentials("reg.example:5000", &[&https])).unwrap().is_some());
        let local = over("http://127.0.0.1:5000/");
        assert!(rt.block_on(t.credentials("127.0.0.1:5000", &[&local])).unwrap().is_some());
        // A token realm over HTTPS for a registry reached over plain HTTP:
        // the credentials are safe on their way, the token they buy is
        // not, and it is as good as they are for its lifetime.
        let (realm, plain) = (over("https://auth.example/token"), over("http://reg.example:5000/"));
        let e = rt.block_on(t.credentials("reg.example:5000", &[&realm, &plain])).unwrap_err();
        assert!(e.reason.contains("as the token they buy") && e.reason.contains("to reg.example:5000"), "{e:?}");
        assert!(rt.block_on(t.credentials("127.0.0.1:5000", &[&realm, &local])).unwrap().is_some());
        // IPv6 loopback, named as a URL names it.
        assert_eq!(authority(&over("http://[::1]:5000/")), "[::1]:5000");
        assert!(rt.block_on(t.credentials("127.0.0.1:5000", &[&over("http://[::1]:5000/")])).unwrap().is_some());
    }
}
