//! The failure rules every C function keeps: a panic is caught (EFAULT, never an unwind into
//! C), a failure returns NULL or `-errno` and sets errno, and a handle is freed once, after
//! its magic is checked.
#![allow(unsafe_code)]

use crate::space::VmError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null_mut, NonNull};
use vmarena_platform::set_errno;

/// Run `f`; a panic inside it sets errno to EFAULT and returns `fallback`: no unwind
/// crosses into C.
pub(super) fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EFAULT);
        fallback
    })
}

/// The pointer, or NULL with the error's errno.
pub(super) fn ptr_or_errno(r: Result<NonNull<u8>, VmError>) -> *mut libc::c_void {
    match r {
        Ok(p) => p.as_ptr().cast(),
        Err(e) => {
            set_errno(e.errno());
            null_mut()
        }
    }
}

/// NULL with ENOMEM: the default space could not be built.
pub(super) fn no_space() -> *mut libc::c_void {
    set_errno(libc::ENOMEM);
    null_mut()
}

/// Free a handle made by `Box::into_raw`: 0 (NULL is a no-op), -EINVAL for an invalid handle,
/// -EBUSY while `busy` says it is in use (nothing changes).
///
/// # Safety
/// `ptr` is NULL or a pointer its create function returned and nobody destroyed; `valid` checks
/// the handle's magic before anything else reads it, and `clear` wipes the magic before the free.
pub(super) unsafe fn destroy<H>(
    ptr: *mut H,
    valid: impl Fn(*const H) -> bool,
    busy: impl Fn(&H) -> bool,
    clear: impl Fn(&mut H),
) -> libc::c_int {
    if ptr.is_null() {
        return 0;
    }
    guarded(-libc::EFAULT, || {
        if !valid(ptr) {
            set_errno(libc::EINVAL);
            return -libc::EINVAL;
        }
        // SAFETY: `valid` matched the magic of a live handle (contract above).
        if busy(unsafe { &*ptr }) {
            set_errno(libc::EBUSY);
            return -libc::EBUSY;
        }
        // SAFETY: `ptr` came from Box::into_raw (the magic matched) and is destroyed once: the
        // magic is cleared before the memory is freed.
        let mut b = unsafe { Box::from_raw(ptr) };
        clear(&mut b);
        drop(b);
        0
    })
}

/// 0, or `-errno` with errno set.
pub(super) fn status(r: Result<(), VmError>) -> libc::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e.errno());
            -e.errno()
        }
    }
}

/// 0, or `-e` with errno set to `e`.
pub(super) fn errno_status(r: Result<(), i32>) -> libc::c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -e
        }
    }
}

/// The bytes a caller's struct has room for, from its leading `size` field; `-EINVAL` (errno
/// set) for NULL or a size below 8.
pub(super) fn caller_room(out: *const u64) -> Result<u64, libc::c_int> {
    if out.is_null() {
        set_errno(libc::EINVAL);
        return Err(-libc::EINVAL);
    }
    // SAFETY: the header requires the first 8 bytes of the caller's struct to hold its size.
    let room = unsafe { std::ptr::read_unaligned(out) };
    if room < 8 {
        set_errno(libc::EINVAL);
        return Err(-libc::EINVAL);
    }
    Ok(room)
}

/// Write `value`, a `repr(C)` struct of the header that starts with its `size` field, into
/// the caller's `out`: as many whole words as both sides know, `size` set to the bytes written.
/// 0, or -EINVAL with errno for NULL or a `size` below 8.
pub(super) fn write_sized<T: Copy>(out: *mut T, value: &T) -> libc::c_int {
    let room = match caller_room(out.cast()) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let filled = room.min(std::mem::size_of::<T>() as u64) / 8 * 8;
    // SAFETY: `filled` bytes fit in the caller's `size` (the header's contract) and in
    // `value`; the size field is the first 8 of them.
    unsafe {
        std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out.cast::<u8>(), filled as usize);
        out.cast::<u64>().write_unaligned(filled);
    }
    0
}

/// Read a struct of the header that starts with its `size` into `T` (a `repr(C)` struct of
/// `u64`s): the fields the caller's shorter struct lacks keep `T::default()`'s values. NULL
/// gives the defaults; a size below 8 is refused.
pub(super) fn read_sized<T: Copy + Default>(p: *const T) -> Result<T, &'static str> {
    let mut c = T::default();
    if p.is_null() {
        return Ok(c);
    }
    // SAFETY: the header requires `p` to point to `p->size` readable bytes.
    let size = unsafe { std::ptr::read_unaligned(p.cast::<u64>()) } as usize;
    if size < 8 {
        return Err("options size below 8");
    }
    let n = size.min(std::mem::size_of::<T>());
    // SAFETY: `n` bytes are readable at `p` (its size says so) and fit in `c`.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut c as *mut T).cast::<u8>(), n) };
    Ok(c)
}
