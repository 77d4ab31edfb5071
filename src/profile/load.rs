//! Strict loading: dispatch on `apiVersion`, reject unknown fields, and point
//! every error at `file:line:column` with the offending key and, for typos,
//! the closest valid key.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::schema::{
    API_VERSION_V1ALPHA1, Envelope, KIND_PROFILE, ProfileV1Alpha1, SUPPORTED_API_VERSIONS,
};
use crate::error::Error;

/// A parsed profile plus where it came from (for relative paths and errors).
#[derive(Debug)]
pub struct LoadedProfile {
    pub origin: String,
    /// Directory relative paths in the profile resolve against.
    pub base_dir: std::path::PathBuf,
    pub spec: ProfileV1Alpha1,
    /// The text `spec` was read from: the file with the nodes behind
    /// `structural_errors` blanked out. Lines keep their numbers, so positions
    /// found in it hold for the file.
    pub text: String,
    /// Errors found while deserializing. Resolution reports them together with
    /// its own and fails when there are any.
    pub structural_errors: Vec<ProfileError>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

/// A profile error with its position, for tests and rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    pub origin: String,
    pub position: Option<Position>,
    pub message: String,
    pub hint: Option<String>,
}

impl ProfileError {
    /// `file:line:column`, or just the file when there is no position.
    fn at(&self) -> String {
        match &self.position {
            Some(p) => format!("{}:{}:{}", self.origin, p.line, p.column),
            None => self.origin.clone(),
        }
    }

    pub fn into_error(self) -> Error {
        let mut err = Error::user(format!("invalid profile {}: {}", self.at(), self.message));
        if let Some(hint) = self.hint {
            err = err.with_hint(hint);
        }
        err
    }
}

/// Every error of one profile, reported together in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileErrors(pub Vec<ProfileError>);

impl ProfileErrors {
    /// Each file's errors together, files in the order they first appear
    /// (the profile, then the files it reads), each in file order.
    pub fn sort(&mut self) {
        let mut files: Vec<String> = Vec::new();
        for e in &self.0 {
            if !files.contains(&e.origin) {
                files.push(e.origin.clone());
            }
        }
        // Errors without a position go last: they concern the file as a whole.
        self.0.sort_by_key(|e| {
            let file = files.iter().position(|f| *f == e.origin);
            (file, e.position.is_none(), e.position.clone())
        });
    }

    /// One error keeps the one-line form; several become a list with one
    /// `file:line:column: message` line and one hint line each, because a
    /// single `hint:` at the end could not say which error it fixes.
    pub fn into_error(mut self) -> Error {
        self.sort();
        let mut errors = self.0;
        match errors.len() {
            0 => Error::internal("a profile was rejected without an error to report"),
            1 => errors.remove(0).into_error(),
            count => {
                let mut message = format!("invalid profile {}: {count} errors", errors[0].origin);
                for err in &errors {
                    message.push_str(&format!("\n{}: {}", err.at(), err.message));
                    if let Some(hint) = &err.hint {
                        message.push_str(&format!("\n  hint: {hint}"));
                    }
                }
                Error::user(message)
            }
        }
    }
}

pub fn load_file(path: &Path) -> Result<LoadedProfile, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::user(format!("cannot read profile {}: {e}", path.display())).with_hint(
            "pass an existing file, or a shipped profile name: dev, ci, demo (`devstack profile list`)",
        )
    })?;
    let base_dir = path
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."))
        .to_path_buf();
    parse_recovering(&path.display().to_string(), &text, base_dir)
        .map_err(ProfileErrors::into_error)
}

/// Loads a profile that must have no structural error at all.
pub fn parse(
    origin: &str,
    text: &str,
    base_dir: std::path::PathBuf,
) -> Result<LoadedProfile, ProfileErrors> {
    let loaded = parse_recovering(origin, text, base_dir)?;
    if loaded.structural_errors.is_empty() {
        Ok(loaded)
    } else {
        Err(ProfileErrors(loaded.structural_errors))
    }
}

/// Loads a profile, collecting every structural error. `Ok` whenever a spec
/// could be read past the errors (they are in `structural_errors`), so that
/// resolution can add the semantic ones; `Err` when none could.
pub fn parse_recovering(
    origin: &str,
    text: &str,
    base_dir: std::path::PathBuf,
) -> Result<LoadedProfile, ProfileErrors> {
    let fail = |position: Option<Position>, message: String, hint: Option<String>| {
        ProfileErrors(vec![ProfileError {
            origin: origin.to_string(),
            position,
            message,
            hint,
        }])
    };
    // Only the envelope's errors count: the rest would be checked against the wrong schema.
    let envelope: Envelope =
        from_str(text).map_err(|e| ProfileErrors(vec![translate(origin, text, &e)]))?;
    let api_version = envelope.api_version.ok_or_else(|| {
        fail(
            Some(Position { line: 1, column: 1 }),
            "missing required key `apiVersion`".into(),
            Some(format!(
                "start the file with `apiVersion: {API_VERSION_V1ALPHA1}`"
            )),
        )
    })?;
    if !SUPPORTED_API_VERSIONS.contains(&api_version.value.as_str()) {
        return Err(fail(
            Some(position_of(&api_version.referenced)),
            format!("unknown apiVersion `{}`", api_version.value),
            Some(format!(
                "supported apiVersions: {}",
                SUPPORTED_API_VERSIONS.join(", ")
            )),
        ));
    }
    match &envelope.kind {
        None => {
            return Err(fail(
                Some(Position { line: 1, column: 1 }),
                "missing required key `kind`".into(),
                Some(format!("add `kind: {KIND_PROFILE}`")),
            ));
        }
        Some(kind) if kind.value != KIND_PROFILE => {
            return Err(fail(
                Some(position_of(&kind.referenced)),
                format!("unknown kind `{}`", kind.value),
                Some(format!("a profile has `kind: {KIND_PROFILE}`")),
            ));
        }
        Some(_) => {}
    }
    let (recovered, mut errors) = read_spec(origin, text);
    errors.sort();
    match recovered {
        Some((spec, text)) => Ok(LoadedProfile {
            origin: origin.to_string(),
            base_dir,
            spec,
            text,
            structural_errors: errors.0,
        }),
        None => Err(errors),
    }
}

/// serde stops at the first error, so the spec is read repeatedly: each
/// error is recorded, the node it is about is blanked out of a working copy,
/// and the copy is read again. Errors that only exist because of an earlier
/// blanking (a list left empty, a required key the user misspelt) are not
/// recorded. Gives the spec and the text it was read from, if reading
/// eventually succeeds.
fn read_spec(origin: &str, text: &str) -> (Option<(ProfileV1Alpha1, String)>, ProfileErrors) {
    // Each pass blanks at least one line, so this only bounds pathological input.
    const MAX_PASSES: usize = 50;
    let mut scratch = Scratch::new(text);
    let mut errors: Vec<ProfileError> = Vec::new();
    // (mapping, key) pairs an unknown key looked like a misspelling of.
    let mut misspelt: Vec<(String, String)> = Vec::new();
    for _ in 0..MAX_PASSES {
        let current = scratch.text();
        let err = match from_str::<ProfileV1Alpha1>(&current) {
            Ok(spec) => return (Some((spec, current)), ProfileErrors(errors)),
            Err(err) => err,
        };
        let translated = translate(origin, &current, &err);
        let Some(position) = translated.position.clone() else {
            errors.push(translated);
            break;
        };
        let line = position.line.saturating_sub(1) as usize;
        let column = position.column.saturating_sub(1) as usize;
        let raw = raw_message(&err);
        let parent = parent_path(&current, line + 1).unwrap_or_default();
        let (target, consequence) = if let Some(field) = raw.strip_prefix("missing field ") {
            let field = field.trim_matches('`').to_string();
            let target = scratch.enclosing(line, column);
            // A key blanked for its wrong value is missing now, but was written.
            let blanked = target.is_some_and(|(l, c)| scratch.blanked_key(l, c, &field));
            (target, blanked || misspelt.contains(&(parent, field)))
        } else {
            let about_key =
                raw.starts_with("unknown field ") || raw.starts_with("duplicate mapping key");
            if let Some(rest) = raw.strip_prefix("unknown field ") {
                let (found, expected) = split_expected(rest);
                if let Some(close) = closest_match(&found, &expected) {
                    misspelt.push((parent, close.to_string()));
                }
            }
            // A mapping given for a scalar is reported at its first key; its holder is at fault.
            let on_key = scratch.entry_start(line, column) == Some((line, column));
            let target = if about_key || !on_key {
                scratch.entry_at(line, column)
            } else {
                scratch.enclosing(line, column)
            };
            let consequence = scratch.is_touched(line)
                || target.is_some_and(|(l, c)| scratch.touches_extent(l, c));
            (target, consequence)
        };
        if !consequence && !errors.contains(&translated) {
            errors.push(translated);
        }
        // A syntax error leaves the parser's state unknown: whatever follows would be guesswork.
        if is_syntax_error(&err) {
            break;
        }
        match target {
            Some((l, c)) if scratch.blank(l, c) => {}
            _ => break,
        }
    }
    (None, ProfileErrors(errors))
}

fn is_syntax_error(err: &serde_saphyr::Error) -> bool {
    matches!(
        err,
        serde_saphyr::Error::ExternalMessage { .. }
            | serde_saphyr::Error::Eof { .. }
            | serde_saphyr::Error::MultipleDocuments { .. }
            | serde_saphyr::Error::IOError { .. }
    )
}

fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    let options = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::from_str_with_options(text, options)
}

pub fn position_of(location: &serde_saphyr::Location) -> Position {
    Position {
        line: location.line(),
        column: location.column(),
    }
}

pub fn raw_message(err: &serde_saphyr::Error) -> String {
    let text = match err {
        serde_saphyr::Error::Message { msg, .. } => msg.clone(),
        other => {
            let text = other.to_string();
            // The position the rendered form appends (" at line X column Y") is reported apart.
            text.split(" at line ")
                .next()
                .unwrap_or(&text)
                .trim()
                .to_string()
        }
    };
    // The parser's advice to its own API users means nothing to a user.
    text.split(", set DuplicateKeyPolicy")
        .next()
        .unwrap_or(&text)
        .to_string()
}

/// Turns a serde/YAML error into a positioned, helpful one.
fn translate(origin: &str, text: &str, err: &serde_saphyr::Error) -> ProfileError {
    let position = err.location().map(|l| position_of(&l));
    let message = raw_message(err);
    let parent = position
        .as_ref()
        .and_then(|p| parent_path(text, p.line as usize))
        .unwrap_or_default();
    let within = if parent.is_empty() {
        "at the top level".to_string()
    } else {
        format!("in `{parent}`")
    };

    let (message, hint) = if let Some(rest) = message.strip_prefix("unknown field ") {
        let (field, expected) = split_expected(rest);
        let hint = suggestion(&field, &expected, "key");
        (format!("unknown key `{field}` {within}"), hint)
    } else if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (value, expected) = split_expected(rest);
        let hint = suggestion(&value, &expected, "value");
        (format!("unknown value `{value}` {within}"), hint)
    } else if let Some(rest) = message.strip_prefix("missing field ") {
        let field = rest.trim_matches('`').to_string();
        (
            format!("missing required key `{field}` {within}"),
            Some(format!("add `{field}:` {within}")),
        )
    } else if message.starts_with("invalid") || expected_node(&message).is_some() {
        let key = key_at(text, position.as_ref());
        let what = match &key {
            Some(k) if parent.is_empty() => format!("`{k}`"),
            Some(k) => format!("`{parent}.{k}`"),
            None => "value".into(),
        };
        let why = match expected_node(&message) {
            Some(node) => format!("expected {node}"),
            None => message,
        };
        (
            format!("wrong type for {what}: {why}"),
            Some("see the profile reference in README.md for each key's type".into()),
        )
    } else {
        let key = key_at(text, position.as_ref());
        let msg = match key {
            Some(k) => format!("`{k}` {within}: {message}"),
            None => message,
        };
        (msg, None)
    };
    ProfileError {
        origin: origin.to_string(),
        position,
        message,
        hint,
    }
}

/// The node the parser's "expected mapping start" means, in the user's words.
fn expected_node(message: &str) -> Option<&'static str> {
    match message {
        "expected mapping start" => Some("a mapping (`key: value` lines or `{...}`)"),
        "expected sequence start" => Some("a list (`- item` lines or `[...]`)"),
        _ => None,
    }
}

/// Splits "`foo`, expected one of a, b" (or "expected `a` or `b`") into
/// ("foo", ["a", "b"]).
fn split_expected(rest: &str) -> (String, Vec<String>) {
    let mut parts = rest.splitn(2, ", expected ");
    let name = parts
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('`')
        .to_string();
    let expected = parts
        .next()
        .map(|list| {
            let list = list.strip_prefix("one of ").unwrap_or(list);
            list.split(", ")
                .flat_map(|item| item.split(" or "))
                .map(|item| item.trim().trim_matches('`').to_string())
                .filter(|item| !item.is_empty() && !item.contains(' '))
                .collect()
        })
        .unwrap_or_default();
    (name, expected)
}

fn suggestion(found: &str, expected: &[String], noun: &str) -> Option<String> {
    if expected.is_empty() {
        return None;
    }
    let closest = closest_match(found, expected);
    let valid = format!(
        "valid {noun}s: {}",
        expected
            .iter()
            .map(|e| format!("`{e}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Some(match closest {
        Some(c) => format!("did you mean `{c}`? ({valid})"),
        None => valid,
    })
}

/// The closest candidate by edit distance, when it is plausibly a typo.
pub fn closest_match<'a>(found: &str, candidates: &'a [String]) -> Option<&'a str> {
    let found_lower = found.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| {
            let distance = strsim::damerau_levenshtein(&found_lower, &c.to_ascii_lowercase());
            (distance, c)
        })
        .filter(|(d, c)| *d <= (c.len().max(found.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.as_str())
}

/// The key written on `line` (1-based), if that line is a `key:` line.
fn key_at(text: &str, position: Option<&Position>) -> Option<String> {
    let line = text.lines().nth(position?.line.checked_sub(1)? as usize)?;
    line_key(line).map(|(_, k)| k)
}

fn line_key(line: &str) -> Option<(usize, String)> {
    entries(line)
        .into_iter()
        .rev()
        .find_map(|(column, key)| Some((column, key?)))
}

/// The block entries that start on a line, left to right, with their 0-based
/// columns: a list item's dash (`None`) or a mapping key.
fn entries(line: &str) -> Vec<(usize, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = line.trim_start();
    let mut column = line.len() - rest.len();
    while let Some(after) = rest
        .strip_prefix('-')
        .filter(|a| a.is_empty() || a.starts_with(' '))
    {
        out.push((column, None));
        let body = after.trim_start();
        column += rest.len() - body.len();
        rest = body;
    }
    if rest.starts_with(['#', '{', '[']) {
        return out;
    }
    // A key ends at `: ` or at a `:` closing the line (`http://x` is no key).
    let colon = rest
        .find(": ")
        .or_else(|| rest.strip_suffix(':').map(str::len));
    if let Some(colon) = colon {
        let key = rest[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
        if !key.is_empty() && !key.contains(' ') {
            out.push((column, Some(key.to_string())));
        }
    }
    out
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Whether a line holds YAML content (not blank, not only a comment).
fn is_content(line: &str) -> bool {
    let trimmed = line.trim_start();
    !trimmed.is_empty() && !trimmed.starts_with('#')
}

/// The last line (0-based) of the block entry starting at `line`, `column`:
/// the following lines indented deeper, and for a key also an indentless
/// sequence (`ports:` followed by `- ...` at the key's own indentation).
fn extent_end(lines: &[impl AsRef<str>], line: usize, column: usize) -> usize {
    let is_key = entries(lines[line].as_ref())
        .iter()
        .any(|(c, key)| *c == column && key.is_some());
    let mut end = line;
    for (index, candidate) in lines.iter().enumerate().skip(line + 1) {
        let candidate = candidate.as_ref();
        if !is_content(candidate) {
            continue;
        }
        let own = indent_of(candidate);
        let indentless_item = is_key && own == column && candidate.trim_start().starts_with('-');
        if own > column || indentless_item {
            end = index;
        } else {
            break;
        }
    }
    end
}

/// A working copy of the profile text in which block entries are blanked out
/// without moving any line, so positions found in it hold for the original.
struct Scratch {
    lines: Vec<String>,
    touched: Vec<bool>,
    /// The text as written, for what blanked lines held.
    original: Vec<String>,
}

impl Scratch {
    fn new(text: &str) -> Self {
        let lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        let touched = vec![false; lines.len()];
        Scratch {
            original: lines.clone(),
            lines,
            touched,
        }
    }

    fn text(&self) -> String {
        self.lines.join("\n")
    }

    fn line_entries(&self, line: usize) -> Vec<(usize, Option<String>)> {
        self.lines.get(line).map(|l| entries(l)).unwrap_or_default()
    }

    /// The start of the entry beginning exactly at `line`, `column`, if any.
    fn entry_start(&self, line: usize, column: usize) -> Option<(usize, usize)> {
        self.line_entries(line)
            .into_iter()
            .find(|(c, _)| *c == column)
            .map(|(c, _)| (line, c))
    }

    /// The innermost entry on `line` that starts at or before `column` (a
    /// value belongs to the key before it); else the enclosing one.
    fn entry_at(&self, line: usize, column: usize) -> Option<(usize, usize)> {
        self.line_entries(line)
            .into_iter()
            .rev()
            .find(|(c, _)| *c <= column)
            .map(|(c, _)| (line, c))
            .or_else(|| self.enclosing(line, column))
    }

    /// The innermost entry that contains the node at `line`, `column`:
    /// the dash of `- key: v` for `key`, else the nearest less-indented line
    /// above. `None` at the top level.
    fn enclosing(&self, line: usize, column: usize) -> Option<(usize, usize)> {
        let left_of = |l: usize| {
            self.line_entries(l)
                .into_iter()
                .rev()
                .find(|(c, _)| *c < column)
                .map(|(c, _)| (l, c))
        };
        left_of(line).or_else(|| {
            (0..line.min(self.lines.len()))
                .rev()
                .filter(|&l| is_content(&self.lines[l]) && indent_of(&self.lines[l]) < column)
                .find_map(left_of)
        })
    }

    fn is_touched(&self, line: usize) -> bool {
        self.touched.get(line).copied().unwrap_or(false)
    }

    fn touches_extent(&self, line: usize, column: usize) -> bool {
        (line..=self.extent_end_with_blanked(line, column)).any(|l| self.is_touched(l))
    }

    /// The entry's last line, counting the lines blanked right after it:
    /// they were its content (a list whose items were all blanked).
    fn extent_end_with_blanked(&self, line: usize, column: usize) -> usize {
        let mut end = extent_end(&self.lines, line, column);
        while self.is_touched(end + 1) && !is_content(&self.lines[end + 1]) {
            end += 1;
        }
        end
    }

    /// Whether a line blanked within the entry at `line`, `column` held the key `key`.
    fn blanked_key(&self, line: usize, column: usize, key: &str) -> bool {
        (line..=self.extent_end_with_blanked(line, column)).any(|l| {
            self.is_touched(l)
                && entries(&self.original[l])
                    .iter()
                    .any(|(_, k)| k.as_deref() == Some(key))
        })
    }

    /// Blanks the entry at `line`, `column` and its block. A key after a
    /// dash leaves the dash, so the list item keeps its other keys. Whether
    /// anything changed.
    fn blank(&mut self, line: usize, column: usize) -> bool {
        let end = extent_end(&self.lines, line, column);
        let mut changed = false;
        for l in line..=end {
            let keep = if l == line && column > indent_of(&self.lines[l]) {
                self.lines[l][..column].trim_end().to_string()
            } else {
                String::new()
            };
            if self.lines[l] != keep {
                self.lines[l] = keep;
                self.touched[l] = true;
                changed = true;
            }
        }
        changed
    }
}

/// Where the node at a dotted key path (`localstack.bindAddress`,
/// `cluster.ports[1].protocol`, `secrets[2]`) is written in block-style YAML:
/// its value when written on the key's line, else the key. A path that leads
/// into flow style (`{...}`, `[...]`) or to an absent key stops at the
/// deepest node found; `None` when not even the first key is there.
pub fn position_of_path(text: &str, path: &str) -> Option<Position> {
    let lines: Vec<&str> = text.lines().collect();
    let position = |line: usize, column: usize| Position {
        line: line as u64 + 1,
        column: column as u64 + 1,
    };
    // The block being searched: its lines, and the column of its entries.
    let mut block = 0..lines.len();
    let mut column = lines.iter().find(|l| is_content(l)).map(|l| indent_of(l))?;
    let mut found = None;
    for segment in path_segments(path) {
        let has_entry = |line: &usize, key: Option<&str>| {
            entries(lines[*line])
                .iter()
                .any(|(c, k)| *c == column && k.as_deref() == key)
        };
        let located = match segment {
            Segment::Key(name) => block.clone().find(|line| has_entry(line, Some(name))),
            Segment::Index(index) => block
                .clone()
                .filter(|line| has_entry(line, None))
                .nth(index),
        };
        let Some(line) = located else { break };
        let start = column;
        let end = extent_end(&lines, line, start);
        let rest = &lines[line][start..];
        // What follows the key's colon or the item's dash on the same line.
        let inline = match &segment {
            Segment::Key(_) => rest.find(':').map(|i| i + 1),
            Segment::Index(_) => Some(1),
        }
        .map(|offset| {
            let after = &rest[offset..];
            (
                start + offset + after.len() - after.trim_start().len(),
                after.trim(),
            )
        });
        match inline {
            Some((value_column, value)) if !value.is_empty() && !value.starts_with('#') => {
                found = Some(position(line, value_column));
                if value.starts_with(['{', '[']) || matches!(segment, Segment::Key(_)) {
                    // A scalar or flow value: nothing below it in block style.
                    block = line + 1..line + 1;
                } else {
                    // `- key: v`: the item's keys start on the dash line.
                    block = line..end + 1;
                    column = value_column;
                }
            }
            _ => {
                found = Some(position(line, start));
                block = line + 1..end + 1;
                column = block
                    .clone()
                    .find(|&l| is_content(lines[l]))
                    .map_or(usize::MAX, |l| indent_of(lines[l]));
            }
        }
    }
    found
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// `cluster.ports[1].protocol` -> cluster, ports, 1, protocol.
fn path_segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let mut pieces = part.split('[');
        if let Some(key) = pieces.next().filter(|k| !k.is_empty()) {
            out.push(Segment::Key(key));
        }
        for index in pieces {
            if let Ok(index) = index.trim_end_matches(']').parse() {
                out.push(Segment::Index(index));
            }
        }
    }
    out
}

/// Dotted path of the mapping that contains `line` (block-style YAML),
/// e.g. `localstack` or `secrets[].generate`.
fn parent_path(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let current = lines.get(line.checked_sub(1)?)?;
    let (mut indent, _) =
        line_key(current).unwrap_or((current.len() - current.trim_start().len(), String::new()));
    let mut path = Vec::new();
    // `- key: v`: the key's mapping is the list item begun on its own line.
    if let Some((dash, _)) = entries(current)
        .into_iter()
        .find(|(c, key)| key.is_none() && *c < indent)
    {
        path.push("[]".to_string());
        indent = dash;
    }
    for candidate in lines[..line - 1].iter().rev() {
        if !is_content(candidate) || indent_of(candidate) >= indent {
            continue;
        }
        // Right to left: in `- generate:` the key is inside the list item.
        for (column, key) in entries(candidate).into_iter().rev() {
            if column < indent {
                path.push(key.unwrap_or_else(|| "[]".to_string()));
                indent = column;
            }
        }
        if indent == 0 {
            break;
        }
    }
    path.reverse();
    let mut out = String::new();
    for part in path {
        if part == "[]" {
            out.push_str("[]");
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&part);
        }
    }
    Some(out)
}

#[cfg(test)]
pub(crate) fn parse_for_test(text: &str) -> Result<LoadedProfile, ProfileErrors> {
    parse("test.yaml", text, std::path::PathBuf::from("."))
}
