//! `include/vmarena.h` against the code (tier 1): every `#[no_mangle]` function of the C ABI is
//! declared in the header with the same parameter and return types, and the header declares
//! nothing else; the shared library exports exactly those functions and is named
//! `libvmarena.so.MAJOR` for the loader; the header's version is the crate's; a C++ compiler
//! accepts the header and a C++ program calls the library through it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

mod common;
use common::root;

/// Name -> (return type, parameter types), C spelling, spaces normalised.
type Sigs = BTreeMap<String, (String, Vec<String>)>;

fn norm(t: &str) -> String {
    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    t.replace(" *", "*").replace("* ", "*").replace("unsigned int", "unsigned")
}

/// The C spelling of a Rust type of the C ABI.
fn c_type(rust: &str) -> String {
    let r = rust.split_whitespace().collect::<Vec<_>>().join(" ").replace("libc::", "");
    if let Some(inner) = r.strip_prefix("*mut ") {
        return norm(&format!("{}*", c_type(inner)));
    }
    if let Some(inner) = r.strip_prefix("*const ") {
        return norm(&format!("const {}*", c_type(inner)));
    }
    let c = match r.as_str() {
        "" | "()" => "void",
        "c_void" => "void",
        "usize" => "size_t",
        "c_int" | "i32" => "int",
        "c_uint" => "unsigned",
        "u32" => "uint32_t",
        "i64" => "int64_t",
        "u64" => "uint64_t",
        "FixedHandle" => "vmarena_fixed",
        "FramesHandle" => "vmarena_frames",
        "FixedStatsC" => "struct vmarena_fixed_stats",
        "FrameStatsC" => "struct vmarena_frame_stats",
        "StatsC" => "struct vmarena_stats",
        "LockStatsC" => "struct vmarena_lock_stats",
        "SpaceHandle" => "vmarena_space",
        "SpaceOptionsC" => "struct vmarena_space_options",
        "VmemHandle" => "vmarena_vmem",
        "VmemOptionsC" => "struct vmarena_vmem_options",
        "VmemStatsC" => "struct vmarena_vmem_stats",
        "c_char" => "char",
        other => panic!("no C spelling for the Rust type '{other}': extend c_type"),
    };
    c.to_string()
}

/// Split a parameter list at top-level commas.
fn params(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_string).collect()
}

/// The Rust files under `dir`, its folders included.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Every `#[no_mangle] pub extern "C" fn vmarena_*` of the crate's sources.
fn rust_sigs() -> Sigs {
    let mut sigs = Sigs::new();
    let mut files = Vec::new();
    rust_files(&root().join("crates/vmarena/src"), &mut files);
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for chunk in text.split("#[no_mangle]").skip(1) {
            let head = &chunk[..chunk.find('{').expect("a function body")];
            let head = head.split_whitespace().collect::<Vec<_>>().join(" ");
            let Some(at) = head.find("fn vmarena_") else { continue };
            let sig = &head[at + 3..];
            let open = sig.find('(').unwrap();
            let close = sig.rfind(')').unwrap();
            let name = sig[..open].to_string();
            let ret = sig[close + 1..].trim().strip_prefix("->").map(str::trim).unwrap_or("()");
            let ps = params(&sig[open + 1..close])
                .iter()
                .map(|p| c_type(p.split_once(':').expect("name: type").1))
                .collect();
            sigs.insert(name, (c_type(ret), ps));
        }
    }
    sigs
}

fn header_text() -> String {
    std::fs::read_to_string(root().join("include/vmarena.h")).unwrap()
}

/// Every function declaration of a header's text, comments and preprocessor lines removed.
fn header_sigs(text: &str) -> Sigs {
    let mut code = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        code.push_str(&rest[..start]);
        rest = &rest[start + rest[start..].find("*/").expect("closed comment") + 2..];
    }
    code.push_str(rest);
    // Preprocessor lines and the C++ linkage block's own lines go.
    let code: String = code
        .lines()
        .filter(|l| {
            let t = l.trim();
            !t.starts_with('#') && t != "extern \"C\" {" && t != "}"
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut sigs = Sigs::new();
    for decl in code.split(';') {
        let d = decl.split_whitespace().collect::<Vec<_>>().join(" ");
        let Some(open) = d.find('(').filter(|_| !d.contains('{')) else { continue };
        // The name is the identifier right before the parameter list.
        let before = d[..open].trim_end();
        let at = before.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
        let name = before[at..].to_string();
        if !name.starts_with("vmarena_") {
            continue;
        }
        let ret = norm(&d[..at]);
        let list = &d[open + 1..d.rfind(')').unwrap()];
        let ps = if list.trim() == "void" {
            Vec::new()
        } else {
            params(list)
                .iter()
                .map(|p| {
                    // The type is everything before the parameter's name.
                    let p = p.trim();
                    let cut =
                        p.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
                    norm(&p[..cut])
                })
                .collect()
        };
        sigs.insert(name, (ret, ps));
    }
    sigs
}

/// What differs between the code's functions and a header's declarations, one line each.
fn differences(rust: &Sigs, c: &Sigs) -> Vec<String> {
    let mut out = Vec::new();
    for (name, sig) in rust {
        match c.get(name) {
            None => out.push(format!("{name}: not in the header")),
            Some(h) if h != sig => out.push(format!("{name}: the header says {h:?}, the code {sig:?}")),
            Some(_) => {}
        }
    }
    out.extend(
        c.keys()
            .filter(|k| !rust.contains_key(*k))
            .map(|k| format!("{k}: in the header, not in the library")),
    );
    out
}

#[test]
fn the_header_declares_every_c_abi_function_with_its_types() {
    let rust = rust_sigs();
    assert!(rust.len() >= 30, "only {} functions found in the sources", rust.len());
    let diff = differences(&rust, &header_sigs(&header_text()));
    assert!(diff.is_empty(), "header and code differ:\n{}", diff.join("\n"));
}

/// The comparison catches what it is for: a header with a changed signature, one without a
/// function, and one with a function the library lacks.
#[test]
fn the_header_check_finds_planted_mismatches() {
    let rust = rust_sigs();
    let text = header_text();
    let changed = text.replacen("int vmarena_vfree(void *p);", "int vmarena_vfree(const void *p);", 1);
    assert_ne!(changed, text, "the declaration to change is in the header");
    let diff = differences(&rust, &header_sigs(&changed));
    assert!(diff.len() == 1 && diff[0].starts_with("vmarena_vfree:"), "{diff:?}");
    let decl = "int vmarena_purge(void);";
    assert!(text.contains(decl));
    let diff = differences(&rust, &header_sigs(&text.replacen(decl, "", 1)));
    assert_eq!(diff, ["vmarena_purge: not in the header"]);
    let diff = differences(&rust, &header_sigs(&format!("{text}\nint vmarena_extra(int x);\n")));
    assert_eq!(diff, ["vmarena_extra: in the header, not in the library"]);
}

#[test]
fn the_header_version_is_the_crates() {
    let text = std::fs::read_to_string(root().join("include/vmarena.h")).unwrap();
    for (part, value) in [
        ("MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ] {
        let line = format!("#define VMARENA_VERSION_{part} {value}\n");
        assert!(text.contains(&line), "the header lacks '{}'", line.trim());
    }
    let v: u32 = env!("CARGO_PKG_VERSION_MAJOR").parse::<u32>().unwrap() << 16
        | env!("CARGO_PKG_VERSION_MINOR").parse::<u32>().unwrap() << 8
        | env!("CARGO_PKG_VERSION_PATCH").parse::<u32>().unwrap();
    assert_eq!(vmarena::capi::vmarena_version(), v);
}

#[test]
fn the_library_exports_the_headers_functions_under_its_soname() {
    let dir = common::shared_libraries(&[]);
    let lib = dir.join("libvmarena.so");
    let nm = Command::new("nm").args(["-D", "--defined-only"]).arg(&lib).output().expect("nm (binutils)");
    let exported: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .filter(|s| !s.starts_with('_'))
        .collect();
    let header: Vec<String> = header_sigs(&header_text()).into_keys().collect();
    let mut sorted = exported.clone();
    sorted.sort();
    assert_eq!(sorted, header, "the exported symbols are not the header's functions");
    let readelf = Command::new("readelf").arg("-d").arg(&lib).output().expect("readelf (binutils)");
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    assert!(
        String::from_utf8_lossy(&readelf.stdout).contains(&format!("[libvmarena.so.{major}]")),
        "no SONAME libvmarena.so.{major}"
    );
    assert!(
        dir.join(format!("libvmarena.so.{major}")).exists(),
        "no libvmarena.so.{major} link in the build folder"
    );
}

#[test]
fn a_cpp_program_compiles_against_the_header_and_calls_the_library() {
    let dir = common::shared_libraries(&[]);
    let src = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("header_test.cpp");
    std::fs::write(
        &src,
        r#"#include "vmarena.h"
#include <cstdio>
int main() {
    if (vmarena_version() != VMARENA_VERSION) { std::printf("version %x\n", vmarena_version()); return 1; }
    char *p = static_cast<char *>(vmarena_vmalloc(10000));
    if (!p || vmarena_size(p) != 12288) return 2;
    p[9999] = 1;
    vmarena_fixed *pool = vmarena_fixed_create(4096, 2);
    void *s = vmarena_fixed_get(pool);
    struct vmarena_fixed_stats st;
    if (!s || vmarena_fixed_stats(pool, &st) != 0 || st.held != 1) return 3;
    if (vmarena_fixed_put(pool, s) != 0 || vmarena_fixed_destroy(pool) != 0) return 4;
    if (vmarena_vfree(p) != 0 || vmarena_vfree(p) != -22) return 5;
    std::printf("ok\n");
    return 0;
}
"#,
    )
    .unwrap();
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("header_test_cpp");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cxx)
        .args(["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg(format!("-I{}", root().join("include").display()))
        .arg(format!("-L{}", dir.display()))
        // DT_RPATH, searched before the LD_LIBRARY_PATH cargo sets (an older library may lie there).
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", dir.display()))
        .arg("-lvmarena")
        .status()
        .unwrap_or_else(|e| panic!("{cxx}: {e} (scripts/setup.sh installs a C++ compiler)"));
    assert!(status.success(), "the C++ compiler refused the header");
    let out = Command::new(&bin).env("VMARENA_SPACE_BYTES", "4G").output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"), "{out:?}");
}

/// `struct vmarena_stats` lists the arena's statistics table, in its order, after `size`.
#[test]
fn the_stats_struct_lists_the_statistics_table_in_order() {
    let text = header_text();
    let start = text.find("struct vmarena_stats {").expect("the header declares struct vmarena_stats");
    let body = &text[start..start + text[start..].find("};").expect("the struct ends")];
    let fields: Vec<&str> =
        body.lines().skip(1).filter_map(|l| l.trim().strip_prefix("uint64_t ")?.strip_suffix(';')).collect();
    let table: Vec<&str> = vmarena::ArenaStats::TABLE.iter().map(|d| d.name).collect();
    assert_eq!(fields.first(), Some(&"size"));
    assert_eq!(&fields[1..], &table[..], "the header's struct vmarena_stats is stale");
}
