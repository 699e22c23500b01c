//! Event kinds: the WIT world's `event-kind` and the protocol's
//! [`EventKind`], which the loader (a subscription) and a call (the event's
//! name) both translate.

use crate::nri::version::EventKind;
use crate::wit::wit;

/// Protocol event of a WIT event kind (`synchronize` has none: it is not
/// an event a plugin subscribes to). The WIT world names its kinds as NRI
/// does, so the match is generated from the table of events
/// (`nri/events.rs`): an event the WIT world lacks does not compile.
pub fn event_kind(k: wit::EventKind) -> Option<EventKind> {
    macro_rules! from_wit {
        ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
            match k {
                $(wit::EventKind::$kind => Some(EventKind::$kind),)*
                wit::EventKind::Synchronize => None,
            }
        };
    }
    crate::nri::events::nri_events!(from_wit)
}
