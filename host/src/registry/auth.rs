//! Credentials for a registry, found as docker finds them in its
//! `config.json` (`[registry] auth-file`, `--auth-file`).
//!
//! For a registry `host[:port]`: the credential helper `credHelpers` names
//! for it; else the `credsStore` helper; else its entry in `auths` (`auth`,
//! the base64 of `user:password`; or `username` and `password`; or an
//! `identitytoken`). Keys are compared as hosts (`https://host/v1/` is
//! `host`). A helper is the program `docker-credential-<name>` on `PATH`,
//! run as `docker-credential-<name> get` with the registry on its standard
//! input; it answers `{"ServerURL", "Username", "Secret"}` (a `Username` of
//! `<token>` makes the secret an identity token), or says
//! `credentials not found in native keychain` and fails, which is no
//! credentials (anonymous), as for docker. As with docker, a registry a
//! helper serves does not fall back to `auths`.
//!
//! A helper is a program the operator installed, but what it prints is
//! read as untrusted: its name must be a plain name (no path), it runs with
//! a deadline and is killed past it, its output is read up to
//! [`MAX_HELPER_OUTPUT`] bytes, and every failure names the helper, the
//! registry and the file that chose it. The file is read again for each
//! challenge, so rotated credentials (a mounted Secret) are used without a
//! restart; nothing is asked for until a registry asks for credentials.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

/// Most bytes a credential helper may print (its answer, or its error).
pub const MAX_HELPER_OUTPUT: u64 = 64 << 10;
/// Longest a credential helper may take, at most (and never longer than
/// the pull's own deadline).
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// What a helper prints when it has nothing for the registry.
const NOT_FOUND: &str = "credentials not found in native keychain";

/// What proves who the host is to a registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A user and password (HTTP basic, or sent to the token realm).
    Basic {
        /// The user.
        username: String,
        /// The password.
        password: String,
    },
    /// An identity (refresh) token, exchanged at the token realm.
    IdentityToken(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        match self {
            Self::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Self::IdentityToken(_) => f.write_str("IdentityToken(***)"),
        }
    }
}

/// Credentials and where they came from (for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The credentials.
    pub credentials: Credentials,
    /// `auths."host" of FILE`, or `docker-credential-NAME (credHelpers of FILE)`.
    pub from: String,
}

/// Why credentials could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file cannot be read or is not a docker `config.json`.
    #[error("auth file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A helper's name is not a plain name.
    #[error("auth file {path}: credential helper {name:?} ({key}) is not a plain name ([A-Za-z0-9._-]): refused")]
    HelperName {
        /// The file.
        path: String,
        /// Where it is named (`credsStore`, `credHelpers."host"`).
        key: String,
        /// The name as written.
        name: String,
    },
    /// The helper could not be started.
    #[error("credential helper {helper} ({key} of {path}) cannot run{hint}")]
    HelperStart {
        /// `docker-credential-NAME`.
        helper: String,
        /// Where it is named.
        key: String,
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// The helper failed, timed out or printed what is not an answer.
    #[error("credential helper {helper} ({key} of {path}) for {registry}: {reason}")]
    Helper {
        /// `docker-credential-NAME`.
        helper: String,
        /// Where it is named.
        key: String,
        /// The file.
        path: String,
        /// The registry asked for.
        registry: String,
        /// What went wrong.
        reason: String,
    },
}

#[derive(Debug, Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    #[serde(default)]
    username: String,
    #[serde(default)]
    secret: String,
}

/// `host[:port]` of a key of `auths` or `credHelpers`.
fn host_of(key: &str) -> &str {
    let key = key.trim_start_matches("https://").trim_start_matches("http://");
    key.split('/').next().unwrap_or(key)
}

fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !name.starts_with(['.', '-'])
}

/// A docker `config.json`, read when credentials are needed.
#[derive(Debug, Clone)]
pub struct AuthFile {
    path: PathBuf,
    /// Where helpers are looked for instead of `PATH` (unit tests only).
    helper_dir: Option<PathBuf>,
}

/// What the file says to do for one registry.
enum Source {
    Helper { name: String, key: String },
    Entry(AuthEntry, String),
    Nothing,
}

impl AuthFile {
    /// The file at `path` (not read yet).
    pub fn new(path: &Path) -> Self {
        Self { path: path.to_path_buf(), helper_dir: None }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, reason: String) -> CredentialError {
        CredentialError::File { path: self.path.display().to_string(), reason }
    }

    fn read(&self) -> Result<DockerConfig, CredentialError> {
        let bytes = super::read_small(&self.path).map_err(|e| self.err(e.reason()))?;
        let config: DockerConfig =
            serde_json::from_slice(&bytes).map_err(|e| self.err(format!("not a docker config.json ({e})")))?;
        let path = self.path.display().to_string();
        let named = config.creds_store.iter().map(|n| ("credsStore".to_string(), n));
        let helpers = config.cred_helpers.iter().map(|(h, n)| (format!("credHelpers.{h:?}"), n));
        for (key, name) in named.chain(helpers) {
            if !plain_name(name) {
                return Err(CredentialError::HelperName { path: path.clone(), key, name: name.clone() });
            }
        }
        Ok(config)
    }

    /// Reads the file and checks what can be checked without a registry:
    /// JSON, helper names, every `auths` entry.
    pub fn check(&self) -> Result<(), CredentialError> {
        let config = self.read()?;
        for (key, entry) in config.auths {
            self.entry(entry, &key)?;
        }
        Ok(())
    }

    fn source(&self, registry: &str) -> Result<Source, CredentialError> {
        let mut config = self.read()?;
        if let Some((key, name)) = config.cred_helpers.iter().find(|(k, _)| host_of(k) == registry) {
            return Ok(Source::Helper { name: name.clone(), key: format!("credHelpers.{key:?}") });
        }
        if let Some(name) = config.creds_store.filter(|n| !n.is_empty()) {
            return Ok(Source::Helper { name, key: "credsStore".into() });
        }
        let key = config.auths.keys().find(|k| host_of(k) == registry).cloned();
        Ok(match key.and_then(|k| config.auths.remove(&k).map(|e| (e, k))) {
            Some((entry, key)) => Source::Entry(entry, key),
            None => Source::Nothing,
        })
    }

    /// The credentials in an `auths` entry, if it holds any.
    fn entry(&self, entry: AuthEntry, key: &str) -> Result<Option<Credentials>, CredentialError> {
        if let Some(token) = entry.identitytoken.filter(|t| !t.is_empty()) {
            return Ok(Some(Credentials::IdentityToken(token)));
        }
        if let Some(auth) = entry.auth.filter(|a| !a.is_empty()) {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|_| self.err(format!("auths.{key:?}.auth is not base64")))?;
            let text = String::from_utf8(raw).map_err(|_| self.err(format!("auths.{key:?}.auth is not UTF-8")))?;
            let (u, p) =
                text.split_once(':').ok_or_else(|| self.err(format!("auths.{key:?}.auth is not user:password")))?;
            return Ok(Some(Credentials::Basic { username: u.to_string(), password: p.to_string() }));
        }
        Ok(match (entry.username, entry.password) {
            (Some(username), Some(password)) => Some(Credentials::Basic { username, password }),
            _ => None,
        })
    }

    /// The credentials for `registry` (`host[:port]`), running a helper if
    /// the file names one for it; `None`: anonymous. A helper gets
    /// `timeout` at most ([`HELPER_TIMEOUT`] if that is shorter).
    pub async fn credentials(&self, registry: &str, timeout: Duration) -> Result<Option<Found>, CredentialError> {
        let path = self.path.display().to_string();
        match self.source(registry)? {
            Source::Nothing => Ok(None),
            Source::Entry(entry, key) => Ok(self
                .entry(entry, &key)?
                .map(|credentials| Found { credentials, from: format!("auths.{key:?} of {path}") })),
            Source::Helper { name, key } => {
                let helper = format!("docker-credential-{name}");
                let program = match &self.helper_dir {
                    Some(dir) => dir.join(&helper),
                    None => PathBuf::from(&helper),
                };
                let found = run_helper(&program, registry, timeout.min(HELPER_TIMEOUT)).await.map_err(|e| match e {
                    HelperFailure::Start(source) => {
                        let hint = if source.kind() == std::io::ErrorKind::NotFound {
                            " (not found on PATH: install it, or remove it from the file)"
                        } else {
                            ""
                        };
                        CredentialError::HelperStart {
                            helper: helper.clone(),
                            key: key.clone(),
                            path: path.clone(),
                            source,
                            hint,
                        }
                    }
                    HelperFailure::Other(reason) => CredentialError::Helper {
                        helper: helper.clone(),
                        key: key.clone(),
                        path: path.clone(),
                        registry: registry.to_string(),
                        reason,
                    },
                })?;
                Ok(found.map(|credentials| Found { credentials, from: format!("{helper} ({key} of {path})") }))
            }
        }
    }
}

enum HelperFailure {
    Start(std::io::Error),
    Other(String),
}

/// What went wrong while a helper ran.
#[derive(Debug, thiserror::Error)]
enum HelperRun {
    #[error("printed more than {MAX_HELPER_OUTPUT} bytes: not read further")]
    TooMuchOutput,
    #[error("cannot wait for it: {0}")]
    Wait(std::io::Error),
}

/// Reads at most `max` bytes of `from`; `Err` with what was read if there was more.
async fn read_at_most<R: tokio::io::AsyncRead + Unpin>(from: Option<R>, max: u64) -> Result<Vec<u8>, Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let Some(from) = from else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let _ = from.take(max + 1).read_to_end(&mut out).await;
    if out.len() as u64 > max {
        return Err(out);
    }
    Ok(out)
}

/// `HELPER get` with `server` on its standard input.
async fn run_helper(helper: &Path, server: &str, timeout: Duration) -> Result<Option<Credentials>, HelperFailure> {
    use tokio::io::AsyncWriteExt;
    let mut command = tokio::process::Command::new(helper);
    command
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Dropped at the deadline (or with the pull): killed, not left behind.
        .kill_on_drop(true);
    // A helper just written (an installer, a test) may still be open for
    // writing in a process forked meanwhile: "text file busy" passes.
    let mut tries = 0;
    let mut child = loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => break other.map_err(HelperFailure::Start)?,
        }
    };
    let work = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A helper that does not read its input is judged by its answer.
            let _ = stdin.write_all(server.as_bytes()).await;
            drop(stdin);
        }
        let (out, err) =
            tokio::join!(read_at_most(child.stdout.take(), MAX_HELPER_OUTPUT), read_at_most(child.stderr.take(), 4096));
        let out = out.map_err(|_| HelperRun::TooMuchOutput)?;
        let err = err.unwrap_or_else(|e| e);
        let status = child.wait().await.map_err(HelperRun::Wait)?;
        Ok::<_, HelperRun>((status, out, err))
    };
    let (status, out, err) = match tokio::time::timeout(timeout, work).await {
        Ok(r) => r.map_err(|e| HelperFailure::Other(e.to_string()))?,
        Err(_) => return Err(HelperFailure::Other(format!("no answer within {} ms: killed", timeout.as_millis()))),
    };
    let said = |bytes: &[u8]| crate::text::guest_text(String::from_utf8_lossy(bytes).trim(), 200);
    if !status.success() {
        if said(&out) == NOT_FOUND || said(&err) == NOT_FOUND {
            return Ok(None);
        }
        let message = if out.iter().any(|b| !b.is_ascii_whitespace()) { said(&out) } else { said(&err) };
        return Err(HelperFailure::Other(format!(
            "failed ({status}){}",
            if message.is_empty() { String::new() } else { format!(": {message}") }
        )));
    }
    let answer: HelperAnswer = serde_json::from_slice(&out).map_err(|e| {
        HelperFailure::Other(format!("its answer is not {{\"ServerURL\", \"Username\", \"Secret\"}} JSON ({e})"))
    })?;
    if answer.secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(if answer.username == "<token>" {
        Credentials::IdentityToken(answer.secret)
    } else {
        Credentials::Basic { username: answer.username, password: answer.secret }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, text: &str) -> AuthFile {
        let path = dir.join("config.json");
        std::fs::write(&path, text).unwrap();
        AuthFile::new(&path)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn auths_give_credentials_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:x");
        let f = file(
            dir.path(),
            &format!(
                r#"{{"auths":{{"https://h:5000/v1/":{{"auth":"{auth}"}},"other":{{"username":"u","password":"p"}},
                "tok":{{"identitytoken":"refresh"}},"empty":{{}}}},"HttpHeaders":{{"X":"y"}}}}"#
            ),
        );
        f.check().unwrap();
        let rt = rt();
        let get = |r: &str| rt.block_on(f.credentials(r, HELPER_TIMEOUT)).unwrap().map(|f| f.credentials);
        assert_eq!(get("h:5000"), Some(Credentials::Basic { username: "alice".into(), password: "s3cret:x".into() }));
        assert_eq!(get("other"), Some(Credentials::Basic { username: "u".into(), password: "p".into() }));
        assert_eq!(get("tok"), Some(Credentials::IdentityToken("refresh".into())));
        assert_eq!(get("empty"), None);
        assert_eq!(get("h:5001"), None);
        assert!(!format!("{:?}", get("h:5000")).contains("s3cret"), "Debug never shows a secret");
    }

    #[test]
    fn bad_files_and_helper_names_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for (text, why) in [
            ("{", "not a docker config.json"),
            (r#"{"auths":{"h":{"auth":"%%%"}}}"#, r#"auths."h".auth is not base64"#),
            (r#"{"credsStore":"../../bin/sh"}"#, "not a plain name"),
            (r#"{"credHelpers":{"h":"a/b"}}"#, "credHelpers.\"h\""),
        ] {
            let e = file(dir.path(), text).check().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("config.json"), "{text}: {e}");
        }
        let e = AuthFile::new(&dir.path().join("missing.json")).check().unwrap_err().to_string();
        assert!(e.contains("missing.json"), "{e}");
    }

    /// A fake helper (a shell script) in `dir`.
    fn helper(dir: &Path, name: &str, script: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(format!("docker-credential-{name}"));
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Helpers as docker runs them: `credHelpers` for its registry before
    /// `credsStore`, and either before `auths`; the registry on standard
    /// input; `<token>` as an identity token; "not found" as anonymous; and
    /// every failure (missing, failing, hanging, flooding, babbling) an
    /// error naming the helper, the registry and the file.
    #[test]
    fn credential_helpers_are_run_bounded_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        // Answers only for the registry it is asked about on stdin.
        helper(
            &bin,
            "good",
            r#"[ "$1" = get ] || exit 9
read -r server || true
[ "$server" = "h:5000" ] || { echo "credentials not found in native keychain"; exit 1; }
echo '{"ServerURL":"h:5000","Username":"alice","Secret":"from-helper"}'"#,
        );
        helper(&bin, "store", r#"echo '{"ServerURL":"x","Username":"<token>","Secret":"refresh-me"}'"#);
        helper(&bin, "failing", "echo 'keychain locked' >&2; exit 3");
        helper(&bin, "hanging", "exec sleep 60");
        helper(&bin, "flooding", "yes '{}' | head -c 1000000");
        helper(&bin, "babbling", "echo hello");
        let auth = base64::engine::general_purpose::STANDARD.encode("file:password");
        let config = |helpers: &str, store: &str| {
            let mut f = file(
                dir.path(),
                &format!(
                    r#"{{"auths":{{"h:5000":{{"auth":"{auth}"}},"plain:1":{{"auth":"{auth}"}}}},
                    "credHelpers":{{{helpers}}}{store}}}"#
                ),
            );
            f.helper_dir = Some(bin.clone());
            f
        };
        let rt = rt();
        let get = |f: &AuthFile, r: &str| rt.block_on(f.credentials(r, Duration::from_millis(500)));

        let f = config(r#""h:5000":"good","other:1":"good""#, "");
        let found = get(&f, "h:5000").unwrap().unwrap();
        assert_eq!(found.credentials, Credentials::Basic { username: "alice".into(), password: "from-helper".into() });
        assert!(found.from.contains("docker-credential-good") && found.from.contains("credHelpers"), "{found:?}");
        // The helper has nothing for other:1: anonymous, not the file's auths.
        assert_eq!(get(&f, "other:1").unwrap(), None);
        // No helper for plain:1 and no credsStore: the file's auths.
        let plain = get(&f, "plain:1").unwrap().unwrap();
        assert!(plain.from.contains(r#"auths."plain:1""#), "{plain:?}");

        // credsStore for every registry credHelpers does not name.
        let f = config(r#""h:5000":"good""#, r#","credsStore":"store""#);
        assert_eq!(
            get(&f, "h:5000").unwrap().unwrap().credentials,
            Credentials::Basic { username: "alice".into(), password: "from-helper".into() }
        );
        assert_eq!(get(&f, "plain:1").unwrap().unwrap().credentials, Credentials::IdentityToken("refresh-me".into()));

        for (name, why) in [
            ("missing", "not found on PATH"),
            ("failing", "keychain locked"),
            ("hanging", "no answer within 500 ms: killed"),
            ("flooding", "printed more than 65536 bytes"),
            ("babbling", "is not {\"ServerURL\", \"Username\", \"Secret\"} JSON"),
        ] {
            let f = config(&format!(r#""h:5000":"{name}""#), "");
            let e = crate::text::chain(&get(&f, "h:5000").unwrap_err());
            assert!(
                e.contains(&format!("docker-credential-{name}")) && e.contains("config.json") && e.contains(why),
                "{name}: {e}"
            );
        }
        // The system's reason once, after what to do about it.
        let f = config(r#""h:5000":"missing""#, "");
        let e = crate::text::chain(&get(&f, "h:5000").unwrap_err());
        assert!(e.ends_with("or remove it from the file): No such file or directory (os error 2)"), "{e}");
    }
}
