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
//! `session.rs` runs one connection (serve, register, wait for the end);
//! `supervisor.rs` keeps reconnecting in external mode and exits in launched
//! mode; `transport.rs` opens the socket either way; `version.rs` decides
//! which events a runtime of a given NRI version accepts.

pub mod dispatch;
pub mod mux;
pub mod record;
pub mod registration;
pub mod service;
pub mod session;
pub mod supervisor;
pub mod transport;
pub mod version;

pub use dispatch::{DispatchError, Dispatcher, NullDispatcher, RuntimeInfo};
pub use registration::PluginIdentity;
pub use session::{Phase, RuntimeLink, Status};
pub use supervisor::{ConnectOptions, PluginHandles, Supervisor, SupervisorError};
pub use transport::Endpoint;
pub use version::{EventKind, EventMask, NriVersion};
