//! Returns exactly the reply its settings describe, for the merge tests
//! (tests/e2e/tests/merge_plugins.rs parses the same text into protobuf).
//!
//! The settings are lines (or `;`-separated parts), one instruction each,
//! whitespace-separated words; the word `""` stands for an empty string:
//!
//! ```text
//! annotation k=v          annotation -k
//! env K=V                 env -K
//! mount /dst /src [o,p]   mount -/dst
//! device /dev/x c 1 3     device -/dev/x
//! rlimit RLIMIT_NOFILE soft hard
//! hook prestart|create-runtime|create-container|start-container|poststart|poststop /path [args...]
//! args a b c              (args "" a b: replace earlier args)
//! memory-limit N    cpu-shares N    cpuset 0-1    oom-score-adj N
//! cgroups-path P    cdi vendor.com/class=name     hugepage 2MB N
//! sysctl k=v        sysctl -k       unified k=v
//! update <id> [memory-limit N] [cpu-shares N] [cpuset S] [ignore-failure]
//! evict <id> reason words
//! deny reason words
//! ```
//!
//! The same reply is returned for CreateContainer, UpdateContainer and
//! StopContainer; without adjustment lines it is valid for all three.
use nri_wasm_sdk::*;

struct Replay;

impl Policy for Replay {
    const EVENTS: &'static [EventKind] =
        &[EventKind::CreateContainer, EventKind::UpdateContainer, EventKind::StopContainer];

    /// Checks the text; a `deny` line only takes effect on events.
    fn init(settings: &str) -> Result<(), String> {
        let without_denial: Vec<&str> =
            settings.split(['\n', ';']).filter(|l| !l.trim_start().starts_with("deny")).collect();
        parse(&without_denial.join("\n")).map(drop)
    }

    fn create_container(_e: &Event) -> Result<Reply, String> {
        parse(settings())
    }

    fn update_container(_e: &Event) -> Result<Reply, String> {
        parse(settings())
    }

    fn stop_container(_e: &Event) -> Result<Reply, String> {
        parse(settings())
    }
}

export_policy!(Replay);

fn word(w: &str) -> String {
    if w == "\"\"" {
        String::new()
    } else {
        w.to_string()
    }
}

fn num<T: std::str::FromStr>(w: Option<&&str>, line: &str) -> Result<T, String> {
    w.and_then(|w| w.parse().ok()).ok_or_else(|| format!("expected a number in {line:?}"))
}

fn arg<'a>(w: Option<&&'a str>, line: &str) -> Result<&'a str, String> {
    w.copied().ok_or_else(|| format!("missing argument in {line:?}"))
}

fn key_value(w: &str) -> KeyValue {
    match w.split_once('=') {
        Some((k, v)) => KeyValue { key: k.into(), value: v.into() },
        None => KeyValue { key: w.into(), value: String::new() },
    }
}

fn hook(path: &str, args: &[&str]) -> Hook {
    Hook { path: path.into(), args: args.iter().map(|a| word(a)).collect(), env: Vec::new(), timeout: None }
}

fn empty_hooks() -> Hooks {
    Hooks {
        prestart: Vec::new(),
        create_runtime: Vec::new(),
        create_container: Vec::new(),
        start_container: Vec::new(),
        poststart: Vec::new(),
        poststop: Vec::new(),
    }
}

fn parse(text: &str) -> Result<Reply, String> {
    let mut adjust: Option<ContainerAdjustment> = None;
    let mut reply = Reply::none();
    for line in text.split(['\n', ';']).map(str::trim).filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (verb, rest) = (words[0], &words[1..]);
        let first = rest.first();
        if verb == "deny" {
            return Err(rest.join(" "));
        }
        if verb == "evict" {
            let id = arg(first, line)?;
            reply = reply.with_eviction(id, &rest[1..].join(" "));
            continue;
        }
        if verb == "update" {
            reply.update.push(update(line, rest)?);
            continue;
        }
        let a = adjust.get_or_insert_with(ContainerAdjustment::new);
        match verb {
            "annotation" => a.annotations.push(key_value(arg(first, line)?)),
            "env" => a.env.push(key_value(arg(first, line)?)),
            "mount" => {
                let dst = arg(first, line)?;
                let m = if dst.starts_with('-') {
                    Mount { destination: dst.into(), type_: String::new(), source: String::new(), options: Vec::new() }
                } else {
                    let src = arg(rest.get(1), line)?;
                    let options = rest.get(2).map(|o| o.split(',').map(String::from).collect()).unwrap_or_default();
                    Mount { destination: dst.into(), type_: "bind".into(), source: src.into(), options }
                };
                a.mounts.push(m);
            }
            "device" => {
                let path = arg(first, line)?;
                let d = if path.starts_with('-') {
                    LinuxDevice {
                        path: path.into(),
                        type_: String::new(),
                        major: 0,
                        minor: 0,
                        file_mode: None,
                        uid: None,
                        gid: None,
                    }
                } else {
                    LinuxDevice {
                        path: path.into(),
                        type_: arg(rest.get(1), line)?.into(),
                        major: num(rest.get(2), line)?,
                        minor: num(rest.get(3), line)?,
                        file_mode: None,
                        uid: None,
                        gid: None,
                    }
                };
                a.linux_mut().devices.push(d);
            }
            "rlimit" => {
                let kind = arg(first, line)?;
                a.rlimits.push(PosixRlimit {
                    type_: kind.into(),
                    soft: num(rest.get(1), line)?,
                    hard: num(rest.get(2), line)?,
                });
            }
            "hook" => {
                let kind = arg(first, line)?;
                let h = hook(arg(rest.get(1), line)?, rest.get(2..).unwrap_or_default());
                let hooks = a.hooks.get_or_insert_with(empty_hooks);
                match kind {
                    "prestart" => hooks.prestart.push(h),
                    "create-runtime" => hooks.create_runtime.push(h),
                    "create-container" => hooks.create_container.push(h),
                    "start-container" => hooks.start_container.push(h),
                    "poststart" => hooks.poststart.push(h),
                    "poststop" => hooks.poststop.push(h),
                    _ => return Err(format!("unknown hook kind in {line:?}")),
                }
            }
            "args" => a.args = rest.iter().map(|w| word(w)).collect(),
            "memory-limit" => {
                a.resources_mut().memory.get_or_insert_with(LinuxMemory::default).limit = Some(num(first, line)?)
            }
            "cpu-shares" => {
                a.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).shares = Some(num(first, line)?)
            }
            "cpuset" => a.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).cpus = arg(first, line)?.into(),
            "oom-score-adj" => a.linux_mut().oom_score_adj = Some(num(first, line)?),
            "cgroups-path" => a.linux_mut().cgroups_path = arg(first, line)?.into(),
            "cdi" => a.cdi_devices.push(arg(first, line)?.into()),
            "hugepage" => {
                let size = arg(first, line)?;
                let limit = num(rest.get(1), line)?;
                a.resources_mut().hugepage_limits.push(HugepageLimit { page_size: size.into(), limit });
            }
            "sysctl" => a.linux_mut().sysctl.push(key_value(arg(first, line)?)),
            "unified" => a.resources_mut().unified.push(key_value(arg(first, line)?)),
            _ => return Err(format!("unknown instruction {line:?}")),
        }
    }
    reply.adjust = adjust;
    Ok(reply)
}

fn update(line: &str, rest: &[&str]) -> Result<ContainerUpdate, String> {
    let id = arg(rest.first(), line)?;
    let mut resources = LinuxResources::default();
    let mut ignore_failure = false;
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            "ignore-failure" => ignore_failure = true,
            "memory-limit" => {
                i += 1;
                resources.memory.get_or_insert_with(LinuxMemory::default).limit = Some(num(rest.get(i), line)?);
            }
            "cpu-shares" => {
                i += 1;
                resources.cpu.get_or_insert_with(LinuxCpu::default).shares = Some(num(rest.get(i), line)?);
            }
            "cpuset" => {
                i += 1;
                resources.cpu.get_or_insert_with(LinuxCpu::default).cpus = arg(rest.get(i), line)?.into();
            }
            other => return Err(format!("unknown update setting {other:?} in {line:?}")),
        }
        i += 1;
    }
    let mut u = ContainerUpdate::new(id, resources);
    u.ignore_failure = ignore_failure;
    Ok(u)
}
