//! What a component says of itself, found by the one pass over its bytes
//! before compiling (`load/inspect.rs`): what it imports and exports, what
//! its structure creates, and what it declares in its custom sections.
//! Kept here, beside the spec, because a loaded policy carries it to every
//! place that reports on it (`nri-wasm check`, the chain's records).

use super::declared::DeclaredEvents;

/// What the pass over a component found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inspection {
    /// Every import of the component, e.g. `wasi:cli/stdout@0.2.6`.
    pub imports: Vec<String>,
    /// Every export of the component.
    pub exports: Vec<String>,
    /// The `nri-wasm:policy` version its imports name (`0.3.0`), if any.
    pub wit_version: Option<String>,
    /// How many core modules it contains, nested components' included.
    pub core_modules: usize,
    /// How many core instances it creates.
    pub core_instances: usize,
    /// How many linear memories its core instances define.
    pub memories: usize,
    /// How many tables its core instances define.
    pub tables: usize,
    /// How many functions its core modules define.
    pub functions: u64,
    /// Total size of its core modules' code sections, in bytes.
    pub code_bytes: u64,
    /// Largest initial size of a memory it defines, in bytes.
    pub largest_initial_memory: u64,
    /// Largest initial size of a table it defines, in elements.
    pub largest_initial_table: u64,
    /// The text of its capability declaration (`caps::SECTION`), if it has
    /// one: every such section of the component and its modules, joined.
    pub declaration: Option<String>,
    /// The events it declares it may subscribe to (`declared::SECTION`),
    /// if it has a declaration.
    pub events: Option<DeclaredEvents>,
}
