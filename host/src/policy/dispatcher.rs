//! The policy chain behind the NRI transport: [`PolicyDispatcher`]
//! implements [`Dispatcher`].
//!
//! Handlers stay thin: each event's is generated from the table of events
//! (`nri/events.rs`) and is the same for every event but for the event's
//! own change to the node view (its `ViewChange`, written out below) around
//! a closure that runs the chain. It converts nothing itself and hands the
//! closure to `PolicyDispatcher::evaluate`, which owns the three promises
//! the chain makes to the runtime:
//! - **in time**: the chain gets a deadline of `budget-fraction` of the
//!   runtime's request timeout (from Configure); every policy call gets at
//!   most its share of what is left, and ends at its deadline whatever the
//!   guest does. An async-side timeout ([`GRACE`] past the deadline) backs
//!   this up. The deadline, grace included, always ends before the
//!   transport's backstop (the answer budget, counted from when the
//!   transport started the answer, `nri/answer.rs`): at most the backstop
//!   less [`BACKSTOP_RESERVE`], whatever the fraction, so that a late chain
//!   is this module's failure to report (on Synchronize: without updates,
//!   never an error), not a late answer the runtime drops the plugin for.
//! - **inline, bounded**: the chain runs in the task that received the
//!   event. The runtime sends one event at a time and waits for the answer,
//!   so there is nothing to run beside it, and handing the chain to another
//!   thread cost two wake-ups per event, hundreds of microseconds of the
//!   user's time on a small node. Every guest call in it ends at its
//!   deadline whatever the guest does, so the task is back in time.
//!   Policies load on the engine's own runtime, off the event path;
//! - **bounded**: at most `max-concurrent-calls` evaluations run at once
//!   (a semaphore, whose permits come back when the evaluation ends, which
//!   it does by its deadline); one waiting for a permit past its deadline
//!   is answered with every policy skipped (each policy's on-error decides).
//!
//! It also decides what the runtime sends: the events the policies
//! subscribed to (for a policy still loading, what it is expected to
//! subscribe to: its record, else its declaration, `known.rs`), and, only
//! if some policy reads the node view, the events that keep the view
//! current ([`VIEW_EVENTS`]). When a new chain changes that, the
//! supervisor registers a second connection with the new subscription,
//! which takes over from the first (`nri/handover.rs`).
//!
//! # The start-up contract
//!
//! The *start set* is the policies in the directory when the host starts.
//! What each may subscribe to is known before any is compiled: its
//! component's event declaration (`spec/declared.rs`), or the record of its
//! last load (`known.rs`; exact for these bytes and settings, so preferred,
//! narrowed by the declaration). Before registering, the host waits until
//! the subscription of each is known, at most `[runtime] start-wait-ms`
//! (3 s by default): that is at once when every component declares its
//! events or was recorded (a restart with unchanged files); only a
//! component that declares nothing and has no record is waited for, until
//! its `configure` is done. The host registers for the union of what is
//! known (plus CreateContainer for a policy of which nothing is known), so
//! the runtime never sends an event no policy may see. The policies then
//! become ready one by one: each joins the chain as soon as it is loaded,
//! whatever the others do, so a slow or hostile file holds back nothing
//! but itself. (If a policy's `configure` answers less than its
//! declaration, or one of which nothing was known needs more, the
//! subscription changes when it loads and the host reconnects once; the
//! record of that load makes the next start exact.)
//!
//! From the moment the runtime has the host registered, every event:
//! - goes through every policy of the start set that is ready;
//! - waits, at most half of the chain's budget from its arrival, for the
//!   policies still loading that would see it ([`Pending::sees`](crate::policy::chain::Pending::sees): what
//!   each is expected to subscribe to; with nothing known, CreateContainer
//!   only), except a policy an earlier event already waited for in vain.
//!   So a warm start's first events get every policy (it was compiled
//!   before and is about to be ready), and a policy compiling for minutes
//!   costs one event half a budget, not every event for minutes;
//! - then, for each policy still not ready that would see it: if the
//!   policy is mandatory (`on-error = "fail"`, enforce mode) and the event
//!   is one whose refusal keeps something from happening
//!   ([`REFUSED_WHILE_LOADING`](crate::policy::chain::REFUSED_WHILE_LOADING): RunPodSandbox, CreateContainer,
//!   StartContainer, UpdateContainer, UpdatePodSandbox), the event fails,
//!   naming the policy and "not ready yet: compiling/loading (started N ms
//!   ago)". Otherwise the event goes on without it, and the skip is logged
//!   and counted as the policy's step with outcome `skipped` ("not ready
//!   yet"): a policy in audit mode or with `on-error = "ignore"`, and for
//!   every policy StopContainer, RemoveContainer, StopPodSandbox and
//!   RemovePodSandbox (a refused teardown leaves a pod that cannot be torn
//!   down), the post-events (they report what already happened) and
//!   Synchronize (a runtime drops a plugin whose Synchronize fails).
//!
//! Nothing on the event path waits for a load beyond that share of the
//! budget: loads run on the policy runtime and compile in child processes,
//! and Configure answers at once.

use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::FutureExt as _;
use nri_wasm_api::api as pb;
use tokio::sync::{watch, Semaphore};

use crate::node::own::OwnPod;
use crate::node::view::NodeView;
use crate::nri::answer;
use crate::nri::service::DEFAULT_REQUEST_TIMEOUT;
use crate::nri::version::{EventKind, EventMask};
use crate::nri::{DispatchError, Dispatcher, RuntimeInfo, RuntimeLink};
use crate::policy::call::event::CallEvent;
use crate::policy::call::state::StateStore;
use crate::policy::chain::{
    container_target, pod_target, Chain, ChainError, Effects, EvalContext, Evaluated, Observer, Step, Waits,
    BACKSTOP_RESERVE,
};
use crate::policy::engine::{CallEnv, Facts, PolicyEngine};
use crate::policy::tally::{Tally, Uncounted};
use crate::wit::wit;

/// Extra time the answer waits for a chain past its deadline, in case the
/// chain waits in something async past it (its calls end by the deadline).
/// Part of what the chain leaves before the transport's backstop.
const GRACE: Duration = Duration::from_millis(20);
const _: () = assert!(GRACE.as_millis() < BACKSTOP_RESERVE.as_millis());
/// An event waits for policies that are not ready yet at most this share
/// of the chain's budget (1/2): the rest is left for the policies.
const READY_WAIT_DIVISOR: u32 = 2;

/// The events that keep the node view correct for policies that read it:
/// new pods, new containers with the resources they got, their start and
/// stop, resource updates, and removals.
pub const VIEW_EVENTS: [EventKind; 7] = [
    EventKind::RunPodSandbox,
    EventKind::CreateContainer,
    EventKind::StartContainer,
    EventKind::UpdateContainer,
    EventKind::StopContainer,
    EventKind::RemoveContainer,
    EventKind::RemovePodSandbox,
];

impl From<ChainError> for DispatchError {
    fn from(e: ChainError) -> Self {
        match e {
            ChainError::Denied { .. } => DispatchError::Denied(e.to_string()),
            ChainError::Failed { .. } | ChainError::Conflict { .. } => DispatchError::Internal(e.to_string()),
        }
    }
}

/// The node view, shared with the tasks that send updates.
type SharedView = Arc<Mutex<Arc<NodeView>>>;

/// Changes the view in place, or a copy of it if an evaluation still reads
/// the current one (the copy shares every entry it does not change).
fn change(view: &SharedView, f: impl FnOnce(&mut NodeView)) {
    let mut view = view.lock().unwrap_or_else(|p| p.into_inner());
    f(Arc::make_mut(&mut view));
}

/// The outbox's sender: one batch at a time, in order. A batch leaves the
/// unanswered ones only once the view has what the runtime took of it, so
/// that an evaluation always sees it in one or the other.
async fn deliver(
    mut queue: tokio::sync::mpsc::UnboundedReceiver<Outgoing>,
    link: RuntimeLink,
    view: SharedView,
    unanswered: Unanswered,
    done: Arc<watch::Sender<u64>>,
) {
    while let Some(Outgoing { seq, event, update, evict, timeout }) = queue.recv().await {
        match link.update_containers((*update).clone(), evict, timeout).await {
            Ok(failed) => {
                for f in &failed {
                    tracing::warn!(event, container = f.container_id, "runtime could not apply an update");
                }
                let ok: Vec<_> = update
                    .iter()
                    .filter(|u| !failed.iter().any(|f| f.container_id == u.container_id))
                    .cloned()
                    .collect();
                change(&view, |v| v.apply_updates(&ok));
            }
            Err(e) => tracing::error!(event, error = %e, "updates of policies not delivered"),
        }
        unanswered.lock().unwrap_or_else(|p| p.into_inner()).retain(|(s, _)| *s != seq);
        done.send_replace(seq);
    }
}

/// Runs the policy chain for every NRI event, and keeps what policies read
/// between events: the node view and their state.
pub struct PolicyDispatcher {
    engine: Arc<PolicyEngine>,
    chain: RwLock<Arc<Chain>>,
    /// Bumped whenever a new chain is installed; `true` once the first
    /// load is done.
    installed: watch::Sender<(u64, bool)>,
    facts: RwLock<Arc<Facts>>,
    /// The node as of the last event; replaced copy-on-write, so an
    /// evaluation reads a consistent snapshot without holding a lock.
    view: SharedView,
    /// The host's own pod, whose containers no policy may update or evict.
    own: OwnPod,
    states: Arc<StateStore>,
    link: RuntimeLink,
    outbox: Outbox,
    request_timeout: Mutex<Duration>,
    permits: Arc<Semaphore>,
    metrics: Arc<dyn Tally>,
    /// Told of every step; the metrics unless [`Self::with_observer`].
    observer: Arc<dyn Observer>,
    /// Keep each policy's change in its step (the demo, `eval`).
    explain: bool,
    /// The time warnings last logged, so that each is said once per
    /// chain and budget, however often the runtime configures the host.
    time_warnings: Mutex<Vec<String>>,
}

/// One batch of updates for UpdateContainers, numbered in event order.
struct Outgoing {
    seq: u64,
    event: &'static str,
    update: Arc<Vec<pb::ContainerUpdate>>,
    evict: Vec<pb::ContainerEviction>,
    timeout: Duration,
}

/// The updates of the batches queued and not answered yet, in order.
type Unanswered = Arc<Mutex<std::collections::VecDeque<(u64, Arc<Vec<pb::ContainerUpdate>>)>>>;

/// Sends UpdateContainers after the answer, in event order, one batch at a
/// time.
///
/// No event waits for them. The runtime holds one lock across every event
/// it sends a plugin and takes it for a plugin's UpdateContainers too
/// (containerd's and CRI-O's NRI glue, `internal/nri/nri.go`: `l.Lock()`
/// in each event and in `updateFromPlugin`; NRI up to v0.12.0 also takes
/// the adaptation's lock in `updateContainers`). So while the host is
/// answering an event, no update of an earlier one can be applied: one
/// sent already, or about to be, is applied after this event, and waiting
/// for it only burned the event's time. What the wait was for, that one
/// event's decisions are in place before the next is decided, holds by
/// other means: the batches reach the runtime in event order, and an
/// evaluation sees the node view with the updates of every unanswered
/// batch applied (`evaluation_view`), as the runtime will have them once it
/// applies them. The view itself (what [`PolicyDispatcher::view`] shows)
/// keeps only what the runtime took.
#[derive(Default)]
struct Outbox {
    queue: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Outgoing>>,
    queued: std::sync::atomic::AtomicU64,
    unanswered: Unanswered,
    done: Arc<watch::Sender<u64>>,
}

impl Outbox {
    /// Whether some batch is queued and not answered yet (two atomic reads).
    fn pending(&self) -> bool {
        *self.done.borrow() < self.queued.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What an evaluation is doing, for the transport's answer scope
/// (`nri/answer.rs`): described only if the backstop ends the answer. It
/// is the evaluation's observer too: it notes which policy took a step
/// last, and passes every step on.
struct EvalProgress {
    kind: &'static str,
    inner: Arc<dyn Observer>,
    /// [`EvalProgress::LOADING`], [`EvalProgress::SLOT`] or
    /// [`EvalProgress::RUNNING`].
    phase: std::sync::atomic::AtomicU8,
    chain: std::sync::OnceLock<Arc<Chain>>,
    /// The chain entry that took the last step (`usize::MAX`: none yet).
    last: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for EvalProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvalProgress").field("kind", &self.kind).finish_non_exhaustive()
    }
}

impl EvalProgress {
    const LOADING: u8 = 0;
    const SLOT: u8 = 1;
    const RUNNING: u8 = 2;

    fn new(kind: &'static str, inner: Arc<dyn Observer>) -> Self {
        Self { kind, inner, phase: Self::LOADING.into(), chain: std::sync::OnceLock::new(), last: usize::MAX.into() }
    }

    /// The policies it waited for are ready (or waited for in vain): the
    /// chain it runs is `chain`.
    fn chain_ready(&self, chain: Arc<Chain>) {
        let _ = self.chain.set(chain);
    }

    fn waiting_for_slot(&self) {
        self.phase.store(Self::SLOT, std::sync::atomic::Ordering::Relaxed);
    }

    fn running(&self) {
        self.phase.store(Self::RUNNING, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the policy of `entry` sees this event.
    fn sees(&self, entry: &crate::policy::chain::ChainEntry) -> bool {
        let events = entry.policy.events();
        match EventKind::ALL.iter().find(|k| k.name() == self.kind) {
            Some(&kind) => {
                events.contains(kind)
                    || kind == EventKind::CreateContainer && events.contains(EventKind::ValidateContainerAdjustment)
            }
            None => entry.policy.wants_synchronize(),
        }
    }
}

impl Observer for EvalProgress {
    fn step(&self, event: &str, target: &str, step: &Step) {
        if let Some(i) = self.chain.get().and_then(|c| c.entries().iter().position(|e| e.policy.name() == step.policy))
        {
            self.last.store(i, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.step(event, target, step);
    }
}

impl answer::Progress for EvalProgress {
    fn describe(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let kind = self.kind;
        let chain = match (self.phase.load(Relaxed), self.chain.get()) {
            (Self::LOADING, _) => return format!("{kind}: waiting for policies still loading"),
            (Self::SLOT, _) => return format!("{kind}: waiting for a call slot (max-concurrent-calls)"),
            (_, None) => return format!("{kind}: its policies"),
            (_, Some(chain)) => chain,
        };
        let entries = chain.entries();
        let seeing: Vec<&str> = entries.iter().filter(|e| self.sees(e)).map(|e| e.policy.name()).collect();
        let last = self.last.load(Relaxed);
        let next = entries.iter().enumerate().skip(last.wrapping_add(1)).find(|(_, e)| self.sees(e));
        let of = seeing.join(", ");
        match (entries.get(last), next) {
            (None, Some((_, e))) => format!("{kind}: policy {}, the first of {of}", e.policy.name()),
            (Some(done), Some((_, e))) => {
                format!("{kind}: policy {}, after {} (of {of})", e.policy.name(), done.policy.name())
            }
            (Some(done), None) => format!("{kind}: the host's work after policy {} (of {of})", done.policy.name()),
            (None, None) => format!("{kind}: the host's work (no policy sees it)"),
        }
    }
}

impl std::fmt::Debug for PolicyDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyDispatcher").field("policies", &self.chain().len()).finish_non_exhaustive()
    }
}

impl PolicyDispatcher {
    /// A dispatcher for `chain`; `max_concurrent` evaluations at a time;
    /// policy state in memory only (see [`Self::with_states`]). The chain
    /// counts as the first load (see [`Self::pending`] for a host that
    /// registers before its policies are loaded).
    pub fn new(engine: Arc<PolicyEngine>, chain: Chain, facts: Facts, max_concurrent: usize) -> Self {
        Self {
            engine,
            chain: RwLock::new(Arc::new(chain)),
            installed: watch::Sender::new((0, true)),
            facts: RwLock::new(Arc::new(facts)),
            view: SharedView::default(),
            own: OwnPod::default(),
            states: Arc::new(StateStore::in_memory()),
            link: RuntimeLink::default(),
            outbox: Outbox::default(),
            request_timeout: Mutex::new(DEFAULT_REQUEST_TIMEOUT),
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            metrics: Arc::new(Uncounted),
            observer: Arc::new(Uncounted),
            explain: false,
            time_warnings: Mutex::new(Vec::new()),
        }
    }

    /// Records events, policy calls and decisions in `metrics` (the
    /// host's `crate::metrics::Metrics`).
    pub fn with_metrics<M: Tally + Observer + 'static>(mut self, metrics: Arc<M>) -> Self {
        self.observer = metrics.clone();
        self.metrics = metrics;
        self
    }

    /// Tells `observer` of every step instead of the metrics (it may pass
    /// them on).
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Keeps each policy's change in the steps the observer sees.
    pub fn explaining(mut self) -> Self {
        self.explain = true;
        self
    }

    /// The first load is still under way: `chain` stands in until
    /// [`Self::replace_chain`] installs the loaded one.
    pub fn pending(self) -> Self {
        self.installed.send_replace((0, false));
        self
    }

    /// Uses `states` for the policies' state (e.g. one kept in a directory).
    pub fn with_states(mut self, states: Arc<StateStore>) -> Self {
        self.states = states;
        self
    }

    /// The host runs in the pod whose UID is `uid`: no policy may update or
    /// evict its containers (`node::own`).
    pub fn with_own_pod(mut self, uid: Option<String>) -> Self {
        self.own = OwnPod::new(uid);
        self
    }

    /// The link to the runtime this dispatcher sends UpdateContainers on;
    /// give it to the supervisor, which keeps it pointed at the connection.
    pub fn link(&self) -> RuntimeLink {
        self.link.clone()
    }

    /// The engine the dispatcher's policies run on.
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    /// The chain events are evaluated with now.
    pub fn chain(&self) -> Arc<Chain> {
        self.chain.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Swaps in a new chain; evaluations under way finish with the old one.
    /// Policy state is kept: it belongs to the policies' names. Returns
    /// whether the subscription the runtime should have changed.
    pub fn replace_chain(&self, chain: Chain) -> bool {
        self.replace_shared(Arc::new(chain))
    }

    fn replace_shared(&self, chain: Arc<Chain>) -> bool {
        let before = self.wanted_events();
        if !chain.keeps_view() {
            // Rebuilt by the Synchronize after the reconnection that a
            // chain reading it again brings.
            *self.view.lock().unwrap_or_else(|p| p.into_inner()) = Arc::default();
        }
        let ready = chain.pending().is_empty();
        *self.chain.write().unwrap_or_else(|p| p.into_inner()) = chain;
        self.warn_about_time();
        self.installed.send_modify(|(n, loaded)| {
            *n += 1;
            *loaded |= ready;
        });
        self.wanted_events() != before
    }

    /// [`Self::replace_chain`], after reading the state files of the new
    /// chain's policies off the reactor (so that no call does file I/O).
    pub async fn install(&self, chain: Chain) -> bool {
        self.install_shared(Arc::new(chain)).await
    }

    /// [`Self::install`] of a chain someone else holds too (metrics).
    pub async fn install_shared(&self, chain: Arc<Chain>) -> bool {
        // Each state file is read only up to what its policy's `state-kib`
        // can encode to.
        let names: Vec<(String, usize)> = chain
            .entries()
            .iter()
            .filter(|e| e.policy.imports().state)
            .map(|e| (e.policy.name().to_string(), e.policy.spec.limits.state_bytes()))
            .collect();
        let states = self.states.clone();
        let preload = self
            .engine
            .handle()
            .spawn_blocking(move || names.iter().for_each(|(n, limit)| states.preload_limited(n, *limit)));
        if let Err(e) = preload.await {
            tracing::error!(error = %e, "policy state not preloaded");
        }
        self.replace_shared(chain)
    }

    /// Whether the first load is done: every policy of the start set is
    /// ready or failed.
    pub fn is_loaded(&self) -> bool {
        self.installed.borrow().1
    }

    /// Resolves once the subscription of every policy is known (see
    /// [`Chain::subscription_known`]), or the first load is done.
    pub async fn subscription_known(&self) {
        let mut rx = self.installed.subscribe();
        let _ = rx.wait_for(|(_, loaded)| *loaded || self.chain().subscription_known()).await;
    }

    /// The chain for `event` once the policies it waits for are ready, or
    /// `until`, whichever comes first (see the start-up contract). A policy
    /// still loading at `until` was waited for in vain: no later event
    /// waits for it.
    async fn ready_chain(&self, event: &str, until: Instant) -> Arc<Chain> {
        let mut rx = self.installed.subscribe();
        loop {
            let chain = self.chain();
            if chain.awaited(event).next().is_none() {
                return chain;
            }
            match tokio::time::timeout_at(until.into(), rx.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return self.chain(),
                Err(_) => {
                    let chain = self.chain();
                    for pending in chain.awaited(event) {
                        pending.waited_in_vain();
                        tracing::info!(
                            policy = pending.name,
                            event,
                            loading_ms = pending.since.elapsed().as_millis() as u64,
                            "an event waited for a policy still loading in vain: later events do not wait for it"
                        );
                    }
                    return chain;
                }
            }
        }
    }

    /// Resolves once the first load is done (at once if it is).
    pub async fn loaded(&self) {
        let mut rx = self.installed.subscribe();
        let _ = rx.wait_for(|(_, loaded)| *loaded).await;
    }

    /// The facts policies are shown now.
    pub fn facts(&self) -> Arc<Facts> {
        self.facts.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The node view as of the last event.
    pub fn view(&self) -> Arc<NodeView> {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The policies' committed state.
    pub fn states(&self) -> &Arc<StateStore> {
        &self.states
    }

    /// Keeps the view only while some policy reads it. Without one the host
    /// is not subscribed to the events that remove containers and pods, so
    /// a view kept anyway would only grow, by every container ever created.
    fn change_view(&self, f: impl FnOnce(&mut NodeView)) {
        if self.chain().keeps_view() {
            change(&self.view, f)
        }
    }

    fn request_timeout(&self) -> Duration {
        *self.request_timeout.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chain's time budget for one event.
    pub fn budget(&self) -> Duration {
        self.chain().settings().budget(self.request_timeout())
    }

    /// The events the chain needs the runtime to send.
    fn wanted_events(&self) -> EventMask {
        let chain = self.chain();
        // Validation by policies runs inside CreateContainer: subscribing to
        // the runtime's validation would make the host a validator of every
        // other plugin instead.
        let mut mask = EventMask::from_bits(chain.events().bits() | chain.expected_events().bits())
            .without(EventKind::ValidateContainerAdjustment);
        if chain.wants(EventKind::CreateContainer) {
            mask = mask.with(EventKind::CreateContainer);
        }
        if chain.reads_node() {
            mask = VIEW_EVENTS.iter().fold(mask, |m, e| m.with(*e));
        }
        mask
    }

    /// Evaluates `f` against the current chain within the chain deadline,
    /// then does what the evaluation left to do: commits the policies'
    /// state and sends the updates no reply could carry.
    async fn evaluate<T, F, Fut>(&self, kind: &'static str, wants: bool, f: F) -> Result<T, DispatchError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Chain>, EvalContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Evaluated<T>, ChainError>> + Send + 'static,
    {
        let start = Instant::now();
        let result = self.evaluate_inner(kind, wants, f).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(DispatchError::Denied(_)) => "denied",
            Err(DispatchError::DeadlineExceeded(_)) => {
                self.metrics.budget_overrun();
                "deadline"
            }
            Err(_) => "failed",
        };
        self.metrics.event(kind, outcome, start.elapsed());
        result
    }

    async fn evaluate_inner<T, F, Fut>(&self, kind: &'static str, wants: bool, f: F) -> Result<T, DispatchError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Chain>, EvalContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Evaluated<T>, ChainError>> + Send + 'static,
    {
        let start = Instant::now();
        let deadline = self.deadline(start);
        let budget = deadline - start;
        // Said to the transport, so that a backstop that ends the answer
        // anyway says what was running; only inside a transport's answer.
        let progress = answer::backstop().map(|_| Arc::new(EvalProgress::new(kind, self.observer.clone())));
        if let Some(p) = &progress {
            answer::report(|| p.clone());
        }
        let chain = self.ready_chain(kind, start + budget / READY_WAIT_DIVISOR).await;
        let ready = Instant::now();
        let env = CallEnv { facts: self.facts(), view: self.evaluation_view(&chain), states: self.states.clone() };
        let observer: Arc<dyn Observer> = match &progress {
            Some(p) => p.clone(),
            None => self.observer.clone(),
        };
        // The view is complete (and may refuse updates of unknown
        // containers) only when the host subscribes to what keeps it so.
        let mut cx = EvalContext::new(self.engine.clone(), env, deadline).observed_by(observer);
        cx.explain = self.explain;
        let mut cx = if chain.reads_node() { cx.knowing_view() } else { cx };
        cx.known = self.own.guard(cx.known);
        if let Some(p) = &progress {
            p.chain_ready(chain.clone());
        }
        if !wants {
            if let Some(p) = &progress {
                p.running();
            }
            // No policy runs: only conversion and merge, cheap enough inline.
            let done = f(chain, cx).await.map_err(DispatchError::from)?;
            return Ok(self.finish(kind, done));
        }
        if let Some(p) = &progress {
            p.waiting_for_slot();
        }
        // Waiting for a permit counts against the deadline. Without one in
        // time the chain still runs: every call finds no time left and is
        // skipped, so each policy's on-error decides, without running wasm.
        let permit = tokio::time::timeout_at(deadline.into(), self.permits.clone().acquire_owned()).await.ok();
        if let Some(p) = &progress {
            p.running();
        }
        // No event waits for earlier updates (see `Outbox`).
        cx.waits = Waits { loading: ready - start, slot: ready.elapsed() };
        // Inline (see the module's documentation); a panic of the host's
        // own code fails the event, not the connection.
        let task = std::panic::AssertUnwindSafe(async move {
            let _permit = permit;
            f(chain, cx).await
        })
        .catch_unwind();
        match tokio::time::timeout_at((deadline + GRACE).into(), task).await {
            Ok(Ok(out)) => out.map(|done| self.finish(kind, done)).map_err(DispatchError::from),
            Ok(Err(_)) => Err(DispatchError::Internal(format!("{kind}: policy evaluation panicked"))),
            Err(_) => Err(DispatchError::DeadlineExceeded(budget)),
        }
    }

    /// The chain's deadline for an evaluation that starts at `start`: its
    /// budget from then, but ending, with the [`GRACE`] the answer waits past
    /// it, before the transport's backstop when a transport serves the
    /// event. The budget itself is cut to fit the answer budget
    /// ([`ChainSettings::budget`](crate::policy::chain::ChainSettings::budget));
    /// the backstop counts from when the transport started the answer,
    /// which is earlier (a Synchronize rebuilds the view in between).
    fn deadline(&self, start: Instant) -> Instant {
        let deadline = start + self.budget();
        match answer::backstop() {
            Some(backstop) => deadline.min(backstop.checked_sub(BACKSTOP_RESERVE).unwrap_or(start).max(start)),
            None => deadline,
        }
    }

    /// The node view an evaluation sees: the view, with the updates the
    /// runtime has not answered yet applied, as it will have them (see
    /// [`Outbox`]). The copy shares every entry the updates do not change.
    fn evaluation_view(&self, chain: &Chain) -> Arc<NodeView> {
        if !self.outbox.pending() || !chain.keeps_view() {
            return self.view();
        }
        // The list first, then the view: a batch answered meanwhile is in
        // the view before it leaves the list (`deliver`), so it is seen in
        // one or both (applying it twice changes nothing), never in neither.
        let unanswered = self.outbox.unanswered.lock().unwrap_or_else(|p| p.into_inner());
        let view = self.view();
        if unanswered.is_empty() {
            return view;
        }
        let mut ahead = (*view).clone();
        for (_, update) in unanswered.iter() {
            ahead.apply_updates(update);
        }
        Arc::new(ahead)
    }

    /// The event succeeded: log the steps, commit state, send updates.
    fn finish<T>(&self, kind: &'static str, done: Evaluated<T>) -> T {
        for step in &done.steps {
            tracing::debug!(event = kind, ?step, "policy step");
        }
        self.apply_effects(kind, done.effects);
        done.value
    }

    fn apply_effects(&self, kind: &'static str, effects: Effects) {
        if effects.is_empty() {
            return;
        }
        let Effects { writes, update, evict } = effects;
        for (policy, w) in writes {
            if self.states.commit(&policy, w) {
                let states = self.states.clone();
                self.engine.handle().spawn_blocking(move || {
                    if let Err(e) = states.persist(&policy) {
                        tracing::error!(error = %crate::text::chain(&e), "policy state not saved");
                    }
                });
            }
        }
        if update.is_empty() && evict.is_empty() {
            return;
        }
        self.send_updates(kind, update, evict);
    }

    /// Queues updates and evictions for UpdateContainers, sent after the
    /// event's answer; the view records the updates the runtime took.
    fn send_updates(&self, event: &'static str, update: Vec<pb::ContainerUpdate>, evict: Vec<pb::ContainerEviction>) {
        use std::sync::atomic::Ordering;
        let queue = self.outbox.queue.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let (link, view, unanswered) = (self.link.clone(), self.view.clone(), self.outbox.unanswered.clone());
            tokio::spawn(deliver(rx, link, view, unanswered, self.outbox.done.clone()));
            tx
        });
        let update = Arc::new(update);
        // Among the unanswered before it counts as queued: an evaluation
        // that finds a batch pending finds its updates.
        let mut unanswered = self.outbox.unanswered.lock().unwrap_or_else(|p| p.into_inner());
        let seq = self.outbox.queued.fetch_add(1, Ordering::SeqCst) + 1;
        unanswered.push_back((seq, update.clone()));
        drop(unanswered);
        let timeout = self.request_timeout();
        if queue.send(Outgoing { seq, event, update, evict, timeout }).is_err() {
            self.outbox.unanswered.lock().unwrap_or_else(|p| p.into_inner()).retain(|(s, _)| *s != seq);
            tracing::error!(event, "updates of policies not delivered: the sender is gone");
        }
    }

    /// Waits (at most `limit`) until every batch of UpdateContainers queued
    /// so far was answered. No event waits for this (see [`Outbox`]): it is
    /// for a test or the demo, which know the runtime is between events.
    pub async fn outbox_flushed(&self, limit: Duration) {
        let queued = self.outbox.queued.load(std::sync::atomic::Ordering::SeqCst);
        // The common case, nothing outstanding, costs two atomic reads.
        if *self.outbox.done.borrow() >= queued {
            return;
        }
        let mut done = self.outbox.done.subscribe();
        if tokio::time::timeout(limit, done.wait_for(|d| *d >= queued)).await.is_err() {
            tracing::warn!(waited_ms = limit.as_millis() as u64, "earlier updates still unanswered; evaluating anyway");
        }
    }

    /// Runs the chain for one event of the table: what the event does to
    /// the node view before the policies see it, `run` within the chain's
    /// deadline, what the event does to the view once they answered.
    async fn event<R, T, F, Fut>(&self, kind: EventKind, req: R, run: F) -> Result<T, DispatchError>
    where
        R: ViewChange<T> + Send + Sync + 'static,
        T: Send + 'static,
        F: FnOnce(Arc<Chain>, EvalContext, Arc<R>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Evaluated<T>, ChainError>> + Send + 'static,
    {
        let req = Arc::new(req);
        req.before(self);
        let wants = self.chain().wants(kind);
        let r = req.clone();
        let result = self.evaluate(kind.name(), wants, move |chain, cx| run(chain, cx, r)).await;
        req.after(self, result.as_ref());
        result
    }
}

/// What an event does to the node view, around the policies' evaluation:
/// the one part of the dispatcher's handling of an event that is the
/// event's own (the rest is generated from the event table, so a new
/// event's request without this impl does not compile). `T` is the
/// dispatcher's reply to the event. The defaults change nothing: the view is
/// changed only through [`PolicyDispatcher::change_view`], never copied for
/// nothing.
trait ViewChange<T = ()> {
    /// Before the policies run: what the runtime reports as done (a
    /// post-event), which the policies then find in the view.
    fn before(&self, _d: &PolicyDispatcher) {}

    /// Once the policies answered, with what the runtime gets.
    fn after(&self, _d: &PolicyDispatcher, _result: Result<&T, &DispatchError>) {}
}

impl ViewChange for pb::RunPodSandboxRequest {
    fn after(&self, d: &PolicyDispatcher, result: Result<&(), &DispatchError>) {
        if result.is_ok() {
            d.change_view(|v| v.pod_started(&self.pod));
        }
    }
}

impl ViewChange for pb::UpdatePodSandboxRequest {
    fn after(&self, d: &PolicyDispatcher, result: Result<&(), &DispatchError>) {
        if result.is_ok() {
            d.change_view(|v| v.pod_started(&self.pod));
        }
    }
}

impl ViewChange for pb::PostUpdatePodSandboxRequest {
    fn before(&self, d: &PolicyDispatcher) {
        d.change_view(|v| v.pod_started(&self.pod));
    }
}

/// A stopped pod stays in the view until it is removed.
impl ViewChange for pb::StopPodSandboxRequest {}

impl ViewChange for pb::RemovePodSandboxRequest {
    /// The pod is gone whatever the policies say; they see it one last time.
    fn after(&self, d: &PolicyDispatcher, _result: Result<&(), &DispatchError>) {
        d.change_view(|v| v.pod_removed(&self.pod.id));
    }
}

impl ViewChange<pb::CreateContainerResponse> for pb::CreateContainerRequest {
    fn after(&self, d: &PolicyDispatcher, result: Result<&pb::CreateContainerResponse, &DispatchError>) {
        let Ok(resp) = result else { return };
        d.own.container(&self.pod, &self.container.id, true);
        d.change_view(|v| {
            if v.pod(&self.pod.id).is_none() {
                v.pod_started(&self.pod);
            }
            v.container_created(&self.container, resp.adjust.as_ref());
            v.apply_updates(&resp.update);
        });
    }
}

impl ViewChange for pb::PostCreateContainerRequest {
    fn before(&self, d: &PolicyDispatcher) {
        d.change_view(|v| v.container_seen(&self.container));
    }
}

impl ViewChange for pb::StartContainerRequest {
    fn after(&self, d: &PolicyDispatcher, result: Result<&(), &DispatchError>) {
        if result.is_ok() {
            d.change_view(|v| v.set_state(&self.container.id, pb::ContainerState::CONTAINER_RUNNING));
        }
    }
}

impl ViewChange for pb::PostStartContainerRequest {
    fn before(&self, d: &PolicyDispatcher) {
        d.change_view(|v| v.container_seen(&self.container));
    }
}

impl ViewChange<pb::UpdateContainerResponse> for pb::UpdateContainerRequest {
    fn after(&self, d: &PolicyDispatcher, result: Result<&pb::UpdateContainerResponse, &DispatchError>) {
        let Ok(resp) = result else { return };
        d.change_view(|v| {
            if let Some(requested) = self.linux_resources.as_ref() {
                v.update_resources(&self.container.id, requested);
            }
            v.apply_updates(&resp.update);
        });
    }
}

impl ViewChange for pb::PostUpdateContainerRequest {
    fn before(&self, d: &PolicyDispatcher) {
        d.change_view(|v| v.container_reported(&self.container));
    }
}

impl ViewChange<pb::StopContainerResponse> for pb::StopContainerRequest {
    /// The container stops whatever the policies say.
    fn after(&self, d: &PolicyDispatcher, result: Result<&pb::StopContainerResponse, &DispatchError>) {
        d.change_view(|v| {
            v.set_state(&self.container.id, pb::ContainerState::CONTAINER_STOPPED);
            if let Ok(resp) = result {
                v.apply_updates(&resp.update);
            }
        });
    }
}

impl ViewChange for pb::RemoveContainerRequest {
    fn after(&self, d: &PolicyDispatcher, _result: Result<&(), &DispatchError>) {
        d.own.container(&self.pod, &self.container.id, false);
        d.change_view(|v| v.container_removed(&self.container.id));
    }
}

/// What an event's request is about, for the policies' steps and errors.
macro_rules! target {
    (pod, $r:ident) => {
        pod_target(&$r.pod)
    };
    (container, $r:ident) => {
        container_target(&$r.pod, &$r.container)
    };
}

/// The body of the dispatcher's method for one event of the table, by its
/// reply: a `notify` event runs the chain's `notify` with the policies'
/// view of the request ([`CallEvent`]'s `From` of it), an `answer` event the
/// chain's method of the event's name, which merges the policies' replies.
macro_rules! policy_event {
    (notify, $d:ident, $kind:ident, $method:ident, $carries:ident, $req:ident) => {
        $d.event(EventKind::$kind, $req, |chain, cx, req| async move {
            let target = target!($carries, req);
            chain.notify(&cx, EventKind::$kind, || CallEvent::from(&*req), &target).await
        })
        .await
    };
    (answer, $d:ident, $kind:ident, $method:ident, $carries:ident, $req:ident) => {
        $d.event(EventKind::$kind, $req, |chain, cx, req| async move { chain.$method(&cx, &req).await }).await
    };
    // The host is no validator: policies validate inside CreateContainer,
    // and the host never subscribes to a verdict event (`wanted_events`).
    // Were one sent anyway, it gets what a plugin without an opinion
    // answers, as the trait's default does.
    (verdict, $d:ident, $kind:ident, $method:ident, $carries:ident, $req:ident) => {{
        drop($req);
        Ok(Default::default())
    }};
}

/// The parts of the [`Dispatcher`] implementation that are not per event,
/// outside the generating macro so that they read (and format) as plain code.
impl PolicyDispatcher {
    /// Configure: the runtime's facts and request timeout; never waits for
    /// loads (the subscription was known, or waited for, before registering).
    fn configured(&self, runtime: &RuntimeInfo) {
        *self.request_timeout.lock().unwrap_or_else(|p| p.into_inner()) = runtime.request_timeout;
        let mut facts = (*self.facts()).clone();
        facts.runtime = wit::RuntimeInfo {
            name: runtime.name.clone(),
            version: runtime.version.clone(),
            nri_version: runtime.nri_version.to_string(),
        };
        *self.facts.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(facts);
        // Configure never waits for loads: the subscription was known (or
        // waited for) before registering (see the start-up contract).
        let chain = self.chain();
        if !chain.pending().is_empty() {
            tracing::info!(
                not_ready = ?chain.pending().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
                subscription_known = chain.subscription_known(),
                "policies still loading; events they would see wait for them within the budget"
            );
        }
        self.warn_about_time();
        let budget = self.budget();
        tracing::info!(policies = chain.len(), chain_budget_ms = budget.as_millis() as u64, "policy chain ready");
    }

    /// Logs the chain's time warnings (a policy's limit over the budget,
    /// limits adding up to more than it) when they differ from those logged
    /// last: whenever a chain is installed, and when the runtime's request
    /// timeout changes the budget. Policies load after the runtime first
    /// configures the host, so warning only then would miss them.
    fn warn_about_time(&self) {
        let chain = self.chain();
        let mut warnings = chain.time_warnings(self.budget());
        warnings.extend(chain.settings().budget_cut(self.request_timeout()));
        let mut last = self.time_warnings.lock().unwrap_or_else(|p| p.into_inner());
        if *last == warnings {
            return;
        }
        for warning in warnings.iter().filter(|w| !last.contains(w)) {
            tracing::warn!("{warning}");
        }
        *last = warnings;
    }

    /// Synchronize: rebuild the node view, let the policies reconcile, and
    /// answer their updates. A policy's failure is reported, never passed
    /// on: a runtime drops a plugin whose Synchronize fails.
    async fn synchronized(
        &self,
        pods: Vec<pb::PodSandbox>,
        containers: Vec<pb::Container>,
    ) -> Vec<pb::ContainerUpdate> {
        self.own.synchronize(&pods, &containers);
        if self.chain().keeps_view() {
            self.change_view(|v| v.synchronize(&pods, &containers));
            let (pods, containers) = self.view().len();
            tracing::info!(pods, containers, "node view rebuilt from Synchronize");
        }
        let wants = self.chain().wants_synchronize();
        // A runtime drops a plugin whose Synchronize fails, taking every
        // policy with it: a policy's failure here is reported, never passed on.
        let evaluated =
            self.evaluate("Synchronize", wants, |chain, cx| async move { chain.synchronize(&cx).await }).await;
        let updates = match evaluated {
            Ok(updates) => updates,
            Err(e) => {
                tracing::error!(error = %e, "policies failed to reconcile on Synchronize; answering without updates");
                Vec::new()
            }
        };
        self.change_view(|v| v.apply_updates(&updates));
        updates
    }
}

/// The dispatcher: its per-event methods generated from the event table
/// (`nri/events.rs`), each the event's [`ViewChange`] around the chain.
macro_rules! policy_dispatcher {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        #[async_trait]
        impl Dispatcher for PolicyDispatcher {
            /// What the policies subscribed to, and what the node view needs if a
            /// policy reads it.
            fn events(&self) -> EventMask {
                self.wanted_events()
            }

            fn events_version(&self) -> u64 {
                self.installed.borrow().0
            }

            async fn events_changed(&self, since: u64) {
                let _ = self.installed.subscribe().wait_for(|(n, _)| *n > since).await;
            }

            async fn configure(&self, runtime: &RuntimeInfo) -> Result<(), DispatchError> {
                self.configured(runtime);
                Ok(())
            }

            async fn synchronize(
                &self,
                pods: Vec<pb::PodSandbox>,
                containers: Vec<pb::Container>,
            ) -> Result<Vec<pb::ContainerUpdate>, DispatchError> {
                Ok(self.synchronized(pods, containers).await)
            }

            $(
                async fn $method(
                    &self,
                    req: pb::$request,
                ) -> Result<crate::nri::events::reply_type!($reply, $response), DispatchError> {
                    policy_event!($reply, self, $kind, $method, $carries, req)
                }
            )*

            fn answer_overrun(&self, event: &'static str, budget: Duration) {
                self.metrics.budget_overrun();
                self.metrics.event(event, "deadline", budget);
            }

            fn answered(&self, answer: &crate::nri::mux::AnswerTime) {
                if let Some(event) = answer.event {
                    self.metrics.answer(event, answer.total);
                }
            }

            async fn disconnected(&self) {
                // Rebuilt from the next Synchronize.
                self.change_view(NodeView::clear);
            }
        }
    };
}
crate::nri::events::nri_events!(policy_dispatcher);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::MergeError;
    use crate::policy::chain::{Pending, PolicyFailure, REFUSED_WHILE_LOADING};
    use crate::policy::engine::{CallError, CallErrorKind};
    use crate::policy::load::known::Subscription;

    /// A dispatcher whose chain is `pending` alone, without any wasm running.
    fn dispatcher_of(pending: Vec<Pending>) -> PolicyDispatcher {
        use crate::node::topology::Topology;
        use crate::policy::chain::ChainSettings;
        use crate::policy::engine::EngineSettings;
        // No compile cache: root's default is the node's /var/cache/nri-wasm.
        let engine = PolicyEngine::new(&EngineSettings { pooling: false, cache_dir: None, ..Default::default() })
            .expect("engine");
        let chain = Chain::new(Vec::new(), ChainSettings::default()).with_pending(pending);
        let node = wit::NodeInfo { hostname: "node-1".into(), arch: "x86_64".into(), cpus: 1, memory_bytes: 1 << 30 };
        let topology = Topology { online_cpus: vec![0], numa_nodes: Vec::new(), memory_bytes: 1 << 30 };
        PolicyDispatcher::new(Arc::new(engine), chain, Facts::unconfigured(node, &topology), 1)
    }

    /// Everything a policy may subscribe to, the node view included.
    fn everything() -> Subscription {
        Subscription { events: EventMask::all(), synchronize: true, node: true }
    }

    /// A dispatcher whose one policy is still loading and declares every
    /// event and the node view, so the view is kept: as a mandatory policy
    /// it refuses the events refused while loading, any other event goes
    /// on (a skipped one lets every event through). An event already
    /// waited for it in vain, so none waits.
    fn loading(mandatory: bool) -> PolicyDispatcher {
        let pending = Pending::new("10-loading", mandatory, Instant::now()).with_declared(Some(everything()));
        pending.waited_in_vain();
        dispatcher_of(vec![pending])
    }

    /// An event's outcome, without its answer.
    fn outcome<T>(result: Result<T, DispatchError>) -> Result<(), DispatchError> {
        result.map(drop)
    }

    /// Every event's own change to the node view (its `ViewChange`),
    /// through the generated methods: a post-event's before the policies,
    /// so even a failed one is in the view; the others' after them, some
    /// only if the event went through, some (stop, removals) whatever the
    /// policies said.
    #[tokio::test]
    async fn each_event_changes_the_view_before_or_after_the_policies() {
        use pb::ContainerState::{CONTAINER_CREATED, CONTAINER_RUNNING, CONTAINER_STOPPED};
        use protobuf::MessageField;
        let pod = |version: &str| pb::PodSandbox {
            id: "p1".into(),
            name: "web".into(),
            labels: [("v".to_string(), version.to_string())].into(),
            ..Default::default()
        };
        let resources = |shares: u64| {
            let mut r = pb::LinuxResources::default();
            r.cpu.mut_or_insert_default().shares =
                MessageField::some(pb::OptionalUInt64 { value: shares, ..Default::default() });
            r
        };
        let container = |state: pb::ContainerState, shares: Option<u64>| {
            let mut c = pb::Container { id: "c1".into(), pod_sandbox_id: "p1".into(), ..Default::default() };
            c.state = state.into();
            if let Some(shares) = shares {
                c.linux.mut_or_insert_default().resources = MessageField::some(resources(shares));
            }
            c
        };
        let (p1, c1) = (pod("1"), container(CONTAINER_CREATED, None));
        for through in [true, false] {
            let d = loading(!through);
            let pod_label = || d.view().pod("p1").map(|p| p.labels["v"].clone());
            let state = || d.view().container("c1").map(|c| c.state);
            let shares = || {
                let c = d.view().container("c1").cloned()?;
                Some(c.resources?.cpu.shares.value)
            };
            // The mandatory policy refuses only what keeps something from
            // happening; teardown, post-events go on.
            let check = |event: &str, result: Result<(), DispatchError>| {
                let refused = !through && REFUSED_WHILE_LOADING.iter().any(|k| k.name() == event);
                match result {
                    Ok(()) => assert!(!refused, "{event}: went through, though a mandatory policy loading sees it"),
                    Err(e) => {
                        assert!(
                            refused,
                            "{event} was refused (policy {}): {e}",
                            if through { "skipped" } else { "failing" }
                        );
                        let e = e.to_string();
                        assert!(e.contains("policy 10-loading on ") && e.contains("not ready yet"), "{e}");
                    }
                }
            };
            let (pod_of, ctr_of) = (MessageField::some(p1.clone()), MessageField::some(c1.clone()));

            let r = d.run_pod_sandbox(pb::RunPodSandboxRequest { pod: pod_of.clone(), ..Default::default() }).await;
            check("RunPodSandbox", outcome(r));
            assert_eq!(pod_label().is_some(), through, "RunPodSandbox adds the pod once it went through");

            let req = pb::PostUpdatePodSandboxRequest { pod: pod_of.clone(), ..Default::default() };
            check("PostUpdatePodSandbox", outcome(d.post_update_pod_sandbox(req).await));
            assert_eq!(pod_label().as_deref(), Some("1"), "PostUpdatePodSandbox reports the pod as it is");

            let req = pb::UpdatePodSandboxRequest { pod: MessageField::some(pod("2")), ..Default::default() };
            check("UpdatePodSandbox", outcome(d.update_pod_sandbox(req).await));
            let label = if through { "2" } else { "1" };
            assert_eq!(pod_label().as_deref(), Some(label), "UpdatePodSandbox changes the pod once it went through");

            let req = pb::StopPodSandboxRequest { pod: pod_of.clone(), ..Default::default() };
            check("StopPodSandbox", outcome(d.stop_pod_sandbox(req).await));
            assert!(pod_label().is_some(), "a stopped pod stays until it is removed");

            let req =
                pb::CreateContainerRequest { pod: pod_of.clone(), container: ctr_of.clone(), ..Default::default() };
            check("CreateContainer", outcome(d.create_container(req).await));
            let created = through.then_some(CONTAINER_CREATED);
            assert_eq!(state(), created, "CreateContainer adds the container once it went through");

            let req =
                pb::PostCreateContainerRequest { pod: pod_of.clone(), container: ctr_of.clone(), ..Default::default() };
            check("PostCreateContainer", outcome(d.post_create_container(req).await));
            assert_eq!(state(), Some(CONTAINER_CREATED), "PostCreateContainer reports the container as it is");

            let req =
                pb::StartContainerRequest { pod: pod_of.clone(), container: ctr_of.clone(), ..Default::default() };
            check("StartContainer", outcome(d.start_container(req).await));
            let started = if through { CONTAINER_RUNNING } else { CONTAINER_CREATED };
            assert_eq!(state(), Some(started), "StartContainer runs the container once it went through");

            let running = MessageField::some(container(CONTAINER_RUNNING, None));
            let req = pb::PostStartContainerRequest { pod: pod_of.clone(), container: running, ..Default::default() };
            check("PostStartContainer", outcome(d.post_start_container(req).await));
            assert_eq!(state(), Some(CONTAINER_RUNNING), "PostStartContainer reports the container as it is");

            let req = pb::UpdateContainerRequest {
                pod: pod_of.clone(),
                container: ctr_of.clone(),
                linux_resources: MessageField::some(resources(512)),
                ..Default::default()
            };
            check("UpdateContainer", outcome(d.update_container(req).await));
            assert_eq!(shares(), through.then_some(512), "UpdateContainer applies the resources once it went through");

            let reported = MessageField::some(container(CONTAINER_RUNNING, Some(256)));
            let req = pb::PostUpdateContainerRequest { pod: pod_of.clone(), container: reported, ..Default::default() };
            check("PostUpdateContainer", outcome(d.post_update_container(req).await));
            assert_eq!(shares(), Some(256), "PostUpdateContainer reports the resources as they are");

            let req = pb::StopContainerRequest { pod: pod_of.clone(), container: ctr_of.clone(), ..Default::default() };
            check("StopContainer", outcome(d.stop_container(req).await));
            assert_eq!(state(), Some(CONTAINER_STOPPED), "the container stops whatever the policies say");

            let req =
                pb::RemoveContainerRequest { pod: pod_of.clone(), container: ctr_of.clone(), ..Default::default() };
            check("RemoveContainer", outcome(d.remove_container(req).await));
            assert_eq!(state(), None, "the container is gone whatever the policies say");

            // The host is no validator: a verdict is never the policies'.
            let req = pb::ValidateContainerAdjustmentRequest {
                pod: pod_of.clone(),
                container: ctr_of.clone(),
                ..Default::default()
            };
            let verdict = d.validate_container_adjustment(req).await.expect("a verdict event is not evaluated");
            assert!(!verdict.reject);

            let r = d.remove_pod_sandbox(pb::RemovePodSandboxRequest { pod: pod_of, ..Default::default() }).await;
            check("RemovePodSandbox", outcome(r));
            assert_eq!(pod_label(), None, "the pod is gone whatever the policies say");
        }
    }

    /// The runtime's facts with a request timeout of `timeout`.
    fn runtime(timeout: Duration) -> RuntimeInfo {
        RuntimeInfo {
            name: "containerd".into(),
            version: "v2.3.4".into(),
            nri_version: crate::nri::version::NriVersion::IMPLEMENTED,
            nri_version_source: crate::nri::version::VersionSource::Announced,
            config: String::new(),
            registration_timeout: Duration::from_secs(5),
            request_timeout: timeout,
        }
    }

    fn create() -> pb::CreateContainerRequest {
        let pod = pb::PodSandbox { id: "p1".into(), name: "web".into(), ..Default::default() };
        let ctr = pb::Container { id: "c1".into(), pod_sandbox_id: "p1".into(), ..Default::default() };
        pb::CreateContainerRequest {
            pod: protobuf::MessageField::some(pod),
            container: protobuf::MessageField::some(ctr),
            ..Default::default()
        }
    }

    /// The first event a policy still loading would see waits for it, half
    /// the budget; once in vain, the next ones do not (the policy is
    /// compiling: waiting would only slow every event), and events it
    /// would not see never wait for it.
    #[tokio::test]
    async fn an_event_waits_for_a_policy_still_loading_until_one_waited_in_vain() {
        let creates = Subscription { events: EventMask::EMPTY.with(EventKind::CreateContainer), ..Default::default() };
        let pending = Pending::new("10-slow", true, Instant::now()).with_declared(Some(creates));
        let d = dispatcher_of(vec![pending.clone()]);
        // A budget of 100 ms: creates wait at most 50 ms.
        d.configured(&runtime(Duration::from_millis(200)));
        let stop = pb::StopContainerRequest { pod: create().pod, container: create().container, ..Default::default() };
        d.stop_container(stop).await.expect("a stop is not the policy's: not subscribed, never refused");
        assert!(pending.awaited(), "an event the policy would not see does not wait for it");
        let started = Instant::now();
        let e = d.create_container(create()).await.unwrap_err().to_string();
        assert!(started.elapsed() >= Duration::from_millis(50), "the first create waited {:?}", started.elapsed());
        assert!(e.contains("policy 10-slow on CreateContainer: not loaded: not ready yet"), "{e}");
        assert!(!pending.awaited(), "waited for in vain: later events do not wait for it");
        let e = d.create_container(create()).await.unwrap_err().to_string();
        assert!(e.contains("10-slow") && e.contains("not ready yet"), "still refused, naming it: {e}");
    }

    /// A policy that becomes ready while an event waits for it ends the
    /// wait: the event gets the chain it is in.
    #[tokio::test]
    async fn a_policy_ready_while_an_event_waits_ends_the_wait() {
        let creates = Subscription { events: EventMask::EMPTY.with(EventKind::CreateContainer), ..Default::default() };
        let pending = Pending::new("10-soon", true, Instant::now()).with_declared(Some(creates));
        let d = Arc::new(dispatcher_of(vec![pending.clone()]));
        // A budget of a minute: the wait would be 30 s.
        d.configured(&runtime(Duration::from_secs(120)));
        let waiting = tokio::spawn({
            let d = d.clone();
            async move { d.create_container(create()).await }
        });
        // Whenever the create started waiting, the policy's load ends now
        // (it loaded nothing here: the chain without it).
        tokio::time::sleep(Duration::from_millis(20)).await;
        d.replace_chain(Chain::new(Vec::new(), crate::policy::chain::ChainSettings::default()));
        waiting.await.unwrap().expect("answered once the policy left the pending set");
        assert!(pending.awaited(), "the wait ended with the load, not in vain");
    }

    /// Inside a transport's answer, the chain's deadline ends before the
    /// backstop with the reserve to spare, even when its budget would
    /// cross it; the answer learns what the evaluation was doing. Outside
    /// one, the budget alone sets the deadline.
    #[tokio::test]
    async fn the_deadline_ends_before_the_transport_backstop() {
        use crate::nri::answer::AnswerScope;
        let d = dispatcher_of(Vec::new());
        d.configured(&runtime(Duration::from_secs(2)));
        let start = Instant::now();
        assert_eq!(d.deadline(start), start + d.budget(), "no transport: the budget");
        // A backstop 300 ms from now: the 1 s budget would cross it.
        let scope = AnswerScope::new(start + Duration::from_millis(300));
        let deadline = scope.clone().run(async { d.deadline(start) }).await;
        assert_eq!(deadline, start + Duration::from_millis(300) - BACKSTOP_RESERVE);
        assert!(deadline + GRACE < start + Duration::from_millis(300));
        // A backstop already past: no time at all.
        let past = AnswerScope::new(start);
        assert_eq!(past.run(async { d.deadline(start) }).await, start);
        // What the answer learns: an evaluation with no policy for it.
        let reported = AnswerScope::new(start + Duration::from_secs(1));
        reported.clone().run(d.create_container(create())).await.expect("no policy: answered");
        assert_eq!(reported.describe(), "CreateContainer: the host's work (no policy sees it)");
    }

    /// What an evaluation says it was doing, phase by phase.
    #[test]
    fn an_evaluation_says_what_it_was_doing() {
        use crate::nri::answer::Progress as _;
        let p = EvalProgress::new("Synchronize", Arc::new(Uncounted));
        assert_eq!(p.describe(), "Synchronize: waiting for policies still loading");
        p.chain_ready(Arc::new(Chain::new(Vec::new(), crate::policy::chain::ChainSettings::default())));
        assert_eq!(p.describe(), "Synchronize: waiting for policies still loading", "until it waits for a slot");
        p.waiting_for_slot();
        assert_eq!(p.describe(), "Synchronize: waiting for a call slot (max-concurrent-calls)");
        p.running();
        assert_eq!(p.describe(), "Synchronize: the host's work (no policy sees it)");
    }

    #[test]
    fn chain_errors_map_to_denied_or_internal_with_the_whole_story() {
        let denied = ChainError::Denied {
            policy: "10-p".into(),
            event: "CreateContainer".into(),
            target: "container c1 (ns/pod/app)".into(),
            reason: "privileged containers are not allowed".into(),
        };
        let d = DispatchError::from(denied);
        assert!(
            matches!(&d, DispatchError::Denied(m) if m.contains("10-p") && m.contains("c1") && m.contains("privileged"))
        );
        let failed = ChainError::Failed {
            target: "container c1 (ns/pod/app)".into(),
            failure: Box::new(PolicyFailure::Call(CallError::new(
                "20-q",
                "CreateContainer",
                CallErrorKind::OutOfFuel { limit: 1000 },
            ))),
        };
        let d = DispatchError::from(failed);
        let DispatchError::Internal(m) = &d else { panic!("{d:?}") };
        for part in ["20-q", "CreateContainer", "fuel limit of 1000", "container c1", "on-error = fail"] {
            assert!(m.contains(part), "{part} missing from {m}");
        }
        assert_eq!(crate::nri::service::status_of(&d).code(), ttrpc::Code::INTERNAL);
        let conflict = ChainError::Conflict {
            event: "CreateContainer".into(),
            target: "container c1 (ns/pod/app)".into(),
            conflict: MergeError::Conflict {
                field: "memory limit".into(),
                first: "10-a".into(),
                second: "20-b".into(),
            },
        };
        let DispatchError::Internal(m) = DispatchError::from(conflict) else { panic!() };
        assert_eq!(
            m,
            "CreateContainer of container c1 (ns/pod/app): policies \"10-a\" and \"20-b\" both tried to set memory limit"
        );
    }
}
