//! With feature `languages`: builds every policy of the other languages from
//! source (the SDK templates, the parity reference policy in all five
//! languages, the examples of `example-policies/<lang>/`, the fault
//! policies) with the SDKs' build scripts, and writes `components.rs`
//! naming the components. Without it, writes an empty `components.rs`, so
//! that `cargo test --workspace` needs none of the language tools.
//!
//! The tools are the ones `guest-sdk/install-tools.sh` installed; a missing
//! one fails the build with the command that installs it. A component is
//! rebuilt only when its sources, its SDK, the WIT package or the installed
//! tools changed (a hash of them beside each component).

use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

#[path = "../../host/components/target_dir.rs"]
mod shared;

/// One component to build.
#[derive(Debug, Clone)]
struct Job {
    /// Module and constant in `components.rs`.
    module: &'static str,
    konst: String,
    /// `rust`, `js`, `python`, `c` or `go`.
    lang: &'static str,
    /// For JavaScript: `quickjs` or `spidermonkey`.
    engine: Option<&'static str>,
    /// The policy's directory.
    dir: PathBuf,
    /// For templates: the template's own build script (in `dir`).
    template: bool,
    out: PathBuf,
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..").canonicalize().expect("repository root");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_LANGUAGES").is_none() {
        std::fs::write(out_dir.join("components.rs"), "").expect("writing components.rs");
        return;
    }
    println!("cargo:rerun-if-env-changed=NRI_WASM_GUEST_TOOLS");
    for p in ["wit", "guest-sdk/install-tools.sh", "guest-sdk/js", "guest-sdk/python", "guest-sdk/c", "guest-sdk/go"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    for p in ["parity", "faults"] {
        println!("cargo:rerun-if-changed={}", manifest.join(p).display());
    }
    for lang in ["js", "python", "c", "go"] {
        println!("cargo:rerun-if-changed={}", root.join("example-policies").join(lang).display());
    }
    // Also rebuilt when the Rust SDK changes (the parity policy in Rust).
    println!("cargo:rerun-if-changed={}", root.join("guest-sdk/rust/src").display());

    let target = target_dir(&out_dir);
    let tools =
        std::env::var_os("NRI_WASM_GUEST_TOOLS").map(PathBuf::from).unwrap_or_else(|| target.join("guest-tools"));
    check_tools(&root, &tools);
    let guests = target.join("language-guests");
    let jobs = jobs(&root, &manifest, &guests);
    run_all(&root, &tools, &target, &jobs);

    let mut code = String::new();
    writeln!(code, "/// Where the components are built (and the engine's cache kept).").unwrap();
    writeln!(code, "pub const LANGUAGE_GUESTS: &str = {:?};", guests.display().to_string()).unwrap();
    let mut modules: Vec<&str> = jobs.iter().map(|j| j.module).collect();
    modules.dedup();
    for module in modules {
        writeln!(code, "pub mod {module} {{").unwrap();
        let mut all = String::new();
        for j in jobs.iter().filter(|j| j.module == module) {
            writeln!(code, "    pub const {}: &str = {:?};", j.konst, j.out.display().to_string()).unwrap();
            writeln!(all, "        ({:?}, {}),", j.konst, j.konst).unwrap();
        }
        writeln!(code, "    /// Every one: constant name, path.").unwrap();
        writeln!(code, "    pub const ALL: &[(&str, &str)] = &[\n{all}    ];").unwrap();
        writeln!(code, "}}").unwrap();
    }
    std::fs::write(out_dir.join("components.rs"), code).expect("writing components.rs");
}

/// The target directory, or OUT_DIR if the layout is not cargo's.
fn target_dir(out: &Path) -> PathBuf {
    shared::target_dir(out, std::env::var_os("TARGET").as_deref()).unwrap_or_else(|| out.to_path_buf())
}

fn check_tools(root: &Path, tools: &Path) {
    let script = root.join("guest-sdk/install-tools.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("--check")
        .env("NRI_WASM_GUEST_TOOLS", tools)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    if !output.status.success() {
        panic!(
            "feature `languages` builds policies in JavaScript, Python, C and Go, and some tools are missing:\n{}\n\
             Install them with guest-sdk/install-tools.sh (as root for the Debian packages), then build again.",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

fn jobs(root: &Path, manifest: &Path, guests: &Path) -> Vec<Job> {
    let mut jobs = Vec::new();
    let job = |module: &'static str, konst: &str, lang: &'static str, engine: Option<&'static str>, dir: PathBuf| {
        let file = format!("{}.wasm", konst.to_lowercase().replace('_', "-"));
        Job {
            module,
            konst: konst.to_string(),
            lang,
            engine,
            dir,
            template: false,
            out: guests.join(module).join(file),
        }
    };
    // The parity reference policy: Rust first, the reference.
    let parity = manifest.join("parity");
    jobs.push(job("parity", "RUST", "rust", None, parity.join("rust")));
    jobs.push(job("parity", "JS_QUICKJS", "js", Some("quickjs"), parity.join("js")));
    jobs.push(job("parity", "JS_SPIDERMONKEY", "js", Some("spidermonkey"), parity.join("js")));
    jobs.push(job("parity", "PYTHON", "python", None, parity.join("python")));
    jobs.push(job("parity", "C", "c", None, parity.join("c")));
    jobs.push(job("parity", "GO", "go", None, parity.join("go")));
    let faults = manifest.join("faults");
    jobs.push(job("faults", "JS_QUICKJS", "js", Some("quickjs"), faults.join("js")));
    jobs.push(job("faults", "JS_SPIDERMONKEY", "js", Some("spidermonkey"), faults.join("js")));
    jobs.push(job("faults", "PYTHON", "python", None, faults.join("python")));
    jobs.push(job("faults", "C", "c", None, faults.join("c")));
    jobs.push(job("faults", "GO", "go", None, faults.join("go")));
    // Every example of example-policies/<lang>/.
    for lang in ["js", "python", "c", "go"] {
        let dir = root.join("example-policies").join(lang);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        for name in names {
            let konst = format!("{}_{}", lang.to_uppercase(), name.replace('-', "_").to_uppercase());
            let engine = (lang == "js").then_some("quickjs");
            jobs.push(job("examples", &konst, lang, engine, dir.join(&name)));
        }
    }
    // Every SDK template, made into a project as `nri-wasm new` would.
    for lang in ["js", "python", "c", "go"] {
        let sdk = root.join("guest-sdk").join(lang);
        let project = guests.join("templates").join(lang).join("template-check");
        instantiate(&sdk, &project);
        let mut j = job("templates", &lang.to_uppercase(), lang, (lang == "js").then_some("quickjs"), project.clone());
        j.template = true;
        j.out = project.join("target/template-check.wasm");
        jobs.push(j);
    }
    jobs
}

/// Copies the files `template/MANIFEST` lists to `project`, with
/// `{{name}}` = `template-check` and `{{sdk}}` = the SDK's directory (what
/// `nri-wasm new` does), keeping the executable bits. Unchanged files are
/// not rewritten, so the build's hash sees no change.
fn instantiate(sdk: &Path, project: &Path) {
    let template = sdk.join("template");
    let list = std::fs::read_to_string(template.join("MANIFEST"))
        .unwrap_or_else(|e| panic!("{}: {e}", template.join("MANIFEST").display()));
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let from = template.join(line);
        let bytes = std::fs::read(&from).unwrap_or_else(|e| panic!("{} (listed in MANIFEST): {e}", from.display()));
        let text = String::from_utf8(bytes).unwrap_or_else(|_| panic!("{}: not text", from.display()));
        let filled = text
            .replace("{{name_snake}}", "template_check")
            .replace("{{name}}", "template-check")
            .replace("{{sdk}}", &sdk.display().to_string());
        let to = project.join(line);
        std::fs::create_dir_all(to.parent().expect("a file has a parent")).expect("creating the template project");
        if std::fs::read_to_string(&to).ok().as_deref() != Some(filled.as_str()) {
            std::fs::write(&to, filled).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        }
        let mode = std::fs::metadata(&from).expect("metadata").permissions();
        std::fs::set_permissions(&to, mode).expect("permissions");
    }
    // The link `nri-wasm new` makes for the templates whose sdk.sh finds the SDK.
    if template.join("sdk.sh").is_file() {
        let link = project.join(".sdk");
        if std::fs::read_link(&link).ok().as_deref() != Some(sdk) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(sdk, &link).expect("linking the SDK");
        }
    }
}

/// Hashes every file under `dir` (skipping build output) into `h`.
fn hash_dir(h: &mut DefaultHasher, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name == "target"
            || name.starts_with(".build-")
            || name == "__pycache__"
            || name == "node_modules"
            || name == ".sdk"
        {
            continue;
        }
        let path = e.path();
        if path.is_dir() {
            hash_dir(h, &path);
        } else if let Ok(bytes) = std::fs::read(&path) {
            h.write(path.to_string_lossy().as_bytes());
            h.write(&bytes);
        }
    }
}

fn inputs_hash(root: &Path, tools: &Path, job: &Job) -> String {
    let mut h = DefaultHasher::new();
    h.write(format!("{job:?}").as_bytes());
    hash_dir(&mut h, &job.dir);
    hash_dir(&mut h, &root.join("wit"));
    hash_dir(&mut h, &tools.join(".stamps"));
    let sdk = if job.lang == "rust" { root.join("guest-sdk/rust/src") } else { root.join("guest-sdk").join(job.lang) };
    hash_dir(&mut h, &sdk);
    format!("{:016x}", h.finish())
}

/// Builds every job that is not current, two at a time.
fn run_all(root: &Path, tools: &Path, target: &Path, jobs: &[Job]) {
    let todo: Mutex<Vec<&Job>> = Mutex::new(jobs.iter().rev().collect());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let Some(job) = todo.lock().expect("lock").pop() else { break };
                if let Err(e) = build(root, tools, target, job) {
                    failures.lock().expect("lock").push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().expect("lock");
    if !failures.is_empty() {
        panic!("{} language guest(s) failed to build:\n\n{}", failures.len(), failures.join("\n\n"));
    }
}

fn build(root: &Path, tools: &Path, target: &Path, job: &Job) -> Result<(), String> {
    let hash = inputs_hash(root, tools, job);
    let stamp = job.out.with_extension("inputs");
    if job.out.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(hash.as_str()) {
        return Ok(());
    }
    std::fs::create_dir_all(job.out.parent().expect("out has a parent")).map_err(|e| e.to_string())?;
    let mut cmd;
    if job.lang == "rust" {
        cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--manifest-path"])
            .arg(job.dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target.join("wasm-guests"))
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR");
    } else if job.template {
        cmd = Command::new("bash");
        cmd.arg(job.dir.join("build.sh"));
        if let Some(engine) = job.engine {
            cmd.arg(engine);
        }
    } else {
        cmd = Command::new("bash");
        cmd.arg(root.join("guest-sdk").join(job.lang).join("build.sh"));
        if let Some(engine) = job.engine {
            cmd.args(["--engine", engine]);
        }
        cmd.arg(&job.dir).arg(&job.out);
    }
    cmd.env("NRI_WASM_GUEST_TOOLS", tools);
    let started = std::time::Instant::now();
    let output = cmd.output().map_err(|e| format!("{}: cannot run the build: {e}", job.dir.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} ({}{}) failed:\n{}{}",
            job.dir.display(),
            job.lang,
            job.engine.map(|e| format!(", {e}")).unwrap_or_default(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    if job.lang == "rust" {
        let built = target.join("wasm-guests/wasm32-wasip2/release/parity_reference.wasm");
        std::fs::copy(&built, &job.out).map_err(|e| format!("{}: {e}", built.display()))?;
    }
    if !job.out.exists() {
        return Err(format!("{}: the build wrote no {}", job.dir.display(), job.out.display()));
    }
    eprintln!("built {} in {:.1?}", job.out.display(), started.elapsed());
    std::fs::write(&stamp, hash).map_err(|e| e.to_string())
}
