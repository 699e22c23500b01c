use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<AllowedImages>(POLICY);
    }
}

#[test]
fn references_are_read_as_the_runtimes_read_them() {
    let r = parse_reference("nginx:1.27");
    assert_eq!(r, Reference { host: "docker.io", path: "nginx", digest: None });
    let r = parse_reference("localhost:5000/team/app:v1@sha256:ab");
    assert_eq!(r, Reference { host: "localhost:5000", path: "team/app", digest: Some("sha256:ab") });
    let r = parse_reference("registry.example.com/a/b");
    assert_eq!((r.host, r.path), ("registry.example.com", "a/b"));
    assert!(allows("ghcr.io/example", &parse_reference("ghcr.io/example/app:1")));
    assert!(allows("ghcr.io/example", &parse_reference("ghcr.io/example:1")));
    assert!(!allows("ghcr.io/example", &parse_reference("ghcr.io/examples/app")));
    assert!(allows("GHCR.io", &parse_reference("ghcr.io/x")));
    assert!(!valid_digest("sha256:abc") && !valid_digest(&format!("md5:{}", "a".repeat(64))));
}

#[test]
fn an_exception_is_logged_with_its_reason() {
    let event = TestEvent::fixture("CreateContainer").with_pod_annotation("images.example.com/exception", "INC-4711");
    let out = TestHost::new().with_settings(SETTINGS).run::<AllowedImages>(&event);
    assert_eq!(out.result, Ok(Reply::none()));
    assert!(out.logged("log-shipper: allowed by exception (INC-4711)"), "{:?}", out.logs);
}

#[test]
fn a_container_without_an_image_is_refused() {
    let mut event = TestEvent::fixture("CreateContainer");
    event.container_mut().annotations.retain(|kv| kv.key != CRI_IMAGE_NAME);
    let out = TestHost::new().with_settings(SETTINGS).run::<AllowedImages>(&event);
    assert_eq!(out.denial(), "container log-shipper: the runtime names no image, so it cannot be checked");
}
