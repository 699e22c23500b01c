//! A realistic policy for the benchmarks, parametrised by its settings (a
//! short word such as `0`, `7` or `team-a`), so that many instances can run
//! in one chain without touching the same keys.
//!
//! On CreateContainer it does what a typical admission-style policy does,
//! reading only what it needs from the event (as a policy written with the
//! SDK would):
//! - checks the settings once, in `configure`;
//! - reads the pod's labels and annotations (the app label, the namespace
//!   label against the pod's namespace, one of the pod's notes chosen by the
//!   settings);
//! - denies a container annotated `example.com/deny-<settings>`;
//! - looks up the container's image annotation and counts its application
//!   env variables;
//! - checks the container's resources: a memory limit is required, and for
//!   the settings `0` only, the CPU shares are raised to at least 2 per MiB of
//!   memory limit (capped at 1024), the one simple field any instance sets;
//! - sets the annotation `example.com/<settings>` and the env variable
//!   `POLICY_<SETTINGS>` with a summary of what it saw.
//!
//! Settings `full-<word>` act as `<word>` but make it read the whole pod and
//! container first, for the benchmark of what reading everything costs.
//!
//! `benches/benches/chain.rs` implements the same logic natively, for
//! comparison; keep the two in step.
use nri_wasm_sdk::*;

struct Realistic;

/// Most bytes of settings accepted.
const MAX_SETTINGS: usize = 32;

fn valid_settings(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_SETTINGS && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A small stable hash of the settings (FNV-1a), to pick which pod note to read.
fn pick(settings: &str, n: usize) -> usize {
    let h = settings.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    (h % n as u64) as usize
}

impl Policy for Realistic {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        if !valid_settings(settings) {
            return Err(format!(
                "settings must be a word of [A-Za-z0-9-], at most {MAX_SETTINGS} bytes, got {settings:?}"
            ));
        }
        Ok(())
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let (full, tag) = match settings().strip_prefix("full-") {
            Some(tag) => (true, tag),
            None => (false, settings()),
        };
        if full {
            // Read the whole pod and container first (what a policy written
            // against records would pay); the reads below answer from them.
            std::hint::black_box((e.pod(), e.container()));
        }

        if let Some(reason) = e.container_annotation(&format!("example.com/deny-{tag}")) {
            return Err(format!("container {} denied by policy {tag}: {reason}", e.container_meta().name));
        }
        let app = e.pod_label("app").unwrap_or_else(|| "-".into());
        if let Some(ns) = e.pod_label("io.kubernetes.pod.namespace") {
            let pod = e.pod_meta();
            if ns != pod.namespace {
                return Err(format!("pod {} labelled with namespace {ns}, runs in {}", pod.name, pod.namespace));
            }
        }
        let note_key = format!("example.com/note-{}", 8 + pick(tag, 12));
        let note = e.pod_annotation(&note_key).map_or(0, |n| n.len());
        let image = e.container_annotation("io.kubernetes.cri.image-name").unwrap_or_else(|| "unknown".into());
        let app_env = e.env().iter().filter(|v| v.starts_with("APP_")).count();

        let resources = e.resources();
        let memory = resources.and_then(|r| r.memory.as_ref()).and_then(|m| m.limit);
        let shares = resources.and_then(|r| r.cpu.as_ref()).and_then(|c| c.shares);
        let name = &e.container_meta().name;
        let Some(memory) = memory.filter(|m| *m > 0) else {
            return Err(format!("container {name} has no memory limit"));
        };

        let summary = format!(
            "app={app} image={image} mem={}Mi shares={} env={app_env} note={note}",
            memory >> 20,
            shares.unwrap_or(0)
        );
        let env_name = format!("POLICY_{}", tag.to_ascii_uppercase().replace('-', "_"));
        let mut adjust =
            ContainerAdjustment::new().set_annotation(&format!("example.com/{tag}"), &summary).set_env(&env_name, name);
        if tag == "0" {
            let wanted = ((memory >> 20) as u64 * 2).min(1024);
            if shares.is_none_or(|s| s < wanted) {
                adjust = adjust.set_cpu_shares(wanted);
            }
        }
        Ok(Reply::adjust(adjust))
    }
}

export_policy!(Realistic);
