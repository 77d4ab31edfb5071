//! The expression language: what is an expression and what it reads
//! (fluxcd/pkg `envsubst/parse/parse.go` and `envsubst/parse/scan.go`),
//! and which expressions strict mode requires (`envsubst/template.go`:
//! `isDefaultOp`).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    BadSubstitution,
    MissingClosingBrace,
    VariableName,
    FuncSubstitution,
}

impl Reason {
    pub(super) fn text(self) -> &'static str {
        match self {
            Reason::BadSubstitution => "bad substitution",
            Reason::MissingClosingBrace => "missing closing brace",
            Reason::VariableName => "unable to parse variable name",
            Reason::FuncSubstitution => "unable to parse substitution within function",
        }
    }
}

#[derive(Debug)]
pub(super) enum Node {
    Text(String),
    Expr(Expr),
}

/// `${name<op><args>}`; `op` is empty for a plain `${name}`.
#[derive(Debug)]
pub(super) struct Expr {
    pub(super) name: String,
    pub(super) op: String,
    pub(super) args: Vec<Node>,
    /// Character offsets of the `$` and past the `}`.
    pub(super) start: usize,
    end: usize,
}

#[derive(Debug)]
pub(super) struct Bad {
    pub(super) start: usize,
    at: usize,
    pub(super) reason: Reason,
}

impl Bad {
    /// From `${` to the character Flux stopped at; trailing blanks are
    /// where a scalar ended, not part of the expression.
    pub(super) fn text<'c>(&self, chars: &'c [char]) -> &'c [char] {
        let mut end = (self.at + 1).min(chars.len());
        while end > self.start + 2 && chars[end - 1].is_whitespace() {
            end -= 1;
        }
        &chars[self.start..end]
    }

    pub(super) fn fragment(&self, chars: &[char]) -> String {
        const SHOWN: usize = 40;
        let text = self.text(chars);
        let shown: String = text.iter().take(SHOWN).collect();
        if text.len() > SHOWN {
            format!("{shown}…")
        } else {
            shown
        }
    }
}

type Parsed<T> = Result<T, (usize, Reason)>;

/// Parses text the way `parse.go` does. Go stops at the first error; this
/// records it and reads on after the `${`, so one pass finds them all.
pub(super) fn parse(chars: &[char]) -> (Vec<Node>, Vec<Bad>) {
    let mut parser = Parser { s: chars, pos: 0 };
    let mut bad = Vec::new();
    let mut nodes = Vec::new();
    let mut text = String::new();
    while let Some(c) = parser.peek() {
        if parser.opens(parser.pos) {
            let start = parser.pos;
            match parser.expr() {
                Ok(expr) => {
                    if !text.is_empty() {
                        nodes.push(Node::Text(std::mem::take(&mut text)));
                    }
                    nodes.push(Node::Expr(expr));
                }
                Err((at, reason)) => {
                    bad.push(Bad { start, at, reason });
                    text.push_str("${");
                    parser.pos = start + 2;
                }
            }
        } else if c == '$' && parser.at(parser.pos + 1) == Some('$') {
            // Outside expressions only `$$` is an escape (`parseAny` sets
            // `escapeChars = dollar`); a backslash is plain text.
            text.push('$');
            parser.pos += 2;
        } else {
            text.push(c);
            parser.pos += 1;
        }
    }
    if !text.is_empty() {
        nodes.push(Node::Text(text));
    }
    (nodes, bad)
}

struct Parser<'a> {
    s: &'a [char],
    pos: usize,
}

fn not_closing(c: char) -> bool {
    c != '}'
}

/// `acceptIdent`: Go's `unicode.IsLetter`/`IsDigit`, which Rust's
/// `is_alphabetic`/`is_numeric` approximate (they differ only on rare
/// letter-like and number-like symbols).
fn ident_char(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

impl Parser<'_> {
    fn at(&self, i: usize) -> Option<char> {
        self.s.get(i).copied()
    }

    fn peek(&self) -> Option<char> {
        self.at(self.pos)
    }

    fn opens(&self, i: usize) -> bool {
        self.at(i) == Some('$') && self.at(i + 1) == Some('{')
    }

    /// Inside expressions with escapes on (`scanEscape`, `escapeAll`):
    /// `$$`, `\/` and `\\` stand for their second character.
    fn escaped(&self, i: usize) -> bool {
        matches!(
            (self.at(i), self.at(i + 1)),
            (Some('$'), Some('$')) | (Some('\\'), Some('/' | '\\'))
        )
    }

    fn ident(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(ident_char) {
            self.pos += 1;
        }
        self.s[start..self.pos].iter().collect()
    }

    /// Up to `max` characters out of `allowed`: the operator tokens.
    fn run(&mut self, allowed: &[char], max: usize) -> String {
        let start = self.pos;
        while self.pos - start < max && self.peek().is_some_and(|c| allowed.contains(&c)) {
            self.pos += 1;
        }
        self.s[start..self.pos].iter().collect()
    }

    fn close(&mut self, reason: Reason) -> Parsed<()> {
        if self.peek() == Some('}') {
            self.pos += 1;
            Ok(())
        } else {
            Err((self.pos, reason))
        }
    }

    fn finish(&self, start: usize, name: String, op: String, args: Vec<Node>) -> Expr {
        Expr {
            name,
            op,
            args,
            start,
            end: self.pos,
        }
    }

    /// `parseFunc`, with `pos` on the `$` of `${`.
    fn expr(&mut self) -> Parsed<Expr> {
        let start = self.pos;
        self.pos += 2;
        if self.peek() == Some('#') {
            // `${#name}`: the length (`parseLenFunc`).
            self.pos += 1;
            let name = self.ident();
            if name.is_empty() {
                return Err((self.pos, Reason::BadSubstitution));
            }
            self.close(Reason::BadSubstitution)?;
            return Ok(self.finish(start, name, "#".into(), Vec::new()));
        }
        let name = self.ident();
        if name.is_empty() {
            return Err((self.pos, Reason::VariableName));
        }
        match self.peek() {
            Some(':') => match self.at(self.pos + 1) {
                Some(c @ ('=' | '-' | '?' | '+')) => {
                    self.pos += 2;
                    self.defaults(start, name, format!(":{c}"))
                }
                _ => self.substring(start, name),
            },
            // Only `=` works without a colon: `${A-x}` is a missing brace.
            Some('=') => {
                self.pos += 1;
                self.defaults(start, name, "=".into())
            }
            Some(',' | '^') => {
                let op = self.run(&[',', '^'], 2);
                self.close(Reason::BadSubstitution)?;
                Ok(self.finish(start, name, op, Vec::new()))
            }
            Some('/') => self.replacement(start, name),
            Some(c @ ('#' | '%')) => {
                let op = self.run(&[c], 2);
                let pattern = self.param(not_closing, false)?;
                self.close(Reason::BadSubstitution)?;
                Ok(self.finish(start, name, op, vec![pattern]))
            }
            Some('}') => {
                self.pos += 1;
                Ok(self.finish(start, name, String::new(), Vec::new()))
            }
            _ => Err((self.pos, Reason::MissingClosingBrace)),
        }
    }

    /// `parseDefaultFunc`: any mix of text and `${…}` up to the `}`, no
    /// escapes.
    fn defaults(&mut self, start: usize, name: String, op: String) -> Parsed<Expr> {
        let mut args = Vec::new();
        while self.peek() != Some('}') {
            args.push(self.param(not_closing, false)?);
        }
        self.pos += 1;
        Ok(self.finish(start, name, op, args))
    }

    /// `parseSubstrFunc`: `${name:offset}` or `${name:offset:length}`.
    fn substring(&mut self, start: usize, name: String) -> Parsed<Expr> {
        self.pos += 1;
        let mut args = vec![self.param(|c| c != ':' && c != '}', false)?];
        match self.peek() {
            Some('}') => {
                self.pos += 1;
                return Ok(self.finish(start, name, ":".into(), args));
            }
            Some(':') => {
                while self.peek() == Some(':') {
                    self.pos += 1;
                }
            }
            _ => return Err((self.pos, Reason::BadSubstitution)),
        }
        args.push(self.param(not_closing, false)?);
        self.close(Reason::BadSubstitution)?;
        Ok(self.finish(start, name, ":".into(), args))
    }

    /// `parseReplaceFunc`: `${name/pattern/string}` and the `//`, `/#`,
    /// `/%` forms; the second `/` is required, the string is not.
    fn replacement(&mut self, start: usize, name: String) -> Parsed<Expr> {
        self.pos += 1;
        let mut op = String::from("/");
        if let Some(c @ ('/' | '#' | '%')) = self.peek() {
            op.push(c);
            self.pos += 1;
        }
        let pattern = if self.peek() == Some('/') {
            Node::Text(String::new())
        } else {
            self.param(|c| c != '/', true)?
        };
        if self.peek() != Some('/') {
            return Err((self.pos, Reason::BadSubstitution));
        }
        while self.peek() == Some('/') {
            self.pos += 1;
        }
        let mut args = vec![pattern];
        if self.peek() == Some('}') {
            self.pos += 1;
            return Ok(self.finish(start, name, op, args));
        }
        args.push(self.param(not_closing, true)?);
        self.close(Reason::BadSubstitution)?;
        Ok(self.finish(start, name, op, args))
    }

    /// `parseParam`: one nested `${…}`, or text of accepted characters up
    /// to the next `${`.
    fn param(&mut self, accept: fn(char) -> bool, escapes: bool) -> Parsed<Node> {
        if self.opens(self.pos) {
            return self.expr().map(Node::Expr);
        }
        let from = self.pos;
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if self.opens(self.pos) {
                break;
            }
            if escapes && self.escaped(self.pos) {
                text.push(self.s[self.pos + 1]);
                self.pos += 2;
            } else if accept(c) {
                text.push(c);
                self.pos += 1;
            } else {
                break;
            }
        }
        if self.pos == from {
            return Err((self.pos, Reason::FuncSubstitution));
        }
        Ok(Node::Text(text))
    }
}

pub(super) struct Found {
    pub(super) name: String,
    pub(super) has_default: bool,
    pub(super) start: usize,
    pub(super) end: usize,
}

pub(super) fn is_default_op(op: &str) -> bool {
    matches!(op, "=" | ":=" | ":-" | ":?" | ":+" | "-" | "+" | "?")
}

pub(super) fn collect(nodes: &[Node], out: &mut Vec<Found>) {
    for node in nodes {
        if let Node::Expr(e) = node {
            out.push(Found {
                name: e.name.clone(),
                has_default: is_default_op(&e.op),
                start: e.start,
                end: e.end,
            });
            collect(&e.args, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::gitops::substitute::documents::tests::names;
    use crate::gitops::substitute::{references, syntax_errors};

    #[test]
    fn only_braced_expressions_are_references() {
        assert_eq!(names("a: $A\nb: ${B}\n"), vec![("B".into(), 2, 4, false)]);
        assert!(names("a: $A $ {B} $(C)\n").is_empty());
    }

    #[test]
    fn dollar_dollar_escapes() {
        assert!(names("a: $${A}\n").is_empty());
        // `$$` then `${A}`: a reference at the third `$`.
        assert_eq!(names("a: $$${A}\n"), vec![("A".into(), 1, 6, false)]);
        assert!(names("a: $$$${A}\n").is_empty());
        assert_eq!(names("a: x$${A}${B}\n"), vec![("B".into(), 1, 10, false)]);
    }

    #[test]
    fn defaults_and_operators() {
        let text = "\
a: ${A:=x}
b: ${B:-x}
c: ${C=x}
d: ${D:?x}
e: ${E:+x}
f: ${#F}
g: ${G^^}
h: ${H,}
i: ${I:1:2}
j: ${J/x/y}
k: ${K#x}
l: ${L%%x}
m: ${M}
";
        let got: Vec<(String, bool)> = references(text)
            .into_iter()
            .map(|r| (r.name, r.has_default))
            .collect();
        let want: Vec<(String, bool)> = [
            ("A", true),
            ("B", true),
            ("C", true),
            ("D", true),
            ("E", true),
            ("F", false),
            ("G", false),
            ("H", false),
            ("I", false),
            ("J", false),
            ("K", false),
            ("L", false),
            ("M", false),
        ]
        .iter()
        .map(|(n, d)| (n.to_string(), *d))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn nested_references_stand_alone() {
        assert_eq!(
            names("a: ${A:=${B}}\nb: ${C:-pre-${D:=d}-post}\n"),
            vec![
                ("A".into(), 1, 4, true),
                ("B".into(), 1, 9, false),
                ("C".into(), 2, 4, true),
                ("D".into(), 2, 13, true),
            ]
        );
    }

    #[test]
    fn syntax_errors_are_flux_errors() {
        let errs = |text: &str| -> Vec<(String, &'static str)> {
            syntax_errors(text)
                .into_iter()
                .map(|e| (e.expression, e.reason))
                .collect()
        };
        assert_eq!(
            errs("a: ${A-x}\n"),
            vec![("${A-".into(), "missing closing brace")]
        );
        assert_eq!(
            errs("a: ${}\n"),
            vec![("${}".into(), "unable to parse variable name")]
        );
        assert_eq!(
            errs("a: ${ A}\n"),
            vec![("${".into(), "unable to parse variable name")]
        );
        assert_eq!(
            errs("a: ${A:}\n"),
            vec![(
                "${A:}".into(),
                "unable to parse substitution within function"
            )]
        );
        assert_eq!(
            errs("a: ${A/x}\n"),
            vec![("${A/x}".into(), "bad substitution")]
        );
        assert_eq!(
            errs("a: ${arr[@]}\n"),
            vec![("${arr[".into(), "missing closing brace")]
        );
        assert_eq!(errs("a: ${#}\n"), vec![("${#}".into(), "bad substitution")]);
        assert_eq!(errs("a: \"${A:=x\"\n").len(), 1);
        // In a comment, Flux never sees it.
        assert!(errs("# ${A-x}\na: b\n").is_empty());
        assert!(errs("a: $${A-x}\n").is_empty());
        let e = &syntax_errors("x: 1\ny: ${A-x}\n")[0];
        assert_eq!((e.line, e.column), (2, 4));
        // Reading on after an error still finds what follows.
        assert_eq!(names("a: ${A-${B}}\n"), vec![("B".into(), 1, 8, false)]);
    }
}
