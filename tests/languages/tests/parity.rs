//! The parity reference policy (`tests/languages/parity/`), written in Rust,
//! JavaScript (built for QuickJS and for SpiderMonkey), Python, C and Go,
//! through the real host: every implementation runs in the production
//! engine and chain on the same events (every captured CreateContainer of
//! the shared fixtures, edits of them, and generated pods) with the same
//! settings, and must give the reply the Rust implementation gives, byte
//! for byte as the runtime would receive it, or the same denial; and refuse
//! the same bad settings with the same message.
//!
//! The reply carries one annotation, so its encoding has one map entry and
//! is canonical: the bytes can be compared as they are.
#![cfg(feature = "languages")]

use std::collections::HashMap;

use nri_wasm::policy::chain::ChainError;
use nri_wasm::policy::engine::CompiledPolicy;
use nri_wasm_api::api as pb;
use nri_wasm_languages::{
    chain, create, create_container_fixtures, describe, generated, load, load_preinitialized, parity, settings_error,
};
use protobuf::Message;

const POLICY: &str = "50-parity";

/// Every mapping kind, a denied namespace, and a memory cap below the
/// generated containers' limits.
const FULL: &str = r#"{
    "labels": {"app": "APP_NAME", "tier": "", "zone-é": "", "3d-renderer": "", "app.kubernetes.io/name": ""},
    "annotations": {"example.com/owner": "TEAM", "kubernetes.io/config.source": ""},
    "deny-namespaces": ["team-3", "kube-system"],
    "memory-cap": 268435456
}"#;
/// No prefix, no deny annotation, a cap below every limit.
const BARE: &str = r#"{"prefix": "", "labels": {"pod-template-hash": "", "app": "APP"}, "deny-annotation": "",
    "memory-cap": 16777216}"#;
const SETTINGS: [&str; 3] = [FULL, "", BARE];

/// Bad settings and the message every implementation refuses them with.
const BAD: [(&str, &str); 13] = [
    (r#"{"x": 1}"#, "invalid settings: unknown field x"),
    (r#"{"labels": {"ok": ""}, "zzz": 1, "aaa": 2}"#, "invalid settings: unknown field aaa"),
    (r#"{"labels": {"a": 1}}"#, "invalid settings: labels: expected an object of strings"),
    (r#"{"annotations": ["a"]}"#, "invalid settings: annotations: expected an object of strings"),
    (r#"{"annotations": {"a": "B-C"}}"#, "invalid settings: annotations a: B-C is not a variable name"),
    (r#"{"prefix": "1X"}"#, "invalid settings: prefix 1X cannot start a variable name"),
    (r#"{"prefix": 5}"#, "invalid settings: prefix: expected a string"),
    (r#"{"deny-namespaces": "x"}"#, "invalid settings: deny-namespaces: expected a list of strings"),
    (r#"{"memory-cap": -1}"#, "invalid settings: memory-cap: expected a positive integer"),
    (r#"{"memory-cap": "1"}"#, "invalid settings: memory-cap: expected a positive integer"),
    (
        r#"{"labels": {"team": "TEAM"}, "annotations": {"team": "TEAM"}}"#,
        "invalid settings: team and team would both set TEAM",
    ),
    (r#"{"labels": {"a.b": "", "a-b": ""}}"#, "invalid settings: a-b and a.b would both set POD_A_B"),
    ("[1, 2]", "invalid settings: expected an object"),
];

/// The implementations compared with Rust's.
fn others() -> Vec<(&'static str, &'static str)> {
    parity::ALL.iter().copied().filter(|(name, _)| *name != "RUST").collect()
}

/// The events: every captured CreateContainer, edits of them, and
/// generated pods (some in the denied namespace `team-3`).
fn events() -> Vec<(String, pb::CreateContainerRequest)> {
    let mut events = Vec::new();
    for (name, req) in create_container_fixtures() {
        let edit = |what: &str, f: &dyn Fn(&mut pb::PodSandbox, &mut pb::Container)| {
            let mut r = req.clone();
            f(r.pod.mut_or_insert_default(), r.container.mut_or_insert_default());
            (format!("{name} {what}"), r)
        };
        events.push(edit("with the deny annotation", &|p, _| {
            p.annotations.insert("parity.example.com/deny".into(), "maintenance window".into());
        }));
        events.push(edit("setting APP_NAME itself", &|_, c| c.env.push("APP_NAME=mine".into())));
        events.push(edit("without a memory limit", &|_, c| {
            if let Some(r) = c.linux.as_mut().and_then(|l| l.resources.as_mut()) {
                r.memory.clear();
            }
        }));
        events.push(edit("without any resources", &|_, c| c.linux.clear()));
        events.push(edit("in kube-system", &|p, _| p.namespace = "kube-system".into()));
        events.push(edit("with odd label keys", &|p, _| {
            p.labels.insert("zone-é".into(), "eu-west".into());
            p.labels.insert("3d-renderer".into(), "yes".into());
            p.labels.insert("app.kubernetes.io/name".into(), "billing".into());
        }));
        events.push(edit("without labels and annotations", &|p, _| {
            p.labels.clear();
            p.annotations.clear();
        }));
        events.push(edit("with values of every kind of character", &|p, _| {
            p.labels.insert("app".into(), "ünïcødé ✓ \"quoted\" \\ tab\there".into());
        }));
        events.insert(0, (name, req));
    }
    events.extend(generated(12, 2));
    events
}

/// What one implementation answers: the reply's bytes, or the denial.
fn answer(policy: &CompiledPolicy, req: &pb::CreateContainerRequest) -> Result<Vec<u8>, String> {
    let chain = chain(vec![policy.clone()]);
    match create(&chain, req) {
        Ok(resp) => Ok(resp.write_to_bytes().expect("encoding the reply")),
        Err(ChainError::Denied { reason, .. }) => Err(reason),
        Err(other) => panic!("{}: {other}", policy.name()),
    }
}

fn describe_bytes(bytes: &[u8]) -> Vec<String> {
    describe(&pb::CreateContainerResponse::parse_from_bytes(bytes).expect("a reply"))
}

/// Runs `implementations` against Rust on every event with every settings.
fn compare(implementations: &[(&str, &str)]) {
    compare_loaded(implementations, load);
}

/// [`compare`], with the implementations loaded by `load_as`.
fn compare_loaded(
    implementations: &[(&str, &str)],
    load_as: fn(&str, &str, &str) -> Result<CompiledPolicy, nri_wasm::policy::load::errors::LoadError>,
) {
    let events = events();
    let mut mismatches = Vec::new();
    let (mut denials, mut adjusted) = (0, 0);
    for settings in SETTINGS {
        let reference = load(POLICY, parity::RUST, settings).unwrap_or_else(|e| panic!("Rust: {e}"));
        let loaded: Vec<(&str, CompiledPolicy)> = implementations
            .iter()
            .map(|(lang, wasm)| (*lang, load_as(POLICY, wasm, settings).unwrap_or_else(|e| panic!("{lang}: {e}"))))
            .collect();
        for (event, req) in &events {
            let want = answer(&reference, req);
            match &want {
                Err(_) => denials += 1,
                Ok(bytes) if describe_bytes(bytes).iter().any(|l| l.starts_with("env ")) => adjusted += 1,
                Ok(_) => {}
            }
            for (lang, policy) in &loaded {
                let got = answer(policy, req);
                if got != want {
                    let show = |a: &Result<Vec<u8>, String>| match a {
                        Ok(bytes) => format!("{:?}", describe_bytes(bytes)),
                        Err(reason) => format!("denied: {reason}"),
                    };
                    mismatches.push(format!(
                        "{lang}, settings {settings:?}, event {event}:\n  Rust: {}\n  {lang}: {}",
                        show(&want),
                        show(&got)
                    ));
                }
            }
        }
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
    // The events exercise both outcomes, so equal answers mean something.
    assert!(denials >= 5 && adjusted >= 10, "denials {denials}, adjusted {adjusted}");
}

fn compare_settings_errors(implementations: &[(&str, &str)]) {
    let mut all = vec![("RUST", parity::RUST)];
    all.extend_from_slice(implementations);
    let mut problems = Vec::new();
    for (lang, wasm) in all {
        for (settings, want) in BAD {
            match load(POLICY, wasm, settings) {
                Err(e) if settings_error(&e).as_deref() == Some(want) => {}
                Err(other) => problems.push(format!("{lang} {settings}: {other}")),
                Ok(_) => problems.push(format!("{lang} {settings}: accepted")),
            }
        }
        // Not JSON: the reason after the prefix is the language's own.
        match load(POLICY, wasm, "{not json").map_err(|e| settings_error(&e)) {
            Err(Some(why)) if why.starts_with("invalid settings: not JSON: ") => {}
            other => problems.push(format!("{lang} not JSON: {:?}", other.map(|p| p.name().to_string()))),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The reference itself does what its README says, on the captured pod.
#[test]
fn the_reference_policy_answers_as_documented() {
    let events: HashMap<String, pb::CreateContainerRequest> = events().into_iter().collect();
    let captured = &events["CreateContainer"];
    let reference = load(POLICY, parity::RUST, FULL).unwrap();
    let reply = answer(&reference, captured).expect("adjusted");
    assert_eq!(
        describe_bytes(&reply),
        [
            "annotation parity.example.com/seen=9/17/5",
            "env APP_NAME=billing",
            "env POD_KUBERNETES_IO_CONFIG_SOURCE=api",
            "env POD_TIER=backend",
            "env TEAM=team-payments",
        ]
    );
    let denied = answer(&reference, &events["CreateContainer with the deny annotation"]);
    assert_eq!(
        denied,
        Err("pod payments/billing-worker-7f9c5 is marked parity.example.com/deny=maintenance window".into())
    );
    let bare = load(POLICY, parity::RUST, BARE).unwrap();
    assert_eq!(
        describe_bytes(&answer(&bare, captured).unwrap()),
        [
            "annotation parity.example.com/seen=9/17/5",
            "env APP=billing",
            "env POD_TEMPLATE_HASH=7f9c5",
            "resources.memory.limit=16777216",
        ]
    );
}

#[test]
fn every_language_answers_as_rust_does() {
    compare(&others());
}

#[test]
fn every_language_refuses_bad_settings_as_rust_does() {
    compare_settings_errors(&others());
}

/// Every implementation, Rust's included, pre-initialised (its calls
/// started from a snapshot taken after `configure`, `preinitialize = true`)
/// answers what Rust's as built answers, on every event with every
/// settings. The snapshot keeps each language runtime's start and the
/// settings `init` parsed; the replies must not change. A component the
/// host cannot snapshot runs as built, with the reason.
#[test]
fn every_implementation_pre_initialised_answers_the_same() {
    // The refused ones are refused for the reason given, and only those.
    for (lang, why) in PREINIT_REFUSED {
        let wasm = parity::ALL.iter().find(|(l, _)| *l == lang).expect("a parity implementation").1;
        let policy = load_preinitialized(POLICY, wasm, FULL).unwrap_or_else(|e| panic!("{lang}: {e}"));
        let refused = policy.preinitialize_refused().unwrap_or_default();
        assert!(refused.contains(why), "{lang}: {refused:?}");
    }
    compare_loaded(parity::ALL, load_snapshot);
}

/// [`load_preinitialized`], asserting that the snapshot was taken, unless
/// the implementation is one of [`PREINIT_REFUSED`].
fn load_snapshot(
    name: &str,
    wasm: &str,
    settings: &str,
) -> Result<CompiledPolicy, nri_wasm::policy::load::errors::LoadError> {
    let policy = load_preinitialized(name, wasm, settings)?;
    let lang = parity::ALL.iter().find(|(_, w)| *w == wasm).map_or("?", |(l, _)| *l);
    let refused = PREINIT_REFUSED.iter().any(|(l, _)| *l == lang);
    assert_eq!(
        policy.preinitialized(),
        !refused,
        "{lang}, settings {settings:?}: {:?}",
        policy.preinitialize_refused()
    );
    Ok(policy)
}

/// The components the host cannot pre-initialise, and why. The QuickJS
/// build is a component that nests the interpreter's component, which the
/// snapshot's rewrite (`wasmtime-wizer` 48) does not take.
const PREINIT_REFUSED: [(&str, &str); 1] = [("JS_QUICKJS", "nested components with modules not currently supported")];
