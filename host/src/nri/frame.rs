//! The NRI frame codec, sans I/O: frames in, frames out, and where the
//! ttrpc messages inside them end.
//!
//! NRI carries two logical connections on a single socket. Every frame is an
//! 8-byte header (big-endian conn id, big-endian payload length) followed by
//! the payload. Conn 1 carries the `Plugin` service (we are its ttrpc server),
//! conn 2 the `Runtime` service (we are its ttrpc client). There is no
//! open/close signalling: the connections exist as long as the socket does.
//!
//! The runtime's reader is the hard constraint on how we *write*. It returns
//! exactly one frame per read and fails when a frame is larger than the buffer
//! it reads into, and its ttrpc layer reads through a 4096-byte buffered
//! reader (a 10-byte header read, then one read of exactly the payload). So a
//! frame may never carry bytes of two ttrpc messages, and a frame over 4096
//! bytes may not carry a ttrpc header. The mux therefore frames every whole
//! ttrpc message the way the reference Go writer does ([`frame_message`]):
//! the header plus up to 4086 payload bytes in the first frame, the rest of
//! the message in one more frame.
//!
//! Reading is lenient where the peer may legitimately differ from us (older
//! runtimes send a whole message as one frame of up to 4 MiB + 10 bytes; we
//! accept up to [`MAX_FRAME_PAYLOAD`]) and strict where a frame cannot be
//! valid: conn id 0, an unknown conn id, a length over the cap or a socket that
//! ends mid-frame are a [`FrameError`]. Memory stays bounded: one partially
//! read frame.
//!
//! Nothing here reads or writes a socket, so that the rules above are tested
//! byte by byte (and fuzzed) without one; the loops that do are `mux.rs`.

use bytes::{Buf, BytesMut};

/// Length of a mux frame header: conn id and payload length, both u32 BE.
pub const FRAME_HEADER_LEN: usize = 8;
/// Largest incoming frame payload we accept (older runtimes do not split).
pub const MAX_FRAME_PAYLOAD: usize = 16 << 20;
/// Conn id reserved by the protocol; a frame for it is invalid.
pub const RESERVED_CONN: u32 = 0;
/// Conn id of the Plugin service (runtime calls us).
pub const PLUGIN_CONN: u32 = 1;
/// Conn id of the Runtime service (we call the runtime).
pub const RUNTIME_CONN: u32 = 2;

/// Length of a ttrpc message header (u32 length, u32 stream id, type, flags).
pub const TTRPC_HEADER_LEN: usize = 10;
/// ttrpc message type of a request (header byte 8).
pub const TTRPC_REQUEST: u8 = 1;
/// ttrpc message type of a response.
pub const TTRPC_RESPONSE: u8 = 2;
/// Largest ttrpc message payload either side accepts.
pub const TTRPC_MAX_PAYLOAD: usize = 4 << 20;
/// Size of the reference reader's buffer: the largest frame that may carry a
/// ttrpc header.
pub const READER_BUFFER: usize = 4096;

/// Why a frame or the frame stream is invalid.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A frame names conn id 0, which the protocol reserves.
    #[error("frame for reserved conn id 0")]
    ReservedConn,
    /// A frame names a conn id (given) other than 1 and 2.
    #[error("frame for unknown conn id {0} (only 1 and 2 exist)")]
    UnknownConn(u32),
    /// A frame's header announces more payload than we accept.
    #[error("frame payload of {len} bytes exceeds the {max}-byte limit")]
    TooLong {
        /// The payload length in the header, in bytes.
        len: usize,
        /// The cap, [`MAX_FRAME_PAYLOAD`].
        max: usize,
    },
    /// The stream ended inside a frame (its header or its payload).
    #[error("connection closed in the middle of a frame ({have} of {need} bytes read)")]
    Truncated {
        /// Bytes of the frame received, header included.
        have: usize,
        /// Bytes the frame needed: the header, plus the payload if the
        /// header was read.
        need: usize,
    },
    /// A message we were about to send is larger than ttrpc allows.
    #[error("outgoing ttrpc message of {len} bytes exceeds the {max}-byte limit")]
    MessageTooLong {
        /// The length of its payload (after the ttrpc header), in bytes.
        len: usize,
        /// The largest payload ttrpc allows, [`TTRPC_MAX_PAYLOAD`].
        max: usize,
    },
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The conn id: [`PLUGIN_CONN`] or [`RUNTIME_CONN`].
    pub conn: u32,
    /// The length of the payload that follows, in bytes.
    pub len: usize,
}

impl FrameHeader {
    /// Decodes and validates a header against the conn ids we serve.
    pub fn decode(bytes: [u8; FRAME_HEADER_LEN]) -> Result<Self, FrameError> {
        let conn = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let len = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
        match conn {
            RESERVED_CONN => return Err(FrameError::ReservedConn),
            PLUGIN_CONN | RUNTIME_CONN => {}
            other => return Err(FrameError::UnknownConn(other)),
        }
        if len > MAX_FRAME_PAYLOAD {
            return Err(FrameError::TooLong { len, max: MAX_FRAME_PAYLOAD });
        }
        Ok(Self { conn, len })
    }

    /// Encodes a header.
    pub fn encode(conn: u32, len: usize) -> [u8; FRAME_HEADER_LEN] {
        let mut out = [0u8; FRAME_HEADER_LEN];
        out[..4].copy_from_slice(&conn.to_be_bytes());
        out[4..].copy_from_slice(&(len as u32).to_be_bytes());
        out
    }
}

/// One frame: the conn it belongs to and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The conn id: [`PLUGIN_CONN`] or [`RUNTIME_CONN`].
    pub conn: u32,
    /// The payload: bytes of the conn's ttrpc stream.
    pub payload: BytesMut,
}

/// Incremental, sans-IO frame decoder: feed it bytes, take frames out.
///
/// Kept free of I/O so the fuzz target and the socket reader run the same code.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: BytesMut,
    pending: Option<FrameHeader>,
}

impl FrameDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Buffer to read socket bytes into.
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Appends bytes (tests and fuzzing, with the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Returns the next complete frame, `None` if more bytes are needed.
    pub fn decode(&mut self) -> Result<Option<Frame>, FrameError> {
        let header = match self.pending {
            Some(h) => h,
            None => {
                if self.buf.len() < FRAME_HEADER_LEN {
                    return Ok(None);
                }
                let mut raw = [0u8; FRAME_HEADER_LEN];
                raw.copy_from_slice(&self.buf[..FRAME_HEADER_LEN]);
                let header = FrameHeader::decode(raw)?;
                self.buf.advance(FRAME_HEADER_LEN);
                self.pending = Some(header);
                header
            }
        };
        if self.buf.len() < header.len {
            // Make room for the rest of this frame only: bounded by the cap.
            self.buf.reserve(header.len - self.buf.len());
            return Ok(None);
        }
        self.pending = None;
        Ok(Some(Frame { conn: header.conn, payload: self.buf.split_to(header.len) }))
    }

    /// Called at end of stream: an error if a frame was cut short.
    pub fn finish(&self) -> Result<(), FrameError> {
        match self.pending {
            Some(h) => {
                Err(FrameError::Truncated { have: FRAME_HEADER_LEN + self.buf.len(), need: FRAME_HEADER_LEN + h.len })
            }
            None if !self.buf.is_empty() => Err(FrameError::Truncated { have: self.buf.len(), need: FRAME_HEADER_LEN }),
            None => Ok(()),
        }
    }
}

/// Appends the frames for one complete ttrpc message (`message` starts with
/// its 10-byte ttrpc header) to `out`.
///
/// Layout: a message that fits the reader buffer travels as one frame;
/// a larger one as the header with the first 4086 payload bytes, then the
/// whole remainder in a second frame. Both frames are safe for the reference
/// reader at every size up to [`TTRPC_MAX_PAYLOAD`].
pub fn frame_message(conn: u32, message: &[u8], out: &mut Vec<u8>) {
    let first = message.len().min(READER_BUFFER);
    out.reserve(2 * FRAME_HEADER_LEN + message.len());
    out.extend_from_slice(&FrameHeader::encode(conn, first));
    out.extend_from_slice(&message[..first]);
    let rest = &message[first..];
    if !rest.is_empty() {
        out.extend_from_slice(&FrameHeader::encode(conn, rest.len()));
        out.extend_from_slice(rest);
    }
}

/// Finds where the ttrpc messages of one conn end in its frames' payloads.
///
/// Sans-IO, like [`FrameDecoder`]: the mux feeds it every payload it reads
/// for the Plugin conn to learn the moment a request has arrived whole,
/// which is when the runtime starts waiting for us. It only counts bytes;
/// what the messages say is the ttrpc stack's business.
#[derive(Debug, Default)]
pub struct MessageCursor {
    header: [u8; TTRPC_HEADER_LEN],
    have: usize,
    remaining: usize,
    current: (u32, u8),
}

impl MessageCursor {
    /// A cursor at the start of a conn's stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes the payload of one frame; calls `ended(stream, type)` for
    /// every message whose last byte it holds.
    pub fn feed(&mut self, mut bytes: &[u8], mut ended: impl FnMut(u32, u8)) {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let take = self.remaining.min(bytes.len());
                self.remaining -= take;
                bytes = &bytes[take..];
                if self.remaining == 0 {
                    ended(self.current.0, self.current.1);
                }
                continue;
            }
            let take = (TTRPC_HEADER_LEN - self.have).min(bytes.len());
            self.header[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have < TTRPC_HEADER_LEN {
                return;
            }
            self.have = 0;
            let h = &self.header;
            let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
            self.current = (u32::from_be_bytes([h[4], h[5], h[6], h[7]]), h[8]);
            if len == 0 {
                ended(self.current.0, self.current.1);
            }
            self.remaining = len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(conn: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = FrameHeader::encode(conn, payload.len()).to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decoder_splits_frames_across_arbitrary_chunks() {
        let mut wire = frame(1, b"hello");
        wire.extend(frame(2, b""));
        wire.extend(frame(2, &[7u8; 5000]));
        for chunk in [1usize, 3, 8, 13, 4096, wire.len()] {
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for part in wire.chunks(chunk) {
                d.extend(part);
                while let Some(f) = d.decode().unwrap() {
                    got.push((f.conn, f.payload.to_vec()));
                }
            }
            d.finish().unwrap();
            assert_eq!(got, vec![(1, b"hello".to_vec()), (2, vec![]), (2, vec![7u8; 5000])], "chunk {chunk}");
        }
    }

    #[test]
    fn decoder_rejects_bad_headers() {
        let cases = [
            (FrameHeader::encode(0, 1), FrameError::ReservedConn),
            (FrameHeader::encode(3, 1), FrameError::UnknownConn(3)),
            (
                FrameHeader::encode(1, MAX_FRAME_PAYLOAD + 1),
                FrameError::TooLong { len: MAX_FRAME_PAYLOAD + 1, max: MAX_FRAME_PAYLOAD },
            ),
        ];
        for (raw, want) in cases {
            let mut d = FrameDecoder::new();
            d.extend(&raw);
            assert_eq!(d.decode().unwrap_err(), want);
        }
    }

    #[test]
    fn decoder_reports_truncation() {
        let mut d = FrameDecoder::new();
        d.extend(&frame(1, b"abcdef")[..10]);
        assert!(d.decode().unwrap().is_none());
        assert_eq!(d.finish().unwrap_err(), FrameError::Truncated { have: 10, need: 14 });
        let mut d = FrameDecoder::new();
        d.extend(&[0, 0, 0]);
        assert_eq!(d.finish().unwrap_err(), FrameError::Truncated { have: 3, need: 8 });
    }

    #[test]
    fn large_frame_is_not_preallocated_beyond_cap() {
        let mut d = FrameDecoder::new();
        d.extend(&FrameHeader::encode(1, MAX_FRAME_PAYLOAD));
        assert!(d.decode().unwrap().is_none());
        assert!(d.buffer().capacity() <= MAX_FRAME_PAYLOAD + 64);
    }

    fn ttrpc_message(payload_len: usize) -> Vec<u8> {
        let mut m = (payload_len as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&[0, 0, 0, 1, 1, 0]);
        m.extend((0..payload_len).map(|i| i as u8));
        m
    }

    #[test]
    fn framing_layout_matches_reader_rules() {
        for len in [0usize, 1, 4085, 4086, 4087, 5000, 8192, TTRPC_MAX_PAYLOAD] {
            let msg = ttrpc_message(len);
            let mut out = Vec::new();
            frame_message(1, &msg, &mut out);
            let mut d = FrameDecoder::new();
            d.extend(&out);
            let first = d.decode().unwrap().unwrap();
            assert!(first.payload.len() <= READER_BUFFER, "header frame of {} bytes", first.payload.len());
            let mut joined = first.payload.to_vec();
            if let Some(second) = d.decode().unwrap() {
                assert_eq!(first.payload.len(), READER_BUFFER);
                joined.extend_from_slice(&second.payload);
            }
            assert!(d.decode().unwrap().is_none());
            assert_eq!(joined, msg, "len {len}");
        }
    }

    fn ttrpc_header(len: u32, stream: u32, kind: u8) -> Vec<u8> {
        let mut m = len.to_be_bytes().to_vec();
        m.extend_from_slice(&stream.to_be_bytes());
        m.extend_from_slice(&[kind, 0]);
        m
    }

    #[test]
    fn cursor_finds_message_ends_at_any_split() {
        let mut wire = ttrpc_header(0, 1, TTRPC_REQUEST);
        wire.extend(ttrpc_header(5, 3, TTRPC_REQUEST));
        wire.extend([9u8; 5]);
        wire.extend(ttrpc_header(5000, 5, TTRPC_RESPONSE));
        wire.extend([7u8; 5000]);
        for chunk in [1usize, 3, 10, 11, 4096, wire.len()] {
            let mut cursor = MessageCursor::new();
            let mut ended = Vec::new();
            let mut at = Vec::new();
            let mut seen = 0;
            for part in wire.chunks(chunk) {
                cursor.feed(part, |stream, kind| {
                    ended.push((stream, kind));
                    at.push(seen + part.len());
                });
                seen += part.len();
            }
            assert_eq!(ended, [(1, TTRPC_REQUEST), (3, TTRPC_REQUEST), (5, TTRPC_RESPONSE)], "chunk {chunk}");
            // Each message is reported in the chunk that holds its last byte.
            let ends = [10usize, 25, wire.len()];
            let chunk_end = |byte: usize| byte.div_ceil(chunk).saturating_mul(chunk).min(wire.len());
            assert_eq!(at, ends.map(chunk_end), "chunk {chunk}");
        }
    }
}
