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
//!
//! Which SDK: `--sdk DIR`, else `$NRI_WASM_SDK/<lang>` (the `guest-sdk`
//! directory of a checkout, the variable the projects' scripts read), else
//! the checkout this binary was built from. The SDK brings its tools'
//! installer: an author who installed the tools of one checkout and runs a
//! binary built from another says which with `NRI_WASM_SDK`, and `new`
//! links that one (linking the binary's own would make the scripts look
//! for tools where none were installed). Then `new` asks the SDK's
//! installer whether this language's tools are there, and when they are
//! not, says so with the command that installs them (`install-tools.sh
//! --lang <lang>` of that SDK): the project is written either way, and its
//! scripts refuse to build with anything but the pinned tools.

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
    /// The SDK the project depends on, the language's directory
    /// (`guest-sdk/<lang>`). Default: `$NRI_WASM_SDK/<lang>`, else the
    /// checkout this binary was built from.
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// The environment variable naming the `guest-sdk` directory of a checkout.
pub const SDK_ENV: &str = "NRI_WASM_SDK";

/// Where the SDK a project links came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdkFrom {
    /// `--sdk DIR`.
    Flag,
    /// `$NRI_WASM_SDK/<lang>`.
    Env,
    /// The checkout this binary was built from.
    Build,
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
    #[error("the {lang} SDK is not at {} ({}){}", path.display(), from.describe(), from.remedy())]
    NoSdk {
        /// The template's language.
        lang: String,
        /// Where the SDK was looked for.
        path: PathBuf,
        /// Who named that place.
        from: SdkFrom,
    },
    /// A file, directory or the SDK link of the project could not be written.
    #[error("cannot write {}", path.display())]
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

impl SdkFrom {
    fn describe(self) -> &'static str {
        match self {
            Self::Flag => "--sdk",
            Self::Env => "$NRI_WASM_SDK/<lang>",
            Self::Build => "the checkout this binary was built from",
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            Self::Flag => "",
            Self::Env => ": set NRI_WASM_SDK to the guest-sdk directory of an nri-wasm checkout",
            Self::Build => {
                ": set NRI_WASM_SDK to the guest-sdk directory of an nri-wasm checkout (or pass --sdk DIR, the \
                 language's directory in it)"
            }
        }
    }
}

/// The SDK of `template` a project links: `--sdk`, else `$NRI_WASM_SDK`
/// (read through `env`), else the one this binary was built with; made
/// absolute, not resolved (a link to a checkout stays a link to it).
pub fn find_sdk(
    template: &Template,
    flag: Option<&Path>,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<(PathBuf, SdkFrom), NewError> {
    let absolute = |dir: &Path| std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let (sdk, from) = match (flag, env(SDK_ENV).filter(|v| !v.is_empty())) {
        (Some(dir), _) => (absolute(dir), SdkFrom::Flag),
        (None, Some(root)) => (absolute(&Path::new(&root).join(template.lang)), SdkFrom::Env),
        (None, None) => (PathBuf::from(template.sdk), SdkFrom::Build),
    };
    if !sdk.is_dir() {
        return Err(NewError::NoSdk { lang: template.lang.to_string(), path: sdk, from });
    }
    Ok((sdk, from))
}

/// Whether the tools the project's language needs are installed for `sdk`,
/// asked of its installer (`install-tools.sh --check --lang <lang>`, which
/// reads only what is on this machine). `None` when they are; else what is
/// missing, as the installer says it, and the command that installs them.
pub fn missing_tools(lang: &str, sdk: &Path) -> Option<String> {
    if lang == "rust" {
        // rustup installs the release and target of the project's
        // rust-toolchain.toml on first use; without it, nothing does.
        let on_path = |tool: &str| {
            std::env::var_os("PATH")
                .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
        };
        return (!on_path("cargo") || !on_path("rustup")).then(|| {
            "cargo and rustup are not both on PATH: install Rust with rustup (rustup.rs); it installs the \
             release and the wasm32-wasip2 target the project's rust-toolchain.toml names on first use"
                .to_string()
        });
    }
    let installer = sdk.parent().unwrap_or(sdk).join("install-tools.sh");
    let command = format!("{} --lang {lang}", crate::text::guest_text(&installer.display().to_string(), 1024));
    let checked = std::process::Command::new("bash")
        .arg(&installer)
        .args(["--check", "--lang", lang])
        .stdin(std::process::Stdio::null())
        .output();
    match checked {
        Ok(out) if out.status.success() => None,
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<String> = said
                .lines()
                .map(|l| l.trim_start_matches("install-tools:").trim())
                .filter(|l| l.starts_with("- "))
                .map(|l| crate::text::guest_text(l, 512))
                .collect();
            let what = match lines.is_empty() {
                true => String::new(),
                false => format!(" ({})", lines.join("; ")),
            };
            Some(format!("the {lang} tools are not installed for this SDK{what}: run {command}"))
        }
        Err(e) => Some(format!("cannot ask {} which tools are installed ({e}): run {command}", installer.display())),
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
    match run(args, out, err) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(err, "nri-wasm new: {}", crate::text::chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(args: &NewArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<(), NewError> {
    check_name(&args.name)?;
    let template = template(&args.lang)?;
    let (sdk, from) = find_sdk(template, args.sdk.as_deref(), |k| std::env::var_os(k))?;
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    let written = create(template, &args.name, &dir, &sdk)?;
    let _ = writeln!(
        out,
        "created {}: a {} policy project of {} files, using the SDK in {} ({})",
        dir.display(),
        template.lang,
        written.len(),
        sdk.display(),
        from.describe()
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
    if let Some(missing) = missing_tools(template.lang, &sdk) {
        let _ = writeln!(err, "nri-wasm new: warning: {missing}");
    }
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

    /// `--sdk`, else `$NRI_WASM_SDK/<lang>`, else the checkout the binary
    /// was built from; a place that is not there is named with who named
    /// it and what to do.
    #[test]
    fn the_sdk_is_the_flags_else_the_environments_else_the_builds() {
        let rust = template("rust").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("rust")).unwrap();
        let env = |root: &Path| {
            let root = root.as_os_str().to_owned();
            move |k: &str| (k == SDK_ENV).then(|| root.clone())
        };
        let none = |_: &str| None;
        assert_eq!(find_sdk(rust, None, none).unwrap(), (PathBuf::from(rust.sdk), SdkFrom::Build));
        assert_eq!(find_sdk(rust, None, env(dir.path())).unwrap(), (dir.path().join("rust"), SdkFrom::Env));
        let flag = dir.path().join("rust");
        assert_eq!(find_sdk(rust, Some(&flag), env(Path::new("/nonexistent"))).unwrap(), (flag, SdkFrom::Flag));
        let empty = |k: &str| (k == SDK_ENV).then(std::ffi::OsString::new);
        assert_eq!(find_sdk(rust, None, empty).unwrap().1, SdkFrom::Build, "an empty NRI_WASM_SDK is unset");

        let e = find_sdk(rust, None, env(Path::new("/nonexistent/guest-sdk"))).unwrap_err().to_string();
        assert_eq!(
            e,
            "the rust SDK is not at /nonexistent/guest-sdk/rust ($NRI_WASM_SDK/<lang>): set NRI_WASM_SDK to the \
             guest-sdk directory of an nri-wasm checkout"
        );
        let e = find_sdk(rust, Some(Path::new("/nonexistent/x")), none).unwrap_err().to_string();
        assert_eq!(e, "the rust SDK is not at /nonexistent/x (--sdk)");
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
