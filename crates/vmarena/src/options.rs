//! Space options: one table (see `vmarena_engine::table`). Arena options are a table of their
//! own, [`ArenaOptions`](vmarena_engine::ArenaOptions).

use vmarena_engine::options_table;
use vmarena_engine::table::OptionValue;
use vmarena_platform::Advice;

/// How released memory is given back: the table's `release` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleaseAdvice(pub Advice);

impl OptionValue for ReleaseAdvice {
    fn parse_option(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "dontneed" | "madv_dontneed" => Ok(ReleaseAdvice(Advice::DontNeed)),
            "free" | "madv_free" => Ok(ReleaseAdvice(Advice::Free)),
            o => Err(format!("'{o}' is not a release advice (dontneed or free)")),
        }
    }
}

/// The default space's reservation when the environment sets none: 1 TiB of address space,
/// inaccessible until the space commits it as it grows (`backing.rs`), so that a process can
/// hold hundreds of GiB through it. Smaller where the process may not map that much
/// (`default_space::fit_to_process`).
pub const DEFAULT_SPACE_BYTES: u64 = 1 << 40;

options_table! {
    /// How a [`VmSpace`](crate::VmSpace) is built. The default space reads the environment.
    pub struct SpaceOptions {
        /// Size of the reservation: address space, inaccessible until the space commits it in steps as it grows (the default space: 1 TiB fitted to RLIMIT_AS, halved while refused, and further reservations of that size when full; set, exactly this and no growth).
        space_bytes: u64 = 64 << 30, "bytes", "VMARENA_SPACE_BYTES";
        /// Guard pages after each area (the kernel uses one).
        guard_pages: u64 = 1, "pages", "VMARENA_GUARD_PAGES";
        /// Enforce guards with MADV_GUARD_INSTALL where the kernel has it (else gaps only).
        guard_enforce: bool = true, "bool", "VMARENA_GUARD_ENFORCE";
        /// Large areas may fault in transparent huge pages (MADV_HUGEPAGE; with enforced guards only).
        huge_pages: bool = true, "bool", "VMARENA_HUGE_PAGES";
        /// Step Move moves pages with UFFDIO_MOVE (Linux 6.8+; the reservation is registered with a userfaultfd, no fault events) where the kernel allows, else with mremap.
        uffd_moves: bool = true, "bool", "VMARENA_UFFD_MOVES", experiment;
        /// How purges release memory: dontneed (RSS falls now) or free (lazily, under pressure).
        release: ReleaseAdvice = ReleaseAdvice(Advice::DontNeed), "dontneed|free", "VMARENA_RELEASE";
        /// Mappings vm_unmap_ram may leave until their vmap block is freed (0: unmap at once).
        map_ram_lazy_max: u64 = 4096, "mappings", "VMARENA_MAP_RAM_LAZY_MAX";
    }
}
