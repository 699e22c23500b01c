//! A global allocator that counts the live heap of the process, for the
//! tests that check that the host frees what it allocates. A test binary
//! installs it with
//! `#[global_allocator] static A: Counting = Counting;` (the e2e suite's
//! `tests/memory.rs`); the count is the whole process's, so a measure is
//! worth something only while nothing else runs in it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

/// Passes every call to the system allocator and counts the bytes.
#[derive(Debug)]
pub struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

/// Bytes allocated and not yet freed, when [`Counting`] is the global
/// allocator (zero otherwise).
pub fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

// SAFETY: every call is passed on to the system allocator unchanged;
// the counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
