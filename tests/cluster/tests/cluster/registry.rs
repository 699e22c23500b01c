//! A policy from a registry on the cluster: TLS with the cluster's CA, a
//! signature required, named by tag; moving the tag rolls the policy out
//! on the running pod (issue #32, test 4).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nri_wasm_cluster::cluster::{Cluster, Options};
use nri_wasm_cluster::ns::NODE_IP;
use nri_wasm_runtimes::process::{self, Process};

use crate::support::*;

const PORT: u16 = 5000;

/// Debian's docker-registry on the node, TLS with a certificate of the
/// cluster's CA, anonymous.
fn registry(c: &Cluster) -> Process {
    let bin = Path::new("/usr/bin/docker-registry");
    assert!(bin.exists(), "docker-registry is missing: run tests/cluster/install.sh");
    let dir = c.dir().join("registry");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let tls = c.pki().server_cert("registry", &format!("IP:{NODE_IP},IP:127.0.0.1")).unwrap();
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: 0.0.0.0:{PORT}\n  tls:\n    certificate: {}\n    key: {}\n",
            dir.join("data").display(),
            tls.cert.display(),
            tls.key.display()
        ),
    )
    .unwrap();
    let proc = c.spawn_in_node("docker-registry", bin, &["serve".into(), config.display().to_string()]).unwrap();
    let addr = format!("{NODE_IP}:{PORT}").parse().unwrap();
    nri_wasm_cluster::wait_for("the registry listening", Duration::from_secs(60), || {
        c.ns()
            .in_net(move || std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
            .ok()?
            .then_some(())
    })
    .unwrap();
    proc
}

/// The host's author tools (`push`, `sign`) run on the node, against the
/// registry, trusting the cluster's CA.
fn tool(c: &Cluster, args: &[&str]) -> String {
    let mut cmd = c.ns().command(host_bin());
    cmd.args(args).env_remove("RUST_LOG");
    process::run(cmd, &format!("nri-wasm {}", args.join(" "))).unwrap_or_else(|e| panic!("{e}"))
}

/// A kustomization over the project's ConfigMap overlay, unchanged, that
/// adds what an operator adds for a registry: its CA and the signers' key
/// (a ConfigMap mounted at /etc/nri-wasm/registry) and the `[registry]`
/// keys naming them, in the shipped config.toml.
fn overlay(c: &Cluster, ca: &Path, public_key: &Path) -> PathBuf {
    let dir = c.dir().join("overlay");
    std::fs::create_dir_all(&dir).unwrap();
    let repo = nri_wasm_cluster::repo().canonicalize().unwrap();
    let shipped = std::fs::read_to_string(repo.join("docs/deploy/kustomize/base/config.toml")).unwrap();
    let config = shipped.replacen(
        "[registry]\n",
        "[registry]\nca-file = \"/etc/nri-wasm/registry/ca.crt\"\npublic-keys = [\"/etc/nri-wasm/registry/author.pub\"]\n\
         tag-recheck-ms = 2000\n",
        1,
    );
    assert_ne!(config, shipped, "the shipped config.toml has a [registry] table");
    std::fs::write(dir.join("config.toml"), config).unwrap();
    std::fs::copy(ca, dir.join("ca.crt")).unwrap();
    std::fs::copy(public_key, dir.join("author.pub")).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kube-system
resources:
  - {base}
configMapGenerator:
  - name: nri-wasm-config
    behavior: replace
    files:
      - config.toml
  - name: nri-wasm-registry-trust
    files:
      - ca.crt
      - author.pub
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: DaemonSet
      metadata:
        name: nri-wasm
      spec:
        template:
          spec:
            containers:
              - name: nri-wasm
                volumeMounts:
                  - name: registry-trust
                    mountPath: /etc/nri-wasm/registry
                    readOnly: true
            volumes:
              - name: registry-trust
                configMap:
                  name: nri-wasm-registry-trust
"#,
            // Relative: kustomize takes no absolute path.
            base = relative_to(&dir, &repo.join("docs/deploy/kustomize/overlays/configmap-policies")).display()
        ),
    )
    .unwrap();
    dir
}

/// 4. A policy named by tag in a settings file of the ConfigMap, pulled over
///    TLS and checked against the signers' key; pushing and signing another
///    version under the tag reaches the running pod (no restart), and an
///    unsigned one under it is refused while the signed one keeps running.
#[test]
fn a_signed_policy_by_tag_rolls_out_when_the_tag_moves() {
    let c = start(Options::default());
    let _registry = registry(&c);
    let keys = c.dir().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let key = keys.join("author.key");
    tool(&c, &["sign", "--generate", &key.display().to_string()]);
    let public = keys.join("author.key.pub");
    assert!(public.exists());
    let ca = c.pki().ca.cert.display().to_string();
    let tag = format!("oci://{NODE_IP}:{PORT}/policies/annotate:stable");
    let publish = |wasm: &Path, sign: bool| -> String {
        let pinned = tool(&c, &["push", &wasm.display().to_string(), &tag, "--ca-file", &ca]);
        if sign {
            tool(&c, &["sign", "--key", &key.display().to_string(), &tag, "--ca-file", &ca]);
        }
        pinned.trim().rsplit_once("@sha256:").map(|(_, d)| d.to_string()).unwrap_or_else(|| panic!("{pinned}"))
    };
    // Two versions that act alike, as two builds of one policy do: the
    // second has a custom section more.
    let v1 = PathBuf::from(nri_wasm_test_support::guests::ANNOTATE);
    let v2 = keys.join("annotate-v2.wasm");
    std::fs::write(&v2, nri_wasm_runtimes::host::with_custom_section(&std::fs::read(&v1).unwrap(), "version", b"2"))
        .unwrap();
    let v3 = keys.join("annotate-v3.wasm");
    std::fs::write(&v3, nri_wasm_runtimes::host::with_custom_section(&std::fs::read(&v1).unwrap(), "version", b"3"))
        .unwrap();
    let first = publish(&v1, true);

    let settings = format!("source = \"{tag}\"\non-error = \"fail\"\nsettings = \"remote\"\n");
    set_settings_only(&c, "50-remote", &settings);
    let dir = overlay(&c, Path::new(&ca), &public);
    c.kubectl.run(&["apply", "-k", &dir.display().to_string()]).unwrap_or_else(|e| panic!("{e}"));
    rollout(&c);
    let host = host_pod(&c);
    let status = wait_status(&c, &host, "the remote policy loaded", 180, |s| all_loaded(s, 1));
    let p = policy(&status, "50-remote");
    assert!(p["manifest"].as_str().is_some_and(|m| m.contains(&first)), "{p}");
    assert!(p["signer"].as_str().is_some_and(|s| !s.is_empty()), "signed: {p}");
    let log = host_log(&c, &name(&host));
    assert_eq!(problems(&log), Vec::<String>::new(), "the image's CA bundle and the mounted CA suffice:\n{log}");
    c.kubectl.apply(&pod("remote-1", &[("app", "remote-1")], &[])).unwrap();
    let env = env_in(&c, "default", &wait_pod(&c, "remote-1"));
    assert!(env_value(&env, "POLICY_REMOTE").is_some(), "{env}");

    // The tag moves to a signed second version: rolled out, no restart.
    let moved = Instant::now();
    let second = publish(&v2, true);
    assert_ne!(second, first);
    let status = wait_status(&c, &host, "the tag's new version loaded", 120, |s| {
        policy(s, "50-remote")["manifest"].as_str().is_some_and(|m| m.contains(&second))
    });
    eprintln!("the moved tag was running {:.1} s after the push (tag-recheck-ms 2000)", since(moved));
    assert_eq!(policy(&status, "50-remote")["status"], "loaded");
    let now = host_pod(&c);
    assert_eq!((name(&now), &now["status"]["containerStatuses"][0]["restartCount"]), (name(&host), &0.into()));
    c.kubectl.apply(&pod("remote-2", &[("app", "remote-2")], &[])).unwrap();
    let env = env_in(&c, "default", &wait_pod(&c, "remote-2"));
    assert!(env_value(&env, "POLICY_REMOTE").is_some(), "{env}");

    // An unsigned third version under the tag is refused; the second runs on.
    publish(&v3, false);
    let status = wait_status(&c, &host, "the unsigned version refused", 120, |s| {
        !policy(s, "50-remote")["refused"].as_str().unwrap_or("").is_empty()
    });
    let p = policy(&status, "50-remote");
    assert!(p["manifest"].as_str().is_some_and(|m| m.contains(&second)), "the signed version keeps running: {p}");
}

/// `to` as a path relative to the directory `from` (both absolute).
fn relative_to(from: &Path, to: &Path) -> PathBuf {
    let from = from.canonicalize().unwrap();
    let mut up = PathBuf::new();
    for _ in from.components().skip(1) {
        up.push("..");
    }
    up.join(to.strip_prefix("/").unwrap())
}

/// The policies ConfigMap with one settings file and no component.
fn set_settings_only(c: &Cluster, name: &str, toml: &str) {
    let dir = c.dir().join("remote-policies");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.toml")), toml).unwrap();
    let from = format!("--from-file={}", dir.display());
    let yaml = c
        .kubectl
        .run(&["-n", NS, "create", "configmap", "nri-wasm-policies", &from, "--dry-run=client", "-o", "yaml"])
        .unwrap();
    c.kubectl.run_with(&["apply", "--server-side", "--force-conflicts", "-f", "-"], Some(&yaml)).unwrap();
}

fn wait_pod(c: &Cluster, name: &str) -> String {
    c.kubectl
        .wait_object(
            &format!("pod {name} Ready"),
            &["pod", "-n", "default", name],
            180,
            nri_wasm_cluster::kubectl::pod_ready,
        )
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}
