//! Logging through the host.
//!
//! A component has no stderr of its own worth reading; the host tags each
//! line with the policy's name and writes it with its own logs, at a level
//! the operator filters.

use crate::{host_log, LogLevel};

/// Logs a line at `level`, tagged by the host with the policy's name.
pub fn log(level: LogLevel, message: &str) {
    host_log(level, message)
}
