//! Launched mode: the runtime starts the plugin binary with a connected socket
//! on fd 3 and `NRI_PLUGIN_*` in the environment, and no arguments at all.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nri_sim::workload::Workload;
use nri_sim::{PluginConn, RuntimeProfile};

/// A configuration without a compile cache, so that the test leaves the
/// machine's default cache directory alone (the only key it sets).
fn no_cache_config(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("config.toml");
    // Nor the registry's cache, whose default as root is the node's too.
    let registry = dir.path().join("registry");
    std::fs::write(&path, format!("[engine]\ncache-dir = \"\"\n[registry]\ncache-dir = {registry:?}\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_launched_plugin_uses_the_inherited_socket_and_exits_when_it_closes() {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_fd = theirs.as_raw_fd();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nri-wasm"));
    cmd.env_clear()
        .env("NRI_WASM_CONFIG", no_cache_config(&dir))
        .env("NRI_PLUGIN_SOCKET", "3")
        .env("NRI_PLUGIN_NAME", "launched")
        .env("NRI_PLUGIN_IDX", "07")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(theirs_fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn nri-wasm");
    drop(theirs);

    ours.set_nonblocking(true).unwrap();
    let stream = tokio::net::UnixStream::from_std(ours).unwrap();
    let mut conn = PluginConn::establish(stream, RuntimeProfile::v0_12()).await.expect("plugin registers");
    assert_eq!(conn.registration().plugin_name, "launched");
    assert_eq!(conn.registration().plugin_idx, "07");
    conn.configure().await.unwrap();
    let w = Workload::generate(1, 1);
    conn.synchronize(&w.pods, &w.containers, 0).await.unwrap();
    // With no policy the plugin asks only for the rare PostUpdateContainer.
    assert_eq!(conn.subscribed(), Some(1 << 8));
    conn.post_update_container(&w.pods[0], &w.containers[0]).await.unwrap();
    conn.close().await;

    let output =
        tokio::time::timeout(Duration::from_secs(10), tokio::task::spawn_blocking(move || child.wait_with_output()))
            .await
            .expect("plugin exits after the runtime closes its socket")
            .unwrap()
            .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "exit status tells the runtime something ended: {stderr}");
    assert!(stderr.contains("restart"), "{stderr}");
    assert!(stderr.contains("registered with the runtime"), "{stderr}");
}

#[test]
fn a_non_socket_fd_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_nri-wasm"))
        .env_clear()
        .env("NRI_WASM_CONFIG", no_cache_config(&dir))
        .env("NRI_PLUGIN_SOCKET", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("inherited fd 0 is not a usable socket"), "{stderr}");
}
