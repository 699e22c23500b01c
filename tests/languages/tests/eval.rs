//! `nri-wasm eval` on the `allowed-images` example in every language, as an
//! author runs it: the component installed beside its `policy.toml` in a
//! directory, the port's fixture (a CreateContainer captured from
//! containerd) as input. The five languages print the same report: the
//! fixture's pinned image from an allowed registry passes unchanged, and the
//! same request with an image from elsewhere is denied with the same
//! message.
#![cfg(feature = "languages")]

use std::path::{Path, PathBuf};

use clap::Parser as _;
use nri_wasm::cli::{Cli, Command};
use nri_wasm::policy::load::compile::Compiler;
use nri_wasm_languages::examples;
use serde_json::Value;

const POLICY: &str = "50-allowed-images";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory an author would install: the component and its settings.
fn installed(wasm: &str, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(wasm, dir.join(format!("{POLICY}.wasm"))).unwrap();
    let toml = root().join("example-policies/allowed-images/policy.toml");
    std::fs::copy(toml, dir.join(format!("{POLICY}.toml"))).unwrap();
}

/// `nri-wasm eval DIR --input INPUT --json`: its exit code and report.
fn eval(dir: &Path, input: &Path) -> (u8, Value) {
    let cli = Cli::try_parse_from([
        "nri-wasm".as_ref(),
        "eval".as_ref(),
        dir.as_os_str(),
        "--input".as_ref(),
        input.as_os_str(),
        "--json".as_ref(),
    ])
    .expect("eval's arguments");
    let Some(Command::Eval(args)) = cli.command else { panic!("not eval") };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = nri_wasm::cli::author::eval::eval(&args, Compiler::InProcess, &mut out, &mut err);
    let err = String::from_utf8_lossy(&err);
    let report: Value =
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}\n{err}", String::from_utf8_lossy(&out)));
    // ExitCode has no accessor: compare through its Debug form.
    let code = if format!("{code:?}") == format!("{:?}", std::process::ExitCode::SUCCESS) { 0 } else { 1 };
    (code, report)
}

/// What must agree across languages: the outcome and the reply, without the
/// fuel and times each language spends differently, and the state
/// interface only some of them import.
fn outcome(report: &Value) -> Value {
    let mut report = report.clone();
    strip(&mut report);
    report
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(map) => {
            // Whether it may keep state is the language's: JavaScript and
            // Python components import every interface of the world.
            map.retain(|k, _| {
                !matches!(k.as_str(), "fuel" | "time_us" | "from_cache" | "recorded" | "keeps_state" | "state")
            });
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The outcome of the policy's step, wherever the report holds it.
fn step_outcome(report: &Value) -> String {
    fn find(v: &Value) -> Option<String> {
        match v {
            Value::Object(map) if map.get("policy").and_then(Value::as_str) == Some(POLICY) => {
                map.get("outcome").and_then(Value::as_str).map(str::to_string)
            }
            Value::Object(map) => map.values().find_map(find),
            Value::Array(items) => items.iter().find_map(find),
            _ => None,
        }
    }
    find(report).unwrap_or_else(|| panic!("no step of {POLICY} in {report:#}"))
}

#[test]
fn eval_gives_the_same_report_in_every_language() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = root().join("example-policies/js/allowed-images/fixtures/create-container.json");
    let text = std::fs::read_to_string(&fixture).unwrap();
    let allowed_image = "registry.example.com/billing/worker@sha256:";
    assert!(text.contains(allowed_image), "the fixture's image");
    let elsewhere = tmp.path().join("elsewhere.json");
    std::fs::write(&elsewhere, text.replace(allowed_image, "images.example.org/billing/worker@sha256:")).unwrap();

    let ports = [
        ("Rust", nri_wasm_components::examples::ALLOWED_IMAGES),
        ("JavaScript", examples::JS_ALLOWED_IMAGES),
        ("Python", examples::PYTHON_ALLOWED_IMAGES),
        ("Go", examples::GO_ALLOWED_IMAGES),
        ("C", examples::C_ALLOWED_IMAGES),
    ];
    let mut first: Option<(&str, Value, Value)> = None;
    for (lang, wasm) in ports {
        let dir = tmp.path().join(lang);
        installed(wasm, &dir);
        // The fixture's port is the one of its own language; every port's
        // fixture is the same file (checked below).
        let (code, allowed) = eval(&dir, &fixture);
        assert_eq!(code, 0, "{lang}: {allowed:#}");
        assert_eq!(step_outcome(&allowed), "unchanged", "{lang}: {allowed:#}");
        let (_, denied) = eval(&dir, &elsewhere);
        assert_eq!(step_outcome(&denied), "denied", "{lang}: {denied:#}");
        let text = denied.to_string();
        assert!(text.contains("images.example.org/billing/worker"), "{lang}: the denial names the image: {denied:#}");
        let (allowed, denied) = (outcome(&allowed), outcome(&denied));
        match &first {
            None => first = Some((lang, allowed, denied)),
            Some((rust, a, d)) => {
                assert_eq!(&allowed, a, "{lang} and {rust} differ on the allowed image");
                assert_eq!(&denied, d, "{lang} and {rust} differ on the denied image");
            }
        }
    }
    for lang in ["c", "go", "python"] {
        let other = root().join(format!("example-policies/{lang}/allowed-images/fixtures/create-container.json"));
        assert_eq!(std::fs::read_to_string(other).unwrap(), text, "{lang}'s fixture");
    }
}
