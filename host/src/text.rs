//! The one boundary every guest-supplied string crosses before the host
//! shows it to anyone: a denial reason, a log line, a `configure` error, a
//! line of stdout or stderr, a trap message (which can carry the guest's own
//! function names from its name section).
//!
//! A policy controls these strings, so it controls what the host would
//! write: a reason of 8 MiB would exceed the runtime's 4 MiB message limit
//! (and the policy's reason would be lost), a log line with an embedded
//! newline would forge a second log line, and escape sequences would reach
//! an operator's terminal. [`guest_text`] makes every such string one line
//! of bounded size: control characters are escaped (`\n`, `\u{1b}`), and
//! what is cut is marked with how much was cut.
//!
//! The other text the host makes for people lives here too, because loading,
//! the registry, the merge and the configuration all need it and none of
//! them should import another for it: an error chain as one line
//! ([`one_line`]) and a TOML error that locates without echoing the file
//! ([`toml_error`]).

use std::fmt::Write as _;

/// Most bytes of a denial reason or a `configure` error.
pub const MAX_REASON_BYTES: usize = 4096;
/// Most bytes of one log line of a policy (`host.log`, stdout, stderr).
pub const MAX_LOG_LINE_BYTES: usize = 2048;
/// Most bytes of a trap or error message.
pub const MAX_ERROR_BYTES: usize = 1024;

/// `text` as one line of at most about `max` bytes: control characters
/// escaped, the rest cut at a character boundary and marked.
pub fn guest_text(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 32);
    let mut used = 0;
    for (i, c) in text.char_indices() {
        let before = out.len();
        if c.is_control() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
            }
        } else {
            out.push(c);
        }
        used += out.len() - before;
        if used > max {
            out.truncate(before);
            let _ = write!(out, "... [{} more bytes cut]", text.len() - i);
            return out;
        }
    }
    out
}

/// [`guest_text`] keeping the *end* of `text`: for a stderr tail, whose
/// last line (a panic message, a Python exception) is what matters. What is
/// cut from the front is marked with how much was cut.
pub fn guest_text_tail(text: &str, max: usize) -> String {
    let whole = guest_text(text, usize::MAX);
    if whole.len() <= max {
        return whole;
    }
    let mut start = whole.len() - max;
    while !whole.is_char_boundary(start) {
        start += 1;
    }
    format!("[{start} bytes cut] ...{}", &whole[start..])
}

/// [`guest_text`] for a reason or error that may be long; trims the
/// surrounding whitespace first.
pub fn reason(text: &str) -> String {
    guest_text(text.trim(), MAX_REASON_BYTES)
}

/// An error as one bounded line: its causes joined, the wasm backtrace
/// (multi-line, with names the guest chose) left out.
pub fn one_line(err: &wasmtime::Error) -> String {
    // The engine captures no backtraces; should one be attached anyway, it
    // is left out by its fixed heading.
    let parts: Vec<String> = err
        .chain()
        .map(|cause| cause.to_string())
        .filter(|text| !text.trim().is_empty() && !text.starts_with("error while executing at wasm backtrace"))
        .collect();
    let mut parts = parts;
    parts.dedup();
    guest_text(&parts.join(": "), MAX_ERROR_BYTES)
}

/// An error and its causes as one line, `error: cause: cause's cause`:
/// what anyhow's `{:#}` shows, for the places that log or return an error
/// as text. An error's own Display names what failed and leaves its cause
/// to its `source()`, so that the chain says each part once.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut cause = err.source();
    while let Some(e) = cause {
        parts.push(e.to_string());
        cause = e.source();
    }
    parts.dedup();
    parts.join(": ")
}

/// serde names Rust types in its messages; an operator reads TOML.
fn plain_types(message: &str) -> String {
    let message = [("u64", "a non-negative integer"), ("u32", "a non-negative integer"), ("i64", "an integer")]
        .iter()
        .fold(message.to_string(), |m, (rust, toml)| {
            m.replace(&format!("expected {rust}"), &format!("expected {toml}"))
        });
    match message.split_once("expected struct ") {
        Some((before, _)) => format!("{before}expected a table"),
        None => message,
    }
}

/// A TOML error as the operator should see it: the line, the column, the
/// key of that line if it is one of `known` (a name the host defines, so
/// never data), and the parser's reason; never the text of the file. The
/// parser's own rendering quotes the offending line, and serde's reasons
/// quote the offending value (`invalid type: string "..."`): a policy's
/// `settings` may hold a secret, which would end up in the log, in
/// `/status` and in the output of `config check`. Only known keys are
/// named because what looks like a key may be a line inside a multi-line
/// string.
pub fn toml_error(text: &str, error: &toml::de::Error, known: &[&str]) -> String {
    let reason = without_values(&plain_types(error.message()));
    let Some(at) = error.span().map(|s| s.start.min(text.len())) else { return reason };
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    // Characters, or bytes if the span is not on a character boundary.
    let column = text.get(line_start..at).map_or(at - line_start, |s| s.chars().count()) + 1;
    let key = text
        .get(line_start..)
        .and_then(|rest| rest.split('\n').next()?.split_once('='))
        .map(|(key, _)| key.trim().replace('_', "-"))
        .filter(|key| known.contains(&key.as_str()));
    match key {
        Some(key) => format!("line {line}, column {column}, key {key}: {reason}"),
        None => format!("line {line}, column {column}: {reason}"),
    }
}

/// serde's reasons without the value they quote: `invalid type: string
/// "...", expected ...` becomes `invalid type: a string, expected ...`,
/// and `unknown variant `...``, `unknown variant`.
fn without_values(reason: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = reason.strip_prefix(prefix) {
            let what = [
                ("string", "a string"),
                ("integer", "an integer"),
                ("floating point", "a floating-point number"),
                ("boolean", "a boolean"),
                ("character", "a character"),
            ]
            .iter()
            .find(|(kind, _)| rest.starts_with(kind))
            .map(|(_, plain)| *plain);
            if let Some(what) = what {
                let expected = rest.rfind(", expected ").map_or("", |i| &rest[i..]);
                return format!("{prefix}{what}{expected}");
            }
        }
    }
    if let Some(rest) = reason.strip_prefix("unknown variant `") {
        let expected = rest.rfind("`, expected ").map_or("", |i| &rest[i + 1..]);
        return format!("unknown variant{expected}");
    }
    reason.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line_without_the_backtrace() {
        let err = wasmtime::Error::msg("first\nsecond").context("outer");
        assert_eq!(one_line(&err), "outer: first\\nsecond");
    }

    #[test]
    fn a_tail_keeps_its_end_whatever_the_bytes_per_character() {
        let text = format!("{}\nValueError: x", "\u{e9}".repeat(800));
        let kept = guest_text_tail(&text, MAX_ERROR_BYTES);
        assert!(kept.ends_with("\\nValueError: x"), "{kept}");
        assert!(kept.starts_with('[') && kept.contains("bytes cut] ..."), "{kept}");
        assert!(kept.len() <= MAX_ERROR_BYTES + 32, "{}", kept.len());
        assert_eq!(guest_text_tail("short", MAX_ERROR_BYTES), "short");
    }

    #[test]
    fn short_plain_text_is_unchanged() {
        assert_eq!(guest_text("denied: no privileged pods", 100), "denied: no privileged pods");
        assert_eq!(guest_text("", 10), "");
    }

    #[test]
    fn control_characters_are_escaped_so_one_string_is_one_line() {
        let forged = "ok\n2026-01-01T00:00:00Z ERROR nri_wasm: forged\r\t\u{1b}[31mred\u{0}";
        let line = guest_text(forged, 1000);
        assert!(!line.contains('\n') && !line.contains('\r') && !line.contains('\u{1b}') && !line.contains('\0'));
        assert_eq!(line, "ok\\n2026-01-01T00:00:00Z ERROR nri_wasm: forged\\r\\t\\u{1b}[31mred\\u{0}");
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary_and_the_cut_is_counted() {
        let text = "é".repeat(1000); // 2000 bytes
        let cut = guest_text(&text, 101);
        assert!(cut.starts_with(&"é".repeat(50)), "{cut}");
        assert!(cut.ends_with("... [1900 more bytes cut]"), "{cut}");
        let huge = "x".repeat(8 << 20);
        let cut = reason(&huge);
        assert!(cut.len() < MAX_REASON_BYTES + 64);
        assert!(cut.ends_with(&format!("[{} more bytes cut]", (8 << 20) - MAX_REASON_BYTES)), "{}", &cut[4000..]);
    }

    #[test]
    fn escapes_count_against_the_limit() {
        let text = "\n".repeat(100);
        let cut = guest_text(&text, 10);
        assert_eq!(cut, format!("{}... [95 more bytes cut]", "\\n".repeat(5)));
    }
}
