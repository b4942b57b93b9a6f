//! Low-memory events: the explicit [`pressure`] call and the PSI monitor.
//!
//! Every cache in vmarena registers with the engine's low-memory registry
//! (`vmarena_engine::pressure`): each arena (a space's pools and lazy areas: a full decay, the
//! shrinker) and each [`FixedPool`](crate::FixedPool) (the memory of its free slots). A
//! low-memory event calls all of them.
//!
//! Two things raise the event: [`pressure`] (C: `vmarena_pressure()`), and a monitor thread,
//! started with the first space, that waits on a Linux PSI memory trigger
//! (`vmarena_platform::psi`). Where PSI is not available (no `CONFIG_PSI`, a window the kernel
//! refuses to an unprivileged process, no `/proc/pressure`), or `VMARENA_PSI=0`, no thread is
//! started and [`monitor_status`] says why; memory then goes back only through the purge
//! worker's decay and explicit calls.
//!
//! The monitor thread holds no lock while it waits and keeps no space alive (the registry holds
//! weak references). It is not restarted in a child after `fork()`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use vmarena_engine::options_table;
use vmarena_engine::pressure::PressureReport;
use vmarena_platform::fork_once::ForkOnce;
use vmarena_platform::psi::PsiTrigger;

options_table! {
    /// How low-memory events are detected (read from the environment once per process).
    pub struct PressureOptions {
        /// Watch Linux PSI memory pressure and raise a low-memory event when it fires.
        psi: bool = true, "bool", "VMARENA_PSI";
        /// Memory stall ("some") within one window that fires the trigger.
        psi_stall_us: u64 = 100_000, "us", "VMARENA_PSI_STALL_US";
        /// PSI window; unprivileged processes need a multiple of 2 s.
        psi_window_us: u64 = 2_000_000, "us", "VMARENA_PSI_WINDOW_US";
    }
}

/// What the PSI monitor is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MonitorStatus {
    /// A thread waits on this file with this trigger line.
    Watching {
        /// The `memory.pressure` file.
        path: String,
        /// The trigger line written to it.
        trigger: String,
    },
    /// `VMARENA_PSI=0`.
    Disabled,
    /// PSI could not be armed; why.
    Unavailable(String),
}

static MONITOR: ForkOnce<MonitorStatus> = ForkOnce::new();
static PSI_EVENTS: AtomicU64 = AtomicU64::new(0);

/// Start the PSI monitor unless it was started (or found unavailable) before.
pub fn start_monitor() -> &'static MonitorStatus {
    MONITOR.get_or_init(|| {
        let opts = PressureOptions::from_env();
        if !opts.psi {
            return MonitorStatus::Disabled;
        }
        let t = match PsiTrigger::open(opts.psi_stall_us, opts.psi_window_us) {
            Ok(t) => t,
            Err(why) => return MonitorStatus::Unavailable(why),
        };
        let status =
            MonitorStatus::Watching { path: t.path().display().to_string(), trigger: t.line().to_string() };
        let spawned = vmarena_platform::helper_thread::spawn("vmarena-psi", move || loop {
            match t.wait(-1) {
                Ok(true) => {
                    PSI_EVENTS.fetch_add(1, Relaxed);
                    vmarena_engine::pressure::signal();
                }
                Ok(false) => {}
                Err(_) => return,
            }
        });
        match spawned {
            Ok(_) => status,
            Err(e) => MonitorStatus::Unavailable(format!("cannot start the monitor thread: {e}")),
        }
    })
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
