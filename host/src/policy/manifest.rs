//! Finding policies in a directory, and reading their settings files.
//!
//! An operator installs a policy by dropping `NN-name.wasm` into the policy
//! directory, optionally with `NN-name.toml` beside it. The two-digit prefix
//! orders the chain, like NRI orders its plugins. A bad settings file is
//! reported with its path and the offending key, and only that policy is
//! left out: one mistake must not take the other policies down.

use std::path::{Path, PathBuf};

use serde::Deserialize;

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

/// The optional `NN-name.toml` beside a policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PolicyFile {
    #[serde(default)]
    pub on_error: OnError,
    #[serde(default)]
    pub mode: Mode,
    /// Given to the policy's `configure` as text: a string as is, a table as JSON.
    pub settings: Option<toml::Value>,
    #[serde(default)]
    pub limits: LimitOverrides,
}

/// Everything needed to load one policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// `NN-name`, the policy's name in logs, errors and metrics.
    pub name: String,
    pub wasm: PathBuf,
    /// The settings file, if there is one.
    pub settings_file: Option<PathBuf>,
    pub settings: String,
    pub on_error: OnError,
    pub mode: Mode,
    pub limits: Limits,
}

/// A policy that cannot be loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read policy directory {dir}: {reason}")]
    Directory { dir: PathBuf, reason: String },
    #[error("{path}: file name must be NN-name.wasm (two digits, a dash, then [a-zA-Z0-9_.+-])")]
    BadName { path: PathBuf },
    #[error("{path}: settings file has no policy {wasm} beside it")]
    Orphan { path: PathBuf, wasm: PathBuf },
    #[error("{path}: {reason}")]
    Settings { path: PathBuf, reason: String },
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

/// Reads a settings file into a spec for `wasm`.
pub fn read_spec(
    name: &str,
    wasm: &Path,
    settings_file: Option<&Path>,
    defaults: Limits,
) -> Result<PolicySpec, SpecError> {
    let file = match settings_file {
        None => PolicyFile::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| SpecError::Settings { path: path.to_path_buf(), reason: e.to_string() })?;
            toml::from_str::<PolicyFile>(&text)
                .map_err(|e| SpecError::Settings { path: path.to_path_buf(), reason: e.to_string() })?
        }
    };
    let path = settings_file.unwrap_or(wasm).to_path_buf();
    let limits = defaults.with(&file.limits);
    limits.validate(name).map_err(|reason| SpecError::Settings { path: path.clone(), reason })?;
    let settings = match file.settings {
        None => String::new(),
        Some(toml::Value::String(s)) => s,
        Some(other) => serde_json::to_string(&other)
            .map_err(|e| SpecError::Settings { path: path.clone(), reason: format!("settings: {e}") })?,
    };
    Ok(PolicySpec {
        name: name.to_string(),
        wasm: wasm.to_path_buf(),
        settings_file: settings_file.map(Path::to_path_buf),
        settings,
        on_error: file.on_error,
        mode: file.mode,
        limits,
    })
}

/// Finds every policy in `dir`, in chain order. Returns the usable specs and
/// the problems found; a problem leaves out only the policy it concerns.
pub fn scan(dir: &Path, defaults: Limits) -> (Vec<PolicySpec>, Vec<SpecError>) {
    let mut specs = Vec::new();
    let mut errors = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(SpecError::Directory { dir: dir.to_path_buf(), reason: e.to_string() });
            return (specs, errors);
        }
    };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    for path in &files {
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        if file_name.ends_with(".wasm") {
            let Some(stem) = policy_stem(file_name, "wasm") else {
                errors.push(SpecError::BadName { path: path.clone() });
                continue;
            };
            let toml = path.with_extension("toml");
            let settings = files.contains(&toml).then_some(toml.as_path());
            match read_spec(&stem, path, settings, defaults) {
                Ok(spec) => specs.push(spec),
                Err(e) => errors.push(e),
            }
        } else if file_name.ends_with(".toml") {
            let wasm = path.with_extension("wasm");
            if policy_stem(file_name, "toml").is_some() && !files.contains(&wasm) {
                errors.push(SpecError::Orphan { path: path.clone(), wasm });
            }
        }
    }
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
        let (specs, errors) = scan(dir.path(), Limits::default());
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
        let (specs, errors) = scan(dir.path(), Limits::default());
        assert!(specs.is_empty());
        assert!(errors[0].to_string().contains("10-x.toml") && errors[0].to_string().contains("timeout-ms"));
    }
}
