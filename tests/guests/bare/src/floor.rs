//! What a guest without the standard library needs to be a component:
//! an allocator, `cabi_realloc` and a panic handler. Shared by the guests
//! at the sandbox's floor (`bare`, and `lean` through a `#[path]`).

/// A bump allocator over a fixed arena: every call runs in a fresh
/// instance, so nothing is ever freed, and a call that needs more than the
/// arena fails its allocation (a trap the host reports).
mod bump {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;

    const SIZE: usize = 64 * 1024;

    /// Aligned to the largest alignment the canonical ABI asks for (8), and
    /// more: offsets aligned within it are addresses aligned as asked.
    #[repr(C, align(16))]
    struct Arena {
        bytes: UnsafeCell<[u8; SIZE]>,
        next: UnsafeCell<usize>,
    }

    // SAFETY: a component instance runs on one thread (wasm32 without the
    // atomics feature has no threads, enforced below), so the cells are
    // never shared.
    unsafe impl Sync for Arena {}

    static ARENA: Arena = Arena { bytes: UnsafeCell::new([0; SIZE]), next: UnsafeCell::new(0) };

    #[cfg(target_feature = "atomics")]
    compile_error!("the bump allocator assumes one thread: build without the atomics feature");

    struct Bump;

    // SAFETY: every block returned lies inside the arena, is aligned as
    // asked, and is never handed out twice (`next` only grows).
    unsafe impl GlobalAlloc for Bump {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: single-threaded (see `Arena`); no other reference to `next` lives.
            let next = unsafe { &mut *ARENA.next.get() };
            // Aligning the offset aligns the address: the arena's own
            // alignment (16) is at least any alignment asked of it here;
            // a larger one is refused.
            if layout.align() > 16 {
                return core::ptr::null_mut();
            }
            let Some(start) = next.checked_add(layout.align() - 1).map(|n| n & !(layout.align() - 1)) else {
                return core::ptr::null_mut();
            };
            match start.checked_add(layout.size()) {
                Some(end) if end <= SIZE => {
                    *next = end;
                    // SAFETY: `start + size <= SIZE`, inside the arena.
                    unsafe { ARENA.bytes.get().cast::<u8>().add(start) }
                }
                _ => core::ptr::null_mut(),
            }
        }

        unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
    }

    #[global_allocator]
    static GLOBAL: Bump = Bump;
}

/// The canonical ABI's allocation entry point (the host copies strings and
/// lists into the guest through it), on the global allocator.
///
/// # Safety
/// Called by the host as the canonical ABI specifies: `old` is null or a
/// block of `old_size` bytes this function returned, `align` a power of two.
#[no_mangle]
pub unsafe extern "C" fn cabi_realloc(old: *mut u8, old_size: usize, align: usize, new_size: usize) -> *mut u8 {
    if new_size == 0 {
        return align as *mut u8;
    }
    let Ok(layout) = core::alloc::Layout::from_size_align(new_size, align) else { core::arch::wasm32::unreachable() };
    // SAFETY: `layout` has a non-zero size.
    let new = unsafe { alloc::alloc::alloc(layout) };
    if new.is_null() {
        core::arch::wasm32::unreachable();
    }
    if !old.is_null() && old_size > 0 {
        // SAFETY: `old` holds `old_size` bytes (the ABI's contract), `new` at
        // least `new_size`; the blocks do not overlap (the arena only grows).
        unsafe { core::ptr::copy_nonoverlapping(old, new, old_size.min(new_size)) };
    }
    new
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}
