//! When the memory-pressure monitor starts: on the thread of a space's purge worker, which
//! starts with the space's first use, not while the space is built; with the space itself when
//! the space has no worker. A test binary of its own, because the monitor starts once per
//! process; the second case runs in a child process.

use std::process::Command;
use std::time::{Duration, Instant};
use vmarena::*;

const CHILD: &str = "VMARENA_PSI_START_CHILD";

fn space_opts() -> SpaceOptions {
    SpaceOptions { space_bytes: 1 << 30, ..Default::default() }
}

/// Wait up to five seconds for the monitor to have started.
fn wait_for_monitor() -> Option<&'static MonitorStatus> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(s) = pressure::monitor_status() {
            return Some(s);
        }
        if Instant::now() > until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn assert_started(status: Option<&MonitorStatus>, what: &str) {
    match status {
        None => panic!("{what}: the monitor did not start"),
        Some(MonitorStatus::Disabled) => panic!("{what}: VMARENA_PSI is not set in tests"),
        Some(MonitorStatus::Watching { .. } | MonitorStatus::Unavailable(_)) => {}
    }
}

/// The child: a space without a purge worker starts the monitor as it is built.
fn child() {
    let ao = ArenaOptions { purge_thread: false, ..Default::default() };
    let _space = VmSpace::new("psi-start-child", space_opts(), ao).unwrap();
    assert_started(pressure::monitor_status(), "a space without a worker");
    println!("started with the space");
    std::process::exit(0);
}

#[test]
fn the_monitor_starts_with_the_first_purge_worker() {
    if std::env::var_os(CHILD).is_some() {
        child();
    }
    let space = VmSpace::new("psi-start", space_opts(), ArenaOptions::default()).unwrap();
    assert!(pressure::monitor_status().is_none(), "building the space started the monitor");
    let p = space.vmalloc(4096).unwrap();
    // SAFETY: the area is 4096 bytes, live and this test's.
    unsafe { p.as_ptr().write_bytes(0x5A, 4096) };
    space.vfree(p.as_ptr()).unwrap();
    assert_started(wait_for_monitor(), "after the space's first allocation and free");

    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_monitor_starts_with_the_first_purge_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "child: {out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("started with the space"), "child: {out:?}");
}
