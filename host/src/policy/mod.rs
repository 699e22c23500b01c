//! Policies: WebAssembly components that decide what happens on NRI events.
//!
//! The code is grouped by job, and the groups are layered, lowest first;
//! a group imports only from the groups above it in this list, never back
//! (`host/tests/integration/module_circles.rs` fails on a circle):
//! - `spec/`: what a policy file says: its settings file (`manifest`),
//!   limits, capabilities (`capability`, the table; `caps`, what a policy
//!   has; `bounds`, what the default grant allows), the events it declares
//!   (`declared`) and what its component says of itself (`inspection`).
//!   At the bottom, so that everything else can name a spec or a limit;
//! - `call/`: one call, one event, one policy, one fresh instance: what it
//!   runs (`compiled`, and of it the `profile` a store takes), reads and
//!   writes (`event`, `env`, `state`), its store, limiter, watchdog and
//!   output, and call errors. It knows no engine, so the engine can use
//!   all of it;
//! - `imports/`: the host side of the interfaces a policy imports (`host`,
//!   `event`, `node`, `state`), linked into the engine's linker;
//! - [`engine`]: the wasmtime engine, linker and policy runtime shared by
//!   every policy; it only runs calls (an event's, a load's `configure`);
//! - `load/`: loading, in one place: the [`PolicyLoader`] (compiler,
//!   compile cache, components in use, registry client) and its steps,
//!   the cheap ones first (`prepare`: `read`, `inspect`, `compile` or the
//!   `cache`, linking, `configure` on the engine), the subscriptions
//!   remembered across restarts (`known`), and load errors;
//! - [`chain`]: the ordered chain for one event, time shares, on-error,
//!   on-conflict, audit, breaker; with [`tally`], what the host counts
//!   about it (implemented by `crate::metrics`, which sits above);
//! - [`dispatcher`]: the chain behind the transport's `Dispatcher`, in
//!   time, off the reactor, bounded;
//! - [`loader`]: a policy directory into specs, loaded by the
//!   [`PolicyLoader`], skipping bad files; [`reload`]: watching the
//!   directory and the registry, swapping the chain.
//!
//! This module is the facade. `spec/`, `load/`, `call/` and `imports/` are private
//! to the crate; what the rest of the crate, the binary, the tests and the
//! benchmarks use of them is re-exported below under short module names
//! (`policy::manifest::PolicySpec`, `policy::limits::Limits`, ...), so that
//! moving a file between those groups changes no caller. `chain`,
//! `dispatcher`, `engine`, `loader`, `reload` and `tally` are public as
//! they are.

pub(crate) mod call;
pub mod chain;
pub mod dispatcher;
pub mod engine;
pub(crate) mod imports;
pub(crate) mod load;
pub mod loader;
pub mod reload;
pub(crate) mod spec;
pub mod tally;

pub use call::compiled::CompiledPolicy;
pub use load::loader::{PolicyLoader, Pruned, RegistryClient};
pub use tally::Tally;

/// The WIT world as Rust types (`crate::wit`).
pub use crate::wit as bindings;

/// A policy's settings file, `NN-name.toml` (`spec/manifest.rs`).
pub mod manifest {
    pub use super::spec::manifest::{
        policy_stem, read_spec, read_spec_sourced, Mode, OnConflict, OnError, PolicySpec, SpecError,
    };
}

/// The limits of one call (`spec/limits.rs`).
pub mod limits {
    pub use super::spec::limits::{LimitOverrides, Limits};
}

/// What a policy may change and read (`spec/caps.rs`).
pub mod caps {
    pub use super::spec::caps::{parse_declaration, Allowed, CapSet, Capability, SECTION};
}

/// The events a component declares it may subscribe to (`spec/declared.rs`).
pub mod declared {
    pub use super::spec::declared::{answer_name, known_names, wit_name, DeclaredEvents, MAX_BYTES, SECTION};
}

/// The checks before compiling (`load/inspect.rs`).
pub mod inspect {
    pub use super::engine::PoolShape;
    pub use super::load::inspect::{binary, import_refusal, inspect, survey, Inspection};
}

/// Compiling within bounds (`load/compile.rs`).
pub mod compile {
    pub use super::engine::codegen_config;
    pub use super::load::compile::{child_main, CompileBounds, CompileError, Compiler};
}

/// The compile cache (`load/cache.rs`).
pub mod cache {
    pub use super::load::cache::{key_path, Cache};
}

/// Load errors (`load/errors.rs`).
pub mod errors {
    pub use super::call::errors::{CallError, CallErrorKind, LimitKind, TrapCode};
    pub use super::load::errors::{LoadError, WIT_VERSION};
}

/// A policy's key-value state (`call/state.rs`).
pub mod state {
    pub use super::call::state::{SaveHealth, StateSnapshot, StateStore, StateTxn, StateWrites};
}

/// The event a call handles (`call/event.rs`).
pub mod event {
    pub use super::call::event::CallEvent;
}

/// Reading a policy file, the first load step (`load/read.rs`), and what
/// a policy may use (`load/prepare.rs`).
pub mod prepare {
    pub use super::call::compiled::{CompiledPolicy, Imports, LoadTimings};
    pub use super::load::prepare::allowed;
    pub use super::load::read::{check_permissions, read_policy_file};
    pub use crate::files::sha256_hex;
}

/// Text made one bounded line (`crate::text`).
pub(crate) use crate::text as clip;
