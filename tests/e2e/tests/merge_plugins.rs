//! Merge acceptance: N policies in one nri-wasm chain end up where the same
//! N replies would end up as N separate NRI plugins.
//!
//! Every case is a list of replies in the replay guest's text format. Each
//! case runs twice:
//! - (a) "N separate plugins": the replies, parsed here into protobuf, are
//!   folded by the simulator's reference runtime (`nri_sim::reference`) as
//!   the replies of plugins `10-a`, `20-b`, ...;
//! - (b) "one nri-wasm chain": a chain of N real replay policies with those
//!   names runs behind the real host, driven by the simulator over its
//!   socket; the one combined reply is then folded by the reference runtime
//!   as the reply of the single plugin `nri-wasm`.
//!
//! Both must give the same final container (as the next plugin would see it
//! and as the runtime would create it), the same updates and evictions; or
//! both must fail, naming the same plugins/policies. Each case also checks
//! its expected outcome against (a), so that the table states the rules.

use std::sync::Arc;

use nri_sim::reference::{CreateResult, RefError, ReferenceRuntime, UpdatesResult};
use nri_sim::{PluginConn, RuntimeProfile, SimError};
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::spec::manifest::{Mode, OnError, PolicySpec};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, roomy, shared_loader, Harness};
use protobuf::MessageField;

const NAMES: [&str; 4] = ["10-a", "20-b", "30-c", "40-d"];
/// How the runtime names nri-wasm when it merges the combined reply.
const HOST_PLUGIN: &str = "nri-wasm";
const CREATED: &str = "ctr-new";

// ---------------------------------------------------------------------------
// The reply text format (same as tests/guests/replay), parsed into protobuf.

fn word(w: &str) -> String {
    if w == "\"\"" {
        String::new()
    } else {
        w.to_string()
    }
}

fn kv(w: &str) -> (String, String) {
    match w.split_once('=') {
        Some((k, v)) => (k.into(), v.into()),
        None => (w.into(), String::new()),
    }
}

fn n<T: std::str::FromStr>(w: Option<&&str>) -> T {
    w.and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("expected a number, got {w:?}"))
}

fn resources_of(a: &mut pb::ContainerAdjustment) -> &mut pb::LinuxResources {
    a.linux.mut_or_insert_default().resources.mut_or_insert_default()
}

/// A reply as the text says, or `Err(reason)` for `deny`.
fn parse(text: &str) -> Result<pb::CreateContainerResponse, String> {
    let mut resp = pb::CreateContainerResponse::default();
    for line in text.split(['\n', ';']).map(str::trim).filter(|l| !l.is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let (verb, rest) = (w[0], &w[1..]);
        match verb {
            "deny" => return Err(rest.join(" ")),
            "evict" => resp.evict.push(pb::ContainerEviction {
                container_id: rest[0].into(),
                reason: rest[1..].join(" "),
                ..Default::default()
            }),
            "update" => resp.update.push(parse_update(rest)),
            _ => adjust_line(resp.adjust.mut_or_insert_default(), verb, rest),
        }
    }
    Ok(resp)
}

fn adjust_line(a: &mut pb::ContainerAdjustment, verb: &str, rest: &[&str]) {
    match verb {
        "annotation" => {
            let (k, v) = kv(rest[0]);
            a.annotations.insert(k, v);
        }
        "env" => {
            let (key, value) = kv(rest[0]);
            a.env.push(pb::KeyValue { key, value, ..Default::default() });
        }
        "mount" => {
            let mut m = pb::Mount { destination: rest[0].into(), ..Default::default() };
            if !rest[0].starts_with('-') {
                m.type_ = "bind".into();
                m.source = rest[1].into();
                m.options = rest.get(2).map(|o| o.split(',').map(String::from).collect()).unwrap_or_default();
            }
            a.mounts.push(m);
        }
        "device" => {
            let mut d = pb::LinuxDevice { path: rest[0].into(), ..Default::default() };
            if !rest[0].starts_with('-') {
                d.type_ = rest[1].into();
                d.major = n(rest.get(2));
                d.minor = n(rest.get(3));
            }
            a.linux.mut_or_insert_default().devices.push(d);
        }
        "rlimit" => a.rlimits.push(pb::POSIXRlimit {
            type_: rest[0].into(),
            soft: n(rest.get(1)),
            hard: n(rest.get(2)),
            ..Default::default()
        }),
        "hook" => {
            let h = pb::Hook {
                path: rest[1].into(),
                args: rest[2..].iter().map(|a| word(a)).collect(),
                ..Default::default()
            };
            let hooks = a.hooks.mut_or_insert_default();
            match rest[0] {
                "prestart" => hooks.prestart.push(h),
                "create-runtime" => hooks.create_runtime.push(h),
                "create-container" => hooks.create_container.push(h),
                "start-container" => hooks.start_container.push(h),
                "poststart" => hooks.poststart.push(h),
                "poststop" => hooks.poststop.push(h),
                other => panic!("unknown hook kind {other}"),
            }
        }
        "args" => a.args = rest.iter().map(|w| word(w)).collect(),
        "memory-limit" => {
            resources_of(a).memory.mut_or_insert_default().limit =
                MessageField::some(pb::OptionalInt64 { value: n(rest.first()), ..Default::default() })
        }
        "cpu-shares" => {
            resources_of(a).cpu.mut_or_insert_default().shares =
                MessageField::some(pb::OptionalUInt64 { value: n(rest.first()), ..Default::default() })
        }
        "cpuset" => resources_of(a).cpu.mut_or_insert_default().cpus = rest[0].into(),
        "oom-score-adj" => {
            a.linux.mut_or_insert_default().oom_score_adj =
                MessageField::some(pb::OptionalInt { value: n(rest.first()), ..Default::default() })
        }
        "cgroups-path" => a.linux.mut_or_insert_default().cgroups_path = rest[0].into(),
        "cdi" => a.CDI_devices.push(pb::CDIDevice { name: rest[0].into(), ..Default::default() }),
        "hugepage" => resources_of(a).hugepage_limits.push(pb::HugepageLimit {
            page_size: rest[0].into(),
            limit: n(rest.get(1)),
            ..Default::default()
        }),
        "sysctl" => {
            let (k, v) = kv(rest[0]);
            a.linux.mut_or_insert_default().sysctl.insert(k, v);
        }
        "unified" => {
            let (k, v) = kv(rest[0]);
            resources_of(a).unified.insert(k, v);
        }
        other => panic!("unknown instruction {other}"),
    }
}

fn parse_update(rest: &[&str]) -> pb::ContainerUpdate {
    let mut u = pb::ContainerUpdate { container_id: rest[0].into(), ..Default::default() };
    let mut r = pb::LinuxResources::default();
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            "ignore-failure" => u.ignore_failure = true,
            "memory-limit" => {
                i += 1;
                r.memory.mut_or_insert_default().limit =
                    MessageField::some(pb::OptionalInt64 { value: n(rest.get(i)), ..Default::default() });
            }
            "cpu-shares" => {
                i += 1;
                r.cpu.mut_or_insert_default().shares =
                    MessageField::some(pb::OptionalUInt64 { value: n(rest.get(i)), ..Default::default() });
            }
            "cpuset" => {
                i += 1;
                r.cpu.mut_or_insert_default().cpus = rest[i].into();
            }
            other => panic!("unknown update setting {other}"),
        }
        i += 1;
    }
    u.linux.mut_or_insert_default().resources = MessageField::some(r);
    u
}

// ---------------------------------------------------------------------------
// The container, pod and requests.

fn pod() -> pb::PodSandbox {
    pb::PodSandbox { id: "pod-1".into(), name: "web".into(), namespace: "default".into(), ..Default::default() }
}

fn mount(dst: &str, src: &str) -> pb::Mount {
    pb::Mount { destination: dst.into(), source: src.into(), type_: "bind".into(), ..Default::default() }
}

/// A container with annotations, env, mounts and a device of its own.
fn container(id: &str) -> pb::Container {
    let mut c = pb::Container {
        id: id.into(),
        pod_sandbox_id: "pod-1".into(),
        name: "app".into(),
        args: vec!["/app".into(), "--serve".into()],
        env: vec!["PATH=/bin".into(), "HOME=/root".into(), "OLD=1".into()],
        mounts: vec![mount("/etc/hosts", "/run/hosts"), mount("/data", "/srv/data")],
        ..Default::default()
    };
    c.annotations.insert("team".into(), "payments".into());
    c.annotations.insert("io.kubernetes.cri.container-type".into(), "container".into());
    c.linux.mut_or_insert_default().devices.push(pb::LinuxDevice {
        path: "/dev/fuse".into(),
        type_: "c".into(),
        major: 10,
        minor: 229,
        ..Default::default()
    });
    c
}

fn create_request() -> pb::CreateContainerRequest {
    pb::CreateContainerRequest {
        pod: MessageField::some(pod()),
        container: MessageField::some(container(CREATED)),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------
// Running a case both ways.

/// How a run ended: a result, or the error text and the plugins it names.
#[derive(Debug, Clone, PartialEq)]
enum Outcome<T> {
    Merged(T),
    Failed(String),
}

use nri_wasm_e2e::{shared_engine as engine, test_facts as facts};

/// A chain of replay policies named 10-a, 20-b, ... with these replies.
fn chain(replies: &[&str]) -> Chain {
    let policies = replies
        .iter()
        .zip(NAMES)
        .map(|(text, name)| {
            let spec = PolicySpec {
                settings: (*text).into(),
                on_error: OnError::Fail,
                mode: Mode::Enforce,
                limits: roomy(),
                ..PolicySpec::granting_all(name, guests::REPLAY)
            };
            shared_loader().load(&spec, &Arc::new(facts())).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect();
    Chain::new(policies, ChainSettings::default())
}

fn ref_error(e: RefError) -> String {
    e.to_string()
}

fn sim_error(e: SimError) -> String {
    match e.status() {
        Some(status) => status.message().to_string(),
        None => panic!("the host did not answer: {e}"),
    }
}

/// (a): the replies as separate plugins.
fn separate_create(replies: &[&str]) -> Outcome<CreateResult> {
    let mut run = ReferenceRuntime::create(&create_request());
    for (text, name) in replies.iter().zip(NAMES) {
        let reply = match parse(text) {
            Ok(r) => r,
            Err(reason) => return Outcome::Failed(format!("plugin {name:?} failed the event: {reason}")),
        };
        if let Err(e) = run.apply(name, &reply) {
            return Outcome::Failed(ref_error(e));
        }
    }
    Outcome::Merged(run.result())
}

/// (b): the replies as one chain behind the host; the combined reply merged
/// by the reference runtime as one plugin's.
async fn chained_create(conn: &PluginConn, dispatcher: &PolicyDispatcher, replies: &[&str]) -> Outcome<CreateResult> {
    dispatcher.replace_chain(chain(replies));
    let req = create_request();
    match conn.create_container(&req.pod, &req.container).await {
        Ok(reply) => {
            let mut run = ReferenceRuntime::create(&req);
            match run.apply(HOST_PLUGIN, &reply) {
                Ok(()) => Outcome::Merged(run.result()),
                Err(e) => Outcome::Failed(format!("the runtime refused the combined reply: {e}")),
            }
        }
        Err(e) => Outcome::Failed(sim_error(e)),
    }
}

/// Updates compared without the empty memory/CPU parts the runtime's merge
/// fills in.
fn normal_updates(updates: &[pb::ContainerUpdate]) -> Vec<pb::ContainerUpdate> {
    let mut out = updates.to_vec();
    for u in &mut out {
        if let Some(r) = u.linux.as_mut().and_then(|l| l.resources.as_mut()) {
            if r.memory.as_ref().is_some_and(|m| *m == pb::LinuxMemory::default()) {
                r.memory.clear();
            }
            if r.cpu.as_ref().is_some_and(|c| *c == pb::LinuxCPU::default()) {
                r.cpu.clear();
            }
        }
    }
    out
}

/// What both runs must agree on: the container after the merge, the
/// container as created, the updates and the evictions.
fn comparable(
    r: &CreateResult,
) -> (pb::Container, pb::Container, Vec<pb::ContainerUpdate>, Vec<pb::ContainerEviction>) {
    (r.container.clone(), r.spec.clone(), normal_updates(&r.updates), r.evictions.clone())
}

/// What a case expects.
#[derive(Clone, Copy)]
enum Expect {
    /// Both merge; the check is run on the separate plugins' result.
    Merged(fn(&CreateResult)),
    /// Both fail; the error names these plugins and contains this text.
    Fails(&'static [&'static str], &'static str),
}

struct Case {
    name: &'static str,
    replies: &'static [&'static str],
    expect: Expect,
}

fn spec_annotation<'a>(r: &'a CreateResult, k: &str) -> Option<&'a str> {
    r.spec.annotations.get(k).map(String::as_str)
}

fn spec_mount<'a>(r: &'a CreateResult, dst: &str) -> Option<&'a pb::Mount> {
    r.spec.mounts.iter().find(|m| m.destination == dst)
}

fn update_of<'a>(updates: &'a [pb::ContainerUpdate], id: &str) -> &'a pb::ContainerUpdate {
    updates.iter().find(|u| u.container_id == id).unwrap_or_else(|| panic!("no update of {id}"))
}

fn memory_limit(u: &pb::ContainerUpdate) -> Option<i64> {
    u.linux.resources.memory.limit.as_ref().map(|l| l.value)
}

fn hook_paths(hooks: &[pb::Hook]) -> Vec<&str> {
    hooks.iter().map(|h| h.path.as_str()).collect()
}

const CREATE_CASES: &[Case] = &[
    Case {
        name: "disjoint annotations and env",
        replies: &["annotation a.example/one=1; env A=1", "annotation b.example/two=2; env B=2"],
        expect: Expect::Merged(|r| {
            assert_eq!(spec_annotation(r, "a.example/one"), Some("1"));
            assert_eq!(spec_annotation(r, "b.example/two"), Some("2"));
            assert_eq!(spec_annotation(r, "team"), Some("payments"));
            assert_eq!(r.spec.env, ["PATH=/bin", "HOME=/root", "OLD=1", "A=1", "B=2"]);
        }),
    },
    Case {
        name: "disjoint mounts, devices, rlimits",
        replies: &[
            "mount /m1 /src/1; device /dev/a c 1 11; rlimit RLIMIT_NOFILE 10 20",
            "mount /m2 /src/2 ro,nosuid; device /dev/b c 1 12; rlimit RLIMIT_NPROC 5 6",
        ],
        expect: Expect::Merged(|r| {
            assert_eq!(spec_mount(r, "/m1").map(|m| m.source.as_str()), Some("/src/1"));
            assert_eq!(spec_mount(r, "/m2").map(|m| m.options.clone()), Some(vec!["ro".into(), "nosuid".into()]));
            let devices: Vec<_> = r.spec.linux.devices.iter().map(|d| d.path.as_str()).collect();
            assert_eq!(devices, ["/dev/fuse", "/dev/a", "/dev/b"]);
            assert_eq!(r.spec.rlimits.len(), 2);
        }),
    },
    Case {
        name: "the same annotation set twice conflicts",
        replies: &["annotation k=1", "annotation k=2"],
        expect: Expect::Fails(&["10-a", "20-b"], "k"),
    },
    Case {
        name: "an annotation removed and set by one policy overrides",
        replies: &["annotation k=1", "annotation -k; annotation k=2"],
        expect: Expect::Merged(|r| assert_eq!(spec_annotation(r, "k"), Some("2"))),
    },
    Case {
        name: "an annotation only removed keeps its owner",
        replies: &["annotation k=1", "annotation -k", "annotation k=3"],
        expect: Expect::Fails(&["10-a", "30-c"], "k"),
    },
    Case {
        name: "a mount removed, then set by another policy, conflicts with the remover",
        replies: &["mount /x /s1", "mount -/x", "mount /x /s3"],
        expect: Expect::Fails(&["20-b", "30-c"], "/x"),
    },
    Case {
        name: "a mount removed and set again by the same policy",
        replies: &["mount /x /s1", "mount -/x; mount /x /s2"],
        expect: Expect::Merged(|r| assert_eq!(spec_mount(r, "/x").map(|m| m.source.as_str()), Some("/s2"))),
    },
    Case {
        name: "an env variable removed, then set by another policy, conflicts with the remover",
        replies: &["env K=1", "env -K", "env K=3"],
        expect: Expect::Fails(&["20-b", "30-c"], "K"),
    },
    Case {
        name: "a device removed, then set by another policy, conflicts with the remover",
        replies: &["device /dev/a c 1 1", "device -/dev/a", "device /dev/a c 1 2"],
        expect: Expect::Fails(&["20-b", "30-c"], "/dev/a"),
    },
    Case {
        name: "the container's own annotations, env, mounts and devices removed",
        replies: &["annotation -team; env -OLD; mount -/data; device -/dev/fuse", "annotation other=1; env NEW=1"],
        expect: Expect::Merged(|r| {
            assert_eq!(spec_annotation(r, "team"), None);
            assert!(spec_mount(r, "/data").is_none());
            assert!(spec_mount(r, "/etc/hosts").is_some());
            assert!(!r.container.env.iter().any(|e| e.starts_with("OLD=")), "{:?}", r.container.env);
            assert!(r.container.linux.devices.is_empty());
            assert_eq!(spec_annotation(r, "other"), Some("1"));
        }),
    },
    Case {
        name: "args replaced with a leading empty string override",
        replies: &["args /bin/a x", "args \"\" /bin/b y"],
        expect: Expect::Merged(|r| assert_eq!(r.spec.args, ["/bin/b", "y"])),
    },
    Case {
        name: "args set twice conflict",
        replies: &["args /bin/a", "args /bin/b"],
        expect: Expect::Fails(&["10-a", "20-b"], "rgs"),
    },
    Case {
        name: "args cleared by a later policy",
        replies: &["args /bin/a", "args \"\"", "annotation x=1"],
        expect: Expect::Merged(|r| assert!(r.container.args.is_empty())),
    },
    Case {
        name: "hooks accumulate in order",
        replies: &["hook prestart /h/a1; hook poststop /h/a2", "hook prestart /h/b1 --flag", "hook prestart /h/c1"],
        expect: Expect::Merged(|r| {
            assert_eq!(hook_paths(&r.spec.hooks.prestart), ["/h/a1", "/h/b1", "/h/c1"]);
            assert_eq!(hook_paths(&r.spec.hooks.poststop), ["/h/a2"]);
        }),
    },
    Case {
        name: "memory limit set twice conflicts",
        replies: &["memory-limit 1000", "memory-limit 2000"],
        expect: Expect::Fails(&["10-a", "20-b"], ""),
    },
    Case {
        name: "different CPU fields merge, the same cpuset conflicts",
        replies: &["cpu-shares 512", "cpuset 0-1; memory-limit 4096", "cpuset 2"],
        expect: Expect::Fails(&["20-b", "30-c"], ""),
    },
    Case {
        name: "different CPU and memory fields merge",
        replies: &["cpu-shares 512", "cpuset 0-1; memory-limit 4096", "oom-score-adj 100; cgroups-path /kubepods/x"],
        expect: Expect::Merged(|r| {
            let res = &r.spec.linux.resources;
            assert_eq!(res.cpu.shares.as_ref().map(|s| s.value), Some(512));
            assert_eq!(res.cpu.cpus, "0-1");
            assert_eq!(res.memory.limit.as_ref().map(|l| l.value), Some(4096));
            assert_eq!(r.spec.linux.cgroups_path, "/kubepods/x");
        }),
    },
    Case {
        name: "sysctl, hugepages, unified and CDI devices",
        replies: &[
            "sysctl net.core.somaxconn=1024; hugepage 2MB 100; cdi vendor.example/gpu=0",
            "sysctl -net.core.somaxconn; sysctl net.core.somaxconn=2048; unified memory.high=1G; cdi vendor.example/gpu=1",
        ],
        expect: Expect::Merged(|r| {
            assert_eq!(r.spec.linux.sysctl.get("net.core.somaxconn").map(String::as_str), Some("2048"));
            assert_eq!(r.spec.CDI_devices.len(), 2);
        }),
    },
    Case {
        name: "the same CDI device injected twice conflicts",
        replies: &["cdi vendor.example/gpu=0", "cdi vendor.example/gpu=0"],
        expect: Expect::Fails(&["10-a", "20-b"], "gpu=0"),
    },
    Case {
        name: "updates of other containers merge per id, ignore_failure ANDed",
        replies: &[
            "update other-1 memory-limit 100 ignore-failure; update other-2 cpu-shares 10 ignore-failure",
            "update other-1 cpu-shares 20 ignore-failure; update other-3 cpuset 3",
            "update other-1 cpuset 0; annotation x=1",
        ],
        expect: Expect::Merged(|r| {
            let ids: Vec<_> = r.updates.iter().map(|u| u.container_id.as_str()).collect();
            assert_eq!(ids, ["other-1", "other-2", "other-3"]);
            let one = update_of(&r.updates, "other-1");
            assert!(!one.ignore_failure, "ANDed with 30-c's false");
            assert_eq!(memory_limit(one), Some(100));
            assert_eq!(one.linux.resources.cpu.shares.as_ref().map(|s| s.value), Some(20));
            assert_eq!(one.linux.resources.cpu.cpus, "0");
            assert!(update_of(&r.updates, "other-2").ignore_failure);
        }),
    },
    Case {
        name: "a conflicting update marked ignore-failure is skipped",
        replies: &["update other-1 memory-limit 100", "update other-1 memory-limit 200 ignore-failure"],
        expect: Expect::Merged(|r| {
            let one = update_of(&r.updates, "other-1");
            assert_eq!(memory_limit(one), Some(100));
            assert!(!one.ignore_failure);
        }),
    },
    Case {
        name: "a conflicting update not marked ignore-failure fails",
        replies: &["update other-1 memory-limit 100", "update other-1 memory-limit 200"],
        expect: Expect::Fails(&["10-a", "20-b"], "other-1"),
    },
    Case {
        name: "updating the container being created fails",
        replies: &["annotation x=1", "update ctr-new memory-limit 5"],
        expect: Expect::Fails(&["20-b"], "ctr-new"),
    },
    Case {
        name: "evictions are forwarded, once per container",
        replies: &["evict other-3 too big", "evict other-4 low priority; evict other-3 again; annotation x=1"],
        expect: Expect::Merged(|r| {
            let ev: Vec<_> = r.evictions.iter().map(|e| (e.container_id.as_str(), e.reason.as_str())).collect();
            assert_eq!(ev, [("other-3", "too big"), ("other-4", "low priority")]);
        }),
    },
    Case {
        name: "a denial fails the event",
        replies: &["annotation x=1", "deny not on this node"],
        expect: Expect::Fails(&["20-b"], "not on this node"),
    },
];

fn check_outcome<T: std::fmt::Debug>(name: &str, expect: &Expect, a: &Outcome<T>, b: &Outcome<T>) -> Vec<String> {
    let mut problems = Vec::new();
    if let Expect::Fails(plugins, text) = expect {
        for (label, outcome) in [("separate plugins", a), ("nri-wasm chain", b)] {
            match outcome {
                Outcome::Failed(msg) => {
                    for p in *plugins {
                        if !msg.contains(p) {
                            problems.push(format!("{name}: {label}: error does not name {p}: {msg}"));
                        }
                    }
                    if !msg.contains(text) {
                        problems.push(format!("{name}: {label}: error does not mention {text:?}: {msg}"));
                    }
                }
                Outcome::Merged(r) => problems.push(format!("{name}: {label}: expected a failure, got {r:?}")),
            }
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_cases_match_separate_plugins() {
    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain(&[""]), facts(), 4));
    let h = Harness::start(RuntimeProfile::v0_12(), dispatcher.clone()).await;
    let conn = h.connect().await;
    let mut problems = Vec::new();
    for case in CREATE_CASES {
        let a = separate_create(case.replies);
        let b = chained_create(&conn, &dispatcher, case.replies).await;
        problems.extend(check_outcome(case.name, &case.expect, &a, &b));
        match (&case.expect, &a, &b) {
            (Expect::Merged(check), Outcome::Merged(ra), Outcome::Merged(rb)) => {
                check(ra);
                if comparable(ra) != comparable(rb) {
                    problems.push(format!(
                        "{}: results differ\n  separate plugins: {:?}\n  nri-wasm chain:   {:?}",
                        case.name,
                        comparable(ra),
                        comparable(rb)
                    ));
                }
            }
            (Expect::Merged(_), _, _) => {
                problems.push(format!("{}: expected both to merge\n  separate: {a:?}\n  chain: {b:?}", case.name))
            }
            (Expect::Fails(..), _, _) => {}
        }
    }
    conn.close().await;
    h.shutdown().await;
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}

// ---------------------------------------------------------------------------
// UpdateContainer and StopContainer: updates and evictions only.

const UPDATED: &str = "ctr-upd";

fn update_request(pids: bool) -> pb::UpdateContainerRequest {
    let mut res = pb::LinuxResources::default();
    res.memory.mut_or_insert_default().limit =
        MessageField::some(pb::OptionalInt64 { value: 10, ..Default::default() });
    res.cpu.mut_or_insert_default().shares = MessageField::some(pb::OptionalUInt64 { value: 2, ..Default::default() });
    if pids {
        res.pids = MessageField::some(pb::LinuxPids { limit: 64, ..Default::default() });
    }
    pb::UpdateContainerRequest {
        pod: MessageField::some(pod()),
        container: MessageField::some(container(UPDATED)),
        linux_resources: MessageField::some(res),
        ..Default::default()
    }
}

fn as_update(r: pb::CreateContainerResponse) -> pb::UpdateContainerResponse {
    assert!(r.adjust.is_none(), "update cases carry no adjustment");
    pb::UpdateContainerResponse { update: r.update, evict: r.evict, ..Default::default() }
}

fn comparable_updates(r: &UpdatesResult) -> (Vec<pb::ContainerUpdate>, Vec<pb::ContainerEviction>) {
    (normal_updates(&r.updates), r.evictions.clone())
}

struct UpdateCase {
    name: &'static str,
    pids: bool,
    replies: &'static [&'static str],
    expect: Option<(&'static [&'static str], &'static str)>,
}

const UPDATE_CASES: &[UpdateCase] = &[
    UpdateCase {
        name: "the updated container and others, merged per id",
        pids: false,
        replies: &[
            "update ctr-upd memory-limit 100; update other-1 cpuset 1 ignore-failure",
            "update ctr-upd cpu-shares 50; update other-1 memory-limit 7 ignore-failure; evict other-9 pressure",
        ],
        expect: None,
    },
    UpdateCase {
        name: "the updated container's memory limit set twice conflicts",
        pids: false,
        replies: &["update ctr-upd memory-limit 100", "update ctr-upd memory-limit 200"],
        expect: Some((&["10-a", "20-b"], "ctr-upd")),
    },
    UpdateCase {
        // The runtime claims the pids limit on every update of a container
        // whose resources have one, so two plugins updating it conflict.
        name: "a requested pids limit makes two updates of it conflict",
        pids: true,
        replies: &["update ctr-upd memory-limit 100", "update ctr-upd cpu-shares 50"],
        expect: Some((&["10-a", "20-b"], "ctr-upd")),
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_cases_match_separate_plugins() {
    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain(&[""]), facts(), 4));
    let h = Harness::start(RuntimeProfile::v0_12(), dispatcher.clone()).await;
    let conn = h.connect().await;
    let mut problems = Vec::new();
    for case in UPDATE_CASES {
        let req = update_request(case.pids);
        let a = {
            let mut run = ReferenceRuntime::update(&req);
            let mut out = None;
            for (text, name) in case.replies.iter().zip(NAMES) {
                if let Err(e) = run.apply(name, &as_update(parse(text).expect("no denial"))) {
                    out = Some(Outcome::Failed(ref_error(e)));
                    break;
                }
            }
            out.unwrap_or_else(|| Outcome::Merged(run.result()))
        };
        dispatcher.replace_chain(chain(case.replies));
        let b = match conn.update_container(&req).await {
            Ok(reply) => {
                let mut run = ReferenceRuntime::update(&req);
                match run.apply(HOST_PLUGIN, &reply) {
                    Ok(()) => Outcome::Merged(run.result()),
                    Err(e) => Outcome::Failed(format!("the runtime refused the combined reply: {e}")),
                }
            }
            Err(e) => Outcome::Failed(sim_error(e)),
        };
        match (case.expect, &a, &b) {
            (Some((plugins, text)), _, _) => {
                problems.extend(check_outcome(case.name, &Expect::Fails(plugins, text), &a, &b))
            }
            (None, Outcome::Merged(ra), Outcome::Merged(rb)) => {
                let own = update_of(&ra.updates, UPDATED);
                assert_eq!(memory_limit(own), Some(100), "{}", case.name);
                assert_eq!(own.linux.resources.cpu.shares.as_ref().map(|s| s.value), Some(50), "{}", case.name);
                assert_eq!(ra.updates.last().map(|u| u.container_id.as_str()), Some(UPDATED));
                assert_eq!(ra.evictions.len(), 1);
                if comparable_updates(ra) != comparable_updates(rb) {
                    problems.push(format!(
                        "{}: results differ\n  separate plugins: {:?}\n  nri-wasm chain:   {:?}",
                        case.name,
                        comparable_updates(ra),
                        comparable_updates(rb)
                    ));
                }
            }
            (None, _, _) => problems.push(format!("{}: expected both to merge\n  {a:?}\n  {b:?}", case.name)),
        }
    }

    // StopContainer: updates of any container, the stopping one included.
    let replies = ["update other-1 memory-limit 100", "update ctr-upd cpu-shares 5; update other-1 cpuset 0-3"];
    let stop_req = pb::StopContainerRequest {
        pod: MessageField::some(pod()),
        container: MessageField::some(container(UPDATED)),
        ..Default::default()
    };
    let mut separate = ReferenceRuntime::stop(&stop_req);
    for (text, name) in replies.iter().zip(NAMES) {
        let r = parse(text).expect("no denial");
        separate.apply(name, &pb::StopContainerResponse { update: r.update, ..Default::default() }).expect("merges");
    }
    dispatcher.replace_chain(chain(&replies));
    let combined = conn.stop_container(&pod(), &container(UPDATED)).await.expect("stop answered");
    let mut chained = ReferenceRuntime::stop(&stop_req);
    chained.apply(HOST_PLUGIN, &combined).expect("the runtime accepts the combined reply");
    let (ra, rb) = (separate.result(), chained.result());
    assert_eq!(ra.updates.iter().map(|u| u.container_id.as_str()).collect::<Vec<_>>(), ["other-1", "ctr-upd"]);
    if comparable_updates(&ra) != comparable_updates(&rb) {
        problems.push(format!("stop: results differ\n  separate: {ra:?}\n  chain: {rb:?}"));
    }

    conn.close().await;
    h.shutdown().await;
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}

// ---------------------------------------------------------------------------
// A native plugin after nri-wasm.

/// The one place where a chain cannot be told from separate plugins, pinned
/// down so that a change of it is noticed (see "Keys set and removed inside
/// the chain" in host/src/merge/mod.rs): 10-a adds the mount `/x`, 20-b
/// removes it, and a native plugin `90-native` then adds `/x` again. As
/// separate plugins, 20-b's removal makes the native plugin conflict with
/// 20-b. Behind nri-wasm the runtime sees one plugin whose reply says only
/// `-/x`; a removal of a key no earlier plugin set leaves no owner at the
/// runtime, so the native plugin's mount is accepted. Inside the chain the
/// result is the same; only a later native plugin is treated more leniently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_and_removed_inside_the_chain_is_unowned_for_plugins_after_it() {
    let replies = ["mount /x /s1", "mount -/x"];
    let native = parse("mount /x /s3").expect("no denial");

    let mut separate = ReferenceRuntime::create(&create_request());
    for (text, name) in replies.iter().zip(NAMES) {
        separate.apply(name, &parse(text).expect("no denial")).expect("the chain's part merges");
    }
    let a = separate.apply("90-native", &native).map_err(ref_error);

    let dispatcher = Arc::new(PolicyDispatcher::new(engine(), chain(&replies), facts(), 4));
    let h = Harness::start(RuntimeProfile::v0_12(), dispatcher.clone()).await;
    let conn = h.connect().await;
    let req = create_request();
    let combined = conn.create_container(&req.pod, &req.container).await.expect("the chain merges");
    let mut chained = ReferenceRuntime::create(&req);
    chained.apply(HOST_PLUGIN, &combined).expect("the runtime accepts the combined reply");
    let b = chained.apply("90-native", &native).map_err(ref_error);
    conn.close().await;
    h.shutdown().await;

    let err = a.expect_err("as separate plugins, 90-native conflicts with 20-b");
    assert!(err.contains("20-b") && err.contains("90-native"), "{err}");
    b.expect("behind nri-wasm the removal leaves no owner, so 90-native's mount is accepted");
    let mounts = chained.result().spec.mounts;
    assert_eq!(mounts.iter().filter(|m| m.destination == "/x").map(|m| m.source.as_str()).collect::<Vec<_>>(), ["/s3"]);
}
