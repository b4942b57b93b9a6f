//! `VmAlloc` registers the process for `membarrier` at its first small allocation, before
//! `main` and the test harness's threads: a program that has made no large allocation (so no
//! default space exists) finds the process registered, and an unregistered one would get
//! `EPERM`. In its own test program, where no other test creates the space first.

use vmarena::VmAlloc;

#[global_allocator]
static GLOBAL: VmAlloc = VmAlloc::new();

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;

#[test]
fn the_process_is_registered_before_any_large_layout() {
    let small = Box::new([1u8; 100]); // a small layout, served by the inner allocator
    assert!(vmarena::existing_default_space().is_none(), "no large layout was asked for");
    // SAFETY: membarrier takes integers only.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
    assert_eq!(r, 0, "private expedited barrier refused (errno {})", std::io::Error::last_os_error());
    assert_eq!(small.iter().map(|&b| b as u32).sum::<u32>(), 100);
}
