//! The purge worker: one background thread per arena that runs purges so memory drops without
//! further calls.
//!
//! Owns: the thread and its wake-up state (a mutex and condition variable, never a spin lock).
//! The thread holds only a weak reference to the arena and upgrades it for each purge, so
//! dropping the arena stops it.
//!
//! It purges when:
//! - a free pushed the lazy pages over `lazy_max_pages` (the kernel's `drain_vmap_work`): a
//!   threshold purge, which keeps the most recently freed pages up to `purge_keep_percent`, or
//! - half of `decay_interval_ms` passed since its last purge or wake-up and some pages are lazy
//!   (the user-space addition): a decay purge, which releases the lazy memory freed before the
//!   previous tick and keeps what was freed since. Memory a program frees and does not reuse
//!   goes back between half an interval and one interval after its free; memory it keeps
//!   reusing is not released and faulted in again at every tick.
//!
//! After a decay purge the worker calls the process's idle hook, if one was set
//! ([`set_idle_hook`]); when it starts, the process's start hook ([`set_start_hook`]).
//!
//! The thread starts on the first wake-up, not at arena creation, so an arena that never frees
//! much never has one. After a `fork()` the child has no worker thread; the next wake-up in the
//! child starts a new one.

use vmarena_platform::fork_once::ForkOnce;

/// What the worker needs of the arena it purges for (under loom, where no worker runs, nothing
/// calls it).
#[cfg_attr(loom, allow(dead_code))]
pub(crate) trait Purged: Send + Sync {
    /// The decay interval (0: no idle purges).
    fn decay_interval_ms(&self) -> u64;

    /// The purge a free that passed the lazy limit asked for.
    fn threshold_purge(&self);

    /// A tick (half the decay interval) passed: give the thread caches' areas back and purge
    /// if anything is lazy. True on an idle tick: the purge released memory and kept none
    /// (nothing was freed since the previous tick).
    fn idle_purge(&self) -> bool;
}

/// What a worker calls after it purged the memory of an idle program (see [`set_idle_hook`]).
/// A `ForkOnce`, not std's `OnceLock`: a child forked while another thread of its parent was
/// setting a hook would otherwise wait for ever in its own first `set` (`tests/c/hostile.c`,
/// `fork_first_use`, about once in 5,000 forks).
static IDLE_HOOK: ForkOnce<fn()> = ForkOnce::new();

/// Set `cell` to `hook` if no hook is set: true when this call set it.
fn set_once(cell: &ForkOnce<fn()>, hook: fn()) -> bool {
    let mut set = false;
    cell.get_or_init(|| {
        set = true;
        hook
    });
    set
}

/// Have every purge worker call `hook` after a purge at the end of an idle interval that found
/// lazy memory (the decay purge: no large free for `decay_interval_ms`), on the worker's thread
/// with no lock held. Set once per process; false when a hook was set already. The preload
/// shim sets glibc's `malloc_trim` here, so that the next allocator's free memory of an idle
/// program falls with vmarena's.
pub fn set_idle_hook(hook: fn()) -> bool {
    set_once(&IDLE_HOOK, hook)
}

/// What a worker calls first, on its own thread (see [`set_start_hook`]; a `ForkOnce` as
/// [`IDLE_HOOK`] is).
static START_HOOK: ForkOnce<fn()> = ForkOnce::new();

/// Have every purge worker call `hook` when its thread starts, with no lock held. Set once per
/// process; false when a hook was set already. The `vmarena` crate starts its memory-pressure
/// monitor here: an arena holds nothing to give back before its first free, and its worker
/// starts at the first free or at a thread's first use of its thread cache, so the monitor is
/// there when there is something to give back, and its thread's start is not paid by the
/// call that started the worker.
pub fn set_start_hook(hook: fn()) -> bool {
    set_once(&START_HOOK, hook)
}

#[cfg(loom)]
pub(crate) use stub::Worker;
#[cfg(not(loom))]
pub(crate) use thread::Worker;

/// Under loom there is no background thread: models purge inline or from a model thread.
#[cfg(loom)]
mod stub {
    use super::Purged;
    use crate::sync::Arc;

    #[derive(Default)]
    pub(crate) struct Worker;

    impl Worker {
        pub fn wake<A: Purged + 'static>(&self, _arena: &Arc<A>) {}
        pub fn start<A: Purged + 'static>(&self, _arena: &Arc<A>) {}
        pub fn shutdown(&self) {}
    }
}

#[cfg(not(loom))]
mod thread {
    use super::Purged;
    use std::sync::{Arc, Condvar, Mutex, Weak};
    use std::thread::JoinHandle;
    use std::time::Duration;

    #[derive(Default)]
    struct State {
        wake: bool,
        shutdown: bool,
        thread: Option<JoinHandle<()>>,
        pid: u32,
    }

    /// See the module documentation.
    #[derive(Default)]
    pub(crate) struct Worker {
        state: Mutex<State>,
        cv: Condvar,
    }

    impl Worker {
        /// Wake the worker for a purge now, starting it if this process has none yet.
        pub fn wake<A: Purged + 'static>(self: &Arc<Self>, arena: &Arc<A>) {
            self.start_or_wake(arena, true);
        }

        /// Start the worker (for the decay interval) without asking for a purge now.
        pub fn start<A: Purged + 'static>(self: &Arc<Self>, arena: &Arc<A>) {
            self.start_or_wake(arena, false);
        }

        fn start_or_wake<A: Purged + 'static>(self: &Arc<Self>, arena: &Arc<A>, wake: bool) {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.shutdown {
                return;
            }
            st.wake |= wake;
            let pid = std::process::id();
            if st.thread.is_none() || st.pid != pid {
                if st.pid != pid {
                    // Inherited from the parent across fork(): that thread does not exist here.
                    std::mem::forget(st.thread.take());
                }
                let arena_dyn: Arc<dyn Purged> = arena.clone();
                let weak = Arc::downgrade(&arena_dyn);
                let me = self.clone();
                let spawned = vmarena_platform::helper_thread::spawn("vmarena-purge", move || run(me, weak));
                match spawned {
                    Ok(h) => {
                        st.thread = Some(h);
                        st.pid = pid;
                    }
                    Err(_) => {
                        // No thread to be had: purge on this thread instead.
                        drop(st);
                        if wake {
                            arena.threshold_purge();
                        }
                        return;
                    }
                }
            }
            self.cv.notify_one();
        }

        /// The state mutex, held (for a `fork()`: see `fork`).
        pub fn lock_for_fork(&self) -> Box<dyn crate::sync::fork::Held + '_> {
            Box::new(self.state.lock().unwrap_or_else(|e| e.into_inner()))
        }

        /// Stop the worker and wait for it (unless called from the worker itself).
        pub fn shutdown(&self) {
            let handle = {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.shutdown = true;
                self.cv.notify_all();
                if st.pid == std::process::id() {
                    st.thread.take()
                } else {
                    None
                }
            };
            if let Some(h) = handle {
                if h.thread().id() != std::thread::current().id() {
                    let _ = h.join();
                }
            }
        }
    }

    fn run(w: Arc<Worker>, weak: Weak<dyn Purged>) {
        // `helper_thread::spawn` raised the inside-vmarena flag for good and blocked signals.
        if let Some(hook) = super::START_HOOK.get() {
            hook();
        }
        loop {
            let Some(arena) = weak.upgrade() else { return };
            let interval = arena.decay_interval_ms();
            // Wait without holding the arena alive, so dropping it can stop this thread.
            drop(arena);
            let woken = {
                let mut st = w.state.lock().unwrap_or_else(|e| e.into_inner());
                while !st.wake && !st.shutdown {
                    if interval == 0 {
                        st = w.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                    } else {
                        let (s, timeout) =
                            w.cv.wait_timeout(st, Duration::from_millis((interval / 2).max(1)))
                                .unwrap_or_else(|e| e.into_inner());
                        st = s;
                        if timeout.timed_out() {
                            break;
                        }
                    }
                }
                if st.shutdown {
                    return;
                }
                std::mem::take(&mut st.wake)
            };
            let Some(arena) = weak.upgrade() else { return };
            if woken {
                arena.threshold_purge();
            } else if arena.idle_purge() {
                // An idle interval: thread caches gave their areas back, so that the memory
                // of a program that stopped allocating falls like the rest.
                if let Some(hook) = super::IDLE_HOOK.get() {
                    hook();
                }
            }
        }
    }
}
