//! A large table of atomic words that reads as zero until written, backed by its own
//! anonymous `MAP_NORESERVE` mapping: only the pages holding written words take memory.
//! A table made with [`WordTable::new_uncommitted`] is read-only (every word reads zero) beyond
//! a prefix that [`WordTable::commit_words`] makes writable, so that strict overcommit charges
//! only that prefix; any word may be read, only committed words may be written.
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
    /// Words usable from the start (all of them for [`WordTable::new`]).
    committed: std::sync::atomic::AtomicUsize,
}

impl WordTable {
    /// A table of `len` words (at least one).
    pub fn new(len: usize) -> std::io::Result<WordTable> {
        let bytes =
            len.max(1).checked_mul(8).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        Ok(WordTable {
            map: Reservation::new(bytes, 64)?,
            len,
            committed: std::sync::atomic::AtomicUsize::new(len),
        })
    }

    /// A table of `len` words, all zero, none of them writable until
    /// [`WordTable::commit_words`].
    pub fn new_uncommitted(len: usize) -> std::io::Result<WordTable> {
        let bytes =
            len.max(1).checked_mul(8).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        Ok(WordTable { map: Reservation::new_read_only(bytes, 64)?, len, committed: 0.into() })
    }

    /// Make the first `words` words writable (rounded up to whole pages; at most the table).
    /// Callers serialise growths. False when the kernel refused (the commit limit).
    pub fn commit_words(&self, words: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let page = crate::page_size();
        let want = words.min(self.len).saturating_mul(8).next_multiple_of(page).min(self.map.len_bytes());
        let have =
            self.committed.load(Relaxed).saturating_mul(8).next_multiple_of(page).min(self.map.len_bytes());
        if want <= have {
            return true;
        }
        if self.map.commit(have, want - have).is_err() {
            return false;
        }
        self.committed.store(want / 8, Relaxed);
        true
    }

    /// The words: every one may be read; only the committed ones may be written (all of them
    /// for a table made with [`WordTable::new`]).
    #[inline]
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is readable, 64-byte aligned, at least `len * 8` bytes long and
        // lives as long as `self`; a fresh anonymous mapping reads as zero, which is a valid
        // `AtomicU64`, and all access goes through atomics. Writes beyond the committed prefix
        // fault (SIGSEGV, not a silent corruption); the callers write only committed words.
        unsafe { std::slice::from_raw_parts(self.map.base() as *const AtomicU64, self.len) }
    }

    /// Drop the pages that hold words `[from, to)` (whole pages only, within the committed
    /// prefix) with `MADV_DONTNEED`: they read as zero afterwards and take no memory until a
    /// word on them is written again. For words the caller knows to be zero and that nobody
    /// writes meanwhile (a concurrent write could be lost). Returns the bytes dropped.
    pub fn discard_words(&self, from: usize, to: usize) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let page = crate::page_size();
        let to = to.min(self.committed.load(Relaxed)).min(self.len);
        let lo = from.saturating_mul(8).next_multiple_of(page);
        let hi = to.saturating_mul(8) / page * page;
        if lo >= hi {
            return 0;
        }
        crate::release::release(&[(self.map.base() + lo, hi - lo)], crate::release::Advice::DontNeed);
        hi - lo
    }

    /// Bytes of the table that are resident (`mincore`).
    pub fn resident_bytes(&self) -> u64 {
        crate::process::resident_bytes(self.map.base(), self.map.len_bytes())
    }
}
