//! The one table of NRI events: each event listed once, and the code that
//! must name every event generated from it.
//!
//! An event reaches the host through several layers (the ttrpc service,
//! the [`Dispatcher`](super::Dispatcher) seam, the recording, `eval`), and
//! each used to list every event by hand, so adding one meant editing a
//! dozen matches that the compiler did not always point to. `nri_events!`
//! holds the list; a module that needs it defines a `macro_rules!` that
//! takes the rows and passes it to `nri_events!`, which calls it with them.
//!
//! A row reads `Kind = number, method, Request => Response, reply, carries;`:
//!
//! - `Kind`: the RPC name, which is also the event's name in logs, metrics,
//!   recordings and `eval --event`;
//! - `number`: NRI's event number (the bit `1 << (number - 1)` in a
//!   subscription);
//! - `method`: the [`Dispatcher`](super::Dispatcher) method that handles it;
//! - `Request => Response`: the ttrpc messages of the `Plugin` RPC;
//! - `reply`: `notify` when the runtime gets nothing but success or failure
//!   back (the dispatcher returns `()`), `answer` when the dispatcher's reply
//!   is the RPC's response (adjustments, updates, a verdict);
//! - `carries`: `pod` or `container`, what the request is about (and what a
//!   generic `StateChange` delivers of it).
//!
//! The rows are in the order of a pod's life, which is the order requests
//! are listed in (`eval`'s event names, the recording format);
//! [`EventKind::ALL`](super::EventKind::ALL) is sorted by number.
//!
//! Generated from the table: [`EventKind`](super::EventKind) (variants,
//! numbers, [`ALL`](super::EventKind::ALL), names); the
//! [`Dispatcher`](super::Dispatcher) trait's per-event methods; the
//! `Plugin` service's per-event RPCs and the `StateChange` routing
//! (`service.rs`); the recording's [`Request`](super::record::Request) enum
//! and the recording dispatcher's forwarding (`record/`); `eval`'s dispatch
//! and its naming of what an event is about (`cli/author/session.rs`); the
//! translation of the WIT world's event kinds (`convert/kind.rs`), where an
//! event the WIT world lacks fails to compile.
//!
//! A new event still needs, by hand:
//!
//! 1. its row here;
//! 2. the policy side, which the WIT interface shapes event by event: the
//!    WIT handler and its conversion (`convert/event.rs`), the event a
//!    call reads (`policy/call/event.rs`), and the policy dispatcher's
//!    method for it (`policy/dispatcher.rs`, which
//!    the compiler asks for only if the event needs more than the trait's
//!    default);
//! 3. for an `answer` event, a variant of `eval`'s `Reply`
//!    (`cli/author/session.rs`), the one place that keeps replies typed.
//!
//! Tests and the runtime simulator (`host/sim`) that play every event list
//! them for themselves, on purpose: they check the host against NRI, not
//! against this table.

/// Calls `$then!` with every row of the table (see the module doc).
macro_rules! nri_events {
    ($then:ident) => {
        $then! {
            RunPodSandbox = 1, run_pod_sandbox, RunPodSandboxRequest => RunPodSandboxResponse, notify, pod;
            UpdatePodSandbox = 12, update_pod_sandbox, UpdatePodSandboxRequest => UpdatePodSandboxResponse, notify, pod;
            PostUpdatePodSandbox = 13, post_update_pod_sandbox,
                PostUpdatePodSandboxRequest => PostUpdatePodSandboxResponse, notify, pod;
            StopPodSandbox = 2, stop_pod_sandbox, StopPodSandboxRequest => StopPodSandboxResponse, notify, pod;
            RemovePodSandbox = 3, remove_pod_sandbox, RemovePodSandboxRequest => RemovePodSandboxResponse, notify, pod;
            CreateContainer = 4, create_container,
                CreateContainerRequest => CreateContainerResponse, answer, container;
            PostCreateContainer = 5, post_create_container,
                PostCreateContainerRequest => PostCreateContainerResponse, notify, container;
            StartContainer = 6, start_container, StartContainerRequest => StartContainerResponse, notify, container;
            PostStartContainer = 7, post_start_container,
                PostStartContainerRequest => PostStartContainerResponse, notify, container;
            UpdateContainer = 8, update_container,
                UpdateContainerRequest => UpdateContainerResponse, answer, container;
            PostUpdateContainer = 9, post_update_container,
                PostUpdateContainerRequest => PostUpdateContainerResponse, notify, container;
            StopContainer = 10, stop_container, StopContainerRequest => StopContainerResponse, answer, container;
            RemoveContainer = 11, remove_container,
                RemoveContainerRequest => RemoveContainerResponse, notify, container;
            ValidateContainerAdjustment = 14, validate_container_adjustment,
                ValidateContainerAdjustmentRequest => ValidateContainerAdjustmentResponse, answer, container;
        }
    };
}
pub(crate) use nri_events;

/// What a dispatcher returns for an event: `()` for `notify`, the RPC's
/// response for `answer`.
macro_rules! reply_type {
    (notify, $response:ident) => {
        ()
    };
    (answer, $response:ident) => {
        nri_wasm_api::api::$response
    };
}
pub(crate) use reply_type;

#[cfg(test)]
mod tests {
    use super::super::record::Request;
    use super::super::EventKind;

    #[test]
    fn every_event_of_the_table_is_a_kind_and_a_request_with_one_name() {
        assert_eq!(&Request::NAMES[..2], ["Configure", "Synchronize"]);
        let events = &Request::NAMES[2..];
        assert_eq!(events.len(), EventKind::ALL.len());
        for kind in EventKind::ALL {
            assert!(events.contains(&kind.name()), "{kind} has no request");
            let request = Request::parse(kind.name(), "{}").unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(request.name(), kind.name());
        }
        // The rows keep the order of a pod's life, whatever the numbers.
        let position = |name: &str| events.iter().position(|e| *e == name).unwrap();
        assert!(position("RunPodSandbox") < position("UpdatePodSandbox"));
        assert!(position("UpdatePodSandbox") < position("StopPodSandbox"));
        assert!(position("RemoveContainer") < position("ValidateContainerAdjustment"));
    }
}
