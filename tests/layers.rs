//! The code's layers point one way: CLI -> library -> clients -> base.
//! This test reads every `crate::` path in `src/` (comments excluded) and
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
            "health",
            "pipeline",
            "cluster",
            "gitops",
            "verify",
            "localstack",
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

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
/// `#[cfg(test)]` modules (tests may build fixtures from anywhere).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
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
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(&src, &file);
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
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
