//! What the library does when the loader loads it, before the program's first call: register
//! the `fork()` handlers ([`crate::fork`]) and the process's `membarrier` registrations (and
//! read the possible CPU count: `vmarena_platform::early::prepare`), and grow the descriptor
//! table to where vmarena keeps its descriptors (`vmarena_platform::kept_fd::grow_table`); with
//! `VMARENA_STATS=1`, have the statistics printed at exit (`capi/stats.rs`).
//!
//! Owns: one constructor in `.init_array`, which every form of the library carries
//! (`libvmarena.so`, `libvmarena.a` and the preload shim; a Rust program linking the crate gets
//! it where the linker keeps the object, and [`crate::VmSpace`] repeats both registrations,
//! as no-ops when done).
//!
//! Why here: both the `membarrier` registration and the growth of a descriptor table shared by
//! several threads wait for an RCU grace period in the kernel, and a default space built on the
//! first call of a worker thread paid both (docs/bench-log/design-notes.md, section 16, "When the
//! process registers", has the figures). For `membarrier`: the default space's thread caches need
//! the process registered for private expedited barriers (`vmarena_platform::membarrier`), and the
//! kernel makes the registration wait for an RCU grace period once the process has several threads:
//! milliseconds from a worker thread, against a fraction of that at load, when a program has one
//! thread (the same section). A library opened later with `dlopen` in a threaded process pays the
//! wait once, in `dlopen`, and not in a request. A kernel without the call (or a seccomp filter)
//! fails the registration; the failure is remembered, and the caches are built without barriers.
//!
//! Unsafe (in the lint's sense): the constructor's placement in `.init_array`, a static with a
//! link section, which holds a plain function pointer and nothing else.
#![allow(unsafe_code)]

extern "C" fn at_load() {
    crate::fork::register_at_load();
    vmarena_platform::early::prepare();
    vmarena_platform::kept_fd::grow_table();
    crate::capi::stats::at_load();
}

/// The constructor: the loader calls it when the library is loaded.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;
