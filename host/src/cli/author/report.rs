//! The report of `eval` and `eval --replay`: the chain, each event with
//! every policy's step and the reply, and the state after the run; as text
//! for a person or JSON for a machine.
//!
//! A step's changes arrive as the message the chain merged ([`Change`]);
//! they are shown as the SDK's test lines and, in JSON, as NRI's JSON with
//! the proto field names.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Value};

use super::session::{EventReport, Session};
use super::{describe, EXIT_FAILED, EXIT_OK, EXIT_POLICY_ERROR};
use crate::cli::steps::SeenStep;
use crate::nri::record;
use crate::policy::chain::{Change, Outcome, PolicyFailure};
use crate::policy::engine::LimitKind;
use crate::policy::spec::limits::Limits;

/// A step's changes as the SDK's lines (none when the chain kept no change).
fn change_lines(change: Option<&Change>) -> Vec<String> {
    change.map(|c| describe::lines(c.adjust(), c.update(), c.evict())).unwrap_or_default()
}

/// A step's changes as NRI's JSON with the proto field names (`null` when
/// the chain kept no change).
fn change_json(change: Option<&Change>) -> Value {
    change.map_or(Value::Null, |c| json_value(&record::to_json(c.message())))
}

fn limit_name(failure: &PolicyFailure) -> Option<&'static str> {
    let kind = match failure {
        PolicyFailure::Call(e) => e.limit()?,
        PolicyFailure::Overran { .. } => LimitKind::Time,
        _ => return None,
    };
    Some(match kind {
        LimitKind::Fuel => "fuel",
        LimitKind::Time => "time",
        LimitKind::Memory => "memory",
        LimitKind::Table => "table",
        LimitKind::Stack => "stack",
        LimitKind::Transfer => "transfer",
        LimitKind::Handles => "handles",
    })
}

/// The parsed JSON of a message printed by [`record::to_json`].
fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::String(text.to_string()))
}

fn step_json(seen: &SeenStep, limits: Option<&Limits>) -> Value {
    let step = &seen.step;
    let mut v = json!({
        "policy": step.policy,
        "event": seen.event,
        "audit": step.audit,
        "time_us": step.elapsed.as_micros() as u64,
        "fuel": step.fuel,
    });
    if let Some(l) = limits {
        v["fuel_limit"] = json!(l.fuel);
        v["timeout_ms"] = json!(l.timeout_ms);
    }
    match &step.outcome {
        Outcome::Unchanged => v["outcome"] = json!("unchanged"),
        Outcome::Changed { change } => {
            v["outcome"] = json!("changed");
            v["lines"] = json!(change_lines(change.as_deref()));
            v["changes"] = change_json(change.as_deref());
        }
        Outcome::Denied { reason } => {
            v["outcome"] = json!("denied");
            v["reason"] = json!(reason);
        }
        Outcome::Yielded { conflict } => {
            v["outcome"] = json!("yielded");
            v["conflict"] = json!(conflict);
        }
        Outcome::Failed { failure, ignored } => {
            v["outcome"] = json!("failed");
            v["error"] = json!(failure.to_string());
            v["kind"] = json!(failure.kind());
            v["limit"] = limit_name(failure).map_or(Value::Null, |l| json!(l));
            v["ignored"] = json!(ignored);
        }
    }
    v
}

/// An event report as JSON.
pub(super) fn event_json(session: &Session, report: &EventReport) -> Value {
    let mut v = json!({
        "index": report.index,
        "event": report.event,
        "target": report.target,
        "result": report.result(),
        "time_us": report.elapsed.as_micros() as u64,
        "policies": report.steps.iter().map(|s| step_json(s, session.limits_of(&s.step.policy))).collect::<Vec<_>>(),
    });
    if let Some(t) = &report.time {
        v["recorded"] = json!(t);
    }
    match &report.answer {
        Ok(reply) => {
            v["reply"] = reply.message().map_or(Value::Null, |m| json_value(&record::to_json(m)));
            v["lines"] = json!(reply.lines());
            v["error"] = Value::Null;
        }
        Err(e) => {
            v["reply"] = Value::Null;
            v["lines"] = json!([]);
            v["error"] = json!(e.to_string());
        }
    }
    v
}

/// The chain as JSON: loaded policies and those left out.
pub(super) fn chain_json(session: &Session) -> Value {
    let policies: Vec<Value> = session
        .policies
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "events": p.events,
                "synchronize": p.synchronize,
                "reads_node": p.reads_node,
                "keeps_state": p.keeps_state,
                "limits": {"fuel": p.limits.fuel, "timeout_ms": p.limits.timeout_ms, "memory_mib": p.limits.memory_mib},
                "from_cache": p.cached,
            })
        })
        .collect();
    let problems: Vec<String> = session.problems.iter().map(|p| p.to_string()).collect();
    json!({"policies": policies, "problems": problems})
}

/// The chain as text.
pub(super) fn write_chain(session: &Session, out: &mut dyn Write) {
    let _ = writeln!(out, "chain: {} loaded, {} left out", session.policies.len(), session.problems.len());
    for p in &session.policies {
        let events = if p.events.is_empty() && !p.synchronize { "no event".to_string() } else { p.events.join(", ") };
        let sync = if p.synchronize { " + Synchronize" } else { "" };
        let mut reads = Vec::new();
        if p.reads_node {
            reads.push("node view");
        }
        if p.keeps_state {
            reads.push("state");
        }
        let reads = if reads.is_empty() { String::new() } else { format!("; uses {}", reads.join(" and ")) };
        let _ = writeln!(out, "  {:<28} {events}{sync}{reads}", p.name);
    }
    for problem in &session.problems {
        let _ = writeln!(out, "  left out: {problem}");
    }
}

/// An event report as text; `brief` leaves out events no policy ran on.
pub(super) fn write_event(session: &Session, report: &EventReport, brief: bool, out: &mut dyn Write) {
    if brief && report.steps.is_empty() && report.answer.is_ok() {
        return;
    }
    let when = report.time.as_deref().map(|t| format!(" at {t}")).unwrap_or_default();
    let _ = writeln!(out, "[{}] {} of {}{when}", report.index, report.event, report.target);
    if report.steps.is_empty() {
        let _ = writeln!(out, "    no policy ran on it");
    }
    for seen in &report.steps {
        let step = &seen.step;
        let limits = session.limits_of(&step.policy);
        let (outcome, detail): (String, Vec<String>) = match &step.outcome {
            Outcome::Unchanged => ("unchanged".into(), Vec::new()),
            Outcome::Changed { change } => ("changed".into(), change_lines(change.as_deref())),
            Outcome::Denied { reason } => ("denied".into(), vec![reason.clone()]),
            Outcome::Yielded { conflict } => ("yielded".into(), vec![conflict.clone()]),
            Outcome::Failed { failure, ignored } => {
                let what = if *ignored { "failed, ignored" } else { "failed" };
                (what.into(), vec![failure.to_string()])
            }
        };
        let outcome = if step.audit { format!("{outcome} (audit: not applied)") } else { outcome };
        let on = if seen.event != report.event { format!(" on {}", seen.event) } else { String::new() };
        let time = match limits {
            Some(l) => format!("{} of {} ms", super::ms(step.elapsed), l.timeout_ms),
            None => super::ms(step.elapsed),
        };
        let fuel = match limits {
            Some(l) => format!("fuel {} of {}", super::grouped(step.fuel), super::grouped(l.fuel)),
            None => format!("fuel {}", super::grouped(step.fuel)),
        };
        let outcome = format!("{outcome}{on}");
        let _ = writeln!(out, "    {:<28} {outcome:<16} {time}, {fuel}", step.policy);
        for line in detail {
            let _ = writeln!(out, "        {line}");
        }
    }
    let took = super::ms(report.elapsed);
    match &report.answer {
        Ok(reply) => {
            let lines = reply.lines();
            let what = if lines.is_empty() { "nothing changed" } else { "changed" };
            let _ = writeln!(out, "  answer in {took}: {what}");
            for line in lines {
                let _ = writeln!(out, "        {line}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  answer in {took}: the event fails: {e}");
        }
    }
}

/// The state after the run, as text.
pub(super) fn write_state(state: &BTreeMap<String, BTreeMap<String, String>>, out: &mut dyn Write) {
    for (policy, entries) in state {
        let json = serde_json::to_string(entries).unwrap_or_default();
        let _ = writeln!(out, "state of {policy}: {json}");
    }
}

/// The exit code of a run: an event that failed at the runtime first, then
/// a policy that did not load or failed.
pub(super) fn exit_code(event_failed: bool, policy_errors: bool) -> u8 {
    match (event_failed, policy_errors) {
        (true, _) => EXIT_FAILED,
        (false, true) => EXIT_POLICY_ERROR,
        (false, false) => EXIT_OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nri_wasm_api::api as pb;
    use protobuf::MessageField;

    fn eviction(id: &str) -> pb::ContainerEviction {
        pb::ContainerEviction { container_id: id.into(), reason: "full".into(), ..Default::default() }
    }

    #[test]
    fn an_adjustment_reads_as_lines_and_proto_named_json() {
        let mut reply = pb::CreateContainerResponse::default();
        reply
            .adjust
            .mut_or_insert_default()
            .CDI_devices
            .push(pb::CDIDevice { name: "vendor.com/gpu=0".into(), ..Default::default() });
        let change = Change::from(reply);
        assert_eq!(change_lines(Some(&change)), ["cdi vendor.com/gpu=0"]);
        assert_eq!(change_json(Some(&change)), json!({"adjust": {"CDI_devices": [{"name": "vendor.com/gpu=0"}]}}));
    }

    #[test]
    fn an_update_reads_as_lines_and_proto_named_json() {
        let mut update = pb::ContainerUpdate { container_id: "c1".into(), ignore_failure: true, ..Default::default() };
        let resources = update.linux.mut_or_insert_default().resources.mut_or_insert_default();
        resources.memory.mut_or_insert_default().limit =
            MessageField::some(pb::OptionalInt64 { value: 1 << 20, ..Default::default() });
        let change = Change::from(pb::UpdateContainerResponse { update: vec![update], ..Default::default() });
        let lines = change_lines(Some(&change));
        assert!(lines.contains(&"update c1 ignore_failure=true".to_string()), "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("update c1 resources") && l.contains("1048576")), "{lines:?}");
        let json = change_json(Some(&change));
        assert_eq!(json["update"][0]["container_id"], "c1", "{json}");
        assert_eq!(json["update"][0]["ignore_failure"], true, "{json}");
    }

    #[test]
    fn an_eviction_reads_as_lines_and_proto_named_json() {
        let change = Change::from(pb::UpdateContainersRequest { evict: vec![eviction("c2")], ..Default::default() });
        assert_eq!(change_lines(Some(&change)), ["evict c2 reason=full"]);
        assert_eq!(change_json(Some(&change)), json!({"evict": [{"container_id": "c2", "reason": "full"}]}));
    }

    #[test]
    fn a_reply_that_changes_nothing_has_no_lines() {
        let empty = Change::from(pb::CreateContainerResponse {
            adjust: MessageField::some(Default::default()),
            ..Default::default()
        });
        assert!(change_lines(Some(&empty)).is_empty());
        assert_eq!(change_json(Some(&empty)), json!({"adjust": {}}));
        // A chain that kept nothing (it was not asked to explain).
        assert!(change_lines(None).is_empty());
        assert_eq!(change_json(None), Value::Null);
    }
}
