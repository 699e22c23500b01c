//! Files and names the host keeps for itself: opening a file without being
//! fooled (no symlink, no FIFO, checked through the descriptor), creating
//! one no one else could have planted, random keys and unguessable names,
//! SHA-256 digests, and where the host's caches live by default.
//!
//! The compile cache, the policy state, the subscription records and the
//! registry's blob cache all need these; they live at the bottom of the
//! crate so that none of those modules imports another for them.
//!
//! The files an operator names (credentials, CA certificates, keys, a
//! component to push) are read with a bound and written whole or not at
//! all; what goes wrong is a [`FileError`], which names the file and keeps
//! the system's error as its source, so that a caller can tell a missing
//! file from a refused one without reading the message.

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

/// Reading or writing a file, and why it failed. The Display names the
/// file and what was done to it; the system's error is the source (shown
/// by `text::chain` and anyhow's `{:#}`).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be opened, examined or read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// It could not be created (it exists, or its directory refuses).
    #[error("cannot create {}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Writing, syncing or renaming it failed.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// It is not a regular file (a directory, a FIFO, a device...).
    #[error("{}: must be a regular file, not {kind}", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// Its owner or mode breaks the rule it is read under ([`Trust`]).
    #[error("{}: {why}", path.display())]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// What breaks the rule.
        why: Distrust,
    },
    /// It holds more than the most accepted.
    #[error("{}: larger than {max} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The most accepted, in bytes.
        max: u64,
    },
}

impl FileError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Read { path, .. }
            | Self::Create { path, .. }
            | Self::Write { path, .. }
            | Self::NotRegular { path, .. }
            | Self::Untrusted { path, .. }
            | Self::TooLarge { path, .. } => path,
        }
    }

    /// What went wrong, the file left out: for an error of the caller's
    /// that names the file already.
    pub fn reason(&self) -> String {
        match self {
            Self::Read { source, .. } => format!("cannot read it: {source}"),
            Self::Create { source, .. } => format!("cannot create it: {source}"),
            Self::Write { source, .. } => format!("cannot write it: {source}"),
            Self::NotRegular { kind, .. } => format!("must be a regular file, not {kind}"),
            Self::Untrusted { why, .. } => why.to_string(),
            Self::TooLarge { max, .. } => format!("larger than {max} bytes"),
        }
    }

    /// The system's error, if the system refused.
    pub fn io(&self) -> Option<&std::io::Error> {
        match self {
            Self::Read { source, .. } | Self::Create { source, .. } | Self::Write { source, .. } => Some(source),
            Self::NotRegular { .. } | Self::Untrusted { .. } | Self::TooLarge { .. } => None,
        }
    }
}

/// Opens `path` for reading, symlinks followed (a mounted secret or
/// ConfigMap is one), only if it is a regular file, and returns it with
/// its metadata.
///
/// Opening is itself an action on anything but a regular file: a FIFO's
/// open waits for a writer, and a device's driver runs (opening
/// `/dev/watchdog` arms the node's watchdog, which reboots it unless fed).
/// So the path is first opened with `O_PATH`, which opens nothing behind
/// it, and checked through that descriptor; only that same file is then
/// opened for reading, through `/proc/self/fd`, so that a device or a FIFO
/// put in its place at any moment is never opened. Where `/proc` is not
/// mounted, the path is opened again (without blocking, never as a
/// terminal) and must be the file that was checked.
pub fn open_regular_following(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), FileError> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let read = |source| FileError::Read { path: path.to_path_buf(), source };
    let located =
        std::fs::File::options().read(true).custom_flags(libc::O_PATH | libc::O_CLOEXEC).open(path).map_err(read)?;
    let checked = located.metadata().map_err(read)?;
    if !checked.file_type().is_file() {
        return Err(FileError::NotRegular { path: path.to_path_buf(), kind: kind_of(checked.file_type()) });
    }
    let flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let through_proc = std::path::PathBuf::from(format!("/proc/self/fd/{}", located.as_raw_fd()));
    let file = match std::fs::File::options().read(true).custom_flags(flags).open(&through_proc) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::File::options().read(true).custom_flags(flags).open(path).map_err(read)?
        }
        Err(source) => return Err(read(source)),
    };
    let meta = file.metadata().map_err(read)?;
    if (meta.dev(), meta.ino()) != (checked.dev(), checked.ino()) || !meta.file_type().is_file() {
        let source = std::io::Error::other("it was replaced while it was being opened");
        return Err(read(source));
    }
    Ok((file, meta))
}

/// Reads a file of at most `max` bytes that someone else names (a
/// credential file, a CA, a key, a settings file, the configuration): a
/// regular file, opened as [`open_regular_following`] opens it (never a
/// FIFO that would block, never a device), and read no further than
/// `max + 1` bytes whatever its size says.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    read_bounded_trusting(path, max, None)
}

/// [`read_bounded`], and with a rule, only a file that keeps it: checked
/// on the descriptor that is read, so that a file swapped in after the
/// check is never the one read.
pub fn read_bounded_trusting(path: &Path, max: u64, trust: Option<Trust>) -> Result<Vec<u8>, FileError> {
    use std::io::Read;
    let (file, meta) = open_regular_following(path)?;
    if let Some(trust) = trust {
        trust.check(&meta).map_err(|why| FileError::Untrusted { path: path.to_path_buf(), why })?;
    }
    if meta.len() > max {
        return Err(FileError::TooLarge { path: path.to_path_buf(), max });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| FileError::Read { path: path.to_path_buf(), source })?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge { path: path.to_path_buf(), max });
    }
    Ok(bytes)
}

/// Creates `path`, which must not exist, with `mode`, and writes `bytes`
/// to it, synced.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FileError> {
    use std::io::Write;
    let mut f = std::fs::File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| FileError::Create { path: path.to_path_buf(), source })?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|source| FileError::Write { path: path.to_path_buf(), source })
}

/// Who must own a file or directory the host trusts, and which permission
/// bits no one but its owner may have. The compile cache, its key, the
/// state directory and its files, the subscription records and (with
/// `strict-permissions`) the policy files all keep one of these rules;
/// they differ only in the owner and the bits, so they share one check
/// and one answer ([`Distrust`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trust {
    owner: Owner,
    /// Bits of the mode that, if set, let someone else in.
    forbidden: u32,
}

/// Who must own what the host trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The host's effective user.
    Host(u32),
    /// Root (`strict-permissions`: a policy file the operator installed).
    Root,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Host(uid) => write!(f, "the host's uid {uid}"),
            Self::Root => f.write_str("root"),
        }
    }
}

impl Owner {
    fn uid(self) -> u32 {
        match self {
            Self::Host(uid) => uid,
            Self::Root => 0,
        }
    }
}

impl Trust {
    /// Owned by the host's user, writable by no one else: what the host
    /// itself wrote and reads back.
    pub const fn host(uid: u32) -> Self {
        Self { owner: Owner::Host(uid), forbidden: 0o022 }
    }

    /// Owned by the host's user, neither readable nor writable by anyone
    /// else: a secret (the compile cache's key).
    pub const fn secret(uid: u32) -> Self {
        Self { owner: Owner::Host(uid), forbidden: 0o077 }
    }

    /// Owned by root, writable by no one else.
    pub const fn root() -> Self {
        Self { owner: Owner::Root, forbidden: 0o022 }
    }

    /// The host's effective user, for [`Trust::host`] and [`Trust::secret`].
    pub fn effective_uid() -> u32 {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }

    /// Whether `meta` keeps the rule; if not, what breaks it. Callers
    /// give the metadata of the file as opened (a directory's as found,
    /// never through a link), not of a path looked up again.
    pub fn check(&self, meta: &std::fs::Metadata) -> Result<(), Distrust> {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != self.owner.uid() {
            return Err(Distrust::Owner { owner: meta.uid(), expected: self.owner });
        }
        let mode = meta.mode() & 0o7777;
        if mode & self.forbidden != 0 {
            return Err(Distrust::Mode { mode, readable: self.forbidden & 0o044 != 0 });
        }
        Ok(())
    }
}

/// Why a file or directory the host would read is not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Distrust {
    /// Someone else owns it.
    #[error("owned by uid {owner}, not by {expected}")]
    Owner {
        /// Its owner.
        owner: u32,
        /// Who must own it.
        expected: Owner,
    },
    /// Others than its owner may change it (or, for a secret, read it).
    #[error("{} by group or others (mode {mode:o})", if *readable { "readable or writable" } else { "writable" })]
    Mode {
        /// Its permission bits.
        mode: u32,
        /// Whether reading by others is refused too (a secret).
        readable: bool,
    },
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

/// What kind of file `ft` is, as a message names it ("a FIFO").
pub(crate) fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
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
        "a file of an unknown type"
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

/// Makes a FIFO at `path` (for the unit tests of every reader that must
/// refuse one without blocking).
#[cfg(test)]
pub(crate) fn mkfifo(path: &Path) {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    // SAFETY: a valid, NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages name what a path is, a regular file included (the cache
    /// or state directory given as a file): never "not a regular file"
    /// for one that is.
    #[test]
    fn every_kind_of_file_is_named_for_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let fifo = dir.path().join("p");
        mkfifo(&fifo);
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let kind = |p: &Path| kind_of(std::fs::symlink_metadata(p).unwrap().file_type());
        assert_eq!(kind(&file), "a regular file");
        assert_eq!(kind(dir.path()), "a directory");
        assert_eq!(kind(&fifo), "a FIFO");
        assert_eq!(kind(&link), "a symbolic link");
        assert_eq!(kind(Path::new("/dev/null")), "a character device");
        assert_eq!(open_regular(&fifo).unwrap().unwrap_err(), "a FIFO");
        assert_eq!(open_regular(&link).unwrap().unwrap_err(), "a symbolic link");
    }

    /// One rule for everything the host trusts: the owner it names, and
    /// the bits it refuses, each answered with what breaks it.
    #[test]
    fn trust_names_the_owner_and_the_bits_that_break_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let mode = |m| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
        let meta = || std::fs::metadata(&path).unwrap();
        let uid = Trust::effective_uid();
        mode(0o644);
        assert_eq!(Trust::host(uid).check(&meta()), Ok(()));
        let e = Trust::secret(uid).check(&meta()).unwrap_err();
        assert_eq!(e, Distrust::Mode { mode: 0o644, readable: true });
        assert_eq!(e.to_string(), "readable or writable by group or others (mode 644)");
        mode(0o600);
        assert_eq!(Trust::secret(uid).check(&meta()), Ok(()));
        for bad in [0o620, 0o602, 0o666] {
            mode(bad);
            let e = Trust::host(uid).check(&meta()).unwrap_err();
            assert_eq!(e, Distrust::Mode { mode: bad, readable: false });
            assert_eq!(e.to_string(), format!("writable by group or others (mode {bad:o})"));
        }
        mode(0o600);
        let other = uid ^ 1;
        let e = Trust::host(other).check(&meta()).unwrap_err();
        assert_eq!(e, Distrust::Owner { owner: uid, expected: Owner::Host(other) });
        assert_eq!(e.to_string(), format!("owned by uid {uid}, not by the host's uid {other}"));
        // The owner is checked before the mode: a file someone else owns
        // is refused as theirs, whatever its bits.
        mode(0o666);
        assert!(matches!(Trust::host(other).check(&meta()), Err(Distrust::Owner { .. })));
        if uid != 0 {
            let e = Trust::root().check(&meta()).unwrap_err();
            assert_eq!(e.to_string(), format!("owned by uid {uid}, not by root"));
        }
    }

    /// A file someone names is read only if it is a regular file within
    /// the bound, whatever it is instead: each refusal says what it is
    /// and keeps the system's error, so a caller can tell them apart
    /// without reading the message.
    #[test]
    fn a_bounded_read_refuses_what_is_not_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"12345").unwrap();
        assert_eq!(read_bounded(&small, 5).unwrap(), b"12345");
        let e = read_bounded(&small, 4).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { max: 4, .. }) && e.path() == small, "{e:?}");
        assert_eq!(e.to_string(), format!("{}: larger than 4 bytes", small.display()));

        let missing = dir.path().join("missing");
        let e = read_bounded(&missing, 5).unwrap_err();
        assert_eq!(e.io().map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound), "{e:?}");
        // The file is named once, the system's reason once.
        let shown = crate::text::chain(&e);
        assert!(shown.starts_with(&format!("cannot read {}: ", missing.display())), "{shown}");
        assert_eq!(shown.matches(&*missing.display().to_string()).count(), 1, "{shown}");
        assert_eq!(e.reason(), format!("cannot read it: {}", e.io().unwrap()));

        // A FIFO would block a reader until someone writes: refused
        // without waiting, as is a directory.
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let e = read_bounded(&fifo, 5).unwrap_err();
        assert!(matches!(e, FileError::NotRegular { kind: "a FIFO", .. }), "{e:?}");
        let e = read_bounded(dir.path(), 5).unwrap_err();
        assert!(matches!(e, FileError::NotRegular { kind: "a directory", .. }), "{e:?}");

        // A device behind a symlink is refused without being opened (its
        // open would run its driver).
        let device = dir.path().join("device");
        std::os::unix::fs::symlink("/dev/null", &device).unwrap();
        let e = read_bounded(&device, 5).unwrap_err();
        assert!(matches!(e, FileError::NotRegular { kind: "a character device", .. }), "{e:?}");

        // A symlink is followed (a mounted secret is one).
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&small, &link).unwrap();
        assert_eq!(read_bounded(&link, 5).unwrap(), b"12345");
    }

    /// A new file is never one that was there: an existing file is left as
    /// it was, and the error says so.
    #[test]
    fn a_new_file_does_not_replace_one_that_is_there() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_new(&path, b"secret", 0o600).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let e = write_new(&path, b"other", 0o644).unwrap_err();
        assert!(matches!(&e, FileError::Create { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists));
        assert_eq!(std::fs::read(&path).unwrap(), b"secret");
    }
}
