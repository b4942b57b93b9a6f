//! `vmarena_purge()` returns memory at once (tier 1), through the C ABI and the default space.
//! This binary owns its default space; the idle decay is switched off so only the call purges.

use vmarena::capi::*;

#[test]
fn purge_call_releases_memory_immediately() {
    std::env::set_var("VMARENA_DECAY_INTERVAL_MS", "0");
    std::env::set_var("VMARENA_SPACE_BYTES", "1G");
    let ptrs: Vec<_> = (0..32).map(|_| vmarena_vmalloc(1 << 20)).collect();
    assert!(ptrs.iter().all(|p| !p.is_null()));
    for &p in &ptrs {
        // SAFETY: 1 MiB usable.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 3, 1 << 20) };
    }
    let space = vmarena::default_space().unwrap();
    assert_eq!(space.options().space_bytes, 1 << 30, "environment read at creation");
    for &p in &ptrs {
        assert_eq!(vmarena_vfree(p), 0);
    }
    assert!(space.resident_bytes() >= 32 << 20, "lazily freed memory stays until a purge");
    assert_eq!(vmarena_purge(), 0);
    assert_eq!(space.resident_bytes(), 0, "vmarena_purge() released everything");
}
