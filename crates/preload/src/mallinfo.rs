//! glibc's `struct mallinfo` and `struct mallinfo2`, and the types of malloc's introspection
//! functions, as the next allocator (`crate::next`) resolves them and the shim's own
//! definitions (`crate::introspection`) return them.
//!
//! Owns nothing: C layouts and function types only.

use std::ffi::c_int;

/// glibc's `struct mallinfo2`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Mallinfo2 {
    /// Non-mmapped space allocated (bytes).
    pub arena: usize,
    /// Free chunks.
    pub ordblks: usize,
    /// Free fastbin blocks.
    pub smblks: usize,
    /// Mmapped regions.
    pub hblks: usize,
    /// Bytes in mmapped regions.
    pub hblkhd: usize,
    /// Unused (0).
    pub usmblks: usize,
    /// Bytes in freed fastbin blocks.
    pub fsmblks: usize,
    /// Allocated bytes.
    pub uordblks: usize,
    /// Free bytes.
    pub fordblks: usize,
    /// Top-most releasable bytes.
    pub keepcost: usize,
}

/// glibc's `struct mallinfo` (every field an `int`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Mallinfo {
    /// See [`Mallinfo2`], field for field.
    pub arena: c_int,
    /// See [`Mallinfo2`].
    pub ordblks: c_int,
    /// See [`Mallinfo2`].
    pub smblks: c_int,
    /// See [`Mallinfo2`].
    pub hblks: c_int,
    /// See [`Mallinfo2`].
    pub hblkhd: c_int,
    /// See [`Mallinfo2`].
    pub usmblks: c_int,
    /// See [`Mallinfo2`].
    pub fsmblks: c_int,
    /// See [`Mallinfo2`].
    pub uordblks: c_int,
    /// See [`Mallinfo2`].
    pub fordblks: c_int,
    /// See [`Mallinfo2`].
    pub keepcost: c_int,
}

/// `mallinfo2`'s type.
pub type Mallinfo2Fn = unsafe extern "C" fn() -> Mallinfo2;
/// `mallinfo`'s type.
pub type MallinfoFn = unsafe extern "C" fn() -> Mallinfo;
/// `malloc_stats`'s type.
pub type MallocStatsFn = unsafe extern "C" fn();
/// `malloc_info`'s type.
pub type MallocInfoFn = unsafe extern "C" fn(c_int, *mut libc::FILE) -> c_int;
