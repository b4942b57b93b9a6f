//! Transparent huge pages: large areas may take them, small areas never do (their guards give
//! each 2 MiB range a page table first), and the option switches them off.

mod common;

use vmarena::*;

/// The machine's THP mode is `madvise` or `always`.
fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let mode = s.split_once('[')?.1.split_once(']')?.0.to_string();
    (mode != "never").then_some(mode)
}

/// `AnonHugePages` in KiB of the mapping that holds `addr` (/proc/self/smaps).
fn anon_huge_kib(addr: usize) -> u64 {
    smaps_kib(addr, "AnonHugePages:")
}

/// A field of /proc/self/smaps, in KiB, for the mapping that holds `addr`.
fn smaps_kib(addr: usize, field: &str) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split(' ').next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = a <= addr && addr < b;
                continue;
            }
        }
        if let Some(v) = line.strip_prefix(field).filter(|_| inside) {
            return v.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

/// The tests of this file run one at a time: two reservations with the same flags can sit
/// next to each other and be merged into one mapping, and the smaps figures are per mapping.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn space(huge_pages: bool) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 30, huge_pages, ..Default::default() };
    let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    VmSpace::new("thp", so, ao).unwrap()
}

#[test]
fn small_areas_stay_on_small_pages_and_large_ones_take_huge_pages() {
    let _serial = serial();
    let s = space(true);
    let Some(mode) = thp_mode().filter(|_| s.guards_enforced()) else {
        assert!(!s.huge_pages(), "no THP or no guards: the option is not applied");
        eprintln!("skipped: this machine has THP switched off or no guard markers");
        return;
    };
    assert!(s.huge_pages(), "THP mode {mode} with guards: the space asked for huge pages");
    // 600 one-page areas, every byte written: more than one 2 MiB range of small areas.
    let small: Vec<_> = (0..600u64)
        .map(|i| {
            let p = s.vmalloc(4096).unwrap();
            common::fill(p.as_ptr(), 4096, i);
            p
        })
        .collect();
    assert_eq!(anon_huge_kib(small[0].as_ptr() as usize), 0, "no small area took a huge page");
    // A 16 MiB area written through: its aligned 2 MiB ranges fault as huge pages.
    let len = 16 << 20;
    let big = s.vmalloc(len).unwrap();
    common::fill(big.as_ptr(), len, 7);
    assert!(anon_huge_kib(big.as_ptr() as usize) >= 2048, "the large area took huge pages");
    common::verify(big.as_ptr(), len, 7);
    for (i, p) in small.iter().enumerate() {
        common::verify(p.as_ptr(), 4096, i as u64);
    }
    s.vfree(big.as_ptr()).unwrap();
    for p in small {
        s.vfree(p.as_ptr()).unwrap();
    }
}

#[test]
fn the_option_off_keeps_large_areas_on_small_pages() {
    let _serial = serial();
    let s = space(false);
    assert!(!s.huge_pages());
    if thp_mode().as_deref() != Some("madvise") {
        eprintln!("skipped: THP is not in madvise mode here, so the option cannot be observed");
        return;
    }
    let len = 16 << 20;
    let big = s.vmalloc(len).unwrap();
    common::fill(big.as_ptr(), len, 9);
    assert_eq!(anon_huge_kib(big.as_ptr() as usize), 0);
    s.vfree(big.as_ptr()).unwrap();
}

/// An area grown down into free space starts inside a 2 MiB range that had no page table, so
/// its first write makes a huge page that reaches below it. When the area is freed and
/// purged, the free pages of that huge page are released with it: nothing stays resident.
#[test]
fn a_purge_leaves_no_free_page_of_a_split_huge_page_resident() {
    let _serial = serial();
    let so = SpaceOptions { space_bytes: 1 << 30, ..Default::default() };
    let ao = ArenaOptions { nodes: 1, purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    let s = VmSpace::new("thp-spill", so, ao).unwrap();
    if thp_mode().is_none() || !s.huge_pages() {
        eprintln!("skipped: this machine has THP switched off or no guard markers");
        return;
    }
    let page = 4096;
    // a: [0, 1024) pages with its guard at 1023; b: [1024, 2048); c, live, stops b growing up.
    let a = s.vmalloc(1023 * page).unwrap();
    let b = s.vmalloc(1023 * page).unwrap();
    let c = s.vmalloc(300 * page).unwrap();
    assert_eq!(b.as_ptr() as usize - a.as_ptr() as usize, 1024 * page, "the test needs adjacent areas");
    assert_eq!(a.as_ptr() as usize % (2 << 20), 0, "the space starts on a huge page");
    s.vfree(a.as_ptr()).unwrap();
    s.purge();
    s.vfree(b.as_ptr()).unwrap();
    // 700 pages more than b: b grows down to page 324, inside [0, 512), which nothing touched.
    let len = (1023 + 700) * page;
    let g = s.vmalloc(len).unwrap();
    assert_eq!(g.as_ptr() as usize, b.as_ptr() as usize - 700 * page);
    assert_eq!(s.stats(false).arena.lazy_extends, 1);
    common::fill(g.as_ptr(), len, 5);
    let addr = g.as_ptr() as usize;
    let resident = smaps_kib(addr, "Rss:");
    if smaps_kib(addr, "AnonHugePages:") < 4096 {
        eprintln!("skipped: the kernel gave no huge page to the range below the area");
        s.vfree(g.as_ptr()).unwrap();
        s.vfree(c.as_ptr()).unwrap();
        return;
    }
    assert!(resident >= (len / 1024) as u64 + 324 * 4, "the huge page below the area is resident");
    common::verify(g.as_ptr(), len, 5);
    s.vfree(g.as_ptr()).unwrap();
    s.purge();
    let left = smaps_kib(addr, "Rss:");
    assert!(left < 324 * 4, "{left} KiB still resident after the purge (the free part of the huge page)");
    s.vfree(c.as_ptr()).unwrap();
}

/// `vmalloc_huge` in a space that takes no huge pages on its own: a request of at least one
/// huge page is rounded up to whole huge pages, aligned to one and advised, and faults huge
/// pages where a plain `vmalloc` of the same size in the same space faults none; a smaller
/// request gets base pages; the statistics say which was which; an impossible size is refused.
#[test]
fn vmalloc_huge_maps_huge_pages_where_plain_vmalloc_does_not() {
    let _serial = serial();
    let s = space(false);
    let huge = 2 << 20; // one huge page on x86-64, this test's machine
    let small = s.vmalloc_huge(100 << 10).unwrap();
    assert_eq!(s.size(small.as_ptr()), Some(100 << 10), "below a huge page: base pages, size as asked");
    let len = 16 << 20;
    let p = s.vmalloc_huge(len - 4096).unwrap();
    assert_eq!(p.as_ptr() as usize % huge, 0, "aligned to a huge page");
    assert_eq!(s.size(p.as_ptr()), Some(len), "rounded up to whole huge pages");
    let st = s.stats(false);
    assert_eq!(st.huge_small, 1);
    assert_eq!(st.huge_advised + st.huge_refused, 1);
    assert!(s.vmalloc_huge(usize::MAX - 4096).is_err(), "an impossible size is refused");
    common::fill(p.as_ptr(), len, 11);
    if thp_mode().is_some() && st.huge_advised == 1 {
        let plain = s.vmalloc(len).unwrap();
        common::fill(plain.as_ptr(), len, 12);
        if thp_mode().as_deref() == Some("madvise") {
            assert_eq!(anon_huge_kib(plain.as_ptr() as usize), 0, "plain vmalloc: no huge pages here");
        }
        assert!(anon_huge_kib(p.as_ptr() as usize) >= 2048, "vmalloc_huge: huge pages");
        common::verify(plain.as_ptr(), len, 12);
        s.vfree(plain.as_ptr()).unwrap();
    } else {
        eprintln!("THP off here: vmalloc_huge fell back to base pages ({} refused)", st.huge_refused);
    }
    common::verify(p.as_ptr(), len, 11);
    s.vfree(p.as_ptr()).unwrap();
    s.vfree(small.as_ptr()).unwrap();
}

/// Free reserved huge pages of the default size (`HugePages_Free` in /proc/meminfo).
fn hugetlb_free_pages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| l.strip_prefix("HugePages_Free:").map(|v| v.trim().parse().ok()))?
        })
        .unwrap_or(0)
}

/// `vmalloc_hugetlb`: reserved huge pages when the system has enough (`KernelPageSize` 2048 kB
/// over the area), else the `vmalloc_huge` fallback, counted; either way the memory holds
/// what is written, `vfree` frees it once, and the range serves base-page areas afterwards.
#[test]
fn hugetlb_areas_take_reserved_huge_pages_or_fall_back() {
    let _serial = serial();
    let s = space(true);
    let huge = vmarena_platform::huge_page_size();
    let reserved = hugetlb_free_pages() >= 2;
    let before = s.stats(false);
    let p = s.vmalloc_hugetlb(huge + 1).unwrap();
    assert_eq!(p.as_ptr() as usize % huge, 0, "aligned to a huge page");
    assert_eq!(s.size(p.as_ptr()), Some(2 * huge), "whole huge pages");
    common::fill(p.as_ptr(), 2 * huge, 41);
    common::verify(p.as_ptr(), 2 * huge, 41);
    let st = s.stats(false);
    if reserved {
        assert_eq!(st.hugetlb_mapped, before.hugetlb_mapped + 1);
        assert_eq!(smaps_kib(p.as_ptr() as usize, "KernelPageSize:"), (huge >> 10) as u64);
        assert!(s.vrealloc(Some(p), 3 * huge).is_err(), "vrealloc refuses a hugetlb area");
    } else {
        eprintln!("no reserved huge pages: the fallback path");
        assert_eq!(st.hugetlb_refused, before.hugetlb_refused + 1);
    }
    s.vfree(p.as_ptr()).unwrap();
    assert!(s.vfree(p.as_ptr()).is_err(), "a second free is refused");
    s.purge();
    // The range is base-page memory again: areas carved there hold what is written.
    let q = s.vmalloc(4 * huge).unwrap();
    common::fill(q.as_ptr(), 4 * huge, 42);
    common::verify(q.as_ptr(), 4 * huge, 42);
    s.vfree(q.as_ptr()).unwrap();
    assert!(matches!(s.vmalloc_hugetlb(0), Err(VmError::ZeroSize)));
    s.check().unwrap();
}
