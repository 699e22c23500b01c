//! End-to-end on the runtime `NRI_WASM_RUNTIME` names (containerd 2.3.4 by
//! default): the host as an operator runs it, pods and containers created
//! with crictl, and what the policies did read back from the OCI spec the
//! runtime made, from inside the running container and from its cgroup.
//!
//! Every assertion is about state and content. Waits have generous
//! backstops (a busy machine is slow, not wrong), and nothing here measures
//! speed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nri_wasm_runtimes::containerd;
use nri_wasm_runtimes::cri_timer::CriTimer;
use nri_wasm_runtimes::crictl::{env_value, spec_annotation, spec_env, Container, Pod, PodSandbox};
use nri_wasm_runtimes::host::{with_custom_section, Host, HostConfig};
use nri_wasm_runtimes::log::CLOSING_PLUGIN;
use nri_wasm_runtimes::runtime::{Node, RuntimeKind};
use nri_wasm_runtimes::wait_for;
use serde_json::Value;

fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_nri-wasm-host"))
}

fn node() -> Node {
    Node::start().unwrap_or_else(|e| panic!("starting the runtime: {e}"))
}

/// The `policy.toml` an example ships.
fn example_toml(name: &str) -> &'static str {
    nri_wasm_components::examples::POLICY_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("example {name} has no policy.toml"))
}

fn wasm(path: &str) -> PathBuf {
    PathBuf::from(path)
}

/// The pod the pod-metadata-env example maps to three variables.
fn billing_pod(name: &str) -> Pod {
    Pod::new(name).label("app", "billing").label("tier", "backend").annotation("example.com/owner", "team-payments")
}

/// A host on `node` with the policies given (name, component, settings
/// file), started and registered.
fn host_with(node: &Node, policies: &[(&str, PathBuf, String)]) -> Host {
    let config = HostConfig::new(host_bin(), node.dir(), &node.nri_socket());
    for (name, wasm, toml) in policies {
        config.policy_dir().install(name, wasm, toml).unwrap();
    }
    let mut host = Host::start(&config).unwrap();
    host.wait_registered().unwrap();
    host.wait_status("every policy loaded", |s| {
        s["policies"]
            .as_array()
            .is_some_and(|ps| ps.len() == policies.len() && ps.iter().all(|p| p["status"] == "loaded"))
    })
    .unwrap();
    host
}

fn pod_metadata_env() -> (&'static str, PathBuf, String) {
    (
        "60-pod-metadata-env",
        wasm(nri_wasm_components::examples::POD_METADATA_ENV),
        example_toml("pod-metadata-env").to_string(),
    )
}

/// The test guest that sets `example.com/<tag>` and `POLICY_<TAG>`, and
/// denies containers annotated `example.com/deny`.
fn annotate(name: &'static str, tag: &str, on_error: &str) -> (&'static str, PathBuf, String) {
    (name, wasm(nri_wasm_test_support::guests::ANNOTATE), format!("on-error = \"{on_error}\"\nsettings = \"{tag}\"\n"))
}

fn no_plugin_dropped(node: &Node) {
    // containerd and CRI-O log the same line: both run NRI's runtime side.
    let log = node.runtime_log();
    assert_eq!(
        log.count(CLOSING_PLUGIN),
        0,
        "the runtime dropped the host:\n{}",
        log.lines_with(CLOSING_PLUGIN).join("\n")
    );
}

fn has_app_name(node: &Node, id: &str) -> bool {
    spec_env(&node.crictl.spec(id).unwrap(), "APP_NAME").as_deref() == Some("billing")
}

#[test]
fn adjustments_reach_the_spec_and_the_running_container() {
    let node = node();
    let host = host_with(&node, &[pod_metadata_env()]);
    // The runtime under test is the one asked for.
    let version = match node.kind() {
        RuntimeKind::Containerd23 => Some(containerd::VERSION_2_3),
        RuntimeKind::Containerd17 => Some(containerd::VERSION_1_7),
        RuntimeKind::Crio => None,
    };
    if let Some(version) = version {
        let configured = host.log().lines_with("configured by runtime");
        assert!(
            configured.iter().any(|l| l.contains(version)),
            "not configured by containerd {version}: {configured:?}"
        );
    }

    // A CRI mount too, so the container is not the bare minimum.
    let data = node.dir().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("hello"), "from the host").unwrap();
    let pod = node.crictl.run_pod(&billing_pod("billing")).unwrap();
    let worker = Container::sleeper("worker").mount(&data.to_string_lossy(), "/srv/data", true);
    let id = node.crictl.create_and_start(&pod, &worker).unwrap();
    assert_eq!(node.crictl.exec(&id, &["cat", "/srv/data/hello"]).unwrap(), "from the host");

    let spec = node.crictl.spec(&id).unwrap();
    for (name, value) in
        [("APP_NAME", "billing"), ("POD_TIER", "backend"), ("TEAM", "team-payments"), ("FROM_CRI", "1")]
    {
        assert_eq!(
            spec_env(&spec, name).as_deref(),
            Some(value),
            "{name} in the OCI spec: {:#}",
            spec["process"]["env"]
        );
    }
    let env = node.crictl.exec(&id, &["env"]).unwrap();
    for (name, value) in [("APP_NAME", "billing"), ("POD_TIER", "backend"), ("TEAM", "team-payments")] {
        assert_eq!(env_value(&env, name).as_deref(), Some(value), "{name} in the container's environment:\n{env}");
    }
    no_plugin_dropped(&node);
}

/// The real-runtime benchmark's CRI client (tests/runtimes/cri-timer): its
/// creates go through the runtime and its plugins like the kubelet's, each
/// with its own name and a time, and `remove` leaves nothing behind.
#[test]
fn the_benchmarks_cri_client_creates_through_the_plugins_and_removes_what_it_made() {
    let node = node();
    let host = host_with(&node, &[pod_metadata_env()]);
    let pod = node.crictl.run_pod(&billing_pod("timed")).unwrap();
    let timer = CriTimer::new(&nri_wasm_runtimes::runtimes_dir(), &node.crictl).unwrap();

    let kept = timer.create(&node.crictl, &pod, &Container::sleeper("kept"), "kept", 3, false).unwrap();
    assert_eq!(kept.len(), 3);
    for (i, c) in kept.iter().enumerate() {
        let inspect = node.crictl.inspect(&c.id).unwrap();
        assert_eq!(inspect["status"]["metadata"]["name"], format!("kept-{i}"), "{inspect:#}");
        assert!(has_app_name(&node, &c.id), "container {i} was made without the host's policy");
    }

    let gone = timer.create(&node.crictl, &pod, &Container::sleeper("gone"), "gone", 3, true).unwrap();
    assert_eq!(gone.len(), 3);
    let left = node.crictl.run(&["ps", "-a", "-q", "--pod", &pod.id]).unwrap();
    let mut left: Vec<&str> = left.lines().collect();
    left.sort_unstable();
    let mut kept_ids: Vec<&str> = kept.iter().map(|c| c.id.as_str()).collect();
    kept_ids.sort_unstable();
    assert_eq!(left, kept_ids, "the pod's containers after the removing run");
    // The host answered every create, in the series the benchmark reads.
    let answers = host.create_answers().expect("the host's /metrics answers").unwrap();
    assert!(answers.count >= 6.0, "{answers:?}");
    assert!(answers.answer_s >= answers.chain_s && answers.chain_s > 0.0, "{answers:?}");
    no_plugin_dropped(&node);
}

#[test]
fn synchronize_hands_the_policies_what_ran_before_the_host() {
    let node = node();
    let pod = node.crictl.run_pod(&Pod::new("early")).unwrap();
    for name in ["first", "second"] {
        node.crictl.create_and_start(&pod, &Container::sleeper(name)).unwrap();
    }
    // Started after the containers: it learns of them only from Synchronize.
    let probe = (
        "50-probe",
        wasm(nri_wasm_test_support::guests::PROBE),
        "on-error = \"fail\"\nsettings = \"list-ids\"\n".into(),
    );
    let host = host_with(&node, &[probe]);

    let id = node.crictl.create(&pod, &Container::sleeper("late")).unwrap();
    let spec = node.crictl.spec(&id).unwrap();
    let listed: usize = spec_annotation(&spec, "example.com/listed")
        .unwrap_or_else(|| panic!("the probe did not run: {:#}", spec["annotations"]))
        .parse()
        .unwrap();
    // The two that ran before the host, and the one being created.
    assert_eq!(listed, 3, "containers in the host's view of the node");
    let status = host.status().unwrap();
    assert_eq!(status["registered"], true);
    let synced = host.log().lines_with("synchronized with runtime");
    assert!(synced.iter().any(|l| l.contains("pods=1 containers=2")), "the host's Synchronize: {synced:?}");
    no_plugin_dropped(&node);
}

#[test]
fn a_denial_reaches_crictl_with_its_reason_and_policy() {
    let node = node();
    let _host = host_with(&node, &[annotate("50-annotate", "tag", "ignore")]);
    let pod = node.crictl.run_pod(&Pod::new("guarded")).unwrap();

    let err = node
        .crictl
        .create(&pod, &Container::sleeper("refused").annotation("example.com/deny", "no-such-team"))
        .expect_err("the policy denies this container");
    let text = err.to_string();
    assert!(text.contains("denied by annotation: no-such-team"), "the reason is not in crictl's error: {text}");
    assert!(text.contains("annotate"), "the policy is not named in crictl's error: {text}");

    // The plugin stays: the next container gets the policy.
    let id = node.crictl.create(&pod, &Container::sleeper("allowed")).unwrap();
    assert_eq!(spec_annotation(&node.crictl.spec(&id).unwrap(), "example.com/tag").as_deref(), Some("allowed"));
    no_plugin_dropped(&node);
}

#[test]
fn a_looping_policy_is_cut_off_and_the_plugin_stays() {
    let node = node();
    let looping = |on_error: &str| {
        (
            "50-faults",
            wasm(nri_wasm_test_support::guests::FAULTS),
            format!("on-error = \"{on_error}\"\nsettings = \"loop\"\n"),
        )
    };
    let mut host = host_with(&node, &[annotate("40-annotate", "tag", "ignore"), looping("ignore")]);
    let pod = node.crictl.run_pod(&Pod::new("loops")).unwrap();

    // on-error = ignore: created, without the looping policy, with the other.
    for i in 0..3 {
        let id = node.crictl.create(&pod, &Container::sleeper(&format!("ignored-{i}"))).unwrap();
        let spec = node.crictl.spec(&id).unwrap();
        assert_eq!(spec_annotation(&spec, "example.com/tag").as_deref(), Some(format!("ignored-{i}").as_str()));
    }

    // on-error = fail: refused, naming the policy.
    let (name, _, toml) = looping("fail");
    host.config().policy_dir().write_toml(name, &toml).unwrap();
    host.wait_status("the looping policy reloaded with on-error = fail", |s| {
        s["policies"].as_array().is_some_and(|ps| {
            ps.iter().any(|p| p["name"].as_str().is_some_and(|n| n.contains("faults")) && p["on_error"] == "fail")
        })
    })
    .unwrap();
    for i in 0..3 {
        let err = node.crictl.create(&pod, &Container::sleeper(&format!("failed-{i}"))).expect_err("on-error = fail");
        let text = err.to_string();
        assert!(text.contains("faults"), "crictl's error does not name the policy: {text}");
    }
    // And the plugin is still there for a container that passes.
    host.config().policy_dir().write_toml(name, &looping("ignore").2).unwrap();
    host.wait_status("the looping policy back to on-error = ignore", |s| {
        s["policies"].as_array().is_some_and(|ps| {
            ps.iter().any(|p| p["name"].as_str().is_some_and(|n| n.contains("faults")) && p["on_error"] == "ignore")
        })
    })
    .unwrap();
    let id = node.crictl.create(&pod, &Container::sleeper("after")).unwrap();
    assert_eq!(spec_annotation(&node.crictl.spec(&id).unwrap(), "example.com/tag").as_deref(), Some("after"));
    no_plugin_dropped(&node);
}

#[test]
fn a_host_killed_and_restarted_applies_its_policies_again() {
    let node = node();
    let mut host = host_with(&node, &[pod_metadata_env()]);
    let pod = node.crictl.run_pod(&billing_pod("billing")).unwrap();
    let before = node.crictl.create(&pod, &Container::sleeper("before")).unwrap();
    assert!(has_app_name(&node, &before));

    host.kill9();
    // The runtime goes on without the plugin (that is NRI's rule).
    let during = node.crictl.create(&pod, &Container::sleeper("during")).unwrap();
    assert!(!has_app_name(&node, &during), "a container got a policy from a host that was killed");

    host.restart().unwrap();
    host.wait_registered().unwrap();
    host.wait_status("the policy loaded again", |s| s["policies"][0]["status"] == "loaded").unwrap();
    for i in 0..3 {
        let after = node.crictl.create(&pod, &Container::sleeper(&format!("after-{i}"))).unwrap();
        assert!(has_app_name(&node, &after), "container {i} after the restart has no policy");
    }
}

#[test]
fn the_host_reconnects_when_the_runtime_restarts() {
    let mut node = node();
    let mut host = host_with(&node, &[pod_metadata_env()]);
    let pod = node.crictl.run_pod(&billing_pod("billing")).unwrap();
    let before = node.crictl.create_and_start(&pod, &Container::sleeper("before")).unwrap();
    assert!(has_app_name(&node, &before));
    let reconnects = |s: &Value| s["reconnects"].as_u64().unwrap_or(0);
    let first = reconnects(&host.status().unwrap());

    node.restart_runtime().unwrap();
    host.wait_status("the host registered again after the runtime's restart", |s| {
        s["registered"] == true && reconnects(s) > first
    })
    .unwrap();

    // The container that ran before is still there, and new ones get the policy.
    assert!(has_app_name(&node, &before));
    let pod2 = node.crictl.run_pod(&billing_pod("billing-2")).unwrap();
    for (i, p) in [&pod, &pod2].into_iter().enumerate() {
        let id = node.crictl.create(p, &Container::sleeper(&format!("after-{i}"))).unwrap();
        assert!(has_app_name(&node, &id), "container {i} after the runtime's restart has no policy");
    }
}

/// What one create of the start-up test saw (the texts are read through
/// `Debug`, in the assertion's message).
#[derive(Debug)]
#[allow(dead_code)]
enum Outcome {
    /// Created with the policy's effect.
    Applied,
    /// Refused, naming the policy (what on-error = fail does while it is
    /// not ready).
    RefusedNaming(String),
    /// Created WITHOUT the policy: what the contract forbids once the
    /// runtime has the host registered.
    Without(String),
    /// Refused for another reason.
    OtherError(String),
}

/// Creates containers from the moment the host is started, on two
/// threads, until 50 of them were started after the host was seen
/// registered (at most 400 in all); the outcomes of those 50, and how many
/// were started before.
fn creates_after_start(node: &Node, pod: &PodSandbox, host: &Host, tag: &str, round: usize) -> (Vec<Outcome>, usize) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let registered = AtomicBool::new(false);
    let counted = AtomicUsize::new(0);
    let before = AtomicUsize::new(0);
    let total = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            while counted.load(Ordering::SeqCst) < 50 && started.elapsed() < Duration::from_secs(300) {
                if host.registered() {
                    registered.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        for t in 0..2 {
            let (registered, counted, before, total, outcomes) = (&registered, &counted, &before, &total, &outcomes);
            s.spawn(move || {
                while counted.load(Ordering::SeqCst) < 50 {
                    let n = total.fetch_add(1, Ordering::SeqCst);
                    if n >= 400 {
                        break;
                    }
                    let after_registration = registered.load(Ordering::SeqCst);
                    let name = format!("{tag}-{round}-{t}-{n}");
                    let result = node.crictl.create(pod, &Container::sleeper(&name));
                    if !after_registration {
                        before.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    if counted.fetch_add(1, Ordering::SeqCst) >= 50 {
                        continue;
                    }
                    let outcome = match result {
                        Ok(id) => {
                            let spec = node.crictl.spec(&id).unwrap();
                            match spec_annotation(&spec, &format!("example.com/{tag}")) {
                                Some(v) if v == name => Outcome::Applied,
                                _ => Outcome::Without(format!("{name}: {:#}", spec["annotations"])),
                            }
                        }
                        Err(e) => {
                            let text = e.to_string();
                            // Not ready yet, or (on a loaded machine) any other
                            // failure of the policy: refused, and said why.
                            if text.contains("50-annotate") {
                                Outcome::RefusedNaming(text)
                            } else {
                                Outcome::OtherError(text)
                            }
                        }
                    };
                    outcomes.lock().unwrap().push(outcome);
                }
            });
        }
    });
    (outcomes.into_inner().unwrap(), before.into_inner())
}

#[test]
fn the_start_up_contract_holds_with_a_cold_and_a_warm_cache() {
    let node = node();
    let pod = node.crictl.run_pod(&Pod::new("busy")).unwrap();
    let config = HostConfig::new(host_bin(), node.dir(), &node.nri_socket());
    let (name, wasm, toml) = annotate("50-annotate", "boot", "fail");
    config.policy_dir().install(name, &wasm, &toml).unwrap();

    // containerd drops a plugin that went away at the next event after it
    // did (NRI's rule): the line that stop causes is expected, once per
    // stop, and a create right after the stop makes it come then.
    let mut stopped = 0;
    for (round, cache) in ["cold", "warm"].into_iter().enumerate() {
        // Containers are created from the moment the host is started.
        let mut host = Host::start(&config).unwrap();
        let (outcomes, before) = creates_after_start(&node, &pod, &host, "boot", round);
        let dropped_before_stop = node.runtime_log().count(CLOSING_PLUGIN);
        assert_eq!(dropped_before_stop, stopped, "{cache} cache: the runtime dropped the running host");
        host.stop();
        node.crictl.create(&pod, &Container::sleeper(&format!("after-stop-{round}"))).unwrap();
        stopped = node.runtime_log().count(CLOSING_PLUGIN);
        assert!(stopped <= dropped_before_stop + 1, "{cache} cache: more than the stopped host was dropped");
        let applied = outcomes.iter().filter(|o| matches!(o, Outcome::Applied)).count();
        let refused = outcomes.iter().filter(|o| matches!(o, Outcome::RefusedNaming(_))).count();
        eprintln!(
            "{cache} cache (round {round}): {} creates after registration: {applied} with the policy, {refused} refused \
             naming it; {before} created before the host registered",
            outcomes.len()
        );
        assert_eq!(outcomes.len(), 50, "{cache} cache");
        let bad: Vec<&Outcome> =
            outcomes.iter().filter(|o| matches!(o, Outcome::Without(_) | Outcome::OtherError(_))).collect();
        assert!(bad.is_empty(), "{cache} cache: creates that broke the contract: {bad:#?}");
    }
}

#[test]
fn a_reload_under_load_never_leaves_a_container_without_the_policy() {
    let node = node();
    let host = host_with(&node, &[annotate("50-annotate", "old", "ignore")]);
    let pod = node.crictl.run_pod(&Pod::new("reloading")).unwrap();
    let policies = host.config().policy_dir();
    let component = std::fs::read(nri_wasm_test_support::guests::ANNOTATE).unwrap();

    let mut seen = Vec::new();
    let mut replaced_at = None;
    let mut new_after = 0;
    for i in 0..400 {
        if i == 5 {
            // Both files of the policy replaced, as a roll-out does: new
            // settings and another component file (compiled afresh).
            policies.write_toml("50-annotate", "on-error = \"ignore\"\nsettings = \"new\"\n").unwrap();
            policies.write_wasm("50-annotate", &with_custom_section(&component, "roll-out", b"2")).unwrap();
            replaced_at = Some(i);
        }
        let name = format!("c-{i}");
        let id = node.crictl.create(&pod, &Container::sleeper(&name)).unwrap();
        let spec = node.crictl.spec(&id).unwrap();
        let old = spec_annotation(&spec, "example.com/old");
        let new = spec_annotation(&spec, "example.com/new");
        match (old.as_deref(), new.as_deref()) {
            (Some(n), None) if n == name => seen.push("old"),
            (None, Some(n)) if n == name => {
                seen.push("new");
                new_after += 1;
            }
            _ => panic!("create {i}: neither the old nor the new policy's effect, or both: {:#}", spec["annotations"]),
        }
        if new_after >= 10 {
            break;
        }
    }
    eprintln!("effects in order: {}", seen.join(" "));
    assert!(replaced_at.is_some());
    assert!(new_after >= 10, "the new policy never took over: {seen:?}");
    assert_eq!(seen[..5], ["old"; 5], "before the files were replaced");
    no_plugin_dropped(&node);
}

/// Whether `/status` says the host is subscribed to `event`.
fn subscribed_to(status: &Value, event: &str) -> bool {
    status["subscribed"].as_str().is_some_and(|s| s.split(',').any(|e| e.trim() == event))
}

#[test]
fn subscription_changes_under_creates_lose_no_create() {
    // A mandatory policy annotates every container while creates arrive
    // on two threads, and a policy that needs StartContainer is dropped in
    // and taken out again ten times: each change is a new registration
    // with the runtime (the subscription is fixed at Configure). The
    // runtime treats a call on a closing connection as "go on without the
    // plugin", so a lost request would show as a container without the
    // annotation, and a dropped plugin in the runtime's log.
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    let node = node();
    let mut host = host_with(&node, &[annotate("50-annotate", "seen", "fail")]);
    let pod = node.crictl.run_pod(&Pod::new("resubscribing")).unwrap();
    let policies = host.config().policy_dir();
    let squeeze = wasm(nri_wasm_test_support::guests::SQUEEZE);
    let done = AtomicBool::new(false);
    let created = Mutex::new(Vec::new());
    let rounds = 10;
    std::thread::scope(|s| {
        for t in 0..2 {
            let (done, created, node, pod) = (&done, &created, &node, &pod);
            s.spawn(move || {
                let mut n = 0;
                while !done.load(Ordering::SeqCst) {
                    let name = format!("r-{t}-{n}");
                    n += 1;
                    let outcome = node
                        .crictl
                        .create(pod, &Container::sleeper(&name))
                        .map(|id| spec_annotation(&node.crictl.spec(&id).unwrap(), "example.com/seen"));
                    created.lock().unwrap().push((name, outcome));
                }
            });
        }
        for round in 0..rounds {
            let adding = round % 2 == 0;
            if adding {
                policies.install("40-squeeze", &squeeze, "grant = [\"updates\"]\nsettings = \"30000\"\n").unwrap();
            } else {
                for ext in ["wasm", "toml"] {
                    std::fs::remove_file(policies.dir().join(format!("40-squeeze.{ext}"))).unwrap();
                }
            }
            // The status says what the serving connection subscribed to. A
            // change usually registers anew; one made while the previous
            // change's connection was still waiting to take over gives
            // that connection up instead (the serving one already has what
            // is wanted): then no registration is needed, and none counted.
            let what = format!("round {round}: the serving connection subscribed to StartContainer: {adding}");
            let waited =
                host.wait_status(&what, |s| subscribed_to(s, "StartContainer") == adding && s["registered"] == true);
            if let Err(e) = waited {
                done.store(true, Ordering::SeqCst);
                panic!("{e}");
            }
        }
        done.store(true, Ordering::SeqCst);
    });
    let created = created.into_inner().unwrap();
    let broken: Vec<_> =
        created.iter().filter(|(name, outcome)| !matches!(outcome, Ok(Some(v)) if v == name)).collect();
    eprintln!("{} creates across {rounds} subscription changes", created.len());
    assert!(
        broken.is_empty(),
        "creates failed or went ahead without the policy: {broken:#?}\nhost log:\n{}",
        host.log().tail(30)
    );
    assert!(created.len() >= rounds, "too few creates to tell: {}", created.len());
    // Each retired connection left through a farewell registration, so the
    // runtime removed it before its next event instead of failing a call on
    // it and logging that it closed the plugin (it drops closed plugins
    // lazily). The farewell itself lingers the same way, subscribed to the
    // rarest notification: only its own name may appear, never the plugin's.
    // The last successor takes over at its first event.
    node.crictl.create(&pod, &Container::sleeper("after-last-change")).unwrap();
    let retired = || host.log().lines_with("retired connection removed by the runtime");
    let by = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while retired().len() < rounds && std::time::Instant::now() < by {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(retired().len() >= rounds, "every handover retired its connection through a farewell: {:?}", retired());
    // One more event after the last retirement, where a lazy drop would show.
    node.crictl.create(&pod, &Container::sleeper("after-retirements")).unwrap();
    let log = node.runtime_log();
    let main = format!("{CLOSING_PLUGIN} 10-nri-wasm,");
    assert_eq!(
        log.count(&main),
        0,
        "the runtime failed a call on a retired connection:\n{}",
        log.lines_with(&main).join("\n")
    );
}

/// A file of a container's cgroup (v1 controller `controller`, or the v2
/// unified hierarchy), from the cgroup path in its spec.
fn cgroup_file(node: &Node, id: &str, controller: &str, file: &str) -> String {
    let spec = node.crictl.spec(id).unwrap();
    let path = spec["linux"]["cgroupsPath"].as_str().unwrap_or_else(|| panic!("no cgroupsPath: {:#}", spec["linux"]));
    let rel = path.trim_start_matches('/');
    let candidates = [
        Path::new("/sys/fs/cgroup").join(controller).join(rel).join(file),
        Path::new("/sys/fs/cgroup").join(rel).join(file),
    ];
    let found = candidates.iter().find(|f| f.exists()).unwrap_or_else(|| panic!("none of {candidates:?} exists"));
    std::fs::read_to_string(found).unwrap().trim().to_string()
}

/// The node's online CPUs, `0-N` (a contiguous range from 0, as on the
/// machines the suite runs on).
fn online_cpus() -> (String, usize) {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap().trim().to_string();
    let last = match text.split_once('-') {
        Some(("0", n)) => n.parse().unwrap_or_else(|_| panic!("online CPUs {text:?}")),
        None if text == "0" => 0,
        _ => panic!("online CPUs {text:?} are not a range from 0"),
    };
    (text, last)
}

#[test]
fn updates_the_host_sends_on_its_own_reach_the_running_containers_cgroup() {
    // The squeeze test guest: when a container labelled as the trigger
    // starts, the running target gets a CPU quota. StartContainer has no
    // reply: the host sends the update with UpdateContainers, on its own.
    let node = node();
    let squeeze = (
        "40-squeeze",
        wasm(nri_wasm_test_support::guests::SQUEEZE),
        "grant = [\"updates\"]\nsettings = \"30000\"\n".to_string(),
    );
    let host = host_with(&node, &[squeeze]);
    let pod = node.crictl.run_pod(&Pod::new("batch")).unwrap();
    let target = Container::sleeper("crunch").cpu(100_000, 50_000).label("example.com/squeeze", "target");
    let target = node.crictl.create_and_start(&pod, &target).unwrap();
    let quota = || cgroup_file(&node, &target, "cpu", "cpu.cfs_quota_us");
    assert_eq!(quota(), "50000", "the target's own quota");
    let unsolicited = "requested container updates";
    let before = node.runtime_log().count(unsolicited);

    let trigger = Container::sleeper("serve").label("example.com/squeeze", "trigger");
    let web = node.crictl.run_pod(&Pod::new("web")).unwrap();
    node.crictl.create_and_start(&web, &trigger).unwrap();
    wait_for("the target's quota set to 30000", Duration::from_secs(60), || (quota() == "30000").then_some(()))
        .unwrap_or_else(|e| panic!("{e}: quota {}; host log:\n{}", quota(), host.log().tail(20)));
    // The runtime keeps its record of the container's resources in step.
    assert_eq!(node.crictl.spec(&target).unwrap()["linux"]["resources"]["cpu"]["quota"], 30_000);
    assert!(node.runtime_log().count(unsolicited) > before, "the runtime logged no UpdateContainers from the host");
    no_plugin_dropped(&node);
}

#[test]
fn updates_in_replies_reach_other_containers_cgroups() {
    // exclusive-cpus hands CPU 1 to a pod that asks for one and moves every
    // other container off it (updates in the CreateContainer reply), and
    // gives it back when that container stops (in the StopContainer reply).
    let (all, last) = online_cpus();
    assert!(last >= 1, "exclusive-cpus needs two CPUs at least");
    // CPU 1 handed out: the kernel's list of the others.
    let others = match last {
        1 => "0".to_string(),
        2 => "0,2".to_string(),
        n => format!("0,2-{n}"),
    };
    let node = node();
    let cpus = (
        "30-exclusive-cpus",
        wasm(nri_wasm_components::examples::EXCLUSIVE_CPUS),
        example_toml("exclusive-cpus").to_string(),
    );
    let host = host_with(&node, &[cpus]);
    let shared_pod = node.crictl.run_pod(&Pod::new("shared")).unwrap();
    let shared = node.crictl.create_and_start(&shared_pod, &Container::sleeper("web")).unwrap();
    assert_eq!(cgroup_file(&node, &shared, "cpuset", "cpuset.cpus"), all);

    let db_pod = node.crictl.run_pod(&Pod::new("db").annotation("exclusive-cpus.nri-wasm.io/count", "1")).unwrap();
    let db = node.crictl.create_and_start(&db_pod, &Container::sleeper("db")).unwrap();
    assert_eq!(node.crictl.spec(&db).unwrap()["linux"]["resources"]["cpu"]["cpus"], "1");
    assert_eq!(cgroup_file(&node, &db, "cpuset", "cpuset.cpus"), "1");
    assert_eq!(cgroup_file(&node, &shared, "cpuset", "cpuset.cpus"), others, "the shared container moved off CPU 1");

    node.crictl.run(&["stop", &db]).unwrap();
    wait_for("the shared container back on every CPU", Duration::from_secs(60), || {
        (cgroup_file(&node, &shared, "cpuset", "cpuset.cpus") == all).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}\nhost log:\n{}", host.log().tail(20)));
    no_plugin_dropped(&node);
}

/// colocation-qos throttles offline containers when a latency-critical one
/// starts, with UpdateContainers (StartContainer has no reply), and restores
/// them when it stops. With its policy.toml (no `memory-high`, a cgroup v2
/// file that runc refuses on a cgroup v1 node, and the whole update with
/// it) this works on either cgroup version.
#[test]
fn colocation_qos_throttles_a_running_offline_container() {
    let node = node();
    let qos = (
        "70-colocation-qos",
        wasm(nri_wasm_components::examples::COLOCATION_QOS),
        example_toml("colocation-qos").to_string(),
    );
    let host = host_with(&node, &[qos]);
    let batch = node.crictl.run_pod(&Pod::new("batch").label("qos.nri-wasm.io/class", "offline")).unwrap();
    let offline = node.crictl.create_and_start(&batch, &Container::sleeper("crunch").cpu(100_000, 50_000)).unwrap();
    let quota = || cgroup_file(&node, &offline, "cpu", "cpu.cfs_quota_us");
    assert_eq!(quota(), "50000", "the offline container's own quota");

    let web = node.crictl.run_pod(&Pod::new("web").label("qos.nri-wasm.io/class", "latency-critical")).unwrap();
    let online = node.crictl.create_and_start(&web, &Container::sleeper("serve")).unwrap();
    // 20 % of the period (policy.toml's cpu-percent=20).
    wait_for("the offline container throttled to 20000", Duration::from_secs(60), || {
        (quota() == "20000").then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}: quota {}; host log:\n{}", quota(), host.log().tail(20)));

    node.crictl.run(&["stop", &online]).unwrap();
    wait_for("the offline container's quota restored", Duration::from_secs(60), || (quota() == "50000").then_some(()))
        .unwrap();
    no_plugin_dropped(&node);
}
