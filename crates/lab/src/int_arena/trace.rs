//! The two traces of `vmarena int-arena`, generated from a seed so that every contender replays
//! the same operations.
//!
//! - **gpu**: a device heap of 4 GiB in 256-byte units. Sizes from 256 B to 64 MiB (most below
//!   64 KiB, a few of several MiB), alignment 256 B for small buffers, 4 KiB from 4 KiB, 64 KiB
//!   from 64 KiB (the placement alignment of Vulkan and D3D12 heaps). A fifth of the
//!   allocations are long-lived resources (textures, meshes) held until the thread's
//!   long-lived budget forces its oldest out; the rest are per-frame buffers freed 1 to 256
//!   operations later, in an order of their own.
//! - **jit**: a code range of 256 MiB in 16-byte units. Functions of 64 B to 16 KiB (most a few
//!   hundred bytes), aligned to 16, 32 or 64, never across a 2 MiB boundary (a huge page of
//!   code). Seven in ten are long-lived until the thread's code budget forces the oldest out
//!   (deoptimised or collected code), the rest freed 1 to 1024 operations later.
//!
//! Each thread replays its own trace (its own seed) against the shared arena.

/// One operation: allocate into a slot, or free the slot's allocation.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Alloc { slot: u32, size: u64, align: u64 },
    Free { slot: u32 },
}

/// A trace and what it needs.
pub struct Trace {
    pub ops: Vec<Op>,
    /// Slots the trace uses (the driver's table of live allocations).
    pub slots: usize,
}

/// The shape of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    pub name: &'static str,
    /// The arena: `[base, base + span)`, quantum.
    pub base: u64,
    pub span: u64,
    pub quantum: u64,
    /// 0 or the nocross boundary every allocation keeps.
    pub nocross: u64,
    /// The smallest request of the trace: a free range shorter than this serves none of it.
    pub min_request: u64,
}

pub const GPU: Shape =
    Shape { name: "gpu", base: 1 << 40, span: 4 << 30, quantum: 256, nocross: 0, min_request: 256 };
pub const JIT: Shape = Shape {
    name: "jit",
    base: 0x7f00_0000_0000,
    span: 256 << 20,
    quantum: 16,
    nocross: 2 << 20,
    min_request: 64,
};

pub fn shape(name: &str) -> Option<Shape> {
    [GPU, JIT].into_iter().find(|s| s.name == name)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Log-uniform in `[lo, hi]`.
    fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((a + (b - a) * u).exp() as u64).clamp(lo, hi)
    }
}

/// A trace of `allocs` allocations (and their frees) of `shape`, from `seed`.
pub fn generate(shape: Shape, allocs: usize, seed: u64) -> Trace {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let gpu = shape.name == "gpu";
    // Long-lived budget per thread, and the short-lived window.
    let (budget, window, long_share) =
        if gpu { (768u64 << 20, 256u64, 20) } else { (48u64 << 20, 1024u64, 70) };
    let mut ops = Vec::with_capacity(allocs * 2);
    let mut free_slots: Vec<u32> = Vec::new();
    let mut next_slot = 0u32;
    let mut long: std::collections::VecDeque<(u32, u64)> = std::collections::VecDeque::new();
    let mut long_bytes = 0u64;
    // (due op index, slot) of short-lived allocations.
    let mut due: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>> = Default::default();
    for i in 0..allocs as u64 {
        while let Some(&std::cmp::Reverse((at, slot))) = due.peek() {
            if at > i {
                break;
            }
            due.pop();
            ops.push(Op::Free { slot });
            free_slots.push(slot);
        }
        let (size, align) = if gpu {
            let size = match rng.below(100) {
                0..=79 => rng.log_uniform(256, 64 << 10),
                80..=97 => rng.log_uniform(64 << 10, 4 << 20),
                _ => rng.log_uniform(4 << 20, 64 << 20),
            };
            let align = if size >= 64 << 10 {
                64 << 10
            } else if size >= 4096 {
                4096
            } else {
                256 << rng.below(3)
            };
            (size, align)
        } else {
            let size = match rng.below(100) {
                0..=89 => rng.log_uniform(64, 2048),
                _ => rng.log_uniform(2048, 16 << 10),
            };
            (size, 16 << rng.below(3))
        };
        let slot = free_slots.pop().unwrap_or_else(|| {
            next_slot += 1;
            next_slot - 1
        });
        ops.push(Op::Alloc { slot, size, align });
        if rng.below(100) < long_share {
            long.push_back((slot, size));
            long_bytes += size;
            while long_bytes > budget {
                let (s, b) = long.pop_front().expect("over budget means something is held");
                long_bytes -= b;
                ops.push(Op::Free { slot: s });
                free_slots.push(s);
            }
        } else {
            due.push(std::cmp::Reverse((i + 1 + rng.below(window), slot)));
        }
    }
    // Short-lived allocations end with the trace; long-lived ones stay for the measurement of
    // fragmentation, then the driver frees them.
    while let Some(std::cmp::Reverse((_, slot))) = due.pop() {
        ops.push(Op::Free { slot });
    }
    Trace { ops, slots: next_slot as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_free_only_live_slots_and_keep_their_shape() {
        for shape in [GPU, JIT] {
            let t = generate(shape, 20_000, 3);
            let mut live = vec![false; t.slots];
            let (mut allocs, mut frees) = (0, 0);
            for op in &t.ops {
                match *op {
                    Op::Alloc { slot, size, align } => {
                        assert!(!live[slot as usize], "slot reused while live");
                        live[slot as usize] = true;
                        assert!(align.is_power_of_two() && size > 0);
                        if shape.nocross != 0 {
                            assert!(size <= 16 << 10);
                        }
                        allocs += 1;
                    }
                    Op::Free { slot } => {
                        assert!(live[slot as usize], "free of a dead slot");
                        live[slot as usize] = false;
                        frees += 1;
                    }
                }
            }
            assert_eq!(allocs, 20_000);
            assert!(frees < allocs && frees > allocs / 4, "{}: {frees} frees", shape.name);
            assert_eq!(generate(shape, 100, 9).ops.len(), generate(shape, 100, 9).ops.len());
        }
    }
}
