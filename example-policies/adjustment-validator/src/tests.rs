use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost, Validation};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<AdjustmentValidator>(POLICY);
    }
}

fn seccomp() -> ContainerAdjustment {
    let mut a = ContainerAdjustment::new();
    a.linux_mut().seccomp_policy = Some(LinuxSeccomp {
        default_action: "SCMP_ACT_ALLOW".into(),
        default_errno: None,
        architectures: Vec::new(),
        flags: Vec::new(),
        listener_path: String::new(),
        listener_metadata: String::new(),
        syscalls: Vec::new(),
    });
    a
}

#[test]
fn a_seccomp_change_names_its_policy() {
    let create = TestEvent::fixture("CreateContainer");
    let event: TestEvent = Validation::of(&create).adjusted_by("15-seccomp", &seccomp()).into();
    let mut host = TestHost::new().with_settings(SETTINGS);
    assert_eq!(
        host.run::<AdjustmentValidator>(&event).denial(),
        "15-seccomp changed the seccomp policy; pod payments/billing-worker-7f9c5 has not opted in \
         (adjustments.example.com/allow: seccomp)"
    );
    let opted = create.with_pod_annotation("adjustments.example.com/allow", "hooks, seccomp");
    let event: TestEvent = Validation::of(&opted).adjusted_by("15-seccomp", &seccomp()).into();
    assert_eq!(host.run::<AdjustmentValidator>(&event).result, Ok(Reply::none()));
}

#[test]
fn checks_can_be_turned_off() {
    let settings = r#"{"opt-in-annotation": "a.b/allow", "check-hooks": false}"#;
    let hook = ContainerAdjustment::new().add_hook(HookStage::Prestart, Hook::new("/bin/h"));
    let event: TestEvent = Validation::of(&TestEvent::fixture("CreateContainer")).adjusted_by("10-h", &hook).into();
    let out = TestHost::new().with_settings(settings).run::<AdjustmentValidator>(&event);
    assert_eq!(out.result, Ok(Reply::none()));
}

#[test]
fn removed_mounts_and_relative_sources_are_not_host_paths() {
    let v = parse_settings(SETTINGS).unwrap();
    assert_eq!(v.privileged("/proc/../etc/shadow").as_deref(), Some("/etc"));
    assert_eq!(v.privileged("/devices"), None, "a component boundary");
    assert_eq!(v.privileged("tmpfs"), None);
    let removal = ContainerAdjustment::new().remove_mount("/proc");
    let event: TestEvent = Validation::of(&TestEvent::fixture("CreateContainer")).adjusted_by("10-r", &removal).into();
    let out = TestHost::new().with_settings(SETTINGS).run::<AdjustmentValidator>(&event);
    assert_eq!(out.result, Ok(Reply::none()));
}

#[test]
fn only_the_validation_step_is_subscribed() {
    let events = TestHost::new().with_settings(SETTINGS).configure::<AdjustmentValidator>();
    assert_eq!(events, Ok(vec![EventKind::ValidateContainerAdjustment]));
}
