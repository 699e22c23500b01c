use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<HookInjector>(POLICY);
    }
}

#[test]
fn rules_apply_in_their_order_and_say_so() {
    let settings = r#"{"hooks": [
        {"name": "first", "stage": "poststop", "path": "/bin/first"},
        {"name": "second", "stage": "poststop", "path": "/bin/second", "args": ["second", "--x"]}]}"#;
    let pod = PodSandbox::new("p1", "job-0", "batch");
    let event = TestEvent::create_container(pod.clone(), Container::new("c1", &pod, "job"));
    let out = TestHost::new().with_settings(settings).run::<HookInjector>(&event);
    let hooks = out.adjust().hooks.as_ref().unwrap();
    assert_eq!(hooks.poststop, [Hook::new("/bin/first"), Hook::new("/bin/second").with_args(&["second", "--x"])]);
    assert!(out.logged("job: hooks first, second"), "{:?}", out.logs);
}

#[test]
fn env_names_are_checked() {
    let settings = r#"{"hooks": [{"name": "h", "stage": "prestart", "path": "/h", "env": {"A=B": "1"}}]}"#;
    assert_eq!(
        TestHost::new().with_settings(settings).configure::<HookInjector>(),
        Err("invalid settings: hooks[0] (\"h\").env: \"A=B\" is not a variable name (or its value has a NUL byte)"
            .into())
    );
}
