//! The DaemonSet of `docs/deploy/` on a real single-node Kubernetes (see
//! src/lib.rs and the README's "Kubernetes"): one module per topic. Needs
//! `--features cluster` and tests/cluster/install.sh; without the feature
//! this binary is empty. One test at a time (`--test-threads=1`): each
//! starts a cluster of its own.
#![cfg(feature = "cluster")]

#[path = "cluster/support.rs"]
mod support;

#[path = "cluster/deploy.rs"]
mod deploy;

#[path = "cluster/upgrade.rs"]
mod upgrade;

#[path = "cluster/scale.rs"]
mod scale;

#[path = "cluster/registry.rs"]
mod registry;
