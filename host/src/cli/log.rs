//! The serving host's log writer: whoever logs never waits for the reader.
//!
//! The host logs from every thread, the one that answers the runtime
//! included. Written straight to stderr, a record waits for the pipe to
//! take it; a reader that stops reading (journald stalled, a container
//! runtime's log pipe full, `kubectl logs` not drained) fills the pipe, the
//! next write blocks, and the answer the thread was about to send waits with
//! it: the runtime times the request out and drops the plugin. A plugin
//! must answer; a log may lose lines, as long as it says so.
//!
//! So a record is appended to a queue in memory, bounded in bytes
//! ([`QUEUE_BYTES`]), and one thread of its own writes the queue out (a
//! blocking write, which only that thread waits for). A record that does
//! not fit is dropped and counted, never written in part; as soon as the
//! writer gets through, one line says how many were lost, after the records
//! that were queued before them. Whoever logs holds the queue's lock for a
//! copy of its record, never for a write.
//!
//! The writer lingers ([`LINGER`]) once woken before it takes the queue:
//! a chain's decisions come as a line per policy that changed something, a
//! few tens of µs apart, and the writer was woken (on another CPU, as a
//! rule) for each of them. Lingering, a burst costs the writer two runs
//! (the record that wakes it, the linger's end) and one write, whatever
//! its length; a queue filling up (a [`HURRY_FRACTION`]th of its bytes), a
//! flush or the end of the queue cuts the linger short. The price: a
//! process killed outright (SIGKILL, the OOM killer) loses the records of
//! the last linger, where it lost only those of a write under way; every
//! exit through the guard still writes them.
//!
//! At exit the queue is flushed, waiting at most [`FLUSH_WAIT`]: a reader
//! that never reads again must not keep the process from exiting (the
//! writer thread is not waited for past that).
//!
//! Why not `tracing-appender`'s non-blocking writer: it bounds its queue in
//! records, not bytes (a policy's log lines are clipped, the host's own
//! are not), and a record it drops is only counted, in a counter the
//! caller must poll: the log itself never says that records were lost, nor
//! where. An operator reading a stalled node's log needs that line, in
//! order, which is the part written here.
//!
//! The author tools (`check`, `eval`, `config check`...) keep writing
//! their log synchronously: they hold stderr for their reports, and a
//! person reading a terminal wants the log in order with the report.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

use crate::config::LogFormat;

/// Most bytes of log records waiting for the writer. At a few hundred bytes
/// a record, tens of thousands of records: a reader stalled for seconds at
/// `debug` loses nothing, and a stalled reader costs the host at most twice
/// this (the batch being written and the queue filling behind it).
pub const QUEUE_BYTES: usize = 4 << 20;

/// Longest the host waits at exit for its queued records to be written.
pub const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// How long the writer, woken by a record, waits for the records that
/// follow it before writing them all: what lingering adds to a record's
/// way to the output, on top of a write under way.
pub const LINGER: Duration = Duration::from_millis(20);

/// The share of the queue's bytes at which the writer stops lingering.
const HURRY_FRACTION: usize = 4;

/// The target the writer's own line names, as a record of the host's would.
const TARGET: &str = "nri_wasm::log";

/// Capacity a written batch keeps for the next one; a burst's larger
/// buffer is given back.
const KEEP_BYTES: usize = 64 << 10;

/// The queue both sides share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the writer: records queued, or the queue closed.
    queued: Condvar,
    /// Wakes whoever flushes: a batch was written.
    written: Condvar,
    capacity: usize,
    /// How long the writer waits for more records once woken.
    linger: Duration,
}

#[derive(Debug, Default)]
struct State {
    /// Records waiting, in order, each whole.
    pending: Vec<u8>,
    /// Records accepted since start; the writer has written the first
    /// `written` of them.
    accepted: u64,
    written: u64,
    /// Records dropped since the writer last said so, and since start.
    unreported: u64,
    dropped: u64,
    /// No writer handle is left: the writer thread writes what is queued
    /// and ends.
    closed: bool,
    /// Flushes waiting for the writer: it does not linger while one does.
    flushes: u32,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic cannot leave the state half-changed: every change is one
        // step (a copy, or a counter).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues one record whole, or drops and counts it.
    fn push(&self, record: &[u8]) {
        let mut state = self.lock();
        let before = state.pending.len();
        if before + record.len() > self.capacity {
            state.unreported += 1;
            state.dropped += 1;
        } else {
            state.pending.extend_from_slice(record);
            state.accepted += 1;
        }
        let hurry = self.hurry();
        let crossed = before < hurry && state.pending.len() >= hurry;
        drop(state);
        // The writer waits without a timeout only with an empty queue and
        // nothing to report; otherwise it is busy writing, or lingering
        // until the queue is `hurry` bytes long. Waking it for anything
        // else would cost the wake-up that lingering saves.
        if before == 0 || crossed {
            self.queued.notify_one();
        }
    }

    /// Bytes queued at which the writer stops lingering.
    fn hurry(&self) -> usize {
        (self.capacity / HURRY_FRACTION).max(1)
    }
}

/// What the host's log layer writes to (its [`MakeWriter`]): each record
/// goes into the queue. Dropping it ends the writer thread once the queue
/// is written out.
#[derive(Debug)]
pub struct LogQueue {
    shared: Arc<Shared>,
}

impl Drop for LogQueue {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.queued.notify_one();
    }
}

/// One record on its way into the queue (`tracing_subscriber` formats a
/// record in full, then writes it with one `write_all`).
#[derive(Debug)]
pub struct QueueWriter<'a>(&'a Shared);

impl Write for QueueWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogQueue {
    type Writer = QueueWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        QueueWriter(&self.shared)
    }
}

/// Held while the host runs: dropping it flushes the queue, waiting at most
/// [`FLUSH_WAIT`].
#[derive(Debug)]
pub struct LogGuard {
    shared: Arc<Shared>,
}

impl LogGuard {
    /// Waits, at most `wait`, until every record queued so far is written;
    /// whether they were.
    pub fn flush(&self, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        let mut state = self.shared.lock();
        let target = state.accepted;
        if state.written >= target {
            return true;
        }
        // The writer does not linger while a flush waits.
        state.flushes += 1;
        self.shared.queued.notify_one();
        let mut done = true;
        while state.written < target {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                done = false;
                break;
            }
            state = self.shared.written.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        state.flushes -= 1;
        done
    }

    /// Records dropped since start because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.lock().dropped
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.flush(FLUSH_WAIT);
    }
}

/// Starts the writer thread, which writes to `out` what the returned
/// [`LogQueue`] is given, in `format` for its own line; `capacity` bytes
/// may wait ([`QUEUE_BYTES`] for the host), for at most `linger` once the
/// writer is woken ([`LINGER`] for the host).
pub fn queue(
    out: Box<dyn Write + Send>,
    format: LogFormat,
    capacity: usize,
    linger: Duration,
) -> std::io::Result<(LogQueue, LogGuard)> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        queued: Condvar::new(),
        written: Condvar::new(),
        capacity,
        linger,
    });
    let writer = shared.clone();
    std::thread::Builder::new().name("log-writer".into()).spawn(move || write_out(&writer, out, format))?;
    Ok((LogQueue { shared: shared.clone() }, LogGuard { shared }))
}

/// The writer thread: takes the whole queue at once, writes it, then says
/// how many records were dropped while it waited (they came after the ones
/// it took: the queue only shrinks when the writer takes it).
fn write_out(shared: &Shared, mut out: Box<dyn Write + Send>, format: LogFormat) {
    let mut batch = Vec::new();
    loop {
        let (dropped, end, closed) = {
            let mut state = shared.lock();
            while state.pending.is_empty() && state.unreported == 0 && !state.closed {
                state = shared.queued.wait(state).unwrap_or_else(PoisonError::into_inner);
            }
            // Linger for the rest of the burst (a linger past the clock's
            // range lasts until something cuts it short).
            let until = Instant::now().checked_add(shared.linger);
            while !state.closed && state.flushes == 0 && state.pending.len() < shared.hurry() {
                state = match until {
                    Some(until) => {
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        shared.queued.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0
                    }
                    None => shared.queued.wait(state).unwrap_or_else(PoisonError::into_inner),
                };
            }
            std::mem::swap(&mut state.pending, &mut batch);
            (std::mem::take(&mut state.unreported), state.accepted, state.closed)
        };
        // A failed write (the reader is gone) loses the batch; there is no
        // one left to tell.
        let _ = out.write_all(&batch);
        if dropped > 0 {
            let _ = out.write_all(dropped_line(dropped, format).as_bytes());
        }
        let _ = out.flush();
        batch.clear();
        batch.shrink_to(KEEP_BYTES);
        let mut state = shared.lock();
        state.written = end;
        shared.written.notify_all();
        if closed && state.pending.is_empty() && state.unreported == 0 {
            return;
        }
    }
}

/// The line that says `n` records were lost, in the log's format.
fn dropped_line(n: u64, format: LogFormat) -> String {
    use tracing_subscriber::fmt::time::FormatTime as _;
    let mut timestamp = String::new();
    let _ = tracing_subscriber::fmt::time::SystemTime
        .format_time(&mut tracing_subscriber::fmt::format::Writer::new(&mut timestamp));
    let message = format!("{n} log records dropped: the log reader was not keeping up");
    match format {
        LogFormat::Text => format!("{timestamp}  WARN {TARGET}: {message} dropped={n}\n"),
        LogFormat::Json => format!(
            "{{\"timestamp\":\"{timestamp}\",\"level\":\"WARN\",\"message\":\"{message}\",\"dropped\":{n},\
             \"target\":\"{TARGET}\"}}\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// An output that takes nothing until told to, like a pipe whose reader
    /// stalled, then keeps what it is given.
    struct Stalled {
        open: mpsc::Receiver<()>,
        opened: bool,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if !self.opened {
                // Released by a message, or by the test dropping its sender.
                let _ = self.open.recv();
                self.opened = true;
            }
            self.got.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the output was given.
    type Got = Arc<Mutex<Vec<u8>>>;

    fn stalled() -> (Box<dyn Write + Send>, mpsc::Sender<()>, Got) {
        let (release, open) = mpsc::channel();
        let got = Arc::new(Mutex::new(Vec::new()));
        (Box::new(Stalled { open, opened: false, got: got.clone() }), release, got)
    }

    fn log(queue: &LogQueue, line: &str) {
        queue.make_writer().write_all(line.as_bytes()).unwrap();
    }

    /// With the output stalled, logging goes on (the calls return: the
    /// test would hang otherwise), what does not fit is dropped whole and
    /// counted, and once the output takes records again everything queued
    /// comes out in order, then the count.
    #[test]
    fn a_stalled_output_drops_counts_and_reports_without_blocking() {
        let (out, release, got) = stalled();
        let (queue, guard) = super::queue(out, LogFormat::Text, 100, LINGER).unwrap();
        // The first record is taken by the writer, which then stalls on it.
        log(&queue, "record 00 taken first\n");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !guard.shared.lock().pending.is_empty() {
            assert!(Instant::now() < deadline, "the writer never took the first record");
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 1..=20 {
            log(&queue, &format!("record {i:02}\n"));
        }
        // 100 bytes hold ten records of 10 bytes; the other ten are dropped.
        assert_eq!(guard.dropped(), 10);
        assert!(!guard.flush(Duration::from_millis(50)), "nothing is written while the output is stalled");
        release.send(()).unwrap();
        assert!(guard.flush(Duration::from_secs(30)));
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut expected = vec!["record 00 taken first".to_string()];
        expected.extend((1..=10).map(|i| format!("record {i:02}")));
        assert_eq!(lines[..11], expected[..], "{text}");
        assert_eq!(lines.len(), 12, "{text}");
        assert!(
            lines[11]
                .ends_with(" WARN nri_wasm::log: 10 log records dropped: the log reader was not keeping up dropped=10"),
            "{text}"
        );
        // Counted once: later records come out with no new report.
        log(&queue, "record 21\n");
        assert!(guard.flush(Duration::from_secs(30)));
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        assert!(text.ends_with("dropped=10\nrecord 21\n"), "{text}");
        assert_eq!(guard.dropped(), 10);
    }

    /// A record larger than the whole queue is dropped, and reported even
    /// though nothing else is queued.
    #[test]
    fn a_record_larger_than_the_queue_is_dropped_and_reported_in_json() {
        let (out, release, got) = stalled();
        drop(release);
        let (queue, guard) = super::queue(out, LogFormat::Json, 16, LINGER).unwrap();
        log(&queue, &"x".repeat(17));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&got.lock().unwrap()).contains('\n') && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim_end()).expect(&text);
        assert_eq!(line["message"], "1 log records dropped: the log reader was not keeping up");
        assert_eq!(line["dropped"], 1);
        assert_eq!(line["level"], "WARN");
        assert_eq!(guard.dropped(), 1);
    }

    /// An output that never takes anything again does not hold the flush
    /// (at exit) past its wait, and the guard's drop returns.
    #[test]
    fn the_flush_at_exit_is_bounded_by_its_wait() {
        let (out, release, _got) = stalled();
        let (queue, guard) = super::queue(out, LogFormat::Text, 1 << 10, LINGER).unwrap();
        log(&queue, "stuck\n");
        log(&queue, "behind it\n");
        assert!(!guard.flush(Duration::from_millis(100)));
        drop(guard);
        drop(queue);
        drop(release);
    }

    /// An output that keeps each write apart.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().push(buf.to_vec());
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Records a few µs apart (a chain's decisions) wait for the linger
    /// and are written together, with one write; a flush cuts the linger
    /// short. The linger here is longer than any test could wait, so the
    /// first assertion holds however slow the machine is.
    #[test]
    fn a_burst_of_records_is_written_at_once_after_the_linger() {
        let writes = Writes::default();
        let (queue, guard) =
            super::queue(Box::new(writes.clone()), LogFormat::Text, 1 << 20, Duration::from_secs(3600)).unwrap();
        for i in 0..10 {
            log(&queue, &format!("decision {i}\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(writes.0.lock().unwrap().is_empty(), "written before the linger ended");
        assert!(guard.flush(Duration::from_secs(30)));
        let got = writes.0.lock().unwrap().clone();
        let expected: String = (0..10).map(|i| format!("decision {i}\n")).collect();
        assert_eq!(got, vec![expected.into_bytes()], "one write for the burst");
        // After the flush, the writer lingers again; closing the queue
        // cuts that linger short, with no flush.
        log(&queue, "later\n");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(writes.0.lock().unwrap().len(), 1);
        drop(queue);
        let deadline = Instant::now() + Duration::from_secs(30);
        while writes.0.lock().unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "closing the queue did not end the linger");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(writes.0.lock().unwrap()[1], b"later\n");
        drop(guard);
    }

    /// A queue filling up is written without waiting for the linger to end:
    /// lingering never costs records.
    #[test]
    fn a_filling_queue_cuts_the_linger_short() {
        let writes = Writes::default();
        let (queue, _guard) =
            super::queue(Box::new(writes.clone()), LogFormat::Text, 400, Duration::from_secs(3600)).unwrap();
        // 10 records of 10 bytes: a quarter of the queue.
        for i in 0..10 {
            log(&queue, &format!("record {i:02}\n"));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while writes.0.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let got: Vec<u8> = writes.0.lock().unwrap().concat();
        let expected: String = (0..10).map(|i| format!("record {i:02}\n")).collect();
        assert_eq!(String::from_utf8(got).unwrap(), expected);
    }

    /// When the last writer handle goes, the thread writes what is queued
    /// and ends.
    #[test]
    fn closing_the_queue_writes_what_is_left() {
        let (out, release, got) = stalled();
        let (queue, guard) = super::queue(out, LogFormat::Text, 1 << 10, LINGER).unwrap();
        log(&queue, "first\n");
        log(&queue, "second\n");
        drop(queue);
        release.send(()).unwrap();
        assert!(guard.flush(Duration::from_secs(30)));
        assert_eq!(&got.lock().unwrap()[..], b"first\nsecond\n");
    }
}
