//! The three lock designs an arena can use (their state and operations: `arena/global.rs`,
//! `arena/split.rs`, `arena/nodes/`).
//!
//! ```text
//!  Global (before 2019)      Split (2019)                 Nodes (Linux 6.9)
//!  +-------------------+     +-------------+              +-------------+
//!  | global lock       |     | free lock   |              | free lock   |  taken on misses
//!  |  free tree        |     |  free tree  |              |  free tree  |
//!  |  busy map         |     +-------------+              +-------------+
//!  |  lazy list        |     | busy lock   |              node 0 .. node N-1, N = min(CPUs, 128)
//!  +-------------------+     |  busy map   |              +---------------+
//!                            |  lazy list  |              | node lock     |
//!                            +-------------+              |  busy shard   |
//!                                                         |  size pools   |
//!                                                         |  lazy list    |
//!                                                         |  chunk        |
//!                                                         +---------------+
//! ```
//!
//! Global and Split follow the older kernels: a freed area waits on the lazy list until a purge
//! releases its memory and merges it into the free tree; it is not reused before. Nodes is the
//! 6.9 design with the user-space twist of DESIGN.md, section 3: a freed area goes straight back
//! to the pool of the node that allocated it, memory still resident, and can be reused at once.

use std::fmt;
use std::str::FromStr;

/// Which lock design an arena uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// One lock over free space, busy areas and the lazy list.
    Global,
    /// One lock for free space, one for busy areas and the lazy list.
    Split,
    /// Per-CPU nodes: address-striped busy shards, per-node pools, global free lock on misses.
    Nodes,
}

impl Strategy {
    /// All strategies, oldest first.
    pub const ALL: [Strategy; 3] = [Strategy::Global, Strategy::Split, Strategy::Nodes];

    /// Lower-case name, as parsed.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Global => "global",
            Strategy::Split => "split",
            Strategy::Nodes => "nodes",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "global" => Ok(Strategy::Global),
            "split" => Ok(Strategy::Split),
            "nodes" => Ok(Strategy::Nodes),
            o => Err(format!("unknown strategy '{o}' (global, split or nodes)")),
        }
    }
}

impl crate::table::OptionValue for Strategy {
    fn parse_option(s: &str) -> Result<Self, String> {
        s.parse()
    }
}
