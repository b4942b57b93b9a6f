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
    Usage::now().minor_faults
}

/// TLB shootdown interrupts all CPUs have taken since boot: the `TLB` row of
/// `/proc/interrupts`, or `None` where the kernel has no such row (not x86). Machine-wide, so
/// the difference over a run counts every process's shootdowns: it is this program's only on
/// an otherwise quiet machine. A shootdown is the interrupt one CPU sends another that runs
/// the same address space when a mapping changes (a release, a move, an unmap).
pub fn tlb_shootdowns() -> Option<u64> {
    tlb_shootdowns_in(&std::fs::read_to_string("/proc/interrupts").ok()?)
}

/// The sum of the per-CPU counts on the `TLB:` row of a `/proc/interrupts` text; `None` when
/// there is no such row or it starts with no count.
pub fn tlb_shootdowns_in(text: &str) -> Option<u64> {
    let row = text.lines().find(|l| l.trim_start().starts_with("TLB:"))?;
    let mut counts = row.trim_start()["TLB:".len()..].split_whitespace().map_while(|w| w.parse::<u64>().ok());
    let first = counts.next()?;
    Some(first + counts.sum::<u64>())
}

/// Resource use of the whole process so far (`getrusage(RUSAGE_SELF)`, every thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time in user mode.
    pub user_ns: u64,
    /// CPU time in the kernel.
    pub sys_ns: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Context switches because a thread waited (sleep, futex, I/O).
    pub voluntary_switches: u64,
    /// Context switches forced by the scheduler.
    pub involuntary_switches: u64,
}

impl Usage {
    /// The figures now.
    pub fn now() -> Usage {
        // SAFETY: an all-zero rusage is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: ru is a valid out-pointer.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        Usage {
            user_ns: ns(ru.ru_utime),
            sys_ns: ns(ru.ru_stime),
            minor_faults: ru.ru_minflt as u64,
            voluntary_switches: ru.ru_nvcsw as u64,
            involuntary_switches: ru.ru_nivcsw as u64,
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            sys_ns: self.sys_ns.saturating_sub(earlier.sys_ns),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            voluntary_switches: self.voluntary_switches.saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self.involuntary_switches.saturating_sub(earlier.involuntary_switches),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tlb_shootdowns_sum_the_tlb_row_and_stop_at_its_label() {
        let text = "           CPU0       CPU1\n  0:         44          0   IO-APIC    2-edge      timer\n\
                    CAL:      52179      48230   Function call interrupts\n\
                    TLB:       1290        731   TLB shootdowns\n";
        assert_eq!(tlb_shootdowns_in(text), Some(2021));
        assert_eq!(tlb_shootdowns_in("CAL: 1 2 Function call interrupts\n"), None);
        assert_eq!(tlb_shootdowns_in("TLB: TLB shootdowns\n"), None, "a row without counts");
    }

    #[test]
    fn tlb_shootdowns_of_this_machine_parse_and_never_go_down() {
        let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
        let has_row = text.lines().any(|l| l.trim_start().starts_with("TLB:"));
        // Where the kernel has the row, the live reading must parse: a format the parser
        // missed would otherwise leave every report without the figure.
        assert_eq!(tlb_shootdowns().is_some(), has_row, "TLB row present: {has_row}");
        if let Some(a) = tlb_shootdowns() {
            assert!(tlb_shootdowns().unwrap() >= a);
        }
    }
}
