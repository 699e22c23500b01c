//! Where cargo's target directory is, seen from a build script. Shared by
//! the build scripts that keep what they build across profiles and crates
//! (`host/components`, `tests/languages`), through `#[path]`: a build script
//! cannot depend on a crate of its own workspace for this.
//!
//! `OUT_DIR` is `<target>/[<triple>/]<profile>/build/<package>-<hash>/out`.
//! Cargo marks a target directory it creates with `CACHEDIR.TAG`, but not one
//! that existed before its first build (an install script that put its
//! downloads under `target/` first, as CI's background Go builds do), so
//! the tag alone cannot be relied on: the triple's level is recognised by
//! its name, which cargo gives build scripts as `TARGET`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The target directory `out` (a build script's `OUT_DIR`) lies in, or
/// `None` if the layout is not cargo's. `triple` is the build's `TARGET`.
pub fn target_dir(out: &Path, triple: Option<&OsStr>) -> Option<PathBuf> {
    let above_profile = out.ancestors().nth(4)?;
    let above_triple = above_profile.parent();
    // The tag, where cargo wrote it, settles it.
    for dir in [Some(above_profile), above_triple].into_iter().flatten() {
        if dir.join("CACHEDIR.TAG").is_file() {
            return Some(dir.to_path_buf());
        }
    }
    let named_after_triple = triple.is_some_and(|t| above_profile.file_name() == Some(t));
    match (named_after_triple, above_triple) {
        (true, Some(dir)) => Some(dir.to_path_buf()),
        _ => Some(above_profile.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIPLE: &str = "x86_64-unknown-linux-gnu";

    /// A directory of this test's own (no tempfile: a build script's crate
    /// keeps its dependencies few).
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nri-wasm-target-dir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn out(target: &Path, triple: bool) -> PathBuf {
        let base = if triple { target.join(TRIPLE) } else { target.to_path_buf() };
        base.join("debug/build/some-crate-0123456789abcdef/out")
    }

    #[test]
    fn an_untagged_target_directory_is_found_by_its_layout() {
        let dir = scratch("untagged");
        let target = dir.join("target");
        let triple = Some(OsStr::new(TRIPLE));
        assert_eq!(target_dir(&out(&target, false), triple), Some(target.clone()));
        assert_eq!(target_dir(&out(&target, true), triple), Some(target.clone()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_tag_wins_over_a_name_that_looks_like_a_triple() {
        let dir = scratch("tagged");
        let target = dir.join(TRIPLE);
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("CACHEDIR.TAG"), "Signature: 8a477f597d28d172789f06886806bc55\n").unwrap();
        assert_eq!(target_dir(&out(&target, false), Some(OsStr::new(TRIPLE))), Some(target.clone()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_path_too_short_for_the_layout_is_none() {
        assert_eq!(target_dir(Path::new("out"), None), None);
    }
}
