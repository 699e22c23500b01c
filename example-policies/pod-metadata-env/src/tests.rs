use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<PodMetadataEnv>(POLICY);
    }
}

#[test]
fn names_are_sanitised() {
    assert_eq!(sanitize("example.com/owner"), "EXAMPLE_COM_OWNER");
    assert_eq!(sanitize("app.kubernetes.io/name"), "APP_KUBERNETES_IO_NAME");
    assert_eq!(sanitize("3d-renderer"), "_3D_RENDERER");
    assert_eq!(sanitize("zone-é"), "ZONE__");
    assert!(valid_name("_3D") && valid_name("A1") && !valid_name("1A") && !valid_name("") && !valid_name("A-B"));
}

#[test]
fn a_pod_built_in_code_and_a_skipped_variable_is_logged() {
    let pod = PodSandbox::new("p1", "web-0", "shop").with_label("app", "web").with_label("tier", "front");
    let ctr = Container::new("c1", &pod, "web").with_env("TIER", "set-by-the-image");
    let event = TestEvent::create_container(pod, ctr);
    let out =
        TestHost::new().with_settings(r#"{"labels": {"app": "APP", "tier": "TIER"}}"#).run::<PodMetadataEnv>(&event);
    assert_eq!(out.adjust().env, [KeyValue { key: "APP".into(), value: "web".into() }]);
    assert!(out.logged("web: sets TIER itself; left alone"), "{:?}", out.logs);
}
