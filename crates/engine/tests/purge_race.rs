//! A failing allocation's own full purge must serve it (tier 3).
//!
//! Eight threads churn an arena whose free space is only ever given back by full purges (no
//! worker, no threshold purge): every allocation that finds the tree empty purges, and the
//! other seven take the space back between that purge and its caller's retry as fast as they
//! can. Each thread holds at most one area of at most 4,000 pages, so at least 33,536 of the
//! 65,536 pages are free or lazy, in at most eight ranges between live areas: one of them
//! holds any request, and every failure is spurious.

use std::sync::Arc;
use vmarena_engine::*;

const PAGES: u64 = 1 << 16;
const THREADS: usize = 8;

fn churn(strategy: Strategy) {
    let opts = ArenaOptions {
        strategy,
        nodes: 2,
        lazy_max_pages: 1 << 40,
        purge_thread: false,
        decay_interval_ms: 0,
        thread_cache: false,
        ..Default::default()
    };
    let arena =
        Arc::new(Arena::new(format!("race-{strategy}"), 0, PAGES, opts, Box::new(NoBacking)).unwrap());
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let a = arena.clone();
            std::thread::spawn(move || {
                let mut seed = 0x2545_F491u64 * (t as u64 + 3);
                let mut failures = 0u64;
                for _ in 0..20_000 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let pages = 1 + (seed >> 8) % 4_000;
                    match a.alloc(&AllocRequest::pages(pages)) {
                        Ok(x) => {
                            a.free(x.start).unwrap();
                        }
                        Err(e) => {
                            failures += 1;
                            eprintln!("{strategy}: {e}");
                        }
                    }
                }
                failures
            })
        })
        .collect();
    let failures: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        failures, 0,
        "{strategy}: allocations failed with at most {THREADS} areas of at most 4,000 of {PAGES} pages live"
    );
    arena.check().unwrap();
}

#[test]
fn global_churn_never_fails_spuriously() {
    churn(Strategy::Global);
}

#[test]
fn split_churn_never_fails_spuriously() {
    churn(Strategy::Split);
}

#[test]
fn nodes_churn_never_fails_spuriously() {
    churn(Strategy::Nodes);
}
