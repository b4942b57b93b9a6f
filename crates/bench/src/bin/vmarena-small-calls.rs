//! Small `malloc`/`free` calls, with a `realloc` and a `calloc` every 256: what a program whose
//! allocations all stay below the shim's threshold asks of the allocator. The shim serves none of
//! them, so under `valgrind --tool=callgrind` the difference in instructions with and without
//! `LD_PRELOAD=libvmarena_preload.so` is what passing them through costs
//! (docs/bench-log/design-notes.md, section 14). Sizes 16 to 1015 bytes, 64 live blocks, replaced
//! in turn.
//!
//! `vmarena-small-calls [--calls 1000000]`

use vmarena_bench::arg;

fn main() {
    let n = arg("--calls", 1_000_000);
    let mut keep = [std::ptr::null_mut::<libc::c_void>(); 64];
    let mut sum = 0u64;
    for i in 0..n {
        let size = 16 + (i.wrapping_mul(7919) % 1000) as usize;
        let k = (i & 63) as usize;
        // SAFETY: plain C calls on blocks this loop owns (or null).
        unsafe {
            libc::free(keep[k]);
            let p = libc::malloc(size);
            assert!(!p.is_null(), "malloc({size}) failed");
            *(p as *mut u8) = i as u8;
            keep[k] = p;
            if i & 255 == 0 {
                let q = libc::realloc(p, size * 2);
                if !q.is_null() {
                    keep[k] = q;
                }
                libc::free(libc::calloc(4, size));
            }
        }
        sum += keep[k] as u64 & 1;
    }
    for p in keep {
        // SAFETY: blocks of this loop.
        unsafe { libc::free(p) };
    }
    println!("{{\"bench\":\"small-calls\",\"calls\":{n},\"checksum\":{sum}}}");
}
