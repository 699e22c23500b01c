//! Least privilege with real components: a policy that declares only `env`
//! (`tests/guests/overreach`) reaches for hooks, mounts, devices, other
//! containers, evictions, a denial and the node view; each is refused as
//! the policy's failure naming the capability, with its `on-error`
//! deciding the event. The operator's grant cannot widen what the policy
//! declared, and an undeclared component gets only the default grant
//! unless its settings file grants more.

use std::sync::Arc;
use std::time::Duration;

use nri_wasm::policy::chain::{Chain, ChainError, ChainSettings, Evaluated, Outcome};
use nri_wasm::policy::engine::{CompiledPolicy, Facts};
use nri_wasm::policy::spec::caps::{CapSet, Capability};
use nri_wasm::policy::spec::manifest::{OnError, PolicySpec};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, policy_spec, roomy, shared_engine as engine, shared_loader};

fn facts() -> Arc<Facts> {
    Arc::new(nri_wasm_e2e::test_facts())
}

/// A generous chain budget: these tests are about what is refused, not when.
const BUDGET: Duration = Duration::from_secs(10);

fn load(wasm: &str, mode: &str, on_error: OnError, grant: CapSet) -> CompiledPolicy {
    let spec = PolicySpec { grant, ..policy_spec("20-overreach", wasm, mode, on_error, roomy()) };
    shared_loader().load(&spec, &facts()).unwrap_or_else(|e| panic!("{e}"))
}

fn create(policy: CompiledPolicy) -> Result<Evaluated<pb::CreateContainerResponse>, ChainError> {
    let chain = Chain::new(vec![policy], ChainSettings::default());
    let req: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    nri_wasm_e2e::block_on(chain.create_container(&nri_wasm_e2e::eval_cx(BUDGET), &req))
}

fn env(resp: &pb::CreateContainerResponse) -> Vec<String> {
    resp.adjust.as_ref().map(|a| a.env.iter().map(|e| e.key.clone()).collect()).unwrap_or_default()
}

/// Every dangerous capability granted: what is refused is refused for
/// want of a declaration.
fn everything() -> CapSet {
    CapSet::all()
}

const REACHES: [(&str, &str); 7] = [
    ("hook", "hooks"),
    ("mount", "mounts"),
    ("device", "devices"),
    ("update-other", "updates"),
    ("evict", "evictions"),
    ("deny", "deny"),
    ("node", "node"),
];

#[test]
fn the_declared_capability_is_used() {
    let Evaluated { value, .. } =
        create(load(guests::OVERREACH, "env", OnError::Fail, CapSet::default_grant())).unwrap();
    assert_eq!(env(&value), ["OVERREACH"]);
    let allowed = load(guests::OVERREACH, "env", OnError::Fail, CapSet::default_grant()).allowed();
    assert_eq!(allowed.declared.map(CapSet::describe).as_deref(), Some("env"), "the SDK's declaration is read");
}

#[test]
fn output_beyond_the_declaration_fails_the_event_under_on_error_fail() {
    for grant in [CapSet::default_grant(), everything()] {
        for (mode, capability) in REACHES {
            let err = create(load(guests::OVERREACH, mode, OnError::Fail, grant)).unwrap_err();
            let ChainError::Failed { failure, .. } = &err else { panic!("{mode}: {err:?}") };
            let message = failure.to_string();
            assert!(
                message.contains("20-overreach") && message.contains("CreateContainer"),
                "{mode}: names the policy and the event: {message}"
            );
            assert!(message.contains(&format!("capability `{capability}`")), "{mode}: {message}");
            assert_eq!(failure.kind(), "invalid", "{mode}: {message}");
        }
    }
}

#[test]
fn output_beyond_the_declaration_is_dropped_under_on_error_ignore() {
    for (mode, capability) in REACHES {
        let Evaluated { value, steps, .. } =
            create(load(guests::OVERREACH, mode, OnError::Ignore, everything())).unwrap();
        assert!(env(&value).is_empty(), "{mode}: nothing of the refused reply is applied: {value:?}");
        assert!(value.update.is_empty() && value.evict.is_empty(), "{mode}: {value:?}");
        match &steps[0].outcome {
            Outcome::Failed { failure, ignored: true } => {
                assert!(failure.to_string().contains(&format!("capability `{capability}`")), "{mode}: {failure}")
            }
            other => panic!("{mode}: {other:?}"),
        }
    }
}

/// A component without a declaration (the annotate guest) has what its
/// settings file grants, the default grant if nothing more; a grant beyond
/// a declaration widens nothing, and is reported as asked by no one.
#[test]
fn an_undeclared_component_gets_the_grant_and_a_declared_one_no_more_than_it_declared() {
    let spec = |grant| PolicySpec { grant, ..PolicySpec::new("30-declared", guests::OVERREACH) };
    let annotate = PolicySpec {
        settings: "x".into(),
        on_error: OnError::Fail,
        ..PolicySpec::new("10-annotate", guests::ANNOTATE)
    };
    let policy = shared_loader().load(&annotate, &facts()).unwrap();
    assert_eq!(policy.allowed().declared, None);
    assert_eq!(policy.allowed().effective(), CapSet::default_grant());
    let Evaluated { value, .. } = create(policy).unwrap();
    assert!(value.adjust.is_some(), "annotations are in the default grant");
    // A grant beyond the declaration widens nothing.
    let hooks = CapSet::default_grant().union(CapSet::from_iter([Capability::Hooks]));
    let policy = shared_loader().load(&spec(hooks), &facts()).unwrap();
    assert!(!policy.allowed().effective().contains(Capability::Hooks));
    assert_eq!(policy.allowed().unasked().describe(), "hooks");
}

/// The host subscribes to the node view's events, and keeps the view, only
/// for a policy that reads it: imports the `node` interface *and* may call
/// it. The overreach guest imports it but declares only `env` (as a
/// JavaScript or Python policy that declares `deny` imports every
/// interface), so neither its chain nor the dispatcher's subscription asks
/// for the view, whatever the grant; the hostile guest has no declaration,
/// so its imports and grant decide, as `caps.rs` treats it.
#[test]
fn the_node_view_is_kept_only_for_a_policy_that_may_read_it() {
    use nri_wasm::nri::dispatch::Dispatcher;
    use nri_wasm::nri::version::EventKind;
    use nri_wasm::policy::dispatcher::{PolicyDispatcher, VIEW_EVENTS};

    let undeclared = |grant| {
        let spec = PolicySpec { grant, ..policy_spec("30-hostile", guests::HOSTILE, "quiet", OnError::Fail, roomy()) };
        shared_loader().load(&spec, &facts()).unwrap_or_else(|e| panic!("{e}"))
    };
    let no_node = CapSet::default_grant().minus(CapSet::from_iter([Capability::Node]));
    for (what, policy, reads) in [
        ("declared env only, everything granted", load(guests::OVERREACH, "node", OnError::Fail, everything()), false),
        ("no declaration, default grant", undeclared(CapSet::default_grant()), true),
        ("no declaration, node not granted", undeclared(no_node), false),
    ] {
        assert!(policy.imports().node, "{what}: the guest imports the node interface");
        assert_eq!(policy.reads_node(), reads, "{what}");
        let chain = Chain::new(vec![policy], ChainSettings::default());
        assert_eq!(chain.reads_node(), reads, "{what}");
        assert_eq!(chain.keeps_view(), reads, "{what}");
        let dispatcher = PolicyDispatcher::new(engine(), chain, (*facts()).clone(), 2);
        let events = dispatcher.events();
        assert!(events.contains(EventKind::CreateContainer), "{what}: {events:?}");
        for kind in VIEW_EVENTS.iter().filter(|k| **k != EventKind::CreateContainer) {
            assert_eq!(events.contains(*kind), reads, "{what}: {} in {events:?}", kind.name());
        }
    }
}
