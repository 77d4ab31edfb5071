//! The text Flux substitutes, file by file: YAML documents each
//! substituted on its own unless labelled or annotated
//! `kustomize.toolkit.fluxcd.io/substitute: disabled`, as kustomize
//! re-serialises them (fluxcd/pkg `kustomize/kustomize_varsub.go`), and the
//! data files of `configMapGenerator`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::parse::{Bad, Found, collect, parse};
use super::{Reference, SyntaxError};

/// The label or annotation that turns substitution off for one object
/// (`kustomize_varsub.go`: `substituteAnnotationKey`, `DisabledValue`).
const SUBSTITUTE_KEY: &str = "kustomize.toolkit.fluxcd.io/substitute";
const DISABLED: &str = "disabled";

/// How Flux sees a file's text once kustomize has built it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Content {
    /// YAML documents, each an object substituted on its own.
    Manifests,
    /// A `configMapGenerator` file: one data value, verbatim.
    Data,
    /// A `configMapGenerator` env file: a value per `KEY=value` line;
    /// kustomize drops blank lines and `#` comments.
    EnvData,
}

#[derive(Default)]
pub(super) struct Scan {
    pub(super) refs: Vec<Reference>,
    pub(super) errors: Vec<SyntaxError>,
}

/// 1-based line and column of a character offset.
pub(super) struct Lines(Vec<usize>);

impl Lines {
    pub(super) fn new(chars: &[char]) -> Self {
        let starts = std::iter::once(0)
            .chain(
                chars
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c == '\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        Lines(starts)
    }

    pub(super) fn at(&self, offset: usize) -> (usize, usize) {
        let line = self.0.partition_point(|&start| start <= offset);
        (line, offset - self.0[line - 1] + 1)
    }

    /// The character range of each line, without its `\n`.
    pub(super) fn ranges(&self, len: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0.iter().enumerate().map(move |(i, &start)| {
            let end = self.0.get(i + 1).map_or(len, |next| next - 1);
            (start, end)
        })
    }
}

pub(super) fn scan_content(text: &str, content: Content) -> Scan {
    let chars: Vec<char> = text.chars().collect();
    let lines = Lines::new(&chars);
    let mut scan = Scan::default();
    match content {
        Content::Manifests => {
            for (a, b) in documents(&chars, &lines) {
                scan_document(&chars, a, b, &lines, &mut scan);
            }
        }
        Content::Data => scan_plain(&chars, 0, chars.len(), &lines, &mut scan),
        Content::EnvData => {
            for (a, b) in lines.ranges(chars.len()) {
                let line = &chars[a..b];
                let first = line.iter().position(|c| !c.is_whitespace());
                if first.is_some_and(|i| line[i] != '#') {
                    scan_plain(&chars, a, b, &lines, &mut scan);
                }
            }
        }
    }
    scan.refs.sort_by_key(|r| (r.line, r.column));
    scan.errors.sort_by_key(|e| (e.line, e.column));
    scan
}

/// The character ranges of the YAML documents: a line that is `---` and
/// nothing but blanks after it separates them, as `splitYAMLDocuments` has
/// it (a `\r` before the newline goes with the newline, as in Go's line
/// scanner).
pub(super) fn documents(chars: &[char], lines: &Lines) -> Vec<(usize, usize)> {
    let mut docs = Vec::new();
    let mut start = 0;
    for (a, b) in lines.ranges(chars.len()) {
        let mut line = &chars[a..b];
        if line.last() == Some(&'\r') {
            line = &line[..line.len() - 1];
        }
        if line.starts_with(&['-', '-', '-']) && line[3..].iter().all(|c| *c == ' ' || *c == '\t') {
            docs.push((start, a));
            start = (b + 1).min(chars.len());
        }
    }
    docs.push((start, chars.len()));
    docs
}

fn reference(found: &Found, offset: usize, lines: &Lines) -> Reference {
    let (line, column) = lines.at(offset);
    Reference {
        name: found.name.clone(),
        line,
        column,
        has_default: found.has_default,
    }
}

fn syntax_error(bad: &Bad, chars: &[char], offset: usize, lines: &Lines) -> SyntaxError {
    let (line, column) = lines.at(offset);
    SyntaxError {
        line,
        column,
        expression: bad.fragment(chars),
        reason: bad.reason.text(),
    }
}

fn scan_plain(chars: &[char], a: usize, b: usize, lines: &Lines, scan: &mut Scan) {
    let text = &chars[a..b];
    let (nodes, bad) = parse(text);
    let mut found = Vec::new();
    collect(&nodes, &mut found);
    scan.refs
        .extend(found.iter().map(|f| reference(f, a + f.start, lines)));
    scan.errors.extend(
        bad.iter()
            .map(|e| syntax_error(e, text, a + e.start, lines)),
    );
}

/// Whitespace runs as one space: a scalar folded or indented over lines in
/// the file reads the same once parsed.
fn normalized(chars: &[char]) -> String {
    let mut out = String::new();
    let mut blank = false;
    for &c in chars {
        if c.is_whitespace() {
            blank = true;
        } else {
            if blank {
                out.push(' ');
                blank = false;
            }
            out.push(c);
        }
    }
    if blank {
        out.push(' ');
    }
    out
}

/// One YAML document. Flux substitutes the object's strings as kustomize
/// re-serialises them from JSON, so the expressions that count are those in
/// the parsed keys and values; the file's text only says where they are.
/// An expression that only occurs in a comment is dropped; one whose text
/// the file spells differently (a quoted escape) is placed at the start of
/// the document. A document the YAML parser refuses keeps everything found
/// in its text.
fn scan_document(chars: &[char], a: usize, b: usize, lines: &Lines, scan: &mut Scan) {
    let text = &chars[a..b];
    let (nodes, bad) = parse(text);
    let mut found = Vec::new();
    collect(&nodes, &mut found);
    if found.is_empty() && bad.is_empty() {
        return;
    }
    let source: String = text.iter().collect();
    if substitution_disabled(&source) {
        return;
    }
    let Some(strings) = yaml_strings(&source) else {
        scan.refs
            .extend(found.iter().map(|f| reference(f, a + f.start, lines)));
        scan.errors.extend(
            bad.iter()
                .map(|e| syntax_error(e, text, a + e.start, lines)),
        );
        return;
    };

    let mut real_found = Vec::new();
    let mut real_bad = Vec::new();
    for string in strings {
        let string: Vec<char> = string.chars().collect();
        let (nodes, bad) = parse(&string);
        let mut here = Vec::new();
        collect(&nodes, &mut here);
        real_found.extend(
            here.into_iter()
                .map(|f| (normalized(&string[f.start..f.end]), f)),
        );
        real_bad.extend(
            bad.into_iter()
                .map(|e| (normalized_fragment(&e, &string), e, string.clone())),
        );
    }

    let real: HashSet<&str> = real_found.iter().map(|(key, _)| key.as_str()).collect();
    let mut placed = HashSet::new();
    for f in &found {
        let key = normalized(&text[f.start..f.end]);
        if real.contains(key.as_str()) {
            scan.refs.push(reference(f, a + f.start, lines));
            placed.insert(key);
        }
    }
    for (key, f) in &real_found {
        if placed.insert(key.clone()) {
            scan.refs.push(reference(f, a, lines));
        }
    }

    let real: HashSet<&str> = real_bad.iter().map(|(key, _, _)| key.as_str()).collect();
    let mut placed = HashSet::new();
    for e in &bad {
        let key = normalized_fragment(e, text);
        if real.contains(key.as_str()) {
            scan.errors.push(syntax_error(e, text, a + e.start, lines));
            placed.insert(key);
        }
    }
    for (key, e, string) in &real_bad {
        if placed.insert(key.clone()) {
            scan.errors.push(syntax_error(e, string, a, lines));
        }
    }
}

fn normalized_fragment(bad: &Bad, chars: &[char]) -> String {
    normalized(bad.text(chars))
}

/// Labels and annotations, where the `disabled` marker lives.
#[derive(Deserialize, Default)]
pub(super) struct Marks {
    labels: Option<BTreeMap<String, Value>>,
    annotations: Option<BTreeMap<String, Value>>,
}

impl Marks {
    pub(super) fn disable(&self) -> bool {
        disables(self.labels.as_ref()) || disables(self.annotations.as_ref())
    }
}

pub(super) fn disables(map: Option<&BTreeMap<String, Value>>) -> bool {
    map.and_then(|m| m.get(SUBSTITUTE_KEY))
        .is_some_and(|v| v.as_str() == Some(DISABLED))
}

/// `res.GetLabels()[…] == "disabled" || res.GetAnnotations()[…] == …`.
fn substitution_disabled(source: &str) -> bool {
    #[derive(Deserialize)]
    struct Head {
        metadata: Option<Marks>,
    }
    serde_saphyr::from_str::<Head>(source)
        .ok()
        .and_then(|head| head.metadata)
        .is_some_and(|m| m.disable())
}

/// Every string key and value of a YAML document, or `None` when it does
/// not parse.
fn yaml_strings(source: &str) -> Option<Vec<String>> {
    struct Strings(Vec<String>);
    impl<'de> Deserialize<'de> for Strings {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let mut out = Vec::new();
            Collect(&mut out).deserialize(d)?;
            Ok(Strings(out))
        }
    }
    if source.trim().is_empty() {
        return Some(Vec::new());
    }
    serde_saphyr::from_str::<Strings>(source).ok().map(|s| s.0)
}

struct Collect<'a>(&'a mut Vec<String>);

impl<'de> DeserializeSeed<'de> for Collect<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Collect<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_char<E>(self, v: char) -> Result<(), E> {
        self.0.push(v.to_string());
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.0.push(v.to_owned());
        Ok(())
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Collect(out) = self;
        while seq.next_element_seed(Collect(&mut *out))?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Collect(out) = self;
        while map.next_key_seed(Collect(&mut *out))?.is_some() {
            map.next_value_seed(Collect(&mut *out))?;
        }
        Ok(())
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom("tagged values are not read"))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::gitops::substitute::references;

    pub(in crate::gitops::substitute) fn names(text: &str) -> Vec<(String, usize, usize, bool)> {
        references(text)
            .into_iter()
            .map(|r| (r.name, r.line, r.column, r.has_default))
            .collect()
    }

    #[test]
    fn comments_are_not_substituted() {
        let text = "\
# set ${REGION} in the facts
a: b # ${ALSO_NOT}
c: |
  # ${INSIDE} is part of the value
d: '${QUOTED} # ${TOO}'
";
        assert_eq!(
            names(text),
            vec![
                ("INSIDE".into(), 4, 5, false),
                ("QUOTED".into(), 5, 5, false),
                ("TOO".into(), 5, 17, false),
            ]
        );
    }

    #[test]
    fn multi_line_expressions_are_matched() {
        let text = "a: ${A:=one\n  two}\nb: |\n  ${B:=x\n  y}\n";
        assert_eq!(
            names(text),
            vec![("A".into(), 1, 4, true), ("B".into(), 4, 3, true)]
        );
    }

    #[test]
    fn disabled_documents_are_skipped() {
        let text = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: one
data:
  a: ${A}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: two
  annotations:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  b: ${B}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: three
  labels:
    kustomize.toolkit.fluxcd.io/substitute: disabled
data:
  c: ${C}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: four
  annotations:
    kustomize.toolkit.fluxcd.io/substitute: enabled
data:
  d: ${D}
";
        assert_eq!(
            names(text),
            vec![("A".into(), 6, 6, false), ("D".into(), 33, 6, false)]
        );
    }

    #[test]
    fn separators_with_trailing_blanks_and_crlf() {
        let text = "a: ${A}\r\n---  \r\nb: ${B}\r\n---\t\nc: ${C}\n";
        assert_eq!(
            names(text),
            vec![
                ("A".into(), 1, 4, false),
                ("B".into(), 3, 4, false),
                ("C".into(), 5, 4, false)
            ]
        );
        // `--- x` is not a separator Flux recognises; the text stays one
        // document, which YAML refuses, so everything found counts.
        assert_eq!(names("--- x\na: ${A}\n").len(), 1);
    }

    #[test]
    fn unparsable_yaml_keeps_every_reference() {
        assert_eq!(
            names("a: [${A}\n# ${B}\n"),
            vec![("A".into(), 1, 5, false), ("B".into(), 2, 3, false)]
        );
    }
}
