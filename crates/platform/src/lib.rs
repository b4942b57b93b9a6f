//! vmarena layer 1: every OS call the project makes, and the `unsafe` they need.
//!
//! Owns: address-space reservations ([`Reservation`]), page release and guard markers
//! ([`release`], [`guard`]), page moves between addresses ([`page_move`], [`uffd`]), the
//! current CPU and CPU count ([`cpu`]), per-CPU stacks in restartable sequences
//! ([`cpu_stack`]), what the library does while the process has one thread ([`early`]), a cycle counter and process figures for tests and the lab
//! ([`process`]), memory-pressure notifications ([`psi`]),
//! the thread's inside-vmarena flag ([`reentry`]), once-computed values that survive a fork
//! ([`fork_once`]), helper threads that block every signal ([`helper_thread`]),
//! descriptors kept out of the program's way and checked before use ([`kept_fd`]), what the
//! process may map ([`limits`]), memory files for frame pools ([`memfd`]),
//! process-wide barriers and rseq fences ([`membarrier`]), lazily zero word tables ([`word_table`]), two words
//! of static TLS for the fast paths ([`static_tls`]) and cache-line prefetch hints
//! ([`prefetch`]).
//! Does not own: any allocation policy. The layers above call these functions through the
//! engine's `Backing` trait, so they can be tested with a fake backing that makes no syscalls.
//!
//! Linux only (x86_64 and aarch64 are what it is built and tested on).

pub mod cpu;
pub mod cpu_stack;
pub mod debug_tools;
pub mod early;
pub mod fork_once;
pub mod guard;
pub mod helper_thread;
pub mod kept_fd;
pub mod limits;
pub mod membarrier;
pub mod memfd;
pub mod page_move;
pub mod prefetch;
pub mod process;
pub mod psi;
pub mod reentry;
pub mod release;
pub mod reservation;
pub mod static_tls;
pub mod uffd;
pub mod word_table;

pub use release::Advice;
pub use reservation::Reservation;
pub use word_table::WordTable;

/// The system page size in bytes (4096 on the machines this is built for).
pub fn page_size() -> usize {
    static PAGE: fork_once::ForkOnce<usize> = fork_once::ForkOnce::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize })
}

/// The size of a transparent huge page in bytes (`hpage_pmd_size` in sysfs; 2 MiB when the
/// file cannot be read, as on x86_64).
pub fn huge_page_size() -> usize {
    static HUGE: fork_once::ForkOnce<usize> = fork_once::ForkOnce::new();
    *HUGE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|b| b.is_power_of_two())
            .unwrap_or(2 << 20)
    })
}

/// The errno of the last failed call on this thread.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Set errno on this thread (for the C ABI).
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = e }
}
