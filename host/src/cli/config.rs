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
use crate::policy::load::directory;
use crate::policy::load::errors::LoadError;
use crate::policy::spec::manifest::{PolicySpec, ReadOptions};

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
    let config = match Config::load_all(&args.file) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors {
                writeln!(err, "error: {}", crate::text::chain(e))?;
            }
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
            ReadOptions { defaults: config.policies.limits(), strict_permissions: config.policies.strict_permissions };
        let (mut specs, mut errors) = match readable {
            Some(dir) => directory::scan(dir, options),
            None => Default::default(),
        };
        directory::add_config_sources(&mut specs, &mut errors, readable, &sources, options);
        // Each policy file read once, as the host reads it: what it
        // declares for the listing, or why the host would refuse it.
        let max = config.engine.max_component_mib << 20;
        let declared: Vec<Result<String, LoadError>> = specs.iter().map(|s| declares(s, max)).collect();
        if !args.quiet {
            match readable {
                Some(dir) => writeln!(out, "policies in {}:", dir.display())?,
                None => writeln!(out, "policies named in [policies.sources]:")?,
            }
            for (s, declared) in specs.iter().zip(&declared) {
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
                writeln!(out, "  {:<24} {}", "", grants_line(s, declared))?;
                if let Some(source) = &s.source {
                    writeln!(out, "  {:<24} source={}", "", source.reference)?;
                }
            }
            if specs.is_empty() && errors.is_empty() {
                writeln!(out, "  (none)")?;
            }
        }
        // A file's name may hold a newline: each error is one line.
        for e in &errors {
            writeln!(err, "error: {}", crate::text::guest_text(&e.to_string(), crate::text::MAX_REASON_BYTES))?;
            ok = false;
        }
        if let Some(dir) = readable {
            for name in unread_settings(dir) {
                writeln!(
                    err,
                    "error: {}/{name}: not read by the host, which reads settings files named NN-name.toml \
                     (two digits, a dash, then letters, digits and _.+-)",
                    crate::text::guest_text(&dir.display().to_string(), 1024)
                )?;
                ok = false;
            }
        }
        // Limits a settings file asks for must fit the engine as well;
        // a reference must be usable with the keys that apply to it.
        // A policy file the host's read refuses (strict-permissions, not
        // a regular file, too large) is an error here too; whether it is a
        // component is `nri-wasm check`'s to say.
        for (s, declared) in specs.iter().zip(&declared) {
            if let Some(source) = &s.source {
                let checked = crate::registry::keys_for(source, &config.registry).and_then(|keys| {
                    crate::registry::check_pinning(&source.reference, keys.len())?;
                    crate::registry::check_transport(&config.registry, &source.reference, keys.len())
                });
                if let Err(e) = checked {
                    writeln!(err, "error: policy {}: source {}: {e}", s.name, source.reference)?;
                    ok = false;
                }
            } else if let Err(e) = declared {
                writeln!(err, "error: {}", crate::text::guest_text(&e.to_string(), crate::text::MAX_REASON_BYTES))?;
                ok = false;
            }
            if let Err(mut e) = config.engine.validate(&s.limits) {
                // Limits its settings file sets are that file's.
                if let Some(file) = s.settings_file.as_deref().filter(|_| e.table == "[policies.limits]") {
                    e.table = format!("{} [limits]", file.display());
                }
                writeln!(err, "error: policy {}: {e}", s.name)?;
                ok = false;
            }
        }
    }
    if !args.quiet {
        writeln!(out, "\n# effective configuration (every default filled in)")?;
        write!(out, "{}", config.effective_toml())?;
    }
    Ok(ok)
}

/// The entries of a policy directory the host passes over without a word
/// that look meant as settings: a name ending in `.toml` that is not
/// `NN-name.toml`, or any name with a control character (a newline in a
/// name would otherwise end a line of this report). Named escaped, each on
/// one line. Hidden entries are the host's to skip (a ConfigMap's `..data`).
fn unread_settings(dir: &std::path::Path) -> Vec<String> {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|name| !name.as_bytes().starts_with(b"."))
        .filter_map(|name| name.into_string().ok())
        .filter(|name| {
            let control = name.chars().any(char::is_control);
            let toml = name.ends_with(".toml") && crate::policy::spec::manifest::policy_stem(name, "toml").is_none();
            let wasm = name.ends_with(".wasm");
            (control && !wasm) || toml
        })
        .map(|name| crate::text::guest_text(&name, 256))
        .collect();
    names.sort();
    names
}

/// What the policy's component declares, read from its file as the host
/// reads it, without compiling it; the host's refusal if it would refuse
/// the file. The grant is set against it by [`grants_line`].
fn declares(spec: &PolicySpec, max_bytes: u64) -> Result<String, LoadError> {
    use crate::policy::spec::caps::{parse_declaration, Allowed, CapSet};
    if spec.source.is_some() {
        return Ok("known once pulled (`nri-wasm check` on the reference shows it)".into());
    }
    let bytes = crate::policy::load::read::read_policy_file(spec, max_bytes)?;
    let declared = crate::policy::load::inspect::binary(&spec.name, &bytes)
        .ok()
        .and_then(|binary| crate::policy::load::inspect::survey(&spec.name, &binary).ok())
        .map(|found| found.declaration.as_deref().map(parse_declaration));
    let declared = match declared {
        None => return Ok("(not a readable component)".into()),
        Some(None) => return Ok("nothing (taken as nothing dangerous)".into()),
        Some(Some(Err(e))) => return Ok(e.to_string()),
        Some(Some(Ok(set))) => set,
    };
    let allowed = Allowed { granted: spec.grant, declared: Some(declared) };
    let mut line = declared.describe();
    let ungranted = allowed.ungranted();
    if ungranted != CapSet::EMPTY {
        line.push_str(&format!("; NOT GRANTED (its output needing them is refused): {}", ungranted.describe()));
    }
    let unasked = allowed.unasked();
    if unasked != CapSet::EMPTY {
        line.push_str(&format!("; granted but not declared (unused): {}", unasked.describe()));
    }
    Ok(line)
}

/// What a settings file grants, beside what the component declares.
fn grants_line(spec: &PolicySpec, declared: &Result<String, LoadError>) -> String {
    let extra = spec.grant.dangerous();
    let granted = if extra.is_empty() {
        "grant=default (nothing dangerous)".to_string()
    } else {
        format!("grant=default + {}", extra.describe())
    };
    match declared {
        Ok(declared) => format!("{granted}; declares: {declared}"),
        // The refusal itself is among the errors.
        Err(_) => format!("{granted}; declares: (not a readable component)"),
    }
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
            // The rule ties two keys: the one the file sets is blamed.
            ("[policies.limits]\nmemory-mib = 4096\n", &[], &["line 2", "[policies.limits] memory-mib 4096"]),
            ("[engine]\nmax-memory-mib = 16\n", &[], &["line 2", "exceeds [engine] max-memory-mib 16"]),
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
                &["policy 10-a:", "10-a.toml [limits] memory-mib 4096 exceeds [engine] max-memory-mib"],
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

    /// What the host would refuse at the start fails the check: a policy
    /// file `strict-permissions` refuses, and a signed policy from a
    /// registry reached over plain HTTP without `plain-http-signed`.
    #[test]
    fn what_the_host_would_refuse_at_the_start_fails_the_check() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("policies");
        std::fs::create_dir(&policies).unwrap();
        let wasm = policies.join("10-a.wasm");
        std::fs::write(&wasm, "x").unwrap();
        std::fs::set_permissions(&wasm, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (_, public) = crate::registry::sign::SigningKeyFile::generate().unwrap().to_pem().unwrap();
        let key = dir.path().join("team.pub");
        std::fs::write(&key, public).unwrap();
        let check_with = |text: String| {
            let file = dir.path().join("config.toml");
            std::fs::write(&file, text).unwrap();
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = check(&ConfigCheckArgs { file, quiet: true }, &mut out, &mut err);
            (code == ExitCode::SUCCESS, String::from_utf8(err).unwrap())
        };
        let dir_line = format!("[policies]\ndir = \"{}\"\n", policies.display());
        let (passed, err) = check_with(dir_line.clone());
        assert!(passed, "not strict: {err}");
        let (passed, err) = check_with(format!("{dir_line}strict-permissions = true\n"));
        assert!(!passed, "strict");
        // Not root: the file is the tester's, refused for its owner first.
        let why = if crate::files::Trust::effective_uid() == 0 { "writable by group or others" } else { "not by root" };
        assert!(err.contains("10-a") && err.contains(why) && err.contains("strict"), "{err}");
        std::fs::remove_file(&wasm).unwrap();
        let signed = format!(
            "[registry]\npublic-keys = [\"{}\"]\nplain-http = [\"registry.example\"]\n\
             [policies.sources]\n\"30-signed\" = \"oci://registry.example/p/x:stable\"\n",
            key.display()
        );
        let (passed, err) = check_with(signed.clone());
        assert!(!passed && err.contains("30-signed") && err.contains("plain-http-signed"), "{err}");
        let (passed, err) = check_with(signed.replace("[registry]\n", "[registry]\nplain-http-signed = true\n"));
        assert!(passed, "accepted: {err}");
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

    /// Every error of the file, each with its line, in file order: wrong
    /// names and types (serde stops at the first), values that break a
    /// rule, two in one table.
    #[test]
    fn every_error_is_reported_with_its_line_in_file_order() {
        let text = "[plugin]\nindex = \"7\"\nnmae = \"x\"\n\
                    [runtime]\nregister-timeout-ms = \"5s\"\nreconnect-initial-ms = 10\nreconnect-max-ms = 5\n\
                    [policies.limits]\nfuel = 0\ntimeout-ms = 0\n\
                    [chain]\nbudget-fraction = 1.5\nbreaker-failures = 0\n\
                    [logging]\nformat = \"xml\"\n";
        let (code, out, err) = run(text, &[]);
        assert_eq!(code, 1);
        assert!(!out.contains("effective configuration"), "{out}");
        let lines: Vec<&str> = err.lines().collect();
        let want: &[(&str, &[&str])] = &[
            ("line 2", &["index", "two digits"]),
            ("line 3", &["nmae", "expected `name` or `index`"]),
            ("line 5", &["register-timeout-ms", "integer"]),
            ("line 6", &["reconnect-initial-ms (10)", "reconnect-max-ms (5)"]),
            ("line 9", &["fuel must be positive"]),
            ("line 10", &["timeout-ms must be positive"]),
            ("line 12", &["budget-fraction"]),
            ("line 13", &["breaker-failures"]),
            ("line 15", &["format", "`text`"]),
        ];
        assert_eq!(lines.len(), want.len(), "{err}");
        for (line, (at, words)) in lines.iter().zip(want) {
            assert!(line.starts_with("error: config file ") && line.contains("config.toml"), "{line}");
            assert!(line.contains(&format!("{at}:")) || line.contains(&format!("{at},")), "{at}: {line}");
            for w in *words {
                assert!(line.contains(w), "{w:?} missing from {line}");
            }
        }
        // The first of them is what `run` says, alone.
        let e = Config::parse(text, std::path::Path::new("config.toml")).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("two digits"), "{e}");
    }

    /// A syntax error is reported alone, with any other the parser finds
    /// past it: what follows one may not read as meant.
    #[test]
    fn syntax_errors_are_reported_without_what_follows_them() {
        let (code, _out, err) = run("[plugin]\nname = \"x\n[runtime]\nregister-timeout-ms = 0\n", &[]);
        assert_eq!(code, 1);
        assert!(err.lines().all(|l| l.contains("line 2")), "{err}");
    }

    /// A settings file the host would pass over without a word (its name is
    /// not NN-name.toml; one holds a newline) is named, escaped, on one line.
    #[test]
    fn settings_files_the_host_does_not_read_are_reported_escaped() {
        let (code, _out, err) = run(
            "[policies]\ndir = \"$POLICIES\"\n",
            &[("20-b\nc.toml", "mode = \"audit\"\n"), ("policy.toml", ""), ("notes.txt", ""), ("10-a.wasm", "x")],
        );
        assert_eq!(code, 1, "{err}");
        let unread: Vec<&str> = err.lines().filter(|l| l.contains("not read by the host")).collect();
        assert_eq!(unread.len(), 2, "{err}");
        assert!(unread[0].contains("/20-b\\nc.toml: "), "{}", unread[0]);
        assert!(unread[1].contains("/policy.toml: "), "{}", unread[1]);
        assert!(!err.contains("notes.txt"), "{err}");
        // A policy file whose name holds a newline is one line too.
        let (code, _out, err) = run("[policies]\ndir = \"$POLICIES\"\n", &[("10-a\nb.wasm", "x")]);
        assert_eq!(code, 1);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("10-a\\nb.wasm"), "{err}");
    }

    /// The effective configuration has every key: every limit of
    /// `[policies.limits]`, a comment for a key with no value, and reads
    /// back to the same configuration.
    #[test]
    fn the_effective_configuration_has_every_key() {
        let (code, out, err) = run("[policies.limits]\nfuel = 5000\n", &[]);
        assert_eq!(code, 0, "{err}");
        let printed = out.split("# effective configuration (every default filled in)\n").nth(1).unwrap();
        let limits = printed.split("[policies.limits]\n").nth(1).unwrap().split("\n\n").next().unwrap();
        for key in ["fuel = 5000", "timeout-ms = 100", "memory-mib = 64", "table-elements = ", "instances = "] {
            assert!(limits.contains(key), "{key} missing from [policies.limits]:\n{limits}");
        }
        for (table, keys) in TABLES_FOR_TESTS {
            let section = printed.split(&format!("[{table}]\n")).nth(1).unwrap_or_else(|| panic!("no [{table}]"));
            let section = section.split("\n[").next().unwrap();
            for key in *keys {
                assert!(
                    section
                        .lines()
                        .any(|l| l.starts_with(&format!("{key} = ")) || l.starts_with(&format!("# {key}: "))),
                    "[{table}] {key} missing:\n{section}"
                );
            }
        }
        assert!(printed.contains("# dir: not set"), "{printed}");
        let back = Config::parse(printed, std::path::Path::new("printed")).unwrap();
        let want = Config::parse("[policies.limits]\nfuel = 5000\n", std::path::Path::new("x")).unwrap();
        assert_eq!(back.policies.limits(), want.policies.limits());
        assert_eq!(Config { policies: want.policies.clone(), ..back.clone() }, want, "the rest reads back the same");
        assert_eq!(back.effective_toml(), printed, "printed again, the same");
        // A source is a table of its own, and reads back.
        let digest = "a".repeat(64);
        let text = format!("[policies.sources]\n\"30-u\" = \"oci://r.example/p/u:1@sha256:{digest}\"\n");
        let (code, out, err) = run(&text, &[]);
        assert_eq!(code, 0, "{err}");
        let printed = out.split("# effective configuration (every default filled in)\n").nth(1).unwrap();
        let back = Config::parse(printed, std::path::Path::new("printed")).unwrap();
        assert_eq!(back.policies.sources.len(), 1, "{printed}");
    }

    /// Tables and keys every effective configuration shows (a sample).
    const TABLES_FOR_TESTS: &[(&str, &[&str])] = &[
        ("plugin", &["name", "index"]),
        ("runtime", &["socket", "start-wait-ms"]),
        ("policies", &["dir", "state-dir", "watch"]),
        ("engine", &["cache-dir", "pooling"]),
        ("chain", &["budget-fraction"]),
    ];

    #[test]
    fn a_missing_file_is_an_error_that_names_it() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let args = ConfigCheckArgs { file: "/nonexistent/nri-wasm.toml".into(), quiet: false };
        assert_ne!(check(&args, &mut out, &mut err), ExitCode::SUCCESS);
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("/nonexistent/nri-wasm.toml"), "{err}");
    }
}
