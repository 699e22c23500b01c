//! Why a call gave no answer: the policy, the event and what went wrong
//! (the limit it hit, the trap, the refused capability).
//!
//! Every message is one line: wasmtime's own errors carry a multi-line wasm
//! backtrace (with function names a guest chooses), which is left out
//! (`crate::text::one_line`), and every guest-supplied part is clipped.

use wasmtime::Trap;

/// Wasmtime's trap codes, as a failed call keeps them.
pub use wasmtime::Trap as TrapCode;

use super::limiter::Refusal;
use super::meter::Cut;
use crate::policy::spec::limits::Limits;
use crate::text::one_line;

/// Which limit cut a call off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// The policy's fuel (`fuel`).
    Fuel,
    /// Its time (`timeout-ms`: the time it used, `meter.rs`), or the
    /// wall-clock time the chain's budget left it.
    Time,
    /// Its linear memory (`memory-mib`).
    Memory,
    /// Its table elements (`table-elements`).
    Table,
    /// The engine's stack.
    Stack,
    /// The bytes one call may hand the host at once.
    Transfer,
    /// The resource handles one call may hold at once.
    Handles,
}

/// A call that did not produce an answer: which policy, on which event,
/// and what went wrong. Shown as `policy P on E: <kind>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy {policy} on {event}: {kind}")]
pub struct CallError {
    /// The policy's name (`NN-name`).
    pub policy: String,
    /// The event (`CreateContainer`), or `configure` at load.
    pub event: String,
    /// What went wrong.
    pub kind: CallErrorKind,
}

/// What went wrong in a call: the limit it hit, the trap, the refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallErrorKind {
    /// The call used up its fuel.
    #[error("fuel limit of {limit} exhausted")]
    OutOfFuel {
        /// The policy's fuel limit.
        limit: u64,
    },
    /// `limit_ms` is the limit the call had; when the chain's budget cut
    /// the policy's own `timeout-ms`, `configured_ms` says so. `host_call`
    /// names the host function (`node.containers`) that was working for
    /// the policy when the deadline came, if one was: the time went to the
    /// host's work on the policy's request, not to the guest's own code.
    ///
    /// `wall` says that the wall-clock time the chain's budget left the
    /// call ran out (`limit_ms` is that time) before the policy had used
    /// its own limit: on a busy node, or when the budget left it less.
    #[error("{}", timeout_text(*limit_ms, *configured_ms, *host_call, *wall))]
    Timeout {
        /// The limit that ended the call, in milliseconds.
        limit_ms: u64,
        /// The policy's own `timeout-ms`.
        configured_ms: u64,
        /// The host function that was running at the deadline, if any.
        host_call: Option<&'static str>,
        /// Whether the chain's wall-clock budget, not the policy's own
        /// time, ended it.
        wall: bool,
    },
    /// The policy tried to grow its memory past its `memory-mib`.
    #[error("memory limit of {limit_mib} MiB exceeded")]
    MemoryLimit {
        /// The policy's `memory-mib`.
        limit_mib: u64,
    },
    /// The policy tried to grow a table past its `table-elements`.
    #[error("table limit of {limit} elements exceeded")]
    TableLimit {
        /// The policy's `table-elements`.
        limit: usize,
    },
    /// The policy overflowed the engine's stack.
    #[error("stack overflow")]
    StackOverflow,
    /// The policy handed the host more bytes in one call than a transfer may carry.
    #[error("handed the host more than the {limit} bytes one transfer may carry")]
    Transfer {
        /// The most bytes one transfer may carry.
        limit: usize,
    },
    /// The policy held more resource handles (pollables, streams) at once
    /// than a call may.
    #[error("held more than {limit} resource handles at once")]
    Handles {
        /// The most handles a call may hold at once.
        limit: usize,
    },
    /// The policy called `exit`.
    #[error("called exit({code})")]
    Exit {
        /// The exit status it gave.
        code: i32,
    },
    /// The policy trapped, or the call failed in a way no limit explains.
    #[error("trapped: {trap}")]
    Trap {
        /// Wasmtime's trap code, when the guest trapped (`unreachable`, an
        /// access out of bounds, an integer divided by zero...); `None`
        /// for a failure that is not a trap (a host function's error).
        code: Option<Trap>,
        /// The error, on one line, followed by the end of the policy's stderr
        /// when it wrote any.
        trap: String,
    },
    /// The policy's `configure` returned an error for its settings.
    #[error("configure rejected its settings: {reason}")]
    Init {
        /// The error it returned, made safe to show.
        reason: String,
    },
    /// The policy asked a host function for an answer larger than a
    /// transfer may carry (the whole node view, grown large).
    #[error("asked host call {function} for more than the {limit} bytes one transfer may carry")]
    Answer {
        /// The host function (`node.containers`).
        function: &'static str,
        /// The most bytes one transfer may carry.
        limit: usize,
    },
    /// The policy called a host function it has no capability for.
    #[error("called {function} without capability `{capability}` (not granted in its settings file, or not declared by the policy)")]
    Ungranted {
        /// The capability the function needs.
        capability: &'static str,
        /// The host function it called (`node.containers`).
        function: &'static str,
    },
}

fn inside(host_call: Option<&'static str>) -> String {
    host_call.map(|f| format!(" inside host call {f}")).unwrap_or_default()
}

fn timeout_text(limit_ms: u64, configured_ms: u64, host_call: Option<&'static str>, wall: bool) -> String {
    let inside = inside(host_call);
    match wall {
        true if configured_ms > limit_ms => format!(
            "time limit of {limit_ms} ms exceeded{inside} (its timeout-ms is {configured_ms}; the chain's budget left it {limit_ms})"
        ),
        true => format!(
            "the chain's budget left it {limit_ms} ms of wall-clock time, which ran out{inside} before its time limit of {configured_ms} ms (the node's CPUs were busy)"
        ),
        false => format!("time limit of {limit_ms} ms exceeded{inside}"),
    }
}

impl CallError {
    /// A failure of `policy`'s call on `event`.
    pub fn new(policy: impl Into<String>, event: impl Into<String>, kind: CallErrorKind) -> Self {
        Self { policy: policy.into(), event: event.into(), kind }
    }

    /// The limit that was hit, if the call was cut off by one.
    pub fn limit(&self) -> Option<LimitKind> {
        self.kind.limit()
    }

    /// A short name of the kind of failure, for metrics.
    pub fn label(&self) -> &'static str {
        self.kind.label()
    }
}

impl CallErrorKind {
    /// The limit that was hit, if the call was cut off by one.
    pub fn limit(&self) -> Option<LimitKind> {
        match self {
            Self::OutOfFuel { .. } => Some(LimitKind::Fuel),
            Self::Timeout { .. } => Some(LimitKind::Time),
            Self::MemoryLimit { .. } => Some(LimitKind::Memory),
            Self::TableLimit { .. } => Some(LimitKind::Table),
            Self::StackOverflow => Some(LimitKind::Stack),
            Self::Transfer { .. } | Self::Answer { .. } => Some(LimitKind::Transfer),
            Self::Handles { .. } => Some(LimitKind::Handles),
            Self::Exit { .. } | Self::Trap { .. } | Self::Init { .. } | Self::Ungranted { .. } => None,
        }
    }

    /// A short name of the kind of failure, for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::OutOfFuel { .. } => "fuel",
            Self::Timeout { .. } => "timeout",
            Self::MemoryLimit { .. } | Self::TableLimit { .. } => "memory",
            Self::StackOverflow | Self::Exit { .. } | Self::Trap { .. } => "trap",
            Self::Transfer { .. } | Self::Answer { .. } | Self::Handles { .. } => "invalid",
            Self::Init { .. } | Self::Ungranted { .. } => "invalid",
        }
    }
}

/// What a classification needs to know about the call.
#[derive(Debug)]
pub(crate) struct Attempt<'a> {
    pub policy: &'a str,
    pub event: &'a str,
    pub limits: &'a Limits,
    /// The call's time: its limit, its wall-clock deadline, what it used.
    pub time: &'a super::meter::CallClock,
    /// What the call's limiter refused.
    pub refused: Option<Refusal>,
    /// The end of what the guest wrote to stderr.
    pub stderr: Option<String>,
    /// The host function that stopped at the call's deadline, if one did.
    pub host_call: Option<&'static str>,
}

/// Turns a failed call into the limit or trap it was, from the host's own
/// records first (limiter, trap codes, exit status) and the error text last.
pub(crate) fn classify(err: &wasmtime::Error, a: &Attempt<'_>) -> CallError {
    CallError::new(a.policy, a.event, classify_kind(err, a))
}

fn classify_kind(err: &wasmtime::Error, a: &Attempt<'_>) -> CallErrorKind {
    match a.refused {
        Some(Refusal::Memory { .. }) => return CallErrorKind::MemoryLimit { limit_mib: a.limits.memory_mib },
        Some(Refusal::Table { .. }) => return CallErrorKind::TableLimit { limit: a.limits.table_elements },
        None => {}
    }
    let code = err.downcast_ref::<Trap>().copied();
    match code {
        Some(Trap::OutOfFuel) => return CallErrorKind::OutOfFuel { limit: a.limits.fuel },
        Some(Trap::Interrupt) => return timeout(a).kind,
        Some(Trap::StackOverflow) => return CallErrorKind::StackOverflow,
        _ => {}
    }
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallErrorKind::Exit { code: exit.0 };
    }
    let text = one_line(err);
    // Wasmtime's types for these two are private; their wording is pinned
    // by tests (tests/e2e/tests/hostile.rs).
    if text.contains("fuel allocated for hostcalls has been exhausted") {
        return CallErrorKind::Transfer { limit: super::store::TRANSFER_LIMIT };
    }
    if text.contains("store handle limit exceeded") {
        return CallErrorKind::Handles { limit: super::store::HANDLE_LIMIT };
    }
    let trap = match &a.stderr {
        Some(tail) => format!("{text}; stderr: {tail}"),
        None => text,
    };
    CallErrorKind::Trap { code, trap }
}

/// The call ran out of time; `a.host_call` says where.
pub(crate) fn timeout(a: &Attempt<'_>) -> CallError {
    CallError::new(
        a.policy,
        a.event,
        match a.time.cut() {
            Cut::Limit => CallErrorKind::Timeout {
                limit_ms: a.time.limit().as_millis() as u64,
                configured_ms: a.limits.timeout_ms,
                host_call: a.host_call,
                wall: false,
            },
            Cut::Wall => CallErrorKind::Timeout {
                limit_ms: a.time.wall_limit().as_millis() as u64,
                configured_ms: a.limits.timeout_ms,
                host_call: a.host_call,
                wall: true,
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(limit_ms: u64, configured_ms: u64, wall: bool) -> String {
        let kind = CallErrorKind::Timeout { limit_ms, configured_ms, host_call: None, wall };
        CallError::new("10-p", "CreateContainer", kind).to_string()
    }

    #[test]
    fn a_cut_time_limit_names_both_limits() {
        assert_eq!(
            timeout(480, 10_000, true),
            "policy 10-p on CreateContainer: time limit of 480 ms exceeded (its timeout-ms is 10000; the chain's budget left it 480)"
        );
        assert_eq!(timeout(100, 100, false), "policy 10-p on CreateContainer: time limit of 100 ms exceeded");
        // On a busy node the wall-clock time runs out first.
        assert_eq!(
            timeout(1_400, 100, true),
            "policy 10-p on CreateContainer: the chain's budget left it 1400 ms of wall-clock time, which ran out \
             before its time limit of 100 ms (the node's CPUs were busy)"
        );
    }

    #[test]
    fn a_timeout_inside_a_host_call_names_the_function() {
        let e = CallError::new(
            "10-p",
            "CreateContainer",
            CallErrorKind::Timeout {
                limit_ms: 480,
                configured_ms: 10_000,
                host_call: Some("node.containers"),
                wall: true,
            },
        );
        assert_eq!(
            e.to_string(),
            "policy 10-p on CreateContainer: time limit of 480 ms exceeded inside host call node.containers \
             (its timeout-ms is 10000; the chain's budget left it 480)"
        );
    }
}
