//! The contenders of `vmarena int-arena`: vmarena's integer arena (instant fit in per-CPU
//! stripes, the default, and in one; lowest fit with per-CPU nodes and with one lock), a plain
//! mutex around vmarena's free tree, and the crates
//! people use for this, each called the way its documentation shows: `vmem` (a boundary-tag
//! vmem behind its `std::sync::Mutex` lock, instant fit), `offset-allocator` (a TLSF-like
//! allocator of `u32` units) and `range-alloc` (wgpu's best-fit list of free ranges), the last
//! two behind a `Mutex` as they take `&mut self`.
//!
//! Every contender works in the trace's quantum. What a crate lacks is done the way its users
//! do it: `offset-allocator` has no alignment (the request is padded by the alignment and the
//! start rounded up inside it) and neither it nor `range-alloc` has nocross (an allocation
//! that crosses the boundary is held aside, another is taken, and the held ones are freed).
//! The `vmem` crate has both in `xalloc`, which panics (an index out of bounds in its free
//! lists) once a fit starts past the beginning of a free segment, on both traces: `vmem` pads
//! and retries through `alloc` as the others do, `vmem-xalloc` calls `xalloc` and shows the
//! panic.

use super::trace::Shape;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Mutex;
use vmarena_core::{crosses, FreeTree, Request};
use vmarena_engine::{ArenaOptions, Constraints, Fit, Strategy, Vmem, VmemOptions};

/// The contenders, in the order they run.
pub const CONTENDERS: [&str; 10] = [
    "vmarena",
    "vmarena-1",
    "vmarena-best",
    "vmarena-lowest",
    "vmarena-lowest-global",
    "tree-mutex",
    "vmem",
    "vmem-xalloc",
    "offset-allocator",
    "range-alloc",
];

/// An integer arena as the driver calls it. Sizes, alignments and starts are integers (not
/// quanta); `extent` is the range an allocation holds (padding included).
pub trait IntArena: Sync {
    type H: Copy + Send;
    fn alloc(&self, size: u64, align: u64) -> Option<Self::H>;
    fn free(&self, h: Self::H);
    /// The start the user gets.
    fn start(&self, h: &Self::H) -> u64;
    /// What the allocation holds of the arena.
    fn extent(&self, h: &Self::H) -> Range<u64>;
}

/// vmarena's `Vmem` over the shape's span.
pub struct VmarenaArena {
    vm: Vmem,
    nocross: u64,
}

impl VmarenaArena {
    /// `stripes`: of an instant-fit span (0: one per CPU).
    pub fn new(shape: Shape, strategy: Strategy, fit: Fit, stripes: usize) -> VmarenaArena {
        let base = VmemOptions::default();
        let opts = VmemOptions {
            quantum: shape.quantum,
            fit,
            stripes,
            arena: ArenaOptions { strategy, ..base.arena },
            ..base
        };
        let vm = Vmem::new(shape.name, opts, None).expect("valid options");
        vm.add_span(shape.base, shape.span).expect("one span");
        VmarenaArena { vm, nocross: shape.nocross }
    }
}

impl IntArena for VmarenaArena {
    type H = (u64, u64);
    fn alloc(&self, size: u64, align: u64) -> Option<(u64, u64)> {
        let c = Constraints { align, nocross: self.nocross, ..Constraints::default() };
        self.vm.xalloc(size, &c).ok().map(|s| (s, size))
    }
    fn free(&self, h: (u64, u64)) {
        self.vm.free(h.0).expect("a live start");
    }
    fn start(&self, h: &(u64, u64)) -> u64 {
        h.0
    }
    fn extent(&self, h: &(u64, u64)) -> Range<u64> {
        let q = self.vm.quantum();
        h.0..h.0 + h.1.div_ceil(q) * q
    }
}

/// vmarena's free tree (the engine's, without nodes, caches or busy map) under one mutex.
pub struct TreeMutex {
    tree: Mutex<FreeTree>,
    shift: u32,
    nocross_q: u64,
}

impl TreeMutex {
    pub fn new(shape: Shape) -> TreeMutex {
        let shift = shape.quantum.trailing_zeros();
        let tree = FreeTree::with_range(shape.base >> shift, (shape.base + shape.span) >> shift);
        TreeMutex { tree: Mutex::new(tree), shift, nocross_q: shape.nocross >> shift }
    }
}

impl IntArena for TreeMutex {
    /// Start and end in quanta.
    type H = (u64, u64);
    fn alloc(&self, size: u64, align: u64) -> Option<(u64, u64)> {
        let pages = size.div_ceil(1 << self.shift);
        let align_q = (align >> self.shift).max(1);
        let r = Request::constrained(pages, align_q, 0, self.nocross_q, 0, u64::MAX).ok()?;
        let mut t = self.tree.lock().unwrap();
        let (s, _) = t.alloc(&r).or_else(|| t.alloc_exact(&r))?;
        Some((s, s + pages))
    }
    fn free(&self, h: (u64, u64)) {
        self.tree.lock().unwrap().insert_merge(h.0, h.1).expect("a live range");
    }
    fn start(&self, h: &(u64, u64)) -> u64 {
        h.0 << self.shift
    }
    fn extent(&self, h: &(u64, u64)) -> Range<u64> {
        (h.0 << self.shift)..(h.1 << self.shift)
    }
}

/// Boundary tags of the `vmem` crate from the global allocator (the crate asks its user for
/// them).
pub struct BoxedTags;

// SAFETY: every tag is a fresh allocation of a `Bt`'s layout, given back with the same layout.
unsafe impl vmem::Allocator for BoxedTags {
    fn allocate(&self) -> Option<NonNull<vmem::Bt>> {
        // SAFETY: `Bt` has a non-zero size.
        NonNull::new(unsafe { std::alloc::alloc(std::alloc::Layout::new::<vmem::Bt>()) }.cast())
    }
    unsafe fn deallocate(&self, ptr: NonNull<vmem::Bt>) {
        // SAFETY: allocated above with this layout (the trait's contract).
        unsafe { std::alloc::dealloc(ptr.as_ptr().cast(), std::alloc::Layout::new::<vmem::Bt>()) }
    }
}

/// The `vmem` crate, instant fit: padded requests through `alloc`, or (`xalloc`) its own
/// constrained allocation.
pub struct VmemCrate {
    arena: vmem::Arena<'static, 'static, BoxedTags, Mutex<()>>,
    quantum: u64,
    nocross: u64,
    xalloc: bool,
}

impl VmemCrate {
    pub fn new(shape: Shape, xalloc: bool) -> VmemCrate {
        let arena =
            vmem::Arena::create("vmem", shape.quantum as usize, None, BoxedTags).expect("a power of two");
        arena.add_span(shape.base as usize, shape.span as usize).expect("one span");
        VmemCrate { arena, quantum: shape.quantum, nocross: shape.nocross, xalloc }
    }
}

impl IntArena for VmemCrate {
    /// The crate's start, the start the user gets, the size.
    type H = (u64, u64, u64);
    fn alloc(&self, size: u64, align: u64) -> Option<Self::H> {
        let policy = vmem::AllocPolicy::InstantFit;
        if self.xalloc {
            let mut layout = vmem::Layout::from_size_align(size as usize, align as usize)?;
            if self.nocross != 0 {
                layout = layout.with_nocross(self.nocross as usize)?;
            }
            let s = self.arena.xalloc(layout, policy).ok()? as u64;
            return Some((s, s, size));
        }
        let align = align.max(self.quantum);
        let padded = (size.div_ceil(self.quantum) * self.quantum + align - self.quantum) as usize;
        let mut held = Vec::new();
        let mut got = None;
        for _ in 0..NOCROSS_TRIES {
            let Ok(s) = self.arena.alloc(padded, policy) else { break };
            let start = (s as u64).next_multiple_of(align);
            if crosses(start, size, self.nocross) {
                held.push(s);
                continue;
            }
            got = Some((s as u64, start, padded as u64));
            break;
        }
        for s in held {
            self.arena.free(s).expect("held just now");
        }
        got
    }
    fn free(&self, h: Self::H) {
        self.arena.free(h.0 as usize).expect("a live start");
    }
    fn start(&self, h: &Self::H) -> u64 {
        h.1
    }
    fn extent(&self, h: &Self::H) -> Range<u64> {
        if self.xalloc {
            h.0..h.0 + h.2.div_ceil(self.quantum) * self.quantum
        } else {
            h.0..h.0 + h.2
        }
    }
}

/// At most this many crossing allocations are held aside before a request gives up.
const NOCROSS_TRIES: usize = 16;

/// `offset-allocator` in quanta, under a mutex.
pub struct OffsetAlloc {
    a: Mutex<offset_allocator::Allocator>,
    base: u64,
    shift: u32,
    nocross: u64,
}

impl OffsetAlloc {
    pub fn new(shape: Shape) -> OffsetAlloc {
        let shift = shape.quantum.trailing_zeros();
        let units = u32::try_from(shape.span >> shift).expect("the span fits u32 units");
        // Its default of 128 Ki live allocations holds both threads' traces.
        let a = offset_allocator::Allocator::new(units);
        OffsetAlloc { a: Mutex::new(a), base: shape.base, shift, nocross: shape.nocross }
    }
}

impl IntArena for OffsetAlloc {
    /// The crate's handle, the aligned start in integers, the size.
    type H = (offset_allocator::Allocation, u64, u64);
    fn alloc(&self, size: u64, align: u64) -> Option<Self::H> {
        let q = 1u64 << self.shift;
        let align = align.max(q);
        let units = u32::try_from(size.div_ceil(q) + (align >> self.shift) - 1).ok()?;
        let mut a = self.a.lock().unwrap();
        let mut held = Vec::new();
        let mut got = None;
        for _ in 0..NOCROSS_TRIES {
            let Some(x) = a.allocate(units) else { break };
            let start = (self.base + ((x.offset as u64) << self.shift)).next_multiple_of(align);
            if crosses(start, size, self.nocross) {
                held.push(x);
                continue;
            }
            got = Some((x, start, size));
            break;
        }
        for x in held {
            a.free(x);
        }
        got
    }
    fn free(&self, h: Self::H) {
        self.a.lock().unwrap().free(h.0);
    }
    fn start(&self, h: &Self::H) -> u64 {
        h.1
    }
    fn extent(&self, h: &Self::H) -> Range<u64> {
        let a = self.a.lock().unwrap();
        let s = self.base + ((h.0.offset as u64) << self.shift);
        s..s + ((a.allocation_size(h.0) as u64) << self.shift)
    }
}

/// `range-alloc` in quanta, under a mutex.
pub struct RangeAlloc {
    a: Mutex<range_alloc::RangeAllocator<u64>>,
    shift: u32,
    nocross: u64,
}

impl RangeAlloc {
    pub fn new(shape: Shape) -> RangeAlloc {
        let shift = shape.quantum.trailing_zeros();
        let a = range_alloc::RangeAllocator::new((shape.base >> shift)..((shape.base + shape.span) >> shift));
        RangeAlloc { a: Mutex::new(a), shift, nocross: shape.nocross }
    }
}

impl IntArena for RangeAlloc {
    /// Start and end in quanta.
    type H = (u64, u64);
    fn alloc(&self, size: u64, align: u64) -> Option<(u64, u64)> {
        let units = size.div_ceil(1 << self.shift);
        let align_q = (align >> self.shift).max(1);
        let mut a = self.a.lock().unwrap();
        let mut held = Vec::new();
        let mut got = None;
        for _ in 0..NOCROSS_TRIES {
            let Ok(r) = a.allocate_range_aligned(units, align_q) else { break };
            if crosses(r.start << self.shift, size, self.nocross) {
                held.push(r);
                continue;
            }
            got = Some((r.start, r.end));
            break;
        }
        for r in held {
            a.free_range(r);
        }
        got
    }
    fn free(&self, h: (u64, u64)) {
        self.a.lock().unwrap().free_range(h.0..h.1);
    }
    fn start(&self, h: &(u64, u64)) -> u64 {
        h.0 << self.shift
    }
    fn extent(&self, h: &(u64, u64)) -> Range<u64> {
        (h.0 << self.shift)..(h.1 << self.shift)
    }
}
