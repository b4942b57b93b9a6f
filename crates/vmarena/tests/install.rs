//! `scripts/install.sh` (tier 1): a staged install (`--destdir`) of libraries built from the
//! current sources holds the versioned shared library with its two links, the static library,
//! the shim, the header and a pkg-config file, all without debug information; a C program
//! built with `pkg-config --cflags --libs vmarena` runs against the installed shared library, one
//! linked with the static library runs too; `--uninstall` removes every file again. The
//! consumer project `examples/c-consumer` builds with its own Makefile against a prefix found
//! through pkg-config only, dynamically and statically linked, and runs.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::root;

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn has_debug_info(f: &Path) -> bool {
    sh(Command::new("readelf").arg("-S").arg("-W").arg(f)).contains(".debug_info")
}

#[test]
fn a_staged_install_links_runs_and_uninstalls() {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let from = common::shared_libraries(&["vmarena-preload"]);
    assert!(has_debug_info(&from.join("libvmarena.so")), "the test build should carry debug information");
    let stage = tmp.join("install-stage");
    let _ = std::fs::remove_dir_all(&stage);
    let prefix = "/opt/vmarena-test";
    let script = root().join("scripts/install.sh");
    sh(Command::new(&script).args(["--prefix", prefix, "--destdir"]).arg(&stage).arg("--from").arg(&from));

    let top = stage.join(prefix.trim_start_matches('/'));
    let lib = top.join("lib");
    let version = env!("CARGO_PKG_VERSION");
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let so = lib.join(format!("libvmarena.so.{version}"));
    assert_eq!(
        std::fs::read_link(lib.join(format!("libvmarena.so.{major}"))).unwrap(),
        PathBuf::from(format!("libvmarena.so.{version}"))
    );
    assert_eq!(
        std::fs::read_link(lib.join("libvmarena.so")).unwrap(),
        PathBuf::from(format!("libvmarena.so.{major}"))
    );
    for f in [&so, &lib.join("libvmarena.a"), &lib.join("libvmarena_preload.so")] {
        assert!(f.exists(), "{} not installed", f.display());
        assert!(!has_debug_info(f), "{} keeps debug information", f.display());
    }
    assert!(top.join("include/vmarena.h").exists());
    assert!(sh(Command::new("readelf").arg("-d").arg(&so)).contains(&format!("[libvmarena.so.{major}]")));

    // pkg-config, as a packager's staged root sees it.
    let pc = |args: &[&str]| {
        sh(Command::new("pkg-config")
            .args(args)
            .arg("vmarena")
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
            .env("PKG_CONFIG_SYSROOT_DIR", &stage))
    };
    assert_eq!(pc(&["--modversion"]).trim(), version);
    let flags: Vec<String> = pc(&["--cflags", "--libs"]).split_whitespace().map(str::to_string).collect();
    let src = tmp.join("install_test.c");
    std::fs::write(
        &src,
        "#include <vmarena.h>\n#include <stdio.h>\nint main(void) {\n    char *p = vmarena_vmalloc(5000);\n    \
         if (!p || vmarena_version() != VMARENA_VERSION) return 1;\n    p[4999] = 1;\n    \
         if (vmarena_vfree(p) != 0) return 2;\n    puts(\"ok\");\n    return 0;\n}\n",
    )
    .unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dynamic = tmp.join("install_test_dynamic");
    sh(Command::new(&cc).arg("-o").arg(&dynamic).arg(&src).args(&flags));
    let run =
        |bin: &Path| sh(Command::new(bin).env("LD_LIBRARY_PATH", &lib).env("VMARENA_SPACE_BYTES", "4G"));
    assert!(run(&dynamic).contains("ok"));
    // The static library, with the system libraries the .pc lists for static linking.
    let private: Vec<String> = pc(&["--static", "--libs-only-l"])
        .split_whitespace()
        .filter(|f| *f != "-lvmarena")
        .map(str::to_string)
        .collect();
    let fixed = tmp.join("install_test_static");
    sh(Command::new(&cc)
        .arg("-o")
        .arg(&fixed)
        .arg(&src)
        .arg(format!("-I{}", top.join("include").display()))
        .arg(lib.join("libvmarena.a"))
        .args(&private));
    assert!(!sh(Command::new("readelf").arg("-d").arg(&fixed)).contains("libvmarena.so"));
    assert!(run(&fixed).contains("ok"));

    sh(Command::new(&script).args(["--uninstall", "--prefix", prefix, "--destdir"]).arg(&stage));
    let left: Vec<PathBuf> = walk(&top);
    assert!(left.is_empty(), "left after --uninstall: {left:?}");
}

/// `examples/c-consumer`, copied out of the source tree, built with its Makefile against a
/// temporary prefix that pkg-config alone points to, dynamic and static, and run.
#[test]
fn the_consumer_example_builds_against_an_installed_prefix_through_pkg_config() {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let from = common::shared_libraries(&["vmarena-preload"]);
    let prefix = tmp.join("consumer-prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    sh(Command::new(root().join("scripts/install.sh")).arg("--prefix").arg(&prefix).arg("--from").arg(&from));
    let project = tmp.join("c-consumer");
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(&project).unwrap();
    for f in ["Makefile", "consumer.c"] {
        std::fs::copy(root().join("examples/c-consumer").join(f), project.join(f)).unwrap();
    }
    let lib = prefix.join("lib");
    let make = |target: &str| {
        sh(Command::new("make")
            .arg("-C")
            .arg(&project)
            .arg(target)
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig")))
    };
    make("consumer");
    make("static");
    let dynamic = sh(Command::new(project.join("consumer"))
        .env("LD_LIBRARY_PATH", &lib)
        .env("VMARENA_SPACE_BYTES", "4G"));
    assert!(dynamic.contains("consumer ok"), "{dynamic}");
    let needed = sh(Command::new("readelf").arg("-d").arg(project.join("consumer")));
    assert!(needed.contains(&format!("[libvmarena.so.{}]", env!("CARGO_PKG_VERSION_MAJOR"))), "{needed}");
    let fixed = sh(Command::new(project.join("consumer-static")).env("VMARENA_SPACE_BYTES", "4G"));
    assert!(fixed.contains("consumer ok"), "{fixed}");
    let needed = sh(Command::new("readelf").arg("-d").arg(project.join("consumer-static")));
    assert!(!needed.contains("libvmarena.so"), "the static program needs no libvmarena.so: {needed}");
    assert!(fixed.contains(&format!("vmarena {}", env!("CARGO_PKG_VERSION"))), "{fixed}");
    let _ = std::fs::remove_dir_all(&prefix);
}

/// Every file (not folder) under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                files.extend(walk(&p));
            } else {
                files.push(p);
            }
        }
    }
    files
}
