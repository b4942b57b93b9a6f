//! `FrameMap`: which frames are mapped where in a space (the page table that
//! `vmalloc_to_frame` walks).
//!
//! Owns: one record per mapping of caller's frames (a `vmap` area, a large `vm_map_ram` area, or
//! one `vm_map_ram` range of a per-CPU block): its first page and the frames in page order.
//! Lock: one mutex, taken by map, unmap and lookup; never held across a syscall or an engine
//! call. Invariant: records never overlap (they cover disjoint parts of live areas).

use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct FrameMap {
    runs: Mutex<BTreeMap<u64, Vec<u32>>>,
}

impl FrameMap {
    /// The map's mutex, for `fork()` (held alone everywhere else).
    pub(crate) fn lock_for_fork(&self) -> Box<dyn vmarena_engine::sync::fork::Held + '_> {
        Box::new(self.runs.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn insert(&self, start_page: u64, frames: Vec<u32>) {
        let old = self.runs.lock().unwrap_or_else(|e| e.into_inner()).insert(start_page, frames);
        debug_assert!(old.is_none(), "two mappings at one page");
    }

    pub(crate) fn remove(&self, start_page: u64) -> Option<Vec<u32>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).remove(&start_page)
    }

    /// Frames mapped at `start_page`, if a record starts there.
    pub(crate) fn len_at(&self, start_page: u64) -> Option<usize> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).get(&start_page).map(Vec::len)
    }

    /// The frame mapped at `page`.
    pub(crate) fn lookup(&self, page: u64) -> Option<u32> {
        let m = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let (&start, frames) = m.range(..=page).next_back()?;
        frames.get((page - start) as usize).copied()
    }
}

/// Runs of consecutive frames: `(index of the first page, first frame, length)`.
pub(crate) fn runs(frames: &[u32]) -> Vec<(usize, u32, usize)> {
    let mut out: Vec<(usize, u32, usize)> = Vec::new();
    for (i, &f) in frames.iter().enumerate() {
        match out.last_mut() {
            Some((_, first, len)) if *first as u64 + *len as u64 == f as u64 => *len += 1,
            _ => out.push((i, f, 1)),
        }
    }
    out
}

/// How many runs [`runs`] would give, without building them.
pub(crate) fn run_count(frames: &[u32]) -> usize {
    let breaks = frames.windows(2).filter(|w| w[0] as u64 + 1 != w[1] as u64).count();
    if frames.is_empty() {
        0
    } else {
        breaks + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_frames_form_one_run() {
        assert_eq!(runs(&[5, 6, 7, 2, 3, 9]), vec![(0, 5, 3), (3, 2, 2), (5, 9, 1)]);
        assert!(runs(&[]).is_empty());
        for f in [&[5, 6, 7, 2, 3, 9][..], &[], &[4], &[1, 2, 3], &[3, 2, 1], &[u32::MAX, 0]] {
            assert_eq!(run_count(f), runs(f).len(), "{f:?}");
        }
    }

    #[test]
    fn lookup_finds_the_frame_of_a_page() {
        let m = FrameMap::default();
        m.insert(100, vec![7, 8, 9]);
        m.insert(200, vec![1]);
        assert_eq!(m.lookup(101), Some(8));
        assert_eq!(m.lookup(103), None);
        assert_eq!(m.lookup(99), None);
        assert_eq!(m.lookup(200), Some(1));
        assert_eq!(m.remove(100), Some(vec![7, 8, 9]));
        assert_eq!(m.lookup(101), None);
    }
}
