//! Exercises the node view and the state store on CreateContainer, as its
//! settings say (`;`-separated steps, run in order):
//! - `count`: adds one to the state key `n` and sets the annotation
//!   `example.com/count` to the new value;
//! - `fill:N`: stores N bytes under `fill` (a refused write denies the event
//!   with the host's reason);
//! - `list-ids` / `list-full`: lists every container of the node view (ids
//!   only, or with details) and sets `example.com/listed` to how many;
//! - `self`: sets `example.com/self` to what the view says of the container
//!   being created (its name, and the annotation `example.com/count` as the
//!   policies before this one left it);
//! - `deny`: denies the event; `trap`: traps;
//! - `sync-trap`: also subscribes to `synchronize`, and traps there.
use nri_wasm_sdk::view::{self, ContainerFilter};
use nri_wasm_sdk::*;

struct Probe;

impl Policy for Probe {
    fn events() -> Vec<EventKind> {
        match settings().contains("sync-trap") {
            true => vec![EventKind::CreateContainer, EventKind::Synchronize],
            false => vec![EventKind::CreateContainer],
        }
    }

    fn synchronize() -> Result<Reply, String> {
        if settings().contains("sync-trap") {
            core::arch::wasm32::unreachable()
        }
        Ok(Reply::none())
    }

    fn create_container(e: ContainerEvent) -> Result<Reply, String> {
        let mut adjust = ContainerAdjustment::new();
        for step in settings().split(';').map(str::trim).filter(|s| !s.is_empty()) {
            match step.split_once(':').unwrap_or((step, "")) {
                ("count", _) => {
                    let n = state::get("n").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1;
                    state::set("n", &n.to_string()).map_err(|e| format!("{e:?}"))?;
                    adjust = adjust.set_annotation("example.com/count", &n.to_string());
                }
                ("fill", n) => {
                    let n: usize = n.parse().map_err(|_| format!("fill:{n} is not a size"))?;
                    state::set("fill", &"x".repeat(n)).map_err(|e| match e {
                        state::StateError::LimitExceeded(limit) => {
                            format!("state write of {n} bytes refused: limit of {limit} bytes exceeded")
                        }
                        state::StateError::InvalidKey(why) => why,
                    })?;
                }
                ("list-ids", _) => {
                    let n = view::container_ids(&ContainerFilter::all()).len();
                    adjust = adjust.set_annotation("example.com/listed", &n.to_string());
                }
                ("list-full", _) => {
                    let n = view::containers(&ContainerFilter::all()).len();
                    adjust = adjust.set_annotation("example.com/listed", &n.to_string());
                }
                ("self", _) => {
                    let me = view::container(&e.container.id).ok_or("the view does not show the container")?;
                    let count = me.annotation("example.com/count").unwrap_or("-").to_string();
                    adjust = adjust.set_annotation("example.com/self", &format!("{} {count}", me.name));
                }
                ("deny", _) => return Err("denied by the probe".into()),
                ("sync-trap", _) => {}
                ("trap", _) => core::arch::wasm32::unreachable(),
                (other, _) => return Err(format!("unknown probe step {other:?}")),
            }
        }
        Ok(Reply::adjust(adjust))
    }
}

export_policy!(Probe);
