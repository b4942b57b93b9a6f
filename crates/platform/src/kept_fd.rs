//! `KeptFd`: a descriptor vmarena keeps for itself, out of the program's way, and checked
//! before every use.
//!
//! A library lives among descriptors it does not control. A program started with stdin or
//! stdout closed would get vmarena's first descriptor at 0 or 1 (and write its output into it);
//! a program that closes every descriptor above 2 (`closefrom`) and opens files of its own gets
//! vmarena's old numbers, which vmarena would go on using: ioctls, polls and writes on the
//! program's files. So every descriptor vmarena opens is:
//!
//! - moved to a high number: the lowest free one at or above [`floor`] (`F_DUPFD_CLOEXEC`),
//!   the original closed;
//! - close-on-exec;
//! - remembered by identity (device and inode from `fstat`) and checked before each use
//!   ([`KeptFd::get`]): a number that no longer names the same file is not vmarena's any more,
//!   and the caller falls back (no page moves by userfaultfd, no PSI monitor, no batched
//!   release, a frame pool that refuses to map);
//! - closed on drop only while it is still vmarena's.
//!
//! Limit: on kernels before 6.7 every userfaultfd shares one anonymous inode with other
//! anonymous-inode descriptors (eventfd, epoll, timerfd), so a program's such descriptor
//! reopened at the same number would pass the check; the ioctls vmarena then makes fail on it
//! with EINVAL/ENOTTY and change nothing.

use std::io;

/// Where vmarena's descriptors go: half the soft descriptor limit, at most 512, at least 3.
pub fn floor() -> i32 {
    // SAFETY: rlimit is plain data filled in by getrlimit.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to our rlimit.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 { r.rlim_cur } else { 1024 };
    (soft / 2).clamp(3, 512) as i32
}

/// Grow the process's descriptor table up to [`floor`] now. The kernel grows the table the first
/// time a number beyond it is used, and in a process with several threads (sharing the table) it
/// waits for an RCU grace period to free the old one, milliseconds on the first `F_DUPFD_CLOEXEC`
/// of a default space built from a second thread (docs/bench-log/design-notes.md, section 16, "When
/// the process registers", has the figure). Called from the library's constructor, while a program
/// usually has one thread, it costs a few microseconds, and the table never shrinks. Uses a
/// duplicate of the first open standard descriptor, or of `/dev/null` when all three are closed;
/// does nothing when neither exists.
pub fn grow_table() {
    let floor = floor();
    // SAFETY: fcntl duplicates a descriptor (or fails with EBADF); each duplicate made here is
    // closed here, and nothing else uses its number meanwhile (the caller runs at load).
    unsafe {
        for std_fd in 0..3 {
            let d = libc::fcntl(std_fd, libc::F_DUPFD_CLOEXEC, floor);
            if d >= 0 {
                libc::close(d);
                return;
            }
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null >= 0 {
            let d = libc::fcntl(null, libc::F_DUPFD_CLOEXEC, floor);
            if d >= 0 {
                libc::close(d);
            }
            libc::close(null);
        }
    }
}

fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: stat is plain data filled in by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on any number is safe; it fails with EBADF on a closed one.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// See the module documentation.
#[derive(Debug)]
pub struct KeptFd {
    fd: i32,
    id: (u64, u64),
}

impl KeptFd {
    /// Take ownership of the fresh descriptor `raw` (its number may be anything, 0 included):
    /// it is moved to a high number with close-on-exec, and `raw` is closed. On error `raw` is
    /// closed too.
    pub fn adopt(raw: i32) -> io::Result<KeptFd> {
        // SAFETY: fcntl on a descriptor we own; F_DUPFD_CLOEXEC returns a new one or -1.
        let mut fd = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, floor()) };
        if fd < 0 {
            // Above the floor every number is taken, or the limit is below it: any number
            // above the standard three will do.
            // SAFETY: as above.
            fd = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 3) };
        }
        let err = io::Error::last_os_error();
        // SAFETY: `raw` is ours to close (the duplicate, if any, is a separate descriptor).
        unsafe { libc::close(raw) };
        if fd < 0 {
            return Err(err);
        }
        match identity(fd) {
            Some(id) => Ok(KeptFd { fd, id }),
            None => {
                let e = io::Error::last_os_error();
                // SAFETY: the duplicate is ours.
                unsafe { libc::close(fd) };
                Err(e)
            }
        }
    }

    /// The descriptor, when its number still names the file vmarena opened; `None` once the
    /// program closed it or put a file of its own there.
    #[inline]
    pub fn get(&self) -> Option<i32> {
        (identity(self.fd) == Some(self.id)).then_some(self.fd)
    }

    /// The number, unchecked (for reports and for handing to another process).
    pub fn raw(&self) -> i32 {
        self.fd
    }
}

impl Drop for KeptFd {
    fn drop(&mut self) {
        if let Some(fd) = self.get() {
            // SAFETY: still the descriptor vmarena opened (checked just now).
            unsafe { libc::close(fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd() -> i32 {
        // SAFETY: a valid name; returns a new descriptor or -1.
        unsafe { libc::memfd_create(c"kept-fd-test".as_ptr(), 0) }
    }

    #[test]
    fn kept_descriptors_are_high_close_on_exec_and_checked() {
        let k = KeptFd::adopt(memfd()).unwrap();
        assert!(k.raw() >= floor().min(3), "{}", k.raw());
        // SAFETY: reading the flags of our own descriptor.
        assert_ne!(unsafe { libc::fcntl(k.raw(), libc::F_GETFD) } & libc::FD_CLOEXEC, 0);
        assert_eq!(k.get(), Some(k.raw()));
        // The program closes it and puts a file of its own at the number.
        let other = memfd();
        // SAFETY: closing and reusing the number, as a program would.
        unsafe {
            libc::close(k.raw());
            assert_eq!(libc::dup2(other, k.raw()), k.raw());
            libc::close(other);
        }
        assert_eq!(k.get(), None, "a file of the program's is not vmarena's");
        let n = k.raw();
        drop(k);
        // SAFETY: the program's descriptor is still open after vmarena's drop.
        assert!(unsafe { libc::fcntl(n, libc::F_GETFD) } >= 0);
        // SAFETY: ours to close.
        unsafe { libc::close(n) };
    }
}
