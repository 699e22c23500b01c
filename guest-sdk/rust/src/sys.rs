//! Where the SDK's calls to the host go.
//!
//! Every accessor of the SDK (`Event`, [`crate::settings`], [`crate::log`],
//! [`crate::view`], [`crate::state`], ...) reaches the host through the four
//! modules named here, which have the functions (names and signatures) of
//! the generated imports of the `nri-wasm:policy` world:
//!
//! - built for `wasm32` (a policy component), they *are* the generated
//!   imports: nothing stands between a policy and the host;
//! - built for any other target (`cargo test` on a developer's machine),
//!   they answer from the thread-local fake host of [`crate::testing`], so a
//!   policy's handlers run natively in unit tests, through the same API.

#[cfg(target_arch = "wasm32")]
pub(crate) use crate::bindings::nri_wasm::policy::{event, host, node, state};

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use crate::testing::fake::{event, host, node, state};
