//! A memory file: the frames of a frame pool are its 4 KiB pages, named by index.
//!
//! Owns: one `memfd_create` descriptor of a fixed size (closed on drop). Mapping frames is
//! `mmap(MAP_SHARED | MAP_FIXED)` of a file range over part of a reservation; unmapping puts a
//! fresh anonymous private mapping back (the same flags as the reservation, so the kernel merges
//! it into its neighbours again and the mapping count falls back). Memory of free frames goes
//! back to the system with `fallocate(PUNCH_HOLE)`; a punched frame reads as zero.
//!
//! Where `memfd_create` is refused (a seccomp filter; the call exists since Linux 3.17), the
//! file is an unnamed tmpfs file made with `O_TMPFILE` in `/dev/shm`, which behaves the same:
//! no name in any directory, freed with its last descriptor and mapping.

use std::io;

/// See the module documentation.
#[derive(Debug)]
pub struct MemFile {
    fd: crate::kept_fd::KeptFd,
    len_bytes: usize,
}

impl MemFile {
    /// A new memory file of `len_bytes` (sparse: no memory until a page is written).
    pub fn new(name: &str, len_bytes: usize) -> io::Result<MemFile> {
        let cname = std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a valid NUL-terminated name; the returned descriptor is owned below.
        let mut fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            let refused = io::Error::last_os_error();
            // SAFETY: a constant NUL-terminated path; the descriptor is owned below.
            fd = unsafe {
                libc::open(
                    c"/dev/shm".as_ptr(),
                    libc::O_TMPFILE | libc::O_RDWR | libc::O_EXCL | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if fd < 0 {
                return Err(refused);
            }
        }
        let fd = crate::kept_fd::KeptFd::adopt(fd)?;
        let len = libc::off_t::try_from(len_bytes).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::ftruncate(fd.raw(), len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(MemFile { fd, len_bytes })
    }

    /// The descriptor (for sharing the frames with another process); -1 once the program
    /// closed it or put a file of its own at its number.
    pub fn fd(&self) -> i32 {
        self.fd.get().unwrap_or(-1)
    }

    /// The descriptor if it is still this file's, else EBADF (see `kept_fd`).
    fn live_fd(&self) -> io::Result<i32> {
        self.fd.get().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }

    /// Size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// Map `len` bytes of the file at `offset` over `[addr, addr + len)`, shared, read-write.
    ///
    /// # Safety
    /// `[addr, addr + len)` must be page-aligned address space the caller owns (part of its
    /// reservation) with nothing live in it: whatever was mapped there is replaced.
    pub unsafe fn map_fixed(&self, addr: usize, len: usize, offset: usize) -> io::Result<()> {
        if offset.checked_add(len).map_or(true, |e| e > self.len_bytes) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the caller owns the range (contract above); the file range is inside the file.
        let fd = self.live_fd()?;
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Give the memory of `len` bytes at `offset` back to the system; they read as zero after.
    pub fn punch_hole(&self, offset: usize, len: usize) -> io::Result<()> {
        // SAFETY: plain syscall on our descriptor.
        let fd = self.live_fd()?;
        let r = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Put fresh anonymous private memory (no reserve) over `[addr, addr + len)`, ending whatever
/// file mapping was there. With `huge`, the range gets `MADV_HUGEPAGE` too, so that it carries
/// the same flags as a reservation that asked for huge pages and merges back into it.
///
/// # Safety
/// The range must be page-aligned address space the caller owns, with nothing live in it.
pub unsafe fn map_anonymous_fixed(addr: usize, len: usize, huge: bool) -> io::Result<()> {
    // SAFETY: the caller owns the range (contract above).
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the range was just mapped above and belongs to the caller; the advice only
    // changes how later faults are served.
    if huge && unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Map reserved huge pages (`MAP_HUGETLB`, the system's default huge page size) over
/// `[addr, addr + len)`. Without `MAP_NORESERVE` the kernel takes the pages from the
/// reserve at this call, so a system without enough of them fails here with `ENOMEM` instead
/// of a fault later. On failure the caller puts its own mapping back over the range
/// ([`map_anonymous_fixed`]): what was there may be gone.
///
/// # Safety
/// The range must be huge-page-aligned address space the caller owns, with nothing live in it.
pub unsafe fn map_hugetlb_fixed(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: the caller owns the range (contract above).
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_HUGETLB,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
