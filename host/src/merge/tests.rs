//! Tests of the merge: a table of CreateContainer chains with their expected
//! outcome, then the other merges and the properties the table cannot show.

use std::collections::HashMap;

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use super::*;

// ---------------------------------------------------------------- builders

fn some<T>(value: T) -> MessageField<T> {
    MessageField::some(value)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn smap(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn i64v(value: i64) -> MessageField<pb::OptionalInt64> {
    some(pb::OptionalInt64 { value, ..Default::default() })
}

fn u64v(value: u64) -> MessageField<pb::OptionalUInt64> {
    some(pb::OptionalUInt64 { value, ..Default::default() })
}

fn strv(value: &str) -> MessageField<pb::OptionalString> {
    some(pb::OptionalString { value: value.into(), ..Default::default() })
}

fn mount(destination: &str, source: &str) -> pb::Mount {
    pb::Mount {
        destination: destination.into(),
        source: source.into(),
        type_: "bind".into(),
        options: strings(&["rbind"]),
        ..Default::default()
    }
}

fn unmount(destination: &str) -> pb::Mount {
    pb::Mount { destination: format!("-{destination}"), ..Default::default() }
}

fn device(path: &str, major: i64, minor: i64) -> pb::LinuxDevice {
    pb::LinuxDevice { path: path.into(), type_: "c".into(), major, minor, ..Default::default() }
}

fn undevice(path: &str) -> pb::LinuxDevice {
    pb::LinuxDevice { path: format!("-{path}"), ..Default::default() }
}

fn kv(key: &str, value: &str) -> pb::KeyValue {
    pb::KeyValue { key: key.into(), value: value.into(), ..Default::default() }
}

fn ns(kind: &str, path: &str) -> pb::LinuxNamespace {
    pb::LinuxNamespace { type_: kind.into(), path: path.into(), ..Default::default() }
}

fn hook(path: &str) -> pb::Hook {
    pb::Hook { path: path.into(), ..Default::default() }
}

fn rlimit(kind: &str, hard: u64, soft: u64) -> pb::POSIXRlimit {
    pb::POSIXRlimit { type_: kind.into(), hard, soft, ..Default::default() }
}

fn hugepage(size: &str, limit: u64) -> pb::HugepageLimit {
    pb::HugepageLimit { page_size: size.into(), limit, ..Default::default() }
}

fn cdi(name: &str) -> pb::CDIDevice {
    pb::CDIDevice { name: name.into(), ..Default::default() }
}

fn netdev(name: &str) -> pb::LinuxNetDevice {
    pb::LinuxNetDevice { name: name.into(), ..Default::default() }
}

/// The container every CreateContainer case starts from.
fn request() -> pb::CreateContainerRequest {
    pb::CreateContainerRequest {
        pod: some(pb::PodSandbox { id: "pod0".into(), name: "web".into(), ..Default::default() }),
        container: some(pb::Container {
            id: "ctr0".into(),
            pod_sandbox_id: "pod0".into(),
            name: "app".into(),
            annotations: smap(&[("orig", "1")]),
            args: strings(&["sh", "-c", "sleep 1"]),
            env: strings(&["PATH=/bin", "HOME=/root", "LANG=C"]),
            mounts: vec![mount("/data", "/srv/data"), mount("/logs", "/srv/logs"), mount("/tmp", "tmpfs")],
            rlimits: vec![rlimit("RLIMIT_CORE", 0, 0)],
            linux: some(pb::LinuxContainer {
                devices: vec![device("/dev/fuse", 10, 229)],
                namespaces: vec![ns("network", ""), ns("pid", ""), ns("ipc", "")],
                resources: some(pb::LinuxResources {
                    cpu: some(pb::LinuxCPU { shares: u64v(1024), ..Default::default() }),
                    hugepage_limits: vec![hugepage("2MB", 5)],
                    ..Default::default()
                }),
                sysctl: smap(&[("net.ipv4.ip_forward", "0")]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A CreateContainer reply with just an adjustment.
fn adjust(f: impl FnOnce(&mut pb::ContainerAdjustment)) -> pb::CreateContainerResponse {
    let mut a = pb::ContainerAdjustment::default();
    f(&mut a);
    pb::CreateContainerResponse { adjust: some(a), ..Default::default() }
}

fn linux(a: &mut pb::ContainerAdjustment) -> &mut pb::LinuxContainerAdjustment {
    a.linux.mut_or_insert_default()
}

fn res(a: &mut pb::ContainerAdjustment) -> &mut pb::LinuxResources {
    linux(a).resources.mut_or_insert_default()
}

fn update(id: &str, ignore_failure: bool, f: impl FnOnce(&mut pb::LinuxResources)) -> pb::ContainerUpdate {
    let mut resources = pb::LinuxResources::default();
    f(&mut resources);
    pb::ContainerUpdate {
        container_id: id.into(),
        linux: some(pb::LinuxContainerUpdate { resources: some(resources), ..Default::default() }),
        ignore_failure,
        ..Default::default()
    }
}

fn eviction(id: &str, reason: &str) -> pb::ContainerEviction {
    pb::ContainerEviction { container_id: id.into(), reason: reason.into(), ..Default::default() }
}

/// A CreateContainer reply with updates and evictions only.
fn others(update: Vec<pb::ContainerUpdate>, evict: Vec<pb::ContainerEviction>) -> pb::CreateContainerResponse {
    pb::CreateContainerResponse { update, evict, ..Default::default() }
}

fn conflict(field: &str, first: &str, second: &str) -> MergeError {
    MergeError::Conflict { field: field.into(), first: first.into(), second: second.into() }
}

/// `reason` as shown: the field's path, `: `, what is wrong.
fn invalid(policy: &str, reason: &str) -> MergeError {
    let (field, what) = reason.split_once(": ").expect("a field and what is wrong with it");
    MergeError::Invalid { policy: policy.into(), reason: Box::new(BadField { field: field.into(), what: what.into() }) }
}

fn mounts_of(c: &pb::Container) -> Vec<(&str, &str)> {
    c.mounts.iter().map(|m| (m.destination.as_str(), m.source.as_str())).collect()
}

fn paths_of(devices: &[pb::LinuxDevice]) -> Vec<(&str, i64)> {
    devices.iter().map(|d| (d.path.as_str(), d.major)).collect()
}

// ------------------------------------------------------------------ table

enum Expect {
    /// Every step merges; the combined reply and a check of the container.
    Ok(pb::CreateContainerResponse, fn(&pb::Container)),
    /// Every step but the last merges; the last fails with this error.
    Err(MergeError),
}

struct Case {
    name: &'static str,
    steps: Vec<(&'static str, pb::CreateContainerResponse)>,
    expect: Expect,
}

fn case(name: &'static str, steps: Vec<(&'static str, pb::CreateContainerResponse)>, expect: Expect) -> Case {
    Case { name, steps, expect }
}

fn run(case: Case) {
    let req_merge = request();
    let mut merge = CreateMerge::new(&req_merge);
    let last = case.steps.len() - 1;
    for (i, (policy, reply)) in case.steps.iter().enumerate() {
        let before = merge.clone();
        let result = merge.apply(policy, reply);
        match (&case.expect, i == last) {
            (Expect::Err(want), true) => {
                assert_eq!(result.as_ref(), Err(want), "{}: last step", case.name);
                assert_eq!(merge, before, "{}: a failed apply must leave the merge unchanged", case.name);
            }
            _ => result.unwrap_or_else(|e| panic!("{}: step {i} ({policy}) failed: {e}", case.name)),
        }
    }
    if let Expect::Ok(want, check) = case.expect {
        check(merge.container());
        assert_eq!(merge.finish(), want, "{}: combined reply", case.name);
    }
}

fn cases() -> Vec<Case> {
    vec![
        // ---- annotations
        case(
            "two policies set different annotations",
            vec![
                ("10-a", adjust(|a| a.annotations = smap(&[("a", "1")]))),
                ("20-b", adjust(|a| a.annotations = smap(&[("b", "2")]))),
            ],
            Expect::Ok(adjust(|a| a.annotations = smap(&[("a", "1"), ("b", "2")])), |c| {
                assert_eq!(c.annotations, smap(&[("orig", "1"), ("a", "1"), ("b", "2")]));
            }),
        ),
        case(
            "two policies set the same annotation",
            vec![
                ("10-a", adjust(|a| a.annotations = smap(&[("x", "1")]))),
                ("20-b", adjust(|a| a.annotations = smap(&[("x", "2")]))),
            ],
            Expect::Err(conflict("annotation \"x\"", "10-a", "20-b")),
        ),
        case(
            "an annotation removed and re-set in one reply",
            vec![("10-a", adjust(|a| a.annotations = smap(&[("-orig", ""), ("orig", "2")])))],
            Expect::Ok(adjust(|a| a.annotations = smap(&[("-orig", ""), ("orig", "2")])), |c| {
                assert_eq!(c.annotations, smap(&[("orig", "2")]));
            }),
        ),
        case(
            "remove and set in one reply overrides an earlier owner",
            vec![
                ("10-a", adjust(|a| a.annotations = smap(&[("x", "1")]))),
                ("20-b", adjust(|a| a.annotations = smap(&[("-x", ""), ("x", "2")]))),
            ],
            Expect::Ok(adjust(|a| a.annotations = smap(&[("-x", ""), ("x", "2")])), |c| {
                assert_eq!(c.annotations.get("x").map(String::as_str), Some("2"));
            }),
        ),
        case(
            "after an override, a third setter conflicts with the overrider",
            vec![
                ("10-a", adjust(|a| a.annotations = smap(&[("x", "1")]))),
                ("20-b", adjust(|a| a.annotations = smap(&[("-x", ""), ("x", "2")]))),
                ("30-c", adjust(|a| a.annotations = smap(&[("x", "3")]))),
            ],
            Expect::Err(conflict("annotation \"x\"", "20-b", "30-c")),
        ),
        case(
            // As in the runtime: a removal alone is passed on as a marker but
            // neither claims the key nor leaves the working container.
            "an annotation only removed stays in the container and is not claimed",
            vec![
                ("10-a", adjust(|a| a.annotations = smap(&[("-orig", "")]))),
                ("20-b", adjust(|a| a.annotations = smap(&[("orig", "3")]))),
            ],
            Expect::Ok(adjust(|a| a.annotations = smap(&[("-orig", ""), ("orig", "3")])), |c| {
                assert_eq!(c.annotations, smap(&[("orig", "3")]));
            }),
        ),
        // ---- mounts
        case(
            "mounts replace by destination, removal passes on",
            vec![
                ("10-a", adjust(|a| a.mounts = vec![mount("/data", "/a")])),
                ("20-b", adjust(|a| a.mounts = vec![unmount("/logs")])),
            ],
            Expect::Ok(adjust(|a| a.mounts = vec![mount("/data", "/a"), unmount("/logs")]), |c| {
                assert_eq!(mounts_of(c), [("/tmp", "tmpfs"), ("/data", "/a")]);
            }),
        ),
        case(
            "removing a mount another policy added drops it from the reply",
            vec![
                ("10-p", adjust(|a| a.mounts = vec![mount("/cache", "/p")])),
                ("20-a", adjust(|a| a.mounts = vec![unmount("/cache")])),
            ],
            Expect::Ok(adjust(|a| a.mounts = vec![unmount("/cache")]), |c| {
                assert!(!c.mounts.iter().any(|m| m.destination == "/cache"));
            }),
        ),
        case(
            "a mount removed by A then set by B conflicts with A",
            vec![
                ("10-p", adjust(|a| a.mounts = vec![mount("/cache", "/p")])),
                ("20-a", adjust(|a| a.mounts = vec![unmount("/cache")])),
                ("30-b", adjust(|a| a.mounts = vec![mount("/cache", "/b")])),
            ],
            Expect::Err(conflict("mount \"/cache\"", "20-a", "30-b")),
        ),
        case(
            "remove and re-add of a mount in one reply overrides an earlier owner",
            vec![
                ("10-a", adjust(|a| a.mounts = vec![mount("/m", "/a")])),
                ("20-b", adjust(|a| a.mounts = vec![unmount("/m"), mount("/m", "/b")])),
            ],
            Expect::Ok(adjust(|a| a.mounts = vec![mount("/m", "/b")]), |c| {
                assert_eq!(c.mounts.iter().filter(|m| m.destination == "/m").count(), 1);
                assert_eq!(mounts_of(c).last(), Some(&("/m", "/b")));
            }),
        ),
        case(
            "two mounts at one destination in one reply conflict with itself",
            vec![("10-a", adjust(|a| a.mounts = vec![mount("/m", "/1"), mount("/m", "/2")]))],
            Expect::Err(conflict("mount \"/m\"", "10-a", "10-a")),
        ),
        // ---- devices
        case(
            "devices are added and removed by path",
            vec![
                ("10-a", adjust(|a| linux(a).devices = vec![device("/dev/a", 1, 1)])),
                ("20-b", adjust(|a| linux(a).devices = vec![undevice("/dev/fuse")])),
            ],
            Expect::Ok(adjust(|a| linux(a).devices = vec![device("/dev/a", 1, 1), undevice("/dev/fuse")]), |c| {
                assert_eq!(paths_of(&c.linux.devices), [("/dev/a", 1)]);
            }),
        ),
        case(
            "a device removal re-set by a later policy is not passed on",
            vec![
                ("10-a", adjust(|a| linux(a).devices = vec![undevice("/dev/fuse")])),
                ("20-b", adjust(|a| linux(a).devices = vec![device("/dev/fuse", 7, 7)])),
            ],
            Expect::Ok(adjust(|a| linux(a).devices = vec![device("/dev/fuse", 7, 7)]), |c| {
                assert_eq!(paths_of(&c.linux.devices), [("/dev/fuse", 7)]);
            }),
        ),
        case(
            "a device removed by A then set by B conflicts with A",
            vec![
                ("10-p", adjust(|a| linux(a).devices = vec![device("/dev/a", 1, 1)])),
                ("20-a", adjust(|a| linux(a).devices = vec![undevice("/dev/a")])),
                ("30-b", adjust(|a| linux(a).devices = vec![device("/dev/a", 2, 2)])),
            ],
            Expect::Err(conflict("device \"/dev/a\"", "20-a", "30-b")),
        ),
        // ---- environment
        case(
            "env overrides an existing variable and removes another",
            vec![
                ("10-a", adjust(|a| a.env = vec![kv("HOME", "/home/a")])),
                ("20-b", adjust(|a| a.env = vec![kv("-PATH", "")])),
            ],
            Expect::Ok(adjust(|a| a.env = vec![kv("HOME", "/home/a"), kv("-PATH", "")]), |c| {
                assert_eq!(c.env, strings(&["LANG=C", "HOME=/home/a"]));
            }),
        ),
        case(
            "the same variable from two policies conflicts",
            vec![("10-a", adjust(|a| a.env = vec![kv("X", "1")])), ("20-b", adjust(|a| a.env = vec![kv("X", "2")]))],
            Expect::Err(conflict("environment variable \"X\"", "10-a", "20-b")),
        ),
        case(
            "a variable removed by B after A set it, then set by C, conflicts with B",
            vec![
                ("10-a", adjust(|a| a.env = vec![kv("X", "1")])),
                ("20-b", adjust(|a| a.env = vec![kv("-X", "")])),
                ("30-c", adjust(|a| a.env = vec![kv("X", "3")])),
            ],
            Expect::Err(conflict("environment variable \"X\"", "20-b", "30-c")),
        ),
        case(
            "env removed and re-set in one reply overrides an earlier owner",
            vec![
                ("10-a", adjust(|a| a.env = vec![kv("X", "1")])),
                ("20-b", adjust(|a| a.env = vec![kv("-X", ""), kv("X", "2")])),
            ],
            Expect::Ok(adjust(|a| a.env = vec![kv("X", "2")]), |c| {
                assert_eq!(c.env, strings(&["PATH=/bin", "HOME=/root", "LANG=C", "X=2"]));
            }),
        ),
        // ---- args
        case(
            "args with a leading empty element replace earlier args",
            vec![
                ("10-a", adjust(|a| a.args = strings(&["a1"]))),
                ("20-b", adjust(|a| a.args = strings(&["", "b1", "b2"]))),
            ],
            Expect::Ok(adjust(|a| a.args = strings(&["b1", "b2"])), |c| {
                assert_eq!(c.args, strings(&["b1", "b2"]));
            }),
        ),
        case(
            "args set twice conflict",
            vec![("10-a", adjust(|a| a.args = strings(&["a"]))), ("20-b", adjust(|a| a.args = strings(&["b"])))],
            Expect::Err(conflict("args", "10-a", "20-b")),
        ),
        case(
            "args cleared with a lone empty element stay cleared",
            vec![("10-a", adjust(|a| a.args = strings(&["a1"]))), ("20-b", adjust(|a| a.args = strings(&[""])))],
            Expect::Ok(adjust(|a| a.args = strings(&[""])), |c| assert!(c.args.is_empty())),
        ),
        // ---- hooks
        case(
            "hooks from three policies accumulate",
            vec![
                ("10-a", adjust(|a| a.hooks.mut_or_insert_default().prestart = vec![hook("/a")])),
                (
                    "20-b",
                    adjust(|a| {
                        let h = a.hooks.mut_or_insert_default();
                        h.prestart = vec![hook("/b")];
                        h.poststop = vec![hook("/b2")];
                    }),
                ),
                ("30-c", adjust(|a| a.hooks.mut_or_insert_default().create_runtime = vec![hook("/c")])),
            ],
            Expect::Ok(
                adjust(|a| {
                    let h = a.hooks.mut_or_insert_default();
                    h.prestart = vec![hook("/a"), hook("/b")];
                    h.poststop = vec![hook("/b2")];
                    h.create_runtime = vec![hook("/c")];
                }),
                |c| {
                    assert_eq!(c.hooks.prestart, [hook("/a"), hook("/b")]);
                    assert_eq!(c.hooks.poststop, [hook("/b2")]);
                    assert_eq!(c.hooks.create_runtime, [hook("/c")]);
                },
            ),
        ),
        // ---- resources
        case(
            "memory limit from A and CPU shares from B",
            vec![
                ("10-a", adjust(|a| res(a).memory.mut_or_insert_default().limit = i64v(1 << 30))),
                ("20-b", adjust(|a| res(a).cpu.mut_or_insert_default().shares = u64v(512))),
            ],
            Expect::Ok(
                adjust(|a| {
                    res(a).memory.mut_or_insert_default().limit = i64v(1 << 30);
                    res(a).cpu.mut_or_insert_default().shares = u64v(512);
                }),
                |c| {
                    assert_eq!(c.linux.resources.memory.limit, i64v(1 << 30));
                    assert_eq!(c.linux.resources.cpu.shares, u64v(512));
                },
            ),
        ),
        case(
            "memory limit from two policies conflicts",
            vec![
                ("10-a", adjust(|a| res(a).memory.mut_or_insert_default().limit = i64v(1))),
                ("20-b", adjust(|a| res(a).memory.mut_or_insert_default().limit = i64v(2))),
            ],
            Expect::Err(conflict("memory limit", "10-a", "20-b")),
        ),
        case(
            "unified entries are owned per key",
            vec![
                ("10-a", adjust(|a| res(a).unified = smap(&[("memory.high", "1G")]))),
                ("20-b", adjust(|a| res(a).unified = smap(&[("memory.max", "2G")]))),
            ],
            Expect::Ok(adjust(|a| res(a).unified = smap(&[("memory.high", "1G"), ("memory.max", "2G")])), |c| {
                assert_eq!(c.linux.resources.unified, smap(&[("memory.high", "1G"), ("memory.max", "2G")]));
            }),
        ),
        case(
            "one unified key from two policies conflicts",
            vec![
                ("10-a", adjust(|a| res(a).unified = smap(&[("memory.high", "1G")]))),
                ("20-b", adjust(|a| res(a).unified = smap(&[("memory.high", "3G"), ("memory.low", "1M")]))),
            ],
            Expect::Err(conflict("unified cgroup \"memory.high\"", "10-a", "20-b")),
        ),
        case(
            "hugepage limits are owned per page size and appended",
            vec![
                ("10-a", adjust(|a| res(a).hugepage_limits = vec![hugepage("2MB", 10)])),
                ("20-b", adjust(|a| res(a).hugepage_limits = vec![hugepage("1GB", 1)])),
            ],
            Expect::Ok(adjust(|a| res(a).hugepage_limits = vec![hugepage("2MB", 10), hugepage("1GB", 1)]), |c| {
                let limits = &c.linux.resources.hugepage_limits;
                assert_eq!(*limits, [hugepage("2MB", 5), hugepage("2MB", 10), hugepage("1GB", 1)]);
            }),
        ),
        case(
            "one hugepage size from two policies conflicts",
            vec![
                ("10-a", adjust(|a| res(a).hugepage_limits = vec![hugepage("2MB", 10)])),
                ("20-b", adjust(|a| res(a).hugepage_limits = vec![hugepage("2MB", 20)])),
            ],
            Expect::Err(conflict("hugepage limit \"2MB\"", "10-a", "20-b")),
        ),
        case(
            "device cgroup rules and class fields",
            vec![
                (
                    "10-a",
                    adjust(|a| {
                        res(a).devices =
                            vec![pb::LinuxDeviceCgroup { allow: true, access: "rw".into(), ..Default::default() }];
                        res(a).blockio_class = strv("gold");
                    }),
                ),
                (
                    "20-b",
                    adjust(|a| {
                        res(a).devices =
                            vec![pb::LinuxDeviceCgroup { allow: false, access: "m".into(), ..Default::default() }];
                        res(a).rdt_class = strv("silver");
                        res(a).pids = some(pb::LinuxPids { limit: 64, ..Default::default() });
                    }),
                ),
            ],
            Expect::Ok(
                adjust(|a| {
                    res(a).devices = vec![
                        pb::LinuxDeviceCgroup { allow: true, access: "rw".into(), ..Default::default() },
                        pb::LinuxDeviceCgroup { allow: false, access: "m".into(), ..Default::default() },
                    ];
                    res(a).blockio_class = strv("gold");
                    res(a).rdt_class = strv("silver");
                    res(a).pids = some(pb::LinuxPids { limit: 64, ..Default::default() });
                }),
                |c| {
                    assert_eq!(c.linux.resources.devices.len(), 2);
                    assert_eq!(c.linux.resources.rdt_class, strv("silver"));
                    assert_eq!(c.linux.resources.pids.limit, 64);
                },
            ),
        ),
        // ---- rlimits, namespaces, sysctl, net devices
        case(
            "rlimits are owned per type",
            vec![
                ("10-a", adjust(|a| a.rlimits = vec![rlimit("RLIMIT_NOFILE", 4096, 1024)])),
                ("20-b", adjust(|a| a.rlimits = vec![rlimit("RLIMIT_NPROC", 100, 100)])),
            ],
            Expect::Ok(
                adjust(|a| a.rlimits = vec![rlimit("RLIMIT_NOFILE", 4096, 1024), rlimit("RLIMIT_NPROC", 100, 100)]),
                |c| {
                    let types: Vec<_> = c.rlimits.iter().map(|l| l.type_.as_str()).collect();
                    assert_eq!(types, ["RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_NPROC"]);
                },
            ),
        ),
        case(
            "one rlimit type from two policies conflicts",
            vec![
                ("10-a", adjust(|a| a.rlimits = vec![rlimit("RLIMIT_NOFILE", 4096, 1024)])),
                ("20-b", adjust(|a| a.rlimits = vec![rlimit("RLIMIT_NOFILE", 8192, 1024)])),
            ],
            Expect::Err(conflict("rlimit \"RLIMIT_NOFILE\"", "10-a", "20-b")),
        ),
        case(
            "namespaces are replaced and removed by type",
            vec![
                ("10-a", adjust(|a| linux(a).namespaces = vec![ns("network", "/var/run/netns/a")])),
                ("20-b", adjust(|a| linux(a).namespaces = vec![ns("-pid", "")])),
            ],
            Expect::Ok(
                adjust(|a| linux(a).namespaces = vec![ns("network", "/var/run/netns/a"), ns("-pid", "")]),
                |c| {
                    assert_eq!(c.linux.namespaces, [ns("network", "/var/run/netns/a"), ns("ipc", "")]);
                },
            ),
        ),
        case(
            "removing a namespace another policy set conflicts",
            vec![
                ("10-a", adjust(|a| linux(a).namespaces = vec![ns("network", "/var/run/netns/a")])),
                ("20-b", adjust(|a| linux(a).namespaces = vec![ns("-network", "")])),
            ],
            Expect::Err(conflict("namespace \"network\"", "10-a", "20-b")),
        ),
        case(
            "sysctls are set and removed by key",
            vec![
                ("10-a", adjust(|a| linux(a).sysctl = smap(&[("net.core.somaxconn", "1024")]))),
                ("20-b", adjust(|a| linux(a).sysctl = smap(&[("-net.ipv4.ip_forward", "")]))),
            ],
            Expect::Ok(
                adjust(|a| linux(a).sysctl = smap(&[("net.core.somaxconn", "1024"), ("-net.ipv4.ip_forward", "")])),
                |c| {
                    // A removal alone leaves the working container as it was.
                    assert_eq!(c.linux.sysctl, smap(&[("net.ipv4.ip_forward", "0"), ("net.core.somaxconn", "1024")]));
                },
            ),
        ),
        case(
            "one sysctl from two policies conflicts",
            vec![
                ("10-a", adjust(|a| linux(a).sysctl = smap(&[("net.core.somaxconn", "1024")]))),
                ("20-b", adjust(|a| linux(a).sysctl = smap(&[("net.core.somaxconn", "4096")]))),
            ],
            Expect::Err(conflict("sysctl \"net.core.somaxconn\"", "10-a", "20-b")),
        ),
        case(
            "net devices: remove and set in one reply overrides",
            vec![
                ("10-a", adjust(|a| linux(a).net_devices = [("eth1".to_string(), netdev("net1"))].into())),
                (
                    "20-b",
                    adjust(|a| {
                        linux(a).net_devices =
                            [("-eth1".to_string(), netdev("")), ("eth1".to_string(), netdev("net2"))].into()
                    }),
                ),
            ],
            Expect::Ok(
                adjust(|a| {
                    linux(a).net_devices =
                        [("-eth1".to_string(), pb::LinuxNetDevice::default()), ("eth1".to_string(), netdev("net2"))]
                            .into()
                }),
                |c| assert_eq!(c.linux.net_devices, [("eth1".to_string(), netdev("net2"))].into()),
            ),
        ),
        case(
            "one net device from two policies conflicts",
            vec![
                ("10-a", adjust(|a| linux(a).net_devices = [("eth1".to_string(), netdev("net1"))].into())),
                ("20-b", adjust(|a| linux(a).net_devices = [("eth1".to_string(), netdev("net9"))].into())),
            ],
            Expect::Err(conflict("net device \"eth1\"", "10-a", "20-b")),
        ),
        // ---- RDT
        case(
            "an RDT removal replaces earlier RDT settings",
            vec![
                (
                    "10-a",
                    adjust(|a| {
                        let rdt = linux(a).rdt.mut_or_insert_default();
                        rdt.clos_id = strv("gold");
                        rdt.enable_monitoring = some(pb::OptionalBool { value: true, ..Default::default() });
                    }),
                ),
                ("20-b", adjust(|a| linux(a).rdt.mut_or_insert_default().remove = true)),
            ],
            Expect::Ok(adjust(|a| linux(a).rdt.mut_or_insert_default().remove = true), |c| {
                assert!(c.linux.rdt.is_none(), "the runtime leaves the container's RDT alone");
            }),
        ),
        case(
            "RDT removed by B, then set by C, conflicts with B",
            vec![
                ("10-a", adjust(|a| linux(a).rdt.mut_or_insert_default().clos_id = strv("gold"))),
                ("20-b", adjust(|a| linux(a).rdt.mut_or_insert_default().remove = true)),
                ("30-c", adjust(|a| linux(a).rdt.mut_or_insert_default().clos_id = strv("bronze"))),
            ],
            Expect::Err(conflict("RDT CLOS id", "20-b", "30-c")),
        ),
        case(
            "RDT removed and set in one reply",
            vec![
                ("10-a", adjust(|a| linux(a).rdt.mut_or_insert_default().clos_id = strv("gold"))),
                (
                    "20-b",
                    adjust(|a| {
                        let rdt = linux(a).rdt.mut_or_insert_default();
                        rdt.remove = true;
                        rdt.clos_id = strv("silver");
                    }),
                ),
            ],
            Expect::Ok(adjust(|a| linux(a).rdt.mut_or_insert_default().clos_id = strv("silver")), |_| {}),
        ),
        // ---- CDI devices and the other simple fields
        case(
            "different CDI devices go to the reply only",
            vec![
                ("10-a", adjust(|a| a.CDI_devices = vec![cdi("vendor.com/gpu=0")])),
                ("20-b", adjust(|a| a.CDI_devices = vec![cdi("vendor.com/gpu=1")])),
            ],
            Expect::Ok(adjust(|a| a.CDI_devices = vec![cdi("vendor.com/gpu=0"), cdi("vendor.com/gpu=1")]), |c| {
                assert!(c.CDI_devices.is_empty());
            }),
        ),
        case(
            "one CDI device from two policies conflicts",
            vec![
                ("10-a", adjust(|a| a.CDI_devices = vec![cdi("vendor.com/gpu=0")])),
                ("20-b", adjust(|a| a.CDI_devices = vec![cdi("vendor.com/gpu=0")])),
            ],
            Expect::Err(conflict("CDI device \"vendor.com/gpu=0\"", "10-a", "20-b")),
        ),
        case(
            "simple linux fields from different policies",
            vec![
                (
                    "10-a",
                    adjust(|a| {
                        linux(a).cgroups_path = "/kubepods/a".into();
                        linux(a).oom_score_adj = some(pb::OptionalInt { value: -500, ..Default::default() });
                    }),
                ),
                (
                    "20-b",
                    adjust(|a| {
                        linux(a).scheduler = some(pb::LinuxScheduler { nice: 5, ..Default::default() });
                        linux(a).memory_policy =
                            some(pb::LinuxMemoryPolicy { nodes: "0-1".into(), ..Default::default() });
                    }),
                ),
            ],
            Expect::Ok(
                adjust(|a| {
                    linux(a).cgroups_path = "/kubepods/a".into();
                    linux(a).oom_score_adj = some(pb::OptionalInt { value: -500, ..Default::default() });
                    linux(a).scheduler = some(pb::LinuxScheduler { nice: 5, ..Default::default() });
                    linux(a).memory_policy = some(pb::LinuxMemoryPolicy { nodes: "0-1".into(), ..Default::default() });
                }),
                |c| {
                    assert_eq!(c.linux.cgroups_path, "/kubepods/a");
                    assert_eq!(c.linux.oom_score_adj.value, -500);
                    assert_eq!(c.linux.scheduler.nice, 5);
                },
            ),
        ),
        case(
            "the scheduler from two policies conflicts",
            vec![
                ("10-a", adjust(|a| linux(a).scheduler = some(pb::LinuxScheduler { nice: 5, ..Default::default() }))),
                ("20-b", adjust(|a| linux(a).scheduler = some(pb::LinuxScheduler { nice: 1, ..Default::default() }))),
            ],
            Expect::Err(conflict("scheduler", "10-a", "20-b")),
        ),
        // ---- updates and evictions
        case(
            "updates of two other containers merge per container, ignore_failure ANDed",
            vec![
                (
                    "10-a",
                    others(
                        vec![
                            update("ctr1", true, |r| r.memory.mut_or_insert_default().limit = i64v(100)),
                            update("ctr2", true, |r| r.cpu.mut_or_insert_default().shares = u64v(10)),
                        ],
                        vec![],
                    ),
                ),
                (
                    "20-b",
                    others(
                        vec![
                            update("ctr2", true, |r| r.memory.mut_or_insert_default().limit = i64v(200)),
                            update("ctr1", false, |r| r.cpu.mut_or_insert_default().shares = u64v(20)),
                        ],
                        vec![],
                    ),
                ),
            ],
            Expect::Ok(
                others(
                    vec![
                        update("ctr1", false, |r| {
                            r.memory.mut_or_insert_default().limit = i64v(100);
                            r.cpu.mut_or_insert_default().shares = u64v(20);
                        }),
                        update("ctr2", true, |r| {
                            r.cpu.mut_or_insert_default().shares = u64v(10);
                            r.memory.mut_or_insert_default().limit = i64v(200);
                        }),
                    ],
                    vec![],
                ),
                |_| {},
            ),
        ),
        case(
            "an update of the container being created is an error",
            vec![(
                "10-a",
                others(vec![update("ctr0", true, |r| r.cpu.mut_or_insert_default().shares = u64v(1))], vec![]),
            )],
            Expect::Err(MergeError::UpdatesCreatedContainer { policy: "10-a".into(), container: "ctr0".into() }),
        ),
        case(
            "a conflicting update fails naming the container",
            vec![
                (
                    "10-a",
                    others(vec![update("ctr1", false, |r| r.memory.mut_or_insert_default().limit = i64v(1))], vec![]),
                ),
                (
                    "20-b",
                    others(vec![update("ctr1", false, |r| r.memory.mut_or_insert_default().limit = i64v(2))], vec![]),
                ),
            ],
            Expect::Err(conflict("memory limit of container \"ctr1\"", "10-a", "20-b")),
        ),
        case(
            // The runtime skips a failing update marked ignore_failure; claims
            // it made before the conflict stay (C then conflicts with B).
            "a conflicting update with ignore_failure is skipped, earlier claims stay",
            vec![
                (
                    "10-a",
                    others(vec![update("ctr1", false, |r| r.cpu.mut_or_insert_default().shares = u64v(1))], vec![]),
                ),
                (
                    "20-b",
                    others(
                        vec![update("ctr1", true, |r| {
                            r.memory.mut_or_insert_default().reservation = i64v(5);
                            r.cpu.mut_or_insert_default().shares = u64v(2);
                        })],
                        vec![],
                    ),
                ),
                (
                    "30-c",
                    others(
                        vec![update("ctr1", false, |r| r.memory.mut_or_insert_default().reservation = i64v(9))],
                        vec![],
                    ),
                ),
            ],
            Expect::Err(conflict("memory reservation of container \"ctr1\"", "20-b", "30-c")),
        ),
        case(
            "evictions are kept, once per container",
            vec![
                ("10-a", others(vec![], vec![eviction("ctr1", "oom risk")])),
                ("20-b", others(vec![], vec![eviction("ctr1", "other"), eviction("ctr2", "noisy")])),
            ],
            Expect::Ok(others(vec![], vec![eviction("ctr1", "oom risk"), eviction("ctr2", "noisy")]), |_| {}),
        ),
        case(
            "empty replies adjust nothing",
            vec![("10-a", pb::CreateContainerResponse::default()), ("20-b", adjust(|_| {}))],
            Expect::Ok(pb::CreateContainerResponse::default(), |c| {
                assert_eq!(c.annotations, smap(&[("orig", "1")]));
                assert_eq!(c.args, strings(&["sh", "-c", "sleep 1"]));
            }),
        ),
        // ---- invalid output
        case(
            "a mount without destination is invalid",
            vec![("10-a", adjust(|a| a.mounts = vec![mount("", "/x")]))],
            Expect::Err(invalid("10-a", "adjust.mounts[0]: an empty destination")),
        ),
        case(
            "a removal marker on an rlimit is invalid",
            vec![("10-a", adjust(|a| a.rlimits = vec![rlimit("-RLIMIT_NOFILE", 1, 1)]))],
            Expect::Err(invalid(
                "10-a",
                "adjust.rlimits[0]: type \"-RLIMIT_NOFILE\" starts with '-', but NRI cannot remove these",
            )),
        ),
        case(
            "an empty argument after the first is invalid",
            vec![("10-a", adjust(|a| a.args = strings(&["a", ""])))],
            Expect::Err(invalid("10-a", "adjust.args[1]: empty (only args[0] may be, to replace earlier args)")),
        ),
        case(
            "a bare removal marker on an annotation is invalid",
            vec![("10-a", adjust(|a| a.annotations = smap(&[("-", "")])))],
            Expect::Err(invalid("10-a", "adjust.annotations: removal marker \"-\" names no key")),
        ),
        case(
            "an update without container id is invalid",
            vec![("10-a", others(vec![update("", true, |_| {})], vec![]))],
            Expect::Err(invalid("10-a", "update[0].container_id: no container id")),
        ),
        case(
            "an eviction without container id is invalid",
            vec![("10-a", others(vec![], vec![eviction("", "why")]))],
            Expect::Err(invalid("10-a", "evict[0].container_id: no container id")),
        ),
    ]
}

#[test]
fn create_container_table() {
    let cases = cases();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    for case in cases {
        run(case);
    }
}

// ------------------------------------------------- create: beyond the table

#[test]
fn each_policy_sees_the_container_as_left_by_the_ones_before() {
    let req_merge = request();
    let mut merge = CreateMerge::new(&req_merge);
    assert_eq!(merge.pod().name, "web");
    merge.apply("10-a", &adjust(|a| a.env = vec![kv("HOME", "/home/a")])).unwrap();
    assert_eq!(merge.container().env, strings(&["PATH=/bin", "LANG=C", "HOME=/home/a"]));
    merge.apply("20-b", &adjust(|a| a.mounts = vec![unmount("/data")])).unwrap();
    assert_eq!(mounts_of(merge.container()), [("/logs", "/srv/logs"), ("/tmp", "tmpfs")]);
    // An annotation only removed is still shown, as the runtime shows it.
    merge.apply("30-c", &adjust(|a| a.annotations = smap(&[("-orig", "")]))).unwrap();
    assert_eq!(merge.container().annotations.get("orig").map(String::as_str), Some("1"));
}

#[test]
fn the_runtime_sets_up_the_container_before_the_first_policy() {
    let req = pb::CreateContainerRequest {
        container: some(pb::Container { id: "bare".into(), ..Default::default() }),
        ..Default::default()
    };
    let merge = CreateMerge::new(&req);
    let resources = merge.container().linux.resources.as_ref().expect("resources present");
    assert!(resources.memory.is_some() && resources.cpu.is_some());
    assert!(merge.container().hooks.is_some());
    assert_eq!(merge.finish(), pb::CreateContainerResponse::default());
}

#[test]
fn a_failed_policy_leaves_no_trace() {
    let req_merge = request();
    let mut merge = CreateMerge::new(&req_merge);
    merge.apply("10-a", &adjust(|a| res(a).memory.mut_or_insert_default().limit = i64v(1))).unwrap();
    let failing = adjust(|a| {
        a.annotations = smap(&[("y", "1")]);
        a.mounts = vec![mount("/new", "/b")];
        res(a).memory.mut_or_insert_default().limit = i64v(2);
    });
    let before = merge.clone();
    assert_eq!(merge.apply("20-b", &failing), Err(conflict("memory limit", "10-a", "20-b")));
    assert_eq!(merge, before);
    assert!(!merge.container().annotations.contains_key("y"));
    assert!(!merge.container().mounts.iter().any(|m| m.destination == "/new"));
    // The chain goes on without 20-b; its claims were not recorded either.
    merge.apply("30-c", &adjust(|a| a.annotations = smap(&[("y", "3")]))).unwrap();
    assert_eq!(
        merge.finish(),
        adjust(|a| {
            a.annotations = smap(&[("y", "3")]);
            res(a).memory.mut_or_insert_default().limit = i64v(1);
        })
    );
}

#[test]
fn owners_are_recorded_in_nri_form() {
    let req_merge = request();
    let mut merge = CreateMerge::new(&req_merge);
    merge.apply("10-a", &adjust(|a| a.hooks.mut_or_insert_default().prestart = vec![hook("/a")])).unwrap();
    merge
        .apply(
            "20-b",
            &adjust(|a| {
                a.hooks.mut_or_insert_default().poststop = vec![hook("/b")];
                a.annotations = smap(&[("x", "1")]);
                a.args = strings(&["", "run"]);
            }),
        )
        .unwrap();
    merge.apply("30-c", &adjust(|a| a.hooks.mut_or_insert_default().prestart = vec![hook("/c")])).unwrap();
    merge.apply("40-d", &adjust(|a| linux(a).rdt.mut_or_insert_default().remove = true)).unwrap();
    merge.apply("50-e", &others(vec![update("ctr7", false, |r| r.rdt_class = strv("x"))], vec![])).unwrap();

    let owners = merge.owners();
    let ctr0 = &owners.owners["ctr0"];
    assert_eq!(ctr0.simple[&(pb::Field::OciHooks as i32)], "10-a,20-b,30-c");
    assert_eq!(ctr0.simple[&(pb::Field::Args as i32)], "20-b");
    assert_eq!(ctr0.simple[&(pb::Field::RdtClosID as i32)], "-40-d");
    assert_eq!(ctr0.simple[&(pb::Field::RdtEnableMonitoring as i32)], "-40-d");
    assert_eq!(ctr0.compound[&(pb::Field::Annotations as i32)].owners, smap(&[("x", "20-b")]));
    assert_eq!(owners.owners["ctr7"].simple[&(pb::Field::RdtClass as i32)], "50-e");
}

#[test]
fn the_combined_reply_merged_as_one_plugin_gives_the_same_result() {
    // What the runtime does with nri-wasm's reply: merge it as a single
    // plugin's. It must end where the policies' replies ended.
    let steps = [
        ("10-a", adjust(|a| a.mounts = vec![mount("/data", "/a")])),
        ("20-b", adjust(|a| a.mounts = vec![unmount("/logs")])),
        ("30-c", adjust(|a| a.env = vec![kv("HOME", "/home/c"), kv("-PATH", "")])),
        ("40-d", adjust(|a| linux(a).devices = vec![device("/dev/d", 3, 3), undevice("/dev/fuse")])),
        ("50-e", adjust(|a| a.annotations = smap(&[("-orig", ""), ("orig", "e"), ("-gone", "")]))),
        ("60-f", adjust(|a| linux(a).namespaces = vec![ns("network", "/ns/f"), ns("-ipc", "")])),
        ("70-g", adjust(|a| a.args = strings(&["", "serve"]))),
    ];
    let req_chain = request();
    let mut chain = CreateMerge::new(&req_chain);
    for (policy, reply) in &steps {
        chain.apply(policy, reply).unwrap();
    }
    let seen = chain.container().clone();
    let combined = chain.finish();

    let req_runtime = request();
    let mut runtime = CreateMerge::new(&req_runtime);
    runtime.apply("nri-wasm", &combined).unwrap();
    assert_eq!(*runtime.container(), seen);
    assert_eq!(runtime.finish(), combined);
    assert_eq!(seen.env, strings(&["LANG=C", "HOME=/home/c"]));
    assert_eq!(paths_of(&seen.linux.devices), [("/dev/d", 3)]);
}

#[test]
fn conflicts_read_well() {
    let e = conflict("annotation \"x\"", "10-a", "20-b");
    assert_eq!(e.to_string(), "policies \"10-a\" and \"20-b\" both tried to set annotation \"x\"");
    let e = MergeError::UpdatesCreatedContainer { policy: "10-a".into(), container: "ctr0".into() };
    assert_eq!(e.to_string(), "policy \"10-a\" asked to update container \"ctr0\" during its creation");
    assert_eq!(
        invalid("10-a", "update[0].container_id: no container id").to_string(),
        "invalid output of policy \"10-a\": update[0].container_id: no container id"
    );
}

#[test]
fn validation_names_the_field() {
    let bad = [
        (adjust(|a| a.env = vec![kv("A=B", "1")]), "adjust.env[0].key: \"A=B\": a name cannot contain '='"),
        (adjust(|a| a.env = vec![kv("", "1")]), "adjust.env[0]: an empty name"),
        (adjust(|a| linux(a).devices = vec![device("", 1, 1)]), "adjust.linux.devices[0]: an empty path"),
        (adjust(|a| linux(a).namespaces = vec![ns("-", "")]), "adjust.linux.namespaces[0]: removal marker \"-\" names no type"),
        (adjust(|a| linux(a).sysctl = smap(&[("", "1")])), "adjust.linux.sysctl: an empty key"),
        (adjust(|a| a.CDI_devices = vec![cdi("-vendor.com/gpu=0")]), "adjust.CDI_devices[0]: name \"-vendor.com/gpu=0\" starts with '-', but NRI cannot remove these"),
        (adjust(|a| a.hooks.mut_or_insert_default().poststop = vec![hook("-/bin/x")]), "adjust.hooks.poststop[0]: path \"-/bin/x\" starts with '-', but NRI cannot remove these"),
        (adjust(|a| res(a).hugepage_limits = vec![hugepage("", 1)]), "adjust.linux.resources.hugepage_limits[0]: an empty page_size"),
        (adjust(|a| a.rlimits = vec![rlimit("", 1, 1)]), "adjust.rlimits[0]: an empty type"),
        (
            others(vec![update("ctr1", false, |r| r.unified = smap(&[("-memory.max", "1")]))], vec![]),
            "update[0] (ctr1).linux.resources.unified: key \"-memory.max\" starts with '-', but NRI cannot remove these",
        ),
    ];
    for (reply, reason) in bad {
        assert_eq!(validate_create_reply("10-a", &reply, &Unknown), Err(invalid("10-a", reason)));
    }
    let good = adjust(|a| {
        a.args = strings(&["", "x"]);
        a.env = vec![kv("-PATH", "")];
        linux(a).namespaces = vec![ns("-net", "")];
    });
    assert_eq!(validate_create_reply("10-a", &good, &Unknown), Ok(()));
}

// ---------------------------------------------------------- UpdateContainer

fn update_request(pids: Option<i64>) -> pb::UpdateContainerRequest {
    pb::UpdateContainerRequest {
        container: some(pb::Container { id: "ctr0".into(), ..Default::default() }),
        linux_resources: some(pb::LinuxResources {
            memory: some(pb::LinuxMemory { limit: i64v(1 << 30), ..Default::default() }),
            cpu: some(pb::LinuxCPU { shares: u64v(1024), quota: i64v(50_000), ..Default::default() }),
            pids: MessageField::from_option(pids.map(|limit| pb::LinuxPids { limit, ..Default::default() })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn update_reply(update: Vec<pb::ContainerUpdate>, evict: Vec<pb::ContainerEviction>) -> pb::UpdateContainerResponse {
    pb::UpdateContainerResponse { update, evict, ..Default::default() }
}

#[test]
fn update_container_applies_on_the_requested_resources_and_answers_it_last() {
    let mut merge = UpdateMerge::new(&update_request(None));
    merge
        .apply(
            "10-a",
            &update_reply(
                vec![
                    update("ctr0", false, |r| r.cpu.mut_or_insert_default().shares = u64v(2048)),
                    update("ctr9", true, |r| r.memory.mut_or_insert_default().limit = i64v(5)),
                ],
                vec![eviction("ctr8", "make room")],
            ),
        )
        .unwrap();
    assert_eq!(merge.resources().cpu.shares, u64v(2048));
    merge
        .apply(
            "20-b",
            &update_reply(
                vec![update("ctr0", false, |r| r.memory.mut_or_insert_default().limit = i64v(2 << 30))],
                vec![],
            ),
        )
        .unwrap();

    let seen = merge.resources();
    assert_eq!(seen.memory.limit, i64v(2 << 30));
    assert_eq!(seen.cpu.shares, u64v(2048));
    assert_eq!(seen.cpu.quota, i64v(50_000), "untouched request fields stay");
    assert_eq!(
        merge.finish(),
        update_reply(
            vec![
                update("ctr9", true, |r| r.memory.mut_or_insert_default().limit = i64v(5)),
                // Only the policies' changes: the runtime applies them to the request itself.
                update("ctr0", false, |r| {
                    r.cpu.mut_or_insert_default().shares = u64v(2048);
                    r.memory.mut_or_insert_default().limit = i64v(2 << 30);
                }),
            ],
            vec![eviction("ctr8", "make room")],
        )
    );
}

#[test]
fn update_container_conflicts_and_ignored_failures() {
    let mut merge = UpdateMerge::new(&update_request(None));
    merge
        .apply(
            "10-a",
            &update_reply(vec![update("ctr0", true, |r| r.cpu.mut_or_insert_default().shares = u64v(1))], vec![]),
        )
        .unwrap();
    let before = merge.clone();
    let clash = update_reply(vec![update("ctr0", false, |r| r.cpu.mut_or_insert_default().shares = u64v(2))], vec![]);
    assert_eq!(merge.apply("20-b", &clash), Err(conflict("CPU shares of container \"ctr0\"", "10-a", "20-b")));
    assert_eq!(merge, before);
    // The same update marked ignore_failure is skipped instead.
    let ignored = update_reply(vec![update("ctr0", true, |r| r.cpu.mut_or_insert_default().shares = u64v(2))], vec![]);
    merge.apply("20-b", &ignored).unwrap();
    assert_eq!(merge.resources().cpu.shares, u64v(1));
    assert_eq!(merge.owners().owners["ctr0"].simple[&(pb::Field::CPUShares as i32)], "10-a");
    assert_eq!(merge.finish().update, [update("ctr0", true, |r| r.cpu.mut_or_insert_default().shares = u64v(1))]);
}

#[test]
fn update_container_with_a_pids_limit_lets_only_one_policy_update_it() {
    // The runtime claims the pids limit for every update of the requested
    // container when the request has one, whatever the update changes.
    let mut merge = UpdateMerge::new(&update_request(Some(100)));
    merge
        .apply(
            "10-a",
            &update_reply(vec![update("ctr0", false, |r| r.cpu.mut_or_insert_default().shares = u64v(1))], vec![]),
        )
        .unwrap();
    let second =
        update_reply(vec![update("ctr0", false, |r| r.memory.mut_or_insert_default().limit = i64v(1))], vec![]);
    assert_eq!(merge.apply("20-b", &second), Err(conflict("pids limit of container \"ctr0\"", "10-a", "20-b")));
}

#[test]
fn update_container_untouched_is_not_answered() {
    let mut merge = UpdateMerge::new(&update_request(None));
    merge.apply("10-a", &update_reply(vec![], vec![eviction("ctr3", "x")])).unwrap();
    merge.apply("20-b", &update_reply(vec![update("ctr4", false, |r| r.rdt_class = strv("bronze"))], vec![])).unwrap();
    assert_eq!(*merge.resources(), *update_request(None).linux_resources);
    assert_eq!(
        merge.finish(),
        update_reply(vec![update("ctr4", false, |r| r.rdt_class = strv("bronze"))], vec![eviction("ctr3", "x")])
    );
    let mut merge = UpdateMerge::new(&update_request(None));
    let bad = update_reply(vec![], vec![eviction("", "x")]);
    assert_eq!(merge.apply("10-a", &bad), Err(invalid("10-a", "evict[0].container_id: no container id")));
}

#[test]
fn update_pids_in_updates_are_dropped_like_the_runtime_drops_them() {
    let mut merge = UpdatesMerge::new();
    let pids = update("ctr1", false, |r| {
        r.pids = some(pb::LinuxPids { limit: 5, ..Default::default() });
        r.hugepage_limits = vec![hugepage("2MB", 1)];
    });
    merge.apply("10-a", &[pids], &[]).unwrap();
    let (updates, _) = merge.finish();
    assert_eq!(updates, [update("ctr1", false, |r| r.hugepage_limits = vec![hugepage("2MB", 1)])]);
}

// ------------------------------------------------- StopContainer, plain lists

#[test]
fn stop_container_merges_updates_of_any_container() {
    let req = pb::StopContainerRequest {
        container: some(pb::Container { id: "ctr0".into(), ..Default::default() }),
        ..Default::default()
    };
    let mut merge = StopMerge::new(&req);
    let a = pb::StopContainerResponse {
        update: vec![update("ctr1", false, |r| r.cpu.mut_or_insert_default().cpus = "0-3".into())],
        ..Default::default()
    };
    let b = pb::StopContainerResponse {
        update: vec![
            update("ctr0", true, |r| r.cpu.mut_or_insert_default().shares = u64v(2)),
            update("ctr1", false, |r| r.cpu.mut_or_insert_default().mems = "0".into()),
        ],
        ..Default::default()
    };
    merge.apply("10-a", &a).unwrap();
    merge.apply("20-b", &b).unwrap();
    let before = merge.clone();
    let c = pb::StopContainerResponse {
        update: vec![update("ctr1", false, |r| r.cpu.mut_or_insert_default().cpus = "4-7".into())],
        ..Default::default()
    };
    assert_eq!(merge.apply("30-c", &c), Err(conflict("cpuset CPUs of container \"ctr1\"", "10-a", "30-c")));
    assert_eq!(merge, before);
    assert_eq!(
        merge.finish().update,
        [
            update("ctr1", false, |r| {
                let cpu = r.cpu.mut_or_insert_default();
                cpu.cpus = "0-3".into();
                cpu.mems = "0".into();
            }),
            update("ctr0", true, |r| r.cpu.mut_or_insert_default().shares = u64v(2)),
        ]
    );
}

#[test]
fn plain_update_lists_merge_with_the_same_rules() {
    let mut merge = UpdatesMerge::new();
    merge
        .apply(
            "10-a",
            &[update("ctr1", true, |r| r.unified = smap(&[("memory.high", "1G")]))],
            &[eviction("ctr5", "first")],
        )
        .unwrap();
    merge
        .apply(
            "20-b",
            &[
                update("ctr2", false, |r| r.blockio_class = strv("slow")),
                update("ctr1", true, |r| r.unified = smap(&[("memory.max", "2G")])),
            ],
            &[eviction("ctr5", "second")],
        )
        .unwrap();
    let clash = [update("ctr1", false, |r| r.unified = smap(&[("memory.high", "3G")]))];
    assert_eq!(
        merge.apply("30-c", &clash, &[]),
        Err(conflict("unified cgroup \"memory.high\" of container \"ctr1\"", "10-a", "30-c"))
    );
    assert_eq!(
        merge.apply("30-c", &[update("", false, |_| {})], &[]),
        Err(invalid("30-c", "update[0].container_id: no container id"))
    );
    let (updates, evictions) = merge.finish();
    assert_eq!(
        updates,
        [
            update("ctr1", true, |r| r.unified = smap(&[("memory.high", "1G"), ("memory.max", "2G")])),
            update("ctr2", false, |r| r.blockio_class = strv("slow")),
        ]
    );
    assert_eq!(evictions, [eviction("ctr5", "first")]);
}
