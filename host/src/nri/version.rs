//! Which NRI version the runtime speaks, and which events we may subscribe to.
//!
//! A runtime rejects a `Configure` reply that names an event it does not know
//! and drops the plugin for good, so the event mask must be derived from what
//! the runtime speaks, never from what we would like. Runtimes of NRI v0.12
//! and later say so in `ConfigureRequest.NRI_version`; for older ones we infer
//! it from the runtime's name and version (a table of released containerd and
//! CRI-O versions), and fall back to the oldest mask every NRI runtime accepts.

use std::fmt;
use std::str::FromStr;

macro_rules! event_kinds {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        /// Event numbers of the NRI protocol (the bit of event `n` is
        /// `1 << (n - 1)`): one variant per row of the event table
        /// (`nri/events.rs`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum EventKind {
            $(#[doc = concat!("`", stringify!($kind), "`, event number ", stringify!($number), ".")]
            $kind = $number),*
        }

        impl EventKind {
            /// Every event, in protocol order.
            pub const ALL: [EventKind; [$(EventKind::$kind),*].len()] = by_number([$(EventKind::$kind),*]);

            /// The RPC name of the event (also its name in logs and metrics).
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$kind => stringify!($kind)),*
                }
            }

            /// The first NRI version whose runtimes accept the event in a
            /// subscription (the table's `since` column).
            pub const fn since(self) -> NriVersion {
                match self {
                    $(Self::$kind => since!($since)),*
                }
            }
        }
    };
}

/// A `since` column of the event table as a version: `any` for the events
/// every NRI runtime knows, `(major, minor, patch)` for a later one.
macro_rules! since {
    (any) => {
        NriVersion::new(0, 0, 0)
    };
    (($major:literal, $minor:literal, $patch:literal)) => {
        NriVersion::new($major, $minor, $patch)
    };
}
super::events::nri_events!(event_kinds);

/// `events` sorted by event number (the table lists them in the order of a
/// pod's life).
const fn by_number<const N: usize>(mut events: [EventKind; N]) -> [EventKind; N] {
    let mut i = 1;
    while i < N {
        let mut j = i;
        while j > 0 && (events[j - 1] as u8) > (events[j] as u8) {
            let swapped = events[j];
            events[j] = events[j - 1];
            events[j - 1] = swapped;
            j -= 1;
        }
        i += 1;
    }
    events
}

impl EventKind {
    /// The event with protocol number `n`.
    pub fn from_number(n: i32) -> Option<Self> {
        Self::ALL.iter().copied().find(|e| *e as i32 == n)
    }

    /// The event's bit in a `ConfigureResponse.events` mask.
    pub fn bit(self) -> u32 {
        1 << (self as u32 - 1)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of events, encoded as NRI encodes subscriptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventMask(u32);

impl EventMask {
    /// No event.
    pub const EMPTY: EventMask = EventMask(0);

    /// The events of a mask as NRI encodes it; bits of no known event are dropped.
    pub fn from_bits(bits: u32) -> Self {
        Self(bits & Self::all().0)
    }

    /// Every event this project knows.
    pub fn all() -> Self {
        EventKind::ALL.iter().copied().collect()
    }

    /// The mask as NRI encodes it (`ConfigureResponse.events`).
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether `e` is in the set.
    pub fn contains(self, e: EventKind) -> bool {
        self.0 & e.bit() != 0
    }

    /// The set with `e` added.
    pub fn with(self, e: EventKind) -> Self {
        Self(self.0 | e.bit())
    }

    /// The set with `e` removed.
    pub fn without(self, e: EventKind) -> Self {
        Self(self.0 & !e.bit())
    }

    /// The events in both sets.
    pub fn intersect(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// Whether the set has no event.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The events of the set, in protocol order.
    pub fn iter(self) -> impl Iterator<Item = EventKind> {
        EventKind::ALL.into_iter().filter(move |e| self.contains(*e))
    }
}

impl FromIterator<EventKind> for EventMask {
    fn from_iter<I: IntoIterator<Item = EventKind>>(iter: I) -> Self {
        Self(iter.into_iter().fold(0, |m, e| m | e.bit()))
    }
}

impl fmt::Display for EventMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x} [", self.0)?;
        for (i, e) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(e.name())?;
        }
        f.write_str("]")
    }
}

/// An NRI version (`v0.12.0`, `0.6.1`, `v0.3.1-0.2023...` are all accepted;
/// pre-release and build suffixes are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NriVersion {
    /// The major version (`0` in every NRI release so far).
    pub major: u32,
    /// The minor version (`6` in v0.6.1).
    pub minor: u32,
    /// The patch version (`1` in v0.6.1; `0` when the string has none).
    pub patch: u32,
}

impl NriVersion {
    /// The version `vMAJOR.MINOR.PATCH`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self { major, minor, patch }
    }

    /// The version whose event set every NRI runtime accepts (mask 0x7FF).
    pub const BASELINE: NriVersion = NriVersion::new(0, 6, 0);
    /// The version of the API this project implements.
    pub const IMPLEMENTED: NriVersion = NriVersion::new(0, 12, 0);

    /// Events a runtime of this version knows and accepts in a subscription
    /// (from the event table's `since` column).
    pub fn known_events(self) -> EventMask {
        EventKind::ALL.iter().copied().filter(|e| self >= e.since()).collect()
    }
}

impl fmt::Display for NriVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A version string that is not a version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a version: {0:?}")]
pub struct VersionParseError(pub String);

impl FromStr for NriVersion {
    type Err = VersionParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || VersionParseError(s.to_string());
        let core = s.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut next = |required: bool| -> Result<u32, VersionParseError> {
            match parts.next() {
                Some(p) => p.parse().map_err(|_| err()),
                None if required => Err(err()),
                None => Ok(0),
            }
        };
        let v = NriVersion::new(next(true)?, next(false)?, next(false)?);
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(v)
    }
}

/// Where the NRI version we act on came from (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSource {
    /// `ConfigureRequest.NRI_version`.
    Announced,
    /// Looked up from the runtime's name and version.
    Inferred {
        /// The runtime's name, as it sent it in Configure.
        runtime: String,
        /// The runtime's version, as it sent it in Configure.
        version: String,
    },
    /// Nothing usable: assume the baseline every runtime accepts.
    Assumed {
        /// Why nothing could be inferred: an unknown runtime, an unparsable
        /// version, or a release older than NRI.
        why: NotInferred,
    },
}

impl fmt::Display for VersionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Announced => f.write_str("announced by the runtime"),
            Self::Inferred { runtime, version } => write!(f, "inferred from {runtime} {version}"),
            Self::Assumed { why } => write!(f, "assumed ({why})"),
        }
    }
}

/// One row of a release table: from this runtime release on, this NRI version.
type ReleaseRow = ((u32, u32, u32), NriVersion);

/// NRI version used by a runtime release, by runtime name and version.
/// Ranges are `[from, next_from)`; the last entry is open-ended.
fn runtime_table(runtime: &str) -> Option<&'static [ReleaseRow]> {
    const CONTAINERD: &[ReleaseRow] = &[
        ((1, 7, 0), NriVersion::new(0, 3, 0)),
        ((1, 7, 7), NriVersion::new(0, 4, 0)),
        ((1, 7, 14), NriVersion::new(0, 6, 0)),
        ((1, 7, 16), NriVersion::new(0, 6, 1)),
        ((1, 7, 26), NriVersion::new(0, 8, 0)),
        ((2, 0, 0), NriVersion::new(0, 8, 0)),
        ((2, 2, 0), NriVersion::new(0, 10, 0)),
        ((2, 2, 1), NriVersion::new(0, 11, 0)),
    ];
    const CRIO: &[ReleaseRow] = &[
        ((1, 26, 0), NriVersion::new(0, 2, 0)),
        ((1, 26, 2), NriVersion::new(0, 3, 0)),
        ((1, 29, 0), NriVersion::new(0, 5, 0)),
        ((1, 29, 2), NriVersion::new(0, 6, 0)),
        ((1, 31, 0), NriVersion::new(0, 6, 1)),
        ((1, 32, 0), NriVersion::new(0, 9, 0)),
        ((1, 34, 0), NriVersion::new(0, 10, 0)),
        ((1, 35, 0), NriVersion::new(0, 11, 0)),
    ];
    const ISULAD: &[ReleaseRow] = &[((0, 0, 0), NriVersion::new(0, 6, 1))];
    match runtime.to_ascii_lowercase().as_str() {
        "containerd" => Some(CONTAINERD),
        "cri-o" | "crio" => Some(CRIO),
        "isulad" => Some(ISULAD),
        _ => None,
    }
}

/// Why no NRI version could be inferred from a runtime's name and release.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInferred {
    /// A runtime the release tables do not know.
    #[error("unknown runtime {runtime:?}")]
    UnknownRuntime {
        /// The name it gave.
        runtime: String,
    },
    /// A release that is not `[v]major.minor.patch`.
    #[error("unparsable {runtime} version {version:?}")]
    UnparsableVersion {
        /// The runtime.
        runtime: String,
        /// The release it gave.
        version: String,
    },
    /// A release older than the runtime's first with NRI.
    #[error("{runtime} {version} predates NRI support")]
    BeforeNri {
        /// The runtime.
        runtime: String,
        /// The release it gave.
        version: String,
    },
}

/// Looks up the NRI version of a runtime release.
pub fn infer_from_runtime(runtime: &str, runtime_version: &str) -> Result<NriVersion, NotInferred> {
    let table = runtime_table(runtime).ok_or_else(|| NotInferred::UnknownRuntime { runtime: runtime.into() })?;
    let named = || (runtime.to_string(), runtime_version.to_string());
    let v: NriVersion = runtime_version.parse().map_err(|_| {
        let (runtime, version) = named();
        NotInferred::UnparsableVersion { runtime, version }
    })?;
    let key = (v.major, v.minor, v.patch);
    table.iter().rev().find(|(from, _)| key >= *from).map(|(_, nri)| *nri).ok_or_else(|| {
        let (runtime, version) = named();
        NotInferred::BeforeNri { runtime, version }
    })
}

/// Decides which NRI version to act on from what `Configure` told us.
pub fn resolve(announced: &str, runtime: &str, runtime_version: &str) -> (NriVersion, VersionSource) {
    if !announced.is_empty() {
        if let Ok(v) = announced.parse() {
            return (v, VersionSource::Announced);
        }
    }
    match infer_from_runtime(runtime, runtime_version) {
        Ok(v) => (v, VersionSource::Inferred { runtime: runtime.to_string(), version: runtime_version.to_string() }),
        Err(why) => (NriVersion::BASELINE, VersionSource::Assumed { why }),
    }
}

/// The subscription to send: what we want, cut down to what the runtime
/// knows. Never 0 (0 means "everything" to a runtime, validation included):
/// if nothing is left we subscribe to PostUpdateContainer, an event every
/// runtime knows and sends only after the rare in-place update of a
/// container, so that a host with nothing to do costs no container's
/// lifecycle a round trip.
pub fn subscription(wanted: EventMask, runtime: NriVersion) -> EventMask {
    let mask = wanted.intersect(runtime.known_events());
    if mask.is_empty() {
        EventMask::EMPTY.with(EventKind::PostUpdateContainer)
    } else {
        mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_numbers_every_event_once_in_protocol_order() {
        let numbers: Vec<u8> = EventKind::ALL.iter().map(|e| *e as u8).collect();
        assert_eq!(numbers, (1..=14).collect::<Vec<u8>>());
        assert_eq!(EventKind::from_number(9), Some(EventKind::PostUpdateContainer));
        assert_eq!(EventKind::PostUpdateContainer.name(), "PostUpdateContainer");
        assert_eq!(EventKind::ValidateContainerAdjustment.bit(), 1 << 13);
        assert!(EventKind::StopPodSandbox < EventKind::UpdatePodSandbox, "ordered by number, not by row");
    }

    #[test]
    fn parses_versions() {
        assert_eq!("v0.12.0".parse::<NriVersion>().unwrap(), NriVersion::new(0, 12, 0));
        assert_eq!("0.6".parse::<NriVersion>().unwrap(), NriVersion::new(0, 6, 0));
        assert_eq!("v0.3.1-0.20230504231226-94185418e253".parse::<NriVersion>().unwrap(), NriVersion::new(0, 3, 1));
        assert_eq!("v2.3.4+unknown".parse::<NriVersion>().unwrap(), NriVersion::new(2, 3, 4));
        for bad in ["", "v", "x.y", "1.2.3.4", "1..2"] {
            assert!(bad.parse::<NriVersion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn masks_by_version() {
        assert_eq!(NriVersion::new(0, 6, 0).known_events().bits(), 0x7ff);
        assert_eq!(NriVersion::new(0, 9, 9).known_events().bits(), 0x7ff);
        assert_eq!(NriVersion::new(0, 10, 0).known_events().bits(), 0x3fff);
        assert_eq!(NriVersion::new(0, 12, 0).known_events().bits(), 0x3fff);
    }

    #[test]
    fn infers_from_runtime_releases() {
        let cases = [
            ("containerd", "v1.7.13", Some(NriVersion::new(0, 4, 0))),
            ("containerd", "v1.7.14", Some(NriVersion::new(0, 6, 0))),
            ("containerd", "1.7.25", Some(NriVersion::new(0, 6, 1))),
            ("containerd", "v1.7.30", Some(NriVersion::new(0, 8, 0))),
            ("containerd", "v2.1.6", Some(NriVersion::new(0, 8, 0))),
            ("containerd", "v2.2.0", Some(NriVersion::new(0, 10, 0))),
            ("containerd", "v2.3.4", Some(NriVersion::new(0, 11, 0))),
            ("containerd", "v1.6.20", None),
            ("cri-o", "1.28.4", Some(NriVersion::new(0, 3, 0))),
            ("cri-o", "1.32.3", Some(NriVersion::new(0, 9, 0))),
            ("cri-o", "1.34.1", Some(NriVersion::new(0, 10, 0))),
            ("cri-o", "1.35.0", Some(NriVersion::new(0, 11, 0))),
            ("iSulad", "2.1.5", Some(NriVersion::new(0, 6, 1))),
            ("podman", "5.0.0", None),
        ];
        for (rt, v, want) in cases {
            assert_eq!(infer_from_runtime(rt, v).ok(), want, "{rt} {v}");
        }
    }

    #[test]
    fn resolve_prefers_announced_and_falls_back_to_baseline() {
        assert_eq!(resolve("v0.12.0", "containerd", "v1.7.0").0, NriVersion::new(0, 12, 0));
        let (v, src) = resolve("", "containerd", "v2.2.0");
        assert_eq!(v, NriVersion::new(0, 10, 0));
        assert!(matches!(src, VersionSource::Inferred { .. }));
        let (v, src) = resolve("garbage", "mystery", "1");
        assert_eq!(v, NriVersion::BASELINE);
        assert_eq!(src, VersionSource::Assumed { why: NotInferred::UnknownRuntime { runtime: "mystery".into() } });
        assert_eq!(src.to_string(), "assumed (unknown runtime \"mystery\")");
        let (_, src) = resolve("", "containerd", "v1.6.20");
        let why = NotInferred::BeforeNri { runtime: "containerd".into(), version: "v1.6.20".into() };
        assert_eq!(src, VersionSource::Assumed { why });
        let (_, src) = resolve("", "cri-o", "one.two");
        assert!(matches!(src, VersionSource::Assumed { why: NotInferred::UnparsableVersion { .. } }), "{src:?}");
    }

    #[test]
    fn subscription_is_never_zero_nor_unknown() {
        let old = NriVersion::new(0, 6, 0);
        let all = EventMask::all();
        assert_eq!(subscription(all, old).bits(), 0x7ff);
        let only_new = EventMask::EMPTY.with(EventKind::UpdatePodSandbox);
        assert_eq!(subscription(only_new, old), EventMask::EMPTY.with(EventKind::PostUpdateContainer));
        assert_eq!(subscription(EventMask::EMPTY, NriVersion::IMPLEMENTED).bits(), 1 << 8);
        assert_eq!(subscription(all, NriVersion::IMPLEMENTED), all);
    }
}
