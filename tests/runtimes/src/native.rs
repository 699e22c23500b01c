//! The native reference plugin (`native-plugin/main.go`, built by
//! `native-plugin/build.sh`) as a process of a test, and the adjustments it
//! is told to make.
//!
//! The differential tests give the same [`Adjustments`] to a native plugin
//! (as its command line) and to the `mirror` test guest (as its settings),
//! so that what the runtime merges from K native plugins can be compared
//! with what the host merges from K policies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::log::Log;
use crate::process::Process;
use crate::runtime::RuntimeKind;
use crate::{require, Error};

/// The NRI library version the plugin is built against for each runtime
/// (the version the runtime itself speaks; CRI-O 1.3x speaks 0.11, which a
/// 0.12 plugin serves).
pub fn nri_version(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Containerd23 | RuntimeKind::Crio => "0.12.0",
        RuntimeKind::Containerd17 => "0.8.0",
    }
}

/// The built plugin for `kind`, or an error saying how to build it.
pub fn binary(kind: RuntimeKind) -> Result<PathBuf, Error> {
    let version = nri_version(kind);
    let args = if kind == RuntimeKind::Containerd17 { " --containerd-1.7" } else { "" };
    require(
        &format!("the native NRI plugin for NRI {version}"),
        crate::runtimes_dir().join(format!("native-plugin-{version}/native-plugin")),
        args,
    )
}

/// One plugin's adjustments, in order: flags of the native plugin, each
/// `-flag=value` (see `native-plugin/main.go` for the value syntax).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adjustments(Vec<String>);

impl Adjustments {
    pub fn new() -> Self {
        Self::default()
    }

    fn flag(mut self, flag: &str, value: impl std::fmt::Display) -> Self {
        self.0.push(format!("-{flag}={value}"));
        self
    }

    pub fn env_set(self, k: &str, v: &str) -> Self {
        self.flag("env-set", format!("{k}={v}"))
    }
    pub fn env_remove(self, k: &str) -> Self {
        self.flag("env-remove", k)
    }
    pub fn annotation_set(self, k: &str, v: &str) -> Self {
        self.flag("annotation-set", format!("{k}={v}"))
    }
    pub fn annotation_remove(self, k: &str) -> Self {
        self.flag("annotation-remove", k)
    }
    /// A bind mount of `src` at `dst`.
    pub fn mount_add(self, dst: &str, src: &str, options: &[&str]) -> Self {
        self.flag("mount-add", format!("{dst}:{src}:{}", options.join(",")))
    }
    pub fn mount_remove(self, dst: &str) -> Self {
        self.flag("mount-remove", dst)
    }
    pub fn memory_limit(self, bytes: i64) -> Self {
        self.flag("memory-limit", bytes)
    }
    pub fn cpu_shares(self, n: u64) -> Self {
        self.flag("cpu-shares", n)
    }
    pub fn cpu_quota(self, n: i64) -> Self {
        self.flag("cpu-quota", n)
    }
    pub fn cpu_period(self, n: i64) -> Self {
        self.flag("cpu-period", n)
    }
    pub fn pids_limit(self, n: i64) -> Self {
        self.flag("pids-limit", n)
    }
    pub fn rlimit(self, kind: &str, soft: u64, hard: u64) -> Self {
        self.flag("rlimit", format!("{kind}:{soft}:{hard}"))
    }
    /// A device node; `mode` is written in octal.
    pub fn device_add(self, path: &str, kind: &str, major: i64, minor: i64, mode: Option<u32>) -> Self {
        let mode = mode.map(|m| format!(":{m:o}")).unwrap_or_default();
        self.flag("device-add", format!("{path}:{kind}:{major}:{minor}{mode}"))
    }
    pub fn device_remove(self, path: &str) -> Self {
        self.flag("device-remove", path)
    }
    /// An OCI hook; `kind` is `prestart`, `create-runtime`, ..., `poststop`.
    pub fn hook(self, kind: &str, path: &str, args: &[&str]) -> Self {
        self.flag("hook", format!("{kind}:{path}:{}", args.join(",")))
    }
    /// An update of every other container named `name`; keys are
    /// `memory-limit`, `cpu-shares`, `cpu-quota`, `cpu-period`, `pids-limit`.
    pub fn update(self, name: &str, resources: &[(&str, i64)]) -> Self {
        let list: Vec<String> = resources.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.flag("update", format!("{name}:{}", list.join(",")))
    }

    /// The native plugin's arguments.
    pub fn args(&self) -> &[String] {
        &self.0
    }

    /// The `mirror` guest's settings: the same flags, one per line.
    pub fn settings(&self) -> String {
        self.0.join("\n")
    }
}

/// A running native plugin, stopped by its pid when dropped.
#[derive(Debug)]
pub struct NativePlugin {
    process: Process,
    /// `NN-name`, as the runtime calls it.
    full_name: String,
    runtime_log: Log,
    /// How many times the runtime had synchronized a plugin of this name
    /// before this one started.
    synced_before: usize,
}

impl NativePlugin {
    /// Starts the plugin `bin` as `idx-name` on the runtime's `socket`, its
    /// output in `<dir>/native-<idx>-<name>.log`; `runtime_log` is where
    /// [`NativePlugin::wait_synchronized`] looks.
    pub fn start(
        bin: &Path,
        dir: &Path,
        socket: &Path,
        (idx, name): (&str, &str),
        adjustments: &Adjustments,
        runtime_log: &Log,
    ) -> Result<Self, Error> {
        let full_name = format!("{idx}-{name}");
        let synced_before = synced_count(runtime_log, &full_name);
        let mut cmd = Command::new(bin);
        cmd.arg("-idx").arg(idx).arg("-name").arg(name).arg("-socket").arg(socket).args(adjustments.args());
        let log = dir.join(format!("native-{idx}-{name}.log"));
        let process = Process::spawn(&format!("native plugin {idx}-{name}"), cmd, &log)?;
        Ok(NativePlugin { process, full_name, runtime_log: runtime_log.clone(), synced_before })
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    pub fn full_name(&self) -> &str {
        &self.full_name
    }

    pub fn log(&self) -> Log {
        Log::new(self.process.log_path())
    }

    /// Waits until the runtime has this start of the plugin in its list
    /// (it logs `plugin "NN-name" connected and synchronized` once more
    /// than before the start); fails at once, with the plugin's output, if
    /// the plugin exits (backstop 60 s).
    pub fn wait_synchronized(&mut self) -> Result<(), Error> {
        let log = self.log();
        let (runtime_log, full_name, before) = (&self.runtime_log, &self.full_name, self.synced_before);
        let process = &mut self.process;
        let mut exited = false;
        let r = crate::wait_for(
            &format!("native plugin {full_name} synchronized by the runtime"),
            Duration::from_secs(60),
            || {
                if !process.running() {
                    exited = true;
                    return Some(());
                }
                (synced_count(runtime_log, full_name) > before).then_some(())
            },
        );
        if exited {
            return Err(Error::Unsupported(format!(
                "native plugin {full_name} exited before it was synchronized: {}",
                log.tail(20)
            )));
        }
        r.map_err(|e| Error::Unsupported(format!("{e}; the runtime's log ends with:\n{}", runtime_log.tail(20))))
    }

    pub fn stop(&mut self) {
        self.process.stop(Duration::from_secs(10));
    }
}

/// How many times the runtime's log says it synchronized plugin `full_name`
/// (containerd and CRI-O log `plugin "NN-name" connected and synchronized`,
/// the quotes escaped in logfmt).
pub fn synced_count(runtime_log: &Log, full_name: &str) -> usize {
    let escaped = format!("plugin \\\"{full_name}\\\" connected and synchronized");
    let plain = format!("plugin \"{full_name}\" connected and synchronized");
    runtime_log.count(&escaped) + runtime_log.count(&plain)
}
