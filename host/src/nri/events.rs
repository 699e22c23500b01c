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
//! A row reads `Kind = number since version, method, Request => Response,
//! reply, carries, shape;`:
//!
//! - `Kind`: the RPC name, which is also the event's name in logs, metrics,
//!   recordings and `eval --event`;
//! - `number`: NRI's event number (the bit `1 << (number - 1)` in a
//!   subscription);
//! - `since`: the first NRI version whose runtimes accept the event in a
//!   subscription, `any` for those every NRI runtime knows, else
//!   `(major, minor, patch)`. A runtime refuses a subscription to an event
//!   it does not know and drops the plugin, so this column is what the
//!   host's subscription is cut to (`NriVersion::known_events`);
//! - `method`: the [`Dispatcher`](super::Dispatcher) method that handles it;
//! - `Request => Response`: the ttrpc messages of the `Plugin` RPC;
//! - `reply`: `notify` when the runtime gets nothing but success or failure
//!   back (the dispatcher returns `()`); `answer` when the dispatcher's reply
//!   is the RPC's response (adjustments, updates); `verdict` for the one
//!   event the runtime sends only to plugins that subscribed as validators,
//!   whose response accepts or rejects what the other plugins did
//!   (ValidateContainerAdjustment). The host is no validator: its policies
//!   validate inside CreateContainer, so the policy dispatcher never
//!   subscribes to a `verdict` event and answers one as a plugin without an
//!   opinion does;
//! - `carries`: `pod` or `container`, what the request is about (and what a
//!   generic `StateChange` delivers of it);
//! - `shape`: the record the WIT world's `event` variant holds for the kind
//!   (what a policy's `whole` returns). `PodEvent` and `ContainerEvent` are
//!   the plain ones, the request's pod (and container) and nothing else:
//!   everything of such an event is generated. Any other names the event's
//!   own record (`UpdateContainerEvent`, ...), whose parts are written out.
//!
//! The rows are in the order of a pod's life, which is the order requests
//! are listed in (`eval`'s event names, the recording format);
//! [`EventKind::ALL`](super::EventKind::ALL) is sorted by number.
//!
//! Generated from the table: [`EventKind`](super::EventKind) (variants,
//! numbers, [`ALL`](super::EventKind::ALL), names, the version each
//! appeared in, and so which events a runtime's version accepts); the
//! [`Dispatcher`](super::Dispatcher) trait's per-event methods; the
//! `Plugin` service's per-event RPCs and the `StateChange` routing
//! (`service.rs`); the recording's [`Request`](super::record::Request) enum
//! and the recording dispatcher's forwarding (`record/`); `eval`'s dispatch
//! and its naming of what an event is about (`cli/author/session.rs`); the
//! translation of the WIT world's event kinds (`convert/kind.rs`); every
//! request's WIT event and the conversions of the plain shapes
//! (`convert/event.rs`); the policy's view of a plain request and `whole`'s
//! match over every kind (`policy/call/event.rs`); the policy dispatcher's
//! per-event methods (`policy/dispatcher.rs`), which run the chain's
//! `notify` for a `notify` event and the chain's method of the event's
//! name for an `answer` event.
//!
//! The guest side follows the WIT alone: the Rust SDK's per-event code (the
//! `Policy` trait's handlers, the dispatch of `handle`, the event lists and
//! names, `WholeEvent::kind`) is generated from it by
//! `guest-sdk/rust/build.rs`, as Go's and JavaScript's bindings are.
//!
//! A new event still needs, by hand, only what is its own. The compiler
//! asks for items 1 and 2, the chain's method and the `Reply` variant of
//! item 4 (not the subscription's exclusion of a verdict event, named
//! there); two parts of item 3 it cannot see, and
//! tests check them instead, once the new event is added to their lists:
//! the conversion from the WIT record back to the request (`convert/tests.rs`,
//! the round trip) and that a `CallEvent` keeps everything its `Whole` reads
//! (`policy/call/event.rs`, `the_whole_event_is_the_full_conversion_of_the_request`;
//! a `Whole` falls back to a default record for a detail it lacks).
//!
//! 1. its row here, and its kind and variant in the WIT world
//!    (`wit/types.wit`): a kind or a `shape` the WIT world lacks does not
//!    compile;
//! 2. for a `notify` or `answer` event, what it does to the node view, a
//!    `ViewChange` impl for its request (`policy/dispatcher.rs`; an empty
//!    one if nothing; a `verdict` event never reaches the chain): the
//!    order of the view's change and the policies (before for a
//!    post-event, after for the rest, on success only or whatever the
//!    policies say) differs from event to event, so it is code, not a
//!    column;
//! 3. for a `shape` of its own: the record's conversions from and to the
//!    request (`convert/event.rs`), a `Whole` impl that builds it from a
//!    call's event (`policy/call/event.rs`), and for a `notify` event a
//!    `From<&Request>` for `CallEvent` keeping what `Whole` reads (as
//!    UpdatePodSandbox's does);
//! 4. for an `answer` event, the chain's method of its name
//!    (`policy/chain/events.rs`: whom it asks, how their replies merge);
//!    for an `answer` or `verdict` event, a variant of `eval`'s `Reply`
//!    (`cli/author/session.rs`), the one place that keeps replies typed.
//!    `Reply` stays by hand: it has a variant only for the events that
//!    reply, which `macro_rules!` can generate only by filtering rows
//!    through a recursive macro, and its description of a reply is per
//!    event anyway; its `From` of the response is what `eval`'s generated
//!    dispatch calls, so a missing variant does not compile either. The
//!    subscription leaves ValidateContainerAdjustment out by name
//!    (`nri/dispatch.rs`, `policy/dispatcher.rs`): a second `verdict`
//!    event must be left out there too.
//!
//! Tests and the runtime simulator (`host/sim`) that play every event list
//! them for themselves, on purpose: they check the host against NRI, not
//! against this table.

/// Calls `$then!` with every row of the table (see the module doc).
macro_rules! nri_events {
    ($then:ident) => {
        $then! {
            RunPodSandbox = 1 since any, run_pod_sandbox, RunPodSandboxRequest => RunPodSandboxResponse, notify, pod, PodEvent;
            UpdatePodSandbox = 12 since (0, 10, 0), update_pod_sandbox,
                UpdatePodSandboxRequest => UpdatePodSandboxResponse, notify, pod, UpdatePodSandboxEvent;
            PostUpdatePodSandbox = 13 since (0, 10, 0), post_update_pod_sandbox,
                PostUpdatePodSandboxRequest => PostUpdatePodSandboxResponse, notify, pod, PodEvent;
            StopPodSandbox = 2 since any, stop_pod_sandbox, StopPodSandboxRequest => StopPodSandboxResponse, notify, pod, PodEvent;
            RemovePodSandbox = 3 since any, remove_pod_sandbox,
                RemovePodSandboxRequest => RemovePodSandboxResponse, notify, pod, PodEvent;
            CreateContainer = 4 since any, create_container,
                CreateContainerRequest => CreateContainerResponse, answer, container, ContainerEvent;
            PostCreateContainer = 5 since any, post_create_container,
                PostCreateContainerRequest => PostCreateContainerResponse, notify, container, ContainerEvent;
            StartContainer = 6 since any, start_container,
                StartContainerRequest => StartContainerResponse, notify, container, ContainerEvent;
            PostStartContainer = 7 since any, post_start_container,
                PostStartContainerRequest => PostStartContainerResponse, notify, container, ContainerEvent;
            UpdateContainer = 8 since any, update_container,
                UpdateContainerRequest => UpdateContainerResponse, answer, container, UpdateContainerEvent;
            PostUpdateContainer = 9 since any, post_update_container,
                PostUpdateContainerRequest => PostUpdateContainerResponse, notify, container, ContainerEvent;
            StopContainer = 10 since any, stop_container,
                StopContainerRequest => StopContainerResponse, answer, container, ContainerEvent;
            RemoveContainer = 11 since any, remove_container,
                RemoveContainerRequest => RemoveContainerResponse, notify, container, ContainerEvent;
            ValidateContainerAdjustment = 14 since (0, 10, 0), validate_container_adjustment,
                ValidateContainerAdjustmentRequest => ValidateContainerAdjustmentResponse, verdict, container,
                ValidationEvent;
        }
    };
}
pub(crate) use nri_events;

/// What a dispatcher returns for an event: `()` for `notify`, the RPC's
/// response for `answer` and `verdict`.
macro_rules! reply_type {
    (notify, $response:ident) => {
        ()
    };
    (answer, $response:ident) => {
        nri_wasm_api::api::$response
    };
    (verdict, $response:ident) => {
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
