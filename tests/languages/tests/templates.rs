//! The project templates of the SDKs (`guest-sdk/<lang>/template/`), made
//! into a project as `nri-wasm new --lang <lang> template-check` would make
//! it and built with the project's own build script (by `build.rs`), then
//! installed as an operator would (the component with its `policy.toml`)
//! and run through the host on the project's fixture: every template does
//! what the Rust template does, within the limits its policy file sets.
#![cfg(feature = "languages")]

use std::path::{Path, PathBuf};
use std::process::Command;

use nri_wasm::policy::chain::ChainError;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::{read_spec, OnError, PolicySpec, ReadOptions};
use nri_wasm_api::api as pb;
use nri_wasm_languages::{call, chain, create, describe, facts, load, loader, settings_error, templates};

const POLICY: &str = "50-template-check";

/// The project a template became (the component is in its `target/`).
fn project(wasm: &str) -> PathBuf {
    Path::new(wasm).parent().and_then(Path::parent).expect("project/target/x.wasm").to_path_buf()
}

fn fixture(project: &Path) -> pb::CreateContainerRequest {
    let path = project.join("fixtures/create-container.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["event"], "CreateContainer");
    protobuf_json_mapping::parse_from_str(&doc["request"].to_string()).unwrap()
}

/// The spec an operator's install gives: the component beside its policy
/// file, with the file's settings and limits (the time limit aside: these
/// tests are about answers, and a busy machine is slow).
fn installed(wasm: &str) -> PolicySpec {
    let spec = read_spec(
        POLICY,
        Path::new(wasm),
        Some(&project(wasm).join("policy.toml")),
        ReadOptions::lenient(Limits::default()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    PolicySpec { limits: Limits { timeout_ms: 5_000, ..spec.limits }, ..spec }
}

fn check(lang: &str, wasm: &str) {
    let project = project(wasm);
    let req = fixture(&project);
    let spec = installed(wasm);
    let fuel = spec.limits.fuel;
    // It can refuse containers: it fails closed, as the Rust template does.
    assert_eq!(spec.on_error, OnError::Fail, "{lang}: the template's policy.toml");
    let policy = loader().load(&spec, &facts()).unwrap_or_else(|e| panic!("{lang}: {e}"));
    // It declares what its example does: its events and its capabilities.
    let events = policy.inspection().events.map(|e| e.describe());
    assert_eq!(events.as_deref(), Some("create-container"), "{lang}: the template's events file");
    let asks = policy.allowed().declared.map(|c| c.describe());
    assert_eq!(asks.as_deref(), Some("env, deny"), "{lang}: the template's capabilities file");
    // As generated: the pod's `team` label as TEAM.
    let report = call(&policy, &req);
    assert!(report.fuel_used < fuel, "{lang}: {} fuel of {fuel}", report.fuel_used);
    let resp = create(&chain(vec![policy]), &req).unwrap_or_else(|e| panic!("{lang}: {e}"));
    assert_eq!(describe(&resp), ["env TEAM=payments"], "{lang}");

    // Required, and the pod has no such label: refused.
    let required = load(POLICY, wasm, r#"{"label": "owner", "required": true}"#).unwrap();
    match create(&chain(vec![required]), &req) {
        Err(ChainError::Denied { reason, .. }) => {
            assert_eq!(reason, "pod payments/billing-worker-7f9c5 has no label owner", "{lang}")
        }
        other => panic!("{lang}: {other:?}"),
    }
    // Not required: nothing to do.
    let optional = load(POLICY, wasm, r#"{"label": "owner"}"#).unwrap();
    let resp = create(&chain(vec![optional]), &req).unwrap();
    assert!(resp.adjust.is_none(), "{lang}: {resp:?}");

    // Settings it cannot use keep it from loading.
    for (settings, want) in [
        (r#"{"label": ""}"#, Some("invalid settings: label is empty")),
        (r#"{"env": "1X"}"#, Some("invalid settings: env \"1X\" is not a variable name")),
        (r#"{"colour": "blue"}"#, None),
    ] {
        let err = load(POLICY, wasm, settings).map(|_| ()).expect_err(settings);
        let why = settings_error(&err).unwrap_or_else(|| panic!("{lang} {settings}: {err}"));
        match want {
            Some(want) => assert_eq!(why, want, "{lang}"),
            None => assert!(why.starts_with("invalid settings: ") && why.contains("colour"), "{lang}: {why}"),
        }
    }
}

#[test]
fn javascript() {
    check("JavaScript", templates::JS);
}

#[test]
fn c() {
    check("C", templates::C);
}

#[test]
fn go() {
    check("Go", templates::GO);
}

#[test]
fn python() {
    check("Python", templates::PYTHON);
}

/// The template's native tests (its `./test.sh`: the handler on the host
/// machine, no WebAssembly build) pass as generated, and fail when an
/// expectation is wrong: a copy of the project whose test expects another
/// variable must fail, naming both lines.
fn native_tests(lang: &str, wasm: &str, test_file: &str) {
    let project = project(wasm);
    let run = |dir: &Path| {
        let out = Command::new(dir.join("test.sh")).current_dir(dir).output().expect("running test.sh");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (ok, output) = run(&project);
    assert!(ok, "{lang}: the template's native tests fail:\n{output}");

    let broken = project.with_file_name("template-native-broken");
    let _ = std::fs::remove_dir_all(&broken);
    copy_dir(&project, &broken);
    let test = broken.join(test_file);
    let text = std::fs::read_to_string(&test).unwrap();
    assert!(text.contains("env TEAM=payments"), "{lang}: {test_file} expects the variable");
    std::fs::write(&test, text.replace("env TEAM=payments", "env TEAM=someone-else")).unwrap();
    let (ok, output) = run(&broken);
    assert!(!ok, "{lang}: a wrong expectation passed:\n{output}");
    assert!(output.contains("env TEAM=payments") && output.contains("env TEAM=someone-else"), "{lang}: {output}");
    std::fs::remove_dir_all(&broken).unwrap();

    // A declaration that does not list what the policy subscribes to fails
    // the native tests as the host would refuse the load.
    let undeclared = project.with_file_name("template-native-undeclared");
    let _ = std::fs::remove_dir_all(&undeclared);
    copy_dir(&project, &undeclared);
    std::fs::write(undeclared.join("events"), "# not what the handlers are\nstop-container\n").unwrap();
    let (ok, output) = run(&undeclared);
    assert!(!ok, "{lang}: a policy subscribing beyond its events file passed:\n{output}");
    let says = "configure subscribes to create-container, which the file events does not declare";
    assert!(output.contains(says), "{lang}: {output}");
    std::fs::remove_dir_all(&undeclared).unwrap();

    // JavaScript: a type error the build refuses fails the native tests
    // first, though the tests themselves would pass.
    if lang == "JavaScript" {
        let untyped = project.with_file_name("template-native-untyped");
        let _ = std::fs::remove_dir_all(&untyped);
        copy_dir(&project, &untyped);
        let policy = untyped.join("policy.js");
        let text = std::fs::read_to_string(&policy).unwrap();
        std::fs::write(&policy, format!("{text}\nexport function untyped(e) {{\n  return e;\n}}\n")).unwrap();
        let (ok, output) = run(&untyped);
        assert!(!ok, "{lang}: a policy the build refuses passed its native tests:\n{output}");
        assert!(output.contains("TS7006") && output.contains("policy.js"), "{lang}: {output}");
        assert!(!output.contains("# pass"), "{lang}: the tests ran before the type check:\n{output}");
        std::fs::remove_dir_all(&untyped).unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "target" {
            continue;
        }
        let kind = e.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), to.join(&name)).unwrap();
        } else if kind.is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

#[test]
fn javascript_native_tests() {
    native_tests("JavaScript", templates::JS, "policy.test.js");
}

#[test]
fn c_native_tests() {
    native_tests("C", templates::C, "policy_test.c");
}

#[test]
fn go_native_tests() {
    native_tests("Go", templates::GO, "main_test.go");
}

#[test]
fn python_native_tests() {
    native_tests("Python", templates::PYTHON, "test_policy.py");
}

/// Every file a MANIFEST lists exists, and the project has every file the
/// template directory holds (none forgotten in the MANIFEST).
#[test]
fn manifests_list_every_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for lang in ["js", "python", "c", "go"] {
        let template = root.join("guest-sdk").join(lang).join("template");
        let manifest = std::fs::read_to_string(template.join("MANIFEST")).unwrap();
        let mut listed: Vec<String> = manifest
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        listed.push("MANIFEST".into());
        listed.sort();
        let mut found = Vec::new();
        walk(&template, &template, &mut found);
        found.sort();
        assert_eq!(listed, found, "{lang}");
        assert!(manifest.contains("{{name}}"), "{lang}: the header names the placeholder");
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            walk(base, &path, out);
        } else {
            out.push(path.strip_prefix(base).unwrap().to_string_lossy().into_owned());
        }
    }
}
