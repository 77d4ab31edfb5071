//! Which files kustomize-controller builds for a Kustomization's path, and
//! so substitutes: a `kustomization.yaml` followed as kustomize does
//! (kubernetes-sigs/kustomize `api/resource/factory.go`), or the one Flux
//! generates when a path has none (fluxcd/pkg
//! `kustomize/kustomize_generator.go`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::error::Error;

use super::documents::{Content, Lines, Marks, disables, documents};

/// kustomize's `konfig.RecognizedKustomizationFileNames()`, in its order.
const KUSTOMIZATION_FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// The parts of a kustomization file that bring files into the build.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct KustomizationFile {
    resources: Option<Vec<String>>,
    bases: Option<Vec<String>>,
    components: Option<Vec<String>>,
    patches: Option<Vec<PathEntry>>,
    patches_strategic_merge: Option<Vec<String>>,
    patches_json6902: Option<Vec<PathEntry>>,
    config_map_generator: Option<Vec<ConfigMapGenerator>>,
    generator_options: Option<Marks>,
    generators: Option<Vec<String>>,
    transformers: Option<Vec<String>>,
    common_labels: Option<BTreeMap<String, Value>>,
    common_annotations: Option<BTreeMap<String, Value>>,
    labels: Option<Vec<LabelEntry>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PathEntry {
    path: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LabelEntry {
    pairs: Option<BTreeMap<String, Value>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ConfigMapGenerator {
    files: Option<Vec<String>>,
    envs: Option<Vec<String>>,
    env: Option<String>,
    options: Option<Marks>,
}

impl KustomizationFile {
    /// The marker on every object this kustomization outputs.
    fn disables(&self) -> bool {
        disables(self.common_labels.as_ref())
            || disables(self.common_annotations.as_ref())
            || self
                .labels
                .iter()
                .flatten()
                .any(|l| disables(l.pairs.as_ref()))
    }
}

fn list(entries: &Option<Vec<String>>) -> impl Iterator<Item = &String> {
    entries.iter().flatten()
}

/// fluxcd/pkg `IsLocalRelativePath` (kustomize's remote prefixes), plus
/// the URL and `?ref=` forms kustomize fetches as remote bases.
fn is_remote(entry: &str) -> bool {
    const PREFIXES: [&str; 8] = [
        "git::",
        "gh:",
        "ssh://",
        "https://",
        "http://",
        "git@",
        "github.com:",
        "github.com/",
    ];
    let lower = entry.to_lowercase();
    PREFIXES
        .iter()
        .any(|p| p.len() < lower.len() && lower.starts_with(p))
        || lower.contains("://")
        || lower.contains("?ref=")
        || lower.contains("?version=")
}

/// `a/./b/../c` as `a/c`; `None` when it climbs above its start or is
/// absolute.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

pub(super) fn read(root: &Path, file: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(root.join(file))
        .map_err(|e| Error::user(format!("cannot read {}: {e}", file.display())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub(super) fn build(root: &Path, path: &Path) -> Result<BTreeSet<(PathBuf, Content)>, Error> {
    let canonical_root = root.canonicalize().map_err(|e| {
        Error::user(format!(
            "cannot read the GitOps source {}: {e}",
            root.display()
        ))
    })?;
    // `spec.path` is joined to the source as securejoin does: a leading `/`
    // means the source's root.
    let relative = match path.strip_prefix(root) {
        Ok(inside) if path.is_absolute() => inside.to_path_buf(),
        _ => path
            .components()
            .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
            .collect(),
    };
    let outside = || {
        Error::user(format!(
            "the Kustomization path `{}` points outside the GitOps source {}",
            path.display(),
            root.display()
        ))
    };
    let dir = normalize(&relative).ok_or_else(outside)?;
    let full = root.join(&dir);
    if !full.exists() {
        return Err(Error::user(format!(
            "the Kustomization path `{}` does not exist in {}",
            path.display(),
            root.display()
        ))
        .with_hint("`spec.path` is relative to the root of the GitOps source"));
    }
    if !full.is_dir() {
        return Err(Error::user(format!(
            "the Kustomization path `{}` in {} is not a directory",
            path.display(),
            root.display()
        )));
    }
    if !full
        .canonicalize()
        .is_ok_and(|c| c.starts_with(&canonical_root))
    {
        return Err(outside());
    }
    let mut walk = Walk {
        root,
        canonical_root,
        files: BTreeSet::new(),
        stack: Vec::new(),
    };
    if walk.kustomization_file(&dir)?.is_some() {
        walk.kustomize(&dir, false)?;
    } else {
        walk.generate(&dir)?;
    }
    Ok(walk.files)
}

struct Walk<'a> {
    root: &'a Path,
    canonical_root: PathBuf,
    files: BTreeSet<(PathBuf, Content)>,
    /// Kustomizations being built, to refuse a cycle as kustomize does.
    stack: Vec<PathBuf>,
}

impl Walk<'_> {
    fn kustomization_file(&self, dir: &Path) -> Result<Option<PathBuf>, Error> {
        let found: Vec<PathBuf> = KUSTOMIZATION_FILES
            .iter()
            .map(|name| dir.join(name))
            .filter(|file| self.root.join(file).is_file())
            .collect();
        if found.len() > 1 {
            return Err(Error::user(format!(
                "{} holds several kustomization files ({}); kustomize refuses to build it",
                shown(dir),
                found
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .with_hint("keep one kustomization.yaml"));
        }
        Ok(found.into_iter().next())
    }

    /// The path of `entry`, written in the kustomization file `owner` in
    /// `dir`, inside the source.
    fn resolve(&self, dir: &Path, entry: &str, owner: &Path) -> Result<PathBuf, Error> {
        let outside = || {
            Error::user(format!(
                "{}: `{entry}` points outside the GitOps source {}",
                owner.display(),
                self.root.display()
            ))
            .with_hint("Flux builds only files inside its source; move the file into it")
        };
        let target = Path::new(entry);
        if target.is_absolute() {
            return Err(outside());
        }
        let relative = normalize(&dir.join(target)).ok_or_else(outside)?;
        let full = self.root.join(&relative);
        if std::fs::metadata(&full).is_err() {
            return Err(
                Error::user(format!("{}: `{entry}` does not exist", owner.display()))
                    .with_hint("kustomize fails the whole build on an entry it cannot find"),
            );
        }
        if !full
            .canonicalize()
            .is_ok_and(|c| c.starts_with(&self.canonical_root))
        {
            return Err(outside());
        }
        Ok(relative)
    }

    /// Flux's generated kustomization for a directory without one.
    fn generate(&mut self, dir: &Path) -> Result<(), Error> {
        let full = self.root.join(dir);
        let mut entries: Vec<_> = std::fs::read_dir(&full)
            .and_then(|entries| entries.collect::<Result<Vec<_>, _>>())
            .map_err(|e| Error::user(format!("cannot read {}: {e}", shown(dir))))?;
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let relative = dir.join(entry.file_name());
            // Like Go's `filepath.Walk`, a symlink is not descended into.
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir {
                if self.kustomization_file(&relative)?.is_some() {
                    self.kustomize(&relative, false)?;
                } else {
                    self.generate(&relative)?;
                }
                continue;
            }
            let yaml = relative
                .extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml");
            if !yaml {
                continue;
            }
            let entry_name = entry.file_name().to_string_lossy().into_owned();
            self.resolve(dir, &entry_name, Path::new(&shown(dir)))?;
            self.check_objects(&relative, |problem| {
                Error::user(format!(
                    "{}: {problem}, and Flux builds every .yaml/.yml file under `{}` since it has no kustomization.yaml",
                    relative.display(),
                    shown(dir)
                ))
                .with_hint("add a kustomization.yaml listing the manifests, or move this file out of the Kustomization's path")
            })?;
            self.files.insert((relative, Content::Manifests));
        }
        Ok(())
    }

    fn check_objects(&self, file: &Path, error: impl Fn(String) -> Error) -> Result<(), Error> {
        match objects_problem(&read(self.root, file)?) {
            Some(problem) => Err(error(problem)),
            None => Ok(()),
        }
    }

    fn kustomize(&mut self, dir: &Path, inherited: bool) -> Result<(), Error> {
        let Some(kfile) = self.kustomization_file(dir)? else {
            return Err(Error::user(format!(
                "{} has no kustomization.yaml",
                shown(dir)
            )));
        };
        if self.stack.iter().any(|d| d == dir) {
            return Err(Error::user(format!(
                "{}: the kustomization includes itself (through {})",
                kfile.display(),
                self.stack
                    .iter()
                    .map(|d| shown(d))
                    .collect::<Vec<_>>()
                    .join(" -> ")
            )));
        }
        let text = read(self.root, &kfile)?;
        let k: KustomizationFile = if text.trim().is_empty() {
            KustomizationFile::default()
        } else {
            serde_saphyr::from_str(&text)
                .map_err(|e| Error::user(format!("cannot parse {}: {e}", kfile.display())))?
        };
        self.stack.push(dir.to_path_buf());
        let disabled = inherited || k.disables();
        if !disabled {
            self.files.insert((kfile.clone(), Content::Manifests));
        }

        for entry in list(&k.resources)
            .chain(list(&k.bases))
            .chain(list(&k.components))
        {
            if is_remote(entry) {
                continue;
            }
            let target = self.resolve(dir, entry, &kfile)?;
            if self.root.join(&target).is_dir() {
                if self.kustomization_file(&target)?.is_none() {
                    return Err(Error::user(format!(
                        "{}: `{entry}` is a directory without a kustomization.yaml, which kustomize cannot build",
                        kfile.display()
                    ))
                    .with_hint("add a kustomization.yaml to it, or list its files instead"));
                }
                self.kustomize(&target, disabled)?;
            } else {
                self.check_objects(&target, |problem| {
                    Error::user(format!(
                        "{}: resource `{entry}`: {problem}",
                        kfile.display()
                    ))
                })?;
                self.add(target, Content::Manifests, disabled);
            }
        }

        let patch_paths = k
            .patches
            .iter()
            .chain(k.patches_json6902.iter())
            .flatten()
            .filter_map(|p| p.path.as_ref())
            // An entry on several lines, or a flow mapping, is an inline
            // patch, part of the kustomization file.
            .chain(
                list(&k.patches_strategic_merge)
                    .filter(|p| !p.contains('\n') && !p.trim_start().starts_with('{')),
            );
        for entry in patch_paths {
            let target = self.resolve(dir, entry, &kfile)?;
            self.add(target, Content::Manifests, disabled);
        }

        for entry in list(&k.generators).chain(list(&k.transformers)) {
            if entry.contains('\n') || is_remote(entry) {
                continue;
            }
            let target = self.resolve(dir, entry, &kfile)?;
            if self.root.join(&target).is_dir() {
                self.kustomize(&target, disabled)?;
            } else {
                self.add(target, Content::Manifests, disabled);
            }
        }

        let options_disable = k.generator_options.as_ref().is_some_and(Marks::disable);
        for generator in k.config_map_generator.iter().flatten() {
            let off = disabled
                || options_disable
                || generator.options.as_ref().is_some_and(Marks::disable);
            for entry in list(&generator.files) {
                // `key=path` names the data key.
                let file = entry
                    .split_once('=')
                    .map_or(entry.as_str(), |(_, path)| path);
                let target = self.resolve(dir, file, &kfile)?;
                self.add_data(target, Content::Data, off)?;
            }
            for entry in list(&generator.envs).chain(generator.env.iter()) {
                let target = self.resolve(dir, entry, &kfile)?;
                self.add(target, Content::EnvData, off);
            }
        }
        self.stack.pop();
        Ok(())
    }

    fn add(&mut self, file: PathBuf, content: Content, disabled: bool) {
        if !disabled {
            self.files.insert((file, content));
        }
    }

    /// A generator's file, or each file of a directory it names.
    fn add_data(&mut self, target: PathBuf, content: Content, disabled: bool) -> Result<(), Error> {
        let full = self.root.join(&target);
        if !full.is_dir() {
            self.add(target, content, disabled);
            return Ok(());
        }
        let entries = std::fs::read_dir(&full)
            .and_then(|entries| entries.collect::<Result<Vec<_>, _>>())
            .map_err(|e| Error::user(format!("cannot read {}: {e}", shown(&target))))?;
        for entry in entries {
            if entry.path().is_file() {
                self.add(target.join(entry.file_name()), content, disabled);
            }
        }
        Ok(())
    }
}

fn shown(dir: &Path) -> String {
    if dir.as_os_str().is_empty() {
        ".".into()
    } else {
        dir.display().to_string()
    }
}

/// Why kustomize would refuse a file of objects, if it would: a document
/// that is not empty needs `kind`, and `metadata.name` unless it is a list
/// (kustomize `api/resource/factory.go`: `dropBadNodes`,
/// `GetValidatedMetadata`). A document the YAML parser here refuses is
/// left for kustomize to judge.
fn objects_problem(text: &str) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    let lines = Lines::new(&chars);
    for (a, b) in documents(&chars, &lines) {
        let source: String = chars[a..b].iter().collect();
        if source.trim().is_empty() {
            continue;
        }
        let Ok(value) = serde_saphyr::from_str::<Value>(&source) else {
            continue;
        };
        let (line, _) = lines.at(a);
        let problem = match &value {
            Value::Null => None,
            Value::Object(map) if map.is_empty() => None,
            Value::Array(items) if items.is_empty() => None,
            Value::Object(map) => {
                let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
                let name = map
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if kind.is_empty() {
                    Some("has no `kind`")
                } else if name.is_empty() && !kind.ends_with("List") {
                    Some("has no `metadata.name`")
                } else {
                    None
                }
            }
            _ => Some("is not a Kubernetes object"),
        };
        if let Some(problem) = problem {
            return Some(format!(
                "the document at line {line} {problem}, so kustomize rejects it"
            ));
        }
    }
    None
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::Path;

    use super::is_remote;
    use crate::gitops::substitute::files_flux_builds;

    #[test]
    fn remote_entries() {
        for remote in [
            "https://github.com/org/repo//dir?ref=v1",
            "github.com/org/repo/dir?ref=main",
            "git@github.com:org/repo.git",
            "ssh://git@host/repo",
            "gitlab.com/org/repo//dir?ref=v1",
            "GH:org/repo",
        ] {
            assert!(is_remote(remote), "{remote}");
        }
        for local in ["app.yaml", "./base", "../base", "github.com"] {
            assert!(!is_remote(local), "{local}");
        }
    }

    /// A tree of files under a temporary root.
    pub(in crate::gitops::substitute) fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        dir
    }

    fn built(root: &Path, path: &str) -> Vec<String> {
        files_flux_builds(root, Path::new(path))
            .unwrap()
            .into_iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    pub(in crate::gitops::substitute) fn cm(name: &str, body: &str) -> String {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  {body}\n")
    }

    #[test]
    fn kustomization_entries_are_followed() {
        let root = tree(&[
            (
                "apps/kustomization.yaml",
                "resources:\n  - app.yaml\n  - ../base\n  - https://example.com/remote.yaml\n  - github.com/org/repo//x?ref=v1\ncomponents:\n  - ../component\npatches:\n  - path: patch.yaml\n  - patch: |\n      kind: X\npatchesStrategicMerge:\n  - smp.yaml\n  - |\n    kind: Inline\npatchesJson6902:\n  - path: json6902.yaml\nconfigMapGenerator:\n  - name: cfg\n    files:\n      - config.txt\n      - key=renamed.txt\n    envs:\n      - vars.env\nsecretGenerator:\n  - name: secret\n    files:\n      - secret.txt\n",
            ),
            ("apps/app.yaml", &cm("app", "a: ${A}")),
            ("apps/patch.yaml", "kind: ConfigMap\n"),
            ("apps/smp.yaml", "kind: ConfigMap\n"),
            ("apps/json6902.yaml", "- op: add\n"),
            ("apps/config.txt", "${B}"),
            ("apps/renamed.txt", "x"),
            ("apps/vars.env", "C=${C}\n"),
            ("apps/secret.txt", "${SECRET}"),
            ("apps/unlisted.yaml", &cm("unlisted", "u: ${U}")),
            ("base/kustomization.yml", "resources:\n  - base.yaml\n"),
            ("base/base.yaml", &cm("base", "b: x")),
            (
                "component/Kustomization",
                "kind: Component\nresources:\n  - c.yaml\n",
            ),
            ("component/c.yaml", &cm("c", "c: x")),
        ]);
        assert_eq!(
            built(root.path(), "apps"),
            vec![
                "apps/app.yaml",
                "apps/config.txt",
                "apps/json6902.yaml",
                "apps/kustomization.yaml",
                "apps/patch.yaml",
                "apps/renamed.txt",
                "apps/smp.yaml",
                "apps/vars.env",
                "base/base.yaml",
                "base/kustomization.yml",
                "component/Kustomization",
                "component/c.yaml",
            ]
        );
        // The same with `./apps/` and an absolute path inside the root.
        assert_eq!(built(root.path(), "./apps/").len(), 12);
        let absolute = root.path().join("apps");
        assert_eq!(built(root.path(), absolute.to_str().unwrap()).len(), 12);
    }

    #[test]
    fn without_kustomization_flux_generates_one() {
        let root = tree(&[
            ("apps/a.yaml", &cm("a", "a: ${A}")),
            ("apps/b.yml", &cm("b", "b: x")),
            ("apps/README.md", "${NOT_YAML}"),
            ("apps/script.sh", "${NOT_YAML}"),
            ("apps/nested/c.yaml", &cm("c", "c: x")),
            (
                "apps/sub/kustomization.yaml",
                "resources:\n  - listed.yaml\n",
            ),
            ("apps/sub/listed.yaml", &cm("listed", "l: x")),
            ("apps/sub/not-listed.yaml", "just: values\n"),
            ("apps/empty.yaml", "# nothing\n---\n"),
        ]);
        assert_eq!(
            built(root.path(), "apps"),
            vec![
                "apps/a.yaml",
                "apps/b.yml",
                "apps/empty.yaml",
                "apps/nested/c.yaml",
                "apps/sub/kustomization.yaml",
                "apps/sub/listed.yaml",
            ]
        );
    }

    #[test]
    fn generated_kustomization_refuses_non_objects() {
        let root = tree(&[
            ("apps/a.yaml", &cm("a", "a: x")),
            ("apps/values.yaml", "replicas: 2\n"),
        ]);
        let err = files_flux_builds(root.path(), Path::new("apps")).unwrap_err();
        assert!(
            err.message().contains("apps/values.yaml"),
            "{}",
            err.message()
        );
        assert!(err.message().contains("no `kind`"), "{}", err.message());
        let root = tree(&[("apps/a.yaml", "apiVersion: v1\nkind: ConfigMap\n")]);
        let err = files_flux_builds(root.path(), Path::new("apps")).unwrap_err();
        assert!(err.message().contains("metadata.name"), "{}", err.message());
        let root = tree(&[("apps/a.yaml", "apiVersion: v1\nkind: List\nitems: []\n")]);
        assert_eq!(built(root.path(), "apps"), vec!["apps/a.yaml"]);
    }

    #[test]
    fn paths_stay_inside_the_root() {
        let outer = tree(&[
            ("outside.yaml", &cm("o", "o: x")),
            (
                "src/apps/kustomization.yaml",
                "resources:\n  - ../../outside.yaml\n",
            ),
            ("src/abs/kustomization.yaml", "resources:\n  - /etc/hosts\n"),
        ]);
        let root = outer.path().join("src");
        let err = files_flux_builds(&root, Path::new("apps")).unwrap_err();
        assert!(
            err.message().contains("apps/kustomization.yaml"),
            "{}",
            err.message()
        );
        assert!(
            err.message().contains("`../../outside.yaml`"),
            "{}",
            err.message()
        );
        assert!(
            err.message().contains("outside the GitOps source"),
            "{}",
            err.message()
        );
        let err = files_flux_builds(&root, Path::new("abs")).unwrap_err();
        assert!(err.message().contains("`/etc/hosts`"), "{}", err.message());
        let err = files_flux_builds(&root, Path::new("../")).unwrap_err();
        assert!(
            err.message().contains("outside the GitOps source"),
            "{}",
            err.message()
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_of_the_root_are_refused() {
        let outer = tree(&[
            ("outside.yaml", &cm("o", "o: x")),
            ("src/apps/kustomization.yaml", "resources:\n  - link.yaml\n"),
        ]);
        let root = outer.path().join("src");
        std::os::unix::fs::symlink(
            outer.path().join("outside.yaml"),
            root.join("apps/link.yaml"),
        )
        .unwrap();
        let err = files_flux_builds(&root, Path::new("apps")).unwrap_err();
        assert!(
            err.message().contains("`link.yaml` points outside"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn missing_paths_and_entries_are_errors() {
        let root = tree(&[
            ("apps/kustomization.yaml", "resources:\n  - gone.yaml\n"),
            ("plain/kustomization.yaml", "resources:\n  - dir\n"),
            ("plain/dir/a.yaml", &cm("a", "a: x")),
            ("loop/kustomization.yaml", "resources:\n  - ../loop2\n"),
            ("loop2/kustomization.yaml", "resources:\n  - ../loop\n"),
            ("two/kustomization.yaml", ""),
            ("two/kustomization.yml", ""),
        ]);
        let err = files_flux_builds(root.path(), Path::new("nowhere")).unwrap_err();
        assert!(
            err.message().contains("`nowhere` does not exist"),
            "{}",
            err.message()
        );
        let err = files_flux_builds(root.path(), Path::new("apps")).unwrap_err();
        assert!(
            err.message()
                .contains("apps/kustomization.yaml: `gone.yaml` does not exist"),
            "{}",
            err.message()
        );
        let err = files_flux_builds(root.path(), Path::new("plain")).unwrap_err();
        assert!(
            err.message().contains("without a kustomization.yaml"),
            "{}",
            err.message()
        );
        let err = files_flux_builds(root.path(), Path::new("loop")).unwrap_err();
        assert!(
            err.message().contains("includes itself"),
            "{}",
            err.message()
        );
        let err = files_flux_builds(root.path(), Path::new("two")).unwrap_err();
        assert!(
            err.message().contains("several kustomization files"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn disabled_kustomizations_and_generators_contribute_nothing() {
        let root = tree(&[
            (
                "apps/kustomization.yaml",
                "resources:\n  - off\n  - a.yaml\nconfigMapGenerator:\n  - name: g\n    files: [g.txt]\n    options:\n      annotations:\n        kustomize.toolkit.fluxcd.io/substitute: disabled\n",
            ),
            ("apps/a.yaml", &cm("a", "a: ${A}")),
            ("apps/g.txt", "${G}"),
            (
                "apps/off/kustomization.yaml",
                "commonAnnotations:\n  kustomize.toolkit.fluxcd.io/substitute: disabled\nresources:\n  - o.yaml\n  - ../inner\n",
            ),
            ("apps/off/o.yaml", &cm("o", "o: ${O}")),
            (
                "apps/inner/kustomization.yaml",
                "labels:\n  - pairs:\n      kustomize.toolkit.fluxcd.io/substitute: disabled\nresources: [i.yaml]\n",
            ),
            ("apps/inner/i.yaml", &cm("i", "i: ${I}")),
        ]);
        assert_eq!(
            built(root.path(), "apps"),
            vec!["apps/a.yaml", "apps/kustomization.yaml"]
        );
    }
}
