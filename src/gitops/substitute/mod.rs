//! Flux's post-build variable substitution, checked by devstack before Flux
//! runs it.
//!
//! Flux 2.9 (kustomize-controller 1.9) substitutes strictly: a `${VAR}` that
//! has no value and no default fails the whole Kustomization, and so does a
//! `${` Flux cannot parse. Finding that out from a stuck chain is slow, so
//! devstack applies the same rules to the files first. Every rule below
//! mirrors an upstream file, named where the rule lives:
//!
//! - the expression language is fluxcd/pkg `envsubst` (a fork of
//!   drone/envsubst): `envsubst/parse/parse.go` and `envsubst/parse/scan.go`
//!   decide what is an expression, `envsubst/template.go` which expressions
//!   strict mode requires, `envsubst/funcs.go` what each operator yields;
//! - what is substituted is fluxcd/pkg `kustomize/kustomize_varsub.go`: each
//!   built object separately, as kustomize re-serialises it, unless it is
//!   labelled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled`;
//! - which files end up in the build is fluxcd/pkg
//!   `kustomize/kustomize_generator.go` (the `kustomization.yaml` Flux writes
//!   when a path has none) and kustomize's own handling of a
//!   `kustomization.yaml` (kubernetes-sigs/kustomize `api/resource/factory.go`).
//!
//! What is deliberately not mirrored is listed on [`files_flux_builds`] and
//! [`missing`].

mod documents;
mod eval;
mod files;
mod parse;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::Error;

use documents::{Content, Lines, scan_content};
use eval::Eval;
use files::{build, read};
use parse::parse;

/// One variable a text makes Flux look up.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Reference {
    pub name: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// The operator supplies a value when the variable is unset, so strict
    /// mode accepts it missing: `=`, `:=`, `:-`, `:?`, `:+`
    /// (`template.go`: `isDefaultOp`).
    pub has_default: bool,
}

/// A `${` Flux cannot parse. Flux fails the whole Kustomization on it, with
/// or without variables.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SyntaxError {
    /// 1-based, of the `$`.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// The text from `${` to where Flux gives up.
    pub expression: String,
    /// Flux's own words (`parse.go`), so a user can match its event.
    pub reason: &'static str,
}

/// A reference without default to a variable nobody provides.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Missing {
    /// Relative to the source root.
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub name: String,
}

/// Whether Flux accepts `name` as a variable of `postBuild.substitute` or a
/// key of a `substituteFrom` ConfigMap/Secret: `kustomize_varsub.go`
/// `varsubRegex`, `^[_[:alpha:]][_[:alpha:][:digit:]]*$`, where RE2's
/// classes are ASCII-only. The expression parser reads wider names (any
/// Unicode letter or digit, even first), but those can never be provided.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Every variable Flux would look up when it substitutes `text`, a YAML
/// file of Kubernetes objects (several documents allowed), in order.
///
/// Only `${…}` is an expression: a bare `$VAR` is text, `$$` is an escaped
/// `$` (so `$${A}` is the text `${A}` while `$$${A}` is `$` then a
/// reference), and inside an expression every nested `${…}` is a reference
/// of its own, which strict mode requires even when the outer variable is
/// set (`template.go` evaluates the arguments first). Operators other than
/// the defaults (`${#A}`, `${A^^}`, `${A:1:2}`, `${A/x/y}`, `${A%x}` …) read
/// the variable, so they have no default.
///
/// A document labelled or annotated `kustomize.toolkit.fluxcd.io/substitute:
/// disabled` is skipped. Flux substitutes kustomize's JSON round-trip of
/// each object (`resource.AsYAML`), so YAML comments are gone by then:
/// references that only occur in comments are not reported. Lines count from
/// the top of the file.
pub fn references(text: &str) -> Vec<Reference> {
    scan_content(text, Content::Manifests).refs
}

/// Every `${` in `text` (a YAML file, as for [`references`]) that Flux
/// cannot parse and would fail on.
pub fn syntax_errors(text: &str) -> Vec<SyntaxError> {
    scan_content(text, Content::Manifests).errors
}

/// Substitutes `text` the way Flux does in strict mode: defaults applied,
/// `$$` turned into `$`, operators evaluated as `envsubst/funcs.go` does
/// (which is not always bash: `${A:+x}` and `${A:?x}` are defaults too).
/// Values have their newlines removed, as Flux does when it loads them
/// (`kustomize_varsub.go`: `LoadVariables`).
///
/// `text` is taken as one string, with no YAML documents, comments or
/// `disabled` markers: it is what a value becomes inside the object Flux
/// substitutes.
///
/// The error lists every reference without default whose variable `lookup`
/// does not know. When `text` holds a `${` Flux cannot parse, it lists those
/// instead, each as a reference whose `name` is the unparsable text (it
/// starts with `${`, so [`valid_name`] never accepts it).
pub fn render(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<Reference>> {
    let chars: Vec<char> = text.chars().collect();
    let lines = Lines::new(&chars);
    let (nodes, bad) = parse(&chars);
    if !bad.is_empty() {
        return Err(bad
            .iter()
            .map(|b| {
                let (line, column) = lines.at(b.start);
                Reference {
                    name: b.fragment(&chars),
                    line,
                    column,
                    has_default: false,
                }
            })
            .collect());
    }
    let mut eval = Eval {
        lookup,
        missing: Vec::new(),
    };
    let out = eval.nodes(&nodes);
    if eval.missing.is_empty() {
        return Ok(out);
    }
    let mut missing: Vec<Reference> = eval
        .missing
        .into_iter()
        .map(|(name, start)| {
            let (line, column) = lines.at(start);
            Reference {
                name,
                line,
                column,
                has_default: false,
            }
        })
        .collect();
    missing.sort_by_key(|r| (r.line, r.column));
    Err(missing)
}

/// The local files whose content kustomize-controller substitutes for a
/// Kustomization with `spec.path` = `path` in the source at `root`, sorted,
/// each once, as `root` joined with the file's path in the source.
///
/// With a kustomization file (`kustomization.yaml`, `kustomization.yml` or
/// `Kustomization`), that file (its literals and inline patches end up in
/// objects) and, recursively, its `resources`/`bases`/`components`, the
/// files of `patches[].path`, `patchesStrategicMerge`,
/// `patchesJson6902[].path`, `generators`, `transformers`, and the `files`
/// and `envs` of `configMapGenerator` (their text becomes ConfigMap data).
/// `secretGenerator` files are left out: their data is base64 in the
/// object, where no `${` survives. Remote entries (`https://…`,
/// `github.com/…`, `git@…`, `…?ref=…`) are skipped as fluxcd/pkg
/// `IsLocalRelativePath` classifies them. A kustomization whose
/// `commonLabels`, `commonAnnotations` or `labels` disable substitution
/// contributes nothing, and neither does a generator whose options do.
///
/// Without one, what Flux generates (`kustomize_generator.go`): every
/// `.yaml`/`.yml` file under `path`, recursively, except that a
/// subdirectory with its own kustomization file is built as such instead.
///
/// Errors, as Flux would fail: `path` or an entry missing, leaving `root`
/// (`../`, absolute, or through a symlink), a resource directory without a
/// kustomization file, a resource document without `kind` or
/// `metadata.name`, a kustomization cycle.
///
/// Not mirrored: the Flux Kustomization's own `spec.patches`/`components`
/// and patches that add the `disabled` marker, `.sourceignore` and the
/// source's default exclusions, `config.kubernetes.io/local-config`
/// objects kustomize drops.
pub fn files_flux_builds(root: &Path, path: &Path) -> Result<Vec<PathBuf>, Error> {
    let files = build(root, path)?;
    let unique: BTreeSet<&PathBuf> = files.iter().map(|(file, _)| file).collect();
    Ok(unique.into_iter().map(|file| root.join(file)).collect())
}

/// Every reference without default, in the files Flux builds for `path`,
/// whose variable `provided` does not know: what strict substitution would
/// fail on. A `${` Flux cannot parse is an error naming it.
///
/// This assumes substitution runs, i.e. the Kustomization defines at least
/// one variable or sets `substituteStrategy: Always`; with neither, Flux
/// substitutes nothing and nothing can be missing (`kustomize_varsub.go`:
/// `len(vars) > 0`).
pub fn missing(
    root: &Path,
    path: &Path,
    provided: &dyn Fn(&str) -> bool,
) -> Result<Vec<Missing>, Error> {
    let mut out = BTreeSet::new();
    let mut errors = Vec::new();
    for (file, content) in build(root, path)? {
        let scan = scan_content(&read(root, &file)?, content);
        for e in scan.errors {
            errors.push(format!(
                "{}:{}:{}: `{}` ({})",
                file.display(),
                e.line,
                e.column,
                e.expression,
                e.reason
            ));
        }
        for r in scan.refs {
            if !r.has_default && !provided(&r.name) {
                out.insert(Missing {
                    file: file.clone(),
                    line: r.line,
                    column: r.column,
                    name: r.name,
                });
            }
        }
    }
    if !errors.is_empty() {
        return Err(Error::user(format!(
            "Flux cannot substitute the variables of `{}`: {}",
            path.display(),
            errors.join("; ")
        ))
        .with_hint(
            "Flux reads every `${` as the start of a variable; write a literal `${` as `$${`",
        ));
    }
    Ok(out.into_iter().collect())
}

/// Every variable name the files Flux builds for `path` refer to, with or
/// without default: the facts a change to which reaches this Kustomization.
/// Unparsable `${` are ignored here; [`missing`] reports them.
pub fn names_used(root: &Path, path: &Path) -> Result<BTreeSet<String>, Error> {
    let mut names = BTreeSet::new();
    for (file, content) in build(root, path)? {
        let scan = scan_content(&read(root, &file)?, content);
        names.extend(scan.refs.into_iter().map(|r| r.name));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::files::tests::{cm, tree};
    use super::*;

    #[test]
    fn valid_name_is_flux_regex() {
        for good in ["A", "_", "a_1", "_9", "CLUSTER_ENV", "Zz"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "a.b", "é", "A B", "${A}"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn missing_and_names_used_over_a_tree() {
        let root = tree(&[
            (
                "apps/kustomization.yaml",
                "resources: [a.yaml]\nconfigMapGenerator:\n  - name: g\n    literals:\n      - region=${REGION}\n    envs: [vars.env]\n    files: [script.sh]\n",
            ),
            (
                "apps/a.yaml",
                "# uses ${IN_COMMENT}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  a: ${A}\n  b: ${B:=default}\n  c: ${PROVIDED}\n",
            ),
            ("apps/vars.env", "# ${COMMENTED}\nX=${X}\n\n"),
            ("apps/script.sh", "echo $HOME ${S}\n"),
        ]);
        let provided = |name: &str| name == "PROVIDED";
        let got: Vec<(String, usize, usize, String)> =
            missing(root.path(), Path::new("apps"), &provided)
                .unwrap()
                .into_iter()
                .map(|m| (m.file.display().to_string(), m.line, m.column, m.name))
                .collect();
        assert_eq!(
            got,
            vec![
                ("apps/a.yaml".into(), 7, 6, "A".into()),
                ("apps/kustomization.yaml".into(), 5, 16, "REGION".into()),
                ("apps/script.sh".into(), 1, 12, "S".into()),
                ("apps/vars.env".into(), 2, 3, "X".into()),
            ]
        );
        let used: Vec<String> = names_used(root.path(), Path::new("apps"))
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(used, vec!["A", "B", "PROVIDED", "REGION", "S", "X"]);

        let broken = tree(&[("apps/a.yaml", &cm("a", "a: ${A-x}"))]);
        let err = missing(broken.path(), Path::new("apps"), &|_| true).unwrap_err();
        assert!(
            err.message()
                .contains("apps/a.yaml:6:6: `${A-` (missing closing brace)"),
            "{}",
            err.message()
        );
    }
}
