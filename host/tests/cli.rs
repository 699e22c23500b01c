//! The binary's own commands, run as a user would.

use std::process::Command;

#[test]
fn demo_runs_without_a_runtime() {
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm")).args(["demo", "--pods", "2"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("plugin registered as 10-nri-wasm"), "{stdout}");
    assert!(stdout.contains("synchronized 2 pods, 2 containers"), "{stdout}");
    // With no policy the host asks for no lifecycle event.
    assert!(stdout.contains("subscribed to events 0x100"), "{stdout}");
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

#[test]
fn demo_reports_policies_it_cannot_load_and_runs_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("10-junk.wasm"), b"not a component").unwrap();
    std::fs::write(dir.path().join("20-lonely.toml"), "mode = \"audit\"\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
        .args(["demo", "--pods", "1", "--policies"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("host: 0 policies loaded"), "{stdout}");
    assert!(stderr.contains("10-junk") && stderr.contains("not a WebAssembly file"), "{stderr}");
    assert!(stderr.contains("20-lonely.toml") && stderr.contains("no policy"), "{stderr}");
}
