//! A mirrored ring buffer on `vmap`: the ring's frames are mapped twice, back to back, so a
//! record that runs past the end of the ring is still one contiguous slice for the writer and
//! the reader (no split copies, no wrap-around arithmetic in the record code).
//!
//! One producer thread writes variable-length records, one consumer thread reads and checks
//! them; the ring is 64 KiB and carries 64 MiB, so almost every position wraps many times.
//!
//! ```text
//! cargo run --release -p vmarena --example ring_buffer
//! ```

use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Release},
};
use std::sync::Arc;
use vmarena::{ArenaOptions, FrameOptions, FramePool, SpaceOptions, VmSpace};

/// A single-producer single-consumer byte ring over a mirrored mapping.
struct MirroredRing {
    space: VmSpace,
    pool: FramePool,
    frames: Vec<u32>,
    base: *mut u8,
    size: usize,
    head: AtomicU64,
    tail: AtomicU64,
}

// SAFETY: the producer writes only [head, tail + size) and the consumer reads only [tail, head),
// ordered by the release/acquire pair on `head` and `tail`.
unsafe impl Sync for MirroredRing {}
// SAFETY: as above; the mapping is not tied to a thread.
unsafe impl Send for MirroredRing {}

impl MirroredRing {
    fn new(pages: usize) -> MirroredRing {
        let space = VmSpace::new(
            "ring",
            SpaceOptions { space_bytes: 1 << 30, ..Default::default() },
            ArenaOptions::default(),
        )
        .expect("space");
        let pool = FramePool::new("ring", (pages as u64) << 12, FrameOptions::default()).expect("pool");
        let mut frames = Vec::new();
        assert_eq!(pool.alloc_bulk(pages, &mut frames), pages);
        let twice: Vec<u32> = frames.iter().chain(&frames).copied().collect();
        let base = space.vmap(&pool, &twice).expect("vmap").as_ptr();
        MirroredRing {
            space,
            pool,
            frames,
            base,
            size: pages << 12,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }

    /// Copy `rec` in as one contiguous write; false when the ring lacks room.
    fn push(&self, rec: &[u8]) -> bool {
        let head = self.head.load(Acquire);
        let tail = self.tail.load(Acquire);
        if (head - tail) as usize + rec.len() > self.size {
            return false;
        }
        let at = head as usize % self.size;
        // SAFETY: at + len <= 2 x size (len <= size), inside the mirrored mapping; the range is
        // free space that the consumer does not read until `head` moves.
        unsafe { std::ptr::copy_nonoverlapping(rec.as_ptr(), self.base.add(at), rec.len()) };
        self.head.store(head + rec.len() as u64, Release);
        true
    }

    /// The readable bytes as one slice, possibly running past the end of the ring.
    fn readable(&self) -> &[u8] {
        let tail = self.tail.load(Acquire);
        let head = self.head.load(Acquire);
        // SAFETY: [tail, head) was published by the producer and is at most `size` bytes.
        unsafe {
            std::slice::from_raw_parts(self.base.add(tail as usize % self.size), (head - tail) as usize)
        }
    }

    fn consume(&self, n: usize) {
        self.tail.fetch_add(n as u64, Release);
    }
}

impl Drop for MirroredRing {
    fn drop(&mut self) {
        self.space.vunmap(self.base).expect("vunmap");
        for &f in &self.frames {
            self.pool.free(f, 0).expect("free frame");
        }
    }
}

fn record(i: u64) -> Vec<u8> {
    let len = 8 + (i * 7919 % 4000) as usize;
    let mut r = vec![0u8; len];
    r[..4].copy_from_slice(&(len as u32).to_le_bytes());
    for (j, b) in r[4..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(j as u8);
    }
    r
}

fn main() {
    let ring = Arc::new(MirroredRing::new(16));
    let total: u64 = 64 << 20;
    let producer = {
        let ring = ring.clone();
        std::thread::spawn(move || {
            let (mut i, mut sent) = (0u64, 0u64);
            while sent < total {
                let r = record(i);
                while !ring.push(&r) {
                    std::hint::spin_loop();
                }
                sent += r.len() as u64;
                i += 1;
            }
            i
        })
    };
    let (mut got, mut records, mut wrapped) = (0u64, 0u64, 0u64);
    let t0 = std::time::Instant::now();
    while got < total {
        let buf = ring.readable();
        if buf.len() < 4 {
            std::hint::spin_loop();
            continue;
        }
        let len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        if buf.len() < len {
            continue;
        }
        let pos = ring.tail.load(Acquire) as usize % ring.size;
        if pos + len > ring.size {
            wrapped += 1;
        }
        assert_eq!(&buf[..len], &record(records)[..], "record {records} damaged");
        ring.consume(len);
        got += len as u64;
        records += 1;
    }
    let sent = producer.join().unwrap();
    assert_eq!(sent, records);
    println!(
        "{records} records, {} MiB through a {} KiB mirrored ring in {:.2?}; {wrapped} records ran past the end and were read as one slice",
        got >> 20,
        ring.size >> 10,
        t0.elapsed()
    );
}
