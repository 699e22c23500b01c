//! The suite's adversary: every class of attack a policy can make on the
//! host (`tests/guests/hostile`), through the runtime simulator, between two
//! healthy policies, in both `on-error` modes and in audit mode.
//!
//! For every attack and every run: the host answers inside the runtime's
//! request timeout (the simulated runtime's own, which it enforces as a real
//! one does: a late answer is a timeout, which fails the run); with `on-error = "ignore"` (and in audit mode) the healthy
//! policies' changes arrive and the attacker's do not; with `on-error =
//! "fail"` the event fails with an error that names the attacker, the event
//! and the limit. After the runs, the host's own memory (counted by this
//! binary's allocator, not guessed from RSS) has not grown, and a hundred
//! normal events on the same dispatcher (one permit: a permit lost to the
//! attack would show) behave normally. What the attacks wrote to the host's
//! log is read back and checked.
//!
//! The tests run one at a time, so that memory and timing are the attack's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nri_sim::{PluginConn, RuntimeProfile, SimError};
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::load::errors::LoadError;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::{Mode, OnError, PolicySpec};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::matrix_runs;
use nri_wasm_e2e::{guests, policy_spec, roomy, shared_engine as engine, shared_loader, test_facts, Harness};
use nri_wasm_test_support::heap::live;

use crate::ALONE as SERIAL;

/// What the host logged, for the checks of what policies may write there
/// (allocated once, so that it does not count as the host's growth).
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());
const LOG_CAPACITY: usize = 64 << 20;

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut log = LOG.lock().unwrap();
        let room = LOG_CAPACITY - log.len();
        log.extend_from_slice(&buf[..buf.len().min(room)]);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    let _ = tracing_subscriber::fmt().with_writer(|| LogWriter).with_ansi(false).with_env_filter("info").try_init();
    let mut log = LOG.lock().unwrap();
    log.clear();
    log.reserve_exact(LOG_CAPACITY);
}

fn logged() -> String {
    String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned()
}

const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Most growth of the host's live heap over the runs of one attack.
const MAX_GROWTH: i64 = 2 << 20;

/// What the attacker's turn must end as.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Its call fails with an error that contains all of these.
    Fails(&'static [&'static str]),
    /// It denies the event; the runtime's message contains these and is
    /// shorter than the given number of bytes.
    Denies(&'static [&'static str], usize),
    /// It answers, with this annotation (what it managed to do).
    Answers(&'static str, &'static str),
}

struct Attack {
    settings: &'static str,
    limits: Limits,
    expect: Expect,
    runs: usize,
}

fn annotation<'a>(reply: &'a pb::CreateContainerResponse, key: &str) -> Option<&'a str> {
    reply.adjust.as_ref().and_then(|a| a.annotations.get(key)).map(String::as_str)
}

fn request() -> pb::CreateContainerRequest {
    nri_sim::fixtures::load("CreateContainer").expect("fixture")
}

/// The container the `one-container-updates` attack updates.
fn c_one(pod: &pb::PodSandbox) -> pb::Container {
    pb::Container { id: "c-one".into(), pod_sandbox_id: pod.id.clone(), name: "one".into(), ..Default::default() }
}

fn healthy(name: &str, tag: &str) -> nri_wasm::policy::engine::CompiledPolicy {
    // 250 ms: room on a busy machine, and the two of them leave an
    // attacker half of the chain's budget of 1 s.
    let spec = policy_spec(name, guests::ANNOTATE, tag, OnError::Fail, Limits { timeout_ms: 250, ..roomy() });
    shared_loader().load(&spec, &Arc::new(test_facts())).expect("healthy policy")
}

fn chain_with(attacker: Option<nri_wasm::policy::engine::CompiledPolicy>) -> Chain {
    // Every run must meet the attack itself, not a quarantine.
    let settings = ChainSettings { breaker_failures: u32::MAX, ..ChainSettings::default() };
    let mut policies = vec![healthy("10-before", "before")];
    policies.extend(attacker);
    policies.push(healthy("30-after", "after"));
    Chain::new(policies, settings)
}

/// Runs `attack` in every mode and checks everything the module promises;
/// returns what the host logged meanwhile.
async fn run_attack(attack: Attack) -> String {
    let _serial = SERIAL.lock().await;
    capture_logs();
    let req = request();
    let (pod, ctr) = (req.pod.clone().unwrap(), req.container.clone().unwrap());
    let modes = match attack.expect {
        Expect::Answers(..) => vec![(OnError::Fail, Mode::Enforce)],
        _ => vec![(OnError::Ignore, Mode::Enforce), (OnError::Fail, Mode::Enforce), (OnError::Fail, Mode::Audit)],
    };
    for (on_error, mode) in modes {
        let spec =
            PolicySpec { mode, ..policy_spec("20-hostile", guests::HOSTILE, attack.settings, on_error, attack.limits) };
        let attacker = shared_loader().load(&spec, &Arc::new(test_facts())).expect("the attacker loads");
        let chain = chain_with(Some(attacker));
        // One permit: a permit the attack kept would stall every later event.
        let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain, test_facts(), 1));
        let h =
            Harness::start_policies(RuntimeProfile::v0_12().with_request_timeout(REQUEST_TIMEOUT), dispatcher.clone())
                .await;
        let conn = h.connect().await;
        conn.synchronize(std::slice::from_ref(&pod), &[c_one(&pod)], 0).await.expect("synchronize");
        let label = format!("{} ({on_error:?}, {mode:?})", attack.settings);
        let mut warm = 0;
        for run in 0..attack.runs {
            if run == attack.runs / 10 {
                warm = live();
                assert!(warm > 0, "the counting allocator is this binary's (memory.rs)");
            }
            let result = conn.create_container(&pod, &ctr).await;
            check(&attack, on_error, mode, &result, &label, run, &ctr);
        }
        let growth = live() - warm;
        assert!(growth < MAX_GROWTH, "{label}: the host's heap grew by {growth} bytes over {} runs", attack.runs);
        assert!(!conn.is_closed() && !h.task.is_finished(), "{label}: the host is still connected");
        // The healthy chain may want another subscription (the attacker
        // reads the node view): reconnect, as the host would.
        dispatcher.replace_chain(chain_with(None));
        conn.close().await;
        let conn = h.connect().await;
        conn.synchronize(std::slice::from_ref(&pod), &[c_one(&pod)], 0).await.expect("synchronize");
        after_the_attack(&conn, &pod, &ctr, &label).await;
        conn.close().await;
        h.shutdown().await;
    }
    logged()
}

fn check(
    attack: &Attack,
    on_error: OnError,
    mode: Mode,
    result: &Result<pb::CreateContainerResponse, SimError>,
    label: &str,
    run: usize,
    ctr: &pb::Container,
) {
    let enforced_failure = mode == Mode::Enforce && on_error == OnError::Fail;
    match (attack.expect, result) {
        (Expect::Answers(key, value), Ok(reply)) => {
            assert_eq!(annotation(reply, key), Some(value), "{label} run {run}: {reply:?}");
        }
        (Expect::Fails(says), Err(SimError::Failed { status, .. })) if enforced_failure => {
            let message = status.message();
            for part in ["20-hostile", "CreateContainer", ctr.id.as_str(), "on-error = fail"].iter().chain(says) {
                assert!(message.contains(part), "{label} run {run}: {part:?} missing from {message:?}");
            }
            assert!(!message.contains('\n'), "{label}: one line: {message:?}");
        }
        (Expect::Denies(says, max), Err(SimError::Failed { status, .. })) if mode == Mode::Enforce => {
            let message = status.message();
            for part in ["20-hostile", ctr.id.as_str()].iter().chain(says) {
                assert!(message.contains(part), "{label} run {run}: {part:?} missing from {message:?}");
            }
            assert!(message.len() < max, "{label}: a message of {} bytes", message.len());
            assert!(!message.contains('\n') && !message.contains('\u{1b}'), "{label}: {message:?}");
        }
        (Expect::Fails(_) | Expect::Denies(..), Ok(reply)) if !enforced_failure || mode == Mode::Audit => {
            assert_eq!(annotation(reply, "example.com/before"), Some(ctr.name.as_str()), "{label} run {run}");
            assert_eq!(annotation(reply, "example.com/after"), Some(ctr.name.as_str()), "{label} run {run}");
            let adjust = reply.adjust.as_ref().unwrap();
            assert!(
                adjust
                    .annotations
                    .keys()
                    .all(|k| k.starts_with("example.com/before") || k.starts_with("example.com/after")),
                "{label}: the attacker's output leaked: {adjust:?}"
            );
            assert!(reply.update.is_empty() && reply.evict.is_empty(), "{label}: {reply:?}");
        }
        (_, other) => panic!("{label} run {run}: unexpected {other:?}"),
    }
}

/// A hundred normal events on the same dispatcher, with the attacker gone.
async fn after_the_attack(conn: &PluginConn, pod: &pb::PodSandbox, ctr: &pb::Container, label: &str) {
    for run in 0..100 {
        let reply = conn.create_container(pod, ctr).await.unwrap_or_else(|e| panic!("{label}: after run {run}: {e}"));
        assert_eq!(annotation(&reply, "example.com/before"), Some(ctr.name.as_str()), "{label}: after run {run}");
        assert_eq!(annotation(&reply, "example.com/after"), Some(ctr.name.as_str()), "{label}: after run {run}");
    }
}

fn limits(timeout_ms: u64) -> Limits {
    Limits { timeout_ms, fuel: u64::MAX / 2, ..Limits::default() }
}

// ---------------------------------------------------------------- waiting

/// A WASI sleep of an hour: the call is cut at its own limit, the permit
/// comes back, the attacker is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasi_sleep_is_cut_at_the_time_limit() {
    let expect = Expect::Fails(&["time limit of 5 ms"]);
    run_attack(Attack { settings: "sleep", limits: limits(5), expect, runs: matrix_runs() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_that_never_fires_is_cut_at_the_time_limit() {
    let expect = Expect::Fails(&["time limit of 5 ms"]);
    run_attack(Attack { settings: "sleep-forever", limits: limits(5), expect, runs: matrix_runs() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_empty_and_does_not_block() {
    let expect = Expect::Answers("example.com/stdin", "0");
    run_attack(Attack { settings: "stdin", limits: roomy(), expect, runs: matrix_runs() }).await;
}

// ---------------------------------------------------------------- host resources

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holding_ever_more_pollables_hits_the_handle_limit() {
    let expect = Expect::Fails(&["more than 1024 resource handles"]);
    run_attack(Attack { settings: "pollables", limits: roomy(), expect, runs: matrix_runs() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_megabytes_of_random_bytes_traps() {
    let expect = Expect::Fails(&["trapped", "exceeds limit 65536"]);
    run_attack(Attack { settings: "random-huge", limits: roomy(), expect, runs: matrix_runs() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_log_lines_reaches_the_log_bounded() {
    let expect = Expect::Fails(&["time limit of 20 ms"]);
    let log = run_attack(Attack { settings: "log-flood", limits: limits(20), expect, runs: 30 }).await;
    let lines = log.lines().filter(|l| l.contains("flooding the host's log")).count();
    // 64 lines per call, 3 modes x 30 runs.
    assert!(lines <= 64 * 90, "{lines} lines reached the log");
    assert!(
        log.contains("policy log lines dropped"),
        "the drop is reported: {}",
        &log[log.len().saturating_sub(3000)..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_log_line_is_clipped_and_a_forged_one_escaped() {
    let expect = Expect::Answers("example.com/hostile", "logged");
    let log = run_attack(Attack { settings: "log-huge", limits: roomy(), expect, runs: 20 }).await;
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "a log line of {longest} bytes");
    assert!(log.contains("more bytes cut]"), "the cut is marked");
    let log = run_attack(Attack { settings: "log-forge", limits: roomy(), expect, runs: 5 }).await;
    assert!(!log.lines().any(|l| l.starts_with("2026-01-01T00:00:00Z ERROR")), "a forged line: {log}");
    assert!(log.contains(r"harmless\\n2026-01-01") && !log.contains('\u{1b}'), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_output_is_cut_at_the_time_limit_and_bounded() {
    let expect = Expect::Fails(&["time limit of 20 ms"]);
    let log = run_attack(Attack { settings: "output-flood", limits: limits(20), expect, runs: 50 }).await;
    assert!(log.contains("bytes dropped"), "what was dropped is counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_stops_at_its_limit() {
    // 64 KiB of state: keys of about 4 KiB, fifteen of them fit.
    let limits = Limits { state_kib: 64, ..roomy() };
    run_attack(Attack {
        settings: "state-flood",
        limits,
        expect: Expect::Answers("example.com/state", "15"),
        runs: 20,
    })
    .await;
}

// ---------------------------------------------------------------- strings and copies

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eight_mebibyte_denial_reaches_the_runtime_clipped() {
    let expect = Expect::Denies(&["denied CreateContainer", "more bytes cut]"], 8192);
    run_attack(Attack { settings: "deny-huge", limits: roomy(), expect, runs: matrix_runs() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_denial_is_one_line() {
    let expect = Expect::Denies(&["no\\n2026-01-01"], 8192);
    run_attack(Attack { settings: "deny-forge", limits: roomy(), expect, runs: 20 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_past_the_transfer_limit_is_refused_before_the_host_copies_it() {
    let expect = Expect::Fails(&["more than the 16777216 bytes one transfer may carry"]);
    let limits = Limits { memory_mib: 64, ..roomy() };
    run_attack(Attack { settings: "reply-transfer", limits, expect, runs: 20 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_past_the_reply_limit_is_invalid_output() {
    let expect = Expect::Fails(&["invalid output", "exceeds the limit of 1048576 bytes"]);
    run_attack(Attack { settings: "reply-large", limits: roomy(), expect, runs: matrix_runs() }).await;
}

// ---------------------------------------------------------------- host work

/// The issue's 20,000 updates of one container took the merge 25 s; the
/// reply is now refused for its size in linear time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_updates_of_one_container_are_refused_in_time() {
    let expect = Expect::Fails(&["invalid output", "20000 updates; at most 4096 per reply"]);
    run_attack(Attack { settings: "one-container-updates:20000", limits: limits(900), expect, runs: 5 }).await;
}

/// As many updates of one container as a reply may carry merge in linear
/// time: within the policy's own time limit, which counts the host's work
/// on its reply (a quadratic merge of these took seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_thousand_updates_of_one_container_merge_in_linear_time() {
    let _serial = SERIAL.lock().await;
    let spec = policy_spec("20-hostile", guests::HOSTILE, "one-container-updates:4000", OnError::Fail, limits(900));
    let attacker = shared_loader().load(&spec, &Arc::new(test_facts())).unwrap();
    let chain = Chain::new(vec![attacker], ChainSettings::default());
    let req = request();
    let done = nri_wasm_e2e::block_on(chain.create_container(&nri_wasm_e2e::eval_cx(Duration::from_secs(1)), &req))
        .expect("merged within the policy's time limit");
    assert_eq!(done.value.update.len(), 1);
    let limits = &done.value.update[0].linux.resources.hugepage_limits;
    assert_eq!(limits.len(), 4000);
}

/// Updates and evictions of containers the node does not have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_of_containers_the_node_does_not_have_are_invalid() {
    let expect = Expect::Fails(&["invalid output", "no container gone-0 on this node"]);
    run_attack(Attack { settings: "unknown-updates:10", limits: roomy(), expect, runs: matrix_runs() }).await;
    let expect = Expect::Fails(&["invalid output", "5000 updates; at most 4096 per reply"]);
    run_attack(Attack { settings: "unknown-updates:5000", limits: limits(900), expect, runs: 3 }).await;
}

// ---------------------------------------------------------------- outputs the runtime would refuse

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_the_runtime_would_refuse_are_invalid_with_the_field_named() {
    let cases: [(&str, &[&str]); 13] = [
        ("invalid:relative-mount", &["adjust.mounts[0].destination", "not an absolute path"]),
        ("invalid:dotdot-mount", &["adjust.mounts[0].destination", "contains \"..\""]),
        ("invalid:relative-hook", &["adjust.hooks.create_runtime[0].path", "not an absolute path"]),
        ("invalid:nul-env", &["adjust.env[0].key", "NUL"]),
        ("invalid:nul-annotation", &["adjust.annotations", "NUL"]),
        ("invalid:nul-mount", &["adjust.mounts[0].destination", "NUL"]),
        ("invalid:nul-arg", &["adjust.args[2]", "NUL"]),
        ("invalid:memory", &["adjust.linux.resources.memory.limit", "-7"]),
        ("invalid:quota", &["adjust.linux.resources.cpu.quota", "-5"]),
        ("invalid:period", &["adjust.linux.resources.cpu.period", "0 is outside"]),
        ("invalid:cpuset", &["adjust.linux.resources.cpu.cpus", "abc,-1"]),
        ("invalid:oom", &["adjust.linux.oom_score_adj", "100000"]),
        ("invalid:pids", &["adjust.linux.resources.pids.limit", "-9"]),
    ];
    for (settings, says) in cases {
        let says: &'static [&'static str] = Vec::leak([&["invalid output"][..], says].concat());
        run_attack(Attack { settings, limits: roomy(), expect: Expect::Fails(says), runs: 20 }).await;
    }
}

// ---------------------------------------------------------------- escapes

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_is_a_one_line_failure() {
    run_attack(Attack {
        settings: "exit",
        limits: roomy(),
        expect: Expect::Fails(&["called exit(0)"]),
        runs: matrix_runs(),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn there_is_no_file_network_or_environment_to_reach() {
    let cases = [
        ("fs", "example.com/fs", "opened=false preopens=0"),
        ("net", "example.com/net", "connected=false resolved=false"),
        ("env", "example.com/env", "vars=0 args=0"),
    ];
    for (settings, key, value) in cases {
        run_attack(Attack { settings, limits: roomy(), expect: Expect::Answers(key, value), runs: 20 }).await;
    }
}

// ---------------------------------------------------------------- load time

/// Output, a panic, a sleep or an exit in `configure`: the load fails (or,
/// for output, succeeds) with a one-line reason, within the policy's limit,
/// and the host carries on. That the sleep (of an hour) was cut by the
/// limit is what its error says, not a clock reading. The binary's own run of these is in
/// `host/tests/integration/hostile_load.rs`.
#[test]
fn configure_that_prints_panics_sleeps_or_exits_fails_the_load_cleanly() {
    let _serial = SERIAL.blocking_lock();
    let facts = Arc::new(test_facts());
    let load = |settings: &str| {
        let spec = policy_spec(
            "20-hostile",
            guests::HOSTILE,
            settings,
            OnError::Fail,
            Limits { timeout_ms: 50, ..Limits::default() },
        );
        shared_loader().load(&spec, &facts)
    };
    let printed = load("init-print");
    printed.expect("a policy that writes in configure loads");
    let cases = [
        ("init-panic", "configure panics on purpose"),
        ("init-sleep", "time limit of 2000 ms"),
        ("init-exit", "called exit(0)"),
    ];
    for (settings, says) in cases {
        let err = load(settings).expect_err(settings);
        assert!(matches!(err, LoadError::Init { .. }), "{settings}: {err}");
        let text = err.to_string();
        assert!(text.contains("20-hostile") && text.contains(says), "{settings}: {text}");
        assert!(!text.contains('\n'), "{settings}: {text:?}");
    }
}

/// A string whose pointer lies outside the guest's memory, and one that is
/// not UTF-8, handed to the host: traps, reported in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_pointers_and_bad_strings_are_one_line_traps() {
    let expect = Expect::Fails(&["trapped", "out of bounds"]);
    run_attack(Attack { settings: "bad-pointer", limits: roomy(), expect, runs: matrix_runs() }).await;
    let expect = Expect::Fails(&["trapped", "utf-8"]);
    run_attack(Attack { settings: "bad-utf8", limits: roomy(), expect, runs: matrix_runs() }).await;
}
