//! The bootstrap heap: memory for the calls that arrive before the next allocator is known.
//!
//! Owns: one static buffer and a bump offset. Finding the next allocator (`dlsym`) may itself
//! call `malloc`/`calloc` (glibc keeps per-thread `dlerror` state on the heap), and a program's
//! or a library's constructor may allocate before anything else ran. Those calls are served
//! here: a 16-byte header holds the block's size, the block follows. Blocks are never reused;
//! `free` of a bootstrap block does nothing and `realloc` copies it out. A few hundred bytes are
//! used in practice; the buffer holds 256 KiB.
//!
//! Lock-free: one `fetch_add`-style CAS loop on the offset.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

const BYTES: usize = 256 << 10;
const HEADER: usize = 16;

#[repr(C, align(4096))]
struct Buffer(UnsafeCell<[u8; BYTES]>);

// SAFETY: disjoint blocks are handed to callers; the bump offset makes them disjoint.
unsafe impl Sync for Buffer {}

static BUF: Buffer = Buffer(UnsafeCell::new([0; BYTES]));
static USED: AtomicUsize = AtomicUsize::new(0);

fn base() -> usize {
    BUF.0.get() as usize
}

/// The buffer's first address.
pub fn start() -> usize {
    base()
}

/// True when `p` is a bootstrap block.
#[inline]
pub fn contains(p: *const u8) -> bool {
    (p as usize).wrapping_sub(base()) < BYTES
}

/// A zeroed block of `size` bytes aligned to `align` (a power of two), or null when the buffer
/// is used up.
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    let align = align.max(HEADER);
    let mut cur = USED.load(Ordering::Relaxed);
    loop {
        // The block starts at the first aligned address with room for the header before it.
        let start = (base() + cur + HEADER).next_multiple_of(align) - base();
        let Some(end) = start.checked_add(size).filter(|&e| e <= BYTES) else {
            return std::ptr::null_mut();
        };
        match USED.compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                let p = (base() + start) as *mut u8;
                // SAFETY: [start - HEADER, end) is inside the buffer and ours alone after the
                // CAS; the buffer is zeroed static memory never handed out twice.
                unsafe { (p.sub(HEADER) as *mut usize).write(size) };
                return p;
            }
            Err(now) => cur = now,
        }
    }
}

/// The size asked for when the bootstrap block `p` was allocated (0 if `p` is not one).
pub fn size_of(p: *const u8) -> usize {
    if !contains(p) || (p as usize) < base() + HEADER {
        return 0;
    }
    let header = (p as usize - base() - HEADER) as isize;
    // SAFETY: the header offset lies in the buffer; a block handed out has its header there
    // (another address reads some other bytes of the buffer, still in bounds).
    unsafe { (BUF.0.get().cast::<u8>().offset(header) as *const usize).read_unaligned() }
}

/// Bytes of the buffer used so far.
pub fn used_bytes() -> usize {
    USED.load(Ordering::Relaxed)
}
