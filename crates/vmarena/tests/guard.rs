//! Guard pages fault (tier 1). Each case runs in a child process (this test binary re-executed
//! with `VMARENA_GUARD_CHILD` set), so the expected SIGSEGV does not take the suite down.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use vmarena::*;

fn space() -> VmSpace {
    let so = SpaceOptions { space_bytes: 1 << 28, ..Default::default() };
    let ao = ArenaOptions { purge_thread: false, decay_interval_ms: 0, ..Default::default() };
    VmSpace::new("guard", so, ao).unwrap()
}

/// Child side: allocate 10,000 bytes (3 pages), write the last usable byte, then, per mode,
/// the first byte past the end.
fn child(mode: &str) {
    // One CPU, one vmap node: a freed area goes to that node's pool and the next request of the
    // same size on the same node takes it back. Unpinned, the scheduler may move the thread to
    // another node between the free and the allocation, which then comes from elsewhere.
    let cpu = vmarena_platform::cpu::current();
    assert!(vmarena_platform::cpu::pin_current_thread(cpu), "cannot pin to CPU {cpu}");
    let s = space();
    if let Some(grown) = mode.strip_prefix("grown_") {
        grown_child(&s, grown);
    }
    let mut p = s.vmalloc(10_000).unwrap();
    if mode == "after_purge" {
        // The area goes to the pool, is released by a purge and handed out again: the guard
        // must still be there.
        s.vfree(p.as_ptr()).unwrap();
        s.purge();
        let q = s.vmalloc(10_000).unwrap();
        assert_eq!(q, p, "pool hit expected");
        p = q;
    }
    let usable = s.size(p.as_ptr()).unwrap();
    assert_eq!(usable, 12_288);
    // SAFETY: last usable byte of a live area.
    unsafe { p.as_ptr().add(usable - 1).write_volatile(1) };
    println!("inside ok");
    if mode != "inside" {
        // SAFETY: deliberately one byte past the area: the guard page must fault here.
        unsafe { p.as_ptr().add(usable).write_volatile(1) };
        println!("no fault");
    }
    std::process::exit(0);
}

/// Child side of the growths in place: a 2 MiB area (above the pools and the thread caches)
/// grown to 3 MiB where it lies, into free space of the tree (`tree`) or into the front of
/// the freed area after it (`lazy`). Its old guard page is data now, and a write past the new
/// end must fault.
fn grown_child(s: &VmSpace, from: &str) -> ! {
    let mib = 1 << 20;
    let p = s.vmalloc(2 * mib).unwrap();
    if from == "lazy" {
        let next = s.vmalloc(2 * mib).unwrap();
        assert_eq!(
            next.as_ptr() as usize,
            p.as_ptr() as usize + 2 * mib + 4096,
            "a neighbour after the guard"
        );
        s.vfree(next.as_ptr()).unwrap();
    }
    let q = s.vrealloc(Some(p), 3 * mib).unwrap();
    assert_eq!(q, p, "grown in place");
    assert_eq!(s.stats(false).arena.grown_in_place, 1);
    let usable = s.size(p.as_ptr()).unwrap();
    assert_eq!(usable, 3 * mib);
    // SAFETY: the old guard page and the last usable byte lie inside the grown area.
    unsafe {
        p.as_ptr().add(2 * mib).write_volatile(1);
        p.as_ptr().add(usable - 1).write_volatile(1);
    }
    println!("inside ok");
    // SAFETY: deliberately one byte past the area: the new guard page must fault here.
    unsafe { p.as_ptr().add(usable).write_volatile(1) };
    println!("no fault");
    std::process::exit(0);
}

fn run_child(mode: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "guard_page_faults_on_write_past_end", "--nocapture", "--test-threads=1"])
        .env("VMARENA_GUARD_CHILD", mode)
        .output()
        .unwrap()
}

#[test]
fn guard_page_faults_on_write_past_end() {
    if let Ok(mode) = std::env::var("VMARENA_GUARD_CHILD") {
        child(&mode);
        return;
    }
    if !space().guards_enforced() {
        eprintln!("skipped: this kernel has no MADV_GUARD_INSTALL (Linux 6.13+); guards are gaps only");
        return;
    }
    let inside = run_child("inside");
    assert!(inside.status.success(), "control child failed: {inside:?}");
    assert!(String::from_utf8_lossy(&inside.stdout).contains("inside ok"));
    for mode in ["past_end", "after_purge", "grown_tree", "grown_lazy"] {
        let out = run_child(mode);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("inside ok"), "{mode}: {out:?}");
        assert!(!stdout.contains("no fault"), "{mode}: write past the end did not fault");
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{mode}: {out:?}");
    }
}
