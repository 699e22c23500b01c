//! Shared pieces of the nri-wasm benchmarks (`benches/chain.rs`): the
//! realistic CreateContainer request, chains of compiled test policies, and
//! the realistic policy implemented natively in Rust, the baseline the wasm
//! chain is compared with. Figures and how to run them: `docs/performance.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_wasm::merge::{CreateMerge, MergeError};
use nri_wasm::policy::chain::{Chain, ChainSettings, EvalContext};
use nri_wasm::policy::engine::{CallEnv, CompiledPolicy, Facts, PolicyEngine};
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm::policy::PolicyLoader;
use nri_wasm_api::api as pb;
use protobuf::MessageField;

pub use nri_wasm_e2e::guests;

/// The request every benchmark evaluates: a pod with 20 labels and 20
/// annotations, a container with 30 annotations, 25 env variables, 12 mounts
/// and full Linux resources, shaped like what containerd sends.
pub fn request() -> pb::CreateContainerRequest {
    let pod = nri_sim::workload::pod(3);
    let container = nri_sim::workload::container(&pod, 1);
    pb::CreateContainerRequest {
        pod: MessageField::some(pod),
        container: MessageField::some(container),
        ..Default::default()
    }
}

/// The limits of the benchmarks' policies: the defaults, but a time limit
/// no stall of a busy (or hypervisor-starved) machine reaches, so that a
/// benchmark measures the cost of calls and never fails on a slow one.
pub fn bench_limits() -> Limits {
    Limits { timeout_ms: 5_000, ..Limits::default() }
}

/// The engine, facts and policies of one benchmark run.
#[derive(Debug, Clone)]
pub struct Bench {
    pub engine: Arc<PolicyEngine>,
    /// Loads policies for `engine`.
    pub loader: Arc<PolicyLoader>,
    pub facts: Arc<Facts>,
}

impl Default for Bench {
    fn default() -> Self {
        Self::new()
    }
}

impl Bench {
    /// An engine with the test settings (pooling allocator, shared compile cache).
    pub fn new() -> Self {
        let engine = Arc::new(PolicyEngine::new(&nri_wasm_e2e::engine_settings()).expect("engine"));
        let loader = Arc::new(PolicyLoader::new(engine.clone()));
        Self { engine, loader, facts: Arc::new(nri_wasm_e2e::test_facts()) }
    }

    /// Compiles and initialises one policy.
    pub fn load(&self, name: &str, wasm: &str, settings: &str, on_error: OnError, limits: Limits) -> CompiledPolicy {
        let spec = nri_wasm_e2e::policy_spec(name, wasm, settings, on_error, limits);
        self.loader.load(&spec, &self.facts).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `n` instances of the realistic guest, settings `0` to `n - 1`.
    pub fn realistic(&self, n: usize) -> Chain {
        self.instances(guests::REALISTIC, n, "")
    }

    /// `n` instances of the lean guest: the realistic policy's reads and
    /// reply without the standard library, WASI or the SDK, less the parts
    /// named by the letters of `skip` (tests/guests/lean).
    pub fn lean(&self, n: usize, skip: &str) -> Chain {
        self.instances(guests::LEAN, n, &if skip.is_empty() { String::new() } else { format!("{skip}_") })
    }

    /// `n` instances of `wasm`, settings `<prefix>0` to `<prefix><n - 1>`.
    fn instances(&self, wasm: &str, n: usize, prefix: &str) -> Chain {
        let policies = (0..n)
            .map(|i| self.load(&policy_name(i), wasm, &format!("{prefix}{i}"), OnError::Fail, bench_limits()))
            .collect();
        Chain::new(policies, ChainSettings::default())
    }

    /// The same chain, but every policy reads the whole pod and container
    /// (settings `full-0` to `full-<n - 1>`): what records handed over
    /// whole would cost.
    pub fn realistic_full(&self, n: usize) -> Chain {
        self.instances(guests::REALISTIC, n, "full-")
    }

    /// One instance of the no-op guest.
    pub fn noop(&self) -> Chain {
        let noop = self.load("00-noop", guests::NOOP, "", OnError::Fail, bench_limits());
        Chain::new(vec![noop], ChainSettings::default())
    }

    /// An evaluation context whose deadline is `budget` from now.
    pub fn cx(&self, budget: Duration) -> EvalContext {
        let env = CallEnv::detached(self.facts.clone());
        EvalContext::new(self.engine.clone(), env, Instant::now() + budget)
    }

    /// Runs CreateContainer through `chain` on the engine's policy runtime.
    pub fn create(
        &self,
        chain: &Chain,
        budget: Duration,
        req: &pb::CreateContainerRequest,
    ) -> Result<nri_wasm::policy::chain::Evaluated<pb::CreateContainerResponse>, nri_wasm::policy::chain::ChainError>
    {
        let cx = self.cx(budget);
        self.engine.block_on(chain.create_container(&cx, req))
    }
}

/// The name of the `i`th policy of a chain (the owner in merge records).
pub fn policy_name(i: usize) -> String {
    format!("{i:02}-realistic")
}

/// FNV-1a of the settings, as the guest computes it.
fn pick(settings: &str, n: usize) -> usize {
    let h = settings.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    (h % n as u64) as usize
}

/// The realistic guest (`tests/guests/realistic`), written natively against
/// the protobuf types: same reads, same checks, same reply.
pub fn native_policy(
    tag: &str,
    pod: &pb::PodSandbox,
    ctr: &pb::Container,
) -> Result<pb::CreateContainerResponse, String> {
    if let Some(reason) = ctr.annotations.get(&format!("example.com/deny-{tag}")) {
        return Err(format!("container {} denied by policy {tag}: {reason}", ctr.name));
    }
    let app = pod.labels.get("app").map_or("-", String::as_str);
    if let Some(ns) = pod.labels.get("io.kubernetes.pod.namespace") {
        if *ns != pod.namespace {
            return Err(format!("pod {} labelled with namespace {ns}, runs in {}", pod.name, pod.namespace));
        }
    }
    let note_key = format!("example.com/note-{}", 8 + pick(tag, 12));
    let note = pod.annotations.get(&note_key).map_or(0, String::len);
    let image = ctr.annotations.get("io.kubernetes.cri.image-name").map_or("unknown", String::as_str);
    let app_env = ctr.env.iter().filter(|v| v.starts_with("APP_")).count();

    let resources = ctr.linux.as_ref().and_then(|l| l.resources.as_ref());
    let memory = resources.and_then(|r| r.memory.as_ref()).and_then(|m| m.limit.as_ref()).map(|l| l.value);
    let shares = resources.and_then(|r| r.cpu.as_ref()).and_then(|c| c.shares.as_ref()).map(|s| s.value);
    let Some(memory) = memory.filter(|m| *m > 0) else {
        return Err(format!("container {} has no memory limit", ctr.name));
    };

    let summary = format!(
        "app={app} image={image} mem={}Mi shares={} env={app_env} note={note}",
        memory >> 20,
        shares.unwrap_or(0)
    );
    let env_name = format!("POLICY_{}", tag.to_ascii_uppercase().replace('-', "_"));
    let mut adjust = pb::ContainerAdjustment::default();
    adjust.annotations.insert(format!("example.com/{tag}"), summary);
    adjust.env.push(pb::KeyValue { key: env_name, value: ctr.name.clone(), ..Default::default() });
    if tag == "0" {
        let wanted = ((memory >> 20) as u64 * 2).min(1024);
        if shares.is_none_or(|s| s < wanted) {
            let linux = adjust.linux.mut_or_insert_default();
            let cpu = linux.resources.mut_or_insert_default().cpu.mut_or_insert_default();
            cpu.shares = MessageField::some(pb::OptionalUInt64 { value: wanted, ..Default::default() });
        }
    }
    Ok(pb::CreateContainerResponse { adjust: MessageField::some(adjust), ..Default::default() })
}

/// Why the native chain did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NativeError {
    Denied(String),
    Merge(MergeError),
}

/// `n` native policies, settings `0` to `n - 1`, each seeing the container
/// as the ones before left it, merged with the host's own merge.
pub fn native_chain(n: usize, req: &pb::CreateContainerRequest) -> Result<pb::CreateContainerResponse, NativeError> {
    let mut merge = CreateMerge::new(req);
    for i in 0..n {
        let reply = native_policy(&i.to_string(), merge.pod(), merge.container()).map_err(NativeError::Denied)?;
        merge.apply(&policy_name(i), &reply).map_err(NativeError::Merge)?;
    }
    Ok(merge.finish())
}

/// CPU time so far of every thread of the processes `pids`, in nanoseconds
/// (the first field of `/proc/PID/task/*/schedstat`); a process gone counts
/// nothing.
pub fn cpu_ns(pids: &[u32]) -> u64 {
    schedstat(pids, 0)
}

/// How many times so far a thread of the processes `pids` was put on a CPU
/// (the third field of `/proc/PID/task/*/schedstat`): the wake-ups of
/// threads that sleep between events, and the preemptions.
pub fn runs_on_cpu(pids: &[u32]) -> u64 {
    schedstat(pids, 2)
}

/// Field `field` of `/proc/PID/task/*/schedstat`, summed over every thread.
fn schedstat(pids: &[u32], field: usize) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).ok())
        .flat_map(|tasks| tasks.flatten())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(field).and_then(|v| v.parse::<u64>().ok()))
        .sum()
}
