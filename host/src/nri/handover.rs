//! Make before break: a new subscription without a moment unserved.
//!
//! NRI fixes a plugin's events when the runtime configures it, so a new set
//! of policies that needs other events needs a new connection. Closing the
//! old one first loses whatever the runtime sends in between, and worse: NRI's
//! runtime side takes a call that fails because the plugin's connection is
//! closed (or timed out) as "drop the plugin, go on without it", so that
//! event goes ahead without the policies (`pkg/adaptation/plugin.go`,
//! `isFatalError`). No drain closes that race: the runtime may write a
//! request at any moment.
//!
//! So the supervisor registers a second connection under the same name and
//! index (NRI checks neither for duplicates), lets the runtime configure and
//! synchronise it while the first still serves, and retires the first only
//! once the runtime is known to call the second. While both are registered
//! the runtime calls both for every event, one after the other under one
//! lock, in an order it does not promise: two plugins of one index keep the
//! order they joined in while the runtime's list is short (Go's sort is an
//! insertion sort up to 12 elements), and may swap beyond. Whatever the
//! order, this module sees that the host evaluates each event once, so that
//! no adjustment reaches the runtime twice (two plugins setting the same
//! field is a conflict that fails the event), no policy state is committed
//! twice, and the node view changes once. Every connection's Plugin service
//! calls its own [`Connection`], which asks the shared [`Handover`]:
//!
//! 1. One connection *evaluates*: its events go to the dispatcher. Alone
//!    (no handover under way) it does nothing else, at the cost of one
//!    atomic load.
//! 2. A *successor* evaluates from the first event the runtime sends it.
//!    That call is the proof that the runtime has it in its list (it adds a
//!    plugin only after synchronising it, and may still run an event or two
//!    without it meanwhile), so from then on every event the host wants
//!    reaches it. At that call the connection that evaluated before becomes
//!    a *shadow*: it answers every event as a plugin that changes nothing, so
//!    what it still answers, or fails to answer when the supervisor closes
//!    it, changes nothing either: the runtime goes on to the successor, or
//!    has just been there.
//! 3. The event under way at that switch was evaluated by the old
//!    connection if the runtime called it first; the successor's call for
//!    the same event (same kind, pod and container, right after an answered
//!    evaluation on the other connection) is answered empty. A call on the
//!    same connection is always a new event, however alike.
//! 4. A call for an event whose evaluation is still running on the other
//!    connection is one the runtime gave up there (its deadline passed, or
//!    that connection ended): it gets that evaluation's answer when it
//!    comes, so the event is evaluated once and its answer still reaches
//!    the runtime.
//!
//! Rule 3 can mistake a new event for the end of the last one in one case:
//! the runtime puts the successor before the old connection (only possible
//! with more than 12 plugins in its list), and the successor's first event
//! repeats the kind, pod and container of the last event the old connection
//! evaluated without the successor (an UpdateContainer of a container right
//! after another one of it, as the successor joins). Creates, starts,
//! stops and removals never repeat like that.

use std::any::Any;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use nri_wasm_api::api as pb;
use tokio::sync::watch;

use super::dispatch::{DispatchError, Dispatcher, RuntimeInfo};
use super::mux::AnswerTime;
use super::version::{EventKind, EventMask};

/// A connection to the runtime, numbered by the supervisor from 1.
pub type ConnId = u64;

/// What a connection does with the events the runtime sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Its events are evaluated.
    Evaluating,
    /// Registered to take over; evaluates (and takes over) from its first event.
    Successor,
    /// Being retired: answers every event as a plugin that changes nothing.
    Shadow,
}

/// An evaluation's result, shared with a call on another connection that
/// the runtime made after giving up on this one (rule 4).
type Published = Arc<dyn Any + Send + Sync>;

#[derive(Debug)]
enum Outcome {
    /// Under way; its result is published on the channel.
    Running { result: watch::Receiver<Option<Published>>, joined: bool },
    /// Finished: answered successfully or not, and whether another
    /// connection's call has already been matched with it.
    Done { ok: bool, paired: bool },
}

/// The last event the host evaluated while more than one connection was
/// open.
#[derive(Debug)]
struct Last {
    conn: ConnId,
    key: u64,
    seq: u64,
    outcome: Outcome,
}

#[derive(Debug, Default)]
struct State {
    conns: Vec<(ConnId, Role)>,
    last: Option<Last>,
    seq: u64,
}

impl State {
    fn role(&self, conn: ConnId) -> Option<Role> {
        self.conns.iter().find(|(c, _)| *c == conn).map(|(_, r)| *r)
    }

    fn set(&mut self, conn: ConnId, role: Role) {
        match self.conns.iter_mut().find(|(c, _)| *c == conn) {
            Some(entry) => entry.1 = role,
            None => self.conns.push((conn, role)),
        }
    }

    /// `conn` evaluates from now on; whoever evaluated before is a shadow.
    fn promote(&mut self, conn: ConnId) {
        for (c, role) in &mut self.conns {
            if *c == conn {
                *role = Role::Evaluating;
            } else if *role == Role::Evaluating {
                *role = Role::Shadow;
            }
        }
    }

    /// One connection, evaluating: nothing to pair.
    fn alone(&self) -> bool {
        matches!(self.conns.as_slice(), [(_, Role::Evaluating)])
    }
}

/// What a call on a connection does.
enum Decision {
    /// Evaluate it; publish the result through the publisher.
    Evaluate(Publisher),
    /// Answer as a plugin that changes nothing.
    Answer,
    /// Answer with the result of the evaluation running on the other
    /// connection for this event.
    Join(watch::Receiver<Option<Published>>),
}

/// Records how an evaluation ended, for a call on another connection;
/// dropped unfinished (the call was cancelled), it records a failure that
/// nobody answered, so no call is ever matched with it.
struct Publisher {
    handover: Arc<Handover>,
    seq: u64,
    result: Option<watch::Sender<Option<Published>>>,
}

impl Publisher {
    fn publish<T: Clone + Send + Sync + 'static>(mut self, result: &Result<T, DispatchError>) {
        self.finish(result.is_ok());
        if let Some(tx) = self.result.take() {
            tx.send_replace(Some(Arc::new(result.clone())));
        }
    }

    fn finish(&mut self, ok: bool) {
        let mut state = self.handover.lock();
        if let Some(last) = state.last.as_mut().filter(|l| l.seq == self.seq) {
            let joined = matches!(last.outcome, Outcome::Running { joined: true, .. });
            last.outcome = Outcome::Done { ok, paired: joined };
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if self.result.is_some() {
            self.finish(false);
        }
    }
}

/// The connections of one plugin and which of them evaluates events; see
/// the module documentation.
pub struct Handover {
    dispatcher: Arc<dyn Dispatcher>,
    state: Mutex<State>,
    /// `State::alone`, readable without the lock on every event.
    alone: AtomicBool,
    /// The last successor that took over (rule 2).
    took_over: watch::Sender<Option<ConnId>>,
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handover").field("state", &*self.lock()).finish_non_exhaustive()
    }
}

impl Handover {
    /// No connection yet; events go to `dispatcher`.
    pub fn new(dispatcher: Arc<dyn Dispatcher>) -> Arc<Self> {
        Arc::new(Self {
            dispatcher,
            state: Mutex::default(),
            alone: AtomicBool::new(false),
            took_over: watch::Sender::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self, state: &State) {
        self.alone.store(state.alone(), Ordering::Release);
    }

    /// The dispatcher every connection's events go to.
    pub fn dispatcher(&self) -> &Arc<dyn Dispatcher> {
        &self.dispatcher
    }

    /// Adds a connection in `role` (the first [`Role::Evaluating`], a
    /// later one [`Role::Successor`]); its Plugin service calls the
    /// returned dispatcher.
    pub fn open(self: &Arc<Self>, conn: ConnId, role: Role) -> Arc<Connection> {
        let mut state = self.lock();
        state.set(conn, role);
        self.changed(&state);
        Arc::new(Connection { handover: self.clone(), conn })
    }

    /// The connection ended: it is forgotten. An evaluation of it still
    /// running can still be joined by the other connection (rule 4).
    pub fn closed(&self, conn: ConnId) {
        let mut state = self.lock();
        state.conns.retain(|(c, _)| *c != conn);
        self.changed(&state);
    }

    /// Makes `conn` evaluate, the others shadows (the connection that
    /// evaluated ended, and the successor serves alone now).
    pub fn promote(&self, conn: ConnId) {
        let mut state = self.lock();
        state.promote(conn);
        self.changed(&state);
    }

    /// Gives up a successor that has not taken over: it becomes a shadow
    /// and never will. `false` if it already took over (it evaluates now).
    pub fn abandon(&self, conn: ConnId) -> bool {
        let mut state = self.lock();
        if state.role(conn) != Some(Role::Successor) {
            return false;
        }
        state.set(conn, Role::Shadow);
        self.changed(&state);
        true
    }

    /// The role of `conn`, if it is open.
    pub fn role(&self, conn: ConnId) -> Option<Role> {
        self.lock().role(conn)
    }

    /// Tells which successor took over last, when one does.
    pub fn took_over(&self) -> watch::Receiver<Option<ConnId>> {
        self.took_over.subscribe()
    }

    fn decide(self: &Arc<Self>, conn: ConnId, key: u64) -> Decision {
        let mut state = self.lock();
        let mut role = state.role(conn).unwrap_or(Role::Evaluating);
        if role == Role::Successor {
            state.promote(conn);
            self.changed(&state);
            self.took_over.send_replace(Some(conn));
            role = Role::Evaluating;
        }
        if let Some(last) = state.last.as_mut().filter(|l| l.conn != conn && l.key == key) {
            match &mut last.outcome {
                Outcome::Running { result, joined } if !*joined => {
                    *joined = true;
                    return Decision::Join(result.clone());
                }
                Outcome::Done { ok: true, paired } if !*paired => {
                    *paired = true;
                    return Decision::Answer;
                }
                _ => {}
            }
        }
        if role == Role::Shadow {
            return Decision::Answer;
        }
        state.seq += 1;
        let seq = state.seq;
        let (tx, rx) = watch::channel(None);
        state.last = Some(Last { conn, key, seq, outcome: Outcome::Running { result: rx, joined: false } });
        Decision::Evaluate(Publisher { handover: self.clone(), seq, result: Some(tx) })
    }

    /// Handles one event on `conn`: evaluated by `evaluation`, answered
    /// empty, or answered with another connection's evaluation of it.
    async fn call<T, F>(
        self: &Arc<Self>,
        conn: ConnId,
        key: impl FnOnce() -> u64,
        evaluation: F,
    ) -> Result<T, DispatchError>
    where
        T: Clone + Default + Send + Sync + 'static,
        F: Future<Output = Result<T, DispatchError>>,
    {
        if self.alone.load(Ordering::Acquire) {
            return evaluation.await;
        }
        match self.decide(conn, key()) {
            Decision::Answer => Ok(T::default()),
            Decision::Evaluate(publisher) => {
                let result = evaluation.await;
                publisher.publish(&result);
                result
            }
            Decision::Join(mut result) => {
                let published = result.wait_for(Option::is_some).await.ok().and_then(|p| p.clone());
                match published.and_then(|p| p.downcast::<Result<T, DispatchError>>().ok()) {
                    Some(result) => (*result).clone(),
                    // The evaluation was cancelled without a result (its
                    // call dropped at the deadline): evaluate here.
                    None => evaluation.await,
                }
            }
        }
    }
}

/// Identifies an event across connections: its kind, pod and container.
fn event_key(kind: EventKind, pod: &str, container: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (kind as i32, pod, container).hash(&mut h);
    h.finish()
}

/// The key of a request, by what the event is about.
macro_rules! key_of {
    (pod, $kind:ident, $req:ident) => {
        || event_key(EventKind::$kind, $req.pod.as_ref().map_or("", |p| p.id.as_str()), "")
    };
    (container, $kind:ident, $req:ident) => {
        || {
            event_key(
                EventKind::$kind,
                $req.pod.as_ref().map_or("", |p| p.id.as_str()),
                $req.container.as_ref().map_or("", |c| c.id.as_str()),
            )
        }
    };
}

/// The dispatcher one connection's Plugin service calls: events through
/// the [`Handover`], everything else straight to the dispatcher.
pub struct Connection {
    handover: Arc<Handover>,
    conn: ConnId,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("conn", &self.conn).finish_non_exhaustive()
    }
}

impl Connection {
    /// The connection's number.
    pub fn id(&self) -> ConnId {
        self.conn
    }
}

macro_rules! connection_dispatcher {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        #[async_trait]
        impl Dispatcher for Connection {
            fn events(&self) -> EventMask {
                self.handover.dispatcher.events()
            }

            fn events_version(&self) -> u64 {
                self.handover.dispatcher.events_version()
            }

            async fn events_changed(&self, since: u64) {
                self.handover.dispatcher.events_changed(since).await
            }

            async fn configure(&self, runtime: &RuntimeInfo) -> Result<(), DispatchError> {
                self.handover.dispatcher.configure(runtime).await
            }

            async fn synchronize(
                &self,
                pods: Vec<pb::PodSandbox>,
                containers: Vec<pb::Container>,
            ) -> Result<Vec<pb::ContainerUpdate>, DispatchError> {
                self.handover.dispatcher.synchronize(pods, containers).await
            }

            $(
                async fn $method(
                    &self,
                    req: pb::$request,
                ) -> Result<super::events::reply_type!($reply, $response), DispatchError> {
                    let key = key_of!($carries, $kind, req);
                    let key = key();
                    self.handover.call(self.conn, || key, self.handover.dispatcher.$method(req)).await
                }
            )*

            fn answered(&self, answer: &AnswerTime) {
                self.handover.dispatcher.answered(answer)
            }

            fn answer_overrun(&self, event: &'static str, budget: Duration) {
                self.handover.dispatcher.answer_overrun(event, budget)
            }

            /// The supervisor tells the dispatcher once no connection is
            /// left, not each connection as it ends.
            async fn disconnected(&self) {}
        }
    };
}
super::events::nri_events!(connection_dispatcher);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Counts the CreateContainers it evaluates and answers each with an
    /// annotation holding the count; waits for `gate` if `hold` is set.
    struct Counting {
        evaluated: AtomicU64,
        gate: tokio::sync::Semaphore,
        hold: AtomicBool,
    }

    impl Default for Counting {
        fn default() -> Self {
            Self { evaluated: AtomicU64::new(0), gate: tokio::sync::Semaphore::new(0), hold: AtomicBool::new(false) }
        }
    }

    #[async_trait]
    impl Dispatcher for Counting {
        async fn create_container(
            &self,
            _req: pb::CreateContainerRequest,
        ) -> Result<pb::CreateContainerResponse, DispatchError> {
            if self.hold.load(Ordering::SeqCst) {
                let _ = self.gate.acquire().await.map(|p| p.forget());
            }
            let n = self.evaluated.fetch_add(1, Ordering::SeqCst) + 1;
            let mut resp = pb::CreateContainerResponse::default();
            resp.adjust.mut_or_insert_default().annotations.insert("n".into(), n.to_string());
            Ok(resp)
        }

        async fn update_container(
            &self,
            _req: pb::UpdateContainerRequest,
        ) -> Result<pb::UpdateContainerResponse, DispatchError> {
            self.evaluated.fetch_add(1, Ordering::SeqCst);
            Ok(pb::UpdateContainerResponse::default())
        }
    }

    fn create(ctr: &str) -> pb::CreateContainerRequest {
        pb::CreateContainerRequest {
            pod: protobuf::MessageField::some(pb::PodSandbox { id: "pod".into(), ..Default::default() }),
            container: protobuf::MessageField::some(pb::Container { id: ctr.into(), ..Default::default() }),
            ..Default::default()
        }
    }

    fn update(ctr: &str) -> pb::UpdateContainerRequest {
        pb::UpdateContainerRequest {
            pod: protobuf::MessageField::some(pb::PodSandbox { id: "pod".into(), ..Default::default() }),
            container: protobuf::MessageField::some(pb::Container { id: ctr.into(), ..Default::default() }),
            ..Default::default()
        }
    }

    fn annotation(r: &pb::CreateContainerResponse) -> Option<&str> {
        r.adjust.as_ref().and_then(|a| a.annotations.get("n")).map(String::as_str)
    }

    fn setup() -> (Arc<Counting>, Arc<Handover>, Arc<Connection>, Arc<Connection>) {
        let d = Arc::new(Counting::default());
        let h = Handover::new(d.clone());
        let old = h.open(1, Role::Evaluating);
        let new = h.open(2, Role::Successor);
        (d, h, old, new)
    }

    #[tokio::test]
    async fn old_first_then_new_evaluates_each_event_once() {
        let (d, h, old, new) = setup();
        // Before the runtime has the successor in its list: the old one.
        assert_eq!(annotation(&old.create_container(create("c0")).await.unwrap()), Some("1"));
        // The runtime's order [old, new]: the old evaluates, the successor's
        // call for the same event is its pair and takes over.
        assert_eq!(annotation(&old.create_container(create("c1")).await.unwrap()), Some("2"));
        assert_eq!(annotation(&new.create_container(create("c1")).await.unwrap()), None);
        assert_eq!(h.role(2), Some(Role::Evaluating));
        assert_eq!(h.role(1), Some(Role::Shadow));
        assert_eq!(*h.took_over().borrow(), Some(2));
        // From now on the shadow answers empty and the successor evaluates.
        assert_eq!(annotation(&old.create_container(create("c2")).await.unwrap()), None);
        assert_eq!(annotation(&new.create_container(create("c2")).await.unwrap()), Some("3"));
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn new_first_takes_over_and_the_old_answers_empty() {
        let (d, h, old, new) = setup();
        assert_eq!(annotation(&old.create_container(create("c0")).await.unwrap()), Some("1"));
        // The runtime's order [new, old].
        assert_eq!(annotation(&new.create_container(create("c1")).await.unwrap()), Some("2"));
        assert_eq!(annotation(&old.create_container(create("c1")).await.unwrap()), None);
        assert_eq!(h.role(1), Some(Role::Shadow));
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_repeated_event_on_one_connection_is_a_new_event() {
        let (d, _h, old, new) = setup();
        old.update_container(update("c1")).await.unwrap();
        // Failed after the old connection (another plugin refused it):
        // the successor never saw it; the next one is new on both.
        old.update_container(update("c1")).await.unwrap();
        new.update_container(update("c1")).await.unwrap();
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 2);
        new.update_container(update("c1")).await.unwrap();
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_denied_event_is_not_a_pair() {
        struct Denying;
        #[async_trait]
        impl Dispatcher for Denying {
            async fn create_container(
                &self,
                req: pb::CreateContainerRequest,
            ) -> Result<pb::CreateContainerResponse, DispatchError> {
                Err(DispatchError::Denied(req.container.id.clone()))
            }
        }
        let h = Handover::new(Arc::new(Denying));
        let old = h.open(1, Role::Evaluating);
        let new = h.open(2, Role::Successor);
        assert!(old.create_container(create("c1")).await.is_err());
        // The runtime stopped at the denial; a call on the successor with
        // the same key is a new event (a retry), evaluated (and denied).
        assert!(new.create_container(create("c1")).await.is_err());
    }

    #[tokio::test]
    async fn a_call_given_up_on_one_connection_gets_its_answer_on_the_other() {
        let (d, h, old, new) = setup();
        d.hold.store(true, Ordering::SeqCst);
        // The old connection evaluates; the runtime gives up on it (its
        // deadline) and calls the successor for the same event.
        let first = tokio::spawn({
            let old = old.clone();
            async move { old.create_container(create("c1")).await }
        });
        let seen = |check: fn(&Last) -> bool| h.lock().last.as_ref().is_some_and(check);
        while !seen(|l| l.conn == 1) {
            tokio::task::yield_now().await;
        }
        let second = tokio::spawn({
            let new = new.clone();
            async move { new.create_container(create("c1")).await }
        });
        while !seen(|l| matches!(l.outcome, Outcome::Running { joined: true, .. })) {
            tokio::task::yield_now().await;
        }
        d.gate.add_permits(1);
        let (a, b) = (first.await.unwrap().unwrap(), second.await.unwrap().unwrap());
        assert_eq!(annotation(&a), Some("1"));
        assert_eq!(annotation(&b), Some("1"), "the successor answers the evaluation it joined");
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_abandoned_successor_never_takes_over() {
        let (d, h, old, new) = setup();
        assert!(h.abandon(2));
        assert_eq!(annotation(&new.create_container(create("c1")).await.unwrap()), None);
        assert_eq!(annotation(&old.create_container(create("c1")).await.unwrap()), Some("1"));
        assert_eq!(h.role(1), Some(Role::Evaluating));
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 1);
        // One that took over cannot be abandoned.
        let newer = h.open(3, Role::Successor);
        newer.create_container(create("c2")).await.unwrap();
        assert!(!h.abandon(3));
    }

    #[tokio::test]
    async fn alone_the_connection_evaluates_everything() {
        let d = Arc::new(Counting::default());
        let h = Handover::new(d.clone());
        let only = h.open(1, Role::Evaluating);
        for _ in 0..3 {
            only.create_container(create("same")).await.unwrap();
        }
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 3);
        assert!(h.lock().last.is_none(), "nothing is recorded for a connection alone");
        h.closed(1);
        let next = h.open(2, Role::Evaluating);
        next.create_container(create("same")).await.unwrap();
        assert_eq!(d.evaluated.load(Ordering::SeqCst), 4);
    }
}
