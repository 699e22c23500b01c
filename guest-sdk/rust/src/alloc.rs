//! The SDK's allocator: a bump allocator for instances that live one call.
//!
//! The host runs every call in a fresh instance and drops it afterwards, so
//! freeing memory inside a call buys little, while the allocator is on the
//! hot path of every call: the host copies each string and list of the event
//! into the guest through `cabi_realloc`, a few hundred allocations for a
//! typical container, and the guest frees them all again when the event is
//! dropped. Bumping a pointer makes both nearly free.
//!
//! Memory is taken from the end of linear memory in chunks; a freed block is
//! reused only when it was the last one handed out, and growing the last
//! block happens in place (the pattern of a growing `Vec` or `String`). A
//! policy that churns through far more memory than it keeps can turn this off
//! with `default-features = false` and gets the standard allocator back; the
//! memory limit of the policy bounds either.

// The `Sync` argument below rests on one thread per instance.
#[cfg(all(feature = "bump-alloc", target_arch = "wasm32", target_feature = "atomics"))]
compile_error!(
    "the SDK's bump allocator assumes a single-threaded instance; build without the `atomics` target feature \
     or with `default-features = false` (the standard allocator)"
);

use core::alloc::{GlobalAlloc, Layout};
use core::cell::Cell;

/// Smallest amount of memory taken from the host at a time.
const CHUNK: usize = 256 << 10;
const PAGE: usize = 64 << 10;

/// A bump allocator over `memory.grow`.
#[derive(Debug)]
pub struct BumpAlloc {
    next: Cell<usize>,
    end: Cell<usize>,
}

// SAFETY: `Sync` is needed to be the global allocator (a `static`). The
// cells are only written from `alloc`, `dealloc` and `realloc`; on wasm32 a
// component instance runs one thread (wasm32-wasip2 has no threads, and a
// build with the `atomics` feature is refused above), so no two calls ever
// overlap. Built for any other target `grow` always fails,
// so `alloc` returns null before writing anything and `dealloc`/`realloc`
// never see a block of this allocator: the cells are never written there.
unsafe impl Sync for BumpAlloc {}

impl BumpAlloc {
    pub const fn new() -> Self {
        Self { next: Cell::new(0), end: Cell::new(0) }
    }

    /// Makes room for `size` bytes aligned to `align` after `next`.
    // Rare (once per 64 KiB chunk): kept out of line so that the fast path
    // of `alloc`, inlined at every allocation of the policy, stays small.
    #[cold]
    #[inline(never)]
    fn grow(&self, size: usize, align: usize) -> bool {
        let want = size.saturating_add(align).max(CHUNK);
        let pages = want.div_ceil(PAGE);
        if pages > usize::MAX / PAGE {
            return false;
        }
        #[cfg(target_arch = "wasm32")]
        let old = core::arch::wasm32::memory_grow(0, pages);
        #[cfg(not(target_arch = "wasm32"))]
        let old = usize::MAX;
        if old == usize::MAX {
            return false;
        }
        // A memory of 4 GiB ends at 2^32, which a 32-bit `usize` cannot
        // hold: such a chunk is left unused rather than wrapped around.
        let Some((start, end)) = old.checked_mul(PAGE).and_then(|s| Some((s, s.checked_add(pages * PAGE)?))) else {
            return false;
        };
        // Contiguous with the current chunk: extend it, otherwise start anew.
        if self.end.get() != start {
            self.next.set(start);
        }
        self.end.set(end);
        true
    }

    /// The block of `layout` at the first suitable address from `next`, as
    /// `(start, end)`, if it fits before `end`; `None` also where the
    /// arithmetic would overflow (on 32 bits, near 4 GiB).
    fn fit(&self, layout: Layout) -> Option<(usize, usize)> {
        let align = layout.align();
        let start = self.next.get().checked_add(align - 1)? & !(align - 1);
        let end = start.checked_add(layout.size())?;
        (self.next.get() != 0 && end <= self.end.get()).then_some((start, end))
    }
}

impl Default for BumpAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: what `GlobalAlloc` asks of an allocator:
// - a block returned by `alloc` is aligned to `layout.align()` (the start is
//   rounded up to it, a power of two), `layout.size()` bytes long, and lies
//   between `next` and `end`, memory that `memory.grow` handed to this
//   allocator alone and that no live block covers: `next` only moves back
//   in `dealloc`/`realloc`, over the block that ends at it, which the caller
//   gives up (or resizes) by calling them. Every sum of an address and a
//   size is checked (`fit`, `grow`, `realloc`): one that would overflow is
//   no block, so nothing wraps around to low addresses;
// - failure is reported by returning null (when `memory.grow` fails or an
//   address would overflow), never by panicking or unwinding;
// - `realloc` keeps the first `min(old, new)` bytes: in place when the block
//   is the last one and fits (or shrinks), otherwise by copying into a new
//   block, which cannot overlap the old one since the old one is live.
unsafe impl GlobalAlloc for BumpAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let fitted =
            self.fit(layout).or_else(|| self.grow(layout.size(), layout.align()).then(|| self.fit(layout)).flatten());
        match fitted {
            Some((start, end)) => {
                self.next.set(end);
                start as *mut u8
            }
            None => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ptr as usize + layout.size() == self.next.get() {
            self.next.set(ptr as usize);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let at = ptr as usize;
        let last = at.checked_add(layout.size()) == Some(self.next.get());
        if last && at.checked_add(new_size).is_some_and(|end| end <= self.end.get()) {
            self.next.set(at + new_size);
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: the caller's layout is valid and `new_size` is nonzero.
        let new = unsafe { self.alloc(Layout::from_size_align_unchecked(new_size, layout.align())) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the old size and distinct.
            unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size()) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Near the top of the address space, sums that would wrap around are
    /// refused (null), not turned into a block at a low address.
    #[test]
    fn sizes_that_would_overflow_the_address_space_are_refused() {
        let a = BumpAlloc { next: Cell::new(usize::MAX - 8), end: Cell::new(usize::MAX) };
        let layout = Layout::from_size_align(64, 16).unwrap();
        // SAFETY: a valid, nonzero layout; a null result is checked.
        assert!(unsafe { a.alloc(layout) }.is_null());
        let block = (usize::MAX - 8) as *mut u8;
        let small = Layout::from_size_align(1, 1).unwrap();
        let b = BumpAlloc { next: Cell::new(usize::MAX - 7), end: Cell::new(usize::MAX) };
        // SAFETY: `block` is "the last block" of `b` by its cells; realloc
        // must not write through it when the new end would overflow.
        assert!(unsafe { b.realloc(block, small, 16) }.is_null());
        assert_eq!(b.next.get(), usize::MAX - 7, "a refused realloc moves nothing");
    }
}
