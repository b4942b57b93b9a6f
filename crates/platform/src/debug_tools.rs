//! The debugging tools a program may run under: valgrind (memcheck), AddressSanitizer and
//! ThreadSanitizer. Found once, when a space is built; told about memory by the front end
//! (`vmarena::space`) only when present, so that each hot path pays one predictable branch on a
//! field of its own when no tool is there.
//!
//! Owns: [`TOOLS`], the bit set of the tools found, and the sanitizer runtimes' entry points,
//! written once by [`detect`] and read without a lock.
//!
//! - valgrind's memcheck: client requests, the instruction sequence valgrind recognises and a
//!   processor executes as a no-op (`valgrind.h`'s, written here for x86-64: a rotation of `rdi`
//!   by 128 bits in four steps, then `xchg rbx, rbx`, with the request's six words addressed by
//!   `rax` and the answer in `rdx`). Memcheck is told apart from valgrind's other tools by its
//!   answer to a request of its own. Elsewhere than x86-64 it is never reported present.
//! - AddressSanitizer and ThreadSanitizer: their runtimes live in the program (`-fsanitize=...`)
//!   and export `__asan_poison_memory_region` and `__asan_unpoison_memory_region`, and
//!   `__tsan_acquire` and `__tsan_release`, found with `dlsym` in the process's global scope.
//!   `dlsym` may allocate when a symbol is missing, so [`detect`] runs when a space is built (the
//!   caller raises the re-entry flag there), never at load.
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};

/// Running under valgrind's memcheck (other valgrind tools, callgrind among them, need no
/// announcements, and vmarena keeps its ordinary paths under them).
pub const MEMCHECK: u8 = 1;
/// AddressSanitizer's runtime is in the process.
pub const ASAN: u8 = 2;
/// ThreadSanitizer's runtime is in the process.
pub const TSAN: u8 = 4;
/// [`detect`] has run.
const DETECTED: u8 = 0x80;

/// The tools found (bits above), with a high bit set once [`detect`] ran.
pub static TOOLS: AtomicU8 = AtomicU8::new(0);

static ASAN_POISON: AtomicUsize = AtomicUsize::new(0);
static ASAN_UNPOISON: AtomicUsize = AtomicUsize::new(0);
static TSAN_ACQUIRE: AtomicUsize = AtomicUsize::new(0);
static TSAN_RELEASE: AtomicUsize = AtomicUsize::new(0);

type RegionFn = unsafe extern "C" fn(*const c_void, usize);
type SyncFn = unsafe extern "C" fn(*mut c_void);

/// The tools present, found on the first call (later calls read the answer). Call it where an
/// allocation cannot re-enter the caller (`dlsym` may allocate).
pub fn detect() -> u8 {
    let t = TOOLS.load(Relaxed);
    if t & DETECTED != 0 {
        return t & !DETECTED;
    }
    let mut found = 0;
    if valgrind::running_on_memcheck() {
        found |= MEMCHECK;
    }
    let sym = |name: &CStr| {
        // SAFETY: dlsym with the global scope and a NUL-terminated name.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    };
    let (poison, unpoison) = (sym(c"__asan_poison_memory_region"), sym(c"__asan_unpoison_memory_region"));
    if poison != 0 && unpoison != 0 {
        ASAN_POISON.store(poison, Relaxed);
        ASAN_UNPOISON.store(unpoison, Relaxed);
        found |= ASAN;
    }
    let (acquire, release) = (sym(c"__tsan_acquire"), sym(c"__tsan_release"));
    if acquire != 0 && release != 0 {
        TSAN_ACQUIRE.store(acquire, Relaxed);
        TSAN_RELEASE.store(release, Relaxed);
        found |= TSAN;
    }
    TOOLS.store(found | DETECTED, Relaxed);
    found
}

/// The tools [`detect`] found (0 before it ran).
#[inline]
pub fn present() -> u8 {
    TOOLS.load(Relaxed) & !DETECTED
}

/// Mark `[addr, addr + len)` as memory the program must not touch (AddressSanitizer).
pub fn asan_poison(addr: usize, len: usize) {
    let f = ASAN_POISON.load(Relaxed);
    if f != 0 && len > 0 {
        // SAFETY: the runtime's own function, found by `detect`; it only changes shadow memory.
        unsafe { std::mem::transmute::<usize, RegionFn>(f)(addr as *const c_void, len) }
    }
}

/// Mark `[addr, addr + len)` as memory the program may use (AddressSanitizer).
pub fn asan_unpoison(addr: usize, len: usize) {
    let f = ASAN_UNPOISON.load(Relaxed);
    if f != 0 && len > 0 {
        // SAFETY: as in `asan_poison`.
        unsafe { std::mem::transmute::<usize, RegionFn>(f)(addr as *const c_void, len) }
    }
}

/// What this thread did so far happens before what a later [`tsan_acquire`] of `addr` does
/// (ThreadSanitizer; `addr` only names the synchronisation).
pub fn tsan_release(addr: usize) {
    let f = TSAN_RELEASE.load(Relaxed);
    if f != 0 {
        // SAFETY: the runtime's own function; it reads no memory at `addr`.
        unsafe { std::mem::transmute::<usize, SyncFn>(f)(addr as *mut c_void) }
    }
}

/// Everything released on `addr` before happens before what this thread does next.
pub fn tsan_acquire(addr: usize) {
    let f = TSAN_ACQUIRE.load(Relaxed);
    if f != 0 {
        // SAFETY: as in `tsan_release`.
        unsafe { std::mem::transmute::<usize, SyncFn>(f)(addr as *mut c_void) }
    }
}

/// valgrind's client requests (`valgrind.h`, `memcheck.h`): no-ops when the process does not
/// run under valgrind.
pub mod valgrind {
    const RUNNING_ON_VALGRIND: u64 = 0x1001;
    const MALLOCLIKE_BLOCK: u64 = 0x1301;
    const FREELIKE_BLOCK: u64 = 0x1302;
    /// `VG_USERREQ_TOOL_BASE('M', 'C')`: memcheck's first request.
    const MEMCHECK_BASE: u64 = (b'M' as u64) << 24 | (b'C' as u64) << 16;
    const MAKE_MEM_NOACCESS: u64 = MEMCHECK_BASE;
    const MAKE_MEM_DEFINED: u64 = MEMCHECK_BASE + 2;

    /// One client request: `default` when not running under valgrind.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    fn request(default: u64, args: [u64; 6]) -> u64 {
        let mut result = default;
        // SAFETY: the sequence leaves every register as it was but `rdx` (the answer); `rdi`
        // is rotated by 128 bits in all. valgrind reads the six words at `rax`.
        unsafe {
            std::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                inout("rdx") result,
                in("rax") args.as_ptr(),
                options(nostack),
            );
        }
        result
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn request(default: u64, _args: [u64; 6]) -> u64 {
        default
    }

    /// True when the process runs under valgrind (any tool).
    pub fn running_on_valgrind() -> bool {
        request(0, [RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0]) != 0
    }

    /// True when the process runs under valgrind's memcheck: memcheck answers its requests that
    /// mark memory with -1; the other tools leave the default (0).
    pub fn running_on_memcheck() -> bool {
        let probe = 0u64;
        running_on_valgrind()
            && request(0, [MAKE_MEM_DEFINED, &probe as *const u64 as u64, 0, 0, 0, 0]) == u64::MAX
    }

    /// `len` bytes at `addr` are a heap block from now on (memcheck reports leaks of it, and
    /// accesses past it or after [`freelike_block`]); defined when `zeroed`, else undefined.
    pub fn malloclike_block(addr: usize, len: usize, zeroed: bool) {
        request(0, [MALLOCLIKE_BLOCK, addr as u64, len as u64, 0, zeroed as u64, 0]);
    }

    /// The block at `addr` is freed: no access until it is a block again.
    pub fn freelike_block(addr: usize) {
        request(0, [FREELIKE_BLOCK, addr as u64, 0, 0, 0, 0]);
    }

    /// No access to `[addr, addr + len)`.
    pub fn make_mem_noaccess(addr: usize, len: usize) {
        request(0, [MAKE_MEM_NOACCESS, addr as u64, len as u64, 0, 0, 0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside valgrind and without sanitizers (the test suite's own process), nothing is
    /// found and every call is a no-op.
    #[test]
    fn nothing_is_found_in_a_plain_process_and_the_calls_do_nothing() {
        assert_eq!(detect(), 0, "no tool in the test process");
        assert_eq!(present(), 0);
        let mut page = vec![7u8; 4096];
        let a = page.as_mut_ptr() as usize;
        valgrind::malloclike_block(a, 4096, false);
        valgrind::make_mem_noaccess(a, 4096);
        valgrind::freelike_block(a);
        asan_poison(a, 4096);
        tsan_release(a);
        tsan_acquire(a);
        assert!(page.iter().all(|&b| b == 7), "no request touched the memory");
    }
}
