//! Statistics from C: the default space's figures as a struct (`vmarena_stats`), as JSON
//! (`vmarena_stats_json`) and as `/proc/vmallocinfo` text (`vmarena_vmallocinfo`), and
//! `VMARENA_STATS=1`, which prints the JSON on stderr when the program exits.
//!
//! Owns: the kept duplicate of stderr the exit line goes to.
//!
//! Before the default space exists every figure is 0, the JSON says so and the vmallocinfo text
//! is empty: nothing here builds the space. The text functions follow `snprintf`: they write at
//! most `len` bytes, NUL included, and return the length of the whole text.
#![allow(unsafe_code)]

use super::ffi::{guarded, write_sized};
use crate::default_space::existing_default_space;
use std::fmt::Write;
use vmarena_engine::ArenaStats;
use vmarena_platform::fork_once::ForkOnce;
use vmarena_platform::kept_fd::KeptFd;

/// Statistics in `struct vmarena_stats` after its `size`.
const STATS: usize = ArenaStats::TABLE.len();

/// `struct vmarena_stats` of the header: its size in bytes, then the arena's statistics in the
/// table's order (`docs/options.md`, "Arena statistics"), each a `uint64_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StatsC {
    /// Set by the caller to the bytes it has room for; set by the library to the bytes filled.
    pub size: u64,
    /// The statistics, in table order.
    pub values: [u64; STATS],
}

/// The default space's arena statistics, every one 0 before the space exists.
fn arena_stats() -> ArenaStats {
    existing_default_space().map(|s| s.stats(false).arena).unwrap_or_default()
}

/// `int vmarena_stats(struct vmarena_stats *out);` 0; -EINVAL (errno EINVAL) for NULL or a
/// `size` below 8 (nothing written).
///
/// # Safety
/// `out` is NULL or points to `out->size` writable bytes whose first 8 hold that size.
#[no_mangle]
pub unsafe extern "C" fn vmarena_stats(out: *mut StatsC) -> libc::c_int {
    guarded(-libc::EFAULT, || fill_stats(out, &arena_stats()))
}

/// Write `stats` (in table order) into the caller's `out` as `vmarena_stats` does: 0, or
/// -EINVAL with errno for NULL or a `size` below 8.
pub(super) fn fill_stats(out: *mut StatsC, stats: &ArenaStats) -> libc::c_int {
    let mut c = StatsC { size: 0, values: [0; STATS] };
    for (w, (_, v)) in c.values.iter_mut().zip(stats.values()) {
        *w = v;
    }
    write_sized(out, &c)
}

/// `struct vmarena_lock_class` of the header: one lock class's figures.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct LockClassC {
    /// Times a lock of the class was taken.
    pub acquisitions: u64,
    /// Times the first attempt found it taken.
    pub contended: u64,
    /// Nanoseconds spent waiting on contended acquisitions.
    pub wait_ns: u64,
    /// Nanoseconds held (measured only while lock timing is on).
    pub hold_ns: u64,
}

/// `struct vmarena_lock_stats` of the header: `size`, then the classes of the three strategies
/// (the ones a space's strategy lacks stay 0).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct LockStatsC {
    /// As `struct vmarena_stats`' size.
    pub size: u64,
    /// Global: the one lock.
    pub global: LockClassC,
    /// Split and Nodes: the free tree's lock.
    pub free: LockClassC,
    /// Split: the busy map's lock.
    pub busy: LockClassC,
    /// Nodes: the node locks, summed.
    pub node: LockClassC,
}

/// Fill the caller's `out` with the lock figures of `space` (zeros for none), as
/// [`fill_stats`] fills statistics: 0, or -EINVAL with errno for NULL or a `size` below 8.
pub(super) fn fill_lock_stats(out: *mut LockStatsC, space: Option<&crate::VmSpace>) -> libc::c_int {
    let mut all = LockStatsC::default();
    for (class, l) in space.map(|s| s.lock_stats()).unwrap_or_default() {
        let c = LockClassC {
            acquisitions: l.acquisitions,
            contended: l.contended,
            wait_ns: l.wait_ns,
            hold_ns: l.hold_ns,
        };
        match class {
            "global" => all.global = c,
            "free" => all.free = c,
            "busy" => all.busy = c,
            "node" => all.node = c,
            _ => {}
        }
    }
    write_sized(out, &all)
}

/// `int vmarena_lock_stats(struct vmarena_lock_stats *out);` the default space's lock figures
/// by class (zeros before it exists); 0, or -EINVAL for NULL or a `size` below 8.
///
/// # Safety
/// As [`vmarena_stats`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_lock_stats(out: *mut LockStatsC) -> libc::c_int {
    guarded(-libc::EFAULT, || fill_lock_stats(out, existing_default_space()))
}

/// The default space's figures as one line of JSON: its name, the arena's statistics, the
/// space's own figures and the lock figures by lock class.
pub(crate) fn stats_json() -> String {
    // One snapshot: the arena's table and the space's own figures come from the same reading.
    let space = existing_default_space();
    let st = space.map(|s| s.stats(false));
    let mut out = String::from("{");
    match space {
        None => out.push_str("\"space\":null,\"arena\":{"),
        Some(s) => {
            let _ = write!(out, "\"space\":\"{}\",\"arena\":{{", s.name());
        }
    }
    let arena = st.as_ref().map(|st| st.arena.clone()).unwrap_or_default();
    for (i, (name, v)) in arena.values().into_iter().enumerate() {
        let _ = write!(out, "{}\"{name}\":{v}", if i > 0 { "," } else { "" });
    }
    out.push('}');
    if let (Some(s), Some(st)) = (space, st) {
        let _ = write!(
            out,
            ",\"space_figures\":{{\"vzalloc_memsets\":{},\"guard_calls\":{},\"map_calls\":{},\
             \"mapped_areas\":{},\"vmap_blocks\":{},\"map_ram_lingering\":{},\"huge_advised\":{},\
             \"huge_small\":{},\"huge_refused\":{},\"hugetlb_mapped\":{},\"hugetlb_refused\":{},\
             \"committed_bytes\":{},\"extensions\":{},\"extension_live_areas\":{},\"extension_live_pages\":{}}}",
            st.vzalloc_memsets,
            st.guard_calls,
            st.map_calls,
            st.mapped_areas,
            st.vmap_blocks,
            st.map_ram_lingering,
            st.huge_advised,
            st.huge_small,
            st.huge_refused,
            st.hugetlb_mapped,
            st.hugetlb_refused,
            s.committed_bytes(),
            st.extensions,
            st.extension_live_areas,
            st.extension_live_pages
        );
        out.push_str(",\"locks\":{");
        for (i, (class, l)) in s.lock_stats().into_iter().enumerate() {
            let _ = write!(
                out,
                "{}\"{class}\":{{\"acquisitions\":{},\"contended\":{},\"wait_ns\":{},\"hold_ns\":{}}}",
                if i > 0 { "," } else { "" },
                l.acquisitions,
                l.contended,
                l.wait_ns,
                l.hold_ns
            );
        }
        out.push('}');
    }
    out.push('}');
    out
}

/// Copy `text` into `buf` as `snprintf` would: at most `len` bytes, NUL included; the length of
/// the whole text.
fn copy_out(text: &str, buf: *mut libc::c_char, len: usize) -> usize {
    if !buf.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: the header requires `buf` to hold `len` writable bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}

/// `size_t vmarena_stats_json(char *buf, size_t len);` the figures as JSON (see
/// `stats_json`), `snprintf`-like; 0 after a caught panic.
///
/// # Safety
/// `buf` is NULL (with any `len`: only the length is returned) or holds `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn vmarena_stats_json(buf: *mut libc::c_char, len: usize) -> usize {
    guarded(0, || copy_out(&stats_json(), buf, len))
}

/// `size_t vmarena_vmallocinfo(char *buf, size_t len);` the default space's areas in
/// `/proc/vmallocinfo`'s format, `snprintf`-like (empty before the space exists).
///
/// # Safety
/// As [`vmarena_stats_json`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmallocinfo(buf: *mut libc::c_char, len: usize) -> usize {
    guarded(0, || {
        let text = existing_default_space().map(|s| s.vmallocinfo()).unwrap_or_default();
        copy_out(&text, buf, len)
    })
}

/// Where the exit line goes: a duplicate of stderr taken at load, kept as vmarena keeps its
/// descriptors (high, close-on-exec, checked before use), so that a program that closes stderr
/// in its own exit handlers, or puts a file of its own at descriptor 2, gets no line in it.
static OUT: ForkOnce<Option<KeptFd>> = ForkOnce::new();

/// At load: with `VMARENA_STATS=1`, keep a duplicate of stderr and print the figures when the
/// program exits. Nothing is printed when stderr is closed at load.
pub(crate) fn at_load() {
    // SAFETY: a NUL-terminated name; the value is read before any thread of the program runs.
    let v = unsafe { libc::getenv(c"VMARENA_STATS".as_ptr()) };
    // SAFETY: `v` is NULL or a NUL-terminated string of the environment.
    if v.is_null() || unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes() != b"1" {
        return;
    }
    let out = OUT.get_or_init(|| {
        // SAFETY: duplicates descriptor 2, if open, to a new close-on-exec descriptor.
        let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        (fd >= 0).then(|| KeptFd::adopt(fd).ok()).flatten()
    });
    if out.is_some() {
        // SAFETY: registers a plain function that takes no argument.
        unsafe { libc::atexit(print_at_exit) };
    }
}

/// Print `vmarena stats: <JSON>` on the kept duplicate of stderr, while it is still the file it
/// was at load.
extern "C" fn print_at_exit() {
    guarded((), || {
        let Some(fd) = OUT.get().and_then(Option::as_ref).and_then(KeptFd::get) else { return };
        let line = format!("vmarena stats: {}\n", stats_json());
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            // SAFETY: writes bytes of `line` to a descriptor vmarena holds.
            let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
            if n <= 0 {
                break;
            }
            rest = &rest[n as usize..];
        }
    })
}
