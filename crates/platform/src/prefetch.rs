//! `prefetch_line`: a hint that asks the processor to start loading a cache line the caller
//! will read soon, so that the misses of a batch overlap instead of following one another.
//!
//! Owns nothing. A prefetch reads nothing the program can observe, writes nothing and never
//! faults, whatever the address (an unmapped or stale one is dropped by the processor), so it
//! needs no lock and no valid pointer: callers may compute the address of a line that another
//! thread is about to change or free.
//!
//! Why: a batch of frees (the oldest half of a full thread-cache stack) touches, for each area,
//! its state word and its busy-map slot, lines that are far apart and rarely cached when
//! thousands of areas are freed in a row. Issuing those loads for the whole batch first lets
//! the memory system work on them together (BENCHMARKS.md, "long_busy: the bulk free").
#![allow(unsafe_code)]

/// Start loading the cache line that holds `addr` into every cache level; no effect on
/// machines without a prefetch instruction the standard library exposes.
#[inline(always)]
pub fn prefetch_line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` reads nothing architecturally visible and cannot fault at any
    // address; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch(addr as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

#[cfg(test)]
mod tests {
    use super::prefetch_line;

    /// Any address is accepted: null, unmapped, the middle of a live value.
    #[test]
    fn any_address_is_a_valid_hint() {
        let v = [7u64; 16];
        for addr in [0, 1, usize::MAX, 0xdead_0000_0000, v.as_ptr() as usize + 3] {
            prefetch_line(addr);
        }
        assert_eq!(v.iter().sum::<u64>(), 7 * 16);
    }
}
