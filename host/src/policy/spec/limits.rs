//! Resource limits of one policy call, with defaults and per-policy overrides.
//!
//! Every call runs in a fresh store that gets these limits: fuel bounds the
//! instructions executed (deterministic, so a policy consumes the same fuel
//! for the same input), the wall-clock limit bounds time spent in host calls
//! and anything fuel does not count, and the memory, table and instance caps
//! bound what a greedy policy can take. A value here is a promise to the
//! operator: exceeding it cuts the call off and reports which limit.

use std::time::Duration;

use crate::invalid::Invalid;
use serde::Deserialize;

/// Limits of a policy call. In configuration files every field is optional
/// and falls back to the host-wide default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    /// Fuel (roughly: WebAssembly instructions) per call, `configure` included.
    pub fuel: u64,
    /// Wall-clock time per call, in milliseconds.
    pub timeout_ms: u64,
    /// Largest linear memory, in MiB.
    pub memory_mib: u64,
    /// Most table elements.
    pub table_elements: usize,
    /// Most instances a component may create (a component is several core instances).
    pub instances: usize,
    /// Most tables.
    pub tables: usize,
    /// Most linear memories.
    pub memories: usize,
    /// Most bytes (keys and values) of the policy's state, in KiB.
    pub state_kib: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: 100_000_000,
            timeout_ms: 100,
            memory_mib: 64,
            table_elements: 20_000,
            instances: 32,
            tables: 16,
            memories: 4,
            state_kib: 1024,
        }
    }
}

/// Overrides of some limits (a policy's `[limits]` table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LimitOverrides {
    /// Overrides `fuel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Overrides `timeout-ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Overrides `memory-mib`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Overrides `table-elements`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_elements: Option<usize>,
    /// Overrides `instances`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<usize>,
    /// Overrides `tables`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tables: Option<usize>,
    /// Overrides `memories`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memories: Option<usize>,
    /// Overrides `state-kib`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_kib: Option<u64>,
}

impl Limits {
    /// These limits with `o` applied on top.
    pub fn with(self, o: &LimitOverrides) -> Self {
        Self {
            fuel: o.fuel.unwrap_or(self.fuel),
            timeout_ms: o.timeout_ms.unwrap_or(self.timeout_ms),
            memory_mib: o.memory_mib.unwrap_or(self.memory_mib),
            table_elements: o.table_elements.unwrap_or(self.table_elements),
            instances: o.instances.unwrap_or(self.instances),
            tables: o.tables.unwrap_or(self.tables),
            memories: o.memories.unwrap_or(self.memories),
            state_kib: o.state_kib.unwrap_or(self.state_kib),
        }
    }

    /// The wall-clock limit of a call (`timeout-ms`).
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The most bytes the policy's state may hold (`state-kib`).
    pub fn state_bytes(&self) -> usize {
        (self.state_kib as usize).saturating_mul(1 << 10)
    }

    /// The largest linear memory, in bytes (`memory-mib`).
    pub fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize).saturating_mul(1 << 20)
    }

    /// Checks the limits make sense; `what` names their table in the error
    /// (`[policies.limits]`, or `[limits]` of a policy's settings file).
    pub fn validate(&self, what: &str) -> Result<(), Invalid> {
        let zero = [
            ("fuel", self.fuel == 0),
            ("timeout-ms", self.timeout_ms == 0),
            ("memory-mib", self.memory_mib == 0),
            ("instances", self.instances == 0),
            ("memories", self.memories == 0),
            ("state-kib", self.state_kib == 0),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, z)| *z) {
            return Err(Invalid::key(what, *name, "must be positive"));
        }
        if self.memory_mib > 4096 {
            let rule = format!("{} exceeds the 4096 MiB a 32-bit memory can use", self.memory_mib);
            return Err(Invalid::key(what, "memory-mib", rule));
        }
        if self.state_kib > 64 << 10 {
            let rule = format!("{} exceeds the 64 MiB a policy's state may hold", self.state_kib);
            return Err(Invalid::key(what, "state-kib", rule));
        }
        if self.timeout_ms > 60_000 {
            let rule = format!("{} is longer than any runtime waits", self.timeout_ms);
            return Err(Invalid::key(what, "timeout-ms", rule));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_apply_field_by_field() {
        let o = LimitOverrides { fuel: Some(5), memory_mib: Some(2), ..Default::default() };
        let l = Limits::default().with(&o);
        assert_eq!((l.fuel, l.memory_mib, l.timeout_ms), (5, 2, Limits::default().timeout_ms));
        assert_eq!(l.memory_bytes(), 2 << 20);
    }

    #[test]
    fn validation_names_the_limit() {
        let l = Limits { fuel: 0, ..Default::default() };
        let e = l.validate("policy x").unwrap_err();
        assert_eq!((e.key.as_deref(), e.to_string().as_str()), (Some("fuel"), "policy x fuel must be positive"));
        let l = Limits { memory_mib: 5000, ..Default::default() };
        assert_eq!(l.validate("p").unwrap_err().key.as_deref(), Some("memory-mib"));
        Limits::default().validate("defaults").unwrap();
    }
}
