//! `exclusive-cpus`: whole CPUs for the containers of pods that ask for them.
//!
//! A pod annotated `exclusive-cpus.nri-wasm.io/count: "N"` gets N CPUs of its
//! own for each of its containers, taken from a pool the operator configures,
//! NUMA-aligned when one node has room. Every other container runs on the
//! *shared* CPUs: all online CPUs minus those handed out. When a container
//! gets CPUs, the other containers' cpusets shrink (updates in the
//! CreateContainer reply); when it stops, its CPUs go back to the pool and
//! the others grow back (in the StopContainer reply). Stopping, not
//! removal: the kubelet keeps a stopped container for a while and restarts
//! a pod's container as a new one, which must find the CPUs free. A
//! removal the stop was missed for releases them too (the host sends those
//! updates with UpdateContainers, since RemoveContainer has no reply).
//!
//! Settings, words separated by spaces or a `[settings]` table with the
//! same keys (all optional):
//! - `pool=2-7`: the CPUs that may be handed out (default: every online CPU
//!   but the first, which stays shared);
//! - `annotation=exclusive-cpus.nri-wasm.io/count`: the pod annotation;
//! - `min-shared=1`: CPUs that always stay shared; a request that would
//!   leave fewer is denied.
//!
//! See README.md.
//!
//! State: `cpus/<container id>` = the container's CPU list. The state is the
//! allocation table; the node view is used to find the shared containers and
//! to drop allocations of containers the runtime no longer runs (a
//! container whose creation failed after the answer, or that stopped or went
//! away while the host was disconnected) at the next CreateContainer or
//! Synchronize.
use std::collections::BTreeSet;

use nri_wasm_sdk::view::{self, ContainerFilter};
use nri_wasm_sdk::*;
use serde::Deserialize;

#[cfg(test)]
mod tests;

const DEFAULT_ANNOTATION: &str = "exclusive-cpus.nri-wasm.io/count";
/// Annotation set on a container that got CPUs (for people reading the spec).
const CPUS_ANNOTATION: &str = "exclusive-cpus.nri-wasm.io/cpus";
const KEY: &str = "cpus/";

struct ExclusiveCpus;

/// The settings: words (`pool=2-7 min-shared=1`) or a `[settings]` table,
/// every key optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawSettings {
    pool: Option<String>,
    #[serde(default = "default_annotation")]
    annotation: String,
    #[serde(default = "default_min_shared")]
    min_shared: usize,
}

fn default_annotation() -> String {
    DEFAULT_ANNOTATION.into()
}

fn default_min_shared() -> usize {
    1
}

/// The settings, checked.
struct Settings {
    pool: Option<BTreeSet<u32>>,
    annotation: String,
    min_shared: usize,
}

fn parse_settings(text: &str) -> Result<Settings, String> {
    let raw: RawSettings = settings::parse(text)?;
    let pool = match raw.pool {
        Some(list) => {
            let cpus = parse_cpu_list(&list).map_err(|e| format!("invalid settings: pool: {e}"))?;
            if cpus.is_empty() {
                return Err("invalid settings: pool names no CPU (e.g. pool=2-7)".into());
            }
            Some(cpus.into_iter().collect())
        }
        None => None,
    };
    if raw.annotation.is_empty() {
        return Err("invalid settings: annotation needs a pod annotation key".into());
    }
    Ok(Settings { pool, annotation: raw.annotation, min_shared: raw.min_shared })
}

fn settings_now() -> Settings {
    parse_settings(settings()).expect("settings were checked at load")
}

/// The node's CPUs, NUMA nodes and the allocation table.
struct Node {
    online: BTreeSet<u32>,
    numa: Vec<BTreeSet<u32>>,
    pool: BTreeSet<u32>,
    /// (container id, its CPUs), sorted by id.
    allocated: Vec<(String, BTreeSet<u32>)>,
}

impl Node {
    fn load(s: &Settings) -> Self {
        let topo = view::topology();
        let online: BTreeSet<u32> = topo.online_cpus.iter().copied().collect();
        let numa = topo.numa_nodes.iter().map(|n| n.cpus.iter().copied().collect()).collect();
        let pool = match &s.pool {
            Some(p) => p.intersection(&online).copied().collect(),
            None => online.iter().skip(1).copied().collect(),
        };
        let allocated = state::keys(KEY)
            .into_iter()
            .filter_map(|k| {
                let cpus = parse_cpu_list(&state::get(&k)?).ok()?;
                Some((k[KEY.len()..].to_string(), cpus.into_iter().collect()))
            })
            .collect();
        Self { online, numa, pool, allocated }
    }

    fn taken(&self) -> BTreeSet<u32> {
        self.allocated.iter().flat_map(|(_, c)| c.iter().copied()).collect()
    }

    fn free(&self) -> BTreeSet<u32> {
        self.pool.difference(&self.taken()).copied().collect()
    }

    fn shared(&self) -> BTreeSet<u32> {
        self.online.difference(&self.taken()).copied().collect()
    }

    fn is_exclusive(&self, id: &str) -> bool {
        self.allocated.iter().any(|(c, _)| c == id)
    }

    /// `n` free CPUs, from one NUMA node if one has room (the fullest that
    /// fits, to keep large holes for large requests), lowest first otherwise.
    fn pick(&self, n: usize) -> Option<BTreeSet<u32>> {
        let free = self.free();
        let fitting = self
            .numa
            .iter()
            .map(|node| node.intersection(&free).copied().collect::<Vec<u32>>())
            .filter(|f| f.len() >= n)
            .min_by_key(Vec::len);
        match fitting {
            Some(f) => Some(f.into_iter().take(n).collect()),
            None if free.len() >= n => Some(free.into_iter().take(n).collect()),
            None => None,
        }
    }

    /// Forgets allocations of containers the runtime no longer runs
    /// (gone, or stopped while the host was away).
    fn reconcile(&mut self, keep: Option<&str>) {
        let holding = [ContainerState::Created, ContainerState::Paused, ContainerState::Running];
        let ids = view::container_ids(&ContainerFilter::all().in_states(&holding));
        let live: BTreeSet<&str> = ids.iter().collect();
        self.allocated.retain(|(id, _)| {
            let alive = live.contains(id.as_str()) || Some(id.as_str()) == keep;
            if !alive {
                state::remove(&format!("{KEY}{id}"));
                log(LogLevel::Info, &format!("released the CPUs of container {id}, which the runtime no longer runs"));
            }
            alive
        });
    }

    /// Updates that give every shared container (but `except`) the shared CPUs.
    fn shared_updates(&self, except: &str) -> Vec<ContainerUpdate> {
        let cpus = format_cpu_list(&self.shared().into_iter().collect::<Vec<_>>());
        let live = ContainerFilter::all().in_states(&[ContainerState::Created, ContainerState::Running]);
        view::container_ids(&live)
            .iter()
            .filter(|id| *id != except && !self.is_exclusive(id))
            .map(|id| {
                ContainerUpdate::cpu(id, LinuxCpu { cpus: cpus.clone(), ..LinuxCpu::default() }).ignoring_failure()
            })
            .collect()
    }
}

fn requested(e: &Event, s: &Settings) -> Result<usize, String> {
    match e.pod_annotation(&s.annotation) {
        None => Ok(0),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("pod {}: annotation {} = {v:?} is not a CPU count", e.pod_meta().name, s.annotation)),
    }
}

/// A container stopped or was removed: its CPUs go back to the pool and
/// the shared containers grow onto them. A stopped container is not started
/// again (the kubelet creates a new one, and keeps the stopped one for a
/// while), so its CPUs are released at the stop, not when it is removed.
fn release(id: &str) -> Reply {
    let key = format!("{KEY}{id}");
    if state::get(&key).is_none() {
        return Reply::none();
    }
    state::remove(&key);
    let s = settings_now();
    let node = Node::load(&s);
    log(LogLevel::Info, &format!("container {id} released its CPUs"));
    Reply { adjust: None, update: node.shared_updates(id), evict: Vec::new() }
}

impl Policy for ExclusiveCpus {
    const EVENTS: &'static [EventKind] =
        &[EventKind::CreateContainer, EventKind::StopContainer, EventKind::RemoveContainer, EventKind::Synchronize];

    fn init(settings: &str) -> Result<(), String> {
        parse_settings(settings).map(drop)
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let s = settings_now();
        let mut node = Node::load(&s);
        let id = e.container_meta().id.clone();
        node.reconcile(Some(&id));
        let n = requested(e, &s)?;
        if n == 0 {
            // A shared container: run it on the shared CPUs only.
            let cpus = format_cpu_list(&node.shared().into_iter().collect::<Vec<_>>());
            return Ok(Reply::adjust(ContainerAdjustment::new().set_cpuset(&cpus)));
        }
        if node.is_exclusive(&id) {
            return Err(format!("container {id} already holds exclusive CPUs"));
        }
        let Some(cpus) = node.pick(n) else {
            return Err(format!(
                "pod {}/{}: {n} exclusive CPUs requested, {} free in the pool",
                e.pod_meta().namespace,
                e.pod_meta().name,
                node.free().len()
            ));
        };
        if node.shared().len() - cpus.len() < s.min_shared {
            return Err(format!(
                "pod {}/{}: {n} exclusive CPUs would leave fewer than {} shared",
                e.pod_meta().namespace,
                e.pod_meta().name,
                s.min_shared
            ));
        }
        let list = format_cpu_list(&cpus.iter().copied().collect::<Vec<_>>());
        state::set(&format!("{KEY}{id}"), &list).map_err(|err| format!("cannot record the allocation: {err:?}"))?;
        node.allocated.push((id.clone(), cpus));
        log(LogLevel::Info, &format!("container {} ({}) gets CPUs {list}", e.container_meta().name, id));
        let adjust = ContainerAdjustment::new().set_cpuset(&list).set_annotation(CPUS_ANNOTATION, &list);
        let mut reply = Reply::adjust(adjust);
        reply.update = node.shared_updates(&id);
        Ok(reply)
    }

    fn stop_container(e: &Event) -> Result<Reply, String> {
        Ok(release(&e.container_meta().id))
    }

    fn remove_container(e: &Event) -> Result<Reply, String> {
        Ok(release(&e.container_meta().id))
    }

    fn synchronize() -> Result<Reply, String> {
        let s = settings_now();
        let mut node = Node::load(&s);
        node.reconcile(None);
        Ok(Reply { adjust: None, update: node.shared_updates(""), evict: Vec::new() })
    }
}

// What it may change and read; the dangerous ones need a `grant` in its
// settings file (policy.toml).
nri_wasm_sdk::capabilities!("cpu", "cpuset-any", "annotations", "updates", "node", "deny");

export_policy!(ExclusiveCpus);
