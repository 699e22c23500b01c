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
//! - `global`: adds one to a global counter and sets `example.com/global` to
//!   it (always 1: every call runs in a fresh instance);
//! - `deny`: denies the event; `trap`: traps;
//! - `sync-trap`: also subscribes to `synchronize`, and traps there;
//! - `start-sleep:N`: also subscribes to StartContainer, and sleeps N ms
//!   there (a WASI sleep) before it answers with nothing;
//! - `view-quotas`: sets `example.com/quotas` to the CPU quota the node view
//!   shows for every container that has one (`id=quota`, by id, `,`-joined);
//! - `event-in-configure`: reads the event in `configure`, where there is
//!   none (the host traps the call, so the policy does not load);
//! - `every-event` (alone): subscribes to every event and synchronize, checks
//!   the pieces of each against the whole (as `read-all`) and counts it in
//!   the state under `seen/<EventKind>`.
use nri_wasm_sdk::bindings::nri_wasm::policy::event as raw;
use nri_wasm_sdk::view::{self, ContainerFilter};
use nri_wasm_sdk::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// Compares each piece of the event, read on its own, with the whole event,
/// whatever the event; on success says how many pod labels, container
/// annotations and env entries it saw (`labels/annotations/env`).
fn read_all() -> Result<String, String> {
    let whole = raw::whole();
    let (pod, ctr, requested) = match &whole {
        WholeEvent::RunPodSandbox(e)
        | WholeEvent::StopPodSandbox(e)
        | WholeEvent::RemovePodSandbox(e)
        | WholeEvent::PostUpdatePodSandbox(e) => (Some(&e.pod), None, None),
        WholeEvent::UpdatePodSandbox(e) => (Some(&e.pod), None, None),
        WholeEvent::CreateContainer(e)
        | WholeEvent::PostCreateContainer(e)
        | WholeEvent::StartContainer(e)
        | WholeEvent::PostStartContainer(e)
        | WholeEvent::PostUpdateContainer(e)
        | WholeEvent::StopContainer(e)
        | WholeEvent::RemoveContainer(e) => (Some(&e.pod), Some(&e.container), None),
        WholeEvent::UpdateContainer(e) => (Some(&e.pod), Some(&e.container), e.linux_resources.clone()),
        WholeEvent::ValidateContainerAdjustment(e) => (Some(&e.pod), Some(&e.container), None),
        WholeEvent::Synchronize => (None, None, None),
    };
    let mut diffs = Vec::new();
    let mut check = |what: &str, same: bool| {
        if !same {
            diffs.push(what.to_string());
        }
    };
    let no_kv = Vec::new();
    check("pod", raw::pod().as_ref() == pod);
    check("container", raw::container().as_ref() == ctr);
    check("pod-labels", raw::pod_labels() == *pod.map_or(&no_kv, |p| &p.labels));
    check("pod-annotations", raw::pod_annotations() == *pod.map_or(&no_kv, |p| &p.annotations));
    check("container-labels", raw::container_labels() == *ctr.map_or(&no_kv, |c| &c.labels));
    check("container-annotations", raw::container_annotations() == *ctr.map_or(&no_kv, |c| &c.annotations));
    check("container-env", raw::container_env() == ctr.map(|c| c.env.clone()).unwrap_or_default());
    let resources = ctr.and_then(|c| c.linux.as_ref()).and_then(|l| l.resources.clone());
    check("container-resources", raw::container_resources() == resources);
    check("requested-resources", raw::requested_resources() == requested);
    for kv in pod.map_or(&no_kv, |p| &p.labels) {
        check(&format!("pod-label {}", kv.key), raw::pod_label(&kv.key).as_ref() == Some(&kv.value));
    }
    for kv in pod.map_or(&no_kv, |p| &p.annotations) {
        check(&format!("pod-annotation {}", kv.key), raw::pod_annotation(&kv.key).as_ref() == Some(&kv.value));
    }
    for kv in ctr.map_or(&no_kv, |c| &c.labels) {
        check(&format!("container-label {}", kv.key), raw::container_label(&kv.key).as_ref() == Some(&kv.value));
    }
    for kv in ctr.map_or(&no_kv, |c| &c.annotations) {
        let same = raw::container_annotation(&kv.key).as_ref() == Some(&kv.value);
        check(&format!("container-annotation {}", kv.key), same);
    }
    let env = ctr.map(|c| c.env.clone()).unwrap_or_default();
    for entry in &env {
        let Some((name, _)) = entry.split_once('=') else { continue };
        let first = env.iter().find_map(|e| e.strip_prefix(name)?.strip_prefix('='));
        check(&format!("container-env-var {name}"), raw::container_env_var(name).as_deref() == first);
    }
    check("missing label", raw::pod_label("example.com/no-such-label").is_none());
    let (pm, cm) = (raw::pod_metadata(), raw::container_metadata());
    check(
        "pod-metadata",
        match (pm, pod) {
            (Some(m), Some(p)) => m.id == p.id && m.name == p.name && m.namespace == p.namespace && m.uid == p.uid,
            (m, p) => m.is_none() && p.is_none(),
        },
    );
    check(
        "container-metadata",
        match (cm, ctr) {
            (Some(m), Some(c)) => m.id == c.id && m.name == c.name && m.state == c.state && m.pid == c.pid,
            (m, c) => m.is_none() && c.is_none(),
        },
    );
    match diffs.is_empty() {
        true => Ok(format!(
            "{}/{}/{}",
            pod.map_or(0, |p| p.labels.len()),
            ctr.map_or(0, |c| c.annotations.len()),
            env.len()
        )),
        false => Err(format!("pieces differ from the whole event: {}", diffs.join(", "))),
    }
}

/// The N of a `start-sleep:N` step.
fn start_sleep() -> Option<u64> {
    settings().split(';').find_map(|step| step.trim().strip_prefix("start-sleep:")?.parse().ok())
}

/// Counts calls in a global: a fresh instance for every call always counts 1.
static CALLS: AtomicU32 = AtomicU32::new(0);

/// `every-event`: checks the pieces of the event against the whole and
/// counts the event under `seen/<kind>` in the state.
fn every_event(e: &Event) -> Result<Reply, String> {
    read_all()?;
    count(e.kind())?;
    Ok(Reply::none())
}

fn count(kind: EventKind) -> Result<(), String> {
    let key = format!("seen/{kind:?}");
    let n = state::get(&key).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1;
    state::set(&key, &n.to_string()).map_err(|e| format!("{e:?}"))
}

struct Probe;

impl Policy for Probe {
    fn init(settings: &str) -> Result<(), String> {
        if settings.contains("event-in-configure") {
            std::hint::black_box(raw::pod_metadata());
        }
        Ok(())
    }

    const EVENTS: &'static [EventKind] = &ALL_EVENTS;

    fn events() -> Vec<EventKind> {
        if settings() == "every-event" {
            return ALL_EVENTS.to_vec();
        }
        let mut events = vec![EventKind::CreateContainer];
        if settings().contains("sync-trap") {
            events.push(EventKind::Synchronize);
        }
        if start_sleep().is_some() {
            events.push(EventKind::StartContainer);
        }
        events
    }

    fn synchronize() -> Result<Reply, String> {
        if settings().contains("sync-trap") {
            core::arch::wasm32::unreachable()
        }
        if settings() == "every-event" {
            read_all()?;
            count(EventKind::Synchronize)?;
        }
        Ok(Reply::none())
    }

    fn run_pod_sandbox(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn stop_pod_sandbox(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn remove_pod_sandbox(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn post_create_container(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn start_container(e: &Event) -> Result<Reply, String> {
        if let Some(ms) = start_sleep() {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            return Ok(Reply::none());
        }
        every_event(e)
    }
    fn post_start_container(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn update_container(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn post_update_container(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn stop_container(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn remove_container(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn update_pod_sandbox(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn post_update_pod_sandbox(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }
    fn validate_container_adjustment(e: &Event) -> Result<Reply, String> {
        every_event(e)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        if settings() == "every-event" {
            return every_event(e);
        }
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
                ("global", _) => {
                    let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
                    adjust = adjust.set_annotation("example.com/global", &n.to_string());
                }
                ("deny", _) => return Err("denied by the probe".into()),
                ("view-quotas", _) => {
                    let mut quotas: Vec<String> = view::containers(&ContainerFilter::all())
                        .into_iter()
                        .filter_map(|c| Some(format!("{}={}", c.id, c.resources?.cpu?.quota?)))
                        .collect();
                    quotas.sort();
                    adjust = adjust.set_annotation("example.com/quotas", &quotas.join(","));
                }
                ("sync-trap" | "event-in-configure" | "start-sleep", _) => {}
                ("trap", _) => core::arch::wasm32::unreachable(),
                (other, _) => return Err(format!("unknown probe step {other:?}")),
            }
        }
        Ok(Reply::adjust(adjust))
    }
}

export_policy!(Probe);
