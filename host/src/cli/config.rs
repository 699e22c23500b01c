//! `nri-wasm config check FILE`: is this configuration usable, and what
//! does it amount to?
//!
//! It checks what `run` would check before connecting (every key, every
//! value, the flags' tables), then the settings file of every policy in the
//! policy directory, and prints the effective configuration with every
//! default filled in. Errors go to stderr with the file, the line, the key
//! and what is allowed; any error makes the exit status non-zero.

use std::io::Write;
use std::process::ExitCode;

use super::ConfigCheckArgs;
use crate::config::Config;
use crate::policy::loader::{self, DirOptions};

/// Checks `args.file`; writes the report to `out` and errors to `err`.
pub(super) fn check(args: &ConfigCheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    match report(args, out, err) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            let _ = writeln!(err, "error: cannot write the report: {e}");
            ExitCode::from(1)
        }
    }
}

fn report(args: &ConfigCheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> std::io::Result<bool> {
    let config = match Config::load(&args.file) {
        Ok(c) => c,
        Err(e) => {
            writeln!(err, "error: {}", crate::text::chain(&e))?;
            return Ok(false);
        }
    };
    let mut ok = true;
    if !args.quiet {
        writeln!(out, "{}: valid", args.file.display())?;
    }
    // Policies named in this file ([policies.sources]) are checked even with
    // no policy directory here (or none at all): a tag without keys must
    // fail here, not at the start.
    let sources = config.policies.sources().unwrap_or_default();
    let dir = config.policies.dir.as_deref();
    if let Some(dir) = dir.filter(|d| !d.is_dir()) {
        writeln!(
            err,
            "warning: policy directory {} does not exist here; its settings files were not checked",
            dir.display()
        )?;
    }
    let readable = dir.filter(|d| d.is_dir());
    if readable.is_some() || !sources.is_empty() {
        let options =
            DirOptions { defaults: config.policies.limits(), strict_permissions: config.policies.strict_permissions };
        let (mut specs, mut errors) = match readable {
            Some(dir) => loader::scan(dir, options),
            None => Default::default(),
        };
        loader::add_config_sources(&mut specs, &mut errors, readable, &sources, options);
        if !args.quiet {
            match readable {
                Some(dir) => writeln!(out, "policies in {}:", dir.display())?,
                None => writeln!(out, "policies named in [policies.sources]:")?,
            }
            for s in &specs {
                let l = &s.limits;
                writeln!(
                    out,
                    "  {:<24} mode={:?} on-error={:?} on-conflict={:?} fuel={} timeout-ms={} memory-mib={}{}",
                    s.name,
                    s.mode,
                    s.on_error,
                    s.on_conflict,
                    l.fuel,
                    l.timeout_ms,
                    l.memory_mib,
                    if s.sha256.is_some() { " sha256-pinned" } else { "" },
                )?;
                writeln!(out, "  {:<24} {}", "", grants_line(s, config.engine.max_component_mib << 20))?;
                if let Some(source) = &s.source {
                    writeln!(out, "  {:<24} source={}", "", source.reference)?;
                }
            }
            if specs.is_empty() && errors.is_empty() {
                writeln!(out, "  (none)")?;
            }
        }
        for e in &errors {
            writeln!(err, "error: {e}")?;
            ok = false;
        }
        // Limits a settings file asks for must fit the engine as well;
        // a reference must be usable with the keys that apply to it.
        for s in &specs {
            if let Some(source) = &s.source {
                let checked = crate::registry::keys_for(source, &config.registry)
                    .and_then(|keys| crate::registry::check_pinning(&source.reference, keys.len()));
                if let Err(e) = checked {
                    writeln!(err, "error: policy {}: source {}: {e}", s.name, source.reference)?;
                    ok = false;
                }
            }
            if let Err(e) = config.engine.validate(&s.limits) {
                writeln!(err, "error: policy {}: {e}", s.name)?;
                ok = false;
            }
        }
    }
    if !args.quiet {
        writeln!(out, "\n# effective configuration (every default filled in)")?;
        write!(out, "{}", config.to_toml())?;
    }
    Ok(ok)
}

/// What a settings file grants, beside what the component declares (read
/// from the file, as the host reads it, without compiling it).
fn grants_line(spec: &crate::policy::manifest::PolicySpec, max_bytes: u64) -> String {
    use crate::policy::caps::{parse_declaration, Allowed, CapSet};
    let extra = spec.grant.dangerous();
    let granted = if extra.is_empty() {
        "grant=default (nothing dangerous)".to_string()
    } else {
        format!("grant=default + {}", extra.describe())
    };
    if spec.source.is_some() {
        return format!("{granted}; declares: known once pulled (`nri-wasm check` on the reference shows it)");
    }
    let bytes = crate::policy::prepare::read_policy_file(spec, max_bytes).ok();
    let declared = bytes
        .as_deref()
        .and_then(|bytes| crate::policy::inspect::binary(&spec.name, bytes).ok())
        .and_then(|binary| crate::policy::inspect::survey(&spec.name, &binary).ok())
        .map(|found| found.declaration.as_deref().map(parse_declaration));
    let declared = match declared {
        None => return format!("{granted}; declares: (not a readable component)"),
        Some(None) => return format!("{granted}; declares: nothing (taken as nothing dangerous)"),
        Some(Some(Err(e))) => return format!("{granted}; declares: {e}"),
        Some(Some(Ok(set))) => set,
    };
    let allowed = Allowed { granted: spec.grant, declared: Some(declared) };
    let mut line = format!("{granted}; declares: {}", declared.describe());
    let ungranted = allowed.ungranted();
    if ungranted != CapSet::EMPTY {
        line.push_str(&format!("; NOT GRANTED (its output needing them is refused): {}", ungranted.describe()));
    }
    let unasked = allowed.unasked();
    if unasked != CapSet::EMPTY {
        line.push_str(&format!("; granted but not declared (unused): {}", unasked.describe()));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, files: &[(&str, &str)]) -> (u8, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        for (name, content) in files {
            std::fs::write(policies.join(name), content).unwrap();
        }
        let file = dir.path().join("config.toml");
        let text = text.replace("$POLICIES", &policies.display().to_string());
        std::fs::write(&file, text).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = check(&ConfigCheckArgs { file, quiet: false }, &mut out, &mut err);
        let code = if code == ExitCode::SUCCESS { 0 } else { 1 };
        (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    #[test]
    fn a_valid_file_prints_the_effective_configuration_and_its_policies() {
        let (code, out, err) = run(
            "[policies]\ndir = \"$POLICIES\"\n[chain]\nbudget-fraction = 0.25\n",
            &[("10-a.wasm", "x"), ("10-a.toml", "on-error = \"fail\"\n[limits]\nfuel = 1000\n")],
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("10-a") && out.contains("on-error=Fail") && out.contains("fuel=1000"), "{out}");
        assert!(out.contains("grant=default (nothing dangerous); declares: (not a readable component)"), "{out}");
        // Every default is printed, and the printed configuration reads back.
        let printed = out.split("# effective configuration (every default filled in)\n").nth(1).unwrap();
        let back = Config::parse(printed, std::path::Path::new("printed")).unwrap();
        assert_eq!(back.chain.budget_fraction, 0.25);
        assert!(printed.contains("register-timeout-ms = 5000"), "{printed}");
        assert!(printed.contains("[metrics]") && printed.contains("[logging]"), "{printed}");
    }

    /// Each broken file, with the words its error must contain.
    #[test]
    fn broken_files_fail_with_their_specific_message() {
        // (config text, files in the policy directory, words of the error)
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
        let cases: &[Case<'_>] = &[
            ("[plugin]\nnmae = \"x\"\n", &[], &["line 2", "nmae", "expected `name` or `index`"]),
            ("[plugin]\nindex = \"7\"\n", &[], &["[plugin]", "index", "two digits"]),
            ("[plugin]\nname = \"a b\"\n", &[], &["[plugin]", "name"]),
            ("[runtime]\nregister-timeout-ms = 0\n", &[], &["line 2", "register-timeout-ms", "positive"]),
            ("[runtime]\nregister-timeout-ms = \"5s\"\n", &[], &["line 2", "register-timeout-ms", "integer"]),
            ("[runtime]\nsocket = \"\"\n", &[], &["socket", "empty"]),
            ("[runtime]\nreconnect-initial-ms = 10\nreconnect-max-ms = 5\n", &[], &["reconnect-initial-ms", "line 2"]),
            ("[chain]\nbudget-fraction = 1.5\n", &[], &["line 2", "budget-fraction"]),
            ("[policies.limits]\nfuel = 0\n", &[], &["line 2", "fuel"]),
            ("[policies.limits]\nmemory-mib = 4096\n", &[], &["memory-mib", "max-memory-mib"]),
            ("[policies]\nreload-debounce-ms = 999999\n", &[], &["reload-debounce-ms", "60000"]),
            ("[metrics]\naddress = \"localhost\"\n", &[], &["line 2", "[metrics] address", "127.0.0.1:9580"]),
            ("[logging]\nformat = \"xml\"\n", &[], &["line 2", "format", "`text`", "`json`"]),
            ("[logging]\nlevel = \"loud\"\n", &[], &["[logging] level", "line 2"]),
            ("[engine]\npoolng = true\n", &[], &["line 2", "poolng", "pooling"]),
            ("[nope]\n", &[], &["line 1", "nope", "plugin"]),
            ("plugin = 3\n", &[], &["line 1, column 10, key plugin", "expected a table"]),
            ("[plugin\n", &[], &["line 1"]),
            (
                "[policies]\ndir = \"$POLICIES\"\n",
                &[("10-a.wasm", "x"), ("10-a.toml", "on-eror = \"fail\"\n")],
                &["10-a", "on-eror", "10-a.toml"],
            ),
            (
                "[policies]\ndir = \"$POLICIES\"\n",
                &[("10-a.wasm", "x"), ("10-a.toml", "[limits]\nmemory-mib = 4096\n")],
                &["10-a", "memory-mib"],
            ),
            ("[policies]\ndir = \"$POLICIES\"\n", &[("20-b.toml", "")], &["20-b.toml", "no policy"]),
            ("[policies]\ndir = \"$POLICIES\"\n", &[("x.wasm", "")], &["x.wasm", "NN-name.wasm"]),
        ];
        for (text, files, words) in cases {
            let (code, _out, err) = run(text, files);
            assert_eq!(code, 1, "{text:?} should fail");
            for w in *words {
                assert!(err.contains(w), "{text:?}: {w:?} missing from the error:\n{err}");
            }
        }
    }

    /// A policy named in `[policies.sources]` is checked even with no
    /// policy directory, or one that does not exist here: a tag without a
    /// signature requirement fails the check, as it would fail the start.
    #[test]
    fn sources_are_checked_without_a_policy_directory() {
        let tag = "[policies.sources]\n\"30-tagged\" = \"oci://registry.example/p/x:stable\"\n";
        for dir in ["", "[policies]\ndir = \"/nonexistent/policies\"\n"] {
            let text = format!("{dir}{tag}");
            let (code, out, err) = run(&text, &[]);
            assert_eq!(code, 1, "{text:?} should fail:\n{out}");
            assert!(err.contains("30-tagged") && err.contains("pin its digest"), "{err}");
        }
        let pinned = format!(
            "[policies.sources]\n\"30-pinned\" = \"oci://registry.example/p/x:stable@sha256:{}\"\n",
            "a".repeat(64)
        );
        let (code, out, err) = run(&pinned, &[]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("policies named in [policies.sources]:") && out.contains("30-pinned"), "{out}");
    }

    /// A syntax error in the configuration or in a policy's settings file
    /// names the file, the line and the column, and never prints the line:
    /// it may hold a secret.
    #[test]
    fn syntax_errors_point_at_the_line_without_printing_it() {
        let (code, out, err) = run("[plugin]\nname = \"hunter2-secret\n", &[]);
        assert_eq!(code, 1);
        assert!(err.contains("config.toml") && err.contains("line 2, column"), "{err}");
        assert!(!err.contains("hunter2") && !out.contains("hunter2"), "{err}{out}");
        let (code, out, err) = run(
            "[policies]\ndir = \"$POLICIES\"\n",
            &[("10-a.wasm", "x"), ("10-a.toml", "mode = \"audit\"\nsettings = { token = \"hunter2-secret }\n")],
        );
        assert_eq!(code, 1);
        assert!(err.contains("10-a.toml") && err.contains("line 2, column"), "{err}");
        assert!(!err.contains("hunter2") && !out.contains("hunter2"), "{err}{out}");
    }

    #[test]
    fn a_missing_file_is_an_error_that_names_it() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let args = ConfigCheckArgs { file: "/nonexistent/nri-wasm.toml".into(), quiet: false };
        assert_ne!(check(&args, &mut out, &mut err), ExitCode::SUCCESS);
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("/nonexistent/nri-wasm.toml"), "{err}");
    }
}
