//! From a policy file to a [`CompiledPolicy`], the cheap steps first: the
//! [`PolicyLoader`]'s loads. The first three need no engine; linking and
//! `configure` use the engine the loader was made for.
//!
//! 1. read: a regular file (`load/read.rs`; symlinks are followed, as
//!    ConfigMap volumes need), opened without blocking, checked by its open descriptor, no
//!    larger than `max-component-mib`; its SHA-256 against a pin if the
//!    operator set one; owner and mode if `strict-permissions` is on;
//! 2. inspect (`inspect.rs`): header, component, imports, exports, structure;
//! 3. compile within bounds (`compile.rs`), or take it from the cache if an
//!    entry there is authenticated and bound to exactly these bytes (`cache.rs`);
//! 4. link against the engine's linker and check the world's types;
//! 5. run `configure` on the engine with the policy's settings: its subscription, which
//!    must be within what the component declares (`spec/declared.rs`);
//! 6. if its settings file asks, pre-initialise it: a snapshot of the
//!    instance `configure` left, which its calls then start from
//!    (`snapshot.rs`).
//!
//! Every step is bounded and fails with a [`LoadError`] that names the
//! policy, the file and the step.

use std::sync::{Arc, Weak};
use std::time::Instant;

use wasmtime::component::{Component, ComponentExportIndex, InstancePre};

use super::compile::CompileError;
use super::loader::{Flight, Flown, PolicyLoader};
use crate::convert::event_kind;
use crate::files::sha256_hex;
use crate::nri::version::EventMask;
use crate::policy::call::compiled::{CompiledPolicy, Imports, LoadTimings};
use crate::policy::call::env::Facts;
use crate::policy::call::profile::CallProfile;
use crate::policy::call::store::CallState;
use crate::policy::load::cache::Binding;
use crate::policy::load::errors::LoadError;
use crate::policy::load::inspect;
use crate::policy::load::read::read_policy_file;
use crate::policy::spec::caps::{parse_declaration, Allowed};
use crate::policy::spec::declared::answer_name;
use crate::policy::spec::inspection::Inspection;
use crate::policy::spec::manifest::PolicySpec;
use crate::wit::{wit, PolicyPre};

/// The component a load takes: whether from the cache, and whether another
/// load made it (or held it already).
pub(super) struct Made {
    pub(super) component: Arc<Component>,
    pub(super) cached: bool,
    pub(super) shared: bool,
}

/// Why a component could not be made.
#[derive(Debug, thiserror::Error)]
enum ComponentFailure {
    /// Compiling it failed, or could not be done.
    #[error(transparent)]
    Compile(CompileError),
    /// The compiler's artifact could not be loaded.
    #[error("produced an unusable artifact: {0}")]
    Unusable(String),
}

impl ComponentFailure {
    /// Whether the bytes decided it, so that a second try would fail the
    /// same way: not the wall-clock backstop (a busy node), not a compiler
    /// that could not be run.
    fn of_the_bytes(&self) -> bool {
        match self {
            Self::Compile(CompileError::Cpu { .. } | CompileError::Memory(_) | CompileError::Failed(_)) => true,
            Self::Compile(CompileError::Timeout(_) | CompileError::Unavailable(_)) => false,
            Self::Unusable(_) => true,
        }
    }
}

/// What a policy may use: its spec's grant and its declaration. A
/// declaration the grant does not cover loads (its output that needs the
/// rest is refused at event time, `chain/pipeline.rs`), with a warning, as
/// does a dangerous grant nothing asked for.
pub fn allowed(spec: &PolicySpec, inspection: &Inspection) -> Result<Allowed, LoadError> {
    let declared = match &inspection.declaration {
        None => None,
        Some(text) => {
            Some(parse_declaration(text).map_err(|error| LoadError::Declaration { policy: spec.name.clone(), error })?)
        }
    };
    let allowed = Allowed { granted: spec.grant, declared };
    let policy = spec.name.as_str();
    let ungranted = allowed.ungranted();
    if !ungranted.is_empty() {
        tracing::warn!(
            policy,
            ungranted = %ungranted.describe(),
            "policy declares capabilities its settings file does not grant: output that needs them will be refused"
        );
    }
    let unasked = allowed.unasked();
    if !unasked.is_empty() {
        let what = if declared.is_some() { "does not declare" } else { "declares no capabilities, so not" };
        tracing::warn!(policy, unasked = %unasked.describe(), "settings file grants dangerous capabilities the policy {what}");
    }
    Ok(allowed)
}

/// A component linked against the engine's linker, with the two exports
/// the host calls.
pub(super) struct Linked {
    pub instance_pre: InstancePre<CallState>,
    pub handle: ComponentExportIndex,
    pub configure: ComponentExportIndex,
}

/// Why a component could not be linked.
pub(super) enum LinkFailure {
    /// An import the host does not provide (or not with that type).
    Link(String),
    /// Exports that are not the world's.
    World(String),
}

impl LinkFailure {
    pub(super) fn reason(self) -> String {
        match self {
            Self::Link(reason) | Self::World(reason) => reason,
        }
    }
}

/// What a `configure` answer subscribes to: the NRI events, and whether
/// `synchronize`.
pub(super) fn subscription(kinds: &[wit::EventKind]) -> (EventMask, bool) {
    (kinds.iter().copied().filter_map(event_kind).collect(), kinds.contains(&wit::EventKind::Synchronize))
}

impl PolicyLoader {
    /// Links `component` against the engine's linker and checks every
    /// export against the world once (calls then skip it).
    pub(super) fn link(&self, component: &Component) -> Result<Linked, LinkFailure> {
        let instance_pre = self
            .engine()
            .linker()
            .instantiate_pre(component)
            .map_err(|e| LinkFailure::Link(crate::text::one_line(&e)))?;
        PolicyPre::new(instance_pre.clone()).map_err(|e| LinkFailure::World(crate::text::one_line(&e)))?;
        let export = |func: &str| {
            component.get_export_index(None, func).ok_or_else(|| LinkFailure::World(format!("no export named {func}")))
        };
        Ok(Linked { instance_pre, handle: export("handle")?, configure: export("configure")? })
    }

    /// Reads, checks, compiles, links and configures one policy.
    pub async fn load_async(&self, spec: &PolicySpec, facts: &Arc<Facts>) -> Result<CompiledPolicy, LoadError> {
        let started = Instant::now();
        if let Some(source) = &spec.source {
            return self.load_from_registry(spec, source, facts).await;
        }
        let max = self.settings().max_component_mib << 20;
        let owned = spec.clone();
        let bytes = tokio::task::spawn_blocking(move || read_policy_file(&owned, max)).await.map_err(|e| {
            LoadError::Read { policy: spec.name.clone(), path: spec.wasm.display().to_string(), reason: e.to_string() }
        })??;
        let read = started.elapsed();
        let mut policy = self.load_bytes_async(spec, bytes.into(), facts).await?;
        policy.timings.read = read;
        Ok(policy)
    }

    /// A policy named by reference: pulled (or read from the cache) and
    /// verified, then loaded pinned to the component's digest.
    async fn load_from_registry(
        &self,
        spec: &PolicySpec,
        source: &crate::registry::Source,
        facts: &Arc<Facts>,
    ) -> Result<CompiledPolicy, LoadError> {
        let started = Instant::now();
        let fail = |reason: String| LoadError::Registry { policy: spec.name.clone(), reason };
        let registry = match self.registry() {
            Some(Ok(registry)) => registry.clone(),
            Some(Err(e)) => return Err(fail(crate::text::chain(&**e))),
            None => return Err(fail(super::loader::NO_REGISTRY.into())),
        };
        let resolved = registry.resolve(source).await.map_err(|e| fail(e.to_string()))?;
        let read = started.elapsed();
        let mut pinned = spec.clone();
        pinned.sha256 = Some(resolved.digest.clone());
        pinned.provenance = Some(resolved.provenance);
        let mut policy = self.load_bytes_async(&pinned, resolved.bytes.into(), facts).await?;
        policy.timings.read = read;
        Ok(policy)
    }

    /// [`Self::load_async`] of bytes (the binary or the text format).
    pub async fn load_bytes_async(
        &self,
        spec: &PolicySpec,
        bytes: Arc<[u8]>,
        facts: &Arc<Facts>,
    ) -> Result<CompiledPolicy, LoadError> {
        let name = spec.name.as_str();
        let mut timings = LoadTimings::default();
        let max_memory = self.settings().max_memory_mib;
        if spec.limits.memory_mib > max_memory {
            return Err(LoadError::Limits { policy: name.into(), asked: spec.limits.memory_mib, max: max_memory });
        }
        let digest = sha256_hex(&bytes);
        if let Some(pin) = &spec.sha256 {
            if !pin.eq_ignore_ascii_case(&digest) {
                return Err(LoadError::Pin { policy: name.into(), expected: pin.clone(), actual: digest });
            }
        }
        let step = Instant::now();
        let binary: Arc<[u8]> = inspect::binary(name, &bytes)?.into_owned().into();
        let inspection = inspect::inspect(name, &binary, &spec.limits, &self.engine().pool_shape())?;
        let allowed = allowed(spec, &inspection)?;
        timings.inspect = step.elapsed();

        let step = Instant::now();
        // Bound to the bytes just read and checked against the pin: a cache
        // entry is used only if it was compiled from exactly these bytes.
        let binding = Binding::new(self.engine().engine(), &binary);
        let cache_key = binding.key();
        let Made { component, cached, shared } = self.component_shared(name, &binding, binary.clone()).await?;
        timings.compile = step.elapsed();
        timings.cached = cached;
        timings.shared = shared;

        let step = Instant::now();
        let Linked { instance_pre, handle, configure } = self.link(&component).map_err(|failure| match failure {
            LinkFailure::Link(reason) => LoadError::Link { policy: name.into(), reason },
            LinkFailure::World(reason) => LoadError::World { policy: name.into(), reason },
        })?;
        timings.link = step.elapsed();

        let mut imports = Imports::default();
        for import in &inspection.imports {
            imports.node |= import.starts_with("nri-wasm:policy/node@");
            imports.state |= import.starts_with("nri-wasm:policy/state@");
        }
        let profile = CallProfile::new(name, &spec.settings, spec.limits, allowed, imports.node);
        let mut compiled = CompiledPolicy {
            spec: spec.clone(),
            profile,
            instance_pre,
            handle,
            configure,
            imports,
            events: EventMask::EMPTY,
            synchronize: false,
            digest,
            cache_key,
            inspection,
            allowed,
            timings,
            preinitialized: false,
            preinitialize_refused: None,
            _component: component,
        };
        // Validate the settings and learn the subscription once, at load.
        let step = Instant::now();
        let kinds = self
            .engine()
            .configure(&compiled, facts)
            .await
            .map_err(|error| LoadError::Init { policy: name.into(), error })?;
        compiled.timings.configure = step.elapsed();
        // The declaration is an upper bound: a component that answers more
        // than it declared is not what the host registered for.
        if let Some(declared) = &compiled.inspection.events {
            let undeclared = declared.undeclared(&kinds);
            if !undeclared.is_empty() {
                let names: Vec<String> = undeclared.into_iter().map(answer_name).collect();
                return Err(LoadError::Undeclared {
                    policy: name.into(),
                    undeclared: names.join(", "),
                    declared: declared.describe(),
                });
            }
        }
        (compiled.events, compiled.synchronize) = subscription(&kinds);
        // Only a pre-initialised version keeps entries from pruning beyond
        // its component; whatever kept them before is replaced below.
        self.pinned.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        if spec.preinitialize {
            let step = Instant::now();
            match self.snapshot(&compiled, binary, &kinds, facts).await {
                Ok(snapshot) => {
                    tracing::info!(
                        policy = name,
                        bytes = snapshot.size,
                        took_ms = step.elapsed().as_millis() as u64,
                        "policy pre-initialised: its calls start from the state configure left"
                    );
                    compiled.instance_pre = snapshot.instance_pre;
                    compiled.handle = snapshot.handle;
                    compiled.configure = snapshot.configure;
                    compiled._component = snapshot.component;
                    compiled.preinitialized = true;
                    self.pinned
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.to_string(), vec![compiled.cache_key.clone(), snapshot.instrumented_key]);
                }
                Err(error) => {
                    tracing::warn!(
                        policy = name,
                        error = %error,
                        "policy not pre-initialised: its calls start from the component as built"
                    );
                    compiled.preinitialize_refused = Some(error.to_string());
                }
            }
            compiled.timings.preinitialize = step.elapsed();
        }
        if let Some(dir) = self.cache().map(super::cache::Cache::dir) {
            self.keep_record(name, super::known::record(dir, &compiled));
        }
        Ok(compiled)
    }

    /// The compiled component: the one a loaded policy already uses, or
    /// [`Self::component`]'s, made once for every load of the same bytes
    /// that asks for it meanwhile.
    ///
    /// Policies load in parallel, and a file loaded as several policies
    /// (one component, several settings) is asked for by all of them at
    /// once. Each used to find nothing in use, compile on its own and keep
    /// its own copy: on a first start, ten policies of one file took ten
    /// compiles and ten copies of the same code, and every event then ran
    /// through ten times the code (half as much CPU again per container on
    /// containerd as after a restart, which found the one cached copy). The
    /// first load makes the component; the others wait for it and share
    /// it, or the failure its bytes decide (over the compile's CPU or
    /// memory, the compiler's own error: the next would fail the same way).
    /// A failure of the moment (the wall-clock backstop on a busy node, a
    /// compiler that could not be run) is that load's alone: the next load
    /// waiting tries again, as does one whose leader was cancelled.
    /// (Pre-initialised policies share their instrumented component this
    /// way, but run a snapshot of their own, compiled for each,
    /// `snapshot.rs`.)
    pub(super) async fn component_shared(
        &self,
        policy: &str,
        binding: &Binding,
        binary: Arc<[u8]>,
    ) -> Result<Made, LoadError> {
        let key = binding.key();
        let in_use =
            |loader: &Self| loader.in_use.lock().unwrap_or_else(|p| p.into_inner()).get(&key).and_then(|w| w.upgrade());
        if let Some(component) = in_use(self) {
            return Ok(Made { component, cached: true, shared: true });
        }
        let flight = {
            let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(&key).and_then(Weak::upgrade) {
                Some(flight) => flight,
                None => {
                    let flight = Arc::new(Flight::new());
                    map.insert(key.clone(), Arc::downgrade(&flight));
                    flight
                }
            }
        };
        // Set when this load made it (and whether from the cache).
        let mut made_here = None;
        let outcome = flight
            .get_or_try_init(|| async {
                if let Some(component) = in_use(self) {
                    return Ok(Ok(Flown { component, cached: true }));
                }
                match self.component_made(policy, binding, binary, true).await {
                    Ok((component, cached)) => {
                        made_here = Some(cached);
                        let component = Arc::new(component);
                        let mut map = self.in_use.lock().unwrap_or_else(|p| p.into_inner());
                        map.retain(|_, w| w.strong_count() > 0);
                        map.insert(key.clone(), Arc::downgrade(&component));
                        Ok(Ok(Flown { component, cached }))
                    }
                    Err(failure) if failure.of_the_bytes() => Ok(Err(failure.to_string())),
                    Err(failure) => Err(failure.to_string()),
                }
            })
            .await;
        let compile_err = |reason: String| LoadError::Compile { policy: policy.into(), reason };
        match outcome {
            Ok(Ok(flown)) => Ok(Made {
                component: flown.component.clone(),
                cached: made_here.unwrap_or(flown.cached),
                shared: made_here.is_none(),
            }),
            Ok(Err(reason)) => Err(compile_err(reason.clone())),
            Err(reason) => Err(compile_err(reason)),
        }
    }

    /// The compiled component: from the cache, or compiled within bounds
    /// (and then cached, if `keep`). Says whether it came from the cache.
    pub(super) async fn component(
        &self,
        policy: &str,
        binding: &Binding,
        binary: Arc<[u8]>,
        keep: bool,
    ) -> Result<(Component, bool), LoadError> {
        self.component_made(policy, binding, binary, keep)
            .await
            .map_err(|failure| LoadError::Compile { policy: policy.into(), reason: failure.to_string() })
    }

    /// [`Self::component`], failing with what went wrong rather than the
    /// policy's load error.
    async fn component_made(
        &self,
        policy: &str,
        binding: &Binding,
        binary: Arc<[u8]>,
        keep: bool,
    ) -> Result<(Component, bool), ComponentFailure> {
        if let Some(cache) = self.cache().filter(|_| keep) {
            if let Some(entry) = cache.get(policy, binding) {
                // SAFETY: `get` returns only an entry whose MAC under the
                // host's private key verified (so this host wrote it, and
                // not a byte changed since) and whose authenticated header
                // names this engine's compatibility hash and the SHA-256 of
                // exactly this component; it was read into memory from a
                // regular file owned by the host's user in a directory no
                // one else may write. wasmtime checks its own header again.
                match unsafe { Component::deserialize(self.engine().engine(), entry.code()) } {
                    Ok(component) => return Ok((component, true)),
                    Err(e) => {
                        let file = cache.path(&binding.key());
                        let _ = std::fs::remove_file(&file);
                        tracing::warn!(
                            policy,
                            file = %file.display(),
                            error = %crate::text::one_line(&e),
                            "compile cache entry unusable; compiling the policy again"
                        );
                    }
                }
            }
        }
        let artifact = self.compile(binary).await.map_err(ComponentFailure::Compile)?;
        if let Some(cache) = self.cache().filter(|_| keep) {
            if let Err(e) = cache.put(binding, &artifact) {
                tracing::warn!(policy, dir = %cache.dir().display(), error = %e, "cannot cache a compiled component");
            }
        }
        // SAFETY: the artifact was produced just now by this engine's own
        // configuration, in this process or in a child process of this
        // binary that exited cleanly.
        let component = unsafe { Component::deserialize(self.engine().engine(), &artifact) }
            .map_err(|e| ComponentFailure::Unusable(crate::text::one_line(&e)))?;
        Ok((component, false))
    }

    /// [`Self::load_async`] for callers that are not async.
    pub fn load(&self, spec: &PolicySpec, facts: &Arc<Facts>) -> Result<CompiledPolicy, LoadError> {
        self.engine().block_on(self.load_async(spec, facts))
    }

    /// [`Self::load_bytes_async`] for callers that are not async.
    pub fn load_bytes(&self, spec: &PolicySpec, bytes: &[u8], facts: &Arc<Facts>) -> Result<CompiledPolicy, LoadError> {
        self.engine().block_on(self.load_bytes_async(spec, bytes.into(), facts))
    }
}
