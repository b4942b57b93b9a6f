//! The peers as contenders: glibc malloc, jemalloc, mimalloc and plain mmap/munmap, called
//! directly (not through LD_PRELOAD), each asked for page-aligned memory of the sizes the cases
//! ask vmarena for (rounded up to whole pages), with the same touches. Zeroed requests are
//! cleared with a memset where the allocator has no zeroing call of its own; mmap memory is
//! fresh. The kvfree_rcu cases retire through the same `Rcu` mechanism as vmarena, freeing with
//! the peer's own free.

use super::cases::PAGE;
use super::contender::{Contender, MapRamSession};
use std::ptr::NonNull;
use std::sync::Arc;
use vmarena::rcu::Rcu;

/// The peers the lab can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    Glibc,
    Jemalloc,
    Mimalloc,
    Mmap,
}

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Peer::Glibc => "glibc",
            Peer::Jemalloc => "jemalloc",
            Peer::Mimalloc => "mimalloc",
            Peer::Mmap => "mmap",
        }
    }
}

fn round_page(bytes: usize) -> Option<usize> {
    bytes.checked_add(PAGE - 1).map(|b| b & !(PAGE - 1))
}

/// Raw page-aligned allocation for one peer.
trait Raw: Send + Sync + 'static {
    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>>;
    fn free(&self, p: NonNull<u8>);
    fn usable(&self, p: NonNull<u8>) -> usize;
}

struct Glibc;
impl Raw for Glibc {
    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>> {
        let len = round_page(bytes)?;
        let mut p = std::ptr::null_mut();
        // SAFETY: posix_memalign with a power-of-two alignment of at least sizeof(void*).
        if unsafe { libc::posix_memalign(&mut p, align.max(PAGE), len) } != 0 {
            return None;
        }
        if zeroed {
            // SAFETY: `len` bytes were just allocated at `p`.
            unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        }
        NonNull::new(p.cast())
    }
    fn free(&self, p: NonNull<u8>) {
        // SAFETY: `p` came from posix_memalign and is freed once.
        unsafe { libc::free(p.as_ptr().cast()) }
    }
    fn usable(&self, p: NonNull<u8>) -> usize {
        // SAFETY: `p` is a live glibc allocation.
        unsafe { libc::malloc_usable_size(p.as_ptr().cast()) }
    }
}

struct Jemalloc;
impl Raw for Jemalloc {
    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>> {
        let len = round_page(bytes)?;
        let flags = tikv_jemalloc_sys::MALLOCX_ALIGN(align.max(PAGE))
            | if zeroed { tikv_jemalloc_sys::MALLOCX_ZERO } else { 0 };
        // SAFETY: mallocx with a non-zero size and valid flags.
        NonNull::new(unsafe { tikv_jemalloc_sys::mallocx(len, flags) }.cast())
    }
    fn free(&self, p: NonNull<u8>) {
        // SAFETY: `p` came from mallocx and is freed once.
        unsafe { tikv_jemalloc_sys::dallocx(p.as_ptr().cast(), 0) }
    }
    fn usable(&self, p: NonNull<u8>) -> usize {
        // SAFETY: `p` is a live jemalloc allocation.
        unsafe { tikv_jemalloc_sys::sallocx(p.as_ptr().cast(), 0) }
    }
}

struct Mimalloc;
impl Raw for Mimalloc {
    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>> {
        let len = round_page(bytes)?;
        let a = align.max(PAGE);
        // SAFETY: mimalloc's aligned allocation with a power-of-two alignment.
        let p = unsafe {
            if zeroed {
                libmimalloc_sys::mi_zalloc_aligned(len, a)
            } else {
                libmimalloc_sys::mi_malloc_aligned(len, a)
            }
        };
        NonNull::new(p.cast())
    }
    fn free(&self, p: NonNull<u8>) {
        // SAFETY: `p` came from mimalloc and is freed once.
        unsafe { libmimalloc_sys::mi_free(p.as_ptr().cast()) }
    }
    fn usable(&self, p: NonNull<u8>) -> usize {
        // SAFETY: `p` is a live mimalloc allocation.
        unsafe { libmimalloc_sys::mi_usable_size(p.as_ptr().cast()) }
    }
}

/// One mapping per allocation, with a header page in front that records the mapping's length
/// (munmap needs it); alignment beyond a page is met by mapping more and trimming.
struct Mmap;
impl Raw for Mmap {
    fn alloc(&self, bytes: usize, align: usize, _zeroed: bool) -> Option<NonNull<u8>> {
        let len = round_page(bytes)?;
        let align = align.max(PAGE);
        let map_len = len.checked_add(PAGE)?.checked_add(align - PAGE)?;
        // SAFETY: a fresh anonymous mapping; nothing else is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let raw = p as usize;
        let start = (raw + PAGE + align - 1) & !(align - 1);
        let base = start - PAGE;
        // SAFETY: the trimmed ranges lie in the mapping just made and are unused; the header
        // page at `base` is part of it.
        unsafe {
            if base > raw {
                libc::munmap(raw as *mut _, base - raw);
            }
            let end = start + len;
            if raw + map_len > end {
                libc::munmap(end as *mut _, raw + map_len - end);
            }
            (base as *mut usize).write(len + PAGE);
        }
        NonNull::new(start as *mut u8)
    }
    fn free(&self, p: NonNull<u8>) {
        let base = p.as_ptr() as usize - PAGE;
        // SAFETY: the header page in front of `p` holds the mapping's length; it is unmapped once.
        unsafe {
            let len = (base as *const usize).read();
            libc::munmap(base as *mut _, len);
        }
    }
    fn usable(&self, p: NonNull<u8>) -> usize {
        // SAFETY: as in `free`.
        unsafe { ((p.as_ptr() as usize - PAGE) as *const usize).read() - PAGE }
    }
}

/// A peer with its deferred-free domain.
pub struct PeerContender {
    peer: Peer,
    raw: Arc<dyn Raw>,
    rcu: Arc<Rcu>,
}

impl PeerContender {
    pub fn new(peer: Peer) -> Self {
        let raw: Arc<dyn Raw> = match peer {
            Peer::Glibc => Arc::new(Glibc),
            Peer::Jemalloc => Arc::new(Jemalloc),
            Peer::Mimalloc => Arc::new(Mimalloc),
            Peer::Mmap => Arc::new(Mmap),
        };
        let (f, s) = (raw.clone(), raw.clone());
        let rcu = Rcu::with_free(Box::new(move |p| f.free(p)), Box::new(move |p| Some(s.usable(p))));
        PeerContender { peer, raw, rcu }
    }
}

impl Contender for PeerContender {
    fn name(&self) -> String {
        self.peer.name().to_string()
    }

    fn alloc(&self, bytes: usize, align: usize, zeroed: bool) -> Option<NonNull<u8>> {
        if bytes == 0 || !align.is_power_of_two() {
            return None;
        }
        self.raw.alloc(bytes, align, zeroed)
    }

    fn alloc_nonblocking(&self, bytes: usize) -> Option<NonNull<u8>> {
        self.alloc(bytes, 1, false)
    }

    fn realloc(&self, p: Option<NonNull<u8>>, bytes: usize) -> Option<NonNull<u8>> {
        let Some(p) = p else { return self.alloc(bytes, 1, false) };
        let old = self.raw.usable(p);
        if bytes <= old {
            return Some(p);
        }
        let q = self.alloc(bytes, 1, false)?;
        // SAFETY: both areas are live, disjoint, and at least `old` bytes long.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), q.as_ptr(), old) };
        self.raw.free(p);
        Some(q)
    }

    fn free(&self, p: NonNull<u8>) {
        self.raw.free(p)
    }

    fn kvfree_rcu(&self, p: NonNull<u8>, embedded: bool) {
        if embedded {
            assert!(self.rcu.kvfree_rcu_embedded(p));
        } else {
            assert!(self.rcu.kvfree_rcu(p));
        }
    }

    fn quiesce(&self) {
        self.rcu.synchronize();
    }

    /// Only plain mmap has a user-space way to map existing pages: a shared mapping of a memory
    /// file, made and removed in each loop. The malloc peers have none.
    fn map_ram_session(&self, pages: usize) -> Option<Result<Box<dyn MapRamSession + '_>, String>> {
        if self.peer != Peer::Mmap {
            return None;
        }
        Some(
            vmarena_platform::memfd::MemFile::new("test_vmalloc-mmap", pages * PAGE)
                .map(|file| Box::new(MemFileSession { file, len: pages * PAGE }) as Box<dyn MapRamSession>)
                .map_err(|e| e.to_string()),
        )
    }
}

/// The mmap peer's vm_map_ram: `mmap(MAP_SHARED)` of a memory file, `munmap`.
struct MemFileSession {
    file: vmarena_platform::memfd::MemFile,
    len: usize,
}

impl MapRamSession for MemFileSession {
    fn map(&mut self) -> Option<NonNull<u8>> {
        // SAFETY: a new mapping at an address of the kernel's choosing; nothing else is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.fd(),
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| NonNull::new(p.cast()).expect("mmap never returns 0 here"))
    }
    fn unmap(&mut self, p: NonNull<u8>) {
        // SAFETY: `p` is a mapping of `len` bytes made by `map` and unmapped once.
        unsafe { libc::munmap(p.as_ptr().cast(), self.len) };
    }
}
