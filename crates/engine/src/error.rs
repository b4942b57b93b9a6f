//! Why an arena or a frame allocator refused a request. Every refusal leaves it unchanged; the
//! texts name the arena, the request and the limits that were hit.

use std::fmt;
use vmarena_core::RequestError;

/// Why an allocation failed. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// Size 0, a bad alignment or an empty window.
    Invalid(RequestError),
    /// The window is not inside the arena.
    OutOfRange {
        /// Window asked for.
        window: (u64, u64),
        /// The arena's range.
        arena: (u64, u64),
    },
    /// The window holds no start of the requested alignment with room for the request, so no
    /// purge could help; refused without one.
    NoAlignedStart {
        /// Pages asked for.
        pages: u64,
        /// Alignment asked for.
        align_pages: u64,
        /// Window searched.
        window: (u64, u64),
    },
    /// No room even after a full purge.
    NoSpace {
        /// Arena name.
        arena: String,
        /// Pages asked for.
        pages: u64,
        /// Alignment asked for.
        align_pages: u64,
        /// Window searched.
        window: (u64, u64),
        /// Free pages left in the tree.
        free_pages: u64,
        /// Largest free range.
        largest_free: u64,
        /// Pages of live areas when the allocation gave up.
        live_pages: u64,
        /// Pages of lazily freed areas when the allocation gave up.
        lazy_pages: u64,
    },
    /// A non-blocking request found no room without purging.
    WouldBlock,
    /// Two parts of a congruent allocation overlap ([`crate::Arena::alloc_congruent`]).
    PartsOverlap {
        /// The offset, in pages, of the part that overlaps the one before it.
        offset_pages: u64,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::Invalid(RequestError::ZeroSize) => write!(f, "size 0"),
            AllocError::Invalid(RequestError::BadAlignment) => write!(f, "alignment is not a power of two"),
            AllocError::Invalid(RequestError::BadNocross) => {
                write!(f, "nocross is not a power of two at least the size")
            }
            AllocError::Invalid(RequestError::BadWindow) => {
                write!(f, "window is empty or smaller than the request")
            }
            AllocError::OutOfRange { window, arena } => write!(
                f,
                "window [{:#x}, {:#x}) is outside the arena [{:#x}, {:#x})",
                window.0, window.1, arena.0, arena.1
            ),
            AllocError::NoAlignedStart { pages, align_pages, window } => write!(
                f,
                "no start in pages [{:#x}, {:#x}) is a multiple of {align_pages} pages with room for \
                 {pages} pages; nothing was purged",
                window.0, window.1
            ),
            AllocError::NoSpace {
                arena,
                pages,
                align_pages,
                window,
                free_pages,
                largest_free,
                live_pages,
                lazy_pages,
            } => write!(
                f,
                "{arena}: no room for {pages} pages (alignment {align_pages}) in pages [{:#x}, {:#x}) \
                 after a full purge; {free_pages} pages free, largest free range {largest_free} pages, \
                 {live_pages} pages live, {lazy_pages} pages lazy",
                window.0, window.1
            ),
            AllocError::WouldBlock => write!(f, "no room without purging, and the request may not block"),
            AllocError::PartsOverlap { offset_pages } => {
                write!(f, "the congruent part at offset {offset_pages} pages overlaps the part before it")
            }
        }
    }
}

impl std::error::Error for AllocError {}

/// Why a free was refused. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// `start` is not the first page of a live area (interior, foreign, or already freed).
    NotLive {
        /// The page given.
        start: u64,
    },
    /// `start` is a live area of another kind than the free asked for.
    WrongKind {
        /// The page given.
        start: u64,
        /// What the area holds.
        kind: crate::AreaKind,
    },
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::NotLive { start } => {
                write!(f, "page {start:#x} is not the start of a live area")
            }
            FreeError::WrongKind { start, kind } => {
                write!(
                    f,
                    "page {start:#x} starts a live area of kind {kind:?}, which this free does not release"
                )
            }
        }
    }
}

impl std::error::Error for FreeError {}

/// Why a frame call was refused. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Order above 10, or a count of 0.
    BadRequest(String),
    /// No frames, even after draining every list and queue. The text gives the figures.
    NoFrames(String),
    /// The frame is not the head of a block of that order held by a caller.
    NotHeld(u32),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadRequest(m) | FrameError::NoFrames(m) => f.write_str(m),
            FrameError::NotHeld(p) => write!(f, "frame {p} is not the head of a block held with that order"),
        }
    }
}

impl std::error::Error for FrameError {}
