use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<DenyHostSockets>(POLICY);
    }
}

#[test]
fn paths_are_read_as_the_kernel_reads_them() {
    assert_eq!(normalize("/var//run/./docker.sock").as_deref(), Some("/var/run/docker.sock"));
    assert_eq!(normalize("/a/../../proc").as_deref(), Some("/proc"));
    assert_eq!(normalize("/").as_deref(), Some("/"));
    assert_eq!(normalize("proc"), None);
    assert!(within("/proc/1", "/proc") && within("/proc", "/proc") && within("/x", "/"));
    assert!(!within("/procfs", "/proc"));
}

#[test]
fn file_systems_that_are_not_bind_mounts_are_not_host_paths() {
    // The captured container has proc at /proc and sysfs at /sys: fine.
    let event = TestEvent::fixture("CreateContainer");
    assert!(event.whole().container().unwrap().mounts.iter().any(|m| m.destination == "/proc" && m.type_ == "proc"));
    let mut host = TestHost::new();
    assert_eq!(host.run::<DenyHostSockets>(&event).result, Ok(Reply::none()));
    // A bind mount told by its options rather than its type counts.
    let mut sneaky = Mount::bind("/var/run/docker.sock", "/d.sock", &["rbind"]);
    sneaky.type_ = String::new();
    let out = host.run::<DenyHostSockets>(&event.with_mount(sneaky));
    assert!(out.denial().starts_with("mount of host path /var/run/docker.sock at /d.sock"));
}

#[test]
fn parents_may_be_allowed() {
    let event = TestEvent::fixture("CreateContainer").with_mount(Mount::bind("/run", "/host-run", &["rbind"]));
    let mut host = TestHost::new();
    assert!(host.run::<DenyHostSockets>(&event).result.is_err());
    let mut lenient = TestHost::new().with_settings(r#"{"deny-parents": false}"#);
    assert_eq!(lenient.run::<DenyHostSockets>(&event).result, Ok(Reply::none()));
}

#[test]
fn an_exception_is_logged() {
    let event = TestEvent::fixture("CreateContainer").with_namespace("monitoring").with_mount(Mount::bind(
        "/sys/fs/cgroup",
        "/host/cgroup",
        &["rbind", "ro"],
    ));
    let out = TestHost::new().with_settings(SETTINGS).run::<DenyHostSockets>(&event);
    assert_eq!(out.result, Ok(Reply::none()));
    assert!(out.logged("log-shipper: /sys/fs/cgroup allowed in namespace monitoring"), "{:?}", out.logs);
}
