//! What a runtime (or the host) wrote to its log, read back by the tests:
//! "closing plugin" is how containerd says it dropped a plugin.

use std::path::{Path, PathBuf};

/// containerd's line when it drops a plugin (a timeout, a closed
/// connection).
pub const CLOSING_PLUGIN: &str = "closing plugin";

/// A log file, read whole each time (they stay small).
#[derive(Debug, Clone)]
pub struct Log {
    path: PathBuf,
}

impl Log {
    pub fn new(path: &Path) -> Self {
        Log { path: path.to_path_buf() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole text so far (empty if there is no file yet).
    pub fn text(&self) -> String {
        std::fs::read(&self.path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// The lines that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text().lines().filter(|l| l.contains(needle)).map(str::to_string).collect()
    }

    /// How many lines contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.lines_with(needle).len()
    }

    /// The last `n` lines, for a failure message.
    pub fn tail(&self, n: usize) -> String {
        let text = self.text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}
