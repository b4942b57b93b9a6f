//! `AbiHit`: the default space's per-CPU hit paths, published in a static of their own for the
//! C ABI's `vmarena_vmalloc` and `vmarena_vfree`.
//!
//! Reaching the default space's stacks through the space (its once-cell's state, its result, the
//! arena's shared state) costs loads and checks on every call, and enough live values that the
//! compiler saves registers on the stack, stores which a free's compare-and-swap must then wait
//! for. Everything the two hits read is here instead, in one static: one check that it is
//! published, then fields at fixed addresses (docs/bench-log/design-notes.md, section 16, "The C
//! ABI's hit path").
//!
//! Owns: the static, written once (the first `vmarena_vmalloc` that reaches the slow path
//! publishes it, after the default space is built) and never changed; a `ForkOnce`, so a fork
//! during the publication leaves the child able to publish its own. Its `HitPath` points into
//! the default space's arena, which lives until the process ends: the safety contract of the
//! path's operations holds for every call.
#![allow(unsafe_code)]

use crate::space::VmSpace;
use std::panic::Location;
use std::ptr::NonNull;
use vmarena_engine::caches::hit_path::{HitFree, HitPath};
use vmarena_platform::fork_once::ForkOnce;

/// See the module documentation.
pub(crate) struct AbiHit {
    path: HitPath,
    /// Requests of 1 to this many bytes have stacks (the stacks' largest area less its guard).
    max_bytes: usize,
    page_shift: u32,
    page_bytes: usize,
    guard_pages: u64,
    /// The state word's caller field for the C ABI's allocation (`HitPath::caller_bits`).
    caller_bits: u64,
}

static HIT: ForkOnce<AbiHit> = ForkOnce::new();

impl AbiHit {
    /// The published hit paths, once the default space has per-CPU stacks.
    #[inline(always)]
    pub(crate) fn get() -> Option<&'static AbiHit> {
        HIT.get()
    }

    /// Publish the default space's hit paths, recording `caller` as the caller of the areas
    /// they hand out (nothing when the space has no per-CPU stacks, or they are published).
    pub(crate) fn publish(space: &'static VmSpace, caller: &'static Location<'static>) {
        if HIT.get().is_some() {
            return;
        }
        let Some(path) = space.arena().hit_path() else { return };
        let max_pages = path.max_pages().saturating_sub(space.guard_pages);
        HIT.get_or_init(|| AbiHit {
            max_bytes: (max_pages as usize).checked_shl(space.page_shift).unwrap_or(0),
            page_shift: space.page_shift,
            page_bytes: space.page_bytes,
            guard_pages: space.guard_pages,
            caller_bits: HitPath::caller_bits(Some(caller)),
            path,
        });
    }

    /// An area of `bytes` from this CPU's stack of its size: `None`, with nothing changed, for
    /// size 0, a size without stacks, an empty stack (then take the slow path). Makes no call
    /// and cannot panic.
    #[inline(always)]
    pub(crate) fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        // One compare refuses size 0, sizes past the stacks' and sizes that would overflow.
        if bytes.wrapping_sub(1) >= self.max_bytes {
            return None;
        }
        let pages = ((bytes - 1) >> self.page_shift) as u64 + 1 + self.guard_pages;
        // SAFETY: the path came from the default space's arena, which lives until the process
        // ends.
        let start = unsafe { self.path.alloc(pages, self.caller_bits) }?;
        NonNull::new(((start as usize) << self.page_shift) as *mut u8)
    }

    /// Free `p` onto this CPU's stack of its size ([`HitFree`]; `Claimed` is finished by
    /// `VmSpace::vfree_claimed`). Makes no call and cannot panic.
    #[inline(always)]
    pub(crate) fn free(&self, p: *mut u8) -> HitFree {
        let addr = p as usize;
        if addr & (self.page_bytes - 1) != 0 {
            return HitFree::No;
        }
        // A page outside the space has no state word, or one that stays zero.
        // SAFETY: as in `alloc`.
        unsafe { self.path.free((addr >> self.page_shift) as u64) }
    }
}
