//! The plugin side of NRI.
//!
//! ```text
//!            unix socket (one per runtime connection)
//!                 │  8-byte frames: conn id + length
//!        ┌────────┴────────┐
//!        │   mux (mux.rs)  │  reassembles and re-frames ttrpc messages
//!        └──┬───────────┬──┘
//!     conn 1│           │conn 2
//!   ttrpc server     ttrpc client
//!   Plugin service   Runtime service
//!   (service.rs)     (RegisterPlugin, UpdateContainers)
//!        │
//!   Dispatcher (dispatch.rs) ── policy engine
//! ```
//!
//! `frame.rs` is the frame codec without I/O, `clock.rs` the timing of each
//! answer, `answer.rs` what a dispatcher learns of the answer it serves
//! (the transport's backstop, which its own deadline must end before),
//! `mux.rs` the loops that move frames between socket and conns.
//! `events.rs` is the one table of NRI events the rest is generated from.
//! `session.rs` runs one connection (serve, register, wait for the end);
//! `farewell.rs` leaves so that the runtime drops the plugin at once;
//! `supervisor.rs` keeps reconnecting in external mode and exits in launched
//! mode, and changes the subscription by registering a second connection
//! before it closes the first; `handover.rs` sees that the runtime's events
//! are evaluated once while both are registered; `transport.rs` opens the
//! socket either way; `version.rs` decides which events a runtime of a
//! given NRI version accepts.

pub mod answer;
pub mod clock;
pub mod dispatch;
pub mod events;
pub mod farewell;
pub mod frame;
pub mod handover;
pub mod mux;
pub mod record;
pub mod registration;
pub mod service;
pub mod session;
pub mod supervisor;
pub mod transport;
pub mod version;

pub use dispatch::{DispatchError, Dispatcher, RuntimeInfo};
pub use registration::PluginIdentity;
pub use session::{Phase, RuntimeLink, Status};
pub use supervisor::{ConnectOptions, PluginHandles, Supervisor, SupervisorError};
pub use transport::Endpoint;
pub use version::{EventKind, EventMask, NriVersion};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_with_a_source_shows_each_cause_once() {
        let e = transport::ConnectError::Connect {
            path: "/run/nri.sock".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "entity not found"),
        };
        assert_eq!(e.to_string(), "cannot connect to NRI socket /run/nri.sock");
        assert_eq!(crate::text::chain(&e), "cannot connect to NRI socket /run/nri.sock: entity not found");
        let through_anyhow = format!("{:#}", anyhow::Error::new(e));
        assert_eq!(through_anyhow, "cannot connect to NRI socket /run/nri.sock: entity not found");
        let frame = mux::MuxError::Frame(mux::FrameError::ReservedConn);
        assert_eq!(crate::text::chain(&frame), "invalid frame from the runtime: frame for reserved conn id 0");
        assert_eq!(
            mux::MuxEnd::Failed(frame).to_string(),
            "failed: invalid frame from the runtime: frame for reserved conn id 0"
        );
    }
}
