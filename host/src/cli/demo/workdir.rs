//! The demo's files: a temporary directory for the socket and the built-in
//! policies (written from the components embedded in the binary, with the
//! settings the demo runs them with), removed when the demo ends, and the
//! compile cache kept between runs.

use std::path::{Path, PathBuf};

use super::{CHAIN, NOT_A_POLICY};

/// Writes the built-in chain into `dir`: each example as `NN-name.wasm`
/// with its `policy.toml` as `NN-name.toml`, and a file that is not a
/// policy.
pub(super) fn write_examples(dir: &Path) -> anyhow::Result<PathBuf> {
    use nri_wasm_components::examples;
    std::fs::create_dir_all(dir)?;
    for (prefix, name) in CHAIN {
        let (_, _, bytes) = examples::ALL
            .iter()
            .find(|(n, _, _)| n == name)
            .ok_or_else(|| anyhow::anyhow!("example {name} is not built into this binary"))?;
        std::fs::write(dir.join(format!("{prefix}-{name}.wasm")), bytes)?;
        if let Some((_, text)) = examples::POLICY_FILES.iter().find(|(n, _)| n == name) {
            let text = demo_settings(name, text)?;
            std::fs::write(dir.join(format!("{prefix}-{name}.toml")), text)?;
        }
    }
    std::fs::write(dir.join(NOT_A_POLICY), "password = \"not for your logs\"\n")?;
    Ok(dir.to_path_buf())
}

/// The grant of device-injector's `policy.toml`, and the demo's: the demo's
/// operator has not approved CDI devices, so the pod that asks for a GPU
/// shows a policy refused for a capability it declares and is not granted.
const SHIPPED_GRANT: &str = "grant = [\"devices\", \"mounts\", \"cdi-devices\"]";
const DEMO_GRANT: &str = "grant = [\"devices\", \"mounts\"] # the demo grants no cdi-devices";

/// An example's settings file as the demo installs it.
pub(super) fn demo_settings(name: &str, text: &str) -> anyhow::Result<String> {
    if name != "device-injector" {
        return Ok(text.to_string());
    }
    if !text.contains(SHIPPED_GRANT) {
        anyhow::bail!("device-injector's policy.toml no longer has the line {SHIPPED_GRANT}: update the demo");
    }
    Ok(text.replace(SHIPPED_GRANT, DEMO_GRANT))
}

/// Compiled policies survive between demos: a second run loads them from
/// the cache. The directory is the user's own (the engine refuses a cache
/// others can write).
pub(super) fn cache_dir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("nri-wasm-demo-cache-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(anyhow::anyhow!("cannot create the compile cache {}: {e}", dir.display())),
    }
    Ok(dir)
}

/// A private temporary directory, removed when the demo ends.
pub(super) struct WorkDir {
    pub(super) path: PathBuf,
}

impl WorkDir {
    pub(super) fn new() -> anyhow::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        let path = std::env::temp_dir().join(format!("nri-wasm-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
