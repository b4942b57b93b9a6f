//! In the shape of rptest and larson, re-parameterised for page-granular sizes: threads keep
//! a set of live blocks of 4 KiB to 4 MiB (log-uniform), replace them at random, write the first
//! byte of every page of each new block, and hand blocks to the next thread, which frees them:
//! cross-thread frees, as a server's request buffers see. A thread that has done its
//! operations keeps freeing what is handed to it until every thread is done, so the peak RSS
//! measures the allocator, not how far apart the threads finished.
//!
//! `vmarena-xthread [--threads 2] [--ops 20000] [--live 64] [--min-kib 4] [--max-kib 4096] [--idle-ms 1000]`
//! (`--ops` per thread)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use vmarena_bench::{after_work, arg, free, malloc, report, start, Rng};

/// A block in flight between threads (the pointer is only ever used by one thread at a time).
struct Block(*mut u8, usize, u8);
// SAFETY: ownership of the block moves with the value.
unsafe impl Send for Block {}

fn touch(p: *mut u8, n: usize, v: u8) -> u64 {
    let mut i = 0;
    while i < n {
        // SAFETY: `i < n`, inside the block.
        unsafe { *p.add(i) = v };
        i += 4096;
    }
    // SAFETY: `n >= 1`.
    unsafe { *p.add(n - 1) = v };
    n as u64
}

/// Check the block's first and last byte (written by its allocating thread), then free it.
fn check_free(b: Block) {
    // SAFETY: the block is live and `b.1 >= 1` bytes long.
    let (first, last) = unsafe { (*b.0, *b.0.add(b.1 - 1)) };
    assert!(first == b.2 && last == b.2, "block {:p} of {} bytes lost its contents", b.0, b.1);
    free(b.0, b.1);
}

fn main() {
    let threads = arg("--threads", 2).max(1) as usize;
    let ops = arg("--ops", 20_000);
    let live = arg("--live", 64).max(2) as usize;
    let (lo, hi) = ((arg("--min-kib", 4) << 10) as f64, (arg("--max-kib", 4096) << 10) as f64);
    let mailboxes: Vec<Mutex<Vec<Block>>> = (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let done = AtomicUsize::new(0);
    let t0 = start();
    let checksum: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (mb, done) = (&mailboxes, &done);
                s.spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                    let mut mine: Vec<Block> = Vec::with_capacity(live);
                    let mut sum = 0u64;
                    for op in 0..ops {
                        // Free what other threads handed over.
                        if op % 8 == 0 {
                            let got = std::mem::take(&mut *mb[t].lock().unwrap());
                            got.into_iter().for_each(check_free);
                        }
                        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                        let n = (lo * (hi / lo).powf(u)) as usize;
                        let p = malloc(n);
                        sum = sum.wrapping_add(touch(p, n, op as u8));
                        if mine.len() < live {
                            mine.push(Block(p, n, op as u8));
                            continue;
                        }
                        let i = (rng.next_u64() % live as u64) as usize;
                        let old = std::mem::replace(&mut mine[i], Block(p, n, op as u8));
                        if rng.next_u64() % 2 == 0 {
                            mb[(t + 1) % threads].lock().unwrap().push(old);
                        } else {
                            check_free(old);
                        }
                    }
                    mine.into_iter().for_each(check_free);
                    done.fetch_add(1, Ordering::AcqRel);
                    // The other threads may still hand blocks over.
                    loop {
                        let finished = done.load(Ordering::Acquire) == threads;
                        let got = std::mem::take(&mut *mb[t].lock().unwrap());
                        got.into_iter().for_each(check_free);
                        if finished {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                    sum
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    for m in &mailboxes {
        m.lock().unwrap().drain(..).for_each(check_free);
    }
    let w = after_work(t0);
    report("xthread", w, checksum);
}
