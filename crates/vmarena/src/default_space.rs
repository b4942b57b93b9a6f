//! The process-wide default space, created on first use from the environment.
//!
//! Options come from the environment variables of [`SpaceOptions`] and
//! [`ArenaOptions`](vmarena_engine::ArenaOptions) (for example `VMARENA_SPACE_BYTES`,
//! `VMARENA_STRATEGY`). A malformed variable is reported once on stderr and the default used.

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
            VmSpace::new("vmalloc", SpaceOptions::from_env(), ArenaOptions::from_env())
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

/// The default space if it was created already (never creates it): for paths that only act on
/// memory the space may have handed out (frees, size queries, purges, fork handlers).
pub fn existing_default_space() -> Option<&'static VmSpace> {
    DEFAULT.get().and_then(|r| r.as_ref().ok())
}
