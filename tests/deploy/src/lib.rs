//! Readers for the deployment files in `docs/deploy`, strict enough that a
//! typo is an error: Kubernetes objects are read as the API's own types
//! (`k8s-openapi`) with every unknown field reported, kustomize files as the
//! fields kustomize knows, the Containerfile as its instructions, and the
//! Grafana dashboard's queries with a PromQL parser.
//!
//! The checks themselves are in `tests/deploy.rs`.

pub mod containerfile;
pub mod dashboard;
pub mod kustomize;
pub mod objects;

use std::path::{Path, PathBuf};

/// The repository's root (this crate is `tests/deploy`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root exists")
}

/// `docs/deploy` in the repository.
pub fn deploy_dir() -> PathBuf {
    repo_root().join("docs/deploy")
}

/// Reads a file, with its path in the error.
pub fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A Kubernetes quantity of bytes (`128Mi`, `2Gi`, `500M`, `1024`) in MiB,
/// rounded down.
pub fn quantity_mib(quantity: &str) -> Result<u64, String> {
    let q = quantity.trim();
    let units: [(&str, u128); 10] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
    ];
    let (number, factor) =
        units.iter().find_map(|(suffix, factor)| q.strip_suffix(suffix).map(|n| (n, *factor))).unwrap_or((q, 1));
    let n: u128 = number.parse().map_err(|_| format!("{quantity:?} is not a whole quantity of bytes"))?;
    Ok((n * factor / (1 << 20)) as u64)
}

/// The fenced code blocks of a Markdown text in a language (` ```toml `).
pub fn code_blocks<'a>(markdown: &'a str, language: &str) -> Vec<&'a str> {
    let fence = format!("```{language}\n");
    markdown.split(fence.as_str()).skip(1).filter_map(|rest| rest.split("```").next()).collect()
}
