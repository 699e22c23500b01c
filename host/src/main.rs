//! The `nri-wasm` binary: everything is in [`nri_wasm::cli::main`].

/// Every event allocates many small strings (protobuf decoding, the WIT
/// conversions, the merge); mimalloc serves them faster than the system
/// allocator (see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<std::process::ExitCode> {
    // SAFETY: the first thing the process does: nothing has opened a file.
    unsafe { nri_wasm::cli::main() }
}
