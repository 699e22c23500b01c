//! The nri-wasm image, made as an operator without a registry makes it:
//! `docs/deploy/build-image.sh` packs a host binary, its shared libraries and
//! the machine's CA bundle into an OCI archive, no base image pulled. The
//! tests pack the binary this crate builds (the host with its tests' seams,
//! `CARGO_BIN_EXE_nri-wasm-cluster-host`).

use std::path::{Path, PathBuf};
use std::process::Command;

use nri_wasm_runtimes::process;

use crate::Error;

/// The image name the project's kustomization gives the DaemonSet.
pub const NAME: &str = "registry.example.com/nri-wasm";
/// Its tag there.
pub const TAG: &str = "0.1.0";

/// Builds (unless an archive newer than `binary` and the script is there)
/// the archive of `binary` as `NAME:tag`; its path.
pub fn ensure(binary: &Path, tag: &str) -> Result<PathBuf, Error> {
    let script = crate::repo().join("docs/deploy/build-image.sh");
    let dir = crate::cluster_dir().join("images");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating the image directory", e))?;
    let archive = dir.join(format!("nri-wasm-{tag}.oci.tar"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(a), Some(b), Some(s)) = (modified(&archive), modified(binary), modified(&script)) {
        if a >= b && a >= s {
            return Ok(archive);
        }
    }
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .arg("--binary")
        .arg(binary)
        .arg("--name")
        .arg(format!("{NAME}:{tag}"))
        .arg("--output")
        .arg(&archive);
    process::run(cmd, "docs/deploy/build-image.sh")?;
    Ok(archive)
}
