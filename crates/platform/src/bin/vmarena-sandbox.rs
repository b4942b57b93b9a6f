//! `vmarena-sandbox`: run a program as an older kernel or a container sandbox would, by a
//! seccomp filter installed before it starts.
//!
//! ```text
//! vmarena-sandbox [--kernel 4.18|5.4|5.10|5.15|6.1|6.8] [--docker] [--deny NAME]... -- PROGRAM [ARGS]
//! ```
//!
//! A profile answers the calls, commands, `madvise` advices and `ioctl`s that the kernel named
//! did not have as that kernel answers them (ENOSYS for a missing system call, EINVAL for an
//! unknown command, advice or flag); `--docker` refuses what Docker's default profile refuses
//! among the calls vmarena and common programs make (EPERM); `--deny NAME` refuses one feature
//! (see `--help`). What seccomp cannot express is left as it is: the answer to
//! `membarrier(MEMBARRIER_CMD_QUERY)` keeps listing the commands the running kernel has (a
//! refused registration is what callers see), and files such as `/proc/pressure/memory` stay
//! readable (PSI came with 4.20).
//!
//! The filter is inherited by every child and thread of the program and cannot be lifted; it
//! needs no privilege (`PR_SET_NO_NEW_PRIVS` is set first). x86_64 only.
#![allow(unsafe_code)]

use std::ffi::CString;

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const fn data_arg_low(index: u32) -> u32 {
    16 + 8 * index
}

// Classic BPF opcodes.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_AND_K: u16 = 0x54;
const BPF_RET_K: u16 = 0x06;

/// One refusal: system call `nr`, optionally only when the low 32 bits of argument `arg`
/// masked with `mask` equal `value`; or every call numbered `nr` and above (`from_nr`).
#[derive(Clone, Copy, Debug)]
struct Rule {
    nr: u32,
    from_nr: bool,
    arg: Option<(u32, u32, u32)>,
    errno: u32,
}

const fn call(nr: i64, errno: i32) -> Rule {
    Rule { nr: nr as u32, from_nr: false, arg: None, errno: errno as u32 }
}
const fn when(nr: i64, arg: u32, mask: u32, value: u32, errno: i32) -> Rule {
    Rule { nr: nr as u32, from_nr: false, arg: Some((arg, mask, value)), errno: errno as u32 }
}
const fn from(nr: i64) -> Rule {
    Rule { nr: nr as u32, from_nr: true, arg: None, errno: libc::ENOSYS as u32 }
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: u32 = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: u32 = 1 << 8;
const MADV_GUARD_INSTALL: u32 = 102;
const MADV_GUARD_REMOVE: u32 = 103;
const MADV_POPULATE_READ: u32 = 22;
const MADV_POPULATE_WRITE: u32 = 23;
const MADV_COLLAPSE: u32 = 25;
const MREMAP_DONTUNMAP: u32 = 4;
const MADV_DONTNEED: u32 = 4;
const MADV_FREE: u32 = 8;
const UFFD_USER_MODE_ONLY: u32 = 1;
/// `UFFDIO_API` (`_IOWR(0xAA, 0x3F, struct uffdio_api)`): the handshake that asks for
/// `UFFD_FEATURE_MOVE`, which kernels before 6.8 refuse with EINVAL.
const UFFDIO_API: u32 = (3 << 30) | (24 << 16) | (0xAA << 8) | 0x3F;

/// The features vmarena can use, one name each, and the rules that take one away.
fn feature(name: &str) -> Option<Vec<Rule>> {
    use libc::{
        SYS_ioctl, SYS_madvise, SYS_membarrier, SYS_memfd_create, SYS_mremap, SYS_pidfd_open,
        SYS_process_madvise, SYS_rseq, SYS_userfaultfd, EINVAL, ENOSYS,
    };
    let r = match name {
        "membarrier" => vec![call(SYS_membarrier, ENOSYS)],
        "membarrier-rseq" => vec![
            when(SYS_membarrier, 0, !0, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, EINVAL),
            when(SYS_membarrier, 0, !0, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, EINVAL),
        ],
        "rseq" => vec![call(SYS_rseq, ENOSYS)],
        "userfaultfd" => vec![call(SYS_userfaultfd, ENOSYS)],
        "uffd-user-mode" => vec![when(SYS_userfaultfd, 0, UFFD_USER_MODE_ONLY, UFFD_USER_MODE_ONLY, EINVAL)],
        "uffd-move" => vec![when(SYS_ioctl, 1, !0, UFFDIO_API, EINVAL)],
        "process_madvise" => vec![call(SYS_process_madvise, ENOSYS)],
        "process-madvise-dontneed" => vec![
            when(SYS_process_madvise, 3, !0, MADV_DONTNEED, EINVAL),
            when(SYS_process_madvise, 3, !0, MADV_FREE, EINVAL),
        ],
        "pidfd_open" => vec![call(SYS_pidfd_open, ENOSYS)],
        "madv-guard" => vec![
            when(SYS_madvise, 2, !0, MADV_GUARD_INSTALL, EINVAL),
            when(SYS_madvise, 2, !0, MADV_GUARD_REMOVE, EINVAL),
        ],
        "madv-populate" => vec![
            when(SYS_madvise, 2, !0, MADV_POPULATE_READ, EINVAL),
            when(SYS_madvise, 2, !0, MADV_POPULATE_WRITE, EINVAL),
        ],
        "madv-collapse" => vec![when(SYS_madvise, 2, !0, MADV_COLLAPSE, EINVAL)],
        "mremap-dontunmap" => vec![when(SYS_mremap, 3, MREMAP_DONTUNMAP, MREMAP_DONTUNMAP, EINVAL)],
        "memfd_create" => vec![call(SYS_memfd_create, ENOSYS)],
        _ => return None,
    };
    Some(r)
}

const FEATURES: &[&str] = &[
    "membarrier",
    "membarrier-rseq",
    "rseq",
    "userfaultfd",
    "uffd-user-mode",
    "uffd-move",
    "process_madvise",
    "process-madvise-dontneed",
    "pidfd_open",
    "madv-guard",
    "madv-populate",
    "madv-collapse",
    "mremap-dontunmap",
    "memfd_create",
];

/// The kernel each feature of [`feature`] came with.
const INTRODUCED: &[(&str, (u32, u32))] = &[
    ("mremap-dontunmap", (5, 7)),
    ("membarrier-rseq", (5, 10)),
    ("uffd-user-mode", (5, 11)),
    ("madv-populate", (5, 14)),
    ("madv-collapse", (6, 1)),
    ("uffd-move", (6, 8)),
    ("madv-guard", (6, 13)),
    ("process-madvise-dontneed", (6, 13)),
];

/// The kernels with a profile, and the first system call number each lacks (every later one is
/// ENOSYS). Last calls: rseq 334 (4.18), clone3 435 (5.3/5.4), process_madvise 440 (5.10),
/// process_mrelease 448 (5.15), set_mempolicy_home_node 450 (5.17/6.1), lsm_list_modules 461
/// (6.8).
const KERNELS: &[(&str, (u32, u32), i64)] = &[
    ("4.18", (4, 18), 335),
    ("5.4", (5, 4), 436),
    ("5.10", (5, 10), 441),
    ("5.15", (5, 15), 449),
    ("6.1", (6, 1), 451),
    ("6.8", (6, 8), 462),
];

/// A kernel's answers: the first system call number it lacks, and the features of [`feature`]
/// that came after it.
fn kernel(version: &str) -> Option<(i64, Vec<&'static str>)> {
    let &(_, v, first_missing) = KERNELS.iter().find(|k| k.0 == version)?;
    Some((first_missing, INTRODUCED.iter().filter(|f| f.1 > v).map(|f| f.0).collect()))
}

/// What Docker's default profile refuses among the calls vmarena and common programs make:
/// userfaultfd without CAP_SYS_PTRACE, process_madvise in profiles that predate it, the
/// NUMA policy calls without CAP_SYS_NICE, io_uring, and the administrative calls.
fn docker() -> Vec<Rule> {
    use libc::*;
    #[rustfmt::skip]
    let calls = [
        SYS_userfaultfd,
        SYS_process_madvise,
        SYS_io_uring_setup,
        SYS_io_uring_enter,
        SYS_io_uring_register,
        SYS_mbind,
        SYS_set_mempolicy,
        SYS_get_mempolicy,
        SYS_move_pages,
        SYS_perf_event_open,
        SYS_bpf,
        SYS_keyctl,
        SYS_add_key,
        SYS_request_key,
        SYS_unshare,
        SYS_mount,
        SYS_umount2,
        SYS_ptrace,
        SYS_kexec_load,
        SYS_init_module,
        SYS_open_by_handle_at,
    ];
    calls.iter().map(|&nr| call(nr, EPERM)).collect()
}

struct Insn(libc::sock_filter);

fn stmt(code: u16, k: u32) -> Insn {
    Insn(libc::sock_filter { code, jt: 0, jf: 0, k })
}
fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn(libc::sock_filter { code, jt, jf, k })
}

/// The filter: allow anything of another architecture's numbering (there is none on this
/// machine but x86_64's), then each rule as a block that reloads the call number, so every
/// jump stays inside its block; allow what no rule refused.
fn program(rules: &[Rule]) -> Vec<libc::sock_filter> {
    let mut p = vec![
        stmt(BPF_LD_W_ABS, DATA_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
    ];
    for r in rules {
        let refuse = stmt(BPF_RET_K, SECCOMP_RET_ERRNO | (r.errno & 0xffff));
        let mut block = vec![stmt(BPF_LD_W_ABS, DATA_NR)];
        let test = if r.from_nr { BPF_JGE_K } else { BPF_JEQ_K };
        match r.arg {
            None => {
                block.push(jump(test, r.nr, 0, 1));
                block.push(refuse);
            }
            Some((index, mask, value)) => {
                // nr? -> load the argument, mask it, compare; a miss skips to the block's end.
                block.push(jump(test, r.nr, 0, 4));
                block.push(stmt(BPF_LD_W_ABS, data_arg_low(index)));
                block.push(stmt(BPF_AND_K, mask));
                block.push(jump(BPF_JEQ_K, value, 0, 1));
                block.push(refuse);
            }
        }
        p.extend(block);
    }
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    p.into_iter().map(|i| i.0).collect()
}

fn install(rules: &[Rule]) -> Result<(), String> {
    let prog = program(rules);
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut libc::sock_filter };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!("PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel copies the program, which lives across the call.
    if unsafe {
        libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &fprog as *const libc::sock_fprog)
    } != 0
    {
        return Err(format!("installing the seccomp filter: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

const HELP: &str = "\
vmarena-sandbox: run PROGRAM with a seccomp filter that answers as an older kernel or a
container sandbox would.

usage: vmarena-sandbox [--kernel VERSION] [--docker] [--deny FEATURE]... -- PROGRAM [ARGS]

  --kernel VERSION  4.18, 5.4, 5.10, 5.15, 6.1 or 6.8: later system calls answer ENOSYS, and
                    the later features below answer as that kernel does (EINVAL)
  --docker          what Docker's default profile refuses (EPERM): userfaultfd, process_madvise,
                    io_uring, NUMA policy calls, administrative calls
  --deny FEATURE    refuse one feature; FEATURE is one of:
                    membarrier (ENOSYS), membarrier-rseq (the rseq commands: EINVAL),
                    rseq, userfaultfd, process_madvise, pidfd_open, memfd_create (ENOSYS),
                    process-madvise-dontneed (its MADV_DONTNEED and MADV_FREE: EINVAL),
                    uffd-user-mode (userfaultfd's UFFD_USER_MODE_ONLY flag: EINVAL),
                    uffd-move (the UFFDIO_API handshake: EINVAL), madv-guard,
                    madv-populate, madv-collapse (those madvise advices: EINVAL),
                    mremap-dontunmap (EINVAL)
  --list            print the rules and exit

Not expressible with seccomp, and left as the running kernel has them: membarrier's QUERY
answer, files under /proc and /sys (PSI).
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut rules = Vec::new();
    let mut list = false;
    let mut i = 0;
    let fail = |msg: String| -> ! {
        eprintln!("vmarena-sandbox: {msg}\n(vmarena-sandbox --help)");
        std::process::exit(2)
    };
    while i < args.len() {
        match args[i].as_str() {
            "--help" | "-h" => {
                print!("{HELP}");
                return;
            }
            "--kernel" => {
                let v = args.get(i + 1).unwrap_or_else(|| fail("--kernel needs a version".into()));
                let (first_missing, later) =
                    kernel(v).unwrap_or_else(|| fail(format!("no profile for kernel {v}")));
                rules.push(from(first_missing));
                for f in later {
                    rules.extend(feature(f).expect("a known feature"));
                }
                i += 2;
            }
            "--docker" => {
                rules.extend(docker());
                i += 1;
            }
            "--deny" => {
                let f = args.get(i + 1).unwrap_or_else(|| fail("--deny needs a feature".into()));
                let r = feature(f).unwrap_or_else(|| {
                    fail(format!("unknown feature {f:?}; one of {}", FEATURES.join(", ")))
                });
                rules.extend(r);
                i += 2;
            }
            "--list" => {
                list = true;
                i += 1;
            }
            "--" => {
                i += 1;
                break;
            }
            other if other.starts_with('-') => fail(format!("unknown option {other:?}")),
            _ => break,
        }
    }
    // A `from` rule last, so the specific answers come first.
    rules.sort_by_key(|r| r.from_nr);
    if list {
        for r in &rules {
            match (r.from_nr, r.arg) {
                (true, _) => println!("calls {} and above: errno {}", r.nr, r.errno),
                (false, None) => println!("call {}: errno {}", r.nr, r.errno),
                (false, Some((a, m, v))) => {
                    println!("call {} with arg{a} & {m:#x} == {v:#x}: errno {}", r.nr, r.errno)
                }
            }
        }
        return;
    }
    let program_args = &args[i..];
    if program_args.is_empty() {
        fail("no program to run".into());
    }
    if let Err(e) = install(&rules) {
        fail(e);
    }
    let c_args: Vec<CString> = program_args
        .iter()
        .map(|a| CString::new(a.as_str()).unwrap_or_else(|_| fail(format!("argument {a:?} holds a NUL"))))
        .collect();
    let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: argv is a NULL-terminated array of C strings that outlive the call.
    unsafe { libc::execvp(argv[0], argv.as_ptr()) };
    fail(format!("{}: {}", program_args[0], std::io::Error::last_os_error()));
}
