//! The source tree's shape (tier 1): no circle of imports between the files of any crate
//! (the files of a submodule such as `arena/` included), no file of a product crate over 600
//! lines of non-test code, and the strategy dispatched in one place.
//!
//! Imports are read from the text, outside comments and outside the `#[cfg(test)]` module at a
//! file's end: every path that starts with `crate::`, `$crate::`, `super::`, `self::` or the
//! name of a module the file declares, `use` groups expanded. A path names the file of the
//! longest module prefix it has; a name a file re-exports (`pub use`) leads on to the file that
//! defines it, and the re-export itself is not an import. A `mod x;` line declares a child and
//! is not an import either: a parent may hold children that import it, as long as it imports
//! none of them.

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

/// A module's path from the crate root: `arena/nodes/mod.rs` is `["arena", "nodes"]`,
/// `arena/free.rs` `["arena", "free"]`, `lib.rs` and `main.rs` `[]`.
type ModPath = Vec<String>;

fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: ModPath = rel.components().map(|c| c.as_os_str().to_string_lossy().to_string()).collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// The paths of a `use` tree or a path expression at the start of `s`: `a::b::{c, d::{e, f}}`
/// gives `a::b::c`, `a::b::d::e` and `a::b::d::f`, each as its segments.
fn path_tree(s: &str) -> Vec<Vec<String>> {
    fn parse(s: &str, mut i: usize) -> (Vec<Vec<String>>, usize) {
        let b = s.as_bytes();
        let skip_ws = |mut i: usize| {
            while i < b.len() && (b[i] as char).is_whitespace() {
                i += 1;
            }
            i
        };
        let mut segs: Vec<String> = Vec::new();
        loop {
            i = skip_ws(i);
            if i < b.len() && b[i] == b'{' {
                let mut out = Vec::new();
                i += 1;
                loop {
                    i = skip_ws(i);
                    if i < b.len() && b[i] == b'}' {
                        return (out, i + 1);
                    }
                    let (items, j) = parse(s, i);
                    out.extend(items.into_iter().map(|t| segs.iter().cloned().chain(t).collect()));
                    i = skip_ws(j);
                    match b.get(i) {
                        Some(b',') => i += 1,
                        Some(b'}') => return (out, i + 1),
                        _ => return (out, i),
                    }
                }
            }
            let id = ident_at(&s[i..]);
            if id.is_empty() {
                return (vec![segs], i);
            }
            segs.push(id.to_string());
            i += id.len();
            if s[i..].starts_with("::") {
                i += 2;
            } else {
                return (vec![segs], i);
            }
        }
    }
    parse(s, 0).0.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The names of the modules a file declares (`mod x;`, `pub(crate) mod x;`).
fn child_modules(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = if l.starts_with("pub") { l.split_once(' ')?.1 } else { l };
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// `code` with the contents of string and character literals blanked (their braces would
/// otherwise count as blocks), lengths kept.
fn blank_literals(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // A raw string's opening `r#"` needs its `"#` to close.
                let mut hashes = 0;
                let mut j = i;
                while j > 0 && b[j - 1] == b'#' {
                    hashes += 1;
                    j -= 1;
                }
                let raw = j > 0 && b[j - 1] == b'r';
                i += 1;
                while i < b.len() {
                    if !raw && b[i] == b'\\' {
                        out[i] = b' ';
                        if i + 1 < b.len() {
                            out[i + 1] = b' ';
                        }
                        i += 2;
                        continue;
                    }
                    if b[i] == b'"'
                        && b[i + 1..].iter().take(hashes).filter(|&&c| c == b'#').count() == hashes
                    {
                        break;
                    }
                    if b[i].is_ascii() {
                        out[i] = b' ';
                    }
                    i += 1;
                }
                i += 1;
            }
            b'\'' => {
                // A character literal ('x', '\n', '\''), not a lifetime ('a).
                let len = if b.get(i + 1) == Some(&b'\\') { 4 } else { 3 };
                if b.get(i + len - 1) == Some(&b'\'') && b[i + 1..i + len - 1].iter().all(|c| c.is_ascii()) {
                    for c in out.iter_mut().skip(i + 1).take(len - 2) {
                        *c = b' ';
                    }
                    i += len;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).unwrap()
}

/// Every path in `code` (of the file of module `here`) that names an item of the crate, made
/// absolute: paths that start with `crate::`, `$crate::`, `super::`, `self::` or a child module
/// of the file. Inside an inline `mod name { ... }` block, `super::` and `self::` are relative
/// to that block's module.
fn crate_paths(code: &str, here: &ModPath) -> Vec<ModPath> {
    let children = child_modules(code);
    let text = blank_literals(code);
    let code = text.as_str();
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    // Inline modules open at the current position, with the brace depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < code.len() {
        match bytes[i] {
            b'{' => {
                depth += 1;
                i += 1;
                continue;
            }
            b'}' => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            _ => {}
        }
        let at_word =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        let id = ident_at(&code[i..]);
        if id.is_empty() || !at_word {
            i += id.len().max(1);
            while i < code.len() && !code.is_char_boundary(i) {
                i += 1;
            }
            continue;
        }
        if id == "mod" {
            let rest = &code[i + 3..];
            let name = ident_at(rest.trim_start());
            let after = rest.trim_start()[name.len()..].trim_start();
            if !name.is_empty() && after.starts_with('{') {
                inline.push((name.to_string(), depth + 1));
            }
        }
        let starts = matches!(id, "crate" | "super" | "self") || children.contains(id);
        if starts && code[i + id.len()..].starts_with("::") {
            let mut module: ModPath = here.clone();
            module.extend(inline.iter().map(|(n, _)| n.clone()));
            for segs in path_tree(&code[i..]) {
                let mut base = module.clone();
                let mut k = 0;
                if segs[0] == "crate" {
                    base.clear();
                    k = 1;
                }
                while k < segs.len() && (segs[k] == "super" || segs[k] == "self") {
                    if segs[k] == "super" {
                        base.pop();
                    }
                    k += 1;
                }
                base.extend(segs[k..].iter().cloned());
                out.push(base);
            }
        }
        i += id.len();
    }
    out
}

/// What a crate's files are and what their `pub use` lines re-export: file -> name -> path.
struct Crate {
    files: BTreeMap<ModPath, PathBuf>,
    reexports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let files: BTreeMap<ModPath, PathBuf> = paths.into_iter().map(|f| (module_of(src, &f), f)).collect();
        let mut reexports = BTreeMap::new();
        for (m, f) in &files {
            let code = code_of(&fs::read_to_string(f).unwrap());
            for line in code.lines() {
                let l = line.trim_start();
                let Some(rest) = l.strip_prefix("pub use ").or_else(|| {
                    l.strip_prefix("pub(crate) use ").or_else(|| l.strip_prefix("pub(super) use "))
                }) else {
                    continue;
                };
                let here_children = child_modules(&code);
                let first = ident_at(rest.trim_start());
                if !(matches!(first, "crate" | "super" | "self") || here_children.contains(first)) {
                    continue; // another crate's items
                }
                for p in crate_paths(rest, m) {
                    let map: &mut BTreeMap<String, ModPath> = reexports.entry(m.clone()).or_default();
                    map.insert(p.last().unwrap().clone(), p);
                }
            }
        }
        Crate { files, reexports }
    }

    /// The file that defines what `path` names: the longest prefix that is a module file,
    /// following re-exports.
    fn resolve(&self, path: &ModPath, depth: usize) -> Option<ModPath> {
        for n in (0..=path.len()).rev() {
            let m: ModPath = path[..n].to_vec();
            if self.files.contains_key(&m) {
                if let (Some(next), true) = (path.get(n), depth < 8) {
                    if let Some(to) = self.reexports.get(&m).and_then(|r| r.get(next)) {
                        let mut p = to.clone();
                        p.extend(path[n + 1..].iter().cloned());
                        return self.resolve(&p, depth + 1);
                    }
                }
                return Some(m);
            }
        }
        None
    }
}

/// File (as its module path, `a/b`) -> the files it imports. A `pub use` line re-exports and
/// is followed instead of counted; `mod x;` declares and is not an import.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let krate = Crate::read(src);
    let name = |m: &ModPath| if m.is_empty() { "lib".to_string() } else { m.join("/") };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, f) in &krate.files {
        let code = code_of(&fs::read_to_string(f).unwrap());
        let code: String = code
            .lines()
            .filter(|l| {
                !l.trim_start().starts_with("pub use ") && !l.trim_start().starts_with("pub(crate) use ")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let to = graph.entry(name(m)).or_default();
        for p in crate_paths(&code, m) {
            if let Some(target) = krate.resolve(&p, 0) {
                if &target != m {
                    to.insert(name(&target));
                }
            }
        }
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
    let here: ModPath = vec!["arena".into(), "free".into()];
    let code = "mod kid;\nuse crate::a::X;\nuse crate::{b, c::{D, E}, d::F};\nlet x = crate::e::f();\n\
                $crate::g::h!();\nuse super::shared::Shared;\nuse super::super::top::T;\nkid::go();";
    let paths: Vec<String> = crate_paths(code, &here).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "a::X",
            "b",
            "c::D",
            "c::E",
            "d::F",
            "e::f",
            "g::h",
            "arena::shared::Shared",
            "top::T",
            "arena::free::kid::go"
        ]
    );
    assert!(
        crate_paths(&code_of("// use crate::z;\nfn f() {}"), &here).is_empty(),
        "comments are not imports"
    );
}

/// A circle planted between two files of a submodule (a strategy that imports the file that
/// dispatches to it) is found in a crate laid out on disk.
#[test]
fn a_circle_inside_a_submodule_is_found() {
    let dir = std::env::temp_dir().join(format!("vmarena-layout-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("arena")).unwrap();
    let write = |rel: &str, text: &str| fs::write(src.join(rel), text).unwrap();
    write("lib.rs", "mod arena;\npub use arena::Arena;\n");
    write("arena/mod.rs", "mod ops;\nmod global;\nmod state;\npub struct Arena(state::State);\n");
    write("arena/ops.rs", "pub(crate) trait Ops {}\n");
    write("arena/global.rs", "use super::ops::Ops;\npub(crate) struct Global;\nimpl Ops for Global {}\n");
    write("arena/state.rs", "use super::global::Global;\npub(crate) struct State(Global);\n");
    assert_eq!(find_circle(&import_graph(&src)), None, "one-way as written");
    write("arena/global.rs", "use super::ops::Ops;\nuse super::state::State;\npub(crate) struct Global;\n");
    let c = find_circle(&import_graph(&src)).expect("global -> state -> global");
    fs::remove_dir_all(&dir).ok();
    assert!(c.contains(&"arena/global".to_string()) && c.contains(&"arena/state".to_string()), "{c:?}");
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
fn no_crate_has_a_circle_of_imports_between_its_files() {
    let srcs = crate_srcs();
    assert!(srcs.len() >= 7, "crates found: {srcs:?}");
    for src in srcs {
        let g = import_graph(&src);
        if let Some(c) = find_circle(&g) {
            panic!("{}: files import each other in a circle: {}", src.display(), c.join(" -> "));
        }
    }
}

/// The crates a user builds on (the lab and the benchmark programs are tools).
const PRODUCT_CRATES: [&str; 5] = ["core", "platform", "engine", "vmarena", "preload"];

#[test]
fn no_product_file_has_more_than_600_lines_of_code_outside_its_tests() {
    let mut files = Vec::new();
    for c in PRODUCT_CRATES {
        rust_files(&crates_dir().join(c).join("src"), &mut files);
    }
    let src = crates_dir();
    let mut long = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).unwrap();
        let lines = text.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).count();
        if lines > 600 {
            long.push(format!("{} ({lines} lines)", f.strip_prefix(&src).unwrap().display()));
        }
    }
    assert!(long.is_empty(), "files over 600 lines of non-test code: {long:?}");
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
        if rel != "arena/strategy_state.rs"
            && ["State::Global", "State::Split", "State::Nodes"].iter().any(|v| code.contains(v))
        {
            outside.push(rel);
        }
    }
    assert!(outside.is_empty(), "files that match on the strategy state: {outside:?}");
}

/// No library file uses std's one-time cells (`OnceLock`, `Once`, `LazyLock`): a `fork()` while
/// another thread is inside their initialisation leaves the child's copy running for ever, and
/// the child's first use waits for it (the worker's hooks did, about once in 5,000 forks of
/// `tests/c/hostile.c`'s `fork_first_use`). `vmarena_platform::fork_once::ForkOnce` is the one
/// to use.
#[test]
fn no_library_file_uses_a_one_time_cell_a_fork_can_leave_half_set() {
    let mut files = Vec::new();
    for c in PRODUCT_CRATES {
        rust_files(&crates_dir().join(c).join("src"), &mut files);
    }
    let mut found = Vec::new();
    for f in files {
        let code = code_of(&fs::read_to_string(&f).unwrap());
        for cell in ["OnceLock", "LazyLock", "sync::Once;", "sync::Once::", "OnceCell"] {
            if code.contains(cell) {
                found.push(format!("{} ({cell})", f.display()));
            }
        }
    }
    assert!(found.is_empty(), "std one-time cells in library code: {found:?}");
}
