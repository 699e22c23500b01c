use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_sdk::testing::{fixture_text, TestEvent, TestHost};
use nri_wasm_sdk::view::ContainerInfo;

use super::*;

include!("cases.rs");

#[test]
fn cases() {
    for case in CASES {
        case.check::<ExclusiveCpus>(POLICY);
    }
}

/// The running `worker` and the created `log-shipper` of the captured
/// Synchronize.
const WORKER: &str = "c38113f0a74908b8f7db304db10360efc2620ad9fa7bb6390d77cdf1b9a14e05";
const SHIPPER: &str = "30b0437f019ae30f78454cc0837f6a9a921e3233c889a5e61dc889e74744cc46";
/// The container of the captured CreateContainer.
const CREATED: &str = "ab4c075c1692274210e4d3f5ff1ae1e9e7ab34971ec1c82aedac0030d56a8b2c";

fn captured_node() -> TestHost {
    let sync = fixture_text("Synchronize").unwrap();
    TestHost::new().with_settings(SETTINGS).with_view_json(&sync).unwrap()
}

fn asking(n: &str) -> TestEvent {
    TestEvent::fixture("CreateContainer").with_pod_annotation(COUNT, n)
}

/// The update lines that put `ids` on `cpus`.
fn moved(ids: &[&str], cpus: &str) -> Vec<String> {
    ids.iter()
        .flat_map(|id| [format!("update {id} ignore_failure=true"), format!("update {id} resources.cpu.cpus={cpus}")])
        .collect()
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

#[test]
fn on_the_captured_node_the_other_containers_shrink_to_the_shared_cpus() {
    let mut host = captured_node();
    let out = host.run::<ExclusiveCpus>(&asking("2"));
    let mut want = vec!["annotation exclusive-cpus.nri-wasm.io/cpus=1-2".to_string(), "resources.cpu.cpus=1-2".into()];
    want.extend(moved(&[WORKER, SHIPPER], "0,3-7"));
    assert_eq!(out.lines(), sorted(want));
    assert_eq!(out.state.get(&format!("cpus/{CREATED}")).map(String::as_str), Some("1-2"));
    assert!(out.logged(&format!("container log-shipper ({CREATED}) gets CPUs 1-2")), "{:?}", out.logs);
    // A shared container is created on what is left, once the runtime
    // reports the first one (else its CPUs would be taken back: a container
    // the runtime does not have).
    host = host.with_container(ContainerInfo::new(CREATED, "b4a530e4", "log-shipper", ContainerState::Created));
    let pod = PodSandbox::new("p2", "web-0", "shop");
    let web = TestEvent::create_container(pod.clone(), Container::new("web-c", &pod, "web"));
    assert_eq!(host.run::<ExclusiveCpus>(&web).lines(), ["resources.cpu.cpus=0,3-7"]);
}

#[test]
fn cpus_go_back_to_the_pool_when_a_container_stops_or_vanishes() {
    let mut host = captured_node();
    host.run::<ExclusiveCpus>(&asking("2")).reply();
    let first = ContainerInfo::new(CREATED, "b4a530e4", "log-shipper", ContainerState::Running);
    host = host.with_container(first);

    // A second pod takes three CPUs: node 0 has one left, node 1 has room.
    let pod = PodSandbox::new("p2", "db-0", "shop").with_annotation(COUNT, "3");
    let db = Container::new("db-c", &pod, "postgres");
    let out = host.run::<ExclusiveCpus>(&TestEvent::create_container(pod.clone(), db.clone()));
    let mut want = vec!["annotation exclusive-cpus.nri-wasm.io/cpus=4-6".to_string(), "resources.cpu.cpus=4-6".into()];
    want.extend(moved(&[WORKER, SHIPPER], "0,3,7"));
    assert_eq!(out.lines(), sorted(want), "exclusive containers are not moved");
    host = host.with_container(ContainerInfo::new("db-c", "p2", "postgres", ContainerState::Running));

    // The first stops: its CPUs are shared again, in the StopContainer
    // reply; its removal later changes nothing more.
    let out = host.run::<ExclusiveCpus>(&asking("2").as_kind(EventKind::StopContainer));
    assert_eq!(out.lines(), sorted(moved(&[WORKER, SHIPPER], "0-3,7")));
    assert!(!out.state.contains_key(&format!("cpus/{CREATED}")));
    assert!(out.logged(&format!("container {CREATED} released its CPUs")));
    let stopped = ContainerInfo::new(CREATED, "b4a530e4", "log-shipper", ContainerState::Stopped);
    host = host.with_container(stopped);
    let out = host.run::<ExclusiveCpus>(&asking("2").as_kind(EventKind::RemoveContainer));
    assert_eq!(out.lines(), Vec::<String>::new());

    // Removing a shared container changes nothing.
    let web_pod = PodSandbox::new("p3", "web-0", "shop");
    let web =
        TestEvent::container_event(EventKind::RemoveContainer, web_pod.clone(), Container::new("w", &web_pod, "w"));
    assert_eq!(host.run::<ExclusiveCpus>(&web).lines(), Vec::<String>::new());

    // The database vanished while the host was away: Synchronize releases
    // its CPUs and gives every live container all of them.
    host.view.containers.remove("db-c");
    host.view.containers.remove(CREATED);
    let out = host.run::<ExclusiveCpus>(&TestEvent::synchronize());
    assert_eq!(out.lines(), sorted(moved(&[WORKER, SHIPPER], "0-7")));
    assert!(out.state.is_empty(), "{:?}", out.state);
    assert!(out.logged("released the CPUs of container db-c, which the runtime no longer runs"));
}

#[test]
fn an_allocation_of_a_container_the_runtime_no_longer_has_is_dropped_at_the_next_create() {
    // A container that was given 4-7 and whose creation then failed.
    let mut host = TestHost::new().with_settings(SETTINGS).with_state("cpus/failed", "4-7");
    let out = host.run::<ExclusiveCpus>(&asking("4"));
    assert_eq!(out.lines(), ["annotation exclusive-cpus.nri-wasm.io/cpus=4-7", "resources.cpu.cpus=4-7"]);
    assert!(!out.state.contains_key("cpus/failed"));
    assert!(out.logged("released the CPUs of container failed, which the runtime no longer runs"));
}

#[test]
fn a_removal_whose_stop_was_missed_releases_the_cpus() {
    let mut host = TestHost::new().with_settings(SETTINGS).with_state(&format!("cpus/{CREATED}"), "1-2");
    let out = host.run::<ExclusiveCpus>(&asking("2").as_kind(EventKind::RemoveContainer));
    assert!(out.state.is_empty(), "{:?}", out.state);
    assert!(out.logged(&format!("container {CREATED} released its CPUs")));
}

/// The kubelet restarts a crashed container as a new one and keeps the
/// stopped one: the new one gets the CPUs the stopped one had.
#[test]
fn a_restarted_container_finds_the_cpus_of_the_one_that_stopped() {
    let mut host = TestHost::new().with_settings(SETTINGS);
    let pod = PodSandbox::new("p", "db-0", "shop").with_annotation(COUNT, "4");
    let first = Container::new("db-1", &pod, "postgres");
    let out = host.run::<ExclusiveCpus>(&TestEvent::create_container(pod.clone(), first.clone()));
    assert_eq!(out.lines(), ["annotation exclusive-cpus.nri-wasm.io/cpus=4-7", "resources.cpu.cpus=4-7"]);
    host = host.with_container(ContainerInfo::new("db-1", "p", "postgres", ContainerState::Running));
    host.run::<ExclusiveCpus>(&TestEvent::container_event(EventKind::StopContainer, pod.clone(), first)).reply();
    host = host.with_container(ContainerInfo::new("db-1", "p", "postgres", ContainerState::Stopped));
    let again = Container::new("db-2", &pod, "postgres");
    let out = host.run::<ExclusiveCpus>(&TestEvent::create_container(pod, again));
    assert_eq!(out.lines(), ["annotation exclusive-cpus.nri-wasm.io/cpus=4-7", "resources.cpu.cpus=4-7"]);
}

/// The host was away when a container stopped: the next create takes its
/// CPUs back, since the runtime reports it stopped.
#[test]
fn a_stop_missed_while_disconnected_is_noticed_at_the_next_create() {
    let mut host = TestHost::new()
        .with_settings(SETTINGS)
        .with_state("cpus/db-1", "4-7")
        .with_container(ContainerInfo::new("db-1", "p", "postgres", ContainerState::Stopped));
    let out = host.run::<ExclusiveCpus>(&asking("4"));
    assert_eq!(out.lines(), ["annotation exclusive-cpus.nri-wasm.io/cpus=4-7", "resources.cpu.cpus=4-7"]);
    assert!(out.logged("released the CPUs of container db-1, which the runtime no longer runs"));
}

#[test]
fn a_container_is_not_given_cpus_twice() {
    let mut host = TestHost::new().with_settings(SETTINGS).with_state(&format!("cpus/{CREATED}"), "3");
    let out = host.run::<ExclusiveCpus>(&asking("1"));
    assert_eq!(out.denial(), format!("container {CREATED} already holds exclusive CPUs"));
}

#[test]
fn it_subscribes_to_create_stop_remove_and_synchronize() {
    let events = TestHost::new().configure::<ExclusiveCpus>();
    assert_eq!(
        events,
        Ok(vec![
            EventKind::CreateContainer,
            EventKind::StopContainer,
            EventKind::RemoveContainer,
            EventKind::Synchronize
        ])
    );
}
