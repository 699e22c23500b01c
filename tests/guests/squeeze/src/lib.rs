//! Updates running containers on the host's own initiative, with resources
//! every cgroup version takes, for the real-runtime tests
//! (tests/runtimes): when a container labelled `example.com/squeeze=trigger`
//! starts, every live container labelled `example.com/squeeze=target` gets
//! the CPU quota its settings name (microseconds per 100 ms period).
//! StartContainer has no reply, so the host sends the updates with
//! UpdateContainers.
//!
//! (colocation-qos does the same for real, but its updates carry the
//! cgroup v2 `memory.high`, which runc refuses on a cgroup v1 node.)
use nri_wasm_sdk::view::{self, ContainerFilter};
use nri_wasm_sdk::*;

const LABEL: &str = "example.com/squeeze";
const PERIOD: u64 = 100_000;

struct Squeeze;

fn quota() -> Result<i64, String> {
    let q: i64 = settings()
        .trim()
        .parse()
        .map_err(|_| format!("settings: a CPU quota in microseconds, got {:?}", settings()))?;
    if !(1_000..=PERIOD as i64).contains(&q) {
        return Err(format!("settings: quota {q} is outside 1000..={PERIOD}"));
    }
    Ok(q)
}

impl Policy for Squeeze {
    const EVENTS: &'static [EventKind] = &[EventKind::StartContainer];

    fn init(_settings: &str) -> Result<(), String> {
        quota().map(drop)
    }

    fn start_container(e: &Event) -> Result<Reply, String> {
        if e.container_label(LABEL).as_deref() != Some("trigger") {
            return Ok(Reply::none());
        }
        let quota = quota()?;
        let filter = ContainerFilter::all()
            .with_label(LABEL, "target")
            .in_states(&[ContainerState::Created, ContainerState::Running]);
        let update = view::containers(&filter)
            .into_iter()
            .map(|c| {
                let cpu = LinuxCpu { quota: Some(quota), period: Some(PERIOD), ..LinuxCpu::default() };
                ContainerUpdate::new(&c.id, LinuxResources { cpu: Some(cpu), ..LinuxResources::default() })
            })
            .collect();
        Ok(Reply { adjust: None, update, evict: Vec::new() })
    }
}

export_policy!(Squeeze);
