//! The NRI connection multiplexer: two ttrpc connections over one unix socket.
//!
//! This is the I/O half: a task that reads frames off the socket and hands
//! each payload to its connection's pipe, and one pump per connection that
//! reassembles the whole ttrpc messages our ttrpc stack writes and frames
//! them for the socket. How frames and messages are laid out (and why the
//! runtime's reader forces that layout) is the codec's business,
//! `frame.rs`; the timing of each answer, `clock.rs`. Their types are
//! re-exported here, where the rest of the host has always found them.
//!
//! A frame that cannot be valid closes the connection with a [`FrameError`].
//! Memory stays bounded: one partially read frame plus a small pipe per
//! connection.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::{watch, Mutex, Notify};

pub use super::clock::{AnswerClock, AnswerTime};
pub use super::frame::{
    frame_message, Frame, FrameDecoder, FrameError, FrameHeader, MessageCursor, FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD,
    PLUGIN_CONN, READER_BUFFER, RESERVED_CONN, RUNTIME_CONN, TTRPC_HEADER_LEN, TTRPC_MAX_PAYLOAD, TTRPC_REQUEST,
    TTRPC_RESPONSE,
};

/// Capacity of the in-memory pipe between the mux and each ttrpc connection.
const PIPE_CAPACITY: usize = 64 << 10;
/// How much we read from the socket at once.
const READ_CHUNK: usize = 64 << 10;

/// Why a multiplexed connection ended. Show it with [`crate::text::chain`]: its
/// own text leaves out the cause (a frame's error) that its source gives.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MuxError {
    /// The runtime sent a frame that cannot be valid, or we were about to
    /// send a message ttrpc does not allow.
    #[error("invalid frame from the runtime")]
    Frame(#[from] FrameError),
    /// Reading or writing the socket failed.
    #[error("socket {op} failed: {message}")]
    Io {
        /// What failed: `read`, `write` or `flush`.
        op: &'static str,
        /// The I/O error's text.
        message: String,
    },
}

impl MuxError {
    fn io(op: &'static str, e: std::io::Error) -> Self {
        Self::Io { op, message: e.to_string() }
    }
}

/// How the multiplexed connection ended.
#[derive(Debug, Clone)]
pub enum MuxEnd {
    /// The runtime closed the socket at a frame boundary.
    PeerClosed,
    /// We closed it ([`MuxHandle::close`]) or our side of a conn went away.
    LocalClosed(&'static str),
    /// A framing or I/O error closed it.
    Failed(MuxError),
}

impl fmt::Display for MuxEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PeerClosed => f.write_str("closed by the runtime"),
            Self::LocalClosed(why) => write!(f, "closed locally ({why})"),
            Self::Failed(e) => write!(f, "failed: {}", crate::text::chain(e)),
        }
    }
}

/// Handle on a running multiplexer: close it, or wait until it ends.
#[derive(Debug, Clone)]
pub struct MuxHandle {
    close: Arc<Notify>,
    ended: watch::Receiver<Option<MuxEnd>>,
}

impl MuxHandle {
    /// Asks the mux to close the socket and both connections.
    pub fn close(&self) {
        self.close.notify_one();
    }

    /// Waits until the mux has ended and says why.
    pub async fn ended(&self) -> MuxEnd {
        let mut rx = self.ended.clone();
        loop {
            if let Some(end) = rx.borrow_and_update().clone() {
                return end;
            }
            if rx.changed().await.is_err() {
                return MuxEnd::LocalClosed("mux task dropped");
            }
        }
    }
}

/// The two logical connections of one NRI socket.
#[derive(Debug)]
pub struct MuxConns {
    /// Conn 1: serve the Plugin service on it.
    pub plugin: DuplexStream,
    /// Conn 2: call the Runtime service on it.
    pub runtime: DuplexStream,
    /// Closes the mux, or tells when and why it ended.
    pub handle: MuxHandle,
}

/// Starts multiplexing `socket` (must run inside a tokio runtime); `clock`
/// times the answers on the Plugin conn.
pub fn multiplex<S>(socket: S, clock: Arc<AnswerClock>) -> MuxConns
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (plugin_near, plugin_far) = tokio::io::duplex(PIPE_CAPACITY);
    let (runtime_near, runtime_far) = tokio::io::duplex(PIPE_CAPACITY);
    let (sock_r, sock_w) = tokio::io::split(socket);
    let (ended_tx, ended_rx) = watch::channel(None);
    let close = Arc::new(Notify::new());
    let close_wait = close.clone();

    tokio::spawn(async move {
        let (plugin_r, plugin_w) = tokio::io::split(plugin_far);
        let (runtime_r, runtime_w) = tokio::io::split(runtime_far);
        let writer = Mutex::new(sock_w);
        let end = tokio::select! {
            end = read_loop(sock_r, plugin_w, runtime_w, &clock) => end,
            end = pump_out(PLUGIN_CONN, plugin_r, &writer, Some(&clock)) => end,
            end = pump_out(RUNTIME_CONN, runtime_r, &writer, None) => end,
            _ = close_wait.notified() => MuxEnd::LocalClosed("close requested"),
        };
        clock.clear();
        let mut w = writer.lock().await;
        let _ = w.shutdown().await;
        let _ = ended_tx.send(Some(end));
    });

    MuxConns { plugin: plugin_near, runtime: runtime_near, handle: MuxHandle { close, ended: ended_rx } }
}

/// Reads frames from the socket and hands each payload to its connection.
async fn read_loop<R: AsyncRead>(
    sock: ReadHalf<R>,
    mut plugin: WriteHalf<DuplexStream>,
    mut runtime: WriteHalf<DuplexStream>,
    clock: &AnswerClock,
) -> MuxEnd {
    let mut sock = sock;
    let mut decoder = FrameDecoder::new();
    let mut requests = MessageCursor::new();
    loop {
        // The bytes just read are when the requests they complete arrived.
        let now = Instant::now();
        loop {
            match decoder.decode() {
                Ok(Some(frame)) => {
                    if frame.conn == PLUGIN_CONN {
                        requests.feed(&frame.payload, |stream, kind| {
                            if kind == TTRPC_REQUEST {
                                clock.arrived(stream, now);
                            }
                        });
                    }
                    let target = if frame.conn == PLUGIN_CONN { &mut plugin } else { &mut runtime };
                    if target.write_all(&frame.payload).await.is_err() {
                        return MuxEnd::LocalClosed("connection dropped by the ttrpc side");
                    }
                }
                Ok(None) => break,
                Err(e) => return MuxEnd::Failed(e.into()),
            }
        }
        let buf = decoder.buffer();
        buf.reserve(READ_CHUNK.min(MAX_FRAME_PAYLOAD));
        match sock.read_buf(buf).await {
            Ok(0) => {
                return match decoder.finish() {
                    Ok(()) => MuxEnd::PeerClosed,
                    Err(e) => MuxEnd::Failed(e.into()),
                }
            }
            Ok(_) => {}
            Err(e) => return MuxEnd::Failed(MuxError::io("read", e)),
        }
    }
}

/// Reassembles the ttrpc messages our side writes on `conn` and sends each
/// one as frames that the reference reader accepts; with a `clock`, each
/// response that is out stops its request's clock.
async fn pump_out<W: AsyncWrite>(
    conn: u32,
    mut from: ReadHalf<DuplexStream>,
    writer: &Mutex<WriteHalf<W>>,
    clock: Option<&AnswerClock>,
) -> MuxEnd {
    let mut message = Vec::with_capacity(READER_BUFFER);
    let mut frames = Vec::with_capacity(READER_BUFFER + 2 * FRAME_HEADER_LEN);
    loop {
        message.resize(TTRPC_HEADER_LEN, 0);
        match from.read_exact(&mut message[..TTRPC_HEADER_LEN]).await {
            Ok(_) => {}
            Err(_) => return MuxEnd::LocalClosed("ttrpc connection closed"),
        }
        let len = u32::from_be_bytes([message[0], message[1], message[2], message[3]]) as usize;
        if len > TTRPC_MAX_PAYLOAD {
            return MuxEnd::Failed(FrameError::MessageTooLong { len, max: TTRPC_MAX_PAYLOAD }.into());
        }
        message.resize(TTRPC_HEADER_LEN + len, 0);
        if from.read_exact(&mut message[TTRPC_HEADER_LEN..]).await.is_err() {
            return MuxEnd::LocalClosed("ttrpc connection closed mid-message");
        }
        frames.clear();
        frame_message(conn, &message, &mut frames);
        let mut w = writer.lock().await;
        // The answer is out when the write starts: the runtime may read it,
        // and preempt us, before the call returns.
        let out = Instant::now();
        if let Err(e) = w.write_all(&frames).await {
            return MuxEnd::Failed(MuxError::io("write", e));
        }
        if let Err(e) = w.flush().await {
            return MuxEnd::Failed(MuxError::io("flush", e));
        }
        drop(w);
        if let Some(clock) = clock.filter(|_| message[8] == TTRPC_RESPONSE) {
            clock.answered(u32::from_be_bytes([message[4], message[5], message[6], message[7]]), out);
        }
        // Do not keep a multi-megabyte buffer around after a large message.
        if message.capacity() > 4 * READER_BUFFER {
            message = Vec::with_capacity(READER_BUFFER);
            frames = Vec::with_capacity(READER_BUFFER + 2 * FRAME_HEADER_LEN);
        }
    }
}
