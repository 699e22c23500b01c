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
//! judged: the demo cannot know what they should do. It knows whether they
//! ran, though: with `--policies DIR` it exits non-zero, and says so last,
//! when a policy of the directory did not load or none did.

//!
//! The files: this one runs the demo from start to end; `runtime.rs` plays
//! the runtime's side of each pod; `report.rs` says what happened (and
//! judges it against `scenario.rs`, the pods and what each should cause);
//! `describe.rs` words a reply; `workdir.rs` writes the policies and keeps
//! the demo's files.

mod describe;
mod report;
mod runtime;
mod scenario;
mod workdir;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_sim::{RuntimeProfile, Simulator};
use nri_wasm_api::api as pb;
use tokio_util::sync::CancellationToken;

use self::report::{Report, Style};
use self::runtime::Runtime;
use self::workdir::{cache_dir, write_examples, WorkDir};
use super::steps::StepLog;
use super::{Colour, DemoArgs, HostBuilder};
use crate::config::Config;
use crate::nri::transport::Endpoint;
use crate::nri::{ConnectOptions, PluginIdentity, Supervisor};

/// The built-in chain: order prefix and example name. The denying policy
/// goes first, so a refused container costs the others nothing; the
/// validator last, to see what every other policy did.
pub(super) const CHAIN: &[(&str, &str)] = &[
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
pub(super) const NOT_A_POLICY: &str = "95-not-a-policy.wasm";

/// `nri-wasm demo`.
pub(super) async fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
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
            // The demo pulls nothing; the default registry cache (root's is
            // the node's /var/cache/nri-wasm-oci) is not the demo's to make.
            config.registry.cache_dir = Some(work.path.join("registry"));
            config
        }
    };
    config.policies.dir = Some(dir.clone());
    config.policies.watch = false;
    config.metrics.address = String::new();
    config.validate()?;

    let mut out = stdout.lock();
    let mut report = Report::new(&mut out, args.json, style);

    // The policy host, as `run` builds it, with a recorder watching.
    let recorder = Arc::new(StepLog::default());
    let loading = Instant::now();
    // The state in memory: a demo run with a node's configuration never
    // writes the node's state directory.
    let states = Arc::new(crate::policy::call::state::StateStore::in_memory());
    let host = HostBuilder::new(config).observer(recorder.clone()).states(states).build()?;
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
    let ok = report.succeeded();
    drop(report);
    drop(out);
    stop.cancel();
    conn.close().await;
    plugin.await??;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
