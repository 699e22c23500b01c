//! The reference runtime's I/O, reproduced read for read.
//!
//! A runtime written against the NRI reference implementation reads and writes
//! the multiplexed socket in a very particular way, and a plugin that frames
//! its messages differently works against a lenient peer but is dropped by a
//! real runtime. This module reproduces that behaviour exactly so that such
//! bugs fail our tests:
//!
//! Reading ([`GoConnReader`], [`GoBufReader`], [`read_ttrpc_message`]):
//! - the demultiplexer queues at most [`READ_QUEUE_LEN`] unread frames per
//!   conn and closes the whole connection when a frame does not fit;
//! - a conn read returns exactly one frame and fails with ENOMEM when the
//!   frame is larger than the caller's buffer;
//! - ttrpc reads through a 4096-byte buffered reader: a 10-byte header read,
//!   then one full read of the payload; the buffered reader passes a read
//!   straight to the conn only when it is empty and the caller's buffer is at
//!   least 4096 bytes, and otherwise refills with one conn read.
//!
//! Writing ([`go_frames`]): ttrpc writes the header and payload through a
//! 4096-byte buffered writer and flushes; the mux turns every write into
//! frames of at most [`MAX_WRITE_FRAME`] bytes.

use std::collections::VecDeque;

/// Frames a conn may have queued before the demultiplexer gives up.
pub const READ_QUEUE_LEN: usize = 256;
/// Size of the buffered reader and writer around the ttrpc connection.
pub const BUF_SIZE: usize = 4096;
/// ttrpc message header length.
pub const TTRPC_HEADER_LEN: usize = 10;
/// ttrpc message type of a request (header byte 8).
pub const TTRPC_REQUEST: u8 = 1;
/// ttrpc message type of a response.
pub const TTRPC_RESPONSE: u8 = 2;
/// Largest ttrpc payload.
pub const TTRPC_MAX_PAYLOAD: usize = 4 << 20;
/// Largest frame payload the mux writes (header + largest message).
pub const MAX_WRITE_FRAME: usize = TTRPC_HEADER_LEN + TTRPC_MAX_PAYLOAD;

/// A read the reference runtime would have failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoReadError {
    #[error("ENOMEM: frame of {frame} bytes read into a {buf}-byte buffer (conn {conn})")]
    FrameTooLarge { conn: u32, frame: usize, buf: usize },
    #[error("read queue of conn {conn} overflowed ({READ_QUEUE_LEN} unread frames): connection closed")]
    QueueOverflow { conn: u32 },
    #[error("ttrpc message of {len} bytes exceeds {TTRPC_MAX_PAYLOAD} (conn {conn})")]
    Oversized { conn: u32, len: usize },
    #[error("connection closed")]
    Closed,
}

/// The source of frames for one conn (a queue filled by the demultiplexer).
pub trait FrameSource {
    /// The next frame of this conn, `None` once the connection is closed.
    fn next_frame(&mut self) -> Option<Vec<u8>>;
}

impl FrameSource for VecDeque<Vec<u8>> {
    fn next_frame(&mut self) -> Option<Vec<u8>> {
        self.pop_front()
    }
}

/// `conn.Read(p)` of the reference mux: one frame per call.
#[derive(Debug)]
pub struct GoConnReader<S> {
    conn: u32,
    source: S,
    frames: u64,
}

impl<S: FrameSource> GoConnReader<S> {
    pub fn new(conn: u32, source: S) -> Self {
        Self { conn, source, frames: 0 }
    }

    /// Frames read so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Reads one frame into `buf`; the frame must fit.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, GoReadError> {
        let frame = self.source.next_frame().ok_or(GoReadError::Closed)?;
        self.frames += 1;
        if frame.len() > buf.len() {
            return Err(GoReadError::FrameTooLarge { conn: self.conn, frame: frame.len(), buf: buf.len() });
        }
        buf[..frame.len()].copy_from_slice(&frame);
        Ok(frame.len())
    }
}

/// The 4096-byte buffered reader in front of the conn.
#[derive(Debug)]
pub struct GoBufReader<S> {
    conn: GoConnReader<S>,
    buf: Box<[u8; BUF_SIZE]>,
    r: usize,
    w: usize,
}

impl<S: FrameSource> GoBufReader<S> {
    pub fn new(conn: GoConnReader<S>) -> Self {
        Self { conn, buf: Box::new([0; BUF_SIZE]), r: 0, w: 0 }
    }

    pub fn frames(&self) -> u64 {
        self.conn.frames()
    }

    /// One `Read` call of the buffered reader.
    pub fn read(&mut self, p: &mut [u8]) -> Result<usize, GoReadError> {
        if p.is_empty() {
            return Ok(0);
        }
        if self.r == self.w {
            if p.len() >= BUF_SIZE {
                // Large read into an empty buffer: straight to the conn.
                return self.conn.read(p);
            }
            self.r = 0;
            self.w = 0;
            let n = self.conn.read(&mut self.buf[..])?;
            if n == 0 {
                return Err(GoReadError::Closed);
            }
            self.w = n;
        }
        let n = (self.w - self.r).min(p.len());
        p[..n].copy_from_slice(&self.buf[self.r..self.r + n]);
        self.r += n;
        Ok(n)
    }

    /// `io.ReadFull` over the buffered reader.
    pub fn read_full(&mut self, p: &mut [u8]) -> Result<(), GoReadError> {
        let mut done = 0;
        while done < p.len() {
            done += self.read(&mut p[done..])?;
        }
        Ok(())
    }
}

/// Reads one whole ttrpc message (header and payload) the way ttrpc does.
pub fn read_ttrpc_message<S: FrameSource>(conn: u32, r: &mut GoBufReader<S>) -> Result<Vec<u8>, GoReadError> {
    let mut header = [0u8; TTRPC_HEADER_LEN];
    r.read_full(&mut header)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > TTRPC_MAX_PAYLOAD {
        return Err(GoReadError::Oversized { conn, len });
    }
    let mut message = vec![0u8; TTRPC_HEADER_LEN + len];
    message[..TTRPC_HEADER_LEN].copy_from_slice(&header);
    r.read_full(&mut message[TTRPC_HEADER_LEN..])?;
    Ok(message)
}

/// The frames the reference runtime writes for one ttrpc message: header and
/// payload go through a 4096-byte buffered writer, then a flush; every
/// underlying write becomes frames of at most [`MAX_WRITE_FRAME`] bytes.
pub fn go_frames(message: &[u8]) -> Vec<Vec<u8>> {
    let (header, payload) = message.split_at(TTRPC_HEADER_LEN.min(message.len()));
    let mut writes: Vec<Vec<u8>> = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(BUF_SIZE);
    for part in [header, payload] {
        // bufio.Writer.Write
        let mut p = part;
        while p.len() > BUF_SIZE - buf.len() {
            if buf.is_empty() {
                writes.push(p.to_vec());
                p = &[];
            } else {
                let n = BUF_SIZE - buf.len();
                buf.extend_from_slice(&p[..n]);
                writes.push(std::mem::take(&mut buf));
                p = &p[n..];
            }
        }
        buf.extend_from_slice(p);
    }
    if !buf.is_empty() {
        writes.push(buf);
    }
    // mux.write: split each write at the frame cap.
    writes.into_iter().flat_map(|w| w.chunks(MAX_WRITE_FRAME).map(<[u8]>::to_vec).collect::<Vec<_>>()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload_len: usize) -> Vec<u8> {
        let mut m = (payload_len as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&[0, 0, 0, 3, 2, 0]);
        m.extend((0..payload_len).map(|i| (i % 251) as u8));
        m
    }

    fn reader(frames: Vec<Vec<u8>>) -> GoBufReader<VecDeque<Vec<u8>>> {
        GoBufReader::new(GoConnReader::new(1, frames.into_iter().collect()))
    }

    #[test]
    fn go_writer_frames_are_readable_at_every_size() {
        for len in [0, 1, 10, 4085, 4086, 4087, 4096, 8191, 8192, 100_000, TTRPC_MAX_PAYLOAD] {
            let msg = message(len);
            let frames = go_frames(&msg);
            assert!(frames[0].len() <= BUF_SIZE);
            let mut r = reader(frames);
            assert_eq!(read_ttrpc_message(1, &mut r).unwrap(), msg, "len {len}");
        }
    }

    #[test]
    fn a_large_frame_carrying_a_header_fails_like_the_reference() {
        let msg = message(5000);
        let mut r = reader(vec![msg]);
        assert_eq!(
            read_ttrpc_message(1, &mut r).unwrap_err(),
            GoReadError::FrameTooLarge { conn: 1, frame: 5010, buf: BUF_SIZE }
        );
    }

    #[test]
    fn a_large_frame_spanning_two_messages_fails() {
        // Small messages sharing a frame that fits the buffer are fine ...
        let (a, b) = (message(100), message(20));
        let mut joined = a.clone();
        joined.extend_from_slice(&b);
        let mut r = reader(vec![joined]);
        assert_eq!(read_ttrpc_message(1, &mut r).unwrap(), a);
        assert_eq!(read_ttrpc_message(1, &mut r).unwrap(), b);
        // ... but the tail of a large message followed by the next message
        // meets a direct read sized to the tail: ENOMEM.
        let (a, b) = (message(10_000), message(10));
        let mut tail = a[BUF_SIZE..].to_vec();
        tail.extend_from_slice(&b);
        let mut r = reader(vec![a[..BUF_SIZE].to_vec(), tail]);
        assert!(matches!(read_ttrpc_message(1, &mut r), Err(GoReadError::FrameTooLarge { .. })));
    }

    #[test]
    fn header_alone_then_payload_is_accepted() {
        let msg = message(70_000);
        let mut r = reader(vec![msg[..10].to_vec(), msg[10..].to_vec()]);
        assert_eq!(read_ttrpc_message(1, &mut r).unwrap(), msg);
    }

    #[test]
    fn oversized_messages_are_refused() {
        let mut m = ((TTRPC_MAX_PAYLOAD + 1) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&[0; 6]);
        let mut r = reader(vec![m]);
        assert!(matches!(read_ttrpc_message(1, &mut r), Err(GoReadError::Oversized { .. })));
    }
}
