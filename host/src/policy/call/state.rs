//! Per-policy state: a small key-value store that outlives the instance.
//!
//! Policies run in a fresh instance for every event, which keeps them
//! isolated; a resource policy still has to remember what it decided (the
//! CPUs it gave a container). The host keeps that memory for it, so a policy
//! stays a pure function of (event, node view, its state).
//!
//! Semantics, in the order an event sees them:
//! - a call starts from the policy's *committed* state ([`StateSnapshot`],
//!   shared, never copied) and gets a [`StateTxn`]: reads see the call's own
//!   writes, writes stay in the transaction;
//! - when the call succeeds and its reply is merged, the chain keeps the
//!   transaction's [`StateWrites`]; a failed call (trap, limit, invalid
//!   output, conflict) or a policy in audit mode leaves none;
//! - when the whole event succeeds the dispatcher commits every kept write
//!   set ([`StateStore::commit`]); a denied or failed event, or one answered
//!   too late, commits nothing.
//!
//! State belongs to the policy's `NN-name`, so it survives reloads of the
//! same policy. With a state directory it also survives host restarts: each
//! commit that changed something is written to `NN-name.json`, off the
//! event's path: the event's answer never waits for the disk.
//!
//! The directory is read at every start, so what is in it is hostile input
//! like everything else the host reads. It must be a directory owned by the
//! host's user and writable by no one else (created 0700); a state file is
//! opened without following a symlink and without blocking (a FIFO), must be
//! a regular file owned by the host's user, and is refused past a size
//! derived from the policy's `state-kib` before a byte of it is read. A file
//! that fails a check is moved aside (never read, never overwritten) and the
//! policy starts empty; the error names the policy and the file.
//!
//! Saves are durable and never write through a name someone else chose: a
//! temporary file with an unguessable name is created exclusively in the
//! directory (no symlink followed), written, fsynced, renamed over the state
//! file, and the directory is fsynced. A failed save (a full volume, a
//! read-only one) removes its temporary file, is counted per policy and kept
//! with its error for `/status` and the metrics; the committed state stays
//! in memory, and the next commit saves it again, whole. Temporary files a
//! crash left behind are removed when the store opens the directory.

use std::collections::{BTreeMap, HashMap};

use imbl::OrdMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::files::{Distrust, Trust};
use crate::wit::state::StateError;

/// Longest key, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 256;
/// Bytes a key counts for beside its key and value: about what the host's
/// map spends on an entry (two strings, their allocations and the tree's
/// share of a node). Counting only keys and values, a state of a million
/// one-byte keys within its 1 MiB held about a hundred times that in the
/// host's memory, and `state.keys` copied a million strings per call.
pub(crate) const ENTRY_BYTES: usize = 64;

/// What one entry counts toward the state's limit.
fn entry_size(key: &str, value: &str) -> usize {
    key.len() + value.len() + ENTRY_BYTES
}

/// A policy's committed state: immutable, shared by every call that reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateSnapshot {
    /// Persistent: a commit copies the path to the keys it changes, not the map.
    map: OrdMap<String, String>,
    /// Sum of the lengths of keys and values.
    bytes: usize,
}

impl StateSnapshot {
    /// The committed value of `key`, if it is set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    /// The state's size: the sum of the lengths of its keys and values and
    /// [`ENTRY_BYTES`] per key, in bytes (what `state-kib` limits).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many keys are set.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every key and its value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// What one call wrote: `Some(value)` sets, `None` removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateWrites {
    writes: BTreeMap<String, Option<String>>,
}

impl StateWrites {
    /// Whether the call wrote nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

/// The state as one call sees it: the committed snapshot plus its own writes.
#[derive(Debug)]
pub struct StateTxn {
    base: Arc<StateSnapshot>,
    writes: BTreeMap<String, Option<String>>,
    /// Size of the state as the call sees it.
    bytes: usize,
    limit: usize,
}

impl StateTxn {
    /// A transaction on `base` whose state may hold at most `limit` bytes
    /// of keys and values, counting [`ENTRY_BYTES`] more per key.
    pub fn new(base: Arc<StateSnapshot>, limit: usize) -> Self {
        let bytes = base.bytes;
        Self { base, writes: BTreeMap::new(), bytes, limit }
    }

    /// The value of `key` as the call sees it: its own write, else the snapshot's.
    pub fn get(&self, key: &str) -> Option<&str> {
        match self.writes.get(key) {
            Some(v) => v.as_deref(),
            None => self.base.get(key),
        }
    }

    fn entry_bytes(&self, key: &str) -> usize {
        self.get(key).map_or(0, |v| entry_size(key, v))
    }

    /// Sets `key` to `value` in the transaction; refuses an empty key or one
    /// longer than 256 bytes, and a write that would take the state past its limit.
    pub fn set(&mut self, key: String, value: String) -> Result<(), StateError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(StateError::InvalidKey(format!(
                "key of {} bytes; keys are 1 to {MAX_KEY_BYTES} bytes",
                key.len()
            )));
        }
        let after = self.bytes - self.entry_bytes(&key) + entry_size(&key, &value);
        if after > self.limit {
            return Err(StateError::LimitExceeded(self.limit as u64));
        }
        self.bytes = after;
        self.writes.insert(key, Some(value));
        Ok(())
    }

    /// Removes `key` in the transaction (nothing if it is not set).
    pub fn remove(&mut self, key: String) {
        self.bytes -= self.entry_bytes(&key);
        if self.base.get(&key).is_some() {
            self.writes.insert(key, None);
        } else {
            self.writes.remove(&key);
        }
    }

    /// Keys starting with `prefix`, sorted, as the call sees them.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let base = self
            .base
            .map
            .range::<_, str>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix));
        let mut keys: Vec<String> =
            base.filter(|k| !matches!(self.writes.get(k.as_str()), Some(None))).cloned().collect();
        for (k, v) in self
            .writes
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            if v.is_some() && self.base.get(k).is_none() {
                keys.push(k.clone());
            }
        }
        keys.sort_unstable();
        keys
    }

    /// The call's writes, if it made any.
    /// What the call wrote (`None` if nothing), taken out of the transaction.
    pub fn take_writes(&mut self) -> Option<StateWrites> {
        (!self.writes.is_empty()).then(|| StateWrites { writes: std::mem::take(&mut self.writes) })
    }
}

/// Reading or writing a state file failed. Each names the policy and the
/// file.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are the same in every variant: the policy, the file, and what about it
pub enum StateFileError {
    /// The file could not be read.
    #[error("state of policy {policy}: cannot read {path}")]
    Read { policy: String, path: PathBuf, source: std::io::Error },
    /// The file is something else than a regular file (`what`).
    #[error("state of policy {policy}: {path} is {what}, not a regular file; not read")]
    NotAFile { policy: String, path: PathBuf, what: &'static str },
    /// Its owner or mode is not one the host may trust.
    #[error("state of policy {policy}: {path} is {why}; not read")]
    Untrusted { policy: String, path: PathBuf, why: Distrust },
    /// Larger than the policy's `state-kib` allows.
    #[error(
        "state of policy {policy}: {path} has {size} bytes, more than the {limit} its state-kib allows once encoded; not read"
    )]
    TooLarge { policy: String, path: PathBuf, size: u64, limit: u64 },
    /// Not a JSON object of strings.
    #[error("state of policy {policy}: {path} is not a JSON object of strings: {reason}")]
    Parse { policy: String, path: PathBuf, reason: String },
    /// The file could not be written.
    #[error("state of policy {policy}: cannot write {path}")]
    Write { policy: String, path: PathBuf, source: std::io::Error },
    /// The state directory is unusable.
    #[error("state of policy {policy}: state directory {dir}: {problem}")]
    Dir { policy: String, dir: PathBuf, problem: DirProblem },
}

/// The largest state a policy may be given (`state-kib` of 64 MiB).
pub(crate) const MAX_STATE_BYTES: usize = 64 << 20;

/// The largest file that can hold `state_bytes` of keys and values as this
/// module writes it: JSON escapes a control character in 6 bytes, and an
/// entry of a 1-byte key and an empty value takes 12 (`"\u0001":"",`).
pub(crate) fn max_file_bytes(state_bytes: usize) -> u64 {
    (state_bytes as u64).saturating_mul(12).saturating_add(2)
}

/// How saving a policy's state went, for the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaveHealth {
    /// Saves that failed since the host started.
    pub failures: u64,
    /// The error of the last save, if it failed.
    pub last_error: Option<String>,
    /// Why its state file was not read when the policy was installed, if
    /// it was not (the policy started empty; the file was moved aside).
    pub load_error: Option<String>,
    /// Committed state that is not on disk yet.
    pub unsaved: bool,
}

#[derive(Debug, Default)]
struct Slot {
    committed: Arc<StateSnapshot>,
    /// Commits so far, and the commit last written to disk.
    version: u64,
    persisted: u64,
    failures: u64,
    last_error: Option<String>,
    load_error: Option<String>,
}

/// Writes the bytes of a state file; a seam for tests (a full volume),
/// public as `crate::testing::StateWriter` with the `testing` feature.
#[cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]
pub trait StateWriter: Send + Sync + std::fmt::Debug {
    /// Writes all of `bytes` to `file`, the temporary file of a save.
    fn write(&self, file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()>;
}

/// Writes to the file system.
#[derive(Debug)]
struct Disk;

impl StateWriter for Disk {
    fn write(&self, file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(file, bytes)
    }
}

/// Every policy's committed state; optionally kept in a directory.
#[derive(Debug)]
pub struct StateStore {
    dir: Option<PathBuf>,
    slots: Mutex<HashMap<String, Slot>>,
    /// The most each policy's state may hold (its `state-kib`, in bytes),
    /// which bounds its file too; policies not named here get the largest
    /// any policy may have.
    caps: Mutex<HashMap<String, usize>>,
    /// Serialises file writes, so that a newer commit is never overwritten
    /// by an older one.
    writer: Mutex<()>,
    disk: Box<dyn StateWriter>,
    uid: u32,
}

impl Default for StateStore {
    fn default() -> Self {
        Self {
            dir: None,
            slots: Mutex::default(),
            caps: Mutex::default(),
            writer: Mutex::default(),
            disk: Box::new(Disk),
            uid: Trust::effective_uid(),
        }
    }
}

/// Why the state directory may not be used, if it may not.
fn check_dir(dir: &Path, uid: u32) -> Result<(), DirProblem> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(DirProblem::Create)?;
    let meta = std::fs::symlink_metadata(dir).map_err(DirProblem::Stat)?;
    if !meta.is_dir() {
        return Err(DirProblem::NotADirectory(crate::files::kind_of(meta.file_type())));
    }
    Trust::host(uid).check(&meta).map_err(DirProblem::Untrusted)
}

/// What is wrong with the state directory.
#[derive(Debug, thiserror::Error)]
pub enum DirProblem {
    /// It could not be created.
    #[error("cannot create it: {0}")]
    Create(std::io::Error),
    /// Its metadata could not be read.
    #[error("{0}")]
    Stat(std::io::Error),
    /// Something else than a directory (named).
    #[error("{0}, not a directory")]
    NotADirectory(&'static str),
    /// Another user owns it, or group or others may write it.
    #[error(transparent)]
    Untrusted(Distrust),
}

/// Whether a temporary state file is left over from a process that is gone
/// (or from one long ago).
fn stale_temp(name: &str, meta: &std::fs::Metadata) -> bool {
    // `.NN-name.json.tmp.<pid>.<seq>.<nonce>`, or `NN-name.json.tmp.<pid>`
    // of earlier versions.
    let Some((_, rest)) = name.split_once(".json.tmp.") else { return false };
    let pid = rest.split('.').next().and_then(|p| p.parse::<libc::pid_t>().ok());
    let old = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age.as_secs() > 600);
    // SAFETY: kill with signal 0 only checks whether the process exists.
    let gone = pid.is_some_and(|pid| {
        pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    });
    old || gone
}

impl StateStore {
    /// A store kept in memory only.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A store that keeps each policy's state in `dir/NN-name.json`. The
    /// directory is created (0700) and checked now; if it may not be used
    /// the error is logged, and every policy starts empty and every save
    /// fails (counted and shown) until it is fixed.
    pub fn in_dir(dir: PathBuf) -> Self {
        Self::in_dir_writing(dir, Box::new(Disk))
    }

    /// [`Self::in_dir`] writing through `disk` (tests: a full volume).
    #[cfg(any(test, feature = "testing"))]
    pub fn in_dir_with(dir: PathBuf, disk: Box<dyn StateWriter>) -> Self {
        Self::in_dir_writing(dir, disk)
    }

    fn in_dir_writing(dir: PathBuf, disk: Box<dyn StateWriter>) -> Self {
        let store = Self { dir: Some(dir), disk, ..Self::default() };
        let dir = store.dir.as_deref().expect("set above");
        match check_dir(dir, store.uid) {
            Ok(()) => store.remove_stale_temps(dir),
            Err(reason) => tracing::error!(dir = %dir.display(), %reason, "policy state directory not used"),
        }
        store
    }

    fn remove_stale_temps(&self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // `DirEntry::metadata` does not follow a symlink.
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_dir() && stale_temp(&name, &meta) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => tracing::info!(file = %entry.path().display(), "removed a stale temporary state file"),
                    Err(e) => {
                        tracing::warn!(file = %entry.path().display(), error = %e, "cannot remove a stale temporary state file")
                    }
                }
            }
        }
    }

    /// The state directory, if state is kept on disk.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The committed state of `policy` (read from its file the first time;
    /// [`StateStore::preload`] does that off the event path).
    pub fn snapshot(&self, policy: &str) -> Arc<StateSnapshot> {
        if let Some(slot) = self.slots.lock().expect("state lock").get(policy) {
            return slot.committed.clone();
        }
        // Read without the lock: other policies' calls go on meanwhile.
        let (read, error) = match self.read_file(policy) {
            Ok(s) => (Arc::new(s), None),
            Err(e) => (Arc::default(), Some(crate::text::chain(&e))),
        };
        let mut slots = self.slots.lock().expect("state lock");
        let slot = slots.entry(policy.to_string()).or_insert_with(|| Slot {
            committed: read,
            load_error: error,
            ..Slot::default()
        });
        slot.committed.clone()
    }

    /// Reads `policy`'s state file now, if it was not read yet (when a
    /// policy is loaded, so that its first call does no file I/O).
    pub fn preload(&self, policy: &str) {
        let _ = self.snapshot(policy);
    }

    /// [`Self::preload`] for a policy whose state may hold `state_bytes`
    /// (its `state-kib`): a larger file is not read.
    pub fn preload_limited(&self, policy: &str, state_bytes: usize) {
        self.caps.lock().expect("state caps lock").insert(policy.to_string(), state_bytes);
        self.preload(policy);
    }

    fn cap(&self, policy: &str) -> usize {
        self.caps.lock().expect("state caps lock").get(policy).copied().unwrap_or(MAX_STATE_BYTES)
    }

    fn path(&self, policy: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{policy}.json")))
    }

    /// Reads a state file. A file that fails a check is reported and moved
    /// aside (never read, never overwritten), and the policy starts empty;
    /// the error is returned for `/status`.
    fn read_file(&self, policy: &str) -> Result<StateSnapshot, StateFileError> {
        let (Some(dir), Some(path)) = (self.dir.as_deref(), self.path(policy)) else {
            return Ok(StateSnapshot::default());
        };
        if let Err(problem) = check_dir(dir, self.uid) {
            let e = StateFileError::Dir { policy: policy.into(), dir: dir.into(), problem };
            tracing::error!(policy, error = %e, "policy state not loaded, starting empty");
            return Err(e);
        }
        match load(policy, &path, self.uid, self.cap(policy)) {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Ok(StateSnapshot::default()),
            Err(e) => {
                let aside = dir.join(format!(
                    "{policy}.json.unreadable-{}-{}",
                    std::process::id(),
                    crate::files::unique_suffix()
                ));
                // Renames the name, never what a symlink points to.
                let moved = std::fs::rename(&path, &aside).is_ok();
                let text = crate::text::chain(&e);
                tracing::error!(policy, error = %text, moved_to = %aside.display(), moved, "policy state not loaded, starting empty");
                Err(e)
            }
        }
    }

    /// Makes `writes` part of `policy`'s committed state. Returns whether a
    /// file write is due (call [`StateStore::persist`] off the hot path).
    pub fn commit(&self, policy: &str, writes: StateWrites) -> bool {
        let _ = self.snapshot(policy);
        let mut slots = self.slots.lock().expect("state lock");
        let slot = slots.get_mut(policy).expect("slot created by snapshot");
        // O(1) to copy, O(log n) per write: the lock is held for the
        // writes of one call, never for the size of the state.
        let mut next = (*slot.committed).clone();
        for (k, v) in writes.writes {
            let old = match v {
                Some(v) => {
                    next.bytes += entry_size(&k, &v);
                    next.map.insert(k.clone(), v)
                }
                None => next.map.remove(&k),
            };
            if let Some(old) = old {
                next.bytes -= entry_size(&k, &old);
            }
        }
        slot.committed = Arc::new(next);
        slot.version += 1;
        self.dir.is_some()
    }

    /// Writes `policy`'s newest committed state to its file, unless it is
    /// already there. A failure is counted and kept for [`Self::health`];
    /// the state stays committed in memory and the next call writes it.
    pub fn persist(&self, policy: &str) -> Result<(), StateFileError> {
        let (Some(dir), Some(path)) = (self.dir.as_deref(), self.path(policy)) else { return Ok(()) };
        let _writing = self.writer.lock().expect("state writer lock");
        let (snapshot, version) = {
            let slots = self.slots.lock().expect("state lock");
            let Some(slot) = slots.get(policy) else { return Ok(()) };
            if slot.persisted >= slot.version {
                return Ok(());
            }
            (slot.committed.clone(), slot.version)
        };
        let result = match check_dir(dir, self.uid) {
            Err(problem) => Err(StateFileError::Dir { policy: policy.into(), dir: dir.into(), problem }),
            Ok(()) => {
                let bytes = serde_json::to_vec(&snapshot.map).expect("a map of strings serialises");
                write_atomically(dir, policy, &path, &bytes, self.disk.as_ref())
                    .map_err(|source| StateFileError::Write { policy: policy.into(), path: path.clone(), source })
            }
        };
        let mut slots = self.slots.lock().expect("state lock");
        if let Some(slot) = slots.get_mut(policy) {
            match &result {
                Ok(()) => {
                    slot.persisted = slot.persisted.max(version);
                    slot.last_error = None;
                }
                Err(e) => {
                    slot.failures += 1;
                    slot.last_error = Some(crate::text::chain(e));
                }
            }
        }
        result
    }

    /// How saving each policy's state went, by policy name.
    pub fn health(&self) -> BTreeMap<String, SaveHealth> {
        let slots = self.slots.lock().expect("state lock");
        slots
            .iter()
            .map(|(name, slot)| {
                let health = SaveHealth {
                    failures: slot.failures,
                    last_error: slot.last_error.clone(),
                    load_error: slot.load_error.clone(),
                    unsaved: self.dir.is_some() && slot.persisted < slot.version,
                };
                (name.clone(), health)
            })
            .collect()
    }
}

fn load(policy: &str, path: &Path, uid: u32, state_bytes: usize) -> Result<Option<StateSnapshot>, StateFileError> {
    use serde::de::DeserializeSeed as _;
    use std::io::Read as _;
    let cap = max_file_bytes(state_bytes);
    let read_err = |source| StateFileError::Read { policy: policy.into(), path: path.into(), source };
    let (file, meta) = match crate::files::open_regular(path) {
        Ok(Ok(opened)) => opened,
        Ok(Err(what)) => return Err(StateFileError::NotAFile { policy: policy.into(), path: path.into(), what }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    if let Err(why) = Trust::host(uid).check(&meta) {
        return Err(StateFileError::Untrusted { policy: policy.into(), path: path.into(), why });
    }
    let too_large = |size| StateFileError::TooLarge { policy: policy.into(), path: path.into(), size, limit: cap };
    if meta.len() > cap {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap + 1).read_to_end(&mut bytes).map_err(read_err)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    let parse_err = |e: serde_json::Error| StateFileError::Parse {
        policy: policy.into(),
        path: path.into(),
        reason: e.to_string(),
    };
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let (map, size) = Bounded(state_bytes).deserialize(&mut de).map_err(parse_err)?;
    de.end().map_err(parse_err)?;
    Ok(Some(StateSnapshot { map, bytes: size }))
}

/// Reads a state file's object entry by entry, refusing it as soon as it
/// holds more than the policy's state may (keys and values, and
/// [`ENTRY_BYTES`] per key) or a key a call could not have set: a file of a
/// million tiny keys costs the host no more than the state it stands for.
struct Bounded(usize);

impl<'de> serde::de::DeserializeSeed<'de> for Bounded {
    type Value = (OrdMap<String, String>, usize);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Bounded {
    type Value = (OrdMap<String, String>, usize);

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object of string keys and values")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error as _;
        let (mut map, mut bytes) = (OrdMap::<String, String>::new(), 0usize);
        while let Some((key, value)) = entries.next_entry::<String, String>()? {
            if key.is_empty() || key.len() > MAX_KEY_BYTES {
                return Err(A::Error::custom(format!("a key of {} bytes; keys are 1 to {MAX_KEY_BYTES}", key.len())));
            }
            bytes += entry_size(&key, &value);
            if let Some(old) = map.get(key.as_str()) {
                bytes -= entry_size(&key, old);
            }
            if bytes > self.0 {
                let limit = self.0;
                return Err(A::Error::custom(format!(
                    "more than the {limit} bytes its state-kib allows (keys and values, and {ENTRY_BYTES} bytes per key)"
                )));
            }
            map.insert(key, value);
        }
        Ok((map, bytes))
    }
}

/// Writes `path` in `dir` so that a crash leaves either the old or the new
/// content, through a temporary file no one else can have named or
/// pre-created, removed if anything fails.
fn write_atomically(
    dir: &Path,
    policy: &str,
    path: &Path,
    bytes: &[u8],
    disk: &dyn StateWriter,
) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{policy}.json.tmp.{}.{}", std::process::id(), crate::files::unique_suffix()));
    let result = (|| {
        let mut f = crate::files::create_private(&tmp)?;
        disk.write(&mut f, bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(store: &StateStore, limit: usize) -> StateTxn {
        StateTxn::new(store.snapshot("10-p"), limit)
    }

    #[test]
    fn a_call_reads_its_own_writes_and_commits_only_when_told() {
        let store = StateStore::in_memory();
        let mut t = txn(&store, 1024);
        t.set("cpu/a".into(), "0-1".into()).unwrap();
        t.set("cpu/b".into(), "2".into()).unwrap();
        t.set("other".into(), "x".into()).unwrap();
        assert_eq!(t.get("cpu/a"), Some("0-1"));
        assert_eq!(t.keys("cpu/"), ["cpu/a", "cpu/b"]);
        assert!(store.snapshot("10-p").is_empty(), "nothing is committed before the event ends");
        store.commit("10-p", t.take_writes().unwrap());
        let s = store.snapshot("10-p");
        assert_eq!((s.get("cpu/a"), s.len(), s.bytes()), (Some("0-1"), 3, 5 + 3 + 5 + 1 + 5 + 1 + 3 * ENTRY_BYTES));

        let mut t = txn(&store, 1024);
        t.remove("cpu/a".into());
        t.set("cpu/c".into(), "3".into()).unwrap();
        assert_eq!(t.keys("cpu/"), ["cpu/b", "cpu/c"]);
        assert_eq!(t.get("cpu/a"), None);
        drop(t); // a failed call: its writes are simply dropped
        assert_eq!(store.snapshot("10-p").get("cpu/a"), Some("0-1"));
    }

    #[test]
    fn the_size_limit_counts_keys_and_values_as_the_call_sees_them() {
        let store = StateStore::in_memory();
        // Room for 10 bytes of keys and values in two keys.
        let limit = 10 + 2 * ENTRY_BYTES;
        let mut t = txn(&store, limit);
        t.set("k".into(), "123456789".into()).unwrap();
        assert_eq!(t.set("j".into(), "1".into()), Err(StateError::LimitExceeded(limit as u64)));
        // Replacing a value frees what the old one took.
        t.set("k".into(), "1".into()).unwrap();
        t.set("j".into(), "1234567".into()).unwrap();
        t.remove("j".into());
        t.set("i".into(), "12345678".into()).unwrap_err();
        t.set("i".into(), "1234567".into()).unwrap();
        assert!(matches!(t.set(String::new(), "x".into()), Err(StateError::InvalidKey(_))));
        assert!(matches!(t.set("x".repeat(257), String::new()), Err(StateError::InvalidKey(_))));
        assert!(t.take_writes().is_some());
        assert!(txn(&store, 10).take_writes().is_none(), "no writes, nothing to commit");
    }

    /// A state of tiny keys holds no more entries than its limit pays for:
    /// 1 MiB is 15,260 keys of 1 to 4 hex digits with one-byte values, not
    /// 300,000.
    #[test]
    fn every_key_counts_for_what_the_host_spends_on_it() {
        let store = StateStore::in_memory();
        let mut t = txn(&store, 1 << 20);
        let mut n = 0u32;
        while t.set(format!("{n:x}"), "v".into()).is_ok() {
            n += 1;
        }
        // 16 keys of 66 bytes, 240 of 67, 3,840 of 68, then 69 each.
        assert_eq!(n, 15_260);
        assert!(t.keys("").len() == n as usize);
    }

    #[test]
    fn a_file_of_more_entries_than_the_state_may_hold_is_refused_as_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        // Within the file cap of state-kib 1 (12,290 bytes), far more keys
        // than 1 KiB pays for.
        let many: Vec<String> = (0..1000).map(|i| format!("\"{i:x}\":\"\"")).collect();
        let files = [
            ("10-many", format!("{{{}}}", many.join(",")), "more than the 1024 bytes its state-kib allows"),
            ("20-empty-key", r#"{"":"x"}"#.to_string(), "a key of 0 bytes"),
            ("30-long-key", format!(r#"{{"{}":"x"}}"#, "k".repeat(257)), "a key of 257 bytes"),
            ("40-trailing", r#"{"a":"x"} {"b":"y"}"#.to_string(), "trailing characters"),
        ];
        for (policy, text, _) in &files {
            assert!(text.len() as u64 <= max_file_bytes(1024), "{policy}: within the file cap");
            std::fs::write(dir.path().join(format!("{policy}.json")), text).unwrap();
        }
        let store = StateStore::in_dir(dir.path().to_path_buf());
        for (policy, _, says) in &files {
            store.preload_limited(policy, 1024);
            assert!(store.snapshot(policy).is_empty(), "{policy}");
            let error = store.health()[*policy].load_error.clone().unwrap();
            assert!(error.contains(&format!("{policy}.json")) && error.contains(says), "{policy}: {error}");
        }
        // What fits is read, and counted as a call counts it.
        std::fs::write(dir.path().join("50-fits.json"), r#"{"a":"1","b":"22"}"#).unwrap();
        store.preload_limited("50-fits", 1024);
        assert_eq!(store.snapshot("50-fits").bytes(), 5 + 2 * ENTRY_BYTES);
    }

    #[test]
    fn a_directory_keeps_state_across_restarts_and_moves_a_corrupt_file_aside() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::in_dir(dir.path().to_path_buf());
        let mut t = txn(&store, 1024);
        t.set("a".into(), "1".into()).unwrap();
        assert!(store.commit("10-p", t.take_writes().unwrap()));
        store.persist("10-p").unwrap();
        let again = StateStore::in_dir(dir.path().to_path_buf());
        assert_eq!(again.snapshot("10-p").get("a"), Some("1"));

        std::fs::write(dir.path().join("20-q.json"), b"{not json").unwrap();
        let s = again.snapshot("20-q");
        assert!(s.is_empty());
        assert!(!dir.path().join("20-q.json").exists(), "the corrupt file is moved aside, not overwritten");
        let aside = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with("20-q.json.unreadable"));
        assert!(aside);
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    fn set(store: &StateStore, policy: &str, key: &str, value: &str) {
        let mut t = StateTxn::new(store.snapshot(policy), 1 << 20);
        t.set(key.into(), value.into()).unwrap();
        store.commit(policy, t.take_writes().unwrap());
    }

    #[test]
    fn symlinks_fifos_and_devices_named_like_state_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let outside = dir.path().join("secret");
        std::fs::write(&outside, br#"{"stolen":"yes"}"#).unwrap();
        std::os::unix::fs::symlink("/dev/zero", state.join("10-zero.json")).unwrap();
        std::os::unix::fs::symlink(&outside, state.join("20-link.json")).unwrap();
        crate::files::mkfifo(&state.join("30-fifo.json"));
        let store = StateStore::in_dir(state.clone());
        // Each returns at once (a FIFO is not waited on, /dev/zero not
        // read) and starts empty.
        for (policy, what) in [("10-zero", "a symbolic link"), ("20-link", "a symbolic link"), ("30-fifo", "a FIFO")] {
            store.preload(policy);
            assert!(store.snapshot(policy).is_empty(), "{policy}");
            let error = store.health()[policy].load_error.clone().unwrap();
            assert!(
                error.contains(policy) && error.contains(&format!("{policy}.json")) && error.contains(what),
                "{error}"
            );
            assert!(std::fs::symlink_metadata(state.join(format!("{policy}.json"))).is_err(), "{policy}: moved aside");
        }
        assert_eq!(std::fs::read(&outside).unwrap(), br#"{"stolen":"yes"}"#, "the link's target is untouched");
        // A save writes a file of its own in place of the link.
        set(&store, "20-link", "k", "v");
        store.persist("20-link").unwrap();
        assert!(std::fs::symlink_metadata(state.join("20-link.json")).unwrap().is_file());
        assert_eq!(std::fs::read(&outside).unwrap(), br#"{"stolen":"yes"}"#);
    }

    #[test]
    fn a_file_past_the_policys_cap_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("10-big.json");
        let big = format!(r#"{{"k":"{}"}}"#, "x".repeat(20_000));
        std::fs::write(&file, &big).unwrap();
        let store = StateStore::in_dir(dir.path().to_path_buf());
        // state-kib 1: at most 12 KiB and 2 bytes of file.
        store.preload_limited("10-big", 1024);
        assert!(store.snapshot("10-big").is_empty());
        let error = store.health()["10-big"].load_error.clone().unwrap();
        assert!(
            error.contains("10-big.json") && error.contains(&format!("{} bytes", big.len())) && error.contains("12290"),
            "{error}"
        );
        // Within its cap the same file is read.
        std::fs::write(&file, &big).unwrap();
        let store = StateStore::in_dir(dir.path().to_path_buf());
        store.preload_limited("10-big", 20 << 10);
        assert_eq!(store.snapshot("10-big").get("k").map(str::len), Some(20_000));
        assert_eq!(max_file_bytes(0), 2);
        // The bound holds for the worst JSON a state can become.
        let mut worst = StateTxn::new(Arc::default(), 64 + 8 * ENTRY_BYTES);
        for i in 0..8u8 {
            worst.set(char::from(i + 1).to_string(), "\u{1}".repeat(6)).unwrap();
        }
        let store = StateStore::in_memory();
        store.commit("w", worst.take_writes().unwrap());
        let json = serde_json::to_vec(&store.snapshot("w").map).unwrap();
        assert!(json.len() as u64 <= max_file_bytes(64 + 8 * ENTRY_BYTES), "{} bytes", json.len());
    }

    #[test]
    fn saves_never_write_through_a_name_an_attacker_prepared() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = StateStore::in_dir(state.clone());
        let victim = dir.path().join("root-only");
        std::fs::write(&victim, b"precious").unwrap();
        // Every name the host used to write through, and the names of the
        // new scheme up to its (unguessable) random part.
        let pid = std::process::id();
        for name in
            [format!("10-p.json.tmp.{pid}"), format!(".10-p.json.tmp.{pid}.0"), format!(".10-p.json.tmp.{pid}.1")]
        {
            std::os::unix::fs::symlink(&victim, state.join(name)).unwrap();
        }
        for i in 0..3 {
            set(&store, "10-p", "n", &i.to_string());
            store.persist("10-p").unwrap();
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(StateStore::in_dir(state.clone()).snapshot("10-p").get("n"), Some("2"));
        let temps = names_in(&state)
            .into_iter()
            .filter(|n| {
                n.contains(".tmp.") && !n.ends_with(&format!(".{pid}")) && !n.ends_with(".0") && !n.ends_with(".1")
            })
            .count();
        assert_eq!(temps, 0, "no temporary file is left: {:?}", names_in(&state));
    }

    #[test]
    fn the_directory_is_created_private_and_an_open_one_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a/state");
        let store = StateStore::in_dir(state.clone());
        assert_eq!(std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&state).unwrap()) & 0o777, 0o700);
        set(&store, "10-p", "k", "v");
        store.persist("10-p").unwrap();
        std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let store = StateStore::in_dir(state.clone());
        assert!(store.snapshot("10-p").is_empty(), "not read from a directory anyone may write");
        set(&store, "10-p", "k", "w");
        let e = crate::text::chain(&store.persist("10-p").unwrap_err());
        assert!(e.contains("10-p") && e.contains("writable by group or others"), "{e}");
        let health = &store.health()["10-p"];
        assert_eq!((health.failures, health.unsaved), (1, true));
        assert!(state.join("10-p.json").exists(), "the old file is left alone");
    }

    /// A volume that fills up after `room` bytes, until it is freed.
    #[derive(Debug)]
    struct Volume {
        room: std::sync::atomic::AtomicUsize,
    }

    impl StateWriter for std::sync::Arc<Volume> {
        fn write(&self, file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
            use std::io::Write as _;
            let room = self.room.load(std::sync::atomic::Ordering::SeqCst);
            file.write_all(&bytes[..bytes.len().min(room)])?;
            if bytes.len() > room {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            Ok(())
        }
    }

    #[test]
    fn a_failed_save_is_counted_shown_and_saved_again_later() {
        let dir = tempfile::tempdir().unwrap();
        let volume = std::sync::Arc::new(Volume { room: usize::MAX.into() });
        let store = StateStore::in_dir_with(dir.path().to_path_buf(), Box::new(volume.clone()));
        for i in 1..=2 {
            set(&store, "10-count", "n", &i.to_string());
            store.persist("10-count").unwrap();
        }
        volume.room.store(5, std::sync::atomic::Ordering::SeqCst);
        for i in 3..=12 {
            set(&store, "10-count", "n", &i.to_string());
            let e = crate::text::chain(&store.persist("10-count").unwrap_err());
            assert!(e.contains("10-count") && e.contains("10-count.json") && e.contains("No space left"), "{e}");
        }
        let health = store.health()["10-count"].clone();
        assert_eq!((health.failures, health.unsaved), (10, true));
        assert!(health.last_error.unwrap().contains("No space left"));
        assert_eq!(store.snapshot("10-count").get("n"), Some("12"), "the committed state is kept in memory");
        assert_eq!(names_in(dir.path()), ["10-count.json"], "no temporary file piles up");
        assert_eq!(StateStore::in_dir(dir.path().to_path_buf()).snapshot("10-count").get("n"), Some("2"));
        // Room again: the next commit saves everything committed.
        volume.room.store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
        set(&store, "10-count", "other", "x");
        store.persist("10-count").unwrap();
        let health = store.health()["10-count"].clone();
        assert_eq!((health.failures, health.unsaved, health.last_error), (10, false, None));
        assert_eq!(StateStore::in_dir(dir.path().to_path_buf()).snapshot("10-count").get("n"), Some("12"));
    }

    #[test]
    fn temporary_files_of_processes_gone_are_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        // pid_max is at most 2^22: no process has these ids.
        for name in [".10-p.json.tmp.99999999.0.0011", "10-p.json.tmp.99999998", &format!(".10-p.json.tmp.{pid}.7.aa")]
        {
            std::fs::write(dir.path().join(name), b"{}").unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join(".20-q.json.tmp.99999997.0.bb")).unwrap();
        let _store = StateStore::in_dir(dir.path().to_path_buf());
        assert_eq!(names_in(dir.path()), [format!(".10-p.json.tmp.{pid}.7.aa")], "a live process's file stays");
        assert!(std::fs::metadata("/etc/passwd").is_ok());
    }
}
