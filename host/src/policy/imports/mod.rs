//! The host side of the interfaces a policy imports: `host`, `event`,
//! `node` and `state` of `nri-wasm:policy`.
//!
//! Every function here runs on behalf of untrusted code, so each is bounded
//! by what it is given and by the node's size, never by a loop the guest
//! controls, and none may panic on guest input. What the guest passes in
//! was already bounded by the store's transfer limit (`store.rs`); what it
//! asks to be written (a log line) is clipped and counted before it reaches
//! the host's log.
//!
//! Bounded is not enough: a host function runs inline on the host's one
//! transport thread, and epochs do not interrupt it, so its time is the
//! runtime's time. So each function's work is linear in its arguments (a
//! 16 MiB filter is compiled once into a bounded query, `node/view.rs`;
//! lookups go through maps, never a scan per element), and every loop over
//! the node or over an argument charges the call's [`WorkClock`] and stops
//! at the call's deadline. A function that stops there gives up
//! (`CallState::gave_up`): the call ends as the policy's timeout, and the
//! host's log names the policy, the event, the function and the limit.
//! Functions that return a `wasmtime::Result` (the event reads) trap at
//! once; the others return an empty answer that the guest never gets to
//! use, since the epoch has been advanced past its deadline.
//!
//! The `node` functions first check the policy's `node` capability
//! (`caps.rs`); without it they answer empty and the call fails naming the
//! capability (`CallState::may_read_node`).
//!
//! One file per interface: `host`, `event`, `node`, `state`. The types
//! (`nri-wasm:policy/types`) have no functions.

mod event;
mod host;
mod node;
mod state;

use crate::policy::call::store::CallState;
use crate::wit::wit;

impl wit::Host for CallState {}
