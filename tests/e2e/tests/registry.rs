//! Policies from OCI registries, against a real registry: Debian's
//! `docker-registry` (the CNCF distribution registry), started by each test
//! on loopback with TLS (a CA the test makes) and basic auth (or token
//! auth, with a token server of the test's own that signs ES256 JWTs), in a
//! temp dir, and killed by its pid when the test ends. And against a hostile
//! registry the test plays itself (over the same TLS): one that stalls,
//! lies about digests and media types, announces or sends too much,
//! redirects in a loop, or is not there.
//!
//! What is asserted is what the operator relies on: a policy pushed with
//! `nri-wasm push` loads by reference, its digest and signer are what
//! `/status` shows, the host starts from the node's cache with the
//! registry down, a signature is required when a key is configured, a
//! changed reference is a reload that keeps the previous version until the
//! new one is verified, a tag moved in the registry reaches a running host
//! by itself, bearer tokens and proxies from the environment work, and a
//! registry that misbehaves is named with the reference, leaves no file
//! behind and never holds an event.
//!
//! The tests skip, saying so, only when `docker-registry` is not installed
//! (`tests/registry/install.sh` installs it; `.ci/run` runs that first).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_sim::RuntimeProfile;
use nri_wasm::config::Config;
use nri_wasm::policy::load::compile::Compiler;
use nri_wasm::registry::client::Registry;
use nri_wasm::registry::sign::SigningKeyFile;
use nri_wasm::registry::{push, CacheUse, OciRef, RegistrySettings, Source};
use nri_wasm_e2e::{engine_settings, init_logging, Harness};
use nri_wasm_test_support::guests;

const USER: &str = "alice";
const PASSWORD: &str = "correct-horse";

/// The registry binary, or `None` (and a message) when it is not installed.
fn registry_binary() -> Option<PathBuf> {
    let path = PathBuf::from("/usr/bin/docker-registry");
    if path.exists() {
        return Some(path);
    }
    let why = "/usr/bin/docker-registry is not installed (tests/registry/install.sh installs it; .ci/run does)";
    assert!(std::env::var("CI").map_or(true, |v| v != "true"), "in CI the registry tests must run: {why}");
    eprintln!("SKIPPED: {why}");
    None
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a server certificate for 127.0.0.1, made with openssl.
struct Tls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn make_tls(dir: &Path) -> Tls {
    let p = |n: &str| dir.join(n);
    run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args([
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=nri-wasm test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            p("ca.key").to_str().unwrap(),
            "-out",
            p("ca.crt").to_str().unwrap(),
        ]));
    run(Command::new("openssl")
        .args(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            p("server.key").to_str().unwrap(),
            "-out",
            p("server.csr").to_str().unwrap(),
        ]));
    std::fs::write(
        p("ext.cnf"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
         subjectAltName=IP:127.0.0.1\n",
    )
    .unwrap();
    run(Command::new("openssl").args(["x509", "-req", "-days", "2", "-CAcreateserial"]).args([
        "-in",
        p("server.csr").to_str().unwrap(),
        "-CA",
        p("ca.crt").to_str().unwrap(),
        "-CAkey",
        p("ca.key").to_str().unwrap(),
        "-extfile",
        p("ext.cnf").to_str().unwrap(),
        "-out",
        p("server.crt").to_str().unwrap(),
    ]));
    Tls { ca: p("ca.crt"), cert: p("server.crt"), key: p("server.key") }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `docker-registry` on loopback, killed by its pid when dropped.
struct RealRegistry {
    child: Option<Child>,
    /// The loopback address it listens on: `127.0.0.1` or `::1`.
    address: std::net::IpAddr,
    port: u16,
    config: PathBuf,
    binary: PathBuf,
}

impl RealRegistry {
    /// With basic auth (htpasswd).
    fn start(binary: &Path, dir: &Path, tls: &Tls) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let hash = bcrypt::hash(PASSWORD, 4).unwrap();
        std::fs::write(dir.join("htpasswd"), format!("{USER}:{hash}\n")).unwrap();
        let auth = format!(
            "  htpasswd:\n    realm: nri-wasm-test\n    path: {htpasswd}\n",
            htpasswd = dir.join("htpasswd").display()
        );
        Self::start_with_auth(binary, dir, tls, &auth)
    }

    /// With `auth` (the lines under `auth:` of its configuration).
    fn start_with_auth(binary: &Path, dir: &Path, tls: &Tls, auth: &str) -> Self {
        let tls = format!("  tls:\n    certificate: {}\n    key: {}\n", tls.cert.display(), tls.key.display());
        Self::start_config(binary, dir, &tls, &format!("auth:\n{auth}"))
    }

    /// Without TLS (plain HTTP) and without auth.
    fn start_plain(binary: &Path, dir: &Path) -> Self {
        Self::start_config(binary, dir, "", "")
    }

    /// Without TLS and auth, listening on IPv6's loopback (`[::1]`).
    fn start_plain_v6(binary: &Path, dir: &Path) -> Self {
        Self::start_on(std::net::Ipv6Addr::LOCALHOST.into(), binary, dir, "", "")
    }

    /// With `tls` (the lines under `http:` after `addr`) and `auth` (the
    /// `auth:` table, or nothing).
    fn start_config(binary: &Path, dir: &Path, tls: &str, auth: &str) -> Self {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into(), binary, dir, tls, auth)
    }

    /// [`Self::start_config`] on `address`.
    fn start_on(address: std::net::IpAddr, binary: &Path, dir: &Path, tls: &str, auth: &str) -> Self {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let port = TcpListener::bind((address, 0)).unwrap().local_addr().unwrap().port();
        let listen = std::net::SocketAddr::from((address, port));
        let config = dir.join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    \
                 enabled: true\nhttp:\n  addr: \"{listen}\"\n{tls}{auth}",
                data = dir.join("data").display(),
            ),
        )
        .unwrap();
        let mut r = Self { child: None, address, port, config, binary: binary.to_path_buf() };
        r.restart();
        r
    }

    fn restart(&mut self) {
        let child = Command::new(&self.binary)
            .arg("serve")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect((self.address, self.port)).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("docker-registry exited at start: {status}");
            }
            assert!(Instant::now() < deadline, "docker-registry did not listen within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills it by its pid and waits for it.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RealRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A temp dir with TLS material, credentials, keys and caches.
struct Fixture {
    dir: tempfile::TempDir,
    tls: Tls,
}

impl Fixture {
    fn new() -> Self {
        init_logging();
        let dir = tempfile::tempdir().unwrap();
        let tls = make_tls(dir.path());
        Self { dir, tls }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Settings for a registry on `port`, with a cache of `cache` (a name in the temp dir).
    fn settings(&self, port: u16, cache: Option<&str>) -> RegistrySettings {
        let auth = self.path(&format!("auth-{port}.json"));
        let token = base64_encode(&format!("{USER}:{PASSWORD}"));
        std::fs::write(&auth, format!(r#"{{"auths":{{"127.0.0.1:{port}":{{"auth":"{token}"}}}}}}"#)).unwrap();
        RegistrySettings {
            cache_dir: cache.map(|c| self.path(c)),
            auth_file: Some(auth),
            ca_file: Some(self.tls.ca.clone()),
            timeout_ms: 20_000,
            public_keys: Vec::new(),
            ..RegistrySettings::default()
        }
    }

    fn key_pair(&self, name: &str) -> (SigningKeyFile, PathBuf) {
        let key = SigningKeyFile::generate().unwrap();
        let (_, public) = key.to_pem().unwrap();
        let path = self.path(&format!("{name}.pub"));
        std::fs::write(&path, public).unwrap();
        (key, path)
    }
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn source(reference: &str, keys: Option<Vec<PathBuf>>) -> Source {
    Source { reference: OciRef::parse(reference).unwrap(), public_keys: keys, strict_permissions: false }
}

/// Files in the registry cache's blob directory (temporary files included).
fn cache_files(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir.join("blobs")) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Push, pull by digest through TLS and basic auth, the cache as the
/// registry goes away, and a refusal without credentials.
#[test]
fn a_pushed_policy_is_pulled_by_digest_and_kept_for_when_the_registry_is_down() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let mut registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    let settings = f.settings(port, Some("cache"));
    let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
    let component = read(guests::ANNOTATE);
    let manifest = rt.block_on(push::push(&settings, component.clone(), &tag)).expect("push");
    let pinned = format!("{tag}@sha256:{manifest}");

    // Without credentials the registry refuses, and the error says so.
    let anonymous = RegistrySettings { auth_file: None, ..f.settings(port, None) };
    let e = rt
        .block_on(Registry::new(&anonymous, 64 << 20).unwrap().resolve(&source(&pinned, None)))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&pinned) && e.contains("password"), "{e}");
    // Without the CA, TLS fails, saying why and what to do.
    let untrusted = RegistrySettings { ca_file: None, ..f.settings(port, None) };
    let e = rt
        .block_on(Registry::new(&untrusted, 64 << 20).unwrap().resolve(&source(&pinned, None)))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&pinned) && e.contains("UnknownIssuer") && e.contains("[registry] ca-file"), "{e}");

    let pulled =
        rt.block_on(Registry::new(&settings, 64 << 20).unwrap().resolve(&source(&pinned, None))).expect("pull");
    assert_eq!(pulled.bytes, component, "the component pulled is the one pushed");
    assert_eq!(pulled.provenance.manifest, format!("sha256:{manifest}"));
    assert_eq!(pulled.provenance.from_cache, None, "pulled from the registry");
    let files = cache_files(&f.path("cache"));
    assert!(files.contains(&pulled.digest), "the component is cached by its digest: {files:?}");
    assert!(!files.iter().any(|n| n.starts_with('.')), "no temporary file is left: {files:?}");

    // The registry up and the digest in the cache: from the cache, saying
    // that the registry was not asked (not that it was unreachable).
    let again = rt.block_on(Registry::new(&settings, 64 << 20).unwrap().resolve(&source(&pinned, None))).unwrap();
    assert_eq!(again.provenance.from_cache, Some(CacheUse::Pinned));

    // The registry goes away: a digest pinned, a tag recorded, both from the cache.
    registry.stop();
    let offline = Registry::new(&settings, 64 << 20).unwrap();
    let again = rt.block_on(offline.resolve(&source(&pinned, None))).expect("from the cache");
    assert!(again.provenance.from_cache == Some(CacheUse::Pinned) && again.bytes == component);
    // A tag-only reference with no key is refused before anything is fetched.
    let e = rt.block_on(offline.resolve(&source(&tag.to_string(), None))).unwrap_err().to_string();
    assert!(e.contains("pin its digest"), "{e}");

    // The cache is not trusted: a tampered component is refused (and removed).
    let cached = f.path("cache/blobs").join(&pulled.digest);
    std::fs::write(&cached, b"\0asm tampered").unwrap();
    let e = rt.block_on(offline.resolve(&source(&pinned, None))).unwrap_err().to_string();
    assert!(e.contains(&pinned) && e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(!cached.exists(), "the tampered copy is removed");
    // And with no cache at all, the error names the registry's failure.
    let e = rt
        .block_on(Registry::new(&f.settings(port, None), 64 << 20).unwrap().resolve(&source(&pinned, None)))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&pinned) && e.contains(&format!("127.0.0.1:{port}")), "{e}");
}

/// `sign` and `verify` as a pipeline runs them (the CLI's own functions),
/// and what a node with keys accepts.
#[test]
fn signatures_are_required_once_a_key_is_configured() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    let settings = f.settings(port, Some("cache"));
    let signed_tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:signed")).unwrap();
    let unsigned_tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/noop:v1")).unwrap();
    let signed = rt.block_on(push::push(&settings, read(guests::ANNOTATE), &signed_tag)).unwrap();

    // A key pair from the CLI, and a signature pushed with it.
    let key = f.path("author");
    let args = |cmd: &[&str]| {
        let mut all = vec!["nri-wasm"];
        all.extend_from_slice(cmd);
        all.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let cli = |argv: Vec<String>| -> (std::process::ExitCode, String, String) {
        use clap::Parser;
        let parsed = nri_wasm::cli::Cli::try_parse_from(argv).expect("arguments");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = match parsed.command.unwrap() {
            nri_wasm::cli::Command::Sign(a) => nri_wasm::cli::oci::sign(&a, &mut out, &mut err),
            nri_wasm::cli::Command::Verify(a) => nri_wasm::cli::oci::verify(&a, &mut out, &mut err),
            nri_wasm::cli::Command::Pull(a) => nri_wasm::cli::oci::pull(&a, &mut out, &mut err),
            nri_wasm::cli::Command::Push(a) => nri_wasm::cli::oci::push(&a, &mut out, &mut err),
            other => panic!("not a registry command: {other:?}"),
        };
        (code, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    };
    let (code, out, err) = cli(args(&["sign", "--generate", key.to_str().unwrap()]));
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}{err}");
    let public = f.path("author.pub");
    let auth = settings.auth_file.clone().unwrap();
    let ca = f.tls.ca.clone();
    let registry_flags = ["--auth-file", auth.to_str().unwrap(), "--ca-file", ca.to_str().unwrap()];
    // `push` as a pipeline runs it: prints the reference pinned to the manifest.
    let mut push_cmd = args(&["push", guests::NOOP, &unsigned_tag.to_string()]);
    push_cmd.extend(registry_flags.iter().map(|s| s.to_string()));
    let (code, out, err) = cli(push_cmd);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}{err}");
    let pinned_out = OciRef::parse(out.trim()).expect("push prints a reference");
    assert_eq!(pinned_out.tag, unsigned_tag.tag);
    let unsigned = pinned_out.digest.expect("pinned to the pushed manifest");
    // A file that is not a component is refused before anything is sent.
    let not_wasm = f.path("notes.txt");
    std::fs::write(&not_wasm, "not a policy").unwrap();
    let mut bad_push = args(&["push", not_wasm.to_str().unwrap(), &unsigned_tag.to_string()]);
    bad_push.extend(registry_flags.iter().map(|s| s.to_string()));
    let (code, _, err) = cli(bad_push);
    assert_eq!(code, std::process::ExitCode::FAILURE);
    assert!(err.contains("notes.txt"), "{err}");

    let mut sign = args(&["sign", "--key", key.to_str().unwrap(), &signed_tag.to_string()]);
    sign.extend(registry_flags.iter().map(|s| s.to_string()));
    let (code, out, err) = cli(sign);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}{err}");
    assert!(out.contains(&format!("sha256:{signed}")) && out.contains(&format!("sha256-{signed}.sig")), "{out}");

    let mut verify = args(&["verify", "--key", public.to_str().unwrap(), &signed_tag.to_string()]);
    verify.extend(registry_flags.iter().map(|s| s.to_string()));
    let (code, out, err) = cli(verify);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}{err}");
    assert!(out.contains("signed by") && out.contains("author.pub"), "{out}");

    // Pull as a pipeline would: the file written is the component pushed.
    let pulled_file = f.path("pulled.wasm");
    let mut pull = args(&["pull", "-o", pulled_file.to_str().unwrap(), "--key", public.to_str().unwrap()]);
    pull.push(signed_tag.to_string());
    pull.extend(registry_flags.iter().map(|s| s.to_string()));
    let (code, out, err) = cli(pull);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}{err}");
    assert_eq!(std::fs::read(&pulled_file).unwrap(), read(guests::ANNOTATE));

    // `check` pulls as a node with this configuration would, and says so.
    let host_config = f.path("host.toml");
    std::fs::write(
        &host_config,
        format!(
            "[registry]\nauth-file = {:?}\nca-file = {:?}\npublic-keys = [{:?}]\n",
            auth.display().to_string(),
            ca.display().to_string(),
            public.display().to_string()
        ),
    )
    .unwrap();
    {
        use clap::Parser;
        let argv = ["nri-wasm", "check", "-c", host_config.to_str().unwrap(), &signed_tag.to_string()];
        let nri_wasm::cli::Command::Check(check) = nri_wasm::cli::Cli::try_parse_from(argv).unwrap().command.unwrap()
        else {
            panic!("not check")
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = nri_wasm::cli::author::check::check(&check, Compiler::InProcess, &mut out, &mut err);
        let (out, err) = (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap());
        assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}{err}");
        assert!(out.contains(&format!("source    {signed_tag}")), "{out}");
        assert!(out.contains(&format!("manifest sha256:{signed}")) && out.contains("author.pub"), "{out}");
        assert!(out.contains("result    loads"), "{out}");
    }

    // A node with the key: a tag alone is enough when signed.
    let with_key = RegistrySettings { public_keys: vec![public.clone()], ..settings.clone() };
    let node = Registry::new(&with_key, 64 << 20).unwrap();
    let ok = rt.block_on(node.resolve(&source(&signed_tag.to_string(), None))).expect("signed policy");
    let signer = ok.provenance.signer.clone().unwrap();
    assert!(signer.contains("author.pub") && signer.contains("sha256:"), "{signer}");
    assert_eq!(ok.provenance.manifest, format!("sha256:{signed}"));

    // Unsigned: refused, naming the reference.
    let pinned_unsigned = format!("{unsigned_tag}@sha256:{unsigned}");
    let e = rt.block_on(node.resolve(&source(&pinned_unsigned, None))).unwrap_err().to_string();
    assert!(e.contains(&pinned_unsigned) && e.contains("no signature"), "{e}");
    // Signed by someone else: refused.
    let (_, stranger) = f.key_pair("stranger");
    let e = rt
        .block_on(node.resolve(&source(&signed_tag.to_string(), Some(vec![stranger.clone()]))))
        .unwrap_err()
        .to_string();
    assert!(e.contains("verifies with the configured keys") && e.contains("stranger.pub"), "{e}");
    // Offline, the signature is checked again from the cache.
    drop(registry);
    let offline = rt.block_on(node.resolve(&source(&signed_tag.to_string(), None))).expect("from the cache");
    assert!(offline.provenance.signer.is_some());
    // A tag is always asked first: from the cache because the registry is gone, with its error.
    match &offline.provenance.from_cache {
        Some(CacheUse::Unreachable { error }) => assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}"),
        other => panic!("from the cache as the registry is unreachable, got {other:?}"),
    }
    let e = rt.block_on(node.resolve(&source(&signed_tag.to_string(), Some(vec![stranger])))).unwrap_err().to_string();
    assert!(e.contains("verifies with the configured keys"), "{e}");
}

/// The host end to end: a mandatory policy named by reference is pending
/// (events fail naming it) until pulled, then runs; a changed reference
/// that cannot be verified keeps the running version; a good one replaces
/// it; `/status` data shows digest, source and signer.
#[test]
fn the_host_loads_and_reloads_policies_by_reference() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let mut registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    rt.block_on(async {
        let settings = f.settings(port, Some("oci-cache"));
        let v1 = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
        let v2 = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v2")).unwrap();
        let d1 = push::push(&settings, read(guests::ANNOTATE), &v1).await.unwrap();
        // v2: the same policy as another file, so another digest.
        let wat = another_file_of(guests::ANNOTATE);
        let d2 = push::push(&settings, wat, &v2).await.unwrap();
        assert_ne!(d1, d2);

        let policies = f.path("policies");
        std::fs::create_dir(&policies).unwrap();
        let file = policies.join("10-pulled.toml");
        let write = |reference: &str| {
            std::fs::write(&file, format!("source = \"{reference}\"\nsettings = \"pulled\"\non-error = \"fail\"\n"))
                .unwrap()
        };
        write(&format!("{v1}@sha256:{d1}"));

        let mut config = Config::default();
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = engine_settings();
        config.registry = settings.clone();
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let mut reloads = host.reloader.reloads();
        reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
        let report = reloads.borrow().1.clone();
        assert_eq!(report.added, ["10-pulled"], "{report:?}");
        let h = Harness::start_policies(RuntimeProfile::v0_12(), host.dispatcher.clone()).await;
        let conn = h.connect().await;
        conn.synchronize(&[], &[], 0).await.unwrap();
        let created = AtomicUsize::new(0);
        let create = || {
            let n = created.fetch_add(1, Ordering::Relaxed);
            let pod = nri_sim::workload::pod(1);
            let ctr = nri_sim::workload::container(&pod, n);
            (pod, ctr)
        };
        let (pod, ctr) = create();
        let reply = conn.create_container(&pod, &ctr).await.expect("answered");
        assert_eq!(reply.adjust.unwrap().annotations.get("example.com/pulled"), Some(&ctr.name));
        let digest_of = || host.dispatcher.chain().policies().map(|p| p.digest().to_string()).collect::<Vec<_>>();
        let first = digest_of();
        let provenance = host.dispatcher.chain().policies().next().unwrap().spec.provenance.clone().unwrap();
        assert_eq!(provenance.manifest, format!("sha256:{d1}"));
        assert_eq!(provenance.source, format!("{v1}@sha256:{d1}"));

        // A reference whose digest the registry does not have: refused, the
        // previous version keeps answering.
        let missing = format!("{v2}@sha256:{}", "0".repeat(64));
        write(&missing);
        let report = host.reloader.reload().await;
        assert_eq!(report.refused.len(), 1, "{report:?}");
        assert!(report.refused[0].1.contains(&missing), "{:?}", report.refused);
        assert_eq!(digest_of(), first);
        let (pod, ctr) = create();
        let reply = conn.create_container(&pod, &ctr).await.expect("answered by the previous version");
        assert!(reply.adjust.unwrap().annotations.contains_key("example.com/pulled"));

        // A verified new reference replaces it.
        write(&format!("{v2}@sha256:{d2}"));
        let report = host.reloader.reload().await;
        assert_eq!(report.replaced, ["10-pulled"], "{report:?}");
        assert_ne!(digest_of(), first);
        let status = host.metrics.status();
        let shown = status.policies.iter().find(|p| p.name == "10-pulled").expect("in /status");
        assert_eq!(shown.manifest, format!("sha256:{d2}"));
        assert_eq!(shown.source, format!("{v2}@sha256:{d2}"));
        assert_eq!(shown.status, "loaded");
        // Metrics: the loaded version only, by its manifest's short digest.
        let text = host.metrics.encode();
        let info: Vec<&str> = text.lines().filter(|l| l.starts_with("nri_wasm_policy_info{")).collect();
        assert_eq!(info.len(), 1, "{info:?}");
        assert!(info[0].contains(&format!("manifest=\"sha256:{}\"", &d2[..12])), "{info:?}");

        // A new reference while the registry is down (nothing cached): the
        // pull fails and the previous version answers; the same settings
        // file is pulled again at every reload, and loads once the
        // registry is back.
        let v3 = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v3")).unwrap();
        let mut third = another_file_of(guests::ANNOTATE);
        third.extend_from_slice(&[0, 6, 5, b't', b'h', b'r', b'e', b'e']);
        let d3 = push::push(&settings, third, &v3).await.unwrap();
        registry.stop();
        write(&format!("{v3}@sha256:{d3}"));
        for _ in 0..2 {
            let report = host.reloader.reload().await;
            assert_eq!(report.refused.len(), 1, "{report:?}");
            assert!(report.not_retried.is_empty(), "a failed pull is tried again: {report:?}");
        }
        let (pod, ctr) = create();
        conn.create_container(&pod, &ctr).await.expect("answered by the previous version");
        registry.restart();
        let report = host.reloader.reload().await;
        assert_eq!(report.replaced, ["10-pulled"], "pulled once the registry is back: {report:?}");

        conn.close().await;
        h.shutdown().await;
    });
    drop(registry);
}

/// A tag moved in the registry reaches a running host without a touch of
/// its directory: the host asks where the tag points every
/// `tag-recheck-ms` (one manifest request), an unmoved tag reloads nothing,
/// a moved one replaces the version once the new one is verified, a tag
/// moved to an unsigned version keeps the signed one (and is tried again
/// at the next checks), and a registry gone keeps the running version.
#[test]
fn a_tag_moved_in_the_registry_reaches_the_host_without_a_touch() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let mut registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    rt.block_on(async {
        let (key, public) = f.key_pair("author");
        let base = f.settings(port, Some("oci-cache"));
        let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:stable")).unwrap();
        let d1 = push::push(&base, read(guests::ANNOTATE), &tag).await.unwrap();
        push::sign(&base, &key, &tag).await.unwrap();

        let policies = f.path("policies");
        std::fs::create_dir(&policies).unwrap();
        let file = policies.join("10-pulled.toml");
        std::fs::write(&file, format!("source = \"{tag}\"\nsettings = \"pulled\"\non-error = \"fail\"\n")).unwrap();
        let mut config = Config::default();
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = engine_settings();
        config.registry = RegistrySettings { public_keys: vec![public.clone()], tag_recheck_ms: 1_000, ..base.clone() };
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        host.dispatcher.engine().handle().spawn(nri_wasm::policy::reload::watch(
            host.reloader.clone(),
            Duration::from_millis(config.policies.reload_debounce_ms),
            false,
            stop.clone(),
        ));
        let mut reloads = host.reloader.reloads();
        reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
        assert_eq!(reloads.borrow().1.added, ["10-pulled"], "{:?}", reloads.borrow().1);
        let manifest = || host.dispatcher.chain().policies().next().unwrap().spec.provenance.clone().unwrap().manifest;
        assert_eq!(manifest(), format!("sha256:{d1}"));
        let file_before = std::fs::metadata(&file).unwrap().modified().unwrap();

        // Unmoved: the checks (the host's every second, and this one) find
        // nothing to do, and nothing is reloaded.
        assert!(host.reloader.check_tags().await.is_empty());
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert_eq!(reloads.borrow().0, 1, "an unmoved tag reloads nothing: {:?}", reloads.borrow().1);

        // Moved: another version pushed and signed under the same tag.
        let d2 = push::push(&base, another_file_of(guests::ANNOTATE), &tag).await.unwrap();
        push::sign(&base, &key, &tag).await.unwrap();
        let replaced = reloads.wait_for(|(_, r)| r.replaced == ["10-pulled"]);
        tokio::time::timeout(Duration::from_secs(120), replaced)
            .await
            .expect("the moved tag reached the host")
            .unwrap();
        assert_eq!(manifest(), format!("sha256:{d2}"));
        let signer = host.dispatcher.chain().policies().next().unwrap().spec.provenance.clone().unwrap().signer;
        assert!(signer.is_some_and(|s| s.contains("author.pub")));
        let reloaded = reloads.borrow().0;

        // Moved to a version nobody signed: the signed one keeps running, and
        // the tag is tried again at the next checks (a signature may follow).
        let mut third = another_file_of(guests::ANNOTATE);
        third.extend_from_slice(&[0, 6, 5, b't', b'h', b'r', b'e', b'e']);
        push::push(&base, third, &tag).await.unwrap();
        for round in 1..=2 {
            let tried = reloads.wait_for(|(n, _)| *n >= reloaded + round);
            tokio::time::timeout(Duration::from_secs(120), tried).await.expect("the moved tag was tried").unwrap();
            assert_eq!(manifest(), format!("sha256:{d2}"), "{:?}", reloads.borrow().1);
            // Refused for what it is (no signature), not hidden behind the
            // cached copy as if the registry were unavailable.
            let last = reloads.borrow().1.clone();
            assert!(last.refused.iter().any(|(n, why)| n == "10-pulled" && why.contains("no signature")), "{last:?}");
        }
        assert_eq!(host.reloader.check_tags().await, ["10-pulled"]);

        // Moved to a signed version that does not load (not a component):
        // refused once, then not resolved again while the tag stays there.
        push::push(&base, b"signed, but not a component".to_vec(), &tag).await.unwrap();
        push::sign(&base, &key, &tag).await.unwrap();
        let broken = reloads
            .wait_for(|(_, r)| r.refused.iter().any(|(n, why)| n == "10-pulled" && !why.contains("no signature")));
        tokio::time::timeout(Duration::from_secs(120), broken).await.expect("the broken version was tried").unwrap();
        assert_eq!(manifest(), format!("sha256:{d2}"));
        assert!(host.reloader.check_tags().await.is_empty(), "a version that failed to load is not tried again");

        // The registry gone: checks change nothing.
        registry.stop();
        assert!(host.reloader.check_tags().await.is_empty());
        assert!(host.reloader.check_tags().await.is_empty());
        assert_eq!(manifest(), format!("sha256:{d2}"));
        assert_eq!(std::fs::metadata(&file).unwrap().modified().unwrap(), file_before, "the directory was not touched");
        stop.cancel();
    });
    drop(registry);
}

/// A tag check against a registry that stalls holds nothing else: while
/// the check waits on the registry (whose timeout is ten minutes), a
/// policy dropped into the directory is loaded, and the tagged policy keeps
/// running. Before the check ran in a task of its own, the reload loop
/// awaited it, and the directory change waited out the registry's timeout.
#[test]
fn a_tag_check_that_stalls_holds_no_reload() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let mut registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    rt.block_on(async {
        let (key, public) = f.key_pair("author");
        let base = f.settings(port, Some("oci-cache"));
        let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:stable")).unwrap();
        let d1 = push::push(&base, read(guests::ANNOTATE), &tag).await.unwrap();
        push::sign(&base, &key, &tag).await.unwrap();

        let policies = f.path("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("10-pulled.toml"), format!("source = \"{tag}\"\non-error = \"fail\"\n")).unwrap();
        let mut config = Config::default();
        config.policies.dir = Some(policies.clone());
        config.engine = engine_settings();
        // A long timeout, checked every two seconds.
        config.registry = RegistrySettings {
            public_keys: vec![public.clone()],
            tag_recheck_ms: 2_000,
            timeout_ms: 600_000,
            ..base.clone()
        };
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let mut reloads = host.reloader.reloads();
        reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
        assert_eq!(reloads.borrow().1.added, ["10-pulled"], "{:?}", reloads.borrow().1);

        // The registry replaced by one that accepts and never answers.
        registry.stop();
        let hostile = start_hostile_at(&f.tls, Mode::Stall, port).await;
        let watching = host.dispatcher.engine().handle().spawn(nri_wasm::policy::reload::watch(
            host.reloader.clone(),
            Duration::from_millis(config.policies.reload_debounce_ms),
            true,
            stop.clone(),
        ));
        let asked = async {
            while hostile.requests.load(Ordering::Relaxed) == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(120), asked).await.expect("the tag was checked");

        // A check is in flight (or the next one is): the directory still reloads.
        let n = reloads.borrow().0;
        std::fs::write(policies.join("20-local.wasm"), read(guests::ANNOTATE)).unwrap();
        let added = reloads.wait_for(|(m, r)| *m > n && r.added == ["20-local"]);
        tokio::time::timeout(Duration::from_secs(300), added)
            .await
            .expect("the directory change was loaded while the tag check stalls")
            .unwrap();
        let running: Vec<String> = host.dispatcher.chain().policies().map(|p| p.name().to_string()).collect();
        assert_eq!(running, ["10-pulled", "20-local"]);
        let pulled = host.dispatcher.chain().policies().next().unwrap().spec.provenance.clone().unwrap();
        assert_eq!(pulled.manifest, format!("sha256:{d1}"), "the tagged policy keeps its version");

        // Stop is not held by the stalled check either.
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(120), watching).await.expect("watch ended at stop").unwrap();
        let _ = hostile.stop.send(());
    });
    drop(registry);
}

/// A policy named in the host configuration (`[policies.sources]`) rather
/// than in a settings file: pulled, verified and run with the settings of
/// its `NN-name.toml`. A settings file that names a source too, or a
/// `.wasm` beside the name, is refused naming both.
#[test]
fn a_policy_named_in_the_host_configuration_is_pulled_and_run() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    rt.block_on(async {
        let settings = f.settings(port, Some("oci-cache"));
        let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
        let digest = push::push(&settings, read(guests::ANNOTATE), &tag).await.unwrap();
        let pinned = format!("{tag}@sha256:{digest}");
        let policies = f.path("policies");
        std::fs::create_dir(&policies).unwrap();
        // Its settings file gives settings and on-error, no source.
        std::fs::write(policies.join("10-configured.toml"), "settings = \"configured\"\non-error = \"fail\"\n")
            .unwrap();

        let mut config = Config::default();
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.policies.sources =
            ["10-configured", "20-both", "30-twice"].iter().map(|n| (n.to_string(), pinned.clone())).collect();
        config.engine = engine_settings();
        config.registry = settings.clone();
        config.validate().unwrap();
        // Valid with all three; first the one whose files are in order.
        config.policies.sources.retain(|n, _| n == "10-configured");
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let mut reloads = host.reloader.reloads();
        reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
        let report = reloads.borrow().1.clone();
        assert_eq!(report.added, ["10-configured"], "{report:?}");
        assert!(report.is_clean(), "{report:?}");
        let policy = host.dispatcher.chain().policies().next().unwrap().clone();
        assert_eq!(policy.spec.provenance.as_ref().unwrap().source, pinned);
        assert_eq!(policy.spec.settings, "configured");

        let h = Harness::start_policies(RuntimeProfile::v0_12(), host.dispatcher.clone()).await;
        let conn = h.connect().await;
        conn.synchronize(&[], &[], 0).await.unwrap();
        let pod = nri_sim::workload::pod(1);
        let ctr = nri_sim::workload::container(&pod, 0);
        let reply = conn.create_container(&pod, &ctr).await.expect("answered");
        assert_eq!(reply.adjust.unwrap().annotations.get("example.com/configured"), Some(&ctr.name));
        // Unchanged: a reload keeps it as it is.
        let report = host.reloader.reload().await;
        assert_eq!(report.unchanged, ["10-configured"], "{report:?}");
        conn.close().await;
        h.shutdown().await;

        // Named twice: refused, each naming what is in the way.
        std::fs::write(policies.join("20-both.toml"), format!("source = \"{pinned}\"\nsettings = \"x\"\n")).unwrap();
        std::fs::write(policies.join("30-twice.wasm"), read(guests::ANNOTATE)).unwrap();
        std::fs::write(policies.join("30-twice.toml"), "settings = \"x\"\n").unwrap();
        let mut config = config.clone();
        config.policies.sources =
            ["10-configured", "20-both", "30-twice"].iter().map(|n| (n.to_string(), pinned.clone())).collect();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let mut reloads = host.reloader.reloads();
        reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
        let report = reloads.borrow().1.clone();
        assert_eq!(report.added, ["10-configured"], "{report:?}");
        let why = |name: &str| {
            report
                .failed
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, w)| w.clone())
                .unwrap_or_else(|| panic!("{report:?}"))
        };
        let both = why("20-both");
        assert!(both.contains("20-both.toml") && both.contains("the host configuration names one too"), "{both}");
        let twice = why("30-twice");
        assert!(twice.contains("30-twice.wasm is there too") && twice.contains("[policies.sources]"), "{twice}");
    });
    drop(registry);
}

/// The same component as another file: a custom section appended changes
/// the digest, not what the component does.
fn another_file_of(path: &str) -> Vec<u8> {
    let mut bytes = read(path);
    bytes.extend_from_slice(&[0, 6, 5, b'n', b'o', b't', b'e', b'!']);
    bytes
}

// ---------------------------------------------------------------------
// Bearer tokens: the registry's `auth: token`, and a token server of the
// test's own.

const SERVICE: &str = "nri-wasm-test-registry";
/// The identity (refresh) token the token server takes for the test's user.
const IDENTITY_TOKEN: &str = "refresh-for-alice";
const ISSUER: &str = "nri-wasm-test-tokens";

/// An ECDSA P-256 key and its self-signed certificate (openssl), for
/// signing tokens.
struct TokenSigner {
    key: p256::ecdsa::SigningKey,
    cert_der: Vec<u8>,
    cert: PathBuf,
}

fn token_signer(dir: &Path, name: &str) -> TokenSigner {
    use p256::pkcs8::DecodePrivateKey;
    use rustls_pki_types::pem::PemObject;
    let (key, cert) = (dir.join(format!("{name}.key")), dir.join(format!("{name}.crt")));
    run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", &format!("/CN={name}"), "-keyout", key.to_str().unwrap(), "-out", cert.to_str().unwrap()]));
    let secret = p256::SecretKey::from_pkcs8_pem(&std::fs::read_to_string(&key).unwrap()).unwrap();
    let der = rustls_pki_types::CertificateDer::from_pem_file(&cert).unwrap();
    TokenSigner { key: p256::ecdsa::SigningKey::from(secret), cert_der: der.to_vec(), cert }
}

fn b64url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A JWT as the registry's token auth reads it: ES256, the signing
/// certificate in `x5c`, access to what each scope asks.
fn token(signer: &TokenSigner, subject: &str, scopes: &[String]) -> String {
    use base64::Engine as _;
    use p256::ecdsa::signature::Signer as _;
    let x5c = base64::engine::general_purpose::STANDARD.encode(&signer.cert_der);
    let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [x5c]});
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let access: Vec<serde_json::Value> = scopes
        .iter()
        .filter_map(|s| {
            let mut parts = s.splitn(3, ':');
            let (kind, name, actions) = (parts.next()?, parts.next()?, parts.next()?);
            Some(serde_json::json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let claims = serde_json::json!({
        "iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
        "jti": format!("{now}-{}", scopes.len()), "access": access,
    });
    let signed = format!("{}.{}", b64url(header.to_string().as_bytes()), b64url(claims.to_string().as_bytes()));
    let signature: p256::ecdsa::Signature = signer.key.sign(signed.as_bytes());
    format!("{signed}.{}", b64url(&signature.to_bytes()))
}

/// `%XX` of a query value, and `+` as a space.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The token server: HTTPS on loopback, basic auth with the test's user,
/// a token signed by `trusted` (or, once `untrusted` is set, by a key the
/// registry does not know). Records the query of every request.
struct TokenServer {
    port: u16,
    queries: Arc<std::sync::Mutex<Vec<String>>>,
    untrusted: Arc<std::sync::atomic::AtomicBool>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start_token_server(tls: &Tls, trusted: TokenSigner, stranger: TokenSigner) -> TokenServer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    nri_wasm::registry::client::crypto();
    let acceptor = tls_acceptor(tls);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let queries = Arc::new(std::sync::Mutex::new(Vec::new()));
    let untrusted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signers = Arc::new((trusted, stranger));
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let (seen, bad) = (queries.clone(), untrusted.clone());
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                a = listener.accept() => a.unwrap(),
                _ = &mut stopped => return,
            };
            let (acceptor, seen, bad, signers) = (acceptor.clone(), seen.clone(), bad.clone(), signers.clone());
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(tcp).await else { return };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let split = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let text = String::from_utf8_lossy(&head[..split]).to_string();
                let target = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                // A GET asks with its query (basic auth); a POST with a form
                // (an OAuth2 refresh token, as docker uses an identity token).
                let query = if text.starts_with("POST ") {
                    let length = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0)
                        .min(64 << 10);
                    let mut body = head[split..].to_vec();
                    while body.len() < length {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => body.extend_from_slice(&buf[..n]),
                        }
                    }
                    String::from_utf8_lossy(&body).to_string()
                } else {
                    target.split_once('?').map_or("", |(_, q)| q).to_string()
                };
                seen.lock().unwrap().push(percent_decode(&query));
                let refresh = query.split('&').any(|kv| kv == "grant_type=refresh_token")
                    && query.split('&').any(|kv| kv == format!("refresh_token={IDENTITY_TOKEN}"));
                let authorized = refresh
                    || text.lines().any(|l| {
                        let l = l.to_ascii_lowercase();
                        l.starts_with("authorization: basic ")
                            && l.ends_with(&base64_encode(&format!("{USER}:{PASSWORD}")).to_ascii_lowercase())
                    });
                let scopes: Vec<String> = query
                    .split('&')
                    .filter_map(|kv| kv.strip_prefix("scope="))
                    .flat_map(|s| percent_decode(s).split(' ').map(str::to_string).collect::<Vec<_>>())
                    .collect();
                let answer = if authorized {
                    let signer = if bad.load(Ordering::Relaxed) { &signers.1 } else { &signers.0 };
                    let jwt = token(signer, USER, &scopes);
                    let body = serde_json::json!({"token": jwt, "access_token": jwt, "expires_in": 300}).to_string();
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: \
                         close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
                };
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    TokenServer { port, queries, untrusted, _stop: stop }
}

/// A TLS acceptor with the test's server certificate (127.0.0.1).
fn tls_acceptor(tls: &Tls) -> tokio_rustls::TlsAcceptor {
    use rustls_pki_types::pem::PemObject;
    let certs: Vec<rustls_pki_types::CertificateDer<'static>> =
        rustls_pki_types::CertificateDer::pem_file_iter(&tls.cert).unwrap().map(|c| c.unwrap()).collect();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&tls.key).unwrap();
    let config = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(certs, key).unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A registry with token auth (realm, service, issuer, and the token
/// signer's certificate as its root bundle): a policy is pushed and pulled
/// through the token flow; a wrong password gets no token, and a token
/// signed by a key the registry does not trust is refused by the registry.
#[test]
fn bearer_tokens_from_a_token_server_the_registry_trusts() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let rt = rt();
    rt.block_on(async {
        let trusted = token_signer(f.dir.path(), "token-signer");
        let stranger = token_signer(f.dir.path(), "stranger-signer");
        let bundle = trusted.cert.clone();
        let tokens = start_token_server(&f.tls, trusted, stranger).await;
        let realm = format!("https://127.0.0.1:{}/token", tokens.port);
        let auth = format!(
            "  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
            bundle.display()
        );
        let registry = RealRegistry::start_with_auth(&binary, &f.path("registry"), &f.tls, &auth);
        let port = registry.port;
        let settings = f.settings(port, None);
        let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
        let digest = push::push(&settings, read(guests::ANNOTATE), &tag).await.expect("pushed with a token");

        // Pulled through the challenge, the token and the retry.
        let pinned = source(&format!("{tag}@sha256:{digest}"), None);
        let pulled = Registry::new(&settings, 64 << 20).unwrap().resolve(&pinned).await.expect("pulled with a token");
        assert_eq!(pulled.bytes, read(guests::ANNOTATE));
        assert_eq!(pulled.provenance.from_cache, None);
        let queries = tokens.queries.lock().unwrap().clone();
        let pull_scope = "scope=repository:policies/annotate:pull";
        assert!(
            queries.iter().any(|q| q.contains(pull_scope) && q.contains(&format!("service={SERVICE}"))),
            "{queries:?}"
        );

        // A wrong password: the token server refuses, and the error says where.
        let wrong = f.path("wrong-auth.json");
        let creds = base64_encode(&format!("{USER}:not-the-password"));
        std::fs::write(&wrong, format!(r#"{{"auths":{{"127.0.0.1:{port}":{{"auth":"{creds}"}}}}}}"#)).unwrap();
        let refused = RegistrySettings { auth_file: Some(wrong), ..settings.clone() };
        let e = Registry::new(&refused, 64 << 20).unwrap().resolve(&pinned).await.unwrap_err().to_string();
        assert!(e.contains(&format!("token from {realm}: HTTP 401")) && e.contains(&tag.to_string()), "{e}");

        // An identity token (as `docker login` to such a registry, or a
        // credential helper answering `<token>`, leaves): exchanged as an
        // OAuth2 refresh token; a wrong one gets no token.
        let identity = f.path("identity-auth.json");
        let write_identity = |token: &str| {
            std::fs::write(&identity, format!(r#"{{"auths":{{"127.0.0.1:{port}":{{"identitytoken":"{token}"}}}}}}"#))
                .unwrap()
        };
        write_identity(IDENTITY_TOKEN);
        let with_identity = RegistrySettings { auth_file: Some(identity.clone()), ..settings.clone() };
        let pulled = Registry::new(&with_identity, 64 << 20)
            .unwrap()
            .resolve(&pinned)
            .await
            .expect("pulled with an identity token");
        assert_eq!(pulled.bytes, read(guests::ANNOTATE));
        let queries = tokens.queries.lock().unwrap().clone();
        assert!(
            queries.iter().any(|q| q.contains("grant_type=refresh_token") && q.contains(pull_scope)),
            "{queries:?}"
        );
        write_identity("stolen");
        let e = Registry::new(&with_identity, 64 << 20).unwrap().resolve(&pinned).await.unwrap_err().to_string();
        assert!(e.contains(&format!("token from {realm}: HTTP 401")), "{e}");

        // A token the registry does not trust: refused by the registry.
        tokens.untrusted.store(true, Ordering::Relaxed);
        let e = Registry::new(&settings, 64 << 20).unwrap().resolve(&pinned).await.unwrap_err().to_string();
        assert!(e.contains("/manifests/") && e.contains("HTTP 401"), "{e}");
        assert!(!e.contains("token from"), "the token server answered; the registry refused: {e}");
        drop(registry);
    });
}

// ---------------------------------------------------------------------
// Proxies from the environment.

/// Set in the process that runs the proxy test on its own.
const PROXY_CHILD: &str = "NRI_WASM_TEST_PROXY_CHILD";

/// A CONNECT proxy on loopback that records the `host:port` of every
/// tunnel it is asked for.
struct Proxy {
    port: u16,
    asked: Arc<std::sync::Mutex<Vec<String>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start_proxy() -> Proxy {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let seen = asked.clone();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = tokio::select! {
                a = listener.accept() => a.unwrap(),
                _ = &mut stopped => return,
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                // Byte by byte: nothing of the tunnel is read with the request.
                while !head.ends_with(b"\r\n\r\n") {
                    match client.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let mut words = text.split_whitespace();
                let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
                    let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n").await;
                    return;
                };
                seen.lock().unwrap().push(target.to_string());
                let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n").await;
                    return;
                };
                if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    Proxy { port, asked, _stop: stop }
}

/// A host started with `HTTPS_PROXY` pulls through the proxy (the tunnel
/// to the registry is the one it asks for); with the registry in
/// `NO_PROXY`, it goes direct. The environment is the process's, so the
/// test runs in a process of its own (this test binary, this test only).
#[test]
fn proxies_from_the_environment_are_used_and_no_proxy_is_respected() {
    const NAME: &str = "registry::proxies_from_the_environment_are_used_and_no_proxy_is_respected";
    if std::env::var_os(PROXY_CHILD).is_none() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads", "1"])
            .env(PROXY_CHILD, "1")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
        return;
    }
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    rt.block_on(async {
        for var in
            ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"]
        {
            std::env::remove_var(var);
        }
        let settings = f.settings(port, None);
        let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
        let digest = push::push(&settings, read(guests::ANNOTATE), &tag).await.unwrap();
        let pinned = format!("{tag}@sha256:{digest}");
        let proxy = start_proxy().await;
        std::env::set_var("HTTPS_PROXY", format!("http://127.0.0.1:{}", proxy.port));

        // The host, as a node starts it: the policy comes through the proxy.
        let policies = f.path("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("10-pulled.toml"), format!("source = \"{pinned}\"\nsettings = \"pulled\"\n"))
            .unwrap();
        let mut config = Config::default();
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = engine_settings();
        config.registry = settings.clone();
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let mut reloads = host.reloader.reloads();
        reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
        assert_eq!(reloads.borrow().1.added, ["10-pulled"], "{:?}", reloads.borrow().1);
        let asked = proxy.asked.lock().unwrap().clone();
        assert!(!asked.is_empty() && asked.iter().all(|a| *a == format!("127.0.0.1:{port}")), "{asked:?}");

        // The registry in NO_PROXY: straight to it, the proxy asked nothing.
        proxy.asked.lock().unwrap().clear();
        std::env::set_var("NO_PROXY", "127.0.0.1");
        let direct = Registry::new(&settings, 64 << 20).unwrap();
        let pulled = direct.resolve(&source(&pinned, None)).await.expect("pulled directly");
        assert_eq!(pulled.bytes, read(guests::ANNOTATE));
        assert!(proxy.asked.lock().unwrap().is_empty(), "{:?}", proxy.asked.lock().unwrap());

        // Without NO_PROXY, a proxy that is gone fails the pull.
        std::env::remove_var("NO_PROXY");
        std::env::set_var("HTTPS_PROXY", format!("http://127.0.0.1:{}", free_port()));
        let e = Registry::new(&settings, 64 << 20).unwrap().resolve(&source(&pinned, None)).await.unwrap_err();
        assert!(e.to_string().contains(&pinned), "{e}");
    });
    drop(registry);
}

// ---------------------------------------------------------------------
// A registry that misbehaves.

/// How the hostile registry answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Accepts, reads the request, never answers.
    Stall,
    /// A manifest whose digest is not the one asked for.
    WrongDigest,
    /// An image's manifest instead of a wasm artifact.
    WrongMediaType,
    /// A layer larger than a policy may be.
    Oversized,
    /// A manifest that never ends.
    EndlessManifest,
    /// A component whose body never ends.
    EndlessBlob,
    /// A component whose content is not its digest.
    WrongBlob,
    /// Every request redirected to itself.
    RedirectLoop,
    /// A component of [`LARGE_LIE`] bytes, as the manifest declares and the
    /// body sends, whose content is not its digest.
    LargeLie,
}

/// The size of the lying component: 500 MiB.
const LARGE_LIE: u64 = 500 << 20;

struct Hostile {
    port: u16,
    requests: Arc<AtomicUsize>,
    blob_requests: Arc<AtomicUsize>,
    stop: tokio::sync::oneshot::Sender<()>,
}

const GOOD_LAYER: &[u8] = b"\0asm\x0d\0\x01\0";

fn sha(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn wasm_manifest(config_type: &str, layer: &[u8], size: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": config_type, "digest": format!("sha256:{}", sha(b"{}")), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": format!("sha256:{}", sha(layer)), "size": size}],
    }))
    .unwrap()
}

/// The manifest each mode serves (for the ones that serve one).
fn hostile_manifest(mode: Mode) -> Vec<u8> {
    match mode {
        Mode::WrongMediaType => {
            wasm_manifest("application/vnd.oci.image.config.v1+json", GOOD_LAYER, GOOD_LAYER.len() as u64)
        }
        Mode::Oversized => wasm_manifest("application/vnd.wasm.config.v0+json", GOOD_LAYER, 1 << 40),
        Mode::LargeLie => wasm_manifest("application/vnd.wasm.config.v0+json", GOOD_LAYER, LARGE_LIE),
        _ => wasm_manifest("application/vnd.wasm.config.v0+json", GOOD_LAYER, GOOD_LAYER.len() as u64),
    }
}

async fn start_hostile(tls: &Tls, mode: Mode) -> Hostile {
    start_hostile_at(tls, mode, 0).await
}

/// The hostile registry on `port` (zero: any free one).
async fn start_hostile_at(tls: &Tls, mode: Mode, port: u16) -> Hostile {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    nri_wasm::registry::client::crypto();
    let acceptor = tls_acceptor(tls);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let blob_requests = Arc::new(AtomicUsize::new(0));
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let (req, blobs) = (requests.clone(), blob_requests.clone());
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                a = listener.accept() => a.unwrap(),
                _ = &mut stopped => return,
            };
            let acceptor = acceptor.clone();
            let (req, blobs) = (req.clone(), blobs.clone());
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(tcp).await else { return };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                req.fetch_add(1, Ordering::Relaxed);
                let text = String::from_utf8_lossy(&head).to_string();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let is_blob = path.contains("/blobs/");
                if is_blob {
                    blobs.fetch_add(1, Ordering::Relaxed);
                }
                let ok = |body: &[u8], len: Option<usize>| {
                    let mut h =
                        "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n".to_string();
                    if let Some(n) = len {
                        h.push_str(&format!("Content-Length: {n}\r\n"));
                    }
                    h.push_str("Connection: close\r\n\r\n");
                    let mut out = h.into_bytes();
                    out.extend_from_slice(body);
                    out
                };
                match mode {
                    Mode::Stall => {
                        tokio::time::sleep(Duration::from_secs(120)).await;
                    }
                    Mode::RedirectLoop => {
                        let r = format!(
                            "HTTP/1.1 302 Found\r\nLocation: {path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                        let _ = s.write_all(r.as_bytes()).await;
                    }
                    Mode::WrongDigest => {
                        let m = wasm_manifest("application/vnd.wasm.config.v0+json", b"other", 5);
                        let _ = s.write_all(&ok(&m, Some(m.len()))).await;
                    }
                    Mode::EndlessManifest if !is_blob => {
                        let _ = s.write_all(&ok(b"{\"schemaVersion\": 2, \"x\": \"", None)).await;
                        let chunk = vec![b'a'; 64 << 10];
                        // Bounded: 64 MiB at most, or until the client hangs up.
                        for _ in 0..1024 {
                            if s.write_all(&chunk).await.is_err() {
                                return;
                            }
                        }
                    }
                    Mode::EndlessBlob if is_blob => {
                        let _ = s.write_all(&ok(GOOD_LAYER, None)).await;
                        let chunk = vec![0u8; 64 << 10];
                        for _ in 0..1024 {
                            if s.write_all(&chunk).await.is_err() {
                                return;
                            }
                        }
                    }
                    Mode::LargeLie if is_blob => {
                        let _ = s.write_all(&ok(b"", Some(LARGE_LIE as usize))).await;
                        let chunk = vec![0u8; 1 << 20];
                        for _ in 0..(LARGE_LIE >> 20) {
                            if s.write_all(&chunk).await.is_err() {
                                return;
                            }
                        }
                    }
                    Mode::WrongBlob if is_blob => {
                        let bad = b"\0asm\x0d\0\x01\x01";
                        let _ = s.write_all(&ok(bad, Some(bad.len()))).await;
                    }
                    _ if is_blob => {
                        let _ = s.write_all(&ok(GOOD_LAYER, Some(GOOD_LAYER.len()))).await;
                    }
                    _ => {
                        let m = hostile_manifest(mode);
                        let _ = s.write_all(&ok(&m, Some(m.len()))).await;
                    }
                }
                let _ = s.shutdown().await;
            });
        }
    });
    Hostile { port, requests, blob_requests, stop }
}

/// Each misbehaviour is an error naming the reference and what went
/// wrong, within the deadline, with nothing left in the cache.
#[test]
fn a_registry_that_stalls_lies_or_floods_is_refused_with_the_reference_and_leaves_nothing() {
    let f = Fixture::new();
    let rt = rt();
    rt.block_on(async {
        for (mode, expect) in [
            (Mode::Stall, "within 1500 ms"),
            (Mode::WrongDigest, "not the sha256:"),
            (Mode::WrongMediaType, "not a wasm artifact"),
            (Mode::Oversized, "not downloaded"),
            (Mode::EndlessManifest, "larger than 262144 bytes"),
            (Mode::EndlessBlob, "more than the manifest's"),
            (Mode::WrongBlob, "content has digest"),
            (Mode::RedirectLoop, "redirect"),
        ] {
            let hostile = start_hostile(&f.tls, mode).await;
            let cache = format!("cache-{mode:?}");
            let settings = RegistrySettings { timeout_ms: 1500, ..f.settings(hostile.port, Some(&cache)) };
            let registry = Registry::new(&settings, 1 << 20).unwrap();
            let digest = match mode {
                Mode::WrongDigest => sha(&hostile_manifest(Mode::Stall)),
                _ => sha(&hostile_manifest(mode)),
            };
            let reference = format!("oci://127.0.0.1:{}/p/x:v1@sha256:{digest}", hostile.port);
            // The stall ends at the deadline, as its error says.
            let e = registry.resolve(&source(&reference, None)).await.unwrap_err().to_string();
            assert!(e.contains(&reference), "{mode:?}: the error names the reference: {e}");
            assert!(e.contains(expect), "{mode:?}: {expect:?} missing: {e}");
            let left = cache_files(&f.path(&cache));
            assert!(
                left.iter().all(|n| n != &sha(GOOD_LAYER) && !n.starts_with('.')),
                "{mode:?}: nothing unverified or partial is kept: {left:?}"
            );
            if mode == Mode::Oversized {
                assert_eq!(hostile.blob_requests.load(Ordering::Relaxed), 0, "an oversized blob is not requested");
            }
            assert!(hostile.requests.load(Ordering::Relaxed) > 0 || mode == Mode::Stall);
            let _ = hostile.stop.send(());
        }

        // Down: nothing listens.
        let port = free_port();
        let settings = f.settings(port, Some("cache-down"));
        let reference = format!("oci://127.0.0.1:{port}/p/x@sha256:{}", "1".repeat(64));
        let e = Registry::new(&settings, 1 << 20).unwrap().resolve(&source(&reference, None)).await.unwrap_err();
        let e = e.to_string();
        assert!(e.contains(&reference) && e.contains(&format!("127.0.0.1:{port}/v2/p/x/manifests")), "{e}");
        assert!(e.contains("the node's cache has no usable copy"), "{e}");
    });
}

/// While a pull stalls, events are answered: a mandatory policy named by
/// reference fails them naming itself, an optional one is skipped.
#[test]
fn a_stalled_pull_never_holds_an_event() {
    let f = Fixture::new();
    let rt = rt();
    rt.block_on(async {
        let hostile = start_hostile(&f.tls, Mode::Stall).await;
        let policies = f.path("policies");
        std::fs::create_dir(&policies).unwrap();
        let reference = format!("oci://127.0.0.1:{}/p/x:v1@sha256:{}", hostile.port, "2".repeat(64));
        std::fs::write(policies.join("10-stalled.toml"), format!("source = \"{reference}\"\non-error = \"fail\"\n"))
            .unwrap();
        let mut config = Config::default();
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = engine_settings();
        config.registry = RegistrySettings { timeout_ms: 600_000, ..f.settings(hostile.port, Some("cache")) };
        config.validate().unwrap();
        let host = nri_wasm::cli::HostBuilder::new(config.clone()).compiler(Compiler::InProcess).build().unwrap();
        let h = Harness::start_policies(RuntimeProfile::v0_12(), host.dispatcher.clone()).await;
        let conn = h.connect().await;
        conn.synchronize(&[], &[], 0).await.unwrap();
        // Wait until the pull is under way (the registry saw the request).
        let deadline = Instant::now() + Duration::from_secs(60);
        while hostile.requests.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the pull never reached the registry");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for n in 0..5 {
            let pod = nri_sim::workload::pod(1);
            let ctr = nri_sim::workload::container(&pod, n);
            let answer = tokio::time::timeout(Duration::from_secs(30), conn.create_container(&pod, &ctr))
                .await
                .expect("answered while the pull stalls");
            match answer {
                Err(nri_sim::SimError::Failed { status, .. }) => {
                    assert!(status.message().contains("10-stalled"), "{}", status.message())
                }
                other => panic!("a mandatory policy that is not loaded fails the event, got {other:?}"),
            }
        }
        conn.close().await;
        h.shutdown().await;
        let _ = hostile.stop.send(());
    });
}

// ---------------------------------------------------------------------
// The binary as an operator runs it: `pull`'s memory, credential helpers
// on PATH, a host with no CA certificates, and the commands of
// docs/operations.md.

/// The host binary this crate builds.
const BINARY: &str = env!("CARGO_BIN_EXE_nri-wasm-under-test");

/// What a process of the binary did.
#[derive(Debug)]
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
    /// The highest `VmHWM` (peak resident memory) seen while it ran, in
    /// KiB (sampled: a lower bound of the true peak).
    peak_kib: u64,
}

/// Runs `cmd` to its end. With `data_limit`, the process may map at most
/// that many bytes of data (`RLIMIT_DATA`: the heap and every private
/// writable mapping), so a process that would hold more fails instead;
/// its `VmHWM` is sampled meanwhile. (Not `ru_maxrss` from `wait4`: a
/// child forked from this large test process starts with the parent's
/// size counted in it.)
fn run_bounded(cmd: &mut Command, data_limit: Option<u64>) -> Ran {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    if let Some(limit) = data_limit {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                if libc::setrlimit(libc::RLIMIT_DATA, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let hwm = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
                peak = peak.max(hwm.unwrap_or(0));
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    let stdout = reader.join().unwrap();
    let status = child.wait().unwrap();
    done.store(true, Ordering::Relaxed);
    Ran { ok: status.success(), stdout, stderr, peak_kib: sampler.join().unwrap() }
}

/// [`run_bounded`] without a bound.
fn run_cmd(cmd: &mut Command) -> Ran {
    run_bounded(cmd, None)
}

/// A host configuration trusting the fixture's CA, with `extra` lines
/// (in `[engine]`), and no cache of the node's.
fn host_config(f: &Fixture, name: &str, engine: &str) -> PathBuf {
    let path = f.path(name);
    std::fs::write(
        &path,
        format!("[registry]\nca-file = {:?}\n[engine]\ncache-dir = \"\"\n{engine}", f.tls.ca.display().to_string()),
    )
    .unwrap();
    path
}

/// `nri-wasm pull` of a component that lies about its digest streams it
/// into a temporary file, hashing as it goes: refused at the end with its
/// real digest, nothing left, and the process's peak memory a small part of
/// the 500 MiB it received (the pull that kept the body in memory peaked at
/// 531 MB). A component declared larger than `[engine] max-component-mib`
/// (64 MiB by default, as on a node) is refused before its blob is asked for.
#[test]
fn pull_streams_a_lying_layer_in_little_memory_and_refuses_an_oversized_one_before_a_byte() {
    let f = Fixture::new();
    let rt = rt();
    let hostile = rt.block_on(start_hostile(&f.tls, Mode::LargeLie));
    let reference =
        format!("oci://127.0.0.1:{}/p/large:v1@sha256:{}", hostile.port, sha(&hostile_manifest(Mode::LargeLie)));
    let out_dir = f.path("out");
    std::fs::create_dir(&out_dir).unwrap();
    let output = out_dir.join("large.wasm");

    // The node's default limit: refused from the manifest alone.
    let default = host_config(&f, "default.toml", "");
    let ran = run_cmd(Command::new(BINARY).args(["pull", &reference, "-c"]).arg(&default).arg("-o").arg(&output));
    assert!(!ran.ok, "{ran:?}");
    assert!(
        ran.stderr.contains(&reference)
            && ran.stderr.contains("max-component-mib")
            && ran.stderr.contains("not downloaded"),
        "{ran:?}"
    );
    assert_eq!(hostile.blob_requests.load(Ordering::Relaxed), 0, "the blob is not asked for");

    // A node that allows 1 GiB: the 500 MiB are received, and refused,
    // by a process that may not map more than 256 MiB of data (a pull that
    // kept the body would fail to allocate).
    let large = host_config(&f, "large.toml", "max-component-mib = 1024\n");
    let ran = run_bounded(
        Command::new(BINARY)
            .args(["pull", &reference, "--timeout-ms", "600000", "-c"])
            .arg(&large)
            .arg("-o")
            .arg(&output),
        Some(256 << 20),
    );
    assert!(!ran.ok, "{ran:?}");
    assert!(
        ran.stderr.contains("content has digest sha256:") && ran.stderr.contains(&sha(GOOD_LAYER)),
        "refused for its digest: {ran:?}"
    );
    assert_eq!(hostile.blob_requests.load(Ordering::Relaxed), 1);
    let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "neither the output nor a temporary file is left: {left:?}");
    // `push` of a component no node would load: refused before anything is sent.
    let small = host_config(&f, "small.toml", "max-component-mib = 1\n");
    let big = f.path("big.wasm");
    std::fs::write(&big, vec![0u8; 2 << 20]).unwrap();
    let nowhere = format!("oci://127.0.0.1:{}/p/big:v1", free_port());
    let pushed = run_cmd(Command::new(BINARY).args(["push"]).arg(&big).arg(&nowhere).arg("-c").arg(&small));
    assert!(!pushed.ok && pushed.stderr.contains("larger than 1048576 bytes, the most a node loads"), "{pushed:?}");

    eprintln!("peak memory (VmHWM) of `nri-wasm pull` receiving {} MiB: {} KiB", LARGE_LIE >> 20, ran.peak_kib);
    assert!(ran.peak_kib > 0, "the process was sampled");
    assert!(
        ran.peak_kib < 128 << 10,
        "the pull held the body: VmHWM {} KiB for a {} MiB body",
        ran.peak_kib,
        LARGE_LIE >> 20
    );
    let _ = hostile.stop.send(());
}

/// A host with no CA certificates at all (a minimal image: no system
/// store, `SSL_CERT_FILE` and `SSL_CERT_DIR` pointing nowhere) starts its
/// registry client, pulls from a registry whose CA is the `ca-file`, and
/// without it says that it trusts no CA and what to do.
#[test]
fn a_host_without_ca_certificates_pulls_with_a_ca_file_and_says_what_is_missing_without() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let registry = RealRegistry::start_with_auth(&binary, &f.path("registry"), &f.tls, "");
    let port = registry.port;
    let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
    let settings = RegistrySettings { auth_file: None, ..f.settings(port, None) };
    let digest = rt().block_on(push::push(&settings, read(guests::ANNOTATE), &tag)).unwrap();
    let pinned = format!("{tag}@sha256:{digest}");
    let pull = |ca: Option<&Path>| {
        let mut cmd = Command::new(BINARY);
        cmd.args(["pull", &pinned, "-o"]).arg(f.path("pulled.wasm"));
        cmd.env("SSL_CERT_FILE", "/nonexistent/ca.pem").env("SSL_CERT_DIR", "/nonexistent");
        if let Some(ca) = ca {
            cmd.arg("--ca-file").arg(ca);
        }
        run_cmd(&mut cmd)
    };
    let ran = pull(Some(&f.tls.ca));
    assert!(ran.ok, "{ran:?}");
    assert_eq!(std::fs::read(f.path("pulled.wasm")).unwrap(), read(guests::ANNOTATE));
    let ran = pull(None);
    assert!(!ran.ok);
    assert!(
        ran.stderr.contains("UnknownIssuer")
            && ran.stderr.contains("trusts no CA at all")
            && ran.stderr.contains("--ca-file or [registry] ca-file"),
        "{ran:?}"
    );
    assert!(!ran.stderr.contains("builder error"), "{ran:?}");
}

/// A credential helper on PATH, as docker runs it: `credHelpers` names it
/// for the registry, it gets the registry on its input, and its answer is
/// the password of the registry's basic auth; `push` and `pull` use it. A
/// helper that fails is named with the registry and the file.
#[test]
fn a_credential_helper_on_the_path_gives_the_registry_its_password() {
    use std::os::unix::fs::PermissionsExt;
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let bin = f.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = |name: &str, body: &str| {
        let path = bin.join(format!("docker-credential-{name}"));
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script(
        "test-vault",
        &format!(
            r#"[ "$1" = get ] || exit 9
read -r server || true
echo "$server" >> {asked}
[ "$server" = "127.0.0.1:{port}" ] || {{ echo "credentials not found in native keychain"; exit 1; }}
echo '{{"ServerURL":"127.0.0.1:{port}","Username":"{USER}","Secret":"{PASSWORD}"}}'"#,
            asked = f.path("asked").display()
        ),
    );
    script("locked", "echo 'the vault is sealed' >&2; exit 2");
    let auth = f.path("helper-auth.json");
    std::fs::write(&auth, format!(r#"{{"credHelpers":{{"127.0.0.1:{port}":"test-vault"}}}}"#)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let nri_wasm = |args: &[&str], auth: &Path| {
        let mut cmd = Command::new(BINARY);
        cmd.args(args).arg("--auth-file").arg(auth).arg("--ca-file").arg(&f.tls.ca).env("PATH", &path);
        run_cmd(&mut cmd)
    };
    let tag = format!("oci://127.0.0.1:{port}/policies/annotate:v1");
    let pushed = nri_wasm(&["push", guests::ANNOTATE, &tag], &auth);
    assert!(pushed.ok, "{pushed:?}");
    let pinned = pushed.stdout.trim().to_string();
    let out = f.path("pulled.wasm");
    let pulled = nri_wasm(&["pull", &pinned, "-o", out.to_str().unwrap()], &auth);
    assert!(pulled.ok, "{pulled:?}");
    assert_eq!(std::fs::read(&out).unwrap(), read(guests::ANNOTATE));
    let asked = std::fs::read_to_string(f.path("asked")).unwrap();
    assert!(asked.lines().count() >= 2 && asked.lines().all(|l| l == format!("127.0.0.1:{port}")), "{asked}");

    let locked = f.path("locked-auth.json");
    std::fs::write(&locked, r#"{"credsStore":"locked"}"#).unwrap();
    let refused = nri_wasm(&["pull", &pinned, "-o", out.to_str().unwrap()], &locked);
    assert!(!refused.ok);
    assert!(
        refused.stderr.contains("docker-credential-locked")
            && refused.stderr.contains("credsStore")
            && refused.stderr.contains("locked-auth.json")
            && refused.stderr.contains(&format!("127.0.0.1:{port}"))
            && refused.stderr.contains("the vault is sealed"),
        "{refused:?}"
    );
}

/// TLS failures say their cause and what to do, for a pull and a push:
/// a self-signed certificate marked as a CA (what `openssl req -x509`
/// makes) is `CaUsedAsEndEntity` with how to make a leaf; a certificate
/// for another name says which; a plain HTTP registry reached over HTTPS
/// points at `plain-http`.
#[test]
fn tls_failures_say_their_cause_and_what_to_do() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let rt = rt();
    // `openssl req -x509` alone: a CA certificate, served as the registry's.
    let p = |n: &str| f.path(n).to_str().unwrap().to_string();
    run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-keyout", &p("self.key"), "-out", &p("self.crt")]));
    let self_signed = Tls { ca: f.path("self.crt"), cert: f.path("self.crt"), key: f.path("self.key") };
    let registry = RealRegistry::start_with_auth(&binary, &f.path("self-registry"), &self_signed, "");
    let port = registry.port;
    let settings =
        RegistrySettings { auth_file: None, ca_file: Some(self_signed.ca.clone()), ..f.settings(port, None) };
    let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
    let e = rt.block_on(push::push(&settings, read(guests::ANNOTATE), &tag)).unwrap_err().to_string();
    assert!(e.contains("CaUsedAsEndEntity") && e.contains("leaf certificate") && e.contains("basicConstraints"), "{e}");
    assert!(!e.contains("error sending request"), "the cause, not the transport's words: {e}");
    let e = rt
        .block_on(
            Registry::new(&settings, 64 << 20)
                .unwrap()
                .resolve(&source(&format!("{tag}@sha256:{}", "3".repeat(64)), None)),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("CaUsedAsEndEntity"), "{e}");
    drop(registry);

    // A good leaf for 127.0.0.1, asked for as localhost.
    let registry = RealRegistry::start_with_auth(&binary, &f.path("registry"), &f.tls, "");
    let localhost = OciRef::parse(&format!("oci://localhost:{}/policies/annotate:v1", registry.port)).unwrap();
    let settings = RegistrySettings { auth_file: None, ..f.settings(registry.port, None) };
    let e = rt.block_on(push::push(&settings, read(guests::ANNOTATE), &localhost)).unwrap_err().to_string();
    assert!(e.contains("not for localhost") && e.contains("subjectAltName"), "{e}");
    drop(registry);

    // A plain HTTP registry reached over HTTPS.
    let plain = RealRegistry::start_plain(&binary, &f.path("plain-registry"));
    let tag = OciRef::parse(&format!("oci://127.0.0.1:{}/policies/annotate:v1", plain.port)).unwrap();
    let settings = RegistrySettings { auth_file: None, ..f.settings(plain.port, None) };
    let e = rt.block_on(push::push(&settings, read(guests::ANNOTATE), &tag)).unwrap_err().to_string();
    assert!(e.contains("did not answer in TLS") && e.contains("[registry] plain-http"), "{e}");
}

/// A registry served without TLS, listed in `plain-http`: pushed to,
/// signed, pulled by digest and by the host; a policy that requires a
/// signature is refused from it until `plain-http-signed` says so too; an
/// unlisted registry stays HTTPS.
#[test]
fn a_plain_http_registry_is_used_only_when_listed_and_signed_policies_need_a_second_yes() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let registry = RealRegistry::start_plain(&binary, &f.path("registry"));
    let port = registry.port;
    let rt = rt();
    let host = format!("127.0.0.1:{port}");
    let settings = RegistrySettings {
        auth_file: None,
        ca_file: None,
        plain_http: vec![host.clone()],
        ..f.settings(port, Some("cache"))
    };
    settings.validate().unwrap();
    let tag = OciRef::parse(&format!("oci://{host}/policies/annotate:v1")).unwrap();
    let digest = rt.block_on(push::push(&settings, read(guests::ANNOTATE), &tag)).expect("pushed over plain HTTP");
    let pinned = format!("{tag}@sha256:{digest}");
    let pulled = rt.block_on(Registry::new(&settings, 64 << 20).unwrap().resolve(&source(&pinned, None))).unwrap();
    assert_eq!(pulled.bytes, read(guests::ANNOTATE));

    // Signed, and a key required: refused over plain HTTP, saying how to allow it.
    let (key, public) = f.key_pair("author");
    rt.block_on(push::sign(&settings, &key, &tag)).expect("signed over plain HTTP");
    let with_key = RegistrySettings { public_keys: vec![public.clone()], ..settings.clone() };
    let e = rt
        .block_on(Registry::new(&with_key, 64 << 20).unwrap().resolve(&source(&tag.to_string(), None)))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&tag.to_string()) && e.contains("plain-http-signed") && e.contains(&host), "{e}");
    let allowed = RegistrySettings { plain_http_signed: true, ..with_key.clone() };
    let signed =
        rt.block_on(Registry::new(&allowed, 64 << 20).unwrap().resolve(&source(&tag.to_string(), None))).unwrap();
    assert!(signed.provenance.signer.is_some_and(|s| s.contains("author.pub")));

    // The host, as a node starts it, from the plain registry.
    rt.block_on(host_loads_by_reference(&f, "10-plain", &pinned, &settings));

    // Not listed: HTTPS, which a plain registry does not speak.
    let unlisted = RegistrySettings { plain_http: Vec::new(), cache_dir: None, ..settings };
    let e = rt
        .block_on(Registry::new(&unlisted, 64 << 20).unwrap().resolve(&source(&pinned, None)))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("https://{host}/v2/")) && e.contains("plain-http"), "{e}");
}

/// Starts the host as a node does, with one policy `name` whose settings
/// file names `reference` and the registry `settings`, and waits until its
/// first load has added that policy.
async fn host_loads_by_reference(f: &Fixture, name: &str, reference: &str, settings: &RegistrySettings) {
    let policies = f.path("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join(format!("{name}.toml")), format!("source = \"{reference}\"\non-error = \"fail\"\n"))
        .unwrap();
    let mut config = Config::default();
    config.policies.dir = Some(policies.clone());
    config.policies.watch = false;
    config.engine = engine_settings();
    config.registry = RegistrySettings { cache_dir: Some(f.path("host-cache")), ..settings.clone() };
    config.validate().unwrap();
    let host = nri_wasm::cli::HostBuilder::new(config).compiler(Compiler::InProcess).build().unwrap();
    let mut reloads = host.reloader.reloads();
    reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
    assert_eq!(reloads.borrow().1.added, [name], "{:?}", reloads.borrow().1);
}

/// A registry named by an IPv6 address (`oci://[::1]:PORT/...`, as URLs
/// write one): listed in `plain-http` as references name it, pushed to,
/// pulled by digest and loaded by the host; a spelling of the same address
/// that a URL would not give back is refused, saying how to write it.
#[test]
fn a_registry_named_by_an_ipv6_address_is_pushed_to_pulled_and_loaded() {
    let Some(binary) = registry_binary() else { return };
    if TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: this machine has no IPv6 loopback");
        return;
    }
    let f = Fixture::new();
    let registry = RealRegistry::start_plain_v6(&binary, &f.path("registry"));
    let host = format!("[::1]:{}", registry.port);
    let rt = rt();
    let settings = RegistrySettings {
        auth_file: None,
        ca_file: None,
        plain_http: vec![host.clone()],
        ..f.settings(registry.port, Some("cache"))
    };
    settings.validate().unwrap();
    let tag = OciRef::parse(&format!("oci://{host}/policies/annotate:v1")).unwrap();
    assert_eq!(tag.registry, host);
    let digest = rt.block_on(push::push(&settings, read(guests::ANNOTATE), &tag)).expect("pushed to [::1]");
    let pinned = format!("{tag}@sha256:{digest}");
    let pulled = rt.block_on(Registry::new(&settings, 64 << 20).unwrap().resolve(&source(&pinned, None))).unwrap();
    assert_eq!(pulled.bytes, read(guests::ANNOTATE));

    rt.block_on(host_loads_by_reference(&f, "10-v6", &pinned, &settings));

    // The same address written out in full: not how a URL gives it back,
    // so `plain-http` and credentials could not match it; refused.
    let e = OciRef::parse(&format!("oci://[0:0:0:0:0:0:0:1]:{}/policies/annotate:v1", registry.port))
        .unwrap_err()
        .to_string();
    assert!(e.contains("RFC 5952") && e.contains("[::1]"), "{e}");
}

/// Where a policy came from, as `/status` says it: pulled, or from the
/// cache because its pinned digest is there (the registry up and not asked).
#[test]
fn status_says_why_a_policy_came_from_the_cache() {
    let Some(binary) = registry_binary() else { return };
    let f = Fixture::new();
    let mut registry = RealRegistry::start(&binary, &f.path("registry"), &f.tls);
    let port = registry.port;
    let rt = rt();
    rt.block_on(async {
        let settings = f.settings(port, Some("oci-cache"));
        let tag = OciRef::parse(&format!("oci://127.0.0.1:{port}/policies/annotate:v1")).unwrap();
        let digest = push::push(&settings, read(guests::ANNOTATE), &tag).await.unwrap();
        let (key, public) = f.key_pair("author");
        push::sign(&settings, &key, &tag).await.unwrap();
        let policies = f.path("policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("10-pinned.toml"), format!("source = \"{tag}@sha256:{digest}\"\n")).unwrap();
        std::fs::write(policies.join("20-tagged.toml"), format!("source = \"{tag}\"\nsettings = \"tagged\"\n"))
            .unwrap();
        let mut config = Config::default();
        config.policies.dir = Some(policies.clone());
        config.policies.watch = false;
        config.engine = engine_settings();
        config.registry = RegistrySettings { public_keys: vec![public], ..settings.clone() };
        config.validate().unwrap();
        let start = |config: Config| async move {
            let host = nri_wasm::cli::HostBuilder::new(config).compiler(Compiler::InProcess).build().unwrap();
            let mut reloads = host.reloader.reloads();
            reloads.wait_for(|(n, _)| *n >= 1).await.unwrap();
            let status = host.metrics.status();
            let json = serde_json::to_value(&status).unwrap();
            (status, json)
        };
        let shown = |json: &serde_json::Value, name: &str| {
            json["policies"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap().clone()
        };
        // First start: both pulled.
        let (_, json) = start(config.clone()).await;
        for name in ["10-pinned", "20-tagged"] {
            let p = shown(&json, name);
            assert_eq!(p["from_cache"], false, "{p}");
            assert!(p.get("from_cache_reason").is_none(), "{p}");
        }
        // Again, the registry up: the pinned digest from the cache without
        // asking; the tag asked, pulled.
        let (_, json) = start(config.clone()).await;
        let p = shown(&json, "10-pinned");
        assert_eq!((&p["from_cache"], &p["from_cache_reason"]), (&true.into(), &"pinned-digest".into()), "{p}");
        assert!(p.get("registry_error").is_none(), "{p}");
        assert_eq!(shown(&json, "20-tagged")["from_cache"], false);
        // The registry gone: the tag from the cache, saying why.
        registry.stop();
        let (status, json) = start(config).await;
        let p = shown(&json, "20-tagged");
        assert_eq!(p["from_cache_reason"], "registry-unreachable", "{p}");
        assert!(p["registry_error"].as_str().unwrap().contains(&format!("127.0.0.1:{port}")), "{p}");
        // What `nri-wasm status` reads back is the same.
        let back: nri_wasm::metrics::HostStatus = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, status);
    });
}

// ---------------------------------------------------------------------
// docs/operations.md, "A local registry, end to end", run as written.

const OPERATIONS: &str = include_str!("../../../docs/operations.md");

/// What a documented command is expected to do (the comment line after it).
#[derive(Debug, Clone)]
enum Expect {
    /// Succeed.
    Success,
    /// Succeed, printing these parts in this order (`# prints: a…b`).
    Prints(Vec<String>),
    /// Fail, saying these parts in this order (`# error: a…b`).
    Fails(Vec<String>),
}

/// The blocks marked `<!-- local-registry -->` (commands) and
/// `<!-- local-registry: FILE -->` (a file's content), in order.
fn tour_blocks(doc: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut lines = doc.lines();
    let mut marker: Option<Option<String>> = None;
    while let Some(line) = lines.next() {
        if let Some(rest) = line.trim().strip_prefix("<!-- local-registry").and_then(|r| r.strip_suffix("-->")) {
            marker = Some(rest.trim().strip_prefix(':').map(|f| f.trim().to_string()));
            continue;
        }
        if line.starts_with("```") {
            let mut body = String::new();
            for inner in lines.by_ref() {
                if inner.starts_with("```") {
                    break;
                }
                body.push_str(inner);
                body.push('\n');
            }
            if let Some(file) = marker.take() {
                out.push((file, body));
            }
            continue;
        }
        if !line.trim().is_empty() {
            marker = None;
        }
    }
    out
}

/// The commands of a block, each with what its following comment expects.
fn steps(body: &str) -> Vec<(String, Expect)> {
    let mut out: Vec<(String, Expect)> = Vec::new();
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let parts = |text: &str| text.split('…').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
        if let Some(text) = line.strip_prefix("# prints:") {
            out.last_mut().expect("a command before its output").1 = Expect::Prints(parts(text));
        } else if let Some(text) = line.strip_prefix("# error:") {
            out.last_mut().expect("a command before its error").1 = Expect::Fails(parts(text));
        } else if !line.starts_with('#') {
            out.push((line.to_string(), Expect::Success));
        }
    }
    out
}

/// Whether `text` holds `parts` in this order.
fn in_order(text: &str, parts: &[String]) -> bool {
    let mut rest = text;
    for p in parts {
        match rest.find(p.as_str()) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

/// Children started by the tour (`… &`), killed by their pid at the end.
struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The local registry of docs/operations.md, every command as written, in
/// a fresh directory: certificates, the registry, push, sign, pull by
/// digest with a signature, the refusals with the messages the doc shows,
/// then `check`, `demo`, `run` and `status` with the node's configuration.
/// What the test changes: the directory (`/tmp/nri-wasm-tour`), the ports
/// (5000 and 9580, for free ones), and `run` connects to the runtime
/// simulator's socket; `policy.wasm` is the test's annotate policy. `run`'s
/// host then answers a container with the pulled policy's annotation.
#[test]
fn the_local_registry_of_the_docs_works_as_written() {
    let Some(_) = registry_binary() else { return };
    init_logging();
    let dir = tempfile::tempdir().unwrap();
    let tour = dir.path().join("tour");
    std::fs::create_dir(&tour).unwrap();
    let (port, metrics) = (free_port(), free_port());
    let doc = OPERATIONS
        .replace("/tmp/nri-wasm-tour", tour.to_str().unwrap())
        .replace("localhost:5000", &format!("localhost:{port}"))
        .replace("127.0.0.1:9580", &format!("127.0.0.1:{metrics}"));
    let blocks = tour_blocks(&doc);
    assert!(blocks.len() >= 5, "the tour's blocks: {blocks:?}");
    std::fs::copy(guests::ANNOTATE, tour.join("policy.wasm")).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(BINARY, bin.join("nri-wasm")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let socket = dir.path().join("nri.sock");
    let rt = rt();
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut background = Background(Vec::new());
    let mut sim = None;
    let mut conn = None;
    let mut ran = Vec::new();
    let bash = |line: &str, vars: &[(String, String)]| {
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", line]).current_dir(&tour).env("PATH", &path).envs(vars.iter().cloned());
        run_cmd(&mut cmd)
    };
    for (file, body) in blocks {
        if let Some(name) = file {
            std::fs::write(tour.join(name), body).unwrap();
            continue;
        }
        for (line, expect) in steps(&body) {
            ran.push(line.clone());
            if let Some(command) = line.strip_suffix('&').map(str::trim) {
                let command = command.to_string();
                let command = if command.starts_with("nri-wasm run") {
                    sim = Some(rt.block_on(nri_sim::Simulator::listen(&socket, RuntimeProfile::v0_12())).unwrap());
                    command.replacen("nri-wasm run", &format!("nri-wasm run --socket {}", socket.display()), 1)
                } else {
                    command
                };
                let child = Command::new("bash")
                    .args(["-c", &format!("exec {command}")])
                    .current_dir(&tour)
                    .env("PATH", &path)
                    .envs(vars.iter().cloned())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(
                        std::fs::File::create(dir.path().join(format!("background-{}.log", background.0.len())))
                            .unwrap(),
                    )
                    .spawn()
                    .unwrap();
                background.0.push(child);
                if command.starts_with("docker-registry") {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                        assert!(Instant::now() < deadline, "{line}: the registry did not listen within 60 s");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                } else if let Some(s) = &sim {
                    conn = Some(rt.block_on(s.accept_started(Duration::from_secs(60))));
                }
                continue;
            }
            if let Some((name, inner)) =
                line.split_once("=$(").filter(|(n, _)| n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            {
                let inner = inner.strip_suffix(')').expect("NAME=$(command)");
                let out = bash(inner, &vars);
                assert!(out.ok, "{line}: {out:?}");
                vars.push((name.to_string(), out.stdout.trim().to_string()));
                continue;
            }
            // `status` answers once the host has loaded: asked again until then.
            let line = line.replacen("nri-wasm status", &format!("nri-wasm status --address 127.0.0.1:{metrics}"), 1);
            let deadline = Instant::now() + Duration::from_secs(if line.contains("nri-wasm status") { 120 } else { 0 });
            loop {
                let out = bash(&line, &vars);
                let both = format!("{}{}", out.stdout, out.stderr);
                let met = match &expect {
                    Expect::Success => out.ok,
                    Expect::Prints(parts) => out.ok && in_order(&out.stdout, parts),
                    Expect::Fails(parts) => !out.ok && in_order(&both, parts),
                };
                if met {
                    break;
                }
                assert!(Instant::now() < deadline, "{line}: expected {expect:?}, got {out:?}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    for needed in [
        "openssl req -x509 -CA",
        "nri-wasm push",
        "nri-wasm sign --key",
        "nri-wasm pull",
        "nri-wasm check",
        "nri-wasm demo",
        "nri-wasm run",
        "nri-wasm status",
    ] {
        assert!(
            ran.iter().any(|l| l.starts_with(needed) || l.contains(&format!("$({needed}"))),
            "the tour runs {needed}: {ran:?}"
        );
    }
    // The host `run` started answers with the pulled, signed policy.
    let conn = conn.expect("the tour's host registered");
    let pod = nri_sim::workload::pod(1);
    let ctr = nri_sim::workload::container(&pod, 0);
    let reply = rt.block_on(conn.create_container(&pod, &ctr)).expect("answered");
    assert_eq!(reply.adjust.unwrap().annotations.get("example.com/annotate"), Some(&ctr.name));
    drop(background);
    drop(sim);
}
