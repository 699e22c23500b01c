//! Containers created through the CRI by cri-timer (tests/runtimes/cri-timer),
//! each CreateContainer timed by the client that made it.
//!
//! crictl is a process per create, tens of milliseconds each, and the
//! runtime's log stamps its lines to the millisecond: differences of a few
//! hundred microseconds between NRI plugins drown in either. cri-timer keeps
//! one connection, creates the containers one after the other and times each
//! call around the RPC alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::crictl::{Container, Crictl, PodSandbox};
use crate::{require, Error};

/// One container made: its id and how long its CreateContainer took.
#[derive(Debug, Clone)]
pub struct Created {
    pub id: String,
    pub took: Duration,
}

/// cri-timer against one runtime.
#[derive(Debug)]
pub struct CriTimer {
    bin: PathBuf,
    endpoint: String,
}

impl CriTimer {
    /// The timer install.sh built, for the endpoint `crictl` talks to.
    pub fn new(runtimes: &Path, crictl: &Crictl) -> Result<Self, Error> {
        let bin = require("cri-timer", runtimes.join("cri-timer/cri-timer"), "")?;
        Ok(CriTimer { bin, endpoint: crictl.endpoint().to_string() })
    }

    /// Creates `count` containers like `c` in `pod`, named `<name>-<i>`,
    /// one after the other; each one's id and time, in order. With
    /// `remove`, each is removed (untimed) before the next is created, so
    /// that every create finds the same node: creates slow down as a pod's
    /// containers pile up (on containerd 2.3.4, round medians of about 8 ms
    /// in rounds of 40 creates, 17 to 31 ms in rounds of 200).
    pub fn create(
        &self,
        crictl: &Crictl,
        pod: &PodSandbox,
        c: &Container,
        name: &str,
        count: usize,
        remove: bool,
    ) -> Result<Vec<Created>, Error> {
        let config = crictl.container_config(c)?;
        let command = format!("cri-timer -name {name} -count {count}");
        let out = Command::new(&self.bin)
            .args(["-endpoint", &self.endpoint, "-pod", &pod.id])
            .arg("-pod-config")
            .arg(&pod.config)
            .arg("-container-config")
            .arg(&config)
            .args(["-name", name, "-count", &count.to_string()])
            .args(remove.then_some("-remove"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::io("running cri-timer", e))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            // The containers made before the failure, for whoever cleans up.
            let made: Vec<String> = text.lines().filter_map(parse).map(|c| c.id).collect();
            return Err(Error::Command {
                command,
                status: out.status.to_string(),
                stderr: format!(
                    "{} (containers made before it: {})",
                    String::from_utf8_lossy(&out.stderr).trim(),
                    if made.is_empty() { "none".to_string() } else { made.join(", ") }
                ),
            });
        }
        let created = text.lines().map(|line| {
            parse(line).ok_or_else(|| Error::Parse {
                what: command.clone(),
                detail: format!("a line that is not \"<id> <ns>\": {line:?}"),
            })
        });
        let created: Vec<Created> = created.collect::<Result<_, _>>()?;
        if created.len() != count {
            return Err(Error::Parse {
                what: command,
                detail: format!("{} containers reported, {count} asked for", created.len()),
            });
        }
        Ok(created)
    }
}

fn parse(line: &str) -> Option<Created> {
    let (id, ns) = line.split_once(' ')?;
    let ns: u64 = ns.parse().ok()?;
    (!id.is_empty()).then(|| Created { id: id.to_string(), took: Duration::from_nanos(ns) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_as_id_and_nanoseconds() {
        let c = parse("abc123 1500000").expect("a valid line");
        assert_eq!((c.id.as_str(), c.took), ("abc123", Duration::from_micros(1500)));
        assert!(parse("abc123").is_none());
        assert!(parse(" 15").is_none());
        assert!(parse("abc -1").is_none());
    }
}
