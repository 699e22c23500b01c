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
//! commit that changed something is written to `NN-name.json` atomically
//! (temporary file, fsync, rename), off the event's path.

use std::collections::{BTreeMap, HashMap};

use imbl::OrdMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::bindings::state::StateError;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// A policy's committed state: immutable, shared by every call that reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateSnapshot {
    /// Persistent: a commit copies the path to the keys it changes, not the map.
    map: OrdMap<String, String>,
    /// Sum of the lengths of keys and values.
    bytes: usize,
}

impl StateSnapshot {
    fn from_map(map: OrdMap<String, String>) -> Self {
        let bytes = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        Self { map, bytes }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

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
    pub fn new(base: Arc<StateSnapshot>, limit: usize) -> Self {
        let bytes = base.bytes;
        Self { base, writes: BTreeMap::new(), bytes, limit }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        match self.writes.get(key) {
            Some(v) => v.as_deref(),
            None => self.base.get(key),
        }
    }

    fn entry_bytes(&self, key: &str) -> usize {
        self.get(key).map_or(0, |v| key.len() + v.len())
    }

    pub fn set(&mut self, key: String, value: String) -> Result<(), StateError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(StateError::InvalidKey(format!(
                "key of {} bytes; keys are 1 to {MAX_KEY_BYTES} bytes",
                key.len()
            )));
        }
        let after = self.bytes - self.entry_bytes(&key) + key.len() + value.len();
        if after > self.limit {
            return Err(StateError::LimitExceeded(self.limit as u64));
        }
        self.bytes = after;
        self.writes.insert(key, Some(value));
        Ok(())
    }

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

/// Reading or writing a state file failed.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("state of policy {policy}: cannot read {path}: {source}")]
    Read { policy: String, path: PathBuf, source: std::io::Error },
    #[error("state of policy {policy}: {path} is not a JSON object of strings: {reason}")]
    Parse { policy: String, path: PathBuf, reason: String },
    #[error("state of policy {policy}: cannot write {path}: {source}")]
    Write { policy: String, path: PathBuf, source: std::io::Error },
}

#[derive(Debug, Default)]
struct Slot {
    committed: Arc<StateSnapshot>,
    /// Commits so far, and the commit last written to disk.
    version: u64,
    persisted: u64,
}

/// Every policy's committed state; optionally kept in a directory.
#[derive(Debug, Default)]
pub struct StateStore {
    dir: Option<PathBuf>,
    slots: Mutex<HashMap<String, Slot>>,
    /// Serialises file writes, so that a newer commit is never overwritten
    /// by an older one.
    writer: Mutex<()>,
}

impl StateStore {
    /// A store kept in memory only.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A store that keeps each policy's state in `dir/NN-name.json`.
    pub fn in_dir(dir: PathBuf) -> Self {
        Self { dir: Some(dir), ..Self::default() }
    }

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
        let read = Arc::new(self.read_file(policy));
        let mut slots = self.slots.lock().expect("state lock");
        let slot = slots.entry(policy.to_string()).or_insert_with(|| Slot { committed: read, ..Slot::default() });
        slot.committed.clone()
    }

    /// Reads `policy`'s state file now, if it was not read yet (when a
    /// policy is loaded, so that its first call does no file I/O).
    pub fn preload(&self, policy: &str) {
        let _ = self.snapshot(policy);
    }

    fn path(&self, policy: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{policy}.json")))
    }

    /// Reads a state file; an unreadable or corrupt file is reported, moved
    /// aside (never overwritten) and the policy starts empty.
    fn read_file(&self, policy: &str) -> StateSnapshot {
        let Some(path) = self.path(policy) else { return StateSnapshot::default() };
        match load(policy, &path) {
            Ok(Some(s)) => s,
            Ok(None) => StateSnapshot::default(),
            Err(e) => {
                let aside = path.with_extension(format!("json.unreadable-{}", std::process::id()));
                let moved = std::fs::rename(&path, &aside).is_ok();
                tracing::error!(error = %e, moved_to = %aside.display(), moved, "policy state not loaded, starting empty");
                StateSnapshot::default()
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
                    next.bytes += k.len() + v.len();
                    next.map.insert(k.clone(), v)
                }
                None => next.map.remove(&k),
            };
            if let Some(old) = old {
                next.bytes -= k.len() + old.len();
            }
        }
        slot.committed = Arc::new(next);
        slot.version += 1;
        self.dir.is_some()
    }

    /// Writes `policy`'s newest committed state to its file, unless it is
    /// already there.
    pub fn persist(&self, policy: &str) -> Result<(), StateFileError> {
        let Some(path) = self.path(policy) else { return Ok(()) };
        let _writing = self.writer.lock().expect("state writer lock");
        let (snapshot, version) = {
            let slots = self.slots.lock().expect("state lock");
            let Some(slot) = slots.get(policy) else { return Ok(()) };
            if slot.persisted >= slot.version {
                return Ok(());
            }
            (slot.committed.clone(), slot.version)
        };
        write_atomically(&path, &serde_json::to_vec(&snapshot.map).expect("a map of strings serialises"))
            .map_err(|source| StateFileError::Write { policy: policy.into(), path: path.clone(), source })?;
        let mut slots = self.slots.lock().expect("state lock");
        if let Some(slot) = slots.get_mut(policy) {
            slot.persisted = slot.persisted.max(version);
        }
        Ok(())
    }
}

fn load(policy: &str, path: &Path) -> Result<Option<StateSnapshot>, StateFileError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateFileError::Read { policy: policy.into(), path: path.into(), source }),
    };
    let map: OrdMap<String, String> = serde_json::from_slice(&bytes).map_err(|e| StateFileError::Parse {
        policy: policy.into(),
        path: path.into(),
        reason: e.to_string(),
    })?;
    Ok(Some(StateSnapshot::from_map(map)))
}

/// Writes a file so that a crash leaves either the old or the new content.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
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
        assert_eq!((s.get("cpu/a"), s.len(), s.bytes()), (Some("0-1"), 3, 5 + 3 + 5 + 1 + 5 + 1));

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
        let mut t = txn(&store, 10);
        t.set("k".into(), "123456789".into()).unwrap();
        assert_eq!(t.set("j".into(), "1".into()), Err(StateError::LimitExceeded(10)));
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
}
