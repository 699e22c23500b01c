//! What a guest writes to stdout and stderr.
//!
//! A policy's output goes to the host's log, tagged with the policy and the
//! event, and the end of stderr is added to a trap's error (a Rust panic
//! leaves its message there). It is kept in memory for the length of one
//! call, up to a fixed size: the first half of what was written and the
//! last half, with what came between counted and dropped, so that both the
//! start of a long output and its end (where a panic message is) survive.
//! The stream never refuses a write: WASI's own memory pipe reports a full
//! buffer as a closed stream, which a Rust guest turns into a panic, so a
//! chatty policy would be failed for logging too much.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// Most bytes a guest may hand over in one write.
const WRITE_PERMIT: usize = 64 << 10;

/// A bounded, shared buffer of one of a guest's output streams.
#[derive(Debug, Clone)]
pub struct GuestOutput(Arc<Mutex<Captured>>);

#[derive(Debug)]
struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Most bytes kept of the head, and of the tail.
    half: usize,
    dropped: usize,
}

/// What a guest wrote: its start, how many bytes after it were dropped, and
/// its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub head: Vec<u8>,
    pub dropped: usize,
    pub tail: Vec<u8>,
}

impl GuestOutput {
    /// Keeps at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        let half = capacity / 2;
        Self(Arc::new(Mutex::new(Captured { head: Vec::new(), tail: VecDeque::new(), half, dropped: 0 })))
    }

    fn take(&self, mut bytes: &[u8]) {
        let mut c = self.0.lock().expect("guest output lock");
        let to_head = bytes.len().min(c.half - c.head.len());
        c.head.extend_from_slice(&bytes[..to_head]);
        bytes = &bytes[to_head..];
        // Only the last `half` bytes of the rest can stay in the tail.
        let skipped = bytes.len().saturating_sub(c.half);
        bytes = &bytes[skipped..];
        let overflow = (c.tail.len() + bytes.len()).saturating_sub(c.half);
        c.tail.drain(..overflow);
        c.tail.extend(bytes);
        c.dropped += skipped + overflow;
    }

    pub fn contents(&self) -> Written {
        let c = self.0.lock().expect("guest output lock");
        Written { head: c.head.clone(), dropped: c.dropped, tail: c.tail.iter().copied().collect() }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.take(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.take(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_capacity_is_counted_and_dropped_never_refused() {
        let mut out = GuestOutput::new(10);
        out.write(Bytes::from_static(b"012")).unwrap();
        assert_eq!(out.contents(), Written { head: b"012".to_vec(), dropped: 0, tail: vec![] });
        for _ in 0..3 {
            assert_eq!(out.check_write().unwrap(), WRITE_PERMIT);
            out.write(Bytes::from_static(b"abcdefg")).unwrap();
        }
        // 24 bytes written: the first 5 and the last 5 are kept.
        assert_eq!(out.contents(), Written { head: b"012ab".to_vec(), dropped: 14, tail: b"cdefg".to_vec() });
        out.write(Bytes::from(vec![b'x'; 100])).unwrap();
        out.write(Bytes::from_static(b"end")).unwrap();
        assert_eq!(out.contents(), Written { head: b"012ab".to_vec(), dropped: 117, tail: b"xxend".to_vec() });
    }
}
