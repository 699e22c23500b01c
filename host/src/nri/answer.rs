//! What the transport tells a dispatcher of the answer it is serving.
//!
//! The transport gives every dispatcher call the answer budget of the
//! runtime's request timeout (`service::answer_budget`) and ends it at the
//! *backstop*: the instant that budget is up, counted from when the call
//! started. A dispatcher runs inline in the task that received the request,
//! so the transport hands it, through a task-local, the backstop (its own
//! deadline must end before it: a late answer is an error the runtime may
//! drop the plugin for) and a slot for what it is doing, read only when the
//! backstop ends the call, so that the log says what was running.
//!
//! Outside a transport's answer (a dispatcher called directly: tests, the
//! `eval` command) there is no scope: [`backstop`] is `None` and
//! [`report`] does nothing.

use std::sync::{Arc, Mutex};
use std::time::Instant;

impl std::fmt::Debug for AnswerScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerScope").field("backstop", &self.backstop).finish_non_exhaustive()
    }
}

/// What a dispatcher is doing for the answer under way; described only if
/// the backstop ends it.
pub trait Progress: Send + Sync {
    /// What was running, for the log (e.g. "policy 20-slow, after 10-a").
    fn describe(&self) -> String;
}

/// One answer a transport serves: its backstop, and what the dispatcher
/// said it is doing (`service.rs` makes one per dispatcher call).
pub struct AnswerScope {
    backstop: Instant,
    progress: Mutex<Option<Arc<dyn Progress>>>,
}

tokio::task_local! {
    static ANSWER: Arc<AnswerScope>;
}

impl AnswerScope {
    /// The scope of an answer the transport ends at `backstop`.
    pub fn new(backstop: Instant) -> Arc<Self> {
        Arc::new(Self { backstop, progress: Mutex::new(None) })
    }

    /// Runs `call` with this scope as the task's answer.
    pub async fn run<F: std::future::Future>(self: Arc<Self>, call: F) -> F::Output {
        ANSWER.scope(self, call).await
    }

    /// What the dispatcher says it is doing (or did last), or that it said
    /// nothing.
    pub fn describe(&self) -> String {
        let progress = self.progress.lock().unwrap_or_else(|p| p.into_inner()).clone();
        progress.map_or_else(|| "the dispatcher, before it reported any progress".to_string(), |p| p.describe())
    }
}

/// When the transport's backstop ends the answer this task serves, if it
/// serves one. A dispatcher's own deadline (and any grace it allows past
/// it) must end before this instant.
pub fn backstop() -> Option<Instant> {
    ANSWER.try_with(|a| a.backstop).ok()
}

/// Tells the transport what the answer under way is doing (replacing what
/// was said before); `progress` is built only inside a transport's answer.
/// Returns whether there was one.
pub fn report(progress: impl FnOnce() -> Arc<dyn Progress>) -> bool {
    ANSWER
        .try_with(|a| {
            *a.progress.lock().unwrap_or_else(|p| p.into_inner()) = Some(progress());
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    struct Doing(&'static str);

    impl Progress for Doing {
        fn describe(&self) -> String {
            self.0.to_string()
        }
    }

    #[tokio::test]
    async fn a_dispatcher_sees_the_backstop_and_reports_only_inside_an_answer() {
        assert_eq!(backstop(), None);
        assert!(!report(|| Arc::new(Doing("nothing"))), "no answer: nothing to report to");
        let at = Instant::now() + Duration::from_secs(1);
        let scope = AnswerScope::new(at);
        assert_eq!(scope.describe(), "the dispatcher, before it reported any progress");
        let seen = scope
            .clone()
            .run(async {
                tokio::task::yield_now().await;
                assert!(report(|| Arc::new(Doing("policy 10-a"))));
                backstop()
            })
            .await;
        assert_eq!(seen, Some(at));
        assert_eq!(scope.describe(), "policy 10-a");
        assert_eq!(backstop(), None, "the scope ends with the call");
    }
}
