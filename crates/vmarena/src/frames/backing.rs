//! `FrameBacking`: the pages of a frames-backed `VmSpace` are frames of a [`FramePool`].
//!
//! Owns: the blocks of frames behind each area that has them (by area start), shared with the
//! space through an `Arc`. An area gets its frames when `vmalloc` hands it out without them
//! (fresh from the tree, or from a pool after a purge): blocks of descending order cover its
//! data pages, and each run of consecutive frames is mapped with one `mmap` of the pool's file.
//! The frames stay with the area while it is live, lazy or pooled (a pool hit makes no call),
//! and go back to the pool when a purge releases the area: anonymous memory is mapped back over
//! its data pages and its blocks are freed. Guards are the memory backing's, unchanged.
//!
//! Lock: one mutex over the block table, never held across a syscall or a pool call.
//! Frames-backed spaces never split a lazy area (`ArenaOptions::lazy_split` off), so an area's
//! blocks always cover exactly its data pages.
//!
//! Unsafe: mapping a frame pool's memory file over an area's pages.
#![allow(unsafe_code)]

use crate::backing::MemoryBacking;
use crate::frames::map::FrameMap;
use crate::FramePool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use vmarena_core::Span;
use vmarena_engine::Backing;
use vmarena_platform::memfd;

pub(crate) struct FrameBacking {
    pub memory: MemoryBacking,
    pub pool: FramePool,
    pub map: Arc<FrameMap>,
    pub blocks: Mutex<HashMap<u64, Vec<(u32, u32)>>>,
    pub page_shift: u32,
}

/// The engine's handle on a backing the space also uses.
pub(crate) struct SharedFrameBacking(pub Arc<FrameBacking>);

impl FrameBacking {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<(u32, u32)>>> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The block map's mutex, for `fork()` (held alone everywhere else).
    pub(crate) fn lock_for_fork(&self) -> Box<dyn vmarena_engine::sync::fork::Held + '_> {
        Box::new(self.table())
    }

    /// True when the area at `start` has its frames.
    pub(crate) fn has_frames(&self, start: u64) -> bool {
        self.table().contains_key(&start)
    }

    /// Blocks covering `pages` frames, largest orders first; all or nothing.
    pub(crate) fn take_blocks(&self, pages: u64) -> Result<Vec<(u32, u32)>, crate::VmError> {
        let mut got = Vec::new();
        let mut left = pages;
        while left > 0 {
            let order = (63 - left.leading_zeros()).min(vmarena_core::MAX_ORDER);
            match self.pool.alloc(order) {
                Ok(f) => {
                    got.push((f, order));
                    left -= 1 << order;
                }
                Err(e) => {
                    for (f, o) in got {
                        self.pool.free(f, o).expect("blocks taken above");
                    }
                    return Err(e);
                }
            }
        }
        Ok(got)
    }

    /// Record the blocks mapped at `start`.
    pub(crate) fn record(&self, start: u64, blocks: Vec<(u32, u32)>) {
        self.table().insert(start, blocks);
    }

    /// Give back the frames of the area at `start` (data pages `pages`), if it has them.
    fn give_back(&self, start: u64, data_pages: u64) -> usize {
        let Some(blocks) = self.table().remove(&start) else { return 0 };
        self.map.remove(start);
        let addr = (start as usize) << self.page_shift;
        // SAFETY: the area is lazy (a purge is releasing it): no caller can reach its pages,
        // and no other call maps them until it is handed out again.
        unsafe { memfd::map_anonymous_fixed(addr, (data_pages as usize) << self.page_shift, false) }
            .unwrap_or_else(|e| panic!("cannot unmap the frames of the area at {addr:#x}: {e}"));
        for (f, o) in blocks {
            self.pool.free(f, o).expect("an area's blocks are held");
        }
        1
    }
}

impl Drop for FrameBacking {
    /// The space is going away (its reservation with it): every area's frames go back.
    fn drop(&mut self) {
        for (_, blocks) in self.table().drain() {
            for (f, o) in blocks {
                let _ = self.pool.free(f, o);
            }
        }
    }
}

impl Backing for SharedFrameBacking {
    fn prepare(&self, start: u64, pages: u64) {
        self.0.memory.prepare(start, pages)
    }

    fn release(&self, areas: &[Span]) -> usize {
        let g = self.0.memory.guard_pages;
        areas.iter().map(|a| self.0.give_back(a.start, a.pages.saturating_sub(g))).sum()
    }

    fn retire(&self, areas: &[Span]) -> usize {
        self.0.memory.retire(areas)
    }

    fn zeroes_on_release(&self) -> bool {
        // New frames hold whatever their last owner wrote.
        false
    }

    fn grow_step_pages(&self) -> Option<u64> {
        self.0.memory.grow_step_pages()
    }

    fn grow(&self, start: u64, pages: u64) -> bool {
        self.0.memory.grow(start, pages)
    }

    fn shrink(&self, start: u64, pages: u64) -> bool {
        self.0.memory.shrink(start, pages)
    }
}
