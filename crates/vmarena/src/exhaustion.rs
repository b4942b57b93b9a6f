//! The one line on stderr that says why the default space failed a request for lack of room
//! (or could not be created), with the limits that decide its size and the settings that change
//! them: printed once per process, by whichever of the C ABI, the shim and `VmAlloc` met it
//! first.
//!
//! Owns: one flag, set by the first report. Reads the limits without allocating
//! (`vmarena_platform::limits`); the line itself is formatted on the heap, which is allowed
//! here (never on a load-time path; under the shim the inside-vmarena flag sends it to the next
//! allocator).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use vmarena_platform::limits;

/// Say once, on stderr, why the default space failed a request or could not be created, with
/// the limits that decide its size and the settings that change them.
pub fn report_once(why: &dyn std::fmt::Display) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if REPORTED.swap(true, Relaxed) {
        return;
    }
    let rlimit = match limits::address_space_limit() {
        Some(b) => format!("{} MiB (ulimit -v)", b >> 20),
        None => "unlimited".into(),
    };
    let mode = match limits::overcommit_mode() {
        2 => "2 (strict: every committed byte is charged against the commit limit)",
        1 => "1 (always)",
        _ => "0 (heuristic)",
    };
    eprintln!(
        "vmarena: {why}. The default space's size comes from VMARENA_SPACE_BYTES, else {} GiB fitted to \
         the process and as many further reservations as it fills; address-space limit (RLIMIT_AS): {rlimit}; vm.overcommit_memory: {mode}. \
         Reported once.",
        crate::options::DEFAULT_SPACE_BYTES >> 30
    );
}
