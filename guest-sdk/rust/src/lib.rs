//! Write nri-wasm policies in Rust.
//!
//! A policy implements [`Policy`]: it declares the events it may subscribe
//! to in [`Policy::EVENTS`] and overrides only the handlers of those events;
//! every other handler has a default that changes nothing. [`export_policy!`]
//! turns the type into the component's exports and records `EVENTS` in the
//! component, where the host reads it before compiling the policy.
//! [`Policy::events`] may narrow the subscription by settings, within
//! `EVENTS`.
//!
//! ```ignore
//! use nri_wasm_sdk::*;
//!
//! struct DenyPrivileged;
//!
//! impl Policy for DenyPrivileged {
//!     const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];
//!
//!     fn create_container(e: &Event) -> Result<Reply, String> {
//!         if e.container_annotation("example.com/privileged").as_deref() == Some("true") {
//!             return Err("privileged containers are not allowed".into());
//!         }
//!         Ok(Reply::none())
//!     }
//! }
//!
//! export_policy!(DenyPrivileged);
//! ```
//!
//! A policy also declares what it may change and read, with
//! [`capabilities!`]: `nri_wasm_sdk::capabilities!("env", "annotations");`.
//! The host refuses output beyond what is declared and granted by the
//! operator (docs/wit.md lists the names; the dangerous ones such as
//! `hooks`, `mounts` or `devices` need a `grant` in the settings file).
//!
//! A handler receives an [`Event`] and reads from it what it needs: each
//! read asks the host once (and is kept), so a policy that looks at one
//! annotation pays for one string, not for the whole pod and container.
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component to install as
//! `NN-name.wasm`.

extern crate self as nri_wasm_sdk;

/// Generated bindings of the `nri-wasm:policy` world.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "policy",
        pub_export_macro: true,
        export_macro_name: "__export_policy_world",
        default_bindings_module: "nri_wasm_sdk::bindings",
        runtime_path: "nri_wasm_sdk::__wit_bindgen::rt",
        additional_derives: [PartialEq],
    });
}

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

mod adjust;
pub mod alloc;
mod cpus;
mod defaults;
mod event;
pub mod field;
mod logging;
mod macros;
mod policy;
pub mod settings;
pub mod state;
mod sys;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
mod update;
pub mod view;

#[cfg(all(feature = "bump-alloc", target_arch = "wasm32"))]
#[global_allocator]
static ALLOC: alloc::BumpAlloc = alloc::BumpAlloc::new();

pub use bindings::nri_wasm::policy::event::{ContainerMeta, PodMeta};
/// The whole event as one value (see [`Event::whole`]).
pub use bindings::nri_wasm::policy::types::Event as WholeEvent;
pub use bindings::nri_wasm::policy::types::*;
pub use sys::host::{log as host_log, node, runtime};

pub use adjust::HookStage;
pub use cpus::{format_cpu_list, parse_cpu_list};
pub use event::Event;
pub use logging::log;
#[doc(hidden)]
pub use policy::{__events_len, __events_text, __handle, __init};
pub use policy::{event_name, Policy, ALL_EVENTS, LIFECYCLE_EVENTS};
pub use settings::{settings, SettingsError};

// Helpers the modules share.
use adjust::kv;
#[cfg(not(target_arch = "wasm32"))]
use event::env_value;
use event::find;
