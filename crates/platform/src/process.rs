//! Process figures for tests and the lab: RSS, page-table memory, faults, cycles.

/// A time-stamp counter read (cycles on x86_64; nanoseconds elsewhere).
#[inline]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc is available on every x86_64 CPU and has no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn status_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resident set size in bytes (`VmRSS`).
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:").unwrap_or(0) * 1024
}

/// Peak resident set size in bytes (`VmHWM`).
pub fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:").unwrap_or(0) * 1024
}

/// Page-table memory in bytes (`VmPTE`).
pub fn page_table_bytes() -> u64 {
    status_kib("VmPTE:").unwrap_or(0) * 1024
}

/// Minor page faults of this process so far.
pub fn minor_faults() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_minflt as u64
}

/// Resident bytes of `[addr, addr + len)` (page aligned `addr`), by `mincore` in 1 GiB steps.
pub fn resident_bytes(addr: usize, len: usize) -> u64 {
    let page = crate::page_size();
    const STEP: usize = 1 << 30;
    let mut vec = vec![0u8; STEP.min(len).div_ceil(page)];
    let mut total = 0u64;
    let mut at = addr;
    while at < addr + len {
        let l = STEP.min(addr + len - at);
        let n = l.div_ceil(page);
        // SAFETY: vec has at least one byte per page of the range; the range is a mapping of
        // this process.
        let r = unsafe { libc::mincore(at as *mut libc::c_void, l, vec.as_mut_ptr()) };
        if r == 0 {
            total += vec[..n].iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64;
        }
        at += l;
    }
    total
}
