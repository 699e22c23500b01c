//! The host's global allocator: mimalloc for what events allocate, the
//! kernel itself for very large buffers.
//!
//! Why: loading a policy reads its file, its compiled artifact or the
//! compiler's output into buffers of tens of megabytes (a Python policy is
//! 19 MB, its compiled form 59 MB). mimalloc keeps the pages of a freed
//! block for the thread that freed it, and returns them to the system only
//! when that thread allocates again; the threads that load policies then
//! sit idle, so a host with six policies in four languages stayed at
//! 271 MB resident where 127 MB were in use. Buffers of [`DIRECT`] bytes
//! or more are mapped and unmapped here instead, and go back to the system
//! the moment they are freed. Events never allocate that much, so their
//! path is mimalloc's, as fast as before.

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;

/// Blocks of this size or more are mapped directly.
pub const DIRECT: usize = 4 << 20;

/// Every Linux page size is at least this; a mapping is aligned to it.
const MAP_ALIGN: usize = 4096;

/// See the module's documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostAllocator;

fn direct(layout: Layout) -> bool {
    layout.size() >= DIRECT && layout.align() <= MAP_ALIGN
}

/// A fresh private anonymous mapping of `size` bytes (zeroed), or null.
fn map(size: usize) -> *mut u8 {
    // SAFETY: a new anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// # Safety
/// `ptr` and `size` are a mapping made by [`map`] (or moved by `mremap`).
unsafe fn unmap(ptr: *mut u8, size: usize) {
    // SAFETY: the caller's contract.
    unsafe { libc::munmap(ptr.cast(), size) };
}

// SAFETY: every block is either mimalloc's (small, or over-aligned) or a
// mapping of its own (large); which one is decided by the layout alone,
// which the caller passes back unchanged to dealloc and realloc.
unsafe impl GlobalAlloc for HostAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if direct(layout) {
            map(layout.size())
        } else {
            // SAFETY: the caller's contract is mimalloc's.
            unsafe { MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if direct(layout) {
            // Anonymous mappings are zeroed by the kernel.
            map(layout.size())
        } else {
            // SAFETY: the caller's contract is mimalloc's.
            unsafe { MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if direct(layout) {
            // SAFETY: a large block is a mapping of exactly this size.
            unsafe { unmap(ptr, layout.size()) }
        } else {
            // SAFETY: the caller's contract is mimalloc's.
            unsafe { MiMalloc.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with this alignment is a
        // valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (direct(layout), direct(new)) {
            // SAFETY: the caller's contract is mimalloc's.
            (false, false) => unsafe { MiMalloc.realloc(ptr, layout, new_size) },
            (true, true) => {
                // SAFETY: `ptr` is a mapping of `layout.size()` bytes; the
                // kernel moves it if it cannot grow in place.
                let p = unsafe { libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE) };
                if p == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    p.cast()
                }
            }
            _ => {
                // Across the threshold: a new block, the bytes both hold,
                // then the old block goes.
                // SAFETY: `new` is a valid layout (see above).
                let p = unsafe { self.alloc(new) };
                if !p.is_null() {
                    // SAFETY: both blocks hold at least this many bytes and
                    // do not overlap (one is new).
                    unsafe { std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size)) };
                    // SAFETY: the old block, with its own layout.
                    unsafe { self.dealloc(ptr, layout) };
                }
                p
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident KiB of the mapping that holds `addr`, if one does: only
    /// this block's own pages, whatever other tests of the process do.
    fn resident_kib_at(addr: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or_default();
            if let Some((start, end)) = head.split_once('-') {
                if let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16)) {
                    inside = (start..end).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(kib) = line.strip_prefix("Rss:") {
                    return kib.trim().trim_end_matches("kB").trim().parse().ok();
                }
            }
        }
        None
    }

    #[test]
    fn blocks_on_both_sides_of_the_threshold_hold_their_bytes() {
        let a = HostAllocator;
        for (from, to) in [(64, 1000), (1000, DIRECT + 1), (DIRECT, 3 * DIRECT), (3 * DIRECT, 100), (100, 50)] {
            // SAFETY: valid layouts; every block is freed with its own.
            unsafe {
                let layout = Layout::from_size_align(from, 8).unwrap();
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert!(std::slice::from_raw_parts(p, from).iter().all(|b| *b == 0), "zeroed ({from})");
                for i in 0..from {
                    *p.add(i) = (i % 251) as u8;
                }
                let q = a.realloc(p, layout, to);
                assert!(!q.is_null());
                for i in 0..from.min(to) {
                    assert_eq!(*q.add(i), (i % 251) as u8, "byte {i} after {from} -> {to}");
                }
                a.dealloc(q, Layout::from_size_align(to, 8).unwrap());
            }
        }
        // Over-aligned large blocks stay mimalloc's, and work.
        // SAFETY: a valid layout, freed with itself.
        unsafe {
            let layout = Layout::from_size_align(DIRECT, 1 << 16).unwrap();
            let p = a.alloc(layout);
            assert_eq!(p as usize % (1 << 16), 0);
            a.dealloc(p, layout);
        }
    }

    /// The point of it: a large buffer, written and freed, leaves nothing
    /// resident.
    #[test]
    fn a_freed_large_block_is_no_longer_resident() {
        let a = HostAllocator;
        let size = 64 << 20;
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: a valid layout, written within its size, freed with it.
        let (addr, during, after) = unsafe {
            let p = a.alloc(layout);
            std::ptr::write_bytes(p, 1, size);
            let during = resident_kib_at(p as usize);
            a.dealloc(p, layout);
            (p as usize, during, resident_kib_at(p as usize))
        };
        assert!(during.is_some_and(|kib| kib >= 64 * 1024), "{during:?} KiB resident while used at {addr:#x}");
        // Unmapped: no mapping holds it, or (another test mapped the
        // address since) not with these pages.
        assert!(after.is_none_or(|kib| kib < 16 * 1024), "{after:?} KiB still resident at {addr:#x}");
    }
}
