//! The process's allocator: mimalloc, entered at its plain `malloc` when the default alignment
//! serves, as std's own `System` does.
//!
//! The `mimalloc` crate sends every allocation through `mi_malloc_aligned`, whose alignment
//! checks and fallbacks cost ~50 instructions an allocation before the same block is popped:
//! ~350 of the ~19k instructions of a proxied request. mimalloc places every block of 16 bytes
//! or more at a multiple of 16 (`MI_MAX_ALIGN_SIZE`), and smaller ones at their size class, so
//! an alignment of at most 16 and at most the size needs no more.

// An allocator is foreign calls and raw pointers throughout; this module is that and no more.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// What every mimalloc block is aligned to, for blocks at least this large.
const MIN_ALIGN: usize = 16;

/// mimalloc as the global allocator (`#[global_allocator]` in `main.rs`).
pub struct MiMalloc;

/// Whether mimalloc's plain entry points already give `layout` its alignment.
fn plain(layout: &Layout) -> bool {
    layout.align() <= MIN_ALIGN && layout.align() <= layout.size()
}

// SAFETY: each method forwards to the mimalloc call with the same contract; the plain entry
// points are used only where mimalloc's own alignment guarantee covers the layout.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_malloc(layout.size()).cast()
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(&layout) {
            mi::mi_zalloc(layout.size()).cast()
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: realloc's contract makes `new_size` with this alignment a valid layout.
        let grown = Layout::from_size_align_unchecked(new_size, layout.align());
        if plain(&grown) {
            mi::mi_realloc(ptr.cast(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocates 32 blocks of `layout` through [`MiMalloc`] at once (so blocks from several
    /// places in a page are seen), fills each, checks its alignment, grows it and checks the
    /// bytes moved with it; then the same for zeroed blocks.
    fn round_trip(size: usize, align: usize) {
        let layout = Layout::from_size_align(size, align).expect("a valid layout");
        let grown = Layout::from_size_align(size * 3, align).expect("a valid layout");
        let a = MiMalloc;
        // SAFETY: the layouts have non-zero sizes; every pointer is checked for null, used
        // within the size it was allocated (or reallocated) with, then freed once.
        unsafe {
            let blocks: Vec<*mut u8> = (0..32).map(|_| a.alloc(layout)).collect();
            for &p in &blocks {
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "alloc({size}, {align})");
                std::ptr::write_bytes(p, 0xa5, size);
            }
            for p in blocks {
                let g = a.realloc(p, layout, grown.size());
                assert!(!g.is_null());
                assert_eq!(g as usize % align, 0, "realloc({size}, {align})");
                assert!(
                    (0..size).all(|i| *g.add(i) == 0xa5),
                    "realloc kept the bytes"
                );
                a.dealloc(g, grown);
            }
            let zeroed: Vec<*mut u8> = (0..32).map(|_| a.alloc_zeroed(layout)).collect();
            for z in zeroed {
                assert!(!z.is_null());
                assert_eq!(z as usize % align, 0, "alloc_zeroed({size}, {align})");
                assert!((0..size).all(|i| *z.add(i) == 0), "alloc_zeroed zeroes");
                a.dealloc(z, layout);
            }
        }
    }

    #[test]
    fn every_block_has_the_alignment_its_layout_asks_for() {
        for size in [1, 3, 8, 12, 16, 24, 40, 100, 1000, 1100, 3336, 70_000] {
            for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
                round_trip(size, align);
            }
        }
    }

    #[test]
    fn plain_entry_points_serve_only_alignments_mimalloc_guarantees() {
        let l = |size, align| Layout::from_size_align(size, align).expect("valid");
        assert!(plain(&l(24, 8)));
        assert!(plain(&l(3336, 16)));
        assert!(plain(&l(8, 8)));
        assert!(
            !plain(&l(8, 16)),
            "a block under 16 bytes is aligned to its size class only"
        );
        assert!(!plain(&l(256, 32)));
        assert!(!plain(&l(4096, 4096)));
    }
}
