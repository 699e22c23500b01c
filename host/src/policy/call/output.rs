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
//!
//! Each line a guest wrote (and each line it hands to `host.log`) becomes a
//! host log record with a fixed message and the guest's text in a field
//! (`guest_output`, `guest_log`). With the guest's text as the message, a
//! line such as `ERROR nri_wasm::nri: registration refused` would read, in
//! a text log, as the host's own record; as a field it is quoted and
//! escaped after the policy's name.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::text as clip;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// What a guest wrote to stderr, without the lines its language runtime
/// wraps a failure in, so that the report reads as the language's own:
/// - the Rust runtimes of componentize-js (QuickJS) and componentize-py
///   abort with a panic, `thread '<unnamed>' (1) panicked at
///   crates/runtime/src/call.rs:302:36:`, whose message is the JS SDK's
///   line prefixed `unknown enum case: ` (the only way out of QuickJS) or
///   `Python function threw an unexpected exception` (after the traceback
///   Python printed): the panic line and these wrappers go, the SDK's line
///   stays;
/// - every Rust panic ends with advice about `RUST_BACKTRACE`, which no one
///   can follow for a WebAssembly guest: it goes (a Rust policy's own
///   `panicked at src/lib.rs:..` line stays, it names the author's line);
/// - SpiderMonkey (componentize-js) follows the JS SDK's line with the
///   export's failed conversion (`expected a string, received [object]`,
///   `Stack:` and its own frames in `initializer.js`) and `Redirecting call
///   to abort() to mozalloc_abort`: these go.
pub(crate) fn tidy_stderr(text: &str) -> String {
    const PANIC_WRAPPED: &[&str] = &["unknown enum case: ", "Python function threw an unexpected exception"];
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let next = lines.get(i + 1).copied().unwrap_or_default();
        i += 1;
        if line.starts_with("thread '") && line.contains(" panicked at ") {
            if let Some(rest) = PANIC_WRAPPED.iter().find_map(|w| next.strip_prefix(w)) {
                // The runtime's panic: keep what the SDK said, if anything.
                if !rest.trim().is_empty() {
                    out.push(rest);
                }
                i += 1;
                continue;
            }
        }
        if line.starts_with("note: run with `RUST_BACKTRACE=1`")
            || line == "Redirecting call to abort() to mozalloc_abort"
        {
            continue;
        }
        if line == "expected a string, received [object]" {
            // SpiderMonkey's conversion error and its frames.
            if lines.get(i).is_some_and(|l| *l == "Stack:") {
                i += 1;
                while lines.get(i).is_some_and(|l| l.starts_with(char::is_whitespace) || l.is_empty()) {
                    i += 1;
                }
            }
            continue;
        }
        out.push(line);
    }
    out.join("\n")
}

/// Which of a guest's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// The target of what policies write and log, whatever module writes it:
/// operators filter on it (`nri_wasm::policy::output=warn`), so it stays
/// put when the code moves.
pub(crate) const TARGET: &str = "nri_wasm::policy::output";

/// Logs one line a guest wrote to stdout (info) or stderr (warn): the
/// message is fixed, the line is the `guest_output` field, clipped to one
/// escaped line.
pub(crate) fn log_output(policy: &str, event: &str, stream: Stream, line: &str) {
    let text = clip::guest_text(line, clip::MAX_LOG_LINE_BYTES);
    let text = text.as_str();
    match stream {
        Stream::Stdout => {
            tracing::info!(target: TARGET, policy, event, stream = "stdout", guest_output = text, "policy output")
        }
        Stream::Stderr => {
            tracing::warn!(target: TARGET, policy, event, stream = "stderr", guest_output = text, "policy output")
        }
    }
}

/// Logs one line a guest handed to `host.log` at its level: the message
/// is fixed, the line is the `guest_log` field, clipped to one escaped line.
pub(crate) fn log_message(policy: &str, level: tracing::Level, line: &str) {
    let text = clip::guest_text(line, clip::MAX_LOG_LINE_BYTES);
    let text = text.as_str();
    match level {
        tracing::Level::ERROR => tracing::error!(target: TARGET, policy, guest_log = text, "policy log"),
        tracing::Level::WARN => tracing::warn!(target: TARGET, policy, guest_log = text, "policy log"),
        tracing::Level::INFO => tracing::info!(target: TARGET, policy, guest_log = text, "policy log"),
        _ => tracing::debug!(target: TARGET, policy, guest_log = text, "policy log"),
    }
}

/// Most bytes a guest may hand over in one write.
const WRITE_PERMIT: usize = 64 << 10;

/// A bounded, shared buffer of one of a guest's output streams.
#[derive(Debug, Clone)]
pub(crate) struct GuestOutput(Arc<Mutex<Captured>>);

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
pub(crate) struct Written {
    pub head: Vec<u8>,
    pub dropped: usize,
    pub tail: Vec<u8>,
}

impl GuestOutput {
    /// Keeps at most `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Self {
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

    pub(crate) fn contents(&self) -> Written {
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
    fn runtime_wrappers_leave_the_languages_own_words() {
        // QuickJS (componentize-js's runtime in Rust), as captured.
        let quickjs = "thread '<unnamed>' (1) panicked at crates/runtime/src/call.rs:302:36:\n\
            unknown enum case: the create-container handler threw RangeError: boom (at policy.js:14)\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(tidy_stderr(quickjs), "the create-container handler threw RangeError: boom (at policy.js:14)");
        // componentize-py after a traceback Python printed.
        let python = "Traceback (most recent call last):\n  File \"policy.py\", line 3, in create\nValueError: x\n\n\
            thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\n\
            Python function threw an unexpected exception\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            tidy_stderr(python),
            "Traceback (most recent call last):\n  File \"policy.py\", line 3, in create\nValueError: x\n"
        );
        // SpiderMonkey.
        let spidermonkey = "the create-container handler threw RangeError: boom (at policy.js:14)\n\
            expected a string, received [object]\nStack:\n  _utf8AllocateAndEncode@/tmp/x/sources/initializer.js:44:11\n\
            \x20 export_handle@/tmp/x/sources/initializer.js:31295:45\n\nRedirecting call to abort() to mozalloc_abort\n";
        assert_eq!(tidy_stderr(spidermonkey), "the create-container handler threw RangeError: boom (at policy.js:14)");
        // A Rust policy's own panic keeps its place in the author's source.
        let rust = "thread '<unnamed>' panicked at src/lib.rs:10:5:\nindex out of bounds\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(tidy_stderr(rust), "thread '<unnamed>' panicked at src/lib.rs:10:5:\nindex out of bounds");
        assert_eq!(tidy_stderr("plain\nlines"), "plain\nlines");
    }

    /// Log records written while `work` runs, in the text format (no
    /// colours) or as JSON.
    fn captured(json: bool, work: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = {
            let sink = sink.clone();
            move || sink.clone()
        };
        let builder =
            tracing_subscriber::fmt().with_writer(writer).with_ansi(false).with_max_level(tracing::Level::DEBUG);
        if json {
            tracing::subscriber::with_default(builder.json().finish(), work);
        } else {
            tracing::subscriber::with_default(builder.finish(), work);
        }
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// A guest's line cannot pass for a host record: the record's message
    /// is fixed and the text is a quoted, escaped field.
    #[test]
    fn guest_lines_are_a_field_of_a_fixed_message() {
        let forged = "ERROR nri_wasm::nri: registration refused\nINFO forged second record";
        let text = captured(false, || {
            log_output("10-chatty", "CreateContainer", Stream::Stdout, forged);
            log_output("10-chatty", "CreateContainer", Stream::Stderr, forged);
            log_message("10-chatty", tracing::Level::ERROR, forged);
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        for (line, (level, message, field)) in lines.iter().zip([
            ("INFO", "policy output", "guest_output"),
            ("WARN", "policy output", "guest_output"),
            ("ERROR", "policy log", "guest_log"),
        ]) {
            let after_target = line.split_once("nri_wasm::policy::output: ").map(|(_, rest)| rest).unwrap_or("");
            assert!(line.contains(level) && after_target.starts_with(message), "{line}");
            assert!(
                line.contains(&format!(r#"{field}="ERROR nri_wasm::nri: registration refused\\nINFO forged"#)),
                "{line}"
            );
            assert!(line.contains(r#"policy="10-chatty""#), "{line}");
        }
        let json = captured(true, || log_output("10-chatty", "CreateContainer", Stream::Stdout, forged));
        let record: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(record["fields"]["message"], "policy output", "{json}");
        assert_eq!(
            record["fields"]["guest_output"], "ERROR nri_wasm::nri: registration refused\\nINFO forged second record",
            "{json}"
        );
        assert_eq!(record["fields"]["stream"], "stdout");
    }

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
