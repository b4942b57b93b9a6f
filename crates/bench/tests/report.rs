//! The benchmark programs' report line: the live-byte count and the RSS figures, checked on
//! runs small enough for the test suite (under whatever allocator the test process has).

use std::process::Command;

fn run(exe: &str, args: &[&str]) -> String {
    let out = Command::new(exe).args(args).output().expect("benchmark program runs");
    assert!(out.status.success(), "{exe} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 report").trim().to_string()
}

fn field(line: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    let at = line.find(&key).unwrap_or_else(|| panic!("no {name} in {line}")) + key.len();
    line[at..].split([',', '}']).next().unwrap().parse().unwrap_or_else(|_| panic!("{name} in {line}"))
}

#[test]
fn malloc_large_counts_its_live_peak_exactly() {
    // 4 buffers of exactly 1 MiB: once every slot is filled, each iteration holds 5 MiB
    // between its malloc and its free, never more.
    let line = run(
        env!("CARGO_BIN_EXE_vmarena-malloc-large"),
        &["--iterations", "200", "--buffers", "4", "--min-mib", "1", "--max-mib", "1", "--idle-ms", "0"],
    );
    assert_eq!(field(&line, "peak_live_kib"), 5 * 1024, "{line}");
    // Every byte was written, so the live peak was resident.
    assert!(field(&line, "peak_rss_kib") >= 5 * 1024, "{line}");
    assert!(field(&line, "idle_anon_kib") <= field(&line, "idle_rss_kib"), "{line}");
}

#[test]
fn xthread_counts_blocks_held_by_both_threads_and_in_flight() {
    // Blocks of exactly 4 KiB, 4 live per thread: at least 8 blocks are live at the peak,
    // and never more than were allocated in all.
    let line = run(
        env!("CARGO_BIN_EXE_vmarena-xthread"),
        &[
            "--threads",
            "2",
            "--ops",
            "400",
            "--live",
            "4",
            "--min-kib",
            "4",
            "--max-kib",
            "4",
            "--idle-ms",
            "0",
        ],
    );
    let live = field(&line, "peak_live_kib");
    assert!((8 * 4..=800 * 4).contains(&live), "{line}");
    assert!(field(&line, "peak_rss_kib") >= live, "{line}");
    assert!(field(&line, "idle_anon_kib") <= field(&line, "idle_rss_kib"), "{line}");
}
