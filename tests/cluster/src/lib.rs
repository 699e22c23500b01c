//! A real single-node Kubernetes for the DaemonSet, in the test suite.
//!
//! Operators run nri-wasm as the DaemonSet of `docs/deploy/`, on nodes where
//! the kubelet makes the pods (pause sandboxes, probes, restarts, cgroup
//! parents, its own annotations), a ConfigMap volume is swapped through a
//! `..data` symlink, and upgrades are rolling updates. crictl does none of
//! that, so this crate runs the real thing: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and a kubelet on containerd 2.3.4
//! with NRI, all built from pinned versions by `tests/cluster/install.sh`,
//! with certificates made for each test, and the project's kustomization
//! applied with kubectl as the docs tell an operator.
//!
//! Each [`cluster::Cluster`] is a node of its own, and leaves nothing
//! behind:
//!
//! - every process runs in a network and mount namespace made for the test
//!   ([`ns`]): the control plane listens on that namespace's loopback, the
//!   pod bridge, routes and the kubelet's iptables chains live and die with
//!   it; `/run`, `/var/lib`, `/var/cache` and `/var/log` are the test's own
//!   directories there, so the DaemonSet's hostPaths (`/var/run/nri`,
//!   `/var/cache/nri-wasm`, `/var/lib/nri-wasm/state`) are applied unchanged
//!   and never touch the machine's; the namespace's mounts (the kubelet's
//!   volumes) vanish with its last process;
//! - the pods' cgroups sit under a cgroup root of the test's, killed and
//!   removed at the end; containerd's shims are stopped by pid.
//!
//! - [`cluster`]: the node: start, restart of containerd and the kubelet, the
//!   end;
//! - [`kubectl`]: kubectl against it, objects as JSON;
//! - [`pki`]: the cluster's CA and certificates, made with openssl;
//! - [`image`]: the nri-wasm image, built by `docs/deploy/build-image.sh`;
//! - [`ns`]: the namespaces, and commands and sockets inside them;
//! - [`http`]: plain HTTP/1.0 GETs (the host's `/metrics`, `/status`).

pub mod cluster;
pub mod http;
pub mod image;
pub mod kubectl;
pub mod ns;
pub mod pki;

use std::path::{Path, PathBuf};

pub use nri_wasm_runtimes::wait_for;

/// What can go wrong while setting the cluster up or driving it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Something install.sh installs is not there.
    #[error("{what} is missing ({path}): run tests/cluster/install.sh first")]
    Missing { what: String, path: PathBuf },
    /// A step of the shared runtime harness (containerd, images, waits).
    #[error(transparent)]
    Runtime(#[from] nri_wasm_runtimes::Error),
    /// A command ran and failed.
    #[error("{command} failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Output that could not be read.
    #[error("{what}: {detail}")]
    Parse { what: String, detail: String },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }
}

/// Where install.sh puts Kubernetes and etcd: `NRI_WASM_CLUSTER`, or the
/// repository's `target/cluster`.
pub fn cluster_dir() -> PathBuf {
    match std::env::var_os("NRI_WASM_CLUSTER") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo().join("target/cluster"),
    }
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pinned versions, as install.sh has them.
pub const KUBERNETES_VERSION: &str = "1.34.4";
pub const ETCD_VERSION: &str = "3.6.16";

/// `path` if it exists, otherwise an error telling what to install.
pub fn require(what: &str, path: PathBuf) -> Result<PathBuf, Error> {
    if path.exists() {
        Ok(path)
    } else {
        Err(Error::Missing { what: what.into(), path })
    }
}

/// A Kubernetes binary (`kubelet`, `kubectl`, ...).
pub fn kube_bin(name: &str) -> Result<PathBuf, Error> {
    require(
        &format!("Kubernetes {KUBERNETES_VERSION}'s {name}"),
        cluster_dir().join(format!("kubernetes-{KUBERNETES_VERSION}")).join(name),
    )
}

/// The etcd binary.
pub fn etcd_bin() -> Result<PathBuf, Error> {
    require(&format!("etcd {ETCD_VERSION}"), cluster_dir().join(format!("etcd-{ETCD_VERSION}/etcd")))
}

#[cfg(test)]
mod tests {
    /// The versions the harness looks for are the ones install.sh builds.
    #[test]
    fn install_sh_pins_the_versions_the_harness_expects() {
        let script = std::fs::read_to_string(super::repo().join("tests/cluster/install.sh")).unwrap();
        let pinned = |var: &str| {
            script
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{var}=")))
                .unwrap_or_else(|| panic!("install.sh sets {var}"))
                .to_string()
        };
        assert_eq!(pinned("KUBERNETES_VERSION"), super::KUBERNETES_VERSION);
        assert_eq!(pinned("ETCD_VERSION"), super::ETCD_VERSION);
    }
}
