//! vmarena as a Rust program's global allocator: buffers of 64 KiB and more come from the
//! default space, smaller ones from the system allocator.
//!
//! `cargo run --release -p vmarena --example global_alloc`

use vmarena::{default_space, VmAlloc};

#[global_allocator]
static GLOBAL: VmAlloc = VmAlloc::new();

fn main() {
    let mut total = 0u64;
    for round in 0..200u64 {
        // A 1-8 MiB buffer, written whole, dropped at the end of the round.
        let len = (1 + (round % 8) as usize) << 20;
        let buf = vec![round as u8; len];
        total += buf.iter().step_by(4096).map(|&b| b as u64).sum::<u64>();
    }
    let space = default_space().expect("the default space");
    let st = space.stats(false).arena;
    println!("checksum {total}");
    println!(
        "default space: {} live areas, {} purges, {} pages released in {} release calls",
        st.live_areas, st.purges, st.pages_released, st.release_calls
    );
}
