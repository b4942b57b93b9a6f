//! What the process may map: the mapping-count limit (`vm.max_map_count`), the address-space
//! limit (`RLIMIT_AS`), the overcommit mode (`vm.overcommit_memory`), and what it maps now.
//!
//! Owns nothing but the cached answers (the sysctls, read once per process). Every read here
//! allocates nothing: a file under `/proc` is read into a buffer on the stack with plain
//! `open`/`read`, so these can run on load-time and failure paths, and inside an allocator.

use crate::fork_once::ForkOnce;

/// The kernel's default `vm.max_map_count`.
pub const DEFAULT_MAX_MAP_COUNT: u64 = 65_530;

/// The first unsigned integer in the file at `path` (a NUL-terminated path), or `None` when it
/// cannot be read.
fn read_u64(path: &core::ffi::CStr) -> Option<u64> {
    let mut buf = [0u8; 64];
    // SAFETY: a valid NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: reads at most the buffer's length into the buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: our own descriptor, opened above.
    unsafe { libc::close(fd) };
    if n <= 0 {
        return None;
    }
    parse_u64(&buf[..n as usize])
}

/// The first run of decimal digits in `text`, after leading blanks.
fn parse_u64(text: &[u8]) -> Option<u64> {
    let digits = text.iter().skip_while(|b| b.is_ascii_whitespace()).take_while(|b| b.is_ascii_digit());
    let mut v: u64 = 0;
    let mut any = false;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        any = true;
    }
    any.then_some(v)
}

/// `vm.max_map_count`: the most mappings the process may have (read once; the kernel's default
/// where the file cannot be read).
pub fn max_map_count() -> u64 {
    static N: ForkOnce<u64> = ForkOnce::new();
    *N.get_or_init(|| read_u64(c"/proc/sys/vm/max_map_count").unwrap_or(DEFAULT_MAX_MAP_COUNT))
}

/// Mappings vmarena may add to the process on its own account (page moves): an eighth of
/// [`max_map_count`], at most `cap`. The other seven eighths stay the program's: its threads'
/// stacks, its libraries and its own mappings.
pub fn map_budget(cap: u64) -> u64 {
    (max_map_count() / 8).min(cap)
}

/// `vm.overcommit_memory` (0 heuristic, 1 always, 2 strict: `MAP_NORESERVE` is ignored and
/// every writable private mapping is charged in full against the commit limit). Read once.
pub fn overcommit_mode() -> u64 {
    static N: ForkOnce<u64> = ForkOnce::new();
    *N.get_or_init(|| read_u64(c"/proc/sys/vm/overcommit_memory").unwrap_or(0))
}

/// The soft `RLIMIT_AS` in bytes, `None` when unlimited. Read on every call (a program may
/// change it).
pub fn address_space_limit() -> Option<u64> {
    // SAFETY: rlimit is plain data filled in by getrlimit.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to our rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(r.rlim_cur)
}

/// The process's mapped bytes now (`VmSize`, the first field of `/proc/self/statm` in pages),
/// which `RLIMIT_AS` bounds; 0 when it cannot be read.
pub fn mapped_bytes() -> u64 {
    read_u64(c"/proc/self/statm").unwrap_or(0).saturating_mul(crate::page_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_first_number() {
        assert_eq!(parse_u64(b"65530\n"), Some(65530));
        assert_eq!(parse_u64(b"  12 34"), Some(12));
        assert_eq!(parse_u64(b"x1"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"99999999999999999999999"), None);
    }

    #[test]
    fn reads_the_system_and_the_process() {
        let n = max_map_count();
        let text = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap();
        assert_eq!(n, text.trim().parse::<u64>().unwrap());
        assert_eq!(map_budget(8192), (n / 8).min(8192));
        assert!(overcommit_mode() <= 2);
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().next().unwrap().parse().unwrap();
        // The process maps more as the test runs, never less than a few pages.
        assert!(mapped_bytes() >= pages * crate::page_size() as u64 / 2);
    }
}
