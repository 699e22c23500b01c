//! The demo's report: what each policy did on each event, what the runtime
//! received, how long it took, and a summary per policy; as text (coloured
//! on a terminal) or one JSON object per event. With the built-in policies
//! it also judges each pod against what its scenario expects.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use nri_sim::PluginConn;
use nri_wasm_api::api as pb;
use serde_json::json;

use super::describe;
use super::scenario::{Expect, Scenario};
use super::NOT_A_POLICY;
use crate::cli::steps::SeenStep;
use crate::policy::chain::Outcome;
use crate::policy::reload::ReloadReport;

/// Terminal styles, or nothing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Style {
    pub(super) on: bool,
}

impl Style {
    pub(super) fn paint(&self, code: &str, text: &str) -> String {
        match self.on {
            true => format!("\x1b[{code}m{text}\x1b[0m"),
            false => text.to_string(),
        }
    }
    pub(super) fn bold(&self, t: &str) -> String {
        self.paint("1", t)
    }
    pub(super) fn dim(&self, t: &str) -> String {
        self.paint("2", t)
    }
    pub(super) fn green(&self, t: &str) -> String {
        self.paint("32", t)
    }
    pub(super) fn red(&self, t: &str) -> String {
        self.paint("31", t)
    }
    pub(super) fn yellow(&self, t: &str) -> String {
        self.paint("33", t)
    }
    pub(super) fn cyan(&self, t: &str) -> String {
        self.paint("36", t)
    }
}

/// Per policy, for the summary.
#[derive(Debug, Default, Clone)]
pub(super) struct Tally {
    pub(super) calls: u64,
    pub(super) changed: u64,
    pub(super) denied: u64,
    pub(super) failed: u64,
    pub(super) time: Duration,
    pub(super) fuel: u64,
}

/// Where the report goes, and what it has counted.
pub(super) struct Report<'a> {
    pub(super) out: &'a mut dyn Write,
    pub(super) json: bool,
    pub(super) style: Style,
    pub(super) names: HashMap<String, String>,
    pub(super) tallies: BTreeMap<String, Tally>,
    pub(super) events: u64,
    pub(super) created: u64,
    pub(super) refused: u64,
    pub(super) event_times: Vec<Duration>,
    pub(super) mismatches: Vec<String>,
    /// Policies of `--policies` that did not load, and problems of the
    /// directory (a file not named as a policy, a settings file alone): the
    /// demo fails when any is there, or when no policy loaded.
    pub(super) left_out: Vec<String>,
    /// Policies that loaded.
    pub(super) loaded: usize,
    /// The built-in examples run, whose pods are judged.
    pub(super) judged: bool,
}

impl Report<'_> {
    /// Whether the demo did what it says: with the examples, every pod as
    /// its scenario describes; with policies of your own, every one of them
    /// loaded (and there was one).
    pub(super) fn succeeded(&self) -> bool {
        match self.judged {
            true => self.mismatches.is_empty(),
            false => self.loaded > 0 && self.left_out.is_empty(),
        }
    }
}

/// One event as the runtime saw it.
pub(super) struct EventResult<'r> {
    pub(super) event: &'static str,
    pub(super) target: String,
    pub(super) elapsed: Duration,
    /// The plugin's answer: `None` for an event with no reply.
    pub(super) reply: Option<&'r pb::CreateContainerResponse>,
    pub(super) error: Option<String>,
}

impl<'a> Report<'a> {
    /// A report to `out` that has counted nothing yet.
    pub(super) fn new(out: &'a mut dyn Write, json: bool, style: Style) -> Self {
        Report {
            out,
            json,
            style,
            names: HashMap::new(),
            tallies: BTreeMap::new(),
            events: 0,
            created: 0,
            refused: 0,
            event_times: Vec::new(),
            mismatches: Vec::new(),
            left_out: Vec::new(),
            loaded: 0,
            judged: true,
        }
    }
    pub(super) fn loaded(&mut self, dir: &Path, builtin: bool, r: &ReloadReport, took: Duration) -> anyhow::Result<()> {
        self.loaded = r.added.len();
        self.judged = builtin;
        if !builtin {
            self.left_out = r.failed.iter().map(|(p, why)| format!("{p}: {why}")).chain(r.problems.clone()).collect();
        }
        if self.json {
            let line = json!({
                "kind": "loaded",
                "dir": dir.display().to_string(),
                "builtin": builtin,
                "loaded": r.added,
                "failed": r.failed.iter().map(|(p, why)| json!({"policy": p, "reason": why})).collect::<Vec<_>>(),
                "problems": r.problems,
                "elapsed_ms": millis(took),
            });
            return Ok(writeln!(self.out, "{line}")?);
        }
        let s = self.style;
        let from = if builtin { "the built-in example policies" } else { "policies" };
        writeln!(self.out, "{} {from} from {}", s.bold("nri-wasm demo:"), dir.display())?;
        writeln!(self.out, "  {} policies loaded in {:.0} ms:", r.added.len(), millis(took))?;
        for p in &r.added {
            writeln!(self.out, "    {} {p}", s.green("✓"))?;
        }
        for (p, why) in &r.failed {
            writeln!(self.out, "    {} {p}: {}", s.red("✗"), s.red(why))?;
        }
        for why in &r.problems {
            writeln!(self.out, "    {} {}", s.yellow("!"), s.yellow(why))?;
        }
        if builtin && r.failed.iter().any(|(p, _)| NOT_A_POLICY.starts_with(p.as_str())) {
            writeln!(
                self.out,
                "    {}",
                s.dim("(a file that is not a policy is refused; the others are not affected)")
            )?;
        }
        Ok(())
    }

    pub(super) fn connected(&mut self, conn: &PluginConn, events: i32) -> anyhow::Result<()> {
        let reg = conn.registration();
        let names: Vec<&str> = (0..16)
            .filter(|b| events & (1 << b) != 0)
            .filter_map(|b| <pb::Event as protobuf::Enum>::from_i32(b + 1))
            .map(nri_sim::event_name)
            .collect();
        if self.json {
            let line = json!({
                "kind": "registered",
                "plugin": format!("{}-{}", reg.plugin_idx, reg.plugin_name),
                "events": names,
            });
            return Ok(writeln!(self.out, "{line}")?);
        }
        let s = self.style;
        writeln!(self.out)?;
        writeln!(
            self.out,
            "{} registered as {}-{}, subscribed to {}",
            s.bold("runtime (simulated containerd 2.3.4):"),
            reg.plugin_idx,
            reg.plugin_name,
            names.join(", ")
        )?;
        Ok(())
    }

    pub(super) fn synchronized(
        &mut self,
        pods: usize,
        containers: usize,
        reply: &pb::CreateContainerResponse,
        took: Duration,
        steps: Vec<SeenStep>,
    ) -> anyhow::Result<()> {
        self.section(&format!("the node runs {pods} pods, {containers} containers"))?;
        let result =
            EventResult { event: "Synchronize", target: "node".into(), elapsed: took, reply: Some(reply), error: None };
        self.event(&result, &steps)
    }

    pub(super) fn section(&mut self, title: &str) -> anyhow::Result<()> {
        if !self.json {
            let s = self.style;
            writeln!(self.out)?;
            writeln!(self.out, "{}", s.bold(&format!("── {title}")))?;
        }
        Ok(())
    }

    pub(super) fn pod_header(&mut self, s: &Scenario) -> anyhow::Result<()> {
        self.section(&format!("pod {}/{}: {}", s.pod.namespace, s.pod.name, s.shows))
    }

    /// An event no policy took part in.
    pub(super) fn quiet_event(&mut self, _event: &str, elapsed: Duration) {
        self.events += 1;
        self.event_times.push(elapsed);
    }

    pub(super) fn event(&mut self, r: &EventResult<'_>, steps: &[SeenStep]) -> anyhow::Result<()> {
        self.events += 1;
        self.event_times.push(r.elapsed);
        for seen in steps {
            let t = self.tallies.entry(seen.step.policy.clone()).or_default();
            t.calls += 1;
            t.time += seen.step.elapsed;
            t.fuel += seen.step.fuel;
            match &seen.step.outcome {
                Outcome::Changed { .. } => t.changed += 1,
                Outcome::Denied { .. } => t.denied += 1,
                Outcome::Failed { .. } | Outcome::Yielded { .. } => t.failed += 1,
                Outcome::Unchanged => {}
            }
        }
        let merged = r.reply.map(|reply| describe::reply_phrases(reply, &self.names)).unwrap_or_default();
        if self.json {
            let policies: Vec<_> = steps
                .iter()
                .map(|seen| {
                    let (outcome, detail) = self.outcome(seen);
                    json!({
                        "policy": seen.step.policy,
                        "event": seen.event,
                        "outcome": outcome,
                        "detail": detail,
                        "audit": seen.step.audit,
                        "elapsed_us": seen.step.elapsed.as_micros() as u64,
                        "fuel": seen.step.fuel,
                    })
                })
                .collect();
            let reply = r.reply.and_then(|reply| protobuf_json_mapping::print_to_string(reply).ok());
            let line = json!({
                "kind": "event",
                "event": r.event,
                "target": r.target,
                "result": if r.error.is_some() { "refused" } else { "ok" },
                "reason": r.error,
                "elapsed_us": r.elapsed.as_micros() as u64,
                "policies": policies,
                "merged": merged,
                "reply": reply.and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok()),
            });
            return Ok(writeln!(self.out, "{line}")?);
        }
        let s = self.style;
        let verdict = match &r.error {
            Some(_) => s.red("refused"),
            None if merged.is_empty() => s.dim("no change"),
            None => s.green("changed"),
        };
        writeln!(self.out, "  {:<20} {:<52} {verdict}  {}", s.cyan(r.event), r.target, s.dim(&fmt_time(r.elapsed)))?;
        let mut quiet = 0;
        for seen in steps {
            let (outcome, detail) = self.outcome(seen);
            if outcome == "unchanged" {
                quiet += 1;
                continue;
            }
            let painted = match outcome {
                "changed" => s.green(outcome),
                "denied" => s.red(outcome),
                _ => s.yellow(outcome),
            };
            let during = if seen.event != r.event { format!(" (on {})", seen.event) } else { String::new() };
            let cost = format!("{}, {} fuel", fmt_time(seen.step.elapsed), seen.step.fuel);
            writeln!(self.out, "    {:<24} {painted}{during}  {}", seen.step.policy, s.dim(&cost))?;
            for line in detail {
                writeln!(self.out, "        {line}")?;
            }
        }
        if quiet > 0 {
            let what = if quiet == 1 { "policy" } else { "policies" };
            let other = if quiet < steps.len() { " other" } else { "" };
            writeln!(self.out, "    {}", s.dim(&format!("{quiet}{other} {what} left it unchanged")))?;
        }
        if let Some(reason) = &r.error {
            writeln!(self.out, "    {} {}", s.red("runtime: refused:"), reason)?;
        } else if !merged.is_empty()
            && steps.iter().filter(|x| matches!(x.step.outcome, Outcome::Changed { .. })).count() > 1
        {
            writeln!(self.out, "    {} {}", s.bold("runtime received:"), merged.join("; "))?;
        }
        Ok(())
    }

    /// An outcome's name and its lines of detail.
    pub(super) fn outcome(&self, seen: &SeenStep) -> (&'static str, Vec<String>) {
        match &seen.step.outcome {
            Outcome::Unchanged => ("unchanged", Vec::new()),
            Outcome::Changed { change } => {
                ("changed", change.as_deref().map(|c| describe::change_phrases(c, &self.names)).unwrap_or_default())
            }
            Outcome::Denied { reason } => ("denied", vec![reason.clone()]),
            Outcome::Yielded { conflict } => ("yielded", vec![conflict.clone()]),
            Outcome::Failed { failure, ignored } => {
                let how = if *ignored { " (ignored: on-error = \"ignore\")" } else { "" };
                ("failed", vec![format!("{failure}{how}")])
            }
        }
    }

    pub(super) fn pushed(&mut self, phrases: &[String]) -> anyhow::Result<()> {
        if self.json {
            let line = json!({"kind": "update-containers", "updates": phrases});
            return Ok(writeln!(self.out, "{line}")?);
        }
        let s = self.style;
        writeln!(self.out, "  {:<20} {}", s.cyan("UpdateContainers"), s.dim("(sent by the plugin on its own)"))?;
        for p in phrases {
            writeln!(self.out, "        {p}")?;
        }
        Ok(())
    }

    /// Compares what the chain did with what the scenario says it should.
    pub(super) fn check(&mut self, s: &Scenario, r: &EventResult<'_>, steps: &[SeenStep]) {
        let short = |p: &str| p.split_once('-').map_or(p.to_string(), |(_, rest)| rest.to_string());
        let pod = format!("{}/{}", s.pod.namespace, s.pod.name);
        let Some(expect) = &s.expect else { return };
        match (expect, &r.error) {
            (Expect::Created(by), None) => {
                for want in *by {
                    let changed = steps
                        .iter()
                        .any(|x| short(&x.step.policy) == *want && matches!(x.step.outcome, Outcome::Changed { .. }));
                    if !changed {
                        self.mismatches.push(format!("{pod}: expected {want} to change the container"));
                    }
                }
            }
            (Expect::Created(_), Some(why)) => self.mismatches.push(format!("{pod}: expected created, refused: {why}")),
            (Expect::Denied(by), None) => self.mismatches.push(format!("{pod}: expected {by} to refuse it")),
            (Expect::Denied(by), Some(_)) => {
                let denied = steps
                    .iter()
                    .any(|x| short(&x.step.policy) == *by && matches!(x.step.outcome, Outcome::Denied { .. }));
                if !denied {
                    self.mismatches.push(format!("{pod}: refused, but not by {by}"));
                }
            }
            (Expect::Ungranted(by, cap), None) => {
                self.mismatches.push(format!("{pod}: expected {by}'s reply to be refused for want of {cap}"))
            }
            (Expect::Ungranted(by, cap), Some(_)) => {
                let needle = format!("capability `{cap}`");
                let refused = steps.iter().any(|x| {
                    short(&x.step.policy) == *by
                        && matches!(&x.step.outcome, Outcome::Failed { failure, .. } if failure.to_string().contains(&needle))
                });
                if !refused {
                    self.mismatches.push(format!("{pod}: refused, but not for {by}'s ungranted {cap}"));
                }
            }
        }
    }

    pub(super) fn summary(&mut self, frames: u64) -> anyhow::Result<()> {
        let mut times = self.event_times.clone();
        times.sort();
        let pct = |p: usize| times.get((times.len().saturating_sub(1)) * p / 100).copied().unwrap_or_default();
        if self.json {
            let policies: serde_json::Map<_, _> = self
                .tallies
                .iter()
                .map(|(p, t)| {
                    let v = json!({
                        "calls": t.calls, "changed": t.changed, "denied": t.denied, "failed": t.failed,
                        "mean_us": mean(t).as_micros() as u64, "fuel": t.fuel,
                    });
                    (p.clone(), v)
                })
                .collect();
            let line = json!({
                "kind": "summary",
                "events": self.events,
                "created": self.created,
                "refused": self.refused,
                "event_p50_us": pct(50).as_micros() as u64,
                "event_max_us": times.last().copied().unwrap_or_default().as_micros() as u64,
                "frames": frames,
                "policies": policies,
                "mismatches": self.mismatches,
                "judged": self.judged,
                "loaded": self.loaded,
                "left_out": self.left_out,
                "succeeded": self.succeeded(),
            });
            return Ok(writeln!(self.out, "{line}")?);
        }
        let s = self.style;
        self.section("summary")?;
        writeln!(
            self.out,
            "  {} events answered (p50 {}, slowest {}); {} containers created, {} refused",
            self.events,
            fmt_time(pct(50)),
            fmt_time(times.last().copied().unwrap_or_default()),
            self.created,
            self.refused
        )?;
        writeln!(
            self.out,
            "  {:<24} {:>6} {:>8} {:>7} {:>7} {:>10} {:>12}",
            "policy", "calls", "changed", "denied", "failed", "mean", "fuel"
        )?;
        for (p, t) in &self.tallies {
            writeln!(
                self.out,
                "  {:<24} {:>6} {:>8} {:>7} {:>7} {:>10} {:>12}",
                p,
                t.calls,
                t.changed,
                t.denied,
                t.failed,
                fmt_time(mean(t)),
                t.fuel
            )?;
        }
        writeln!(
            self.out,
            "  {}",
            s.dim(&format!("{frames} frames read and checked the way containerd's reader reads them"))
        )?;
        if !self.judged {
            // Someone else's policies: what they should do is not known
            // here, only whether they all ran.
            let last = match (self.loaded, self.left_out.len()) {
                (0, 0) => s.red("no policy found: the pods ran through an empty chain"),
                (0, n) => s.red(&format!("no policy loaded ({n} left out, listed at the top): the pods ran through an empty chain")),
                (k, 0) => s.green(&format!("the pods ran through the {k} policies given (reported, not judged: the demo knows what its own examples should do, not these)")),
                (k, n) => s.red(&format!("{k} policies loaded, {n} left out (listed at the top): the pods ran without them")),
            };
            writeln!(self.out, "  {last}")?;
        } else if self.mismatches.is_empty() {
            writeln!(self.out, "  {}", s.green("every pod was handled as its scenario describes"))?;
        } else {
            for m in &self.mismatches {
                writeln!(self.out, "  {} {m}", s.red("unexpected:"))?;
            }
        }
        Ok(())
    }
}

fn mean(t: &Tally) -> Duration {
    t.time.checked_div(t.calls.max(1) as u32).unwrap_or_default()
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn fmt_time(d: Duration) -> String {
    match d.as_micros() {
        us if us < 1000 => format!("{us} µs"),
        us => format!("{:.2} ms", us as f64 / 1e3),
    }
}
