//! The runtime's end of the multiplexed socket.
//!
//! The demultiplexer and the conn readers behave like the reference runtime's
//! (see [`crate::goio`]); above them sits a real ttrpc stack. Each logical
//! conn is bridged to the ttrpc stack through an in-memory pipe: inbound,
//! only whole messages that survived the reference reading rules reach ttrpc;
//! outbound, every message ttrpc writes is framed exactly as the reference
//! writer frames it. Anything the reference runtime would have choked on is
//! recorded as a violation and closes the connection, as it would there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use crate::goio::{self, FrameSource, GoBufReader, GoConnReader, GoReadError, READ_QUEUE_LEN};

/// Conn of the Plugin service (the runtime is the client).
pub const PLUGIN_CONN: u32 = 1;
/// Conn of the Runtime service (the runtime is the server).
pub const RUNTIME_CONN: u32 = 2;
/// Largest frame the simulator will allocate for (protects the test process).
const SANITY_FRAME_CAP: usize = 64 << 20;

/// What the wire layer observed, shared with the test.
#[derive(Debug, Default)]
pub struct WireStats {
    frames_read: AtomicU64,
    frames_written: AtomicU64,
    unknown_conn_frames: AtomicU64,
    violations: Mutex<Vec<String>>,
    /// Requests to the plugin written whole, by stream, awaiting a response.
    sent: Mutex<HashMap<u32, Instant>>,
    last_round_trip: Mutex<Option<RoundTrip>>,
    /// Every round trip since the last [`WireStats::take_round_trips`], the
    /// oldest dropped past [`ROUND_TRIPS_KEPT`].
    round_trips: Mutex<std::collections::VecDeque<RoundTrip>>,
}

/// How many round trips [`WireStats::take_round_trips`] can return: a test
/// that never takes them holds a bounded number.
pub const ROUND_TRIPS_KEPT: usize = 4096;

/// One request to the plugin as the socket saw it: from the write of its
/// last frame to the last byte of its response read, before the runtime's
/// own ttrpc stack sees either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundTrip {
    pub stream: u32,
    pub took: Duration,
}

impl WireStats {
    pub fn frames_read(&self) -> u64 {
        self.frames_read.load(Ordering::Relaxed)
    }

    pub fn frames_written(&self) -> u64 {
        self.frames_written.load(Ordering::Relaxed)
    }

    pub fn unknown_conn_frames(&self) -> u64 {
        self.unknown_conn_frames.load(Ordering::Relaxed)
    }

    /// Everything the reference runtime would have failed on.
    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().expect("violations lock").clone()
    }

    /// The last request to the plugin that got its response.
    pub fn last_round_trip(&self) -> Option<RoundTrip> {
        *self.last_round_trip.lock().expect("round trip lock")
    }

    /// Every request that got its response since the last call, in the
    /// order their responses were read (at most [`ROUND_TRIPS_KEPT`], the
    /// newest): a CRI call that sends several events (CreateContainer and
    /// PostCreateContainer) is timed event by event.
    pub fn take_round_trips(&self) -> Vec<RoundTrip> {
        self.round_trips.lock().expect("round trips lock").drain(..).collect()
    }

    /// A request's last frame is about to be written: from now on the
    /// plugin may read it whole (and run before the write returns).
    fn request_sent(&self, stream: u32) {
        let mut sent = self.sent.lock().expect("sent lock");
        // A plugin that never answers holds a bounded number.
        if sent.len() < 1024 {
            sent.insert(stream, Instant::now());
        }
    }

    fn response_read(&self, stream: u32, at: Instant) {
        if let Some(t) = self.sent.lock().expect("sent lock").remove(&stream) {
            let trip = RoundTrip { stream, took: at.saturating_duration_since(t) };
            *self.last_round_trip.lock().expect("round trip lock") = Some(trip);
            let mut trips = self.round_trips.lock().expect("round trips lock");
            if trips.len() == ROUND_TRIPS_KEPT {
                trips.pop_front();
            }
            trips.push_back(trip);
        }
    }

    fn violation(&self, v: impl ToString) {
        self.violations.lock().expect("violations lock").push(v.to_string());
    }
}

/// The two ttrpc-side pipes of one runtime connection.
#[derive(Debug)]
pub struct WireConns {
    /// The runtime calls the plugin on this one.
    pub plugin: DuplexStream,
    /// The runtime serves the plugin on this one.
    pub runtime: DuplexStream,
}

/// Wraps a std receiver as the frame queue of one conn.
struct QueueSource(std::sync::mpsc::Receiver<Vec<u8>>);

impl FrameSource for QueueSource {
    fn next_frame(&mut self) -> Option<Vec<u8>> {
        self.0.recv().ok()
    }
}

/// Starts the runtime side of the wire on `socket`. Cancelling `closed`
/// (or any violation) tears everything down and closes the socket.
pub fn start(socket: UnixStream, stats: Arc<WireStats>, closed: CancellationToken) -> WireConns {
    let (plugin_near, plugin_far) = tokio::io::duplex(64 << 10);
    let (runtime_near, runtime_far) = tokio::io::duplex(64 << 10);
    let (sock_r, sock_w) = socket.into_split();
    let writer = Arc::new(tokio::sync::Mutex::new(sock_w));

    let (plugin_far_r, plugin_far_w) = tokio::io::split(plugin_far);
    let (runtime_far_r, runtime_far_w) = tokio::io::split(runtime_far);

    let mut queues = Vec::new();
    for (conn, far_w) in [(PLUGIN_CONN, plugin_far_w), (RUNTIME_CONN, runtime_far_w)] {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(READ_QUEUE_LEN);
        queues.push(tx);
        spawn_conn_reader(conn, rx, far_w, stats.clone(), closed.clone());
    }
    spawn_demux(sock_r, queues, stats.clone(), closed.clone());
    for (conn, far_r) in [(PLUGIN_CONN, plugin_far_r), (RUNTIME_CONN, runtime_far_r)] {
        spawn_conn_writer(conn, far_r, writer.clone(), stats.clone(), closed.clone());
    }
    let w = writer.clone();
    let c = closed.clone();
    tokio::spawn(async move {
        c.cancelled().await;
        let _ = w.lock().await.shutdown().await;
    });
    WireConns { plugin: plugin_near, runtime: runtime_near }
}

/// The demultiplexer: one frame at a time from the socket into its conn's
/// bounded queue; an overflowing queue closes the connection.
fn spawn_demux(
    mut sock: OwnedReadHalf,
    queues: Vec<std::sync::mpsc::SyncSender<Vec<u8>>>,
    stats: Arc<WireStats>,
    closed: CancellationToken,
) {
    tokio::spawn(async move {
        // Where the plugin's responses end, for the round-trip times.
        let mut response: Option<(u32, usize)> = None;
        let frames = async {
            loop {
                let mut header = [0u8; 8];
                if sock.read_exact(&mut header).await.is_err() {
                    return Ok(());
                }
                let conn = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
                let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
                if len > SANITY_FRAME_CAP {
                    return Err(format!("frame of {len} bytes for conn {conn}"));
                }
                let mut payload = vec![0u8; len];
                if sock.read_exact(&mut payload).await.is_err() {
                    return Err(format!("socket closed inside a {len}-byte frame"));
                }
                stats.frames_read.fetch_add(1, Ordering::Relaxed);
                if conn == PLUGIN_CONN {
                    let at = Instant::now();
                    // The header leads the first frame of a message (the
                    // reference reader needs it there; others lose timing).
                    let rest = match response.take() {
                        Some((stream, rest)) => Some((stream, rest.saturating_sub(len))),
                        None if len >= goio::TTRPC_HEADER_LEN && payload[8] == goio::TTRPC_RESPONSE => {
                            let body = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) as usize;
                            let stream = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                            Some((stream, (goio::TTRPC_HEADER_LEN + body).saturating_sub(len)))
                        }
                        None => None,
                    };
                    match rest {
                        Some((stream, 0)) => stats.response_read(stream, at),
                        other => response = other,
                    }
                }
                let queue = match conn {
                    PLUGIN_CONN => &queues[0],
                    RUNTIME_CONN => &queues[1],
                    _ => {
                        // The reference demultiplexer drops frames of conns
                        // nobody opened.
                        stats.unknown_conn_frames.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                match queue.try_send(payload) {
                    Ok(()) => {}
                    Err(std::sync::mpsc::TrySendError::Full(_)) => {
                        return Err(GoReadError::QueueOverflow { conn }.to_string());
                    }
                    Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return Ok(()),
                }
            }
        };
        let result: Result<(), String> = tokio::select! {
            r = frames => r,
            _ = closed.cancelled() => Ok(()),
        };
        if let Err(v) = result {
            stats.violation(v);
        }
        closed.cancel();
    });
}

/// Reads ttrpc messages the reference way on a blocking thread and hands the
/// whole messages to the ttrpc stack.
fn spawn_conn_reader(
    conn: u32,
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    mut far_w: WriteHalf<DuplexStream>,
    stats: Arc<WireStats>,
    closed: CancellationToken,
) {
    let (msg_tx, mut msg_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let reader_stats = stats.clone();
    let reader_closed = closed.clone();
    tokio::task::spawn_blocking(move || {
        let mut reader = GoBufReader::new(GoConnReader::new(conn, QueueSource(rx)));
        loop {
            match goio::read_ttrpc_message(conn, &mut reader) {
                Ok(m) => {
                    if msg_tx.blocking_send(m).is_err() {
                        return;
                    }
                }
                Err(GoReadError::Closed) => return,
                Err(e) => {
                    reader_stats.violation(e);
                    reader_closed.cancel();
                    return;
                }
            }
        }
    });
    tokio::spawn(async move {
        loop {
            tokio::select! {
                m = msg_rx.recv() => match m {
                    Some(m) => if far_w.write_all(&m).await.is_err() { break },
                    None => break,
                },
                _ = closed.cancelled() => break,
            }
        }
        let _ = far_w.shutdown().await;
    });
}

/// Frames each message the ttrpc stack writes the way the reference writer does.
fn spawn_conn_writer(
    conn: u32,
    mut far_r: ReadHalf<DuplexStream>,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    stats: Arc<WireStats>,
    closed: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            let mut message = vec![0u8; goio::TTRPC_HEADER_LEN];
            tokio::select! {
                r = far_r.read_exact(&mut message) => if r.is_err() { break },
                _ = closed.cancelled() => break,
            }
            let len = u32::from_be_bytes([message[0], message[1], message[2], message[3]]) as usize;
            message.resize(goio::TTRPC_HEADER_LEN + len, 0);
            if far_r.read_exact(&mut message[goio::TTRPC_HEADER_LEN..]).await.is_err() {
                break;
            }
            let request = (conn == PLUGIN_CONN && message[8] == goio::TTRPC_REQUEST)
                .then(|| u32::from_be_bytes([message[4], message[5], message[6], message[7]]));
            let mut w = writer.lock().await;
            let frames = goio::go_frames(&message);
            let last = frames.len().saturating_sub(1);
            for (i, frame) in frames.into_iter().enumerate() {
                let mut bytes = Vec::with_capacity(8 + frame.len());
                bytes.extend_from_slice(&conn.to_be_bytes());
                bytes.extend_from_slice(&(frame.len() as u32).to_be_bytes());
                bytes.extend_from_slice(&frame);
                if let Some(stream) = request.filter(|_| i == last) {
                    stats.request_sent(stream);
                }
                if w.write_all(&bytes).await.is_err() {
                    closed.cancel();
                    return;
                }
                stats.frames_written.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
}
