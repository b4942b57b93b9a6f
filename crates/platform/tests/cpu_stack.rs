//! Per-CPU stacks under contention (tier 3). Tokens move between threads only through the
//! stacks: every thread pushes tokens it holds and pops whatever its CPU's stack holds, moves
//! itself to another CPU every few hundred operations, and takes back what a drainer thread,
//! emptying every stack all along, put in a common pool. More threads than CPUs, so sequences
//! are preempted and migrated in the middle. At the end every token must be held exactly once:
//! a lost push, a pop that returned a slot twice or a drain that raced a sequence would show
//! (a drain without its stop and fence shows as a token held twice, in every run). The stacks'
//! own counts of pushes and pops must match the threads'. A signaller interrupts the workers
//! all along with a signal whose handler does nothing: each delivery inside a sequence aborts it,
//! so the abort path runs thousands of times a run (an abort handler that took a half-done
//! sequence for done loses or doubles tokens within a run or two).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use vmarena_platform::cpu;
use vmarena_platform::cpu_stack::CpuStacks;

extern "C" fn on_signal(_: libc::c_int) {}

/// A handler that does nothing for SIGUSR1, so that its delivery interrupts without killing.
fn catch_sigusr1() {
    // SAFETY: a zeroed sigaction with a plain handler that touches nothing.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
}

const THREADS: u64 = 6;
const TOKENS: u64 = 50;
const OPS: u64 = 300_000;

#[test]
fn tokens_survive_pushes_pops_migrations_and_drains() {
    let s = match CpuStacks::new(2, 24) {
        Ok(s) => Arc::new(s),
        // A machine without rseq or its fence (the unit tests check that only such a machine
        // refuses).
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let pool = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let drainer = {
        let (s, pool, stop) = (s.clone(), pool.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut drains = 0u64;
            while !stop.load(Relaxed) {
                let mut got = Vec::new();
                s.drain(|_, _, v| got.push(v)).unwrap();
                pool.lock().unwrap().extend(got);
                drains += 1;
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            drains
        })
    };
    let ncpu = cpu::count();
    catch_sigusr1();
    let ids = Arc::new(Mutex::new(Vec::<libc::pthread_t>::new()));
    // Workers that are done wait here until the signaller has stopped: a thread id must not be
    // signalled once its thread is gone.
    let finished = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let exit_gate = Arc::new(std::sync::Barrier::new(THREADS as usize + 1));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (s, pool, ids) = (s.clone(), pool.clone(), ids.clone());
            let (finished, exit_gate) = (finished.clone(), exit_gate.clone());
            std::thread::spawn(move || {
                // SAFETY: pthread_self has no preconditions.
                ids.lock().unwrap().push(unsafe { libc::pthread_self() });
                let mut held: Vec<u64> = (0..TOKENS).map(|i| (t << 32) | i).collect();
                let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                let (mut pushed, mut popped) = (0u64, 0u64);
                for i in 0..OPS {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let stack = (seed >> 8) as usize % 2;
                    if seed % 2 == 0 && !held.is_empty() {
                        let v = held[(seed >> 16) as usize % held.len()];
                        if s.push(stack, v) {
                            held.retain(|&x| x != v);
                            pushed += 1;
                        }
                    } else if let Some(v) = s.pop(stack) {
                        held.push(v);
                        popped += 1;
                    }
                    if i % 500 == 0 {
                        cpu::pin_current_thread((seed >> 24) as usize % ncpu);
                    }
                    if i % 2_000 == 0 {
                        held.append(&mut pool.lock().unwrap());
                    }
                }
                finished.fetch_add(1, Relaxed);
                exit_gate.wait();
                (held, pushed, popped)
            })
        })
        .collect();
    let signaller = {
        let (ids, finished, exit_gate) = (ids.clone(), finished.clone(), exit_gate.clone());
        std::thread::spawn(move || {
            let mut sent = 0u64;
            while finished.load(Relaxed) < THREADS {
                for &id in ids.lock().unwrap().iter() {
                    // SAFETY: every worker lives until it passes the exit gate, after this loop.
                    sent += (unsafe { libc::pthread_kill(id, libc::SIGUSR1) } == 0) as u64;
                }
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            exit_gate.wait();
            sent
        })
    };
    let mut all = Vec::new();
    let (mut pushed, mut popped) = (0, 0);
    for w in workers {
        let (held, pu, po) = w.join().unwrap();
        all.extend(held);
        pushed += pu;
        popped += po;
    }
    stop.store(true, Relaxed);
    let drains = drainer.join().unwrap();
    let signals = signaller.join().unwrap();
    s.drain(|_, _, v| all.push(v)).unwrap();
    all.append(&mut pool.lock().unwrap());
    let distinct: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "a token is held twice");
    assert_eq!(all.len() as u64, THREADS * TOKENS, "tokens lost");
    assert!(
        pushed > OPS && popped > OPS / 4 && drains > 10 && signals > 1000,
        "{pushed} pushes, {popped} pops, {drains} drains, {signals} signals"
    );
    // The head words counted every committed operation once, restarts included: with every
    // stack empty, ops = pushes + pops and taken = pushes - pops.
    let (per, taken) = s.figures();
    let ops: u64 = per.iter().map(|f| f.ops).sum();
    assert_eq!(per.iter().map(|f| f.held).sum::<u64>(), 0);
    assert_eq!((ops, taken), (pushed + popped, pushed - popped), "the stacks' own counts");
}
