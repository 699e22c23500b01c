//! The two images every node needs, as OCI archives that `ctr images
//! import` (or CRI-O's storage) takes: there is no registry to pull from.
//!
//! - the sandbox image: the static pause program install.sh builds from
//!   `tests/runtimes/images/pause.c`;
//! - busybox: Debian's busybox-static, with the applets the tests run
//!   (`sh`, `env`, `sleep`, `cat`) as links.
//!
//! Each archive has one uncompressed layer, packed with fixed owners and
//! times, so the same inputs give the same digests. They are built once,
//! next to their inputs, and rebuilt when an input is newer.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{require, Error};

/// The sandbox image's name, as the runtimes' configurations give it.
pub const PAUSE: &str = "localhost/nri-wasm/pause:1";
/// The busybox image's name.
pub const BUSYBOX: &str = "localhost/nri-wasm/busybox:1";

/// The archives of both images.
#[derive(Debug, Clone)]
pub struct Images {
    pub pause: PathBuf,
    pub busybox: PathBuf,
}

/// Builds the archives (if missing or older than their inputs) in
/// `<runtimes>/images`.
pub fn ensure(runtimes: &Path) -> Result<Images, Error> {
    let dir = runtimes.join("images");
    let pause_bin = require("the pause program", dir.join("pause"), "")?;
    let busybox_bin = require("busybox (busybox-static)", dir.join("busybox"), "")?;
    let pause = dir.join("pause.oci.tar");
    build_if_stale(&pause, &pause_bin, PAUSE, &[("pause", FileKind::Binary(&pause_bin))], &["/pause"], &[])?;
    let busybox = dir.join("busybox.oci.tar");
    let mut files = vec![("bin/busybox", FileKind::Binary(&busybox_bin))];
    for applet in ["sh", "env", "sleep", "cat", "ls", "echo", "true"] {
        files.push((leak(format!("bin/{applet}")), FileKind::Link("busybox")));
    }
    files.push(("etc", FileKind::Dir));
    files.push(("tmp", FileKind::Dir));
    build_if_stale(&busybox, &busybox_bin, BUSYBOX, &files, &["/bin/sh"], &["PATH=/bin"])?;
    Ok(Images { pause, busybox })
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

enum FileKind<'a> {
    Binary(&'a Path),
    Link(&'static str),
    Dir,
}

fn modified(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn build_if_stale(
    archive: &Path,
    input: &Path,
    name: &str,
    files: &[(&str, FileKind<'_>)],
    entrypoint: &[&str],
    env: &[&str],
) -> Result<(), Error> {
    if let (Some(a), Some(i)) = (modified(archive), modified(input)) {
        if a >= i {
            return Ok(());
        }
    }
    let work = tempfile::Builder::new()
        .prefix(".image-")
        .tempdir_in(archive.parent().expect("archive dir"))
        .map_err(|e| Error::io("creating the image's work directory", e))?;
    let io = |what: String| move |e| Error::io(what, e);

    // The layer's tree.
    let root = work.path().join("root");
    for (path, kind) in files {
        let target = root.join(path);
        std::fs::create_dir_all(target.parent().expect("parent")).map_err(io(format!("{}", target.display())))?;
        match kind {
            FileKind::Binary(src) => {
                std::fs::copy(src, &target).map_err(io(format!("copying {}", src.display())))?;
            }
            FileKind::Link(to) => {
                std::os::unix::fs::symlink(to, &target).map_err(io(format!("{}", target.display())))?
            }
            FileKind::Dir => std::fs::create_dir_all(&target).map_err(io(format!("{}", target.display())))?,
        }
    }
    let layer_tar = work.path().join("layer.tar");
    let mut tar = Command::new("tar");
    tar.args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "-cf"])
        .arg(&layer_tar)
        .arg("-C")
        .arg(&root)
        .arg(".");
    crate::process::run(tar, "tar (an image layer)")?;

    // The blobs.
    let layout = work.path().join("layout");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(io(format!("{}", blobs.display())))?;
    let layer = std::fs::read(&layer_tar).map_err(io("reading the layer".into()))?;
    let put = |bytes: &[u8]| -> Result<(String, usize), Error> {
        let digest = format!("{:x}", Sha256::digest(bytes));
        std::fs::write(blobs.join(&digest), bytes).map_err(|e| Error::io("writing a blob", e))?;
        Ok((format!("sha256:{digest}"), bytes.len()))
    };
    let (layer_digest, layer_size) = put(&layer)?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = json!({
        "architecture": arch,
        "os": "linux",
        "config": { "Entrypoint": entrypoint, "Env": env },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    });
    let (config_digest, config_size) = put(&serde_json::to_vec(&config).expect("json"))?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size },
        "layers": [{ "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size }],
    });
    let (manifest_digest, manifest_size) = put(&serde_json::to_vec(&manifest).expect("json"))?;
    let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "platform": { "architecture": arch, "os": "linux" },
            "annotations": { "io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag },
        }],
    });
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&index).expect("json"))
        .map_err(io("writing index.json".into()))?;
    std::fs::write(layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)
        .map_err(io("writing oci-layout".into()))?;
    // Built in the work directory and renamed into place: two tests that
    // build at once each write a whole archive of the same content.
    let tmp = work.path().join("archive.tar");
    let mut tar = Command::new("tar");
    tar.args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "-cf"])
        .arg(&tmp)
        .arg("-C")
        .arg(&layout)
        .arg(".");
    crate::process::run(tar, "tar (an OCI archive)")?;
    std::fs::rename(&tmp, archive).map_err(io(format!("{}", archive.display())))?;
    Ok(())
}
