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
//! - `load/`: loading, in one place: a policy directory and the
//!   configuration's sources into specs, loaded a few at a time, skipping
//!   bad files (`directory`); the [`PolicyLoader`] (compiler,
//!   compile cache, components in use, registry client) and its steps,
//!   the cheap ones first (`prepare`: `read`, `inspect`, `compile` or the
//!   `cache`, linking, `configure` on the engine), the subscriptions
//!   remembered across restarts (`known`), and load errors;
//! - [`chain`]: the ordered chain for one event, time shares, on-error,
//!   on-conflict, audit, breaker; with [`tally`], what the host counts
//!   about it (implemented by `crate::metrics`, which sits above);
//! - [`dispatcher`]: the chain behind the transport's `Dispatcher`, in
//!   time, off the reactor, bounded;
//! - [`reload`]: watching the directory and the registry, swapping the
//!   chain.
//!
//! Every group is named by the path of its files: a caller writes
//! `policy::spec::manifest::PolicySpec` for `policy/spec/manifest.rs`, and
//! the files a caller may use are public in their group; the rest stays
//! private to the crate (`imports/`, a call's store, limiter and
//! watchdog). Two names are kept at the top for the types most callers
//! need: [`CompiledPolicy`] and [`PolicyLoader`]; and [`engine`] names the
//! call types a caller of [`engine::PolicyEngine::call`] needs with it
//! (`CallEnv`, `Facts`, `CompiledPolicy`, `CallError`, `CallTime`), which
//! live in `call/`.

pub mod call;
pub mod chain;
pub mod dispatcher;
pub mod engine;
pub(crate) mod imports;
pub mod load;
pub mod reload;
pub mod spec;
pub mod tally;

pub use call::compiled::CompiledPolicy;
pub use load::loader::{PolicyLoader, Pruned, RegistryClient};
pub use tally::Tally;

/// The WIT world as Rust types (`crate::wit`).
pub use crate::wit as bindings;

/// Text made one bounded line (`crate::text`).
pub(crate) use crate::text as clip;
