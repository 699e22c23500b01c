//! The `nri-wasm` binary: everything is in [`nri_wasm::cli::main`].

/// Every event allocates many small strings (protobuf decoding, the WIT
/// conversions, the merge); mimalloc serves them faster than the system
/// allocator (see docs/performance.md). Loading a policy's large buffers
/// go to the kernel directly ([`nri_wasm::alloc`]).
#[global_allocator]
static GLOBAL: nri_wasm::alloc::HostAllocator = nri_wasm::alloc::HostAllocator;

fn main() -> std::process::ExitCode {
    // SAFETY: the first thing the process does: nothing has opened a file.
    nri_wasm::cli::exit(unsafe { nri_wasm::cli::main() })
}
