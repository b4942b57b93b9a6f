//! The process-wide default space, created on first use from the environment.
//!
//! Options come from the environment variables of [`SpaceOptions`] and
//! [`ArenaOptions`](vmarena_engine::ArenaOptions) (for example `VMARENA_SPACE_BYTES`,
//! `VMARENA_STRATEGY`). A malformed variable is reported once on stderr and the default used.
//!
//! One arena default differs from [`ArenaOptions::default`]: the size pools stop at
//! [`DEFAULT_SPACE_POOL_MAX_PAGES`] (64 KiB). The default space serves the preload shim and
//! `VmAlloc`, whose requests start at 64 KiB and come in many sizes; above the pools a freed
//! area can be split, joined and extended for a request of another size, while a pool entry
//! serves only its own size and holds its memory until a purge. `VMARENA_POOL_MAX_PAGES`
//! overrides it (DESIGN.md, section 14).

use crate::options::SpaceOptions;
use crate::space::VmSpace;
use std::sync::OnceLock;
use vmarena_engine::ArenaOptions;

static DEFAULT: OnceLock<Result<VmSpace, String>> = OnceLock::new();

/// The default space, or the reason it could not be created (for example when the address
/// space cannot be reserved).
pub fn default_space() -> Result<&'static VmSpace, &'static str> {
    DEFAULT
        .get_or_init(|| {
            let _inside = vmarena_platform::reentry::enter();
            VmSpace::new("vmalloc", SpaceOptions::from_env(), default_space_options())
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

/// Size pools of the default space: areas of up to 16 pages (64 KiB of 4 KiB pages).
pub const DEFAULT_SPACE_POOL_MAX_PAGES: u64 = 16;

/// The default space's arena options: [`ArenaOptions::default`] with the pools stopping at
/// [`DEFAULT_SPACE_POOL_MAX_PAGES`], then the environment (a malformed variable is reported on
/// stderr and ignored, as [`ArenaOptions::from_env`] does).
pub fn default_space_options() -> ArenaOptions {
    ArenaOptions { pool_max_pages: DEFAULT_SPACE_POOL_MAX_PAGES, ..ArenaOptions::default() }
        .with_env_or_report()
}

/// The default space if it was created already (never creates it): for paths that only act on
/// memory the space may have handed out (frees, size queries, purges, fork handlers).
pub fn existing_default_space() -> Option<&'static VmSpace> {
    DEFAULT.get().and_then(|r| r.as_ref().ok())
}
