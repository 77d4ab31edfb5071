//! The test tree's shape: every test belongs to a tier that tests/run.sh
//! runs, and a test needing Docker is ignored by a plain `cargo test`.

use std::path::{Path, PathBuf};

/// Tiers whose tests need a Docker engine (and more): `#[ignore]`d, run by
/// tests/run.sh with `--include-ignored`.
const ENGINE_TIERS: &[&str] = &["docker", "cluster", "online"];

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn tier_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(tests_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("main.rs").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

#[test]
fn no_test_file_sits_outside_a_tier() {
    let loose: Vec<String> = rust_files(&tests_dir())
        .iter()
        .map(|p| file_name(p))
        .collect();
    assert!(
        loose.is_empty(),
        "tests/{loose:?} would each be a test crate that no tier runs: move them into a tier's directory (tests/<tier>/) and declare them in its main.rs"
    );
}

#[test]
fn tests_run_sh_runs_every_tier() {
    let run = std::fs::read_to_string(tests_dir().join("run.sh")).unwrap();
    let tiers = tier_dirs();
    assert_eq!(
        tiers.iter().map(|p| file_name(p)).collect::<Vec<_>>(),
        ["browser", "cluster", "docker", "engines", "online", "unit"],
        "a tier was added or removed: give it a group in tests/run.sh and a row in CONTRIBUTING.md"
    );
    for tier in &tiers {
        let name = file_name(tier);
        assert!(
            run.contains(&format!("--test {name} ")),
            "tests/run.sh never runs `cargo test --test {name}`"
        );
    }
}

#[test]
fn every_file_of_a_tier_is_one_of_its_modules() {
    let mut dirs = tier_dirs();
    dirs.push(tests_dir().join("common"));
    for dir in dirs {
        let root = if dir.join("main.rs").is_file() {
            "main.rs"
        } else {
            "mod.rs"
        };
        let text = std::fs::read_to_string(dir.join(root)).unwrap();
        let files = rust_files(&dir);
        assert!(
            files.len() > 1 || root == "main.rs",
            "{} is empty",
            dir.display()
        );
        for file in files {
            let name = file_name(&file);
            if name == root {
                continue;
            }
            let module = name.trim_end_matches(".rs");
            assert!(
                text.contains(&format!("mod {module};")),
                "{} is compiled by no test: declare `mod {module};` in {}",
                file.display(),
                dir.join(root).display()
            );
        }
    }
}

#[test]
fn every_engine_test_is_ignored_by_a_plain_cargo_test() {
    let mut tests = 0;
    for tier in ENGINE_TIERS {
        for file in rust_files(&tests_dir().join(tier)) {
            let text = std::fs::read_to_string(&file).unwrap();
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            for (at, line) in lines.iter().enumerate() {
                if *line == "#[test]" || line.starts_with("#[tokio::test") {
                    tests += 1;
                    assert!(
                        lines
                            .get(at + 1)
                            .is_some_and(|next| next.starts_with("#[ignore = \"")),
                        "{}:{}: a {tier}-tier test needs `#[ignore = \"needs ...\"]` after its test attribute, so that `cargo test` passes on a machine without Docker",
                        file.display(),
                        at + 1
                    );
                }
            }
        }
    }
    assert!(
        tests > 30,
        "found only {tests} engine-tier tests: the scan lost them"
    );
}
