//! The [`Policy`] trait and the dispatch from the component's exports to it.
//!
//! The WIT world has one `handle(kind)` export; a trait with one method per
//! event, each with a default that changes nothing, lets a policy write only
//! the handlers of the events it asked for, and keeps the match on the kind
//! in one place (here) instead of in every policy. The per-event parts (the
//! handlers, the dispatch, the event lists and names) are generated from the
//! WIT by `build.rs`, so an event added to the WIT needs nothing here.
//!
//! What a policy subscribes to is declared once, as the constant
//! [`Policy::EVENTS`]: the component's declaration is made from it at
//! compile time (`export_policy!`), `configure` answers it by default, and
//! a narrower answer is checked against it, so the declaration the host
//! reads cannot drift from what the code subscribes to.

use crate::{Event, EventKind, Reply, WholeEvent};

// `LIFECYCLE_EVENTS`, `ALL_EVENTS`, `event_name`, the `policy_trait!`
// macro that adds a handler per event to the trait below, `__handle` and
// `WholeEvent::kind`: written by build.rs from the WIT.
include!(concat!(env!("OUT_DIR"), "/events.rs"));

policy_trait! {
    /// A policy. Declare [`EVENTS`](Policy::EVENTS) and override the handlers
    /// of those events.
    pub trait Policy {
        /// Every event this policy may ever subscribe to, whatever its
        /// settings. [`export_policy!`](crate::export_policy) records the list
        /// in the component (custom section `nri-wasm:events`), where the host
        /// reads it before compiling the component: it registers with the
        /// runtime for these events from its first second, and while the policy
        /// is still loading only these events can wait for it or fail for it.
        /// What [`events`](Policy::events) answers must be within it (the host
        /// refuses to load the policy otherwise).
        const EVENTS: &'static [EventKind];

        /// The events the host delivers to this policy, which its settings
        /// (read with [`settings()`](crate::settings())) may narrow: by default
        /// all of [`EVENTS`](Policy::EVENTS). Any event answered that
        /// `EVENTS` does not list makes `configure` fail (natively too, in the
        /// test host).
        fn events() -> Vec<EventKind> {
            Self::EVENTS.to_vec()
        }

        /// Checks the settings when the host loads the policy (the component's
        /// `configure`); an error keeps the policy from loading. Handlers read
        /// the settings with [`settings()`](crate::settings()): they run in fresh instances, which
        /// have not seen this call, unless the operator sets `preinitialize =
        /// true` (docs/configuration.md), where every call starts from the
        /// state this call left. A handler must work either way.
        fn init(_settings: &str) -> Result<(), String> {
            Ok(())
        }
    }
}

#[doc(hidden)]
pub fn __init<P: Policy>(settings: String) -> Result<Vec<EventKind>, String> {
    P::init(&settings)?;
    let events = P::events();
    let undeclared: Vec<&str> = events.iter().filter(|k| !P::EVENTS.contains(k)).map(|k| event_name(*k)).collect();
    if !undeclared.is_empty() {
        let declared: Vec<&str> = P::EVENTS.iter().map(|k| event_name(*k)).collect();
        return Err(format!(
            "Policy::events() answers {}, which Policy::EVENTS does not declare (it declares {}): add them to EVENTS",
            undeclared.join(", "),
            if declared.is_empty() { "none".to_string() } else { declared.join(", ") }
        ));
    }
    Ok(events)
}

/// Bytes of the declaration of `events`: each name followed by a space (a
/// single space for none, so that the section exists and declares nothing).
#[doc(hidden)]
pub const fn __events_len(events: &[EventKind]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < events.len() {
        len += event_name(events[i]).len() + 1;
        i += 1;
    }
    if len == 0 {
        1
    } else {
        len
    }
}

/// The declaration of `events`, as [`export_policy!`](crate::export_policy)
/// records it: `N` is [`__events_len`] of the same list.
#[doc(hidden)]
pub const fn __events_text<const N: usize>(events: &[EventKind]) -> [u8; N] {
    let mut out = [b' '; N];
    let mut at = 0;
    let mut i = 0;
    while i < events.len() {
        let name = event_name(events[i]).as_bytes();
        let mut j = 0;
        while j < name.len() {
            out[at] = name[j];
            at += 1;
            j += 1;
        }
        at += 1;
        i += 1;
    }
    out
}
