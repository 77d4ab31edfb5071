//! The docs against the checkout: every repository path they name exists,
//! every relative link and anchor resolves, every figure README quotes is
//! one docs/performance.md measured (and says when), the cache sizes add up,
//! every `devstack` command of the CI example parses with the real CLI, and
//! the test command sets nothing up on the machine it runs on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Parser;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

/// README.md, CONTRIBUTING.md and every page of docs/, as (path, text).
fn pages() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string(), "CONTRIBUTING.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    assert!(
        docs.len() >= 9,
        "found only {} pages in docs/: {docs:?}",
        docs.len()
    );
    names.extend(docs);
    names.into_iter().map(|n| (n.clone(), read(&n))).collect()
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Inline code spans (`...`) of the text outside fenced code blocks.
fn code_spans(text: &str) -> Vec<String> {
    prose(text)
        .split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// The text outside fenced code blocks and inline code spans.
fn plain(text: &str) -> String {
    prose(text)
        .split('`')
        .step_by(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Paragraphs: blocks between blank lines, a list item each on its own.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in prose(text).lines() {
        let item = line.starts_with("- ") || line.starts_with("| ");
        if line.trim().is_empty() || item {
            if !current.trim().is_empty() {
                out.push(std::mem::take(&mut current));
            }
            current.clear();
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

// --- paths -----------------------------------------------------------------

/// Where the repository's own files live; a code span starting with one of
/// these names a file or directory of this checkout.
const REPO_DIRS: &[&str] = &[
    "tests/",
    "src/",
    "kit/",
    "scripts/",
    "bench/",
    "examples/",
    "profiles/",
    "manifests/",
    "docs/",
    ".ci/",
];

/// The repository path a code span names, if it names one: `./` dropped,
/// a `:LINE` suffix dropped; spans with placeholders (`<group>`, `*`,
/// `{a,b}`, `NAME`, `$VAR`, `…`) or spaces are patterns, not paths.
fn repo_path(span: &str) -> Option<String> {
    let span = span.strip_prefix("./").unwrap_or(span);
    if !REPO_DIRS.iter().any(|d| span.starts_with(d)) {
        return None;
    }
    let pattern = ['<', '*', '{', '$', '…', ' ', '|', '='];
    if span.contains(pattern) || span.contains("NAME") || span.contains("...") {
        return None;
    }
    let path = match span.rsplit_once(':') {
        Some((path, line)) if line.chars().all(|c| c.is_ascii_digit()) => path,
        _ => span,
    };
    Some(path.to_string())
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut named = 0;
    let mut missing = Vec::new();
    for (page, text) in pages() {
        for span in code_spans(&text) {
            let Some(path) = repo_path(&span) else {
                continue;
            };
            named += 1;
            if !root().join(&path).exists() {
                missing.push(format!("{page}: `{span}`"));
            }
        }
    }
    assert!(
        named > 50,
        "found only {named} repository paths in the docs"
    );
    assert!(
        missing.is_empty(),
        "the docs name paths this checkout does not have: {missing:#?}"
    );
}

#[test]
fn repository_paths_are_told_from_patterns() {
    assert_eq!(
        repo_path("tests/cluster/snapshot_k3s.rs"),
        Some("tests/cluster/snapshot_k3s.rs".into())
    );
    assert_eq!(repo_path("./kit/bundle"), Some("kit/bundle".into()));
    assert_eq!(
        repo_path("src/pipeline.rs:12"),
        Some("src/pipeline.rs".into())
    );
    assert_eq!(repo_path("tests/<group>/main.rs"), None);
    assert_eq!(repo_path("~/.cache/devstack/kit"), None);
    assert_eq!(repo_path("kit/test.d/*.sh"), None);
    assert_eq!(repo_path("bash kit/test.sh"), None);
}

// --- links -----------------------------------------------------------------

/// Markdown link targets `](target)` of the text outside code.
fn link_targets(text: &str) -> Vec<String> {
    let plain = plain(text);
    let mut out = Vec::new();
    let mut rest = plain.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, punctuation but `-` and `_`
/// dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for (page, text) in pages() {
        let dir = Path::new(&page).parent().unwrap().to_path_buf();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                PathBuf::from(&page)
            } else {
                dir.join(file)
            };
            let full = root().join(&path);
            if !full.exists() {
                broken.push(format!("{page}: ({target}): no {}", path.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let linked = std::fs::read_to_string(&full).unwrap_or_default();
                if !anchors(&linked).contains(fragment) {
                    broken.push(format!(
                        "{page}: ({target}): no heading of {} has the anchor #{fragment}",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(checked > 40, "found only {checked} relative links");
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        anchor(" Where the time goes: the waterfall"),
        "where-the-time-goes-the-waterfall"
    );
    assert_eq!(
        anchor(" Where a restore's time goes"),
        "where-a-restores-time-goes"
    );
    assert_eq!(
        anchor(" Rollback: the pipeline owns it"),
        "rollback-the-pipeline-owns-it"
    );
}

// --- figures ---------------------------------------------------------------

/// Units a measured figure carries.
const UNITS: &[&str] = &[
    "secrets/s",
    "minutes",
    "minute",
    "seconds",
    "second",
    "min",
    "ms",
    "s",
    "h",
    "GiB",
    "MiB",
    "KiB",
    "GB",
    "MB",
    "%",
];

/// Every figure of `text` outside code, as `NUMBER UNIT` (`26.4s` and
/// `26.4 s` alike), ranges (`20.8-23.4 s`) whole. A number that is part of
/// a word or a version (`k3s1`, `v1.36.4`) is none.
fn figures(text: &str) -> Vec<String> {
    let chars: Vec<char> = plain(text).chars().collect();
    let number = |at: usize| -> usize {
        let mut end = at;
        while end < chars.len()
            && (chars[end].is_ascii_digit()
                || (matches!(chars[end], '.' | ',')
                    && chars.get(end + 1).is_some_and(char::is_ascii_digit)
                    && end > at))
        {
            end += 1;
        }
        end
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let starts = chars[at].is_ascii_digit()
            && (at == 0
                || !(chars[at - 1].is_alphanumeric() || matches!(chars[at - 1], '.' | '_')));
        if !starts {
            at += 1;
            continue;
        }
        let mut end = number(at);
        // A range: `20.8-23.4`, `12-13`.
        if chars.get(end).is_some_and(|c| matches!(c, '-' | '–'))
            && chars.get(end + 1).is_some_and(char::is_ascii_digit)
        {
            end = number(end + 1);
        }
        let value: String = chars[at..end].iter().collect();
        let mut unit_at = end;
        if chars.get(unit_at) == Some(&' ') {
            unit_at += 1;
        }
        let rest: String = chars[unit_at..chars.len().min(unit_at + 12)]
            .iter()
            .collect();
        let unit = UNITS.iter().find(|u| {
            rest.starts_with(**u)
                && !rest[u.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric())
        });
        if let Some(unit) = unit {
            out.push(format!("{value} {unit}"));
        }
        at = end.max(at + 1);
    }
    out
}

#[test]
fn figures_are_read_as_number_and_unit() {
    assert_eq!(
        figures("in 26.4s, then 2.4 s / 1.3 s; **8.3 s** and 20.8-23.4 s, 1,104 MiB, 5 %"),
        [
            "26.4 s",
            "2.4 s",
            "1.3 s",
            "8.3 s",
            "20.8-23.4 s",
            "1,104 MiB",
            "5 %"
        ]
    );
    assert!(
        figures("kindest/node:v1.36.4, k3s1, 3 stacks, exit 4, `5m`, 2026-11-28").is_empty(),
        "{:?}",
        figures("kindest/node:v1.36.4, k3s1, 3 stacks, exit 4, `5m`, 2026-11-28")
    );
}

fn has_date(text: &str) -> bool {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(9)).any(|i| {
        let d = &b[i..i + 10];
        d[..4].iter().all(u8::is_ascii_digit)
            && d[4] == b'-'
            && d[5..7].iter().all(u8::is_ascii_digit)
            && d[7] == b'-'
            && d[8..].iter().all(u8::is_ascii_digit)
            && d.starts_with(b"20")
    })
}

const PERFORMANCE: &str = "docs/performance.md";

/// docs/performance.md is where figures live: README quotes only figures
/// it holds, each paragraph that quotes one says when it was measured and
/// links it; so does every paragraph of another page that links it.
#[test]
fn figures_outside_docs_performance_md_are_quoted_from_it_with_their_date() {
    let measured: BTreeSet<String> = figures(&read(PERFORMANCE)).into_iter().collect();
    assert!(
        measured.len() > 50,
        "found only {} figures in {PERFORMANCE}",
        measured.len()
    );
    let mut quoted = 0;
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        if page == PERFORMANCE {
            continue;
        }
        for paragraph in paragraphs(&text) {
            let links = paragraph.contains("performance.md");
            let found = figures(&paragraph);
            if found.is_empty() || !(page == "README.md" || links) {
                continue;
            }
            quoted += found.len();
            let first_line = paragraph
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or_default();
            for figure in found.iter().filter(|f| !measured.contains(*f)) {
                wrong.push(format!(
                    "{page}: {figure} (in \"{first_line}\") is not a figure of {PERFORMANCE}"
                ));
            }
            if !has_date(&paragraph) || !links {
                wrong.push(format!(
                    "{page}: \"{first_line}\" quotes {found:?} without the day they were \
                     measured and a link to {PERFORMANCE}"
                ));
            }
        }
    }
    assert!(
        quoted >= 5,
        "README and the docs quote only {quoted} figures"
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A markdown table: its header cells and its rows' cells.
type Table = (Vec<String>, Vec<Vec<String>>);

fn tables(text: &str) -> Vec<Table> {
    let mut out: Vec<Table> = Vec::new();
    let mut in_table = false;
    for line in prose(text).lines() {
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_string())
            .collect();
        if cells.iter().all(|c| c.chars().all(|ch| ch == '-')) {
            continue;
        }
        if in_table {
            out.last_mut().unwrap().1.push(cells);
        } else {
            out.push((cells, Vec::new()));
            in_table = true;
        }
    }
    out
}

#[test]
fn every_figure_of_docs_performance_md_says_when_it_was_measured() {
    let text = read(PERFORMANCE);
    let tables = tables(&text);
    assert!(
        tables.len() >= 2,
        "{PERFORMANCE} has {} tables",
        tables.len()
    );
    for (header, rows) in &tables {
        let column = header
            .iter()
            .position(|h| h == "measured")
            .unwrap_or_else(|| {
                panic!("a table of {PERFORMANCE} has no `measured` column: {header:?}")
            });
        assert!(!rows.is_empty(), "{header:?} has no rows");
        for row in rows {
            assert!(
                row.get(column).is_some_and(|c| has_date(c)),
                "{PERFORMANCE}: the row {:?} has no date in its `measured` column",
                row[0]
            );
        }
    }
    let figures_table = tables
        .iter()
        .find(|(h, _)| h.iter().any(|c| c == "reproduce with"))
        .expect("the figures table, with its `reproduce with` column");
    assert!(
        figures_table.1.len() >= 20,
        "{} figures",
        figures_table.1.len()
    );
    let column = figures_table
        .0
        .iter()
        .position(|h| h == "reproduce with")
        .unwrap();
    for row in &figures_table.1 {
        assert!(
            row[column].contains('`'),
            "{PERFORMANCE}: the row {:?} names no command that reproduces it",
            row[0]
        );
    }
    // Prose figures: each paragraph with one dates it.
    for paragraph in paragraphs(&text) {
        if paragraph.starts_with('|') || figures(&paragraph).is_empty() {
            continue;
        }
        // The findings' list items are dated by the paragraph above them.
        let dated = has_date(&paragraph) || paragraph.starts_with("- ");
        assert!(
            dated,
            "{PERFORMANCE}: a paragraph with figures and no date: {paragraph}"
        );
    }
}

/// MiB of a size cell (`1.1 GiB`, `348 MiB`, `—`).
fn mib(cell: &str) -> f64 {
    let cell = cell.trim_matches('*').trim();
    if cell == "—" {
        return 0.0;
    }
    let (number, unit) = cell
        .split_once(' ')
        .unwrap_or_else(|| panic!("not a size: {cell:?}"));
    let number: f64 = number
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a size: {cell:?}"));
    match unit {
        "GiB" => number * 1024.0,
        "MiB" => number,
        "KiB" => number / 1024.0,
        _ => panic!("not a size unit: {cell:?}"),
    }
}

#[test]
fn the_cache_sizes_add_up_to_their_totals() {
    let text = read(PERFORMANCE);
    let (header, rows) = tables(&text)
        .into_iter()
        .find(|(h, _)| h[0] == "artifact")
        .expect("docs/performance.md has the table of what the cache holds");
    let (total, parts) = rows.split_last().expect("rows");
    assert!(
        total[0].contains("total"),
        "the last row is the total: {total:?}"
    );
    assert!(parts.len() >= 5, "{parts:?}");
    for (column, name) in header.iter().enumerate().skip(1) {
        if name == "measured" {
            continue;
        }
        let sum: f64 = parts.iter().map(|r| mib(&r[column])).sum();
        let stated = mib(&total[column]);
        // The total is rounded to a tenth of a GiB: within 3 % of the sum.
        assert!(
            (stated - sum).abs() <= sum * 0.03,
            "{name}: the parts add up to {sum:.1} MiB ({:.2} GiB), the total says {}",
            sum / 1024.0,
            total[column]
        );
    }
}

// --- the CI example --------------------------------------------------------

const WORKFLOW: &str = "examples/github-actions/devstack.yml";

/// Words of one shell command, quotes removed; lenient with a quote left
/// open by splitting a line at `$(`.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, '#') if word.is_empty() && !any => break,
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// Every devstack command line in a shell line: the commands of its
/// pipelines, lists and command substitutions whose first word is
/// `devstack`.
fn devstack_commands(line: &str) -> Vec<Vec<String>> {
    let mut text = line.to_string();
    for separator in ["$(", "&&", "||", "|", ";", "(", ")", "`"] {
        text = text.replace(separator, "\n");
    }
    text.lines()
        .map(words)
        .filter(|w| w.first().is_some_and(|w| w == "devstack"))
        .collect()
}

#[test]
fn shell_lines_are_split_into_their_devstack_commands() {
    assert_eq!(
        devstack_commands(
            r#"echo "hash=$(devstack version --json | jq -c .pins | sha256sum | cut -d' ' -f1)" >> "$GITHUB_OUTPUT""#
        ),
        [["devstack", "version", "--json"]]
    );
    assert_eq!(
        devstack_commands(r#"eval "$(devstack -p ci env)""#),
        [["devstack", "-p", "ci", "env"]]
    );
    assert!(devstack_commands(r#"cargo install --git "$DEVSTACK_GIT" devstack"#).is_empty());
}

/// The workflow's steps, in order.
fn workflow_steps() -> Vec<serde_json::Value> {
    let workflow: serde_json::Value =
        serde_saphyr::from_str(&read(WORKFLOW)).expect("the CI example is YAML");
    let jobs = workflow["jobs"].as_object().expect("jobs");
    assert_eq!(jobs.len(), 1, "one job");
    let steps = jobs.values().next().unwrap()["steps"]
        .as_array()
        .expect("steps")
        .clone();
    assert!(steps.len() >= 6, "{steps:?}");
    steps
}

#[test]
fn every_devstack_command_of_the_ci_example_parses_with_the_cli() {
    let mut commands = Vec::new();
    for step in workflow_steps() {
        let Some(run) = step["run"].as_str() else {
            continue;
        };
        for line in run.lines() {
            commands.extend(devstack_commands(line));
        }
    }
    let verbs: Vec<String> = commands
        .iter()
        .map(|c| {
            c.iter()
                .skip(1)
                .filter(|w| !w.starts_with('-'))
                .find(|w| *w != "ci")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        verbs,
        ["version", "pull", "up", "env", "diagnose", "down"],
        "the CI example's devstack commands, in order: {commands:?}"
    );
    for command in &commands {
        if let Err(e) = devstack::cli::Cli::try_parse_from(command) {
            panic!("{WORKFLOW}: `{}` does not parse: {e}", command.join(" "));
        }
        // Nor does it give a command an option it refuses (`-p ci version`).
        let matches = devstack::cli::command()
            .try_get_matches_from(command)
            .unwrap();
        if let Err(e) = devstack::cli::refuse_unused_options(&matches) {
            panic!("{WORKFLOW}: `{}`: {}", command.join(" "), e.message());
        }
    }
}

#[test]
fn the_ci_example_caches_devstack_home_by_the_pins_and_always_takes_the_stack_down() {
    let steps = workflow_steps();
    let at = |what: &dyn Fn(&serde_json::Value) -> bool| -> usize {
        steps
            .iter()
            .position(what)
            .unwrap_or_else(|| panic!("no such step in {WORKFLOW}"))
    };
    let run = |s: &serde_json::Value| s["run"].as_str().unwrap_or_default().to_string();
    let pins = at(&|s| run(s).contains("devstack version --json | jq -c .pins"));
    let pins_id = steps[pins]["id"].as_str().expect("the pins step has an id");
    let cache = at(&|s| {
        s["uses"]
            .as_str()
            .is_some_and(|u| u.starts_with("actions/cache@"))
            && s["with"]["path"] == "${{ env.DEVSTACK_HOME }}/cache"
    });
    let key = steps[cache]["with"]["key"].as_str().unwrap();
    assert!(
        key.contains(&format!("steps.{pins_id}.outputs.hash")),
        "the cache is keyed on the pins' hash: {key}"
    );
    let pull = at(&|s| run(s).starts_with("devstack -p ci pull"));
    let up = at(&|s| run(s).starts_with("devstack -p ci up"));
    let down = at(&|s| run(s).starts_with("devstack -p ci down"));
    assert!(pins < cache && cache < pull && pull < up && up < down);
    assert_eq!(
        steps[down]["if"], "always()",
        "the stack goes down whatever happened"
    );
    assert!(
        down == steps.len() - 1,
        "taking the stack down is the last step"
    );
    // tests/example.sh runs the devstack steps it finds on `run:` lines:
    // each devstack step is one line.
    for step in &steps {
        let run = run(step);
        if run.starts_with("devstack ") {
            assert_eq!(run.trim_end().lines().count(), 1, "{run}");
        }
    }
    assert!(
        read("README.md").contains(WORKFLOW),
        "README's CI section links {WORKFLOW}"
    );
}

// --- the test command and the host ------------------------------------------

/// Each Makefile target's prerequisites and recipe lines.
fn make_targets() -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut targets: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in read("Makefile").lines() {
        if let Some(recipe) = line.strip_prefix('\t') {
            if let Some(t) = &current {
                targets.get_mut(t).unwrap().1.push(recipe.to_string());
            }
            continue;
        }
        current = None;
        if line.starts_with('#') || line.starts_with('.') || line.contains('=') {
            continue;
        }
        if let Some((name, prerequisites)) = line.split_once(':') {
            let name = name.trim().to_string();
            let prerequisites = prerequisites.split_whitespace().map(String::from).collect();
            targets.insert(name.clone(), (prerequisites, Vec::new()));
            current = Some(name);
        }
    }
    targets
}

/// `make test` must not change the machine it tests on: the host is set
/// up by `make host` alone (and by `.ci/run`, before `make test`).
#[test]
fn the_test_command_sets_nothing_up_on_the_machine() {
    const SET_UP: &[&str] = &["setup-docker.sh", "setup-browser.sh", "apt-get"];
    let targets = make_targets();
    assert!(
        targets["host"]
            .1
            .iter()
            .any(|r| r.contains("setup-docker.sh")),
        "`make host` sets the host up"
    );
    for target in [
        "test",
        "test-unit",
        "test-docker",
        "test-cluster",
        "test-online",
        "e2e",
    ] {
        let mut seen = BTreeSet::new();
        let mut todo = vec![target.to_string()];
        while let Some(t) = todo.pop() {
            if !seen.insert(t.clone()) {
                continue;
            }
            let (prerequisites, recipe) = targets
                .get(&t)
                .unwrap_or_else(|| panic!("no Makefile target `{t}`"));
            assert!(
                t != "host",
                "`make {target}` reaches `make host`, which changes the machine"
            );
            for line in recipe {
                assert!(
                    !SET_UP.iter().any(|s| line.contains(s)),
                    "`make {target}` runs `{line}`"
                );
            }
            todo.extend(prerequisites.iter().cloned());
        }
    }
    let run_sh = read("tests/run.sh");
    let code: Vec<&str> = run_sh
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert!(code.len() > 100, "tests/run.sh");
    for line in &code {
        assert!(
            !SET_UP.iter().any(|s| line.contains(s)),
            "tests/run.sh sets the host up: {line}"
        );
    }
    assert!(
        code.iter().any(|l| l.contains("docker info")),
        "tests/run.sh checks for a Docker engine"
    );
    // On the machine CI owns, `.ci/run` sets the host up before `make test`.
    let ci = read(".ci/run");
    let setup = ci
        .find("scripts/setup-docker.sh")
        .expect(".ci/run sets up Docker");
    let test = ci.find("\nmake test").expect(".ci/run runs make test");
    assert!(setup < test, ".ci/run sets up Docker before `make test`");
}
