//! A trap, an exception, a panic, unbounded recursion and an infinite loop
//! in each language (`tests/languages/faults/`), through the real host: each
//! is reported as a failure of the policy, with its name and a readable
//! reason, the language's own message where its runtime gives one; a
//! denial stays a denial. Through the chain, `on-error` decides: "fail"
//! fails the event with that report, "ignore" drops the policy's output.
#![cfg(feature = "languages")]

use nri_wasm::policy::chain::ChainError;
use nri_wasm::policy::engine::{CallErrorKind, Denial};
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_languages::{call, chain, create, create_container_fixtures, faults, limits, load_with};

const POLICY: &str = "70-faults";

/// How a failure must be reported.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// A trap whose report contains every one of these.
    Trap(&'static [&'static str]),
    StackOverflow,
    /// The fuel or the time limit, whichever a slow machine reaches first.
    Limit,
}

fn request() -> pb::CreateContainerRequest {
    create_container_fixtures().remove(0).1
}

/// What no failure's report may show: the runtimes' panics around the SDK's
/// line (QuickJS's `unknown enum case`, componentize-py's own traceback
/// through the SDK), advice to set `RUST_BACKTRACE`, SpiderMonkey's failed
/// conversion and abort, the bundle's file instead of the author's.
const WRAPPERS: &[&str] = &[
    "unknown enum case",
    "RUST_BACKTRACE",
    "panicked at",
    "unexpected exception",
    "PolicyFailure",
    "nriwasm/__init__.py",
    "bundle.js",
    "initializer.js",
    "expected a string, received",
    "mozalloc",
];

/// Short enough that a loop which burns no fuel (Go's `for {}`) ends soon.
fn fault_limits() -> Limits {
    Limits { timeout_ms: 2_000, ..limits() }
}

fn check(lang: &str, wasm: &str, cases: &[(&str, Want)]) {
    let req = request();
    let mut problems = Vec::new();
    for (mode, want) in cases {
        let policy = load_with(POLICY, wasm, mode, fault_limits(), OnError::Fail).unwrap_or_else(|e| panic!("{e}"));
        let report = call(&policy, &req);
        let err = match report.outcome {
            Err(e) => e,
            Ok(answer) => {
                problems.push(format!("{lang} {mode}: answered {answer:?}"));
                continue;
            }
        };
        let text = err.to_string();
        // The language's own words, not its runtime's wrapping of them.
        for wrapper in WRAPPERS {
            if text.contains(wrapper) {
                problems.push(format!("{lang} {mode}: {wrapper:?} in {text}"));
            }
        }
        let named = text.starts_with(&format!("policy {POLICY} on CreateContainer: "));
        let ok = named
            && match (want, &err.kind) {
                (Want::Trap(parts), CallErrorKind::Trap { .. }) => parts.iter().all(|p| text.contains(p)),
                (Want::StackOverflow, CallErrorKind::StackOverflow) => true,
                (Want::Limit, CallErrorKind::OutOfFuel { .. } | CallErrorKind::Timeout { .. }) => true,
                _ => false,
            };
        if !ok {
            problems.push(format!("{lang} {mode}: want {want:?}, got {text}"));
        }
    }
    // A denial is not a failure.
    let policy = load_with(POLICY, wasm, "deny", fault_limits(), OnError::Fail).unwrap();
    match call(&policy, &req).outcome {
        Ok(Err(Denial(reason))) if reason == "fault injected: denial" => {}
        other => problems.push(format!("{lang} deny: {other:?}")),
    }
    // Through the chain: on-error decides.
    let failing = load_with(POLICY, wasm, "exception", fault_limits(), OnError::Fail).unwrap();
    match create(&chain(vec![failing]), &req) {
        Err(ChainError::Failed { failure, .. }) if failure.policy() == POLICY => {}
        other => problems.push(format!("{lang} on-error = fail: {other:?}")),
    }
    let ignored = load_with(POLICY, wasm, "exception", fault_limits(), OnError::Ignore).unwrap();
    match create(&chain(vec![ignored]), &req) {
        Ok(resp) if resp.adjust.is_none() && resp.update.is_empty() => {}
        other => problems.push(format!("{lang} on-error = ignore: {other:?}")),
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn javascript_on_quickjs() {
    check(
        "JavaScript (QuickJS)",
        faults::JS_QUICKJS,
        &[
            (
                "exception",
                Want::Trap(&["the create-container handler threw RangeError: fault injected: exception (at policy.js:14)"]),
            ),
            // QuickJS places this one at the nearest earlier place it recorded.
            (
                "panic",
                Want::Trap(&[
                    "the create-container handler threw TypeError: cannot read property 'field' of undefined (at policy.js:",
                ]),
            ),
            ("trap", Want::StackOverflow),
            ("recursion", Want::StackOverflow),
            ("loop", Want::Limit),
        ],
    );
}

#[test]
fn javascript_on_spidermonkey() {
    check(
        "JavaScript (SpiderMonkey)",
        faults::JS_SPIDERMONKEY,
        &[
            (
                "exception",
                Want::Trap(&[
                    "the create-container handler threw RangeError: fault injected: exception (at policy.js:14)",
                ]),
            ),
            (
                "panic",
                Want::Trap(&[
                    "the create-container handler threw TypeError: can't access property \"field\"",
                    "(at policy.js:18)",
                ]),
            ),
            // SpiderMonkey's recursion limit is deep: the fuel runs out first.
            ("trap", Want::Limit),
            ("recursion", Want::Limit),
            ("loop", Want::Limit),
        ],
    );
}

#[test]
fn c() {
    check(
        "C",
        faults::C,
        &[
            ("exception", Want::Trap(&["Assertion failed: !\"fault injected: exception\" (policy.c: policy_handle"])),
            ("panic", Want::Trap(&["panic: fault injected: panic"])),
            ("trap", Want::Trap(&["wasm `unreachable` instruction executed"])),
            // C's own stack lives in linear memory, below the data: running
            // off its end is an out-of-bounds access.
            ("recursion", Want::Trap(&["out of bounds memory access"])),
            ("loop", Want::Limit),
        ],
    );
}

#[test]
fn go() {
    check(
        "Go",
        faults::GO,
        &[
            (
                "exception",
                Want::Trap(&["panic: assignment to entry in nil map [recovered in the create-container handler]"]),
            ),
            ("panic", Want::Trap(&["panic: fault injected: panic [recovered in the create-container handler]"])),
            ("trap", Want::Trap(&["wasm `unreachable` instruction executed"])),
            ("recursion", Want::StackOverflow),
            ("loop", Want::Limit),
        ],
    );
}

#[test]
fn python() {
    check(
        "Python",
        faults::PYTHON,
        &[
            // The traceback starts at the author's file.
            (
                "exception",
                Want::Trap(&[
                    "stderr: the create-container handler raised an exception: | Traceback (most recent call last): \
                     |   File \"policy.py\", line 17, in create | ",
                    "RuntimeError: fault injected: exception",
                ]),
            ),
            (
                "panic",
                Want::Trap(&[
                    "stderr: the create-container handler raised an exception: | Traceback (most recent call last): \
                     |   File \"policy.py\", line 19, in create | ",
                    "AttributeError: 'NoneType' object has no attribute 'field'",
                ]),
            ),
            ("trap", Want::Trap(&["wasm `unreachable` instruction executed"])),
            ("recursion", Want::Limit),
            ("loop", Want::Limit),
        ],
    );
}
