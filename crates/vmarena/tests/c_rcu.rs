//! Deferred frees from C (tier 1 and concurrency): `tests/c/rcu_test.c` checks the refusals
//! of `vmarena_kvfree_rcu` and its kin, then runs two readers and two writers for two seconds,
//! readers checking the whole pattern of every area they find inside read-side sections while
//! writers replace and retire areas.

use std::path::PathBuf;
use std::process::Command;

mod common;

#[test]
fn readers_never_see_an_area_freed_under_them() {
    let root = common::root();
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let lib = common::shared_libraries(&[]);
    let bin = tmp.join("vmarena_rcu_test");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(root.join("crates/vmarena/tests/c/rcu_test.c"))
        .arg(format!("-I{}", root.join("include").display()))
        .arg(format!("-L{}", lib.display()))
        // DT_RPATH, searched before LD_LIBRARY_PATH (which cargo sets to its own target folder,
        // where an older libvmarena.so may lie).
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .args(["-lvmarena", "-lpthread"])
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success(), "compiling rcu_test.c failed");
    let out = Command::new(&bin).arg("2").env("VMARENA_SPACE_BYTES", "4G").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("ok"), "{out:?}");
    let reads: u64 = stdout.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    let retired: u64 = stdout.split_whitespace().nth(3).and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(reads > 10_000 && retired > 1_000, "too little happened: {stdout}");
}
