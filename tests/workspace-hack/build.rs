//! Empty on purpose: a package's build-dependencies take part in feature
//! resolution only when it has a build script (see Cargo.toml).

fn main() {}
