//! malloc's introspection under the shim: `mallinfo2`, `mallinfo`, `malloc_stats`,
//! `malloc_info` and `malloc_trim` see vmarena's blocks as well as the next allocator's.
//!
//! Each calls the next allocator's function (the C library's where the next allocator has
//! none: jemalloc, mimalloc and tcmalloc define none of these, so their programs get glibc's
//! near-empty answer plus vmarena's) and adds the default space:
//!
//! | call | vmarena's part |
//! |---|---|
//! | `mallinfo2`, `mallinfo` | live areas in `hblks`, their bytes (guards excluded) in `hblkhd`, as glibc counts its own mmapped blocks; freed areas kept for reuse (lazy, pooled, in thread caches), in `fordblks` |
//! | `malloc_stats` | three lines on stderr after the next allocator's |
//! | `malloc_info` | a `<vmarena areas= bytes= cached=/>` element inside `<malloc>` |
//! | `malloc_trim` | the default space's shrinker: every cached byte released |
//!
//! Owns nothing: the next allocator's functions come from [`crate::next`], and the space's
//! figures from its statistics. Allocations made here (the statistics, the memory stream
//! of `malloc_info`) run with the inside-vmarena flag raised, so they go to the next allocator.
#![allow(unsafe_code)]

use crate::mallinfo::{Mallinfo, Mallinfo2};
use crate::next;
use std::ffi::{c_char, c_int, c_void};
use vmarena_platform::reentry;

/// vmarena's part: live areas, their data bytes, and resident freed bytes (0s without a space).
fn vmarena_figures() -> (usize, usize, usize) {
    let Some(s) = vmarena::existing_default_space() else {
        return (0, 0, 0);
    };
    let _inside = reentry::enter();
    let Ok(all) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.stats(false))) else {
        return (0, 0, 0);
    };
    let st = &all.arena;
    let page = vmarena_platform::page_size() as u64;
    // The further reservations' live areas count as the first's do; their cached memory is
    // left out (it is not in the first's table).
    let areas = st.live_areas + all.extension_live_areas;
    let guards = areas * s.options().guard_pages;
    let live = (st.live_pages + all.extension_live_pages).saturating_sub(guards) * page;
    (areas as usize, live as usize, ((st.lazy_pages + st.cached_pages) * page) as usize)
}

/// `struct mallinfo2 mallinfo2(void)`: the next allocator's, plus vmarena's blocks.
#[no_mangle]
pub extern "C" fn mallinfo2() -> Mallinfo2 {
    let mut m = match next::get().and_then(|n| n.mallinfo2) {
        // SAFETY: the next `mallinfo2`, resolved with this signature.
        Some(f) => unsafe { f() },
        None => Mallinfo2::default(),
    };
    let (areas, bytes, cached) = vmarena_figures();
    m.hblks += areas;
    m.hblkhd += bytes;
    m.fordblks += cached;
    m
}

/// `struct mallinfo mallinfo(void)`: as [`mallinfo2`], in `int`s (which wrap past 2 GiB in
/// glibc's own; here they saturate).
#[no_mangle]
pub extern "C" fn mallinfo() -> Mallinfo {
    let mut m = match next::get().and_then(|n| n.mallinfo) {
        // SAFETY: the next `mallinfo`, resolved with this signature.
        Some(f) => unsafe { f() },
        None => Mallinfo::default(),
    };
    let (areas, bytes, cached) = vmarena_figures();
    let add = |field: c_int, v: usize| -> c_int {
        (field as i64).saturating_add(v as i64).clamp(c_int::MIN as i64, c_int::MAX as i64) as c_int
    };
    m.hblks = add(m.hblks, areas);
    m.hblkhd = add(m.hblkhd, bytes);
    m.fordblks = add(m.fordblks, cached);
    m
}

/// `void malloc_stats(void)`: the next allocator's report on stderr, then vmarena's.
#[no_mangle]
pub extern "C" fn malloc_stats() {
    if let Some(f) = next::get().and_then(|n| n.malloc_stats) {
        // SAFETY: the next `malloc_stats`, resolved with this signature.
        unsafe { f() };
    }
    let (areas, bytes, cached) = vmarena_figures();
    let _inside = reentry::enter();
    let text = format!(
        "vmarena (LD_PRELOAD shim):\nareas in use       = {areas:10}\nin use bytes       = {bytes:10}\ncached bytes       = {cached:10}\n"
    );
    // SAFETY: writes the buffer to stderr, where the next allocator's report went.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

/// `int malloc_info(int options, FILE *fp)`: the next allocator's XML with a `<vmarena>`
/// element inside its `<malloc>` element (appended when the text has none).
///
/// # Safety
/// `fp` must be a valid open `FILE` stream, as for glibc's.
#[no_mangle]
pub unsafe extern "C" fn malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    if options != 0 || fp.is_null() {
        vmarena_platform::set_errno(libc::EINVAL);
        return -1;
    }
    let (areas, bytes, cached) = vmarena_figures();
    let _inside = reentry::enter();
    let element = format!("<vmarena areas=\"{areas}\" bytes=\"{bytes}\" cached=\"{cached}\"/>\n");
    let mut buf: *mut c_char = std::ptr::null_mut();
    let mut len: usize = 0;
    // SAFETY: open_memstream writes the buffer's address and length as the stream is used;
    // both out-pointers live until after fclose below.
    let ms = unsafe { libc::open_memstream(&mut buf, &mut len) };
    let mut rc = 0;
    if let (false, Some(f)) = (ms.is_null(), next::get().and_then(|n| n.malloc_info)) {
        // SAFETY: the next `malloc_info`, resolved with this signature, on our memory stream.
        rc = unsafe { f(options, ms) };
    }
    if !ms.is_null() {
        // SAFETY: our stream, closed once; afterwards `buf` holds `len` bytes (and a NUL).
        unsafe { libc::fclose(ms) };
    }
    let text: &[u8] = if buf.is_null() {
        &[]
    } else {
        // SAFETY: `buf` holds `len` bytes written by the stream.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
    };
    let close = b"</malloc>";
    let at = text.windows(close.len()).rposition(|w| w == close).unwrap_or(text.len());
    for part in [&text[..at], element.as_bytes(), &text[at..]] {
        if !part.is_empty() {
            // SAFETY: the caller's stream; the part is valid for its length.
            unsafe { libc::fwrite(part.as_ptr().cast(), 1, part.len(), fp) };
        }
    }
    if !buf.is_null() {
        // SAFETY: the stream's buffer, allocated with malloc (the next allocator's, through
        // this shim's routing by address); freed once.
        unsafe { libc::free(buf.cast::<c_void>()) };
    }
    rc
}

/// `int malloc_trim(size_t pad)`: the default space's shrinker (every cached byte released),
/// then the next allocator's `malloc_trim`. 1 when either gave memory back.
#[no_mangle]
pub extern "C" fn malloc_trim(pad: usize) -> c_int {
    let released = match vmarena::existing_default_space() {
        Some(s) => {
            let _inside = reentry::enter();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.shrink())).unwrap_or(0)
        }
        None => 0,
    };
    let next = match next::get().and_then(|n| n.malloc_trim) {
        // SAFETY: the next `malloc_trim`, resolved with this signature.
        Some(f) => unsafe { f(pad) },
        None => 0,
    };
    c_int::from(released > 0 || next != 0)
}
