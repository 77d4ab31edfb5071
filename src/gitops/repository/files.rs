//! The local repository as the stack's bucket holds it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::BUCKET_OWN_PREFIXES;
use crate::error::Error;
use crate::gitops::manifests::Tree;
use crate::profile::{GitopsSourceKind, Settings};

/// A repository larger than this is not what a local source is for.
const MAX_PUBLISHED_FILES: usize = 5_000;
const MAX_PUBLISHED_BYTES: u64 = 64 * 1024 * 1024;

/// The repository's files a local source publishes: everything below the
/// profile's directory but hidden entries, devstack's state directory and
/// the files the facts are read from (a Terraform outputs file may hold
/// sensitive values), so a
/// HelmRelease's chart or a base an app's kustomization names is there as
/// it is in git. Nothing when the profile has no apps.
pub fn repository_files(settings: &Settings) -> Result<Tree, Error> {
    let mut tree = Tree::new();
    if settings.gitops.apps.is_empty() || settings.gitops.source != GitopsSourceKind::Local {
        return Ok(tree);
    }
    let root = &settings.base_dir;
    let excluded: BTreeSet<PathBuf> = fact_and_secret_files(settings)
        .into_iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let state_dir = settings.state_dir.canonicalize().ok();
    let mut bytes = 0u64;
    let mut stack = vec![root.clone()];
    let unreadable = |path: &Path, e: std::io::Error| {
        Error::user(format!(
            "cannot read {} to publish the repository: {e}",
            path.display()
        ))
        .with_hint(
            "make it readable, or hide it from the published repository (a name starting with `.`)",
        )
    };
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| unreadable(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| unreadable(&dir, e))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            let file_type = entry.file_type().map_err(|e| unreadable(&path, e))?;
            if file_type.is_dir() {
                // devstack's own state (kubeconfigs, the artifact cache) when
                // DEVSTACK_HOME lies inside the repository.
                let is_state = state_dir.as_ref().is_some_and(|state| {
                    path.canonicalize()
                        .is_ok_and(|canonical| &canonical == state)
                });
                if !is_state {
                    stack.push(path);
                }
                continue;
            }
            if !path.is_file()
                || path
                    .canonicalize()
                    .is_ok_and(|canonical| excluded.contains(&canonical))
            {
                continue;
            }
            let key = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            let top = key.split('/').next().unwrap_or_default();
            if BUCKET_OWN_PREFIXES.contains(&top) && key.contains('/') {
                return Err(Error::user(format!(
                    "the repository at {} has a top-level `{top}/`, where devstack keeps its own objects in the stack's bucket",
                    root.display()
                ))
                .with_hint(format!(
                    "rename `{top}/` (or use `gitops.source: git`)"
                )));
            }
            let content = std::fs::read(&path).map_err(|e| unreadable(&path, e))?;
            bytes += content.len() as u64;
            tree.insert(key, content);
            if tree.len() > MAX_PUBLISHED_FILES || bytes > MAX_PUBLISHED_BYTES {
                return Err(Error::user(format!(
                    "the repository at {} (the profile's directory) holds more than {MAX_PUBLISHED_FILES} files or {} MiB, more than a local GitOps source carries",
                    root.display(),
                    MAX_PUBLISHED_BYTES / 1024 / 1024
                ))
                .with_hint(
                    "put the profile in the GitOps repository's root, hide what Flux does not need (names starting with `.`), or use `gitops.source: git`",
                ));
            }
        }
    }
    Ok(tree)
}

/// Files the profile reads values from: its dotenv and Terraform outputs
/// files, and its secrets' files.
fn fact_and_secret_files(settings: &Settings) -> Vec<PathBuf> {
    let secrets = settings.secrets.iter().filter_map(|s| match &s.source {
        crate::profile::SecretSource::File(path) => Some(path.clone()),
        _ => None,
    });
    settings
        .facts
        .facts
        .values()
        .filter_map(|f| match &f.source {
            crate::profile::settings::FactSource::File { path, .. }
            | crate::profile::settings::FactSource::Terraform { path, .. } => {
                Some(settings.base_dir.join(path))
            }
            _ => None,
        })
        .chain(secrets)
        .collect()
}
