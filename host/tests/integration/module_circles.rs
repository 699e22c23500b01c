//! No import circles between the crate's modules, nor between the groups of
//! `policy/`, nor between the files of one folder.
//!
//! A circle makes two modules one: neither can be read, tested or changed
//! without the other, and the order in which a reader should learn them is
//! lost. The layering the crate keeps (documented in `host/src/lib.rs` and
//! `host/src/policy/mod.rs`) is, lowest first:
//! - top level: `alloc`, `files`, `invalid`, `text`, `watch`, `wit`; `nri`; `merge`,
//!   `node`, `convert`, `registry`; `policy`; `metrics`, `config`; `cli`;
//! - in `policy/`: `spec`; `call`; `imports`; `engine`; `load`; `chain`,
//!   `tally`; `dispatcher`; `reload`. The few names
//!   `policy/mod.rs` keeps at the top (`CompiledPolicy`, `PolicyLoader`)
//!   are for the rest of the crate: a group that used them would import
//!   another group through its parent.
//!
//! This test reads `host/src`, resolves every `crate::`, `super::` and
//! `self::` path (in `use` items and in code, unit tests included) to the
//! module it names, builds the graph of which module uses which, and fails
//! naming a circle and where each of its imports is. It checks circles, not
//! the order above, so that a new module needs no edit here.
//!
//! Why a reader of its own rather than a crate: `cargo-modules` draws the
//! graph through rust-analyzer, hundreds of crates to build (minutes on
//! CI's two cores) for one test; a parser (`syn`) would read the items but
//! leave the resolution of `crate::`, `super::` and `self::` paths to the
//! modules they name, which is most of this file. The crate's modules are
//! plain files (no `#[path]`, no macro that writes a `use`), so reading
//! paths out of the text, comments and strings left out, finds every
//! edge; `a_back_import_is_found_and_named` keeps it honest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where an edge was first seen: file and line.
type Site = (String, usize);
/// `from -> to -> first site`.
type Graph = BTreeMap<String, BTreeMap<String, Site>>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `policy/call/store.rs` is `policy::call::store`,
/// `policy/mod.rs` is `policy`, `lib.rs` is the crate root (empty).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap();
    let stem = file.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && stem == "lib")) {
        parts.push(stem.to_string());
    }
    parts
}

/// `text` with comments, strings and character literals blanked out (kept
/// as spaces, newlines kept, so that offsets still give line numbers).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
                blank(&mut out, i, end);
                i = end;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                let end = text[start..].find(&close).map_or(b.len(), |n| start + n + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'\'' => {
                // A character literal ('x', '\n', '\u{1b}'), not a lifetime.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    text[i + 2..].find('\'').map(|n| i + 2 + n + 1)
                } else {
                    let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 outside what it blanks")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The inline module (`mod tests { ... }`) each byte of `code` is in, as a
/// path below the file's module.
fn inline_modules(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut marks = vec![(0, Vec::new())];
    let mut pending: Option<String> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'{' {
            depth += 1;
            if let Some(name) = pending.take() {
                stack.push((name, depth));
                marks.push((i, stack.iter().map(|(n, _)| n.clone()).collect()));
            }
        } else if c == b'}' {
            if stack.last().is_some_and(|(_, d)| *d == depth) {
                stack.pop();
                marks.push((i, stack.iter().map(|(n, _)| n.clone()).collect()));
            }
            depth = depth.saturating_sub(1);
        } else if c == b';' {
            pending = None;
        } else if code[i..].starts_with("mod ") && (i == 0 || !is_ident(b[i - 1])) {
            let rest = &code[i + 4..];
            let name: String = rest.trim_start().bytes().take_while(|&c| is_ident(c)).map(char::from).collect();
            pending = Some(name);
            i += 4;
            continue;
        }
        i += 1;
    }
    marks
}

/// Every path starting with `crate`, `super` or `self` in `code`, with its
/// offset; a group `a::{b::c, d}` gives `a::b::c` and `a::d`.
fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    for head in ["crate", "super", "self"] {
        let mut from = 0;
        while let Some(n) = code[from..].find(head) {
            let at = from + n;
            from = at + head.len();
            if (at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b'$')) || b.get(from).is_some_and(|&c| is_ident(c)) {
                continue;
            }
            for path in tail(code, from, vec![head.to_string()]) {
                found.push((at, path));
            }
        }
    }
    found
}

/// The paths that continue `prefix` at `j` in `code`: `::ident`s, and a
/// `::{...}` group, each of its members continued in turn.
fn tail(code: &str, mut j: usize, mut prefix: Vec<String>) -> Vec<Vec<String>> {
    let skip_ws = |j: usize| j + (code[j..].len() - code[j..].trim_start().len());
    loop {
        let k = skip_ws(j);
        if !code[k..].starts_with("::") {
            return vec![prefix];
        }
        let k = skip_ws(k + 2);
        if code[k..].starts_with('{') {
            let close = matching_brace(code, k);
            let mut all = Vec::new();
            let mut start = k + 1;
            for part in split_top_level(&code[k + 1..close]) {
                let p = skip_ws(start);
                let ident: String = code[p..].bytes().take_while(|&c| is_ident(c)).map(char::from).collect();
                if !ident.is_empty() && ident != "self" {
                    let mut next = prefix.clone();
                    next.push(ident.clone());
                    all.extend(tail(code, p + ident.len(), next));
                } else if ident == "self" {
                    all.push(prefix.clone());
                }
                start += part.len() + 1;
            }
            return all;
        }
        let ident: String = code[k..].bytes().take_while(|&c| is_ident(c)).map(char::from).collect();
        if ident.is_empty() {
            return vec![prefix];
        }
        j = k + ident.len();
        prefix.push(ident);
    }
}

fn matching_brace(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in code[open..].bytes().enumerate() {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

fn split_top_level(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.bytes().enumerate() {
        match c {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
}

/// `segments` (starting with `crate`, `super` or `self`) as an absolute
/// module path, seen from module `here`.
fn absolute(here: &[String], segments: &[String]) -> Vec<String> {
    let mut base: Vec<String> = here.to_vec();
    let mut rest = segments;
    match segments[0].as_str() {
        "crate" => {
            base.clear();
            rest = &segments[1..];
        }
        "self" => rest = &segments[1..],
        _ => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
    }
    base.extend(rest.iter().cloned());
    base
}

/// The node a module path belongs to: a top-level module (`metrics`), or
/// for `policy`, its group (`policy::call`); `policy` alone is the facade.
/// `None` for what is not a module of the crate (`crate::api`, an item of
/// the root).
fn node(path: &[String], top: &BTreeSet<String>, groups: &BTreeSet<String>) -> Option<String> {
    let first = path.first()?;
    if !top.contains(first) {
        return None;
    }
    if first == "policy" {
        return Some(match path.get(1) {
            Some(group) if groups.contains(group) => format!("policy::{group}"),
            _ => "policy".to_string(),
        });
    }
    Some(first.clone())
}

/// The import graph of the crate in `src`.
fn graph(src: &Path) -> Graph {
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .filter(|n| n != "lib" && n != "main" && n != "mod")
            .collect()
    };
    let top = names(src);
    let groups = names(&src.join("policy"));
    let mut graph = Graph::new();
    // `policy` holds its groups: a module outside that uses `policy` may
    // reach any of them, so a group that uses that module closes a circle.
    for group in &groups {
        graph.entry("policy".into()).or_default().insert(format!("policy::{group}"), ("policy/mod.rs".into(), 1));
    }
    for (module, target, site) in uses(src) {
        let Some(from) = node(&module, &top, &groups) else { continue };
        let Some(to) = node(&target, &top, &groups) else { continue };
        // Outside `policy`, a group is `policy`: the graph of the top
        // level does not see inside it.
        let to = if to.starts_with("policy::") && !from.starts_with("policy") { "policy".to_string() } else { to };
        if to != from {
            graph.entry(from).or_default().entry(to).or_insert(site);
        }
    }
    graph
}

/// Every path a file of `src` uses: the file's module, the module path the
/// path names (resolved from where it is written, inline modules included)
/// and where it is written.
fn uses(src: &Path) -> Vec<(Vec<String>, Vec<String>, Site)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        if rel == Path::new("main.rs") {
            continue;
        }
        let module = module_of(rel);
        let text = std::fs::read_to_string(&file).unwrap();
        let code = code_only(&text);
        let marks = inline_modules(&code);
        for (at, segments) in paths(&code) {
            let inline = &marks.iter().rev().find(|(m, _)| *m <= at).unwrap().1;
            let mut here = module.clone();
            here.extend(inline.iter().cloned());
            let line = text[..at].matches('\n').count() + 1;
            found.push((module.clone(), absolute(&here, &segments), (rel.display().to_string(), line)));
        }
    }
    found
}

/// A circle in `graph`, as its nodes in order (the first repeated at the
/// end), if there is one.
fn circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        state: &mut BTreeMap<String, bool>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                let start = path.iter().position(|n| n == node).unwrap();
                let mut circle = path[start..].to_vec();
                circle.push(node.to_string());
                return Some(circle);
            }
            None => {}
        }
        state.insert(node.to_string(), false);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|m| m.keys()) {
            if let Some(c) = visit(next, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(node.to_string(), true);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

fn describe(graph: &Graph, circle: &[String]) -> String {
    let mut text = circle.join(" -> ");
    for pair in circle.windows(2) {
        let (file, line) = &graph[&pair[0]][&pair[1]];
        text.push_str(&format!("\n  {} uses {} at {file}:{line}", pair[0], pair[1]));
    }
    text
}

/// The import graph between the files of each folder of `src`: an edge
/// `policy::call::store -> policy::call::profile` when a file uses a file
/// beside it (a folder's `mod.rs` is the folder, beside the files and
/// folders next to it). The
/// graph of modules above sees a folder as one node, so a circle between
/// two of its files would go unseen there.
fn sibling_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> =
        files.iter().map(|f| module_of(f.strip_prefix(src).unwrap())).filter(|m| !m.is_empty()).collect();
    let mut graph = Graph::new();
    for (module, target, site) in uses(src) {
        if module.is_empty() {
            continue;
        }
        // The file the path lands in: its longest prefix that is a file.
        let Some(to) = (1..=target.len()).rev().map(|n| &target[..n]).find(|t| modules.contains(*t)) else {
            continue;
        };
        let siblings = to.len() == module.len() && to[..to.len() - 1] == module[..module.len() - 1];
        if siblings && to != module.as_slice() {
            graph.entry(module.join("::")).or_default().entry(to.join("::")).or_insert(site);
        }
    }
    graph
}

#[test]
fn no_module_imports_back_around_a_circle() {
    let graph = graph(&src_dir());
    if let Some(c) = circle(&graph) {
        panic!("import circle: {}", describe(&graph, &c));
    }
}

#[test]
fn no_file_imports_back_around_a_circle_inside_its_folder() {
    let graph = sibling_graph(&src_dir());
    // Every circle, each named once: take one edge of each found away.
    let mut rest = graph.clone();
    let mut found = Vec::new();
    while let Some(c) = circle(&rest) {
        found.push(describe(&graph, &c));
        let (a, b) = (&c[c.len() - 2], &c[c.len() - 1]);
        rest.get_mut(a).unwrap().remove(b);
    }
    assert!(found.is_empty(), "import circles between the files of one folder:\n{}", found.join("\n"));
    // Really read: edges between files of one folder are there.
    for (from, to) in
        [("policy::call::store", "policy::call::profile"), ("policy::call::compiled", "policy::call::store")]
    {
        assert!(graph.get(from).is_some_and(|m| m.contains_key(to)), "no edge {from} -> {to} found: {graph:#?}");
    }
}

/// The graph is really read: the edges the layering is made of are there,
/// so the test above cannot pass by finding nothing.
#[test]
fn the_graph_has_the_layering_edges() {
    let graph = graph(&src_dir());
    for (from, to) in [
        ("metrics", "policy"),
        ("cli", "policy"),
        ("policy::chain", "merge"),
        ("policy::dispatcher", "nri"),
        ("convert", "wit"),
        ("registry", "files"),
        ("policy::load", "policy::engine"),
        ("policy::load", "policy::spec"),
        ("policy::engine", "policy::call"),
        ("policy::call", "policy::spec"),
        ("policy::chain", "policy::engine"),
        ("policy::reload", "policy::dispatcher"),
    ] {
        assert!(graph.get(from).is_some_and(|m| m.contains_key(to)), "no edge {from} -> {to} found: {graph:#?}");
    }
}

/// The reader resolves relative paths, groups and inline modules, and
/// finds a circle when there is one.
#[test]
fn a_back_import_is_found_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("policy/load")).unwrap();
    std::fs::create_dir_all(src.join("policy/call")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod policy;\npub mod text;\n").unwrap();
    std::fs::write(src.join("text.rs"), "pub fn clip() {}\n").unwrap();
    std::fs::write(src.join("policy/mod.rs"), "mod load;\nmod call;\npub use load::limits::Limits;\n").unwrap();
    std::fs::write(src.join("policy/load/mod.rs"), "mod limits;\n").unwrap();
    std::fs::write(
        src.join("policy/load/limits.rs"),
        "// use crate::policy::call::X; (a comment)\nconst S: &str = \"crate::policy::call\";\n\
         pub struct Limits;\n#[cfg(test)]\nmod tests {\n    use super::super::super::call::store;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("policy/call/mod.rs"), "mod store;\n").unwrap();
    std::fs::write(src.join("policy/call/store.rs"), "use crate::{text::clip, policy::load::limits::Limits};\n")
        .unwrap();
    let graph = graph(src);
    assert!(graph["policy::call"].contains_key("text"), "{graph:#?}");
    let c = circle(&graph).expect("the test module's import closes a circle");
    let text = describe(&graph, &c);
    assert!(text.contains("policy::load -> policy::call") || text.contains("policy::call -> policy::load"), "{text}");
    assert!(text.contains("policy/load/limits.rs:6"), "names the file and line: {text}");

    std::fs::write(src.join("policy/load/limits.rs"), "// use crate::policy::call::X;\npub struct Limits;\n").unwrap();
    let graph = graph_without_circle(src);
    assert!(!graph.get("policy::load").is_some_and(|m| m.contains_key("policy::call")), "comments are not imports");
}

fn graph_without_circle(src: &Path) -> Graph {
    let graph = graph(src);
    assert_eq!(circle(&graph), None, "{graph:#?}");
    graph
}
