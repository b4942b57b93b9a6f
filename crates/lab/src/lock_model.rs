//! The many-core model: what a run's measured lock hold times predict for 32 or 64 cores.
//!
//! A machine with two cores cannot show the seeds' 64-way contention, but it can measure what
//! the contention is made of: how long each lock is held per unit of work, and how much work
//! is done outside locks. Those figures are the service demands of a closed queueing network
//! (one delay station for the work outside locks, one queueing station per lock shared by all
//! threads), which exact mean-value analysis (Reiser and Lavenberg, 1980) solves for any number
//! of threads, each on its own core:
//!
//! ```text
//! R_l(n) = D_l * (1 + Q_l(n - 1))        residence time at lock l
//! X(n)   = n / (Z + sum_l R_l(n))        throughput
//! Q_l(n) = X(n) * R_l(n)                 threads at lock l (waiting or holding)
//! ```
//!
//! Locks that each CPU has to itself (the Nodes strategy's node locks) are not shared: their
//! hold time counts as work outside shared locks. What the model leaves out: the cost of moving
//! a contended lock's cache line between cores, which grows with the core count (the kernel's
//! spinlock slowpath share includes it), so its predictions are a lower bound on the waiting.

/// Demands of one unit of work (one worker's share of a run), in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Demands {
    /// Work outside shared locks (the delay station's think time).
    pub outside_ns: f64,
    /// Hold time per shared lock class.
    pub shared_ns: Vec<(String, f64)>,
}

/// The model's answer for `threads` threads on as many cores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub threads: usize,
    /// Throughput relative to one thread.
    pub speedup: f64,
    /// Share of thread time spent waiting for shared locks.
    pub wait_share: f64,
}

/// Lock classes every thread contends for; the rest belong to one CPU each.
pub fn is_shared(lock: &str) -> bool {
    lock != "node"
}

impl Demands {
    /// Demands from a run's figures: `workers` threads, their summed time, and per lock class
    /// `(name, hold ns, wait ns)` summed over the run (hold times need lock timing on).
    pub fn from_run(workers: usize, worker_ns: f64, locks: &[(String, f64, f64)]) -> Demands {
        let n = workers.max(1) as f64;
        let wait: f64 = locks.iter().map(|l| l.2).sum();
        let shared: Vec<(String, f64)> =
            locks.iter().filter(|l| is_shared(&l.0)).map(|l| (l.0.clone(), l.1 / n)).collect();
        let shared_hold: f64 = shared.iter().map(|l| l.1).sum();
        let outside = ((worker_ns - wait) / n - shared_hold).max(0.0);
        Demands { outside_ns: outside, shared_ns: shared }
    }

    /// Exact mean-value analysis up to `threads`.
    pub fn predict(&self, threads: usize) -> Prediction {
        let mut q = vec![0.0f64; self.shared_ns.len()];
        let mut x = 0.0;
        let mut wait_share = 0.0;
        for n in 1..=threads.max(1) {
            let r: Vec<f64> = self.shared_ns.iter().zip(&q).map(|((_, d), q)| d * (1.0 + q)).collect();
            let cycle = self.outside_ns + r.iter().sum::<f64>();
            x = n as f64 / cycle;
            for (ql, rl) in q.iter_mut().zip(&r) {
                *ql = x * rl;
            }
            let waiting: f64 = r.iter().zip(&self.shared_ns).map(|(rl, (_, d))| rl - d).sum();
            wait_share = waiting / cycle;
        }
        let one = self.outside_ns + self.shared_ns.iter().map(|l| l.1).sum::<f64>();
        Prediction { threads: threads.max(1), speedup: x * one, wait_share }
    }

    /// The throughput bound no thread count passes: one over the largest shared demand, as a
    /// speedup over one thread (infinite without shared locks).
    pub fn bound(&self) -> f64 {
        let one = self.outside_ns + self.shared_ns.iter().map(|l| l.1).sum::<f64>();
        let worst = self.shared_ns.iter().map(|l| l.1).fold(0.0, f64::max);
        if worst > 0.0 {
            one / worst
        } else {
            f64::INFINITY
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(outside: f64, locks: &[f64]) -> Demands {
        Demands {
            outside_ns: outside,
            shared_ns: locks.iter().enumerate().map(|(i, &h)| (format!("l{i}"), h)).collect(),
        }
    }

    #[test]
    fn no_shared_lock_scales_linearly() {
        let p = d(100.0, &[]).predict(64);
        assert!((p.speedup - 64.0).abs() < 1e-9);
        assert_eq!(p.wait_share, 0.0);
    }

    #[test]
    fn one_thread_never_waits() {
        let p = d(100.0, &[50.0]).predict(1);
        assert!((p.speedup - 1.0).abs() < 1e-9);
        assert_eq!(p.wait_share, 0.0);
    }

    #[test]
    fn two_threads_match_the_hand_computed_network() {
        // Z = 100, D = 100. n = 1: R = 100, X = 1/200, Q = 0.5. n = 2: R = 150,
        // X = 2/250, speedup = 200 * 2/250 = 1.6, waiting 50 of 250 ns.
        let p = d(100.0, &[100.0]).predict(2);
        assert!((p.speedup - 1.6).abs() < 1e-9, "{p:?}");
        assert!((p.wait_share - 0.2).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn throughput_approaches_the_bottleneck_and_waiting_grows() {
        let m = d(88.0, &[10.0, 2.0]);
        assert!((m.bound() - 10.0).abs() < 1e-9);
        let p8 = m.predict(8);
        let p64 = m.predict(64);
        assert!(p64.speedup <= m.bound() + 1e-9 && p64.speedup > 9.5, "{p64:?}");
        assert!(p64.wait_share > p8.wait_share && p64.wait_share > 0.8, "{p8:?} {p64:?}");
    }

    #[test]
    fn demands_from_a_run_keep_node_locks_outside() {
        let locks = vec![("free".to_string(), 200.0, 50.0), ("node".to_string(), 400.0, 10.0)];
        let m = Demands::from_run(2, 2060.0, &locks);
        assert_eq!(m.shared_ns, vec![("free".to_string(), 100.0)]);
        // (2060 - 60) / 2 - 100 = 900: the node hold stays in the outside work.
        assert!((m.outside_ns - 900.0).abs() < 1e-9);
    }
}
