//! Low-memory events: the explicit [`pressure`] call and the PSI monitor.
//!
//! Every cache in vmarena registers with the engine's low-memory registry
//! (`vmarena_engine::pressure`): each arena (a space's pools and lazy areas: a full decay, the
//! shrinker) and each [`FixedPool`](crate::FixedPool) (the memory of its free slots). A
//! low-memory event calls all of them.
//!
//! Two things raise the event: [`pressure`] (C: `vmarena_pressure()`), and a monitor thread,
//! started by the first purge worker of a space on its own thread (a space's worker starts
//! with the space's first use; a space without one starts the monitor as it is built) or by
//! the first fixed pool, that reads the Linux PSI memory stall total once a window
//! (`vmarena_platform::psi`) and raises the event when the window's stall reached
//! `psi_stall_us`: what a PSI trigger would report, without arming one (a trigger makes the
//! process's exit wait for an RCU grace period; see that module). Where PSI is not available
//! (no `CONFIG_PSI`, no `/proc/pressure`), or `VMARENA_PSI=0`, no thread is started and
//! [`monitor_status`] says why; memory then goes back only through the purge worker's decay and
//! explicit calls.
//!
//! The monitor thread holds no lock while it sleeps and keeps no space alive (the registry
//! holds weak references). It is not restarted in a child after `fork()`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use vmarena_engine::options_table;
use vmarena_engine::pressure::PressureReport;
use vmarena_platform::fork_once::ForkOnce;
use vmarena_platform::psi::PsiStall;

options_table! {
    /// How low-memory events are detected (read from the environment once per process).
    pub struct PressureOptions {
        /// Watch Linux PSI memory pressure and raise a low-memory event when it fires.
        psi: bool = true, "bool", "VMARENA_PSI";
        /// Memory stall ("some") within one window that raises a low-memory event.
        psi_stall_us: u64 = 100_000, "us", "VMARENA_PSI_STALL_US";
        /// How often the stall total is read: one window (at least 10 ms).
        psi_window_us: u64 = 2_000_000, "us", "VMARENA_PSI_WINDOW_US";
    }
}

/// What the PSI monitor is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MonitorStatus {
    /// A thread reads this file once a window.
    Watching {
        /// The `memory.pressure` file.
        path: String,
        /// The rule, as a trigger line would state it: `some <stall_us> <window_us>`.
        rule: String,
    },
    /// `VMARENA_PSI=0`.
    Disabled,
    /// PSI could not be armed; why.
    Unavailable(String),
}

/// The shortest window the monitor reads at (a smaller setting is raised to it).
const MIN_WINDOW_US: u64 = 10_000;

static MONITOR: ForkOnce<MonitorStatus> = ForkOnce::new();
static PSI_EVENTS: AtomicU64 = AtomicU64::new(0);

/// Start the PSI monitor unless it was started (or found unavailable) before.
pub fn start_monitor() -> &'static MonitorStatus {
    MONITOR.get_or_init(|| {
        let opts = PressureOptions::from_env();
        if !opts.psi {
            return MonitorStatus::Disabled;
        }
        let psi = match PsiStall::open() {
            Ok(p) => p,
            Err(why) => return MonitorStatus::Unavailable(why),
        };
        let mut last = match psi.some_total_us() {
            Ok(t) => t,
            Err(why) => return MonitorStatus::Unavailable(why),
        };
        let window = std::time::Duration::from_micros(opts.psi_window_us.max(MIN_WINDOW_US));
        let status = MonitorStatus::Watching {
            path: psi.path().display().to_string(),
            rule: format!("some {} {}", opts.psi_stall_us, window.as_micros()),
        };
        let spawned = vmarena_platform::helper_thread::spawn("vmarena-psi", move || loop {
            std::thread::sleep(window);
            let Ok(now) = psi.some_total_us() else { return };
            if now.saturating_sub(last) >= opts.psi_stall_us {
                PSI_EVENTS.fetch_add(1, Relaxed);
                vmarena_engine::pressure::signal();
            }
            last = now;
        });
        match spawned {
            Ok(_) => status,
            Err(e) => MonitorStatus::Unavailable(format!("cannot start the monitor thread: {e}")),
        }
    })
}

/// Start the monitor when the first purge worker of the process starts, on that worker's
/// thread (`vmarena_engine::set_start_hook`).
pub(crate) fn start_with_first_worker() {
    vmarena_engine::set_start_hook(|| {
        start_monitor();
    });
}

/// The monitor's state, if it was started.
pub fn monitor_status() -> Option<&'static MonitorStatus> {
    MONITOR.get()
}

/// Raise a low-memory event now: every space shrinks (lazy areas released, pools drained) and
/// every fixed pool releases the memory of its free slots. Returns what each gave back.
pub fn pressure() -> PressureReport {
    let _inside = vmarena_platform::reentry::enter();
    vmarena_engine::pressure::signal()
}

/// Low-memory events so far: `(all, from PSI)`.
pub fn events() -> (u64, u64) {
    (vmarena_engine::pressure::events(), PSI_EVENTS.load(Relaxed))
}
