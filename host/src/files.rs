//! Files and names the host keeps for itself: opening a file without being
//! fooled (no symlink, no FIFO, checked through the descriptor), creating
//! one no one else could have planted, random keys and unguessable names,
//! SHA-256 digests, and where the host's caches live by default.
//!
//! The compile cache, the policy state, the subscription records and the
//! registry's blob cache all need these; they live at the bottom of the
//! crate so that none of those modules imports another for them.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// Bytes of a key from [`random_key`].
pub(crate) const KEY_BYTES: usize = 32;

/// The compile cache of a host running as root: regenerable data, so under
/// `/var/cache`, created with mode 0700.
pub const ROOT_CACHE_DIR: &str = "/var/cache/nri-wasm";

/// Where compiled policies are cached unless `[engine] cache-dir` says
/// otherwise: [`ROOT_CACHE_DIR`] for root; for another user, private to
/// that user, `$XDG_CACHE_HOME/nri-wasm` or `~/.cache/nri-wasm`; none if
/// that user has no home.
///
/// On by default because a host that restarts (a node reboot, an upgrade
/// of the DaemonSet, a crash) would otherwise compile every policy again,
/// which takes seconds to minutes while mandatory policies refuse
/// containers. The directory is trusted only if it is owned by the host's
/// user and writable by no one else (`cache.rs`), so a default under a
/// shared location cannot be planted by someone else.
pub fn default_cache_dir() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from(ROOT_CACHE_DIR));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        _ => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
    };
    base.is_absolute().then(|| base.join("nri-wasm"))
}

/// SHA-256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `bytes` in lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Creates `path` for writing: a new file (never one an attacker put
/// there first, never through a symlink), mode 0600.
pub(crate) fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::options().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// What kind of non-file `ft` is.
pub(crate) fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading without following a symlink in its last
/// component and without blocking (a FIFO), and checks through the open
/// descriptor that it is a regular file.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<Result<(std::fs::File, std::fs::Metadata), &'static str>> {
    let file = match std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        // O_NOFOLLOW on a symlink.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Err("a symbolic link")),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Ok(Err(kind_of(meta.file_type())));
    }
    Ok(Ok((file, meta)))
}

/// 32 bytes from the kernel's random source.
pub(crate) fn random_key() -> std::io::Result<[u8; KEY_BYTES]> {
    let mut key = [0u8; KEY_BYTES];
    let mut filled = 0;
    while filled < KEY_BYTES {
        // SAFETY: the pointer and length describe the unfilled tail of `key`.
        let n = unsafe { libc::getrandom(key[filled..].as_mut_ptr().cast(), KEY_BYTES - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        filled += n as usize;
    }
    Ok(key)
}

/// A suffix unique in this process and that no one can have guessed before
/// this call: a sequence number and 64 random bits.
pub(crate) fn unique_suffix() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let nonce = random_key().map(|k| hex(&k[..8])).unwrap_or_default();
    format!("{seq}.{nonce}")
}
