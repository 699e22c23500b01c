//! The `nri-wasm` binary, built by this crate so that its tests can run it
//! as an operator does (`env!("CARGO_BIN_EXE_nri-wasm-under-test")`: a
//! binary of another package is not built by `cargo test -p nri-wasm-e2e`).
//! The registry tests run the commands `docs/operations.md` shows with it,
//! and measure the peak memory of `nri-wasm pull` as a process of its own.

#[global_allocator]
static GLOBAL: nri_wasm::alloc::HostAllocator = nri_wasm::alloc::HostAllocator;

fn main() -> std::process::ExitCode {
    // SAFETY: the first thing the process does: nothing has opened a file.
    nri_wasm::cli::exit(unsafe { nri_wasm::cli::main() })
}
