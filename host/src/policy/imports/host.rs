//! `nri-wasm:policy/host`: the policy's log, clipped and counted.

use crate::policy::call::store::CallState;
use crate::wit::{host, wit};

impl host::Host for CallState {
    fn log(&mut self, level: wit::LogLevel, message: String) {
        if !self.logs.take(message.len()) {
            return;
        }
        let level = match level {
            wit::LogLevel::Debug => tracing::Level::DEBUG,
            wit::LogLevel::Info => tracing::Level::INFO,
            wit::LogLevel::Warn => tracing::Level::WARN,
            wit::LogLevel::Error => tracing::Level::ERROR,
        };
        crate::policy::call::output::log_message(&self.policy, level, &message);
    }

    fn settings(&mut self) -> String {
        self.settings.to_string()
    }

    fn runtime(&mut self) -> wit::RuntimeInfo {
        self.env.facts.runtime.clone()
    }

    fn node(&mut self) -> wit::NodeInfo {
        self.env.facts.node.clone()
    }
}
