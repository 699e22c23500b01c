//! Leaving the runtime so that it forgets the plugin at once.
//!
//! NRI's runtime side (containerd, CRI-O: the `adaptation` package of
//! containerd/nri, every version to v0.12 and its main branch) drops a plugin
//! whose connection closed *lazily*: the plugin stays in its list until the
//! end of the next event, and during that event it is still counted as
//! present. Its call fails as a closed connection, which the runtime treats
//! as "close the plugin and go on without it". So with the default validator
//! requiring the plugin (`required_plugins`, the fail-closed set-up), the
//! first container created after the host exits is created without its
//! policies, and without the refusal the operator asked for.
//!
//! The runtime also removes closed plugins whenever another plugin finishes
//! registering, and a registration's `Synchronize` runs while the runtime
//! holds back every pod and container event (containerd takes its NRI lock,
//! and the adaptation library waits for events in flight and blocks new
//! ones, `BlockPluginSync`). That window is where the host leaves: on a
//! requested stop it registers a second, short-lived plugin
//! (`<name>-farewell`, subscribed to one notification only), and inside that
//! plugin's `Synchronize` it closes its main connection, waits until the
//! runtime has seen the close, and only then answers. The runtime then sorts
//! its plugins, which removes the closed one; the next event finds the
//! plugin absent, and a required plugin refuses the container. The farewell
//! connection closes in turn; it lingers until the next event as the main one
//! would have, harmlessly, since no validator requires its name.
//!
//! A connection retired after a handover (`handover.rs`) leaves the same
//! way. It answers as a plugin that changes nothing by then, so a plain close
//! would lose nothing, but the runtime's next event would still call it,
//! fail, and log that it closed the plugin: an error line in the runtime's
//! log at every policy change, indistinguishable from a plugin that died.
//!
//! The farewell plugin subscribes to the rarest notification the runtime
//! knows (`PostUpdatePodSandbox`, sent on a pod's in-place resize, where the
//! runtime's NRI has it; `PostUpdateContainer` before), since it too closes
//! and lingers until the end of the runtime's next event: only if that
//! event is its notification does the runtime call it, fail, and log the
//! farewell's name (never the plugin's), changing nothing.
//!
//! What remains: a host killed with SIGKILL (or the OOM killer) cannot say
//! farewell, and the runtime lets the first event after it through; the
//! next registration of any plugin (the restarted host's) removes it too.
//! If the farewell cannot register (the runtime is gone, or refuses it), the
//! main connection is closed as before, and the same holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nri_wasm_api::api as pb;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::dispatch::{DispatchError, Dispatcher};
use super::mux::MuxHandle;
use super::registration::PluginIdentity;
use super::session::{Farewell, Leaving, Session, SessionContext, SessionEnd};
use super::transport;
use super::version::{EventKind, EventMask};

/// How long the host waits, after its main connection ended, before it
/// answers the farewell's `Synchronize`. The runtime marks a plugin closed
/// from its connection's close callback, in another goroutine than the one
/// that read the end of the socket; it runs within microseconds.
const SEEN_CLOSED: Duration = Duration::from_millis(200);

/// The whole farewell at most (a runtime registers and synchronizes a
/// plugin in milliseconds: 460 ms from connect to close on containerd
/// 2.3.4, the waits above included); then the main connection is closed
/// without it. Bounded well inside a pod's grace period, and short because
/// a stop waits for it.
const FAREWELL_DEADLINE: Duration = Duration::from_secs(3);

/// The farewell plugin's name for a host registered as `identity`.
pub fn farewell_identity(identity: &PluginIdentity) -> PluginIdentity {
    PluginIdentity::new(format!("{}-farewell", identity.name()), identity.idx())
        .expect("a valid name with a valid suffix is valid")
}

/// How a stopped or retired session leaves through the runtime's `socket`
/// (given to its [`SessionContext`] by the supervisor): it closes the main
/// connection inside the `Synchronize` of a farewell registration, so that
/// the runtime removes the plugin before its next event, and says whether
/// that is how it closed; on any failure the main connection is closed
/// directly.
pub fn through(socket: PathBuf) -> Farewell {
    Farewell::new(move |main, identity, register_timeout, why| {
        let socket = socket.clone();
        // Boxed (and `Send`): a session ends with a farewell, which runs a
        // session.
        Box::pin(async move { leave(&socket, identity, main, register_timeout, why).await })
    })
}

async fn leave(
    socket: &Path,
    identity: &PluginIdentity,
    main: &MuxHandle,
    register_timeout: Duration,
    why: Leaving,
) -> bool {
    let farewell = farewell_identity(identity);
    let closed = Arc::new(watch::Sender::new(false));
    let stop = CancellationToken::new();
    let dispatcher = Arc::new(FarewellPlugin { main: main.clone(), closed: closed.clone(), stop: stop.clone() });
    let attempt = async {
        let stream = transport::connect_socket(socket).await.map_err(|e| crate::text::chain(&e))?;
        let cx = SessionContext { identity: farewell.clone(), register_timeout, stop: stop.clone(), farewell: None };
        // Connection 0: the farewell is no connection of the supervisor's.
        match Session::spawn(stream, &cx, 0, dispatcher).finished().await {
            SessionEnd::Stopped if *closed.borrow() => Ok(()),
            end => Err(end.to_string()),
        }
    };
    let deadline = FAREWELL_DEADLINE.min(register_timeout + SEEN_CLOSED * 5);
    let outcome = match tokio::time::timeout(deadline, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("not registered and synchronized within {deadline:?}")),
    };
    match (outcome, why) {
        (Ok(()), Leaving::Stop) => {
            tracing::info!(plugin = %identity, farewell = %farewell, "left the runtime: it removed the plugin before its next event");
            true
        }
        (Ok(()), Leaving::Retired { conn }) => {
            tracing::info!(plugin = %identity, farewell = %farewell, conn, "retired connection removed by the runtime through a farewell registration");
            true
        }
        (Err(reason), why) => {
            // Ends the farewell's session too, wherever it got.
            stop.cancel();
            main.close();
            match why {
                Leaving::Stop => tracing::warn!(
                    plugin = %identity,
                    %reason,
                    "could not leave through a farewell registration; connection closed (the runtime may let its next event through without the plugin)"
                ),
                Leaving::Retired { conn } => tracing::warn!(
                    plugin = %identity,
                    conn,
                    %reason,
                    "could not retire a connection through a farewell registration; closed it (the runtime may log that it closed the plugin at its next event, which its successor serves)"
                ),
            }
            false
        }
    }
}

/// The farewell plugin: changes nothing, and closes the main connection in
/// its `Synchronize`.
struct FarewellPlugin {
    main: MuxHandle,
    closed: Arc<watch::Sender<bool>>,
    stop: CancellationToken,
}

#[async_trait]
impl Dispatcher for FarewellPlugin {
    fn events(&self) -> EventMask {
        // The rarest notification; a runtime that does not know it leaves
        // the subscription empty, and the transport subscribes to the one
        // every runtime knows (`version::subscription`).
        EventMask::EMPTY.with(EventKind::PostUpdatePodSandbox)
    }

    async fn synchronize(
        &self,
        _pods: Vec<pb::PodSandbox>,
        _containers: Vec<pb::Container>,
    ) -> Result<Vec<pb::ContainerUpdate>, DispatchError> {
        self.main.close();
        let _ = tokio::time::timeout(SEEN_CLOSED * 5, self.main.ended()).await;
        tokio::time::sleep(SEEN_CLOSED).await;
        self.closed.send_replace(true);
        // Ends the farewell session once the answer is out: the session
        // sees the stop after registering.
        let stop = self.stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SEEN_CLOSED).await;
            stop.cancel();
        });
        Ok(Vec::new())
    }
}

impl std::fmt::Debug for FarewellPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FarewellPlugin").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_farewell_has_a_name_no_validator_requires() {
        let id = PluginIdentity::new("nri-wasm", "10").unwrap();
        let f = farewell_identity(&id);
        assert_eq!((f.name(), f.idx()), ("nri-wasm-farewell", "10"));
        assert_ne!(f.name(), id.name());
    }
}
