//! Compiled policies on disk, so that a restart or a reload does not compile
//! unchanged components again.
//!
//! The files hold native code that the host maps and runs, loaded with
//! wasmtime's `unsafe` deserialisation: whoever can write them can run code
//! as the host. So the cache is used only when the directory and each file
//! are owned by the host's user and writable by no one else; otherwise it is
//! ignored (with a warning) and policies are compiled afresh. Entries are
//! keyed by the SHA-256 of the engine's compatibility hash and the
//! component, written under a unique temporary name and renamed into place,
//! and pruned: entries no loaded policy uses are removed once they are a day
//! old or the directory is over its size cap.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// Unused entries older than this are removed when the cache is pruned.
const UNUSED_TTL: Duration = Duration::from_secs(24 * 3600);
/// Temporary files older than this are left over from a crash.
const STALE_TMP: Duration = Duration::from_secs(3600);
const EXTENSION: &str = "cwasm";

/// The cache cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error("compile cache {dir}: {reason}")]
    Untrusted { dir: PathBuf, reason: String },
    #[error("compile cache {dir}: {reason}")]
    Io { dir: PathBuf, reason: String },
}

/// A directory of compiled components.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    uid: u32,
}

/// Why a file or directory may not be trusted, if it may not.
fn distrust(meta: &std::fs::Metadata, uid: u32) -> Option<String> {
    if meta.uid() != uid {
        return Some(format!("owned by uid {}, not by the host's uid {uid}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!("writable by group or others (mode {:o})", meta.mode() & 0o7777));
    }
    None
}

impl Cache {
    /// Opens the cache, creating the directory (mode 0700) if it is missing.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, CacheError> {
        let io = |reason: std::io::Error| CacheError::Io { dir: dir.to_path_buf(), reason: reason.to_string() };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
        let meta = std::fs::symlink_metadata(dir).map_err(io)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if !meta.is_dir() {
            return Err(CacheError::Untrusted { dir: dir.into(), reason: "not a directory".into() });
        }
        if let Some(reason) = distrust(&meta, uid) {
            return Err(CacheError::Untrusted { dir: dir.into(), reason });
        }
        Ok(Self { dir: dir.to_path_buf(), max_bytes, uid })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of a component for an engine.
    pub fn key(engine: &wasmtime::Engine, component: &[u8]) -> String {
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
        h.0.update(component);
        h.0.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{EXTENSION}"))
    }

    /// The artifact stored under `key`, if there is one the host may trust.
    /// It is read into memory rather than mapped: a file truncated under a
    /// mapping would crash the host on the next access.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.path(key);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() {
            tracing::warn!(path = %path.display(), "ignoring a cache entry that is not a regular file");
            return None;
        }
        if let Some(reason) = distrust(&meta, self.uid) {
            tracing::warn!(path = %path.display(), reason, "ignoring an untrusted cache entry");
            return None;
        }
        match std::fs::read(&path) {
            Ok(bytes) => {
                // Mark it used, for pruning.
                let _ =
                    std::fs::File::options().append(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
                Some(bytes)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read a cached component");
                None
            }
        }
    }

    /// Stores an artifact under `key` (mode 0600, atomically).
    pub fn put(&self, key: &str, artifact: &[u8]) -> std::io::Result<()> {
        // Unique per process and call: concurrent loads of one component
        // must never write into the same temporary file.
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(".{key}.tmp.{}.{seq}", std::process::id()));
        let result = (|| {
            let mut file = std::fs::File::options().write(true).create_new(true).mode(0o600).open(&tmp)?;
            std::io::Write::write_all(&mut file, artifact)?;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&tmp, self.path(key))
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

    #[test]
    fn a_directory_others_may_write_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        Cache::open(&cache, 1 << 30).unwrap();
        assert_eq!(std::fs::metadata(&cache).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Cache::open(&cache, 1 << 30).unwrap_err();
        assert!(e.to_string().contains("writable by group or others"), "{e}");
    }

    #[test]
    fn entries_round_trip_and_untrusted_ones_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 30).unwrap();
        cache.put("abc", b"artifact").unwrap();
        assert_eq!(cache.get("abc").as_deref(), Some(&b"artifact"[..]));
        assert_eq!(std::fs::metadata(cache.path("abc")).unwrap().mode() & 0o777, 0o600);
        std::fs::set_permissions(cache.path("abc"), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(cache.get("abc"), None, "a world-writable entry is not loaded");
        std::os::unix::fs::symlink("/dev/zero", cache.path("link")).unwrap();
        assert_eq!(cache.get("link"), None, "a symlink is not followed");
    }

    #[test]
    fn pruning_keeps_used_entries_and_removes_old_or_excess_unused_ones() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 10).unwrap();
        for key in ["used", "old", "new"] {
            cache.put(key, b"12345678").unwrap();
        }
        let old = SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
        std::fs::File::options().append(true).open(cache.path("old")).unwrap().set_modified(old).unwrap();
        let keep: HashSet<String> = ["used".to_string()].into();
        // 24 bytes, cap 10: "old" goes for its age, "new" for the cap.
        assert_eq!(cache.prune(&keep), 2);
        assert!(cache.get("used").is_some());
        assert!(cache.get("old").is_none() && cache.get("new").is_none());
    }
}
