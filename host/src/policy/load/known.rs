//! What the host knows of each policy's subscription before it loads it:
//! what its component declares, and what it subscribed to the last time it
//! loaded, kept beside its compiled form; so that the host registers with
//! the right events at once.
//!
//! The runtime asks for the plugin's subscription in Configure, right after
//! the registration, and a subscription can only change by connecting
//! again, which loses what is in flight. A policy's subscription is only
//! known for sure once its `configure` ran, after reading, compiling and
//! linking, which may take seconds, or minutes on a busy node. Two things
//! are known before:
//! - the component's event declaration (`spec/declared.rs`), read in one
//!   pass over its bytes without compiling it: an upper bound of what
//!   `configure` may answer (a load that answers more fails);
//! - a record of its last load: after every successful `configure` the
//!   host writes a small record in the compile cache directory, keyed by
//!   what determines the answer: the SHA-256 of the policy file, of its
//!   settings, and the host's and WIT's versions.
//!
//! At start the host reads each file (hashing it, and inspecting it for
//! its declaration), reads the records, and registers with what they say
//! while the policies load (`cli/host.rs`, [`foreknown`]); a record, the
//! exact answer of the same file and settings, is preferred to the
//! declaration, narrowed by it (`chain::Pending`).
//!
//! A record is only a hint. Whoever can write the cache directory could
//! make the host subscribe to too little, so records are read under the
//! cache's trust rules (directory and file owned by the host's user and
//! writable by no one else, a regular file opened without following links
//! and without blocking, at most [`MAX_RECORD_BYTES`]); anything else is
//! ignored. Once the policy loads, its real subscription replaces the
//! record's, and a difference is handled like any change of subscription.
//!
//! A version that failed to load is recorded too, as subscribing to
//! nothing: a file that takes the compiler a minute to refuse must not make
//! every start wait for it before registering.
//!
//! Records are pruned with the compiled forms ([`prune`], after every
//! reload that changed the chain): the loader remembers, per policy name,
//! the record of the version it last loaded, refused or found at start,
//! and a record that is none of these for a policy still in the directory
//! (its file was removed, or a newer file or new settings superseded it) is
//! removed once it has not been read or written for a day, as an unused
//! compiled form is. The day's grace keeps what a host sharing the
//! directory (two hosts during a rolling restart, tests) still uses.

use std::collections::HashSet;
use std::io::Read as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::files::{sha256_hex, Trust};
use crate::nri::version::EventMask;
use crate::policy::call::compiled::{CompiledPolicy, Imports};
use crate::policy::spec::manifest::PolicySpec;

/// Largest record read; a real one is under 100 bytes.
pub(crate) const MAX_RECORD_BYTES: u64 = 512;
/// Extension of record files (the compile cache prunes only its own).
const EXTENSION: &str = "sub";
/// First line of every record: the format and the interface it was made by.
const MAGIC: &str = "nri-wasm-subscription v1";

/// What a policy asked for in `configure`, as far as the subscription goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Subscription {
    pub events: EventMask,
    /// It subscribed to `synchronize`.
    pub synchronize: bool,
    /// It reads the node view: imports it and may call it (the host then
    /// keeps the view's events).
    pub node: bool,
}

impl Subscription {
    /// What this (a record) says that `declared` allows too: a record
    /// cannot widen what the component declares.
    pub fn within(self, declared: Subscription) -> Self {
        Self {
            events: self.events.intersect(declared.events),
            synchronize: self.synchronize && declared.synchronize,
            node: self.node && declared.node,
        }
    }

    /// What a loaded policy subscribed to.
    pub fn of(policy: &CompiledPolicy) -> Self {
        Self { events: policy.events(), synchronize: policy.wants_synchronize(), node: policy.reads_node() }
    }

    fn encode(&self) -> String {
        format!(
            "{MAGIC}\nevents {}\nsynchronize {}\nnode {}\n",
            self.events.bits(),
            u8::from(self.synchronize),
            u8::from(self.node)
        )
    }

    fn decode(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut field = |name: &str| lines.next()?.strip_prefix(name)?.strip_prefix(' ')?.parse::<u32>().ok();
        let bits = field("events")?;
        let synchronize = field("synchronize")?;
        let node = field("node")?;
        if synchronize > 1 || node > 1 || EventMask::from_bits(bits).bits() != bits {
            return None;
        }
        if lines.next().is_some() {
            return None;
        }
        Some(Self { events: EventMask::from_bits(bits), synchronize: synchronize == 1, node: node == 1 })
    }
}

/// The file name of the record of a policy file's `digest` with `settings`.
fn record_path(dir: &Path, digest: &str, settings: &str) -> PathBuf {
    let mut h = Sha256::new();
    for part in [
        MAGIC,
        env!("CARGO_PKG_VERSION"),
        crate::policy::load::errors::WIT_VERSION,
        digest,
        &sha256_hex(settings.as_bytes()),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{key}.{EXTENSION}"))
}

/// The file name of a record (what [`prune`] keeps).
fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Records what `policy` subscribed to, in the compile cache directory
/// `dir`, and returns the record's file name (the policy's current record).
/// Failing to write is logged: the next start only waits a little longer.
pub(crate) fn record(dir: &Path, policy: &CompiledPolicy) -> String {
    let path = write(dir, policy.name(), policy.digest(), &policy.profile.settings, Subscription::of(policy));
    file_name(&path)
}

/// Records that the policy of `spec`, as its file is now, failed to load:
/// it subscribes to nothing. A mandatory one still fails container creation
/// while it is not loaded, which needs no subscription of its own. Returns
/// the record's file name (the policy's current record), if the file could
/// be read.
pub(crate) fn record_failed(dir: &Path, spec: &PolicySpec, max_bytes: u64) -> Option<String> {
    // A policy named by reference has no file of its own to key a record by
    // before it is pulled; it counts as unknown at the next start.
    if spec.source.is_some() {
        return None;
    }
    let bytes = crate::policy::load::read::read_policy_file(spec, max_bytes).ok()?;
    let path = write(dir, &spec.name, &sha256_hex(&bytes), &spec.settings, Subscription::default());
    Some(file_name(&path))
}

/// Writes the record (unless it already says this) and returns its path.
fn write(dir: &Path, policy: &str, digest: &str, settings: &str, subscription: Subscription) -> PathBuf {
    let path = record_path(dir, digest, settings);
    if read_record(&path) == Some(subscription) {
        return path;
    }
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{digest}.sub.tmp.{}.{seq}", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::options().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        std::io::Write::write_all(&mut file, subscription.encode().as_bytes())?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(policy, path = %path.display(), error = %e, "subscription not recorded");
    }
    path
}

/// What the host knows of a policy's subscription before it loads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Foreknown {
    /// The record of its last load, if the host may trust one, with the
    /// record's file name.
    pub record: Option<(Subscription, String)>,
    /// What its component declares (`spec/declared.rs`): the events it may
    /// subscribe to, and whether it may read the node view (its imports
    /// and capability declaration, as [`Imports::reads_node`] judges a
    /// loaded one).
    pub declared: Option<Subscription>,
}

/// What can be known of the subscription of the policy of `spec` as its
/// file is now, without compiling it: its record, if there is one the host
/// may trust, and its declaration, from one pass over its bytes. Reads the
/// policy file (at most `max_bytes`, as the load would); a file that cannot
/// be read or inspected gives nothing (its load will say why).
pub(crate) fn foreknown(dir: Option<&Path>, spec: &PolicySpec, max_bytes: u64) -> Foreknown {
    // A policy named by reference has no file before it is pulled.
    if spec.source.is_some() {
        return Foreknown::default();
    }
    let Ok(bytes) = crate::policy::load::read::read_policy_file(spec, max_bytes) else {
        return Foreknown::default();
    };
    let record = dir.and_then(|dir| {
        let path = record_path(dir, &sha256_hex(&bytes), &spec.settings);
        read_record(&path).map(|s| (s, file_name(&path)))
    });
    Foreknown { record, declared: declared(spec, &bytes) }
}

/// The subscription the component of `bytes` declares, if it declares one
/// the host can read.
fn declared(spec: &PolicySpec, bytes: &[u8]) -> Option<Subscription> {
    let binary = crate::policy::load::inspect::binary(&spec.name, bytes).ok()?;
    let found = crate::policy::load::inspect::survey(&spec.name, &binary).ok()?;
    let events = found.events?;
    let caps = match &found.declaration {
        Some(text) => Some(crate::policy::spec::caps::parse_declaration(text).ok()?),
        None => None,
    };
    let allowed = crate::policy::spec::caps::Allowed { granted: spec.grant, declared: caps };
    let imports = Imports {
        node: found.imports.iter().any(|i| i.starts_with("nri-wasm:policy/node@")),
        state: found.imports.iter().any(|i| i.starts_with("nri-wasm:policy/state@")),
    };
    Some(Subscription { events: events.events, synchronize: events.synchronize, node: imports.reads_node(allowed) })
}

/// Removes the records in `dir` that are not in `keep` (file names) and
/// were not read or written for [`crate::policy::load::cache::UNUSED_TTL`]. Returns how
/// many were removed. Temporary files left by a crash are the compile
/// cache's to remove (`Cache::prune`).
pub(crate) fn prune(dir: &Path, keep: &HashSet<String>) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(&format!(".{EXTENSION}")) || keep.contains(&name) {
            continue;
        }
        // The entry itself, never what a link points to.
        let Ok(meta) = entry.metadata() else { continue };
        let age = meta.modified().ok().and_then(|t| now.duration_since(t).ok()).unwrap_or_default();
        if age > crate::policy::load::cache::UNUSED_TTL && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// A record, if the file is one the host may trust and reads as one.
fn read_record(path: &Path) -> Option<Subscription> {
    let ignored = |why: String| tracing::warn!(path = %path.display(), reason = why, "ignoring a subscription record");
    let (file, meta) = match crate::files::open_regular(path).ok()? {
        Ok(opened) => opened,
        Err(what) => {
            ignored(format!("{what}, not a regular file"));
            return None;
        }
    };
    let why = if let Err(why) = Trust::host(Trust::effective_uid()).check(&meta) {
        Some(why.to_string())
    } else if meta.len() > MAX_RECORD_BYTES {
        Some(format!("{} bytes, over the {MAX_RECORD_BYTES} a record may have", meta.len()))
    } else {
        None
    };
    if let Some(why) = why {
        ignored(why);
        return None;
    }
    let mut text = String::new();
    (&file).take(MAX_RECORD_BYTES).read_to_string(&mut text).ok()?;
    let decoded = Subscription::decode(&text);
    match decoded {
        // Used: not pruned for another day (through the descriptor: no
        // path is followed again).
        Some(_) => {
            let _ = file.set_modified(SystemTime::now());
        }
        None => tracing::warn!(path = %path.display(), "ignoring a subscription record that does not read as one"),
    }
    decoded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nri::version::EventKind;

    fn sample() -> Subscription {
        Subscription {
            events: EventMask::EMPTY.with(EventKind::CreateContainer).with(EventKind::StopContainer),
            synchronize: true,
            node: false,
        }
    }

    #[test]
    fn records_read_back_and_reject_anything_else() {
        let s = sample();
        assert_eq!(Subscription::decode(&s.encode()), Some(s));
        for bad in [
            String::new(),
            s.encode().replace(MAGIC, "nri-wasm-subscription v0"),
            s.encode().replace("synchronize 1", "synchronize 2"),
            s.encode().replace("node 0", "node x"),
            format!("{}extra\n", s.encode()),
            s.encode().replace(&format!("events {}", s.events.bits()), "events 4294967295"),
        ] {
            assert_eq!(Subscription::decode(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn records_are_ignored_unless_the_host_may_trust_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let good = dir.path().join("good.sub");
        std::fs::write(&good, sample().encode()).unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_record(&good), Some(sample()));
        // Writable by others: ignored.
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_record(&good), None);
        // A link to a trusted record: not followed.
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.sub");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert_eq!(read_record(&link), None);
        // Too large, a directory, a FIFO (must not block): ignored.
        let big = dir.path().join("big.sub");
        std::fs::write(&big, format!("{}{}", sample().encode(), " ".repeat(600))).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_record(&big), None);
        let sub = dir.path().join("dir.sub");
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(read_record(&sub), None);
        let fifo = dir.path().join("fifo.sub");
        crate::files::mkfifo(&fifo);
        assert_eq!(read_record(&fifo), None);
    }

    /// Writes a record for `digest` and `settings` and dates it `age` back.
    fn aged(dir: &Path, digest: &str, settings: &str, age: std::time::Duration) -> String {
        let path = write(dir, "10-p", digest, settings, sample());
        std::fs::File::options().append(true).open(&path).unwrap().set_modified(SystemTime::now() - age).unwrap();
        file_name(&path)
    }

    #[test]
    fn pruning_removes_old_records_no_policy_uses() {
        let dir = tempfile::tempdir().unwrap();
        let day = crate::policy::load::cache::UNUSED_TTL;
        let two_days = day * 2;
        let current = aged(dir.path(), "aa", "s", two_days);
        let superseded = aged(dir.path(), "ab", "s", two_days);
        let old_settings = aged(dir.path(), "aa", "old", two_days);
        let recent = aged(dir.path(), "ac", "s", std::time::Duration::from_secs(60));
        // Files that are not records, old as well: left alone.
        let other = dir.path().join("entry.cwasm");
        std::fs::write(&other, b"x").unwrap();
        std::fs::File::options().append(true).open(&other).unwrap().set_modified(SystemTime::now() - two_days).unwrap();
        let keep: HashSet<String> = [current.clone()].into();
        assert_eq!(prune(dir.path(), &keep), 2);
        let left = |name: &str| dir.path().join(name).exists();
        assert!(left(&current), "the current record stays, however old");
        assert!(!left(&superseded) && !left(&old_settings), "superseded records a day old go");
        assert!(left(&recent), "a record used within the day stays");
        assert!(other.exists(), "only records are pruned");
        // Reading a record makes it recent again.
        assert_eq!(read_record(&dir.path().join(&recent)), Some(sample()));
        let stale = aged(dir.path(), "ad", "s", two_days);
        assert_eq!(read_record(&dir.path().join(&stale)), Some(sample()));
        assert_eq!(prune(dir.path(), &keep), 0, "a record just read is not pruned");
    }

    #[test]
    fn the_key_follows_the_file_and_the_settings() {
        let dir = Path::new("/x");
        let a = record_path(dir, "aa", "limit = 1");
        assert_eq!(a, record_path(dir, "aa", "limit = 1"));
        assert_ne!(a, record_path(dir, "ab", "limit = 1"));
        assert_ne!(a, record_path(dir, "aa", "limit = 2"));
    }
}
