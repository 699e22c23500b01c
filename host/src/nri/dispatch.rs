//! The seam between the NRI transport and whatever decides what to do.
//!
//! The transport knows the protocol (framing, registration, split
//! synchronisation, the StateChange fallback, deadlines); a [`Dispatcher`]
//! knows nothing of it and sees one call per event with the runtime's request.
//! The policy engine implements this trait; `NullDispatcher` (tests only,
//! `nri_wasm::testing`) answers every event with an empty response, which is
//! exactly what a runtime expects from a plugin that changes nothing.

use std::time::Duration;

use async_trait::async_trait;
use nri_wasm_api::api as pb;

use super::mux::AnswerTime;
use super::version::{EventKind, EventMask, NriVersion, VersionSource};

/// What the runtime told us about itself in `Configure`.
#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    /// Runtime name, e.g. `containerd`.
    pub name: String,
    /// Runtime version, e.g. `v2.3.4`.
    pub version: String,
    /// NRI version the runtime speaks, announced or inferred.
    pub nri_version: NriVersion,
    /// How `nri_version` was determined.
    pub nri_version_source: VersionSource,
    /// Plugin configuration the runtime passed (launched plugins get their
    /// `conf.d` file here; external plugins usually get an empty string).
    pub config: String,
    /// How long the runtime waits for registration.
    pub registration_timeout: Duration,
    /// How long the runtime waits for any answer before it drops the plugin.
    pub request_timeout: Duration,
}

/// Why an event failed. Every variant fails the event at the runtime (e.g. a
/// CreateContainer is refused with this message); none of them disconnects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// A policy refused the event.
    #[error("denied: {0}")]
    Denied(String),
    /// The request cannot be handled as sent.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The dispatcher did not answer within the time the runtime allows.
    #[error("no answer within {0:?}")]
    DeadlineExceeded(Duration),
    /// Something went wrong on our side.
    #[error("internal error: {0}")]
    Internal(String),
}

macro_rules! dispatcher_trait {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        /// Handles NRI events. Every method has a default that changes nothing, so an
        /// implementation overrides only the events it cares about.
        #[async_trait]
        pub trait Dispatcher: Send + Sync + 'static {
            /// Events this dispatcher wants; the transport narrows it down to what the
            /// runtime knows before subscribing. Validation is opt-in: subscribing to
            /// it makes the plugin a validator whose absence fails container creation.
            fn events(&self) -> EventMask {
                EventMask::all().without(EventKind::ValidateContainerAdjustment)
            }

            /// A number that grows whenever [`Self::events`] may have changed (a
            /// new set of policies).
            fn events_version(&self) -> u64 {
                0
            }

            /// Resolves once [`Self::events_version`] is past `since`: the session
            /// then reconnects if the runtime's subscription no longer matches.
            /// Never, by default.
            async fn events_changed(&self, _since: u64) {
                std::future::pending::<()>().await
            }

            /// The runtime (re)configured us: called once per connection, before
            /// synchronisation. An error refuses the connection.
            async fn configure(&self, _runtime: &RuntimeInfo) -> Result<(), DispatchError> {
                Ok(())
            }

            /// Every existing pod and container, collected from all chunks of a split
            /// Synchronize. The updates returned go out with the last reply.
            async fn synchronize(
                &self,
                _pods: Vec<pb::PodSandbox>,
                _containers: Vec<pb::Container>,
            ) -> Result<Vec<pb::ContainerUpdate>, DispatchError> {
                Ok(Vec::new())
            }

            $(
                #[doc = concat!("The runtime's `", stringify!($kind), "`.")]
                async fn $method(
                    &self,
                    _req: pb::$request,
                ) -> Result<super::events::reply_type!($reply, $response), DispatchError> {
                    Ok(Default::default())
                }
            )*

            /// A request was answered; its times at the socket (every request of
            /// the Plugin service, whether or not it reached the dispatcher).
            fn answered(&self, _answer: &AnswerTime) {}

            /// The answer to `event` ran out of the answer budget and was sent as
            /// DEADLINE_EXCEEDED; the call was dropped.
            fn answer_overrun(&self, _event: &'static str, _budget: Duration) {}

            /// The connection to the runtime is gone (it will be re-established or
            /// the process exits). State derived from the runtime should be dropped.
            async fn disconnected(&self) {}
        }
    };
}
super::events::nri_events!(dispatcher_trait);

/// A dispatcher that changes nothing: the baseline of the transport tests
/// (`nri_wasm::testing::NullDispatcher`).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Default, Clone, Copy)]
pub struct NullDispatcher;

#[cfg(any(test, feature = "testing"))]
#[async_trait]
impl Dispatcher for NullDispatcher {}
