//! Why a policy could not be loaded: one variant per step, each naming the
//! policy (and the file or limit), so `check`, the logs and the status page
//! say which step to fix. Every message is one line; guest-supplied parts go
//! through `crate::text`.

/// The `nri-wasm:policy` package versions this host loads: `0.3.x`.
pub const WIT_VERSION: &str = "0.3";

/// Loading one policy failed; each variant names the step that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("policy {policy}: cannot read {path}: {reason}")]
    Read { policy: String, path: String, reason: String },
    #[error("policy {policy}: {path} is {what}, not a policy file")]
    NotAFile { policy: String, path: String, what: String },
    #[error(
        "policy {policy}: {size} bytes is more than the {limit} bytes a policy may have ([engine] max-component-mib)"
    )]
    TooLarge { policy: String, size: u64, limit: u64 },
    #[error("policy {policy}: not a WebAssembly file ({reason})")]
    NotWasm { policy: String, reason: String },
    #[error("policy {policy}: a core WebAssembly module, not a component: build it for wasm32-wasip2 or turn it into a component (`wasm-tools component new`)")]
    CoreModule { policy: String },
    #[error("policy {policy}: not a valid WebAssembly component: {reason}")]
    Invalid { policy: String, reason: String },
    #[error("policy {policy}: imports {import}, which the host does not provide (allowed: nri-wasm:policy/*, wasi:cli, wasi:io, wasi:clocks, wasi:random, wasi:filesystem, wasi:sockets)")]
    ForbiddenImport { policy: String, import: String },
    #[error("policy {policy}: built against {import}, but this host loads nri-wasm:policy@{WIT_VERSION}.x: rebuild it against {WIT_VERSION} with the current SDK or WIT package")]
    Version { policy: String, import: String },
    #[error("policy {policy}: does not implement the nri-wasm:policy world: {reason}")]
    World { policy: String, reason: String },
    /// Its capability declaration (`caps.rs`) cannot be read.
    #[error("policy {policy}: capability declaration: {reason}")]
    Declaration { policy: String, reason: String },
    #[error("policy {policy}: {what} ({limit})")]
    Structure { policy: String, what: String, limit: String },
    #[error("policy {policy}: memory-mib {asked} exceeds the engine's max-memory-mib {max}")]
    Limits { policy: String, asked: u64, max: u64 },
    #[error("policy {policy}: compiling it {reason}")]
    Compile { policy: String, reason: String },
    #[error("policy {policy}: cannot be linked: {reason}")]
    Link { policy: String, reason: String },
    #[error("policy {policy}: configure (its settings step) failed: {reason}")]
    Init { policy: String, reason: String },
    #[error("policy {policy}: refused: the pinned sha256 is {expected}, the file's is {actual}")]
    Pin { policy: String, expected: String, actual: String },
    #[error("policy {policy}: {path} is {problem}, and [policies] strict-permissions is on")]
    Permissions { policy: String, path: String, problem: String },
    /// Pulling or verifying a policy named by reference failed; `reason`
    /// names the reference.
    #[error("policy {policy}: from registry: {reason}")]
    Registry { policy: String, reason: String },
}

impl LoadError {
    /// The name of the step that failed, for metrics and `check`.
    pub fn step(&self) -> &'static str {
        match self {
            Self::Read { .. } | Self::NotAFile { .. } | Self::Permissions { .. } | Self::Pin { .. } => "read",
            Self::Registry { .. } => "pull",
            Self::TooLarge { .. } | Self::NotWasm { .. } | Self::CoreModule { .. } | Self::Invalid { .. } => "validate",
            Self::ForbiddenImport { .. } | Self::Version { .. } | Self::World { .. } | Self::Declaration { .. } => {
                "world"
            }
            Self::Structure { .. } | Self::Limits { .. } => "limits",
            Self::Compile { .. } => "compile",
            Self::Link { .. } => "link",
            Self::Init { .. } => "configure",
        }
    }
}
