//! The tests that measure the memory of their own process, as a second test
//! binary: the fault matrix (`faults.rs`, resident memory), the attacks
//! (`hostile.rs`) and hot reload under load (`reload.rs`), both counting the
//! live heap with this binary's global allocator (`nri_wasm_test_support::heap`). A
//! measure of the process means something only when nothing else runs in
//! it: each of these tests that measures holds [`ALONE`] while it runs, and
//! no test of the main binary (`main.rs`) shares the process.

#[global_allocator]
static ALLOCATOR: nri_wasm_test_support::heap::Counting = nri_wasm_test_support::heap::Counting;

/// Held by every test of this binary that measures, for as long as it runs.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[path = "faults.rs"]
mod faults;
#[path = "hostile.rs"]
mod hostile;
#[path = "reload.rs"]
mod reload;
