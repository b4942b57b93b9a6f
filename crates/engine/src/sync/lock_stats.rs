//! Lock statistics: [`LockStats`] (one lock's figures, or a class's sum), [`LockSite`] (the
//! figures of one code path that takes engine locks) and the process-wide switch for hold
//! times ([`set_timing`]).
//!
//! Owns: the switches of what a lock does besides locking (`hooks`: hold timing, and telling
//! ThreadSanitizer what it orders), one plain std atomic (a setting, not part of any protocol),
//! and each site's counters, process-wide std atomics even under loom.

use std::sync::atomic::AtomicU8;

/// Switch hold-time measurement on or off for every `StatLock` in the process.
pub fn set_timing(on: bool) {
    if on {
        HOOKS.fetch_or(HOOK_TIMING, std::sync::atomic::Ordering::Relaxed);
    } else {
        HOOKS.fetch_and(!HOOK_TIMING, std::sync::atomic::Ordering::Relaxed);
    }
}

/// [`hooks`]: hold times are measured.
pub(crate) const HOOK_TIMING: u8 = 1;
/// [`hooks`]: ThreadSanitizer is in the process (told what each lock orders).
pub(crate) const HOOK_TSAN: u8 = 2;

/// What a lock does besides locking ([`HOOK_TIMING`], [`HOOK_TSAN`]), read once per
/// acquisition and once per release: 0 (one predictable branch) unless one is on.
static HOOKS: AtomicU8 = AtomicU8::new(0);

/// The switches that are on ([`HOOK_TIMING`], [`HOOK_TSAN`]).
#[inline(always)]
pub(crate) fn hooks() -> u8 {
    HOOKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// ThreadSanitizer is in the process (`vmarena_platform::debug_tools`): from now on every lock
/// tells it what it orders.
pub fn tell_thread_sanitizer() {
    HOOKS.fetch_or(HOOK_TSAN, std::sync::atomic::Ordering::Relaxed);
}

/// True while hold times are measured.
pub fn timing() -> bool {
    hooks() & HOOK_TIMING != 0
}

/// A snapshot of one lock's figures (or the sum over a class of locks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Times the lock was taken.
    pub acquisitions: u64,
    /// Times the first attempt found it taken.
    pub contended: u64,
    /// Nanoseconds spent waiting on contended acquisitions.
    pub wait_ns: u64,
    /// Nanoseconds the lock was held (only while timing is on).
    pub hold_ns: u64,
}

impl LockStats {
    /// The figures accumulated since the snapshot `before` of the same lock (or class).
    pub fn since(&self, before: &LockStats) -> LockStats {
        LockStats {
            acquisitions: self.acquisitions - before.acquisitions,
            contended: self.contended - before.contended,
            wait_ns: self.wait_ns - before.wait_ns,
            hold_ns: self.hold_ns - before.hold_ns,
        }
    }

    /// Add another lock's figures (for classes of locks such as "busy" over all nodes).
    pub fn merge(&mut self, o: &LockStats) {
        self.acquisitions += o.acquisitions;
        self.contended += o.contended;
        self.wait_ns += o.wait_ns;
        self.hold_ns += o.hold_ns;
    }
}

/// A code path that takes engine locks, with its own lock figures (see the module doc).
pub struct LockSite {
    /// What the path does, e.g. `"alloc: node"`.
    pub name: &'static str,
    pub(crate) acquisitions: std::sync::atomic::AtomicU64,
    pub(crate) contended: std::sync::atomic::AtomicU64,
    pub(crate) wait_ns: std::sync::atomic::AtomicU64,
    pub(crate) hold_ns: std::sync::atomic::AtomicU64,
}

impl LockSite {
    /// A site named `name` with zeroed figures.
    pub const fn new(name: &'static str) -> Self {
        use std::sync::atomic::AtomicU64 as A;
        LockSite {
            name,
            acquisitions: A::new(0),
            contended: A::new(0),
            wait_ns: A::new(0),
            hold_ns: A::new(0),
        }
    }

    /// The site's figures so far (acquisitions and hold time count only while timing is on).
    pub fn stats(&self) -> LockStats {
        use std::sync::atomic::Ordering::Relaxed as R;
        LockStats {
            acquisitions: self.acquisitions.load(R),
            contended: self.contended.load(R),
            wait_ns: self.wait_ns.load(R),
            hold_ns: self.hold_ns.load(R),
        }
    }
}
