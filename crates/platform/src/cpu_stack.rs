//! `CpuStacks`: per-CPU stacks of words, pushed and popped in restartable sequences.
//!
//! The user-space form of a per-CPU list that the kernel guards by disabling preemption: a push
//! or a pop runs as a restartable sequence (rseq) on the CPU whose stack it touches, and the
//! kernel moves a thread that is preempted, migrated or signalled inside one to the sequence's
//! abort handler, from where the operation runs again. The stacks need no lock and no locked
//! instruction: each sequence ends with one committing store of the stack's head word.
//!
//! Owns: `cpus x per_cpu` stacks ([`crate::cpu::possible`] CPUs), each on 512 bytes of its own:
//! the head word, the cap, a stopped flag, then [`SLOTS`] slots, in one anonymous mapping of
//! their own (so a stack no push reaches stays untouched memory). The head word holds the length
//! in its low byte and, above it, the count of pushes and pops the stack has committed, so that
//! the one committing store also counts the operation: pops are then `(ops - len - taken) / 2`
//! exactly, with `taken` what drains took ([`CpuStacks::figures`]), without a counter of its own
//! on the fast path.
//!
//! Who writes what:
//! - a sequence running on CPU `c` writes the slots and the length of CPU `c`'s stacks, and only
//!   after it read the stopped flag clear, inside the same sequence;
//! - [`CpuStacks::drain`] (one drainer at a time) sets every stopped flag, then fences with
//!   [`crate::membarrier::rseq_fence`]: every sequence that began before the fence is restarted,
//!   and every one that begins after it reads the flag set and gives up. The drainer then owns
//!   every stack until it clears the flags;
//! - [`CpuStacks::set_cap`] writes a cap on every CPU, [`CpuStacks::set_cap_of`] one CPU's
//!   (pushes read it; it bounds what a push may add), and [`CpuStacks::drain_setting_caps`]
//!   writes caps while the stacks are stopped and empty.
//!
//! Invariant: `len <= SLOTS` and `cap <= SLOTS`; a push commits only below the cap; a drain
//! keeps the operation count and clears the length.
//!
//! x86-64 only, with the rseq area glibc registers for every thread (2.35 on) and `membarrier`'s
//! rseq commands (Linux 5.10 on); [`CpuStacks::new`] says which is missing.
//!
//! The engine's per-CPU caches (`vmarena_engine`'s `cpu_cache.rs`) are its user; they put the
//! drainer's mutex ([`CpuStacks::lock_for_fork`]) in the fork registry, as every lock of an
//! arena is: a fork during a drain would otherwise leave the child a locked mutex and stopped
//! stacks.
//!
//! Unsafe: the two sequences, inline assembly whose descriptor the kernel reads from section
//! `__rseq_cs`, with the signature glibc registers before the abort handler.

use crate::membarrier;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Mutex, MutexGuard};

/// Slots of one stack.
pub const SLOTS: usize = 61;

/// The head word's length field (its low byte); the operation count is above it.
const LEN_MASK: u64 = 0xff;
const _: () = assert!(SLOTS as u64 <= LEN_MASK);

/// One stack: the sequences below address these fields by their byte offsets (0, 8, 16, 24).
#[repr(C, align(64))]
struct Stack {
    /// Length (low byte) and committed pushes and pops (above it).
    head: AtomicU64,
    cap: AtomicU64,
    stopped: AtomicU64,
    slot: [AtomicU64; SLOTS],
}

const STACK_BYTES: usize = 512;
const _: () = assert!(std::mem::size_of::<Stack>() == STACK_BYTES);

/// One restartable sequence on this CPU's stack: its descriptor (section `__rseq_cs`: start,
/// length up to the end of the committing store, abort handler), the caller's first line (the
/// outcome's reset), the store of the descriptor's address into the thread's rseq area (at the
/// geometry's offset from `%fs`, the thread pointer), then `c` = this CPU's stack of
/// offset `off` (giving up on a CPU id past the table or a stopped stack), the caller's lines
/// (anything that may run again, then one committing store as the last line; `jmp 5f` gives
/// up), and the abort handler after glibc's x86 signature, which runs the whole sequence again
/// from the reset (the kernel clears the descriptor on an abort). The caller supplies the
/// operands `geo` (a [`CpuGeometry`]), `off`, `c`, `n` and `t`. Everything the sequence
/// needs is read through `geo`, and the outcome leaves in registers, so that it takes few
/// registers and no memory round trip on the caller's path.
#[cfg(target_arch = "x86_64")]
macro_rules! rseq_on_this_cpu {
    ($reset:literal; $($line:literal),+; $($operands:tt)*) => {
        std::arch::asm!(
            ".pushsection __rseq_cs, \"aw\"",
            ".balign 32",
            "3:",
            ".long 0, 0",
            ".quad 1f, (2f - 1f), 4f",
            ".popsection",
            "6:",
            $reset,
            "movq 24({geo}), {c}",
            "leaq 3b(%rip), {t}",
            "movq {t}, %fs:8({c})",
            "1:",
            "movl %fs:4({c}), {c:e}",
            "cmpq 8({geo}), {c}",
            "jae 5f",
            "imulq 16({geo}), {c}",
            "addq ({geo}), {c}",
            "addq {off}, {c}",
            "cmpq $0, 16({c})",
            "jne 5f",
            $($line,)+
            "2:",
            "5:",
            ".pushsection __rseq_failure, \"ax\"",
            ".long 0x53053053",
            "4:",
            "jmp 6b",
            ".popsection",
            $($operands)*
        )
    };
}

/// Where the stacks are, as the sequences read it (byte offsets 0, 8, 16, 24 are fixed by
/// them): the first CPU's first stack, the CPUs, the bytes of one CPU's stacks, and the rseq
/// area's offset from the thread pointer (glibc's `__rseq_offset`, the same for every thread).
/// A user whose fast path must not load through a pointer to reach the stacks keeps a copy
/// beside its other hot fields ([`CpuStacks::geometry`]).
#[repr(C)]
#[derive(Debug)]
pub struct CpuGeometry {
    base: u64,
    cpus: u64,
    cpu_bytes: u64,
    rseq_offset: i64,
    per_cpu: u64,
}

const _: () = {
    assert!(std::mem::offset_of!(CpuGeometry, base) == 0);
    assert!(std::mem::offset_of!(CpuGeometry, cpus) == 8);
    assert!(std::mem::offset_of!(CpuGeometry, cpu_bytes) == 16);
    assert!(std::mem::offset_of!(CpuGeometry, rseq_offset) == 24);
};

/// The value [`CpuGeometry::pop`] reads as "nothing": no stack may hold it.
const NONE: u64 = u64::MAX;

impl CpuGeometry {
    /// Stacks each CPU has.
    pub fn per_cpu(&self) -> usize {
        self.per_cpu as usize
    }

    /// Pop the top of stack `stack` of the CPU this thread runs on: `None` when it is empty, a
    /// drain holds it, or there is no such stack. Makes no call and cannot panic.
    ///
    /// # Safety
    ///
    /// `self` is the geometry of stacks that are alive: their own, or a copy from
    /// [`CpuStacks::geometry`] of stacks not dropped yet.
    #[inline(always)]
    pub unsafe fn pop(&self, stack: usize) -> Option<u64> {
        if stack as u64 >= self.per_cpu {
            return None;
        }
        let off = (stack * STACK_BYTES) as u64;
        let v: u64;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `geo` is this geometry, of live stacks (the caller's promise); the rseq area
        // is this thread's (`cpu_id` at byte 4, `rseq_cs` at byte 8), which the kernel keeps
        // while the thread lives. The sequence reads the CPU id inside itself and touches only
        // that CPU's stack, `base + cpu x cpu_bytes + off` (a CPU id past the table gives up
        // first; `off` is below one CPU's bytes), at the offsets of `Stack`; the slot read is
        // below `len <= SLOTS` (the invariant). Its one committing store, the head word with
        // the length one less and the count one more (+256 - 1), is the last instruction before
        // label 2, and the descriptor names it; the abort handler follows the signature glibc
        // registered with the kernel and jumps back into this same block, where `v` is reset.
        unsafe {
            rseq_on_this_cpu!(
                "movq $-1, {v}";
                "movq ({c}), {t}",
                "movzbl {t:l}, {n:e}",
                "testl {n:e}, {n:e}",
                "jz 5f",
                "movq 16({c},{n},8), {v}",
                "addq $255, {t}",
                "movq {t}, ({c})";
                geo = in(reg) self as *const CpuGeometry,
                off = in(reg) off,
                v = out(reg) v,
                c = out(reg) _,
                n = out(reg) _,
                t = out(reg) _,
                options(att_syntax, nostack),
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let v = {
            let _ = off;
            NONE
        };
        (v != NONE).then_some(v)
    }

    /// Push `v` (never `u64::MAX`) on stack `stack` of the CPU this thread runs on: false, with
    /// nothing changed, when it is at its cap, a drain holds it, or there is no such stack.
    /// Makes no call and cannot panic.
    ///
    /// # Safety
    ///
    /// As for [`CpuGeometry::pop`].
    #[inline(always)]
    pub unsafe fn push(&self, stack: usize, v: u64) -> bool {
        if stack as u64 >= self.per_cpu || v == NONE {
            return false;
        }
        let off = (stack * STACK_BYTES) as u64;
        let ok: u64;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `pop`: the sequence touches only the stack of the CPU it read inside
        // itself, at the offsets of `Stack`; it writes slot `len` only when `len < cap <=
        // SLOTS`, and commits with its last store, the head word with the length and the
        // count one more each (+256 + 1); `ok` is reset when an abort runs it again.
        unsafe {
            rseq_on_this_cpu!(
                "xorl {ok:e}, {ok:e}";
                "movq ({c}), {t}",
                "movzbl {t:l}, {n:e}",
                "cmpq 8({c}), {n}",
                "jae 5f",
                "movq {v}, 24({c},{n},8)",
                "addq $257, {t}",
                "movl $1, {ok:e}",
                "movq {t}, ({c})";
                geo = in(reg) self as *const CpuGeometry,
                off = in(reg) off,
                v = in(reg) v,
                ok = out(reg) ok,
                c = out(reg) _,
                n = out(reg) _,
                t = out(reg) _,
                options(att_syntax, nostack),
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let ok = {
            let _ = off;
            0u64
        };
        ok != 0
    }
}

/// `n` stacks in a mapping of their own (anonymous, so every word reads zero: empty, cap 0,
/// running, until written): the pages of stacks no push reaches (a CPU that never runs this
/// process, a size it never frees) are never touched and cost no resident memory, whatever
/// the system allocator would have done with a zeroed request of this size.
struct StackTable {
    map: crate::Reservation,
    len: usize,
}

impl StackTable {
    /// `Err` when the mapping is refused (never an abort).
    fn new(n: usize) -> Result<StackTable, String> {
        let bytes = n
            .checked_mul(STACK_BYTES)
            .filter(|&b| b > 0)
            .ok_or_else(|| format!("per-CPU stacks: {n} stacks"))?;
        let map = crate::Reservation::new(bytes, STACK_BYTES)
            .map_err(|e| format!("per-CPU stacks: {bytes} bytes: {e}"))?;
        Ok(StackTable { map, len: n })
    }
}

impl std::ops::Deref for StackTable {
    type Target = [Stack];
    fn deref(&self) -> &[Stack] {
        // SAFETY: the mapping is readable and writable, aligned to a stack's 512 bytes, `len`
        // stacks long and lives as long as `self`; a fresh anonymous mapping reads as zero,
        // a valid value of every field (all `AtomicU64`), and all access goes through atomics.
        unsafe { std::slice::from_raw_parts(self.map.base() as *const Stack, self.len) }
    }
}

/// Per-CPU stacks of words.
pub struct CpuStacks {
    /// Where the stacks are (CPUs and stacks a CPU included), as the sequences read it.
    geo: CpuGeometry,
    stacks: StackTable,
    drainer: Mutex<()>,
    /// Values drains took, over all stacks (written under `drainer`).
    taken: AtomicU64,
}

/// What [`CpuStacks::figures`] counts for one stack index, summed over the CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackFigures {
    /// Values held now.
    pub held: u64,
    /// Committed pushes and pops.
    pub ops: u64,
}

impl CpuStacks {
    /// `per_cpu` stacks for every possible CPU, each with a cap of `cap` (at most [`SLOTS`]).
    /// `Err` when this machine cannot run the sequences, naming why.
    pub fn new(per_cpu: usize, cap: usize) -> Result<CpuStacks, String> {
        if !cfg!(target_arch = "x86_64") {
            return Err("per-CPU stacks need x86-64".into());
        }
        let Some(rseq_offset) = crate::cpu::rseq_offset() else {
            return Err("no rseq area: glibc 2.35 or later registers one for every thread".into());
        };
        membarrier::register_rseq()?;
        if per_cpu == 0 || cap > SLOTS {
            return Err(format!("per-CPU stacks: {per_cpu} stacks a CPU, cap {cap} (at most {SLOTS})"));
        }
        let cpus = crate::cpu::possible();
        let stacks = StackTable::new(cpus * per_cpu)?;
        if cap != 0 {
            for s in stacks.iter() {
                s.cap.store(cap as u64, Relaxed);
            }
        }
        let geo = CpuGeometry {
            base: stacks.as_ptr() as u64,
            cpus: cpus as u64,
            cpu_bytes: (per_cpu * STACK_BYTES) as u64,
            rseq_offset: rseq_offset as i64,
            per_cpu: per_cpu as u64,
        };
        Ok(CpuStacks { geo, stacks, drainer: Mutex::new(()), taken: AtomicU64::new(0) })
    }

    /// CPUs with stacks.
    pub fn cpus(&self) -> usize {
        self.geo.cpus as usize
    }

    /// `f(cpu, stack, value)` for every value held by the stacks `which` picks, oldest first
    /// within a stack: the count. Only meaningful while no sequence can commit on them (a
    /// drain's stop and fence, or no thread pushing or popping).
    fn visit_held(&self, f: &mut impl FnMut(usize, usize, u64), which: impl Fn(&Stack) -> bool) -> usize {
        let per_cpu = self.geo.per_cpu();
        let mut seen = 0;
        for (i, s) in self.stacks.iter().enumerate().filter(|(_, s)| which(s)) {
            let len = ((s.head.load(Acquire) & LEN_MASK) as usize).min(SLOTS);
            for slot in &s.slot[..len] {
                f(i / per_cpu, i % per_cpu, slot.load(Relaxed));
            }
            seen += len;
        }
        seen
    }

    /// A copy of the stacks' geometry, for a caller that keeps it beside its own hot fields;
    /// its `pop` and `push` are valid while these stacks live (the copy's safety contract).
    pub fn geometry(&self) -> CpuGeometry {
        CpuGeometry { ..self.geo }
    }

    /// Set the cap of stack `stack` of every CPU (at most [`SLOTS`]); a stack above it keeps
    /// what it holds and takes no push until it is below.
    pub fn set_cap(&self, stack: usize, cap: usize) {
        let per_cpu = self.geo.per_cpu();
        assert!(stack < per_cpu && cap <= SLOTS, "stack {stack}, cap {cap}");
        for c in 0..self.cpus() {
            self.stacks[c * per_cpu + stack].cap.store(cap as u64, Relaxed);
        }
    }

    /// The cap of stack `stack` of CPU `cpu` (0 for a CPU or stack past the table).
    pub fn cap_of(&self, cpu: usize, stack: usize) -> usize {
        self.one(cpu, stack).map_or(0, |s| s.cap.load(Relaxed) as usize)
    }

    /// Set the cap of stack `stack` of CPU `cpu` alone (at most [`SLOTS`]): false, nothing
    /// changed, for a CPU or stack past the table. As with [`CpuStacks::set_cap`], a stack
    /// above its new cap keeps what it holds.
    pub fn set_cap_of(&self, cpu: usize, stack: usize, cap: usize) -> bool {
        assert!(cap <= SLOTS, "cap {cap}");
        match self.one(cpu, stack) {
            Some(s) => {
                s.cap.store(cap as u64, Relaxed);
                true
            }
            None => false,
        }
    }

    /// Values stack `stack` of CPU `cpu` holds now (a racy read; 0 past the table).
    pub fn len_of(&self, cpu: usize, stack: usize) -> usize {
        self.one(cpu, stack).map_or(0, |s| (s.head.load(Relaxed) & LEN_MASK) as usize)
    }

    fn one(&self, cpu: usize, stack: usize) -> Option<&Stack> {
        let per_cpu = self.geo.per_cpu();
        (stack < per_cpu).then(|| self.stacks.get(cpu * per_cpu + stack)).flatten()
    }

    /// Pop the top of stack `stack` of the CPU this thread runs on: `None` when it is empty, a
    /// drain holds it, or there is no such stack. Makes no call and cannot panic.
    #[inline(always)]
    pub fn pop(&self, stack: usize) -> Option<u64> {
        // SAFETY: the stacks' own geometry, borrowed with them.
        unsafe { self.geo.pop(stack) }
    }

    /// Push `v` (never `u64::MAX`) on stack `stack` of the CPU this thread runs on: false, with
    /// nothing changed, when it is at its cap, a drain holds it, or there is no such stack.
    /// Makes no call and cannot panic.
    #[inline(always)]
    pub fn push(&self, stack: usize, v: u64) -> bool {
        // SAFETY: the stacks' own geometry, borrowed with them.
        unsafe { self.geo.push(stack, v) }
    }

    /// Empty every stack of every CPU: `f(cpu, stack, value)` for each value, oldest first
    /// within a stack. Stops the stacks, fences every running sequence, takes the values, and
    /// lets the stacks go again. `Err` when the fence failed (nothing was taken).
    pub fn drain(&self, f: impl FnMut(usize, usize, u64)) -> Result<usize, String> {
        self.drain_setting_caps(f, |_| None)
    }

    /// [`CpuStacks::drain`], and, while the stacks are stopped and empty, the cap of each
    /// stack index `i` for which `cap(i)` is `Some` set on every CPU (so no stack holds more
    /// than the cap it was given by the drain). A stack with cap 0 and nothing in it is left
    /// alone, neither stopped nor visited: no push can commit on it, so a table of many
    /// stacks few are used of stays untouched. A caller that raises caps while a drain runs
    /// must not count on the drain seeing what lands there (the engine raises caps under a
    /// mutex its drains hold).
    pub fn drain_setting_caps(
        &self,
        mut f: impl FnMut(usize, usize, u64),
        cap: impl Fn(usize) -> Option<usize>,
    ) -> Result<usize, String> {
        let _one = self.drainer.lock().unwrap_or_else(|e| e.into_inner());
        let per_cpu = self.geo.per_cpu();
        // The stopped flags are the drain's own record of which stacks it stopped (only the
        // drainer, under its mutex, writes them): nothing to allocate on the way, and a stack
        // a cap raise made usable meanwhile is neither visited nor restarted.
        for s in self.stacks.iter() {
            if s.cap.load(Relaxed) != 0 || s.head.load(Relaxed) & LEN_MASK != 0 {
                s.stopped.store(1, Relaxed);
            }
        }
        let restart = || {
            for s in self.stacks.iter() {
                if s.stopped.load(Relaxed) != 0 {
                    s.stopped.store(0, Release);
                }
            }
        };
        if !membarrier::rseq_fence() {
            restart();
            return Err(format!("membarrier rseq fence failed (errno {})", crate::last_errno()));
        }
        // The fence made every stopped stack the drainer's: no sequence commits on one until
        // its flag clears.
        let taken = self.visit_held(&mut f, |s| s.stopped.load(Relaxed) != 0);
        for (i, s) in self.stacks.iter().enumerate() {
            if s.stopped.load(Relaxed) != 0 {
                s.head.store(s.head.load(Relaxed) & !LEN_MASK, Relaxed);
            }
            if let Some(c) = cap(i % per_cpu) {
                assert!(c <= SLOTS, "cap {c}");
                // An unused stack keeps its untouched page when its cap stays 0.
                if s.cap.load(Relaxed) != c as u64 {
                    s.cap.store(c as u64, Relaxed);
                }
            }
        }
        self.taken.fetch_add(taken as u64, Relaxed);
        restart();
        Ok(taken)
    }

    /// True when some stack of some CPU holds a value now (a racy read: a drain worth its fence).
    pub fn any_held(&self) -> bool {
        self.stacks.iter().any(|s| s.head.load(Relaxed) & LEN_MASK != 0)
    }

    /// `f(cpu, stack, value)` for every value held, without taking it (for checkers: only
    /// meaningful while no thread pushes or pops). Holds the drainer's mutex meanwhile.
    pub fn for_each_held(&self, mut f: impl FnMut(usize, usize, u64)) {
        let _one = self.drainer.lock().unwrap_or_else(|e| e.into_inner());
        self.visit_held(&mut f, |_| true);
    }

    /// Per stack index, summed over the CPUs: values held and operations committed; and the
    /// values drains took, over all stacks. Pushes are `(ops + held + taken) / 2` and pops
    /// `(ops - held - taken) / 2`, exact when no operation runs meanwhile.
    pub fn figures(&self) -> (Vec<StackFigures>, u64) {
        let per_cpu = self.geo.per_cpu();
        let mut per = vec![StackFigures::default(); per_cpu];
        for (i, s) in self.stacks.iter().enumerate() {
            let head = s.head.load(Relaxed);
            let f = &mut per[i % per_cpu];
            f.held += head & LEN_MASK;
            f.ops += head >> 8;
        }
        (per, self.taken.load(Relaxed))
    }

    /// The drainer's mutex, for `fork()`: held, no drain runs and no stack is stopped.
    pub fn lock_for_fork(&self) -> MutexGuard<'_, ()> {
        self.drainer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stacks(per_cpu: usize, cap: usize) -> Option<CpuStacks> {
        match CpuStacks::new(per_cpu, cap) {
            Ok(s) => Some(s),
            Err(e) => {
                // Only a machine without the kernel's or glibc's part may refuse.
                assert!(
                    crate::cpu::rseq_area().is_none() || membarrier::register_rseq().is_err(),
                    "refused on a machine that has rseq and its fence: {e}"
                );
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    /// On one CPU, a stack is a stack: last in, first out, a cap, and nothing from another stack.
    #[test]
    fn one_cpu_pushes_and_pops_in_order_up_to_the_cap() {
        let Some(s) = stacks(2, 5) else { return };
        assert!(crate::cpu::pin_current_thread(0));
        for v in 1..=5 {
            assert!(s.push(0, v), "push {v}");
        }
        assert!(!s.push(0, 6), "a push at the cap is refused");
        assert!(s.push(1, 100));
        for v in (1..=5).rev() {
            assert_eq!(s.pop(0), Some(v));
        }
        assert_eq!(s.pop(0), None);
        assert_eq!(s.pop(1), Some(100));
        s.set_cap(0, 1);
        assert!(s.push(0, 7) && !s.push(0, 8));
        let mut seen = Vec::new();
        assert_eq!(s.drain(|cpu, stack, v| seen.push((cpu, stack, v))).unwrap(), 1);
        assert_eq!(seen, [(0, 0, 7)]);
        assert_eq!(s.pop(0), None, "the drain emptied it");
        // Stack 0: 6 pushes, 5 pops, 1 taken; stack 1: 1 push, 1 pop.
        let (per, taken) = s.figures();
        assert_eq!(taken, 1);
        assert_eq!(per[0], StackFigures { held: 0, ops: 11 });
        assert_eq!(per[1], StackFigures { held: 0, ops: 2 });
        assert!(!s.any_held());
        assert!(s.push(1, 9) && s.any_held());
        let mut held = Vec::new();
        s.for_each_held(|cpu, stack, v| held.push((cpu, stack, v)));
        assert_eq!(held, [(0, 1, 9)]);
    }

    /// One CPU's cap moves alone; a drain that sets caps takes what the stacks held and leaves
    /// the new caps; a stack with cap 0 and nothing in it takes no push and is left alone.
    #[test]
    fn one_cpus_cap_moves_alone_and_a_drain_sets_caps() {
        let Some(s) = stacks(3, 0) else { return };
        assert!(crate::cpu::pin_current_thread(0));
        assert!(!s.push(0, 1), "cap 0 takes nothing");
        assert!(s.set_cap_of(0, 0, 2));
        assert_eq!((s.cap_of(0, 0), s.cap_of(0, 1)), (2, 0));
        if s.cpus() > 1 {
            assert_eq!(s.cap_of(1, 0), 0, "another CPU's cap did not move");
        }
        assert!(!s.set_cap_of(s.cpus(), 0, 1) && !s.set_cap_of(0, 3, 1), "past the table");
        assert!(s.push(0, 1) && s.push(0, 2) && !s.push(0, 3));
        assert_eq!(s.len_of(0, 0), 2);
        assert!(s.set_cap_of(0, 2, 1) && s.push(2, 9));
        let mut seen = Vec::new();
        let n = s
            .drain_setting_caps(|cpu, stack, v| seen.push((cpu, stack, v)), |i| (i == 0).then_some(1))
            .unwrap();
        assert_eq!(n, 3);
        assert_eq!(seen, [(0, 0, 1), (0, 0, 2), (0, 2, 9)]);
        assert_eq!((s.cap_of(0, 0), s.cap_of(0, 2), s.len_of(0, 0)), (1, 1, 0), "cap of 0 set, of 2 kept");
        assert!(s.push(0, 4) && !s.push(0, 5), "the new cap holds");
        assert_eq!(s.figures().1, 3, "drains count what they took");
    }

    /// A child forked by a threaded parent keeps its thread's rseq area and the process's
    /// registration for the fence: its stacks push, pop and drain.
    #[test]
    fn a_forked_child_pushes_pops_and_drains() {
        let Some(s) = stacks(1, 4) else { return };
        // A second thread, so that the parent is threaded when it forks.
        let t = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
        assert!(s.push(0, 1));
        // SAFETY: the child only uses the stacks and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: alarm is a watchdog: a hang here kills the child with SIGALRM.
            unsafe { libc::alarm(10) };
            let mut got = Vec::new();
            // One CPU: the pop must find what the push left on this CPU's stack.
            let ok = crate::cpu::pin_current_thread(0)
                && s.push(0, 2)
                && s.pop(0) == Some(2)
                && s.drain(|_, _, v| got.push(v)).is_ok();
            let code = if ok && got == [1] && s.push(0, 3) && s.pop(0) == Some(3) { 0 } else { 1 };
            // SAFETY: leaving the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
        t.join().unwrap();
        // The parent's stack is its own.
        let mut got = Vec::new();
        s.drain(|_, _, v| got.push(v)).unwrap();
        assert_eq!(got, [1]);
    }
}
