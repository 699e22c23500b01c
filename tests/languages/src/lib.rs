//! Policies in JavaScript, Python, C, Go and Rust through the real host.
//!
//! With feature `languages`, `build.rs` builds every policy of the other
//! languages from source (with the SDKs' build scripts and the tools of
//! `guest-sdk/install-tools.sh`): the SDK templates, the parity reference
//! policy in all five languages, the examples of `example-policies/<lang>/`
//! and the fault policies. The tests and the benchmark load them into the
//! production engine ([`engine`]) and run them through the chain, as the
//! host does for a runtime. Without the feature this crate is empty.

#[cfg(feature = "languages")]
mod built {
    include!(concat!(env!("OUT_DIR"), "/components.rs"));
}

#[cfg(feature = "languages")]
pub use built::*;

#[cfg(feature = "languages")]
mod host;

#[cfg(feature = "languages")]
pub use host::*;
