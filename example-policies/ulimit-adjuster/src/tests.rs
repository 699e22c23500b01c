use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<UlimitAdjuster>(POLICY);
    }
}

#[test]
fn values_are_soft_and_hard_numbers_once_each() {
    assert_eq!(parse_value("soft=1024,hard=4096"), Some((1024, 4096)));
    assert_eq!(parse_value(" hard = 2 , soft = 1 "), Some((1, 2)));
    for bad in ["", "soft=1", "soft=1,hard=2,soft=3", "soft=-1,hard=2", "soft=1,hard=unlimited", "soft=1;hard=2"] {
        assert_eq!(parse_value(bad), None, "{bad:?}");
    }
}

#[test]
fn each_container_gets_only_its_own_annotations() {
    let pod = PodSandbox::new("p1", "web-0", "shop")
        .with_annotation("ulimits.example.com/web.nofile", "soft=100,hard=200")
        .with_annotation("ulimits.example.com/sidecar.nofile", "soft=10,hard=20")
        .with_annotation("unrelated.example.com/web.nofile", "not a limit");
    let mut host = TestHost::new().with_settings(SETTINGS);
    for (name, soft, hard) in [("web", 100, 200), ("sidecar", 10, 20)] {
        let event = TestEvent::create_container(pod.clone(), Container::new(name, &pod, name));
        let out = host.run::<UlimitAdjuster>(&event);
        assert_eq!(out.adjust().rlimits, [PosixRlimit { type_: "RLIMIT_NOFILE".into(), soft, hard }]);
        assert!(out.logged(&format!("{name}: RLIMIT_NOFILE soft={soft} hard={hard}")), "{:?}", out.logs);
    }
    let other = TestEvent::create_container(pod.clone(), Container::new("c3", &pod, "init"));
    assert_eq!(host.run::<UlimitAdjuster>(&other).result, Ok(Reply::none()));
}

#[test]
fn the_bound_is_inclusive() {
    let event = TestEvent::fixture("CreateContainer")
        .with_pod_annotation("ulimits.example.com/log-shipper.nproc", "soft=4096,hard=8192");
    let out = TestHost::new().with_settings(SETTINGS).run::<UlimitAdjuster>(&event);
    assert_eq!(out.lines(), ["rlimit RLIMIT_NPROC soft=4096 hard=8192"]);
}
