use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<QosClass>(POLICY);
    }
}

#[test]
fn the_offline_adjustment_field_by_field() {
    let out = TestHost::new().with_settings(SETTINGS).run::<QosClass>(&TestEvent::fixture("CreateContainer"));
    let r = out.adjust().linux.as_ref().unwrap().resources.as_ref().unwrap();
    let cpu = r.cpu.as_ref().unwrap();
    assert_eq!((cpu.shares, cpu.quota, cpu.period), (Some(2), Some(20_000), Some(100_000)));
    let memory = r.memory.as_ref().unwrap();
    assert_eq!((memory.limit, memory.swap), (Some(256 << 20), Some(256 << 20)));
    assert!(out.logged("log-shipper: QoS class offline"), "{:?}", out.logs);
}

#[test]
fn cpusets_are_written_canonically() {
    let settings = r#"{"classes": {"lc": {"cpuset": "3,2,4-5", "cpuset-mems": "1,0"}}}"#;
    let event = TestEvent::fixture("CreateContainer").with_pod_annotation("qos.example.com/class", "lc");
    let out = TestHost::new().with_settings(settings).run::<QosClass>(&event);
    assert_eq!(out.lines(), ["resources.cpu.cpus=2-5", "resources.cpu.mems=0-1"]);
}

#[test]
fn a_container_class_that_is_unknown_names_the_container_annotation() {
    let pod = PodSandbox::new("p1", "web-0", "shop");
    let ctr = Container::new("c1", &pod, "web").with_annotation("qos.example.com/container-class", "best");
    let out = TestHost::new().with_settings(SETTINGS).run::<QosClass>(&TestEvent::create_container(pod, ctr));
    assert_eq!(
        out.denial(),
        "container annotation qos.example.com/container-class: unknown QoS class \"best\" (known: latency-critical, \
         offline)"
    );
}
