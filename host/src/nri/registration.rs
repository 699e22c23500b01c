//! Who we are to the runtime, and the RegisterPlugin call that says so.
//!
//! Runtimes order plugins by their two-digit index and refuse names outside
//! `[a-zA-Z0-9_.+-]`; both are checked here, before a connection is made, so a
//! bad flag is reported at start and not as a registration failure later.

use std::fmt;
use std::time::Duration;

use nri_wasm_api::api as pb;
use nri_wasm_api::services::RuntimeClient;

use super::version::NriVersion;

/// The plugin's name and index as registered with the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginIdentity {
    name: String,
    idx: String,
}

/// A name or index the runtime would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The name is empty.
    #[error("plugin name is empty")]
    EmptyName,
    /// The name (given) has a character outside `[a-zA-Z0-9_.+-]`.
    #[error("plugin name {0:?} has characters outside [a-zA-Z0-9_.+-]")]
    BadName(String),
    /// The index (given) is not exactly two ASCII digits.
    #[error("plugin index {0:?} is not exactly two digits")]
    BadIndex(String),
}

impl PluginIdentity {
    /// Checks a name and a two-digit index as the runtime would.
    pub fn new(name: impl Into<String>, idx: impl Into<String>) -> Result<Self, IdentityError> {
        let (name, idx) = (name.into(), idx.into());
        if name.is_empty() {
            return Err(IdentityError::EmptyName);
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c)) {
            return Err(IdentityError::BadName(name));
        }
        if idx.len() != 2 || !idx.chars().all(|c| c.is_ascii_digit()) {
            return Err(IdentityError::BadIndex(idx));
        }
        Ok(Self { name, idx })
    }

    /// The plugin name, as sent in RegisterPlugin.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The two-digit index that orders the plugin among the runtime's plugins.
    pub fn idx(&self) -> &str {
        &self.idx
    }
}

impl fmt::Display for PluginIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.idx, self.name)
    }
}

/// Registration failed: the runtime refused us or did not answer in time.
#[derive(Debug, Clone, thiserror::Error)]
#[error("registering {plugin} with the runtime failed: {reason}")]
pub struct RegistrationError {
    /// The plugin as registered (`NN-name`).
    pub plugin: String,
    /// The ttrpc error: the runtime's refusal, or the timeout.
    pub reason: String,
}

/// Calls `Runtime.RegisterPlugin`. Conn 1 must already be served: the
/// runtime may call Configure before it answers this call.
pub async fn register(
    client: &RuntimeClient,
    identity: &PluginIdentity,
    timeout: Duration,
) -> Result<(), RegistrationError> {
    let req = pb::RegisterPluginRequest {
        plugin_name: identity.name.clone(),
        plugin_idx: identity.idx.clone(),
        NRI_version: NriVersion::IMPLEMENTED.to_string(),
        ..Default::default()
    };
    let ctx = ttrpc::context::with_timeout(timeout.as_nanos() as i64);
    client
        .register_plugin(ctx, &req)
        .await
        .map(|_| ())
        .map_err(|e| RegistrationError { plugin: identity.to_string(), reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_name_and_index() {
        assert_eq!(PluginIdentity::new("wasm.policies_1+x-y", "05").unwrap().to_string(), "05-wasm.policies_1+x-y");
        assert_eq!(PluginIdentity::new("", "10"), Err(IdentityError::EmptyName));
        assert_eq!(PluginIdentity::new("a b", "10"), Err(IdentityError::BadName("a b".into())));
        assert_eq!(PluginIdentity::new("a/b", "10"), Err(IdentityError::BadName("a/b".into())));
        for idx in ["1", "100", "x1", "", "1a"] {
            assert_eq!(PluginIdentity::new("ok", idx), Err(IdentityError::BadIndex(idx.into())));
        }
    }
}
