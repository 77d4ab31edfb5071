//! Stack facts: the names devstack keeps for its own, and the readers of the
//! files users take facts from (dotenv files and `terraform output -json`).
//! Resolution (`resolve/facts.rs`) combines them with the profile's facts.

/// Facts devstack publishes itself; a user's fact of the same name would
/// silently replace what the stack's own manifests rely on.
pub const RESERVED_FACTS: &[&str] = &[
    "STACK_NAME",
    "AWS_REGION",
    "LOCALSTACK_IMAGE",
    "LOCALSTACK_SERVICES",
    "LOCALSTACK_ENDPOINT",
    "SEEDED_SECRETS",
    "SEEDED_PARAMETERS",
    "ESO_CHART_VERSION",
    "ESO_CHART",
    "ESO_CHART_SOURCE_KIND",
    "ESO_CHART_SOURCE_NAME",
    "ESO_CRDS_SOURCE_KIND",
    "ESO_CRDS_SOURCE_NAME",
    "ESO_CRDS_PATH",
];

/// Prefix of devstack's own facts beyond [`RESERVED_FACTS`], so that new
/// ones never clash with a user's.
pub const RESERVED_FACT_PREFIX: &str = "DEVSTACK_";

/// Whether `name` is one of devstack's own facts: one of [`RESERVED_FACTS`],
/// `DEVSTACK_*`, or a seeded secret's or parameter's ARN (`SECRET_<X>_ARN`,
/// `PARAMETER_<X>_ARN`).
pub fn reserved_fact(name: &str) -> bool {
    reserved_fact_meaning(name).is_some()
}

/// What devstack's own fact `name` holds, for messages; `None` when the
/// name is free for users.
pub fn reserved_fact_meaning(name: &str) -> Option<&'static str> {
    let exact = match name {
        "STACK_NAME" => Some("the stack's name"),
        "AWS_REGION" => Some("its LocalStack region"),
        "LOCALSTACK_IMAGE" => Some("the LocalStack image"),
        "LOCALSTACK_SERVICES" => Some("the LocalStack services"),
        "LOCALSTACK_ENDPOINT" => Some("LocalStack's address inside the cluster"),
        "SEEDED_SECRETS" => Some("the names of the seeded secrets"),
        "SEEDED_PARAMETERS" => Some("the names of the seeded parameters"),
        "ESO_CHART_VERSION" => Some("the External Secrets chart's version"),
        "ESO_CHART" => Some("the External Secrets chart"),
        "ESO_CHART_SOURCE_KIND" | "ESO_CHART_SOURCE_NAME" => {
            Some("the source of the External Secrets chart")
        }
        "ESO_CRDS_SOURCE_KIND" | "ESO_CRDS_SOURCE_NAME" | "ESO_CRDS_PATH" => {
            Some("the source of the External Secrets CRDs")
        }
        _ => None,
    };
    debug_assert_eq!(exact.is_some(), RESERVED_FACTS.contains(&name));
    if exact.is_some() {
        return exact;
    }
    if name.starts_with(RESERVED_FACT_PREFIX) {
        return Some("the prefix of its own facts");
    }
    // `SECRET_ARN` alone has no `<X>`: it is no ARN fact devstack writes.
    let arn = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix("_ARN"))
            .is_some_and(|middle| !middle.is_empty())
    };
    if arn("SECRET_") {
        return Some("a seeded secret's ARN");
    }
    if arn("PARAMETER_") {
        return Some("a seeded parameter's ARN");
    }
    None
}

/// Flux's rule for a substitution variable (`^[_a-zA-Z][_a-zA-Z0-9]*$`):
/// any other name is never substituted.
pub fn valid_fact_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

pub const FACT_NAME_RULE: &str = "a fact name is a letter or `_` followed by letters, digits and `_` (Flux substitutes no other name)";

/// One `KEY=value` line of a dotenv file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotenvEntry {
    pub key: String,
    pub value: String,
    /// 1-based line and column of the key.
    pub line: usize,
    pub column: usize,
}

/// A line of a dotenv file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotenvError {
    /// 1-based.
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: String,
}

/// Reads a dotenv file: blank lines and `#` comments are skipped; a line is
/// `KEY=value`, optionally after `export `. An unquoted value is trimmed
/// and ends at ` #`; a single-quoted one is taken literally; a double-quoted
/// one knows the escapes `\n \t \" \\ \$`. Gives every good line and
/// every bad one, so that one run reports all that is wrong with the file,
/// its entries' names too. A key given twice keeps its last value, as a
/// shell sourcing the file would.
pub fn parse_dotenv(text: &str) -> (Vec<DotenvEntry>, Vec<DotenvError>) {
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        match dotenv_line(raw) {
            Ok(None) => {}
            Ok(Some((key, key_at, value))) => entries.push(DotenvEntry {
                key,
                value,
                line: index + 1,
                column: column_of(raw, key_at),
            }),
            Err((at, message, hint)) => errors.push(DotenvError {
                line: index + 1,
                column: column_of(raw, at),
                message,
                hint: hint.into(),
            }),
        }
    }
    (entries, errors)
}

/// 1-based character column of byte offset `at`.
fn column_of(line: &str, at: usize) -> usize {
    line[..at.min(line.len())].chars().count() + 1
}

type LineError = (usize, String, &'static str);

const DOTENV_LINE_HINT: &str = "write `KEY=value`, one per line; `#` starts a comment";

/// `None` for a blank or comment line; else the key, its byte offset and the value.
fn dotenv_line(raw: &str) -> Result<Option<(String, usize, String)>, LineError> {
    let offset = |rest: &str| raw.len() - rest.len();
    let mut rest = raw.trim_start();
    if rest.is_empty() || rest.starts_with('#') {
        return Ok(None);
    }
    if let Some(after) = rest.strip_prefix("export")
        && after.starts_with([' ', '\t'])
    {
        rest = after.trim_start();
    }
    let key_at = offset(rest);
    let Some(eq) = rest.find('=') else {
        // The line itself is not quoted: it may be a value written without its key.
        return Err((key_at, "line has no `=`".into(), DOTENV_LINE_HINT));
    };
    let key = rest[..eq].trim_end();
    if !valid_fact_name(key) {
        return Err((
            key_at,
            format!("invalid fact name `{key}`: {FACT_NAME_RULE}"),
            "rename the key, e.g. `APP_BUCKET=…`",
        ));
    }
    let value_part = &rest[eq + 1..];
    let body = value_part.trim_start();
    let value = match body.chars().next() {
        Some(quote @ ('\'' | '"')) => {
            let quote_at = offset(body);
            let (value, after) =
                quoted(&body[1..], quote).ok_or_else(|| unterminated(quote_at, key, quote))?;
            let trailing = after.trim_start();
            if !(trailing.is_empty() || trailing.starts_with('#')) {
                return Err((
                    offset(trailing),
                    format!("`{key}`: text after the closing quote"),
                    "put the whole value inside the quotes, or start a comment with ` #`",
                ));
            }
            value
        }
        _ => {
            // ` #` ends the value; a `#` inside a word (`a#b`) is part of it.
            let end = value_part
                .char_indices()
                .find(|&(i, c)| c == '#' && value_part[..i].ends_with([' ', '\t']))
                .map_or(value_part.len(), |(i, _)| i);
            value_part[..end].trim().to_string()
        }
    };
    Ok(Some((key.to_string(), key_at, value)))
}

fn unterminated(at: usize, key: &str, quote: char) -> LineError {
    (
        at,
        format!("`{key}`: unterminated {quote}-quoted value"),
        "close the quote on the same line (write a line break in a double-quoted value as `\\n`)",
    )
}

/// The value up to the closing `quote`, and the text after it; `None` when
/// it is not closed.
fn quoted(body: &str, quote: char) -> Option<(String, &str)> {
    if quote == '\'' {
        let end = body.find('\'')?;
        return Some((body[..end].to_string(), &body[end + 1..]));
    }
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &body[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 't')) => value.push('\t'),
                Some((_, e @ ('"' | '\\' | '$'))) => value.push(e),
                // Any other escape is kept as written, as most dotenv readers do.
                Some((_, other)) => {
                    value.push('\\');
                    value.push(other);
                }
                None => return None,
            },
            c => value.push(c),
        }
    }
    None
}

/// One output of `terraform output -json` (or `tofu output -json`) as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerraformOutput {
    pub name: String,
    pub value: String,
    pub sensitive: bool,
}

/// Why a terraform outputs file cannot be used, with the output concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerraformError {
    /// The file as a whole is not what `terraform output -json` writes.
    NotOutputs(String),
    /// One output's value cannot be a fact.
    Output { output: String, message: String },
}

/// Reads `terraform output -json`: an object of `{"<output>": {"value": …,
/// "type": …, "sensitive": bool}}`. Strings are taken as they are, numbers
/// and bools as text, lists and maps as compact JSON; `null` has no text a
/// manifest could use, so it is refused. Gives every output in name order,
/// or every problem.
pub fn parse_terraform_outputs(text: &str) -> Result<Vec<TerraformOutput>, Vec<TerraformError>> {
    use serde_json::Value;
    let parsed: Value = serde_json::from_str(text).map_err(|e| {
        vec![TerraformError::NotOutputs(format!(
            "invalid JSON at line {} column {}",
            e.line(),
            e.column()
        ))]
    })?;
    let Value::Object(outputs) = parsed else {
        return Err(vec![TerraformError::NotOutputs(format!(
            "the top level is {}, not an object of outputs",
            json_kind(&parsed)
        ))]);
    };
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for (name, output) in outputs {
        let Value::Object(fields) = &output else {
            errors.push(TerraformError::NotOutputs(format!(
                "output `{name}` is {}, not an object with `value`",
                json_kind(&output)
            )));
            continue;
        };
        let sensitive = match fields.get("sensitive") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                errors.push(TerraformError::NotOutputs(format!(
                    "output `{name}` has `sensitive: {other}`, not true or false"
                )));
                continue;
            }
        };
        let value = match fields.get("value") {
            None => {
                errors.push(TerraformError::NotOutputs(format!(
                    "output `{name}` has no `value`"
                )));
                continue;
            }
            Some(Value::Null) => {
                errors.push(TerraformError::Output {
                    output: name,
                    message: "is null".into(),
                });
                continue;
            }
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Number(_) | Value::Bool(_) | Value::Array(_) | Value::Object(_))) => {
                v.to_string()
            }
        };
        found.push(TerraformOutput {
            name,
            value,
            sensitive,
        });
    }
    if errors.is_empty() {
        Ok(found)
    } else {
        Err(errors)
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_are_devstack_s_own_and_the_rest_are_free() {
        for name in RESERVED_FACTS {
            assert!(reserved_fact(name), "{name}");
        }
        for name in [
            "DEVSTACK_INTERVAL",
            "DEVSTACK_ANYTHING",
            "SECRET_APP_DB_ARN",
            "PARAMETER_X_ARN",
        ] {
            assert!(reserved_fact(name), "{name}");
        }
        for name in [
            "CLUSTER_NAME",
            "SECRET_ARN",
            "SECRET_NAME",
            "MY_SECRET_ARN",
            "AWS_REGION_2",
            "devstack_x",
        ] {
            assert!(!reserved_fact(name), "{name}");
        }
        assert_eq!(
            reserved_fact_meaning("AWS_REGION"),
            Some("its LocalStack region")
        );
    }

    #[test]
    fn fact_names_follow_flux() {
        for good in ["A", "_", "_a1", "CLUSTER_NAME", "x9"] {
            assert!(valid_fact_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "A.B", "A B", "É"] {
            assert!(!valid_fact_name(bad), "{bad}");
        }
    }

    fn values(text: &str) -> Vec<(String, String)> {
        let (entries, errors) = parse_dotenv(text);
        assert_eq!(errors, []);
        entries.into_iter().map(|e| (e.key, e.value)).collect()
    }

    #[test]
    fn dotenv_quoting_comments_and_export() {
        let text = concat!(
            "# a comment\n",
            "\n",
            "PLAIN = some value  \n",
            "export EXPORTED=yes\n",
            "COMMENTED=value # trailing\n",
            "HASH=a#b\n",
            "LEADING=#x\n",
            "SPACED= # only a comment\n",
            "EMPTY=\n",
            "SINGLE='lit $x \\n # kept'\n",
            "DOUBLE=\"a\\nb\\t\\\"q\\\" \\\\ \\$HOME\" # c\n",
            "  INDENTED=1\n",
        );
        assert_eq!(
            values(text),
            [
                ("PLAIN", "some value"),
                ("EXPORTED", "yes"),
                ("COMMENTED", "value"),
                ("HASH", "a#b"),
                ("LEADING", "#x"),
                ("SPACED", ""),
                ("EMPTY", ""),
                ("SINGLE", "lit $x \\n # kept"),
                ("DOUBLE", "a\nb\t\"q\" \\ $HOME"),
                ("INDENTED", "1"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let (entries, _) = parse_dotenv(text);
        assert_eq!((entries[0].line, entries[0].column), (3, 1));
        assert_eq!((entries[1].line, entries[1].column), (4, 8));
        assert_eq!((entries[9].line, entries[9].column), (12, 3));
    }

    #[test]
    fn dotenv_errors_name_each_bad_line_and_column() {
        let text = "OK=1\nno equals here\n1BAD=x\nOPEN=\"abc\nSQ='x\nAFTER='a' b\n";
        let (entries, errors) = parse_dotenv(text);
        assert_eq!(entries.len(), 1);
        let found: Vec<(usize, usize, &str)> = errors
            .iter()
            .map(|e| (e.line, e.column, e.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (2, 1, "line has no `=`"),
                (
                    3,
                    1,
                    "invalid fact name `1BAD`: a fact name is a letter or `_` followed by letters, digits and `_` (Flux substitutes no other name)"
                ),
                (4, 6, "`OPEN`: unterminated \"-quoted value"),
                (5, 4, "`SQ`: unterminated '-quoted value"),
                (6, 11, "`AFTER`: text after the closing quote"),
            ]
        );
    }

    #[test]
    fn terraform_outputs_become_text() {
        let text = r#"{
            "bucket": {"value": "app-uploads", "type": "string", "sensitive": false},
            "count": {"value": 3, "type": "number"},
            "on": {"value": true, "type": "bool"},
            "ids": {"value": ["a", "b"], "type": ["list", "string"]},
            "token": {"value": "t0k", "type": "string", "sensitive": true}
        }"#;
        let outputs = parse_terraform_outputs(text).unwrap();
        let found: Vec<(&str, &str, bool)> = outputs
            .iter()
            .map(|o| (o.name.as_str(), o.value.as_str(), o.sensitive))
            .collect();
        assert_eq!(
            found,
            [
                ("bucket", "app-uploads", false),
                ("count", "3", false),
                ("ids", r#"["a","b"]"#, false),
                ("on", "true", false),
                ("token", "t0k", true),
            ]
        );
    }

    #[test]
    fn terraform_files_that_are_not_outputs_are_refused() {
        for (text, why) in [
            ("[1]", "the top level is a list"),
            ("{\"a\": 1}", "output `a` is a number"),
            (
                "{\"a\": {\"type\": \"string\"}}",
                "output `a` has no `value`",
            ),
            (
                "{\"a\": {\"value\": 1, \"sensitive\": \"yes\"}}",
                "not true or false",
            ),
            ("{", "invalid JSON"),
        ] {
            let errors = parse_terraform_outputs(text).unwrap_err();
            match &errors[0] {
                TerraformError::NotOutputs(message) => {
                    assert!(message.contains(why), "{text}: {message}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(
            parse_terraform_outputs("{\"gone\": {\"value\": null}}").unwrap_err(),
            [TerraformError::Output {
                output: "gone".into(),
                message: "is null".into()
            }]
        );
    }
}
