//! Compiling a component to native code, within bounds.
//!
//! Compile time and memory grow with what a component contains, and a
//! component can be made to take minutes and gigabytes (hundreds of
//! thousands of functions). Such a file must not stall the host or take its
//! memory, so the host binary compiles in a child process of its own
//! ([`Compiler::Subprocess`], `nri-wasm internal-compile`): the component
//! goes in on stdin, the compiled artifact comes back on stdout, and the
//! child runs with an address-space limit and a CPU-time limit, and dies
//! with the host. The artifact is only loaded once the child has exited
//! cleanly.
//!
//! What a compile may take is bounded by what the compile *does* (CPU time,
//! memory), never by how busy the node is: the child runs at the host's own
//! priority, and its CPU time is limited by `RLIMIT_CPU`
//! (`compile-timeout-ms` of CPU time for each core the compiler may use).
//! On a node saturated by its workload a child at a lower priority starved,
//! hit a wall-clock limit and left a mandatory policy out, which refused
//! every container. The wall clock remains only as a generous backstop
//! ([`WALL_BACKSTOP_FACTOR`] × the CPU budget) against a child that is
//! stuck without using CPU. The error says which bound fired. Compiling
//! never delays an answer to the runtime: it runs in another process,
//! awaited on the policy runtime, never on the transport's thread.
//!
//! The snapshot's steps on bytes (`rewrite.rs`: instrumenting a component,
//! rewriting it with its configured state) parse and rebuild the same
//! untrusted files, so they run the same way, within the same bounds
//! (`nri-wasm internal-snapshot`), and take a compile slot like a compile.
//!
//! [`Compiler::InProcess`] compiles on a blocking thread of the policy
//! runtime; its timeout stops the wait, not the work. Tests and embedders
//! without the binary use it.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::rewrite::SnapshotStep;
use crate::policy::engine::codegen_config;

/// Most bytes of a compiled artifact the host takes from the child.
const MAX_ARTIFACT_BYTES: usize = 1 << 30;
/// Most bytes of the child's stderr kept for the error message.
const MAX_CHILD_STDERR: usize = 4096;
/// The wall-clock backstop is this many times the CPU budget: a child that
/// uses CPU is stopped by its CPU limit long before, even on a node whose
/// CPUs are saturated five times over.
pub(crate) const WALL_BACKSTOP_FACTOR: u32 = 10;
/// Seconds of CPU time between the soft limit (SIGXCPU) and the hard one.
const CPU_HARD_MARGIN_S: u64 = 5;

/// Where components are compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiler {
    /// On a blocking thread of this process.
    InProcess,
    /// In a child process: this executable, run as `internal-compile`.
    Subprocess {
        /// The executable to run: the `nri-wasm` binary itself.
        exe: PathBuf,
    },
}

/// How much one compilation may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileBounds {
    /// CPU time the compiler may use per core (`compile-timeout-ms`); the
    /// wall-clock backstop is `WALL_BACKSTOP_FACTOR` times this.
    pub timeout: Duration,
    /// Address space of the compiling child.
    pub memory_bytes: u64,
    /// Largest component the child accepts.
    pub max_component_bytes: u64,
}

/// A compilation that did not produce an artifact; the message completes
/// "compiling it ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The CPU-time limit fired.
    #[error(
        "used more than the {cpu_s} s of CPU time allowed ([engine] compile-timeout-ms of {per_core_ms} ms per core)"
    )]
    Cpu {
        /// The CPU seconds the child was allowed in all: the per-core time,
        /// rounded up to seconds, times the cores (its soft limit).
        cpu_s: u64,
        /// `[engine] compile-timeout-ms`, the CPU time allowed per core.
        per_core_ms: u64,
    },
    /// The wall-clock backstop fired (in process: the only bound there is).
    #[error("was still running after {0} ms of wall-clock time (the backstop against a stuck compiler, {WALL_BACKSTOP_FACTOR} x [engine] compile-timeout-ms)")]
    Timeout(u64),
    /// The compiling child ran out of address space (its memory limit, in MiB).
    #[error("needed more than the {0} MiB allowed ([engine] compile-memory-mib)")]
    Memory(u64),
    /// The compiler reported an error, panicked, or gave an oversized
    /// artifact; the text says which.
    #[error("failed: {0}")]
    Failed(String),
    /// The compiling child could not be started, fed or waited for: the
    /// node's failure at the moment, not the component's.
    #[error("could not be run: {0}")]
    Unavailable(String),
}

impl CompileBounds {
    /// The bounds of one compilation, from the `compile-*` and
    /// `max-component-mib` settings.
    pub fn of(settings: &crate::policy::engine::EngineSettings) -> Self {
        Self {
            timeout: Duration::from_millis(settings.compile_timeout_ms),
            memory_bytes: settings.compile_memory_mib << 20,
            max_component_bytes: settings.max_component_mib << 20,
        }
    }

    /// The wall-clock backstop: `WALL_BACKSTOP_FACTOR` × the CPU budget.
    pub fn backstop(&self) -> Duration {
        self.timeout.saturating_mul(WALL_BACKSTOP_FACTOR)
    }

    /// Seconds of CPU time the child may use: the budget for every core the
    /// compiler may run on (it compiles functions in parallel), rounded up.
    pub fn cpu_seconds(&self) -> u64 {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        self.cpu_seconds_on(cores)
    }

    /// Seconds of CPU time a child working on `cores` cores may use.
    pub fn cpu_seconds_on(&self, cores: u64) -> u64 {
        self.timeout.as_millis().div_ceil(1000) as u64 * cores
    }
}

impl Compiler {
    /// Compiles `component` for `engine` into a serialized artifact.
    pub async fn compile(
        &self,
        engine: &wasmtime::Engine,
        component: Arc<[u8]>,
        bounds: CompileBounds,
    ) -> Result<Vec<u8>, CompileError> {
        match self {
            Self::InProcess => {
                let engine = engine.clone();
                let work = tokio::task::spawn_blocking(move || engine.precompile_component(&component));
                let backstop = bounds.backstop();
                match tokio::time::timeout(backstop, work).await {
                    Ok(Ok(Ok(artifact))) => Ok(artifact),
                    Ok(Ok(Err(e))) => Err(CompileError::Failed(crate::text::one_line(&e))),
                    Ok(Err(join)) => Err(CompileError::Failed(format!("the compiler panicked: {join}"))),
                    Err(_) => Err(CompileError::Timeout(backstop.as_millis() as u64)),
                }
            }
            Self::Subprocess { exe } => subprocess(exe, component, bounds).await,
        }
    }

    /// Runs one of the snapshot's steps on bytes (`rewrite.rs`) within the
    /// same bounds as a compile: in the child (`nri-wasm internal-snapshot`)
    /// or on a blocking thread, its panics caught. What it returns is at
    /// most `max_output` bytes and one more, which says it made too much.
    pub async fn snapshot_step(
        &self,
        step: SnapshotStep,
        input: Vec<u8>,
        bounds: CompileBounds,
        max_output: usize,
    ) -> Result<Vec<u8>, CompileError> {
        match self {
            Self::InProcess => {
                // A panic comes back as the task's join error.
                let work = tokio::task::spawn_blocking(move || step.run(&input));
                let backstop = bounds.backstop();
                match tokio::time::timeout(backstop, work).await {
                    Ok(Ok(Ok(mut output))) => {
                        output.truncate(max_output + 1);
                        Ok(output)
                    }
                    Ok(Ok(Err(e))) => Err(CompileError::Failed(e)),
                    Ok(Err(join)) => Err(CompileError::Failed(join.to_string())),
                    Err(_) => Err(CompileError::Timeout(backstop.as_millis() as u64)),
                }
            }
            Self::Subprocess { exe } => {
                let args = [
                    "internal-snapshot".to_string(),
                    step.name().to_string(),
                    "--max-bytes".to_string(),
                    input.len().to_string(),
                    "--max-output".to_string(),
                    max_output.to_string(),
                ];
                // The steps run on one thread (the rewrite's crate is built
                // without its thread pool): one core's budget.
                let cpu_seconds = bounds.cpu_seconds_on(1);
                in_child(exe, &args, "the snapshot step", input, bounds, cpu_seconds, max_output).await
            }
        }
    }
}

async fn subprocess(
    exe: &std::path::Path,
    component: Arc<[u8]>,
    bounds: CompileBounds,
) -> Result<Vec<u8>, CompileError> {
    let args = ["internal-compile".to_string(), "--max-bytes".to_string(), bounds.max_component_bytes.to_string()];
    let cpu_seconds = bounds.cpu_seconds();
    let artifact = in_child(exe, &args, "the compiler", component, bounds, cpu_seconds, MAX_ARTIFACT_BYTES).await?;
    if artifact.len() > MAX_ARTIFACT_BYTES {
        return Err(CompileError::Failed(format!("the artifact exceeds {MAX_ARTIFACT_BYTES} bytes")));
    }
    Ok(artifact)
}

/// Runs `exe` with `args` as a child (`who`, in its errors) under `bounds`
/// (address space, `cpu_seconds` of CPU time, a wall-clock backstop),
/// feeds it `input` on stdin, and returns what it wrote on stdout: at most
/// `max_output` bytes and one more, which tells the caller it wrote too
/// much. The child is killed if the host stops waiting, and dies with the
/// host.
async fn in_child(
    exe: &std::path::Path,
    args: &[String],
    who: &str,
    input: impl AsRef<[u8]> + Send + 'static,
    bounds: CompileBounds,
    cpu_seconds: u64,
    max_output: usize,
) -> Result<Vec<u8>, CompileError> {
    let failed = |what: &str, e: std::io::Error| CompileError::Unavailable(format!("{what}: {e}"));
    let mut command = tokio::process::Command::new(exe);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .kill_on_drop(true);
    let memory = bounds.memory_bytes;
    // SAFETY: the closure runs in the child between fork and exec and calls
    // only async-signal-safe functions (setrlimit, prctl) on values computed
    // before the fork.
    unsafe {
        command.pre_exec(move || limit_child(memory, cpu_seconds));
    }
    let mut child = command.spawn().map_err(|e| failed(&format!("cannot start {}", exe.display()), e))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let work = async {
        let feed = async {
            // A child that dies early closes its end: its exit status says why.
            let _ = stdin.write_all(input.as_ref()).await;
            drop(stdin);
        };
        let mut output: Vec<u8> = Vec::new();
        let mut errors: Vec<u8> = Vec::new();
        let read = async {
            let read = (&mut stdout).take(max_output as u64 + 1).read_to_end(&mut output).await;
            // A child with more to write then fails its write instead of
            // waiting for a reader until the backstop.
            drop(stdout);
            read
        };
        let read_err = async {
            (&mut stderr).take(MAX_CHILD_STDERR as u64).read_to_end(&mut errors).await?;
            // The rest is drained, not kept: a child writing more is not
            // left waiting for a reader.
            tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await
        };
        let ((), out, _) = tokio::join!(feed, read, read_err);
        out.map_err(|e| failed("reading the child's output", e))?;
        let status = child.wait().await.map_err(|e| failed("waiting for the child", e))?;
        Ok::<_, CompileError>((status, output, errors))
    };
    let backstop = bounds.backstop();
    let (status, output, errors) = match tokio::time::timeout(backstop, work).await {
        Ok(done) => done?,
        // Dropping the work kills the child (kill_on_drop).
        Err(_) => return Err(CompileError::Timeout(backstop.as_millis() as u64)),
    };
    if output.len() > max_output {
        return Ok(output);
    }
    let errors = String::from_utf8_lossy(&errors);
    if status.success() {
        return Ok(output);
    }
    use std::os::unix::process::ExitStatusExt;
    // The limit shows as the kernel's kill, as Rust's abort on a failed
    // allocation, or as the error of a reservation it refused. (A name in
    // the input quoted in an error could carry these words too: a refusal
    // then names the memory limit instead of its own reason, and is a
    // refusal all the same.)
    let out_of_memory = ["memory allocation", "out of memory", "Cannot allocate memory"];
    if status.signal() == Some(libc::SIGKILL) || out_of_memory.iter().any(|m| errors.contains(m)) {
        return Err(CompileError::Memory(memory >> 20));
    }
    // The soft CPU limit sends SIGXCPU; a child that survives it would be
    // killed at the same hard limit.
    if status.signal() == Some(libc::SIGXCPU) {
        return Err(CompileError::Cpu { cpu_s: cpu_seconds, per_core_ms: bounds.timeout.as_millis() as u64 });
    }
    // The child's own one-line error, or the message of a panic, not the
    // notes around it.
    let message = errors
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with("note:") && !l.starts_with("stack backtrace"))
        .map_or_else(|| format!("{who} exited with {status}"), str::to_string);
    Err(CompileError::Failed(crate::text::guest_text(&message, crate::text::MAX_ERROR_BYTES)))
}

/// Limits of the compiling child, applied between fork and exec.
fn limit_child(memory_bytes: u64, cpu_seconds: u64) -> std::io::Result<()> {
    let set = |resource, value: u64, hard: u64| {
        let limit = libc::rlimit { rlim_cur: value as libc::rlim_t, rlim_max: hard as libc::rlim_t };
        // SAFETY: setrlimit is async-signal-safe; `limit` is a valid struct.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    set(libc::RLIMIT_AS, memory_bytes, memory_bytes)?;
    // At the soft limit the kernel sends SIGXCPU (reported as the CPU bound);
    // at the hard one SIGKILL, which a soft limit equal to it would make the
    // first signal, indistinguishable from the out-of-memory killer.
    set(libc::RLIMIT_CPU, cpu_seconds, cpu_seconds.saturating_add(CPU_HARD_MARGIN_S))?;
    set(libc::RLIMIT_CORE, 0, 0)?;
    // The child keeps the host's priority: at a lower one it starves behind
    // a busy node's workload (see the module's documentation).
    // SAFETY: an async-signal-safe call on the calling process only.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    Ok(())
}

/// `nri-wasm internal-compile`: the child's side. Reads a component from
/// stdin, writes the compiled artifact to stdout; on failure writes one line
/// to stderr and exits non-zero.
pub fn child_main(max_component_bytes: u64) -> std::process::ExitCode {
    child_run(max_component_bytes, "the component", |component| {
        let engine = wasmtime::Engine::new(&codegen_config())
            .map_err(|e| format!("cannot create the engine: {}", crate::text::one_line(&e)))?;
        engine.precompile_component(&component).map_err(|e| crate::text::one_line(&e))
    })
}

/// `nri-wasm internal-snapshot`: the child's side of a snapshot step
/// (`rewrite.rs`). Reads at most `max_input` bytes from stdin, runs `step`
/// on them, and writes the result (at most `max_output` bytes and one more,
/// which tells the parent it made too much) to stdout; on failure writes
/// one line to stderr and exits non-zero.
pub fn snapshot_child_main(step: SnapshotStep, max_input: u64, max_output: u64) -> std::process::ExitCode {
    child_run(max_input, "the input", |input| {
        let mut output = step.run(&input)?;
        output.truncate(max_output as usize + 1);
        Ok(output)
    })
}

/// The child's side of [`in_child`]: reads at most `max_input` bytes of
/// `what` from stdin, writes what `work` makes of them to stdout; on
/// failure writes one line to stderr (the parent's error) and exits
/// non-zero.
fn child_run(
    max_input: u64,
    what: &str,
    work: impl FnOnce(Vec<u8>) -> Result<Vec<u8>, String>,
) -> std::process::ExitCode {
    // The parent sends at most `max_input` bytes (a snapshot step's input
    // exactly that): one allocation, not a doubling buffer that would
    // need up to twice as much.
    let mut input = Vec::new();
    let _ = input.try_reserve_exact(usize::try_from(max_input).unwrap_or(usize::MAX));
    let result = std::io::stdin()
        .lock()
        .take(max_input + 1)
        .read_to_end(&mut input)
        .map_err(|e| format!("cannot read {what}: {e}"))
        .and_then(|_| match input.len() as u64 > max_input {
            true => Err(format!("{what} exceeds {max_input} bytes")),
            false => work(input),
        })
        .and_then(|output| {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            out.write_all(&output).and_then(|()| out.flush()).map_err(|e| format!("cannot write the result: {e}"))
        });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A diagnostic for the parent, which reads it as the error.
            #[allow(clippy::print_stderr)]
            {
                eprintln!("{e}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
