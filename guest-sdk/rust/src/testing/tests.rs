//! Tests of the test host itself.

use super::cases::{Case, Edit, Expect};
use super::*;
use crate::view::{ContainerFilter, ContainerInfo, PodInfo};

/// A policy that reports what it reads, through the SDK's usual API.
struct Probe;

impl Policy for Probe {
    const EVENTS: &'static [EventKind] = &[
        EventKind::CreateContainer,
        EventKind::UpdateContainer,
        EventKind::StartContainer,
        EventKind::ValidateContainerAdjustment,
        EventKind::Synchronize,
    ];

    fn events() -> Vec<EventKind> {
        match settings() {
            "create-only" => vec![EventKind::CreateContainer],
            "also-stop" => vec![EventKind::CreateContainer, EventKind::StopContainer, EventKind::RemoveContainer],
            _ => Self::EVENTS.to_vec(),
        }
    }

    fn init(settings: &str) -> Result<(), String> {
        log(LogLevel::Debug, &format!("configured with {settings:?}"));
        match settings {
            "bad" => Err("settings \"bad\" are not accepted".into()),
            "read-event" => {
                let _ = host_event_probe();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        if let Some(reason) = e.pod_annotation("example.com/deny") {
            state::set("denied", "yes").map_err(|e| format!("{e:?}"))?;
            return Err(reason);
        }
        state::set("seen", &e.container_meta().id).map_err(|e| format!("{e:?}"))?;
        log(LogLevel::Info, &format!("creating {}", e.container_meta().name));
        let mut a = ContainerAdjustment::new()
            .set_annotation("probe/pod", &e.pod_meta().name)
            .set_annotation("probe/app", &e.pod_label("app").unwrap_or_default())
            .set_annotation("probe/role", &e.container_annotation("example.com/ctr-role").unwrap_or_default())
            .set_annotation("probe/tz", &e.env_var("TZ").unwrap_or_default())
            .set_annotation("probe/settings", settings());
        let limit = e.resources().and_then(|r| r.memory.as_ref()).and_then(|m| m.limit);
        a = a.set_annotation("probe/memory", &limit.map_or("-".into(), |l| l.to_string()));
        let running = view::containers(&ContainerFilter::all().in_states(&[ContainerState::Running]));
        a = a.set_annotation("probe/running", &running.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(","));
        if e.pod_annotation("example.com/invalid").is_some() {
            a = a.add_mount(Mount::bind("/src", "relative/dst", &[]));
        }
        Ok(Reply::adjust(a))
    }

    fn update_container(e: &Event) -> Result<Reply, String> {
        let shares = e.requested_resources().and_then(|r| r.cpu.as_ref()).and_then(|c| c.shares);
        let me = view::container(&e.container_meta().id).expect("the event's container is in the view");
        let seen = me.resources.and_then(|r| r.cpu).and_then(|c| c.shares);
        assert_eq!(shares, seen, "the view shows the requested resources");
        Ok(Reply::none())
    }

    fn start_container(e: &Event) -> Result<Reply, String> {
        // Adjusting outside create-container is invalid output.
        Ok(Reply::adjust(ContainerAdjustment::new().set_annotation("x", &e.container_meta().name)))
    }

    fn validate_container_adjustment(e: &Event) -> Result<Reply, String> {
        let v = e.validation().ok_or("no validation")?;
        match v.owner(field::OCI_HOOKS, "") {
            Some(by) => Err(format!("hooks added by {by}")),
            None => Ok(Reply::none()),
        }
    }

    fn synchronize() -> Result<Reply, String> {
        let ids = view::container_ids(&ContainerFilter::all());
        let mut r = Reply::none();
        for id in ids.iter() {
            r = r.with_eviction(id, "synchronized");
        }
        Ok(r)
    }
}

fn host_event_probe() -> Option<String> {
    crate::sys::event::pod_label("app")
}

fn fixture() -> TestEvent {
    TestEvent::fixture("CreateContainer")
}

#[test]
fn the_captured_create_container_maps_field_by_field() {
    let e = fixture();
    assert_eq!(e.kind(), EventKind::CreateContainer);
    let pod = e.whole().pod().unwrap();
    assert_eq!((pod.name.as_str(), pod.namespace.as_str(), pod.pid), ("billing-worker-7f9c5", "payments", 22571));
    assert_eq!(pod.label("tier"), Some("backend"));
    let keys: Vec<&str> = pod.labels.iter().map(|kv| kv.key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "maps come sorted by key");
    let linux = pod.linux.as_ref().unwrap();
    assert_eq!(linux.cgroup_parent, "/nri-test");
    let overhead = linux.pod_overhead.as_ref().unwrap().cpu.as_ref().unwrap();
    assert_eq!((overhead.shares, overhead.quota, overhead.period), (Some(16), Some(0), Some(0)), "{{}} is a zero");
    assert_eq!(linux.namespaces.len(), 3);

    let c = e.whole().container().unwrap();
    assert_eq!((c.name.as_str(), c.state), ("log-shipper", ContainerState::Unknown));
    assert_eq!(c.args, ["/envsleep", "--ship", "/shared"]);
    assert_eq!(c.env_var("SHIPPER_BATCH"), Some("100"));
    assert_eq!(c.mounts.len(), 11);
    assert_eq!(c.mounts[6], Mount::bind("/srv/fixture/mounts/shared", "/shared", &["rbind", "rprivate", "ro"]));
    assert_eq!(c.hooks, Some(Hooks::default()), "an empty message is present");
    let l = c.linux.as_ref().unwrap();
    assert_eq!(l.oom_score_adj, Some(0));
    let r = l.resources.as_ref().unwrap();
    let m = r.memory.as_ref().unwrap();
    assert_eq!((m.limit, m.swap, m.reservation), (Some(33554432), Some(33554432), None));
    assert_eq!(r.cpu.as_ref().unwrap().shares, Some(128));
    assert_eq!(
        r.devices,
        [LinuxDeviceCgroup { allow: false, type_: String::new(), major: None, minor: None, access: "rwm".into() }]
    );
    assert_eq!(l.namespaces[1], LinuxNamespace { type_: "ipc".into(), path: "/proc/22571/ns/ipc".into() });
    assert_eq!(c.user.as_ref().unwrap().additional_gids, [0]);
    assert_eq!(c.user.as_ref().unwrap().uid, 0);
}

#[test]
fn json_accepts_protobufs_forms_and_refuses_unknown_fields() {
    let text = r#"{"event": "UpdateContainer", "request": {
        "pod": {"id": "p", "namespace": "ns", "pid": "7"},
        "container": {"id": "c", "podSandboxId": "p", "state": 3, "CDIDevices": [{"name": "v.com/gpu=0"}],
                      "rlimits": [{"type": "RLIMIT_NOFILE", "hard": "18446744073709551615", "soft": 10}],
                      "linux": {"io_priority": {"class": "IOPRIO_CLASS_BE", "priority": 4},
                                "net_devices": {"eth1": {"name": "net0"}},
                                "scheduler": {"policy": "SCHED_FIFO", "flags": ["SCHED_FLAG_RECLAIM", 0]}}},
        "linux_resources": {"cpu": {"shares": {"value": 512}, "cpus": "0-1"}, "unified": {"b": "2", "a": "1"}}}}"#;
    let e = TestEvent::from_json(text).unwrap();
    let WholeEvent::UpdateContainer(u) = e.whole() else { panic!("{e:?}") };
    assert_eq!((u.pod.pid, u.container.pod_sandbox_id.as_str()), (7, "p"));
    assert_eq!(u.container.state, ContainerState::Running);
    assert_eq!(u.container.cdi_devices, ["v.com/gpu=0"]);
    assert_eq!(u.container.rlimits[0].hard, u64::MAX);
    let l = u.container.linux.as_ref().unwrap();
    assert_eq!(l.io_priority, Some(IoPriority { class: IoPriorityClass::Be, priority: 4 }));
    assert_eq!(l.net_devices, [NetDeviceEntry { host_name: "eth1".into(), name: "net0".into() }]);
    let s = l.scheduler.as_ref().unwrap();
    assert_eq!(
        (s.policy, s.flags.clone()),
        (SchedulerPolicy::Fifo, vec![SchedulerFlag::Reclaim, SchedulerFlag::ResetOnFork])
    );
    let r = u.linux_resources.as_ref().unwrap();
    assert_eq!(r.cpu.as_ref().unwrap().shares, Some(512));
    assert_eq!(r.unified.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), ["a", "b"]);

    let typo = r#"{"event": "CreateContainer", "request": {"pod": {"namespce": "x"}}}"#;
    let err = TestEvent::from_json(typo).unwrap_err();
    assert!(err.starts_with("PodSandbox: unknown field \"namespce\""), "{err}");
    let wrong = r#"{"event": "CreateContainer", "request": {"container": {"pid": "many"}}}"#;
    assert_eq!(TestEvent::from_json(wrong).unwrap_err(), "Container.pid: expected an integer in range, got \"many\"");
    let state = r#"{"event": "StartContainer", "request": {"container": {"state": "CONTAINER_GONE"}}}"#;
    assert!(TestEvent::from_json(state).unwrap_err().contains("is not one of CONTAINER_UNKNOWN"));
    let unknown = r#"{"event": "Shutdown", "request": {}}"#;
    assert_eq!(TestEvent::from_json(unknown).unwrap_err(), "\"Shutdown\" is not an NRI event a policy sees");
    let pod_only = TestEvent::from_json(r#"{"event": "RunPodSandbox", "request": {}}"#).unwrap();
    assert_eq!(pod_only.whole().pod(), Some(&PodSandbox::default()), "a missing pod is the empty record");
}

#[test]
fn a_validation_request_in_json_flattens_its_owners_as_the_host_does() {
    let text = r#"{"event": "ValidateContainerAdjustment", "request": {
        "pod": {"id": "p"}, "container": {"id": "c"},
        "adjust": {"env": [{"key": "A", "value": "1"}], "hooks": {"prestart": [{"path": "/bin/h", "timeout": {"value": 3}}]},
                   "linux": {"seccomp_policy": {"default_action": "SCMP_ACT_ALLOW"}}},
        "update": [{"container_id": "d", "linux": {"resources": {"memory": {"limit": {"value": "100"}}}}}],
        "owners": {"owners": {"c": {"simple": {"32": "20-b", "3": "10-a,20-b"},
                                    "compound": {"6": {"owners": {"A": "10-a"}}}},
                              "d": {"simple": {"8": "20-b"}}}}}}"#;
    let e = TestEvent::from_json(text).unwrap();
    let WholeEvent::ValidateContainerAdjustment(v) = e.whole() else { panic!() };
    let flat: Vec<(String, i32, bool, String, String)> = v
        .owners
        .iter()
        .map(|o| (o.container_id.clone(), o.field, o.compound, o.key.clone(), o.plugin.clone()))
        .collect();
    let own = |c: &str, f, compound, k: &str, p: &str| (c.to_string(), f, compound, k.to_string(), p.to_string());
    assert_eq!(
        flat,
        [
            own("c", 3, false, "", "10-a,20-b"),
            own("c", 32, false, "", "20-b"),
            own("c", 6, true, "A", "10-a"),
            own("d", 8, false, "", "20-b"),
        ]
    );
    assert_eq!(v.owner(field::SECCOMP_POLICY, ""), Some("20-b"));
    assert_eq!(v.owner(field::ENV, "A"), Some("10-a"));
    assert_eq!(v.owner(field::MEM_LIMIT, ""), None, "only the container being created");
    let adjust = v.adjust.as_ref().unwrap();
    assert_eq!(adjust.hooks.as_ref().unwrap().prestart[0], Hook::new("/bin/h").with_timeout(3));
    assert_eq!(v.update[0].resources.as_ref().unwrap().memory.as_ref().unwrap().limit, Some(100));
}

#[test]
fn the_captured_synchronize_makes_a_view() {
    let host = TestHost::new().with_view_json(&fixture_text("Synchronize").unwrap()).unwrap();
    assert_eq!(host.view.pods.len(), 1);
    let states: Vec<(&str, ContainerState)> =
        host.view.containers.values().map(|c| (c.name.as_str(), c.state)).collect();
    assert!(states.contains(&("worker", ContainerState::Running)), "{states:?}");
    assert!(states.contains(&("log-shipper", ContainerState::Created)), "{states:?}");
    let err = TestHost::new().with_view_json(&fixture_text("CreateContainer").unwrap()).unwrap_err();
    assert_eq!(err, "a view is made of a Synchronize request, not CreateContainer");
}

#[test]
fn a_run_configures_then_handles_and_reports_reply_logs_and_state() {
    let mut host = TestHost::new()
        .with_settings("s1")
        .with_pod(PodInfo::new("p9", "other", "default"))
        .with_container(ContainerInfo::new("c9", "p9", "db", ContainerState::Running))
        .with_container(ContainerInfo::new("c8", "p9", "gone", ContainerState::Stopped));
    let out = host.run::<Probe>(&fixture());
    assert!(out.called);
    assert_eq!(
        out.lines(),
        [
            "annotation probe/app=billing",
            "annotation probe/memory=33554432",
            "annotation probe/pod=billing-worker-7f9c5",
            "annotation probe/role=sidecar",
            "annotation probe/running=db",
            "annotation probe/settings=s1",
            "annotation probe/tz=UTC",
        ]
    );
    assert_eq!(
        out.logs,
        [
            LogLine { level: LogLevel::Debug, message: "configured with \"s1\"".into() },
            LogLine { level: LogLevel::Info, message: "creating log-shipper".into() },
        ]
    );
    assert_eq!(out.logs[1].to_string(), "info: creating log-shipper");
    let id = fixture().whole().container().unwrap().id.clone();
    assert_eq!(out.state, BTreeMap::from([("seen".to_string(), id.clone())]));
    assert_eq!(host.state, out.state, "committed");
}

#[test]
fn state_is_committed_only_when_the_host_would_commit_it() {
    let mut host = TestHost::new().with_state("kept", "1");
    let denied = host.run::<Probe>(&fixture().with_pod_annotation("example.com/deny", "not today"));
    assert_eq!(denied.denial(), "not today");
    assert_eq!(host.state, BTreeMap::from([("kept".to_string(), "1".to_string())]), "a denial keeps nothing");

    let invalid = host.run::<Probe>(&fixture().with_pod_annotation("example.com/invalid", "1"));
    assert_eq!(
        invalid.invalid.as_deref(),
        Some("adjust.mounts[0].destination: \"relative/dst\" is not an absolute path")
    );
    assert!(!host.state.contains_key("seen"), "invalid output keeps nothing");

    let start = host.run::<Probe>(&fixture().as_kind(EventKind::StartContainer));
    assert_eq!(start.invalid.as_deref(), Some("adjust: only create-container may adjust, not start-container"));

    let ok = host.run::<Probe>(&fixture());
    assert!(ok.invalid.is_none());
    assert_eq!(host.state.len(), 2);
}

#[test]
fn state_writes_are_bounded_as_in_the_host() {
    let call = |host: &TestHost, f: &dyn Fn() -> Result<(), state::StateError>| {
        fake::with_call(host.call(Some(fixture().0)), f).0
    };
    // Two keys, 10 bytes of keys and values: each key counts 64 bytes more.
    let limit = 10 + 2 * 64;
    let host = TestHost::new().with_state_limit(limit).with_state("ab", "cd");
    assert_eq!(call(&host, &|| state::set("ef", "ghij")), Ok(()));
    assert_eq!(call(&host, &|| state::set("ef", "ghijk")), Err(state::StateError::LimitExceeded(limit as u64)));
    assert_eq!(call(&host, &|| state::set("ab", "cdefghij")), Ok(()), "a replaced value is not counted twice");
    assert!(matches!(call(&host, &|| state::set("", "x")), Err(state::StateError::InvalidKey(_))));
    assert!(matches!(call(&host, &|| state::set(&"k".repeat(257), "")), Err(state::StateError::InvalidKey(_))));
    let keys = fake::with_call(host.call(None), || state::keys("a")).0;
    assert_eq!(keys, ["ab"]);
}

#[test]
fn configure_errors_and_subscriptions_are_the_policys() {
    assert_eq!(
        TestHost::new().with_settings("bad").configure::<Probe>(),
        Err("settings \"bad\" are not accepted".into())
    );
    let events = TestHost::new().with_settings("create-only").configure::<Probe>().unwrap();
    assert_eq!(events, [EventKind::CreateContainer]);
    let mut host = TestHost::new().with_settings("create-only");
    let out = host.run::<Probe>(&fixture().as_kind(EventKind::StartContainer));
    assert!(!out.called, "the host does not call a policy for an event it did not subscribe to");
    assert_eq!(out.result, Ok(Reply::none()));
}

#[test]
fn a_subscription_beyond_the_declaration_fails_configure_as_the_host_refuses_it() {
    let e = TestHost::new().with_settings("also-stop").configure::<Probe>().unwrap_err();
    assert_eq!(
        e,
        "Policy::events() answers stop-container, remove-container, which Policy::EVENTS does not declare \
         (it declares create-container, update-container, start-container, validate-container-adjustment, \
         synchronize): add them to EVENTS"
    );
}

/// A policy that declares nothing and asks for nothing.
struct Silent;

impl Policy for Silent {
    const EVENTS: &'static [EventKind] = &[];
}

#[test]
fn the_declaration_is_made_at_compile_time_from_events() {
    const LEN: usize = crate::__events_len(Probe::EVENTS);
    const TEXT: [u8; LEN] = crate::__events_text::<LEN>(Probe::EVENTS);
    assert_eq!(
        std::str::from_utf8(&TEXT).unwrap(),
        "create-container update-container start-container validate-container-adjustment synchronize "
    );
    const NONE: usize = crate::__events_len(Silent::EVENTS);
    assert_eq!(crate::__events_text::<NONE>(Silent::EVENTS), [b' '], "an empty declaration is still one");
    assert_eq!(TestHost::new().configure::<Silent>(), Ok(Vec::new()));
}

#[test]
#[should_panic(expected = "configure rejected the settings \"bad\"")]
fn running_a_policy_whose_settings_are_refused_panics() {
    TestHost::new().with_settings("bad").run::<Probe>(&fixture());
}

#[test]
#[should_panic(expected = "`event.pod-label` was called from configure")]
fn reading_the_event_in_configure_panics_as_the_host_traps() {
    let _ = TestHost::new().with_settings("read-event").configure::<Probe>();
}

#[test]
#[should_panic(expected = "outside a call of the test host")]
fn calling_the_host_outside_a_run_panics() {
    let _ = state::get("x");
}

#[test]
fn the_view_filters_and_shows_the_events_own_container() {
    let pod = PodSandbox::new("p1", "web-0", "default").with_label("app", "web");
    let ctr = Container::new("c1", &pod, "web").with_state(ContainerState::Running).with_label("tier", "front");
    let requested =
        LinuxResources { cpu: Some(LinuxCpu { shares: Some(300), ..LinuxCpu::default() }), ..Default::default() };
    let event = TestEvent::update_container(pod.clone(), ctr.clone(), requested);
    let host = TestHost::new()
        .with_pod(PodInfo::of(&pod))
        .with_pod(PodInfo::new("p2", "db-0", "default").with_label("app", "db"))
        .with_container(ContainerInfo::new("c2", "p2", "db", ContainerState::Running).with_label("tier", "back"))
        .with_container(ContainerInfo::new("c3", "p2", "init", ContainerState::Stopped));
    let (seen, _) = fake::with_call(host.call(Some(event.0.clone())), || {
        let web = view::containers(&ContainerFilter::all().with_pod_label("app", "web"));
        let running = view::container_ids(&ContainerFilter::all().in_states(&[ContainerState::Running]));
        let back = view::containers(&ContainerFilter::of_pod("p2").with_label("tier", "back"));
        let pods = view::pods();
        let me = view::container("c1").unwrap();
        (
            web.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
            running.iter().map(str::to_string).collect::<Vec<_>>(),
            back.len(),
            pods.iter().map(|p| p.containers.clone()).collect::<Vec<_>>(),
            me.resources.and_then(|r| r.cpu).and_then(|c| c.shares),
            view::topology().online_cpus.len(),
        )
    });
    assert_eq!(seen.0, ["c1"]);
    assert_eq!(seen.1, ["c1", "c2"]);
    assert_eq!(seen.2, 1);
    assert_eq!(seen.3, [vec!["c1".to_string()], vec!["c2".to_string(), "c3".to_string()]]);
    assert_eq!(seen.4, Some(300), "on update-container, with the requested resources");
    assert_eq!(seen.5, 8);
    // The policy's own assertion holds too.
    let mut host = host;
    assert!(host.run::<Probe>(&event).result.is_ok());
}

#[test]
fn synchronize_reads_the_view() {
    let mut host = TestHost::new().with_view_json(&fixture_text("Synchronize").unwrap()).unwrap();
    let out = host.run::<Probe>(&TestEvent::synchronize());
    assert_eq!(out.reply().evict.len(), 2);
}

#[test]
fn a_validation_records_who_set_what() {
    let create = fixture();
    let first = ContainerAdjustment::new()
        .add_hook(HookStage::Prestart, Hook::new("/bin/a"))
        .add_mount(Mount::bind("/srv", "/data", &["ro"]))
        .remove_env("DEBUG")
        .set_memory_limit(1 << 20);
    let second = ContainerAdjustment::new().add_hook(HookStage::Poststop, Hook::new("/bin/b")).add_mount(Mount::bind(
        "/srv2",
        "/data",
        &[],
    ));
    let v = Validation::of(&create).adjusted_by("10-a", &first).adjusted_by("20-b", &second).build();
    assert_eq!(v.owner(field::OCI_HOOKS, ""), Some("10-a,20-b"));
    assert_eq!(v.owner(field::MOUNTS, "/data"), Some("20-b"));
    // Removing a variable no policy set changes no owner (as in the host).
    assert_eq!(v.owner(field::ENV, "DEBUG"), None);
    assert_eq!(v.owner(field::MEM_LIMIT, ""), Some("10-a"));
    assert!(v.own_owners().all(|o| o.compound == field::is_compound(o.field)));
    let adjust = v.adjust.as_ref().unwrap();
    assert_eq!(adjust.mounts, [Mount::bind("/srv2", "/data", &[])]);
    assert_eq!(adjust.hooks.as_ref().unwrap().iter().count(), 2);

    let mut host = TestHost::new();
    let out = host.run::<Probe>(&Validation::of(&create).adjusted_by("10-a", &first).into());
    assert_eq!(out.denial(), "hooks added by 10-a");
    let out = host.run::<Probe>(&Validation::of(&create).into());
    assert_eq!(out.result, Ok(Reply::none()));
}

#[test]
fn describe_writes_one_sorted_line_per_setting() {
    let mut adjust = ContainerAdjustment::new()
        .set_env("B", "2")
        .set_annotation("a", "1")
        .set_rlimit("RLIMIT_NOFILE", 10, 20)
        .add_hook(HookStage::CreateRuntime, Hook::new("/h").with_args(&["h", "-x"]).with_env("K", "V").with_timeout(5))
        .add_device(LinuxDevice::new("/dev/fuse", "c", 10, 229).with_file_mode(0o666))
        .add_cdi_device("v.com/gpu=0")
        .set_cpu_quota(20_000, 100_000)
        .set_unified("cpu.weight", "10")
        .set_oom_score_adj(500);
    adjust.resources_mut().memory = Some(LinuxMemory::default());
    let reply = Reply::adjust(adjust)
        .with_update(
            ContainerUpdate::cpu("c2", LinuxCpu { cpus: "0-1".into(), ..LinuxCpu::default() }).ignoring_failure(),
        )
        .with_eviction("c3", "too big");
    assert_eq!(
        describe(&reply),
        [
            "annotation a=1",
            "cdi v.com/gpu=0",
            "device /dev/fuse type=c major=10 minor=229 mode=666 uid=- gid=-",
            "env B=2",
            "evict c3 reason=too big",
            "hook createRuntime[0] /h args=[\"h\", \"-x\"] env=[\"K=V\"] timeout=5",
            "oom_score_adj=500",
            "resources.cpu.period=100000",
            "resources.cpu.quota=20000",
            "resources.unified cpu.weight=10",
            "rlimit RLIMIT_NOFILE soft=10 hard=20",
            "update c2 ignore_failure=true",
            "update c2 resources.cpu.cpus=0-1",
        ]
    );
    assert!(describe(&Reply::none()).is_empty());
}

#[test]
fn check_refuses_what_the_host_refuses() {
    let create = |a: ContainerAdjustment| check_reply(EventKind::CreateContainer, &Reply::adjust(a));
    assert_eq!(create(ContainerAdjustment::new().set_annotation("a", "1")), Ok(()));
    assert_eq!(
        create(ContainerAdjustment::new().set_annotation("a", "1").set_annotation("a", "2")),
        Err("adjust.annotations: key \"a\" is given twice".into())
    );
    // Map fields: exact keys, markers included ("-k" and "k" are two keys).
    assert_eq!(create(ContainerAdjustment::new().remove_annotation("a").set_annotation("a", "1")), Ok(()));
    assert_eq!(
        create(ContainerAdjustment::new().remove_annotation("a").remove_annotation("a")),
        Err("adjust.annotations: key \"-a\" is given twice".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().remove_sysctl("net.x").set_sysctl("net.x", "1").remove_sysctl("net.x")),
        Err("adjust.linux.sysctl: key \"-net.x\" is given twice".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().add_net_device("eth9", "net0").add_net_device("eth9", "net1")),
        Err("adjust.linux.net_devices: key \"eth9\" is given twice".into())
    );
    // List fields: markers are no claim; a key set twice is.
    assert_eq!(create(ContainerAdjustment::new().remove_env("A").remove_env("A").set_env("A", "1")), Ok(()));
    assert_eq!(
        create(ContainerAdjustment::new().set_rlimit("RLIMIT_NOFILE", 20, 10)),
        Err("adjust.rlimits[0]: soft limit 20 is above the hard limit 10".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().set_rlimit("RLIMIT_FILES", 1, 1)),
        Err("adjust.rlimits[0].type: \"RLIMIT_FILES\" is not an RLIMIT_* name".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().add_hook(HookStage::Prestart, Hook::new("bin/x"))),
        Err("adjust.hooks.prestart[0].path: \"bin/x\" is not an absolute path".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().add_hook(HookStage::Prestart, Hook::new("/x").with_timeout(0))),
        Err("adjust.hooks.prestart[0].timeout: 0 is not a positive number of seconds".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().set_cpu_quota(500, 100_000)),
        Err("adjust.linux.resources.cpu.quota: 500 is neither at least 1000 microseconds nor -1 (unlimited)".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().set_cpuset("3-1")),
        Err("adjust.linux.resources.cpu.cpus: \"3-1\" is not a list like 0-3,5".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().set_env("A=B", "x")),
        Err("adjust.env[0].key: \"A=B\": a name cannot contain '='".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().set_annotation("a", "x\0y")),
        Err("adjust.annotations[\"a\"]: contains a NUL byte".into())
    );
    assert_eq!(
        create(ContainerAdjustment::new().add_cdi_device("gpu0")),
        Err("adjust.CDI_devices[0].name: \"gpu0\" is not vendor/class=name".into())
    );
    let validation = check_reply(EventKind::ValidateContainerAdjustment, &Reply::none().with_eviction("c", "x"));
    assert!(validation.unwrap_err().starts_with("a validation reply may carry nothing"));
    let self_update = Reply::none().with_update(ContainerUpdate::cpu(
        &fixture().whole().container().unwrap().id,
        LinuxCpu { shares: Some(2), ..LinuxCpu::default() },
    ));
    assert!(check::no_self_update(fixture().whole(), &self_update).unwrap_err().contains("adjust it instead"));
}

#[test]
fn hook_stages_parse_in_every_spelling() {
    for s in ["createRuntime", "create-runtime", "create_runtime", "CREATE_RUNTIME"] {
        assert_eq!(HookStage::parse(s), Some(HookStage::CreateRuntime), "{s}");
    }
    assert_eq!(HookStage::parse("prestop"), None);
}

const PROBE_CASES: &[Case] = &[
    Case {
        name: "the fixture as captured",
        settings: "create-only",
        fixture: "CreateContainer",
        edits: &[Edit::PodLabel("app", "shop"), Edit::ContainerName("web")],
        expect: Expect::Lines(&[
            "annotation probe/app=shop",
            "annotation probe/memory=33554432",
            "annotation probe/pod=billing-worker-7f9c5",
            "annotation probe/role=sidecar",
            "annotation probe/running=",
            "annotation probe/settings=create-only",
            "annotation probe/tz=UTC",
        ]),
    },
    Case {
        name: "a denial",
        settings: "create-only",
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("example.com/deny", "no")],
        expect: Expect::Deny("no"),
    },
    Case {
        name: "an earlier policy's hook is rejected by validation",
        settings: "",
        fixture: "CreateContainer",
        edits: &[
            Edit::EarlierHook { policy: "10-hooks", stage: "prestart", path: "/bin/h" },
            Edit::PodAnnotation("example.com/deny", "no"),
        ],
        expect: Expect::Deny("no"),
    },
    Case {
        name: "settings",
        settings: "bad",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("settings \"bad\" are not accepted"),
    },
];

#[test]
fn cases_run_as_the_chain_would() {
    for case in PROBE_CASES {
        case.check::<Probe>("50-probe");
    }
    let hooks = Case {
        name: "validation sees the earlier hook",
        settings: "",
        fixture: "CreateContainer",
        edits: &[Edit::EarlierHook { policy: "10-hooks", stage: "prestart", path: "/bin/h" }],
        expect: Expect::Deny("hooks added by 10-hooks"),
    };
    hooks.check::<Probe>("50-probe");
    let earlier = hooks.earlier();
    assert_eq!(earlier.len(), 1);
    assert_eq!(describe_adjustment(&earlier[0].1), ["hook prestart[0] /bin/h args=[] env=[] timeout=-"]);
}

#[test]
fn a_chain_refuses_what_the_host_refuses_and_records_owners_as_it_does() {
    let create = fixture();
    let mut v = Validation::of(&create);
    // Removing a variable and setting it again is how a policy overrides.
    let first = ContainerAdjustment::new().set_env("A", "1").remove_env("DEBUG");
    assert_eq!(check_reply(EventKind::CreateContainer, &Reply::adjust(first.clone().remove_env("A"))), Ok(()));
    assert_eq!(v.try_adjust("10-a", &first), Ok(()));
    // Another policy setting it conflicts, naming the first; nothing of it is merged.
    let second = ContainerAdjustment::new().set_env("B", "2").set_env("A", "2");
    match v.try_adjust("20-b", &second) {
        Err(Refusal::Conflict(c)) => {
            assert_eq!((c.field, c.key.as_str(), c.first.as_str()), (field::ENV, "A", "10-a"));
            assert_eq!(c.to_string(), "policies \"10-a\" and \"20-b\" both tried to set environment variable \"A\"");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(v.owners().iter().filter(|o| o.field == field::ENV).count(), 1);
    // Removing what 10-a set clears it: 20-b may then set it.
    let third = ContainerAdjustment::new().remove_env("A").set_env("A", "3");
    assert_eq!(v.try_adjust("20-b", &third), Ok(()));
    let v = v.build();
    assert_eq!(v.owner(field::ENV, "A"), Some("20-b"));
    assert_eq!(v.owner(field::ENV, "DEBUG"), None);
    // A policy that sets one thing twice made invalid output.
    let mut v = Validation::of(&create);
    let twice = ContainerAdjustment::new().set_memory_limit(1 << 20);
    assert_eq!(v.try_adjust("10-a", &twice), Ok(()));
    assert!(matches!(v.try_adjust("10-a", &twice), Err(Refusal::Invalid(_))));
    // A key given twice in a map field is refused while the host converts
    // the reply, before its merge could find the conflict on env.
    let mut v = Validation::of(&create);
    assert_eq!(v.try_adjust("10-a", &ContainerAdjustment::new().set_env("A", "1")), Ok(()));
    let both = ContainerAdjustment::new().set_env("A", "2").set_sysctl("net.x", "1").set_sysctl("net.x", "2");
    assert_eq!(
        v.try_adjust("20-b", &both),
        Err(Refusal::Invalid("adjust.linux.sysctl: key \"net.x\" is given twice".into()))
    );
    let markers = ContainerAdjustment::new().remove_annotation("k").remove_annotation("k");
    assert!(matches!(v.try_adjust("20-b", &markers), Err(Refusal::Invalid(_))));
}

#[test]
fn a_removal_alone_keeps_the_value_and_adds_the_marker_in_map_fields() {
    let mut v = Validation::of(&fixture());
    let set = ContainerAdjustment::new().set_annotation("a", "1").set_sysctl("net.x", "1");
    assert_eq!(v.try_adjust("10-a", &set), Ok(()));
    let remove = ContainerAdjustment::new().remove_annotation("a").remove_sysctl("net.x");
    assert_eq!(v.try_adjust("20-b", &remove), Ok(()));
    let merged = v.build().adjust.expect("an adjustment");
    let keys = |list: &[KeyValue]| list.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect::<Vec<_>>();
    let pairs = |a: &str, b: &str| vec![(a.to_string(), "1".to_string()), (b.to_string(), String::new())];
    assert_eq!(keys(&merged.annotations), pairs("a", "-a"));
    assert_eq!(keys(&merged.linux.expect("linux").sysctl), pairs("net.x", "-net.x"));
}
