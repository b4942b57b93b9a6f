//! `vmarena_pressure`: a low-memory event raised by the program.
#![allow(unsafe_code)]

use super::ffi::guarded;

/// `size_t vmarena_pressure(void);` raise a low-memory event: every space, fixed pool and
/// frame pool releases the memory it caches. Returns the bytes released.
#[no_mangle]
pub extern "C" fn vmarena_pressure() -> usize {
    guarded(0, || crate::pressure::pressure().total_pages() as usize * vmarena_platform::page_size())
}
