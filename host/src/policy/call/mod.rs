//! One call: one event, one policy, one fresh instance, bounded.
//!
//! - `compiled`: what a call runs (a loaded policy, pre-linked);
//!   `profile`: what a call's store takes of it;
//! - `event`, `env`, `state`: what a call reads and writes;
//! - `store`: a call's store, its limits and what it collects;
//! - `limiter`: memory and tables; `meter`: the time a call is charged
//!   (CPU and waits) and its wall-clock deadline; `watchdog`: wakes calls
//!   when their time could run out, idle otherwise;
//! - `output`: what a guest says, bounded and made one line;
//! - `errors`: why a call gave no answer, named after the limit or trap.
//!
//! These pieces know nothing of the engine that runs them (`engine/`) nor
//! of the chain; they use only `spec/` (a spec, its limits and
//! capabilities). The host side of the policy's imports is `imports/`.

pub mod compiled;
pub mod env;
pub mod errors;
pub mod event;
pub(crate) mod limiter;
pub(crate) mod meter;
pub(crate) mod output;
pub(crate) mod profile;
pub mod state;
pub(crate) mod store;
pub(crate) mod watchdog;
