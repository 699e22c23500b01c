//! The realistic policy (`tests/guests/realistic`) at the sandbox's floor:
//! the same reads of the event, in the same host calls, and the same reply,
//! written like `tests/guests/bare` (no standard library, no WASI, no SDK,
//! a bump allocator over a fixed arena).
//!
//! Why: the benchmarks put a call of it between the bare guest (the
//! sandbox's own cost) and the SDK-built realistic policy. Bare to lean is
//! what the event's way in and the reply's way out cost (host calls, copies
//! into the guest, lifting the reply); lean to realistic is what the
//! standard library, its WASI imports and the SDK add to the same work.
//!
//! Settings are `<tag>` as for the realistic policy, or `<skip>_<tag>`, where
//! each letter of `<skip>` leaves one part of the work out, so that the
//! benchmarks can take the call apart step by step:
//! - `e`: the environment (one list of many strings);
//! - `r`: the container's resources (one large record; a memory limit of
//!   1 GiB is assumed);
//! - `m`: the namespace check (a pod label and the pod's metadata) and the
//!   container's metadata;
//! - `a`: the other labels and annotations (four single-string lookups);
//! - `p`: the reply (built, then dropped: the call answers "no change");
//! - `z`: everything after reading the settings (answers "no change").
#![no_std]

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "policy",
});

use nri_wasm::policy::event as ev;
use nri_wasm::policy::host;
use nri_wasm::policy::types::{ContainerAdjustment, KeyValue, LinuxContainerAdjustment, LinuxCpu, LinuxResources};

struct Lean;

/// FNV-1a of the settings, as the realistic policy picks its pod note.
fn pick(settings: &str, n: usize) -> usize {
    let h = settings.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    (h % n as u64) as usize
}

fn valid(s: &str) -> bool {
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let tag = match s.split_once('_') {
        Some((skip, tag)) => skip.bytes().all(|b| b"ermapz".contains(&b)).then_some(tag),
        None => Some(s),
    };
    s.len() <= 40 && tag.is_some_and(word)
}

impl Guest for Lean {
    fn configure(settings: String) -> Result<Vec<EventKind>, String> {
        if !valid(&settings) {
            return Err(format!(
                "settings must be a word of [A-Za-z0-9-], after letters of `ermapz` and `_` if any, got {settings:?}"
            ));
        }
        Ok(vec![EventKind::CreateContainer])
    }

    fn handle(kind: EventKind) -> Result<Reply, String> {
        let no_change = || Ok(Reply { adjust: None, update: Vec::new(), evict: Vec::new() });
        if kind != EventKind::CreateContainer {
            return no_change();
        }
        let settings = host::settings();
        let (skip, tag) = settings.split_once('_').unwrap_or(("", settings.as_str()));
        let does = |part: char| !skip.contains(part);
        if !does('z') {
            return no_change();
        }
        let container_name = || match does('m') {
            true => ev::container_metadata().map(|m| m.name).unwrap_or_default(),
            false => String::from("-"),
        };
        if does('a') {
            if let Some(reason) = ev::container_annotation(&format!("example.com/deny-{tag}")) {
                return Err(format!("container {} denied by policy {tag}: {reason}", container_name()));
            }
        }
        let lookup = |read: fn(&str) -> Option<String>, key: &str| if does('a') { read(key) } else { None };
        let app = lookup(ev::pod_label, "app").unwrap_or_else(|| "-".into());
        if does('m') {
            if let Some(ns) = ev::pod_label("io.kubernetes.pod.namespace") {
                let pod = ev::pod_metadata().ok_or("no pod")?;
                if ns != pod.namespace {
                    return Err(format!("pod {} labelled with namespace {ns}, runs in {}", pod.name, pod.namespace));
                }
            }
        }
        let note_key = format!("example.com/note-{}", 8 + pick(tag, 12));
        let note = lookup(ev::pod_annotation, &note_key).map_or(0, |n| n.len());
        let image =
            lookup(ev::container_annotation, "io.kubernetes.cri.image-name").unwrap_or_else(|| "unknown".into());
        let app_env = match does('e') {
            true => ev::container_env().iter().filter(|v| v.starts_with("APP_")).count(),
            false => 0,
        };
        let (memory, shares) = match does('r') {
            true => {
                let resources = ev::container_resources();
                let memory = resources.as_ref().and_then(|r| r.memory.as_ref()).and_then(|m| m.limit);
                (memory, resources.as_ref().and_then(|r| r.cpu.as_ref()).and_then(|c| c.shares))
            }
            false => (Some(1 << 30), None),
        };
        let name = container_name();
        let Some(memory) = memory.filter(|m| *m > 0) else {
            return Err(format!("container {name} has no memory limit"));
        };
        let summary = format!(
            "app={app} image={image} mem={}Mi shares={} env={app_env} note={note}",
            memory >> 20,
            shares.unwrap_or(0)
        );
        let env_name = format!("POLICY_{}", tag.to_ascii_uppercase().replace('-', "_"));
        let mut linux = None;
        if tag == "0" {
            let wanted = ((memory >> 20) as u64 * 2).min(1024);
            if shares.is_none_or(|s| s < wanted) {
                linux = Some(LinuxContainerAdjustment {
                    devices: Vec::new(),
                    resources: Some(LinuxResources {
                        memory: None,
                        cpu: Some(LinuxCpu {
                            shares: Some(wanted),
                            quota: None,
                            period: None,
                            realtime_runtime: None,
                            realtime_period: None,
                            cpus: String::new(),
                            mems: String::new(),
                        }),
                        hugepage_limits: Vec::new(),
                        blockio_class: None,
                        rdt_class: None,
                        unified: Vec::new(),
                        devices: Vec::new(),
                        pids: None,
                    }),
                    cgroups_path: String::new(),
                    oom_score_adj: None,
                    io_priority: None,
                    seccomp_policy: None,
                    namespaces: Vec::new(),
                    sysctl: Vec::new(),
                    net_devices: Vec::new(),
                    scheduler: None,
                    rdt: None,
                    memory_policy: None,
                });
            }
        }
        let adjust = ContainerAdjustment {
            annotations: vec![KeyValue { key: format!("example.com/{tag}"), value: summary }],
            mounts: Vec::new(),
            env: vec![KeyValue { key: env_name, value: name }],
            hooks: None,
            linux,
            rlimits: Vec::new(),
            cdi_devices: Vec::new(),
            args: Vec::new(),
        };
        if !does('p') {
            core::hint::black_box(adjust);
            return no_change();
        }
        Ok(Reply { adjust: Some(adjust), update: Vec::new(), evict: Vec::new() })
    }
}

export!(Lean);
#[path = "../../bare/src/floor.rs"]
mod floor;

/// `memcmp` for code that compares bytes (string equality and prefixes):
/// without the standard library nothing else provides it on this target
/// (the bare guest compares nothing and does without).
///
/// # Safety
/// `a` and `b` are readable for `n` bytes, as for C's `memcmp`.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: `i < n`, within both blocks by the caller's contract.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
    }
    0
}

/// `bcmp`, which the compiler emits for equality tests: as [`memcmp`].
///
/// # Safety
/// As for [`memcmp`].
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the same contract.
    unsafe { memcmp(a, b, n) }
}
