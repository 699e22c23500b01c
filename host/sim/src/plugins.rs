//! The runtime's list of plugins: several connections at once, called in
//! the runtime's order under one lock, as NRI's runtime side does
//! (containerd/nri, `pkg/adaptation/adaptation.go` and `plugin.go`).
//!
//! [`PluginConn`] drives one connection as a test says; [`Plugins`] is the
//! runtime around many of them, for what only shows with several: a plugin
//! that registers a second connection under its own name (to change its
//! subscription), a plugin that goes away while events run. Like NRI:
//! - connections are accepted in the background, one at a time: the
//!   registration is waited for, Configure sent, then, under the events'
//!   lock, Synchronize with the pods and containers the runtime has, and
//!   the plugin joins the list, sorted by index. Nothing is checked for
//!   duplicates: a second connection with a name already there joins too.
//!   Plugins of one index stay in the order they joined ([`Ties::Joined`],
//!   what Go's sort does for a list of up to 12), or the newest goes first
//!   ([`Ties::NewestFirst`], what it may do beyond);
//! - one event at a time, under one lock (the [`RuntimeLock`] a plugin's
//!   UpdateContainers takes too, so an update sent during an event is
//!   applied after it): each plugin subscribed to the event is called in
//!   turn, a container event with the container as the
//!   plugins before it left it, and the replies are folded with the
//!   reference merge (`reference.rs`), so two plugins (or two connections
//!   of one) setting the same field fail the event with a conflict;
//! - a plugin that answers with an error fails the event: no later plugin
//!   is called;
//! - a call that fails because the plugin's connection is closed, or that
//!   times out, closes the plugin and the event goes ahead without it
//!   (NRI's `isFatalError`); closed plugins leave the list after the event,
//!   not before (NRI notices a plugin gone only when it calls it);
//! - every call is in the [`Journal`]: answered, failed, or without an
//!   answer (never sent because the connection was already closed, or sent
//!   and lost), with the order of events and of joins, so a test can tell
//!   which requests were lost and what became of their events.

use std::sync::{Arc, Mutex};

use nri_wasm_api::api as pb;
use protobuf::{Message, MessageField};
use tokio::sync::watch;

use crate::node::NodeModel;
use crate::reference::{CreateResult, RefError, ReferenceRuntime};
use crate::{PluginConn, RuntimeLock, RuntimeProfile, SimError, Simulator};

/// Where a plugin joining the list goes among those of its own index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ties {
    /// After them: the order they joined in (Go's `sort.Slice` on a list of
    /// up to 12 plugins, an insertion sort).
    #[default]
    Joined,
    /// Before them (what the sort may do on a longer list).
    NewestFirst,
}

/// How one call of the runtime to a plugin went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The plugin answered.
    Answered,
    /// The plugin answered with an error (the event failed): its message.
    Failed(String),
    /// No answer: the plugin was closed and the event went ahead without
    /// it. `sent` is false when the connection was closed before the call
    /// (the request never left the runtime).
    Unanswered { sent: bool, reason: String },
}

/// One call of the runtime to a plugin.
#[derive(Debug, Clone)]
pub struct Call {
    /// The event's number (events are numbered from 1 as they start).
    pub event: u64,
    /// The event's name.
    pub name: &'static str,
    /// The connection called (numbered from 1 as accepted).
    pub conn: u64,
    /// The plugin's name as the runtime knows it (`NN-name`).
    pub plugin: String,
    pub outcome: Outcome,
}

/// A connection that joined the list.
#[derive(Debug, Clone)]
pub struct Joined {
    pub conn: u64,
    pub plugin: String,
    /// The events it subscribed to.
    pub events: i32,
    /// Events started before it joined.
    pub after_event: u64,
}

/// Everything the runtime did with its plugins.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub calls: Vec<Call>,
    pub joined: Vec<Joined>,
    /// Connections that did not join, and why.
    pub refused: Vec<String>,
    /// Events run.
    pub events: u64,
}

impl Journal {
    /// Calls that got no answer.
    pub fn unanswered(&self) -> impl Iterator<Item = &Call> {
        self.calls.iter().filter(|c| matches!(c.outcome, Outcome::Unanswered { .. }))
    }

    /// The calls of event `n`, in order.
    pub fn event(&self, n: u64) -> impl Iterator<Item = &Call> {
        self.calls.iter().filter(move |c| c.event == n)
    }
}

/// Why the runtime failed an event.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// A plugin answered with an error.
    #[error("plugin {plugin} failed {event}: {message}")]
    Failed { plugin: String, event: &'static str, code: ttrpc::Code, message: String },
    /// Two replies conflict (the reference merge's error).
    #[error(transparent)]
    Conflict(#[from] RefError),
}

/// A plugin in the list.
struct Entry {
    conn: u64,
    name: String,
    idx: String,
    plugin: PluginConn,
}

/// A plugin in the list, as a test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub conn: u64,
    pub plugin: String,
    pub events: i32,
    /// Closed, and not yet removed (at the end of the next event).
    pub closed: bool,
}

struct Inner {
    sim: Simulator,
    ties: Ties,
    /// The events' lock, held across every plugin of an event and across a
    /// joining plugin's Synchronize.
    list: tokio::sync::Mutex<Vec<Entry>>,
    /// The runtime's lock, held with `list` by every event and a joining
    /// plugin's Synchronize, and taken by every plugin's UpdateContainers.
    runtime: RuntimeLock,
    model: Mutex<NodeModel>,
    journal: Mutex<Journal>,
    /// Connections that joined so far.
    joins: watch::Sender<usize>,
    /// Registrations to refuse next, and the reason given.
    refuse: Mutex<(usize, String)>,
}

/// A runtime with its list of plugins; see the module documentation.
pub struct Plugins {
    inner: Arc<Inner>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugins").field("ties", &self.inner.ties).finish_non_exhaustive()
    }
}

impl Drop for Plugins {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl Plugins {
    /// Accepts plugins on `sim`'s socket from now on.
    pub fn serve(sim: Simulator, ties: Ties) -> Self {
        let inner = Arc::new(Inner {
            sim,
            ties,
            list: tokio::sync::Mutex::new(Vec::new()),
            runtime: RuntimeLock::default(),
            model: Mutex::default(),
            journal: Mutex::default(),
            joins: watch::Sender::new(0),
            refuse: Mutex::new((0, String::new())),
        });
        let acceptor = tokio::spawn(accept_loop(inner.clone()));
        Self { inner, acceptor }
    }

    /// Refuses the next `n` registrations with `reason` (a runtime that
    /// will not take a plugin of that name and index, say).
    pub fn refuse_registrations(&self, n: usize, reason: &str) {
        *self.inner.refuse.lock().expect("refusal lock") = (n, reason.to_string());
    }

    /// What happened so far.
    pub fn journal(&self) -> Journal {
        self.inner.journal.lock().expect("journal lock").clone()
    }

    /// Waits until `n` connections have joined in all.
    pub async fn joined(&self, n: usize) {
        let _ = self.inner.joins.subscribe().wait_for(|j| *j >= n).await;
    }

    /// The list, in the order events call it.
    pub async fn list(&self) -> Vec<Listed> {
        self.inner
            .list
            .lock()
            .await
            .iter()
            .map(|e| Listed {
                conn: e.conn,
                plugin: e.name.clone(),
                events: e.plugin.subscribed().unwrap_or(0),
                closed: e.plugin.is_closed(),
            })
            .collect()
    }

    /// Closes every plugin's connection, as a runtime that restarts.
    pub async fn close_all(&self) {
        let all = std::mem::take(&mut *self.inner.list.lock().await);
        for e in all {
            e.plugin.close().await;
        }
    }

    /// The pods and containers the runtime has (what a joining plugin is
    /// synchronised with).
    pub fn model(&self) -> NodeModel {
        self.inner.model.lock().expect("model lock").clone()
    }

    /// RunPodSandbox to every plugin subscribed; the pod is the runtime's
    /// whatever they answer.
    pub async fn run_pod_sandbox(&self, pod: &pb::PodSandbox) -> Result<(), EventError> {
        let mut list = self.inner.list.lock().await;
        let _runtime = self.inner.runtime.lock().await;
        let event = self.inner.start_event();
        self.inner.model.lock().expect("model lock").pods.insert(pod.id.clone(), pod.clone());
        let mut result = Ok(());
        for e in list.iter() {
            if !e.plugin.is_subscribed(pb::Event::RUN_POD_SANDBOX) {
                continue;
            }
            let sent = !e.plugin.is_closed();
            let r = e.plugin.run_pod_sandbox(pod).await;
            if let Err(err) = self.inner.record(event, "RunPodSandbox", e, sent, r) {
                result = Err(err);
                break;
            }
        }
        remove_closed(&mut list);
        result.map(drop)
    }

    /// CreateContainer through every plugin subscribed, each shown the
    /// container as the plugins before it left it; the merged result.
    pub async fn create_container(
        &self,
        pod: &pb::PodSandbox,
        container: &pb::Container,
    ) -> Result<CreateResult, EventError> {
        let mut list = self.inner.list.lock().await;
        let _runtime = self.inner.runtime.lock().await;
        let event = self.inner.start_event();
        let req = pb::CreateContainerRequest {
            pod: MessageField::some(pod.clone()),
            container: MessageField::some(container.clone()),
            ..Default::default()
        };
        let mut run = ReferenceRuntime::create(&req);
        let mut result = Ok(());
        for e in list.iter() {
            if !e.plugin.is_subscribed(pb::Event::CREATE_CONTAINER) {
                continue;
            }
            let sent = !e.plugin.is_closed();
            let r = e.plugin.create_container(pod, run.container()).await;
            match self.inner.record(event, "CreateContainer", e, sent, r) {
                Ok(Some(reply)) => {
                    if let Err(conflict) = run.apply(&e.name, &reply) {
                        result = Err(conflict.into());
                        break;
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        remove_closed(&mut list);
        result?;
        let created = run.result();
        let mut spec = created.spec.clone();
        spec.state = pb::ContainerState::CONTAINER_CREATED.into();
        let mut model = self.inner.model.lock().expect("model lock");
        model.containers.insert(spec.id.clone(), spec);
        model.apply_updates(&created.updates);
        Ok(created)
    }

    /// StartContainer of a created container through every plugin
    /// subscribed; it runs whatever they answer, unless one fails it.
    pub async fn start_container(&self, id: &str) -> Result<(), EventError> {
        let mut list = self.inner.list.lock().await;
        let _runtime = self.inner.runtime.lock().await;
        let event = self.inner.start_event();
        let (pod, ctr) = self.inner.container(id);
        let mut result = Ok(());
        for e in list.iter() {
            if !e.plugin.is_subscribed(pb::Event::START_CONTAINER) {
                continue;
            }
            let sent = !e.plugin.is_closed();
            let r = e.plugin.start_container(&pod, &ctr).await;
            if let Err(err) = self.inner.record(event, "StartContainer", e, sent, r) {
                result = Err(err);
                break;
            }
        }
        remove_closed(&mut list);
        result?;
        self.inner.model.lock().expect("model lock").set_state(id, pb::ContainerState::CONTAINER_RUNNING);
        Ok(())
    }
}

impl Inner {
    fn start_event(&self) -> u64 {
        let mut j = self.journal.lock().expect("journal lock");
        j.events += 1;
        j.events
    }

    fn container(&self, id: &str) -> (pb::PodSandbox, pb::Container) {
        let model = self.model.lock().expect("model lock");
        let ctr = model.containers.get(id).cloned().unwrap_or_else(|| panic!("unknown container {id}"));
        let pod = model.pods.get(&ctr.pod_sandbox_id).cloned().unwrap_or_default();
        (pod, ctr)
    }

    /// Journals a call and says what the event does next: go on with the
    /// reply, go on without the plugin (`None`), or fail.
    fn record<R>(
        &self,
        event: u64,
        name: &'static str,
        e: &Entry,
        sent: bool,
        result: Result<R, SimError>,
    ) -> Result<Option<R>, EventError> {
        let (outcome, next) = match result {
            Ok(reply) => (Outcome::Answered, Ok(Some(reply))),
            Err(SimError::Failed { status, .. }) => {
                let err = EventError::Failed {
                    plugin: e.name.clone(),
                    event: name,
                    code: status.code(),
                    message: status.message().to_string(),
                };
                (Outcome::Failed(status.message().to_string()), Err(err))
            }
            // Closed or timed out: NRI closes the plugin and goes on.
            Err(other) => (Outcome::Unanswered { sent, reason: other.to_string() }, Ok(None)),
        };
        self.journal.lock().expect("journal lock").calls.push(Call {
            event,
            name,
            conn: e.conn,
            plugin: e.name.clone(),
            outcome,
        });
        next
    }
}

/// NRI's `removeClosedPlugins`, at the end of every event.
fn remove_closed(list: &mut Vec<Entry>) {
    let (closed, open): (Vec<Entry>, Vec<Entry>) = std::mem::take(list).into_iter().partition(|e| e.plugin.is_closed());
    *list = open;
    for e in closed {
        tokio::spawn(e.plugin.close());
    }
}

/// The most bytes of pods and containers one Synchronize message carries
/// here (ttrpc's limit is 4 MiB).
const SYNC_MESSAGE: usize = 3 << 20;

/// Accepts one connection after the other (NRI's
/// `acceptPluginConnections`): registration, Configure, then Synchronize
/// under the events' lock, and the plugin joins.
async fn accept_loop(inner: Arc<Inner>) {
    let mut conns = 0u64;
    loop {
        let socket = match inner.sim.listener.accept().await {
            Ok((socket, _)) => socket,
            Err(e) => {
                inner.journal.lock().expect("journal lock").refused.push(format!("accept: {e}"));
                return;
            }
        };
        conns += 1;
        let mut profile = inner.sim.profile().clone();
        {
            let mut refuse = inner.refuse.lock().expect("refusal lock");
            if refuse.0 > 0 {
                refuse.0 -= 1;
                profile.refuse_registration = Some(refuse.1.clone());
            }
        }
        if let Err(why) = join(&inner, conns, socket, profile).await {
            inner.journal.lock().expect("journal lock").refused.push(format!("connection {conns}: {why}"));
        }
    }
}

async fn join(
    inner: &Inner,
    conn: u64,
    socket: tokio::net::UnixStream,
    profile: RuntimeProfile,
) -> Result<(), SimError> {
    let mut plugin = PluginConn::establish_under(socket, profile, inner.runtime.clone()).await?;
    plugin.configure().await?;
    let reg = plugin.registration().clone();
    let mut list = inner.list.lock().await;
    let runtime = inner.runtime.lock().await;
    let (pods, containers) = {
        let model = inner.model.lock().expect("model lock");
        (model.pods.values().cloned().collect::<Vec<_>>(), model.containers.values().cloned().collect::<Vec<_>>())
    };
    // Split as NRI splits a Synchronize too large for one message.
    let size = pb::SynchronizeRequest { pods: pods.clone(), containers: containers.clone(), ..Default::default() }
        .compute_size() as usize;
    let chunk = match size > SYNC_MESSAGE {
        true => (containers.len() * SYNC_MESSAGE / size).max(8),
        false => 0,
    };
    let updates = plugin.synchronize(&pods, &containers, chunk).await?;
    inner.model.lock().expect("model lock").apply_updates(&updates);
    let events = plugin.subscribed().unwrap_or(0);
    let entry = Entry { conn, name: format!("{}-{}", reg.plugin_idx, reg.plugin_name), idx: reg.plugin_idx, plugin };
    let at = match inner.ties {
        Ties::Joined => list.iter().position(|e| e.idx > entry.idx),
        Ties::NewestFirst => list.iter().position(|e| e.idx >= entry.idx),
    }
    .unwrap_or(list.len());
    let name = entry.name.clone();
    list.insert(at, entry);
    let mut journal = inner.journal.lock().expect("journal lock");
    let after_event = journal.events;
    journal.joined.push(Joined { conn, plugin: name, events, after_event });
    drop(journal);
    drop((runtime, list));
    inner.joins.send_modify(|n| *n += 1);
    Ok(())
}
