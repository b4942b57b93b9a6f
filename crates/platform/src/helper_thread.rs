//! Threads vmarena starts for itself (the purge worker, the low-memory monitor): every signal
//! blocked, and the inside-vmarena flag raised for their whole life.
//!
//! A process-directed signal (`kill(pid, SIGTERM)`) goes to any thread that does not block it.
//! A program that blocks SIGTERM in its threads and waits for it with `sigtimedwait` would have
//! it delivered to a helper thread instead, whose default action ends the process. The helper
//! inherits its signal mask from the thread that creates it, so the creator blocks every signal
//! around the creation and restores its own mask right after.

use std::io;
use std::thread::JoinHandle;

/// Start `f` on a new thread named `name` with every signal blocked.
pub fn spawn<F>(name: &str, f: F) -> io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to sigsets of our own.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let r = std::thread::Builder::new().name(name.into()).spawn(move || {
        crate::reentry::mark_thread();
        f()
    });
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(sig: i32) -> bool {
        // SAFETY: sigset_t is plain data; pthread_sigmask with a null new set only reads.
        let mut cur: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
            libc::sigismember(&cur, sig) == 1
        }
    }

    #[test]
    fn the_helper_blocks_every_signal_and_the_creator_keeps_its_mask() {
        assert!(!blocked(libc::SIGTERM));
        let h = spawn("test-helper", || {
            assert!(blocked(libc::SIGTERM) && blocked(libc::SIGUSR1) && blocked(libc::SIGINT));
            assert!(crate::reentry::inside());
        })
        .unwrap();
        h.join().unwrap();
        assert!(!blocked(libc::SIGTERM), "the creator's mask is restored");
    }
}
