//! The process-wide default space, created on first use from the environment.
//!
//! Options come from the environment variables of [`SpaceOptions`] and
//! [`ArenaOptions`](vmarena_engine::ArenaOptions) (for example `VMARENA_SPACE_BYTES`,
//! `VMARENA_STRATEGY`). A malformed variable is reported once on stderr and the default used.
//!
//! Four arena defaults differ from [`ArenaOptions::default`], and one space default from
//! [`SpaceOptions::default`] (`docs/options.md` lists them); the environment overrides each:
//!
//! - no transparent huge pages (`huge_pages`, [`default_space_space_options`]);
//! - the size pools stop at [`DEFAULT_SPACE_POOL_MAX_PAGES`] (64 KiB). The default space serves
//!   the preload shim and `VmAlloc`, whose requests start at 64 KiB and come in many sizes;
//!   above the pools a freed area can be split, joined and extended for a request of another
//!   size, while a pool entry serves only its own size and holds its memory until a purge;
//! - the lazy threshold is [`DEFAULT_SPACE_LAZY_MAX_FACTOR`] times the kernel's, and it rises
//!   while live memory is below its peak (`lazy_headroom`, as for every arena), so resident
//!   memory stays within the live peak plus that threshold. Freed large areas are what the next
//!   large requests reuse without faults; the kernel's threshold is sized for its own small
//!   areas, and below what xthread keeps reusing;
//! - a lazy area up to [`DEFAULT_SPACE_LAZY_SLACK_PERCENT`] larger than a request is handed out
//!   whole (the kernel always splits), and so is one at most [`DEFAULT_SPACE_LAZY_SLACK_PAGES`]
//!   pages (1 MiB) and at most twice the request larger. A split installs a guard page in
//!   resident memory, a TLB shootdown while other threads run; the shim's size classes are a
//!   quarter of a doubling apart, so most splits left a rest of one or two classes. A split
//!   costs the same whatever the size, while the slack holds pages in proportion to it: small
//!   requests gain most from taking an area whole, and waste least doing so.

use crate::options::SpaceOptions;
use crate::space::VmSpace;
use vmarena_engine::ArenaOptions;
use vmarena_platform::fork_once::ForkOnce;
use vmarena_platform::limits;

/// A `ForkOnce`, not a `OnceLock`: a thread of the parent may have been building the space when
/// another one forked, and the child then builds its own (`crate::fork`).
static DEFAULT: ForkOnce<Result<VmSpace, String>> = ForkOnce::new();

pub use crate::options::DEFAULT_SPACE_BYTES;

/// The smallest reservation the default space tries when the process refuses larger ones.
pub const DEFAULT_SPACE_MIN_BYTES: u64 = 256 << 20;

/// The default space, or the reason it could not be created (for example when the address
/// space cannot be reserved). The first failure is reported on stderr once
/// (`exhaustion.rs`).
pub fn default_space() -> Result<&'static VmSpace, &'static str> {
    DEFAULT
        .get_or_init_shared(|| {
            crate::fork::register();
            let _inside = vmarena_platform::reentry::enter();
            build()
                .inspect(|s| s.report_exhaustion())
                .inspect_err(|e| crate::exhaustion::report_once(&format_args!("no default space: {e}")))
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

/// The default space's size when ThreadSanitizer is in the process (unless
/// `VMARENA_SPACE_BYTES` says otherwise): small enough to lie inside the range it checks.
const TSAN_SPACE_BYTES: u64 = 64 << 30;

/// The default space: with `VMARENA_SPACE_BYTES` set, that size or nothing; otherwise
/// [`DEFAULT_SPACE_BYTES`] fitted to the process, halved while the kernel (or valgrind's
/// address-space manager) refuses it, down to [`DEFAULT_SPACE_MIN_BYTES`], and growing by
/// further reservations of that size, fitted to the process again at each, when it is full.
fn build() -> Result<VmSpace, String> {
    let opts = default_space_space_options();
    let arena = default_space_options();
    if std::env::var_os("VMARENA_SPACE_BYTES").is_some() {
        return VmSpace::new("vmalloc", opts, arena);
    }
    let mut bytes = fit_to_process(opts.space_bytes).max(DEFAULT_SPACE_MIN_BYTES);
    let tsan = vmarena_platform::debug_tools::detect() & vmarena_platform::debug_tools::TSAN != 0;
    if tsan {
        // ThreadSanitizer watches only the top 1.5 TiB of the address space below the stack
        // (x86-64): a 1 TiB reservation placed under the program's mappings reaches below it,
        // where accesses go unchecked. For the same reason the space does not grow there.
        bytes = bytes.min(TSAN_SPACE_BYTES);
    }
    let mut first_error = None;
    loop {
        match VmSpace::new("vmalloc", SpaceOptions { space_bytes: bytes, ..opts.clone() }, arena.clone()) {
            // Full, it grows by further reservations, fitted to the process as this one was.
            Ok(s) if !tsan => return Ok(s.growing(fit_to_process, DEFAULT_SPACE_MIN_BYTES)),
            Ok(s) => return Ok(s),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        if bytes / 2 < DEFAULT_SPACE_MIN_BYTES {
            return Err(first_error.unwrap_or_default());
        }
        bytes /= 2;
    }
}

/// The share of what `RLIMIT_AS` leaves that the default space reserves: a quarter. The
/// reservation counts against the limit whether or not it is used, and what vmarena cannot
/// serve goes to the next allocator (under the shim) in what is left; a larger share would
/// make a program fail under a limit that it meets with malloc alone.
pub const RLIMIT_AS_SHARE_DIVISOR: u64 = 4;

/// `bytes`, or less where `RLIMIT_AS` leaves less room: a quarter of what the limit leaves above
/// the process's mappings now ([`RLIMIT_AS_SHARE_DIVISOR`]), less the space's state table (a
/// word per page), so that the program keeps the rest for its own mappings. Rounded down to
/// 2 MiB.
pub fn fit_to_process(bytes: u64) -> u64 {
    let Some(limit) = limits::address_space_limit() else {
        return bytes;
    };
    let room = limit.saturating_sub(limits::mapped_bytes()) / RLIMIT_AS_SHARE_DIVISOR;
    let page = vmarena_platform::page_size() as u64;
    let fitted = room / (page + 8) * page;
    bytes.min(fitted) & !((2 << 20) - 1)
}

/// Size pools of the default space: areas of up to 16 pages (64 KiB of 4 KiB pages).
pub const DEFAULT_SPACE_POOL_MAX_PAGES: u64 = 16;

/// The default space's thread caches hold areas of up to this many pages, the guard page
/// included: requests of up to 256 pages (1 MiB of 4 KiB pages, the kernel's pool range) are
/// reused from the thread's cache without a lock, as small ones are. The magazine's page
/// budget (`thread_cache_pages`, `thread_cache_pages_max`) still bounds what a thread holds.
pub const DEFAULT_SPACE_THREAD_CACHE_MAX_PAGES: u64 = 257;

/// The default space's lazy threshold, as a multiple of the kernel's `fls(CPUs) x 32 MiB`
/// ([`ArenaOptions::lazy_max`]): 128 MiB on 2 or 3 CPUs.
pub const DEFAULT_SPACE_LAZY_MAX_FACTOR: u64 = 2;

/// The default space's lazy slack: a lazy area at most this share larger than a request is
/// handed out whole instead of split.
pub const DEFAULT_SPACE_LAZY_SLACK_PERCENT: u64 = 50;

/// The default space's absolute slack: a lazy area at most this many pages (1 MiB of 4 KiB
/// pages) and at most twice the request larger is handed out whole too.
pub const DEFAULT_SPACE_LAZY_SLACK_PAGES: u64 = 256;

/// The default space's arena options: [`ArenaOptions::default`] with the pools stopping at
/// [`DEFAULT_SPACE_POOL_MAX_PAGES`], thread caches up to
/// [`DEFAULT_SPACE_THREAD_CACHE_MAX_PAGES`], [`DEFAULT_SPACE_LAZY_MAX_FACTOR`] times the kernel's lazy
/// threshold, and [`DEFAULT_SPACE_LAZY_SLACK_PERCENT`] and [`DEFAULT_SPACE_LAZY_SLACK_PAGES`] of slack,
/// then the environment (a malformed variable is reported on stderr and ignored, as
/// [`ArenaOptions::from_env`] does).
pub fn default_space_options() -> ArenaOptions {
    default_space_arena_defaults().with_env_or_report()
}

/// The default space's arena options before the environment is read.
fn default_space_arena_defaults() -> ArenaOptions {
    let kernel = ArenaOptions::default();
    ArenaOptions {
        pool_max_pages: DEFAULT_SPACE_POOL_MAX_PAGES,
        thread_cache_max_pages: DEFAULT_SPACE_THREAD_CACHE_MAX_PAGES,
        lazy_max_pages: DEFAULT_SPACE_LAZY_MAX_FACTOR * kernel.lazy_max(),
        lazy_slack_percent: DEFAULT_SPACE_LAZY_SLACK_PERCENT,
        lazy_slack_pages: DEFAULT_SPACE_LAZY_SLACK_PAGES,
        ..kernel
    }
}

/// The default space's space options before the environment is read.
fn default_space_space_defaults() -> SpaceOptions {
    SpaceOptions { huge_pages: false, space_bytes: DEFAULT_SPACE_BYTES, ..SpaceOptions::default() }
}

/// Where the default space (the C ABI's, the shim's, `VmAlloc`'s) departs from the options'
/// defaults, as the options tables print it: (option, the default space's value). A test holds
/// it equal to the code.
pub const DEFAULT_SPACE_DIFFERENCES: &[(&str, &str)] = &[
    ("huge_pages", "false"),
    ("lazy_max_pages", "2 x fls(CPUs) x 8192"),
    ("lazy_slack_pages", "256"),
    ("lazy_slack_percent", "50"),
    ("pool_max_pages", "16"),
    ("space_bytes", "1099511627776"),
    ("thread_cache_max_pages", "257"),
];

/// The default space's space options: [`SpaceOptions::default`] without huge pages, then the
/// environment (`VMARENA_HUGE_PAGES=1` asks for them). Every huge page the shim's areas made was
/// split again within the run (by partial purges, moves and the guard pages of areas that end
/// inside one), so they bought no lasting TLB reach, while their first touch zeroes 2 MiB at once,
/// which on a virtual machine whose host takes free memory back costs 4.3-5.5 ms against 0.78-1.23
/// ms for the same memory in 4 KiB faults (docs/bench-log/design-notes.md, section 14).
pub fn default_space_space_options() -> SpaceOptions {
    default_space_space_defaults().with_env_or_report()
}

/// The default space if it was created already (never creates it): for paths that only act on
/// memory the space may have handed out (frees, size queries, purges, fork handlers).
pub fn existing_default_space() -> Option<&'static VmSpace> {
    DEFAULT.get().and_then(|r| r.as_ref().ok())
}

#[cfg(test)]
mod tests {
    /// The list the options tables print is the code's: the same options differ, with the
    /// same values (the lazy threshold as its factor of the kernel's).
    #[test]
    fn the_listed_differences_are_the_default_spaces() {
        use super::*;
        let mut differ: Vec<(&str, String)> = Vec::new();
        let pairs = [
            (default_space_space_defaults().values(), SpaceOptions::default().values()),
            (default_space_arena_defaults().values(), ArenaOptions::default().values()),
        ];
        for (mine, base) in pairs {
            differ.extend(mine.into_iter().zip(base).filter(|(m, b)| m.1 != b.1).map(|(m, _)| m));
        }
        differ.sort();
        let names: Vec<&str> = differ.iter().map(|d| d.0).collect();
        let listed: Vec<&str> = DEFAULT_SPACE_DIFFERENCES.iter().map(|d| d.0).collect();
        assert_eq!(names, listed, "DEFAULT_SPACE_DIFFERENCES lists other options than the code changes");
        for (name, value) in &differ {
            let text = DEFAULT_SPACE_DIFFERENCES.iter().find(|d| d.0 == *name).unwrap().1;
            if *name == "lazy_max_pages" {
                assert_eq!(DEFAULT_SPACE_LAZY_MAX_FACTOR, 2);
                assert_eq!(value, &(2 * ArenaOptions::default().lazy_max()).to_string());
            } else {
                assert_eq!(text, value, "{name}");
            }
        }
    }

    use super::*;

    /// The four arena defaults and the space default that differ, and the headroom that does
    /// not, where the environment leaves them alone.
    #[test]
    fn the_default_space_differs_from_the_defaults_in_five_options() {
        let o = default_space_options();
        let kernel = ArenaOptions::default();
        if std::env::var_os("VMARENA_POOL_MAX_PAGES").is_none() {
            assert_eq!(o.pool_max_pages, DEFAULT_SPACE_POOL_MAX_PAGES);
            assert_ne!(o.pool_max_pages, kernel.pool_max_pages);
        }
        if std::env::var_os("VMARENA_LAZY_MAX_PAGES").is_none() {
            assert_eq!(o.lazy_max(), 2 * kernel.lazy_max());
            assert_eq!(kernel.lazy_max_pages, 0, "the arena default is the kernel's formula");
        }
        if std::env::var_os("VMARENA_LAZY_HEADROOM").is_none() {
            assert!(o.lazy_headroom && kernel.lazy_headroom, "the threshold rises below the live peak");
        }
        if std::env::var_os("VMARENA_HUGE_PAGES").is_none() {
            assert!(!default_space_space_options().huge_pages && SpaceOptions::default().huge_pages);
        }
        if std::env::var_os("VMARENA_LAZY_SLACK_PERCENT").is_none() {
            assert_eq!(o.lazy_slack_percent, DEFAULT_SPACE_LAZY_SLACK_PERCENT);
            assert_eq!(kernel.lazy_slack_percent, 0, "the kernel always splits");
        }
        if std::env::var_os("VMARENA_LAZY_SLACK_PAGES").is_none() {
            assert_eq!(o.lazy_slack_pages, DEFAULT_SPACE_LAZY_SLACK_PAGES);
            assert_eq!(kernel.lazy_slack_pages, 0, "the kernel always splits");
        }
    }
}
