//! Why a policy could not be loaded: one variant per step, each naming the
//! policy (and the file or limit), so `check`, the logs and the status page
//! say which step to fix. Every message is one line; guest-supplied parts go
//! through `crate::text`.

use crate::policy::spec::declared::DeclarationError;

/// The `nri-wasm:policy` package versions this host loads: `0.3.x`.
pub const WIT_VERSION: &str = "0.3";

/// Loading one policy failed; each variant names the step that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The policy file could not be opened or read.
    #[error("policy {policy}: cannot read {path}: {reason}")]
    Read {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The file's path.
        path: String,
        /// The error opening or reading it.
        reason: String,
    },
    /// The policy's path is not a regular file.
    #[error("policy {policy}: {path} is {what}, not a policy file")]
    NotAFile {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The path of the policy file.
        path: String,
        /// What kind of file it is instead (a directory, a FIFO, ...).
        what: String,
    },
    /// The file is larger than `[engine] max-component-mib` allows.
    #[error(
        "policy {policy}: {size} bytes is more than the {limit} bytes a policy may have ([engine] max-component-mib)"
    )]
    TooLarge {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The file's size in bytes.
        size: u64,
        /// The most bytes a policy file may have.
        limit: u64,
    },
    /// The file is neither a WebAssembly binary nor WebAssembly text.
    #[error("policy {policy}: not a WebAssembly file ({reason})")]
    NotWasm {
        /// The policy's name (`NN-name`).
        policy: String,
        /// What gave it away (no `\0asm` header, an empty file, ...).
        reason: String,
    },
    /// The file is a core WebAssembly module, not a component.
    #[error("policy {policy}: a core WebAssembly module, not a component: build it for wasm32-wasip2 or turn it into a component (`wasm-tools component new`)")]
    CoreModule {
        /// The policy's name (`NN-name`).
        policy: String,
    },
    /// The component does not validate, or its custom sections are malformed.
    #[error("policy {policy}: not a valid WebAssembly component: {reason}")]
    Invalid {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The validator's message and the byte offset, or which section is wrong.
        reason: String,
    },
    /// The component imports an interface outside the host's allowed list.
    #[error("policy {policy}: imports {import}, which the host does not provide (allowed: nri-wasm:policy/*, wasi:cli, wasi:io, wasi:clocks, wasi:random, wasi:filesystem, wasi:sockets)")]
    ForbiddenImport {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The import's name, as the component spells it.
        import: String,
    },
    /// The component imports the `nri-wasm:policy` package at a version this
    /// host does not load (see [`WIT_VERSION`]).
    #[error("policy {policy}: built against {import}, but this host loads nri-wasm:policy@{WIT_VERSION}.x: rebuild it against {WIT_VERSION} with the current SDK or WIT package")]
    Version {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The versioned import (`nri-wasm:policy/...@x.y.z`).
        import: String,
    },
    /// The component's exports do not match the `nri-wasm:policy` world.
    #[error("policy {policy}: does not implement the nri-wasm:policy world: {reason}")]
    World {
        /// The policy's name (`NN-name`).
        policy: String,
        /// What is missing or mistyped (an export, a function's signature).
        reason: String,
    },
    /// Its capability declaration (`caps.rs`) cannot be read.
    #[error("policy {policy}: capability declaration: {error}")]
    Declaration {
        /// The policy's name (`NN-name`).
        policy: String,
        /// What in the declaration could not be parsed.
        error: DeclarationError,
    },
    /// Its event declaration (`declared.rs`) cannot be read: more than one
    /// section, too large, not UTF-8, a control character, an unknown name.
    #[error("policy {policy}: event declaration ({section}): {error}", section = crate::policy::spec::declared::SECTION)]
    EventDeclaration {
        /// The policy's name (`NN-name`).
        policy: String,
        /// What is wrong with it.
        error: DeclarationError,
    },
    /// Its `configure` answered events its event declaration does not list.
    #[error("policy {policy}: configure subscribes to {undeclared}, which its event declaration ({section}) does not list: it declares {declared}; declare every event configure may answer, or answer fewer", section = crate::policy::spec::declared::SECTION)]
    Undeclared {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The events answered and not declared (WIT names, comma-separated).
        undeclared: String,
        /// What the component declares (WIT names, or `none`).
        declared: String,
    },
    /// The component creates more instances, memories or tables, or a larger
    /// memory, than the engine's pool and the policy's limits allow.
    #[error("policy {policy}: {what} ({limit})")]
    Structure {
        /// The policy's name (`NN-name`).
        policy: String,
        /// What the component needs (`it creates 3 memories`).
        what: String,
        /// The limit it exceeds, and which setting sets it.
        limit: String,
    },
    /// The policy's `memory-mib` is above the engine's `max-memory-mib`.
    #[error("policy {policy}: memory-mib {asked} exceeds the engine's max-memory-mib {max}")]
    Limits {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The policy's `memory-mib`.
        asked: u64,
        /// The engine's `max-memory-mib`.
        max: u64,
    },
    /// Compiling the component to native code failed, or gave an unusable artifact.
    #[error("policy {policy}: compiling it {reason}")]
    Compile {
        /// The policy's name (`NN-name`).
        policy: String,
        /// What went wrong, worded to follow "compiling it".
        reason: String,
    },
    /// The component's imports could not be linked to the host's functions.
    #[error("policy {policy}: cannot be linked: {reason}")]
    Link {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The linker's error, on one line.
        reason: String,
    },
    /// The policy's `configure` call failed: it rejected its settings, trapped or hit a limit.
    /// The call's error is kept whole (its kind says which limit, which
    /// trap code, or the policy's own words); the text shows its kind once,
    /// the policy being named already.
    #[error("policy {policy}: configure (its settings step) failed: {}", error.kind)]
    Init {
        /// The policy's name (`NN-name`).
        policy: String,
        /// How the call failed: the error `configure` returned
        /// ([`CallErrorKind::Init`](crate::policy::call::errors::CallErrorKind::Init)), a trap or a limit.
        error: crate::policy::call::errors::CallError,
    },
    /// The file's SHA-256 is not the one its `sha256` setting pins.
    #[error("policy {policy}: refused: the pinned sha256 is {expected}, the file's is {actual}")]
    Pin {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The pinned digest, in hex, as configured.
        expected: String,
        /// The file's digest, in lowercase hex.
        actual: String,
    },
    /// With `[policies] strict-permissions`, the file is not owned by root or is
    /// writable by others than its owner.
    #[error("policy {policy}: {path} is {problem}, and [policies] strict-permissions is on")]
    Permissions {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The file's path.
        path: String,
        /// Its owner or mode that is refused.
        problem: crate::files::Distrust,
    },
    /// Pulling or verifying a policy named by reference failed; `reason`
    /// names the reference.
    #[error("policy {policy}: from registry: {reason}")]
    Registry {
        /// The policy's name (`NN-name`).
        policy: String,
        /// What failed, naming the reference.
        reason: String,
    },
}

impl LoadError {
    /// The name of the step that failed, for metrics and `check`.
    pub fn step(&self) -> &'static str {
        match self {
            Self::Read { .. } | Self::NotAFile { .. } | Self::Permissions { .. } | Self::Pin { .. } => "read",
            Self::Registry { .. } => "pull",
            Self::TooLarge { .. } | Self::NotWasm { .. } | Self::CoreModule { .. } | Self::Invalid { .. } => "validate",
            Self::ForbiddenImport { .. }
            | Self::Version { .. }
            | Self::World { .. }
            | Self::Declaration { .. }
            | Self::EventDeclaration { .. } => "world",
            Self::Structure { .. } | Self::Limits { .. } => "limits",
            Self::Compile { .. } => "compile",
            Self::Link { .. } => "link",
            Self::Init { .. } | Self::Undeclared { .. } => "configure",
        }
    }
}
