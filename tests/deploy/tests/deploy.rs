//! The deployment files of `docs/deploy` checked against the API types of
//! Kubernetes, kustomize's file format, and the host itself: its command
//! line, its configuration parser, its metrics.
//!
//! Nothing here needs a cluster or a container engine. When `kubectl` is
//! installed, the overlays are also rendered with its built-in kustomize and
//! the result checked the same way; without it that test says so and passes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nri_wasm_deploy_tests::containerfile::{self, Containerfile};
use nri_wasm_deploy_tests::dashboard;
use nri_wasm_deploy_tests::kustomize::{Kustomization, Role};
use nri_wasm_deploy_tests::objects::{self, Object};
use nri_wasm_deploy_tests::{code_blocks, deploy_dir, quantity_mib, read, repo_root};

const CONTAINER: &str = "nri-wasm";
const METRICS_PORT: i32 = 9580;
const METRICS_ADDRESS: &str = "0.0.0.0:9580";
const SOCKET_DIR: &str = "/var/run/nri";
/// The host's default compile cache as root (the container's uid).
const CACHE_DIR: &str = nri_wasm::policy::engine::ROOT_CACHE_DIR;
const STATE_DIR: &str = "/var/lib/nri-wasm/state";
const CONFIG_TABLES: &[&str] = &["plugin", "runtime", "policies", "engine", "registry", "chain", "metrics", "logging"];

fn kustomize_dir() -> PathBuf {
    deploy_dir().join("kustomize")
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root()).unwrap_or(path).display().to_string()
}

/// Every `.yaml` file under `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn kustomization(dir: &Path) -> Kustomization {
    let path = dir.join("kustomization.yaml");
    Kustomization::parse(&read(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", relative(&path)))
}

fn file_objects(path: &Path) -> Vec<Object> {
    objects::objects(&read(path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", relative(path)))
}

fn daemonset_in(objects: &[Object]) -> &DaemonSet {
    let mut sets = objects.iter().filter_map(|o| match o {
        Object::DaemonSet(d) => Some(d.as_ref()),
        _ => None,
    });
    let ds = sets.next().expect("a DaemonSet");
    assert!(sets.next().is_none(), "one DaemonSet only");
    ds
}

fn pod_spec(ds: &DaemonSet) -> &PodSpec {
    ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("the DaemonSet has a pod template")
}

fn host_container(spec: &PodSpec) -> &Container {
    spec.containers.iter().find(|c| c.name == CONTAINER).unwrap_or_else(|| panic!("a container named {CONTAINER}"))
}

fn volume<'a>(spec: &'a PodSpec, name: &str) -> &'a Volume {
    spec.volumes.iter().flatten().find(|v| v.name == name).unwrap_or_else(|| panic!("a volume named {name}"))
}

fn base_daemonset() -> DaemonSet {
    daemonset_in(&file_objects(&kustomize_dir().join("base/daemonset.yaml"))).clone()
}

fn overlays() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(kustomize_dir().join("overlays"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("kustomization.yaml").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The shipped configuration: the name of the ConfigMap the base generates,
/// its one file, and the file's key in it.
fn shipped_config() -> (String, PathBuf, String) {
    let base = kustomize_dir().join("base");
    let k = kustomization(&base);
    let [generator] = k.config_map_generator.as_slice() else { panic!("the base generates one ConfigMap") };
    let [file] = generator.files.as_slice() else { panic!("the configuration ConfigMap has one file") };
    let (key, path) = file.split_once('=').unwrap_or((file.as_str(), file.as_str()));
    (generator.name.clone(), base.join(path), key.to_string())
}

fn config_text() -> (PathBuf, String) {
    let (_, path, _) = shipped_config();
    let text = read(&path).unwrap();
    (path, text)
}

fn host_config() -> nri_wasm::config::Config {
    let (path, text) = config_text();
    nri_wasm::config::Config::parse(&text, &path)
        .unwrap_or_else(|e| panic!("the host refuses {}: {e}", relative(&path)))
}

/// `nri-wasm run --help`, as the binary prints it.
fn run_help() -> String {
    let mut cli = nri_wasm::cli::Cli::command();
    let run = cli.find_subcommand_mut("run").expect("the binary has a `run` subcommand");
    run.render_long_help().to_string()
}

/// The binary's own parser accepts `words` (after the executable's name) as
/// `nri-wasm run ...`, and every long flag in them is in `run --help`.
fn assert_host_accepts(words: &[String], origin: &str) {
    let argv = std::iter::once("nri-wasm".to_string()).chain(words.iter().cloned());
    match nri_wasm::cli::Cli::try_parse_from(argv) {
        Ok(cli) => {
            assert!(matches!(cli.command, Some(nri_wasm::cli::Command::Run(_))), "{origin}: {words:?} is not `run`")
        }
        Err(e) => panic!("{origin}: the binary refuses {words:?}:\n{e}"),
    }
    let help = run_help();
    for flag in words.iter().filter(|w| w.starts_with("--")) {
        let flag = flag.split('=').next().unwrap();
        assert!(help.contains(flag), "{origin}: {flag} is not in `nri-wasm run --help`:\n{help}");
    }
}

/// The value after `flag` in `args` (`--flag value` or `--flag=value`).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(flag).and_then(|rest| rest.strip_prefix('='))
        }
    })
}

/// The annotation the runtime's default validator is configured to accept
/// as "tolerate a missing nri-wasm" (runtimes.md).
fn toleration_annotation() -> String {
    let text = read(&deploy_dir().join("runtimes.md")).unwrap();
    let keys: BTreeSet<String> = code_blocks(&text, "toml")
        .into_iter()
        .flat_map(|block| {
            let value: toml::Value = toml::from_str(block).unwrap();
            let mut found = Vec::new();
            find_keys(&value, &mut found);
            found
        })
        .filter(|(k, _)| k.ends_with("tolerate_missing_plugins_annotation"))
        .filter_map(|(_, v)| v.as_str().map(str::to_string))
        .collect();
    assert_eq!(keys.len(), 1, "runtimes.md names one toleration annotation for every runtime: {keys:?}");
    keys.into_iter().next().unwrap()
}

/// Every key of a TOML document, at any depth, with its value.
fn find_keys(value: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
    if let Some(table) = value.as_table() {
        for (k, v) in table {
            out.push((k.clone(), v.clone()));
            find_keys(v, out);
        }
    }
}

#[test]
fn every_file_is_a_valid_kubernetes_object_or_kustomization_and_every_reference_exists() {
    let files = yaml_files(&kustomize_dir());
    assert!(files.len() >= 8, "the kustomize tree has its files: {files:?}");
    let mut referenced = BTreeSet::new();
    let mut errors = Vec::new();
    for file in &files {
        let text = read(file).unwrap();
        if file.file_name().unwrap() == "kustomization.yaml" {
            let dir = file.parent().unwrap();
            let k = match Kustomization::parse(&text) {
                Ok(k) => k,
                Err(e) => {
                    errors.push(format!("{}: {e}", relative(file)));
                    continue;
                }
            };
            let under_components = dir.parent().is_some_and(|p| p.ends_with("components"));
            if k.is_component() != under_components {
                errors.push(format!("{}: a Component lives in components/, a Kustomization elsewhere", relative(file)));
            }
            for r in k.references(dir) {
                let shown = relative(&r.path);
                let path = match r.path.canonicalize() {
                    Ok(p) => p,
                    Err(e) => {
                        errors.push(format!("{}: {:?} {shown}: {e}", relative(file), r.role));
                        continue;
                    }
                };
                match r.role {
                    Role::Resource | Role::Component if path.is_dir() => {
                        let sub = path.join("kustomization.yaml");
                        match Kustomization::parse(&read(&sub).unwrap_or_default()) {
                            Ok(s) if s.is_component() == (r.role == Role::Component) => {}
                            Ok(_) => errors.push(format!("{}: {shown} is not a {:?}", relative(file), r.role)),
                            Err(e) => errors.push(format!("{}: {shown}: {e}", relative(file))),
                        }
                    }
                    Role::Component => errors.push(format!("{}: component {shown} is not a directory", relative(file))),
                    Role::Resource | Role::Patch => {
                        if let Err(e) = objects::objects(&read(&path).unwrap_or_default()) {
                            errors.push(format!("{}: {shown}: {e}", relative(file)));
                        }
                        referenced.insert(path);
                    }
                    Role::GeneratorFile => {
                        if !path.is_file() {
                            errors.push(format!("{}: {shown} is not a file", relative(file)));
                        }
                    }
                }
            }
        } else if let Err(e) = objects::objects(&text) {
            errors.push(format!("{}: {e}", relative(file)));
        }
    }
    // A manifest no kustomization lists is never deployed: stale, or
    // forgotten in a list.
    for file in files.iter().filter(|f| f.file_name().unwrap() != "kustomization.yaml") {
        if !referenced.contains(&file.canonicalize().unwrap()) {
            errors.push(format!("{}: listed by no kustomization", relative(file)));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_misspelt_field_is_an_error() {
    let path = kustomize_dir().join("base/daemonset.yaml");
    let text = read(&path).unwrap();
    assert!(objects::objects(&text).is_ok());
    for (right, wrong) in [
        ("readOnlyRootFilesystem", "readOnlyRootFileSystem"),
        ("livenessProbe", "livenesProbe"),
        ("hostPath", "hostpath"),
    ] {
        let typo = text.replacen(right, wrong, 1);
        let e = objects::objects(&typo).expect_err(wrong);
        assert!(e.contains(wrong), "the error names the field: {e}");
    }
    let k = read(&kustomize_dir().join("base/kustomization.yaml")).unwrap();
    assert!(Kustomization::parse(&k).is_ok());
    let e = Kustomization::parse(&k.replacen("resources:", "resource:", 1)).expect_err("resource");
    assert!(e.contains("resource"), "{e}");
}

#[test]
fn the_daemonset_runs_the_host_in_external_mode_with_its_endpoint_and_paths() {
    let ds = base_daemonset();
    let spec = pod_spec(&ds);
    let c = host_container(spec);
    let args = c.args.clone().unwrap_or_default();
    assert_host_accepts(&args, "the DaemonSet's args");
    assert_eq!(flag_value(&args, "--metrics-address"), Some(METRICS_ADDRESS), "{args:?}");
    assert!(c.command.is_none(), "the image's entrypoint runs the binary");

    // The metrics endpoint: a named port, probed by name.
    let port = c.ports.iter().flatten().find(|p| p.name.as_deref() == Some("metrics")).expect("a port named metrics");
    assert_eq!(port.container_port, METRICS_PORT);
    assert_eq!(port.protocol.as_deref().unwrap_or("TCP"), "TCP");
    for (probe, path) in [(&c.liveness_probe, "/healthz"), (&c.readiness_probe, "/readyz")] {
        let get =
            probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap_or_else(|| panic!("an httpGet probe of {path}"));
        assert_eq!(get.path.as_deref(), Some(path));
        assert!(
            matches!(&get.port, IntOrString::String(s) if s == "metrics")
                || matches!(get.port, IntOrString::Int(METRICS_PORT)),
            "the {path} probe uses the metrics port: {:?}",
            get.port
        );
    }
    let annotations = ds.spec.as_ref().unwrap().template.metadata.as_ref().and_then(|m| m.annotations.clone()).unwrap();
    assert_eq!(annotations.get("prometheus.io/scrape").map(String::as_str), Some("true"));
    assert_eq!(annotations.get("prometheus.io/port"), Some(&METRICS_PORT.to_string()));
    assert_eq!(annotations.get("prometheus.io/path").map(String::as_str), Some("/metrics"));
    let tolerate = toleration_annotation();
    assert_eq!(
        annotations.get(&tolerate).map(String::as_str),
        Some("true"),
        "the pod tolerates its own absence ({tolerate}), or a runtime that requires nri-wasm would never start it"
    );

    // Volumes: the socket's directory, the cache and the state on the node.
    let mounts: BTreeMap<&str, _> = c.volume_mounts.iter().flatten().map(|m| (m.name.as_str(), m)).collect();
    let host_path = |name: &str| volume(spec, name).host_path.clone().unwrap_or_else(|| panic!("{name} is a hostPath"));
    let socket = host_path("nri-socket-dir");
    assert_eq!(socket.path, SOCKET_DIR);
    assert_eq!(socket.type_.as_deref(), Some("Directory"));
    assert_eq!(mounts["nri-socket-dir"].mount_path, SOCKET_DIR);
    assert_eq!(mounts["nri-socket-dir"].read_only, Some(true));
    for (name, path) in [("cache", CACHE_DIR), ("state", STATE_DIR)] {
        let v = host_path(name);
        assert_eq!(v.path, path);
        assert_eq!(v.type_.as_deref(), Some("DirectoryOrCreate"));
        assert_eq!(mounts[name].mount_path, path);
        assert_ne!(mounts[name].read_only, Some(true), "the host writes {path}");
    }
    assert_eq!(mounts["policies"].read_only, Some(true));

    // The configuration: the generated ConfigMap's file, where --config says.
    let (generated, _, key) = shipped_config();
    let config = volume(spec, "config").config_map.clone().expect("config is a ConfigMap volume");
    assert_eq!(config.name, generated);
    assert_eq!(mounts["config"].sub_path.as_deref(), Some(key.as_str()));
    assert_eq!(mounts["config"].mount_path, "/etc/nri-wasm/config.toml");
    assert_eq!(flag_value(&args, "--config"), Some("/etc/nri-wasm/config.toml"));
    assert_eq!(mounts["config"].read_only, Some(true));

    // The configuration and the mounts agree.
    let conf = host_config();
    let policies = conf.policies.dir.clone().expect("a policy directory");
    assert_eq!(mounts["policies"].mount_path, policies.to_str().unwrap());
    assert_eq!(conf.engine.cache_dir.as_deref(), Some(Path::new(CACHE_DIR)));
    // The root file system is read-only: whatever the host writes is in a
    // mounted directory, the registry's cache too (issue #32).
    let registry_cache = conf.registry.cache_dir.clone().expect("a registry cache");
    assert!(registry_cache.starts_with(CACHE_DIR), "{}", registry_cache.display());
    assert_eq!(conf.policies.state_dir.as_deref(), Some(Path::new(STATE_DIR)));
    assert_eq!(conf.runtime.socket.parent(), Some(Path::new(SOCKET_DIR)));
    // Every mount has its volume (the policies' comes from an overlay).
    for m in mounts.keys().filter(|m| **m != "policies") {
        volume(spec, m);
    }
}

#[test]
fn the_pod_is_locked_down_as_documented() {
    let ds = base_daemonset();
    let spec = pod_spec(&ds);
    let c = host_container(spec);
    let sc = c.security_context.as_ref().expect("a container securityContext");
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let caps = sc.capabilities.as_ref().expect("capabilities");
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert!(caps.add.as_ref().is_none_or(Vec::is_empty), "no capability is added back");
    let pod_sc = spec.security_context.as_ref().expect("a pod securityContext");
    let seccomp = sc.seccomp_profile.as_ref().or(pod_sc.seccomp_profile.as_ref()).expect("a seccomp profile");
    assert_eq!(seccomp.type_, "RuntimeDefault");
    // Root, explicitly and only for the socket (see the comment in the
    // manifest): no capability, no privilege.
    for (user, non_root) in [(sc.run_as_user, sc.run_as_non_root), (pod_sc.run_as_user, pod_sc.run_as_non_root)] {
        assert_eq!(user, Some(0));
        assert_eq!(non_root, Some(false));
    }
    assert!(spec.host_users.is_none_or(|h| h), "a user namespace would lock uid 0 out of the socket");
    for (what, on) in [("hostNetwork", spec.host_network), ("hostPID", spec.host_pid), ("hostIPC", spec.host_ipc)] {
        assert_ne!(on, Some(true), "{what}");
    }
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(spec.priority_class_name.as_deref(), Some("system-node-critical"));
    let everywhere = spec
        .tolerations
        .iter()
        .flatten()
        .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none() && t.effect.is_none());
    assert!(everywhere, "a toleration of every taint: {:?}", spec.tolerations);

    let strategy = ds.spec.as_ref().unwrap().update_strategy.clone().expect("an update strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.expect("rollingUpdate");
    assert!(
        matches!(rolling.max_surge, Some(IntOrString::Int(0))),
        "never two hosts on one node: {:?}",
        rolling.max_surge
    );
    assert!(rolling.max_unavailable.is_some());

    // Resources: requests, a memory limit that fits the compiler, no CPU limit.
    let resources = c.resources.as_ref().expect("resources");
    let requests = resources.requests.as_ref().expect("requests");
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"), "{requests:?}");
    let limits = resources.limits.as_ref().expect("limits");
    assert!(!limits.contains_key("cpu"), "no CPU limit, as the manifest explains");
    let limit_mib = quantity_mib(&limits["memory"].0).unwrap();
    let request_mib = quantity_mib(&requests["memory"].0).unwrap();
    assert!(request_mib >= 64 && request_mib <= limit_mib, "request {request_mib} MiB, limit {limit_mib} MiB");
    let conf = host_config();
    let loads = u64::from(nri_wasm::policy::engine::MAX_CONCURRENT_COMPILES);
    let compiling = loads * conf.engine.compile_memory_mib;
    let host = 64 + u64::from(conf.engine.max_concurrent_calls) * conf.policies.limits().memory_mib;
    assert!(
        limit_mib >= compiling + host,
        "the memory limit ({limit_mib} MiB) must hold {loads} compiling children of [engine] compile-memory-mib \
         {} MiB and the host ({host} MiB): lower compile-memory-mib or raise the limit",
        conf.engine.compile_memory_mib
    );
}

#[test]
fn each_overlay_supplies_the_policy_directory() {
    let base = base_daemonset();
    let mounts: BTreeSet<String> =
        host_container(pod_spec(&base)).volume_mounts.iter().flatten().map(|m| m.name.clone()).collect();
    let mut kinds = BTreeSet::new();
    for overlay in overlays() {
        let k = kustomization(&overlay);
        assert!(k.resources.iter().any(|r| r.trim_end_matches('/') == "../../base"), "{}", relative(&overlay));
        let patched: Vec<Volume> = k
            .patches
            .iter()
            .filter_map(|p| p.path.as_ref())
            .flat_map(|p| file_objects(&overlay.join(p)))
            .filter_map(|o| match o {
                Object::DaemonSet(d) => pod_spec(&d).volumes.clone(),
                _ => None,
            })
            .flatten()
            .collect();
        let policies = patched.iter().find(|v| v.name == "policies").expect("the overlay adds the policies volume");
        match (&policies.config_map, &policies.host_path) {
            (Some(cm), None) => {
                assert_eq!(cm.name, "nri-wasm-policies");
                assert_eq!(cm.optional, Some(false), "a missing ConfigMap must not mean an empty chain");
                kinds.insert("configMap");
            }
            (None, Some(hp)) => {
                assert_eq!(hp.path, "/etc/nri-wasm/policies");
                assert_eq!(hp.type_.as_deref(), Some("Directory"), "a missing directory must not mean an empty chain");
                kinds.insert("hostPath");
            }
            other => panic!("{}: policies is one ConfigMap or one hostPath: {other:?}", relative(&overlay)),
        }
        let volumes: BTreeSet<String> =
            pod_spec(&base).volumes.iter().flatten().chain(&patched).map(|v| v.name.clone()).collect();
        assert!(mounts.is_subset(&volumes), "{}: mounts {mounts:?}, volumes {volumes:?}", relative(&overlay));
    }
    assert_eq!(kinds, BTreeSet::from(["configMap", "hostPath"]));
}

#[test]
fn the_configuration_is_one_the_host_accepts() {
    let (path, text) = config_text();
    let value: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", relative(&path)));
    for table in value.keys() {
        assert!(CONFIG_TABLES.contains(&table.as_str()), "[{table}] is not a table of the host's configuration");
    }
    let conf = host_config();
    assert_eq!(conf.plugin.name, "nri-wasm");
    assert_eq!(conf.runtime.socket, Path::new("/var/run/nri/nri.sock"));
    assert!(conf.policies.strict_permissions, "policy files owned by root and writable by no one else");
}

/// Renders a kustomization with kubectl's kustomize; `None` without kubectl.
fn render(dir: &Path) -> Option<Vec<Object>> {
    let out = match std::process::Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("kubectl: {e}"),
    };
    assert!(out.status.success(), "kubectl kustomize {}:\n{}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    Some(objects::objects(&text).unwrap_or_else(|e| panic!("kubectl kustomize {}: {e}\n{text}", dir.display())))
}

#[test]
fn rendered_overlays_are_complete_and_consistent() {
    // Each overlay, and the hostPath one with the ServiceMonitor component,
    // composed in a kustomization of a temporary directory (kustomize takes
    // relative paths only).
    let temp = tempfile::tempdir().unwrap();
    let up = "../".repeat(temp.path().components().count() - 1);
    let to = |p: &Path| format!("{up}{}", p.strip_prefix("/").unwrap().display());
    std::fs::write(
        temp.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
            to(&kustomize_dir().join("overlays/hostpath-policies")),
            to(&kustomize_dir().join("components/service-monitor")),
        ),
    )
    .unwrap();
    let mut targets = overlays();
    targets.push(temp.path().to_path_buf());
    let base = kustomization(&kustomize_dir().join("base"));
    let image = &base.images[0];
    let want_image = format!("{}:{}", image.new_name.as_deref().unwrap(), image.new_tag.as_deref().unwrap());
    for target in targets {
        let Some(objects) = render(&target) else {
            eprintln!("kubectl is not installed: the overlays were checked file by file only");
            return;
        };
        let shown = relative(&target);
        let ds = daemonset_in(&objects);
        let spec = pod_spec(ds);
        let c = host_container(spec);
        assert_eq!(c.image.as_deref(), Some(want_image.as_str()), "{shown}");
        for o in &objects {
            let ns = match o {
                Object::DaemonSet(x) => x.metadata.namespace.as_deref(),
                Object::ConfigMap(x) => x.metadata.namespace.as_deref(),
                Object::Service(x) => x.metadata.namespace.as_deref(),
                Object::ServiceMonitor(x) => x.metadata.namespace.as_deref(),
                Object::Pod(x) => x.metadata.namespace.as_deref(),
            };
            assert_eq!(ns, Some("kube-system"), "{shown}: {} {:?}", o.kind(), o.name());
        }
        // The configuration volume names the generated ConfigMap, whose
        // file the host accepts.
        let config = volume(spec, "config").config_map.clone().unwrap();
        let generated = objects
            .iter()
            .find_map(|o| match o {
                Object::ConfigMap(cm) if cm.metadata.name.as_deref() == Some(config.name.as_str()) => Some(cm),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{shown}: the ConfigMap {} is rendered", config.name));
        let (_, _, key) = shipped_config();
        let text = generated.data.as_ref().and_then(|d| d.get(&key)).expect("the configuration file");
        nri_wasm::config::Config::parse(text, Path::new(&key)).unwrap();
        let volumes: BTreeSet<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        for m in c.volume_mounts.iter().flatten() {
            assert!(volumes.contains(m.name.as_str()), "{shown}: mount {} has no volume", m.name);
        }
        // Prometheus Operator: ServiceMonitor -> Service -> the pods' port.
        let services: Vec<_> = objects
            .iter()
            .filter_map(|o| match o {
                Object::Service(s) => Some(s),
                _ => None,
            })
            .collect();
        for sm in objects.iter().filter_map(|o| match o {
            Object::ServiceMonitor(sm) => Some(sm),
            _ => None,
        }) {
            let want = sm.spec.selector.match_labels.clone().unwrap_or_default();
            let svc = services
                .iter()
                .find(|s| {
                    let labels = s.metadata.labels.clone().unwrap_or_default();
                    want.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
                .unwrap_or_else(|| panic!("{shown}: the ServiceMonitor selects a Service"));
            let svc_spec = svc.spec.as_ref().unwrap();
            let pod_labels = ds.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().labels.clone().unwrap();
            for (k, v) in svc_spec.selector.iter().flatten() {
                assert_eq!(pod_labels.get(k), Some(v), "{shown}: the Service selects the DaemonSet's pods");
            }
            for ep in &sm.spec.endpoints {
                assert_eq!(ep.path.as_deref(), Some("/metrics"));
                let port = svc_spec
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == ep.port.as_deref())
                    .unwrap_or_else(|| panic!("{shown}: the Service has the port {:?}", ep.port));
                assert_eq!(port.port, METRICS_PORT);
                assert_eq!(port.target_port, Some(IntOrString::String("metrics".into())));
            }
            assert!(sm.spec.namespace_selector.as_ref().is_some_and(|n| n.match_names == ["kube-system"]));
        }
    }
}

#[test]
fn the_containerfile_builds_the_host_without_demo_and_runs_it() {
    let path = deploy_dir().join("Containerfile");
    let file = Containerfile::parse(&read(&path).unwrap()).unwrap();
    assert!(file.stages.len() >= 2, "a builder stage and a runtime stage");

    // The toolchain is the repository's.
    let toolchain: toml::Table = toml::from_str(&read(&repo_root().join("rust-toolchain.toml")).unwrap()).unwrap();
    let channel = toolchain["toolchain"]["channel"].as_str().unwrap();
    assert_eq!(file.global_arg("RUST_VERSION").as_deref(), Some(channel), "RUST_VERSION is rust-toolchain.toml's");

    // The build: the host's package, release, locked, without `demo`.
    let host: toml::Table = toml::from_str(&read(&repo_root().join("host/Cargo.toml")).unwrap()).unwrap();
    let package = host["package"]["name"].as_str().unwrap();
    let bins = host["bin"].as_array().unwrap();
    let bin = bins.iter().find_map(|b| b["name"].as_str()).unwrap();
    let defaults: Vec<&str> =
        host["features"]["default"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(defaults, ["demo"], "--no-default-features drops only `demo`");
    let builder = file.stage("builder").expect("a stage named builder");
    let commands: Vec<Vec<String>> = builder.all("RUN").flat_map(|r| containerfile::shell_commands(&r.args)).collect();
    let build = commands
        .iter()
        .find(|c| c.first().map(String::as_str) == Some("cargo") && c.get(1).map(String::as_str) == Some("build"))
        .expect("a cargo build");
    let words: BTreeSet<&str> = build.iter().map(String::as_str).collect();
    for flag in ["--release", "--locked", "--no-default-features"] {
        assert!(words.contains(flag), "cargo build {flag}: {build:?}");
    }
    let p = build.iter().position(|w| w == "-p" || w == "--package").expect("cargo build -p");
    assert_eq!(build[p + 1], package);
    assert!(!words.contains("--features") && !words.contains("--all-features"), "{build:?}");
    assert!(
        builder.all("ENV").any(|e| e.args.contains("RUSTUP_TOOLCHAIN=${RUST_VERSION}")),
        "rustup uses the image's toolchain instead of installing rust-toolchain.toml's targets"
    );
    for setting in ["CARGO_PROFILE_RELEASE_DEBUG=false", "CARGO_PROFILE_RELEASE_STRIP=symbols"] {
        assert!(
            builder.all("ENV").any(|e| e.args.split_whitespace().any(|w| w == setting)),
            "the image's binary is built stripped ({setting})"
        );
    }
    assert!(builder.all("COPY").any(|c| c.args.split_whitespace().collect::<Vec<_>>() == [".", "."]));

    // The binary goes from target/release/<bin> to the runtime stage.
    let built = format!("target/release/{bin}");
    let out = commands
        .iter()
        .filter(|c| matches!(c.first().map(String::as_str), Some("install" | "cp")))
        .find(|c| c.contains(&built))
        .and_then(|c| c.last().cloned())
        .unwrap_or_else(|| panic!("the builder copies {built} out of the cache"));
    let runtime = file.stages.last().unwrap();
    assert!(runtime.name.as_deref() != Some("builder"));
    let copies: Vec<_> = runtime.all("COPY").map(|c| containerfile::copy_args(&c.args)).collect();
    assert_eq!(copies.len(), 2, "the runtime stage gets two things: the binary and a CA bundle");
    let (from, sources, dest) = &copies[0];
    assert_eq!(from.as_deref(), Some("builder"));
    assert_eq!(sources, &[out]);
    // The registry client needs roots (issue #32: "builder error" without).
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    let (ca_from, ca_sources, ca_dest) = &copies[1];
    assert_eq!(
        (ca_from.as_deref(), ca_sources.as_slice(), ca_dest.as_str()),
        (Some("builder"), &[bundle.to_string()][..], bundle)
    );
    assert!(runtime.all("RUN").next().is_none(), "nothing runs in the runtime stage (it has no shell)");

    // It runs `nri-wasm run`, with flags the binary has.
    let entry = containerfile::exec_form(&runtime.last("ENTRYPOINT").expect("an ENTRYPOINT").args).unwrap();
    assert_eq!(entry, std::slice::from_ref(dest));
    assert!(dest.ends_with(&format!("/{bin}")));
    let cmd = containerfile::exec_form(&runtime.last("CMD").expect("a CMD").args).unwrap();
    assert_eq!(cmd.first().map(String::as_str), Some("run"));
    assert_host_accepts(&cmd, "the Containerfile's CMD");

    // The build context leaves out what it must not send.
    let ignore = read(&deploy_dir().join("Containerfile.dockerignore")).unwrap();
    let ignored: BTreeSet<&str> =
        ignore.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    for dir in ["target", ".git"] {
        assert!(ignored.contains(dir), "Containerfile.dockerignore leaves out {dir}");
    }
}

#[test]
fn the_runtime_snippets_parse_and_agree_with_the_deployment() {
    let text = read(&deploy_dir().join("runtimes.md")).unwrap();
    let tomls = code_blocks(&text, "toml");
    assert!(tomls.len() >= 5, "containerd 1.7, 2.x, its validator, CRI-O and its validator");
    let name = host_config().plugin.name;
    let mut required = 0;
    let mut sections = BTreeSet::new();
    for block in &tomls {
        let value: toml::Value = toml::from_str(block).unwrap_or_else(|e| panic!("runtimes.md: {e}\n{block}"));
        let mut keys = Vec::new();
        find_keys(&value, &mut keys);
        for (k, v) in &keys {
            if k.ends_with("required_plugins") {
                let names: Vec<&str> = v.as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
                assert!(names.contains(&name.as_str()), "{k} names the plugin {name:?}: {names:?}");
                required += 1;
            }
            if ["io.containerd.nri.v1.nri", "nri"].contains(&k.as_str()) {
                sections.insert(k.clone());
            }
        }
    }
    assert_eq!(required, 2, "a required_plugins list for containerd and for CRI-O");
    assert_eq!(sections, BTreeSet::from(["io.containerd.nri.v1.nri".to_string(), "nri".to_string()]));
    toleration_annotation();

    // The example pod: a valid Pod whose annotation lists the plugin.
    let yamls = code_blocks(&text, "yaml");
    assert!(!yamls.is_empty());
    for block in yamls {
        for o in objects::objects(block).unwrap_or_else(|e| panic!("runtimes.md: {e}\n{block}")) {
            let Object::Pod(pod) = o else { continue };
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let (_, list) = annotations
                .iter()
                .find(|(k, _)| k.starts_with("required-plugins.noderesource.dev"))
                .expect("the required-plugins annotation");
            let names: Vec<String> = serde_yaml::from_str(list).expect("a YAML list of plugin names");
            assert!(names.contains(&name), "{names:?}");
        }
    }
}

#[test]
fn the_dashboard_reads_only_the_hosts_metrics_and_shows_them_all() {
    let path = deploy_dir().join("grafana-dashboard.json");
    let dash: serde_json::Value = serde_json::from_str(&read(&path).unwrap()).unwrap();
    let queries = dashboard::queries(&dash);
    assert!(!queries.is_empty());
    let mut used = BTreeSet::new();
    let mut problems = Vec::new();
    for (title, expr) in &queries {
        let usage = dashboard::check(expr);
        problems.extend(usage.problems.iter().map(|p| format!("{title}: {p}\n  {expr}")));
        used.extend(usage.metrics);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let all: BTreeSet<&str> = dashboard::METRICS.iter().map(|m| m.name).collect();
    let unused: Vec<_> = all.difference(&used).collect();
    assert!(unused.is_empty(), "metrics no panel shows: {unused:?}");

    // Variables: every one used is defined; the host list comes from a metric.
    let variables: BTreeMap<&str, &serde_json::Value> =
        dash["templating"]["list"].as_array().unwrap().iter().map(|v| (v["name"].as_str().unwrap(), v)).collect();
    for (title, expr) in &queries {
        for var in expr.split('$').skip(1).map(|r| r.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap())
        {
            assert!(var.starts_with("__") || variables.contains_key(var), "{title}: ${var} is not defined");
        }
    }
    for v in variables.values().filter(|v| v["type"] == "query") {
        let q = v["definition"].as_str().unwrap();
        let metric = q.strip_prefix("label_values(").and_then(|r| r.split(',').next()).unwrap();
        assert!(dashboard::metric_of(metric.trim()).is_some(), "{q}");
    }

    // Panels: unique ids, the data source variable, described in the README.
    let readme = read(&deploy_dir().join("README.md")).unwrap();
    let mut ids = BTreeSet::new();
    for p in dashboard::panels(&dash) {
        let title = p["title"].as_str().unwrap();
        assert!(ids.insert(p["id"].as_u64().unwrap()), "{title}: a unique id");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        assert!(readme.contains(&format!("#### {title}\n")), "README.md describes the panel {title:?}");
    }
}

#[test]
fn the_metric_list_is_the_hosts() {
    // The families the host exposes once each has a sample (a family of
    // labelled series shows no `# TYPE` line before its first), against
    // the list the dashboard is checked with.
    use nri_wasm::policy::chain::{Chain, ChainSettings, Observer, Outcome, Step};
    let metrics = nri_wasm::metrics::Metrics::new();
    metrics.event("CreateContainer", "ok", std::time::Duration::from_micros(5));
    metrics.answer("CreateContainer", std::time::Duration::from_micros(25));
    metrics.budget_overrun();
    metrics.set_registered(true, 2, 0);
    metrics.reload(true);
    metrics.chain_installed(&std::sync::Arc::new(Chain::new(Vec::new(), ChainSettings::default())), false);
    let step = Step {
        policy: "10-p".into(),
        audit: false,
        fuel: 7,
        elapsed: std::time::Duration::from_micros(3),
        outcome: Outcome::Unchanged,
    };
    metrics.step("CreateContainer", "ns/pod/ctr", &step);
    let text = metrics.encode();
    let mut exposed = BTreeMap::new();
    // One series per loaded policy: none in an empty chain.
    let source = include_str!("../../../host/src/metrics/mod.rs");
    if source.contains("\"nri_wasm_policy_info\"") {
        exposed.insert("nri_wasm_policy_info".to_string(), "gauge".to_string());
    }
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            exposed.insert(name.to_string(), kind.to_string());
        }
    }
    let mut listed = BTreeMap::new();
    for m in dashboard::METRICS {
        let (family, kind) = match m.kind {
            dashboard::Kind::Counter => (m.name.strip_suffix("_total").unwrap(), "counter"),
            dashboard::Kind::Gauge => (m.name, "gauge"),
            dashboard::Kind::Histogram => (m.name, "histogram"),
        };
        listed.insert(family.to_string(), kind.to_string());
    }
    assert_eq!(exposed, listed, "the host's metrics (left) and the documented ones (right)");
}

#[test]
fn helpers_read_quantities_and_containerfiles() {
    assert_eq!(quantity_mib("4608Mi").unwrap(), 4608);
    assert_eq!(quantity_mib("2Gi").unwrap(), 2048);
    assert_eq!(quantity_mib("1048576").unwrap(), 1);
    assert!(quantity_mib("lots").is_err());
    let f = Containerfile::parse(
        "# syntax=docker/dockerfile:1\nARG A=1\nFROM x AS b\nRUN --mount=type=cache,target=/t \\\n    a b \\\n && c\nFROM y\nCOPY --from=b /o /p\n",
    )
    .unwrap();
    assert_eq!(f.global_arg("A").as_deref(), Some("1"));
    assert_eq!(f.stages.len(), 2);
    let run = &f.stage("b").unwrap().instructions[0];
    assert_eq!(containerfile::shell_commands(&run.args), [vec!["a", "b"], vec!["c"]]);
    assert_eq!(
        containerfile::copy_args(&f.stages[1].instructions[0].args),
        (Some("b".into()), vec!["/o".into()], "/p".into())
    );
    assert!(Containerfile::parse("RUN x\n").is_err());
    let bad = dashboard::check("sum by (nope) (rate(nri_wasm_events_total{result=\"maybe\"}[5m]))");
    assert_eq!(bad.problems.len(), 2, "{:?}", bad.problems);
    assert!(!dashboard::check("rate(nri_wasm_unknown_total[5m])").problems.is_empty());
    assert!(!dashboard::check("sum(rate(nri_wasm_events_total[5m])").problems.is_empty());
}

/// `build-image.sh` makes, from any binary, an OCI archive whose image has
/// the name the kustomization gives the DaemonSet, the binary where the
/// Containerfile puts it with the libraries it links, and a CA bundle; the
/// same inputs give the same bytes. (The cluster suite runs the image.)
#[test]
fn build_image_packs_the_binary_its_libraries_and_a_ca_bundle_reproducibly() {
    let script = deploy_dir().join("build-image.sh");
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").unwrap();
    // A dynamically linked program of the machine stands in for the host.
    let binary = Path::new("/bin/true");
    let build = |out: &Path| {
        let output = std::process::Command::new("bash")
            .arg(&script)
            .args(["--binary", binary.to_str().unwrap(), "--ca-bundle", ca.to_str().unwrap(), "--output"])
            .arg(out)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        std::fs::read(out).unwrap()
    };
    let (a, b) = (dir.path().join("a.tar"), dir.path().join("b.tar"));
    assert_eq!(build(&a), build(&b), "reproducible");

    let tar = |args: &[&str], dir: &Path| {
        let out = std::process::Command::new("tar").args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let layout = dir.path().join("layout");
    std::fs::create_dir(&layout).unwrap();
    tar(&["xf", a.to_str().unwrap()], &layout);
    let index: serde_json::Value = serde_json::from_str(&read(&layout.join("index.json")).unwrap()).unwrap();
    let base = kustomization(&kustomize_dir().join("base"));
    let image = &base.images[0];
    let expected = format!("{}:{}", image.new_name.as_deref().unwrap(), image.new_tag.as_deref().unwrap());
    let manifest = &index["manifests"][0];
    assert_eq!(manifest["annotations"]["io.containerd.image.name"], expected.as_str());
    let blob = |digest: &str| layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob(manifest["digest"].as_str().unwrap())).unwrap()).unwrap();
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob(manifest["config"]["digest"].as_str().unwrap())).unwrap()).unwrap();
    let file = Containerfile::parse(&read(&deploy_dir().join("Containerfile")).unwrap()).unwrap();
    let runtime = file.stages.last().unwrap();
    let entry = containerfile::exec_form(&runtime.last("ENTRYPOINT").unwrap().args).unwrap();
    assert_eq!(config["config"]["Entrypoint"], serde_json::json!(entry), "the Containerfile's entry point");
    let layer = blob(manifest["layers"][0]["digest"].as_str().unwrap());
    let files = tar(&["tf", layer.to_str().unwrap()], dir.path());
    let files: BTreeSet<&str> = files.lines().map(|l| l.trim_start_matches("./")).collect();
    assert!(files.contains(entry[0].trim_start_matches('/')), "{files:?}");
    assert!(files.contains("etc/ssl/certs/ca-certificates.crt"), "{files:?}");
    assert!(files.iter().any(|f| f.contains("libc.so")), "the libraries the binary links: {files:?}");
}
