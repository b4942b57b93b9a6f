//! Releasing areas and returning them to the free tree: what a purge does with the areas it
//! detached, and what a strategy does with one area when it releases it on its own (a free
//! while the purges have fallen behind, step Reclaim, step Move's donors).
//!
//! Owns nothing: each function works on the context's backing and counters and on the free
//! tree of the strategy it is given, under the tree's lock, held for at most [`MERGE_CHUNK`]
//! areas at a time. No other lock is held on entry but the purge mutex (by a purge or step
//! Reclaim).

use super::context::Context;
use super::strategy_ops::{remove_record, tree_alloc, StrategyOps};
use crate::area::{AreaKind, AreaTag, Contents};
use crate::arena::site;
use crate::error::FreeError;
use crate::sync::Ordering::Relaxed;
use vmarena_core::{BusyArea, Request, Span};

/// Most areas merged into the free tree in one hold of its lock, so that pool misses on other
/// threads are not held up for a whole batch.
const MERGE_CHUNK: usize = 256;

/// Release the memory of `release` in one batch, with the free pages that share a huge
/// page with one of them (the spill, held out of the tree meanwhile and returned for
/// [`merge_batch`]). Returns the syscalls made and the spill.
pub(crate) fn release_batch<S: StrategyOps>(ctx: &Context, st: &S, release: &[Span]) -> (u64, Vec<Span>) {
    let spill = claim_spill(ctx, st, release);
    let mut calls = ctx.backing.release(release) as u64;
    if !spill.is_empty() {
        calls += ctx.backing.release_free(&spill) as u64;
    }
    (calls, spill)
}

/// Release the memory of one area that is in no list and no map (unless `contents` says there
/// is none), retire its guard and merge it into the free tree: a purge of one area, made by a
/// freeing thread ([`StrategyOps::free_released`]), without the purge mutex.
pub(crate) fn release_now<S: StrategyOps>(ctx: &Context, st: &S, area: Span, contents: Contents) {
    let c = &ctx.counters;
    let calls = if contents == Contents::Emptied && ctx.backing.release_granule_pages() <= 1 {
        merge_batch(ctx, st, &[area], &[], &[])
    } else {
        let (calls, spill) = release_batch(ctx, st, &[area]);
        calls + merge_batch(ctx, st, &[area], &[], &spill)
    };
    match contents {
        Contents::Resident => c.released_on_free.fetch_add(1, Relaxed),
        Contents::Emptied => c.emptied_on_free.fetch_add(1, Relaxed),
    };
    c.release_calls.fetch_add(calls, Relaxed);
}

/// [`StrategyOps::free_released`] for a strategy whose records are reached through
/// [`StrategyOps::with_busy`]: the record removed under the busy lock, then the area released
/// and merged into the free tree by this thread.
pub(crate) fn free_released_via_busy<S: StrategyOps>(
    ctx: &Context,
    st: &S,
    start: u64,
    kind: Option<AreaKind>,
    contents: Contents,
) -> Result<BusyArea<AreaTag>, FreeError> {
    let a = st.with_busy(ctx, start, |b| remove_record(b, start, kind))?;
    release_now(ctx, st, Span::new(start, a.pages), contents);
    Ok(a)
}

/// Retire the guards of `to_tree` and merge it, the `chunks` and the `spill` into the free
/// tree. Returns the syscalls made.
pub(crate) fn merge_batch<S: StrategyOps>(
    ctx: &Context,
    st: &S,
    to_tree: &[Span],
    chunks: &[Span],
    spill: &[Span],
) -> u64 {
    merge_batch_claiming(ctx, st, to_tree, chunks, spill, None).0
}

/// [`merge_batch`], carving `claim` from the tree in the last merge's hold of its
/// lock ([`merge_lists`]): the syscalls made and the carved start.
pub(crate) fn merge_batch_claiming<S: StrategyOps>(
    ctx: &Context,
    st: &S,
    to_tree: &[Span],
    chunks: &[Span],
    spill: &[Span],
    claim: Option<&Request>,
) -> (u64, Option<u64>) {
    let calls = ctx.backing.retire(to_tree) as u64;
    (calls, merge_lists(ctx, st, [to_tree, chunks, spill], claim))
}

/// Merge `lists` into the free tree in holds of at most [`MERGE_CHUNK`] areas; in the last
/// hold (the only one when the lists are empty; none when they are and there is no
/// `claim`), carve `claim` from the tree: its start.
pub(crate) fn merge_lists<S: StrategyOps>(
    ctx: &Context,
    st: &S,
    lists: [&[Span]; 3],
    claim: Option<&Request>,
) -> Option<u64> {
    let mut areas = lists.into_iter().flatten().peekable();
    if claim.is_none() && areas.peek().is_none() {
        return None;
    }
    loop {
        let carved = st.with_free_tree(&site::PURGE_MERGE, |t| {
            for &Span { start: s, pages } in areas.by_ref().take(MERGE_CHUNK) {
                if let Err(e) = t.insert_merge(s, s + pages) {
                    panic!("{}: area [{s:#x}, +{pages}) returned twice to the free tree: {e:?}", ctx.name);
                }
            }
            if areas.peek().is_some() {
                return None;
            }
            Some(claim.and_then(|r| tree_alloc(t, r)))
        });
        if let Some(c) = carved {
            return c;
        }
    }
}

/// The free pages around the released areas that lie in the same release granule (a
/// huge page) as an area's first or last page, taken out of the free tree: `(start,
/// pages)`. A huge page made by the first touch of an area may reach into free space
/// below or above it; releasing the area splits that huge page and would leave the free
/// part resident for good, with nothing to release it later.
pub(crate) fn claim_spill<S: StrategyOps>(ctx: &Context, st: &S, released: &[Span]) -> Vec<Span> {
    let gran = ctx.backing.release_granule_pages();
    if gran <= 1 || released.is_empty() {
        return Vec::new();
    }
    let mut spill = Vec::new();
    st.with_free_tree(&site::PURGE_SPILL, |t| {
        for &Span { start: s, pages } in released {
            let e = s + pages;
            let (below, above) = t.free_around(s, e);
            let head = below.min(s % gran);
            let tail = above.min((gran - e % gran) % gran);
            if head > 0 {
                t.take(s - head, s).expect("free range touching a released area");
                spill.push(Span::new(s - head, head));
            }
            if tail > 0 {
                t.take(e, e + tail).expect("free range touching a released area");
                spill.push(Span::new(e, tail));
            }
        }
    });
    spill
}

/// Merge areas into the free tree, re-taking the lock every few hundred merges so that pool
/// misses on other threads are not held up for the whole batch.
pub(crate) fn merge_into_tree<S: StrategyOps>(ctx: &Context, st: &S, areas: &[Span]) {
    merge_lists(ctx, st, [areas, &[], &[]], None);
}
