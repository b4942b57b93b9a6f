//! Statistics from C (tier 1): `tests/c/stats_test.c` calls `vmarena_stats`,
//! `vmarena_stats_json` and `vmarena_vmallocinfo` before and after the default space exists,
//! with their refusals and truncations; with `VMARENA_STATS=1` the program's exit prints the
//! statistics on stderr, on the stderr the program had at load even when it has put a file of its
//! own at descriptor 2 since.

mod common;

use std::process::Command;

#[test]
fn a_c_program_reads_the_statistics_and_gets_them_at_exit() {
    let (bin, libdir) = common::build_linked("stats_test");
    let run = |stats: Option<&str>| {
        let mut c = Command::new(&bin);
        c.env("LD_LIBRARY_PATH", &libdir).env_remove("VMARENA_STATS");
        if let Some(v) = stats {
            c.env("VMARENA_STATS", v);
        }
        let out = c.output().expect("run stats_test");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (ok, err) = run(None);
    assert!(ok && err.contains("ok stats"), "{err}");
    assert!(!err.contains("vmarena stats:"), "no line without VMARENA_STATS=1:\n{err}");
    let (ok, err) = run(Some("1"));
    assert!(ok, "{err}");
    let line = err.lines().find(|l| l.starts_with("vmarena stats: {")).unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains("\"space\":\"vmalloc\"") && line.contains("\"frees\":") && line.ends_with('}'),
        "{line}"
    );
    let (_, err) = run(Some("0"));
    assert!(!err.contains("vmarena stats:"), "VMARENA_STATS=0 prints nothing:\n{err}");
    // The program closes stderr and opens a file of its own at descriptor 2.
    let file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vmarena_stats_fd2.txt");
    let out = Command::new(&bin)
        .arg(&file)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("VMARENA_STATS", "1")
        .output()
        .expect("run stats_test");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("vmarena stats: {"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "program data\n",
        "the program's file holds its data only"
    );
}
