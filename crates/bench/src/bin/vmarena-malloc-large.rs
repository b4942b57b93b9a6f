//! In the shape of mimalloc-bench's `malloc-large`: 20 live buffers; each iteration replaces a
//! random one with a new buffer of a random size between 5 and 25 MiB, every byte written
//! (the original's `make_unique<char[]>` zero-fills; here the
//! bytes are 0x5a, see below). One thread.
//!
//! `vmarena-malloc-large [--iterations 2000] [--buffers 20] [--min-mib 5] [--max-mib 25] [--idle-ms 1000]`

use vmarena_bench::{after_work, arg, free, malloc, report, start, Rng};

fn main() {
    let iterations = arg("--iterations", 2000);
    let nbuf = arg("--buffers", 20) as usize;
    let (lo, hi) = (arg("--min-mib", 5) << 20, arg("--max-mib", 25) << 20);
    let mut bufs: Vec<(*mut u8, usize)> = vec![(std::ptr::null_mut(), 0); nbuf];
    let mut rng = Rng(42);
    let mut checksum = 0u64;
    let t0 = start();
    for _ in 0..iterations {
        let i = (rng.next_u64() % nbuf as u64) as usize;
        let n = rng.range(lo, hi) as usize;
        let p = malloc(n);
        // Every byte written. Not with zeros: a compiler may turn malloc + zero-fill into
        // calloc, which an allocator can serve from fresh pages without touching them.
        // SAFETY: `p` holds `n` bytes.
        unsafe { std::ptr::write_bytes(p, 0x5a, n) };
        // SAFETY: as above; read back one byte so the writes are observable.
        checksum = checksum.wrapping_add(unsafe { *p.add(n / 2) } as u64 + n as u64);
        free(bufs[i].0, bufs[i].1);
        bufs[i] = (p, n);
    }
    for b in &bufs {
        free(b.0, b.1);
    }
    let w = after_work(t0);
    report("malloc-large", w, checksum);
}
