//! Finding policies in a directory, and reading their settings files.
//!
//! An operator installs a policy by dropping `NN-name.wasm` into the policy
//! directory, optionally with `NN-name.toml` beside it. The two-digit prefix
//! orders the chain, like NRI orders its plugins. A bad settings file is
//! reported with its path and the offending key, and only that policy is
//! left out: one mistake must not take the other policies down.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::caps::{CapSet, Capability, UnknownCapability};
use super::limits::{LimitOverrides, Limits};

/// What a failure of this policy (trap, limit, invalid output, skipped call)
/// does to the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Drop this policy's output and go on with the chain (fail-open).
    #[default]
    Ignore,
    /// Fail the event (fail-closed).
    Fail,
}

/// Whether a policy's decisions take effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Changes and denials are applied.
    #[default]
    Enforce,
    /// Evaluated and reported, never applied.
    Audit,
}

/// What a policy whose reply conflicts with an earlier policy's does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnConflict {
    /// Fail the event, as the runtime fails it when two plugins conflict.
    #[default]
    Fail,
    /// Drop this policy's whole reply (as if it had not run) and go on; the
    /// conflict is reported. For policies that only set defaults.
    Yield,
}

/// The optional `NN-name.toml` beside a policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct PolicyFile {
    #[serde(default)]
    pub on_error: OnError,
    #[serde(default)]
    pub on_conflict: OnConflict,
    #[serde(default)]
    pub mode: Mode,
    /// Given to the policy's `configure` as text: a string as is, a table as JSON.
    pub settings: Option<toml::Value>,
    #[serde(default)]
    pub limits: LimitOverrides,
    /// The SHA-256 the `.wasm` file must have (hex); any other content is refused.
    pub sha256: Option<String>,
    /// Capabilities granted beyond the default ones (`caps.rs`).
    pub grant: Option<Vec<String>>,
    /// `oci://…`: the policy is pulled from a registry instead of read
    /// from `NN-name.wasm` (see `registry`).
    pub source: Option<String>,
    /// Public keys (PEM) one of which must have signed the pulled policy;
    /// replace `[registry] public-keys` for this policy.
    pub public_keys: Option<Vec<PathBuf>>,
    /// Start every call from the state `configure` left (`load/snapshot.rs`).
    #[serde(default)]
    pub preinitialize: bool,
}

/// Everything needed to load one policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// `NN-name`, the policy's name in logs, errors and metrics.
    pub name: String,
    /// The `NN-name.wasm` file to load (for a policy named by reference, its
    /// settings file; see `source`).
    pub wasm: PathBuf,
    /// The settings file, if there is one.
    pub settings_file: Option<PathBuf>,
    /// The text given to the policy's `configure`: the settings file's
    /// `settings` string as is, or its table as JSON; empty without one.
    pub settings: String,
    /// What a failure of the policy does to the event.
    pub on_error: OnError,
    /// What a conflict of its reply with an earlier policy's does.
    pub on_conflict: OnConflict,
    /// Whether its decisions take effect.
    pub mode: Mode,
    /// The limits of each call: the host's defaults with the file's
    /// `[limits]` applied.
    pub limits: Limits,
    /// The SHA-256 the file must have, if pinned.
    pub sha256: Option<String>,
    /// Refuse the file unless it is owned by root and writable by no one else.
    pub strict_permissions: bool,
    /// What the operator grants: the default grant and the file's `grant`.
    pub grant: CapSet,
    /// Where the component comes from when it is named by reference
    /// (`wasm` is then the settings file, which names it).
    pub source: Option<crate::registry::Source>,
    /// Where the loaded version came from (set once pulled).
    pub provenance: Option<crate::registry::Provenance>,
    /// Start every call from a snapshot of the instance `configure` ran in,
    /// taken at load, instead of from the component as built
    /// (`load/snapshot.rs`).
    pub preinitialize: bool,
}

impl PolicySpec {
    /// A policy `name` from `wasm` with every setting at its default.
    pub fn new(name: &str, wasm: impl Into<PathBuf>) -> Self {
        Self {
            name: name.to_string(),
            wasm: wasm.into(),
            settings_file: None,
            settings: String::new(),
            on_error: OnError::default(),
            on_conflict: OnConflict::default(),
            mode: Mode::default(),
            limits: Limits::default(),
            sha256: None,
            strict_permissions: false,
            grant: CapSet::default_grant(),
            source: None,
            provenance: None,
            preinitialize: false,
        }
    }

    /// [`Self::new`] with every capability granted, dangerous ones included:
    /// for tests (with the `testing` feature). A policy loaded from a
    /// directory never gets this; its grant comes from its settings file.
    #[cfg(any(test, feature = "testing"))]
    pub fn granting_all(name: &str, wasm: impl Into<PathBuf>) -> Self {
        Self { grant: CapSet::all(), ..Self::new(name, wasm) }
    }
}

/// The operator's grant: the default capabilities and those `names` adds.
/// An unknown name is an error naming the key and every allowed value.
pub(crate) fn grant_of(names: &[String]) -> Result<CapSet, UnknownCapability> {
    let mut grant = CapSet::default_grant();
    for name in names {
        match Capability::from_name(name) {
            Some(c) => grant.insert(c),
            None => {
                let name = crate::text::guest_text(name, 64);
                return Err(UnknownCapability { name, allowed: Capability::names() });
            }
        }
    }
    Ok(grant)
}

/// A policy that cannot be loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The policy directory could not be listed.
    #[error("cannot read policy directory {dir}: {reason}")]
    Directory {
        /// The policy directory.
        dir: PathBuf,
        /// The operating system's error.
        reason: String,
    },
    /// A `.wasm` file in the directory is not named `NN-name.wasm`.
    #[error("{path}: file name must be NN-name.wasm (two digits, a dash, then [a-zA-Z0-9_.+-])")]
    BadName {
        /// The file's path.
        path: PathBuf,
    },
    /// A name that is not UTF-8 cannot be a policy's or a settings file's
    /// name; it is shown escaped, and the file is left alone.
    #[error("{}/{name}: file name is not UTF-8 (shown escaped); the file is ignored", dir.display())]
    NotUtf8 {
        /// The directory the file is in.
        dir: PathBuf,
        /// The file's name, escaped.
        name: String,
    },
    /// A settings file with neither its `.wasm` file nor a `source`.
    #[error("{path}: settings file has no policy {wasm} beside it and names no source")]
    Orphan {
        /// The settings file's path.
        path: PathBuf,
        /// The `.wasm` file it would belong to.
        wasm: PathBuf,
    },
    /// The policy's settings file cannot be used. Its `on-error` is then
    /// unknown, and the policy counts as mandatory (`on-error = "fail"`):
    /// the file may say so.
    #[error("policy {policy}: {path}: {reason} (the policy is not loaded and counts as on-error = fail until the file is fixed)")]
    Settings {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The settings file's path.
        path: PathBuf,
        /// What is wrong with it: it cannot be read, is not a regular UTF-8
        /// file, is too large, or has a bad key or value.
        reason: String,
    },
}

impl SpecError {
    /// The policy this error keeps from loading, if it is about one.
    pub fn policy(&self) -> Option<&str> {
        match self {
            Self::Settings { policy, .. } => Some(policy),
            _ => None,
        }
    }
}

/// Splits `NN-name.ext` into its stem if the name is valid.
pub fn policy_stem(file_name: &str, ext: &str) -> Option<String> {
    let stem = file_name.strip_suffix(ext)?.strip_suffix('.')?;
    let (idx, name) = stem.split_at_checked(2)?;
    let name = name.strip_prefix('-')?;
    let ok = idx.chars().all(|c| c.is_ascii_digit())
        && !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
    ok.then(|| stem.to_string())
}

/// The keys of a settings file (named in its errors; never their values).
const POLICY_KEYS: &[&str] = &[
    "on-error",
    "on-conflict",
    "mode",
    "settings",
    "limits",
    "sha256",
    "grant",
    "source",
    "public-keys",
    "fuel",
    "timeout-ms",
    "memory-mib",
    "table-elements",
    "instances",
    "tables",
    "memories",
    "state-kib",
];

/// Most bytes of a settings file.
const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Reads a settings file (a regular file, symlinks followed, at most 1 MiB),
/// checked and read through one descriptor: a file swapped between a check
/// and the read for a FIFO (which would hold the load forever) or for
/// `/dev/zero` (which would fill the host's memory) is refused. With
/// `strict`, root must own it and no one else may write it, as for the
/// policy file: its grant and limits are as much the operator's word.
fn read_settings(name: &str, path: &Path, strict: bool) -> Result<String, SpecError> {
    use crate::files::{FileError, Trust};
    let fail = |reason: String| SpecError::Settings { policy: name.into(), path: path.to_path_buf(), reason };
    let trust = strict.then(Trust::root);
    let bytes = crate::files::read_bounded_trusting(path, MAX_SETTINGS_BYTES, trust).map_err(|e| {
        fail(match e {
            FileError::Untrusted { why, .. } => format!("is {why}, and [policies] strict-permissions is on"),
            FileError::NotRegular { kind: "a directory", .. } => "is a directory, not a settings file".into(),
            FileError::NotRegular { kind, .. } => format!("is {kind}, not a regular file"),
            FileError::TooLarge { .. } => format!("is larger than {MAX_SETTINGS_BYTES} bytes"),
            e => e.io().map_or_else(|| e.reason(), ToString::to_string),
        })
    })?;
    String::from_utf8(bytes).map_err(|_| fail("is not UTF-8 text".into()))
}

/// How settings files are read: the limits of a policy whose file does not
/// set its own, and whether files must be root's (`strict-permissions`,
/// which the spec carries on to the policy file's read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// Limits of policies whose settings file does not override them.
    pub defaults: Limits,
    /// Refuse files not owned by root or writable by group or others.
    pub strict_permissions: bool,
}

impl ReadOptions {
    /// Defaults as given, files of any owner (the author tools: a policy
    /// being written is the author's own).
    pub fn lenient(defaults: Limits) -> Self {
        Self { defaults, strict_permissions: false }
    }
}

/// Reads a settings file into a spec for `wasm`.
pub fn read_spec(
    name: &str,
    wasm: &Path,
    settings_file: Option<&Path>,
    options: ReadOptions,
) -> Result<PolicySpec, SpecError> {
    read_spec_with(name, wasm, settings_file, options, None)
}

/// A policy the host configuration names by reference
/// (`[policies.sources]`), with its settings file if it has one (which
/// must not name a source of its own). `at` is where the spec says it comes
/// from when there is no settings file.
pub fn read_spec_sourced(
    name: &str,
    at: &Path,
    settings_file: Option<&Path>,
    options: ReadOptions,
    reference: &crate::registry::OciRef,
) -> Result<PolicySpec, SpecError> {
    read_spec_with(name, settings_file.unwrap_or(at), settings_file, options, Some(reference))
}

fn read_spec_with(
    name: &str,
    wasm: &Path,
    settings_file: Option<&Path>,
    options: ReadOptions,
    configured: Option<&crate::registry::OciRef>,
) -> Result<PolicySpec, SpecError> {
    let file = match settings_file {
        None => PolicyFile::default(),
        Some(path) => {
            let text = read_settings(name, path, options.strict_permissions)?;
            // Where the file is wrong, never what it says: its settings
            // may hold a secret.
            toml::from_str::<PolicyFile>(&text).map_err(|e| SpecError::Settings {
                policy: name.into(),
                path: path.to_path_buf(),
                reason: crate::text::guest_text(&crate::text::toml_error(&text, &e, POLICY_KEYS), 512),
            })?
        }
    };
    let path = settings_file.unwrap_or(wasm).to_path_buf();
    let bad = |reason: String| SpecError::Settings { policy: name.into(), path: path.clone(), reason };
    let limits = options.defaults.with(&file.limits);
    limits.validate("[limits]").map_err(|e| bad(e.text()))?;
    if let Some(pin) = &file.sha256 {
        if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(format!("sha256 {pin:?} is not 64 hexadecimal digits")));
        }
    }
    let grant = grant_of(file.grant.as_deref().unwrap_or_default()).map_err(|e| bad(format!("grant: {e}")))?;
    let source = match (&file.source, configured) {
        (Some(_), Some(_)) => {
            return Err(bad("names a source, and the host configuration names one too ([policies.sources]): \
                            remove one of them"
                .into()))
        }
        (None, Some(reference)) => {
            if file.sha256.is_some() {
                return Err(bad(
                    "sha256 and a source exclude each other: pin the digest in the reference (…@sha256:…)".into(),
                ));
            }
            Some(crate::registry::Source {
                reference: reference.clone(),
                public_keys: file.public_keys.clone(),
                strict_permissions: options.strict_permissions,
            })
        }
        (None, None) => {
            if file.public_keys.is_some() {
                return Err(bad("public-keys applies only to a policy with a source".into()));
            }
            None
        }
        (Some(text), None) => {
            if file.sha256.is_some() {
                return Err(bad(
                    "sha256 and source exclude each other: pin the digest in the reference (…@sha256:…)".into()
                ));
            }
            let reference = crate::registry::OciRef::parse(text).map_err(|e| bad(format!("source: {e}")))?;
            Some(crate::registry::Source {
                reference,
                public_keys: file.public_keys.clone(),
                strict_permissions: options.strict_permissions,
            })
        }
    };
    let settings = match file.settings {
        None => String::new(),
        Some(toml::Value::String(s)) => s,
        Some(other) => serde_json::to_string(&other).map_err(|e| bad(format!("settings: {e}")))?,
    };
    Ok(PolicySpec {
        settings_file: settings_file.map(Path::to_path_buf),
        settings,
        on_error: file.on_error,
        on_conflict: file.on_conflict,
        preinitialize: file.preinitialize,
        mode: file.mode,
        limits,
        sha256: file.sha256.map(|s| s.to_ascii_lowercase()),
        grant,
        source,
        strict_permissions: options.strict_permissions,
        ..PolicySpec::new(name, wasm)
    })
}

/// A file name that is not UTF-8, printable: valid parts as they are, control
/// characters escaped, every other byte as `\xNN`.
fn escaped(name: &std::ffi::OsStr) -> String {
    let mut out = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        out.extend(chunk.valid().chars().flat_map(|c| c.escape_debug()));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Finds every policy in `dir`, in chain order. Returns the usable specs and
/// the problems found; a problem leaves out only the policy it concerns.
/// Hidden entries (a ConfigMap volume's `..data`) are skipped; a name that
/// is not UTF-8 is reported (someone meant something by that file); anything
/// else named like a policy is a policy, whatever kind of file it is (the load
/// says what is wrong with it).
pub(crate) fn scan(dir: &Path, options: ReadOptions) -> (Vec<PolicySpec>, Vec<SpecError>) {
    let mut specs = Vec::new();
    let mut errors = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(SpecError::Directory { dir: dir.to_path_buf(), reason: e.to_string() });
            return (specs, errors);
        }
    };
    let mut names: Vec<String> = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let file_name = entry.file_name();
        if file_name.as_bytes().starts_with(b".") {
            continue;
        }
        match file_name.into_string() {
            Ok(name) => names.push(name),
            Err(raw) => errors.push(SpecError::NotUtf8 { dir: dir.to_path_buf(), name: escaped(&raw) }),
        }
    }
    names.sort();
    for file_name in &names {
        let path = dir.join(file_name);
        if file_name.ends_with(".wasm") {
            let Some(stem) = policy_stem(file_name, "wasm") else {
                errors.push(SpecError::BadName { path });
                continue;
            };
            let toml = format!("{stem}.toml");
            let settings = names.contains(&toml).then(|| dir.join(&toml));
            match read_spec(&stem, &path, settings.as_deref(), options) {
                Ok(spec) if spec.source.is_some() => errors.push(SpecError::Settings {
                    policy: stem.clone(),
                    path: dir.join(&toml),
                    reason: format!("names a source, and {file_name} is there too: remove one of them"),
                }),
                Ok(spec) => specs.push(spec),
                Err(e) => errors.push(e),
            }
        } else if let Some(stem) = policy_stem(file_name, "toml") {
            if names.contains(&format!("{stem}.wasm")) {
                continue;
            }
            // A settings file alone is a policy if it names its source.
            match read_spec(&stem, &path, Some(&path), options) {
                Ok(spec) if spec.source.is_some() => specs.push(spec),
                Ok(_) => errors.push(SpecError::Orphan { path: path.clone(), wasm: path.with_extension("wasm") }),
                Err(e) => errors.push(e),
            }
        }
    }
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    (specs, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems() {
        assert_eq!(policy_stem("10-deny-privileged.wasm", "wasm").as_deref(), Some("10-deny-privileged"));
        assert_eq!(policy_stem("05-a.b_c+d.wasm", "wasm").as_deref(), Some("05-a.b_c+d"));
        for bad in ["1-x.wasm", "100-x.wasm", "10x.wasm", "10-.wasm", "10-a b.wasm", "ab-x.wasm", "10-x.wat"] {
            assert_eq!(policy_stem(bad, "wasm"), None, "{bad}");
        }
    }

    /// `strict-permissions` covers a policy's settings file as it covers
    /// the policy file: its grant, limits and source are the operator's
    /// word too, and a file someone else may write is refused, named,
    /// with what breaks the rule; the spec carries the rule on to the
    /// policy file's read.
    #[test]
    fn strict_permissions_refuse_a_settings_file_others_may_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let toml = dir.path().join("10-p.toml");
        std::fs::write(dir.path().join("10-p.wasm"), "").unwrap();
        std::fs::write(&toml, "grant = [\"hooks\"]\n").unwrap();
        let strict = ReadOptions { defaults: Limits::default(), strict_permissions: true };
        let refused = |options| {
            let (specs, errors) = scan(dir.path(), options);
            assert!(specs.is_empty(), "{specs:?}");
            match &errors[..] {
                [SpecError::Settings { policy, path, reason }] if policy == "10-p" && *path == toml => reason.clone(),
                other => panic!("{other:?}"),
            }
        };
        std::fs::set_permissions(&toml, std::fs::Permissions::from_mode(0o664)).unwrap();
        let (specs, _) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        assert_eq!((specs.len(), specs[0].strict_permissions), (1, false), "not strict: read");
        let uid = crate::files::Trust::effective_uid();
        if uid == 0 {
            let reason = refused(strict);
            assert_eq!(reason, "is writable by group or others (mode 664), and [policies] strict-permissions is on");
            std::fs::set_permissions(&toml, std::fs::Permissions::from_mode(0o644)).unwrap();
            let (specs, errors) = scan(dir.path(), strict);
            assert!(errors.is_empty(), "{errors:?}");
            assert!(specs[0].strict_permissions, "the policy file is read under the same rule");
            std::os::unix::fs::chown(&toml, Some(1000), None).unwrap();
        }
        let owner = if uid == 0 { 1000 } else { uid };
        assert!(refused(strict).starts_with(&format!("is owned by uid {owner}, not by root")));
    }

    #[test]
    fn scan_orders_reads_settings_and_reports_problems() {
        let dir = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| std::fs::write(dir.path().join(n), s).unwrap();
        w("20-second.wasm", "");
        w("10-first.wasm", "");
        w("10-first.toml", "on-error = \"fail\"\nmode = \"audit\"\nsettings = \"raw text\"\n[limits]\nfuel = 7\n");
        w("20-second.toml", "[settings]\nallowed = [\"a\", \"b\"]\nmax = 3\n");
        w("30-broken.wasm", "");
        w("30-broken.toml", "on-eror = \"fail\"\n");
        w("40-orphan.toml", "");
        w("notes.txt", "");
        w("bad name.wasm", "");
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["10-first", "20-second"]);
        assert_eq!((specs[0].on_error, specs[0].mode, specs[0].limits.fuel), (OnError::Fail, Mode::Audit, 7));
        assert_eq!(specs[0].settings, "raw text");
        assert_eq!(specs[1].settings, r#"{"allowed":["a","b"],"max":3}"#);
        assert_eq!((specs[1].on_error, specs[1].mode), (OnError::Ignore, Mode::Enforce));
        let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("30-broken.toml") && m.contains("on-eror")), "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("40-orphan.toml")), "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("bad name.wasm")), "{msgs:?}");
    }

    #[test]
    fn invalid_limits_are_reported_with_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("10-x.wasm"), "").unwrap();
        std::fs::write(dir.path().join("10-x.toml"), "[limits]\ntimeout-ms = 0\n").unwrap();
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        assert!(specs.is_empty());
        assert!(errors[0].to_string().contains("10-x.toml") && errors[0].to_string().contains("timeout-ms"));
    }

    #[test]
    fn a_settings_file_that_is_not_a_file_keeps_its_policy_out_as_mandatory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("10-x.wasm"), "").unwrap();
        std::fs::create_dir(dir.path().join("10-x.toml")).unwrap();
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        assert!(specs.is_empty(), "the policy must not load with defaults");
        assert_eq!(errors[0].policy(), Some("10-x"));
        let msg = errors[0].to_string();
        assert!(
            msg.contains("10-x.toml") && msg.contains("is a directory") && msg.contains("on-error = fail"),
            "{msg}"
        );
    }

    /// A settings file that is a FIFO (which no one writes to) or an
    /// endless device is refused at once, saying what it is: neither
    /// holds the scan nor fills the host's memory.
    #[test]
    fn a_settings_file_that_would_block_or_never_end_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["10-fifo", "20-zero"] {
            std::fs::write(dir.path().join(format!("{name}.wasm")), "").unwrap();
        }
        crate::files::mkfifo(&dir.path().join("10-fifo.toml"));
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("20-zero.toml")).unwrap();
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        assert!(specs.is_empty(), "{specs:?}");
        let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs[0].contains("10-fifo.toml") && msgs[0].contains("is a FIFO, not a regular file"), "{msgs:?}");
        assert!(msgs[1].contains("20-zero.toml") && msgs[1].contains("is a character device"), "{msgs:?}");
    }

    #[test]
    fn anything_named_like_a_policy_is_a_policy_and_hidden_entries_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("10-dir.wasm")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("20-zero.wasm")).unwrap();
        std::fs::create_dir(dir.path().join("..data")).unwrap();
        std::fs::write(dir.path().join(".30-hidden.wasm"), "").unwrap();
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["10-dir", "20-zero"], "the load reports what they are");
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn names_that_are_not_utf8_are_reported_escaped() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("10-ok.wasm"), "").unwrap();
        let bad = std::ffi::OsStr::from_bytes(b"20-caf\xe9\n.wasm");
        std::fs::write(dir.path().join(bad), "").unwrap();
        std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(b".hidden-\xff")), "").unwrap();
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        assert_eq!(specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["10-ok"]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let msg = errors[0].to_string();
        assert!(msg.contains(r"20-caf\xe9\n.wasm") && msg.contains("not UTF-8"), "{msg}");
        assert!(!msg.contains('\n'), "the name's newline is escaped: {msg}");
        assert_eq!(errors[0].policy(), None);
    }

    /// A broken line of a settings file is located, never echoed: the
    /// settings may be a secret.
    #[test]
    fn a_broken_settings_file_is_located_without_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| std::fs::write(dir.path().join(n), s).unwrap();
        w("10-x.wasm", "");
        w("10-x.toml", "on-error = \"fail\"\nsettings = \"hunter2-token\n");
        w("20-y.wasm", "");
        w("20-y.toml", "[limits]\nfuel = \"hunter3-token\"\n");
        w("30-z.wasm", "");
        w("30-z.toml", "mode = \"hunter4-token\"\n");
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        assert!(specs.is_empty());
        let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        for (m, at) in msgs.iter().zip(["line 2, column", "line 2, column 8", "line 1, column 8"]) {
            assert!(!m.contains("hunter"), "the settings file's text is echoed: {m}");
            assert!(m.contains(at), "{at:?} missing: {m}");
        }
        assert!(msgs[1].contains("invalid type: a string, expected"), "{}", msgs[1]);
        assert!(msgs[2].contains("unknown variant, expected"), "{}", msgs[2]);
    }

    #[test]
    fn grants_add_to_the_default_and_unknown_names_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| std::fs::write(dir.path().join(n), s).unwrap();
        w("10-x.wasm", "");
        w("10-x.toml", "grant = [\"hooks\", \"mounts\"]\n");
        w("20-y.wasm", "");
        w("20-y.toml", "grant = [\"hooks\", \"root\"]\n");
        w("30-z.wasm", "");
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["10-x", "30-z"]);
        assert!(specs[0].grant.contains(Capability::Hooks) && specs[0].grant.contains(Capability::Mounts));
        assert!(specs[0].grant.contains(Capability::Env), "the default grant stays");
        assert!(!specs[0].grant.contains(Capability::Devices));
        assert_eq!(specs[1].grant, CapSet::default_grant());
        let msg = errors[0].to_string();
        assert!(
            msg.contains("20-y.toml")
                && msg.contains("grant")
                && msg.contains("\"root\"")
                && msg.contains("allowed: env"),
            "{msg}"
        );
    }

    #[test]
    fn a_settings_file_naming_a_source_is_a_policy() {
        let dir = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| std::fs::write(dir.path().join(n), s).unwrap();
        let d = "ab".repeat(32);
        w("10-pulled.toml", &format!("source = \"oci://h:5000/p/x:v1@sha256:{d}\"\non-error = \"fail\"\n"));
        w("20-both.wasm", "");
        w("20-both.toml", &format!("source = \"oci://h/p@sha256:{d}\"\n"));
        w("30-bad.toml", "source = \"h/p:v1\"\n");
        w("40-keys.toml", "public-keys = [\"/k.pub\"]\n");
        w("50-signed.toml", "source = \"oci://h/p:v1\"\npublic-keys = [\"/k.pub\"]\n");
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["10-pulled", "50-signed"]);
        let source = specs[0].source.as_ref().unwrap();
        assert_eq!(source.reference.digest.as_deref(), Some(d.as_str()));
        assert_eq!(specs[0].on_error, OnError::Fail);
        assert_eq!(specs[1].source.as_ref().unwrap().public_keys, Some(vec![PathBuf::from("/k.pub")]));
        let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("20-both.toml") && m.contains("20-both.wasm is there too")), "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("30-bad.toml") && m.contains("oci://")), "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("40-keys.toml") && m.contains("public-keys applies only")), "{msgs:?}");
    }

    #[test]
    fn pins_and_conflict_handling_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let pin = "AB".repeat(32);
        std::fs::write(dir.path().join("10-x.wasm"), "").unwrap();
        std::fs::write(dir.path().join("10-x.toml"), format!("sha256 = \"{pin}\"\non-conflict = \"yield\"\n")).unwrap();
        std::fs::write(dir.path().join("20-y.wasm"), "").unwrap();
        std::fs::write(dir.path().join("20-y.toml"), "sha256 = \"abc\"\n").unwrap();
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].sha256.as_deref(), Some(pin.to_ascii_lowercase().as_str()));
        assert_eq!(specs[0].on_conflict, OnConflict::Yield);
        assert!(errors[0].to_string().contains("64 hexadecimal digits"), "{}", errors[0]);
    }

    #[test]
    fn preinitialize_is_read_and_off_by_default() {
        let dir = tempfile::tempdir().unwrap();
        for (name, toml) in
            [("10-on", "preinitialize = true\n"), ("20-off", ""), ("30-bad", "preinitialize = \"yes\"\n")]
        {
            std::fs::write(dir.path().join(format!("{name}.wasm")), "").unwrap();
            std::fs::write(dir.path().join(format!("{name}.toml")), toml).unwrap();
        }
        let (specs, errors) = scan(dir.path(), ReadOptions::lenient(Limits::default()));
        let got: Vec<(&str, bool)> = specs.iter().map(|s| (s.name.as_str(), s.preinitialize)).collect();
        assert_eq!(got, [("10-on", true), ("20-off", false)]);
        assert_eq!(errors.len(), 1);
        let msg = errors[0].to_string();
        assert!(msg.contains("30-bad.toml") && msg.contains("line 1") && msg.contains("expected a boolean"), "{msg}");
        assert!(!PolicySpec::new("x", "x.wasm").preinitialize);
    }
}
