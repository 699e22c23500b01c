//! `docs/writing-policies.md`'s tour of the other languages, run as an
//! author runs it: the lines of the block marked `walkthrough in ...`,
//! read from the guide (not copied here), in each language the marker
//! names (the block is written for the first; `--lang` is the only word
//! that changes): the tools installed (a no-op when they are), `nri-wasm
//! new`, the project's native tests and build, `check` and `eval` of what
//! it built, each a process in the project's directory, with the real
//! command line (`src/bin/tour.rs`).
#![cfg(feature = "languages")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const GUIDE: &str = include_str!("../../../docs/writing-policies.md");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The languages the tour names, and its command lines.
fn tour() -> (Vec<String>, Vec<String>) {
    let (marker, rest) = GUIDE
        .split("<!-- walkthrough in ")
        .nth(1)
        .and_then(|s| s.split_once(" -->\n"))
        .expect("the guide's tour of the other languages");
    let langs = marker.split(',').map(|l| l.trim().to_string()).collect();
    let body = rest.strip_prefix("```sh\n").and_then(|b| b.split("```").next()).expect("a sh block after the marker");
    let lines = body
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    (langs, lines)
}

/// The compile cache of the languages suite, not the user's.
fn cache_dir() -> PathBuf {
    Path::new(nri_wasm_languages::LANGUAGE_GUESTS).join("tour-cache")
}

/// What a line left.
#[derive(Debug)]
struct Ran {
    line: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(line: &str, mut cmd: Command) -> Ran {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{line}: {e}"));
    Ran {
        line: line.to_string(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The tour in `lang`, in a directory of its own (kept while the result
/// lives): every line's outcome, and the directory the tour ended in.
fn walk(lang: &str) -> (tempfile::TempDir, PathBuf, Vec<Ran>) {
    let (langs, lines) = tour();
    assert!(langs.iter().any(|l| l == lang), "the tour is not run in {lang}: {langs:?}");
    let written = format!("--lang {}", langs[0]);
    let tmp = tempfile::tempdir().unwrap();
    let mut cwd = tmp.path().to_path_buf();
    let cache = cache_dir();
    let mut ran = Vec::new();
    for line in lines {
        let line = line.replace(&written, &format!("--lang {lang}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let (program, args) = words.split_first().unwrap();
        let result = match *program {
            "cd" => {
                cwd = cwd.join(args[0]);
                continue;
            }
            // Run where the guide says: in the nri-wasm checkout.
            "guest-sdk/install-tools.sh" => {
                let mut cmd = Command::new("bash");
                cmd.arg(root().join(program)).args(args).current_dir(root());
                run(&line, cmd)
            }
            "nri-wasm" => {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_nri-wasm-tour"));
                cmd.args(args).current_dir(&cwd).env("NRI_WASM_CACHE_DIR", &cache).env_remove("RUST_LOG");
                run(&line, cmd)
            }
            p if p.starts_with("./") => {
                let mut cmd = Command::new(cwd.join(p));
                cmd.args(args).current_dir(&cwd);
                run(&line, cmd)
            }
            other => panic!("the tour runs install-tools.sh, nri-wasm, the project's scripts and cd, not {other}"),
        };
        let failed = result.code != Some(0);
        ran.push(result);
        // `eval` may end 3, a time limit on a busy machine: judged below.
        if failed && !line.starts_with("nri-wasm eval") {
            panic!("{lang}: {:#?}", ran.last().unwrap());
        }
    }
    (tmp, cwd, ran)
}

fn check_tour(lang: &str) {
    let (_tmp, project, ran) = walk(lang);
    let line = |prefix: &str| {
        ran.iter().find(|r| r.line.starts_with(prefix)).unwrap_or_else(|| panic!("the tour runs `{prefix}`"))
    };
    let new = line("nri-wasm new");
    assert!(new.stdout.contains(&format!("a {lang} policy project")), "{new:#?}");
    assert!(!new.stderr.contains("warning"), "the tools are installed: {new:#?}");
    let check = line("nri-wasm check");
    assert!(
        check.stdout.contains("result    loads") && check.stdout.contains("events    CreateContainer"),
        "{check:#?}"
    );
    // The policy's answer: the label as the variable. A call cut off by the
    // template's time limit (a busy machine; `eval` ends 3, its output
    // dropped) is no wrong answer: then the answer is asked again with a
    // limit no machine reaches, the rest of the policy file as it is.
    let eval = line("nri-wasm eval");
    let answered = match eval.code {
        Some(0) => eval.stdout.clone(),
        Some(3) if eval.stdout.contains("time limit of") => {
            eprintln!("{lang}: the template's time limit cut the call off; asking again with a loose one");
            let loose = project.join("loose.toml");
            let text = std::fs::read_to_string(project.join("policy.toml")).unwrap();
            let text = text
                .lines()
                .map(|l| if l.starts_with("timeout-ms") { "timeout-ms = 5000" } else { l })
                .collect::<Vec<_>>()
                .join("\n");
            std::fs::write(&loose, text).unwrap();
            let again = Command::new(env!("CARGO_BIN_EXE_nri-wasm-tour"))
                .args(eval.line.split_whitespace().skip(1).map(|w| if w == "policy.toml" { "loose.toml" } else { w }))
                .current_dir(&project)
                .env("NRI_WASM_CACHE_DIR", cache_dir())
                .output()
                .unwrap();
            assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stdout));
            String::from_utf8_lossy(&again.stdout).into_owned()
        }
        _ => panic!("{lang}: {eval:#?}"),
    };
    assert!(answered.contains("env TEAM=payments") && answered.contains("answer in"), "{lang}: {answered}");
}

#[test]
fn tour_javascript() {
    check_tour("js");
}

#[test]
fn tour_python() {
    check_tour("python");
}

#[test]
fn tour_go() {
    check_tour("go");
}

#[test]
fn tour_c() {
    check_tour("c");
}

/// The tour names every language of the other SDKs' templates.
#[test]
fn the_tour_covers_every_language_with_a_template() {
    let (langs, _) = tour();
    for lang in ["js", "python", "go", "c"] {
        assert!(langs.iter().any(|l| l == lang), "{lang} missing from the tour's marker: {langs:?}");
    }
}
