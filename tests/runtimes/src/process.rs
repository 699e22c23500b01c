//! A child process that is stopped by its pid when its guard is dropped,
//! so that a failing test leaves nothing running.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// A running child, its output in a log file.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self, Error> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(format!("opening {}", log.display()), e))?;
        let err = out.try_clone().map_err(|e| Error::io("duplicating a log file", e))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd.spawn().map_err(|e| Error::io(format!("starting {name} ({:?})", cmd.get_program()), e))?;
        Ok(Process { name: name.into(), child: Some(child), log: log.to_path_buf() })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Whether it still runs (it is reaped if it ended).
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for it.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        signal(child.id(), libc::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < grace {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGKILL at once (a crash), and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) with a pid we were given; no memory is involved.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The pids whose command line contains `needle` (the processes a runtime
/// started for this node, found by the node's own socket path).
pub fn pids_with_cmdline(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id();
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// Runs a command to its end; its stdout, or an error with its stderr.
pub fn run(mut cmd: Command, what: &str) -> Result<String, Error> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| Error::io(format!("running {what}"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Command {
            command: what.into(),
            status: out.status.to_string(),
            stderr: format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout)),
        })
    }
}
