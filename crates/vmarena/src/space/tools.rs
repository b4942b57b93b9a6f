//! What a space tells the debugging tools a program runs under (valgrind's memcheck,
//! AddressSanitizer, ThreadSanitizer; `vmarena_platform::debug_tools` finds them when the space
//! is built): every `vmalloc` area is announced as a heap block when it is handed out and as
//! freed when the program frees it, so the tools see vmarena's areas as allocations.
//!
//! | tool | handed out | freed |
//! |---|---|---|
//! | memcheck | a malloc-like block of the usable bytes (defined when fresh, else undefined); the guard pages no-access | a free-like block: no access until handed out again, the free's stack kept |
//! | AddressSanitizer | usable bytes unpoisoned, guard pages poisoned | usable bytes poisoned |
//! | ThreadSanitizer | acquire on the area's address | release on the area's address, before the area can be handed to another thread |
//!
//! Owns nothing: the space's `tools` bits say which tools were found. Announcing an area reads
//! its size (its state word, or its busy record under its shard's lock) and takes no other lock.
//! When a tool is present the per-CPU and magazine hits of the C ABI's fast path are off, so that
//! every area passes here; with none, each path pays the test of one field.

use super::VmSpace;
use vmarena_engine::AreaKind;
use vmarena_platform::debug_tools::{self, valgrind, ASAN, MEMCHECK, TSAN};

impl VmSpace {
    /// Some debugging tool is present.
    #[inline(always)]
    pub(crate) fn tools_on(&self) -> bool {
        self.tools != 0
    }

    /// The live area at `addr` was just handed out (before vmarena clears or copies into it):
    /// announce it. `fresh`: its memory reads as zero.
    #[cold]
    #[inline(never)]
    pub(crate) fn announce_alloc(&self, addr: usize, fresh: bool) {
        let Some(usable) = self.size(addr as *const u8) else { return };
        let guard = (self.guard_pages as usize) << self.page_shift;
        if self.tools & TSAN != 0 {
            debug_tools::tsan_acquire(addr);
        }
        if self.tools & ASAN != 0 {
            debug_tools::asan_unpoison(addr, usable);
            debug_tools::asan_poison(addr + usable, guard);
        }
        if self.tools & MEMCHECK != 0 {
            valgrind::malloclike_block(addr, usable, fresh);
            if guard > 0 {
                valgrind::make_mem_noaccess(addr + usable, guard);
            }
        }
    }

    /// The program frees the area at `addr`: announce it before vmarena takes it back (after
    /// that, another thread may be handed it). Nothing for an address that is not a live area
    /// start (the free refuses it).
    #[cold]
    #[inline(never)]
    pub(crate) fn announce_free(&self, addr: usize) {
        let Ok(start) = self.start_page(addr) else { return };
        // The areas `vfree` frees: the space's own (a state word, or a record of kind `Vmalloc`
        // or `HugeTlb`), never a fixed slot, a mapping of frames or a retired area.
        let live = match self.arena().small_area(start) {
            Some(a) => !a.free && !a.retired,
            None => self
                .arena()
                .lookup(start)
                .is_some_and(|a| matches!(a.tag.kind, AreaKind::Vmalloc | AreaKind::HugeTlb)),
        };
        let Some(usable) = self.size(addr as *const u8).filter(|_| live) else { return };
        if self.tools & MEMCHECK != 0 {
            valgrind::freelike_block(addr);
        }
        if self.tools & ASAN != 0 {
            debug_tools::asan_poison(addr, usable);
        }
        if self.tools & TSAN != 0 {
            debug_tools::tsan_release(addr);
        }
    }
}
