//! The `/metrics` and `/status` bodies, each encoded by one job at a time.
//!
//! Encoding a body is work that grows with the number of policies, done on
//! a blocking thread of the endpoint's runtime. A job per request would let
//! anyone who can reach the port queue work without bound: a queued job
//! keeps its place when its connection is shed or closed, so a flood of
//! requests that are never read leaves both threads encoding long after
//! the flood, with every scrape behind it.
//!
//! So each kind of body has an [`Encoder`]: one task that encodes when
//! asked, one job at a time. A request is answered by the first encode that
//! starts after it arrived (a body never predates its request), and every
//! request waiting shares that encode. After each encode the task rests as
//! long as the encode took, so a flood holds at most half of one thread,
//! and a request waits at most about three encodes' time (the rest of the
//! one running, the rest after it, its own). A request that is gone
//! leaves at most the one encode it asked for.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

/// One finished encode.
#[derive(Debug, Clone)]
struct Encoded {
    started: Instant,
    /// `None` if the job panicked.
    body: Option<Arc<[u8]>>,
}

/// Encodes one kind of body for every request, one job at a time.
#[derive(Debug)]
pub(super) struct Encoder {
    wake: Arc<Notify>,
    done: watch::Receiver<Option<Encoded>>,
}

impl Encoder {
    /// Starts the encoder's task on the current runtime; `work` runs on its
    /// blocking threads. The task ends when the encoder is dropped.
    pub(super) fn start(work: impl Fn() -> Vec<u8> + Send + Sync + 'static) -> Self {
        let work = Arc::new(work);
        let wake = Arc::new(Notify::new());
        let (tx, done) = watch::channel(None);
        let asked = wake.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = asked.notified() => {}
                    () = tx.closed() => return,
                }
                let started = Instant::now();
                let job = work.clone();
                let body = tokio::task::spawn_blocking(move || job()).await.ok().map(Arc::from);
                let took = started.elapsed();
                if tx.send(Some(Encoded { started, body })).is_err() {
                    return;
                }
                // Rest as long as the work took: a flood gets half a thread.
                tokio::time::sleep(took).await;
            }
        });
        Self { wake, done }
    }

    /// A body encoded after this call, within `within`; `None` if the job
    /// failed or none finished in time. The request counts as arrived when
    /// this is called, not when the future is first polled.
    pub(super) fn get(&self, within: Duration) -> impl Future<Output = Option<Arc<[u8]>>> + use<> {
        let arrived = Instant::now();
        let mut done = self.done.clone();
        self.wake.notify_one();
        async move {
            let fresh = async {
                loop {
                    if let Some(e) = done.borrow_and_update().as_ref().filter(|e| e.started >= arrived) {
                        return e.body.clone();
                    }
                    if done.changed().await.is_err() {
                        return None;
                    }
                }
            };
            tokio::time::timeout(within, fresh).await.ok().flatten()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{mpsc, Mutex};

    use super::*;

    /// Work that counts its runs and waits for a token before it returns.
    fn gated() -> (Encoder, Arc<AtomicU64>, mpsc::Sender<()>) {
        let runs = Arc::new(AtomicU64::new(0));
        let (release, gate) = mpsc::channel::<()>();
        let gate = Mutex::new(gate);
        let counted = runs.clone();
        let encoder = Encoder::start(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = gate.lock().unwrap().recv();
            format!("body {n}").into_bytes()
        });
        (encoder, runs, release)
    }

    async fn until(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !check() {
            assert!(Instant::now() < deadline, "{what} did not happen within 60 s");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A hundred requests cost two encodes, not a hundred: the one running
    /// when the first arrived, and one shared by all that came after it
    /// started; none of them gets a body encoded before it arrived.
    #[tokio::test]
    async fn requests_share_one_encode_that_started_after_they_arrived() {
        let (encoder, runs, release) = gated();
        let first = tokio::spawn(encoder.get(Duration::from_secs(60)));
        until("the first encode", || runs.load(Ordering::SeqCst) == 1).await;
        let later: Vec<_> = (0..99).map(|_| tokio::spawn(encoder.get(Duration::from_secs(60)))).collect();
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap().as_deref(), Some(&b"body 1"[..]));
        until("the second encode", || runs.load(Ordering::SeqCst) == 2).await;
        release.send(()).unwrap();
        for request in later {
            assert_eq!(request.await.unwrap().as_deref(), Some(&b"body 2"[..]), "encoded after the request");
        }
        // Nobody asked again: nothing more is encoded.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    /// Requests that are gone (their connections shed) leave one encode
    /// behind them, however many there were: the next request's body is
    /// the third encoded.
    #[tokio::test]
    async fn requests_dropped_unanswered_leave_one_encode() {
        let (encoder, runs, release) = gated();
        let first = encoder.get(Duration::from_secs(60));
        until("the first encode", || runs.load(Ordering::SeqCst) == 1).await;
        for _ in 0..1000 {
            drop(encoder.get(Duration::from_secs(60)));
        }
        drop(first);
        release.send(()).unwrap();
        until("the encode the dropped requests asked for", || runs.load(Ordering::SeqCst) == 2).await;
        release.send(()).unwrap();
        let next = encoder.get(Duration::from_secs(60));
        release.send(()).unwrap();
        assert_eq!(next.await.as_deref(), Some(&b"body 3"[..]), "one encode for 1,001 requests gone");
    }

    /// A request whose encode does not finish in time gets nothing, and the
    /// encoder still answers once the work returns.
    #[tokio::test]
    async fn a_stalled_encode_times_the_request_out() {
        let (encoder, runs, release) = gated();
        assert_eq!(encoder.get(Duration::from_millis(100)).await, None);
        until("the stalled encode", || runs.load(Ordering::SeqCst) == 1).await;
        release.send(()).unwrap();
        release.send(()).unwrap();
        assert_eq!(encoder.get(Duration::from_secs(60)).await.as_deref(), Some(&b"body 2"[..]));
    }
}
