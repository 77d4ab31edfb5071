//! Where things are written in a profile's text: block entries and their
//! extent, flow entries, dotted key paths. Line-based, so that positions
//! hold even for text the parser could not read.

/// A 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

/// The key of the entry at `column` (0-based) of a flow mapping on `line`
/// (`localstack: {port: 1, servics: [s3]}`), if the column is inside one.
pub(super) fn flow_key(line: &str, column: usize) -> Option<String> {
    let chars: Vec<char> = line.chars().collect();
    // Open brackets, each with where its current entry starts.
    let mut open: Vec<(char, usize)> = Vec::new();
    let mut quote: Option<char> = None;
    for (i, &c) in chars.iter().enumerate().take(column.min(chars.len())) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '{' | '[') => open.push((c, i + 1)),
            (None, '}' | ']') => {
                open.pop();
            }
            (None, ',') => {
                if let Some(last) = open.last_mut() {
                    last.1 = i + 1;
                }
            }
            (None, _) => {}
        }
    }
    let (bracket, start) = open.last().copied()?;
    if bracket != '{' {
        return None;
    }
    let entry: String = chars[start..].iter().collect();
    let key = entry.split(':').next()?.trim().trim_matches(['"', '\'']);
    (!key.is_empty() && !key.contains([' ', '{', '[', ','])).then(|| key.to_string())
}

/// The key written on `line` (1-based), if that line is a `key:` line.
pub(super) fn key_at(text: &str, position: Option<&Position>) -> Option<String> {
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
pub(super) fn entries(line: &str) -> Vec<(usize, Option<String>)> {
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

pub(super) fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Whether a line holds YAML content (not blank, not only a comment).
pub(super) fn is_content(line: &str) -> bool {
    let trimmed = line.trim_start();
    !trimmed.is_empty() && !trimmed.starts_with('#')
}

/// The last line (0-based) of the block entry starting at `line`, `column`:
/// the following lines indented deeper, and for a key also an indentless
/// sequence (`ports:` followed by `- ...` at the key's own indentation).
pub(super) fn extent_end(lines: &[impl AsRef<str>], line: usize, column: usize) -> usize {
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
pub(super) fn parent_path(text: &str, line: usize) -> Option<String> {
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
