//! The source tree's shape (tier 1): no circle of imports between the top-level modules of any
//! crate, no engine file over 600 lines of non-test code, and the strategy dispatched in one
//! place. A module with submodules (`arena/`, `frame_allocator/`) counts as one module: its
//! files are parts of one unit.
//!
//! Imports are read from the text: every `crate::name` and every name of a `use crate::{...}`
//! group, outside comments and outside the `#[cfg(test)]` module at a file's end.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comment lines and without its test module.
fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The first names of every path that starts with `crate::` in `code`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        // `$crate::` in a macro is the same crate.
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The names at depth 1 of the group: `{a, b::c, d::{e, f}}` gives a, b, d.
            let (mut depth, mut start) = (1, 0);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            out.insert(ident_at(group[start..].trim_start()).to_string());
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        out.insert(ident_at(group[start..].trim_start()).to_string());
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident_at(rest).to_string());
        }
    }
    out.remove("");
    out
}

/// Top-level module of a file under `src`: its first path component (`arena/nodes/mod.rs` is
/// `arena`), `None` for the crate root.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_string_lossy().to_string();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (!matches!(name.as_str(), "lib" | "main")).then_some(name)
}

/// Module -> the other top-level modules it imports.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut uses: Vec<(String, BTreeSet<String>)> = Vec::new();
    for f in &files {
        if let Some(m) = top_module(src, f) {
            graph.entry(m.clone()).or_default();
            uses.push((m, crate_paths(&code_of(&fs::read_to_string(f).unwrap()))));
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for (m, names) in uses {
        let to = graph.get_mut(&m).unwrap();
        to.extend(names.into_iter().filter(|n| *n != m && modules.contains(n)));
    }
    graph
}

/// A circle of the graph (its modules in order), if it has one.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search with colours: 1 on the path, 2 done.
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        colour: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        colour.insert(m.to_string(), 1);
        path.push(m.to_string());
        for n in g.get(m).into_iter().flatten() {
            match colour.get(n).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|p| p == n).unwrap();
                    let mut c = path[at..].to_vec();
                    c.push(n.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(g, n, colour, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(m.to_string(), 2);
        None
    }
    let mut colour = BTreeMap::new();
    for m in graph.keys() {
        if colour.get(m).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(graph, m, &mut colour, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn crate_srcs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(crates_dir())
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

#[test]
fn the_reader_finds_every_import_form() {
    let code = "use crate::a::X;\nuse crate::{b, c::{D, E}, d::F};\nlet x = crate::e::f();\n$crate::g::h!();";
    let names: Vec<String> = crate_paths(code).into_iter().collect();
    assert_eq!(names, ["a", "b", "c", "d", "e", "g"]);
    assert!(crate_paths(&code_of("// use crate::z;\nfn f() {}")).is_empty(), "comments are not imports");
}

#[test]
fn a_planted_circle_is_found() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut edge = |a: &str, b: &str| {
        g.entry(a.into()).or_default().insert(b.into());
        g.entry(b.into()).or_default();
    };
    edge("arena", "worker");
    edge("worker", "sync");
    edge("magazine", "sync");
    assert_eq!(find_circle(&g), None);
    g.get_mut("sync").unwrap().insert("arena".into());
    let c = find_circle(&g).expect("arena -> worker -> sync -> arena");
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4);
}

#[test]
fn no_crate_has_a_circle_of_imports_between_its_modules() {
    let srcs = crate_srcs();
    assert!(srcs.len() >= 7, "crates found: {srcs:?}");
    for src in srcs {
        let g = import_graph(&src);
        if let Some(c) = find_circle(&g) {
            panic!("{}: modules import each other in a circle: {}", src.display(), c.join(" -> "));
        }
    }
}

#[test]
fn no_engine_file_has_more_than_600_lines_of_code_outside_its_tests() {
    let src = crates_dir().join("engine/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut long = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).unwrap();
        let lines = text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).count();
        if lines > 600 {
            long.push(format!("{} ({lines} lines)", f.strip_prefix(&src).unwrap().display()));
        }
    }
    assert!(long.is_empty(), "engine files over 600 lines of non-test code: {long:?}");
}

#[test]
fn the_strategy_is_dispatched_in_one_place() {
    // The strategy state's variants are named only where the dispatch lives.
    let src = crates_dir().join("engine/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut outside = Vec::new();
    for f in files {
        let code = code_of(&fs::read_to_string(&f).unwrap());
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().to_string();
        if rel != "arena/locks.rs"
            && ["Locks::Global", "Locks::Split", "Locks::Nodes"].iter().any(|v| code.contains(v))
        {
            outside.push(rel);
        }
    }
    assert!(outside.is_empty(), "files that match on the strategy state: {outside:?}");
}
