//! `nri-wasm check POLICY.wasm`: will this host load the policy, and what
//! will it cost?
//!
//! The component goes through the loader's own steps with the production
//! engine, in order: read, the cheap inspection (header, world, imports,
//! structure), compilation in the bounded child process, linking, and
//! `configure` with the settings. Before the verdict, the report lists
//! what an author needs to fix a refusal: the world's version ("rebuild
//! against 0.3" for an older one), the events the component declares, and
//! every import, allowed or refused with the reason. For a policy that loads it measures what a node will pay:
//! compiling, loading again from the compile cache (what every restart and
//! reload costs), and a fresh instance with a call that does nothing, the
//! floor of every event the policy handles.
//!
//! A file that is not WebAssembly is refused in one line that quotes none
//! of it (it may be a secret passed by mistake). Exit codes: 0 loads, 1
//! refused (the report names the step), 2 usage or unreadable file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use nri_wasm_api::api as pb;

use super::{HostArgs, SettingsArgs, SetupError, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use crate::cli::HostBuilder;
use crate::nri::version::EventKind;
use crate::policy::bindings::wit;
use crate::policy::call::compiled::Imports;
use crate::policy::call::event::CallEvent;
use crate::policy::engine::{CallEnv, CompiledPolicy, PolicyEngine};
use crate::policy::load::compile::Compiler;
use crate::policy::load::errors::{LoadError, WIT_VERSION};
use crate::policy::load::inspect;
use crate::policy::load::read::read_policy_file;
use crate::policy::spec::caps::{Allowed, Capability};
use crate::policy::spec::inspection::Inspection;
use crate::policy::spec::manifest::PolicySpec;
use crate::policy::PolicyLoader;

/// Calls timed for the figure of a call that does nothing.
const NOOP_CALLS: usize = 20;

/// The arguments of `nri-wasm check`.
#[derive(Debug, Args)]
#[command(after_help = "Exit codes: 0 the host loads it; 1 refused (the last line names the step); \
    2 usage, or a file that cannot be read.\nGuide: docs/writing-policies.md")]
pub struct CheckArgs {
    /// The policy component (`.wasm`; its `NN-name.toml` is read if it is
    /// beside it), or `oci://…` to pull it as a node would (with the
    /// configuration's `[registry]`).
    #[arg(value_name = "POLICY.wasm|oci://REF")]
    pub file: PathBuf,
    /// The policy's settings, when not from its `NN-name.toml`.
    #[command(flatten)]
    pub settings: SettingsArgs,
    // The brackets name TOML tables in `--help`, not Rust items.
    #[allow(rustdoc::broken_intra_doc_links, rustdoc::private_intra_doc_links)]
    /// A node's configuration file: its [engine] settings, default
    /// [policies.limits] and [registry] (keys, certificates) apply, as on
    /// the node.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The compile cache, shared with `eval` and the host (default: the
    /// configuration's cache-dir, else $XDG_CACHE_HOME/nri-wasm or
    /// ~/.cache/nri-wasm): a component compiles once per machine.
    #[arg(long, value_name = "DIR", env = "NRI_WASM_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// How `check` ended, with the exit code it means.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Nothing was checked.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The file cannot be read.
    #[error("{0}")]
    Unreadable(LoadError),
    /// The host refuses the policy at `step`.
    #[error("refused at step {step}: {error}")]
    Refused {
        /// The load step that refused it (`validate`, `world`, `compile`, ...).
        step: &'static str,
        /// Why, as the host would log it.
        error: String,
    },
}

impl CheckError {
    /// [`EXIT_FAILED`] when the policy is refused (its file or settings
    /// included), [`EXIT_USAGE`] when nothing could be checked.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Setup(SetupError::PolicyFile(_)) | Self::Refused { .. } => EXIT_FAILED,
            Self::Setup(_) | Self::Unreadable(_) => EXIT_USAGE,
        }
    }
}

impl From<LoadError> for CheckError {
    fn from(e: LoadError) -> Self {
        match e {
            LoadError::Read { .. } | LoadError::NotAFile { .. } => Self::Unreadable(e),
            e => Self::Refused { step: e.step(), error: e.to_string() },
        }
    }
}

/// `nri-wasm check`: the report to `out`, what kept it from checking to `err`.
pub fn check(args: &CheckArgs, compiler: Compiler, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    match run(args, compiler, out) {
        Ok(()) => {
            let _ = writeln!(out, "result    loads");
            ExitCode::from(EXIT_OK)
        }
        Err(e @ CheckError::Refused { .. }) => {
            let _ = writeln!(out, "result    {e}");
            ExitCode::from(e.exit_code())
        }
        Err(e) => {
            let _ = writeln!(err, "nri-wasm check: {}", crate::text::chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Why the host refuses an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum ImportRefused {
    /// Another version of the policy interface.
    #[error("another version of the interface: rebuild against {WIT_VERSION}")]
    OtherVersion,
    /// An interface the host does not link.
    #[error("the host does not provide it")]
    NotProvided,
}

/// What the host makes of an import.
fn import_verdict(policy: &str, import: &str) -> Result<&'static str, ImportRefused> {
    if let Some(refusal) = inspect::import_refusal(policy, import) {
        return Err(match refusal {
            LoadError::Version { .. } => ImportRefused::OtherVersion,
            _ => ImportRefused::NotProvided,
        });
    }
    Ok(match import.split('/').next().unwrap_or_default() {
        "nri-wasm:policy" => "the host's policy interface",
        "wasi:cli" => "WASI: empty arguments, environment and stdin; output kept, bounded",
        "wasi:io" => "WASI: streams and polling",
        "wasi:clocks" => "WASI: clocks",
        "wasi:random" => "WASI: random bytes, bounded per call",
        "wasi:filesystem" => "WASI: no directory is opened to policies",
        "wasi:sockets" => "WASI: no network is reachable from policies",
        _ => "allowed",
    })
}

/// The world line: which version of the policy interface it was built for.
fn world_line(found: &Inspection) -> String {
    let exports = ["configure", "handle"];
    let missing: Vec<&str> = exports.iter().copied().filter(|e| !found.exports.iter().any(|x| x == e)).collect();
    let exports = match missing.as_slice() {
        [] => "exports configure and handle".to_string(),
        m => format!("does not export {}", m.join(" or ")),
    };
    match &found.wit_version {
        Some(v) if v.starts_with(&format!("{WIT_VERSION}.")) => format!("nri-wasm:policy@{v}; {exports}"),
        Some(v) => format!(
            "nri-wasm:policy@{v}, but this host loads {WIT_VERSION}.x: rebuild against {WIT_VERSION} (the current SDK or WIT package); {exports}"
        ),
        None => format!("nri-wasm:policy (no import names its version); {exports}"),
    }
}

/// What the inspection found, before any verdict.
fn write_inspection(spec: &PolicySpec, size: usize, found: &Inspection, out: &mut dyn Write) {
    let _ = writeln!(
        out,
        "size      {size} bytes: {} functions, {} bytes of code; core modules {}, core instances {}, memories {}, tables {}",
        found.functions, found.code_bytes, found.core_modules, found.core_instances, found.memories, found.tables
    );
    let _ = writeln!(out, "world     {}", world_line(found));
    let _ = writeln!(out, "declares  {}", declares_line(found));
    let _ = writeln!(out, "imports   {}", found.imports.len());
    for import in &found.imports {
        match import_verdict(&spec.name, import) {
            Ok(what) => writeln!(out, "  allowed  {import}: {what}"),
            Err(why) => writeln!(out, "  refused  {import}: {why}"),
        }
        .unwrap_or_default();
    }
}

/// The events the component declares (`policy::spec::declared`): what a host
/// registers for, and waits or fails for, before it has loaded the policy.
fn declares_line(found: &Inspection) -> String {
    match &found.events {
        Some(events) => format!(
            "{} ({}): what a host registers for before it has loaded the policy; configure may answer less, not more",
            events.describe(),
            crate::policy::spec::declared::SECTION
        ),
        None => format!(
            "no events (no {} section): a host knows what it subscribes to only from an earlier load of it, or once \
             it has loaded it (the current SDKs record it: Policy::EVENTS in Rust, the file `events` in the others)",
            crate::policy::spec::declared::SECTION
        ),
    }
}

fn events_line(policy: &CompiledPolicy) -> String {
    let mut events: Vec<&str> = policy.events().iter().map(EventKind::name).collect();
    if policy.wants_synchronize() {
        events.push("Synchronize");
    }
    match events.is_empty() {
        true => "none (the policy never runs)".to_string(),
        false => events.join(", "),
    }
}

/// Times a fresh instance and a call of an event the policy does not
/// subscribe to (its handler's default, which does nothing).
fn noop_call(engine: &PolicyEngine, policy: &CompiledPolicy, env: &CallEnv) -> String {
    let candidates = [
        (wit::EventKind::PostUpdatePodSandbox, EventKind::PostUpdatePodSandbox),
        (wit::EventKind::StopPodSandbox, EventKind::StopPodSandbox),
        (wit::EventKind::RemovePodSandbox, EventKind::RemovePodSandbox),
        (wit::EventKind::RunPodSandbox, EventKind::RunPodSandbox),
    ];
    let unsubscribed = candidates.iter().find(|(_, k)| !policy.events().contains(*k));
    let ((kind, event), note) = match unsubscribed {
        Some(pair) => (*pair, "which it does not subscribe to"),
        None => (candidates[0], "which it subscribes to: its handler's own work is included"),
    };
    let call = CallEvent::pod(kind, Arc::new(pb::PodSandbox::default()));
    let mut times = Vec::with_capacity(NOOP_CALLS);
    let mut fuel = 0;
    for _ in 0..NOOP_CALLS {
        let report = engine.call(policy, call.clone(), env, None, Duration::from_secs(5));
        if let Err(e) = &report.outcome {
            return format!("the call failed: {e}");
        }
        times.push(report.elapsed);
        fuel = report.fuel_used;
    }
    times.sort_unstable();
    let median = times[times.len() / 2];
    format!(
        "{} µs median of {NOOP_CALLS} (first {} µs), fuel {}: instantiate and call {}, {note}",
        median.as_micros(),
        times.first().map_or(0, |t| t.as_micros()),
        super::grouped(fuel),
        event.name()
    )
}

/// `check oci://…`: pulls as a node with this configuration's `[registry]`
/// would (digests, signatures with its `public-keys`), with the registry
/// client of the host's loader, made without the node's cache (so that the
/// registry is asked), and says where the component came from.
fn pull(text: &str, loader: &PolicyLoader, out: &mut dyn Write) -> Result<Vec<u8>, CheckError> {
    use crate::registry::{OciRef, Source};
    let refused = |error: String| CheckError::Refused { step: "pull", error };
    let reference = OciRef::parse(text).map_err(|e| refused(e.to_string()))?;
    let registry = match loader.registry() {
        Some(Ok(registry)) => registry.clone(),
        Some(Err(e)) => return Err(refused(crate::text::chain(&**e))),
        None => return Err(refused(crate::policy::load::loader::NO_REGISTRY.into())),
    };
    let resolved = loader
        .engine()
        .block_on(
            async move { registry.resolve(&Source { reference, public_keys: None, strict_permissions: false }).await },
        )
        .map_err(|e| refused(e.to_string()))?;
    let p = &resolved.provenance;
    let _ = writeln!(out, "source    {}", p.source);
    let _ = writeln!(out, "digest    manifest {}, component sha256:{}", p.manifest, resolved.digest);
    let _ =
        writeln!(out, "signer    {}", p.signer.as_deref().unwrap_or("none required ([registry] public-keys is empty)"));
    Ok(resolved.bytes)
}

fn run(args: &CheckArgs, compiler: Compiler, out: &mut dyn Write) -> Result<(), CheckError> {
    let mut config = super::host_config(&HostArgs { config: args.config.clone(), cache_dir: None })?;
    let reference = args.file.to_str().filter(|t| t.starts_with("oci://"));
    if reference.is_none() && !args.file.exists() {
        return Err(SetupError::Missing(args.file.clone()).into());
    }
    let spec = super::file_spec(&args.file, &args.settings, config.policies.limits())?;

    // The loader as a host with this configuration makes it (`HostBuilder`),
    // with the compile cache `eval` and the host use, so that a large
    // component compiles once per machine rather than once per command (a
    // temporary one when there is none). The second load reads the
    // compiled code, as a node's restart does.
    let mut temporary = None;
    let cache = match super::cache_dir(&args.cache_dir, &config.engine) {
        Some(dir) => dir,
        None => {
            let dir = tempfile::tempdir()
                .map_err(|e| SetupError::Usage(format!("cannot create a temporary directory: {e}")))?;
            temporary.insert(dir).path().to_path_buf()
        }
    };
    config.engine.cache_dir = Some(cache);
    config.registry.cache_dir = None;
    let loader = HostBuilder::new(config.clone()).compiler(compiler).loader().map_err(SetupError::from)?;
    let bytes = match reference {
        Some(text) => pull(text, &loader, out)?,
        None => read_policy_file(&spec, config.engine.max_component_mib << 20)?,
    };
    // Refused without a word of the content, in one line.
    let binary = inspect::binary(&spec.name, &bytes)?;
    let _ = writeln!(out, "policy    {} ({})", spec.name, args.file.display());
    let found = inspect::survey(&spec.name, &binary)?;
    write_inspection(&spec, bytes.len(), &found, out);

    let facts = Arc::new(crate::cli::host::node_facts());
    let started = Instant::now();
    let loaded = loader.load_bytes(&spec, &bytes, &facts);
    let first = started.elapsed();
    let policy = match loaded {
        Ok(policy) => policy,
        Err(e @ LoadError::Init { .. }) => {
            let _ = writeln!(out, "events    unknown: configure failed with these settings (below)");
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    let settings = match spec.settings.as_str() {
        "" => "none given: accepted".to_string(),
        s => format!("accepted: {}", crate::policy::clip::guest_text(s, 200)),
    };
    let _ = writeln!(out, "settings  {settings}");
    let _ = writeln!(out, "events    {}", events_line(&policy));
    let allowed = policy.allowed();
    let _ = writeln!(out, "reads     {}", reads_line(policy.imports(), allowed));
    let asks = match allowed.declared {
        Some(d) => format!("{} (declared)", d.describe()),
        None => "nothing declared: taken as nothing dangerous (the default grant)".to_string(),
    };
    let _ = writeln!(out, "asks      {asks}");
    let ungranted = allowed.ungranted();
    if !ungranted.is_empty() {
        let names: Vec<String> = ungranted.iter().map(|c| format!("{:?}", c.name())).collect();
        let _ = writeln!(
            out,
            "          not granted by these settings: {} (grant = [{}] in its settings file; until then output needing them is refused)",
            ungranted.describe(),
            names.join(", ")
        );
    }
    let l = &spec.limits;
    let _ = writeln!(
        out,
        "limits    fuel {}, timeout-ms {}, memory-mib {}, state-kib {}",
        super::grouped(l.fuel),
        l.timeout_ms,
        l.memory_mib,
        l.state_kib
    );
    let t = policy.timings();
    if t.cached {
        let _ = writeln!(
            out,
            "compile   none: compiled earlier (by check, eval or the host), read from the compile cache in {}",
            super::ms(first)
        );
    } else {
        let _ = writeln!(out, "compile   {} (the whole first load: {})", super::ms(t.compile), super::ms(first));
    }
    if spec.preinitialize {
        match policy.preinitialize_refused() {
            None => {
                let _ = writeln!(
                    out,
                    "preinit   calls start from a snapshot taken after configure (taken in {})",
                    super::ms(t.preinitialize)
                );
            }
            Some(why) => {
                let _ = writeln!(out, "preinit   refused, calls start from the component as built: {why}");
            }
        }
    }

    let started = Instant::now();
    let again = loader.load_bytes(&spec, &bytes, &facts)?;
    let cached = started.elapsed();
    let from_cache =
        if again.timings().cached { "from the compile cache" } else { "compiled again: the cache is not usable" };
    let _ = writeln!(
        out,
        "cached    {} to load {from_cache} (compiled code read in {})",
        super::ms(cached),
        super::ms(again.timings().compile)
    );
    let env = CallEnv::detached(facts);
    let _ = writeln!(out, "call      {}", noop_call(loader.engine(), &again, &env));
    drop(loader);
    drop(temporary);
    Ok(())
}

/// What the policy may read, for the `reads` line: the node view as the
/// host judges it ([`Imports::reads_node`], the test that decides whether
/// the host keeps the view for it), with the reason. State is no
/// capability: it is told from the imports, which is all the host knows
/// before a call.
pub fn reads_line(imports: Imports, allowed: Allowed) -> String {
    let node = match allowed.declared {
        _ if imports.reads_node(allowed) => match allowed.declared {
            Some(_) => "yes (declared)",
            None => "yes (from its imports: it has no declaration)",
        },
        Some(d) if !d.contains(Capability::Node) => "no (not declared)",
        Some(_) if !imports.node => "no (declared, but the node interface is not imported)",
        Some(_) => "no (declared, not granted by these settings: grant = [\"node\"])",
        None if !imports.node => "no (from its imports: it has no declaration)",
        None => "no (imported, not granted by these settings; it has no declaration)",
    };
    let state = if imports.state { "imported (may keep state; not a declared capability)" } else { "no" };
    format!("node view: {node}, state: {state}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_explained_or_refused_with_the_reason() {
        assert_eq!(import_verdict("p", "nri-wasm:policy/event@0.3.0"), Ok("the host's policy interface"));
        assert!(import_verdict("p", "wasi:filesystem/types@0.2.6").unwrap().contains("no directory"));
        assert_eq!(import_verdict("p", "wasi:http/outgoing-handler@0.2.0"), Err(ImportRefused::NotProvided));
        let old = import_verdict("p", "nri-wasm:policy/host@0.2.0").unwrap_err();
        assert_eq!(old, ImportRefused::OtherVersion);
        assert!(old.to_string().contains("rebuild against 0.3"), "{old}");
    }

    #[test]
    fn the_declares_line_names_the_events_or_says_there_is_no_declaration() {
        let mut found = Inspection::default();
        let line = declares_line(&found);
        assert!(line.starts_with("no events (no nri-wasm:events section): a host knows"), "{line}");
        found.events =
            Some(crate::policy::spec::declared::DeclaredEvents::parse("synchronize create-container").unwrap());
        let line = declares_line(&found);
        assert!(
            line.starts_with("create-container, synchronize (nri-wasm:events): what a host registers for"),
            "{line}"
        );
    }

    #[test]
    fn the_world_line_tells_an_old_build_to_rebuild() {
        let mut found = Inspection { wit_version: Some("0.2.0".into()), ..Default::default() };
        let line = world_line(&found);
        assert!(line.contains("nri-wasm:policy@0.2.0") && line.contains("rebuild against 0.3"), "{line}");
        assert!(line.contains("does not export configure or handle"), "{line}");
        found.wit_version = Some("0.3.1".into());
        found.exports = vec!["configure".into(), "handle".into()];
        assert_eq!(world_line(&found), "nri-wasm:policy@0.3.1; exports configure and handle");
    }

    use crate::policy::spec::caps::CapSet;

    #[test]
    fn the_reads_line_follows_the_declaration_and_says_when_there_is_none() {
        let everything = Imports { node: true, state: true };
        let declared = |names: &str| Allowed {
            granted: CapSet::default_grant(),
            declared: Some(crate::policy::spec::caps::parse_declaration(names).unwrap()),
        };
        // A JavaScript or Python policy imports every interface; it declares what it does.
        assert_eq!(
            reads_line(everything, declared("env, deny")),
            "node view: no (not declared), state: imported (may keep state; not a declared capability)"
        );
        assert!(reads_line(everything, declared("env node")).starts_with("node view: yes (declared), "));
        let no_grant = Allowed { granted: CapSet::EMPTY, ..declared("node") };
        assert!(reads_line(everything, no_grant).contains("not granted by these settings"));
        let nothing = Imports { node: false, state: false };
        assert_eq!(
            reads_line(nothing, declared("node")),
            "node view: no (declared, but the node interface is not imported), state: no"
        );
        // No declaration: the imports, marked as such.
        let undeclared = Allowed { granted: CapSet::default_grant(), declared: None };
        assert!(reads_line(everything, undeclared)
            .starts_with("node view: yes (from its imports: it has no declaration), "));
        assert_eq!(
            reads_line(nothing, undeclared),
            "node view: no (from its imports: it has no declaration), state: no"
        );
    }

    #[test]
    fn exit_codes_tell_usage_from_refusal() {
        let unreadable =
            CheckError::from(LoadError::Read { policy: "p".into(), path: "x".into(), reason: "gone".into() });
        assert_eq!(unreadable.exit_code(), EXIT_USAGE);
        let refused = CheckError::from(LoadError::NotWasm { policy: "p".into(), reason: "no \\0asm header".into() });
        assert_eq!(refused.exit_code(), EXIT_FAILED);
        assert!(refused.to_string().starts_with("refused at step validate: "), "{refused}");
        assert_eq!(CheckError::from(SetupError::Missing("x".into())).exit_code(), EXIT_USAGE);
    }
}
