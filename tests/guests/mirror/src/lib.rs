//! The wasm twin of the native reference plugin
//! (`tests/runtimes/native-plugin/main.go`), for the differential tests: its
//! settings are that plugin's adjustment flags, one per line, written as on
//! its command line (`-env-set=FOO=bar`, `-memory-limit=1000000`, ...), and
//! on CreateContainer it answers with the same reply the plugin builds from
//! them, entries in the same order. Keep the two in step: a difference
//! between them would show up as a difference between runtime and host.
//!
//! Flags (values as the plugin takes them: `:` between fields, `,` within a
//! list): `env-set K=V`, `env-remove K`, `annotation-set K=V`,
//! `annotation-remove K`, `mount-add DST:SRC[:OPT,...]` (a bind mount),
//! `mount-remove DST`, `memory-limit N`, `cpu-shares N`, `cpu-quota N`,
//! `cpu-period N`, `pids-limit N`, `rlimit TYPE:SOFT:HARD`,
//! `device-add PATH:TYPE:MAJOR:MINOR[:MODE]` (octal mode),
//! `device-remove PATH`, `hook KIND:PATH[:ARG,...]`, and
//! `update NAME:KEY=N[,KEY=N...]`: an update of every other created or
//! running container named NAME in the node view (keys `memory-limit`,
//! `cpu-shares`, `cpu-quota`, `cpu-period`, `pids-limit`).
use nri_wasm_sdk::view::{self, ContainerFilter};
use nri_wasm_sdk::*;

struct Mirror;

impl Policy for Mirror {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        parse(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let (adjust, updates) = parse(settings())?;
        let mut reply = Reply::adjust(adjust);
        if updates.is_empty() {
            return Ok(reply);
        }
        let own = &e.container_meta().id;
        let live = ContainerFilter::all().in_states(&[ContainerState::Created, ContainerState::Running]);
        let containers = view::containers(&live);
        for (name, resources) in &updates {
            for c in containers.iter().filter(|c| &c.name == name && &c.id != own) {
                reply = reply.with_update(ContainerUpdate::new(&c.id, resources.clone()));
            }
        }
        Ok(reply)
    }
}

export_policy!(Mirror);

type Updates = Vec<(String, LinuxResources)>;

fn parse(settings: &str) -> Result<(ContainerAdjustment, Updates), String> {
    let mut a = ContainerAdjustment::new();
    let mut updates = Vec::new();
    for line in settings.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (flag, value) = line
            .strip_prefix('-')
            .and_then(|l| l.split_once('='))
            .ok_or_else(|| format!("expected -flag=value, got {line:?}"))?;
        apply(&mut a, &mut updates, flag, value).map_err(|e| format!("-{flag}={value}: {e}"))?;
    }
    Ok((a, updates))
}

fn key_value(v: &str) -> Result<KeyValue, String> {
    let (key, value) = v.split_once('=').ok_or("expected K=V")?;
    Ok(KeyValue { key: key.into(), value: value.into() })
}

fn removal(v: &str) -> KeyValue {
    KeyValue { key: format!("-{v}"), value: String::new() }
}

fn number<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{v:?} is not a number of the right kind"))
}

fn list(v: &str) -> Vec<String> {
    v.split(',').map(String::from).collect()
}

fn set_resource(r: &mut LinuxResources, key: &str, v: &str) -> Result<(), String> {
    match key {
        "memory-limit" => r.memory.get_or_insert_with(LinuxMemory::default).limit = Some(number(v)?),
        "cpu-shares" => r.cpu.get_or_insert_with(LinuxCpu::default).shares = Some(number(v)?),
        "cpu-quota" => r.cpu.get_or_insert_with(LinuxCpu::default).quota = Some(number(v)?),
        "cpu-period" => r.cpu.get_or_insert_with(LinuxCpu::default).period = Some(number(v)?),
        "pids-limit" => r.pids = Some(LinuxPids { limit: number(v)? }),
        _ => return Err(format!("unknown resource {key:?}")),
    }
    Ok(())
}

fn apply(a: &mut ContainerAdjustment, updates: &mut Updates, flag: &str, v: &str) -> Result<(), String> {
    match flag {
        "env-set" => a.env.push(key_value(v)?),
        "env-remove" => a.env.push(removal(v)),
        "annotation-set" => a.annotations.push(key_value(v)?),
        "annotation-remove" => a.annotations.push(removal(v)),
        "mount-add" => {
            let mut parts = v.splitn(3, ':');
            let (dst, src) = match (parts.next(), parts.next()) {
                (Some(d), Some(s)) => (d, s),
                _ => return Err("expected DST:SRC[:OPTIONS]".into()),
            };
            let options = parts.next().filter(|o| !o.is_empty()).map(list).unwrap_or_default();
            a.mounts.push(Mount { destination: dst.into(), type_: "bind".into(), source: src.into(), options });
        }
        "mount-remove" => a.mounts.push(Mount {
            destination: format!("-{v}"),
            type_: String::new(),
            source: String::new(),
            options: Vec::new(),
        }),
        "memory-limit" | "cpu-shares" | "cpu-quota" | "cpu-period" | "pids-limit" => {
            set_resource(a.resources_mut(), flag, v)?
        }
        "rlimit" => {
            let parts: Vec<&str> = v.split(':').collect();
            let [kind, soft, hard] = parts[..] else { return Err("expected TYPE:SOFT:HARD".into()) };
            a.rlimits.push(PosixRlimit { type_: kind.into(), soft: number(soft)?, hard: number(hard)? });
        }
        "device-add" => {
            let parts: Vec<&str> = v.split(':').collect();
            if parts.len() != 4 && parts.len() != 5 {
                return Err("expected PATH:TYPE:MAJOR:MINOR[:MODE]".into());
            }
            let file_mode = match parts.get(4) {
                Some(m) => Some(u32::from_str_radix(m, 8).map_err(|_| format!("{m:?} is not an octal mode"))?),
                None => None,
            };
            a.linux_mut().devices.push(LinuxDevice {
                path: parts[0].into(),
                type_: parts[1].into(),
                major: number(parts[2])?,
                minor: number(parts[3])?,
                file_mode,
                uid: None,
                gid: None,
            });
        }
        "device-remove" => a.linux_mut().devices.push(LinuxDevice {
            path: format!("-{v}"),
            type_: String::new(),
            major: 0,
            minor: 0,
            file_mode: None,
            uid: None,
            gid: None,
        }),
        "hook" => {
            let mut parts = v.splitn(3, ':');
            let (kind, path) = match (parts.next(), parts.next()) {
                (Some(k), Some(p)) => (k, p),
                _ => return Err("expected KIND:PATH[:ARGS]".into()),
            };
            let args = parts.next().filter(|x| !x.is_empty()).map(list).unwrap_or_default();
            let hook = Hook { path: path.into(), args, env: Vec::new(), timeout: None };
            let stage = HookStage::parse(kind).ok_or_else(|| format!("unknown hook kind {kind:?}"))?;
            stage.of_mut(a.hooks.get_or_insert_with(Hooks::default)).push(hook);
        }
        "update" => {
            let (name, rest) = v
                .split_once(':')
                .filter(|(n, r)| !n.is_empty() && !r.is_empty())
                .ok_or("expected NAME:KEY=N[,KEY=N...]")?;
            let mut resources = LinuxResources::default();
            for kv in rest.split(',') {
                let (k, n) = kv.split_once('=').ok_or_else(|| format!("expected KEY=N in {kv:?}"))?;
                set_resource(&mut resources, k, n)?;
            }
            updates.push((name.to_string(), resources));
        }
        _ => return Err("unknown flag".into()),
    }
    Ok(())
}
