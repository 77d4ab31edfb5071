//! The code's layers point one way: CLI -> library -> clients -> base.
//! This test reads every `crate::` path in `src/` (comments and
//! `#[cfg(test)]` items excluded, nothing else) and
//! fails when a module reaches a higher layer, when modules of the
//! library or client layers import each other in a cycle, or when the files
//! of one module (`src/cluster/provider.rs` and `src/cluster/existing.rs`)
//! import each other in a cycle. It also fails when a file outside
//! `src/docker` names bollard: the engine is reached only through that
//! module, so what the fake engine stands in for is all there is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules by layer, highest first. A module may use its own
/// layer and the ones below it.
const LAYERS: &[(&str, &[&str])] = &[
    ("cli", &["main", "cli", "commands"]),
    (
        "library",
        &[
            "stack",
            "doctor",
            "diagnose",
            "artifacts",
            "health",
            "pipeline",
            "cluster",
            "gitops",
            "verify",
            "localstack",
            "registry",
            "logs",
            "seed",
            "snapshot",
        ],
    ),
    (
        "clients",
        &["docker", "k8s", "aws", "bundle", "state", "hostinfo"],
    ),
    (
        "base",
        &[
            "profile", "error", "envvars", "versions", "ui", "timeline", "signals", "lib",
        ],
    ),
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
        .unwrap_or_else(|| {
            panic!("module `{module}` is in no layer: add it to LAYERS in tests/layers.rs")
        })
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `src/gitops/chain.rs` -> `gitops`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Code without `//` comments (doc links are not dependencies) and without
/// `#[cfg(test)]` items (tests may build fixtures from anywhere). Only the
/// gated items go: the code before and after each one is read.
fn code_of(text: &str) -> String {
    strip_test_items(text)
        .lines()
        .map(without_comment)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `line` up to its `//` comment, if any (one after a quote is taken for
/// part of a string).
fn without_comment(line: &str) -> &str {
    match line.find("//") {
        Some(at) if !line[..at].contains('"') => &line[..at],
        _ => line,
    }
}

const CFG_TEST: &str = "#[cfg(test)]";

/// Byte offsets where `text` holds code, not a comment, string or char
/// literal: a brace in `"{"` or a `#[cfg(test)]` in a comment must not
/// count.
fn code_positions(text: &str) -> Vec<bool> {
    let b = text.as_bytes();
    let mut code = vec![false; b.len()];
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            // r"..", r#".."#, br#".."#: no escapes, ends at `"` and the hashes.
            let closing: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let open = rest.iter().position(|&c| c == b'"').unwrap() + 1;
            i += open;
            while i < b.len() && !b[i..].starts_with(&closing) {
                i += 1;
            }
            i += closing.len();
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            i += char_literal_len(rest).unwrap();
        } else {
            code[i] = true;
            i += 1;
        }
    }
    code
}

/// `Some(number of #)` when `text` starts a raw (byte) string literal.
fn raw_string_start(text: &[u8]) -> Option<usize> {
    let after_r = text
        .strip_prefix(b"br")
        .or_else(|| text.strip_prefix(b"r"))?;
    let hashes = after_r.iter().take_while(|&&c| c == b'#').count();
    (after_r.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of the char literal `text` starts with (`'a'`, `'\''`,
/// `'\u{7f}'`), or `None` for a lifetime (`'a`).
fn char_literal_len(text: &[u8]) -> Option<usize> {
    if text.get(1) == Some(&b'\\') {
        let end = text[2..].iter().skip(1).position(|&c| c == b'\'')? + 3;
        return Some(end + 1);
    }
    let ch = std::str::from_utf8(&text[1..text.len().min(5)])
        .or_else(|e| std::str::from_utf8(&text[1..1 + e.valid_up_to()]))
        .ok()?
        .chars()
        .next()?;
    let close = 1 + ch.len_utf8();
    (text.get(close) == Some(&b'\'')).then_some(close + 1)
}

/// Byte ranges of the `#[cfg(test)]`-gated items of `text`, each from its
/// attribute to its end: the `;` of `mod tests;`, or the brace matching the
/// first `{` of `mod tests { ... }` (or of a gated `fn`). An item that ends
/// without either (a gated field) ends where its enclosing group closes.
fn test_items(text: &str) -> Vec<std::ops::Range<usize>> {
    let code = code_positions(text);
    let b = text.as_bytes();
    let mut items = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find(CFG_TEST) {
        let start = from + found;
        if !code[start] {
            from = start + 1;
            continue;
        }
        let mut depth = 0usize;
        let mut end = b.len();
        for i in start + CFG_TEST.len()..b.len() {
            if !code[i] {
                continue;
            }
            match b[i] {
                b'{' | b'(' | b'[' => depth += 1,
                b'}' | b')' | b']' if depth == 0 => {
                    end = i;
                    break;
                }
                b'}' if depth == 1 => {
                    end = i + 1;
                    break;
                }
                b'}' | b')' | b']' => depth -= 1,
                b';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        items.push(start..end);
        from = end.max(start + 1);
    }
    items
}

/// `text` without its `#[cfg(test)]`-gated items.
fn strip_test_items(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for item in test_items(text) {
        out.push_str(&text[at..item.start]);
        at = item.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Files that hold a module declared `#[cfg(test)] mod NAME;` in `file`
/// (`src/profile/mod.rs` declares `src/profile/tests.rs`): test items too.
fn gated_module_files(file: &Path, text: &str) -> Vec<PathBuf> {
    let stem = file.file_stem().unwrap().to_string_lossy();
    let parent = file.parent().unwrap();
    let dir = if ["mod", "lib", "main"].contains(&stem.as_ref()) {
        parent.to_path_buf()
    } else {
        parent.join(stem.as_ref())
    };
    test_items(text)
        .into_iter()
        .filter_map(|item| {
            let item = text[item].trim_end();
            let declaration = item.strip_suffix(';')?;
            let name = declaration
                .split_whitespace()
                .last()?
                .trim_start_matches("r#");
            declaration
                .split_whitespace()
                .any(|word| word == "mod")
                .then(|| {
                    [
                        dir.join(format!("{name}.rs")),
                        dir.join(name).join("mod.rs"),
                    ]
                })
        })
        .flatten()
        .collect()
}

/// Modules named by `crate::X` paths, including grouped `use crate::{a, b}`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name.chars().next().unwrap().is_ascii_lowercase() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `crate::Error` and friends are re-exports from the crate root.
            if !name.is_empty() && name.chars().next().unwrap().is_ascii_lowercase() {
                out.insert(name);
            } else if !name.is_empty() {
                out.insert("lib".into());
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in &source_files() {
        let module = module_of(Path::new(""), file);
        let code = code_of(text);
        let entry = graph.entry(module.clone()).or_default();
        for import in imports(&code) {
            if import != module {
                entry.insert(import);
            }
        }
    }
    graph
}

#[test]
fn no_module_imports_a_higher_layer() {
    let mut violations = Vec::new();
    for (module, imports) in graph() {
        if module == "lib" || module == "main" {
            continue;
        }
        for import in imports {
            if layer_of(&import) < layer_of(&module) {
                violations.push(format!(
                    "{module} ({}) imports {import} ({})",
                    LAYERS[layer_of(&module)].0,
                    LAYERS[layer_of(&import)].0
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layers point both ways:\n{}",
        violations.join("\n")
    );
}

#[test]
fn modules_below_the_cli_form_no_cycle() {
    let graph = graph();
    let below_cli = |m: &str| layer_of(m) > 0 && m != "lib";
    // Depth-first search with a stack of the current path.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        keep: &dyn Fn(&str) -> bool,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if !done.insert(node.to_string()) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten().filter(|n| keep(n)) {
            if let Some(cycle) = visit(next, graph, keep, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for module in graph.keys().filter(|m| below_cli(m)) {
        if let Some(cycle) = visit(module, &graph, &below_cli, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_checker_sees_grouped_imports_and_skips_comments() {
    let code = code_of(
        "use crate::{docker, localstack};\n// crate::commands in a comment\nlet x = crate::Error::user(\"\");\n",
    );
    let found = imports(&code);
    assert_eq!(
        found,
        ["docker", "lib", "localstack"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

#[test]
fn every_source_file_says_what_it_is_for() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            !text.trim_start().starts_with("//!")
        })
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` line saying what they are for: {missing:?}"
    );
}

/// The checker reads past a gated `mod tests;` (src/profile/mod.rs declares
/// one on its 9th line, above the module's own imports) and past a gated
/// `mod tests { ... }` whose strings and chars hold braces, and drops only
/// what is gated.
#[test]
fn the_checker_reads_past_test_modules_and_skips_only_them() {
    let declared = code_of("pub mod load;\n\n#[cfg(test)]\nmod tests;\n\nuse crate::docker;\n");
    assert_eq!(imports(&declared), BTreeSet::from(["docker".to_string()]));

    let inline = code_of(concat!(
        "use crate::seed;\n",
        "#[cfg(test)]\n",
        "mod tests {\n",
        "    use crate::commands;\n",
        "    fn f<'a>(x: &'a str) -> char { let _ = \"}\"; let _ = r#\"}\"#; '}' }\n",
        "    // a } in a comment\n",
        "    /* and { in /* a nested */ block */\n",
        "}\n",
        "// #[cfg(test)] in a comment hides nothing\n",
        "fn g() { let _ = \"#[cfg(test)]\"; crate::verify::run(); }\n",
        "#[cfg(test)]\n",
        "pub(crate) fn helper() { crate::cli::parse(); }\n",
        "pub use crate::ui::Ui;\n",
    ));
    assert_eq!(
        imports(&inline),
        ["seed", "ui", "verify"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );

    let declares = "#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub mod fake;\nmod real;\n";
    assert_eq!(
        gated_module_files(Path::new("/s/profile/mod.rs"), declares),
        [
            "/s/profile/tests.rs",
            "/s/profile/tests/mod.rs",
            "/s/profile/fake.rs",
            "/s/profile/fake/mod.rs"
        ]
        .map(PathBuf::from)
    );
    assert_eq!(
        gated_module_files(Path::new("/s/docker.rs"), "#[cfg(test)]\nmod tests;\n"),
        ["/s/docker/tests.rs", "/s/docker/tests/mod.rs"].map(PathBuf::from)
    );
}

/// src/profile/mod.rs declares its tests (`#[cfg(test)] mod tests;`) above
/// its own imports: the checker drops those two lines and reads the rest.
#[test]
fn src_profile_mod_is_read_past_its_test_declaration() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/profile/mod.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    let declaration = "#[cfg(test)]\nmod tests;";
    assert_eq!(
        text.matches(declaration).count(),
        1,
        "{} no longer declares its tests once as `{declaration}`: update this test",
        path.display()
    );
    assert_eq!(strip_test_items(&text), text.replacen(declaration, "", 1));
}

/// The module path a file defines: `cluster/k3s/node.rs` -> `cluster::k3s::node`,
/// `cluster/k3s/mod.rs` -> `cluster::k3s`, `lib.rs` -> the crate root.
fn module_path_of(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = path.pop() {
        let stem = last.trim_end_matches(".rs");
        if !["mod", "lib", "main"].contains(&stem) {
            path.push(stem.to_string());
        }
    }
    path
}

/// Every path that starts `crate::`, `super::` or `self::` in `code`,
/// grouped imports (`use super::{a, b::{c, d}}`) expanded, resolved from
/// module `module` to absolute segments.
fn module_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| b[i..].starts_with(p.as_bytes()));
        if !starts || (i > 0 && (ident(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let (trees, end) = use_tree(code, i);
        for tree in trees {
            let mut resolved = Vec::new();
            let mut segments = tree.into_iter().peekable();
            match segments.peek().map(String::as_str) {
                Some("crate") => {
                    segments.next();
                }
                Some("self") => {
                    resolved = module.to_vec();
                    segments.next();
                }
                _ => {
                    resolved = module.to_vec();
                    while segments.peek().map(String::as_str) == Some("super") {
                        resolved.pop();
                        segments.next();
                    }
                }
            }
            resolved.extend(segments.filter(|s| s != "self"));
            out.push(resolved);
        }
        i = end.max(i + 1);
    }
    out
}

/// The paths of the use tree at `at` (`a::b::{c, d::e}` -> `a::b::c`,
/// `a::b::d::e`), and where it ends.
fn use_tree(code: &str, at: usize) -> (Vec<Vec<String>>, usize) {
    let b = code.as_bytes();
    let mut i = at;
    let mut prefix = Vec::new();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            let mut trees = Vec::new();
            i += 1;
            loop {
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return (trees, i + 1);
                }
                let (inner, end) = use_tree(code, i);
                if end <= i {
                    return (trees, i + 1);
                }
                trees.extend(inner.into_iter().map(|t| [prefix.clone(), t].concat()));
                i = end;
            }
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i == start {
            return (vec![prefix], i);
        }
        prefix.push(code[start..i].to_string());
        if b[i..].starts_with(b"::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// For every module with files of its own, which of its child modules
/// import which (`use super::x` in `a.rs`, or `crate::m::x`), each edge with
/// a file that makes it. Keys: the parent module's path (`cluster::k3s`).
type SiblingEdges = BTreeMap<String, BTreeMap<(String, String), String>>;

fn sibling_edges(files: &[(PathBuf, String)]) -> SiblingEdges {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(f, _)| module_path_of(f)).collect();
    let mut edges = SiblingEdges::new();
    for (file, text) in files {
        let from = module_path_of(file);
        let code = code_of(text);
        for to in module_paths(&code, &from) {
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            // Top-level modules are the layer tests' business.
            if common == 0 || from.len() <= common || to.len() <= common {
                continue;
            }
            // An item of the parent (`super::ClusterInfo`) is no sibling.
            if !modules.contains(&to[..=common]) {
                continue;
            }
            edges
                .entry(from[..common].join("::"))
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_insert_with(|| format!("src/{}", file.display()));
        }
    }
    edges
}

/// Every cycle among the files of one module, each as
/// `parent: a -> b -> a (a in FILE, b in FILE)`.
fn module_cycles(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut cycles = Vec::new();
    for (parent, edges) in sibling_edges(files) {
        let children: BTreeSet<&String> = edges.keys().map(|(a, _)| a).collect();
        let mut reported = BTreeSet::new();
        for start in children {
            // Breadth-first from `start` back to it: the shortest cycle.
            let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            let mut closed = None;
            while let Some(at) = queue.pop_front() {
                for ((a, b), _) in edges.iter().filter(|((a, _), _)| a == at) {
                    if b == start {
                        closed = Some(a);
                        break;
                    }
                    if !came_from.contains_key(b) {
                        came_from.insert(b, a);
                        queue.push_back(b);
                    }
                }
                if closed.is_some() {
                    break;
                }
            }
            let Some(mut at) = closed else { continue };
            let mut cycle = vec![start.clone()];
            while at != start {
                cycle.push(at.clone());
                at = came_from[at];
            }
            cycle[1..].reverse();
            let key: BTreeSet<String> = cycle.iter().cloned().collect();
            if !reported.insert(key) {
                continue;
            }
            let witnesses: Vec<String> = cycle
                .iter()
                .zip(cycle.iter().cycle().skip(1))
                .map(|(a, b)| format!("{}: uses {b}", edges[&(a.clone(), b.clone())]))
                .collect();
            cycles.push(format!(
                "{parent}: {} -> {} ({})",
                cycle.join(" -> "),
                cycle[0],
                witnesses.join("; ")
            ));
        }
    }
    cycles
}

/// Every file of `src/` but those only tests compile, with its text, by
/// its path inside `src/`.
fn source_files() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text)
        })
        .collect();
    let gated: BTreeSet<PathBuf> = texts
        .iter()
        .flat_map(|(file, text)| gated_module_files(file, text))
        .collect();
    texts
        .into_iter()
        .filter(|(file, _)| !gated.contains(file))
        .map(|(file, text)| (file.strip_prefix(&src).unwrap().to_path_buf(), text))
        .collect()
}

#[test]
fn the_files_of_one_module_form_no_cycle() {
    let cycles = module_cycles(&source_files());
    assert!(
        cycles.is_empty(),
        "files of one module import each other (move what both need into a file both use):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_checker_finds_a_cycle_between_the_files_of_a_module() {
    let files = |list: &[(&str, &str)]| -> Vec<(PathBuf, String)> {
        list.iter()
            .map(|(f, t)| (PathBuf::from(f), t.to_string()))
            .collect()
    };
    // Through `super::`, and back through `crate::`, grouped.
    let cycle = files(&[
        ("m/mod.rs", "mod a;\nmod x;\npub struct Item;\n"),
        ("m/a.rs", "use super::x::Thing;\nuse super::Item;\n"),
        ("m/x.rs", "use crate::{docker, m::{a::{self, Other}}};\n"),
    ]);
    let found = module_cycles(&cycle);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("m: a -> x -> a (src/m/a.rs: uses x; src/m/x.rs: uses a)"),
        "{found:?}"
    );
    // Three files, one deeper (`super::super::` from a child's file).
    let deeper = files(&[
        ("m/mod.rs", ""),
        ("m/store.rs", "use super::volume::prune;\n"),
        ("m/volume.rs", "use super::restore::upload;\n"),
        ("m/restore/mod.rs", "mod part;\n"),
        (
            "m/restore/part.rs",
            "fn f() { super::super::store::open(); }\n",
        ),
    ]);
    let found = module_cycles(&deeper);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("m: restore -> store -> volume -> restore"),
        "{found:?}"
    );
    assert!(
        found[0].contains("src/m/restore/part.rs: uses store"),
        "{found:?}"
    );
    // One way only, items of the parent, tests and comments: no cycle.
    let fine = files(&[
        ("m/mod.rs", "pub use a::A;\n"),
        (
            "m/a.rs",
            "use super::x;\nuse super::A;\n// super::x again\n",
        ),
        (
            "m/x.rs",
            "use super::Item;\n#[cfg(test)]\nmod tests {\n    use super::super::a;\n}\n",
        ),
    ]);
    assert_eq!(module_cycles(&fine), Vec::<String>::new());
}

/// Outside `src/docker` the engine is a `docker::Engine` and its data
/// shapes are `docker::models`: a file that names bollard (in its tests
/// too) could reach the engine past what the fake engine stands in for.
/// Naming it is the only way to call it, so a name is all there is to find.
#[test]
fn bollard_is_named_only_inside_src_docker() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut named = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        if relative.starts_with("docker") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            if without_comment(line).contains("bollard") {
                named.push(format!(
                    "src/{}:{}: {}",
                    relative.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        named.is_empty(),
        "bollard is named outside src/docker (use `docker::Engine`, `docker::models`, or add a method to the Engine):\n{}",
        named.join("\n")
    );
}
