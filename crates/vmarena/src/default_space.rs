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

/// True once the default space exists (without creating it).
pub fn default_space_exists() -> bool {
    matches!(DEFAULT.get(), Some(Ok(_)))
}
