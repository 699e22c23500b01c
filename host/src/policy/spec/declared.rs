//! The events a component declares it may subscribe to, read without
//! compiling it.
//!
//! A policy's subscription is its `configure`'s answer, which the host has
//! only after reading, compiling and linking the component: seconds for a
//! language runtime, minutes for a large one on a busy node. The runtime
//! asks for the plugin's subscription right after registration, and a
//! subscription can only change by connecting again. Without a way to know
//! it beforehand a host on a cold start must either subscribe to every
//! event and fail all of them for a mandatory policy still loading (stops
//! and removes included, which leaves pods that cannot be torn down), or
//! subscribe to too little and reconnect.
//!
//! So a component says, in a custom section named [`SECTION`], which
//! events it may ever subscribe to (the WIT `event-kind` names, e.g.
//! `create-container synchronize`, separated by white space or commas).
//! The SDKs write it from the policy's code (Rust: `Policy::EVENTS`,
//! turned into the section by `export_policy!`) or from a file beside the
//! policy (`guest-sdk/declare.sh` for C, Go, JavaScript and Python). It is
//! an upper bound: `configure` may narrow it by settings, and its answer is
//! checked against it when the policy loads (an event answered but not
//! declared keeps the policy from loading, `load/prepare.rs`). The host
//! reads it in the same pass that inspects the component (`inspect.rs`),
//! so it knows at start what every declared policy may need, and registers
//! with that (`load/known.rs`, `chain::Pending`).
//!
//! The section is untrusted input like the rest of the file: at most
//! [`MAX_BYTES`], one section per component, UTF-8, names and separators
//! only (a control character is refused, never echoed), every name one
//! this host knows. A component without the section (built before
//! declarations, or by hand) still loads; its subscription is then known
//! from a record of its last load, or not at all until it loads.

use std::fmt;

use crate::nri::version::{EventKind, EventMask};
use crate::wit::wit;

/// The custom section a component declares its events in.
pub const SECTION: &str = "nri-wasm:events";

/// Most bytes of the section: every name once, with separators, takes
/// under 300.
pub const MAX_BYTES: usize = 1024;

/// The WIT name of `synchronize`, the one event kind that is not an NRI event.
const SYNCHRONIZE: &str = "synchronize";

/// The events a component declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct DeclaredEvents {
    /// The NRI events it may subscribe to.
    pub events: EventMask,
    /// It may subscribe to `synchronize`.
    pub synchronize: bool,
}

/// The WIT `event-kind` name of an NRI event (`create-container`).
pub fn wit_name(kind: EventKind) -> String {
    let mut out = String::new();
    for (i, c) in kind.name().chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every name a declaration may hold, in the WIT enum's order (the NRI
/// events in protocol order, then `synchronize`).
pub fn known_names() -> Vec<String> {
    let mut names: Vec<String> = EventKind::ALL.iter().map(|k| wit_name(*k)).collect();
    names.push(SYNCHRONIZE.into());
    names
}

/// A declaration section that cannot be read (of events, here, or of
/// capabilities, `caps.rs`). Nothing of the section is echoed but an
/// unknown name, escaped and clipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationError {
    /// The component has several sections of that name.
    #[error("the component has {count} such sections; one declaration is expected (which would be the policy's?)")]
    Sections {
        /// How many.
        count: usize,
    },
    /// Larger than [`MAX_BYTES`].
    #[error("{bytes} bytes, more than the {MAX_BYTES} a declaration may have")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// Not UTF-8 text.
    #[error("not UTF-8 (at byte {at})")]
    NotUtf8 {
        /// Where the text stops being UTF-8.
        at: usize,
    },
    /// A control character other than white space.
    #[error("holds the control character U+{code:04X} at byte {at}")]
    Control {
        /// The character's code point.
        code: u32,
        /// Where.
        at: usize,
    },
    /// A name this host does not know (a component built by a newer SDK
    /// for a newer host).
    #[error("declares {what} {name:?}, which this host does not know (known: {known})")]
    Unknown {
        /// `event` or `capability`.
        what: &'static str,
        /// The name, escaped and clipped.
        name: String,
        /// The names this host knows.
        known: String,
    },
}

impl DeclarationError {
    /// An unknown `what` named `name`, escaped and clipped.
    pub fn unknown(what: &'static str, name: &str, known: String) -> Self {
        Self::Unknown { what, name: crate::text::guest_text(name, 64), known }
    }
}

/// The size and characters of a declaration's text, checked before a name
/// of it is read.
pub fn check_text(text: &str) -> Result<(), DeclarationError> {
    if text.len() > MAX_BYTES {
        return Err(DeclarationError::TooLarge { bytes: text.len() });
    }
    match text.char_indices().find(|(_, c)| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
        Some((at, c)) => Err(DeclarationError::Control { code: c as u32, at }),
        None => Ok(()),
    }
}

/// The names of a declaration: separated by commas or white space.
pub fn names(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ',' || c.is_whitespace()).filter(|n| !n.is_empty())
}

impl DeclaredEvents {
    /// Everything: what a component without a declaration may ask for.
    pub fn all() -> Self {
        Self { events: EventMask::all(), synchronize: true }
    }

    /// Reads the text of a declaration section. The error says what is
    /// wrong without echoing a control character, and names an unknown
    /// event escaped and clipped.
    pub fn parse(text: &str) -> Result<Self, DeclarationError> {
        check_text(text)?;
        let mut declared = Self::default();
        for name in names(text) {
            if name == SYNCHRONIZE {
                declared.synchronize = true;
                continue;
            }
            match EventKind::ALL.iter().find(|k| wit_name(**k) == name) {
                Some(kind) => declared.events = declared.events.with(*kind),
                None => return Err(DeclarationError::unknown("event", name, known_names().join(", "))),
            }
        }
        Ok(declared)
    }

    /// Whether `kind` (as `configure` answers it) is declared.
    pub fn contains(&self, kind: wit::EventKind) -> bool {
        match crate::convert::event_kind(kind) {
            Some(k) => self.events.contains(k),
            None => self.synchronize,
        }
    }

    /// The kinds of `answer` this declaration does not list, each once.
    pub fn undeclared(&self, answer: &[wit::EventKind]) -> Vec<wit::EventKind> {
        let mut out: Vec<wit::EventKind> = Vec::new();
        for kind in answer {
            if !self.contains(*kind) && !out.contains(kind) {
                out.push(*kind);
            }
        }
        out
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && !self.synchronize
    }

    /// The names, in the WIT enum's order, comma-separated; `none` when empty.
    pub fn describe(&self) -> String {
        if self.is_empty() {
            return "none".into();
        }
        let mut names: Vec<String> = self.events.iter().map(wit_name).collect();
        if self.synchronize {
            names.push(SYNCHRONIZE.into());
        }
        names.join(", ")
    }
}

impl fmt::Display for DeclaredEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The WIT name of what `configure` answered (`create-container`, `synchronize`).
pub fn answer_name(kind: wit::EventKind) -> String {
    match crate::convert::event_kind(kind) {
        Some(k) => wit_name(k),
        None => SYNCHRONIZE.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_wit_enums() {
        // The order and spelling of `enum event-kind` in wit/types.wit.
        let wit = include_str!("../../../../wit/types.wit");
        let body = wit.split("enum event-kind {").nth(1).unwrap().split('}').next().unwrap();
        let from_wit: Vec<&str> = body
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .map(|l| l.trim_end_matches(','))
            .collect();
        assert_eq!(known_names(), from_wit);
    }

    #[test]
    fn a_declaration_reads_names_separated_by_space_or_commas() {
        let d = DeclaredEvents::parse("create-container,stop-container\n\tsynchronize  create-container").unwrap();
        assert_eq!(d.describe(), "create-container, stop-container, synchronize");
        assert!(d.contains(wit::EventKind::CreateContainer) && d.contains(wit::EventKind::Synchronize));
        assert!(!d.contains(wit::EventKind::RemoveContainer));
        let answer =
            [wit::EventKind::RemoveContainer, wit::EventKind::CreateContainer, wit::EventKind::RemoveContainer];
        assert_eq!(d.undeclared(&answer), [wit::EventKind::RemoveContainer]);
        assert_eq!(DeclaredEvents::parse(" , ").unwrap().describe(), "none");
        assert_eq!(DeclaredEvents::parse(&known_names().join(" ")).unwrap(), DeclaredEvents::all());
    }

    #[test]
    fn unknown_names_control_characters_and_size_are_refused() {
        let e = DeclaredEvents::parse("create-container CreateContainer").unwrap_err().to_string();
        assert!(
            e.starts_with("declares event \"CreateContainer\", which this host does not know (known: run-pod-sandbox,"),
            "{e}"
        );
        let e = DeclaredEvents::parse("create-container\u{1b}[31m").unwrap_err();
        assert_eq!(e, DeclarationError::Control { code: 0x1b, at: 16 });
        assert_eq!(e.to_string(), "holds the control character U+001B at byte 16");
        let e = DeclaredEvents::parse(&format!("evil{}", "\u{7f}")).unwrap_err();
        assert_eq!(e, DeclarationError::Control { code: 0x7f, at: 4 });
        let e = DeclaredEvents::parse(&"create-container ".repeat(100)).unwrap_err();
        assert_eq!(e.to_string(), "1700 bytes, more than the 1024 a declaration may have");
        // A long unknown name is clipped, not echoed whole.
        let e = DeclaredEvents::parse(&"x".repeat(900)).unwrap_err();
        assert!(matches!(&e, DeclarationError::Unknown { name, .. } if name.len() < 100), "{e}");
    }
}
