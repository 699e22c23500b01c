//! `nri-wasm demo`: the example policies at work on a simulated node.
//!
//! The README's first command has to show what the project does on a
//! machine with no container runtime. So the demo runs exactly what a node
//! runs: the real plugin (transport, supervisor, policy host with its
//! loader, engine, chain and merge) over a real unix socket, against the
//! project's runtime simulator playing containerd. Only the policies come
//! from the binary: the nine example components are embedded at build time
//! and written to a temporary policy directory with their `policy.toml`,
//! beside a file that is not a policy, which the loader refuses without
//! harm. `--policies DIR` runs a directory of your own instead,
//! `--config FILE` a node's engine and limits, and `--pods-file FILE` plays
//! pods of your own (CreateContainer requests as `eval --input` reads them)
//! instead of the built-in ones.
//!
//! The node already runs two system pods (the plugin learns of them in
//! Synchronize); then pods arrive one at a time, each made to trigger one
//! policy, and finally two containers are stopped and removed. For every
//! event the report says what each policy decided (changed what, denied
//! why, failed with which limit), what the runtime received, and how long
//! it took; then a summary per policy. With the built-in policies each
//! built-in pod also states what the chain should do, and the demo exits
//! non-zero when the chain did something else, so the tests run the demo as
//! shipped; someone else's policies, and pods of a file, are reported, not
//! judged: the demo cannot know what they should do.

mod describe;
mod scenario;

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nri_sim::{PluginConn, RuntimeProfile, SimError, Simulator};
use nri_wasm_api::api as pb;
use protobuf::MessageField;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use self::scenario::{Expect, Scenario};
use super::{Colour, DemoArgs, HostBuilder};
use crate::config::Config;
use crate::nri::transport::Endpoint;
use crate::nri::{ConnectOptions, PluginIdentity, Supervisor};
use crate::policy::chain::{Observer, Outcome, Step};
use crate::policy::reload::ReloadReport;

/// The built-in chain: order prefix and example name. The denying policy
/// goes first, so a refused container costs the others nothing; the
/// validator last, to see what every other policy did.
const CHAIN: &[(&str, &str)] = &[
    ("05", "deny-host-sockets"),
    ("10", "pod-metadata-env"),
    ("20", "ulimit-adjuster"),
    ("30", "device-injector"),
    ("40", "hook-injector"),
    ("50", "qos-class"),
    ("60", "exclusive-cpus"),
    ("70", "colocation-qos"),
    ("90", "adjustment-validator"),
];

/// A file in the policy directory that is not a policy: the loader reports
/// it and goes on.
const NOT_A_POLICY: &str = "95-not-a-policy.wasm";

/// What the observer saw of one policy's turn.
#[derive(Debug, Clone)]
struct Seen {
    event: String,
    step: Step,
}

/// Collects every policy step, for the report of the event that caused it.
#[derive(Debug, Default)]
struct Recorder {
    steps: Mutex<Vec<Seen>>,
}

impl Observer for Recorder {
    fn step(&self, event: &str, _target: &str, step: &Step) {
        let seen = Seen { event: event.to_string(), step: step.clone() };
        self.steps.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
    }
}

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.steps.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Terminal styles, or nothing.
#[derive(Debug, Clone, Copy)]
struct Style {
    on: bool,
}

impl Style {
    fn paint(&self, code: &str, text: &str) -> String {
        match self.on {
            true => format!("\x1b[{code}m{text}\x1b[0m"),
            false => text.to_string(),
        }
    }
    fn bold(&self, t: &str) -> String {
        self.paint("1", t)
    }
    fn dim(&self, t: &str) -> String {
        self.paint("2", t)
    }
    fn green(&self, t: &str) -> String {
        self.paint("32", t)
    }
    fn red(&self, t: &str) -> String {
        self.paint("31", t)
    }
    fn yellow(&self, t: &str) -> String {
        self.paint("33", t)
    }
    fn cyan(&self, t: &str) -> String {
        self.paint("36", t)
    }
}

/// Per policy, for the summary.
#[derive(Debug, Default, Clone)]
struct Tally {
    calls: u64,
    changed: u64,
    denied: u64,
    failed: u64,
    time: Duration,
    fuel: u64,
}

/// Where the report goes, and what it has counted.
struct Report<'a> {
    out: &'a mut dyn Write,
    json: bool,
    style: Style,
    names: HashMap<String, String>,
    tallies: BTreeMap<String, Tally>,
    events: u64,
    created: u64,
    refused: u64,
    event_times: Vec<Duration>,
    mismatches: Vec<String>,
}

/// One event as the runtime saw it.
struct EventResult<'r> {
    event: &'static str,
    target: String,
    elapsed: Duration,
    /// The plugin's answer: `None` for an event with no reply.
    reply: Option<&'r pb::CreateContainerResponse>,
    error: Option<String>,
}

/// `nri-wasm demo`.
pub async fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let style = Style {
        on: match args.colour {
            Colour::Always => true,
            Colour::Never => false,
            Colour::Auto => !args.json && stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        },
    };
    let work = WorkDir::new()?;
    let builtin = args.policies.is_none();
    let played = match &args.pods_file {
        Some(path) => Some(scenario::from_file(path)?),
        None => None,
    };
    let dir = match &args.policies {
        Some(dir) => dir.clone(),
        None => write_examples(&work.path.join("policies"))?,
    };
    // A node's configuration (engine with its compile cache, limits,
    // defaults) when given, else the defaults with a cache of the demo's
    // own; the policies are the demo's, read once, and no metrics are served.
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => {
            let mut config = Config::default();
            config.engine.cache_dir = Some(cache_dir()?);
            config
        }
    };
    config.policies.dir = Some(dir.clone());
    config.policies.watch = false;
    config.metrics.address = String::new();
    config.validate()?;

    let mut out = stdout.lock();
    let mut report = Report {
        out: &mut out,
        json: args.json,
        style,
        names: HashMap::new(),
        tallies: BTreeMap::new(),
        events: 0,
        created: 0,
        refused: 0,
        event_times: Vec::new(),
        mismatches: Vec::new(),
    };

    // The policy host, as `run` builds it, with a recorder watching.
    let recorder = Arc::new(Recorder::default());
    let loading = Instant::now();
    let host = HostBuilder::new(config).observer(recorder.clone()).build()?;
    let mut reloads = host.reloader.reloads();
    let loaded = reloads.wait_for(|(n, _)| *n >= 1).await.map(|r| r.1.clone());
    let loaded = loaded.map_err(|_| anyhow::anyhow!("the policy host stopped before loading its policies"))?;
    report.loaded(&dir, builtin, &loaded, loading.elapsed())?;
    if builtin {
        for (_, name) in CHAIN {
            if !loaded.added.iter().any(|p| p.ends_with(name)) {
                report.mismatches.push(format!("example {name} did not load"));
            }
        }
    }

    // The runtime, and the plugin connected to it.
    let socket = work.path.join("nri.sock");
    let sim = Simulator::listen(&socket, RuntimeProfile::containerd("v2.3.4", &args.nri_version)).await?;
    let stop = CancellationToken::new();
    let options = ConnectOptions {
        identity: PluginIdentity::new("nri-wasm", "10")?,
        endpoint: Endpoint::Socket(socket.clone()),
        register_timeout: Duration::from_secs(5),
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_secs(1),
    };
    let dispatcher = host.dispatcher.clone();
    let plugin =
        tokio::spawn(Supervisor::new(options, dispatcher.clone(), stop.clone()).with_link(dispatcher.link()).run());
    let mut conn = sim.accept().await?;
    let configured = conn.configure().await?;
    let model = nri_sim::node::NodeModel::shared();
    conn.attach_model(model.clone());
    report.connected(&conn, configured.events)?;
    let (pods, containers) = scenario::existing();
    for c in &containers {
        let pod = pods.iter().find(|p| p.id == c.pod_sandbox_id).expect("pod of an existing container");
        report.names.insert(c.id.clone(), format!("{}/{}/{}", pod.namespace, pod.name, c.name));
    }
    {
        let mut m = model.lock().expect("model lock");
        m.pods.extend(pods.iter().map(|p| (p.id.clone(), p.clone())));
        m.containers.extend(containers.iter().map(|c| (c.id.clone(), c.clone())));
    }
    let started = Instant::now();
    let updates = conn.synchronize(&pods, &containers, 0).await?;
    model.lock().expect("model lock").apply_updates(&updates);
    let sync_reply = pb::CreateContainerResponse { update: updates, ..Default::default() };
    report.synchronized(pods.len(), containers.len(), &sync_reply, started.elapsed(), recorder.take())?;

    // Pods arrive.
    let cpus = dispatcher.facts().node.cpus as usize;
    let mut scenarios = match played {
        Some(pods) => pods,
        None => {
            let mut s = scenario::arriving(cpus);
            s.truncate(args.pods);
            s.extend((s.len()..args.pods).map(scenario::ordinary));
            s
        }
    };
    // Only the built-in policies are judged: what someone else's chain
    // should do, the demo does not know.
    if !builtin {
        for s in &mut scenarios {
            s.expect = None;
        }
    }
    let mut running = Vec::new();
    for s in &scenarios {
        report.names.insert(s.container.id.clone(), format!("{}/{}/{}", s.pod.namespace, s.pod.name, s.container.name));
        report.pod_header(s)?;
        let mut runtime = Runtime { conn: &mut conn, model: &model, dispatcher: &dispatcher, recorder: &recorder };
        if let Some(c) = runtime.lifecycle(s, &mut report).await? {
            running.push((s, c));
        }
    }
    // Some leave.
    report.section("containers leave")?;
    for (s, c) in running.iter().filter(|(s, _)| s.removed_at_end) {
        let mut runtime = Runtime { conn: &mut conn, model: &model, dispatcher: &dispatcher, recorder: &recorder };
        runtime.stop_and_remove(&s.pod, c, &mut report).await?;
    }
    let frames = conn.frames_read();
    report.summary(frames)?;
    let ok = report.mismatches.is_empty() || !builtin;
    drop(report);
    drop(out);
    stop.cancel();
    conn.close().await;
    plugin.await??;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The simulated runtime's side of a pod's life, as containerd orders the
/// events (a runtime sends only those the plugin subscribed to).
struct Runtime<'a> {
    conn: &'a mut PluginConn,
    model: &'a nri_sim::node::SharedModel,
    dispatcher: &'a Arc<crate::policy::dispatcher::PolicyDispatcher>,
    recorder: &'a Recorder,
}

impl Runtime<'_> {
    /// RunPodSandbox, CreateContainer (+Post), StartContainer (+Post).
    /// Returns the container if it was created.
    async fn lifecycle(&mut self, s: &Scenario, report: &mut Report<'_>) -> anyhow::Result<Option<pb::Container>> {
        let pod = &s.pod;
        let target = format!("{}/{}", pod.namespace, pod.name);
        self.model.lock().expect("model lock").pods.insert(pod.id.clone(), pod.clone());
        if self.conn.is_subscribed(pb::Event::RUN_POD_SANDBOX) {
            let t = Instant::now();
            let r = self.conn.run_pod_sandbox(pod).await;
            self.notified("RunPodSandbox", &target, t, r, report).await?;
        }
        let ctarget = format!("{target}/{}", s.container.name);
        let mut container = s.container.clone();
        container.state = pb::ContainerState::CONTAINER_UNKNOWN.into();
        let (reply, error, elapsed) = if self.conn.is_subscribed(pb::Event::CREATE_CONTAINER) {
            let t = Instant::now();
            match self.conn.create_container(pod, &container).await {
                Ok(reply) => (Some(reply), None, t.elapsed()),
                Err(e) => (None, Some(refusal(&e)), t.elapsed()),
            }
        } else {
            (Some(pb::CreateContainerResponse::default()), None, Duration::ZERO)
        };
        let steps = self.recorder.take();
        let result = EventResult {
            event: "CreateContainer",
            target: ctarget.clone(),
            elapsed,
            reply: reply.as_ref(),
            error: error.clone(),
        };
        report.event(&result, &steps)?;
        report.check(s, &result, &steps);
        let Some(reply) = reply else {
            report.refused += 1;
            return Ok(None);
        };
        report.created += 1;
        let req = pb::CreateContainerRequest {
            pod: MessageField::some(pod.clone()),
            container: MessageField::some(container),
            ..Default::default()
        };
        let mut created = self.model.lock().expect("model lock").create(&req, &reply);
        self.model.lock().expect("model lock").apply_updates(&reply.update);
        if self.conn.is_subscribed(pb::Event::POST_CREATE_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.post_create_container(pod, &created).await;
            self.notified("PostCreateContainer", &ctarget, t, r, report).await?;
        }
        if self.conn.is_subscribed(pb::Event::START_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.start_container(pod, &created).await;
            self.notified("StartContainer", &ctarget, t, r, report).await?;
        }
        self.model.lock().expect("model lock").set_state(&created.id, pb::ContainerState::CONTAINER_RUNNING);
        created.state = pb::ContainerState::CONTAINER_RUNNING.into();
        if self.conn.is_subscribed(pb::Event::POST_START_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.post_start_container(pod, &created).await;
            self.notified("PostStartContainer", &ctarget, t, r, report).await?;
        }
        Ok(Some(created))
    }

    /// StopContainer (whose reply may update others), RemoveContainer.
    async fn stop_and_remove(
        &mut self,
        pod: &pb::PodSandbox,
        c: &pb::Container,
        report: &mut Report<'_>,
    ) -> anyhow::Result<()> {
        let target = format!("{}/{}/{}", pod.namespace, pod.name, c.name);
        if self.conn.is_subscribed(pb::Event::STOP_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.stop_container(pod, c).await;
            let elapsed = t.elapsed();
            let (reply, error) = match r {
                Ok(r) => (Some(pb::CreateContainerResponse { update: r.update, ..Default::default() }), None),
                Err(e) => (None, Some(refusal(&e))),
            };
            if let Some(reply) = &reply {
                self.model.lock().expect("model lock").apply_updates(&reply.update);
            }
            let steps = self.recorder.take();
            report.event(
                &EventResult { event: "StopContainer", target: target.clone(), elapsed, reply: reply.as_ref(), error },
                &steps,
            )?;
            self.pushed(report).await?;
        }
        self.model.lock().expect("model lock").set_state(&c.id, pb::ContainerState::CONTAINER_STOPPED);
        let t = Instant::now();
        let r = self.conn.remove_container(pod, c).await;
        self.model.lock().expect("model lock").containers.remove(&c.id);
        if self.conn.is_subscribed(pb::Event::REMOVE_CONTAINER) {
            self.notified("RemoveContainer", &target, t, r, report).await?;
        }
        Ok(())
    }

    /// Reports an event with no reply, then any updates the plugin pushed
    /// because of it.
    async fn notified(
        &mut self,
        event: &'static str,
        target: &str,
        started: Instant,
        result: Result<(), SimError>,
        report: &mut Report<'_>,
    ) -> anyhow::Result<()> {
        let elapsed = started.elapsed();
        let steps = self.recorder.take();
        let error = result.err().map(|e| refusal(&e));
        if !steps.is_empty() || error.is_some() {
            report.event(&EventResult { event, target: target.into(), elapsed, reply: None, error }, &steps)?;
        } else {
            report.quiet_event(event, elapsed);
        }
        self.pushed(report).await
    }

    /// UpdateContainers the plugin sent on its own (policies changing other
    /// containers on an event with no reply), once they were answered.
    async fn pushed(&mut self, report: &mut Report<'_>) -> anyhow::Result<()> {
        self.dispatcher.outbox_flushed(Duration::from_secs(2)).await;
        while let Some(req) = self.conn.next_update_request(Duration::from_millis(1)).await {
            let phrases = describe::updates(&req.update, &req.evict, &report.names);
            report.pushed(&phrases)?;
        }
        Ok(())
    }
}

/// The plugin's refusal as the runtime reports it.
fn refusal(e: &SimError) -> String {
    match e {
        SimError::Failed { status, .. } => status.message.clone(),
        other => other.to_string(),
    }
}

impl Report<'_> {
    fn loaded(&mut self, dir: &Path, builtin: bool, r: &ReloadReport, took: Duration) -> anyhow::Result<()> {
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

    fn connected(&mut self, conn: &PluginConn, events: i32) -> anyhow::Result<()> {
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

    fn synchronized(
        &mut self,
        pods: usize,
        containers: usize,
        reply: &pb::CreateContainerResponse,
        took: Duration,
        steps: Vec<Seen>,
    ) -> anyhow::Result<()> {
        self.section(&format!("the node runs {pods} pods, {containers} containers"))?;
        let result =
            EventResult { event: "Synchronize", target: "node".into(), elapsed: took, reply: Some(reply), error: None };
        self.event(&result, &steps)
    }

    fn section(&mut self, title: &str) -> anyhow::Result<()> {
        if !self.json {
            let s = self.style;
            writeln!(self.out)?;
            writeln!(self.out, "{}", s.bold(&format!("── {title}")))?;
        }
        Ok(())
    }

    fn pod_header(&mut self, s: &Scenario) -> anyhow::Result<()> {
        self.section(&format!("pod {}/{}: {}", s.pod.namespace, s.pod.name, s.shows))
    }

    /// An event no policy took part in.
    fn quiet_event(&mut self, _event: &str, elapsed: Duration) {
        self.events += 1;
        self.event_times.push(elapsed);
    }

    fn event(&mut self, r: &EventResult<'_>, steps: &[Seen]) -> anyhow::Result<()> {
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
    fn outcome(&self, seen: &Seen) -> (&'static str, Vec<String>) {
        match &seen.step.outcome {
            Outcome::Unchanged => ("unchanged", Vec::new()),
            Outcome::Changed { what } => ("changed", describe::json_reply(what, &self.names)),
            Outcome::Denied { reason } => ("denied", vec![reason.clone()]),
            Outcome::Yielded { conflict } => ("yielded", vec![conflict.clone()]),
            Outcome::Failed { failure, ignored } => {
                let how = if *ignored { " (ignored: on-error = \"ignore\")" } else { "" };
                ("failed", vec![format!("{failure}{how}")])
            }
        }
    }

    fn pushed(&mut self, phrases: &[String]) -> anyhow::Result<()> {
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
    fn check(&mut self, s: &Scenario, r: &EventResult<'_>, steps: &[Seen]) {
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

    fn summary(&mut self, frames: u64) -> anyhow::Result<()> {
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
        if self.mismatches.is_empty() {
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

/// Writes the built-in chain into `dir`: each example as `NN-name.wasm`
/// with its `policy.toml` as `NN-name.toml`, and a file that is not a
/// policy.
fn write_examples(dir: &Path) -> anyhow::Result<PathBuf> {
    use nri_wasm_components::examples;
    std::fs::create_dir_all(dir)?;
    for (prefix, name) in CHAIN {
        let (_, _, bytes) = examples::ALL
            .iter()
            .find(|(n, _, _)| n == name)
            .ok_or_else(|| anyhow::anyhow!("example {name} is not built into this binary"))?;
        std::fs::write(dir.join(format!("{prefix}-{name}.wasm")), bytes)?;
        if let Some((_, text)) = examples::POLICY_FILES.iter().find(|(n, _)| n == name) {
            let text = demo_settings(name, text)?;
            std::fs::write(dir.join(format!("{prefix}-{name}.toml")), text)?;
        }
    }
    std::fs::write(dir.join(NOT_A_POLICY), "password = \"not for your logs\"\n")?;
    Ok(dir.to_path_buf())
}

/// The grant of device-injector's `policy.toml`, and the demo's: the demo's
/// operator has not approved CDI devices, so the pod that asks for a GPU
/// shows a policy refused for a capability it declares and is not granted.
const SHIPPED_GRANT: &str = "grant = [\"devices\", \"mounts\", \"cdi-devices\"]";
const DEMO_GRANT: &str = "grant = [\"devices\", \"mounts\"] # the demo grants no cdi-devices";

/// An example's settings file as the demo installs it.
fn demo_settings(name: &str, text: &str) -> anyhow::Result<String> {
    if name != "device-injector" {
        return Ok(text.to_string());
    }
    if !text.contains(SHIPPED_GRANT) {
        anyhow::bail!("device-injector's policy.toml no longer has the line {SHIPPED_GRANT}: update the demo");
    }
    Ok(text.replace(SHIPPED_GRANT, DEMO_GRANT))
}

/// Compiled policies survive between demos: a second run loads them from
/// the cache. The directory is the user's own (the engine refuses a cache
/// others can write).
fn cache_dir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("nri-wasm-demo-cache-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(anyhow::anyhow!("cannot create the compile cache {}: {e}", dir.display())),
    }
    Ok(dir)
}

/// A private temporary directory, removed when the demo ends.
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn new() -> anyhow::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        let path = std::env::temp_dir().join(format!("nri-wasm-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
