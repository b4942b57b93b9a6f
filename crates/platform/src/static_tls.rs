//! `StaticSlot`: two words per thread in static TLS (the initial-exec model), for the
//! allocation fast paths.
//!
//! Owns: one 16-byte thread-local block, `vmarena_front_slot`, zero in every new thread (and
//! in a child of `fork()`, a copy of the forking thread's), and the two accessors.
//!
//! Why: a shared library reaches the thread-locals Rust declares through `__tls_get_addr`
//! (the general-dynamic model): a call, about ten instructions inside it, and the
//! caller-saved registers lost around it, on every allocation and every free. The
//! initial-exec model places the block at a fixed offset from the thread pointer, read once
//! from the GOT: a load of the offset and a load relative to `%fs`. Stable Rust cannot ask for
//! that model, so the block is declared in assembly and read with inline assembly, as
//! jemalloc, mimalloc and glibc's own libraries do in C. The price is the one these
//! libraries pay: the library is marked `DF_STATIC_TLS`, and a `dlopen` of it needs 16 bytes
//! of the static TLS surplus that glibc keeps for such libraries.
//!
//! x86-64 only; elsewhere the same interface is a `const` Rust thread-local (no destructor,
//! so no lazy-initialisation check), read through the general-dynamic model.
//!
//! The `unsafe` of this module: the inline assembly, which reads or writes the calling
//! thread's own block only.

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 4",
    ".globl vmarena_front_slot",
    ".hidden vmarena_front_slot",
    ".type vmarena_front_slot, @object",
    ".size vmarena_front_slot, 16",
    "vmarena_front_slot:",
    ".zero 16",
    ".popsection",
);

/// Read the calling thread's two words.
#[inline(always)]
pub fn get() -> (u64, usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let (a, b): (u64, usize);
        // SAFETY: reads the two words of this thread's own block, at the offset the dynamic
        // linker put in the GOT entry (`GOTTPOFF`) from the thread pointer (`%fs` base); no
        // other memory is touched, no register but the outputs is changed.
        unsafe {
            core::arch::asm!(
                "mov {off}, qword ptr [rip + vmarena_front_slot@GOTTPOFF]",
                "mov {a}, qword ptr fs:[{off}]",
                "mov {b}, qword ptr fs:[{off} + 8]",
                off = out(reg) _,
                a = out(reg) a,
                b = out(reg) b,
                options(nostack, readonly, preserves_flags),
            );
        }
        (a, b)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        fallback::SLOT.with(|s| s.get())
    }
}

/// Set the calling thread's two words.
#[inline(always)]
pub fn set(a: u64, b: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: writes the two words of this thread's own block (see `get`); nothing else.
    unsafe {
        core::arch::asm!(
            "mov {off}, qword ptr [rip + vmarena_front_slot@GOTTPOFF]",
            "mov qword ptr fs:[{off}], {a}",
            "mov qword ptr fs:[{off} + 8], {b}",
            off = out(reg) _,
            a = in(reg) a,
            b = in(reg) b,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    fallback::SLOT.with(|s| s.set((a, b)));
}

#[cfg(not(target_arch = "x86_64"))]
mod fallback {
    use std::cell::Cell;
    thread_local! {
        pub(super) static SLOT: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_starts_at_zero_and_keeps_its_own_words() {
        set(7, 8);
        assert_eq!(get(), (7, 8));
        let other = std::thread::spawn(|| {
            let first = get();
            set(1, 2);
            (first, get())
        })
        .join()
        .unwrap();
        assert_eq!(other, ((0, 0), (1, 2)));
        assert_eq!(get(), (7, 8), "another thread's writes are not this thread's");
        set(0, 0);
    }
}
