//! Timing every answer on the Plugin conn, from the request's last byte
//! read to the answer handed to the socket.
//!
//! The mux is where the runtime's wait for us starts and ends; with the
//! dispatcher's part of it, this tells the chain's cost from the
//! transport's, per request, in production. It is bookkeeping by stream
//! id, apart from the I/O loops that feed it, and tested without a socket.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// How long the host took to answer one request, as the socket saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerTime {
    /// The request's ttrpc stream id.
    pub stream: u32,
    /// The event, if a handler started on it.
    pub event: Option<&'static str>,
    /// From the request's last byte read off the socket to the answer
    /// handed to it (its write started): everything the host did for it.
    pub total: Duration,
    /// The part of it the handler's dispatcher took (the policy chain);
    /// `None` when ttrpc dropped the handler at the request's deadline.
    pub handler: Option<Duration>,
}

/// Requests whose answer is awaited at most; a runtime does not have more
/// in flight, and a peer that sends more loses only their timing.
const MAX_TIMED: usize = 1024;

/// Past this, a timed request is taken for one that will not be answered.
const UNANSWERED: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Pending {
    arrived: Instant,
    event: Option<&'static str>,
    handler: Option<Duration>,
}

/// Times every answer on the Plugin conn at the socket: the mux notes when
/// a request has arrived and when its answer is out, the service what the
/// dispatcher took in between; the owner's `report` gets the result.
///
/// This is how an operator (and the real-path benchmark) tells the chain's
/// cost from the transport's, per request, without a profiler.
pub struct AnswerClock {
    pending: std::sync::Mutex<HashMap<u32, Pending>>,
    report: Box<dyn Fn(AnswerTime) + Send + Sync>,
}

impl fmt::Debug for AnswerClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnswerClock").finish_non_exhaustive()
    }
}

impl Default for AnswerClock {
    fn default() -> Self {
        Self::new(|_| {})
    }
}

impl AnswerClock {
    /// A clock that hands every answer's times to `report`.
    pub fn new(report: impl Fn(AnswerTime) + Send + Sync + 'static) -> Self {
        Self { pending: std::sync::Mutex::new(HashMap::new()), report: Box::new(report) }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Request `stream` has arrived whole.
    pub fn arrived(&self, stream: u32, at: Instant) {
        let mut pending = self.pending();
        if pending.len() >= MAX_TIMED {
            // Requests never answered (their handler was dropped) make
            // room once they are older than any answer can be.
            pending.retain(|_, p| at.saturating_duration_since(p.arrived) < UNANSWERED);
        }
        if pending.len() < MAX_TIMED || pending.contains_key(&stream) {
            pending.insert(stream, Pending { arrived: at, event: None, handler: None });
        }
    }

    /// The handler of request `stream` starts serving `event`.
    pub fn serving(&self, stream: u32, event: &'static str) {
        if let Some(p) = self.pending().get_mut(&stream) {
            p.event = Some(event);
        }
    }

    /// The handler of request `stream` took `took` (not called when the
    /// handler was dropped at ttrpc's own deadline).
    pub fn handled(&self, stream: u32, took: Duration) {
        if let Some(p) = self.pending().get_mut(&stream) {
            p.handler = Some(took);
        }
    }

    /// The answer to request `stream` is out: reports its time.
    pub fn answered(&self, stream: u32, at: Instant) {
        let Some(p) = self.pending().remove(&stream) else { return };
        (self.report)(AnswerTime {
            stream,
            event: p.event,
            total: at.saturating_duration_since(p.arrived),
            handler: p.handler,
        });
    }

    /// The connection ended: nothing pending will be answered.
    pub(super) fn clear(&self) {
        self.pending().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn clock_reports_each_answered_request_once() {
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = got.clone();
        let clock = AnswerClock::new(move |t| sink.lock().unwrap().push(t));
        let t0 = Instant::now();
        clock.arrived(3, t0);
        clock.arrived(5, t0);
        clock.serving(3, "CreateContainer");
        clock.handled(3, Duration::from_micros(300));
        clock.serving(7, "StopContainer");
        clock.handled(7, Duration::from_micros(1));
        // A handler dropped at its deadline: the event, no handler time.
        clock.arrived(9, t0);
        clock.serving(9, "StopContainer");
        clock.answered(3, t0 + Duration::from_micros(340));
        clock.answered(3, t0 + Duration::from_micros(400));
        clock.answered(11, t0 + Duration::from_micros(400));
        clock.answered(5, t0 + Duration::from_micros(20));
        clock.answered(9, t0 + Duration::from_secs(2));
        let got = got.lock().unwrap().clone();
        assert_eq!(
            got,
            [
                AnswerTime {
                    stream: 3,
                    event: Some("CreateContainer"),
                    total: Duration::from_micros(340),
                    handler: Some(Duration::from_micros(300)),
                },
                AnswerTime { stream: 5, event: None, total: Duration::from_micros(20), handler: None },
                AnswerTime { stream: 9, event: Some("StopContainer"), total: Duration::from_secs(2), handler: None },
            ]
        );
    }

    #[test]
    fn clock_holds_a_bounded_number_of_requests() {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = count.clone();
        let clock = AnswerClock::new(move |_| {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let t0 = Instant::now();
        for stream in 0..(MAX_TIMED as u32 + 100) {
            clock.arrived(stream * 2 + 1, t0);
        }
        assert_eq!(clock.pending().len(), MAX_TIMED);
        for stream in 0..(MAX_TIMED as u32 + 100) {
            clock.answered(stream * 2 + 1, t0);
        }
        assert_eq!(count.load(std::sync::atomic::Ordering::Relaxed), MAX_TIMED);
        assert!(clock.pending().is_empty());
        // Full of requests that are never answered: timing goes on once
        // they are old enough not to be.
        for stream in 0..MAX_TIMED as u32 {
            clock.arrived(stream * 2 + 1, t0);
        }
        let later = t0 + UNANSWERED + Duration::from_secs(1);
        clock.arrived(100_001, later);
        assert_eq!(clock.pending().len(), 1);
        clock.answered(100_001, later);
        assert_eq!(count.load(std::sync::atomic::Ordering::Relaxed), MAX_TIMED + 1);
    }
}
