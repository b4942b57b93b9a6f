//! A large table of atomic words that reads as zero until written, backed by its own
//! anonymous `MAP_NORESERVE` mapping: only the pages holding written words take memory.
//!
//! Owns: the mapping (unmapped on drop). The words are plain `AtomicU64`s; what they mean is the
//! user's business (the engine's per-page area states).

use crate::Reservation;
use std::sync::atomic::AtomicU64;

/// `len` atomic words, all zero at creation.
#[derive(Debug)]
pub struct WordTable {
    map: Reservation,
    len: usize,
}

impl WordTable {
    /// A table of `len` words (at least one).
    pub fn new(len: usize) -> std::io::Result<WordTable> {
        let bytes =
            len.max(1).checked_mul(8).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        Ok(WordTable { map: Reservation::new(bytes, 64)?, len })
    }

    /// The words.
    #[inline]
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is readable and writable, 64-byte aligned, at least `len * 8`
        // bytes long and lives as long as `self`; a fresh anonymous mapping reads as zero,
        // which is a valid `AtomicU64`, and all access goes through atomics.
        unsafe { std::slice::from_raw_parts(self.map.base() as *const AtomicU64, self.len) }
    }

    /// Bytes of the table that are resident (`mincore`).
    pub fn resident_bytes(&self) -> u64 {
        crate::process::resident_bytes(self.map.base(), self.map.len_bytes())
    }
}
