//! Integer arenas from C (`vmarena_vmem_*`): vmem's interface over any integers (a JIT's code
//! range, a device heap, file extents, ids). The arena is the engine's [`Vmem`]; this file
//! holds its handles and its failure rules.
//!
//! Owns: the handles, each a box with a magic checked before anything else is read and cleared
//! before the box is freed. A handle holds the arena (a child's handle also keeps its parent
//! alive, whatever the parent's handle does). Integers are returned through an out-parameter:
//! 0 is a valid integer.
#![allow(unsafe_code)]

use super::ffi::{destroy, guarded, read_sized, write_sized};
use std::ffi::CStr;
use std::ptr::null_mut;
use vmarena_engine::{ArenaOptions, Constraints, Fit, Strategy, Vmem, VmemError, VmemOptions, VmemStats};
use vmarena_platform::set_errno;

const VMEM_MAGIC: u64 = 0x766d_656d_6172_6501;

/// `struct vmarena_vmem_options` of the header: every field 0 means its default; a shorter
/// struct (an older header) leaves the fields it lacks at theirs.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct VmemOptionsC {
    /// Bytes of the struct the caller filled (`sizeof`).
    pub size: u64,
    /// The unit of allocation, a power of two; 0: 1.
    pub quantum: u64,
    /// Imports from the parent are rounded up to a multiple of this; 0: the quantum.
    pub import_quantum: u64,
    /// `VMARENA_VMEM_INSTANT_FIT` (0) or `VMARENA_VMEM_LOWEST_FIT` (1).
    pub fit: u64,
    /// `VMARENA_STRATEGY_NODES` (0), `_SPLIT` (1) or `_GLOBAL` (2).
    pub strategy: u64,
    /// Instant fit: stripes of each span; 0: one per CPU where each holds 16,384 quanta.
    pub stripes: u64,
}

/// `struct vmarena_vmem_stats` of the header: its size, then [`VmemStats`] in its order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VmemStatsC {
    /// As `struct vmarena_stats`' size.
    pub size: u64,
    /// The figures.
    pub figures: VmemStats,
}

/// `vmarena_vmem` of the header.
pub struct VmemHandle {
    magic: u64,
    vm: Vmem,
}

fn handle<'a>(h: *const VmemHandle) -> Option<&'a VmemHandle> {
    // SAFETY: the header requires NULL or a handle that `vmarena_vmem_create` returned and no
    // `vmarena_vmem_destroy` freed; the magic catches most stale or foreign pointers.
    let h = unsafe { h.as_ref()? };
    (h.magic == VMEM_MAGIC).then_some(h)
}

/// `-e` with errno set to `e`.
fn fail(e: libc::c_int) -> libc::c_int {
    set_errno(e);
    -e
}

/// The errno of a refusal: EINVAL for bad arguments and foreign integers, ENOMEM for no room,
/// EEXIST for an overlapping span, EBUSY for live allocations.
fn errno_of(e: &VmemError) -> libc::c_int {
    match e {
        VmemError::Invalid(_) | VmemError::NotAllocated(_) => libc::EINVAL,
        VmemError::NoSpace { .. } => libc::ENOMEM,
        VmemError::Overlap { .. } => libc::EEXIST,
        VmemError::Busy { .. } => libc::EBUSY,
    }
}

/// Run `f` on the arena behind `h`: its status, or -EINVAL for an invalid handle.
fn with_vmem(h: *const VmemHandle, f: impl FnOnce(&Vmem) -> libc::c_int) -> libc::c_int {
    guarded(-libc::EFAULT, || match handle(h) {
        Some(h) => f(&h.vm),
        None => fail(libc::EINVAL),
    })
}

fn options(c: &VmemOptionsC) -> Option<VmemOptions> {
    let fit = match c.fit {
        0 => Fit::Instant,
        1 => Fit::Lowest,
        2 => Fit::Best,
        _ => return None,
    };
    let strategy = match c.strategy {
        0 => Strategy::Nodes,
        1 => Strategy::Split,
        2 => Strategy::Global,
        _ => return None,
    };
    let base = VmemOptions::default();
    Some(VmemOptions {
        quantum: c.quantum.max(1),
        fit,
        stripes: usize::try_from(c.stripes).ok()?,
        import_quantum: c.import_quantum,
        arena: ArenaOptions { strategy, ..base.arena },
    })
}

/// `vmarena_vmem *vmarena_vmem_create(const char *name, uint64_t base, uint64_t size, const
/// struct vmarena_vmem_options *opts, vmarena_vmem *parent);` an arena with the span `[base,
/// base + size)` (none for size 0), importing from `parent` (NULL: none). NULL with errno
/// EINVAL for bad options, a bad name, a bad span or an invalid parent.
///
/// # Safety
/// `name` is NULL ("vmem") or NUL-terminated; `opts` is NULL or points to `opts->size` readable
/// bytes; `parent` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_create(
    name: *const libc::c_char,
    base: u64,
    size: u64,
    opts: *const VmemOptionsC,
    parent: *mut VmemHandle,
) -> *mut VmemHandle {
    guarded(null_mut(), || {
        let name = if name.is_null() {
            Some("vmem".to_string())
        } else {
            // SAFETY: NUL-terminated (contract above).
            unsafe { CStr::from_ptr(name) }.to_str().ok().filter(|n| !n.is_empty()).map(str::to_string)
        };
        let parent = if parent.is_null() { Some(None) } else { handle(parent).map(|p| Some(p.vm.clone())) };
        let opts = read_sized(opts).ok().and_then(|c| options(&c));
        let (Some(name), Some(parent), Some(opts)) = (name, parent, opts) else {
            set_errno(libc::EINVAL);
            return null_mut();
        };
        let vm = match Vmem::new(name, opts, parent) {
            Ok(vm) => vm,
            Err(e) => {
                set_errno(errno_of(&e));
                return null_mut();
            }
        };
        if size != 0 {
            if let Err(e) = vm.add_span(base, size) {
                set_errno(errno_of(&e));
                return null_mut();
            }
        }
        Box::into_raw(Box::new(VmemHandle { magic: VMEM_MAGIC, vm }))
    })
}

/// `int vmarena_vmem_add(vmarena_vmem *vm, uint64_t base, uint64_t size);` add a span: 0,
/// -EINVAL (not multiples of the quantum, size 0), -EEXIST (overlaps a span or wraps).
///
/// # Safety
/// `vm` is NULL or a live handle (its magic is checked first).
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_add(vm: *mut VmemHandle, base: u64, size: u64) -> libc::c_int {
    with_vmem(vm, |v| v.add_span(base, size).map_or_else(|e| fail(errno_of(&e)), |()| 0))
}

/// `int vmarena_vmem_alloc(vmarena_vmem *vm, uint64_t size, uint64_t *out);`
///
/// # Safety
/// As [`vmarena_vmem_add`]; `out` is NULL (refused) or writable.
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_alloc(vm: *mut VmemHandle, size: u64, out: *mut u64) -> libc::c_int {
    // SAFETY: the contract above.
    unsafe { vmarena_vmem_xalloc(vm, size, 0, 0, 0, 0, 0, out) }
}

/// `int vmarena_vmem_xalloc(vmarena_vmem *vm, uint64_t size, uint64_t align, uint64_t phase,
/// uint64_t nocross, uint64_t minaddr, uint64_t maxaddr, uint64_t *out);` 0 and the start in
/// `*out`; -EINVAL for bad constraints (nothing written), -ENOMEM when no span holds it.
///
/// # Safety
/// As [`vmarena_vmem_alloc`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vmarena_vmem_xalloc(
    vm: *mut VmemHandle,
    size: u64,
    align: u64,
    phase: u64,
    nocross: u64,
    minaddr: u64,
    maxaddr: u64,
    out: *mut u64,
) -> libc::c_int {
    with_vmem(vm, |v| {
        if out.is_null() {
            return fail(libc::EINVAL);
        }
        let c = Constraints { align, phase, nocross, min_addr: minaddr, max_addr: maxaddr };
        match v.xalloc(size, &c) {
            Ok(at) => {
                // SAFETY: writable (contract above).
                unsafe { out.write_unaligned(at) };
                0
            }
            Err(e) => fail(errno_of(&e)),
        }
    })
}

/// `int vmarena_vmem_free(vmarena_vmem *vm, uint64_t start);` 0; -EINVAL when `start` is not
/// the start of a live allocation (nothing changes).
///
/// # Safety
/// As [`vmarena_vmem_add`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_free(vm: *mut VmemHandle, start: u64) -> libc::c_int {
    with_vmem(vm, |v| v.free(start).map_or_else(|e| fail(errno_of(&e)), |_| 0))
}

/// `uint64_t vmarena_vmem_size(vmarena_vmem *vm, uint64_t start);` the size of the live
/// allocation at `start` (rounded to the quantum), 0 for none.
///
/// # Safety
/// As [`vmarena_vmem_add`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_size(vm: *mut VmemHandle, start: u64) -> u64 {
    guarded(0, || handle(vm).and_then(|h| h.vm.size_of(start)).unwrap_or(0))
}

/// `int vmarena_vmem_shrink(vmarena_vmem *vm);` every cached and pooled range back in the
/// free trees. 0.
///
/// # Safety
/// As [`vmarena_vmem_add`].
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_shrink(vm: *mut VmemHandle) -> libc::c_int {
    with_vmem(vm, |v| {
        v.shrink();
        0
    })
}

/// `int vmarena_vmem_stats(vmarena_vmem *vm, struct vmarena_vmem_stats *out);` 0, or -EINVAL
/// for an invalid handle, NULL or a `size` below 8.
///
/// # Safety
/// As [`vmarena_vmem_add`]; `out` is NULL or points to `out->size` writable bytes whose first
/// 8 hold that size.
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_stats(vm: *mut VmemHandle, out: *mut VmemStatsC) -> libc::c_int {
    with_vmem(vm, |v| write_sized(out, &VmemStatsC { size: 0, figures: v.stats() }))
}

/// `int vmarena_vmem_destroy(vmarena_vmem *vm);` 0 (NULL is a no-op); -EBUSY while
/// allocations are live (nothing changes); -EINVAL for an invalid handle. Imported spans go
/// back to the parent.
///
/// # Safety
/// As [`vmarena_vmem_add`]; no other thread uses the handle during or after the call.
#[no_mangle]
pub unsafe extern "C" fn vmarena_vmem_destroy(vm: *mut VmemHandle) -> libc::c_int {
    // SAFETY: the contract above; `destroy` checks the magic first.
    unsafe { destroy(vm, |h| handle(h).is_some(), |h| h.vm.stats().live > 0, |h| h.magic = 0) }
}
