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
//! - `read-all`: reads every piece of the event through the `event`
//!   interface and denies the event if one differs from the whole event;
//!   otherwise sets `example.com/read` to the number of pod labels, container
//!   annotations and env entries it saw (`labels/annotations/env`);
//! - `deny`: denies the event; `trap`: traps;
//! - `sync-trap`: also subscribes to `synchronize`, and traps there;
//! - `event-in-configure`: reads the event in `configure`, where there is
//!   none (the host traps the call, so the policy does not load).
use nri_wasm_sdk::bindings::nri_wasm::policy::event as raw;
use nri_wasm_sdk::view::{self, ContainerFilter};
use nri_wasm_sdk::*;

/// Compares each piece of the event, read on its own, with the whole event.
fn read_all() -> Result<String, String> {
    let WholeEvent::CreateContainer(whole) = raw::whole() else { return Err("not a create-container event".into()) };
    let (pod, ctr) = (&whole.pod, &whole.container);
    let mut diffs = Vec::new();
    let mut check = |what: &str, same: bool| {
        if !same {
            diffs.push(what.to_string());
        }
    };
    check("pod", raw::pod().as_ref() == Some(pod));
    check("container", raw::container().as_ref() == Some(ctr));
    check("pod-labels", raw::pod_labels() == pod.labels);
    check("pod-annotations", raw::pod_annotations() == pod.annotations);
    check("container-labels", raw::container_labels() == ctr.labels);
    check("container-annotations", raw::container_annotations() == ctr.annotations);
    check("container-env", raw::container_env() == ctr.env);
    check("container-resources", raw::container_resources() == ctr.linux.as_ref().and_then(|l| l.resources.clone()));
    check("requested-resources", raw::requested_resources().is_none());
    for kv in &pod.labels {
        check(&format!("pod-label {}", kv.key), raw::pod_label(&kv.key).as_ref() == Some(&kv.value));
    }
    for kv in &pod.annotations {
        check(&format!("pod-annotation {}", kv.key), raw::pod_annotation(&kv.key).as_ref() == Some(&kv.value));
    }
    for kv in &ctr.labels {
        check(&format!("container-label {}", kv.key), raw::container_label(&kv.key).as_ref() == Some(&kv.value));
    }
    for kv in &ctr.annotations {
        let same = raw::container_annotation(&kv.key).as_ref() == Some(&kv.value);
        check(&format!("container-annotation {}", kv.key), same);
    }
    for entry in &ctr.env {
        let (name, value) = entry.split_once('=').unwrap_or((entry, ""));
        let first = ctr.env.iter().find_map(|e| e.strip_prefix(name)?.strip_prefix('='));
        check(&format!("container-env-var {name}"), raw::container_env_var(name).as_deref() == first.or(Some(value)));
    }
    check("missing label", raw::pod_label("example.com/no-such-label").is_none());
    let (pm, cm) = (raw::pod_metadata(), raw::container_metadata());
    check("pod-metadata", pm.is_some_and(|m| m.id == pod.id && m.name == pod.name && m.namespace == pod.namespace));
    check("container-metadata", cm.is_some_and(|m| m.id == ctr.id && m.name == ctr.name && m.state == ctr.state));
    match diffs.is_empty() {
        true => Ok(format!("{}/{}/{}", pod.labels.len(), ctr.annotations.len(), ctr.env.len())),
        false => Err(format!("pieces differ from the whole event: {}", diffs.join(", "))),
    }
}

struct Probe;

impl Policy for Probe {
    fn init(settings: &str) -> Result<(), String> {
        if settings.contains("event-in-configure") {
            std::hint::black_box(raw::pod_metadata());
        }
        Ok(())
    }

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

    fn create_container(e: &Event) -> Result<Reply, String> {
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
                    let me = view::container(&e.container_meta().id).ok_or("the view does not show the container")?;
                    let count = me.annotation("example.com/count").unwrap_or("-").to_string();
                    adjust = adjust.set_annotation("example.com/self", &format!("{} {count}", me.name));
                }
                ("read-all", _) => adjust = adjust.set_annotation("example.com/read", &read_all()?),
                ("deny", _) => return Err("denied by the probe".into()),
                ("sync-trap" | "event-in-configure", _) => {}
                ("trap", _) => core::arch::wasm32::unreachable(),
                (other, _) => return Err(format!("unknown probe step {other:?}")),
            }
        }
        Ok(Reply::adjust(adjust))
    }
}

export_policy!(Probe);
