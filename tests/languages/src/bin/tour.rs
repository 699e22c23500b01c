//! `nri-wasm`, the host's command line, as a binary of this package: the
//! tour test (`tests/tour.rs`) runs the documented commands as an author
//! runs them, with a real process, its working directory and environment,
//! and a test can run only the binaries of its own package. It is the
//! binary's `main`, nothing added.

fn main() -> std::process::ExitCode {
    // SAFETY: the first thing the process does: nothing has opened a file.
    nri_wasm::cli::exit(unsafe { nri_wasm::cli::main() })
}
