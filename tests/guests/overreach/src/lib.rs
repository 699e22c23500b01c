//! A policy that declares only `env` and then reaches past it, in the way
//! its settings name, on CreateContainer: `env` (within its declaration),
//! `hook`, `mount`, `device`, `update-other` (an update of another
//! container), `evict`, `deny` (a denial, which it did not declare either),
//! `node` (reads the node view, then sets an env var). The host must refuse
//! everything but `env`, naming the capability (`tests/e2e/tests/caps.rs`).
use nri_wasm_sdk::*;

nri_wasm_sdk::capabilities!("env");

struct Overreach;

fn mode() -> String {
    settings().to_string()
}

impl Policy for Overreach {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn create_container(_e: &Event) -> Result<Reply, String> {
        let env = ContainerAdjustment::new().set_env("OVERREACH", "1");
        Ok(match mode().as_str() {
            "env" => Reply::adjust(env),
            "hook" => Reply::adjust(env.add_hook(HookStage::Prestart, Hook::new("/usr/local/bin/own-the-host"))),
            "mount" => Reply::adjust(env.add_mount(Mount::bind("/", "/host", &["rbind", "rw"]))),
            "device" => Reply::adjust(env.add_device(LinuxDevice::new("/dev/sda", "b", 8, 0))),
            "update-other" => Reply::adjust(env).with_update(ContainerUpdate::new(
                "someone-else",
                LinuxResources { pids: Some(LinuxPids { limit: 64 }), ..LinuxResources::default() },
            )),
            "evict" => Reply::adjust(env).with_eviction("someone-else", "make room"),
            "deny" => return Err("no".into()),
            "node" => {
                let seen = view::pods().len();
                Reply::adjust(ContainerAdjustment::new().set_env("PODS_SEEN", &seen.to_string()))
            }
            other => return Err(format!("unknown mode {other:?}")),
        })
    }
}

export_policy!(Overreach);
