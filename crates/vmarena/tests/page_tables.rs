//! A purge that leaves whole 2 MiB blocks of a memory space free maps them fresh, which gives
//! their page tables back (tier 2, real memory). Its own test binary, a process of its own:
//! `VmPTE` is the process's, and another test's memory in the same process would move it.

mod common;

use common::{fill, verify};
use vmarena::*;
use vmarena_platform::page_move::mappings_over;

/// The process's page tables, in KiB.
fn page_tables_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmPTE:")).expect("VmPTE in /proc/self/status");
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_purge_gives_the_page_tables_of_the_blocks_it_left_free_back() {
    if vmarena_platform::limits::overcommit_mode() == 2 {
        eprintln!("skipped: strict overcommit, where free blocks are not remapped");
        return;
    }
    let so = SpaceOptions { space_bytes: 8 << 30, ..Default::default() };
    // No background purge: this test's purge is the one that frees the blocks.
    let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    let space = VmSpace::new("page-tables", so, ao).unwrap();
    let before = page_tables_kib();
    // 1 GiB in 4 MiB areas (above the pools: a purge sends them to the free tree), every
    // page written: 2 MiB of page tables with 4 KiB pages.
    let areas: Vec<_> = (0..256u64)
        .map(|i| {
            let p = space.vmalloc(4 << 20).unwrap();
            fill(p.as_ptr(), 4 << 20, i);
            p
        })
        .collect();
    let touched = page_tables_kib();
    assert!(touched >= before + 1800, "1 GiB of pages written: {before} -> {touched} KiB of page tables");
    for p in &areas {
        space.vfree(p.as_ptr()).unwrap();
    }
    space.purge();
    let after = page_tables_kib();
    let st = space.stats(false).arena;
    assert!(st.blocks_renewed >= 500, "{st:?}");
    assert!(after + 1500 <= touched, "page tables {before} -> {touched} -> {after} KiB after the purge");
    space.check().unwrap();
    let (lo, _) = space.bounds();
    assert_eq!(mappings_over(lo, space.committed_bytes()), 1, "the fresh blocks merged back");
    // The renewed blocks are memory again: allocate, write and check every byte.
    let again: Vec<_> = (0..256u64)
        .map(|i| {
            let p = space.vmalloc(4 << 20).unwrap();
            fill(p.as_ptr(), 4 << 20, 1000 + i);
            p
        })
        .collect();
    for (i, p) in again.iter().enumerate() {
        verify(p.as_ptr(), 4 << 20, 1000 + i as u64);
        space.vfree(p.as_ptr()).unwrap();
    }
    space.check().unwrap();
}
