//! The C++ allocation operators: every `operator new` and `operator delete` form of the
//! Itanium C++ ABI on a 64-bit target (plain and array; nothrow; sized delete; the C++17
//! aligned forms and their nothrow and sized combinations): 8 news and 12 deletes.
//!
//! Owns: one cached pointer per symbol to the next definition (the C++ runtime's, or the one of
//! an allocator preloaded after the shim: jemalloc, mimalloc and tcmalloc each export their
//! own operators, and a C++ program calling them would otherwise never reach the shim).
//!
//! Routing, with the same threshold and address test as the `malloc` family:
//!
//! | call | to vmarena when | otherwise |
//! |---|---|---|
//! | a `new` form | the size is at or above the threshold (and vmarena has room) | the next definition of the same form |
//! | a `delete` form | the address lies in the default space | the next definition of the same form (so a sized delete keeps the next allocator's fast path) |
//!
//! A small request costs one compare of the size (a delete: the address tests of `free`) and a
//! tail call through the cached pointer, once the pointer is looked up and while statistics are
//! off; everything else takes the full path out of line. The C++ semantics are the next definition's: its `new` throws
//! `std::bad_alloc` or runs the new-handler, which is also where a large request goes when
//! vmarena is full. An exception thrown there unwinds through these functions, which are
//! declared `C-unwind` for it and hold nothing that needs unwinding.
//!
//! A form the next allocator does not export (mimalloc has no nothrow delete) resolves to the
//! C++ runtime's, whose body calls the plain form, which comes back here and is routed by
//! address. When no later object defines a form at all (a C++ library opened with `dlopen` and
//! `RTLD_LOCAL` brings its runtime outside the global scope), the shim serves the call from the
//! `malloc` family with the C++ rules: a throwing `new` that gets no memory runs the
//! new-handler and retries, then throws `std::bad_alloc` through the C++ runtime's own
//! function when the global scope has one; with no runtime to throw it, the process is stopped
//! with a message rather than returning NULL where the caller cannot expect it.
//!
//! Lock-free: a pointer is looked up (`dlsym`) on the first call of its form and cached with a
//! relaxed store; two threads may both look it up and store the same value.
#![allow(clippy::missing_safety_doc)]
#![allow(non_snake_case)] // the symbols' mangled names

use crate::bootstrap;
use crate::interpose::{self as c, vm_alloc, vm_free};
use crate::next;
use crate::routing::{fast_below, in_space, pass_below, pass_through_address, threshold};
use crate::stats::{count, COUNTERS as C};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering::Relaxed};

/// The `std::nothrow_t` argument (its address only; never read).
type Nothrow = *const c_void;

/// Marks a form looked up and found nowhere after the shim.
/// (Address 1: no function lives there, and it is not null.)
const ABSENT: *mut c_void = 1 as *mut c_void;

/// The next definition of one operator, looked up on first use.
struct NextOp {
    name: &'static CStr,
    ptr: AtomicPtr<c_void>,
}

impl NextOp {
    const fn new(name: &'static CStr) -> Self {
        NextOp { name, ptr: AtomicPtr::new(std::ptr::null_mut()) }
    }

    /// The next definition as a function of type `F`, or `None` when no later object defines it.
    #[inline]
    fn get<F: Copy>(&self) -> Option<F> {
        let mut p = self.ptr.load(Relaxed);
        if p.is_null() {
            p = self.resolve();
        }
        if p == ABSENT {
            return None;
        }
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        // SAFETY: `p` is the address of the symbol `name`, a function whose C signature is `F`
        // (each static below is read with its form's type only); same size, checked above.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// The next definition as a function of type `F` when it is looked up and present; `None`
    /// otherwise (not looked up yet, or absent), with no call: for the pass-through.
    #[inline(always)]
    fn ready<F: Copy>(&self) -> Option<F> {
        let p = self.ptr.load(Relaxed);
        if (p as usize) <= ABSENT as usize {
            return None;
        }
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        // SAFETY: as in `get`: `p` is the address of the symbol `name`, of type `F`.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    #[cold]
    fn resolve(&self) -> *mut c_void {
        // SAFETY: dlsym takes a pseudo-handle and a NUL-terminated name; it returns null or the
        // symbol's address.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr() as *const c_char) };
        let p = if p.is_null() { ABSENT } else { p };
        self.ptr.store(p, Relaxed);
        p
    }
}

type New = unsafe extern "C-unwind" fn(usize) -> *mut c_void;
type NewNothrow = unsafe extern "C-unwind" fn(usize, Nothrow) -> *mut c_void;
type NewAligned = unsafe extern "C-unwind" fn(usize, usize) -> *mut c_void;
type NewAlignedNothrow = unsafe extern "C-unwind" fn(usize, usize, Nothrow) -> *mut c_void;
type Delete = unsafe extern "C-unwind" fn(*mut c_void);
type DeleteNothrow = unsafe extern "C-unwind" fn(*mut c_void, Nothrow);
/// Sized delete and aligned delete: the second argument is a size or an alignment.
type DeleteWith = unsafe extern "C-unwind" fn(*mut c_void, usize);
type DeleteSizedAligned = unsafe extern "C-unwind" fn(*mut c_void, usize, usize);
type DeleteAlignedNothrow = unsafe extern "C-unwind" fn(*mut c_void, usize, Nothrow);

static NEW: NextOp = NextOp::new(c"_Znwm");
static NEW_ARRAY: NextOp = NextOp::new(c"_Znam");
static NEW_NOTHROW: NextOp = NextOp::new(c"_ZnwmRKSt9nothrow_t");
static NEW_ARRAY_NOTHROW: NextOp = NextOp::new(c"_ZnamRKSt9nothrow_t");
static NEW_ALIGNED: NextOp = NextOp::new(c"_ZnwmSt11align_val_t");
static NEW_ARRAY_ALIGNED: NextOp = NextOp::new(c"_ZnamSt11align_val_t");
static NEW_ALIGNED_NOTHROW: NextOp = NextOp::new(c"_ZnwmSt11align_val_tRKSt9nothrow_t");
static NEW_ARRAY_ALIGNED_NOTHROW: NextOp = NextOp::new(c"_ZnamSt11align_val_tRKSt9nothrow_t");
static DELETE: NextOp = NextOp::new(c"_ZdlPv");
static DELETE_ARRAY: NextOp = NextOp::new(c"_ZdaPv");
static DELETE_NOTHROW: NextOp = NextOp::new(c"_ZdlPvRKSt9nothrow_t");
static DELETE_ARRAY_NOTHROW: NextOp = NextOp::new(c"_ZdaPvRKSt9nothrow_t");
static DELETE_SIZED: NextOp = NextOp::new(c"_ZdlPvm");
static DELETE_ARRAY_SIZED: NextOp = NextOp::new(c"_ZdaPvm");
static DELETE_ALIGNED: NextOp = NextOp::new(c"_ZdlPvSt11align_val_t");
static DELETE_ARRAY_ALIGNED: NextOp = NextOp::new(c"_ZdaPvSt11align_val_t");
static DELETE_SIZED_ALIGNED: NextOp = NextOp::new(c"_ZdlPvmSt11align_val_t");
static DELETE_ARRAY_SIZED_ALIGNED: NextOp = NextOp::new(c"_ZdaPvmSt11align_val_t");
static DELETE_ALIGNED_NOTHROW: NextOp = NextOp::new(c"_ZdlPvSt11align_val_tRKSt9nothrow_t");
static DELETE_ARRAY_ALIGNED_NOTHROW: NextOp = NextOp::new(c"_ZdaPvSt11align_val_tRKSt9nothrow_t");

/// The C++ runtime's `std::get_new_handler()` and `std::__throw_bad_alloc()`, for the rare
/// form no later object defines.
static GET_NEW_HANDLER: NextOp = NextOp::new(c"_ZSt15get_new_handlerv");
static THROW_BAD_ALLOC: NextOp = NextOp::new(c"_ZSt17__throw_bad_allocv");

/// What the next plain `new` and `delete` forms (`new`, `new[]`, `delete`, `delete[]` and the
/// sized deletes) are: [`RUNTIME`] when both are the C++ runtime's own (libstdc++ or libc++),
/// whose bodies are `malloc` (with the new-handler loop when it returns NULL) and `free`; then
/// the pass-through calls the next `malloc` and `free` itself, one layer fewer than the
/// runtime's body calling the shim's `malloc`. [`OTHER`] for an allocator's own operators
/// (jemalloc's, mimalloc's, tcmalloc's), which keep their fast paths. Learned once, on the
/// full path.
static PLAIN_NEXT: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
/// See [`PLAIN_NEXT`].
const RUNTIME: u8 = 1;
/// See [`PLAIN_NEXT`].
const OTHER: u8 = 2;

/// True when the function at `f` lies in the C++ runtime's shared object.
fn in_cxx_runtime(f: *mut c_void) -> bool {
    // SAFETY: an all-zero `Dl_info` is valid (null pointers); dladdr fills it or returns 0.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `f` is an address; `info` is ours.
    if unsafe { libc::dladdr(f, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dladdr set a NUL-terminated path of the loaded object.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    file.starts_with(b"libstdc++.so") || file.starts_with(b"libc++.so")
}

/// Learn [`PLAIN_NEXT`] (once; racing threads compute the same answer).
#[cold]
fn learn_plain_next() {
    if PLAIN_NEXT.load(Relaxed) != UNKNOWN {
        return;
    }
    let runtime = [&NEW, &NEW_ARRAY, &DELETE, &DELETE_ARRAY, &DELETE_SIZED, &DELETE_ARRAY_SIZED]
        .iter()
        .all(|op| op.get::<*mut c_void>().is_some_and(in_cxx_runtime));
    PLAIN_NEXT.store(if runtime { RUNTIME } else { OTHER }, Relaxed);
}

/// A large request served by vmarena, or `None` (small, or vmarena has no room).
#[inline]
fn large(size: usize, align: usize) -> Option<*mut c_void> {
    if size < threshold() {
        return None;
    }
    vm_alloc(size, align, false).inspect(|_| count(&C.cpp_vm_news, 1))
}

/// A new of a form no later object defines: the `malloc` family with the C++ rules (see the
/// module documentation). `nothrow` forms return NULL instead of throwing.
#[cold]
fn new_fallback(size: usize, align: usize, nothrow: bool) -> *mut c_void {
    loop {
        // SAFETY: the shim's own malloc and aligned_alloc (size rounded up as it requires).
        let p = unsafe {
            if align <= 16 {
                c::malloc(size.max(1))
            } else {
                c::aligned_alloc(align, size.max(1).next_multiple_of(align))
            }
        };
        if !p.is_null() {
            return p;
        }
        type GetHandler = unsafe extern "C-unwind" fn() -> Option<unsafe extern "C-unwind" fn()>;
        // SAFETY: std::get_new_handler() of the C++ runtime; the handler is the program's and may
        // throw, which unwinds through this `C-unwind` frame.
        let handler = GET_NEW_HANDLER.get::<GetHandler>().and_then(|f| unsafe { f() });
        match handler {
            // SAFETY: see above.
            Some(h) => unsafe { h() },
            None if nothrow => return std::ptr::null_mut(),
            None => match THROW_BAD_ALLOC.get::<unsafe extern "C-unwind" fn() -> !>() {
                // SAFETY: std::__throw_bad_alloc() throws std::bad_alloc and never returns.
                Some(throw) => unsafe { throw() },
                None => {
                    eprintln!("vmarena preload: operator new({size}): out of memory and no C++ runtime to throw std::bad_alloc; aborting");
                    std::process::abort()
                }
            },
        }
    }
}

/// A delete of vmarena's (true) or of the bootstrap heap's (nothing to do); false when the
/// next allocator owns `p`.
#[inline]
fn delete_here(p: *mut c_void) -> bool {
    if in_space(p.cast()) {
        count(&C.cpp_vm_deletes, 1);
        vm_free(p);
        return true;
    }
    p.is_null() || bootstrap::contains(p.cast())
}

/// A delete of a form no later object defines: `free`, the C++ runtime's own body of every
/// delete form.
#[cold]
fn delete_fallback(p: *mut c_void) {
    // SAFETY: `p` came from the malloc family (the runtime's new forms and `new_fallback`).
    unsafe { c::free(p) }
}

macro_rules! new_forms {
    ($( $(#[$doc:meta])* $sym:ident($($arg:ident: $ty:ty),*) via $op:ident: $fty:ty, align $align:expr, nothrow $nothrow:expr, plain $plain:expr; )*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $sym(size: usize $(, $arg: $ty)*) -> *mut c_void {
            // The pass-through (below the bound, statistics off): for a plain form whose next
            // definition is the runtime's (see `PLAIN_NEXT`), the next malloc; otherwise one
            // compare and a tail call of the next form.
            if size < fast_below() {
                let next_is = if $plain { PLAIN_NEXT.load(Relaxed) } else { OTHER };
                if next_is == RUNTIME {
                    // SAFETY: a non-zero bound means the next allocator is known; its malloc.
                    // NULL (no memory, or a malloc that refuses 0) takes the full path, where
                    // the runtime's form runs the new-handler or throws.
                    let p = unsafe { (next::ready().malloc)(size) };
                    if !p.is_null() {
                        return p;
                    }
                } else if next_is == OTHER {
                    if let Some(f) = $op.ready::<$fty>() {
                        // SAFETY: the next definition of this form with the caller's arguments.
                        return unsafe { f(size $(, $arg)*) };
                    }
                }
            }
            #[inline(never)]
            unsafe extern "C-unwind" fn full(size: usize $(, $arg: $ty)*) -> *mut c_void {
                if $plain {
                    learn_plain_next();
                }
                if let Some(p) = large(size, $align) {
                    return p;
                }
                match $op.get::<$fty>() {
                    Some(f) => {
                        count(&C.cpp_next_news, 1);
                        // SAFETY: the next definition of this form with the caller's arguments.
                        unsafe { f(size $(, $arg)*) }
                    }
                    None => new_fallback(size, $align, $nothrow),
                }
            }
            // SAFETY: the same arguments.
            unsafe { full(size $(, $arg)*) }
        }
    )*};
}

macro_rules! delete_forms {
    ($( $(#[$doc:meta])* $sym:ident($($arg:ident: $ty:ty),*) via $op:ident: $fty:ty, plain $plain:expr; )*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $sym(p: *mut c_void $(, $arg: $ty)*) {
            // The pass-through: an address outside the space and the bootstrap heap (statistics
            // off), NULL included, goes with a tail call to the next free for a plain form whose
            // next definition is the runtime's (whose body is `free`), else to the next form.
            if pass_below(p.cast()) || (fast_below() != 0 && pass_through_address(p.cast())) {
                let next_is = if $plain { PLAIN_NEXT.load(Relaxed) } else { OTHER };
                if next_is == RUNTIME {
                    // SAFETY: a non-zero bound means the next allocator is known; `p` came from
                    // the runtime's new, which is the next malloc, or is NULL.
                    return unsafe { (next::ready().free)(p) };
                } else if next_is == OTHER {
                    if let Some(f) = $op.ready::<$fty>() {
                        // SAFETY: `p` came from the next definition of the matching new form,
                        // or is NULL.
                        return unsafe { f(p $(, $arg)*) };
                    }
                }
            }
            #[inline(never)]
            unsafe extern "C-unwind" fn full(p: *mut c_void $(, $arg: $ty)*) {
                if $plain {
                    learn_plain_next();
                }
                if delete_here(p) {
                    return;
                }
                match $op.get::<$fty>() {
                    Some(f) => {
                        count(&C.cpp_next_deletes, 1);
                        // SAFETY: `p` is not vmarena's nor the bootstrap heap's: it came from
                        // the next definition of the matching new form.
                        unsafe { f(p $(, $arg)*) }
                    }
                    None => delete_fallback(p),
                }
            }
            // SAFETY: the same arguments.
            unsafe { full(p $(, $arg)*) }
        }
    )*};
}

new_forms! {
    /// `operator new(size_t)`
    _Znwm() via NEW: New, align 0, nothrow false, plain true;
    /// `operator new[](size_t)`
    _Znam() via NEW_ARRAY: New, align 0, nothrow false, plain true;
    /// `operator new(size_t, const std::nothrow_t&)`
    _ZnwmRKSt9nothrow_t(nt: Nothrow) via NEW_NOTHROW: NewNothrow, align 0, nothrow true, plain false;
    /// `operator new[](size_t, const std::nothrow_t&)`
    _ZnamRKSt9nothrow_t(nt: Nothrow) via NEW_ARRAY_NOTHROW: NewNothrow, align 0, nothrow true, plain false;
    /// `operator new(size_t, std::align_val_t)`
    _ZnwmSt11align_val_t(align: usize) via NEW_ALIGNED: NewAligned, align align, nothrow false, plain false;
    /// `operator new[](size_t, std::align_val_t)`
    _ZnamSt11align_val_t(align: usize) via NEW_ARRAY_ALIGNED: NewAligned, align align, nothrow false, plain false;
    /// `operator new(size_t, std::align_val_t, const std::nothrow_t&)`
    _ZnwmSt11align_val_tRKSt9nothrow_t(align: usize, nt: Nothrow)
        via NEW_ALIGNED_NOTHROW: NewAlignedNothrow, align align, nothrow true, plain false;
    /// `operator new[](size_t, std::align_val_t, const std::nothrow_t&)`
    _ZnamSt11align_val_tRKSt9nothrow_t(align: usize, nt: Nothrow)
        via NEW_ARRAY_ALIGNED_NOTHROW: NewAlignedNothrow, align align, nothrow true, plain false;
}

delete_forms! {
    /// `operator delete(void*)`
    _ZdlPv() via DELETE: Delete, plain true;
    /// `operator delete[](void*)`
    _ZdaPv() via DELETE_ARRAY: Delete, plain true;
    /// `operator delete(void*, const std::nothrow_t&)`
    _ZdlPvRKSt9nothrow_t(nt: Nothrow) via DELETE_NOTHROW: DeleteNothrow, plain false;
    /// `operator delete[](void*, const std::nothrow_t&)`
    _ZdaPvRKSt9nothrow_t(nt: Nothrow) via DELETE_ARRAY_NOTHROW: DeleteNothrow, plain false;
    /// `operator delete(void*, size_t)`
    _ZdlPvm(size: usize) via DELETE_SIZED: DeleteWith, plain true;
    /// `operator delete[](void*, size_t)`
    _ZdaPvm(size: usize) via DELETE_ARRAY_SIZED: DeleteWith, plain true;
    /// `operator delete(void*, std::align_val_t)`
    _ZdlPvSt11align_val_t(align: usize) via DELETE_ALIGNED: DeleteWith, plain false;
    /// `operator delete[](void*, std::align_val_t)`
    _ZdaPvSt11align_val_t(align: usize) via DELETE_ARRAY_ALIGNED: DeleteWith, plain false;
    /// `operator delete(void*, size_t, std::align_val_t)`
    _ZdlPvmSt11align_val_t(size: usize, align: usize) via DELETE_SIZED_ALIGNED: DeleteSizedAligned, plain false;
    /// `operator delete[](void*, size_t, std::align_val_t)`
    _ZdaPvmSt11align_val_t(size: usize, align: usize) via DELETE_ARRAY_SIZED_ALIGNED: DeleteSizedAligned, plain false;
    /// `operator delete(void*, std::align_val_t, const std::nothrow_t&)`
    _ZdlPvSt11align_val_tRKSt9nothrow_t(align: usize, nt: Nothrow)
        via DELETE_ALIGNED_NOTHROW: DeleteAlignedNothrow, plain false;
    /// `operator delete[](void*, std::align_val_t, const std::nothrow_t&)`
    _ZdaPvSt11align_val_tRKSt9nothrow_t(align: usize, nt: Nothrow)
        via DELETE_ARRAY_ALIGNED_NOTHROW: DeleteAlignedNothrow, plain false;
}
