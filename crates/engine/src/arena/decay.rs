//! Decay that pays: how many ticks a decay purge keeps freed memory resident, learned from
//! how much of what it released the program asked for again.
//!
//! A decay purge (each tick, half of `decay_interval_ms`) releases the lazy memory freed before
//! the last `keep_ticks` ticks. It starts at one tick, the shortest: memory a program frees and
//! does not reuse goes back within one interval. Each tick, before its purge, the fresh pages
//! the arena carved since the previous tick (from the free tree or by extending a lazy run,
//! less what step Move filled with resident memory) are counted against the pages decay
//! purges released lately and not yet asked for again (`owed`, which fades by a quarter a
//! tick): a program whose next requests take fresh pages right after a release would have
//! reused that memory, and faults it in again. When such refaults amount to an eighth of what
//! was owed (and at least [`REFAULT_MIN_PAGES`]), the keep doubles, up to
//! [`DECAY_KEEP_TICKS_MAX`]; after [`QUIET_TICKS`] ticks without one it halves. A program that
//! frees and stops asking keeps the one-tick keep (nothing is asked for again), so its memory
//! still goes back within an interval; one that frees and asks again every second or so, as a
//! numerical loop does with its temporaries, soon keeps its memory for the loop's period.
//! jemalloc's decay curve and mimalloc's purge delay answer the same question with a fixed
//! time (10 s and 10 ms by default); here the time follows the refaults.
//!
//! Owns: [`Decay`], in the arena's context: relaxed atomics, written by the purge worker once
//! a tick and read by the Nodes purge under its node locks. No lock, so a `fork()` at any
//! moment leaves nothing held for the child's worker (two ticks racing, from explicit
//! `Arena::decay_purge` calls beside the worker, can only miscount a tick's refaults).

use crate::sync::AtomicU64;
use crate::sync::Ordering::Relaxed;

/// The most ticks a decay purge can keep freed memory (2 s at the default 500 ms interval,
/// whose tick is half of it); the option `decay_keep_ticks_max` may lower it.
pub(crate) const DECAY_KEEP_TICKS_MAX: usize = 8;

/// Ticks without a refault after which the keep halves.
pub(crate) const QUIET_TICKS: u64 = 16;

/// Refaults of fewer pages than this (1 MiB of 4 KiB pages) never lengthen the keep: a small
/// fresh carving after a large release is noise, not a sign that the release cost a fault.
pub(crate) const REFAULT_MIN_PAGES: u64 = 256;

/// The decay keep of one arena and what it learned.
pub(crate) struct Decay {
    /// Ticks a decay purge keeps freed memory, 1 to [`DECAY_KEEP_TICKS_MAX`].
    pub(crate) keep_ticks: AtomicU64,
    /// Pages counted as asked for again after a decay purge released them.
    pub(crate) refault_pages: AtomicU64,
    /// The most `keep_ticks` may be (1 to [`DECAY_KEEP_TICKS_MAX`]; 1: never lengthened).
    max_ticks: u64,
    /// Pages decay purges released lately and the program has not asked for again.
    owed: AtomicU64,
    /// The fresh-page total at the previous tick.
    fresh_seen: AtomicU64,
    /// Ticks since the last refault that counted.
    quiet: AtomicU64,
}

impl Default for Decay {
    fn default() -> Decay {
        Decay::new(DECAY_KEEP_TICKS_MAX as u64)
    }
}

impl Decay {
    /// A decay keep of one tick that refaults may lengthen to `max_ticks` (the option
    /// `decay_keep_ticks_max`, within 1 and [`DECAY_KEEP_TICKS_MAX`]).
    pub(crate) fn new(max_ticks: u64) -> Decay {
        Decay {
            keep_ticks: AtomicU64::new(1),
            refault_pages: AtomicU64::new(0),
            max_ticks: max_ticks.clamp(1, DECAY_KEEP_TICKS_MAX as u64),
            owed: AtomicU64::new(0),
            fresh_seen: AtomicU64::new(0),
            quiet: AtomicU64::new(0),
        }
    }

    /// Ticks a decay purge keeps freed memory now.
    pub(crate) fn keep_ticks(&self) -> usize {
        (self.keep_ticks.load(Relaxed) as usize).clamp(1, DECAY_KEEP_TICKS_MAX)
    }

    /// A tick, before its purge: `fresh_total` is the arena's count of fresh pages so far.
    /// Counts the refaults since the previous tick and moves the keep. Returns the pages
    /// counted as refaults.
    pub(crate) fn before_tick(&self, fresh_total: u64) -> u64 {
        let fresh = fresh_total.saturating_sub(self.fresh_seen.swap(fresh_total, Relaxed));
        let owed = self.owed.load(Relaxed);
        let refault = fresh.min(owed);
        self.owed.store(owed - refault, Relaxed);
        let keep = self.keep_ticks.load(Relaxed);
        let quiet = if refault >= REFAULT_MIN_PAGES && refault * 8 >= owed {
            self.keep_ticks.store((keep * 2).min(self.max_ticks), Relaxed);
            0
        } else if self.quiet.load(Relaxed) + 1 >= QUIET_TICKS {
            self.keep_ticks.store((keep / 2).max(1), Relaxed);
            0
        } else {
            self.quiet.load(Relaxed) + 1
        };
        self.quiet.store(quiet, Relaxed);
        if refault > 0 {
            self.refault_pages.fetch_add(refault, Relaxed);
        }
        refault
    }

    /// A tick, after its purge released `released` pages: they are owed, and older debts fade
    /// by a quarter.
    pub(crate) fn after_tick(&self, released: u64) {
        let owed = self.owed.load(Relaxed);
        self.owed.store(owed - owed / 4 + released, Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_release_asked_for_again_doubles_the_keep_and_quiet_ticks_halve_it() {
        let d = Decay::default();
        assert_eq!(d.keep_ticks(), 1);
        // 10,000 pages released; the next tick sees 6,000 fresh pages: the keep doubles.
        d.before_tick(0);
        d.after_tick(10_000);
        assert_eq!(d.before_tick(6_000), 6_000);
        assert_eq!(d.keep_ticks(), 2);
        // Released again, asked for again: 4, 8, and no further.
        for (i, want) in [4, 8, 8].into_iter().enumerate() {
            d.after_tick(10_000);
            d.before_tick(6_000 * (i as u64 + 2) + 20_000);
            assert_eq!(d.keep_ticks(), want);
        }
        // Nothing asked for: the keep halves after QUIET_TICKS ticks, not before.
        let total = 6_000 * 4 + 20_000;
        for _ in 0..QUIET_TICKS - 1 {
            d.after_tick(0);
            d.before_tick(total);
        }
        assert_eq!(d.keep_ticks(), 8);
        d.after_tick(0);
        d.before_tick(total);
        assert_eq!(d.keep_ticks(), 4);
        // 6,000, then 13,000 (what was owed, of 26,000 fresh), 6,000 and 6,000.
        assert_eq!(d.refault_pages.load(Relaxed), 31_000);
    }

    #[test]
    fn with_a_largest_keep_of_one_tick_refaults_change_nothing() {
        let d = Decay::new(1);
        for i in 0..5 {
            d.before_tick(i * 10_000);
            d.after_tick(10_000);
        }
        assert_eq!((d.keep_ticks(), d.refault_pages.load(Relaxed)), (1, 40_000));
    }

    #[test]
    fn a_program_that_frees_and_stops_asking_keeps_the_shortest_keep() {
        let d = Decay::default();
        d.before_tick(0);
        d.after_tick(500_000);
        for _ in 0..40 {
            assert_eq!(d.before_tick(0), 0);
            d.after_tick(0);
        }
        assert_eq!(d.keep_ticks(), 1);
        assert_eq!(d.refault_pages.load(Relaxed), 0);
    }

    #[test]
    fn small_fresh_carvings_after_a_large_release_do_not_lengthen_the_keep() {
        let d = Decay::default();
        d.before_tick(0);
        d.after_tick(100_000);
        // 200 pages (below REFAULT_MIN_PAGES), then 5,000 (below an eighth of the 100,000 owed).
        d.before_tick(200);
        d.after_tick(0);
        d.before_tick(5_200);
        assert_eq!(d.keep_ticks(), 1);
        assert_eq!(d.refault_pages.load(Relaxed), 5_200);
    }
}
