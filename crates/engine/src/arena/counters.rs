//! The arena's event counters: the statistics of [`ArenaStats`] that are counted as they
//! happen rather than read from a structure under its lock.
//!
//! Owns: one relaxed atomic per counter, written on slow paths only (tree allocations, purges,
//! failures, moves); no thread-cache or pool-hit path writes them. The list below names fields
//! of the statistics table, so a counter the table does not have fails to compile, and
//! [`Counters::add_to`] is the one copy into a snapshot.

use crate::arena::stats::ArenaStats;
use crate::sync::AtomicU64;
use crate::sync::Ordering::Relaxed;

/// Declares `Counters` with one atomic per named field of [`ArenaStats`].
macro_rules! counters {
    ($($field:ident),* $(,)?) => {
        /// Event counters of one arena (see the module documentation).
        pub(crate) struct Counters {
            $( pub(crate) $field: AtomicU64, )*
        }

        impl Default for Counters {
            fn default() -> Self {
                Counters { $( $field: AtomicU64::new(0), )* }
            }
        }

        impl Counters {
            /// Add every counter to the snapshot's field of the same name.
            pub(crate) fn add_to(&self, s: &mut ArenaStats) {
                $( s.$field += self.$field.load(Relaxed); )*
            }
        }
    };
}

counters!(
    tree_allocs,
    tree_pages,
    extend_pages,
    purges,
    full_purges,
    range_reclaims,
    areas_released,
    pages_released,
    release_calls,
    released_on_free,
    alloc_failures,
    bad_frees,
    page_moves,
    moved_pages,
    grown_in_place,
    grown_in_place_pages,
    emptied_on_free,
    move_failures,
    heals,
    grows,
    grown_pages,
    shrinks,
    shrunk_pages,
    table_pages_dropped,
    blocks_renewed,
);
