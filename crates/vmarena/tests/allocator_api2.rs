//! `VmSpace` as an `allocator_api2` allocator (feature `allocator-api2`):
//! `cargo test -p vmarena --features allocator-api2 --test allocator_api2`.
#![cfg(feature = "allocator-api2")]

use allocator_api2::alloc::{Allocator, Layout};
use allocator_api2::vec::Vec;
use vmarena::{ArenaOptions, SpaceOptions, VmSpace};

fn space() -> VmSpace {
    VmSpace::new("api2", SpaceOptions { space_bytes: 1 << 30, ..Default::default() }, ArenaOptions::default())
        .unwrap()
}

#[test]
fn a_vector_in_a_space_grows_in_place_and_keeps_its_contents() {
    let s = space();
    let mut v: Vec<u64, &VmSpace> = Vec::new_in(&s);
    for i in 0..100_000u64 {
        v.push(i * 7);
    }
    assert!(s.contains(v.as_ptr().cast()));
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 7));
    assert_eq!(s.stats(false).arena.live_areas, 1, "each regrowth freed the old area");
    v.truncate(10);
    v.shrink_to_fit();
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 7));
    drop(v);
    assert_eq!(s.stats(false).arena.live_areas, 0);
    s.check().unwrap();
}

#[test]
fn zero_sized_aligned_and_zeroed_blocks() {
    let s = space();
    let a = &s;
    let z = Layout::from_size_align(0, 64).unwrap();
    let p = a.allocate(z).unwrap();
    assert_eq!(p.len(), 0);
    assert_eq!(s.stats(false).arena.live_areas, 0, "zero-sized blocks never reach the space");
    // SAFETY: allocated above with `z`.
    unsafe { a.deallocate(p.cast(), z) };

    let big = Layout::from_size_align(100_000, 1 << 20).unwrap();
    let p = a.allocate_zeroed(big).unwrap();
    assert!((p.as_ptr().cast::<u8>() as usize) % (1 << 20) == 0);
    assert!(p.len() >= 100_000);
    // SAFETY: the block holds `p.len()` zeroed bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), p.len()) };
    assert!(bytes.iter().all(|&b| b == 0));
    bytes[..100_000].fill(0xAB);
    let bigger = Layout::from_size_align(300_000, 1 << 20).unwrap();
    // SAFETY: `p` is live with layout `big`; `bigger` is not smaller.
    let q = unsafe { a.grow_zeroed(p.cast(), big, bigger).unwrap() };
    assert!((q.as_ptr().cast::<u8>() as usize) % (1 << 20) == 0, "alignment kept when moved");
    // SAFETY: the block holds `q.len()` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(q.as_ptr().cast::<u8>(), q.len()) };
    assert!(bytes[..100_000].iter().all(|&b| b == 0xAB));
    assert!(bytes[100_000..].iter().all(|&b| b == 0));
    // SAFETY: live with layout `bigger`.
    unsafe { a.deallocate(q.cast(), bigger) };
    assert_eq!(s.stats(false).arena.live_areas, 0);
}
