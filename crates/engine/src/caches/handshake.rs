//! `Handshake`: how the owner of a thread-cache magazine and a drainer on another thread agree
//! on who may touch the magazine, with no locked instruction on the owner's side.
//!
//! Owns: two flags. `in_op` is written only by the owner (true while it is inside an
//! operation); `control` says `RUN` (the owner may use the magazine), `STEAL` (a drainer is
//! emptying it) or `DRAIN` (the owner must empty it itself at its next operation).
//!
//! It is Dekker's mutual exclusion with asymmetric fences. The owner stores `in_op`, then loads
//! `control`; the drainer stores `control`, then loads `in_op`. Each side needs a store-load
//! barrier between the two. The owner's is only a compiler fence; the drainer's is
//! [`heavy_fence`], a `membarrier` that runs a full barrier on every running thread of the
//! process (and a thread not running passes one at its next context switch). So either the
//! drainer sees `in_op` set and leaves the magazine to its owner (`DRAIN`), or the owner sees
//! `control` changed and keeps off. Under `--cfg loom` both fences are `SeqCst` fences, the
//! symmetric form the model can check (tests/loom.rs).
//!
//! Protocol (the magazine's contents are touched only between a `Go` and `leave`, or by a
//! drainer between `settle() == true` and `release`, or by the owner between
//! `claim_drain() == true` and `release`):
//!
//! ```text
//! owner:   enter() -> Go: use, leave()  |  Drain: claim_drain()? empty it, release()  |  Busy
//! drainer: mark()? ... heavy_fence() ... settle(fenced)? empty it, release()
//! ```

use crate::sync::Ordering::{Acquire, Relaxed, Release, SeqCst};
use crate::sync::{AtomicBool, AtomicU8};

const RUN: u8 = 0;
const STEAL: u8 = 1;
const DRAIN: u8 = 2;

/// What [`Handshake::enter`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enter {
    /// The owner may use the magazine until [`Handshake::leave`].
    Go,
    /// A drainer asked the owner to empty it: call [`Handshake::claim_drain`].
    Drain,
    /// A drainer is emptying it now: do without it this time.
    Busy,
}

/// The two flags of one magazine.
#[derive(Debug, Default)]
pub struct Handshake {
    in_op: AtomicBool,
    control: AtomicU8,
}

/// The drainer's barrier: true when every other thread of the process has been fenced.
pub fn heavy_fence() -> bool {
    #[cfg(not(loom))]
    {
        vmarena_platform::membarrier::barrier()
    }
    #[cfg(loom)]
    {
        loom::sync::atomic::fence(SeqCst);
        true
    }
}

#[inline(always)]
fn light_fence() {
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(SeqCst);
    #[cfg(loom)]
    loom::sync::atomic::fence(SeqCst);
}

impl Handshake {
    /// Owner: start an operation.
    #[inline]
    pub fn enter(&self) -> Enter {
        self.in_op.store(true, Relaxed);
        light_fence();
        match self.control.load(Acquire) {
            RUN => Enter::Go,
            c => {
                self.in_op.store(false, Release);
                if c == DRAIN {
                    Enter::Drain
                } else {
                    Enter::Busy
                }
            }
        }
    }

    /// Owner: end an operation that got [`Enter::Go`].
    #[inline]
    pub fn leave(&self) {
        self.in_op.store(false, Release);
    }

    /// Owner, outside an operation, after [`Enter::Drain`]: true when it may empty the magazine
    /// now (then [`Handshake::release`]); false when a drainer took over.
    pub fn claim_drain(&self) -> bool {
        self.control.compare_exchange(DRAIN, STEAL, Acquire, Relaxed).is_ok()
    }

    /// Drainer: announce a steal. False when another party holds the magazine.
    pub fn mark(&self) -> bool {
        self.control.compare_exchange(RUN, STEAL, SeqCst, Relaxed).is_ok()
            || self.control.compare_exchange(DRAIN, STEAL, SeqCst, Relaxed).is_ok()
    }

    /// Drainer, after [`heavy_fence`] (its result in `fenced`): true when the owner is outside
    /// any operation and the magazine may be emptied now (then [`Handshake::release`]);
    /// otherwise the owner is asked to empty it itself.
    pub fn settle(&self, fenced: bool) -> bool {
        if fenced && !self.in_op.load(Acquire) {
            return true;
        }
        self.control.store(DRAIN, Release);
        false
    }

    /// Whoever emptied the magazine hands it back to its owner.
    pub fn release(&self) {
        self.control.store(RUN, Release);
    }
}
