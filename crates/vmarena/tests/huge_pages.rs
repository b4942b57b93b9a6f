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
        if let Some(v) = line.strip_prefix("AnonHugePages:").filter(|_| inside) {
            return v.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

fn space(huge_pages: bool) -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 30, huge_pages, ..Default::default() };
    let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    VmSpace::new("thp", so, ao).unwrap()
}

#[test]
fn small_areas_stay_on_small_pages_and_large_ones_take_huge_pages() {
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
