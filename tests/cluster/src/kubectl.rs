//! kubectl against the test's cluster, run inside the node's namespaces
//! (the API server listens on the namespace's loopback) with the admin's
//! kubeconfig; objects come back as JSON.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::ns::Namespaces;
use crate::{wait_for, Error};

/// kubectl for one cluster.
#[derive(Debug, Clone)]
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    net: std::sync::Arc<Namespaces>,
}

impl Kubectl {
    pub fn new(bin: &Path, kubeconfig: &Path, net: std::sync::Arc<Namespaces>) -> Self {
        Kubectl { bin: bin.to_path_buf(), kubeconfig: kubeconfig.to_path_buf(), net }
    }

    /// Runs `kubectl args...` (with `stdin` if given); its stdout, or an
    /// error with its stderr.
    pub fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Result<String, Error> {
        let mut cmd = self.net.command(&self.bin);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(["--request-timeout", "30s"]).args(args);
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!("kubectl {}", args.join(" "));
        let mut child = cmd.spawn().map_err(|e| Error::io(format!("running {what}"), e))?;
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().expect("piped");
            pipe.write_all(text.as_bytes()).map_err(|e| Error::io(format!("writing to {what}"), e))?;
        }
        let out = child.wait_with_output().map_err(|e| Error::io(format!("running {what}"), e))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Command {
                command: what,
                status: out.status.to_string(),
                stderr: format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout)),
            })
        }
    }

    pub fn run(&self, args: &[&str]) -> Result<String, Error> {
        self.run_with(args, None)
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String, Error> {
        self.run_with(&["apply", "-f", "-"], Some(yaml))
    }

    /// `kubectl get ... -o json`.
    pub fn get(&self, args: &[&str]) -> Result<Value, Error> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let text = self.run(&all)?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Parse { what: format!("kubectl {}", all.join(" ")), detail: e.to_string() })
    }

    /// The items of `kubectl get KIND ...`.
    pub fn items(&self, args: &[&str]) -> Result<Vec<Value>, Error> {
        Ok(self.get(args)?["items"].as_array().cloned().unwrap_or_default())
    }

    /// Waits until `kubectl get args` gives an object `check` accepts
    /// (backstop `secs`); the object.
    pub fn wait_object(
        &self,
        what: &str,
        args: &[&str],
        secs: u64,
        check: impl Fn(&Value) -> bool,
    ) -> Result<Value, Error> {
        let mut last = String::new();
        wait_for(what, Duration::from_secs(secs), || match self.get(args) {
            Ok(v) if check(&v) => Some(v),
            Ok(v) => {
                last = v.to_string();
                std::thread::sleep(Duration::from_millis(200));
                None
            }
            Err(e) => {
                last = e.to_string();
                std::thread::sleep(Duration::from_millis(200));
                None
            }
        })
        .map_err(|e| Error::Parse { what: e.to_string(), detail: clip(&last, 3000) })
    }
}

/// At most `n` bytes of `s` (its end), for error messages.
pub fn clip(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut start = s.len() - n;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

/// Whether a pod object is Ready.
pub fn pod_ready(pod: &Value) -> bool {
    condition(pod, "Ready")
}

/// Whether the object's status has condition `kind` True.
pub fn condition(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}
