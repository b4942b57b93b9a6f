//! `PercpuPool`: per-CPU objects (the kernel's `alloc_percpu` / `per_cpu_ptr` /
//! `free_percpu`), placed in chunks made of congruent areas.
//!
//! Owns: its chunks. A chunk is one area per possible CPU (a *unit* of `unit_bytes`), all at
//! the same stride from the chunk's base (`VmSpace::vmalloc_congruent`, the kernel's
//! `pcpu_get_vm_areas`), so CPU `c`'s copy of an object is at `handle + c * stride` for every
//! chunk: [`PercpuPool::ptr`] is one multiply and one add, with no lookup. Units are populated
//! lazily: a CPU's pages fault in when that CPU's copies are first written. Objects are placed
//! inside a chunk by the integer core's free-space tree over 16-byte granules (lowest fit, any
//! power-of-two alignment up to a page); a map of live objects per chunk refuses frees of
//! anything else. A chunk that becomes empty is given back to the space, unless it is the last.
//!
//! Locks: one mutex over the chunks (the kernel's `pcpu_alloc_mutex`), held by alloc and free,
//! also while a chunk is made (which takes the arena's locks); never held while the caller
//! touches objects. It is in the fork registry (rank `PercpuObjects`, before the arenas), so a
//! `fork()` finds it free.
//!
//! Every new object reads as zero on every CPU (freed objects are cleared when reused).
//!
//! Unsafe: clearing a new object's copy on every CPU, and `Send` for chunks of raw area pointers.
#![allow(unsafe_code)]

use crate::space::{VmError, VmSpace};
use std::collections::BTreeMap;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use vmarena_core::{FreeTree, Request};
use vmarena_engine::sync::fork::{ForkLocks, Held, Rank};

/// Bytes per placement granule inside a unit.
const GRANULE: usize = 16;

struct Chunk {
    /// Address of CPU 0's unit.
    base: usize,
    /// The areas, one per CPU (what the space frees when the chunk goes).
    areas: Vec<NonNull<u8>>,
    /// Free granules of a unit.
    free: FreeTree,
    /// Live objects: first granule -> granules.
    live: BTreeMap<u64, u64>,
}

// SAFETY: the raw pointers name areas of the space that only the pool's mutex holder frees;
// nothing is read or written through them without that mutex, except the objects' memory,
// which belongs to whoever holds the handle.
unsafe impl Send for Chunk {}

/// Figures of a [`PercpuPool`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PercpuStats {
    /// Chunks in use.
    pub chunks: u64,
    /// Live objects.
    pub objects: u64,
    /// Bytes of live objects per CPU (granules rounded up).
    pub bytes_per_cpu: u64,
    /// Chunks made since the pool was built.
    pub chunks_made: u64,
    /// Chunks given back to the space since the pool was built.
    pub chunks_released: u64,
}

/// Per-CPU objects over a space. See the module documentation.
pub struct PercpuPool<S: Deref<Target = VmSpace> = Arc<VmSpace>> {
    space: S,
    unit_bytes: usize,
    stride: usize,
    cpus: usize,
    chunks: Mutex<(Vec<Chunk>, PercpuStats)>,
}

impl<S: Deref<Target = VmSpace>> PercpuPool<S> {
    /// A pool whose chunks hold `unit_bytes` (rounded up to pages) per possible CPU, registered
    /// with the fork handlers.
    pub fn new(space: S, unit_bytes: usize) -> Result<Arc<Self>, VmError>
    where
        S: Send + Sync + 'static,
    {
        let page = space.page_bytes();
        if unit_bytes == 0 {
            return Err(VmError::ZeroSize);
        }
        let unit_bytes = unit_bytes.checked_next_multiple_of(page).ok_or(VmError::Overflow(unit_bytes))?;
        // Each unit is an area with its guard page after it.
        let stride = unit_bytes.checked_add(page).ok_or(VmError::Overflow(unit_bytes))?;
        let cpus = vmarena_platform::cpu::possible();
        stride.checked_mul(cpus).ok_or(VmError::Overflow(unit_bytes))?;
        crate::fork::register();
        let pool = Arc::new(PercpuPool {
            space,
            unit_bytes,
            stride,
            cpus,
            chunks: Mutex::new((Vec::new(), PercpuStats::default())),
        });
        let weak: std::sync::Weak<dyn ForkLocks> = Arc::downgrade(&pool) as std::sync::Weak<dyn ForkLocks>;
        vmarena_engine::sync::fork::register(Rank::PercpuObjects, weak);
        Ok(pool)
    }

    /// CPUs the pool keeps a copy for (the possible CPUs).
    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// Bytes between CPU `c`'s copy and CPU `c + 1`'s.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// A new object of `size` bytes aligned to `align` (a power of two, at most a page), zero
    /// on every CPU. The handle is CPU 0's copy; [`PercpuPool::ptr`] gives the others.
    pub fn alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>, VmError> {
        if size == 0 {
            return Err(VmError::ZeroSize);
        }
        if !align.is_power_of_two() || align > self.space.page_bytes() {
            return Err(VmError::BadAlignment(align));
        }
        if size > self.unit_bytes {
            return Err(VmError::Invalid(format!(
                "per-CPU object of {size} bytes is larger than the pool's unit of {} bytes",
                self.unit_bytes
            )));
        }
        let granules = size.div_ceil(GRANULE) as u64;
        let align_granules = (align / GRANULE).max(1) as u64;
        let units = (self.unit_bytes / GRANULE) as u64;
        let req = Request::new(granules, align_granules, 0, units).map_err(|_| VmError::Overflow(size))?;
        let mut g = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let (chunks, stats) = &mut *g;
        let mut placed = None;
        for c in chunks.iter_mut() {
            if c.free.largest() < granules {
                continue;
            }
            if let Some((g0, _)) = c.free.alloc(&req) {
                c.live.insert(g0, granules);
                placed = Some(c.base + g0 as usize * GRANULE);
                break;
            }
        }
        let handle = match placed {
            Some(h) => h,
            None => {
                let mut c = self.new_chunk()?;
                let (g0, _) = c.free.alloc(&req).expect("an empty unit holds any object that fits a unit");
                c.live.insert(g0, granules);
                let h = c.base + g0 as usize * GRANULE;
                let at = chunks.partition_point(|x| x.base < c.base);
                chunks.insert(at, c);
                stats.chunks_made += 1;
                h
            }
        };
        stats.objects += 1;
        stats.bytes_per_cpu += granules * GRANULE as u64;
        drop(g);
        for cpu in 0..self.cpus {
            // SAFETY: the object's granules in every CPU's unit are the caller's from now on
            // and nobody else's (the tree handed them out once); the units are live areas of
            // the space, read-write.
            unsafe { std::ptr::write_bytes((handle + cpu * self.stride) as *mut u8, 0, size) };
        }
        Ok(NonNull::new(handle as *mut u8).expect("inside the space"))
    }

    /// CPU `cpu`'s copy of the object `handle`, or `None` for a CPU the pool has no copy for.
    /// (No check that `handle` is live: the address is arithmetic, as `per_cpu_ptr` is.)
    #[inline]
    pub fn ptr(&self, handle: NonNull<u8>, cpu: usize) -> Option<NonNull<u8>> {
        if cpu >= self.cpus {
            return None;
        }
        NonNull::new((handle.as_ptr() as usize).wrapping_add(cpu * self.stride) as *mut u8)
    }

    /// Free the object `handle`. Anything that is not a live object of this pool is refused
    /// with nothing changed.
    pub fn free(&self, handle: NonNull<u8>) -> Result<(), VmError> {
        let h = handle.as_ptr() as usize;
        let mut g = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let (chunks, stats) = &mut *g;
        let at = chunks.partition_point(|c| c.base <= h);
        let not_live = VmError::NotLive(h);
        let i = at.checked_sub(1).ok_or(not_live.clone())?;
        let c = &mut chunks[i];
        let off = h - c.base;
        if off >= self.unit_bytes || off % GRANULE != 0 {
            return Err(not_live);
        }
        let g0 = (off / GRANULE) as u64;
        let granules = c.live.remove(&g0).ok_or(not_live)?;
        c.free.insert_merge(g0, g0 + granules).expect("a live object's granules are not free");
        stats.objects -= 1;
        stats.bytes_per_cpu -= granules * GRANULE as u64;
        if c.live.is_empty() && chunks.len() > 1 {
            let c = chunks.remove(i);
            stats.chunks_released += 1;
            drop(g);
            for a in c.areas {
                self.space.vfree(a.as_ptr()).expect("a chunk's areas are live");
            }
        }
        Ok(())
    }

    /// The pool's figures.
    pub fn stats(&self) -> PercpuStats {
        let g = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        PercpuStats { chunks: g.0.len() as u64, ..g.1 }
    }

    fn new_chunk(&self) -> Result<Chunk, VmError> {
        let parts: Vec<(usize, usize)> = (0..self.cpus).map(|c| (c * self.stride, self.unit_bytes)).collect();
        let areas = self.space.vmalloc_congruent(&parts, self.space.page_bytes())?;
        let units = (self.unit_bytes / GRANULE) as u64;
        Ok(Chunk {
            base: areas[0].as_ptr() as usize,
            areas,
            free: FreeTree::with_range(0, units),
            live: BTreeMap::new(),
        })
    }
}

impl<S: Deref<Target = VmSpace> + Send + Sync> ForkLocks for PercpuPool<S> {
    fn lock_for_fork(&self) -> Vec<Box<dyn Held + '_>> {
        vec![Box::new(self.chunks.lock().unwrap_or_else(|e| e.into_inner()))]
    }
}

impl<S: Deref<Target = VmSpace>> Drop for PercpuPool<S> {
    fn drop(&mut self) {
        let chunks = std::mem::take(&mut self.chunks.get_mut().unwrap_or_else(|e| e.into_inner()).0);
        for c in chunks {
            for a in c.areas {
                let _ = self.space.vfree(a.as_ptr());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArenaOptions, SpaceOptions};

    fn space() -> Arc<VmSpace> {
        let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
        let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
        Arc::new(VmSpace::new("percpu", so, ao).unwrap())
    }

    /// Every CPU's copy is its own memory at its stride, aligned as asked, zero when new;
    /// writes to one CPU's copy leave the others alone; objects never overlap.
    #[test]
    fn each_cpu_has_its_own_zeroed_aligned_copy_at_the_stride() {
        let s = space();
        let pool = PercpuPool::new(s.clone(), 64 << 10).unwrap();
        let mut objs = Vec::new();
        let mut r = 0x2545_f491_4f6c_dd1du64;
        for i in 0..2000u64 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let size = 1 + (r % 1024) as usize;
            let align = 1 << (1 + (r >> 20) % 11);
            let h = pool.alloc(size, align).unwrap();
            assert!((h.as_ptr() as usize) % align.max(GRANULE) == 0, "aligned to {align}");
            for cpu in 0..pool.cpus() {
                let p = pool.ptr(h, cpu).unwrap();
                assert_eq!(p.as_ptr() as usize, h.as_ptr() as usize + cpu * pool.stride());
                // SAFETY: `size` bytes of CPU `cpu`'s copy.
                let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), size) };
                assert!(bytes.iter().all(|&b| b == 0), "new objects read as zero");
                bytes.fill((i as u8).wrapping_mul(7).wrapping_add(cpu as u8));
            }
            objs.push((h, size, i));
            // Free every third, so the trees fragment and freed granules are reused dirty.
            if i % 3 == 2 {
                let (h, _, _) = objs.remove((r % objs.len() as u64) as usize);
                pool.free(h).unwrap();
                assert!(pool.free(h).is_err(), "a second free is refused");
            }
        }
        assert!(pool.ptr(objs[0].0, pool.cpus()).is_none());
        for &(h, size, i) in &objs {
            for cpu in 0..pool.cpus() {
                let p = pool.ptr(h, cpu).unwrap();
                // SAFETY: as above.
                let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
                let want = (i as u8).wrapping_mul(7).wrapping_add(cpu as u8);
                assert!(bytes.iter().all(|&b| b == want), "object {i}, CPU {cpu}: another object wrote here");
            }
        }
        let st = pool.stats();
        assert_eq!(st.objects, objs.len() as u64);
        assert!(st.chunks >= 1);
        for (h, _, _) in objs {
            pool.free(h).unwrap();
        }
        let st = pool.stats();
        assert_eq!((st.objects, st.bytes_per_cpu, st.chunks), (0, 0, 1), "the last chunk stays");
        assert_eq!(st.chunks_made - st.chunks_released, 1);
        s.check().unwrap();
    }

    #[test]
    fn bad_input_is_refused_and_changes_nothing() {
        let s = space();
        let pool = PercpuPool::new(s.clone(), 4096).unwrap();
        assert!(matches!(pool.alloc(0, 8), Err(VmError::ZeroSize)));
        assert!(matches!(pool.alloc(8, 3), Err(VmError::BadAlignment(3))));
        assert!(matches!(pool.alloc(8, 8192), Err(VmError::BadAlignment(8192))));
        assert!(matches!(pool.alloc(4097, 8), Err(VmError::Invalid(_))));
        let h = pool.alloc(100, 16).unwrap();
        // SAFETY: 16 bytes into CPU 0's copy of a live 100-byte object.
        let inside = NonNull::new(unsafe { h.as_ptr().add(16) }).unwrap();
        assert!(pool.free(inside).is_err(), "an interior address");
        let other = s.vmalloc(4096).unwrap();
        assert!(pool.free(other).is_err(), "an area that is not the pool's");
        assert_eq!(pool.stats().objects, 1);
        pool.free(h).unwrap();
        s.vfree(other.as_ptr()).unwrap();
    }

    /// Threads on every CPU allocating, writing their own CPU's copy of their objects and
    /// freeing, with a pattern per owner checked before each free.
    #[test]
    fn threads_allocate_and_free_without_overlap() {
        let pool = PercpuPool::new(space(), 16 << 10).unwrap();
        let workers: Vec<_> = (0..4u8)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let mut mine: Vec<(NonNull<u8>, usize)> = Vec::new();
                    for i in 0..3000usize {
                        let size = 8 + (i * 37 + t as usize * 11) % 500;
                        let h = pool.alloc(size, 8).unwrap();
                        for cpu in 0..pool.cpus() {
                            // SAFETY: `size` bytes of this thread's object.
                            unsafe { std::ptr::write_bytes(pool.ptr(h, cpu).unwrap().as_ptr(), t + 1, size) };
                        }
                        mine.push((h, size));
                        if i % 2 == 1 {
                            let (h, size) = mine.swap_remove(i % mine.len());
                            for cpu in 0..pool.cpus() {
                                // SAFETY: as above.
                                let b = unsafe {
                                    std::slice::from_raw_parts(pool.ptr(h, cpu).unwrap().as_ptr(), size)
                                };
                                assert!(
                                    b.iter().all(|&x| x == t + 1),
                                    "thread {t}: an object was overwritten"
                                );
                            }
                            pool.free(h).unwrap();
                        }
                    }
                    for (h, _) in mine {
                        pool.free(h).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(pool.stats().objects, 0);
    }
}
