//! The nri-wasm host as a separate process, as an operator runs it
//! (`nri-wasm run --config FILE`, external mode), with a policy directory,
//! a compile cache and a status endpoint of its own.
//!
//! The binary is the test's (`env!("CARGO_BIN_EXE_nri-wasm-host")`, which
//! only a test of this package can name), passed in.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::log::Log;
use crate::process::Process;
use crate::{wait_for, Error};

/// How a host is set up; the defaults are what the tests use.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub bin: PathBuf,
    /// The host's own directory (config, log, cache).
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub policies: PathBuf,
    /// `[engine] cache-dir`; a test that wants a cold start uses a new one.
    pub cache: PathBuf,
    /// `[policies] reload-debounce-ms`.
    pub debounce_ms: u64,
    /// More TOML for the end of the file.
    pub extra: String,
}

impl HostConfig {
    /// A host in `<dir>/host` serving `socket`, policies in
    /// `<dir>/host/policies`.
    pub fn new(bin: &Path, node_dir: &Path, socket: &Path) -> Self {
        let dir = node_dir.join("host");
        HostConfig {
            bin: bin.to_path_buf(),
            policies: dir.join("policies"),
            cache: dir.join("cache"),
            dir,
            socket: socket.to_path_buf(),
            debounce_ms: 200,
            extra: String::new(),
        }
    }

    /// The policy directory, as a [`Policies`].
    pub fn policy_dir(&self) -> Policies {
        Policies::new(&self.policies)
    }
}

/// The host's CreateContainer answers, cumulative: their total time and the
/// chain's part of it (seconds), and how many.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answers {
    pub answer_s: f64,
    pub chain_s: f64,
    pub count: f64,
}

/// A running host.
#[derive(Debug)]
pub struct Host {
    config: HostConfig,
    metrics: SocketAddr,
    process: Option<Process>,
}

impl Host {
    /// Starts a host (it registers when the runtime's socket is there).
    pub fn start(config: &HostConfig) -> Result<Host, Error> {
        std::fs::create_dir_all(&config.policies).map_err(|e| Error::io("creating the policy directory", e))?;
        let metrics = free_port()?;
        let mut host = Host { config: config.clone(), metrics, process: None };
        host.spawn()?;
        Ok(host)
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let c = &self.config;
        let file = c.dir.join("config.toml");
        let text = format!(
            "[plugin]\nname = \"nri-wasm\"\nindex = \"10\"\n\n\
             [runtime]\nsocket = \"{}\"\nreconnect-initial-ms = 100\nreconnect-max-ms = 1000\n\n\
             [policies]\ndir = \"{}\"\nreload-debounce-ms = {}\n\n\
             [engine]\ncache-dir = \"{}\"\n\n\
             [metrics]\naddress = \"{}\"\n\n\
             [logging]\nlevel = \"info\"\n\n{}\n",
            c.socket.display(),
            c.policies.display(),
            c.debounce_ms,
            c.cache.display(),
            self.metrics,
            c.extra,
        );
        std::fs::write(&file, text).map_err(|e| Error::io("writing the host's config", e))?;
        let mut cmd = Command::new(&c.bin);
        cmd.arg("run").arg("--config").arg(&file).env_remove("RUST_LOG").env("NO_COLOR", "1");
        self.process = Some(Process::spawn("nri-wasm host", cmd, &c.dir.join("host.log"))?);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Process::pid)
    }

    pub fn log(&self) -> Log {
        Log::new(&self.config.dir.join("host.log"))
    }

    /// `/status`, if the endpoint answers.
    pub fn status(&self) -> Option<Value> {
        let body = http_get(self.metrics, "/status")?;
        serde_json::from_str(&body).ok()
    }

    /// `/metrics` (Prometheus text), if the endpoint answers.
    pub fn metrics(&self) -> Option<String> {
        http_get(self.metrics, "/metrics")
    }

    /// The host's account of its CreateContainer answers so far, from
    /// `/metrics`: `None` if the endpoint does not answer; an error if its
    /// answer lacks the answer and chain histograms (renamed, say).
    pub fn create_answers(&self) -> Option<Result<Answers, Error>> {
        let text = self.metrics()?;
        let parse = |detail: String| Error::Parse { what: "the host's /metrics".into(), detail };
        for family in ["nri_wasm_answer_duration_seconds", "nri_wasm_chain_duration_seconds"] {
            if !text.contains(&format!("# TYPE {family} histogram")) {
                return Some(Err(parse(format!("no histogram {family}"))));
            }
        }
        // A series appears with the first event answered.
        let value = |name: &str| -> Result<f64, Error> {
            let key = format!("{name}{{event=\"CreateContainer\"}} ");
            match text.lines().find_map(|l| l.strip_prefix(key.as_str())) {
                None => Ok(0.0),
                Some(v) => v.trim().parse().map_err(|_| parse(format!("{name}: {v:?}"))),
            }
        };
        Some((|| {
            Ok(Answers {
                answer_s: value("nri_wasm_answer_duration_seconds_sum")?,
                chain_s: value("nri_wasm_chain_duration_seconds_sum")?,
                count: value("nri_wasm_answer_duration_seconds_count")?,
            })
        })())
    }

    /// Whether `/status` says it is registered with the runtime.
    pub fn registered(&self) -> bool {
        self.status().and_then(|s| s.get("registered")?.as_bool()).unwrap_or(false)
    }

    /// Waits until the host is registered (backstop 60 s).
    pub fn wait_registered(&mut self) -> Result<(), Error> {
        self.wait_status("the host registered with the runtime", |s| s["registered"].as_bool() == Some(true))
    }

    /// Waits until `/status` satisfies `check` (backstop 60 s); fails at
    /// once if the host exited.
    pub fn wait_status(&mut self, what: &str, check: impl Fn(&Value) -> bool) -> Result<(), Error> {
        let log = self.log();
        let proc = self.process.as_mut();
        let Some(proc) = proc else { return Err(Error::Unsupported("the host is not running".into())) };
        let metrics = self.metrics;
        let mut last = None;
        let exited = wait_for(what, Duration::from_secs(60), || {
            if !proc.running() {
                return Some(true);
            }
            let s: Value = serde_json::from_str(&http_get(metrics, "/status")?).ok()?;
            let met = check(&s);
            last = Some(s);
            met.then_some(false)
        })
        .map_err(|e| {
            // The status last seen and what the host said besides its
            // decisions (one line per policy call, which would bury it).
            let text = log.text();
            let said: Vec<&str> = text.lines().filter(|l| !l.contains("policy decision")).collect();
            let said = said[said.len().saturating_sub(30)..].join("\n");
            let last = last.map_or_else(|| "none".to_string(), |s| s.to_string());
            Error::Parse { what: e.to_string(), detail: format!("last status: {last}\n{said}") }
        })?;
        if exited {
            return Err(Error::Command {
                command: "nri-wasm run".into(),
                status: "exited".into(),
                stderr: log.tail(30),
            });
        }
        Ok(())
    }

    /// Kills it with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
    }

    /// Stops it with SIGTERM.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop(Duration::from_secs(10));
        }
    }

    /// Starts it again with the same configuration (and cache).
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        self.spawn()
    }

    pub fn config(&self) -> &HostConfig {
        &self.config
    }
}

/// A policy directory: `NN-name.wasm` and `NN-name.toml` files, each
/// written beside and renamed into place, as an operator's tools do.
#[derive(Debug, Clone)]
pub struct Policies {
    dir: PathBuf,
}

impl Policies {
    pub fn new(dir: &Path) -> Self {
        Policies { dir: dir.to_path_buf() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Installs `NN-name.wasm` (a copy of `wasm`) and its `NN-name.toml`.
    pub fn install(&self, name: &str, wasm: &Path, toml: &str) -> Result<(), Error> {
        let bytes = std::fs::read(wasm).map_err(|e| Error::io(format!("reading {}", wasm.display()), e))?;
        self.write_toml(name, toml)?;
        self.write_wasm(name, &bytes)
    }

    pub fn write_wasm(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.put(&format!("{name}.wasm"), bytes)
    }

    pub fn write_toml(&self, name: &str, toml: &str) -> Result<(), Error> {
        self.put(&format!("{name}.toml"), toml.as_bytes())
    }

    fn put(&self, file: &str, bytes: &[u8]) -> Result<(), Error> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io("creating the policy directory", e))?;
        let tmp = self.dir.join(format!(".{file}.partial"));
        std::fs::write(&tmp, bytes).map_err(|e| Error::io(format!("writing {}", tmp.display()), e))?;
        std::fs::rename(&tmp, self.dir.join(file)).map_err(|e| Error::io(format!("installing {file}"), e))
    }
}

/// A component with a custom section appended: another file (another
/// digest, compiled again) with the same behaviour.
pub fn with_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut out = wasm.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// A port nothing listens on now.
fn free_port() -> Result<SocketAddr, Error> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("finding a free port", e))?;
    l.local_addr().map_err(|e| Error::io("finding a free port", e))
}

/// GET `path`; the body of a 200 answer.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}
