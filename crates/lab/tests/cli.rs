//! Lab CLI tests (tier 1): parsing, the report format, the JSON output, the tables. The runs
//! here are tiny; the real benchmarks are run by hand (see BENCHMARKS.md / DESIGN.md).

use std::process::Command;

fn vmarena(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmarena")).args(args).output().unwrap()
}

#[test]
fn pair_runs_every_strategy_and_reports_ratios() {
    let json = std::env::temp_dir().join(format!("vmarena-pair-{}.json", std::process::id()));
    let out = vmarena(&[
        "pair",
        "--pairs",
        "2000",
        "--rounds",
        "1",
        "--threads",
        "1,2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for s in ["global", "split", "nodes"] {
        for t in [1, 2] {
            let row = stdout.lines().find(|l| {
                let f: Vec<_> = l.split_whitespace().collect();
                f.len() > 3 && f[0] == s && f[1] == t.to_string()
            });
            let row = row.unwrap_or_else(|| panic!("no row for {s} at {t} threads:\n{stdout}"));
            let ns: f64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
            assert!(ns > 0.0, "{row}");
        }
    }
    assert!(stdout.contains("throughput at 2 thread(s): nodes/global = "), "{stdout}");
    assert!(stdout.contains("# machine: "), "{stdout}");
    let j = std::fs::read_to_string(&json).unwrap();
    std::fs::remove_file(&json).ok();
    assert!(j.starts_with("{\"benchmark\":\"pair\""), "{j}");
    assert_eq!(j.matches("\"strategy\":").count(), 6, "{j}");
    assert!(j.contains("\"machine\":{\"cpu_model\":"));
    assert_eq!(j.matches('{').count(), j.matches('}').count(), "balanced JSON");
}

#[test]
fn bad_arguments_are_refused_with_a_clear_message() {
    let out = vmarena(&["pair", "--strategy", "bogus"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown strategy 'bogus'"));
    let out = vmarena(&["pair", "--threads", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be positive"));
}

#[test]
fn options_table_lists_every_environment_variable() {
    let out = vmarena(&["options"]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for env in ["VMARENA_SPACE_BYTES", "VMARENA_GUARD_PAGES", "VMARENA_STRATEGY", "VMARENA_LAZY_MAX_PAGES"] {
        assert!(s.contains(env), "{env} missing:\n{s}");
    }
    assert!(s.contains("| `pool_hits` | allocs |"), "{s}");
}

#[test]
fn readme_option_tables_match_the_code() {
    let out = vmarena(&["options"]);
    let tables = String::from_utf8_lossy(&out.stdout).to_string();
    let options = tables.split("### Arena statistics").next().unwrap().trim();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let start = readme.find("### Space options").expect("README has the options section");
    let end = readme.find("Sizes accept").expect("README has the options section end");
    assert_eq!(readme[start..end].trim(), options, "README.md options are stale: paste `vmarena options`");
}
