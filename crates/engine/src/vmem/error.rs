//! `VmemError`: why an integer arena refused a call. A refused call changed nothing.
//!
//! Owns: nothing but the values.

use std::fmt;

/// Why an integer arena refused a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmemError {
    /// An argument is malformed; the text names it.
    Invalid(&'static str),
    /// No span holds the request and no parent gave one.
    NoSpace {
        /// The arena's name.
        arena: String,
        /// The size asked for.
        size: u64,
        /// Integers free in the spans (held by caches included).
        free: u64,
        /// Spans of the arena.
        spans: usize,
    },
    /// The integer is not the start of a live allocation of this arena (never allocated,
    /// freed already, or not in any span).
    NotAllocated(u64),
    /// A span to add overlaps one the arena has.
    Overlap {
        /// The span's base.
        base: u64,
        /// The span's size.
        size: u64,
    },
    /// Allocations are live: the arena cannot be destroyed.
    Busy {
        /// Live allocations.
        live: u64,
    },
}

impl fmt::Display for VmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmemError::Invalid(what) => write!(f, "invalid argument: {what}"),
            VmemError::NoSpace { arena, size, free, spans } => write!(
                f,
                "{arena}: no room for {size} ({free} free in {spans} span(s), none of it fits the constraints)"
            ),
            VmemError::NotAllocated(at) => write!(f, "{at:#x} is not the start of a live allocation"),
            VmemError::Overlap { base, size } => {
                write!(f, "span [{base:#x}, +{size:#x}) overlaps a span of the arena or wraps")
            }
            VmemError::Busy { live } => write!(f, "{live} allocation(s) are live"),
        }
    }
}

impl std::error::Error for VmemError {}
