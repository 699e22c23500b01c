//! Recording what the runtime sends (`nri-wasm run --record FILE.jsonl`),
//! in the format `nri-wasm eval` reads.
//!
//! An operator tries a new policy against last week's traffic before
//! deploying it: the host records every request it receives, and `eval
//! --replay` runs the recording through any set of policies. The recorder
//! is a [`Dispatcher`](super::Dispatcher) wrapped around the real one, so the transport does
//! not change and nothing but the seam sees it.
//!
//! The format is one JSON object per line, the captured fixtures' format
//! with the time of receipt:
//!
//! ```text
//! {"event":"CreateContainer","time":"2026-11-22T11:40:00.123456Z","request":{"pod":{...},"container":{...}}}
//! ```
//!
//! `request` is NRI's protobuf JSON mapping with the proto field names (what
//! Go's `protojson` writes with `UseProtoNames`: 64-bit integers as strings,
//! zero values left out), so requests logged elsewhere paste in. `event` is
//! the RPC name; a split Synchronize is recorded once, whole, and
//! `Configure` is recorded from what the host made of it (the runtime's
//! name and version, its timeouts), which a replay needs for the chain's
//! time budget.
//!
//! Recording must never cost an event its answer: the event's task only
//! clones the request into a bounded queue (dropping it, counted, when the
//! queue is full); a thread of its own writes the lines. A file that cannot
//! be opened or written (a bad path, a full disk) is reported once and
//! recording stops; the host serves on. The file is created with mode 0600:
//! requests carry the containers' environment, secrets included. When the
//! next line would take the file past its size bound, the file is renamed
//! to `FILE.1` (replacing an older one) and a new file is started, so a
//! recording never holds more than about twice the bound.
//!
//! Three parts, each one job: `format.rs` is the line format (what
//! `eval` reads back), `writer.rs` the file and the thread that writes it,
//! `dispatcher.rs` the [`Dispatcher`](super::Dispatcher) that hands each
//! request to the writer and the event to the real dispatcher.

mod dispatcher;
mod format;
mod writer;

pub use dispatcher::RecordingDispatcher;
pub use format::{event_name, parse_document, rfc3339, to_json, FormatError, Recorded, Request};
pub use writer::{rotated_path, RecordOptions, Recorder};

/// What the tests of all three parts read and write.
#[cfg(test)]
mod testing {
    use std::path::Path;

    use super::{parse_document, Recorded};

    pub(super) fn fixture<M: protobuf::MessageFull>(event: &str) -> M {
        nri_sim::fixtures::load(event).expect("fixture")
    }

    pub(super) fn read_lines(path: &Path) -> Vec<Recorded> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| parse_document(l, None).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}
