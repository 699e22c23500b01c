//! The binary's own commands, run as a user would.

#[cfg(feature = "demo")]
use std::path::Path;
use std::process::Command;

/// The README's first command: the example policies at work. Every pod of
/// the scenario is handled as it says (the demo checks, and fails if not),
/// and the report names what each policy did.
#[cfg(feature = "demo")]
#[test]
fn demo_runs_the_example_policies_without_a_runtime() {
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm")).args(["demo", "--colour", "never"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("9 policies loaded"), "{stdout}");
    assert!(stdout.contains("95-not-a-policy") && stdout.contains("not a WebAssembly file"), "{stdout}");
    assert!(stdout.contains("registered as 10-nri-wasm"), "{stdout}");
    assert!(stdout.contains("env APP_NAME=storefront"), "{stdout}");
    assert!(stdout.contains("rlimit RLIMIT_NOFILE soft 16384 hard 65536"), "{stdout}");
    assert!(stdout.contains("40-hook-injector added OCI hooks"), "{stdout}");
    assert!(stdout.contains("every pod was handled as its scenario describes"), "{stdout}");
    assert!(stdout.contains("needs capability `cdi-devices`"), "the demo shows an ungranted capability: {stdout}");
    assert!(!stdout.contains("\x1b["), "colour with --colour never");

    // The same as JSON lines: events with each policy's outcome, a summary.
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm")).args(["demo", "--json"]).output().unwrap();
    assert!(output.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = lines.last().unwrap();
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["refused"], 4, "{summary}");
    assert_eq!(summary["created"], 7, "{summary}");
    assert_eq!(summary["mismatches"].as_array().map(Vec::len), Some(0), "{summary}");
    let denied = lines.iter().filter(|l| l["kind"] == "event" && l["result"] == "refused").count();
    assert_eq!(denied, 4);
    let by_policy = |p: &str| summary["policies"][p]["changed"].as_u64().unwrap_or(0);
    assert!(by_policy("10-pod-metadata-env") >= 7, "{summary}");
}

#[test]
fn bad_config_names_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[runtime]\nsokcet = \"/x\"\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm")).arg("run").arg("--config").arg(&path).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.toml") && stderr.contains("sokcet"), "{stderr}");
}

/// A directory of policies of your own: the demo reports what they did,
/// judges nothing, and fails (saying so last) unless every one of them
/// loaded: a directory where none loads is no demonstration.
#[cfg(feature = "demo")]
#[test]
fn demo_with_policies_of_your_own_fails_unless_every_one_loads() {
    let demo = |dir: &Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
            .args(["demo", "--pods", "1", "--colour", "never", "--policies"])
            .arg(dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let last = stdout.lines().last().unwrap_or_default().trim().to_string();
        (output.status.code(), stdout, stderr, last)
    };
    // Nothing loads: a junk file and a settings file alone.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("10-junk.wasm"), b"not a component").unwrap();
    std::fs::write(dir.path().join("20-lonely.toml"), "mode = \"audit\"\n").unwrap();
    let (code, stdout, stderr, last) = demo(dir.path());
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("0 policies loaded"), "{stdout}");
    assert!(stdout.contains("10-junk") && stdout.contains("not a WebAssembly file"), "{stdout}");
    assert!(stdout.contains("20-lonely.toml") && stdout.contains("no policy"), "{stdout}");
    assert!(stdout.contains("1 containers created, 0 refused"), "the pods still ran: {stdout}");
    assert_eq!(last, "no policy loaded (2 left out, listed at the top): the pods ran through an empty chain");
    assert!(!stdout.contains("every pod was handled as its scenario describes"), "{stdout}");

    // One loads beside the junk: still a failure, said as it is.
    install_pod_metadata_env(dir.path());
    std::fs::remove_file(dir.path().join("20-lonely.toml")).unwrap();
    let (code, stdout, stderr, last) = demo(dir.path());
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 policies loaded"), "{stdout}");
    assert_eq!(last, "1 policies loaded, 1 left out (listed at the top): the pods ran without them");

    // Every one loads: success, reported and not judged.
    std::fs::remove_file(dir.path().join("10-junk.wasm")).unwrap();
    let (code, stdout, stderr, last) = demo(dir.path());
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("env APP_NAME="), "{stdout}");
    assert!(last.starts_with("the pods ran through the 1 policies given (reported, not judged"), "{last}");

    // An empty directory is no demonstration either.
    let empty = tempfile::tempdir().unwrap();
    let (code, stdout, _, last) = demo(empty.path());
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(last, "no policy found: the pods ran through an empty chain");

    // The JSON summary says the same.
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
        .args(["demo", "--pods", "1", "--json", "--policies"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&output.stdout).lines().last().unwrap()).unwrap();
    assert_eq!((summary["succeeded"].as_bool(), summary["loaded"].as_u64()), (Some(false), Some(0)), "{summary}");
}

/// `10-pod-metadata-env`, an example, installed in `dir` with its policy file.
#[cfg(feature = "demo")]
fn install_pod_metadata_env(dir: &Path) {
    std::fs::copy(nri_wasm_components::examples::POD_METADATA_ENV, dir.join("10-pod-metadata-env.wasm")).unwrap();
    let toml = Path::new(env!("CARGO_MANIFEST_DIR")).join("../example-policies/pod-metadata-env/policy.toml");
    std::fs::copy(toml, dir.join("10-pod-metadata-env.toml")).unwrap();
}

/// With a directory of someone else's policies, the demo plays the pods of
/// a file (a captured CreateContainer) under a node's configuration and
/// judges nothing: no `unexpected:` lines, exit 0.
#[cfg(feature = "demo")]
#[test]
fn demo_plays_a_pods_file_with_a_config_and_judges_only_its_own_scenarios() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    install_pod_metadata_env(&policies);
    let config = dir.path().join("node.toml");
    // Caches of its own: root's defaults are the node's (/var/cache).
    std::fs::write(
        &config,
        format!(
            "[engine]\ncompile-timeout-ms = 600000\ncache-dir = {:?}\n[registry]\ncache-dir = {:?}\n",
            dir.path().join("cache"),
            dir.path().join("registry")
        ),
    )
    .unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/containerd-2.3.4/CreateContainer.json");
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
        .args(["demo", "--colour", "never", "--config"])
        .arg(&config)
        .arg("--pods-file")
        .arg(&fixture)
        .arg("--policies")
        .arg(&policies)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("unexpected"), "{stdout}");
    assert!(stdout.contains("1 containers created, 0 refused"), "{stdout}");
    assert!(stdout.contains("CreateContainer.json"), "the pod says where it came from: {stdout}");

    // A pods file of another event is refused, naming the file and the event.
    let other = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/containerd-2.3.4/RunPodSandbox.json");
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
        .args(["demo", "--colour", "never", "--pods-file"])
        .arg(&other)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("RunPodSandbox.json") && stderr.contains("a RunPodSandbox request"), "{stderr}");
}
