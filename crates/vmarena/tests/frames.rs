//! Frame pools mapped into spaces: vmap and vm_map_ram of the same frames seen through two
//! addresses, refused input, per-CPU vmap blocks coming and going, the mirrored ring buffer,
//! the mapping count falling back after unmapping, and a multi-thread stress that writes owner
//! patterns through one mapping and checks them through another.

mod common;

use std::sync::Arc;
use vmarena::{
    ArenaOptions, FrameOptions, FramePool, SpaceOptions, VmError, VmSpace, VMAP_BLOCK_PAGES,
    VMAP_MAX_ALLOC_PAGES,
};
use vmarena_platform::page_move::mappings_over;

/// The mapping count is process-wide: the tests of this file run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn space(name: &str) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 32, ..Default::default() };
    VmSpace::new(name, so, ArenaOptions { decay_interval_ms: 0, ..Default::default() }).unwrap()
}

fn pool(name: &str, mib: u64) -> FramePool {
    FramePool::new(name, mib << 20, FrameOptions::default()).unwrap()
}

#[test]
fn two_mappings_of_the_same_frames_show_the_same_bytes() {
    let _serial = serial();
    let s = space("vmap");
    let fp = pool("vmap", 16);
    let frames: Vec<u32> = (0..5).map(|_| fp.alloc(0).unwrap()).collect();
    let a = s.vmap(&fp, &frames).unwrap();
    let b = s.vm_map_ram(&fp, &frames).unwrap();
    assert_ne!(a, b);
    common::fill(a.as_ptr(), 5 * 4096, 0xabcd);
    common::verify(b.as_ptr(), 5 * 4096, 0xabcd);
    for (i, &f) in frames.iter().enumerate() {
        assert_eq!(s.vmalloc_to_frame(a.as_ptr().wrapping_add(i * 4096 + 17)), Some(f));
        assert_eq!(s.vmalloc_to_frame(b.as_ptr().wrapping_add(i * 4096)), Some(f));
    }
    let info = s.vmallocinfo();
    assert!(info.contains(" vmap\n") && info.contains(" vm_map_ram\n"), "{info}");
    // Wrong calls for each kind are refused and change nothing.
    assert_eq!(s.vfree(a.as_ptr()), Err(VmError::WrongKind(a.as_ptr() as usize)));
    assert!(s.vrealloc(Some(a), 1 << 20).is_err());
    assert!(s.vm_unmap_ram(b.as_ptr(), 4).is_err(), "wrong count");
    assert!(s.vm_unmap_ram(a.as_ptr(), 5).is_err(), "a vmap area is not a vm_map_ram range");
    let v = s.vmalloc(4096).unwrap();
    assert!(s.vunmap(v.as_ptr()).is_err(), "a vmalloc area is not a vmap");
    s.vfree(v.as_ptr()).unwrap();
    common::verify(b.as_ptr(), 5 * 4096, 0xabcd);
    s.vunmap(a.as_ptr()).unwrap();
    assert!(s.vunmap(a.as_ptr()).is_err(), "double vunmap");
    s.vm_unmap_ram(b.as_ptr(), 5).unwrap();
    assert!(s.vm_unmap_ram(b.as_ptr(), 5).is_err(), "double vm_unmap_ram");
    // The frames keep their contents after both unmaps.
    let c = s.vmap(&fp, &frames).unwrap();
    common::verify(c.as_ptr(), 5 * 4096, 0xabcd);
    s.vunmap(c.as_ptr()).unwrap();
    for f in frames {
        fp.free(f, 0).unwrap();
    }
    s.check().unwrap();
    fp.allocator().check().unwrap();
}

#[test]
fn frames_not_held_are_refused() {
    let _serial = serial();
    let s = space("refuse");
    let fp = pool("refuse", 4);
    let f = fp.alloc(0).unwrap();
    fp.free(f, 0).unwrap();
    assert!(matches!(s.vmap(&fp, &[f]), Err(VmError::Invalid(_))));
    assert!(matches!(s.vm_map_ram(&fp, &[f]), Err(VmError::Invalid(_))));
    assert_eq!(s.vmap(&fp, &[]), Err(VmError::ZeroSize));
    assert!(s.vmap(&fp, &[1 << 30]).is_err());
    assert_eq!(s.stats(false).arena.live_areas, 0, "a refused map leaves nothing behind");
    // Tails of a held compound block may be mapped.
    let head = fp.alloc(2).unwrap();
    let p = s.vmap(&fp, &[head + 3, head]).unwrap();
    assert_eq!(s.vmalloc_to_frame(p.as_ptr()), Some(head + 3));
    s.vunmap(p.as_ptr()).unwrap();
    fp.free(head, 2).unwrap();
}

/// Mappings that overlap `[lo, hi)`.
fn maps_within((lo, hi): (usize, usize)) -> usize {
    mappings_over(lo, hi - lo)
}

#[test]
fn contiguous_frames_map_with_one_call_and_unmapping_restores_the_mapping_count() {
    let _serial = serial();
    let s = space("maps");
    let fp = pool("maps", 64);
    let head = fp.alloc(8).unwrap();
    let frames: Vec<u32> = (head..head + 256).collect();
    let before_calls = s.stats(false).map_calls;
    // Mappings inside the reservation only: other threads' stacks come and go meanwhile.
    let maps_before = maps_within(s.bounds());
    let p = s.vmap(&fp, &frames).unwrap();
    assert_eq!(s.stats(false).map_calls - before_calls, 1, "one run, one mmap");
    assert!(maps_within(s.bounds()) > maps_before);
    s.vunmap(p.as_ptr()).unwrap();
    assert_eq!(maps_within(s.bounds()), maps_before, "anonymous memory put back merges with the reservation");
    fp.free(head, 8).unwrap();
}

#[test]
fn vmap_blocks_are_carved_per_cpu_and_freed_when_dirty() {
    let _serial = serial();
    let s = space("blocks");
    let fp = pool("blocks", 16);
    let mut frames = Vec::new();
    assert_eq!(fp.alloc_bulk(64, &mut frames), 64);
    let mut live = Vec::new();
    for round in 0..3000usize {
        let n = 1 + round % VMAP_MAX_ALLOC_PAGES;
        let p = s.vm_map_ram(&fp, &frames[..n]).unwrap();
        // SAFETY: n mapped pages.
        unsafe { p.as_ptr().write(round as u8) };
        live.push((p, n));
        if live.len() > 8 {
            let (q, m) = live.remove(0);
            s.vm_unmap_ram(q.as_ptr(), m).unwrap();
        }
    }
    let st = s.stats(false);
    assert!(st.vmap_blocks <= 4, "dirty blocks must be released: {} live", st.vmap_blocks);
    for (q, m) in live {
        s.vm_unmap_ram(q.as_ptr(), m).unwrap();
    }
    assert_eq!(s.stats(false).mapped_areas, s.stats(false).vmap_blocks);
    // More than 64 frames: an area of its own.
    let mut many = Vec::new();
    fp.alloc_bulk(100, &mut many);
    let p = s.vm_map_ram(&fp, &many).unwrap();
    assert!(s.vm_unmap_ram(p.as_ptr(), 99).is_err());
    s.vm_unmap_ram(p.as_ptr(), 100).unwrap();
    for f in frames.into_iter().chain(many) {
        fp.free(f, 0).unwrap();
    }
}

#[test]
fn a_mirrored_ring_reads_a_write_across_the_end_contiguously() {
    let _serial = serial();
    let s = space("ring");
    let fp = pool("ring", 4);
    let n = 4usize;
    let mut frames = Vec::new();
    fp.alloc_bulk(n, &mut frames);
    let twice: Vec<u32> = frames.iter().chain(frames.iter()).copied().collect();
    let base = s.vmap(&fp, &twice).unwrap().as_ptr();
    let size = n * 4096;
    let msg: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
    let at = size - 3000;
    // SAFETY: the mapping is 2 x size bytes; the write ends before base + 2 size.
    unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), base.add(at), msg.len()) };
    // The bytes past the end landed at the start of the ring ...
    // SAFETY: inside the first copy.
    let wrapped = unsafe { std::slice::from_raw_parts(base, msg.len() - 3000) };
    assert_eq!(wrapped, &msg[3000..]);
    // ... and read back contiguously from where they were written.
    // SAFETY: inside the mapping.
    let back = unsafe { std::slice::from_raw_parts(base.add(at), msg.len()) };
    assert_eq!(back, &msg[..]);
    s.vunmap(base).unwrap();
    for f in frames {
        fp.free(f, 0).unwrap();
    }
}

/// Threads allocate frames, map them twice (vmap and vm_map_ram), write an owner pattern
/// through one mapping and check it through the other, then hand the frames to the next
/// thread, which maps them at a third address, checks the pattern again and frees them.
#[test]
fn stress_frames_across_threads_with_patterns_through_two_mappings() {
    let _serial = serial();
    let s = Arc::new(space("stress"));
    let fp = pool("stress", 64);
    let threads = 4;
    let (txs, rxs): (Vec<_>, Vec<_>) =
        (0..threads).map(|_| std::sync::mpsc::channel::<(Vec<u32>, u32, u64)>()).unzip();
    let mut hs = Vec::new();
    for (t, rx) in rxs.into_iter().enumerate() {
        let (s, fp, tx) = (s.clone(), fp.clone(), txs[(t + 1) % threads].clone());
        hs.push(std::thread::spawn(move || {
            let check_and_free = |frames: Vec<u32>, order: u32, tag: u64| {
                let p = s.vmap(&fp, &frames).unwrap();
                common::verify(p.as_ptr(), frames.len() * 4096, tag);
                s.vunmap(p.as_ptr()).unwrap();
                fp.free(frames[0], order).unwrap();
            };
            for i in 0..400u64 {
                while let Ok((f, o, tag)) = rx.try_recv() {
                    check_and_free(f, o, tag);
                }
                let order = (i % 4) as u32;
                let head = fp.alloc(order).unwrap();
                let frames: Vec<u32> = (head..head + (1 << order)).collect();
                let a = s.vmap(&fp, &frames).unwrap();
                let b = s.vm_map_ram(&fp, &frames).unwrap();
                let tag = ((t as u64) << 32) | i;
                let len = frames.len() * 4096;
                common::fill(a.as_ptr(), len, tag);
                common::verify(b.as_ptr(), len, tag);
                s.vm_unmap_ram(b.as_ptr(), frames.len()).unwrap();
                s.vunmap(a.as_ptr()).unwrap();
                if i % 2 == 0 {
                    let _ = tx.send((frames, order, tag));
                } else {
                    check_and_free(frames, order, tag);
                }
            }
            drop(tx);
            rx
        }));
    }
    drop(txs);
    let rxs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    for rx in rxs {
        while let Ok((f, o, tag)) = rx.try_recv() {
            let p = s.vmap(&fp, &f).unwrap();
            common::verify(p.as_ptr(), f.len() * 4096, tag);
            s.vunmap(p.as_ptr()).unwrap();
            fp.free(f[0], o).unwrap();
        }
    }
    fp.allocator().drain_all();
    assert_eq!(fp.stats().free_frames, fp.frames());
    assert_eq!(fp.stats().user_frames, 0);
    let st = s.stats(false);
    assert_eq!(st.mapped_areas, st.vmap_blocks, "only blocks may outlive their mappings");
    fp.allocator().check().unwrap();
}

#[test]
fn a_low_memory_event_gives_free_frames_back() {
    let _serial = serial();
    let fp = pool("pressure", 32);
    let s = space("pressure");
    let head = fp.alloc(10).unwrap();
    let frames: Vec<u32> = (head..head + 1024).collect();
    let p = s.vmap(&fp, &frames).unwrap();
    common::fill(p.as_ptr(), 4 << 20, 7);
    s.vunmap(p.as_ptr()).unwrap();
    fp.free(head, 10).unwrap();
    let released = fp.release_free();
    assert_eq!(released, fp.frames(), "every frame is free, so every frame is released");
    // Released frames read as zero through a new mapping.
    let head = fp.alloc(10).unwrap();
    let frames: Vec<u32> = (head..head + 1024).collect();
    let p = s.vmap(&fp, &frames).unwrap();
    // SAFETY: 4 MiB mapped.
    let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), 4 << 20) };
    assert!(bytes.iter().all(|&b| b == 0));
    s.vunmap(p.as_ptr()).unwrap();
    fp.free(head, 10).unwrap();
}

fn frames_space(name: &str, pool: &FramePool) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 32, ..Default::default() };
    let ao = ArenaOptions { decay_interval_ms: 0, purge_thread: false, ..Default::default() };
    VmSpace::with_frames(name, so, ao, pool.clone()).unwrap()
}

#[test]
fn a_frames_backed_space_maps_frames_that_another_mapping_can_see() {
    let _serial = serial();
    let fp = pool("backed", 64);
    let s = frames_space("backed", &fp);
    let other = space("other");
    let p = s.vmalloc(1 << 20).unwrap();
    let st = s.stats(false);
    assert_eq!(st.map_calls, 1, "256 frames of one order-8 block: one mmap");
    common::fill(p.as_ptr(), 1 << 20, 99);
    let frames: Vec<u32> =
        (0..256).map(|i| s.vmalloc_to_frame(p.as_ptr().wrapping_add(i * 4096)).unwrap()).collect();
    assert_eq!(fp.stats().user_frames, 256);
    let q = other.vmap(&fp, &frames).unwrap();
    common::verify(q.as_ptr(), 1 << 20, 99);
    other.vunmap(q.as_ptr()).unwrap();
    // Odd sizes: blocks of descending orders cover the data pages exactly.
    let r = s.vzalloc(5 * 4096 + 1).unwrap();
    // SAFETY: 6 pages.
    assert!(unsafe { std::slice::from_raw_parts(r.as_ptr(), 6 * 4096) }.iter().all(|&b| b == 0));
    assert_eq!(fp.stats().user_frames, 256 + 6);
    // A pool hit keeps the frames (no new mapping); a purge gives them back.
    s.vfree(r.as_ptr()).unwrap();
    let calls = s.stats(false).map_calls;
    let r2 = s.vmalloc(6 * 4096).unwrap();
    assert_eq!(r2, r);
    assert_eq!(s.stats(false).map_calls, calls, "a pool hit keeps its frames mapped");
    s.vfree(r2.as_ptr()).unwrap();
    s.vfree(p.as_ptr()).unwrap();
    s.shrink();
    assert_eq!(fp.stats().user_frames, 0, "a purge gives every frame back");
    assert_eq!(s.vmalloc_to_frame(p.as_ptr()), None);
    s.check().unwrap();
}

#[test]
fn a_frames_backed_space_fails_cleanly_when_the_pool_is_empty() {
    let _serial = serial();
    let fp = pool("small", 1);
    let s = frames_space("small", &fp);
    let p = s.vmalloc(512 << 10).unwrap();
    match s.vmalloc(768 << 10) {
        Err(VmError::NoFrames(m)) => assert!(m.contains("small"), "{m}"),
        other => panic!("expected NoFrames, got {other:?}"),
    }
    assert_eq!(s.stats(false).arena.live_areas, 1, "the refused area was freed");
    assert_eq!(fp.stats().user_frames, 128);
    // Freed memory is found again through the purge on failure.
    s.vfree(p.as_ptr()).unwrap();
    let q = s.vmalloc(1 << 20).unwrap();
    s.vfree(q.as_ptr()).unwrap();
}

#[test]
fn a_small_area_refused_for_lack_of_frames_is_not_cached_without_them() {
    let _serial = serial();
    let fp = pool("dry-small", 1);
    let s = frames_space("dry-small", &fp);
    let all = s.vmalloc(1 << 20).unwrap();
    assert!(matches!(s.vmalloc(4096), Err(VmError::NoFrames(_))));
    assert_eq!(s.stats(false).arena.cached_areas, 0, "the refused area went back without frames");
    s.vfree(all.as_ptr()).unwrap();
    // The next small area gets frames (after the purge on failure gives them back).
    let q = s.vmalloc(4096).unwrap();
    assert!(s.vmalloc_to_frame(q.as_ptr()).is_some(), "a small area of a frames-backed space has a frame");
    s.vfree(q.as_ptr()).unwrap();
    s.check().unwrap();
}

#[test]
fn stress_a_frames_backed_space_with_owner_patterns() {
    let _serial = serial();
    let fp = pool("fstress", 256);
    let s = Arc::new(frames_space("fstress", &fp));
    let hs: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..600u64 {
                    let bytes = 4096 * (1 + ((i * 7 + t) % 40) as usize);
                    let p = s.vmalloc(bytes).unwrap();
                    let tag = (t << 32) | i;
                    common::fill(p.as_ptr(), bytes, tag);
                    live.push((p, bytes, tag));
                    if live.len() > 16 {
                        let (q, b, tg) = live.remove((i as usize * 5) % live.len());
                        common::verify(q.as_ptr(), b, tg);
                        s.vfree(q.as_ptr()).unwrap();
                    }
                    if i % 100 == 0 {
                        s.purge();
                    }
                }
                for (q, b, tg) in live {
                    common::verify(q.as_ptr(), b, tg);
                    s.vfree(q.as_ptr()).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    s.shrink();
    assert_eq!(fp.stats().user_frames, 0);
    s.check().unwrap();
    fp.allocator().check().unwrap();
}

fn space_lazy(name: &str, lazy_max: u64) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 32, map_ram_lazy_max: lazy_max, ..Default::default() };
    VmSpace::new(name, so, ArenaOptions { decay_interval_ms: 0, ..Default::default() }).unwrap()
}

/// Mappings inside the space's reservation: unlike the process's count, threads that other
/// tests start meanwhile (a stack and its guard each) do not change it.
fn maps_in(s: &VmSpace) -> usize {
    let (lo, hi) = s.bounds();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| usize::from_str_radix(l.split('-').next()?, 16).ok())
        .filter(|&start| (lo..hi).contains(&start))
        .count()
}

/// Lazy unmapping: `vm_unmap_ram` forgets the frames at once but leaves the file mapping until
/// the block is released (one `mmap` over the whole block) or `vm_unmap_aliases` runs; either
/// way the mapping count falls back to where it was.
#[test]
fn vm_unmap_ram_leaves_the_mapping_until_the_block_goes_or_aliases_are_unmapped() {
    let _serial = serial();
    // One CPU's block: a thread that moved would open a second block.
    assert!(vmarena_platform::cpu::pin_current_thread(0));
    let s = space_lazy("lazy-unmap", 4096);
    let fp = pool("lazy-unmap", 4);
    let f = fp.alloc(0).unwrap();
    let maps_before = maps_in(&s);
    // A slot kept in use, so that only a fully dirty block is released.
    let held = s.vm_map_ram(&fp, &[f]).unwrap();
    let calls_before = s.stats(false).map_calls;

    let p = s.vm_map_ram(&fp, &[f]).unwrap();
    // SAFETY: one page mapped at p.
    unsafe { p.as_ptr().write(0x5a) };
    s.vm_unmap_ram(p.as_ptr(), 1).unwrap();
    assert_eq!(s.vmalloc_to_frame(p.as_ptr()), None, "the frame is forgotten at once");
    assert!(s.vm_unmap_ram(p.as_ptr(), 1).is_err(), "double vm_unmap_ram");
    let st = s.stats(false);
    assert_eq!(st.map_ram_lingering, 1);
    assert_eq!(st.map_calls - calls_before, 1, "the unmap made no call");
    assert!(maps_in(&s) > maps_before, "the file mapping is still there");

    assert_eq!(s.vm_unmap_aliases(), 1);
    assert_eq!(s.vm_unmap_aliases(), 0);
    assert_eq!(s.stats(false).map_ram_lingering, 0);
    assert!(maps_in(&s) > maps_before, "the held slot is mapped");

    // Fill the rest of the block: each slot lingers until the block is released.
    let mut peak = 0;
    for i in 2..VMAP_BLOCK_PAGES {
        let q = s.vm_map_ram(&fp, &[f]).unwrap();
        // SAFETY: one page mapped at q.
        unsafe { q.as_ptr().write(i as u8) };
        s.vm_unmap_ram(q.as_ptr(), 1).unwrap();
        peak = peak.max(s.stats(false).map_ram_lingering);
    }
    assert_eq!(s.stats(false).vmap_blocks, 1);
    s.vm_unmap_ram(held.as_ptr(), 1).unwrap();
    let st = s.stats(false);
    assert_eq!(peak, VMAP_BLOCK_PAGES - 2, "every slot but the last lingered");
    assert_eq!((st.vmap_blocks, st.map_ram_lingering, st.mapped_areas), (0, 0, 0));
    assert_eq!(maps_in(&s), maps_before, "the released block was restored with the others");
    // Every write went to the frame: it holds the last one.
    let r = s.vmap(&fp, &[f]).unwrap();
    // SAFETY: one page mapped at r.
    assert_eq!(unsafe { r.as_ptr().read() }, (VMAP_BLOCK_PAGES - 1) as u8);
    s.vunmap(r.as_ptr()).unwrap();
    fp.free(f, 0).unwrap();
}

/// The limit on lingering mappings: past it an unmap restores its slot at once, and at 0 every
/// unmap does; the shrinker removes what lingers.
#[test]
fn lingering_mappings_stop_at_the_limit_and_the_shrinker_removes_them() {
    let _serial = serial();
    // (limit, mappings left after three map/unmaps, calls in all): at 0 three maps and three
    // restores; at 2 the third unmap restores at once and the shrinker restores the first two
    // slots, which are adjacent, with one call.
    for (limit, lingering, calls) in [(0u64, 0u64, 6u64), (2, 2, 5)] {
        let s = space_lazy("lazy-limit", limit);
        let fp = pool("lazy-limit", 4);
        let f = fp.alloc(0).unwrap();
        let calls_before = s.stats(false).map_calls;
        for _ in 0..3 {
            let p = s.vm_map_ram(&fp, &[f]).unwrap();
            s.vm_unmap_ram(p.as_ptr(), 1).unwrap();
        }
        let st = s.stats(false);
        assert_eq!(st.map_ram_lingering, lingering, "limit {limit}");
        assert_eq!(st.map_calls - calls_before, 3 + (3 - lingering), "limit {limit}: maps plus restores");
        s.shrink();
        assert_eq!(s.stats(false).map_ram_lingering, 0, "limit {limit}");
        assert_eq!(s.stats(false).map_calls - calls_before, calls, "limit {limit}: every slot restored once");
        fp.free(f, 0).unwrap();
    }
}
