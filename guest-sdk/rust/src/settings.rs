//! The operator's settings for this policy.
//!
//! The host hands a policy its settings as one string: a `settings` string
//! in the policy's file as it is, a `[settings]` table as its JSON text
//! (docs/configuration.md). Every call runs in a fresh instance, so the
//! handlers read them again with [`settings`] rather than keeping what
//! `configure` saw.

#[cfg(target_arch = "wasm32")]
static SETTINGS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The operator's settings for this policy (empty if none were given),
/// asked of the host on first use.
#[cfg(target_arch = "wasm32")]
pub fn settings() -> &'static str {
    SETTINGS.get_or_init(crate::sys::host::settings)
}

/// The operator's settings for this policy (empty if none were given): in
/// a native build, those of the [`crate::testing::TestHost`] running the call.
#[cfg(not(target_arch = "wasm32"))]
pub fn settings() -> &'static str {
    crate::testing::fake::settings()
}
