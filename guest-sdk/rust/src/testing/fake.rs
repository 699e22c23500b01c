//! The fake host: what the SDK's host calls answer in a native build.
//!
//! A [`Call`] is installed in a thread-local for the length of one
//! `configure` or `handle` run by [`super::TestHost`]; the modules below have
//! the names and signatures of the generated imports and answer from it.
//! Called with no call installed (a handler run directly rather than through
//! the test host), they panic saying so; event reads during `configure`
//! panic as the real host traps them.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::bindings::nri_wasm::policy::node::{ContainerFilter, ContainerInfo, NodeTopology, PodInfo};
use crate::{LogLevel, NodeInfo, RuntimeInfo, WholeEvent};

/// Longest state key, in bytes (as the host).
pub(crate) const MAX_KEY_BYTES: usize = 256;
/// What each key counts toward the state's limit beside its key and value,
/// as the host counts it.
pub(crate) const ENTRY_BYTES: usize = 64;

/// Everything one call can read and write.
#[derive(Debug)]
pub(crate) struct Call {
    pub settings: &'static str,
    /// `None` in configure.
    pub event: Option<WholeEvent>,
    pub pods: BTreeMap<String, PodInfo>,
    pub containers: BTreeMap<String, ContainerInfo>,
    /// The event's own container, standing in for the view's entry.
    pub current: Option<ContainerInfo>,
    pub topology: NodeTopology,
    pub runtime: RuntimeInfo,
    pub node: NodeInfo,
    /// The state as this call sees it (committed state plus its writes).
    pub state: BTreeMap<String, String>,
    pub state_limit: usize,
    pub logs: Vec<super::LogLine>,
}

thread_local! {
    static CALL: RefCell<Option<Call>> = const { RefCell::new(None) };
}

/// Installs `call` for the length of `f`, and returns it with `f`'s result.
/// The call is taken back out even if `f` panics.
pub(crate) fn with_call<R>(call: Call, f: impl FnOnce() -> R) -> (R, Call) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CALL.with(|c| c.borrow_mut().take());
        }
    }
    CALL.with(|c| {
        let mut slot = c.borrow_mut();
        assert!(slot.is_none(), "nri-wasm-sdk testing: a call is already running on this thread");
        *slot = Some(call);
    });
    let reset = Reset;
    let result = f();
    let call = CALL.with(|c| c.borrow_mut().take()).expect("the call is still installed");
    drop(reset);
    (result, call)
}

fn with<R>(function: &str, f: impl FnOnce(&mut Call) -> R) -> R {
    CALL.with(|c| {
        let mut slot = c.borrow_mut();
        let call = slot.as_mut().unwrap_or_else(|| {
            panic!(
                "nri-wasm-sdk: `{function}` was called outside a call of the test host; run the policy \
                 with nri_wasm_sdk::testing::TestHost (run or configure)"
            )
        });
        f(call)
    })
}

fn with_event<R>(function: &str, f: impl FnOnce(&WholeEvent, Option<&ContainerInfo>) -> R) -> R {
    with(function, |call| match &call.event {
        Some(e) => f(e, call.current.as_ref()),
        None => panic!(
            "nri-wasm-sdk: `{function}` was called from configure, where there is no event \
             (the host traps this call, and the policy does not load)"
        ),
    })
}

/// The settings of the current call (see [`crate::settings`]).
pub(crate) fn settings() -> &'static str {
    with("host.settings", |c| c.settings)
}

pub mod host {
    use super::with;
    use crate::{LogLevel, NodeInfo, RuntimeInfo};

    pub fn log(level: LogLevel, message: &str) {
        with("host.log", |c| c.logs.push(crate::testing::LogLine { level, message: message.to_string() }))
    }

    pub fn runtime() -> RuntimeInfo {
        with("host.runtime", |c| c.runtime.clone())
    }

    pub fn node() -> NodeInfo {
        with("host.node", |c| c.node.clone())
    }
}

pub mod event {
    use super::with_event;
    use crate::{find, Container, ContainerMeta, KeyValue, LinuxResources, PodMeta, PodSandbox, WholeEvent};

    pub fn whole() -> WholeEvent {
        with_event("event.whole", |e, _| e.clone())
    }

    pub fn pod() -> Option<PodSandbox> {
        with_event("event.pod", |e, _| e.pod().cloned())
    }

    pub fn pod_metadata() -> Option<PodMeta> {
        with_event("event.pod-metadata", |e, _| {
            e.pod().map(|p| PodMeta {
                id: p.id.clone(),
                name: p.name.clone(),
                uid: p.uid.clone(),
                namespace: p.namespace.clone(),
                runtime_handler: p.runtime_handler.clone(),
                pid: p.pid,
            })
        })
    }

    pub fn pod_label(key: &str) -> Option<String> {
        with_event("event.pod-label", |e, _| e.pod().and_then(|p| find(&p.labels, key)).map(str::to_string))
    }

    pub fn pod_labels() -> Vec<KeyValue> {
        with_event("event.pod-labels", |e, _| e.pod().map(|p| p.labels.clone()).unwrap_or_default())
    }

    pub fn pod_annotation(key: &str) -> Option<String> {
        with_event("event.pod-annotation", |e, _| e.pod().and_then(|p| find(&p.annotations, key)).map(str::to_string))
    }

    pub fn pod_annotations() -> Vec<KeyValue> {
        with_event("event.pod-annotations", |e, _| e.pod().map(|p| p.annotations.clone()).unwrap_or_default())
    }

    pub fn container() -> Option<Container> {
        with_event("event.container", |e, _| e.container().cloned())
    }

    pub fn container_metadata() -> Option<ContainerMeta> {
        with_event("event.container-metadata", |e, _| {
            e.container().map(|c| ContainerMeta {
                id: c.id.clone(),
                pod_sandbox_id: c.pod_sandbox_id.clone(),
                name: c.name.clone(),
                state: c.state,
                pid: c.pid,
            })
        })
    }

    pub fn container_label(key: &str) -> Option<String> {
        with_event("event.container-label", |e, _| e.container().and_then(|c| find(&c.labels, key)).map(str::to_string))
    }

    pub fn container_labels() -> Vec<KeyValue> {
        with_event("event.container-labels", |e, _| e.container().map(|c| c.labels.clone()).unwrap_or_default())
    }

    pub fn container_annotation(key: &str) -> Option<String> {
        with_event("event.container-annotation", |e, _| {
            e.container().and_then(|c| find(&c.annotations, key)).map(str::to_string)
        })
    }

    pub fn container_annotations() -> Vec<KeyValue> {
        with_event("event.container-annotations", |e, _| {
            e.container().map(|c| c.annotations.clone()).unwrap_or_default()
        })
    }

    pub fn container_env() -> Vec<String> {
        with_event("event.container-env", |e, _| e.container().map(|c| c.env.clone()).unwrap_or_default())
    }

    pub fn container_env_var(name: &str) -> Option<String> {
        with_event("event.container-env-var", |e, _| {
            e.container().and_then(|c| crate::env_value(&c.env, name)).map(str::to_string)
        })
    }

    pub fn container_resources() -> Option<LinuxResources> {
        with_event("event.container-resources", |e, _| {
            e.container().and_then(|c| c.linux.as_ref()).and_then(|l| l.resources.clone())
        })
    }

    pub fn requested_resources() -> Option<LinuxResources> {
        with_event("event.requested-resources", |e, _| match e {
            WholeEvent::UpdateContainer(u) => u.linux_resources.clone(),
            _ => None,
        })
    }
}

pub mod node {
    use super::{matches, with};
    use crate::bindings::nri_wasm::policy::node::{ContainerFilter, ContainerInfo, IdList, NodeTopology, PodInfo};

    pub fn pods() -> Vec<PodInfo> {
        with("node.pods", |c| c.pods.values().map(|p| super::pod_info(c, p)).collect())
    }

    pub fn pod(id: &str) -> Option<PodInfo> {
        with("node.pod", |c| c.pods.get(id).map(|p| super::pod_info(c, p)))
    }

    pub fn containers(filter: &ContainerFilter) -> Vec<ContainerInfo> {
        with("node.containers", |c| super::listed(c).into_iter().filter(|i| matches(c, filter, i)).collect())
    }

    pub fn container_ids(filter: &ContainerFilter) -> IdList {
        with("node.container-ids", |c| {
            let mut list = IdList { ids: String::new(), ends: Vec::new() };
            for info in super::listed(c).into_iter().filter(|i| matches(c, filter, i)) {
                list.ids.push_str(&info.id);
                list.ends.push(list.ids.len() as u32);
            }
            list
        })
    }

    pub fn container(id: &str) -> Option<ContainerInfo> {
        with("node.container", |c| match &c.current {
            Some(cur) if cur.id == id => Some(cur.clone()),
            _ => c.containers.get(id).cloned(),
        })
    }

    pub fn topology() -> NodeTopology {
        with("node.topology", |c| c.topology.clone())
    }
}

pub mod state {
    use super::{with, ENTRY_BYTES, MAX_KEY_BYTES};
    use crate::bindings::nri_wasm::policy::state::StateError;

    pub fn get(key: &str) -> Option<String> {
        with("state.get", |c| c.state.get(key).cloned())
    }

    pub fn set(key: &str, value: &str) -> Result<(), StateError> {
        with("state.set", |c| {
            if key.is_empty() || key.len() > MAX_KEY_BYTES {
                return Err(StateError::InvalidKey(format!(
                    "key of {} bytes; keys are 1 to {MAX_KEY_BYTES} bytes",
                    key.len()
                )));
            }
            let used: usize = c.state.iter().map(|(k, v)| k.len() + v.len() + ENTRY_BYTES).sum();
            let old = c.state.get(key).map_or(0, |v| key.len() + v.len() + ENTRY_BYTES);
            if used - old + key.len() + value.len() + ENTRY_BYTES > c.state_limit {
                return Err(StateError::LimitExceeded(c.state_limit as u64));
            }
            c.state.insert(key.to_string(), value.to_string());
            Ok(())
        })
    }

    pub fn remove(key: &str) {
        with("state.remove", |c| {
            c.state.remove(key);
        })
    }

    pub fn keys(prefix: &str) -> Vec<String> {
        with("state.keys", |c| c.state.keys().filter(|k| k.starts_with(prefix)).cloned().collect())
    }
}

/// A pod of the view, with the ids of its containers filled in.
fn pod_info(call: &Call, pod: &PodInfo) -> PodInfo {
    let mut ids: Vec<String> = call.containers.values().filter(|c| c.pod_id == pod.id).map(|c| c.id.clone()).collect();
    if let Some(cur) = call.current.as_ref().filter(|c| c.pod_id == pod.id) {
        ids.push(cur.id.clone());
    }
    ids.extend(pod.containers.iter().cloned());
    ids.sort();
    ids.dedup();
    PodInfo { containers: ids, ..pod.clone() }
}

/// The view's containers by id, the event's own container standing in for
/// its entry.
fn listed(call: &Call) -> Vec<ContainerInfo> {
    let mut all = call.containers.clone();
    if let Some(cur) = &call.current {
        all.insert(cur.id.clone(), cur.clone());
    }
    all.into_values().collect()
}

fn matches(call: &Call, filter: &ContainerFilter, c: &ContainerInfo) -> bool {
    let has =
        |list: &[crate::KeyValue], kv: &crate::KeyValue| list.iter().any(|x| x.key == kv.key && x.value == kv.value);
    if filter.pod_id.as_ref().is_some_and(|p| *p != c.pod_id) {
        return false;
    }
    if !filter.states.is_empty() && !filter.states.contains(&c.state) {
        return false;
    }
    if !filter.labels.iter().all(|kv| has(&c.labels, kv)) {
        return false;
    }
    if filter.pod_labels.is_empty() {
        return true;
    }
    match call.pods.get(&c.pod_id) {
        Some(p) => filter.pod_labels.iter().all(|kv| has(&p.labels, kv)),
        None => false,
    }
}

/// Default log level names, for messages.
pub(crate) fn level_name(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    }
}
