//! `ForkOnce`: a value computed once per process, that a `fork()` in the middle of the
//! computation does not leave stuck in the child.
//!
//! Owns: one state word and the value. The word is `EMPTY`, `DONE`, or "running in process P"
//! (the process id of the thread computing the value). `fork()` copies only the calling thread:
//! when another thread was inside the computation, the child inherits a word that says
//! "running" with the parent's id, and no thread of its own will ever finish it. `std`'s
//! `OnceLock` waits for ever in that case (its first caller in the child blocks on a futex no
//! one will wake). Here a caller that finds the word running in another process id takes the
//! computation over; the parent's half-done work is not visible (the value is written before
//! `DONE` is published), so nothing half-built is read.
//!
//! Waiters in the process that runs the computation yield, then sleep in 50 us steps.
//! Computations are short (a syscall or two, building a space), so waiting is rare.
//!
//! Limit: a descendant whose process id equals the id recorded in the word (the original
//! process exited and its id was reused, and no process in between touched the value) would
//! wait for the computation of a process that is gone. Process ids are reused only after the
//! whole id range has been used up, which makes this unreachable in practice.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

const EMPTY: u64 = 0;
const DONE: u64 = 1;
/// Running: `RUNNING | pid << 2`.
const RUNNING: u64 = 2;

fn running_here() -> u64 {
    // SAFETY: getpid has no preconditions.
    RUNNING | (unsafe { libc::getpid() } as u64) << 2
}

/// See the module documentation.
pub struct ForkOnce<T> {
    state: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the value is written by one thread (the one that moved the word to running for its
// process) before DONE is stored with Release; it is read only after an Acquire load of DONE,
// and never written again.
unsafe impl<T: Send + Sync> Sync for ForkOnce<T> {}
// SAFETY: as above; the cell owns its value.
unsafe impl<T: Send> Send for ForkOnce<T> {}

impl<T> Default for ForkOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ForkOnce<T> {
    /// An empty cell.
    pub const fn new() -> Self {
        ForkOnce { state: AtomicU64::new(EMPTY), value: UnsafeCell::new(MaybeUninit::uninit()) }
    }

    /// The value if it has been computed.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == DONE {
            // SAFETY: DONE is published after the value was written (see `Sync`).
            Some(unsafe { (*self.value.get()).assume_init_ref() })
        } else {
            None
        }
    }

    /// The value, computed by `f` if no thread of this process has done so. `f` must not
    /// call `get_or_init` on the same cell.
    #[inline]
    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        match self.get() {
            Some(v) => v,
            None => self.init_slow(f),
        }
    }

    /// [`ForkOnce::get_or_init`] for a value that owns memory other threads then reach (a
    /// space, a pool): under ThreadSanitizer, which cannot see the state word, what the
    /// computing thread wrote happens before this thread goes on. The slow paths reach such
    /// values through here; `get` and `get_or_init` pay nothing for it.
    #[inline]
    pub fn get_or_init_shared(&self, f: impl FnOnce() -> T) -> &T {
        let v = self.get_or_init(f);
        if crate::debug_tools::present() & crate::debug_tools::TSAN != 0 {
            crate::debug_tools::tsan_acquire(self as *const Self as usize);
        }
        v
    }

    #[cold]
    fn init_slow(&self, f: impl FnOnce() -> T) -> &T {
        let me = running_here();
        let mut waits = 0u32;
        loop {
            let s = self.state.load(Ordering::Acquire);
            let take = match s {
                DONE => return self.get().expect("DONE"),
                EMPTY => true,
                // Running in a process that is not this one: its thread does not exist here.
                s => s != me,
            };
            if take && self.state.compare_exchange(s, me, Ordering::Acquire, Ordering::Acquire).is_ok() {
                // Reset to EMPTY if `f` unwinds, so that a later caller computes the value.
                struct Reset<'a>(&'a AtomicU64);
                impl Drop for Reset<'_> {
                    fn drop(&mut self) {
                        self.0.store(EMPTY, Ordering::Release);
                    }
                }
                let reset = Reset(&self.state);
                let v = f();
                std::mem::forget(reset);
                // SAFETY: this thread owns the computation (the word says running here, and
                // only this thread moved it there); nobody reads the value before DONE.
                unsafe { (*self.value.get()).write(v) };
                // (ThreadSanitizer: the computation happens before every `get`'s acquire; the
                // tools are known once the value is, the default space finding them.)
                crate::debug_tools::tsan_release(self as *const Self as usize);
                self.state.store(DONE, Ordering::Release);
                return self.get().expect("DONE");
            }
            if !take {
                waits += 1;
                if waits < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
        }
    }
}

impl<T> Drop for ForkOnce<T> {
    fn drop(&mut self) {
        if *self.state.get_mut() == DONE {
            // SAFETY: DONE means the value was written; `&mut self` means no reader is left.
            unsafe { self.value.get_mut().assume_init_drop() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn computes_once_across_threads() {
        static CELL: ForkOnce<usize> = ForkOnce::new();
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        let hs: Vec<_> = (0..8)
            .map(|i| {
                std::thread::spawn(move || {
                    *CELL.get_or_init(|| {
                        CALLS.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        i + 100
                    })
                })
            })
            .collect();
        let vals: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        assert!(vals.iter().all(|&v| v == vals[0]) && vals[0] >= 100);
    }

    #[test]
    fn a_computation_left_running_by_another_process_is_taken_over() {
        let cell: ForkOnce<u32> = ForkOnce::new();
        // What a child inherits when its parent's other thread was computing: running, in a
        // process id that is not the child's.
        cell.state.store(RUNNING | (u32::MAX as u64) << 2, Ordering::SeqCst);
        assert_eq!(*cell.get_or_init(|| 7), 7);
        assert_eq!(cell.get(), Some(&7));
    }

    #[test]
    fn a_panicking_computation_leaves_the_cell_empty() {
        let cell: ForkOnce<u32> = ForkOnce::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cell.get_or_init(|| panic!("no"))));
        assert!(r.is_err());
        assert_eq!(cell.get(), None);
        assert_eq!(*cell.get_or_init(|| 3), 3);
    }

    #[test]
    fn a_child_forked_during_the_computation_computes_its_own() {
        static CELL: ForkOnce<u64> = ForkOnce::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            CELL.get_or_init(|| {
                tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(300));
                1
            });
        });
        rx.recv().unwrap();
        // SAFETY: the child only computes a value, reads it and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: alarm is a watchdog: a hang here kills the child with SIGALRM.
            unsafe { libc::alarm(10) };
            let v = *CELL.get_or_init(|| 2);
            // SAFETY: leaving the forked child without running the parent's destructors.
            unsafe { libc::_exit(if v == 2 { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
        t.join().unwrap();
        assert_eq!(CELL.get(), Some(&1));
    }
}
