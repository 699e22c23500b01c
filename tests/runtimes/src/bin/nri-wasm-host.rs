//! The `nri-wasm` binary, built by this crate so that its tests get it with
//! `env!("CARGO_BIN_EXE_nri-wasm-host")` (a binary of another package is
//! not built by `cargo test -p nri-wasm-runtimes`).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<std::process::ExitCode> {
    // SAFETY: the first thing the process does: nothing has opened a file.
    unsafe { nri_wasm::cli::main() }
}
