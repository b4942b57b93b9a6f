//! Owner patterns shared by the concurrency tests: every word of an area holds its owner's tag
//! mixed with the word's index, so memory shared by two owners, or released under its owner,
//! shows as a wrong word.

/// Fill `len` bytes at `p` with the pattern of `tag`.
pub fn fill(p: *mut u8, len: usize, tag: u64) {
    let words = len / 8;
    // SAFETY: `len` usable bytes at `p`, page aligned.
    let w = unsafe { std::slice::from_raw_parts_mut(p.cast::<u64>(), words) };
    for (i, x) in w.iter_mut().enumerate() {
        *x = tag ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    for i in words * 8..len {
        // SAFETY: inside the area.
        unsafe { *p.add(i) = tag as u8 };
    }
}

/// Check that `len` bytes at `p` still hold the pattern of `tag`.
pub fn verify(p: *const u8, len: usize, tag: u64) {
    let words = len / 8;
    // SAFETY: `len` usable bytes at `p`.
    let w = unsafe { std::slice::from_raw_parts(p.cast::<u64>(), words) };
    for (i, x) in w.iter().enumerate() {
        assert_eq!(*x, tag ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15), "word {i} of {p:?} overwritten");
    }
    for i in words * 8..len {
        // SAFETY: inside the area.
        assert_eq!(unsafe { *p.add(i) }, tag as u8);
    }
}
