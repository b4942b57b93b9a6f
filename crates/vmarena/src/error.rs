//! `VmError`: why a call on a space failed. Every refusal leaves the space unchanged.

use std::fmt;

/// Why a `VmSpace` call failed. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmError {
    /// Size 0.
    ZeroSize,
    /// The size overflows when rounded up to pages (with the guard).
    Overflow(usize),
    /// The alignment is not a power of two.
    BadAlignment(usize),
    /// The pointer is not the start of a live area of this space.
    NotLive(usize),
    /// No room, even after a full purge. The text names the space and its limits.
    NoSpace(String),
    /// A non-blocking request found no room without purging.
    WouldBlock,
    /// The pointer is not the start of a slot of this fixed pool held by a caller.
    NotHeld(usize),
    /// A parameter is out of range; the text says which.
    Invalid(String),
    /// The area holds caller's frames (vmap, vm_map_ram): unmap it with the matching call.
    WrongKind(usize),
    /// The frame pool has no frames left; the text gives its figures.
    NoFrames(String),
}

impl VmError {
    /// The errno the C ABI reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            VmError::ZeroSize
            | VmError::BadAlignment(_)
            | VmError::NotLive(_)
            | VmError::NotHeld(_)
            | VmError::Invalid(_)
            | VmError::WrongKind(_) => libc::EINVAL,
            VmError::Overflow(_) | VmError::NoSpace(_) | VmError::NoFrames(_) => libc::ENOMEM,
            VmError::WouldBlock => libc::EAGAIN,
        }
    }
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmError::ZeroSize => write!(f, "size 0"),
            VmError::Overflow(b) => write!(f, "size {b} overflows when rounded up to pages"),
            VmError::BadAlignment(a) => write!(f, "alignment {a} is not a power of two"),
            VmError::NotLive(p) => write!(f, "{p:#x} is not the start of a live area"),
            VmError::NoSpace(m) => f.write_str(m),
            VmError::NotHeld(p) => write!(f, "{p:#x} is not the start of a slot held from this pool"),
            VmError::Invalid(m) | VmError::NoFrames(m) => f.write_str(m),
            VmError::WrongKind(p) => {
                write!(f, "{p:#x} is not an area of this call's kind (frames mapped by vmap or vm_map_ram, or a fixed pool's slot): release it with the call that matches how it was made")
            }
            VmError::WouldBlock => {
                write!(f, "no room without purging, and the request may not block")
            }
        }
    }
}

impl std::error::Error for VmError {}
