//! `vmallocinfo()`: live and lazy areas in the format of the kernel's `/proc/vmallocinfo`.
//!
//! One line per live area, node by node and in address order within a node (so, as in the
//! kernel since 6.9, the whole list is not globally sorted), then one line per lazily freed
//! area whose memory a purge has not released yet:
//!
//! ```text
//! 0x00007f3a40000000-0x00007f3a40003000    12288 src/main.rs:10:5 pages=2 vmalloc
//! 0x00007f3a40003000-0x00007f3a40005000     8192 unpurged vm_area
//! ```
//!
//! The last word is the kind: `vmalloc`, `vmap` (caller's frames) or `vm_map_ram` (a
//! per-CPU block or a large `vm_map_ram` mapping). The size includes the guard page, as in the kernel. The caller is `file:line:column` of the
//! Rust call (the kernel prints a symbol); areas allocated through the C ABI name the C entry
//! point.

use std::fmt::Write;
use vmarena_engine::{AreaKind, Arena};

pub(crate) fn format(arena: &Arena, page_shift: u32, guard_pages: u64) -> String {
    let (busy, lazy) = arena.areas();
    let mut out = String::new();
    for node in &busy {
        for (start, a) in node {
            let s = (*start as usize) << page_shift;
            let e = ((start + a.pages) as usize) << page_shift;
            let _ = write!(out, "0x{s:016x}-0x{e:016x} {:7}", e - s);
            match a.tag.caller {
                // The C layer's files (`src/capi/`): the program's own call site is unknown.
                Some(l) if l.file().contains("src/capi/") => out.push_str(" vmarena_c_abi"),
                Some(l) => {
                    let _ = write!(out, " {}:{}:{}", l.file(), l.line(), l.column());
                }
                None => {}
            }
            let kind = match a.tag.kind {
                AreaKind::Vmalloc => "vmalloc",
                AreaKind::Vmap => "vmap",
                AreaKind::VmMapRam | AreaKind::VmapBlock => "vm_map_ram",
                AreaKind::FixedSlot => "fixed_slot",
                AreaKind::Retired => "vmalloc retired",
                AreaKind::HugeTlb => "vmalloc hugetlb",
            };
            let _ = writeln!(out, " pages={} {kind}", a.pages - guard_pages);
        }
    }
    for l in lazy {
        let s = (l.start as usize) << page_shift;
        let e = (l.end() as usize) << page_shift;
        let _ = writeln!(out, "0x{s:016x}-0x{e:016x} {:7} unpurged vm_area", e - s);
    }
    out
}
