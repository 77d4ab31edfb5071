//! Strict loading: dispatch on `apiVersion`, reject unknown fields, and point
//! every error at `file:line:column` with the offending key and, for typos,
//! the closest valid key.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::schema::{
    API_VERSION_V1ALPHA1, Envelope, KIND_PROFILE, ProfileV1Alpha1, SUPPORTED_API_VERSIONS,
};
pub use super::text::{Position, position_of_path};
use super::text::{entries, extent_end, flow_key, indent_of, is_content, key_at, parent_path};
use crate::error::Error;

/// Who wrote a profile, which decides what a run that asks for something
/// else may set aside (devstack's own words) and what it must refuse (the
/// user's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provenance {
    /// A file the user wrote: `--profile FILE`, `./devstack.yaml`.
    File,
    /// A profile shipped with devstack, by its name.
    Shipped(String),
    /// The built-in default, used where no profile is given at all.
    BuiltIn,
}

/// A parsed profile plus where it came from (for relative paths and errors).
#[derive(Debug)]
pub struct LoadedProfile {
    pub origin: String,
    pub provenance: Provenance,
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
        let message = format!("invalid profile {}: {}", self.at(), self.message);
        Error::user(message).with_hint(self.hint_or_reference())
    }

    /// The error's hint. Every error is given one (a test walks them); the
    /// reference stands in should one ever be missed.
    fn hint_or_reference(&self) -> String {
        self.hint
            .clone()
            .unwrap_or_else(|| "see the profile reference in README.md".into())
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
                    message.push_str(&format!("\n  hint: {}", err.hint_or_reference()));
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
            provenance: Provenance::File,
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
        // Inside a one-line flow collection (`{port: 99999, servics: [s3]}`)
        // only the entry at fault goes, so that its neighbours are read too.
        if !raw.starts_with("missing field ")
            && !is_syntax_error(&err)
            && let Some(range) = scratch.flow_entry(line, column)
        {
            if let Some(rest) = raw.strip_prefix("unknown field ") {
                let (found, expected) = split_expected(rest);
                if let Some(close) = closest_match(&found, &expected) {
                    misspelt.push((parent, close.to_string()));
                }
            }
            if !errors.contains(&translated) {
                errors.push(translated);
            }
            scratch.blank_flow(line, range);
            continue;
        }
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
            // A mapping given for a scalar is reported at its first key; its
            // holder is at fault. A value refused by its own reader (a port
            // of 99999) is reported at its key too: that entry is.
            let on_key = scratch.entry_start(line, column) == Some((line, column))
                && !raw.starts_with("invalid value");
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
    let mut parent = position
        .as_ref()
        .and_then(|p| parent_path(text, p.line as usize))
        .unwrap_or_default();
    let mut key = key_at(text, position.as_ref());
    // Inside `key: {a: 1, b: 2}` the key at fault is the flow entry's, in `key`.
    if let Some(p) = &position
        && let Some(line) = text.lines().nth(p.line.saturating_sub(1) as usize)
        && let Some(inner) = flow_key(line, p.column.saturating_sub(1) as usize)
    {
        if let Some(outer) = key.take() {
            parent = if parent.is_empty() {
                outer
            } else {
                format!("{parent}.{outer}")
            };
        }
        key = Some(inner);
    }
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
        let hint = syntax_hint(&message);
        let msg = match key {
            Some(k) => format!("`{k}` {within}: {message}"),
            None => message,
        };
        (msg, Some(hint))
    };
    ProfileError {
        origin: origin.to_string(),
        position,
        message,
        hint,
    }
}

/// The fix for what the YAML parser found, in the user's words.
fn syntax_hint(message: &str) -> String {
    if message.starts_with("duplicate mapping key") {
        "remove one of the two, or merge them: a key appears once in a mapping".into()
    } else if message.contains("mapping values are not allowed") {
        "quote a value that holds `: ` (e.g. `\"a: b\"`), or indent the line under its key".into()
    } else if message.contains("unclosed") {
        "close the bracket or quote opened there, or quote the whole value if it is part of the text".into()
    } else if message.contains("tab") {
        "indent with spaces: YAML does not allow tabs there".into()
    } else {
        "check the YAML there: indentation with spaces, one `key: value` per line, quotes around a value that holds `: ` or ` #`, every `[` and `{` closed".into()
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
        return Some(format!(
            "remove `{found}`: see the profile reference in README.md for the {noun}s allowed here"
        ));
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

/// A working copy of the profile text in which block entries are blanked out
/// without moving any line, so positions found in it hold for the original.
struct Scratch {
    lines: Vec<String>,
    touched: Vec<bool>,
    /// The text as written, for what blanked lines held.
    original: Vec<String>,
    /// Entries blanked inside flow collections: line and what they held.
    flow_blanked: Vec<(usize, String)>,
}

impl Scratch {
    fn new(text: &str) -> Self {
        let lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        let touched = vec![false; lines.len()];
        Scratch {
            original: lines.clone(),
            lines,
            touched,
            flow_blanked: Vec::new(),
        }
    }

    /// The characters to blank for the entry at `column` of the innermost
    /// flow collection that holds it on `line`: the entry and one comma
    /// beside it, so the collection stays well-formed. `None` when the
    /// column is in no flow collection closed on the same line.
    fn flow_entry(&self, line: usize, column: usize) -> Option<std::ops::Range<usize>> {
        let chars: Vec<char> = self.lines.get(line)?.chars().collect();
        // Brackets and the commas directly inside each, outside quotes.
        let mut open: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut holder: Option<(usize, usize, Vec<usize>)> = None;
        let mut quote: Option<char> = None;
        for (i, &c) in chars.iter().enumerate() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '#') if i == 0 || chars[i - 1] == ' ' => break,
                (None, '{' | '[') => open.push((i, Vec::new())),
                (None, ',') => {
                    if let Some((_, commas)) = open.last_mut() {
                        commas.push(i);
                    }
                }
                (None, '}' | ']') => {
                    let (start, commas) = open.pop()?;
                    // The innermost closed collection around the column.
                    if start < column && column < i && holder.as_ref().is_none_or(|h| h.0 < start) {
                        holder = Some((start, i, commas));
                    }
                }
                (None, _) => {}
            }
        }
        let (start, end, commas) = holder?;
        let before = commas.iter().rev().find(|&&c| c < column).copied();
        let after = commas.iter().find(|&&c| c >= column).copied();
        let entry_start = before.map_or(start + 1, |c| c + 1);
        let entry_end = after.unwrap_or(end);
        let range = match (before, after) {
            (_, Some(comma)) => entry_start..comma + 1,
            (Some(comma), None) => comma..entry_end,
            (None, None) => entry_start..entry_end,
        };
        let blank = chars[range.clone()].iter().all(|c| c.is_whitespace());
        (!blank).then_some(range)
    }

    /// Blanks the characters of `range` on `line` (see [`Self::flow_entry`]).
    fn blank_flow(&mut self, line: usize, range: std::ops::Range<usize>) {
        let mut chars: Vec<char> = self.lines[line].chars().collect();
        let held: String = chars[range.clone()].iter().collect();
        self.flow_blanked
            .push((line, held.trim_matches([',', ' ']).to_string()));
        for c in &mut chars[range] {
            *c = ' ';
        }
        self.lines[line] = chars.into_iter().collect();
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
        let extent = line..=self.extent_end_with_blanked(line, column);
        let in_flow = self.flow_blanked.iter().any(|(l, held)| {
            extent.contains(l)
                && held
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with(':'))
        });
        in_flow
            || extent.clone().any(|l| {
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

#[cfg(test)]
pub(crate) fn parse_for_test(text: &str) -> Result<LoadedProfile, ProfileErrors> {
    parse("test.yaml", text, std::path::PathBuf::from("."))
}
