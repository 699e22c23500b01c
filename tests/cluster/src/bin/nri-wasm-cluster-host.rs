//! The `nri-wasm` binary, built by this crate so that its tests get it with
//! `env!("CARGO_BIN_EXE_nri-wasm-cluster-host")` and pack it into the image
//! the DaemonSet runs (a binary of another package is not built by
//! `cargo test -p nri-wasm-cluster`).

#[global_allocator]
static GLOBAL: nri_wasm::alloc::HostAllocator = nri_wasm::alloc::HostAllocator;

fn main() -> std::process::ExitCode {
    // SAFETY: the first thing the process does: nothing has opened a file.
    nri_wasm::cli::exit(unsafe { nri_wasm::cli::main() })
}
