//! Compiled policies on disk, so that a restart or a reload does not compile
//! unchanged components again.
//!
//! The files hold native code that the host maps and runs, loaded with
//! wasmtime's `unsafe` deserialisation: a swapped or damaged file is code the
//! host runs (another policy's, which defeats a `sha256` pin) or a crash at
//! every start (corrupted code traps the process). So nothing in the cache is
//! believed until it is proven:
//!
//! - the directory and each file must be owned by the host's user and
//!   writable by no one else, and entries are opened without following
//!   symlinks and without blocking, regular files only, size-capped;
//! - every entry starts with a header that binds it to the SHA-256 of the
//!   component it was compiled from and to the engine's compatibility hash,
//!   and carries an HMAC-SHA256 of the header and the code under a key
//!   derived from the host-private key (32 random bytes, mode 0600, in the
//!   file `key` inside the directory, created exclusively) and the
//!   directory's identity (its inode number);
//! - the MAC is checked, in constant time, before a byte of the entry
//!   reaches wasmtime. A swapped entry, a flipped byte, a truncated or
//!   extended file, another key, another directory: the entry is removed with
//!   a warning naming the policy and the file, and the component is compiled
//!   again.
//!
//! The key lives inside the directory because the directory is the one
//! place the host must be able to write: in the DaemonSet the root file
//! system is read-only and only the cache directory is mounted from the node,
//! so a key beside it could never be created and every restart compiled
//! every policy again. Binding the MAC to the directory's identity keeps what
//! a key outside gave: copying a cache directory from elsewhere (a backup,
//! another node), key included, never makes its entries trusted, since the
//! copy is another inode. Only the inode: the device number of a hostPath
//! directory is not stable (btrfs subvolumes, NFS and overlays are numbered
//! when mounted, so after a reboot every entry would fail its MAC and every
//! policy would compile again at start, in the window where the node's
//! first containers are created). A key at the earlier place, `<cache-dir>.key`, is
//! no longer read (its entries were authenticated without the identity, so
//! they would not verify anyway); a new key removes the entries written
//! under another, and the first start after the upgrade compiles once.
//! Entries are keyed by the
//! SHA-256 of both digests, written under a unique temporary name and renamed
//! into place, and pruned: entries no loaded policy uses are removed once they
//! are a day old or the directory is over its size cap.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::files::{create_private, hex, kind_of, open_regular, random_key, unique_suffix, Distrust, Trust, KEY_BYTES};

/// Unused entries (and subscription records, `known.rs`) older than this
/// are removed when the cache is pruned.
pub(crate) const UNUSED_TTL: Duration = Duration::from_secs(24 * 3600);
/// Temporary files older than this are left over from a crash.
const STALE_TMP: Duration = Duration::from_secs(3600);
const EXTENSION: &str = "cwasm";

/// First bytes of every entry.
const MAGIC: &[u8; 8] = b"NRIWCACH";
/// Version of the entry layout below; another version is not read.
const FORMAT: u32 = 1;
/// magic, format, engine digest, source digest, length of the code.
const HEADER: usize = 8 + 4 + 32 + 32 + 8;
/// The header and its MAC, before the code.
const PREFIX: usize = HEADER + 32;
/// The compiler refuses artifacts over 1 GiB (`compile.rs`): no entry is
/// larger than that and its prefix, and no larger file is read.
pub(crate) const MAX_ENTRY_BYTES: u64 = (1 << 30) + PREFIX as u64;

type HmacSha256 = Hmac<Sha256>;

/// The cache cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// The directory is not one the host may trust: not its owner's or
    /// writable by others.
    #[error("compile cache {}: {why}", dir.display())]
    Untrusted {
        /// The cache directory.
        dir: PathBuf,
        /// What about it is not trusted.
        why: Distrust,
    },
    /// The path is something else than a directory (a symlink is named as
    /// one, not followed).
    #[error("compile cache {}: {kind}, not a directory", dir.display())]
    NotADirectory {
        /// The cache directory.
        dir: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Its key is not one the host may trust, or could not be created or
    /// read.
    #[error("compile cache {dir}: {error}", dir = dir.display())]
    Key {
        /// The cache directory.
        dir: PathBuf,
        /// What is wrong with the key.
        error: KeyRefused,
    },
    /// The directory could not be created or read.
    #[error("compile cache {dir}: {reason}")]
    Io {
        /// The cache directory.
        dir: PathBuf,
        /// The system's reason.
        reason: String,
    },
}

/// Why an entry found in the cache was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The entry is something else than a regular file (named).
    #[error("it is {0}, not a regular file")]
    NotAFile(&'static str),
    /// Its owner or mode is not one the host may trust.
    #[error("it is {0}")]
    Untrusted(Distrust),
    /// Larger than any entry may be.
    #[error("it has {size} bytes, more than the {limit} an entry may have")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The most an entry may have.
        limit: u64,
    },
    /// Reading it failed.
    #[error("it cannot be read: {0}")]
    Io(String),
    /// Shorter than an entry's header.
    #[error("it has {0} bytes, too few for the header of an entry")]
    Short(u64),
    /// No entry header.
    #[error("it is not an entry written by this host (no header)")]
    Magic,
    /// Another format version.
    #[error("it has format version {0}; this host reads version {FORMAT}")]
    Version(u32),
    /// The header's length disagrees with what follows it.
    #[error("its header declares {declared} bytes of code but {actual} follow")]
    Length {
        /// What the header says.
        declared: u64,
        /// What follows it.
        actual: u64,
    },
    /// The MAC does not verify under this host's key.
    #[error("its MAC does not verify: it was changed after it was written, or written with another key")]
    Mac,
    /// Compiled by an engine of other settings.
    #[error("it was compiled by an engine with other settings")]
    Engine,
    /// Compiled from other bytes than the component asked for.
    #[error("it was compiled from another component (sha256 {found}, not {expected})")]
    Source {
        /// The digest the entry names.
        found: String,
        /// The digest of the component asked for.
        expected: String,
    },
}

/// What an entry is bound to: the engine that compiled it and the
/// component it was compiled from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    engine: [u8; 32],
    source: [u8; 32],
}

impl Binding {
    /// The binding of `component` (the binary format) compiled by `engine`.
    pub fn new(engine: &wasmtime::Engine, component: &[u8]) -> Self {
        Self { engine: engine_digest(engine), source: Sha256::digest(component).into() }
    }

    /// The entry's name in the cache.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.engine);
        h.update(self.source);
        hex(&h.finalize())
    }

    fn header(&self, code_len: u64) -> [u8; HEADER] {
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        header[12..44].copy_from_slice(&self.engine);
        header[44..76].copy_from_slice(&self.source);
        header[76..84].copy_from_slice(&code_len.to_le_bytes());
        header
    }
}

/// SHA-256 of the engine's compatibility hash (settings, target, version).
fn engine_digest(engine: &wasmtime::Engine) -> [u8; 32] {
    struct Sha(Sha256);
    impl Hasher for Sha {
        fn write(&mut self, b: &[u8]) {
            self.0.update(b);
        }
        fn finish(&self) -> u64 {
            0
        }
    }
    let mut h = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    h.0.finalize().into()
}

/// A verified entry: its code may be handed to wasmtime.
#[derive(Debug)]
pub struct Entry {
    bytes: Vec<u8>,
}

impl Entry {
    /// The artifact wasmtime wrote, without the header.
    pub fn code(&self) -> &[u8] {
        &self.bytes[PREFIX..]
    }
}

/// A directory of compiled components.
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    uid: u32,
    /// The host's key bound to the directory ([`bound_key`]).
    key: [u8; 32],
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Cache").field("dir", &self.dir).field("max_bytes", &self.max_bytes).finish_non_exhaustive()
    }
}

/// A name for a temporary file no one can have guessed before this call.
fn temp_name(base: &str) -> String {
    format!(".{base}.tmp.{}.{}", std::process::id(), unique_suffix())
}

/// The file name of the key, inside the cache directory. Not an entry's
/// name (`<hex>.cwasm`), a subscription record's (`<hex>.sub`) or a
/// temporary file's (`.<name>.tmp.<pid>.<n>`), so pruning never touches it.
const KEY_FILE: &str = "key";

/// Where the key of the cache in `dir` is kept: inside it.
pub fn key_path(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE)
}

/// Where earlier versions kept the key: beside the directory (on a
/// read-only root it could not be created). Only looked at to tell the
/// operator that it is no longer used.
fn old_key_path(dir: &Path) -> Option<PathBuf> {
    Some(dir.parent()?.join(format!("{}.key", dir.file_name()?.to_string_lossy())))
}

/// The key entries are authenticated with: the host's key bound to the
/// directory's inode, so that a copy of the directory (another inode) with
/// its key is not trusted, and a remount that renumbers the device keeps
/// the entries.
fn bound_key(key: &[u8; KEY_BYTES], dir_inode: u64) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(b"nri-wasm compile cache directory inode\0");
    mac.update(&dir_inode.to_le_bytes());
    mac.finalize().into_bytes().into()
}

/// Reads the host's key, creating it first if there is none; `true` with
/// it if this call created it. Two hosts starting together agree on one
/// key: each writes a complete candidate and links it into place, and the
/// one that finds a key there uses it.
fn load_or_create_key(path: &Path, uid: u32) -> Result<([u8; KEY_BYTES], bool), KeyRefused> {
    let refused = |why: KeyProblem| KeyRefused { path: path.to_path_buf(), why };
    let io = |e: std::io::Error| refused(KeyProblem::Io(Arc::new(e)));
    let mut created = false;
    for _ in 0..2 {
        match open_regular(path) {
            Ok(Ok((file, meta))) => {
                Trust::secret(uid).check(&meta).map_err(|why| refused(KeyProblem::Untrusted(why)))?;
                if meta.len() != KEY_BYTES as u64 {
                    return Err(refused(KeyProblem::Size { bytes: meta.len() }));
                }
                let mut key = [0u8; KEY_BYTES];
                (&file).read_exact(&mut key).map_err(io)?;
                return Ok((key, created));
            }
            Ok(Err(what)) => return Err(refused(KeyProblem::NotAFile(what))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = path.with_file_name(temp_name(&name));
        let written = (|| {
            let mut file = create_private(&tmp)?;
            file.write_all(&random_key()?)?;
            file.sync_all()?;
            match std::fs::hard_link(&tmp, path) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
                Err(_) => Ok(false),
                Ok(()) => Ok(true),
            }
        })();
        let _ = std::fs::remove_file(&tmp);
        created = written.map_err(|e| refused(KeyProblem::Create(Arc::new(e))))?;
    }
    Err(refused(KeyProblem::Vanished))
}

/// The cache's key cannot be used (`KEY_FILE` in the cache directory).
#[derive(Debug, Clone, thiserror::Error)]
#[error("key {}: {why}", path.display())]
pub struct KeyRefused {
    /// The key's file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: KeyProblem,
}

/// What is wrong with the cache's key.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeyProblem {
    /// Another user owns it, or group or others may read or write it.
    #[error(transparent)]
    Untrusted(Distrust),
    /// Not a key's size.
    #[error("{bytes} bytes, not {KEY_BYTES}")]
    Size {
        /// Its size.
        bytes: u64,
    },
    /// Something else than a regular file (named).
    #[error("{0}, not a regular file")]
    NotAFile(&'static str),
    /// Opening or reading it failed.
    #[error("{0}")]
    Io(Arc<std::io::Error>),
    /// Creating it failed.
    #[error("cannot create it: {0}")]
    Create(Arc<std::io::Error>),
    /// It was created, then removed before it could be read (twice).
    #[error("created, then gone")]
    Vanished,
}

impl PartialEq for KeyRefused {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.why.to_string() == other.why.to_string()
    }
}

impl Eq for KeyRefused {}

impl Cache {
    /// Opens the cache, creating the directory (mode 0700) and its key if
    /// they are missing.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, CacheError> {
        let io = |reason: std::io::Error| CacheError::Io { dir: dir.to_path_buf(), reason: reason.to_string() };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
        let meta = std::fs::symlink_metadata(dir).map_err(io)?;
        let uid = Trust::effective_uid();
        if !meta.is_dir() {
            return Err(CacheError::NotADirectory { dir: dir.into(), kind: kind_of(meta.file_type()) });
        }
        Trust::host(uid).check(&meta).map_err(|why| CacheError::Untrusted { dir: dir.into(), why })?;
        let (key, created) =
            load_or_create_key(&key_path(dir), uid).map_err(|error| CacheError::Key { dir: dir.into(), error })?;
        let cache = Self { dir: dir.to_path_buf(), max_bytes, uid, key: bound_key(&key, meta.ino()) };
        if created {
            // Whatever entries are here were written under another key (a
            // lost key, an earlier version's beside the directory): none
            // would verify. Removed now, with one line, rather than each
            // with a warning when a policy loads.
            let removed = cache.remove_entries();
            if removed > 0 {
                tracing::info!(
                    dir = %dir.display(),
                    removed,
                    "compile cache: a new key; the entries written under another key were removed"
                );
            }
            if let Some(old) = old_key_path(dir).filter(|p| std::fs::symlink_metadata(p).is_ok()) {
                tracing::info!(
                    dir = %dir.display(),
                    old_key = %old.display(),
                    "compile cache: the key is now inside the directory; the one beside it is no longer used \
                     and may be deleted"
                );
            }
        }
        Ok(cache)
    }

    /// Removes every entry (`*.cwasm`); the number removed.
    fn remove_entries(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return 0 };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(&format!(".{EXTENSION}")))
            .filter(|e| std::fs::remove_file(e.path()).is_ok())
            .count()
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of the entry named `key`.
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{EXTENSION}"))
    }

    fn mac(&self, header: &[u8], code: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(header);
        mac.update(code);
        mac
    }

    /// The entry for `binding`: `Ok(None)` if there is none, the reason if
    /// there is one that must not be used. Nothing is changed on disk.
    pub fn lookup(&self, binding: &Binding) -> Result<Option<Entry>, Rejected> {
        let path = self.path(&binding.key());
        let (file, meta) = match open_regular(&path) {
            Ok(Ok(opened)) => opened,
            Ok(Err(what)) => return Err(Rejected::NotAFile(what)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Rejected::Io(e.to_string())),
        };
        Trust::host(self.uid).check(&meta).map_err(Rejected::Untrusted)?;
        if meta.len() > MAX_ENTRY_BYTES {
            return Err(Rejected::TooLarge { size: meta.len(), limit: MAX_ENTRY_BYTES });
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        (&file).take(MAX_ENTRY_BYTES + 1).read_to_end(&mut bytes).map_err(|e| Rejected::Io(e.to_string()))?;
        if bytes.len() as u64 > MAX_ENTRY_BYTES {
            return Err(Rejected::TooLarge { size: bytes.len() as u64, limit: MAX_ENTRY_BYTES });
        }
        self.verify(binding, &bytes)?;
        // Mark it used, for pruning (through the descriptor: no path is
        // followed again).
        let _ = file.set_modified(SystemTime::now());
        Ok(Some(Entry { bytes }))
    }

    /// Checks an entry's header, its MAC and its binding.
    fn verify(&self, binding: &Binding, bytes: &[u8]) -> Result<(), Rejected> {
        if bytes.len() < PREFIX {
            return Err(Rejected::Short(bytes.len() as u64));
        }
        let (header, rest) = bytes.split_at(HEADER);
        let (tag, code) = rest.split_at(32);
        if &header[..8] != MAGIC {
            return Err(Rejected::Magic);
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != FORMAT {
            return Err(Rejected::Version(version));
        }
        let declared = u64::from_le_bytes(header[76..84].try_into().expect("8 bytes"));
        if declared != code.len() as u64 {
            return Err(Rejected::Length { declared, actual: code.len() as u64 });
        }
        // Constant time: the comparison does not tell how much matched.
        self.mac(header, code).verify_slice(tag).map_err(|_| Rejected::Mac)?;
        // The header is authentic now; what it says can be believed.
        if header[12..44] != binding.engine {
            return Err(Rejected::Engine);
        }
        if header[44..76] != binding.source {
            return Err(Rejected::Source { found: hex(&header[44..76]), expected: hex(&binding.source) });
        }
        Ok(())
    }

    /// The verified entry for `binding`, if there is one. An entry that
    /// fails any check is removed, with a warning naming `policy` and the
    /// file, so that the caller compiles the component again.
    pub fn get(&self, policy: &str, binding: &Binding) -> Option<Entry> {
        match self.lookup(binding) {
            Ok(entry) => entry,
            Err(reason) => {
                let path = self.path(&binding.key());
                let removed = std::fs::remove_file(&path).is_ok();
                tracing::warn!(
                    policy,
                    file = %path.display(),
                    %reason,
                    removed,
                    "compile cache entry rejected; compiling the policy again"
                );
                None
            }
        }
    }

    /// Stores `artifact` as the entry for `binding` (mode 0600, atomically:
    /// a unique temporary file, created exclusively, renamed into place).
    pub fn put(&self, binding: &Binding, artifact: &[u8]) -> std::io::Result<()> {
        let key = binding.key();
        let header = binding.header(artifact.len() as u64);
        let tag = self.mac(&header, artifact).finalize().into_bytes();
        let tmp = self.dir.join(temp_name(&key));
        let result = (|| {
            let mut file = create_private(&tmp)?;
            file.write_all(&header)?;
            file.write_all(&tag)?;
            file.write_all(artifact)?;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&tmp, self.path(&key))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Removes entries no policy in `keep` uses once they are old or the
    /// directory is over its cap, and temporary files left by a crash.
    /// Returns how many files were removed.
    pub fn prune(&self, keep: &HashSet<String>) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return 0 };
        let now = SystemTime::now();
        let age =
            |m: &std::fs::Metadata| m.modified().ok().and_then(|t| now.duration_since(t).ok()).unwrap_or_default();
        let mut unused = Vec::new();
        let mut total = 0u64;
        let mut removed = 0;
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.contains(".tmp.") {
                if age(&meta) > STALE_TMP && std::fs::remove_file(entry.path()).is_ok() {
                    removed += 1;
                }
                continue;
            }
            let Some(key) = name.strip_suffix(&format!(".{EXTENSION}")) else { continue };
            total += meta.len();
            if !keep.contains(key) {
                unused.push((age(&meta), meta.len(), entry.path()));
            }
        }
        // Oldest first.
        unused.sort_by_key(|u| std::cmp::Reverse(u.0));
        for (age, len, path) in unused {
            if (age > UNUSED_TTL || total > self.max_bytes) && std::fs::remove_file(&path).is_ok() {
                total -= len;
                removed += 1;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Binding = Binding { engine: [1; 32], source: [2; 32] };
    const B: Binding = Binding { engine: [1; 32], source: [3; 32] };

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_directory_others_may_write_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        Cache::open(&cache, 1 << 30).unwrap();
        assert_eq!(std::fs::metadata(&cache).unwrap().mode() & 0o777, 0o700);
        set_mode(&cache, 0o777);
        let e = Cache::open(&cache, 1 << 30).unwrap_err();
        assert!(e.to_string().contains("writable by group or others"), "{e}");
    }

    #[test]
    fn the_key_is_private_inside_the_directory_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        Cache::open(&cache_dir, 1 << 30).unwrap();
        let key = cache_dir.join("key");
        assert_eq!(key_path(&cache_dir), key);
        let meta = std::fs::symlink_metadata(&key).unwrap();
        assert!(meta.is_file() && meta.len() == 32 && meta.mode() & 0o777 == 0o600, "{meta:?}");
        // Nothing is written beside the directory: its parent may be a
        // read-only root with only the directory mounted writable.
        let beside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(beside, ["cache"]);
        // The same key on the next start.
        let first = std::fs::read(&key).unwrap();
        Cache::open(&cache_dir, 1 << 30).unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), first);

        set_mode(&key, 0o644);
        let e = Cache::open(&cache_dir, 1 << 30).unwrap_err().to_string();
        assert!(e.contains("cache/key") && e.contains("readable or writable by group or others"), "{e}");
        std::fs::remove_file(&key).unwrap();
        std::fs::write(dir.path().join("elsewhere"), [7u8; 32]).unwrap();
        set_mode(&dir.path().join("elsewhere"), 0o600);
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &key).unwrap();
        let e = Cache::open(&cache_dir, 1 << 30).unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "a symlinked key is not followed: {e}");
        std::fs::remove_file(&key).unwrap();
        std::fs::write(&key, b"short").unwrap();
        set_mode(&key, 0o600);
        let e = Cache::open(&cache_dir, 1 << 30).unwrap_err().to_string();
        assert!(e.contains("5 bytes, not 32"), "{e}");
    }

    #[test]
    fn pruning_never_removes_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("c");
        let cache = Cache::open(&cache_dir, 0).unwrap();
        cache.put(&A, b"artifact").unwrap();
        let past = SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
        std::fs::File::options().append(true).open(key_path(&cache_dir)).unwrap().set_modified(past).unwrap();
        assert_eq!(cache.prune(&HashSet::new()), 1, "the entry, over the cap of 0 bytes");
        assert!(key_path(&cache_dir).exists());
        assert!(Cache::open(&cache_dir, 0).is_ok());
    }

    #[test]
    fn a_copy_of_the_directory_with_its_key_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let (original, copy) = (dir.path().join("c"), dir.path().join("copy"));
        Cache::open(&original, 1 << 30).unwrap().put(&A, b"artifact").unwrap();
        std::fs::DirBuilder::new().mode(0o700).create(&copy).unwrap();
        for e in std::fs::read_dir(&original).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        // The key is the same file content, the directory another inode.
        assert_eq!(std::fs::read(key_path(&copy)).unwrap(), std::fs::read(key_path(&original)).unwrap());
        let copied = Cache::open(&copy, 1 << 30).unwrap();
        assert_eq!(copied.lookup(&A).unwrap_err(), Rejected::Mac);
        // Moved (the same inode), it is still the host's.
        let moved = dir.path().join("moved");
        std::fs::rename(&original, &moved).unwrap();
        assert_eq!(Cache::open(&moved, 1 << 30).unwrap().lookup(&A).unwrap().unwrap().code(), b"artifact");
    }

    #[test]
    fn a_key_beside_the_directory_from_an_earlier_version_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let old = dir.path().join("cache.key");
        std::fs::write(&old, [5u8; 32]).unwrap();
        set_mode(&old, 0o600);
        // An entry an earlier version wrote (under the old key, unbound).
        std::fs::DirBuilder::new().mode(0o700).create(&cache_dir).unwrap();
        let stale = cache_dir.join(format!("{}.cwasm", A.key()));
        std::fs::write(&stale, b"an entry under the old key").unwrap();
        set_mode(&stale, 0o600);
        let cache = Cache::open(&cache_dir, 1 << 30).unwrap();
        assert!(!stale.exists(), "an entry of another key is removed when the key is created");
        assert!(cache.lookup(&A).unwrap().is_none());
        assert_ne!(std::fs::read(key_path(&cache_dir)).unwrap(), [5u8; 32], "the old key is not adopted");
        assert_eq!(std::fs::read(&old).unwrap(), [5u8; 32], "nor changed");
        // Entries written now survive the next start (the key exists).
        cache.put(&A, b"artifact").unwrap();
        assert!(Cache::open(&cache_dir, 1 << 30).unwrap().lookup(&A).unwrap().is_some());
    }

    #[test]
    fn entries_round_trip_bound_to_their_source() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("c"), 1 << 30).unwrap();
        assert!(cache.lookup(&A).unwrap().is_none(), "no entry yet");
        cache.put(&A, b"artifact of a").unwrap();
        assert_eq!(cache.lookup(&A).unwrap().unwrap().code(), b"artifact of a");
        assert_eq!(std::fs::metadata(cache.path(&A.key())).unwrap().mode() & 0o777, 0o600);
        assert_ne!(A.key(), B.key());
        let other_engine = Binding { engine: [9; 32], ..A };
        assert_ne!(A.key(), other_engine.key(), "the engine is part of the name");
    }

    /// What a tampered entry must be rejected for.
    type Expect = fn(&Rejected) -> bool;

    /// Writes `bytes` as the entry of `binding`, as an attacker with the
    /// host's uid would.
    fn plant(cache: &Cache, binding: &Binding, bytes: &[u8]) {
        let path = cache.path(&binding.key());
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, bytes).unwrap();
        set_mode(&path, 0o600);
    }

    #[test]
    fn a_swapped_damaged_or_foreign_entry_is_rejected_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("c"), 1 << 30).unwrap();
        cache.put(&A, b"artifact of a").unwrap();
        cache.put(&B, b"artifact of b").unwrap();
        let a = std::fs::read(cache.path(&A.key())).unwrap();
        let b = std::fs::read(cache.path(&B.key())).unwrap();

        // B's genuine entry under A's name.
        plant(&cache, &A, &b);
        let e = cache.lookup(&A).unwrap_err();
        assert!(matches!(&e, Rejected::Source { found, .. } if *found == hex(&[3; 32])), "{e}");
        assert!(cache.get("10-a", &A).is_none());
        assert!(!cache.path(&A.key()).exists(), "a rejected entry is removed");

        let mut cases: Vec<(&str, Vec<u8>, Expect)> = vec![
            ("empty", Vec::new(), |e| matches!(e, Rejected::Short(0))),
            ("truncated header", a[..50].to_vec(), |e| matches!(e, Rejected::Short(50))),
            ("truncated code", a[..a.len() - 1].to_vec(), |e| matches!(e, Rejected::Length { .. })),
            ("appended", [&a[..], b"x"].concat(), |e| matches!(e, Rejected::Length { .. })),
            ("wasmtime's own format", b"\x7fELF not ours".repeat(20), |e| matches!(e, Rejected::Magic)),
        ];
        for at in [0, 10, 80] {
            let mut flipped = a.clone();
            flipped[at] ^= 0x40;
            cases.push(("flipped magic, version or length", flipped, |e| {
                matches!(e, Rejected::Magic | Rejected::Version(_) | Rejected::Length { .. })
            }));
        }
        // The engine, the source, the MAC, the first and last byte of code.
        for at in [20, 50, HEADER + 5, PREFIX, a.len() - 1] {
            let mut flipped = a.clone();
            flipped[at] ^= 0x40;
            cases.push(("flipped", flipped, |e| matches!(e, Rejected::Mac)));
        }
        // Right header, code and length, a MAC of another key.
        let mut forged = a.clone();
        forged[HEADER..PREFIX].copy_from_slice(&[0u8; 32]);
        cases.push(("forged", forged, |e| matches!(e, Rejected::Mac)));
        for (what, bytes, expected) in cases {
            plant(&cache, &A, &bytes);
            let e = cache.lookup(&A).expect_err(what);
            assert!(expected(&e), "{what}: {e}");
            assert!(cache.get("10-a", &A).is_none(), "{what}");
            assert!(!cache.path(&A.key()).exists(), "{what}: removed");
        }
        // The genuine entry again.
        plant(&cache, &A, &a);
        assert_eq!(cache.lookup(&A).unwrap().unwrap().code(), b"artifact of a");
    }

    #[test]
    fn a_new_key_invalidates_every_entry() {
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("c");
        let cache = Cache::open(&cache_dir, 1 << 30).unwrap();
        cache.put(&A, b"artifact").unwrap();
        let entry = std::fs::read(cache.path(&A.key())).unwrap();
        std::fs::remove_file(key_path(&cache_dir)).unwrap();
        let again = Cache::open(&cache_dir, 1 << 30).unwrap();
        assert!(!again.path(&A.key()).exists(), "removed when the new key is made");
        // Put back (or planted while the key exists): it does not verify.
        plant(&again, &A, &entry);
        assert_eq!(again.lookup(&A).unwrap_err(), Rejected::Mac);
    }

    #[test]
    fn untrusted_entries_and_odd_files_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("c"), 1 << 30).unwrap();
        cache.put(&A, b"artifact").unwrap();
        set_mode(&cache.path(&A.key()), 0o666);
        assert_eq!(cache.lookup(&A).unwrap_err(), Rejected::Untrusted(Distrust::Mode { mode: 0o666, readable: false }));
        set_mode(&cache.path(&A.key()), 0o620);
        assert!(matches!(cache.lookup(&A), Err(Rejected::Untrusted(Distrust::Mode { .. }))), "group-writable");
        set_mode(&cache.path(&A.key()), 0o644);
        assert!(cache.lookup(&A).unwrap().is_some(), "readable by others is fine for an entry (not a secret)");
        std::fs::remove_file(cache.path(&A.key())).unwrap();
        std::os::unix::fs::symlink("/dev/zero", cache.path(&A.key())).unwrap();
        assert_eq!(cache.lookup(&A).unwrap_err(), Rejected::NotAFile("a symbolic link"));
        assert!(cache.get("10-a", &A).is_none());
        assert!(std::fs::symlink_metadata(cache.path(&A.key())).is_err(), "the link is removed, not its target");
        crate::files::mkfifo(&cache.path(&A.key()));
        assert_eq!(cache.lookup(&A).unwrap_err(), Rejected::NotAFile("a FIFO"), "opened without blocking");
    }

    #[test]
    fn pruning_keeps_used_entries_and_removes_old_or_excess_unused_ones() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&dir.path().join("c"), 200).unwrap();
        let (used, old, new) = (A, B, Binding { engine: [1; 32], source: [4; 32] });
        for b in [used, old, new] {
            cache.put(&b, b"12345678").unwrap();
        }
        let past = SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
        std::fs::File::options().append(true).open(cache.path(&old.key())).unwrap().set_modified(past).unwrap();
        let keep: HashSet<String> = [used.key()].into();
        // 3 × 124 bytes, cap 200: "old" goes for its age, "new" for the cap.
        assert_eq!(cache.prune(&keep), 2);
        assert!(cache.lookup(&used).unwrap().is_some());
        assert!(cache.lookup(&old).unwrap().is_none() && cache.lookup(&new).unwrap().is_none());
    }
}
