//! glibc's dynamic thresholds, moved as glibc would move them had it served the large blocks.
//!
//! glibc maps every block at or above its mmap threshold (128 KiB at start) separately, and when
//! the program frees such a block of S bytes (S up to 32 MiB) it raises the mmap threshold to S and
//! its trim threshold to 2 S: a program that frees large blocks will ask for them again, so glibc
//! serves them from its heaps from then on and stops giving the tops of its heaps back to the
//! kernel every time they pass 128 KiB. Under the shim glibc never sees those blocks, so it keeps
//! trimming at 128 KiB, each time holding the lock of the arena that the other thread's frees are
//! waiting for (docs/bench-log/design-notes.md, section 14, "glibc's thresholds", has the counts).
//!
//! So each large free the shim serves goes through glibc's rule: a freed area of S usable bytes,
//! more than any before and at most 32 MiB, sets glibc's mmap threshold to S and its trim threshold
//! to 2 S with glibc's own `mallopt`, the trim threshold at most eight times the shim's threshold
//! ([`TRIM_CAP_THRESHOLDS`]; 512 KiB at the default 64 KiB). The cap is where the rule stops
//! fitting the shim: glibc keeps up to the trim threshold free at the top of each arena so that the
//! next block of that size needs no new pages, but under the shim no block it holds reaches the
//! shim's threshold, so a top of 2 S (8 MiB on xthread) is memory none of its blocks can use at
//! once, and which stays after the program stops: `malloc_trim` gives back the main arena's top,
//! not a thread arena's, which only glibc's own free trims (docs/bench-log/design-notes.md, section
//! 14, "glibc's thresholds", has the measurements that set eight).
//!
//! S is what `malloc_usable_size` said: the request rounded up to its size class, or up to half
//! more where a lazy area was handed out whole, so the mmap threshold can end up that much
//! above glibc's (6 MiB on xthread, whose largest request is 4 MiB; `VMARENA_PRELOAD_STATS=1`
//! prints both thresholds). Setting them turns glibc's own
//! adjustment off, which loses nothing: the blocks glibc still sees are below the shim's
//! threshold, hence below S, and glibc maps none of them either way (a large request vmarena
//! cannot serve, which falls back to glibc, is mapped or not by S as glibc's own rule would
//! have it).
//!
//! Only when the next allocator is glibc: its `malloc` and its `mallopt` both come from the C
//! library (`dladdr`). jemalloc and mimalloc decide for themselves. A program that sets any of
//! glibc's four threshold parameters itself turns glibc's own adjustment off, and so this one:
//! through `mallopt` (the shim passes the call on and stops here), `GLIBC_TUNABLES`
//! (`glibc.malloc.trim_threshold`, `top_pad`, `mmap_threshold`, `mmap_max`) or the older
//! `MALLOC_TRIM_THRESHOLD_`-style variables. `VMARENA_EXPERIMENTS=1 VMARENA_PRELOAD_GLIBC_THRESHOLDS=0` leaves glibc's
//! thresholds alone as well.
//!
//! State: the size last set (`SET_BYTES`, rising only) and a try-lock (`SETTING`) held
//! while `mallopt` runs, so that two raises cannot apply out of order. A free that finds the
//! lock taken skips the raise (the next larger free makes it). Only the program's own
//! `mallopt` waits for it, and not forever, so a `fork` in the middle cannot leave the child
//! stuck.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// glibc's `mallopt`.
pub type Mallopt = unsafe extern "C" fn(c_int, c_int) -> c_int;

/// The trim threshold set is at most this many times the shim's routing threshold.
pub const TRIM_CAP_THRESHOLDS: usize = 8;
/// glibc's mmap threshold at start: frees of blocks up to this size change nothing.
pub const GLIBC_MMAP_THRESHOLD_BYTES: usize = 128 << 10;
/// The largest freed block glibc raises its thresholds to (`DEFAULT_MMAP_THRESHOLD_MAX`, 64-bit).
pub const GLIBC_MMAP_THRESHOLD_MAX_BYTES: usize = 32 << 20;
const M_TRIM_THRESHOLD: c_int = -1;
const M_TOP_PAD: c_int = -2;
const M_MMAP_THRESHOLD: c_int = -3;
const M_MMAP_MAX: c_int = -4;

/// The mmap threshold this module last set (glibc's own before the first).
static SET_BYTES: AtomicUsize = AtomicUsize::new(GLIBC_MMAP_THRESHOLD_BYTES);
/// Held while `mallopt` runs.
static SETTING: AtomicBool = AtomicBool::new(false);
/// Off until [`enable`] (the option on and the next allocator glibc).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// glibc's `mallopt`, stored before [`ENABLED`] turns on.
static MALLOPT: AtomicUsize = AtomicUsize::new(0);

/// glibc's parameters whose setting turns its dynamic thresholds off (`M_TRIM_THRESHOLD`,
/// `M_TOP_PAD`, `M_MMAP_THRESHOLD`, `M_MMAP_MAX`).
pub const FIXING_PARAMS: [c_int; 4] = [M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_MMAP_MAX];

/// Follow the shim's large frees from now on, through `mallopt`, unless the environment sets
/// one of glibc's thresholds (see the module doc).
pub fn enable(mallopt: Mallopt) {
    if environment_fixes_thresholds(|k| std::env::var(k).ok()) {
        return;
    }
    MALLOPT.store(mallopt as usize, Ordering::Relaxed);
    ENABLED.store(true, Ordering::Release);
}

/// Stop following, before the program sets a threshold of its own: no raise starts after
/// this, and one under way is waited for (a bounded wait: after a `fork` the flag may be held
/// by a thread the child does not have), so the program's value is applied last.
pub fn disable() {
    ENABLED.store(false, Ordering::SeqCst);
    for _ in 0..10_000 {
        if !SETTING.load(Ordering::SeqCst) {
            return;
        }
        std::thread::yield_now();
    }
}

/// The highest trim threshold to set under a routing threshold of `threshold_bytes`: eight
/// times it, no lower than glibc's own start value and no higher than glibc's own highest.
pub fn trim_cap_bytes(threshold_bytes: usize) -> usize {
    threshold_bytes
        .saturating_mul(TRIM_CAP_THRESHOLDS)
        .clamp(GLIBC_MMAP_THRESHOLD_BYTES, 2 * GLIBC_MMAP_THRESHOLD_MAX_BYTES)
}

/// The trim threshold set along with an mmap threshold of `mmap_bytes`: glibc's 2 S, capped
/// by the shim's routing threshold.
pub fn trim_bytes(mmap_bytes: usize) -> usize {
    (2 * mmap_bytes).min(trim_cap_bytes(crate::routing::threshold()))
}

/// True when `var` (an environment lookup) sets one of glibc's thresholds.
pub fn environment_fixes_thresholds(var: impl Fn(&str) -> Option<String>) -> bool {
    const OLD: [&str; 4] =
        ["MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_"];
    const TUNABLES: [&str; 4] = [
        "glibc.malloc.trim_threshold=",
        "glibc.malloc.top_pad=",
        "glibc.malloc.mmap_threshold=",
        "glibc.malloc.mmap_max=",
    ];
    OLD.iter().any(|k| var(k).is_some())
        || var("GLIBC_TUNABLES")
            .is_some_and(|t| t.split(':').any(|kv| TUNABLES.iter().any(|p| kv.starts_with(p))))
}

/// True once [`enable`] ran.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// The mmap threshold glibc has from this module (its own start value before the first raise),
/// for the exit summary; the trim threshold is [`trim_bytes`] of it.
pub fn set_bytes() -> usize {
    SET_BYTES.load(Ordering::Relaxed)
}

/// The shim freed an area of `bytes` usable bytes: apply glibc's rule (see the module doc).
/// One relaxed load and a compare unless the area is larger than any before.
#[inline]
pub fn freed(bytes: usize) {
    if bytes <= SET_BYTES.load(Ordering::Relaxed) || bytes > GLIBC_MMAP_THRESHOLD_MAX_BYTES {
        return;
    }
    raise(bytes);
}

#[cold]
fn raise(bytes: usize) {
    if !enabled() || SETTING.swap(true, Ordering::SeqCst) {
        return;
    }
    // Checked again under the flag: `disable` clears ENABLED before it waits for the flag.
    if ENABLED.load(Ordering::SeqCst) && bytes > SET_BYTES.load(Ordering::Relaxed) {
        // SAFETY: stored by `enable` from glibc's `mallopt` before ENABLED (acquire above).
        let mallopt: Mallopt =
            unsafe { std::mem::transmute::<usize, Mallopt>(MALLOPT.load(Ordering::Relaxed)) };
        // Both fit in a C int: at most 32 MiB and 64 MiB. glibc's `mallopt` takes its main
        // arena's lock and no lock of ours is held.
        // SAFETY: glibc's `mallopt` with two of its documented parameters.
        let ok = unsafe {
            mallopt(M_MMAP_THRESHOLD, bytes as c_int) == 1
                && mallopt(M_TRIM_THRESHOLD, trim_bytes(bytes) as c_int) == 1
        };
        if ok {
            SET_BYTES.store(bytes, Ordering::Relaxed);
        } else {
            // A C library that refuses these parameters is left alone from now on.
            ENABLED.store(false, Ordering::Relaxed);
        }
    }
    SETTING.store(false, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_fixes_thresholds_as_glibc_reads_it() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert!(!environment_fixes_thresholds(env(&[])));
        assert!(!environment_fixes_thresholds(env(&[("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")])));
        assert!(environment_fixes_thresholds(env(&[(
            "GLIBC_TUNABLES",
            "glibc.malloc.tcache_count=0:glibc.malloc.trim_threshold=1"
        )])));
        assert!(environment_fixes_thresholds(env(&[("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0")])));
        assert!(environment_fixes_thresholds(env(&[("MALLOC_TOP_PAD_", "0")])));
    }

    #[test]
    fn the_trim_cap_is_eight_thresholds_within_glibcs_own_range() {
        assert_eq!(trim_cap_bytes(64 << 10), 512 << 10);
        assert_eq!(trim_cap_bytes(1 << 20), 8 << 20);
        // Never below glibc's start value, never above its highest, no overflow.
        assert_eq!(trim_cap_bytes(4096), 128 << 10);
        assert_eq!(trim_cap_bytes(1 << 30), 64 << 20);
        assert_eq!(trim_cap_bytes(usize::MAX), 64 << 20);
    }
}
