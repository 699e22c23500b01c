//! The policy author's commands, run as an author runs them: the real
//! binary, its exit codes and messages.
//!
//! - `check` and `eval` on a good policy, on faulty ones (a loop, a trap, a
//!   forbidden import, bad settings) and on files that are not policies;
//! - `eval` of every case of the seven example policies on the captured
//!   containerd request: the examples' own `src/cases.rs`, included here as
//!   their native tests and `tests/e2e/tests/examples.rs` include them, so
//!   the lines `eval` prints are held to what the native tests expect;
//! - a recording made by `run --record` against the runtime simulator
//!   replays (`eval --replay`) to the outcomes the live run had;
//! - `docs/writing-policies.md`, run: `new`, `cargo test`, the wasm build,
//!   `check` and `eval` of the generated project, offline, and the doc's
//!   JSON and policy-file examples parsed by the host.
//!
//! These are CLI tests, so they live with the binary (integration tests of
//! another package cannot run it). Compiled components are shared through
//! the build's compile cache (`NRI_WASM_CACHE_DIR`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nri_wasm::nri::record::{parse_document, Request};
use nri_wasm_api::api as pb;
use nri_wasm_components::examples;
use nri_wasm_test_support::guests;
use serde_json::Value;

// ---------------------------------------------------------------- helpers

/// What a run of the binary left.
#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

/// The binary, sharing the build's compile cache.
fn nri_wasm() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nri-wasm"));
    cmd.env("NRI_WASM_CACHE_DIR", nri_wasm_components::COMPONENT_CACHE).env_remove("RUST_LOG");
    cmd
}

fn run<I, S>(args: I) -> Ran
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_in(None, args)
}

fn run_in<I, S>(dir: Option<&Path>, args: I) -> Ran
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = nri_wasm();
    cmd.args(args).stdin(Stdio::null());
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let out = cmd.output().expect("run nri-wasm");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn fixture(name: &str) -> PathBuf {
    nri_sim::fixtures::dir().expect("fixtures").join(format!("{name}.json"))
}

/// A policy directory entry: `NN-name.wasm` (a link to `wasm`) and its
/// `NN-name.toml` with `settings` and `extra` lines.
fn install(dir: &Path, name: &str, wasm: &str, settings: Option<&str>, extra: &str) {
    std::os::unix::fs::symlink(wasm, dir.join(format!("{name}.wasm"))).unwrap();
    let mut toml = String::new();
    if let Some(s) = settings {
        toml.push_str(&format!("settings = {}\n", toml::Value::String(s.into())));
    }
    toml.push_str(extra);
    std::fs::write(dir.join(format!("{name}.toml")), toml).unwrap();
}

/// Limits no loaded machine reaches where a test is about answers.
const LOOSE: &str = "[limits]\ntimeout-ms = 5000\n";
/// [`LOOSE`] with every dangerous capability granted, for directories of
/// policies that add hooks, devices or mounts or update other containers
/// (what each may use is still narrowed by what its component declares).
const GRANTED_LOOSE: &str = "grant = [\"mounts\", \"hooks\", \"devices\", \"cdi-devices\", \"namespaces\", \"seccomp\", \
                             \"sysctl\", \"net-devices\", \"cgroups-path\", \"updates\", \"evictions\", \"cgroup-files\", \"oom-protect\", \
                             \"rlimits-raise\", \"realtime\", \"runtime-annotations\", \"resctrl\", \"swap-raise\", \"cpuset-any\"]\n[limits]\ntimeout-ms = 5000\n";

/// The single event's report of `eval --json`.
fn only_event(doc: &Value) -> &Value {
    let events = doc["events"].as_array().expect("events");
    events.last().expect("an event")
}

fn step<'a>(event: &'a Value, policy: &str) -> &'a Value {
    event["policies"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["policy"] == policy))
        .unwrap_or_else(|| panic!("no step of {policy} in {event}"))
}

const SECRET: &str = "password=hunter2\napi-key: sk-live-0123456789\n";

// ---------------------------------------------------------------- check

#[test]
fn check_tells_what_a_good_policy_costs() {
    // The policy file an operator installs: its settings and limits apply.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    let settings = toml::Value::String(ulimit_adjuster::SETTINGS.into());
    // Its policy.toml grants what it declares beyond the default grant.
    std::fs::write(&policy, format!("grant = [\"rlimits-raise\"]\nsettings = {settings}\n{LOOSE}")).unwrap();
    let ran =
        run([OsStr::new("check"), examples::ULIMIT_ADJUSTER.as_ref(), "--settings-file".as_ref(), policy.as_os_str()]);
    assert_eq!(ran.code, 0, "{ran:?}");
    for want in [
        "world     nri-wasm:policy@0.3.",
        "  allowed  nri-wasm:policy/event@0.3.",
        "settings  accepted: {\"max\"",
        "events    CreateContainer\n",
        "asks      rlimits, deny, rlimits-raise (declared)\n",
        "limits    fuel 100,000,000, timeout-ms 5000,",
        "compile   ",
        "cached    ",
        "from the compile cache",
        "call      ",
        "which it does not subscribe to",
        "result    loads",
    ] {
        assert!(ran.stdout.contains(want), "{want:?} missing:\n{}", ran.stdout);
    }
    assert!(!ran.stdout.contains("refused"), "{}", ran.stdout);
}

#[test]
fn check_says_whether_a_policy_is_pre_initialised() {
    // `preinitialize = true` in the policy's file: check takes the snapshot
    // as the host would and says so, with what it took.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    let settings = toml::Value::String(ulimit_adjuster::SETTINGS.into());
    std::fs::write(
        &policy,
        format!("grant = [\"rlimits-raise\"]\npreinitialize = true\nsettings = {settings}\n{LOOSE}"),
    )
    .unwrap();
    let ran =
        run([OsStr::new("check"), examples::ULIMIT_ADJUSTER.as_ref(), "--settings-file".as_ref(), policy.as_os_str()]);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.contains("preinit   calls start from a snapshot taken after configure (taken in "),
        "{}",
        ran.stdout
    );
    assert!(ran.stdout.contains("result    loads"), "{}", ran.stdout);
}

/// The snapshot's rewrite runs in a child like the compiler's, under its
/// memory limit: with the default limit a configured state of 3.1 million
/// runs of data (under the host's own limit on runs) is snapshotted; it
/// needs more than a child of 256 MiB has, so with that the snapshot is
/// refused, naming the limit, and the policy loads as built.
#[test]
fn a_rewrite_is_bounded_by_the_compiling_child() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "preinitialize = true\nsettings = \"runs\"\n").unwrap();
    let small = dir.path().join("small.toml");
    std::fs::write(&small, "[engine]\ncompile-memory-mib = 256\n").unwrap();
    // A compile cache of the test's own, empty: the default limit's run
    // compiles the component and its instrumented copy into it, which a
    // compiling child of 256 MiB could not (a compiler reserves more
    // address space than that), so the small run gets as far as the rewrite.
    let cache = dir.path().join("cache");
    let check = |config: Option<&Path>| {
        let mut args = vec![OsStr::new("check"), guests::PREINIT.as_ref(), "--settings-file".as_ref()];
        args.extend([policy.as_os_str(), OsStr::new("--cache-dir"), cache.as_os_str()]);
        if let Some(config) = config {
            args.extend([OsStr::new("--config"), config.as_os_str()]);
        }
        run(args)
    };
    let ran = check(None);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.contains("preinit   calls start from a snapshot taken after configure"), "{}", ran.stdout);
    let ran = check(Some(&small));
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.contains(
            "preinit   refused, calls start from the component as built: writing the snapshot needed more than \
             the 256 MiB allowed ([engine] compile-memory-mib)"
        ),
        "{}",
        ran.stdout
    );
    assert!(ran.stdout.contains("result    loads"), "{}", ran.stdout);
}

/// The snapshot child's contract, as the host drives it: its input on
/// stdin (at most `--max-bytes`), its output on stdout cut at
/// `--max-output` and one byte more (the host reads that as too large), a
/// failure as one line on stderr and a failing exit.
#[test]
fn the_snapshot_child_answers_on_its_pipes_and_fails_with_one_line() {
    let child = |args: &[&str], input: &[u8]| {
        use std::io::Write as _;
        let mut cmd = nri_wasm();
        cmd.arg("internal-snapshot").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut running = cmd.spawn().expect("start the child");
        // A child that stops reading (the input too long) closes its end.
        let _ = running.stdin.take().unwrap().write_all(input);
        running.wait_with_output().unwrap()
    };
    let component = std::fs::read(guests::PREINIT).unwrap();
    let len = component.len().to_string();
    let whole = child(&["instrument", "--max-bytes", &len, "--max-output", "100000000"], &component);
    assert!(whole.status.success(), "{whole:?}");
    assert!(whole.stdout.len() > component.len(), "the accessors are added");
    assert!(whole.stdout.starts_with(b"\0asm"));
    let cut = child(&["instrument", "--max-bytes", &len, "--max-output", "1000"], &component);
    assert!(cut.status.success(), "{cut:?}");
    assert_eq!(cut.stdout.len(), 1001);
    let over = child(&["instrument", "--max-bytes", "100", "--max-output", "100000000"], &component);
    assert!(!over.status.success());
    assert_eq!(String::from_utf8_lossy(&over.stderr).trim(), "the input exceeds 100 bytes");
    let garbage = child(&["instrument", "--max-bytes", "9", "--max-output", "1000"], b"not wasm!");
    assert!(!garbage.status.success() && garbage.stdout.is_empty(), "{garbage:?}");
    assert_eq!(String::from_utf8_lossy(&garbage.stderr).trim().lines().count(), 1, "{garbage:?}");
    let damaged = child(&["rewrite", "--max-bytes", "3", "--max-output", "1000"], &[7, 0, 0]);
    assert!(!damaged.status.success());
    assert!(String::from_utf8_lossy(&damaged.stderr).contains("the state ends"), "{damaged:?}");
}

/// What a policy asks for, and what the settings given do not grant.
#[test]
fn check_prints_the_declared_capabilities_and_the_ungranted_ones() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    let settings = toml::Value::String(hook_injector::SETTINGS.into());
    std::fs::write(&policy, format!("settings = {settings}\n")).unwrap();
    let ran =
        run([OsStr::new("check"), examples::HOOK_INJECTOR.as_ref(), "--settings-file".as_ref(), policy.as_os_str()]);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.contains("asks      deny, hooks (declared)\n"), "{}", ran.stdout);
    // What it may read, from its declaration (no `node`), and its imports (no state).
    assert!(ran.stdout.contains("reads     node view: no (not declared), state: no\n"), "{}", ran.stdout);
    assert!(ran.stdout.contains("not granted by these settings: hooks (grant = [\"hooks\"]"), "{}", ran.stdout);
    std::fs::write(&policy, format!("settings = {settings}\ngrant = [\"hooks\"]\n")).unwrap();
    let ran =
        run([OsStr::new("check"), examples::HOOK_INJECTOR.as_ref(), "--settings-file".as_ref(), policy.as_os_str()]);
    assert!(!ran.stdout.contains("not granted"), "{}", ran.stdout);
    // A policy that declares `node` and reads the node view.
    let ran =
        run([OsStr::new("check"), examples::EXCLUSIVE_CPUS.as_ref(), "--settings".as_ref(), "min-shared=1".as_ref()]);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.contains("reads     node view: yes (declared), "), "{}", ran.stdout);
}

#[test]
fn check_refuses_faulty_policies_naming_the_step() {
    let dir = tempfile::tempdir().unwrap();

    // Not WebAssembly: one line, nothing of the content.
    let secret = dir.path().join("10-secret.wasm");
    std::fs::write(&secret, SECRET).unwrap();
    let ran = run([OsStr::new("check"), secret.as_os_str()]);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert_eq!(ran.stdout.lines().count(), 1, "{}", ran.stdout);
    assert!(ran.stdout.contains("refused at step validate") && ran.stdout.contains("not a WebAssembly file"));
    assert!(!ran.stdout.contains("hunter2") && !ran.stderr.contains("hunter2") && !ran.stdout.contains("sk-live"));

    // A forbidden import: every import listed, the refused one with why.
    let http = dir.path().join("20-http.wasm");
    std::fs::write(&http, r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#).unwrap();
    let ran = run([OsStr::new("check"), http.as_os_str()]);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stdout.contains("  refused  wasi:http/outgoing-handler@0.2.0: the host does not provide it"));
    assert!(ran.stdout.contains("result    refused at step world"), "{}", ran.stdout);

    // Built against an older interface.
    let old = dir.path().join("30-old.wasm");
    std::fs::write(&old, r#"(component (import "nri-wasm:policy/host@0.2.0" (instance)))"#).unwrap();
    let ran = run([OsStr::new("check"), old.as_os_str()]);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stdout.contains("world     nri-wasm:policy@0.2.0") && ran.stdout.contains("rebuild against 0.3"));

    // Settings the policy refuses, and a settings step that loops.
    let ran = run(["check", examples::ULIMIT_ADJUSTER, "--settings", "{}"]);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stdout.contains("result    refused at step configure"), "{}", ran.stdout);
    assert!(ran.stdout.contains("max bounds no resource"), "{}", ran.stdout);
    let looping = dir.path().join("loop.toml");
    // Only fuel ends it: the time limit is far away.
    std::fs::write(&looping, "settings = \"init-loop\"\n[limits]\nfuel = 1000000\ntimeout-ms = 60000\n").unwrap();
    let ran = run([OsStr::new("check"), guests::FAULTS.as_ref(), "--settings-file".as_ref(), looping.as_os_str()]);
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stdout.contains("refused at step configure"), "{}", ran.stdout);
    assert!(ran.stdout.contains("fuel limit of 1000000"), "{}", ran.stdout);

    // A loop or a trap in a handler is not a load problem: it loads.
    let ran = run(["check", guests::FAULTS, "--settings", "loop"]);
    assert_eq!(ran.code, 0, "{ran:?}");

    // Usage and unreadable files.
    let ran = run([OsStr::new("check"), dir.path().join("missing.wasm").as_os_str()]);
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("no such file"), "{}", ran.stderr);
    let ran = run([OsStr::new("check"), dir.path().as_os_str()]);
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("is a directory"), "{}", ran.stderr);
    let ran = run(["check", guests::NOOP, "--settings", "a", "--settings-file", "b"]);
    assert_eq!(ran.code, 2, "{ran:?}");
    // A settings file that cannot be read is a usage error too, `.toml` or
    // not, named as the flag that gave it; a FIFO is refused, not waited on.
    let fifo = dir.path().join("fifo.toml");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for (file, why) in [
        (dir.path().join("missing.toml"), "cannot read it: No such file"),
        (dir.path().join("missing.txt"), "cannot read it: No such file"),
        (dir.path().to_path_buf(), "must be a regular file, not a directory"),
        (fifo, "must be a regular file, not a FIFO"),
    ] {
        let ran = run([OsStr::new("check"), OsStr::new(guests::NOOP), OsStr::new("--settings-file"), file.as_os_str()]);
        assert_eq!(ran.code, 2, "{}: {ran:?}", file.display());
        let said = format!("--settings-file {}: {why}", file.display());
        assert!(ran.stderr.contains(&said), "{said}: {}", ran.stderr);
    }
}

// ---------------------------------------------------------------- eval

#[test]
fn eval_of_faulty_policies_names_the_failure_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("CreateContainer");
    let eval = |dir: &Path| {
        run([OsStr::new("eval"), dir.as_os_str(), "--input".as_ref(), input.as_os_str(), "--json".as_ref()])
    };

    // A loop: out of fuel, ignored by default (exit 3), fails the event
    // with on-error = "fail" (exit 1).
    let loops = dir.path().join("loop");
    std::fs::create_dir(&loops).unwrap();
    install(&loops, "10-loop", guests::FAULTS, Some("loop"), "[limits]\nfuel = 1000000\ntimeout-ms = 60000\n");
    let ran = eval(&loops);
    assert_eq!(ran.code, 3, "{ran:?}");
    let doc = ran.json();
    let s = step(only_event(&doc), "10-loop");
    assert_eq!(
        (s["outcome"].as_str(), s["limit"].as_str(), s["ignored"].as_bool()),
        (Some("failed"), Some("fuel"), Some(true))
    );
    assert!(s["error"].as_str().unwrap().contains("fuel limit of 1000000 exhausted"), "{s}");
    assert_eq!(only_event(&doc)["result"], "unchanged");

    std::fs::write(
        loops.join("10-loop.toml"),
        "on-error = \"fail\"\nsettings = \"loop\"\n[limits]\nfuel = 1000000\ntimeout-ms = 60000\n",
    )
    .unwrap();
    let ran = eval(&loops);
    assert_eq!(ran.code, 1, "{ran:?}");
    let event = only_event(&ran.json()).clone();
    assert_eq!(event["result"], "failed");
    let error = event["error"].as_str().unwrap();
    assert!(error.contains("fuel limit of 1000000 exhausted") && error.contains("on-error = fail"), "{error}");

    // A loop cut by time instead: the limit is time.
    std::fs::write(loops.join("10-loop.toml"), "settings = \"loop\"\n[limits]\ntimeout-ms = 5\nfuel = 4000000000000\n")
        .unwrap();
    let ran = eval(&loops);
    assert_eq!(ran.code, 3, "{ran:?}");
    let s = step(only_event(&ran.json()), "10-loop").clone();
    assert_eq!(s["limit"], "time", "{s}");
    assert!(s["error"].as_str().unwrap().contains("time limit of 5 ms exceeded"), "{s}");

    // A trap, a forbidden import, bad settings and a file that is not a
    // policy, beside a good policy that still runs.
    let mixed = dir.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    install(&mixed, "10-trap", guests::FAULTS, Some("unreachable"), LOOSE);
    std::fs::write(mixed.join("20-http.wasm"), r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#)
        .unwrap();
    install(&mixed, "30-ulimit", examples::ULIMIT_ADJUSTER, Some("{}"), LOOSE);
    std::fs::write(mixed.join("40-secret.wasm"), SECRET).unwrap();
    install(&mixed, "50-env", examples::POD_METADATA_ENV, Some(pod_metadata_env::SETTINGS), LOOSE);
    let ran = eval(&mixed);
    assert_eq!(ran.code, 3, "{ran:?}");
    assert!(!ran.stdout.contains("hunter2") && !ran.stderr.contains("hunter2"));
    let doc = ran.json();
    let problems: Vec<&str> = doc["problems"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("20-http") && problems[0].contains("wasi:http/outgoing-handler@0.2.0"));
    assert!(problems[1].contains("30-ulimit") && problems[1].contains("max bounds no resource"));
    assert!(problems[2].contains("40-secret") && problems[2].contains("not a WebAssembly file"));
    let event = only_event(&doc);
    let trap = step(event, "10-trap");
    assert_eq!(trap["kind"], "trap");
    assert!(trap["error"].as_str().unwrap().contains("unreachable"), "{trap}");
    assert_eq!(step(event, "50-env")["outcome"], "changed");
    assert_eq!(event["result"], "changed");

    // The text report says the same.
    let ran = run([OsStr::new("eval"), mixed.as_os_str(), "--input".as_ref(), input.as_os_str()]);
    assert_eq!(ran.code, 3, "{ran:?}");
    assert!(ran.stdout.contains("left out: ") && ran.stdout.contains("failed, ignored"), "{}", ran.stdout);
}

#[test]
fn eval_refuses_input_it_cannot_read_without_running_anything() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("CreateContainer");
    let secret = dir.path().join("event.json");
    std::fs::write(&secret, SECRET).unwrap();
    let ran = run([OsStr::new("eval"), guests::NOOP.as_ref(), "--input".as_ref(), secret.as_os_str()]);
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("not JSON") && !ran.stderr.contains("hunter2"), "{}", ran.stderr);

    let bare = dir.path().join("bare.json");
    std::fs::write(&bare, r#"{"pod": {"id": "p"}}"#).unwrap();
    let ran = run([OsStr::new("eval"), guests::NOOP.as_ref(), "--input".as_ref(), bare.as_os_str()]);
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("needs its event named"), "{}", ran.stderr);
    let ran = run([
        OsStr::new("eval"),
        guests::NOOP.as_ref(),
        "--input".as_ref(),
        input.as_os_str(),
        "--event".as_ref(),
        "RunPodSandbox".as_ref(),
    ]);
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("a CreateContainer request, not RunPodSandbox"), "{}", ran.stderr);
    let ran = run([OsStr::new("eval"), guests::NOOP.as_ref()]);
    assert_eq!(ran.code, 2, "{ran:?}");
    let ran =
        run([OsStr::new("eval"), dir.path().join("none.wasm").as_os_str(), "--input".as_ref(), input.as_os_str()]);
    assert_eq!(ran.code, 2, "{ran:?}");
}

/// The node view from `--node` and state from `--state`: `exclusive-cpus`
/// keeps its allocations in state and reads the node.
#[test]
fn eval_seeds_the_node_and_preloads_and_prints_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    std::fs::write(&state, r#"{"60-exclusive-cpus": {"example.com/seen": "before"}}"#).unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    install(&policies, "60-exclusive-cpus", examples::EXCLUSIVE_CPUS, None, GRANTED_LOOSE);
    let ran = run([
        OsStr::new("eval"),
        policies.as_os_str(),
        "--input".as_ref(),
        fixture("CreateContainer").as_os_str(),
        "--node".as_ref(),
        fixture("Synchronize").as_os_str(),
        "--state".as_ref(),
        state.as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(ran.code, 0, "{ran:?}");
    let doc = ran.json();
    let events: Vec<&str> = doc["events"].as_array().unwrap().iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(events, ["Synchronize", "CreateContainer"]);
    assert!(doc["events"][0]["target"].as_str().unwrap().contains("pods: 1"), "{}", doc["events"][0]);
    assert_eq!(doc["state"]["60-exclusive-cpus"]["example.com/seen"], "before", "{}", doc["state"]);
    assert!(
        doc["policies"][0]["reads_node"].as_bool().unwrap() && doc["policies"][0]["keeps_state"].as_bool().unwrap()
    );
}

// ------------------------------------------------ every example, through eval

use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_test_support::cases::{earlier, request};

mod ulimit_adjuster {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/ulimit-adjuster/src/cases.rs");
}

mod device_injector {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/device-injector/src/cases.rs");
}

mod hook_injector {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/hook-injector/src/cases.rs");
}

mod qos_class {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/qos-class/src/cases.rs");
}

mod deny_host_sockets {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/deny-host-sockets/src/cases.rs");
}

mod pod_metadata_env {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/pod-metadata-env/src/cases.rs");
}

mod adjustment_validator {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/adjustment-validator/src/cases.rs");
}

/// An example: its component, its name in the chain and its cases.
struct Example {
    wasm: &'static str,
    policy: &'static str,
    cases: &'static [Case],
}

const EXAMPLES: [Example; 7] = [
    Example { wasm: examples::DENY_HOST_SOCKETS, policy: deny_host_sockets::POLICY, cases: deny_host_sockets::CASES },
    Example { wasm: examples::QOS_CLASS, policy: qos_class::POLICY, cases: qos_class::CASES },
    Example { wasm: examples::HOOK_INJECTOR, policy: hook_injector::POLICY, cases: hook_injector::CASES },
    Example { wasm: examples::DEVICE_INJECTOR, policy: device_injector::POLICY, cases: device_injector::CASES },
    Example { wasm: examples::ULIMIT_ADJUSTER, policy: ulimit_adjuster::POLICY, cases: ulimit_adjuster::CASES },
    Example { wasm: examples::POD_METADATA_ENV, policy: pod_metadata_env::POLICY, cases: pod_metadata_env::CASES },
    Example {
        wasm: examples::ADJUSTMENT_VALIDATOR,
        policy: adjustment_validator::POLICY,
        cases: adjustment_validator::CASES,
    },
];

/// Runs one case through `eval`, as an operator would: a policy directory
/// (the earlier policies, then the example, with the case's settings) and
/// the edited request, bare, with `--event`.
fn eval_case(example: &Example, case: &Case) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    for (name, script) in earlier(case) {
        install(&policies, name, guests::REPLAY, Some(&script), GRANTED_LOOSE);
    }
    install(&policies, example.policy, example.wasm, Some(case.settings), GRANTED_LOOSE);
    let input = dir.path().join("request.json");
    std::fs::write(&input, Request::CreateContainer(request(case)).to_json()).unwrap();
    run([
        OsStr::new("eval"),
        policies.as_os_str(),
        "--event".as_ref(),
        "create-container".as_ref(),
        "--input".as_ref(),
        input.as_os_str(),
        "--json".as_ref(),
    ])
}

fn check_case(example: &Example, case: &Case) {
    let ran = eval_case(example, case);
    let doc = ran.json();
    let what = format!("{} case {:?}", example.policy, case.name);
    match case.expect {
        Expect::Lines(lines) => {
            assert_eq!(ran.code, 0, "{what}: {ran:?}");
            let mut want: Vec<&str> = lines.to_vec();
            want.sort();
            let got: Vec<&str> =
                only_event(&doc)["lines"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            assert_eq!(got, want, "{what}");
        }
        Expect::Deny(reason) => {
            assert_eq!(ran.code, 1, "{what}: {ran:?}");
            let event = only_event(&doc);
            assert_eq!(event["result"], "denied", "{what}");
            let error = event["error"].as_str().unwrap();
            // A validator denies the validation step inside CreateContainer.
            let denied = format!("policy {} denied ", example.policy);
            assert!(error.contains(&denied) && error.ends_with(reason), "{what}: {error}");
            assert_eq!(step(event, example.policy)["reason"], reason, "{what}");
        }
        Expect::Settings(error) => {
            assert_eq!(ran.code, 3, "{what}: {ran:?}");
            let problems = doc["problems"].as_array().unwrap();
            assert_eq!(problems.len(), 1, "{what}: {problems:?}");
            let problem = problems[0].as_str().unwrap();
            assert!(problem.contains(example.policy) && problem.contains(error), "{what}: {problem}");
        }
    }
}

#[test]
fn eval_of_every_example_gives_the_replies_its_cases_expect() {
    let mut cases = 0;
    for example in &EXAMPLES {
        assert!(!example.cases.is_empty(), "{}", example.policy);
        for case in example.cases {
            check_case(example, case);
            cases += 1;
        }
    }
    assert!(cases >= 7, "{cases}");
}

// ----------------------------------------------------- record and replay

/// The policies of the recording test: denials and changes, no state.
fn replay_policies(dir: &Path) {
    install(dir, deny_host_sockets::POLICY, examples::DENY_HOST_SOCKETS, Some(deny_host_sockets::SETTINGS), LOOSE);
    install(dir, ulimit_adjuster::POLICY, examples::ULIMIT_ADJUSTER, Some(ulimit_adjuster::SETTINGS), LOOSE);
    install(dir, pod_metadata_env::POLICY, examples::POD_METADATA_ENV, Some(pod_metadata_env::SETTINGS), LOOSE);
}

/// The host's `/metrics`, if it answers.
fn scrape(port: u16) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}

/// What the runtime saw of an event.
type Live = (&'static str, Result<Option<pb::CreateContainerResponse>, String>);

fn live<T>(
    event: &'static str,
    result: Result<T, nri_sim::SimError>,
    reply: impl FnOnce(T) -> Option<pb::CreateContainerResponse>,
) -> Live {
    let result = result.map(reply).map_err(|e| match e.status() {
        Some(status) => status.message().to_string(),
        None => panic!("{event}: {e}"),
    });
    (event, result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_replays_to_the_outcomes_of_the_live_run() {
    use nri_sim::{RuntimeProfile, Simulator};
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    replay_policies(&policies);
    let config = dir.path().join("config.toml");
    let cache = toml::Value::String(nri_wasm_components::COMPONENT_CACHE.into());
    // The metrics endpoint tells the test when every policy is loaded.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // The simulated runtime accepts a connection only when the test asks it
    // to: while the test waits for the loads, the host's next connection
    // sits in the listen queue. A registration that timed out there would
    // leave a closed connection for the test to accept, so the host waits
    // for its registration's answer as long as the test may wait.
    std::fs::write(
        &config,
        format!(
            "[engine]\ncache-dir = {cache}\n[metrics]\naddress = \"127.0.0.1:{port}\"\n\
             [runtime]\nregister-timeout-ms = 600000\n[registry]\ncache-dir = {:?}\n",
            dir.path().join("registry")
        ),
    )
    .unwrap();
    let socket = dir.path().join("nri.sock");
    let recording = dir.path().join("requests.jsonl");
    let sim = Simulator::listen(&socket, RuntimeProfile::v0_12()).await.unwrap();
    let mut host = nri_wasm()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .arg("--policies")
        .arg(&policies)
        .arg("--record")
        .arg(&recording)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // The runtime drops the first connection after Configure, so the
    // recording always spans two connections (as after a runtime restart).
    let mut first = tokio::time::timeout(Duration::from_secs(60), sim.accept()).await.expect("connects").unwrap();
    first.configure().await.unwrap();
    first.close().await;
    // Events that reach a policy still loading go on without it (its
    // on-error is "ignore"): the live run starts once all three are loaded,
    // as the metrics endpoint says. Until their subscriptions are known the
    // host may subscribe to less; it reconnects with the full subscription.
    let loaded = tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(120) {
            if scrape(port).is_some_and(|m| m.lines().any(|l| l == "nri_wasm_policies{status=\"loaded\"} 3")) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    assert!(loaded.await.unwrap(), "the three policies load");
    let conn = loop {
        let mut conn = tokio::time::timeout(Duration::from_secs(60), sim.accept()).await.expect("connects").unwrap();
        conn.configure().await.unwrap();
        if conn.is_subscribed(pb::Event::CREATE_CONTAINER) {
            break conn;
        }
        conn.close().await;
    };
    let sync: pb::SynchronizeRequest = nri_sim::fixtures::load("Synchronize").unwrap();
    conn.synchronize(&sync.pods, &sync.containers, 0).await.unwrap();
    let base: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").unwrap();
    let (pod, ctr) = (base.pod.clone().unwrap(), base.container.clone().unwrap());
    let mut seen: Vec<Live> = Vec::new();
    if conn.is_subscribed(pb::Event::RUN_POD_SANDBOX) {
        seen.push(live("RunPodSandbox", conn.run_pod_sandbox(&pod).await, |()| None));
    }
    // As captured (env from pod labels), named "container" (rlimits), with
    // a bad rlimit annotation (denied), mounting containerd's socket (denied).
    let mut named = ctr.clone();
    named.name = "container".into();
    let mut bad_pod = pod.clone();
    bad_pod.annotations.insert("ulimits.example.com/container.nofile".into(), "lots".into());
    let mut socket_mount = ctr.clone();
    socket_mount.mounts.push(pb::Mount {
        destination: "/run/containerd/containerd.sock".into(),
        type_: "bind".into(),
        source: "/run/containerd/containerd.sock".into(),
        options: vec!["rbind".into()],
        ..Default::default()
    });
    for (p, c) in [(&pod, &ctr), (&pod, &named), (&bad_pod, &named), (&pod, &socket_mount)] {
        seen.push(live("CreateContainer", conn.create_container(p, c).await, Some));
    }
    if conn.is_subscribed(pb::Event::START_CONTAINER) {
        seen.push(live("StartContainer", conn.start_container(&pod, &ctr).await, |()| None));
    }
    conn.close().await;
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    let stderr = host.stderr.take();
    let status = tokio::task::spawn_blocking(move || host.wait()).await.unwrap().unwrap();
    let mut log = String::new();
    if let Some(mut s) = stderr {
        use std::io::Read as _;
        let _ = s.read_to_string(&mut log);
    }
    assert!(status.success(), "the host stops cleanly on SIGTERM: {log}");
    assert!(seen.iter().filter(|(e, r)| *e == "CreateContainer" && r.is_err()).count() == 2, "{seen:?}");
    assert!(seen.iter().any(|(_, r)| matches!(r, Ok(Some(reply)) if reply.adjust.is_some())), "{seen:?}");

    let ran = run([
        OsStr::new("eval"),
        "--replay".as_ref(),
        recording.as_os_str(),
        policies.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(ran.code, 1, "denials make the replay's exit code: {ran:?}");
    let lines: Vec<Value> = ran.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.first().unwrap()["problems"].as_array().unwrap().is_empty(), "{}", lines[0]);
    let summary = &lines.last().unwrap()["summary"];
    let events: Vec<&Value> = lines.iter().filter(|l| l.get("index").is_some()).collect();
    let replayed: Vec<&Value> =
        events.iter().copied().filter(|e| !matches!(e["event"].as_str(), Some("Configure" | "Synchronize"))).collect();
    assert_eq!(replayed.len(), seen.len(), "{events:?}");
    for ((event, outcome), replay) in seen.iter().zip(&replayed) {
        assert_eq!(replay["event"], *event);
        match outcome {
            Ok(reply) => {
                assert_eq!(replay["error"], Value::Null, "{replay}");
                if let Some(reply) = reply {
                    let replied: pb::CreateContainerResponse =
                        protobuf_json_mapping::parse_from_str(&replay["reply"].to_string()).unwrap();
                    assert_eq!(&replied, reply, "{replay}");
                }
            }
            Err(message) => assert_eq!(replay["error"].as_str(), Some(message.as_str()), "{replay}"),
        }
    }
    assert_eq!(summary["results"]["denied"], 2, "{summary}");
    let events_seen: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    // One Configure per connection: the one dropped above, and any made
    // before the policies were loaded (closed for their smaller subscription).
    let configures = events_seen.iter().take_while(|e| **e == "Configure").count();
    assert!(configures >= 2, "{events_seen:?}");
    assert_eq!(events_seen.get(configures), Some(&"Synchronize"), "{events_seen:?}");
    for line in std::fs::read_to_string(&recording).unwrap().lines() {
        let recorded = parse_document(line, None).unwrap();
        assert!(recorded.time.is_some_and(|t| t.ends_with('Z')), "{line}");
    }
}

// -------------------------------------------- docs/writing-policies.md, run

const GUIDE: &str = include_str!("../../../docs/writing-policies.md");

/// The fenced blocks of the guide, with the HTML comment just before each.
fn blocks(doc: &str) -> Vec<(Option<&str>, &str, String)> {
    let mut out = Vec::new();
    let mut lines = doc.lines().peekable();
    let mut marker: Option<&str> = None;
    while let Some(line) = lines.next() {
        if let Some(comment) = line.trim().strip_prefix("<!--").and_then(|c| c.strip_suffix("-->")) {
            marker = Some(comment.trim());
            continue;
        }
        if let Some(lang) = line.strip_prefix("```") {
            let mut body = String::new();
            for inner in lines.by_ref() {
                if inner.starts_with("```") {
                    break;
                }
                body.push_str(inner);
                body.push('\n');
            }
            out.push((marker.take(), lang.trim(), body));
            continue;
        }
        if !line.trim().is_empty() {
            marker = None;
        }
    }
    out
}

/// Splits a command line into words (quotes as the shell reads them).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    w.push(q);
                }
            }
            c if c.is_whitespace() => out.extend(word.take()),
            '#' if word.is_none() => break,
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

/// Runs `lines` (shell commands of a document: `nri-wasm`, `cargo` and
/// `cd`) in order from `start`, offline, with the builds in `target`
/// (paths into `./target` go there). Returns the directory the lines ended
/// in and each line with its standard output.
fn walk(lines: &[String], start: &Path, target: &Path) -> (PathBuf, Vec<(String, String)>) {
    let mut cwd = start.to_path_buf();
    let mut ran_lines = Vec::new();
    for line in lines {
        let words = words(line);
        let (program, args) = words.split_first().unwrap();
        // The build's own target directory: paths into ./target go there.
        let args: Vec<String> = args
            .iter()
            .map(|a| match a.strip_prefix("target/") {
                Some(rest) => target.join(rest).display().to_string(),
                None => a.clone(),
            })
            .collect();
        match program.as_str() {
            "cd" => cwd = cwd.join(&args[0]),
            "nri-wasm" => {
                let ran = run_in(Some(&cwd), &args);
                assert_eq!(ran.code, 0, "{line}: {ran:?}");
                ran_lines.push((line.to_string(), ran.stdout));
            }
            "cargo" => {
                let out = Command::new("cargo")
                    .args(&args)
                    .current_dir(&cwd)
                    .env("CARGO_TARGET_DIR", target)
                    .env("CARGO_NET_OFFLINE", "true")
                    // The project's rust-toolchain.toml decides, as for its author.
                    .env_remove("RUSTUP_TOOLCHAIN")
                    .env_remove("CARGO")
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "{line}: {stderr}");
                ran_lines.push((line.to_string(), String::from_utf8_lossy(&out.stdout).into_owned()));
            }
            other => panic!("the walkthrough runs nri-wasm, cargo and cd, not {other}: {line}"),
        }
    }
    (cwd, ran_lines)
}

/// The command lines of a shell block (comments and blank lines left out).
fn command_lines(body: &str) -> Vec<String> {
    body.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect()
}

/// The guide's walkthrough, run: every line of the blocks marked
/// `walkthrough`, in order, in a temporary directory, offline, with the
/// builds sharing one target directory across runs of the suite.
#[test]
fn the_guide_walkthrough_creates_builds_tests_checks_and_evaluates_a_policy() {
    let _alone = crate::alone();
    let tmp = tempfile::tempdir().unwrap();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("author-tools-project");
    let mut lines = Vec::new();
    for (marker, lang, body) in blocks(GUIDE) {
        if marker != Some("walkthrough") {
            continue;
        }
        assert_eq!(lang, "sh");
        lines.extend(command_lines(&body));
    }
    let (cwd, ran_lines) = walk(&lines, tmp.path(), &target);
    let ran = |prefix: &str| {
        ran_lines
            .iter()
            .find(|(l, _)| l.starts_with(prefix))
            .map(|(_, out)| out.as_str())
            .unwrap_or_else(|| panic!("the walkthrough runs `{prefix}`"))
    };
    assert!(ran("nri-wasm new").contains("a rust policy project"));
    assert!(ran("cargo test").contains("test result: ok"));
    let check = ran("nri-wasm check");
    assert!(check.contains("result    loads") && check.contains("events    CreateContainer"), "{check}");
    let eval = ran("nri-wasm eval");
    assert!(eval.contains("env TEAM=payments"), "{eval}");
    assert!(ran_lines.iter().any(|(l, _)| l.starts_with("cargo build --release --target wasm32-wasip2")));

    // The project as committed and cloned elsewhere: its files without the
    // link and the build, the link made as its README says.
    let project = cwd;
    let moved = tempfile::tempdir().unwrap();
    let clone = moved.path().join("elsewhere/team-env");
    copy_tree(&project, &clone);
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
    for file in files(&clone) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for path in [checkout.as_path(), project.as_path(), tmp.path()] {
            assert!(!text.contains(&path.display().to_string()), "{} names {}", file.display(), path.display());
        }
        assert!(!text.contains("{{"), "{} keeps a placeholder", file.display());
    }
    let readme = std::fs::read_to_string(clone.join("README.md")).unwrap();
    let link = blocks(&readme)
        .into_iter()
        .find(|(marker, _, _)| *marker == Some("link the SDK"))
        .map(|(_, _, body)| body)
        .expect("the README tells how to link the SDK");
    let linked = Command::new("sh")
        .args(["-euc", &link])
        .current_dir(&clone)
        .env("NRI_WASM_SDK", checkout.join("guest-sdk"))
        .output()
        .unwrap();
    assert!(linked.status.success(), "{link}: {}", String::from_utf8_lossy(&linked.stderr));
    for args in [&["test"][..], &["build", "--release", "--target", "wasm32-wasip2"]] {
        let out = Command::new("cargo")
            .args(args)
            .current_dir(&clone)
            .env("CARGO_TARGET_DIR", &target)
            .env("CARGO_NET_OFFLINE", "true")
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "cargo {args:?} in the clone: {}", String::from_utf8_lossy(&out.stderr));
        if args[0] == "test" {
            assert!(String::from_utf8_lossy(&out.stdout).contains("test result: ok"));
        }
    }
    let wasm = target.join("wasm32-wasip2/release/team_env.wasm");
    let ran =
        run([OsStr::new("check"), wasm.as_os_str(), "--settings-file".as_ref(), clone.join("policy.toml").as_os_str()]);
    assert_eq!(ran.code, 0, "{ran:?}");

    // The README's block, as written there, on the same build.
    let readme = include_str!("../../../README.md");
    let block = readme
        .split("## Writing policies")
        .nth(1)
        .and_then(|s| s.split("```sh\n").nth(1))
        .and_then(|b| b.split("```").next())
        .expect("the README's Writing policies block");
    let elsewhere = tempfile::tempdir().unwrap();
    let (_, ran_lines) = walk(&command_lines(block), elsewhere.path(), &target);
    let ran = |prefix: &str| ran_lines.iter().find(|(l, _)| l.starts_with(prefix)).map(|(_, o)| o.as_str()).unwrap();
    assert!(ran("cargo test").contains("test result: ok"));
    assert!(ran("nri-wasm check").contains("result    loads"));
    assert!(ran("nri-wasm eval").contains("env TEAM=payments"), "{}", ran("nri-wasm eval"));
}

/// The regular files under `dir`, links and the build's `target/` aside.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()) {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() && entry.file_name() != "target" {
            out.extend(files(&entry.path()));
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    out
}

/// Copies a project's files (what `git` would commit: no links, no `target/`).
fn copy_tree(from: &Path, to: &Path) {
    for file in files(from) {
        let dest = to.join(file.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&file, &dest).unwrap();
    }
}

/// The guide's JSON examples are what the host reads: requests parse as
/// their event's, a recording line as a recording, a state file as state.
#[test]
fn the_guides_examples_are_what_the_host_reads() {
    let mut checked = 0;
    for (marker, lang, body) in blocks(GUIDE) {
        let Some(marker) = marker else { continue };
        if let Some(event) = marker.strip_prefix("request ") {
            let recorded = parse_document(&body, Some(event)).unwrap_or_else(|e| panic!("{marker}: {e}"));
            assert_eq!(recorded.request.name(), event);
        } else if marker == "recording" {
            for line in body.lines() {
                let recorded = parse_document(line, None).unwrap_or_else(|e| panic!("{line}: {e}"));
                assert!(recorded.time.is_some(), "{line}");
            }
        } else if marker == "state" {
            let _: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
                serde_json::from_str(&body).unwrap();
        } else if let Some(name) = marker.strip_prefix("policy file ") {
            assert_eq!(lang, "toml");
            let dir = tempfile::tempdir().unwrap();
            let toml = dir.path().join(format!("{name}.toml"));
            std::fs::write(&toml, &body).unwrap();
            let spec = nri_wasm::policy::spec::manifest::read_spec(
                name,
                &dir.path().join(format!("{name}.wasm")),
                Some(&toml),
                nri_wasm::policy::spec::manifest::ReadOptions::lenient(
                    nri_wasm::policy::spec::limits::Limits::default(),
                ),
            );
            spec.unwrap_or_else(|e| panic!("{marker}: {e}"));
        } else if let Some(file) = marker.strip_prefix("from the template: ") {
            let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/rust/template").join(file);
            let text = std::fs::read_to_string(&template).unwrap();
            assert!(text.contains(body.trim()), "{marker}: the guide's excerpt is not in {}", template.display());
        } else {
            continue;
        }
        checked += 1;
    }
    assert!(checked >= 6, "{checked} examples checked");
}

/// `new` makes a project of every language whose SDK has a template (the
/// binary embeds them at build time), and names the languages it has when
/// asked for one it does not.
#[test]
fn new_creates_a_project_of_every_language_with_a_template() {
    let sdks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
    let tmp = tempfile::tempdir().unwrap();
    let mut langs = Vec::new();
    for entry in std::fs::read_dir(&sdks).unwrap().filter_map(|e| e.ok()) {
        let template = entry.path().join("template");
        let Ok(manifest) = std::fs::read_to_string(template.join("MANIFEST")) else { continue };
        let lang = entry.file_name().to_string_lossy().into_owned();
        let dir = tmp.path().join(&lang);
        let ran = run([
            OsStr::new("new"),
            "--lang".as_ref(),
            lang.as_ref(),
            "tried-out".as_ref(),
            "--dir".as_ref(),
            dir.as_os_str(),
        ]);
        assert_eq!(ran.code, 0, "{lang}: {ran:?}");
        assert!(ran.stdout.contains(&format!("a {lang} policy project")), "{}", ran.stdout);
        for file in manifest.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let made = dir.join(file);
            let text = std::fs::read_to_string(&made).unwrap_or_else(|e| panic!("{lang}: {file}: {e}"));
            for placeholder in ["{{name}}", "{{name_snake}}", "{{sdk}}"] {
                assert!(!text.contains(placeholder), "{lang}: {file} keeps {placeholder}");
            }
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o111;
            assert_eq!(
                mode(&made) != 0,
                mode(&template.join(file)) != 0,
                "{lang}: {file}: executable as in the template"
            );
        }
        langs.push(lang);
    }
    assert!(langs.iter().any(|l| l == "rust"), "{langs:?}");
    let ran = run(["new", "--lang", "cobol", "x"]);
    assert_eq!(ran.code, 2, "{ran:?}");
    let said = ran.stderr.lines().next().unwrap_or_default().to_string();
    assert!(said.contains("no project template for --lang cobol"), "{said}");
    for lang in &langs {
        assert!(said.contains(lang.as_str()), "{lang} missing from: {said}");
    }
    let ran = run_in(Some(tmp.path()), ["new", "Bad_Name"]);
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("kebab-case") || ran.stderr.contains("lower-case"), "{}", ran.stderr);
}

/// The generated project builds with the toolchain the repository does.
#[test]
fn the_template_pins_the_repositorys_toolchain() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let channel = |text: &str| {
        text.lines().find_map(|l| l.trim().strip_prefix("channel = ").map(|v| v.trim_matches('"').to_string()))
    };
    let ours = std::fs::read_to_string(root.join("rust-toolchain.toml")).unwrap();
    let template = std::fs::read_to_string(root.join("guest-sdk/rust/template/rust-toolchain.toml")).unwrap();
    assert_eq!(channel(&template), channel(&ours));
    assert!(template.contains("wasm32-wasip2"), "{template}");
}

/// `check` and `eval` share the compile cache: once one compiled a
/// component, the other (and a second `check`) reads it from the cache.
#[test]
fn check_and_eval_share_the_compile_cache() {
    let check = |cache: &Path| {
        run([
            OsStr::new("check"),
            examples::ULIMIT_ADJUSTER.as_ref(),
            "--settings".as_ref(),
            ulimit_adjuster::SETTINGS.as_ref(),
            "--cache-dir".as_ref(),
            cache.as_os_str(),
        ])
    };
    let cache = tempfile::tempdir().unwrap();
    let first = check(cache.path());
    assert_eq!(first.code, 0, "{first:?}");
    assert!(first.stdout.contains("(the whole first load: "), "compiled the first time:\n{}", first.stdout);
    let again = check(cache.path());
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stdout.contains("compile   none: compiled earlier"), "{}", again.stdout);

    let other = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/containerd-2.3.4/CreateContainer.json");
    let ran = run([
        OsStr::new("eval"),
        examples::ULIMIT_ADJUSTER.as_ref(),
        "--settings".as_ref(),
        ulimit_adjuster::SETTINGS.as_ref(),
        "--cache-dir".as_ref(),
        other.path().as_os_str(),
        "--input".as_ref(),
        fixture.as_os_str(),
    ]);
    assert!(ran.code <= 1, "{ran:?}");
    let checked = check(other.path());
    assert!(checked.stdout.contains("compile   none: compiled earlier"), "eval compiled it:\n{}", checked.stdout);
}

// ------------------------------- eval --config loads as a node does (run)

/// Debian's `docker-registry`, or `None` (and a message) when it is not
/// installed (`tests/registry/install.sh` installs it; `.ci/run` does).
fn registry_binary() -> Option<PathBuf> {
    let path = PathBuf::from("/usr/bin/docker-registry");
    if path.exists() {
        return Some(path);
    }
    let why = "/usr/bin/docker-registry is not installed (tests/registry/install.sh installs it; .ci/run does)";
    assert!(std::env::var("CI").map_or(true, |v| v != "true"), "in CI this test must run: {why}");
    eprintln!("SKIPPED: {why}");
    None
}

/// Runs `cmd`, which must succeed; its stdout.
fn must(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A registry on loopback with TLS (a CA of the test's own and a leaf
/// certificate for 127.0.0.1), no authentication, killed by its pid when
/// dropped.
struct LocalRegistry {
    child: std::process::Child,
    port: u16,
    ca: PathBuf,
}

impl LocalRegistry {
    fn start(binary: &Path, dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let p = |n: &str| dir.join(n).display().to_string();
        must(
            Command::new("openssl")
                .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
                .args([
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=nri-wasm author test CA",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                    "-keyout",
                    &p("ca.key"),
                    "-out",
                    &p("ca.crt"),
                ]),
        );
        must(
            Command::new("openssl")
                .args(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
                .args(["-subj", "/CN=127.0.0.1", "-keyout", &p("server.key"), "-out", &p("server.csr")]),
        );
        std::fs::write(
            dir.join("ext.cnf"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
             subjectAltName=IP:127.0.0.1\n",
        )
        .unwrap();
        must(Command::new("openssl").args(["x509", "-req", "-days", "2", "-CAcreateserial"]).args([
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-extfile",
            &p("ext.cnf"),
            "-out",
            &p("server.crt"),
        ]));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(
            dir.join("registry.yml"),
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {}\n    key: {}\n",
                p("data"),
                p("server.crt"),
                p("server.key")
            ),
        )
        .unwrap();
        let mut child = Command::new(binary)
            .arg("serve")
            .arg(dir.join("registry.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("docker-registry exited at start: {status}");
            }
            assert!(started.elapsed() < Duration::from_secs(60), "docker-registry did not listen within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port, ca: dir.join("ca.crt") }
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A host's `/status`, as `nri-wasm status --json` prints it.
fn status(port: u16) -> Option<Value> {
    let ran = run(["status", "--address", &format!("127.0.0.1:{port}"), "--json"]);
    (ran.code == 0).then(|| serde_json::from_str(&ran.stdout).ok()).flatten()
}

/// A policy a node's configuration names by reference, pushed and not
/// signed, where the configuration requires a signature: `run` leaves it
/// out, and so does `eval --config`, for the same reason, in the same
/// words; a create then fails, as the policy is mandatory. Signed, both
/// load it. `eval` builds its host with the configuration's `[registry]`
/// (the CA, the keys, the cache) and `[policies.sources]`, as `run` does.
#[test]
fn an_unsigned_policy_is_refused_by_eval_with_a_nodes_configuration_as_by_run() {
    let Some(binary) = registry_binary() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let registry = LocalRegistry::start(&binary, &tmp.path().join("registry"));
    let ca = registry.ca.display().to_string();
    let reference = format!("oci://127.0.0.1:{}/policies/ulimit:1", registry.port);
    let pushed = run(["push", examples::ULIMIT_ADJUSTER, &reference, "--ca-file", &ca]);
    assert_eq!(pushed.code, 0, "{pushed:?}");
    let pinned = pushed
        .stdout
        .split_whitespace()
        .find(|w| w.starts_with("oci://") && w.contains("@sha256:"))
        .unwrap_or_else(|| panic!("push prints the pinned reference: {pushed:?}"))
        .to_string();
    let key = tmp.path().join("signing.key");
    let generated = run([OsStr::new("sign"), "--generate".as_ref(), key.as_os_str()]);
    assert_eq!(generated.code, 0, "{generated:?}");

    // The node: the policy by reference, its settings beside, a signature required.
    let policies = tmp.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(
        policies.join("30-ulimit.toml"),
        format!(
            "on-error = \"fail\"\nsettings = {}\n[limits]\ntimeout-ms = 5000\n",
            toml::Value::String(ulimit_adjuster::SETTINGS.into())
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = tmp.path().join("node.toml");
    let quoted = |p: &Path| toml::Value::String(p.display().to_string());
    std::fs::write(
        &config,
        format!(
            "[policies]\ndir = {dir}\n[policies.sources]\n\"30-ulimit\" = \"{pinned}\"\n\
             [registry]\nca-file = {ca}\npublic-keys = [{key}]\ncache-dir = {oci}\n\
             [engine]\ncache-dir = {cache}\n[metrics]\naddress = \"127.0.0.1:{port}\"\n",
            dir = quoted(&policies),
            ca = quoted(&registry.ca),
            key = quoted(&key.with_extension("key.pub")),
            oci = quoted(&tmp.path().join("oci-cache")),
            cache = toml::Value::String(nri_wasm_components::COMPONENT_CACHE.into()),
        ),
    )
    .unwrap();
    let checked = run([OsStr::new("config"), "check".as_ref(), config.as_os_str()]);
    assert_eq!(checked.code, 0, "{checked:?}");

    // `run`: what the node says of it.
    let mut host = nri_wasm()
        .args([OsStr::new("run"), "--config".as_ref(), config.as_os_str(), "--socket".as_ref()])
        .arg(tmp.path().join("no-runtime.sock"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let refused_by_run = loop {
        let found = status(port).filter(|s| s["chain_loaded"] == true).and_then(|s| {
            let p = s["policies"].as_array()?.iter().find(|p| p["name"] == "30-ulimit")?.clone();
            Some(p)
        });
        if let Some(policy) = found {
            break policy;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the host reports its chain within 120 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    unsafe { libc::kill(host.id() as i32, libc::SIGTERM) };
    let _ = host.wait();
    assert_eq!(refused_by_run["status"], "failed", "{refused_by_run}");
    let why = refused_by_run["reason"].as_str().unwrap().to_string();
    eprintln!("run leaves it out: {why}");
    assert!(why.contains("signature"), "{why}");

    // `eval --config`: the same policy left out for the same reason, and the
    // create it would have run on fails, as on the node.
    let input = fixture("CreateContainer");
    let eval = |extra: &[&OsStr]| {
        let mut args: Vec<&OsStr> = vec![
            "eval".as_ref(),
            policies.as_os_str(),
            "--config".as_ref(),
            config.as_os_str(),
            "--input".as_ref(),
            input.as_os_str(),
        ];
        args.extend_from_slice(extra);
        run(args)
    };
    let refused = eval(&["--json".as_ref()]);
    assert_eq!(refused.code, 1, "a mandatory policy that did not load fails the create: {refused:?}");
    let doc = refused.json();
    assert_eq!(doc["problems"].as_array().map(|p| p.len()), Some(1), "{doc:#}");
    assert_eq!(doc["problems"][0].as_str(), Some(why.as_str()), "eval and run say the same");
    assert!(only_event(&doc)["error"].as_str().is_some_and(|e| e.contains("30-ulimit")), "{doc:#}");
    // The text report says it too.
    let text = eval(&[]);
    assert!(text.stdout.contains("0 loaded, 1 left out") && text.stdout.contains(&why), "{text:?}");

    // Signed with the key: both load it.
    let signed = run([
        OsStr::new("sign"),
        pinned.as_ref(),
        "--key".as_ref(),
        key.as_os_str(),
        "--ca-file".as_ref(),
        ca.as_ref(),
    ]);
    assert_eq!(signed.code, 0, "{signed:?}");
    let loaded = eval(&["--json".as_ref()]);
    assert_eq!(loaded.code, 0, "{loaded:?}");
    let doc = loaded.json();
    assert_eq!(doc["policies"][0]["name"], "30-ulimit", "{doc:#}");
}

// ------------------------------------------------ new: which SDK, which tools

/// `new` links the SDK `NRI_WASM_SDK` names (the checkout whose tools the
/// author installed), not the one the binary was built from; when that
/// SDK's tools for the language are not installed, it says so with the
/// command that installs them, and the project's scripts refuse to build
/// with the same command, never taking another tool from PATH (a system's
/// Go of another release) instead.
#[test]
fn new_links_the_sdk_nri_wasm_sdk_names_and_names_the_tools_it_lacks() {
    let _alone = crate::alone();
    let tmp = tempfile::tempdir().unwrap();
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
    // Another checkout, as far as `new` can tell.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::os::unix::fs::symlink(checkout.join("guest-sdk"), other.join("guest-sdk")).unwrap();
    let no_tools = tmp.path().join("no-tools");
    std::fs::create_dir(&no_tools).unwrap();
    let new = |lang: &str, env: &[(&str, &OsStr)]| {
        let dir = tmp.path().join(format!("project-{lang}"));
        let mut cmd = nri_wasm();
        cmd.args(["new", "--lang", lang, "tried-out", "--dir"]).arg(&dir).stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let ran = Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        (dir, ran)
    };
    let sdk_env = other.join("guest-sdk");
    for lang in ["go", "js", "python", "c"] {
        let env = [("NRI_WASM_SDK", sdk_env.as_os_str()), ("NRI_WASM_GUEST_TOOLS", no_tools.as_os_str())];
        let (dir, ran) = new(lang, &env);
        assert_eq!(ran.code, 0, "{lang}: {ran:?}");
        assert_eq!(std::fs::read_link(dir.join(".sdk")).unwrap(), sdk_env.join(lang), "{lang}");
        assert!(ran.stdout.contains("($NRI_WASM_SDK/<lang>)"), "{lang}: {}", ran.stdout);
        let installer = format!("{}/install-tools.sh --lang {lang}", sdk_env.display());
        assert!(
            ran.stderr.contains(&format!("warning: the {lang} tools are not installed for this SDK"))
                && ran.stderr.contains(&format!("run {installer}")),
            "{lang}: {}",
            ran.stderr
        );
        // The build names what is missing and how to install it.
        let built =
            Command::new(dir.join("build.sh")).current_dir(&dir).envs(env).stdin(Stdio::null()).output().unwrap();
        let said = String::from_utf8_lossy(&built.stderr);
        assert!(!built.status.success(), "{lang}: built without its tools: {said}");
        assert!(said.contains("is not installed") && said.contains(&format!("--lang {lang}")), "{lang}: {said}");
        if lang == "go" {
            // Not the system's Go: the pinned one, or the command.
            let tested =
                Command::new(dir.join("test.sh")).current_dir(&dir).envs(env).stdin(Stdio::null()).output().unwrap();
            let said = String::from_utf8_lossy(&tested.stderr);
            assert!(!tested.status.success(), "{said}");
            assert!(said.starts_with("go is not installed") && !said.contains("requires go"), "{said}");
            assert!(said.contains("install-tools.sh' --lang go"), "{said}");
        }
    }
    // A Rust project links the same way; without rustup, `new` says what to install.
    let (dir, ran) = new("rust", &[("NRI_WASM_SDK", sdk_env.as_os_str()), ("PATH", no_tools.as_os_str())]);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(std::fs::read_link(dir.join(".sdk")).unwrap(), sdk_env.join("rust"));
    assert!(ran.stderr.contains("warning: cargo and rustup are not both on PATH"), "{}", ran.stderr);
    // An NRI_WASM_SDK with no SDK is refused, naming it.
    let (_, ran) = new("go", &[("NRI_WASM_SDK", no_tools.as_os_str())]);
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("$NRI_WASM_SDK/<lang>") && ran.stderr.contains("set NRI_WASM_SDK"), "{}", ran.stderr);
}

/// The guide's table of the two CreateContainer requests it uses (the
/// project's fixture and the one captured from containerd) says what each
/// file holds: its pod, its `team` label, its image, and no
/// `container.image`. Every template writes the same project fixture.
#[test]
fn the_guide_says_what_each_fixture_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let table: Vec<Vec<String>> = GUIDE
        .split("<!-- fixtures -->\n")
        .nth(1)
        .expect("the guide's table of fixtures")
        .lines()
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| row.trim_matches('|').split('|').map(|c| c.trim().trim_matches('`').to_string()).collect())
        .collect();
    assert_eq!(table.len(), 2, "{table:?}");
    let code = |cell: &str| cell.split('`').next().unwrap().trim().to_string();
    for row in &table {
        let file = code(&row[0]);
        let paths: Vec<PathBuf> = if file == "fixtures/create-container.json" {
            std::fs::read_dir(root.join("guest-sdk"))
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("template").join(&file))
                .filter(|p| p.is_file())
                .collect()
        } else {
            vec![root.join(&file)]
        };
        assert!(!paths.is_empty(), "{file}");
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let doc: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(doc["event"], "CreateContainer", "{}", path.display());
            let pod = &doc["request"]["pod"];
            let name = format!("{}/{}", pod["namespace"].as_str().unwrap(), pod["name"].as_str().unwrap());
            assert_eq!(name, row[2], "{}: the pod", path.display());
            let team = pod["labels"]["team"].as_str().unwrap_or("none");
            assert_eq!(team, row[3], "{}: the team label", path.display());
            let container = &doc["request"]["container"];
            let image = container["annotations"]["io.kubernetes.cri.image-name"].as_str().unwrap_or_default();
            assert_eq!(image, row[4], "{}: the image", path.display());
            assert!(container.get("image").is_none(), "{}: container.image is set", path.display());
        }
    }
}
