//! `VmAlloc` as this test program's global allocator: large layouts in the default space, small
//! ones in the system allocator, contents kept across every resize, including across the
//! threshold, from several threads at once; vmarena's own allocations (the space's creation,
//! purges of thousands of lazy areas) never come back into vmarena.

use std::hint::black_box;
use vmarena::{default_space, VmAlloc, DEFAULT_THRESHOLD_BYTES};

#[global_allocator]
static GLOBAL: VmAlloc = VmAlloc::new();

fn in_space(p: *const u8) -> bool {
    default_space().map(|s| s.contains(p)).unwrap_or(false)
}

fn fill(v: &mut [u8], owner: u8) {
    for (i, b) in v.iter_mut().enumerate() {
        *b = owner ^ (i as u8).wrapping_mul(31);
    }
}

fn verify(v: &[u8], owner: u8, what: &str) {
    for (i, b) in v.iter().enumerate() {
        assert_eq!(*b, owner ^ (i as u8).wrapping_mul(31), "{what}: byte {i} of owner {owner}");
    }
}

#[test]
fn routes_by_size_and_keeps_contents_across_the_threshold() {
    let small: Vec<u8> = vec![1; 100];
    assert!(!in_space(small.as_ptr()), "small layouts stay with the inner allocator");
    let big: Vec<u8> = vec![7; DEFAULT_THRESHOLD_BYTES];
    assert!(in_space(big.as_ptr()), "a layout at the threshold goes to vmarena");
    assert_eq!(big.as_ptr() as usize % 4096, 0);
    let live = default_space().unwrap().stats(false).arena.live_areas;
    assert!(live >= 1);

    // Grow a small vector across the threshold and back, checking the contents each time.
    let mut v: Vec<u8> = vec![0; 1000];
    fill(&mut v, 3);
    assert!(!in_space(v.as_ptr()));
    v.reserve_exact(200_000);
    assert!(in_space(v.as_ptr()), "grown past the threshold: moved into vmarena");
    verify(&v, 3, "after moving in");
    v.resize(200_000, 0);
    fill(&mut v, 4);
    v.reserve_exact(1 << 20);
    verify(&v, 4, "after vrealloc");
    v.truncate(500);
    v.shrink_to_fit();
    assert!(!in_space(v.as_ptr()), "shrunk below the threshold: moved out");
    verify(&v, 4, "after moving out");

    // Sizes go to vmarena rounded up to a size class: 17 pages are served as 20.
    let odd: Vec<u8> = Vec::with_capacity(17 * 4096);
    assert_eq!(default_space().unwrap().size(odd.as_ptr()), Some(20 * 4096));
    drop(odd);

    // Zeroed large layouts read as zero even when the area is reused.
    drop(big);
    let z: Vec<u64> = vec![0; 100_000];
    assert!(in_space(z.as_ptr().cast()));
    assert!(z.iter().all(|&x| x == 0));
    // Alignment above a page is honoured.
    let layout = std::alloc::Layout::from_size_align(1 << 20, 1 << 16).unwrap();
    // SAFETY: a non-zero layout; freed below with the same layout.
    unsafe {
        let p = std::alloc::alloc(layout);
        assert!(in_space(p) && (p as usize) % (1 << 16) == 0);
        let q = std::alloc::realloc(p, layout, 3 << 20);
        assert!(!q.is_null() && (q as usize) % (1 << 16) == 0, "realloc keeps the layout's alignment");
        std::alloc::dealloc(q, std::alloc::Layout::from_size_align(3 << 20, 1 << 16).unwrap());
    }
    black_box(small);
}

#[test]
fn threads_resize_their_own_buffers_and_purges_run_under_the_adapter() {
    // Each thread grows and shrinks buffers with its own pattern; thousands of frees push the
    // lazy list over its limit, so purges (which allocate vectors under engine locks) run on
    // the worker and on these threads while the adapter is the global allocator.
    let handles: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9u32.wrapping_mul(t as u32 + 1);
                let mut keep: Vec<(u8, usize, Vec<u8>)> = Vec::new();
                for round in 0..400u32 {
                    rng ^= rng << 13;
                    rng ^= rng >> 17;
                    rng ^= rng << 5;
                    let len = 1000 + (rng as usize % (600 << 10));
                    let owner = t.wrapping_mul(64).wrapping_add(round as u8);
                    let mut v = vec![0u8; len];
                    fill(&mut v, owner);
                    v.resize(len + (rng as usize % (300 << 10)), 0);
                    verify(&v[..len], owner, "grown");
                    keep.push((owner, len, v));
                    if keep.len() > 8 {
                        let (o, l, old) = keep.remove(0);
                        verify(&old[..l], o, "kept while others came and went");
                    }
                }
                for (o, l, v) in &keep {
                    verify(&v[..*l], *o, "at the end");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a worker thread failed");
    }
    let s = default_space().unwrap();
    let st = s.stats(false).arena;
    assert!(st.purges > 0, "the frees above should have started a purge: {st:?}");
}

#[test]
fn vmarena_code_that_allocates_under_its_locks_is_served_by_the_inner_allocator() {
    // 6000 live areas: the checker and vmallocinfo collect them into vectors of more than the
    // threshold while holding engine locks. Routed back into vmarena, those allocations would
    // wait for the very locks their own thread holds: a watchdog turns that hang into a failure.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        if !d.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!("vmallocinfo or dealloc did not finish in 60 s: a self-deadlock");
            std::process::abort();
        }
    });
    let layout = std::alloc::Layout::from_size_align(DEFAULT_THRESHOLD_BYTES, 8).unwrap();
    // SAFETY: non-zero layouts, freed below with the same layout.
    let ptrs: Vec<*mut u8> = (0..6000).map(|_| unsafe { std::alloc::alloc(layout) }).collect();
    assert!(ptrs.iter().all(|&p| in_space(p)));
    let s = default_space().unwrap();
    let info = s.vmallocinfo();
    assert!(info.lines().count() >= 6000, "vmallocinfo lists every live area");
    for p in ptrs {
        // SAFETY: allocated above with `layout`.
        unsafe { std::alloc::dealloc(p, layout) };
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
}
