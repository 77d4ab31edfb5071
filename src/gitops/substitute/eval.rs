//! Evaluation of parsed expressions, as strict mode does it (fluxcd/pkg
//! `envsubst/template.go`), with each operator's result as
//! `envsubst/funcs.go` computes it.

use super::parse::{Expr, Node, is_default_op};

pub(super) struct Eval<'a> {
    pub(super) lookup: &'a dyn Fn(&str) -> Option<String>,
    /// Name and offset of each required variable without a value.
    pub(super) missing: Vec<(String, usize)>,
}

impl Eval<'_> {
    pub(super) fn nodes(&mut self, nodes: &[Node]) -> String {
        nodes.iter().map(|n| self.node(n)).collect()
    }

    fn node(&mut self, node: &Node) -> String {
        match node {
            Node::Text(t) => t.clone(),
            Node::Expr(e) => self.expr(e),
        }
    }

    fn expr(&mut self, e: &Expr) -> String {
        // Arguments first, as `evalFunc` does: a nested variable is needed
        // even when the outer one is set.
        let args: Vec<String> = e.args.iter().map(|a| self.node(a)).collect();
        let value = match (self.lookup)(&e.name) {
            Some(v) => v.replace('\n', ""),
            None => {
                if !is_default_op(&e.op) {
                    self.missing.push((e.name.clone(), e.start));
                }
                String::new()
            }
        };
        apply(&e.op, &value, &args)
    }
}

/// `lookupFunc` and the function it picks; anything unknown is `toDefault`.
fn apply(op: &str, v: &str, args: &[String]) -> String {
    match op {
        "," => map_first(v, simple_lower),
        ",," => v.chars().map(simple_lower).collect(),
        "^" => map_first(v, simple_upper),
        "^^" => v.chars().map(simple_upper).collect(),
        // Go's `len`: bytes.
        "#" if args.is_empty() => v.len().to_string(),
        "#" => trim_prefix(v, &args[0], false),
        "##" => trim_prefix(v, &args[0], true),
        "%" => trim_suffix(v, &args[0], false),
        "%%" => trim_suffix(v, &args[0], true),
        ":" => substr(v, args),
        "/" => match args {
            [] => v.to_string(),
            [from] => v.replacen(from.as_str(), "", 1),
            [from, to, ..] => v.replacen(from.as_str(), to, 1),
        },
        "//" => match args {
            [] => v.to_string(),
            [from] => v.replace(from.as_str(), ""),
            [from, to, ..] => v.replace(from.as_str(), to),
        },
        "/#" => match args {
            [from, to] if v.starts_with(from.as_str()) => v.replacen(from.as_str(), to, 1),
            _ => v.to_string(),
        },
        "/%" => match args {
            [from, to] => match v.strip_suffix(from.as_str()) {
                Some(rest) => format!("{rest}{to}"),
                None => v.to_string(),
            },
            _ => v.to_string(),
        },
        // `toDefault`: the value unless empty, else the arguments joined.
        _ if v.is_empty() && !args.is_empty() => args.concat(),
        _ => v.to_string(),
    }
}

/// Go's `unicode.ToUpper` maps one rune to one rune; where Rust's full
/// mapping would yield several, Go keeps the rune.
fn simple_upper(c: char) -> char {
    let mut it = c.to_uppercase();
    match (it.next(), it.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

fn simple_lower(c: char) -> char {
    let mut it = c.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

fn map_first(v: &str, f: fn(char) -> char) -> String {
    let mut chars = v.chars();
    match chars.next() {
        Some(first) => std::iter::once(f(first)).chain(chars).collect(),
        None => String::new(),
    }
}

/// `toSubstr`, on bytes as Go slices strings; an offset or length that is
/// not an integer leaves the value as it is.
fn substr(s: &str, args: &[String]) -> String {
    let bytes = s.as_bytes();
    let len = bytes.len() as i64;
    let slice = |from: i64, to: i64| {
        String::from_utf8_lossy(&bytes[from as usize..to as usize]).into_owned()
    };
    let Some(Ok(mut pos)) = args.first().map(|a| a.parse::<i64>()) else {
        return s.to_string();
    };
    if pos < 0 {
        pos = (len + pos).max(0);
    }
    let Some(length) = args.get(1) else {
        return if pos < len {
            slice(pos, len)
        } else {
            String::new()
        };
    };
    let Ok(length) = length.parse::<i64>() else {
        return s.to_string();
    };
    if length < 0 {
        let end = len + length;
        return if end < pos {
            String::new()
        } else {
            slice(pos, end)
        };
    }
    if pos.saturating_add(length) >= len {
        if pos < len {
            slice(pos, len)
        } else {
            String::new()
        }
    } else {
        slice(pos, pos + length)
    }
}

/// `trimShortestPrefix`/`trimLongestPrefix`: the shortest or longest
/// non-empty prefix matching the glob goes. A malformed glob leaves the
/// value as it is.
fn trim_prefix(s: &str, pattern: &str, longest: bool) -> String {
    let pattern: Vec<char> = pattern.chars().collect();
    if !glob_valid(&pattern) {
        return s.to_string();
    }
    let chars: Vec<char> = s.chars().collect();
    let mut lengths = 1..=chars.len();
    let matching = |n: &usize| glob_match(&pattern, &chars[..*n]);
    let cut = if longest {
        lengths.rev().find(matching)
    } else {
        lengths.find(matching)
    };
    match cut {
        Some(n) => chars[n..].iter().collect(),
        None => s.to_string(),
    }
}

/// The suffix forms reverse the value and the pattern, as `funcs.go` does
/// (which turns a class like `[a-z]` inside out; so be it).
fn trim_suffix(s: &str, pattern: &str, longest: bool) -> String {
    let reversed: String = s.chars().rev().collect();
    let pattern: String = pattern.chars().rev().collect();
    trim_prefix(&reversed, &pattern, longest)
        .chars()
        .rev()
        .collect()
}

/// The shell glob of `envsubst/path`: like Go's `path.Match`, except that
/// `*` and `?` also match `/` (fluxcd/pkg's own tests strip `path/to/` with
/// `##*/`).
fn glob_match(p: &[char], s: &[char]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some('*') => (0..=s.len()).any(|k| glob_match(&p[1..], &s[k..])),
        Some('?') => !s.is_empty() && glob_match(&p[1..], &s[1..]),
        Some('[') => match (glob_class(p, 1), s.first()) {
            (Some((negated, ranges, next)), Some(&c)) => {
                let inside = ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
                inside != negated && glob_match(&p[next..], &s[1..])
            }
            _ => false,
        },
        Some('\\') => match p.get(1) {
            Some(&c) => s.first() == Some(&c) && glob_match(&p[2..], &s[1..]),
            None => false,
        },
        Some(&c) => s.first() == Some(&c) && glob_match(&p[1..], &s[1..]),
    }
}

type Class = (bool, Vec<(char, char)>, usize);

/// A `[...]` class starting after its `[`: negation, ranges, and where the
/// pattern goes on; `None` where Go answers `ErrBadPattern`.
fn glob_class(p: &[char], mut i: usize) -> Option<Class> {
    fn one(p: &[char], i: &mut usize) -> Option<char> {
        let mut c = *p.get(*i)?;
        if c == '-' || c == ']' {
            return None;
        }
        if c == '\\' {
            *i += 1;
            c = *p.get(*i)?;
        }
        *i += 1;
        // A class must still be closed.
        p.get(*i)?;
        Some(c)
    }
    let negated = p.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    loop {
        if p.get(i) == Some(&']') && !ranges.is_empty() {
            return Some((negated, ranges, i + 1));
        }
        let lo = one(p, &mut i)?;
        let mut hi = lo;
        if p.get(i) == Some(&'-') {
            i += 1;
            hi = one(p, &mut i)?;
        }
        ranges.push((lo, hi));
    }
}

fn glob_valid(p: &[char]) -> bool {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '[' => match glob_class(p, i + 1) {
                Some((_, _, next)) => i = next,
                None => return false,
            },
            '\\' if i + 1 >= p.len() => return false,
            '\\' => i += 2,
            _ => i += 1,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::gitops::substitute::render;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn ok(text: &str, pairs: &[(&str, &str)]) -> String {
        render(text, &vars(pairs)).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    fn failed(text: &str, pairs: &[(&str, &str)]) -> Vec<String> {
        render(text, &vars(pairs))
            .unwrap_err()
            .into_iter()
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn render_values_defaults_and_escapes() {
        assert_eq!(
            ok("a: ${A}, $B, $${C}, $$D", &[("A", "1")]),
            "a: 1, $B, ${C}, $D"
        );
        assert_eq!(ok("${A:=x}${B:-y}${C=z}${D:?w}${E:+v}", &[]), "xyzwv");
        assert_eq!(ok("${A:=x}|${B:=y}", &[("A", "set"), ("B", "")]), "set|y");
        assert_eq!(ok("${A:+x}", &[("A", "set")]), "set");
        assert_eq!(ok("${A:=}", &[]), "");
        assert_eq!(ok("${A:=pre-${B}-post}", &[("B", "b")]), "pre-b-post");
        assert_eq!(ok("${A=${B^^}}", &[("B", "abc")]), "ABC");
        assert_eq!(ok("$${A=${B}}", &[("B", "b")]), "${A=b}");
        assert_eq!(ok("${A:=$${B}}", &[("B", "b")]), "$b");
        assert_eq!(ok("\\\\x ${A}", &[("A", "a")]), "\\\\x a");
        assert_eq!(ok("${A}", &[("A", "one\ntwo\n")]), "onetwo");
        assert_eq!(ok("${A}", &[("A", "")]), "");
    }

    #[test]
    fn render_operators() {
        let a = [("A", "abcdEFGH28ij")];
        assert_eq!(ok("${#A}", &a), "12");
        assert_eq!(
            ok("${A^}|${A^^}|${A,}|${A,,}", &a),
            "AbcdEFGH28ij|ABCDEFGH28IJ|abcdEFGH28ij|abcdefgh28ij"
        );
        assert_eq!(ok("${A,^}", &a), "abcdEFGH28ij");
        let p = [("P", "/home/bozo/ideas/thoughts.for.today")];
        assert_eq!(ok("${P:11}", &p), "ideas/thoughts.for.today");
        assert_eq!(ok("${P:11:5}", &p), "ideas");
        assert_eq!(ok("${P:-5}", &[]), "5");
        // Bash's `${P: -5}` is not Flux's: the offset ` -5` is no integer.
        assert_eq!(ok("${P: -5}", &p), "/home/bozo/ideas/thoughts.for.today");
        assert_eq!(ok("${P:1:-1}", &[("P", "abcd")]), "bc");
        assert_eq!(ok("${P:3:-2}", &[("P", "abcd")]), "");
        assert_eq!(ok("${P:9}|${P:x}|${P:1:y}", &[("P", "abcd")]), "|abcd|abcd");
        let z = [("Z", "abcABC123ABCabc")];
        assert_eq!(ok("${Z/abc/xyz}", &z), "xyzABC123ABCabc");
        assert_eq!(ok("${Z//abc/xyz}", &z), "xyzABC123ABCxyz");
        assert_eq!(ok("${Z/#abc/XYZ}", &z), "XYZABC123ABCabc");
        assert_eq!(ok("${Z/%abc/XYZ}", &z), "abcABC123ABCXYZ");
        assert_eq!(ok("${Z/#abc/}", &z), "abcABC123ABCabc");
        assert_eq!(
            ok("${Z/#/pre-}|${Z/%/-post}", &[("Z", "v")]),
            "pre-v|v-post"
        );
        assert_eq!(ok("${Z/./}", &[("Z", "foo.bar")]), "foobar");
        assert_eq!(
            ok("${Z/\\//-}|${Z//\\//-}", &[("Z", "a/b/c")]),
            "a-b/c|a-b-c"
        );
        let f = [("F", "bash.string.txt")];
        assert_eq!(
            ok("${F#*.}|${F##*.}|${F%.*}|${F%%.*}", &f),
            "string.txt|txt|bash.string|bash"
        );
        let f = [("F", "path/to/file")];
        assert_eq!(ok("${F#*/}|${F##*/}", &f), "to/file|file");
        assert_eq!(
            ok("${F#[a-p]?t}|${F#[^p]*}|${F#[}", &f),
            "h/to/file|path/to/file|path/to/file"
        );
    }

    #[test]
    fn render_reports_every_missing_variable() {
        assert_eq!(
            failed("${A} ${B:=x} ${#C} ${D^^}", &[]),
            vec!["A", "C", "D"]
        );
        // A nested variable is needed even when the outer one is set.
        assert_eq!(failed("${A:=${B}}", &[("A", "a")]), vec!["B"]);
        let err = render("x\n  ${A}", &vars(&[])).unwrap_err();
        assert_eq!((err[0].line, err[0].column), (2, 3));
        // Unparsable text comes back as its fragment.
        assert_eq!(failed("a ${A-x} ${B}", &[]), vec!["${A-"]);
    }
}
