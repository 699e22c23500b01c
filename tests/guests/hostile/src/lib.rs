//! The suite's adversary: a policy that attacks the host in the way its
//! settings name, on CreateContainer, or in `configure` for the `init-`
//! modes. Each mode is one class of attack; `tests/e2e/tests/hostile.rs`
//! runs them all and says what the host must do about each.
//!
//! Load time (`configure`): `init-print` (stdout and stderr), `init-panic`,
//! `init-sleep` (an hour), `init-exit`.
//!
//! Waiting where epochs cannot reach: `sleep` (an hour in a WASI sleep),
//! `sleep-forever` (a pollable that never fires), `stdin` (reads stdin);
//! `sync-sleep` also subscribes to `synchronize` and sleeps an hour there.
//!
//! Host resources: `pollables` (holds ever more pollables), `random-huge`
//! (asks for 64 MiB of random bytes, over and over), `log-flood` (a million
//! log lines), `log-huge` (one 12 MiB line), `log-forge` (a line with
//! newlines and escapes), `output-flood` (writes to stdout until stopped),
//! `state-flood` (fills its state past the limit).
//!
//! Strings and copies: `deny-huge` (an 8 MiB reason), `deny-forge`,
//! `reply-transfer` (a 20 MiB annotation), `reply-large` (a 2 MiB one).
//!
//! Host work: `one-container-updates:N` (N updates of one container, each a
//! new hugepage size), `unknown-updates:N` (N updates and evictions of
//! containers that do not exist; it reads the node view, so the host keeps
//! the view complete).
//!
//! Outputs the runtime would refuse: `invalid:<case>`, cases listed in
//! [`invalid`].
//!
//! Lies: `bad-pointer` and `bad-utf8` hand `host.log` a string outside the
//! guest's memory, and one that is not UTF-8.
//!
//! Escapes: `exit` (`wasi:cli/exit`), `fs` (opens host files), `net`
//! (connects and resolves), `env` (reads environment and arguments); the
//! last three answer with what they managed to do.
//!
//! Host calls: `host-call:<case>` calls one host function over and over,
//! until the host stops it, with an argument as large as one transfer may
//! carry (16 MiB, as the host counts it) where the function takes one; the
//! cases are listed in [`host_call`]. On a node of thousands of containers,
//! each such call must end in time, and the whole call at its deadline.
//!
//! Not attacks: `spin:N` computes for N ms of wall-clock time, then
//! annotates `example.com/spun` (a slow but well-behaved policy, for the
//! chain's time plan); `read-view` also subscribes to `synchronize` and reads the
//! whole node view there and on CreateContainer (every pod, every
//! container's id, every running container with its details), as a
//! resource policy reconciling its state would (the Synchronize benchmark).
use nri_wasm_sdk::bindings::nri_wasm::policy::{
    event as raw_event, host as raw_host, node as raw_node, state as raw_state,
};
use nri_wasm_sdk::*;

struct Hostile;

#[link(wasm_import_module = "nri-wasm:policy/host@0.3.0")]
extern "C" {
    /// `host.log` as the component imports it: level, pointer, length.
    #[link_name = "log"]
    fn raw_log(level: i32, ptr: *const u8, len: usize);
}

/// Calls `host.log` with a pointer and length of our choosing.
fn log_raw(ptr: *const u8, len: usize) {
    // SAFETY: the host reads (or refuses to read) the bytes; nothing on
    // this side is touched.
    unsafe { raw_log(1, ptr, len) }
}

fn mode() -> &'static str {
    settings()
}

fn hour() -> std::time::Duration {
    std::time::Duration::from_secs(3600)
}

fn annotate(key: &str, value: &str) -> Result<Reply, String> {
    Ok(Reply::adjust(ContainerAdjustment::new().set_annotation(key, value)))
}

fn resources(f: impl FnOnce(&mut LinuxResources)) -> LinuxResources {
    let mut r = LinuxResources::default();
    f(&mut r);
    r
}

fn memory(f: impl FnOnce(&mut LinuxMemory)) -> LinuxResources {
    resources(|r| {
        let mut m = LinuxMemory::default();
        f(&mut m);
        r.memory = Some(m);
    })
}

fn cpu(f: impl FnOnce(&mut LinuxCpu)) -> LinuxResources {
    resources(|r| {
        let mut c = LinuxCpu::default();
        f(&mut c);
        r.cpu = Some(c);
    })
}

fn mount(destination: &str, source: &str) -> Mount {
    Mount { destination: destination.into(), type_: "bind".into(), source: source.into(), options: vec!["ro".into()] }
}

/// Outputs NRI or the OCI runtime would refuse, by name.
fn invalid(case: &str) -> Result<Reply, String> {
    let adjust = |a: ContainerAdjustment| Ok(Reply::adjust(a));
    let with_resources = |r: LinuxResources| {
        let mut a = ContainerAdjustment::new();
        a.linux_mut().resources = Some(r);
        Ok(Reply::adjust(a))
    };
    match case {
        "relative-mount" => adjust(ContainerAdjustment::new().add_mount(mount("data", "/srv/data"))),
        "dotdot-mount" => adjust(ContainerAdjustment::new().add_mount(mount("/data/../../etc", "/srv/data"))),
        "relative-hook" => {
            let mut a = ContainerAdjustment::new();
            let hook = Hook { path: "bin/hook".into(), args: vec![], env: vec![], timeout: None };
            a.hooks = Some(Hooks {
                prestart: vec![],
                create_runtime: vec![hook],
                create_container: vec![],
                start_container: vec![],
                poststart: vec![],
                poststop: vec![],
            });
            adjust(a)
        }
        "nul-env" => adjust(ContainerAdjustment::new().set_env("A\0B", "x")),
        "nul-annotation" => adjust(ContainerAdjustment::new().set_annotation("example.com/a\0b", "x")),
        "nul-mount" => adjust(ContainerAdjustment::new().add_mount(mount("/data\0x", "/srv"))),
        "nul-arg" => adjust(ContainerAdjustment::new().replace_args(&["sh", "-c\0rm"])),
        "memory" => with_resources(memory(|m| m.limit = Some(-7))),
        "quota" => with_resources(cpu(|c| c.quota = Some(-5))),
        "period" => with_resources(cpu(|c| c.period = Some(0))),
        "cpuset" => with_resources(cpu(|c| c.cpus = "abc,-1".into())),
        "oom" => {
            let mut a = ContainerAdjustment::new();
            a.linux_mut().oom_score_adj = Some(100_000);
            adjust(a)
        }
        "pids" => with_resources(resources(|r| r.pids = Some(LinuxPids { limit: -9 }))),
        other => Err(format!("unknown invalid case {other}")),
    }
}

/// Bytes one transfer to the host may carry (the host's limit), less a
/// margin for the rest of the call's arguments.
const TRANSFER: usize = (16 << 20) - 4096;
/// Host bytes of one `key-value` as the host counts them: two strings of
/// 24 bytes, plus their contents.
const KV_HOST_BYTES: usize = 48;

/// As many copies of `key=value` as one transfer carries.
fn kv_flood(key: &str, value: &str) -> Vec<KeyValue> {
    let n = TRANSFER / (KV_HOST_BYTES + key.len() + value.len());
    vec![KeyValue { key: key.into(), value: value.into() }; n]
}

/// As many states as one transfer carries (one byte each): states no
/// container is in, then `running` last, so that a host testing a container
/// against the list element by element goes through all of it.
fn state_flood() -> Vec<ContainerState> {
    let mut states = vec![ContainerState::Unknown; TRANSFER - 1];
    states.push(ContainerState::Running);
    states
}

/// A string as long as one transfer carries.
fn huge_string() -> String {
    "k".repeat(TRANSFER)
}

fn filter() -> raw_node::ContainerFilter {
    raw_node::ContainerFilter { pod_id: None, states: Vec::new(), labels: Vec::new(), pod_labels: Vec::new() }
}

/// Calls `call` until the host stops the policy.
fn forever<T>(mut call: impl FnMut() -> T) -> ! {
    loop {
        std::hint::black_box(call());
    }
}

/// One host function, called forever with the largest argument one
/// transfer carries (or, for a function without arguments, as it is).
fn host_call(case: &str) -> Result<Reply, String> {
    match case {
        // node: filters whose every element is the same (a filter the host
        // tested element by element, per container, took minutes).
        "containers-states" => {
            let f = raw_node::ContainerFilter { states: state_flood(), ..filter() };
            forever(|| raw_node::containers(&f))
        }
        "containers-labels" => {
            let f = raw_node::ContainerFilter { labels: kv_flood("app", "web"), ..filter() };
            forever(|| raw_node::containers(&f))
        }
        "containers-distinct-labels" => {
            let n = TRANSFER / (KV_HOST_BYTES + 16);
            let labels = (0..n).map(|i| KeyValue { key: format!("{i:016}"), value: String::new() }).collect();
            let f = raw_node::ContainerFilter { labels, ..filter() };
            forever(|| raw_node::containers(&f))
        }
        "containers-pod-labels" => {
            let f = raw_node::ContainerFilter { pod_labels: kv_flood("tier", "x"), ..filter() };
            forever(|| raw_node::containers(&f))
        }
        "containers-pod-id" => {
            let f = raw_node::ContainerFilter { pod_id: Some(huge_string()), ..filter() };
            forever(|| raw_node::containers(&f))
        }
        "ids-states" => {
            let f = raw_node::ContainerFilter { states: state_flood(), ..filter() };
            forever(|| raw_node::container_ids(&f))
        }
        "ids-labels" => {
            let f = raw_node::ContainerFilter { labels: kv_flood("app", "web"), ..filter() };
            forever(|| raw_node::container_ids(&f))
        }
        "ids-pod-labels" => {
            let f = raw_node::ContainerFilter { pod_labels: kv_flood("tier", "x"), ..filter() };
            forever(|| raw_node::container_ids(&f))
        }
        "pods" => forever(raw_node::pods),
        "pod" => {
            let id = huge_string();
            forever(|| raw_node::pod(&id))
        }
        "container" => {
            let id = huge_string();
            forever(|| raw_node::container(&id))
        }
        "topology" => forever(raw_node::topology),
        // state
        "state-get" => {
            let key = huge_string();
            forever(|| raw_state::get(&key))
        }
        "state-set-key" => {
            let key = huge_string();
            forever(|| raw_state::set(&key, "v"))
        }
        "state-set-value" => {
            let value = huge_string();
            forever(|| raw_state::set("key", &value))
        }
        "state-remove" => {
            let key = huge_string();
            forever(|| raw_state::remove(&key))
        }
        "state-keys" => {
            let prefix = huge_string();
            forever(|| raw_state::keys(&prefix))
        }
        // host
        "log" => {
            let line = huge_string();
            forever(|| raw_host::log(LogLevel::Info, &line))
        }
        "facts" => forever(|| (raw_host::settings(), raw_host::runtime(), raw_host::node())),
        // event
        "pod-label" => {
            let key = huge_string();
            forever(|| raw_event::pod_label(&key))
        }
        "pod-annotation" => {
            let key = huge_string();
            forever(|| raw_event::pod_annotation(&key))
        }
        "container-label" => {
            let key = huge_string();
            forever(|| raw_event::container_label(&key))
        }
        "container-annotation" => {
            let key = huge_string();
            forever(|| raw_event::container_annotation(&key))
        }
        "container-env-var" => {
            let name = huge_string();
            forever(|| raw_event::container_env_var(&name))
        }
        "event-reads" => forever(|| {
            (
                raw_event::whole(),
                raw_event::pod(),
                raw_event::pod_metadata(),
                raw_event::pod_labels(),
                raw_event::pod_annotations(),
                raw_event::container(),
                raw_event::container_metadata(),
                raw_event::container_labels(),
                raw_event::container_annotations(),
                raw_event::container_env(),
                raw_event::container_resources(),
                raw_event::requested_resources(),
            )
        }),
        other => Err(format!("unknown host-call case {other}")),
    }
}

/// What a policy reconciling its state reads of the node: every pod, every
/// container's id, every running container in full.
fn read_view() -> String {
    let pods = view::pods().len();
    let ids = view::container_ids(&view::ContainerFilter::all()).len();
    let running = view::containers(&view::ContainerFilter::all().in_states(&[ContainerState::Running])).len();
    format!("{pods}/{ids}/{running}")
}

/// Settings of the form `name:N`.
fn count(mode: &str, name: &str) -> Option<usize> {
    mode.strip_prefix(name)?.strip_prefix(':')?.parse().ok()
}

impl Policy for Hostile {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer, EventKind::Synchronize];

    fn events() -> Vec<EventKind> {
        match mode() {
            "read-view" | "sync-sleep" => vec![EventKind::CreateContainer, EventKind::Synchronize],
            _ => vec![EventKind::CreateContainer],
        }
    }

    fn synchronize() -> Result<Reply, String> {
        if mode() == "sync-sleep" {
            std::thread::sleep(hour());
            return Ok(Reply::none());
        }
        std::hint::black_box(read_view());
        Ok(Reply::none())
    }

    fn init(settings: &str) -> Result<(), String> {
        match settings {
            "init-print" => {
                println!("configure writes to stdout");
                eprintln!("configure writes to stderr");
            }
            "init-panic" => panic!("configure panics on purpose"),
            "init-sleep" => std::thread::sleep(hour()),
            "init-exit" => std::process::exit(0),
            _ => {}
        }
        Ok(())
    }

    fn create_container(_e: &Event) -> Result<Reply, String> {
        let mode = mode();
        if let Some(n) = count(mode, "one-container-updates") {
            let mut reply = Reply::none();
            reply.update = (0..n)
                .map(|i| {
                    let r = resources(|r| {
                        r.hugepage_limits = vec![HugepageLimit { page_size: format!("{}KB", i + 1), limit: 1 << 20 }]
                    });
                    ContainerUpdate::new("c-one", r)
                })
                .collect();
            return Ok(reply);
        }
        if let Some(n) = count(mode, "unknown-updates") {
            // Reading the node view makes the host keep it complete, and
            // check updates against it.
            let known = view::container_ids(&view::ContainerFilter::all()).len();
            let mut reply = Reply::none();
            reply.update = (0..n)
                .map(|i| ContainerUpdate::new(&format!("gone-{i}"), memory(|m| m.limit = Some(1 << 30))))
                .collect();
            reply.evict = (0..n)
                .map(|i| ContainerEviction { container_id: format!("gone-{i}"), reason: format!("{known} known") })
                .collect();
            return Ok(reply);
        }
        if let Some(case) = mode.strip_prefix("invalid:") {
            return invalid(case);
        }
        if let Some(ms) = count(mode, "spin") {
            let started = std::time::Instant::now();
            let mut spins = 0u64;
            while started.elapsed() < std::time::Duration::from_millis(ms as u64) {
                spins = std::hint::black_box(spins + 1);
            }
            return annotate("example.com/spun", &ms.to_string());
        }
        if let Some(case) = mode.strip_prefix("host-call:") {
            return host_call(case);
        }
        if mode == "read-view" {
            return annotate("example.com/view", &read_view());
        }
        match mode {
            "sleep" => {
                std::thread::sleep(hour());
                annotate("example.com/hostile", "woke up")
            }
            "sleep-forever" => {
                let never = wasip2::clocks::monotonic_clock::subscribe_duration(u64::MAX);
                wasip2::io::poll::poll(&[&never]);
                annotate("example.com/hostile", "woke up")
            }
            "stdin" => {
                let mut input = Vec::new();
                let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut input);
                annotate("example.com/stdin", &input.len().to_string())
            }
            "pollables" => {
                let mut held = Vec::new();
                loop {
                    held.push(wasip2::clocks::monotonic_clock::subscribe_duration(1));
                }
            }
            "random-huge" => {
                let mut total = 0usize;
                loop {
                    total += wasip2::random::random::get_random_bytes(64 << 20).len();
                    std::hint::black_box(total);
                }
            }
            "log-flood" => {
                for i in 0..1_000_000 {
                    log(LogLevel::Error, &format!("flooding the host's log, line {i}"));
                }
                annotate("example.com/hostile", "logged")
            }
            "log-huge" => {
                log(LogLevel::Error, &"x".repeat(12 << 20));
                annotate("example.com/hostile", "logged")
            }
            "log-forge" => {
                log(
                    LogLevel::Info,
                    "harmless\n2026-01-01T00:00:00Z ERROR nri_wasm: forged line \u{1b}[31mred\u{1b}[0m",
                );
                annotate("example.com/hostile", "logged")
            }
            "output-flood" => loop {
                println!("{}", "o".repeat(4096));
            },
            "state-flood" => {
                for i in 0.. {
                    if state::set(&format!("key-{i}"), &"v".repeat(4096)).is_err() {
                        return annotate("example.com/state", &i.to_string());
                    }
                }
                unreachable!()
            }
            "deny-huge" => Err("r".repeat(8 << 20)),
            "deny-forge" => Err("no\n2026-01-01T00:00:00Z INFO nri_wasm: allowed everything \u{1b}[2J".into()),
            "reply-transfer" => annotate("example.com/big", &"b".repeat(20 << 20)),
            "reply-large" => annotate("example.com/big", &"b".repeat(2 << 20)),
            "exit" => std::process::exit(0),
            "bad-pointer" => {
                log_raw(0xffff_fff0usize as *const u8, 256);
                annotate("example.com/hostile", "lied")
            }
            "bad-utf8" => {
                let bytes = [0xffu8, 0xfe, 0xfd];
                log_raw(bytes.as_ptr(), bytes.len());
                annotate("example.com/hostile", "lied")
            }
            "fs" => {
                let opened = std::fs::read("/etc/passwd").is_ok() || std::fs::read_dir("/").is_ok();
                let preopens = wasip2::filesystem::preopens::get_directories().len();
                annotate("example.com/fs", &format!("opened={opened} preopens={preopens}"))
            }
            "net" => {
                let connected = std::net::TcpStream::connect("127.0.0.1:1").is_ok();
                let resolved = std::net::ToSocketAddrs::to_socket_addrs("localhost:80").is_ok();
                annotate("example.com/net", &format!("connected={connected} resolved={resolved}"))
            }
            "env" => {
                let vars = std::env::vars().count();
                let args = std::env::args().count();
                annotate("example.com/env", &format!("vars={vars} args={args}"))
            }
            other => annotate("example.com/hostile", other),
        }
    }
}

export_policy!(Hostile);
