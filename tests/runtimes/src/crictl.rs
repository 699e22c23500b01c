//! crictl, the kubelet's stand-in: pods and containers through the CRI,
//! with their JSON configurations written to the node's directory, and the
//! OCI spec the runtime made back from `crictl inspect`.
//!
//! Pods are host-network (there is no CNI here), without a hostname (runc
//! 1.1.5 refuses one on a host-network pod), under the node's own cgroup
//! parent (so that the node can find and stop every process it started),
//! with a PID namespace per container (`pid: CONTAINER`, the kubelet's
//! default): a pod-wide one makes CRI-O run an infra container with an
//! `oom_score_adj` this VM may not set (src/crio.rs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

use crate::{images, require, Error};

/// The pinned crictl (install.sh).
pub const CRI_TOOLS_VERSION: &str = "1.36.0";

/// crictl against one runtime.
#[derive(Debug)]
pub struct Crictl {
    bin: PathBuf,
    endpoint: String,
    config: PathBuf,
    dir: PathBuf,
    cgroup_parent: String,
    counter: AtomicU64,
}

/// A pod to run: its name, labels and annotations.
#[derive(Debug, Clone, Default)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl Pod {
    pub fn new(name: &str) -> Self {
        Pod { name: name.into(), namespace: "default".into(), ..Default::default() }
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
}

/// A container to create: busybox running `command`.
#[derive(Debug, Clone)]
pub struct Container {
    pub name: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// CPU period and quota (microseconds), if any.
    pub cpu: Option<(i64, i64)>,
    pub memory_limit: Option<i64>,
    /// CRI mounts: host path, container path, read-only.
    pub mounts: Vec<(String, String, bool)>,
    /// More fields of the CRI `ContainerConfig` (crictl's JSON names),
    /// set over the ones above.
    pub extra: serde_json::Map<String, Value>,
}

impl Container {
    /// A container that sleeps (long enough for any test; the node stops it).
    pub fn sleeper(name: &str) -> Self {
        Container {
            name: name.into(),
            command: vec!["/bin/sleep".into(), "100000".into()],
            env: vec![("FROM_CRI".into(), "1".into())],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            cpu: None,
            memory_limit: None,
            mounts: Vec::new(),
            extra: serde_json::Map::new(),
        }
    }

    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn mount(mut self, host: &str, container: &str, readonly: bool) -> Self {
        self.mounts.push((host.into(), container.into(), readonly));
        self
    }

    pub fn cpu(mut self, period: i64, quota: i64) -> Self {
        self.cpu = Some((period, quota));
        self
    }
}

/// A pod that runs, with the config it was run with (CreateContainer needs
/// it again).
#[derive(Debug, Clone)]
pub struct PodSandbox {
    pub id: String,
    pub config: PathBuf,
}

impl Crictl {
    pub fn new(runtimes: &Path, node_dir: &Path, endpoint: &str, cgroup_parent: &str) -> Result<Self, Error> {
        let bin = require(
            &format!("crictl {CRI_TOOLS_VERSION}"),
            runtimes.join(format!("cri-tools-{CRI_TOOLS_VERSION}/crictl")),
            "",
        )?;
        let dir = node_dir.join("crictl");
        std::fs::create_dir_all(dir.join("logs")).map_err(|e| Error::io("creating crictl's directory", e))?;
        let config = dir.join("crictl.yaml");
        let yaml = format!(
            "runtime-endpoint: {endpoint}\nimage-endpoint: {endpoint}\ntimeout: 60\ndebug: false\npull-image-on-create: false\n"
        );
        std::fs::write(&config, yaml).map_err(|e| Error::io("writing crictl.yaml", e))?;
        Ok(Crictl {
            bin,
            endpoint: endpoint.into(),
            config,
            dir,
            cgroup_parent: cgroup_parent.into(),
            counter: AtomicU64::new(0),
        })
    }

    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs crictl; its stdout (trimmed), or an error whose text is what
    /// crictl printed on stderr (a denial's reason shows up there).
    pub fn run(&self, args: &[&str]) -> Result<String, Error> {
        let out = Command::new(&self.bin)
            .arg("--config")
            .arg(&self.config)
            .args(["--runtime-endpoint", &self.endpoint, "--image-endpoint", &self.endpoint])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::io("running crictl", e))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(Error::Command {
                command: format!("crictl {}", args.join(" ")),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }

    fn write_json(&self, kind: &str, value: &Value) -> Result<PathBuf, Error> {
        let path = self.dir.join(format!("{kind}-{}.json", self.next()));
        std::fs::write(&path, serde_json::to_vec_pretty(value).expect("json"))
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        Ok(path)
    }

    /// Runs a host-network pod.
    pub fn run_pod(&self, pod: &Pod) -> Result<PodSandbox, Error> {
        let n = self.next();
        let config = json!({
            "metadata": { "name": pod.name, "namespace": pod.namespace, "uid": format!("uid-{}-{n}", pod.name), "attempt": 0 },
            "labels": pod.labels,
            "annotations": pod.annotations,
            "log_directory": self.dir.join("logs").join(format!("{}-{n}", pod.name)),
            "linux": {
                "cgroup_parent": self.cgroup_parent,
                "security_context": { "namespace_options": { "network": 2, "pid": 1 } },
            },
        });
        let path = self.write_json("pod", &config)?;
        let p = path.to_string_lossy().into_owned();
        let id = self.run(&["runp", &p])?;
        Ok(PodSandbox { id, config: path })
    }

    /// The runtime's CRI endpoint (`unix:///...`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Creates a container in `pod` (not started); its id.
    pub fn create(&self, pod: &PodSandbox, c: &Container) -> Result<String, Error> {
        let path = self.container_config(c)?;
        let (cp, pp) = (path.to_string_lossy().into_owned(), pod.config.to_string_lossy().into_owned());
        self.run(&["create", "--no-pull", &pod.id, &cp, &pp])
    }

    /// Writes the CRI config of `c` to the node's directory; its path.
    pub fn container_config(&self, c: &Container) -> Result<PathBuf, Error> {
        let mut resources = serde_json::Map::new();
        if let Some((period, quota)) = c.cpu {
            resources.insert("cpu_period".into(), json!(period));
            resources.insert("cpu_quota".into(), json!(quota));
        }
        if let Some(m) = c.memory_limit {
            resources.insert("memory_limit_in_bytes".into(), json!(m));
        }
        // The kubelet labels each container with its name, and CRI-O gives
        // NRI plugins the name from that label (not from the metadata).
        let mut labels = c.labels.clone();
        labels.entry("io.kubernetes.container.name".into()).or_insert_with(|| c.name.clone());
        let mut config = json!({
            "metadata": { "name": c.name, "attempt": 0 },
            "image": { "image": images::BUSYBOX },
            "command": c.command,
            "envs": c.env.iter().map(|(k, v)| json!({ "key": k, "value": v })).collect::<Vec<_>>(),
            "labels": labels,
            "annotations": c.annotations,
            "log_path": format!("{}-{}.log", c.name, self.next()),
            "linux": {
                "resources": resources,
                "security_context": { "namespace_options": { "network": 2, "pid": 1 } },
            },
            "mounts": c.mounts.iter().map(|(host, container, readonly)| {
                json!({ "host_path": host, "container_path": container, "readonly": readonly })
            }).collect::<Vec<_>>(),
        });
        if let Some(obj) = config.as_object_mut() {
            obj.extend(c.extra.clone());
        }
        self.write_json("container", &config)
    }

    pub fn start(&self, id: &str) -> Result<(), Error> {
        self.run(&["start", id]).map(drop)
    }

    /// Creates and starts a container; its id.
    pub fn create_and_start(&self, pod: &PodSandbox, c: &Container) -> Result<String, Error> {
        let id = self.create(pod, c)?;
        self.start(&id)?;
        Ok(id)
    }

    /// `crictl inspect` of a container, whole.
    pub fn inspect(&self, id: &str) -> Result<Value, Error> {
        let text = self.run(&["inspect", "-o", "json", id])?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Parse { what: format!("crictl inspect {id}"), detail: e.to_string() })
    }

    /// The OCI spec the runtime made for a container.
    pub fn spec(&self, id: &str) -> Result<Value, Error> {
        let v = self.inspect(id)?;
        v.pointer("/info/runtimeSpec")
            .cloned()
            .ok_or_else(|| Error::Parse { what: format!("crictl inspect {id}"), detail: "no info.runtimeSpec".into() })
    }

    /// Runs a command in a running container; its stdout.
    pub fn exec(&self, id: &str, cmd: &[&str]) -> Result<String, Error> {
        let mut args = vec!["exec", "--sync", id];
        args.extend_from_slice(cmd);
        self.run(&args)
    }

    /// Stops and removes every pod (and their containers).
    pub fn remove_all_pods(&self) -> Result<(), Error> {
        // Containers first: `rm --force` stops them at once, where CRI-O's
        // StopPodSandbox gives each the whole CRI deadline to exit (a
        // `sleep` as pid 1 ignores SIGTERM).
        let _ = self.run(&["rm", "--force", "--all"]);
        self.run(&["rmp", "--force", "--all"]).map(drop)
    }
}

/// The value of `name` in a spec's `process.env`.
pub fn spec_env(spec: &Value, name: &str) -> Option<String> {
    let env = spec.pointer("/process/env")?.as_array()?;
    let prefix = format!("{name}=");
    env.iter().filter_map(Value::as_str).find_map(|e| e.strip_prefix(&prefix).map(str::to_string))
}

/// The value of annotation `key` in a spec.
pub fn spec_annotation(spec: &Value, key: &str) -> Option<String> {
    spec.pointer("/annotations")?.get(key)?.as_str().map(str::to_string)
}

/// The value of `name` in the output of `env`.
pub fn env_value(env_output: &str, name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    env_output.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}
