//! Embeds the project templates of the guest SDKs into the binary, for
//! `nri-wasm new`.
//!
//! Each SDK that offers a template has `guest-sdk/<lang>/template/MANIFEST`:
//! the template's files, one path (relative to `template/`) per line. Only
//! the files listed are embedded, so a build or scratch file left in a
//! template directory never reaches a user's project. The binary carries the
//! files themselves (the command works wherever the binary is copied) and
//! the absolute path of each SDK at build time, which generated projects
//! depend on.
//!
//! A template that cannot be used (a listed file missing, a path leaving
//! the template) is left out with a build warning rather than failing the
//! host's build: the templates are written alongside the host, and one
//! language's mistake must not stop everyone's build.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let sdks = manifest_dir.join("../guest-sdk");
    let mut code = String::from("/// The templates of `guest-sdk/<lang>/template/`, by language.\n");
    code.push_str("pub static TEMPLATES: &[Template] = &[\n");
    for (lang, dir) in languages(&sdks) {
        let template = dir.join("template");
        if !template.join("MANIFEST").is_file() {
            // Rebuilt when this SDK gains a template.
            println!("cargo:rerun-if-changed={}", dir.display());
            continue;
        }
        println!("cargo:rerun-if-changed={}", template.display());
        match files(&template) {
            Ok(files) => {
                let _ =
                    writeln!(code, "    Template {{ lang: {lang:?}, sdk: {:?}, files: &[", dir.display().to_string());
                for (path, source, executable) in files {
                    let source = source.display().to_string();
                    let _ = writeln!(
                        code,
                        "        TemplateFile {{ path: {path:?}, contents: include_bytes!({source:?}), executable: {executable} }},"
                    );
                }
                code.push_str("    ] },\n");
            }
            Err(why) => println!("cargo:warning=the {lang} project template is left out: {why}"),
        }
    }
    code.push_str("];\n");
    std::fs::write(out.join("templates.rs"), code).expect("write templates.rs");
}

/// Every `guest-sdk/<lang>` directory, by name, with its absolute path.
fn languages(sdks: &Path) -> Vec<(String, PathBuf)> {
    let Ok(sdks) = sdks.canonicalize() else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(&sdks) else { return Vec::new() };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(|n| (n.to_string(), e.path())))
        .filter(|(name, _)| !name.starts_with('.'))
        .collect();
    found.sort();
    found
}

/// The files a MANIFEST lists: relative path, absolute source, executable.
fn files(template: &Path) -> Result<Vec<(String, PathBuf, bool)>, String> {
    let manifest = std::fs::read_to_string(template.join("MANIFEST")).map_err(|e| format!("MANIFEST: {e}"))?;
    let mut files = Vec::new();
    for (n, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let relative = Path::new(line);
        if !relative.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!("MANIFEST line {}: {line:?} is not a path inside the template", n + 1));
        }
        let source = template.join(relative);
        let meta = std::fs::metadata(&source).map_err(|e| format!("MANIFEST line {}: {line}: {e}", n + 1))?;
        if !meta.is_file() {
            return Err(format!("MANIFEST line {}: {line} is not a file", n + 1));
        }
        files.push((line.to_string(), source, meta.permissions().mode() & 0o111 != 0));
    }
    if files.is_empty() {
        return Err("MANIFEST lists no file".into());
    }
    Ok(files)
}
