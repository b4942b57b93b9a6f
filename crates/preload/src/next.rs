//! The next allocator: the `malloc` family that comes after this library in the lookup order
//! (glibc's, or jemalloc's or mimalloc's when they are preloaded after vmarena).
//!
//! Owns: the resolved function pointers and the resolution state:
//!
//! | state | meaning | allocations made meanwhile |
//! |---|---|---|
//! | `UNRESOLVED` | nothing looked up yet | the first caller resolves |
//! | `RESOLVING` | one thread is inside `dlsym` | served by the bootstrap heap |
//! | `READY` | every pointer stored | the next allocator |
//!
//! Resolution runs once, on the first call of any interposed function (the library may be
//! asked for memory before its constructor runs). The pointers are written before the state
//! turns `READY` with a release store; readers load the state with acquire.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU8, Ordering};

const UNRESOLVED: u8 = 0;
const RESOLVING: u8 = 1;
const READY: u8 = 2;

type Malloc = unsafe extern "C" fn(usize) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void);
type Calloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type Realloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type UsableSize = unsafe extern "C" fn(*mut c_void) -> usize;
type PosixMemalign = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int;
type AlignedAlloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;

#[allow(missing_docs)] // the C functions of the same names
/// The next allocator's functions. `malloc`, `free`, `calloc` and `realloc` always exist;
/// the others may be missing in an unusual allocator.
pub struct Next {
    pub malloc: Malloc,
    pub free: Free,
    pub calloc: Calloc,
    pub realloc: Realloc,
    pub usable_size: Option<UsableSize>,
    pub posix_memalign: Option<PosixMemalign>,
    pub aligned_alloc: Option<AlignedAlloc>,
    pub memalign: Option<AlignedAlloc>,
    pub valloc: Option<Malloc>,
    pub pvalloc: Option<Malloc>,
    /// The next `mallopt` (the program's own calls are passed on to it).
    pub mallopt: Option<crate::glibc_thresholds::Mallopt>,
    /// `mallopt` when both it and `malloc` come from the C library: the next allocator is
    /// glibc's ([`crate::glibc_thresholds`]).
    pub glibc_mallopt: Option<crate::glibc_thresholds::Mallopt>,
    /// glibc's `malloc_trim`, when the next allocator is glibc's ([`crate::glibc_trim`]).
    pub glibc_malloc_trim: Option<crate::glibc_trim::MallocTrim>,
    /// The next definitions of malloc's introspection ([`crate::introspection`]): the C
    /// library's where the next allocator has none.
    pub mallinfo2: Option<crate::mallinfo::Mallinfo2Fn>,
    pub mallinfo: Option<crate::mallinfo::MallinfoFn>,
    pub malloc_stats: Option<crate::mallinfo::MallocStatsFn>,
    pub malloc_info: Option<crate::mallinfo::MallocInfoFn>,
    pub malloc_trim: Option<crate::glibc_trim::MallocTrim>,
}

struct Slot(UnsafeCell<Option<Next>>);
// SAFETY: written once by the resolving thread before STATE becomes READY (release); read only
// after an acquire load of READY.
unsafe impl Sync for Slot {}

static STATE: AtomicU8 = AtomicU8::new(UNRESOLVED);
static NEXT: Slot = Slot(UnsafeCell::new(None));

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
}

/// The next allocator, resolving it on first use. `None` while another thread (or this one,
/// from inside `dlsym`) is resolving: the caller then uses the bootstrap heap.
#[inline]
pub fn get() -> Option<&'static Next> {
    if STATE.load(Ordering::Acquire) == READY {
        // SAFETY: READY was stored after the slot was written (see `Slot`).
        return unsafe { (*NEXT.0.get()).as_ref() };
    }
    resolve()
}

/// The next allocator, known to be resolved.
///
/// # Safety
/// The state must have been seen `READY` (or the shim's pass-through bound non-zero, stored
/// after it) with acquire ordering.
#[inline]
pub unsafe fn ready() -> &'static Next {
    // SAFETY: the caller saw READY, stored after the slot was written (see `Slot`).
    unsafe { (*NEXT.0.get()).as_ref().unwrap_unchecked() }
}

#[cold]
fn resolve() -> Option<&'static Next> {
    if STATE.compare_exchange(UNRESOLVED, RESOLVING, Ordering::Acquire, Ordering::Acquire).is_err() {
        return None; // being resolved, or READY since our load: the caller retries or bootstraps
    }
    let malloc: Malloc = sym(c"malloc").unwrap_or(__libc_malloc);
    let mallopt: Option<crate::glibc_thresholds::Mallopt> = sym(c"mallopt");
    let next = Next {
        malloc,
        free: sym(c"free").unwrap_or(__libc_free),
        calloc: sym(c"calloc").unwrap_or(__libc_calloc),
        realloc: sym(c"realloc").unwrap_or(__libc_realloc),
        usable_size: sym(c"malloc_usable_size"),
        posix_memalign: sym(c"posix_memalign"),
        aligned_alloc: sym(c"aligned_alloc"),
        memalign: sym(c"memalign"),
        valloc: sym(c"valloc"),
        pvalloc: sym(c"pvalloc"),
        mallopt,
        glibc_mallopt: mallopt.filter(|&m| in_libc(malloc as *const c_void) && in_libc(m as *const c_void)),
        glibc_malloc_trim: sym::<crate::glibc_trim::MallocTrim>(c"malloc_trim")
            .filter(|&t| in_libc(malloc as *const c_void) && in_libc(t as *const c_void)),
        mallinfo2: sym(c"mallinfo2"),
        mallinfo: sym(c"mallinfo"),
        malloc_stats: sym(c"malloc_stats"),
        malloc_info: sym(c"malloc_info"),
        malloc_trim: sym(c"malloc_trim"),
    };
    // SAFETY: only the thread that won the CAS writes, before publishing READY.
    unsafe { *NEXT.0.get() = Some(next) };
    STATE.store(READY, Ordering::Release);
    // SAFETY: as in `get`.
    let next = unsafe { (*NEXT.0.get()).as_ref() };
    if let Some(n) = next {
        on_ready(n);
    }
    next
}

/// Called once, right after the next allocator is known: options, the exit summary,
/// and the process's `membarrier` registration, which the default space's thread caches need.
/// That happens at the first `malloc`, while the process almost always has one thread: there
/// the registration costs microseconds, while in a process with several threads the kernel
/// waits for an RCU grace period (milliseconds; BENCHMARKS.md, "The first call from a second
/// thread"), which would otherwise stall whichever thread made the first large allocation.
fn on_ready(n: &Next) {
    // A failure is remembered and reported again when the space is built without caches.
    vmarena_platform::early::prepare();
    let opts = crate::stats::PreloadOptions::from_env();
    crate::routing::set_threshold(opts.threshold);
    if opts.stats {
        crate::stats::switch_on(opts.lock_timing);
    } else {
        crate::routing::open_pass_through(opts.threshold);
    }
    if let Some(m) = n.glibc_mallopt.filter(|_| opts.glibc_thresholds) {
        crate::glibc_thresholds::enable(m);
    }
    if let Some(t) = n.glibc_malloc_trim.filter(|_| opts.glibc_trim) {
        crate::glibc_trim::enable(t);
    }
}

/// True when the code at `f` belongs to the C library (`libc.so.*`), by `dladdr`.
fn in_libc(f: *const c_void) -> bool {
    // SAFETY: an all-zero Dl_info is a valid value to be overwritten.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the address and writes `info`; `dli_fname` is null or a
    // NUL-terminated path owned by the loader for as long as the object stays loaded (the C
    // library is never unloaded).
    if unsafe { libc::dladdr(f, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: see above.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    file.starts_with(b"libc.so")
}

/// The next definition of `name` after this library, as a function pointer of type `F`.
fn sym<F: Copy>(name: &CStr) -> Option<F> {
    // SAFETY: dlsym takes a pseudo-handle and a NUL-terminated name; it returns null or the
    // address of the symbol, which for these names is a function of the declared type.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) };
    if p.is_null() {
        return None;
    }
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: F is a function pointer type of the symbol's C signature (same size, checked).
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}
