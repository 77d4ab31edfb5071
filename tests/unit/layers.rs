//! The code's layers point one way: CLI -> library -> clients -> base.
//! This test reads every `crate::` path in `src/` (comments and
//! `#[cfg(test)]` items excluded, nothing else) and
//! fails when a module reaches a higher layer, or when modules of the
//! library or client layers import each other in a cycle.

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
            "profile", "error", "envvars", "versions", "ui", "timeline", "lib",
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
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
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
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in &texts {
        if gated.contains(file) {
            continue;
        }
        let module = module_of(&src, file);
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
