use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<DeviceInjector>(POLICY);
    }
}

#[test]
fn class_patterns_match_whole_names_only() {
    assert!(cdi_allowed("vendor.com/gpu=*", "vendor.com/gpu=0"));
    assert!(cdi_allowed("vendor.com/gpu=*", "vendor.com/gpu=all"));
    assert!(!cdi_allowed("vendor.com/gpu=*", "vendor.com/gpu="));
    assert!(!cdi_allowed("vendor.com/gpu=*", "vendor.com/gpu-admin=0"));
    assert!(!cdi_allowed("vendor.com/gpu=0", "vendor.com/gpu=1"));
}

#[test]
fn block_devices_and_pipes_get_the_right_cgroup_rule() {
    let settings = r#"{"devices": {
        "/dev/nvme0n1": {"type": "b", "major": 259, "minor": 0, "access": "r"},
        "/dev/pipe": {"type": "p", "major": 0, "minor": 0}}}"#;
    let event = TestEvent::fixture("CreateContainer")
        .with_pod_annotation("devices.example.com/log-shipper.devices", "/dev/nvme0n1,/dev/pipe");
    let out = TestHost::new().with_settings(settings).run::<DeviceInjector>(&event);
    assert_eq!(
        out.lines(),
        [
            "device /dev/nvme0n1 type=b major=259 minor=0 mode=- uid=- gid=-",
            "device /dev/pipe type=p major=0 minor=0 mode=- uid=- gid=-",
            "resources.devices[0] allow=true type=b major=259 minor=0 access=r",
        ]
    );
    assert!(out.logged("log-shipper: 2 devices, 0 mounts, 0 CDI devices"));
}

#[test]
fn everything_at_once_for_a_pod_built_in_code() {
    let pod = PodSandbox::new("p1", "fuse-0", "build")
        .with_annotation("devices.example.com/builder.devices", "/dev/fuse")
        .with_annotation("devices.example.com/builder.mounts", "shared-cache")
        .with_annotation("devices.example.com/builder.cdi", "vendor.com/gpu=1");
    let event = TestEvent::create_container(pod.clone(), Container::new("c1", &pod, "builder"));
    let out = TestHost::new().with_settings(SETTINGS).run::<DeviceInjector>(&event);
    let adjust = out.adjust();
    assert_eq!(adjust.cdi_devices, ["vendor.com/gpu=1"]);
    assert_eq!(adjust.mounts, [Mount::bind("/var/cache/shared", "/cache", &["rbind", "ro"])]);
    let linux = adjust.linux.as_ref().unwrap();
    assert_eq!(linux.devices, [LinuxDevice::new("/dev/fuse", "c", 10, 229).with_file_mode(0o666).with_owner(0, 0)]);
    assert!(out.invalid.is_none());
}
