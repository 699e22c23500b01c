//! The requests captured from a real containerd, as generated messages.
//!
//! The fixtures live in the repository (`tests/fixtures/containerd-2.3.4/`),
//! as protobuf JSON with the proto field names, so that a plain clone runs
//! every test. `NRI_WASM_FIXTURES` points elsewhere if needed.

use std::path::PathBuf;

use protobuf::MessageFull;

/// Environment variable that overrides the fixture directory.
pub const ENV_FIXTURES: &str = "NRI_WASM_FIXTURES";

/// A fixture that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("fixture directory not found (set {ENV_FIXTURES}); looked in {0}")]
    NoDirectory(String),
    #[error("cannot read fixture {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("fixture {path} is not valid: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The directory of the containerd 2.3.4 captures.
pub fn dir() -> Result<PathBuf, FixtureError> {
    if let Some(d) = std::env::var_os(ENV_FIXTURES) {
        return Ok(PathBuf::from(d));
    }
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/containerd-2.3.4"));
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(FixtureError::NoDirectory(dir.display().to_string()))
    }
}

/// Loads `<event>.json` and parses its request as `M`.
pub fn load<M: MessageFull>(event: &str) -> Result<M, FixtureError> {
    let path = dir()?.join(format!("{event}.json"));
    let text = std::fs::read_to_string(&path).map_err(|source| FixtureError::Read { path: path.clone(), source })?;
    let invalid = |message: String| FixtureError::Invalid { path: path.clone(), message };
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if doc.get("event").and_then(|e| e.as_str()) != Some(event) {
        return Err(invalid(format!("expected event {event:?}")));
    }
    let request = doc.get("request").ok_or_else(|| invalid("no request".into()))?;
    protobuf_json_mapping::parse_from_str::<M>(&request.to_string()).map_err(|e| invalid(e.to_string()))
}
