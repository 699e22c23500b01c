//! The `nri-wasm` binary, built by the benchmarks' own crate so that the
//! real-path benchmark can run it as a separate process (a binary of
//! another package is not built by `cargo bench -p nri-wasm-benches`).

#[global_allocator]
static GLOBAL: nri_wasm::alloc::HostAllocator = nri_wasm::alloc::HostAllocator;

fn main() -> std::process::ExitCode {
    // SAFETY: the first thing the process does: nothing has opened a file.
    nri_wasm::cli::exit(unsafe { nri_wasm::cli::main() })
}
