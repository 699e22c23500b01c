//! Pulled blobs kept by digest, so that the host starts without the registry.
//!
//! Layout, all under the host's own directory (mode 0700):
//! `blobs/<sha256 hex>` (manifests, components, signature payloads) and
//! `refs/<sha256 of the reference>` (the manifest digest a reference last
//! resolved to, and that of its signature). Every file is written to a
//! temporary name in the same directory, synced and renamed: a crash leaves
//! either the old file or the new one, never a part. Nothing read back is
//! trusted: a blob is returned only if its content has the digest it is
//! named by; a reference's record only points at blobs, which are checked.
//!
//! The directory and its two subdirectories must be directories (not links
//! to one elsewhere) owned by the host's user and writable by no one else,
//! as the compile cache's: the cache writes, renames and removes files in
//! them, which through a link would be files outside the host's
//! directories, and a reference's record, which whoever can write `refs/`
//! could point at an older signed manifest, is only as good as the
//! directory's owner.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files::{sha256_hex, FileError};

/// Older than this, a temporary download file is left over from a download
/// that was cut off: every pull ends well before (`[registry]` deadline).
const STALE_DOWNLOAD: std::time::Duration = std::time::Duration::from_secs(3600);

/// Why the cache could not give or keep something. A blob or record that
/// is absent is a [`FileError::Read`] whose source is `NotFound`
/// ([`CacheError::is_absent`]).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Reading or writing one of its files.
    #[error(transparent)]
    File(#[from] FileError),
    /// A blob's content does not have the digest it is named by; it was
    /// removed.
    #[error("{}: content has digest sha256:{actual}, not its name (removed)", path.display())]
    Tampered {
        /// The blob's file.
        path: PathBuf,
        /// The digest its content has, hex.
        actual: String,
    },
    /// A reference's record is not one.
    #[error("{}: not a reference record", path.display())]
    NotRecord {
        /// The record's file.
        path: PathBuf,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// A reference's record names another reference.
    #[error("{}: records another reference", path.display())]
    OtherReference {
        /// The record's file.
        path: PathBuf,
    },
    /// The directory, or one of its subdirectories, is not a directory
    /// (a link to one is not).
    #[error("{}: is {kind}, not a directory", dir.display())]
    NotADirectory {
        /// The path.
        dir: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The directory, or one of its subdirectories, is not the host's own.
    #[error("{}: {why}: the registry cache must be the host's own", dir.display())]
    Untrusted {
        /// The directory.
        dir: PathBuf,
        /// Whose it is, or who else may write it.
        why: crate::files::Distrust,
    },
}

impl CacheError {
    /// Whether the blob or record is simply not there.
    pub fn is_absent(&self) -> bool {
        matches!(self, Self::File(FileError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The digest cache.
#[derive(Debug, Clone)]
pub struct BlobCache {
    dir: PathBuf,
}

/// What a reference resolved to when it was last pulled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefRecord {
    /// The reference as configured.
    pub reference: String,
    /// Manifest digest, hex.
    pub manifest: String,
    /// The signature manifest's digest, hex, when one was verified.
    pub signature: Option<String>,
}

impl BlobCache {
    /// Opens (creating it, mode 0700) the cache in `dir`, which must be
    /// the host's own, as must `blobs/` and `refs/` in it.
    pub fn open(dir: &Path) -> Result<Self, CacheError> {
        let uid = crate::files::Trust::effective_uid();
        for path in [dir.to_path_buf(), dir.join("blobs"), dir.join("refs")] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
                .map_err(|source| FileError::Create { path: path.clone(), source })?;
            let meta =
                std::fs::symlink_metadata(&path).map_err(|source| FileError::Read { path: path.clone(), source })?;
            if !meta.is_dir() {
                return Err(CacheError::NotADirectory { dir: path, kind: crate::files::kind_of(meta.file_type()) });
            }
            crate::files::Trust::host(uid).check(&meta).map_err(|why| CacheError::Untrusted { dir: path, why })?;
        }
        // A download cut off by its deadline or a stop leaves its temporary
        // file. Those older than any download may take go; a younger one
        // may be another process's download in progress (`check` and
        // `pull` share a node's cache).
        if let Ok(entries) = std::fs::read_dir(dir.join("blobs")) {
            for entry in entries.flatten() {
                let stale = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_DOWNLOAD));
                if stale && entry.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(Self { dir: dir.to_path_buf() })
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn blob_path(&self, hex: &str) -> PathBuf {
        self.dir.join("blobs").join(hex)
    }

    fn ref_path(&self, reference: &str) -> PathBuf {
        self.dir.join("refs").join(sha256_hex(reference.as_bytes()))
    }

    /// A new temporary file in `blobs/` (for a download), and its path.
    pub fn temp_file(&self) -> Result<(std::fs::File, PathBuf), CacheError> {
        let path = self.dir.join("blobs").join(format!(".tmp-{}", crate::files::unique_suffix()));
        match std::fs::File::options().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(file) => Ok((file, path)),
            Err(source) => Err(FileError::Create { path, source }.into()),
        }
    }

    /// Moves a finished, verified temporary file to its digest's name.
    pub fn commit(&self, file: std::fs::File, temp: &Path, hex: &str) -> Result<(), CacheError> {
        let path = self.blob_path(hex);
        if let Err(source) = file.sync_all().and_then(|()| std::fs::rename(temp, &path)) {
            let _ = std::fs::remove_file(temp);
            return Err(FileError::Write { path, source }.into());
        }
        sync_dir(&self.dir.join("blobs"));
        Ok(())
    }

    /// Stores `bytes` under their digest.
    pub fn put(&self, bytes: &[u8]) -> Result<String, CacheError> {
        let hex = sha256_hex(bytes);
        let (mut file, temp) = self.temp_file()?;
        if let Err(source) = file.write_all(bytes) {
            let _ = std::fs::remove_file(&temp);
            return Err(FileError::Write { path: temp, source }.into());
        }
        self.commit(file, &temp, &hex)?;
        Ok(hex)
    }

    /// The blob named `hex` if it is there, at most `max` bytes, and has
    /// that digest. A blob whose content does not match is removed.
    pub fn get(&self, hex: &str, max: u64) -> Result<Vec<u8>, CacheError> {
        let path = self.blob_path(hex);
        let bytes = crate::files::read_bounded(&path, max)?;
        let actual = sha256_hex(&bytes);
        if actual != hex {
            let _ = std::fs::remove_file(&path);
            return Err(CacheError::Tampered { path, actual });
        }
        Ok(bytes)
    }

    /// Whether a blob of that name is there (its content is checked on `get`).
    pub fn has(&self, hex: &str) -> bool {
        self.blob_path(hex).is_file()
    }

    /// Records what `reference` resolved to.
    pub fn put_ref(&self, record: &RefRecord) -> Result<(), CacheError> {
        let path = self.ref_path(&record.reference);
        // Strings and an optional string: always serialisable.
        let body = serde_json::to_vec(record).unwrap_or_default();
        let (mut file, temp) = self.temp_file()?;
        let result = file.write_all(&body).and_then(|()| file.sync_all()).and_then(|()| std::fs::rename(&temp, &path));
        if let Err(source) = result {
            let _ = std::fs::remove_file(&temp);
            return Err(FileError::Write { path, source }.into());
        }
        sync_dir(&self.dir.join("refs"));
        Ok(())
    }

    /// What `reference` last resolved to, if recorded.
    pub fn get_ref(&self, reference: &str) -> Result<RefRecord, CacheError> {
        let path = self.ref_path(reference);
        let bytes = super::read_small(&path)?;
        let record: RefRecord = match serde_json::from_slice(&bytes) {
            Ok(record) => record,
            Err(source) => return Err(CacheError::NotRecord { path, source }),
        };
        if record.reference != reference {
            return Err(CacheError::OtherReference { path });
        }
        Ok(record)
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_returned_only_with_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(&dir.path().join("c")).unwrap();
        let hex = cache.put(b"component").unwrap();
        assert_eq!(cache.get(&hex, 100).unwrap(), b"component");
        let e = cache.get(&hex, 3).unwrap_err();
        assert!(matches!(e, CacheError::File(FileError::TooLarge { max: 3, .. })), "{e:?}");
        std::fs::write(dir.path().join("c/blobs").join(&hex), b"tampered").unwrap();
        let e = cache.get(&hex, 100).unwrap_err();
        assert!(matches!(&e, CacheError::Tampered { actual, .. } if *actual == sha256_hex(b"tampered")), "{e:?}");
        assert!(e.to_string().contains("not its name"), "{e}");
        assert!(!cache.has(&hex), "a tampered blob is removed");
        assert!(cache.get(&hex, 100).unwrap_err().is_absent());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("c/blobs")).unwrap().collect();
        assert!(leftovers.is_empty(), "no temporary file is left: {leftovers:?}");
    }

    /// The cache's directories must be the host's own and real
    /// directories: a `blobs` link to another directory would have the
    /// cache write, rename and remove files there.
    #[test]
    fn a_cache_whose_directories_are_links_or_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let stale = elsewhere.join(".tmp-old");
        std::fs::write(&stale, b"not the cache's").unwrap();
        let old = std::time::SystemTime::now() - 2 * STALE_DOWNLOAD;
        std::fs::File::options().write(true).open(&stale).unwrap().set_modified(old).unwrap();
        let c = dir.path().join("c");
        std::fs::create_dir_all(c.join("refs")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, c.join("blobs")).unwrap();
        let e = BlobCache::open(&c).unwrap_err();
        assert!(matches!(&e, CacheError::NotADirectory { kind: "a symbolic link", .. }), "{e:?}");
        assert!(e.to_string().contains("blobs: is a symbolic link, not a directory"), "{e}");
        assert!(stale.exists(), "nothing behind the link was touched");

        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = BlobCache::open(&shared).unwrap_err();
        assert!(matches!(&e, CacheError::Untrusted { .. }), "{e:?}");
        assert!(e.to_string().contains("writable by group or others (mode 777)"), "{e}");
        assert!(!shared.join("blobs").exists(), "nothing is made in a directory that is not the host's");
    }

    #[test]
    fn reference_records_round_trip_and_name_their_reference() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(dir.path()).unwrap();
        let r = RefRecord { reference: "oci://h/p:v".into(), manifest: "a".repeat(64), signature: None };
        cache.put_ref(&r).unwrap();
        assert_eq!(cache.get_ref("oci://h/p:v").unwrap(), r);
        assert!(cache.get_ref("oci://h/p:w").unwrap_err().is_absent());
        // A record put where another reference's belongs, and one that is
        // not a record, are refused for what they are.
        let other = cache.ref_path("oci://h/p:w");
        std::fs::copy(cache.ref_path("oci://h/p:v"), &other).unwrap();
        assert!(matches!(cache.get_ref("oci://h/p:w"), Err(CacheError::OtherReference { .. })));
        std::fs::write(&other, b"{not json").unwrap();
        let e = cache.get_ref("oci://h/p:w").unwrap_err();
        assert!(matches!(e, CacheError::NotRecord { .. }) && !e.is_absent(), "{e:?}");
        assert!(crate::text::chain(&e).starts_with(&format!("{}: not a reference record: ", other.display())), "{e}");
    }
}
