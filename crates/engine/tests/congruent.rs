//! Congruent areas (tier 1): the kernel's `pcpu_get_vm_areas` on every strategy — the lowest
//! aligned base where every part fits, all or nothing, each part an area of its own, bad
//! input refused with nothing changed, lazily freed space given back by a purge when nothing
//! else fits.

use vmarena_engine::*;

fn arena(s: Strategy) -> Arena {
    let o = ArenaOptions {
        strategy: s,
        nodes: 3,
        purge_thread: false,
        decay_interval_ms: 0,
        ..Default::default()
    };
    Arena::new(format!("congruent-{s}"), 0x1000, 0x1000 + 4096, o, Box::new(NoBacking)).unwrap()
}

fn tag() -> AreaTag {
    AreaTag { caller: None, requested_bytes: 0, kind: AreaKind::Vmalloc }
}

/// `(offset, pages)` pairs as the spans `alloc_congruent` takes.
fn spans(parts: &[(u64, u64)]) -> Vec<vmarena_core::Span> {
    parts.iter().map(|&(o, p)| vmarena_core::Span::new(o, p)).collect()
}

#[test]
fn parts_land_at_their_offsets_from_the_lowest_aligned_base_and_free_one_by_one() {
    for s in Strategy::ALL {
        let a = arena(s);
        let parts = [(0, 4), (64, 4), (128, 8)];
        let base = a.alloc_congruent(&spans(&parts), 64, tag()).unwrap();
        assert!(base % 64 == 0, "{s}: aligned base");
        assert_eq!(base, 0x1000, "{s}: the lowest base of an empty arena");
        for &(off, pages) in &parts {
            let area = a.lookup(base + off).unwrap_or_else(|| panic!("{s}: part at {off} is live"));
            assert_eq!(area.pages, pages);
        }
        assert_eq!(a.stats().live_pages, 16);
        a.check().unwrap();
        // The gaps between parts stay free for others: a 60-page area fits in the first.
        let w = AllocRequest { window: Some((base + 4, base + 64)), ..AllocRequest::pages(60) };
        let gap = a.alloc(&w).unwrap();
        assert_eq!(gap.start, base + 4, "{s}: the gap after the first part");
        // A second set lands above the first, at the next base where every part fits.
        let second = a.alloc_congruent(&spans(&parts), 64, tag()).unwrap();
        assert!(second > base && second % 64 == 0, "{s}: {second:#x}");
        for &(off, _) in &parts {
            a.free(base + off).unwrap();
            a.free(second + off).unwrap();
        }
        a.free(gap.start).unwrap();
        assert_eq!(a.stats().live_pages, 0);
        a.check().unwrap();
    }
}

#[test]
fn a_busy_page_under_any_part_moves_the_base() {
    for s in Strategy::ALL {
        let a = arena(s);
        // Occupy the page where the third part would start at base 0x1000.
        let w = AllocRequest { window: Some((0x1000 + 130, 0x1000 + 131)), ..AllocRequest::pages(1) };
        let blocker = a.alloc(&w).unwrap();
        let base = a.alloc_congruent(&spans(&[(0, 2), (128, 4)]), 16, tag()).unwrap();
        assert_eq!(base, 0x1000 + 16, "{s}: the first base whose second part clears the blocker");
        a.check().unwrap();
        a.free(blocker.start).unwrap();
    }
}

#[test]
fn bad_parts_are_refused_and_change_nothing() {
    for s in Strategy::ALL {
        let a = arena(s);
        let before = a.stats();
        assert!(matches!(a.alloc_congruent(&spans(&[]), 1, tag()), Err(AllocError::Invalid(_))));
        assert!(matches!(a.alloc_congruent(&spans(&[(0, 0)]), 1, tag()), Err(AllocError::Invalid(_))));
        assert!(matches!(a.alloc_congruent(&spans(&[(0, 4)]), 3, tag()), Err(AllocError::Invalid(_))));
        let overlap = a.alloc_congruent(&spans(&[(0, 8), (4, 8)]), 1, tag());
        assert!(matches!(overlap, Err(AllocError::PartsOverlap { offset_pages: 4 })), "{s}: {overlap:?}");
        assert!(matches!(
            a.alloc_congruent(&spans(&[(0, 1), (u64::MAX, 1)]), 1, tag()),
            Err(AllocError::PartsOverlap { .. }) | Err(AllocError::NoSpace { .. })
        ));
        // Larger than the arena: no space, after the purges, and nothing taken.
        let too_big = a.alloc_congruent(&spans(&[(0, 8), (4096, 8)]), 1, tag());
        assert!(matches!(too_big, Err(AllocError::NoSpace { .. })), "{s}: {too_big:?}");
        let after = a.stats();
        assert_eq!((after.live_pages, after.free_pages), (before.live_pages, before.free_pages), "{s}");
        a.check().unwrap();
    }
}

#[test]
fn lazily_freed_space_is_purged_into_the_tree_when_nothing_else_fits() {
    for s in Strategy::ALL {
        let a = arena(s);
        // Fill the arena with 64-page areas and free them: lazily freed or pooled, not in the
        // tree, so only a purge can make room.
        let mut areas = Vec::new();
        while let Ok(x) = a.alloc(&AllocRequest { nonblocking: true, ..AllocRequest::pages(64) }) {
            areas.push(x.start);
        }
        assert!(areas.len() >= 32, "{s}: {} areas", areas.len());
        for st in areas {
            a.free(st).unwrap();
        }
        let purges = a.stats().purges;
        let base = a.alloc_congruent(&spans(&[(0, 512), (1024, 512), (2048, 512)]), 512, tag()).unwrap();
        assert!(base % 512 == 0);
        assert!(a.stats().purges > purges, "{s}: the space came back through a purge");
        for off in [0, 1024, 2048] {
            assert_eq!(a.lookup(base + off).map(|x| x.pages), Some(512), "{s}");
        }
        a.check().unwrap();
    }
}

/// Random operations against a shadow model of live areas, on every strategy: plain
/// allocations and frees mixed with congruent ones of random offsets and sizes. A congruent
/// allocation either gives every part, at its offset from an aligned base, overlapping no live
/// area, or fails with nothing changed; the arena checks clean throughout.
#[test]
fn congruent_allocations_against_a_shadow_model() {
    for s in Strategy::ALL {
        let a = arena(s);
        let mut live: std::collections::BTreeMap<u64, u64> = Default::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ s as u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let overlaps = |live: &std::collections::BTreeMap<u64, u64>, st: u64, pages: u64| {
            live.range(..st + pages).next_back().is_some_and(|(&ls, &lp)| ls + lp > st)
        };
        let (mut made, mut refused) = (0, 0);
        for step in 0..3000 {
            match rnd(4) {
                0 => {
                    let pages = 1 + rnd(24);
                    if let Ok(x) = a.alloc(&AllocRequest { nonblocking: true, ..AllocRequest::pages(pages) })
                    {
                        assert!(!overlaps(&live, x.start, x.pages), "{s} step {step}: plain area overlaps");
                        live.insert(x.start, x.pages);
                    }
                }
                1 => {
                    let n = 1 + rnd(4);
                    let mut parts = Vec::new();
                    let mut off = rnd(8);
                    for _ in 0..n {
                        let pages = 1 + rnd(32);
                        parts.push((off, pages));
                        // Now and then a gap that leaves little room: some requests cannot fit.
                        off += pages + if rnd(8) == 0 { 1024 + rnd(2048) } else { rnd(64) };
                    }
                    let align = 1 << rnd(6);
                    let before: (usize, u64) = (live.len(), live.values().sum());
                    match a.alloc_congruent(&spans(&parts), align, tag()) {
                        Ok(base) => {
                            made += 1;
                            assert!(base % align == 0, "{s} step {step}");
                            for &(o, p) in &parts {
                                assert!(
                                    !overlaps(&live, base + o, p),
                                    "{s} step {step}: part overlaps a live area"
                                );
                                assert_eq!(a.lookup(base + o).map(|x| x.pages), Some(p), "{s} step {step}");
                                live.insert(base + o, p);
                            }
                        }
                        Err(e) => {
                            refused += 1;
                            assert!(matches!(e, AllocError::NoSpace { .. }), "{s} step {step}: {e:?}");
                            let st = a.stats();
                            assert_eq!(
                                (st.live_areas as usize, st.live_pages),
                                before,
                                "{s} step {step}: all or nothing"
                            );
                        }
                    }
                }
                _ => {
                    if let Some((&st, _)) = live.iter().nth(rnd(live.len().max(1) as u64) as usize) {
                        a.free(st).unwrap();
                        live.remove(&st);
                    }
                }
            }
            if step % 500 == 0 {
                a.check().unwrap();
            }
        }
        a.check().unwrap();
        eprintln!("{s}: {made} congruent allocations made, {refused} refused");
        assert!(made > 100 && refused > 10, "{s}: {made} congruent allocations made, {refused} refused");
    }
}
