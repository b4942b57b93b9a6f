//! `Constraints`: where an allocation of an integer arena may lie (`vmem_xalloc`'s arguments),
//! and their translation into quanta, checked.
//!
//! Owns: nothing but the values (plain data, no locks).

use super::error::VmemError;

/// vmem's constraints on an allocation, in the arena's integers (not quanta). The default is
/// none: any start that is a multiple of the quantum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Constraints {
    /// The start is a multiple of `align` (a power of two; 0 means the quantum).
    pub align: u64,
    /// The start is `phase` past a multiple of `align` (a multiple of the quantum, below
    /// `align`).
    pub phase: u64,
    /// The allocation crosses no multiple of `nocross` (0: none; otherwise a power of two
    /// at least the size).
    pub nocross: u64,
    /// The allocation lies at or above `min_addr`.
    pub min_addr: u64,
    /// The allocation ends at or below `max_addr` (0: no bound).
    pub max_addr: u64,
}

/// A request in quanta, checked: what the spans' arenas are asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quanta {
    pub pages: u64,
    pub align_pages: u64,
    pub phase_pages: u64,
    pub nocross_pages: u64,
    /// `[lo, hi)` in quanta, the window of `min_addr..max_addr`.
    pub lo: u64,
    pub hi: u64,
}

impl Quanta {
    /// The request in quanta of `1 << shift`, or why it cannot be made: every refusal names
    /// the argument.
    pub(crate) fn of(size: u64, c: &Constraints, shift: u32) -> Result<Quanta, VmemError> {
        let q = 1u64 << shift;
        let mask = q - 1;
        if size == 0 {
            return Err(VmemError::Invalid("size 0"));
        }
        let pages = (size >> shift) + u64::from(size & mask != 0);
        let align = if c.align == 0 { q } else { c.align };
        if !align.is_power_of_two() {
            return Err(VmemError::Invalid("align is not a power of two"));
        }
        let align = align.max(q);
        if c.phase >= align || c.phase & mask != 0 {
            return Err(VmemError::Invalid("phase is not a multiple of the quantum below align"));
        }
        if c.nocross != 0 && (!c.nocross.is_power_of_two() || c.nocross < q || c.nocross >> shift < pages) {
            return Err(VmemError::Invalid("nocross is not a power of two at least the size"));
        }
        if c.min_addr & mask != 0 || c.max_addr & mask != 0 {
            return Err(VmemError::Invalid("min_addr or max_addr is not a multiple of the quantum"));
        }
        let hi = if c.max_addr == 0 { u64::MAX >> shift } else { c.max_addr >> shift };
        let lo = c.min_addr >> shift;
        if hi <= lo || hi - lo < pages {
            return Err(VmemError::Invalid("min_addr..max_addr is empty or smaller than the size"));
        }
        Ok(Quanta {
            pages,
            align_pages: align >> shift,
            phase_pages: c.phase >> shift,
            nocross_pages: c.nocross >> shift,
            lo,
            hi,
        })
    }

    /// `start..start + pages` crosses a multiple of `nocross_pages`.
    pub(crate) fn crosses(&self, start: u64) -> bool {
        vmarena_core::crosses(start, self.pages, self.nocross_pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_argument_is_named() {
        let q = |size, c: Constraints| Quanta::of(size, &c, 4);
        let none = Constraints::default();
        assert_eq!(q(0, none), Err(VmemError::Invalid("size 0")));
        assert!(q(1, Constraints { align: 24, ..none }).is_err());
        assert!(q(1, Constraints { align: 32, phase: 32, ..none }).is_err());
        assert!(q(1, Constraints { align: 32, phase: 8, ..none }).is_err(), "not a quantum multiple");
        assert!(q(40, Constraints { nocross: 32, ..none }).is_err());
        // The largest size: refused for its nocross, with no overflow on the way.
        assert!(q(u64::MAX, Constraints { nocross: 1 << 63, ..none }).is_err());
        assert!(q(16, Constraints { min_addr: 8, ..none }).is_err());
        assert!(q(64, Constraints { min_addr: 16, max_addr: 64, ..none }).is_err());
        let ok =
            q(17, Constraints { align: 64, phase: 16, nocross: 256, min_addr: 32, max_addr: 512 }).unwrap();
        assert_eq!(ok, Quanta { pages: 2, align_pages: 4, phase_pages: 1, nocross_pages: 16, lo: 2, hi: 32 });
        assert!(ok.crosses(15) && !ok.crosses(14) && !ok.crosses(16));
        assert_eq!(q(8, Constraints { align: 2, ..none }).unwrap().align_pages, 1, "below the quantum");
    }
}
