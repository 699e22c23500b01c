//! `nri-wasm push`, `pull`, `sign` and `verify`: policies in OCI registries
//! for authors and pipelines, with no other tool.
//!
//! They take the registry settings from `--config` (its `[registry]`
//! table, and `[engine] max-component-mib`, the largest component a node
//! loads) and the flags, which override it. All four use the node's one
//! registry client; `pull` and `verify` go through the node's own pull
//! path (bounds, digests, signatures), so a pipeline sees exactly what a
//! node would accept. `pull` bypasses the node's cache and streams the
//! component into a temporary file beside its output, renamed once its
//! digest is right: it never holds a component in memory, and refuses one
//! larger than the limit before a byte of it is asked for.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::files::FileError;
use crate::registry::client::Registry;
use crate::registry::sign::SigningKeyFile;
use crate::registry::{push, OciRef, RegistrySettings, Source};

/// Registry settings shared by the four commands.
#[derive(Debug, Args, Clone, Default)]
pub struct RegistryArgs {
    /// A host configuration file whose `[registry]` table (and
    /// `[engine] max-component-mib`) is used.
    #[arg(long, short = 'c', env = "NRI_WASM_CONFIG")]
    pub config: Option<PathBuf>,
    /// A docker `config.json` with the registry's credentials (or its
    /// credential helpers).
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// PEM certificates to trust for the registry (besides the system's).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Reach this registry (`host[:port]`, an IPv6 address in brackets:
    /// `[::1]:5000`) over plain HTTP; repeatable.
    #[arg(long, value_name = "HOST:PORT")]
    pub plain_http: Vec<String>,
    /// Deadline of the whole operation, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
}

impl RegistryArgs {
    /// The registry settings, and the largest component a node loads.
    fn settings_and_max(&self) -> anyhow::Result<(RegistrySettings, u64)> {
        let (mut settings, max) = match &self.config {
            Some(path) => {
                let config = crate::config::Config::load(path)?;
                (config.registry, config.engine.max_component_mib << 20)
            }
            None => {
                let engine = crate::policy::engine::EngineSettings::default();
                (RegistrySettings::default(), engine.max_component_mib << 20)
            }
        };
        // The commands never use the node's cache.
        settings.cache_dir = None;
        if let Some(a) = &self.auth_file {
            settings.auth_file = Some(a.clone());
        }
        if let Some(c) = &self.ca_file {
            settings.ca_file = Some(c.clone());
        }
        for registry in &self.plain_http {
            if !settings.plain_http.contains(registry) {
                settings.plain_http.push(registry.clone());
            }
        }
        if let Some(t) = self.timeout_ms {
            settings.timeout_ms = t;
        }
        settings.validate()?;
        Ok((settings, max))
    }

    fn settings(&self) -> anyhow::Result<RegistrySettings> {
        self.settings_and_max().map(|(s, _)| s)
    }
}

/// The arguments of `nri-wasm push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The policy component (`.wasm`).
    pub file: PathBuf,
    /// Where to push it: `oci://host[:port]/repository:tag`.
    pub reference: String,
    /// The registry's configuration, credentials, trust and deadline.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// The arguments of `nri-wasm pull`.
#[derive(Debug, Args)]
pub struct PullArgs {
    /// `oci://host[:port]/repository[:tag][@sha256:digest]`.
    pub reference: String,
    /// Where to write the component (written whole or not at all).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Require a signature by this public key (PEM); repeatable.
    #[arg(long = "key", value_name = "KEY.pub")]
    pub keys: Vec<PathBuf>,
    /// The registry's configuration, credentials, trust and deadline.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// The arguments of `nri-wasm sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The policy to sign: `oci://host[:port]/repository[:tag][@sha256:digest]`
    /// (a tag is resolved to its digest first).
    #[arg(required_unless_present = "generate")]
    pub reference: Option<String>,
    /// The private key (PEM, PKCS#8, ECDSA P-256).
    #[arg(long, value_name = "KEY", required_unless_present = "generate")]
    pub key: Option<PathBuf>,
    /// Instead of signing: write a new key pair to FILE (mode 0600) and FILE.pub.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["reference", "key"])]
    pub generate: Option<PathBuf>,
    /// The registry's configuration, credentials, trust and deadline.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// The arguments of `nri-wasm verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// `oci://host[:port]/repository[:tag][@sha256:digest]`.
    pub reference: String,
    /// A public key (PEM) whose signature is required; repeatable.
    #[arg(long = "key", value_name = "KEY.pub", required = true)]
    pub keys: Vec<PathBuf>,
    /// The registry's configuration, credentials, trust and deadline.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn report(err: &mut dyn Write, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(err, "error: {}", crate::text::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// `nri-wasm push FILE REF`.
pub fn push(args: &PushArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let result = (|| {
        let (settings, max) = args.registry.settings_and_max()?;
        let reference = OciRef::parse(&args.reference)?;
        // No larger than a node loads ([engine] max-component-mib).
        let bytes = crate::files::read_bounded(&args.file, max).map_err(|e| match e {
            FileError::TooLarge { .. } => anyhow::anyhow!("{e}, the most a node loads ([engine] max-component-mib)"),
            e => e.into(),
        })?;
        // The component must be one a host loads: the same check `check` starts with.
        crate::policy::load::inspect::binary("push", &bytes)
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
        let hex = runtime()?.block_on(push::push(&settings, bytes, &reference))?;
        let pinned = OciRef { digest: Some(hex), ..reference };
        let _ = writeln!(out, "{pinned}");
        Ok(())
    })();
    report(err, result)
}

/// The client and source for `reference` with `keys` as the signature
/// requirement (what `pull` and `verify` share).
fn client(registry: &RegistryArgs, keys: &[PathBuf], reference: &str) -> anyhow::Result<(Registry, Source)> {
    let (settings, max) = registry.settings_and_max()?;
    let settings = RegistrySettings { public_keys: keys.to_vec(), ..settings };
    let reference = OciRef::parse(reference)?;
    let registry = Registry::new(&settings, max)?;
    Ok((registry, Source { reference, public_keys: None, strict_permissions: false }))
}

/// `nri-wasm pull REF -o FILE`.
pub fn pull(args: &PullArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let result = (|| {
        let (registry, source) = client(&args.registry, &args.keys, &args.reference)?;
        let (digest, p) = runtime()?.block_on(registry.pull_to_file(&source, &args.output))?;
        let _ = writeln!(out, "{} manifest {} component sha256:{digest}", p.source, p.manifest);
        if let Some(s) = &p.signer {
            let _ = writeln!(out, "signed by {s}");
        }
        Ok(())
    })();
    report(err, result)
}

/// `nri-wasm sign --key KEY REF`, or `nri-wasm sign --generate FILE`.
pub fn sign(args: &SignArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let result = (|| {
        if let Some(path) = &args.generate {
            let key = SigningKeyFile::generate().map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
            let (private, public) = key.to_pem()?;
            let public_path = PathBuf::from(format!("{}.pub", path.display()));
            let write = |path: &Path, text: &str, mode| crate::files::write_new(path, text.as_bytes(), mode);
            write(path, &private, 0o600)?;
            write(&public_path, &public, 0o644)?;
            let _ =
                writeln!(out, "private key {} (keep it secret), public key {}", path.display(), public_path.display());
            return Ok(());
        }
        let (Some(reference), Some(key)) = (&args.reference, &args.key) else {
            anyhow::bail!("sign needs a reference and --key (or --generate FILE)");
        };
        let settings = args.registry.settings()?;
        let reference = OciRef::parse(reference)?;
        let key = SigningKeyFile::read(key)?;
        let (hex, tag) = runtime()?.block_on(push::sign(&settings, &key, &reference))?;
        let _ = writeln!(out, "signed sha256:{hex} of {reference} (signature under tag {tag})");
        Ok(())
    })();
    report(err, result)
}

/// `nri-wasm verify --key KEY.pub REF`: what a node would accept.
pub fn verify(args: &VerifyArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let result = (|| {
        let (registry, source) = client(&args.registry, &args.keys, &args.reference)?;
        let resolved = runtime()?.block_on(registry.resolve(&source))?;
        let p = &resolved.provenance;
        let _ = writeln!(
            out,
            "verified {} manifest {} component sha256:{} signed by {}",
            p.source,
            p.manifest,
            resolved.digest,
            p.signer.as_deref().unwrap_or("(no key)")
        );
        Ok(())
    })();
    report(err, result)
}
