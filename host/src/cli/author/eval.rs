//! `nri-wasm eval`: events through a chain of policies, offline, exactly as
//! a node would run them.
//!
//! This file reads the input and hands it on: the events run through the
//! dispatcher a node uses (`session.rs`, with every limit, time share,
//! on-error, conflict rule, merge and validation), and `report.rs` shows
//! each policy's step with the reply the runtime would have received.
//!
//! Input is NRI's protobuf JSON with the proto field names (see
//! `nri/record/format.rs`): a bare request with `--event`, a document
//! `{"event": ..., "request": {...}}` (the captured fixtures), or, with
//! `--replay`, a recording of `nri-wasm run --record`. `--node` seeds the
//! node view from a Synchronize request first, as the runtime does when it
//! connects; `--state` preloads the policies' state, which is printed after
//! the run. What differs from a node: no runtime takes the updates that go
//! out with UpdateContainers (each policy's step shows them), and the node's
//! facts (CPUs, NUMA, memory) are this machine's.

use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Value};

use super::report::{chain_json, event_json, exit_code, write_chain, write_event, write_state};
pub use super::session::{EvalError, EventReport, PolicyInfo, Reply, Session};
use super::{replay, HostArgs, SettingsArgs, EXIT_USAGE};
pub use crate::cli::steps::SeenStep;
use crate::nri::record::parse_document;
use crate::policy::load::compile::Compiler;

/// The arguments of `nri-wasm eval`.
#[derive(Debug, Args)]
#[command(after_help = "Exit codes: 0 every event succeeded and every policy loaded and answered; \
    1 an event fails at the runtime (a denial, a failure with on-error = \"fail\", a conflict); \
    2 nothing ran (usage, or input that cannot be read); \
    3 every event succeeded, but a policy did not load or failed and on-error = \"ignore\" dropped its output.\n\
    Guide: docs/writing-policies.md")]
pub struct EvalArgs {
    /// A policy component (`.wasm`, with its `NN-name.toml` if one is
    /// beside it), or a policy directory as the host reads it.
    #[arg(value_name = "POLICY|DIR")]
    pub policies: PathBuf,
    /// The event of a bare request: `CreateContainer`, `create-container`,
    /// ... (a document `{"event": ..., "request": ...}` names its own).
    #[arg(long)]
    pub event: Option<String>,
    /// The request, in NRI's protobuf JSON with the proto field names
    /// (`-`: standard input).
    #[arg(long, value_name = "EVENT.json", required_unless_present = "replay")]
    pub input: Option<PathBuf>,
    /// Seed the node view from a Synchronize request first, as the
    /// runtime does when it connects.
    #[arg(long, value_name = "SYNC.json")]
    pub node: Option<PathBuf>,
    /// Replay a recording of `nri-wasm run --record`, in order (repeat
    /// for several files, oldest first: `FILE.jsonl.1 FILE.jsonl`).
    #[arg(long, value_name = "FILE.jsonl", conflicts_with_all = ["input", "event", "node"])]
    pub replay: Vec<PathBuf>,
    /// The policy's settings, when not from its `NN-name.toml`.
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Preload the policies' state: a JSON file `{"NN-name": {"key":
    /// "value"}}`, or a state directory (`NN-name.json` files, read only).
    #[arg(long, value_name = "STATE.json|DIR")]
    pub state: Option<PathBuf>,
    /// JSON for machines: one document (with `--replay`, one object a line).
    #[arg(long)]
    pub json: bool,
    /// The host's configuration and compile cache.
    #[command(flatten)]
    pub host: HostArgs,
}

/// Reads a document: a file, or standard input for `-`.
fn read_input(path: &Path) -> Result<String, EvalError> {
    let read_err = |source| EvalError::Read { path: path.to_path_buf(), source };
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(read_err)?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(read_err)
}

/// `nri-wasm eval`: the report to `out`, what kept it from running to `err`.
pub fn eval(args: &EvalArgs, compiler: Compiler, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let result = if args.replay.is_empty() { single(args, compiler, out) } else { replay(args, compiler, out) };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let _ = writeln!(err, "nri-wasm eval: {}", crate::text::chain(&e));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// One event (after the node's Synchronize, with `--node`).
fn single(args: &EvalArgs, compiler: Compiler, out: &mut dyn Write) -> Result<u8, EvalError> {
    let input = args.input.as_deref().unwrap_or(Path::new("-"));
    let event = parse_document(&read_input(input)?, args.event.as_deref())
        .map_err(|error| EvalError::Input { path: input.to_path_buf(), error })?;
    let node = match &args.node {
        Some(path) => Some(
            parse_document(&read_input(path)?, Some("Synchronize"))
                .map_err(|error| EvalError::Input { path: path.clone(), error })?,
        ),
        None => None,
    };
    let mut session = Session::load(&args.policies, &args.settings, &args.host, args.state.as_deref(), compiler)?;
    let runtime = crate::cli::transport_runtime().map_err(EvalError::Runtime)?;
    let reports = runtime.block_on(async {
        let mut reports = Vec::new();
        for (i, recorded) in node.into_iter().chain([event]).enumerate() {
            reports.push(session.run(i + 1, recorded).await);
        }
        reports
    });
    let policy_errors = !session.problems.is_empty() || reports.iter().any(|r| r.policy_errors() > 0);
    let code = exit_code(reports.iter().any(|r| r.answer.is_err()), policy_errors);
    let state = session.state();
    if args.json {
        let mut doc = chain_json(&session);
        doc["events"] = Value::Array(reports.iter().map(|r| event_json(&session, r)).collect());
        doc["state"] = json!(state);
        doc["exit"] = json!(code);
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        write_chain(&session, out);
        for report in &reports {
            write_event(&session, report, false, out);
        }
        write_state(&state, out);
    }
    Ok(code)
}

/// `eval --replay`: every recording read (a line that cannot be is refused
/// before anything runs), then the chain loaded and the recording run.
fn replay(args: &EvalArgs, compiler: Compiler, out: &mut dyn Write) -> Result<u8, EvalError> {
    let recorded = replay::read(&args.replay)?;
    let session = Session::load(&args.policies, &args.settings, &args.host, args.state.as_deref(), compiler)?;
    replay::run(session, recorded, &args.replay, args.json, out)
}
