//! Process-wide memory barriers on demand (`membarrier(2)`, private expedited).
//!
//! Owns: the registration of this process for `MEMBARRIER_CMD_PRIVATE_EXPEDITED`, done once.
//! An asymmetric fence: the rare side calls [`barrier`], which makes every running thread of
//! the process execute a full memory barrier before it returns; the frequent side then needs
//! only a compiler fence between its store and its load (a Dekker pair without a locked
//! instruction on the fast path). Threads that are not running pass a barrier at their next
//! context switch, which the kernel orders the same way.
//!
//! Registration is cheap in a process with one thread and costs an RCU grace period (several
//! milliseconds) in one with more, during which the registering thread sleeps; register early
//! (the preload shim does so at its first `malloc`).
//!
//! Where the call is missing (kernels before 4.14, seccomp filters), [`register`] says so and
//! the callers must not rely on [`barrier`].
//!
//! Failure paths allocate nothing: the answer is a [`Refused`] (a static text and an errno),
//! made into a message only by whoever reports it. Registration runs from the library's
//! constructor, before the preload shim knows the next allocator; an allocation there enters
//! the shim, whose first call registers again, inside the same one-time cell.

use crate::fork_once::ForkOnce;

const CMD_QUERY: libc::c_long = 0;
const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
const CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 7;
const CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_long = 1 << 8;

/// Why barriers are unavailable: what was refused and the errno (0 where the kernel answered
/// without one). `Copy`, so that remembering it allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// What failed, as a fixed text.
    pub what: &'static str,
    /// The errno of the refusal, 0 for a command missing from the query's answer.
    pub errno: i32,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.errno == 0 {
            f.write_str(self.what)
        } else {
            write!(f, "{} (errno {})", self.what, self.errno)
        }
    }
}

impl From<Refused> for String {
    fn from(r: Refused) -> String {
        r.to_string()
    }
}

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long, 0 as libc::c_long) }
}

/// Register the process for private expedited barriers (once; later calls return the first
/// answer). `Err` names why barriers are unavailable.
pub fn register() -> Result<(), Refused> {
    static REGISTERED: ForkOnce<Result<(), Refused>> = ForkOnce::new();
    *REGISTERED.get_or_init(|| {
        let cmds = membarrier(CMD_QUERY);
        if cmds < 0 {
            return Err(Refused { what: "membarrier unavailable", errno: crate::last_errno() });
        }
        if cmds & CMD_PRIVATE_EXPEDITED == 0 {
            return Err(Refused { what: "membarrier without MEMBARRIER_CMD_PRIVATE_EXPEDITED", errno: 0 });
        }
        if membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) != 0 {
            return Err(Refused { what: "membarrier registration failed", errno: crate::last_errno() });
        }
        Ok(())
    })
}

/// A full memory barrier on every running thread of the process. False when it could not be
/// done (not registered, or refused); the caller must then treat the other threads as unfenced.
pub fn barrier() -> bool {
    register().is_ok() && membarrier(CMD_PRIVATE_EXPEDITED) == 0
}

/// Register the process for rseq fences (once; later calls return the first answer). `Err`
/// names why they are unavailable (kernels before 5.10, seccomp filters).
pub fn register_rseq() -> Result<(), Refused> {
    static REGISTERED: ForkOnce<Result<(), Refused>> = ForkOnce::new();
    *REGISTERED.get_or_init(|| {
        let cmds = membarrier(CMD_QUERY);
        if cmds < 0 || cmds & CMD_PRIVATE_EXPEDITED_RSEQ == 0 {
            return Err(Refused {
                what: "membarrier without MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ",
                errno: 0,
            });
        }
        if membarrier(CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ) != 0 {
            return Err(Refused { what: "membarrier rseq registration failed", errno: crate::last_errno() });
        }
        Ok(())
    })
}

/// Restart every restartable sequence running in this process, and pass a full memory
/// barrier on every CPU that runs one of its threads: afterwards no sequence that began before
/// the call can commit. False when it could not be done (see [`register_rseq`]).
pub fn rseq_fence() -> bool {
    register_rseq().is_ok() && membarrier(CMD_PRIVATE_EXPEDITED_RSEQ) == 0
}
