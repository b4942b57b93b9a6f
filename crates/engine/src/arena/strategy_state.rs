//! The arena's one value of its strategy's state, and the one place that dispatches on it.
//!
//! Owns: [`StrategyState`], the state of whichever [`Strategy`] the arena was built with
//! (`global.rs`, `split.rs`, `nodes/`: each its locks and everything under them), and
//! [`with_strategy!`], which runs an operation of [`StrategyOps`](super::strategy_ops::StrategyOps)
//! on it. The operations common to the strategies (the allocation ladder's retries, the free's
//! threshold, the purge's release and merge, the checker's tiling, the congruent search) sit
//! above this file and reach a strategy only through the macro. Dispatch is a `match`, so
//! every call is static and inlined.

use crate::arena::strategy::Strategy;

/// The arena's strategy state. One per arena, so the variants' sizes do not matter; boxing the
/// larger ones would add a pointer chase to every lock acquisition.
#[allow(clippy::large_enum_variant)]
pub(crate) enum StrategyState {
    Global(super::global::Global),
    Split(super::split::Split),
    Nodes(super::nodes::Nodes),
}

/// Evaluate `$body` with `$s` bound to the arena's strategy state (`&Global`, `&Split` or
/// `&Nodes`), whichever it is: the one dispatch on the strategy outside the strategy files.
macro_rules! with_strategy {
    ($state:expr, $s:ident => $body:expr) => {
        match $state {
            $crate::arena::strategy_state::StrategyState::Global($s) => $body,
            $crate::arena::strategy_state::StrategyState::Split($s) => $body,
            $crate::arena::strategy_state::StrategyState::Nodes($s) => $body,
        }
    };
}
pub(crate) use with_strategy;

impl StrategyState {
    /// The state of `strategy` over pages `[lo, hi)`, its locks ranked for arena `owner`
    /// (sync/lock_rank.rs, `LockRank`).
    pub(crate) fn new(strategy: Strategy, owner: u64, lo: u64, hi: u64, nr_nodes: usize) -> StrategyState {
        match strategy {
            Strategy::Global => StrategyState::Global(super::global::Global::new(owner, lo, hi)),
            Strategy::Split => StrategyState::Split(super::split::Split::new(owner, lo, hi)),
            Strategy::Nodes => StrategyState::Nodes(super::nodes::Nodes::new(owner, lo, hi, nr_nodes)),
        }
    }
}
