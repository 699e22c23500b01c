//! The handlers, natively: `cargo test` on this machine, no WebAssembly
//! build. The test host runs a call as the real one does (`configure` with
//! the settings, then the handler), on the same fixture `nri-wasm eval`
//! reads, so the two agree line for line.
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

/// A CreateContainer as containerd sends it, in NRI's protobuf JSON:
/// `nri-wasm eval ... --input fixtures/create-container.json` reads it too.
const FIXTURE: &str = include_str!("../fixtures/create-container.json");

fn event() -> TestEvent {
    TestEvent::from_json(FIXTURE).expect("the fixture is an NRI request")
}

#[test]
fn the_pod_label_becomes_an_environment_variable() {
    let out = TestHost::new().run::<MyPolicy>(&event());
    assert_eq!(out.lines(), ["env TEAM=payments"]);

    let out = TestHost::new().with_settings(r#"{"label": "app", "env": "APP"}"#).run::<MyPolicy>(&event());
    assert_eq!(out.lines(), ["env APP=billing"]);
}

#[test]
fn a_pod_without_the_label_is_refused_only_when_required() {
    let mut unlabelled = event();
    unlabelled.pod_mut().labels.retain(|kv| kv.key != "team");
    let out = TestHost::new().run::<MyPolicy>(&unlabelled);
    assert_eq!(out.lines(), Vec::<String>::new());

    let out = TestHost::new().with_settings(r#"{"required": true}"#).run::<MyPolicy>(&unlabelled);
    assert_eq!(out.denial(), "pod payments/billing-worker-7f9c5 has no label team");
}

#[test]
fn settings_are_checked_when_the_policy_loads() {
    let bad = TestHost::new().with_settings(r#"{"env": "NOT A NAME"}"#);
    assert_eq!(bad.configure::<MyPolicy>(), Err(r#"invalid settings: env "NOT A NAME" is not a variable name"#.into()));
    let typo = TestHost::new().with_settings(r#"{"lable": "team"}"#);
    assert!(typo.configure::<MyPolicy>().unwrap_err().contains("unknown field `lable`"));
    assert_eq!(TestHost::new().configure::<MyPolicy>(), Ok(vec![EventKind::CreateContainer]));
}
