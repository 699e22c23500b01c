//! The host on real container runtimes (see src/lib.rs and the README's
//! "Real runtimes"): one module per topic. Needs `--features runtimes` and
//! tests/runtimes/install.sh; without the feature this binary is empty.
#![cfg(feature = "runtimes")]

#[path = "runtimes/e2e.rs"]
mod e2e;

#[path = "runtimes/differential.rs"]
mod differential;
