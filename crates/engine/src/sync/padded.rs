//! `Padded`: a value on cache lines of its own.

/// Keeps a value on cache lines of its own (two 64-byte lines, for the adjacent-line
/// prefetcher), so locks of different nodes never share a line.
#[repr(align(128))]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
