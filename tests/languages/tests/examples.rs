//! The examples of `example-policies/<lang>/` through the real host, held
//! to the cases of the Rust examples they port (`example-policies/<name>/
//! src/cases.rs`, included here as `tests/e2e/tests/examples.rs` includes
//! them): the captured containerd CreateContainer, edited as the case
//! says, must give exactly the case's adjustments (and the bytes the Rust
//! example's reply has), its denial, or its settings error. The ports'
//! own native tests (each SDK's test host, no WebAssembly) pass, and fail
//! when an expectation is wrong.
#![cfg(feature = "languages")]

use std::path::{Path, PathBuf};
use std::process::Command;

use nri_wasm::policy::chain::ChainError;
use nri_wasm::policy::engine::CompiledPolicy;
use nri_wasm_api::api as pb;
use nri_wasm_languages::{chain, create, describe, examples, load, settings_error};
use protobuf::Message;

use nri_wasm_sdk::testing::cases::{Case, Edit, Expect};
use nri_wasm_test_support::cases::request;

mod deny_host_sockets {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/deny-host-sockets/src/cases.rs");
}

mod allowed_images {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/allowed-images/src/cases.rs");
}

mod pod_metadata_env {
    use super::{Case, Edit, Expect};
    include!("../../../example-policies/pod-metadata-env/src/cases.rs");
}

/// A port: its component and the Rust example's name, component and cases.
struct Port {
    lang: &'static str,
    wasm: &'static str,
    policy: &'static str,
    rust: &'static str,
    cases: &'static [Case],
}

/// The policies the case puts before the example, loaded as `replay` guests.
fn earlier(case: &Case) -> Vec<CompiledPolicy> {
    nri_wasm_test_support::cases::earlier(case)
        .into_iter()
        .map(|(name, script)| load(name, nri_wasm_e2e::guests::REPLAY, &script).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// The chain's answer with `wasm` as the example: the reply, or the denial.
fn run(port: &Port, wasm: &str, case: &Case) -> Result<pb::CreateContainerResponse, String> {
    let mut policies = earlier(case);
    policies.push(load(port.policy, wasm, case.settings).unwrap_or_else(|e| panic!("{}: {e}", case.name)));
    match create(&chain(policies), &request(case)) {
        Ok(resp) => Ok(resp),
        Err(ChainError::Denied { policy, reason, .. }) if policy == port.policy => Err(reason),
        Err(other) => panic!("case {:?}: {other}", case.name),
    }
}

fn check(port: &Port) {
    assert!(!port.cases.is_empty());
    let mut problems = Vec::new();
    // The SDK records the same capability and event declarations as the
    // Rust example's (from the example's `capabilities` and `events` files,
    // `guest-sdk/declare.sh`).
    let declared = |wasm: &str| {
        let policy = load(port.policy, wasm, port.cases[0].settings).unwrap_or_else(|e| panic!("{e}"));
        (policy.allowed().declared, policy.inspection().events)
    };
    let ((ours, our_events), (rust, rust_events)) = (declared(port.wasm), declared(port.rust));
    if ours.is_none() || ours != rust {
        problems.push(format!("{}: declares {ours:?}, the Rust example {rust:?}", port.lang));
    }
    if our_events.is_none() || our_events != rust_events {
        problems.push(format!("{}: declares the events {our_events:?}, the Rust example {rust_events:?}", port.lang));
    }
    for case in port.cases {
        let what = format!("{} case {:?}", port.lang, case.name);
        match case.expect {
            Expect::Settings(error) => match load(port.policy, port.wasm, case.settings) {
                Err(e) if settings_error(&e).as_deref() == Some(error) => {}
                Err(other) => problems.push(format!("{what}: {other}")),
                Ok(_) => problems.push(format!("{what}: the settings were accepted")),
            },
            Expect::Deny(reason) => match run(port, port.wasm, case) {
                Err(got) if got == reason => {}
                other => problems.push(format!("{what}: want the denial {reason:?}, got {other:?}")),
            },
            Expect::Lines(lines) => {
                let mut want: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                want.sort();
                match run(port, port.wasm, case) {
                    Ok(resp) => {
                        if describe(&resp) != want {
                            problems.push(format!("{what}: want {want:?}, got {:?}", describe(&resp)));
                        }
                        let rust = run(port, port.rust, case).expect("the Rust example answers");
                        if resp.write_to_bytes().unwrap() != rust.write_to_bytes().unwrap() {
                            problems.push(format!("{what}: the reply's bytes differ from the Rust example's"));
                        }
                    }
                    Err(reason) => problems.push(format!("{what}: denied: {reason}")),
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn deny_host_sockets_in_javascript() {
    check(&Port {
        lang: "JavaScript",
        wasm: examples::JS_DENY_HOST_SOCKETS,
        policy: deny_host_sockets::POLICY,
        rust: nri_wasm_components::examples::DENY_HOST_SOCKETS,
        cases: deny_host_sockets::CASES,
    });
}

#[test]
fn deny_host_sockets_in_go() {
    check(&Port {
        lang: "Go",
        wasm: examples::GO_DENY_HOST_SOCKETS,
        policy: deny_host_sockets::POLICY,
        rust: nri_wasm_components::examples::DENY_HOST_SOCKETS,
        cases: deny_host_sockets::CASES,
    });
}

#[test]
fn pod_metadata_env_in_c() {
    check(&Port {
        lang: "C",
        wasm: examples::C_POD_METADATA_ENV,
        policy: pod_metadata_env::POLICY,
        rust: nri_wasm_components::examples::POD_METADATA_ENV,
        cases: pod_metadata_env::CASES,
    });
}

#[test]
fn pod_metadata_env_in_python() {
    check(&Port {
        lang: "Python",
        wasm: examples::PYTHON_POD_METADATA_ENV,
        policy: pod_metadata_env::POLICY,
        rust: nri_wasm_components::examples::POD_METADATA_ENV,
        cases: pod_metadata_env::CASES,
    });
}

/// NRI 0.12.2's image field and the CRI annotation of NRI 0.12.0, read by
/// the JavaScript SDK as by the Rust one.
#[test]
fn allowed_images_in_javascript() {
    check(&Port {
        lang: "JavaScript",
        wasm: examples::JS_ALLOWED_IMAGES,
        policy: allowed_images::POLICY,
        rust: nri_wasm_components::examples::ALLOWED_IMAGES,
        cases: allowed_images::CASES,
    });
}

#[test]
fn allowed_images_in_python() {
    check(&Port {
        lang: "Python",
        wasm: examples::PYTHON_ALLOWED_IMAGES,
        policy: allowed_images::POLICY,
        rust: nri_wasm_components::examples::ALLOWED_IMAGES,
        cases: allowed_images::CASES,
    });
}

#[test]
fn allowed_images_in_go() {
    check(&Port {
        lang: "Go",
        wasm: examples::GO_ALLOWED_IMAGES,
        policy: allowed_images::POLICY,
        rust: nri_wasm_components::examples::ALLOWED_IMAGES,
        cases: allowed_images::CASES,
    });
}

#[test]
fn allowed_images_in_c() {
    check(&Port {
        lang: "C",
        wasm: examples::C_ALLOWED_IMAGES,
        policy: allowed_images::POLICY,
        rust: nri_wasm_components::examples::ALLOWED_IMAGES,
        cases: allowed_images::CASES,
    });
}

/// The native tests of a port (`guest-sdk/<lang>/test.sh` on a copy of
/// its directory, so the source tree gets no build output) pass: an
/// allowed image runs, others are denied with their message, the
/// exception lets a pod through. A copy whose test expects another
/// denial must fail, naming both messages.
fn native_tests(lang: &str, test_file: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let example = root.join("example-policies").join(lang).join("allowed-images");
    let script = root.join("guest-sdk").join(lang).join("test.sh");
    let scratch = tempfile::tempdir().unwrap();
    let run = |dir: &Path| {
        let out = Command::new("bash").arg(&script).arg(dir).output().expect("running the SDK's test.sh");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let good = scratch.path().join("allowed-images");
    copy_dir(&example, &good);
    let (ok, output) = run(&good);
    assert!(ok, "{lang}: the native tests of allowed-images fail:\n{output}");

    let broken = scratch.path().join("allowed-images-broken");
    copy_dir(&example, &broken);
    let test = broken.join(test_file);
    let text = std::fs::read_to_string(&test).unwrap();
    let (right, wrong) = ("(allowed: registry.example.com, ghcr.io/example)", "(allowed: registry.example.com)");
    assert!(text.contains(right), "{lang}: {test_file} expects the denial");
    std::fs::write(&test, text.replacen(right, wrong, 1)).unwrap();
    let (ok, output) = run(&broken);
    assert!(!ok, "{lang}: a wrong expectation passed:\n{output}");
    assert!(output.contains(right) && output.contains(wrong), "{lang}: {output}");
}

fn copy_dir(from: &Path, to: &PathBuf) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "target" || name == "__pycache__" {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

#[test]
fn allowed_images_native_tests_in_javascript() {
    native_tests("js", "policy.test.js");
}

#[test]
fn allowed_images_native_tests_in_python() {
    native_tests("python", "test_policy.py");
}

#[test]
fn allowed_images_native_tests_in_go() {
    native_tests("go", "main_test.go");
}

#[test]
fn allowed_images_native_tests_in_c() {
    native_tests("c", "policy_test.c");
}

/// `component` without its capability declaration, as an SDK before
/// declarations built it: the section renamed (one byte, sizes unchanged),
/// so no host reads it. Panics unless it has exactly one.
fn without_capability_declaration(component: &[u8]) -> Vec<u8> {
    let name = b"nri-wasm:capabilities";
    let at: Vec<usize> =
        component.windows(name.len()).enumerate().filter(|(_, w)| *w == name).map(|(i, _)| i).collect();
    assert_eq!(at.len(), 1, "a component with one capability declaration (found {})", at.len());
    let mut out = component.to_vec();
    out[at[0] + "nri-wasm:".len()] = b'x';
    out
}

/// `check`'s `reads` line says what a policy may read from its capability
/// declaration: componentize-js and componentize-py import every interface
/// of the world, so a JavaScript or Python policy that declares `deny` (or
/// `env, deny`, as the templates do) imports the node interface without
/// being able to use it. Without a declaration (the templates with theirs
/// taken out) the line falls back to the imports, and says so. The chain
/// (what the host subscribes to) follows the same test.
#[test]
fn check_reads_the_declaration_not_the_imports() {
    use nri_wasm::cli::author::check::reads_line;
    use nri_wasm_languages::templates;
    let state = "state: imported (may keep state; not a declared capability)";
    let yes = "node view: yes (from its imports: it has no declaration)";
    let no = "node view: no (not declared)";
    let scratch = tempfile::tempdir().unwrap();
    let undeclared = |name: &str, wasm: &str| {
        let path = scratch.path().join(format!("{name}.wasm"));
        std::fs::write(&path, without_capability_declaration(&std::fs::read(wasm).unwrap())).unwrap();
        path.display().to_string()
    };
    let (js_undeclared, python_undeclared) = (undeclared("js", templates::JS), undeclared("python", templates::PYTHON));
    for (what, wasm, settings, want) in [
        ("the JavaScript example deny-host-sockets", examples::JS_DENY_HOST_SOCKETS, deny_host_sockets::SETTINGS, no),
        ("the Python example pod-metadata-env", examples::PYTHON_POD_METADATA_ENV, pod_metadata_env::SETTINGS, no),
        ("the JavaScript template", templates::JS, "{}", no),
        ("the Python template", templates::PYTHON, "{}", no),
        ("the JavaScript template without its declaration", js_undeclared.as_str(), "{}", yes),
        ("the Python template without its declaration", python_undeclared.as_str(), "{}", yes),
    ] {
        let policy = load("50-reads", wasm, settings).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(policy.imports().node && policy.imports().state, "{what} imports every interface");
        assert_eq!(reads_line(policy.imports(), policy.allowed()), format!("{want}, {state}"), "{what}");
        // The runtime judges it the same way: the host subscribes to the
        // view's events and keeps the view only for a policy that reads it.
        let reads = want == yes;
        assert_eq!(policy.reads_node(), reads, "{what}");
        let chain =
            nri_wasm::policy::chain::Chain::new(vec![policy], nri_wasm::policy::chain::ChainSettings::default());
        assert_eq!(chain.reads_node(), reads, "{what}");
        assert_eq!(chain.keeps_view(), reads, "{what}");
    }
}
