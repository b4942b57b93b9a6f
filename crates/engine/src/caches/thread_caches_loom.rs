//! The thread caches under `--cfg loom`: never built (`ThreadCaches::new` refuses), so the
//! models check the node paths. The caches' owner/drainer handshake relies on `membarrier`,
//! which loom cannot model; `tests/thread_cache.rs` stresses it on the real primitives.

#![allow(dead_code)]

use crate::caches::area_state::AreaStates;
pub(crate) use crate::caches::cache_interface::{Budget, CacheFigures, FreeFast};
use crate::sync::Arc;
use std::panic::Location;

/// `thread_caches/mod.rs`'s `CacheOwner`, over this stand-in's `ThreadCaches`.
pub(crate) trait CacheOwner: Send + Sync {
    fn caches(&self) -> Option<&ThreadCaches>;
    fn free_from_cache(&self, areas: &mut [vmarena_core::Span]);
    fn try_free_passed(&self, start: u64) -> bool;
    fn lazy_room(&self) -> u64;
    fn spilled(me: &Arc<Self>)
    where
        Self: Sized;
    fn registered(me: &Arc<Self>)
    where
        Self: Sized;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DepotDrain {
    All,
    Aged,
}

pub(crate) struct ThreadCaches {
    pub(crate) states: AreaStates,
}

impl ThreadCaches {
    pub(crate) fn new(
        _lo: u64,
        _hi: u64,
        _max_pages: u64,
        _budget: Budget,
        _cpu_pages: Option<(u64, u64)>,
    ) -> Result<ThreadCaches, String> {
        Err("not built under loom".into())
    }
    pub(crate) fn cpu_off(&self) -> Option<&str> {
        None
    }
    pub(crate) fn alloc<A: CacheOwner>(
        &self,
        _: &Arc<A>,
        _: u64,
        _: u64,
        _: Option<&'static Location<'static>>,
    ) -> Option<u64> {
        None
    }
    pub(crate) fn alloc_fit<A: CacheOwner>(
        &self,
        _: &Arc<A>,
        _: u64,
        _: Option<&'static Location<'static>>,
    ) -> Option<(u64, u64)> {
        None
    }
    pub(crate) fn free<A: CacheOwner>(&self, _: &Arc<A>, _: u64) -> FreeFast {
        FreeFast::Untracked
    }
    pub(crate) fn free_after_claim<A: CacheOwner>(&self, _: &Arc<A>, _: u64) -> FreeFast {
        FreeFast::Untracked
    }
    pub(crate) fn commit(&self, _: u64) -> bool {
        true
    }
    pub(crate) fn hit_path(&self) -> Option<crate::caches::hit_path::HitPath> {
        None
    }
    pub(crate) fn alloc_hit(&self, _: u64, _: Option<&'static Location<'static>>) -> Option<u64> {
        None
    }
    pub(crate) fn free_hit(&self, _: u64) -> Option<(u64, Option<&'static Location<'static>>)> {
        None
    }
    pub(crate) fn discard_table(&self, _: &[vmarena_core::Span]) -> (u64, u64) {
        (0, 0)
    }
    pub(crate) fn table_resident_bytes(&self) -> u64 {
        0
    }
    pub(crate) fn spans(&self) -> Vec<Vec<std::ops::Range<usize>>> {
        Vec::new()
    }
    pub(crate) fn drain_all<A: CacheOwner + ?Sized>(&self, _: &A, _: DepotDrain) -> u64 {
        0
    }
    pub(crate) fn figures(&self) -> CacheFigures {
        CacheFigures::default()
    }
    pub(crate) fn with_cached_starts<R>(&self, f: impl FnOnce(Result<Vec<u64>, String>) -> R) -> R {
        f(Ok(Vec::new()))
    }
}
