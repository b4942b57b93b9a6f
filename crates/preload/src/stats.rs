//! The shim's options and statistics: one table each.
//!
//! Counters are process-wide relaxed atomics, updated only when `VMARENA_PRELOAD_STATS` is on
//! (a shared counter per call would cost the small-allocation path a contended cache line).
//! With the option on, a summary is printed on stderr at exit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use vmarena_engine::{options_table, stats_table};

options_table! {
    /// Options of `libvmarena_preload.so`, read from the environment when the first allocation
    /// arrives. The default space's own options (`VMARENA_SPACE_BYTES`, ...) apply as well.
    pub struct PreloadOptions {
        /// Requests of this many bytes and more go to vmarena (at least 1).
        threshold: usize = 64 << 10, "bytes", "VMARENA_PRELOAD_THRESHOLD";
        /// Count calls; print them, the space's statistics and lock figures on stderr at exit.
        stats: bool = false, "bool", "VMARENA_PRELOAD_STATS";
        /// With `stats`: also count acquisitions and time how long each lock is held.
        lock_timing: bool = false, "bool", "VMARENA_PRELOAD_LOCK_TIMING";
        /// With glibc next: each large free raises glibc's mmap and trim thresholds as glibc's own free of that block would, the trim threshold to eight shim thresholds at most.
        glibc_thresholds: bool = true, "bool", "VMARENA_PRELOAD_GLIBC_THRESHOLDS", experiment;
        /// With glibc next: when the default space's worker releases an idle program's memory, glibc's malloc_trim gives back glibc's free memory too.
        glibc_trim: bool = true, "bool", "VMARENA_PRELOAD_GLIBC_TRIM", experiment;
    }
}

stats_table! {
    /// What the shim did (counted while `stats` is on).
    pub struct PreloadStats {
        /// Allocations served by vmarena (malloc, calloc, the aligned family).
        vm_allocs, "calls";
        /// Bytes asked of vmarena by those allocations.
        vm_bytes, "bytes";
        /// Frees of vmarena areas.
        vm_frees, "calls";
        /// Reallocs that stayed in vmarena (`vrealloc`).
        vm_reallocs, "calls";
        /// Reallocs that moved a block from the next allocator into vmarena.
        moved_in, "calls";
        /// Reallocs that moved a block from vmarena to the next allocator.
        moved_out, "calls";
        /// Large requests vmarena could not serve (space full), served by the next allocator.
        fallbacks, "calls";
        /// Allocations passed to the next allocator.
        next_allocs, "calls";
        /// Frees passed to the next allocator.
        next_frees, "calls";
        /// Allocations served by the bootstrap heap (before the next allocator was found).
        bootstrap_allocs, "calls";
        /// C++ `new` calls served by vmarena (counted in `vm_allocs` too).
        cpp_vm_news, "calls";
        /// C++ `delete` calls of vmarena areas (counted in `vm_frees` too).
        cpp_vm_deletes, "calls";
        /// C++ `new` calls passed to the next definition of their form.
        cpp_next_news, "calls";
        /// C++ `delete` calls passed to the next definition of their form.
        cpp_next_deletes, "calls";
    }
}

pub(crate) static ON: AtomicBool = AtomicBool::new(false);
/// A duplicate of stderr taken when statistics were switched on: programs such as `sort` close
/// stderr in their own exit handlers, which run before ours.
static OUT_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);

/// Switch statistics on: keep a descriptor for the summary and print it at exit.
pub(crate) fn switch_on(lock_timing: bool) {
    ON.store(true, Relaxed);
    if lock_timing {
        vmarena::set_lock_timing(true);
    }
    // SAFETY: fcntl duplicates descriptor 2 (if open) to a new close-on-exec descriptor >= 100.
    let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100) };
    if fd >= 0 {
        OUT_FD.store(fd, Relaxed);
    }
    // SAFETY: registers a plain function with no arguments to run at exit.
    unsafe { libc::atexit(print_at_exit) };
}

pub(crate) struct Counters {
    pub vm_allocs: AtomicU64,
    pub vm_bytes: AtomicU64,
    pub vm_frees: AtomicU64,
    pub vm_reallocs: AtomicU64,
    pub moved_in: AtomicU64,
    pub moved_out: AtomicU64,
    pub fallbacks: AtomicU64,
    pub next_allocs: AtomicU64,
    pub next_frees: AtomicU64,
    pub bootstrap_allocs: AtomicU64,
    pub cpp_vm_news: AtomicU64,
    pub cpp_vm_deletes: AtomicU64,
    pub cpp_next_news: AtomicU64,
    pub cpp_next_deletes: AtomicU64,
}

pub(crate) static COUNTERS: Counters = Counters {
    vm_allocs: AtomicU64::new(0),
    vm_bytes: AtomicU64::new(0),
    vm_frees: AtomicU64::new(0),
    vm_reallocs: AtomicU64::new(0),
    moved_in: AtomicU64::new(0),
    moved_out: AtomicU64::new(0),
    fallbacks: AtomicU64::new(0),
    next_allocs: AtomicU64::new(0),
    next_frees: AtomicU64::new(0),
    bootstrap_allocs: AtomicU64::new(0),
    cpp_vm_news: AtomicU64::new(0),
    cpp_vm_deletes: AtomicU64::new(0),
    cpp_next_news: AtomicU64::new(0),
    cpp_next_deletes: AtomicU64::new(0),
};

/// Add `n` to a counter when statistics are on.
#[inline]
pub(crate) fn count(c: &AtomicU64, n: u64) {
    if ON.load(Relaxed) {
        c.fetch_add(n, Relaxed);
    }
}

/// The counters now.
pub fn snapshot() -> PreloadStats {
    let c = &COUNTERS;
    PreloadStats {
        vm_allocs: c.vm_allocs.load(Relaxed),
        vm_bytes: c.vm_bytes.load(Relaxed),
        vm_frees: c.vm_frees.load(Relaxed),
        vm_reallocs: c.vm_reallocs.load(Relaxed),
        moved_in: c.moved_in.load(Relaxed),
        moved_out: c.moved_out.load(Relaxed),
        fallbacks: c.fallbacks.load(Relaxed),
        next_allocs: c.next_allocs.load(Relaxed),
        next_frees: c.next_frees.load(Relaxed),
        bootstrap_allocs: c.bootstrap_allocs.load(Relaxed),
        cpp_vm_news: c.cpp_vm_news.load(Relaxed),
        cpp_vm_deletes: c.cpp_vm_deletes.load(Relaxed),
        cpp_next_news: c.cpp_next_news.load(Relaxed),
        cpp_next_deletes: c.cpp_next_deletes.load(Relaxed),
    }
}

/// The exit summary (registered with `atexit` when statistics are on).
extern "C" fn print_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let s = snapshot();
        let mut out = format!(
            "vmarena preload: pid {} threshold {} bytes\n",
            std::process::id(),
            crate::routing::threshold()
        );
        if crate::glibc_thresholds::enabled() {
            let mmap = crate::glibc_thresholds::set_bytes();
            out.push_str(&format!(
                "vmarena preload: glibc mmap threshold {mmap} bytes, trim threshold {}\n",
                crate::glibc_thresholds::trim_bytes(mmap)
            ));
        }
        for (name, v) in s.values() {
            out.push_str(&format!("vmarena preload: {name:<18} {v}\n"));
        }
        if let Some(space) = vmarena::existing_default_space() {
            for (name, v) in space.stats(false).arena.values() {
                out.push_str(&format!("vmarena preload: space {name:<18} {v}\n"));
            }
        }
        // Lock figures by call site (process-wide) for the sites that show any: contended
        // acquisitions and wait always, acquisitions and hold time only with `lock_timing`.
        let sites = vmarena_engine::arena::site::snapshot();
        for (site, l) in sites.iter().filter(|(_, l)| l.acquisitions > 0 || l.contended > 0) {
            out.push_str(&format!(
                "vmarena preload: lock {site:<18} acquired {} contended {} wait_us {} hold_us {}\n",
                l.acquisitions,
                l.contended,
                l.wait_ns / 1000,
                l.hold_ns / 1000
            ));
        }
        let fd = OUT_FD.load(Relaxed);
        // SAFETY: writes our own buffer to a descriptor; a failed write is ignored.
        let _ = unsafe { libc::write(fd, out.as_ptr().cast(), out.len()) };
    });
}
