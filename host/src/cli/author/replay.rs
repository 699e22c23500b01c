//! `nri-wasm eval --replay`: a recording of `nri-wasm run --record` through
//! a chain, in order, and what the chain would have done.
//!
//! This is how an operator tries a policy against last week's traffic
//! before deploying it. The recording is replayed as the runtime sent it:
//! `Configure` sets the runtime's facts and request timeout (so the chain's
//! time budget), `Synchronize` seeds the node view (and runs the policies
//! that reconcile on it), and every event after it runs through the same
//! dispatcher, which carries the node view and the policies' state from
//! event to event. A recording holds the events the recording host was
//! subscribed to: a policy that wants others sees only these.
//!
//! The report gives each event some policy ran on (or that failed), then a
//! summary: what the runtime would have seen (changed, unchanged, denied,
//! failed), the policies' errors, the chain's time per event as
//! percentiles, and per policy its calls, outcomes, time and fuel, which is
//! what an operator sizes `timeout-ms` and `fuel` from.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};

use super::report::{chain_json, event_json, exit_code, write_chain, write_event};
use super::session::{EvalError, EventReport, Session};
use crate::nri::record::{parse_document, Recorded};
use crate::policy::chain::Outcome;

/// Reads every line of the recordings, in order, before anything runs: a
/// recording that cannot be read is reported with its line, not half
/// replayed.
pub(super) fn read(paths: &[std::path::PathBuf]) -> Result<Vec<(usize, Recorded)>, EvalError> {
    let mut all = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::Read { path: path.clone(), source })?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let recorded = parse_document(line, None).map_err(|error| EvalError::Recording {
                path: path.clone(),
                line: n + 1,
                error,
            })?;
            all.push((n + 1, recorded));
        }
    }
    Ok(all)
}

/// The value at percentile `p` (nearest rank) of sorted `values`.
fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50, p90, p99 and max of `values`.
fn spread<T: Copy + Default + Ord>(mut values: Vec<T>) -> [T; 4] {
    values.sort_unstable();
    [percentile(&values, 50.0), percentile(&values, 90.0), percentile(&values, 99.0), percentile(&values, 100.0)]
}

/// One policy's record over the replay.
#[derive(Debug, Default)]
struct Tally {
    calls: usize,
    changed: usize,
    denied: usize,
    yielded: usize,
    failed: usize,
    times: Vec<Duration>,
    fuel: Vec<u64>,
}

/// What the replay adds up to.
#[derive(Debug, Default)]
struct Summary {
    events: usize,
    results: BTreeMap<&'static str, usize>,
    policy_errors: usize,
    /// The chain's time on events some policy ran on.
    times: Vec<Duration>,
    policies: BTreeMap<String, Tally>,
}

impl Summary {
    fn add(&mut self, report: &EventReport) {
        self.events += 1;
        *self.results.entry(report.result()).or_default() += 1;
        self.policy_errors += report.policy_errors();
        if !report.steps.is_empty() {
            self.times.push(report.elapsed);
        }
        for seen in &report.steps {
            let t = self.policies.entry(seen.step.policy.clone()).or_default();
            t.calls += 1;
            t.times.push(seen.step.elapsed);
            t.fuel.push(seen.step.fuel);
            match &seen.step.outcome {
                Outcome::Unchanged => {}
                Outcome::Changed { .. } => t.changed += 1,
                Outcome::Denied { .. } => t.denied += 1,
                Outcome::Yielded { .. } => t.yielded += 1,
                Outcome::Failed { .. } => t.failed += 1,
            }
        }
    }

    fn json(&self) -> Value {
        let us = |d: Duration| d.as_micros() as u64;
        let times = |v: &[Duration]| {
            let [p50, p90, p99, max] = spread(v.to_vec());
            json!({"p50": us(p50), "p90": us(p90), "p99": us(p99), "max": us(max)})
        };
        let policies: BTreeMap<&str, Value> = self
            .policies
            .iter()
            .map(|(name, t)| {
                let [f50, f90, f99, fmax] = spread(t.fuel.clone());
                let v = json!({
                    "calls": t.calls, "changed": t.changed, "denied": t.denied,
                    "yielded": t.yielded, "failed": t.failed,
                    "time_us": times(&t.times),
                    "fuel": {"p50": f50, "p90": f90, "p99": f99, "max": fmax},
                });
                (name.as_str(), v)
            })
            .collect();
        json!({
            "events": self.events,
            "results": self.results,
            "policy_errors": self.policy_errors,
            "time_us": times(&self.times),
            "policies": policies,
        })
    }

    fn write(&self, out: &mut dyn Write) {
        let results: Vec<String> = self.results.iter().map(|(r, n)| format!("{n} {r}")).collect();
        let _ = writeln!(
            out,
            "replayed {} events: {}; {} policy errors",
            self.events,
            if results.is_empty() { "none".to_string() } else { results.join(", ") },
            self.policy_errors
        );
        if self.times.is_empty() {
            let _ = writeln!(out, "no policy ran on any of them");
            return;
        }
        let [p50, p90, p99, max] = spread(self.times.clone());
        let _ = writeln!(
            out,
            "chain time per event ({} events some policy ran on): p50 {}, p90 {}, p99 {}, max {}",
            self.times.len(),
            super::ms(p50),
            super::ms(p90),
            super::ms(p99),
            super::ms(max)
        );
        for (name, t) in &self.policies {
            let [t50, _, t99, tmax] = spread(t.times.clone());
            let [f50, _, f99, fmax] = spread(t.fuel.clone());
            let _ = writeln!(
                out,
                "  {name:<28} {} calls: {} changed, {} denied, {} yielded, {} failed; time p50 {} p99 {} max {}; fuel p50 {} p99 {} max {}",
                t.calls,
                t.changed,
                t.denied,
                t.yielded,
                t.failed,
                super::ms(t50),
                super::ms(t99),
                super::ms(tmax),
                super::grouped(f50),
                super::grouped(f99),
                super::grouped(fmax)
            );
        }
    }
}

/// `eval --replay`: the `recorded` requests of `files` through `session`'s
/// chain, reported to `out` (JSON lines with `json`).
pub(super) fn run(
    mut session: Session,
    recorded: Vec<(usize, Recorded)>,
    files: &[std::path::PathBuf],
    json: bool,
    out: &mut dyn Write,
) -> Result<u8, EvalError> {
    if json {
        let _ = writeln!(out, "{}", chain_json(&session));
    } else {
        write_chain(&session, out);
        let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        let _ = writeln!(out, "replaying {} requests from {}", recorded.len(), files.join(", "));
    }
    let runtime = crate::cli::transport_runtime().map_err(EvalError::Runtime)?;
    let mut summary = Summary::default();
    runtime.block_on(async {
        for (line, request) in recorded {
            let report = session.run(line, request).await;
            if json {
                let _ = writeln!(out, "{}", event_json(&session, &report));
            } else {
                write_event(&session, &report, true, out);
            }
            summary.add(&report);
        }
    });
    let failed = summary.results.iter().any(|(r, n)| matches!(*r, "denied" | "failed") && *n > 0);
    let code = exit_code(failed, !session.problems.is_empty() || summary.policy_errors > 0);
    let state = session.state();
    if json {
        let _ = writeln!(out, "{}", json!({"summary": summary.json(), "state": state, "exit": code}));
    } else {
        summary.write(out);
        for (policy, entries) in &state {
            let _ = writeln!(out, "state of {policy}: {}", serde_json::to_string(entries).unwrap_or_default());
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(spread(v), [50, 90, 99, 100]);
        assert_eq!(spread(vec![7u64]), [7, 7, 7, 7]);
        assert_eq!(spread(Vec::<u64>::new()), [0, 0, 0, 0]);
        assert_eq!(spread(vec![3u64, 1, 2]), [2, 3, 3, 3]);
    }

    #[test]
    fn a_recording_is_read_whole_or_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let ok = r#"{"event":"RunPodSandbox","time":"2026-01-01T00:00:00.000000Z","request":{"pod":{"id":"p"}}}"#;
        std::fs::write(&path, format!("{ok}\n\n{ok}\n")).unwrap();
        let read_back = read(std::slice::from_ref(&path)).unwrap();
        assert_eq!(read_back.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 3]);
        std::fs::write(&path, format!("{ok}\n{{\"event\":\"RunPodSandbox\",\"request\":{{\"pod\":{{\"idd\":1}}}}}}\n"))
            .unwrap();
        let e = read(std::slice::from_ref(&path)).unwrap_err().to_string();
        assert!(e.contains("r.jsonl, line 2") && e.contains("RunPodSandbox"), "{e}");
    }
}
