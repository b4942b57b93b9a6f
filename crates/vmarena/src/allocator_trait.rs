//! `VmSpace` as an `Allocator` (feature `allocator-api2`): collections whose memory comes from
//! one explicit space, `Vec::new_in(&space)`.
//!
//! The standard library's `Allocator` trait is unstable; `allocator_api2` is its stable copy,
//! accepted by `hashbrown` and others. Every block is at least one page (page granular, as
//! every area of a space); zero-sized layouts get a dangling pointer and never reach the space.
//! `grow` and `shrink` use `vrealloc`, in place while the area's pages suffice.
#![allow(unsafe_code)]

use crate::space::VmSpace;
use allocator_api2::alloc::{AllocError, Allocator, Layout};
use std::ptr::NonNull;

fn dangling(layout: Layout) -> NonNull<[u8]> {
    // An address equal to the alignment is non-null and aligned.
    let p = NonNull::new(layout.align() as *mut u8).expect("alignment is non-zero");
    NonNull::slice_from_raw_parts(p, 0)
}

impl VmSpace {
    fn block(&self, p: NonNull<u8>) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(p, self.size(p.as_ptr()).expect("a live area just allocated"))
    }

    fn page_align(&self, layout: Layout) -> usize {
        layout.align().max(vmarena_platform::page_size())
    }
}

// SAFETY: blocks are live areas of the space: valid until deallocated, not overlapping, at least
// `layout.size()` bytes and aligned as asked (page alignment or more). A `VmSpace` may be shared
// between threads and every method takes `&self`.
unsafe impl Allocator for VmSpace {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(dangling(layout));
        }
        let p = self.vmalloc_aligned(layout.size(), self.page_align(layout)).map_err(|_| AllocError)?;
        Ok(self.block(p))
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(dangling(layout));
        }
        let p = self.vzalloc_aligned(layout.size(), self.page_align(layout)).map_err(|_| AllocError)?;
        Ok(self.block(p))
    }

    unsafe fn deallocate(&self, p: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            if let Err(e) = self.vfree(p.as_ptr()) {
                // The caller broke the Allocator contract (a double or foreign free).
                eprintln!("vmarena: deallocate of {p:p}: {e}");
                std::process::abort();
            }
        }
    }

    unsafe fn grow(&self, p: NonNull<u8>, old: Layout, new: Layout) -> Result<NonNull<[u8]>, AllocError> {
        // vrealloc moves to page alignment only: larger alignments move by hand.
        if old.size() == 0 || new.align() > vmarena_platform::page_size() {
            let q = self.allocate(new)?;
            // SAFETY: `p` holds `old.size()` bytes, `q` at least `new.size() >= old.size()`.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), q.as_ptr().cast::<u8>(), old.size());
                self.deallocate(p, old);
            }
            return Ok(q);
        }
        let q = self.vrealloc(Some(p), new.size()).map_err(|_| AllocError)?;
        Ok(self.block(q))
    }

    unsafe fn grow_zeroed(
        &self,
        p: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded under the caller's guarantees.
        let q = unsafe { self.grow(p, old, new)? };
        // SAFETY: the block holds `q.len() >= new.size()` bytes; the bytes past `old.size()`
        // must read as zero.
        unsafe { std::ptr::write_bytes(q.as_ptr().cast::<u8>().add(old.size()), 0, q.len() - old.size()) };
        Ok(q)
    }

    unsafe fn shrink(&self, p: NonNull<u8>, old: Layout, new: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if new.size() == 0 {
            // SAFETY: forwarded under the caller's guarantees.
            unsafe { self.deallocate(p, old) };
            return Ok(dangling(new));
        }
        if (p.as_ptr() as usize) % new.align() != 0 {
            let q = self.allocate(new)?;
            // SAFETY: `p` holds at least `new.size()` bytes; `q` is a distinct block.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), q.as_ptr().cast::<u8>(), new.size());
                self.deallocate(p, old);
            }
            return Ok(q);
        }
        // A smaller size always fits the area's pages: in place.
        let q = self.vrealloc(Some(p), new.size()).map_err(|_| AllocError)?;
        Ok(self.block(q))
    }
}
