use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{TestEvent, TestHost};
use nri_wasm_sdk::view::{ContainerInfo, PodInfo};

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<ColocationQos>(POLICY);
    }
}

const CLASS: &str = "qos.nri-wasm.io/class";

/// policy.toml's settings with the cgroup v2 `memory.high` on.
const CGROUP_V2: &str = "cpu-percent=20 memory-high=256M";

fn cpu(quota: i64, period: u64) -> LinuxResources {
    LinuxResources {
        cpu: Some(LinuxCpu { quota: Some(quota), period: Some(period), ..LinuxCpu::default() }),
        ..LinuxResources::default()
    }
}

/// A node with two live offline containers (one with a quota of its own),
/// a stopped one, and a container of an unclassed pod.
fn node() -> TestHost {
    TestHost::new()
        .with_settings(CGROUP_V2)
        .with_pod(PodInfo::new("off", "batch-0", "analytics").with_label(CLASS, "offline"))
        .with_pod(PodInfo::new("web", "web-0", "shop"))
        .with_container(
            ContainerInfo::new("off-run", "off", "crunch", ContainerState::Running)
                .with_resources(cpu(50_000, 100_000)),
        )
        .with_container(ContainerInfo::new("off-new", "off", "sidecar", ContainerState::Created))
        .with_container(ContainerInfo::new("off-done", "off", "init", ContainerState::Stopped))
        .with_container(ContainerInfo::new("web-1", "web", "web", ContainerState::Running))
}

fn latency_critical(kind: EventKind, id: &str) -> TestEvent {
    let pod = PodSandbox::new(&format!("pod-{id}"), "search-0", "shop").with_label(CLASS, "latency-critical");
    let ctr = Container::new(id, &pod, "search");
    TestEvent::container_event(kind, pod, ctr)
}

fn update(id: &str, lines: &[&str]) -> Vec<String> {
    let mut out = vec![format!("update {id} ignore_failure=true")];
    out.extend(lines.iter().map(|l| format!("update {id} resources.{l}")));
    out
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

#[test]
fn latency_critical_work_throttles_offline_work_until_the_last_one_stops() {
    let mut host = node();
    let out = host.run::<ColocationQos>(&latency_critical(EventKind::StartContainer, "lc-1"));
    let throttle = ["cpu.period=100000", "cpu.quota=20000", "unified memory.high=256M"];
    let want = [update("off-new", &throttle), update("off-run", &throttle)].concat();
    assert_eq!(out.lines(), sorted(want));
    assert_eq!(out.state.get("online/lc-1").map(String::as_str), Some("1"));
    assert_eq!(out.state.get("saved/off-run").map(String::as_str), Some("50000,100000"));
    assert_eq!(out.state.get("saved/off-new").map(String::as_str), Some("-,-"));
    assert!(out.logged("latency-critical search started: throttling offline containers"), "{:?}", out.logs);

    // A second one: already throttled; its stop restores nothing while
    // the first runs.
    let out = host.run::<ColocationQos>(&latency_critical(EventKind::StartContainer, "lc-2"));
    assert_eq!(out.lines(), Vec::<String>::new());
    let out = host.run::<ColocationQos>(&latency_critical(EventKind::StopContainer, "lc-2"));
    assert_eq!(out.lines(), Vec::<String>::new());

    // The last one stops: the saved quota and period come back, or no
    // quota (-1) for a container that had none.
    let out = host.run::<ColocationQos>(&latency_critical(EventKind::StopContainer, "lc-1"));
    let want = [
        update("off-new", &["cpu.period=100000", "cpu.quota=-1", "unified memory.high=max"]),
        update("off-run", &["cpu.period=100000", "cpu.quota=50000", "unified memory.high=max"]),
    ]
    .concat();
    assert_eq!(out.lines(), sorted(want));
    assert!(out.state.is_empty(), "{:?}", out.state);
    assert!(out.logged("last latency-critical container gone: restoring offline containers"));
}

#[test]
fn an_offline_container_created_meanwhile_is_created_throttled_and_forgotten_when_removed() {
    let mut host = node().with_state("online/lc-1", "1");
    let event = TestEvent::fixture("CreateContainer").with_pod_label(CLASS, "offline");
    let out = host.run::<ColocationQos>(&event);
    assert_eq!(
        out.lines(),
        ["resources.cpu.period=100000", "resources.cpu.quota=20000", "resources.unified memory.high=256M"]
    );
    let id = event.whole().container().unwrap().id.clone();
    assert_eq!(out.state.get(&format!("saved/{id}")).map(String::as_str), Some("-,-"));
    let out = host.run::<ColocationQos>(&event.as_kind(EventKind::RemoveContainer));
    assert_eq!(out.lines(), Vec::<String>::new());
    assert!(!out.state.contains_key(&format!("saved/{id}")));
}

#[test]
fn a_container_keeps_its_own_period_and_the_quota_never_drops_below_one_millisecond() {
    let pod = PodSandbox::new("p", "batch-1", "analytics").with_label(CLASS, "offline");
    let own = Container::new("c", &pod, "c").with_resources(cpu(40_000, 50_000));
    let event = TestEvent::create_container(pod, own);
    let mut host = TestHost::new().with_settings(CGROUP_V2).with_state("online/lc", "1");
    let out = host.run::<ColocationQos>(&event);
    assert_eq!(
        out.lines(),
        ["resources.cpu.period=50000", "resources.cpu.quota=10000", "resources.unified memory.high=256M"]
    );
    assert_eq!(out.state.get("saved/c").map(String::as_str), Some("40000,50000"));

    let mut host = TestHost::new().with_settings("cpu-percent=1 memory-high=max").with_state("online/lc", "1");
    let out = host.run::<ColocationQos>(&event);
    assert_eq!(
        out.lines(),
        ["resources.cpu.period=50000", "resources.cpu.quota=1000", "resources.unified memory.high=max"]
    );
}

#[test]
fn synchronize_forgets_what_went_away_and_restores_when_no_latency_critical_work_is_left() {
    // The latency-critical container went away while the host was
    // disconnected; off-run is still throttled, off-gone is gone too.
    let mut host = node()
        .with_state("online/lc-gone", "1")
        .with_state("saved/off-run", "50000,100000")
        .with_state("saved/off-gone", "-,-");
    let out = host.run::<ColocationQos>(&TestEvent::synchronize());
    let want = update("off-run", &["cpu.period=100000", "cpu.quota=50000", "unified memory.high=max"]);
    assert_eq!(out.lines(), sorted(want));
    assert!(out.state.is_empty(), "{:?}", out.state);

    // One still runs: whatever is not throttled yet is.
    let mut host = node()
        .with_pod(PodInfo::new("lc", "search-0", "shop").with_label(CLASS, "latency-critical"))
        .with_container(ContainerInfo::new("lc-1", "lc", "search", ContainerState::Running))
        .with_state("online/lc-1", "1")
        .with_state("saved/off-run", "50000,100000");
    let out = host.run::<ColocationQos>(&TestEvent::synchronize());
    let want = update("off-new", &["cpu.period=100000", "cpu.quota=20000", "unified memory.high=256M"]);
    assert_eq!(out.lines(), sorted(want));
    assert_eq!(out.state.get("saved/off-new").map(String::as_str), Some("-,-"));
}

#[test]
fn memory_high_sizes() {
    for ok in ["max", "0", "268435456", "256M", "1g", "64K", "2T"] {
        assert!(memory_high_ok(ok), "{ok}");
    }
    for bad in ["", "M", "256MiB", "-1", "1.5G", "maximum", "256 M"] {
        assert!(!memory_high_ok(bad), "{bad}");
    }
}

#[test]
fn without_memory_high_only_the_cpu_is_throttled_and_restored() {
    // policy.toml's settings: nothing a cgroup v1 node refuses.
    let mut host = node().with_settings(SETTINGS);
    let out = host.run::<ColocationQos>(&latency_critical(EventKind::StartContainer, "lc-1"));
    let throttle = ["cpu.period=100000", "cpu.quota=20000"];
    assert_eq!(out.lines(), sorted([update("off-new", &throttle), update("off-run", &throttle)].concat()));
    let out = host.run::<ColocationQos>(&latency_critical(EventKind::StopContainer, "lc-1"));
    assert!(out.lines().iter().all(|l| !l.contains("unified")), "{:?}", out.lines());
    assert!(out.lines().iter().any(|l| l.contains("cpu.quota=50000")), "{:?}", out.lines());
}
