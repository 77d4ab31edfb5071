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
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub fn into_error(self) -> Error {
        let at = match &self.position {
            Some(p) => format!("{}:{}:{}", self.origin, p.line, p.column),
            None => self.origin.clone(),
        };
        let mut err = Error::user(format!("invalid profile {at}: {}", self.message));
        if let Some(hint) = self.hint {
            err = err.with_hint(hint);
        }
        err
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
    parse(&path.display().to_string(), &text, base_dir).map_err(ProfileError::into_error)
}

pub fn parse(
    origin: &str,
    text: &str,
    base_dir: std::path::PathBuf,
) -> Result<LoadedProfile, ProfileError> {
    let fail = |position: Option<Position>, message: String, hint: Option<String>| ProfileError {
        origin: origin.to_string(),
        position,
        message,
        hint,
    };
    let envelope: Envelope = from_str(text).map_err(|e| translate(origin, text, e))?;
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
    let spec: ProfileV1Alpha1 = from_str(text).map_err(|e| translate(origin, text, e))?;
    Ok(LoadedProfile {
        origin: origin.to_string(),
        base_dir,
        spec,
        text: text.to_string(),
    })
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
            // The rendered form may append " at line X column Y"; the position
            // is reported separately.
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
fn translate(origin: &str, text: &str, err: serde_saphyr::Error) -> ProfileError {
    let position = err.location().map(|l| position_of(&l));
    let message = raw_message(&err);
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
    } else if message.starts_with("invalid") {
        let key = key_at(text, position.as_ref());
        let what = match &key {
            Some(k) if parent.is_empty() => format!("`{k}`"),
            Some(k) => format!("`{parent}.{k}`"),
            None => "value".into(),
        };
        (
            format!("wrong type for {what}: {message}"),
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
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    let body = trimmed.strip_prefix("- ").unwrap_or(trimmed);
    let extra = trimmed.len() - body.len();
    if body.starts_with('#') {
        return None;
    }
    let colon = body.find(':')?;
    let key = body[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
    if key.is_empty() || key.contains(' ') {
        return None;
    }
    Some((indent + extra, key.to_string()))
}

/// Dotted path of the mapping that contains `line` (block-style YAML),
/// e.g. `localstack` or `secrets[].generate`.
fn parent_path(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let current = lines.get(line.checked_sub(1)?)?;
    let (mut indent, _) =
        line_key(current).unwrap_or((current.len() - current.trim_start().len(), String::new()));
    let mut path = Vec::new();
    for candidate in lines[..line - 1].iter().rev() {
        let trimmed = candidate.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let own_indent = candidate.len() - trimmed.len();
        if trimmed.starts_with("- ") && own_indent < indent {
            // A list item: the list's owner key is further up.
            path.push("[]".to_string());
            indent = own_indent;
            continue;
        }
        if own_indent < indent
            && let Some((_, key)) = line_key(candidate)
        {
            path.push(key);
            indent = own_indent;
            if indent == 0 {
                break;
            }
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
pub(crate) fn parse_for_test(text: &str) -> Result<LoadedProfile, ProfileError> {
    parse("test.yaml", text, std::path::PathBuf::from("."))
}
