//! Files and functions small enough to hold in one's head: no file in src/
//! over 800 lines before its test module, no function over 120 lines.

use std::path::{Path, PathBuf};

use crate::layers::rust_files;

const MAX_FILE_LINES: usize = 800;
const MAX_FN_LINES: usize = 120;

/// Each file's lines up to its test module (a file that is a test module,
/// `tests.rs`, has none).
fn sources() -> Vec<(PathBuf, Vec<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 50, "found only {} files in src/", files.len());
    files
        .into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            let lines: Vec<String> = text
                .lines()
                .take_while(|l| l.trim() != "#[cfg(test)]")
                .map(String::from)
                .collect();
            (f, lines)
        })
        .collect()
}

#[test]
fn no_source_file_is_over_800_lines_before_its_tests() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|(_, lines)| lines.len() > MAX_FILE_LINES)
        .map(|(f, lines)| format!("{} ({} lines)", f.display(), lines.len()))
        .collect();
    assert!(long.is_empty(), "split these along their seams: {long:#?}");
}

/// A function runs from its `fn` line to the first line after it that
/// closes at the `fn` line's indentation.
fn functions(lines: &[String]) -> Vec<(usize, usize, String)> {
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let is_fn = [
            "fn ",
            "pub fn ",
            "async fn ",
            "pub async fn ",
            "pub(crate) fn ",
            "pub(crate) async fn ",
            "pub(super) fn ",
            "pub(super) async fn ",
        ]
        .iter()
        .any(|p| code.starts_with(p));
        // A declaration without a body (a trait's) ends at its `;`.
        let header_end = lines[at..]
            .iter()
            .position(|l| l.contains('{') || l.trim_end().ends_with(';'));
        let has_body = header_end.is_some_and(|end| lines[at + end].contains('{'));
        if !is_fn || !has_body {
            continue;
        }
        let indent = &line[..line.len() - code.len()];
        let close = format!("{indent}}}");
        if let Some(end) = lines[at..].iter().position(|l| *l == close) {
            let name = code.split('(').next().unwrap_or(code).to_string();
            found.push((at + 1, end + 1, name));
        }
    }
    found
}

#[test]
fn no_function_is_over_120_lines() {
    let mut seen = 0;
    let mut long = Vec::new();
    for (file, lines) in sources() {
        for (line, length, name) in functions(&lines) {
            seen += 1;
            if length > MAX_FN_LINES {
                long.push(format!(
                    "{}:{line} `{name}` ({length} lines)",
                    file.display()
                ));
            }
        }
    }
    assert!(
        seen > 500,
        "found only {seen} functions: the scan lost them"
    );
    assert!(long.is_empty(), "break these into named steps: {long:#?}");
}
