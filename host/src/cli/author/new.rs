//! `nri-wasm new`: a policy project, ready to build and test, from a
//! template of the guest SDK of its language.
//!
//! An author's first hour decides whether they write a second policy: the
//! project must build and pass its tests unchanged, offline, and show the
//! whole path (a handler, settings, a native test, a fixture `eval` reads,
//! the install commands). The templates live beside their SDKs
//! (`guest-sdk/<lang>/template/`, listed by a `MANIFEST`) and are embedded
//! in the binary by `build.rs`, so the command works wherever the binary
//! is; a language whose SDK has no template yet is named as missing.
//!
//! Placeholders in the template files: `{{name}}` (the policy's name, in
//! kebab-case) and `{{name_snake}}` (the same with `_`, for identifiers and
//! the file name Cargo gives a component).
//!
//! A project must build wherever it is cloned, so no template names a path
//! of this machine: `new` makes the link `.sdk` to the SDK, which the
//! project's `.gitignore` keeps out of the repository. A Rust project's
//! `Cargo.toml` depends on `.sdk` (Cargo cannot read the environment); the
//! languages built by scripts find the SDK in their `sdk.sh`, through
//! `$NRI_WASM_SDK` or that link. Where a project is cloned, its README
//! tells how to make the link.

use std::io::Write;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

/// One file of a template.
#[derive(Debug, Clone, Copy)]
pub struct TemplateFile {
    /// Where it goes in the project.
    pub path: &'static str,
    /// Its bytes; in text files `{{name}}` and `{{name_snake}}` stand for
    /// the policy's name.
    pub contents: &'static [u8],
    /// Written with the executable bits (build scripts).
    pub executable: bool,
}

/// The project template of one language.
#[derive(Debug, Clone, Copy)]
pub struct Template {
    /// The language it is for (`rust`, ...), as `--lang` names it.
    pub lang: &'static str,
    /// The SDK's directory when the binary was built.
    pub sdk: &'static str,
    /// Every file of the project, as built into the binary.
    pub files: &'static [TemplateFile],
}

include!(concat!(env!("OUT_DIR"), "/templates.rs"));

/// Longest policy name: it becomes a directory, a package and a file name.
const MAX_NAME: usize = 64;

/// The arguments of `nri-wasm new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The policy's name in kebab-case (e.g. `team-env`): the project's
    /// directory and package name, and `NN-NAME.wasm` once installed.
    pub name: String,
    /// The project's language (`rust`, or another SDK's if this binary has its template).
    #[arg(long, default_value = "rust")]
    pub lang: String,
    /// The directory to create (default: `./NAME`); it must not exist or be empty.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The SDK the project depends on (default: the one this binary was built with).
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// Why no project was created.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// This binary has no template for the language asked for.
    #[error("no project template for --lang {lang} in this binary; it has templates for: {available}")]
    UnknownLanguage {
        /// The `--lang` given.
        lang: String,
        /// The languages it has templates for, comma-separated (or why none).
        available: String,
    },
    /// The name is not kebab-case of at most 64 characters.
    #[error("{name:?} is not a policy name: {why}")]
    BadName {
        /// The name given.
        name: String,
        /// What to change in it.
        why: String,
    },
    /// The project's directory (given) exists and is not empty.
    #[error("{}: already exists and is not an empty directory", .0.display())]
    Exists(PathBuf),
    /// The SDK directory the project would depend on does not exist.
    #[error("the {lang} SDK is not at {} (where this binary was built from); pass --sdk DIR", path.display())]
    NoSdk {
        /// The template's language.
        lang: String,
        /// Where the SDK was looked for: `--sdk`, else where the binary was built.
        path: PathBuf,
    },
    /// A file, directory or the SDK link of the project could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// What was being written.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

impl NewError {
    /// 2 for what the command line got wrong, 1 for what went wrong writing.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Write { .. } => 1,
            _ => 2,
        }
    }
}

/// The languages this binary has templates for.
pub fn languages() -> Vec<&'static str> {
    TEMPLATES.iter().map(|t| t.lang).collect()
}

/// The template of `lang`.
pub fn template(lang: &str) -> Result<&'static Template, NewError> {
    TEMPLATES.iter().find(|t| t.lang.eq_ignore_ascii_case(lang)).ok_or_else(|| NewError::UnknownLanguage {
        lang: lang.to_string(),
        available: match languages() {
            l if l.is_empty() => "none (it was built without guest-sdk/*/template)".into(),
            l => l.join(", "),
        },
    })
}

/// Checks a kebab-case name: lower-case letters and digits in words joined
/// by single dashes, starting with a letter.
pub fn check_name(name: &str) -> Result<(), NewError> {
    let bad = |why: &str| Err(NewError::BadName { name: name.to_string(), why: why.to_string() });
    if name.is_empty() || name.len() > MAX_NAME {
        return bad(&format!("use 1 to {MAX_NAME} characters"));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return bad("start it with a lower-case letter");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return bad("use lower-case letters, digits and dashes (kebab-case, e.g. team-env)");
    }
    if name.ends_with('-') || name.contains("--") {
        return bad("use single dashes between words");
    }
    Ok(())
}

/// Fills in a template file's placeholders (text files only).
fn fill(contents: &'static [u8], name: &str) -> Vec<u8> {
    match std::str::from_utf8(contents) {
        Ok(text) => text.replace("{{name_snake}}", &name.replace('-', "_")).replace("{{name}}", name).into_bytes(),
        Err(_) => contents.to_vec(),
    }
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
}

/// Creates the project of `template` for `name` in `dir`, depending on the
/// SDK in `sdk`. Returns the files written.
pub fn create(template: &Template, name: &str, dir: &Path, sdk: &Path) -> Result<Vec<PathBuf>, NewError> {
    check_name(name)?;
    if dir.exists() && !is_empty_dir(dir) {
        return Err(NewError::Exists(dir.to_path_buf()));
    }
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NewError::Write { path, source }
    };
    let mut written = Vec::new();
    for file in template.files {
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write_err(parent))?;
        }
        let mut out = std::fs::File::options().write(true).create_new(true).open(&path).map_err(write_err(&path))?;
        out.write_all(&fill(file.contents, name)).map_err(write_err(&path))?;
        if file.executable {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(write_err(&path))?;
        }
        written.push(path);
    }
    let link = dir.join(SDK_LINK);
    std::os::unix::fs::symlink(sdk, &link).map_err(write_err(&link))?;
    Ok(written)
}

/// The link to the SDK `new` makes in every project (see the module's documentation).
pub const SDK_LINK: &str = ".sdk";

/// `nri-wasm new`: writes what it did to `out`, errors to `err`.
pub fn new(args: &NewArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    match run(args, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(err, "nri-wasm new: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(args: &NewArgs, out: &mut dyn Write) -> Result<(), NewError> {
    check_name(&args.name)?;
    let template = template(&args.lang)?;
    let sdk = match &args.sdk {
        Some(dir) => std::path::absolute(dir).unwrap_or_else(|_| dir.clone()),
        None => PathBuf::from(template.sdk),
    };
    if !sdk.is_dir() {
        return Err(NewError::NoSdk { lang: template.lang.to_string(), path: sdk });
    }
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    let written = create(template, &args.name, &dir, &sdk)?;
    let _ = writeln!(
        out,
        "created {}: a {} policy project of {} files, using the SDK in {}",
        dir.display(),
        template.lang,
        written.len(),
        sdk.display()
    );
    let elsewhere = if template.lang == "rust" {
        "make it with `ln -sfn \"$NRI_WASM_SDK/rust\" .sdk`, NRI_WASM_SDK being"
    } else {
        "set NRI_WASM_SDK to"
    };
    let _ = writeln!(
        out,
        "the SDK is linked as {}, which is not committed; where the project is cloned, \
         {elsewhere} the guest-sdk directory of an nri-wasm checkout",
        dir.join(SDK_LINK).display()
    );
    if written.iter().any(|p| p.ends_with("README.md")) {
        let _ = writeln!(
            out,
            "next: {} has the commands to test, build, check, try and install it",
            dir.join("README.md").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rust_template_is_embedded_with_its_manifest_files() {
        let rust = template("rust").expect("the rust template");
        let paths: Vec<&str> = rust.files.iter().map(|f| f.path).collect();
        for want in ["Cargo.toml", "rust-toolchain.toml", "src/lib.rs", "src/tests.rs", "README.md", "policy.toml"] {
            assert!(paths.contains(&want), "{want} missing from {paths:?}");
        }
        assert!(paths.iter().any(|p| p.starts_with("fixtures/") && p.ends_with(".json")), "{paths:?}");
        assert!(Path::new(rust.sdk).join("Cargo.toml").is_file(), "{}", rust.sdk);
    }

    #[test]
    fn placeholders_are_filled_and_nothing_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("team-env");
        let rust = template("rust").unwrap();
        let written = create(rust, "team-env", &project, Path::new("/opt/sdk")).unwrap();
        assert_eq!(written.len(), rust.files.len());
        let cargo = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"team-env\"") && cargo.contains("path = \".sdk\""), "{cargo}");
        for path in &written {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(!text.contains("{{"), "{} keeps a placeholder", path.display());
        }
        let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
        assert!(readme.contains("team_env.wasm"), "{readme}");
        let again = create(rust, "team-env", &project, Path::new("/opt/sdk")).unwrap_err();
        assert!(matches!(again, NewError::Exists(_)), "{again}");
        assert_eq!(again.exit_code(), 2);
    }

    #[test]
    fn projects_name_no_path_and_link_their_sdk() {
        let dir = tempfile::tempdir().unwrap();
        assert!(TEMPLATES.iter().any(|t| t.lang == "rust"));
        for t in TEMPLATES {
            let project = dir.path().join(t.lang);
            let written = create(t, "team-env", &project, Path::new("/opt/sdk")).unwrap();
            for path in &written {
                let text = std::fs::read_to_string(path).unwrap();
                assert!(!text.contains("/opt/sdk"), "{}: {} names the SDK's path", t.lang, path.display());
            }
            assert_eq!(std::fs::read_link(project.join(SDK_LINK)).unwrap(), Path::new("/opt/sdk"), "{}", t.lang);
            let ignore = std::fs::read_to_string(project.join(".gitignore")).unwrap();
            assert!(ignore.lines().any(|l| l == "/.sdk"), "{}: {ignore}", t.lang);
        }
    }

    /// The SDK's manifest stands alone (a project reaches it through its
    /// link, outside this workspace) and says what the workspace says; the
    /// template asks for the SDK's version.
    #[test]
    fn the_rust_sdk_keeps_the_workspaces_fields_and_versions() {
        let read = |path: &Path| -> toml::Table {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let sdk_dir = Path::new(template("rust").unwrap().sdk);
        let sdk = read(&sdk_dir.join("Cargo.toml"));
        let root = read(&sdk_dir.join("../../Cargo.toml"));
        let ws = &root["workspace"];
        let package = &sdk["package"];
        for field in ["version", "edition", "rust-version", "license", "publish"] {
            assert_eq!(package.get(field), ws["package"].get(field), "package.{field}");
        }
        // Every dependency the workspace also declares, in every table
        // (plain, dev, build, and per target), has the workspace's version
        // and features.
        let deps = ws["dependencies"].as_table().unwrap();
        let mut tables = vec![("".to_string(), &sdk)];
        for (cfg, target) in sdk.get("target").and_then(|t| t.as_table()).into_iter().flatten() {
            tables.push((format!("target.{cfg}."), target.as_table().unwrap()));
        }
        let mut compared = Vec::new();
        for (prefix, table) in tables {
            for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
                for (name, dep) in table.get(kind).and_then(|d| d.as_table()).into_iter().flatten() {
                    if let Some(want) = deps.get(name) {
                        assert_eq!(dep, want, "{prefix}{kind}.{name}");
                        compared.push(name.as_str());
                    }
                }
            }
        }
        for name in ["serde_json", "wit-bindgen"] {
            assert!(compared.contains(&name), "{name} is compared: {compared:?}");
        }
        assert_eq!(sdk["lints"], ws["lints"], "lints");
        // Nothing inherits from a workspace: outside this one there is none.
        assert!(package.get("workspace").is_none(), "package.workspace");
        fn inherits(value: &toml::Value, at: &str) -> Option<String> {
            let table = value.as_table()?;
            if table.get("workspace").and_then(toml::Value::as_bool) == Some(true) {
                return Some(at.to_string());
            }
            table.iter().find_map(|(k, v)| inherits(v, &if at.is_empty() { k.clone() } else { format!("{at}.{k}") }))
        }
        assert_eq!(inherits(&toml::Value::Table(sdk.clone()), ""), None, "`workspace = true` in the SDK's Cargo.toml");

        let template = template("rust").unwrap().files.iter().find(|f| f.path == "Cargo.toml").unwrap();
        let project: toml::Table = toml::from_str(std::str::from_utf8(template.contents).unwrap()).unwrap();
        let want = format!("={}", package["version"].as_str().unwrap());
        assert_eq!(project["dependencies"]["nri-wasm-sdk"]["version"].as_str(), Some(want.as_str()));
        assert_eq!(project["dependencies"]["nri-wasm-sdk"]["path"].as_str(), Some(SDK_LINK));
        assert_eq!(project["workspace"]["exclude"][0].as_str(), Some(SDK_LINK));
    }

    #[test]
    fn names_are_kebab_case() {
        for good in ["x", "team-env", "deny-host-sockets2"] {
            check_name(good).unwrap();
        }
        for (bad, why) in [
            ("", "characters"),
            ("Team", "lower-case letter"),
            ("2fast", "lower-case letter"),
            ("team_env", "kebab-case"),
            ("team--env", "single dashes"),
            ("team-", "single dashes"),
            ("../x", "lower-case letter"),
        ] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_language_without_a_template_names_those_there_are() {
        let e = template("cobol").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("--lang cobol") && text.contains("rust"), "{text}");
        let mut out = Vec::new();
        let mut err = Vec::new();
        let args = NewArgs { name: "x".into(), lang: "cobol".into(), dir: None, sdk: None };
        assert_eq!(new(&args, &mut out, &mut err), ExitCode::from(2));
        assert!(String::from_utf8_lossy(&err).contains("templates for: "), "{}", String::from_utf8_lossy(&err));
    }
}
