//! The memory and table caps of one call, and the record of what they refused.
//!
//! Wasmtime asks a store's [`ResourceLimiter`] before a linear memory or a
//! table grows. This one refuses growth past the policy's limits by trapping
//! (a failed `memory.grow` would only make the guest's allocator abort with
//! a message of its own), and records what it refused, so that the call's
//! failure is reported as the limit it hit, from the host's own record
//! rather than from the wording of an error message.
//!
//! The counts of instances, memories and tables are fixed by a component's
//! structure; they are checked when the policy is loaded (`inspect.rs`) and
//! again here, where wasmtime applies them when instantiating.

use wasmtime::ResourceLimiter;

use crate::policy::spec::limits::Limits;

/// What a limiter refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A linear memory would have grown to `desired` bytes.
    Memory { desired: usize },
    /// A table would have grown to `desired` elements.
    Table { desired: usize },
}

/// The limiter of one call's store.
#[derive(Debug, Clone)]
pub(crate) struct CallLimiter {
    memory_bytes: usize,
    table_elements: usize,
    instances: usize,
    tables: usize,
    memories: usize,
    refused: Option<Refusal>,
}

impl CallLimiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            memory_bytes: limits.memory_bytes(),
            table_elements: limits.table_elements,
            instances: limits.instances,
            tables: limits.tables,
            memories: limits.memories,
            refused: None,
        }
    }

    /// The first growth this limiter refused, if any.
    pub(crate) fn refused(&self) -> Option<Refusal> {
        self.refused
    }
}

/// The error that traps a refused growth; its text is for humans only.
#[derive(Debug)]
struct GrowthRefused(Refusal);

impl std::fmt::Display for GrowthRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Refusal::Memory { desired } => write!(f, "linear memory may not grow to {desired} bytes"),
            Refusal::Table { desired } => write!(f, "table may not grow to {desired} elements"),
        }
    }
}

impl std::error::Error for GrowthRefused {}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            let refusal = Refusal::Memory { desired };
            self.refused.get_or_insert(refusal);
            return Err(wasmtime::Error::new(GrowthRefused(refusal)));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            let refusal = Refusal::Table { desired };
            self.refused.get_or_insert(refusal);
            return Err(wasmtime::Error::new(GrowthRefused(refusal)));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_a_limit_traps_and_is_recorded_once() {
        let limits = Limits { memory_mib: 1, table_elements: 10, ..Limits::default() };
        let mut l = CallLimiter::new(&limits);
        assert!(l.memory_growing(0, 1 << 20, None).unwrap());
        assert!(l.table_growing(0, 10, None).unwrap());
        assert_eq!(l.refused(), None);
        let err = l.memory_growing(1 << 20, 2 << 20, None).unwrap_err();
        assert!(err.to_string().contains("2097152 bytes"), "{err}");
        assert!(l.table_growing(10, 11, None).is_err());
        assert_eq!(l.refused(), Some(Refusal::Memory { desired: 2 << 20 }), "the first refusal is kept");
    }
}
