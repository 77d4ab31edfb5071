//! The artifact cache on disk: a bundle directory (`index.json`, image
//! tarballs, files) that grows one verified artifact at a time. Files are
//! written beside their final name and renamed into place, and the index
//! is rewritten the same way, so an interrupted pull leaves no entry that
//! points at half a file.

use std::path::{Path, PathBuf};

use crate::bundle::{Artifact, INDEX_FILE, Index};
use crate::error::Error;

pub struct Cache {
    dir: PathBuf,
    index: Index,
}

impl Cache {
    pub fn open(dir: &Path) -> Result<Cache, Error> {
        std::fs::create_dir_all(dir).map_err(|e| write_error(dir, e))?;
        let path = dir.join(INDEX_FILE);
        let index = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                Error::user(format!(
                    "the artifact index {} is invalid: {e}",
                    path.display()
                ))
                .with_hint(format!(
                    "remove {} and pull again (`devstack pull`)",
                    dir.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index {
                api_version: "devstack.dev/v1alpha1".into(),
                kind: "Bundle".into(),
                artifacts: Vec::new(),
            },
            Err(e) => return Err(write_error(&path, e)),
        };
        Ok(Cache {
            dir: dir.to_path_buf(),
            index,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry for `kind` `name` (and image `tag`) whose file is present.
    pub fn find(
        &self,
        kind: &str,
        name: &str,
        tag: Option<&str>,
        version: &str,
    ) -> Option<&Artifact> {
        self.index.artifacts.iter().find(|a| {
            a.kind == kind
                && a.name == name
                && (tag.is_none() || a.tag.as_deref() == tag)
                && a.version
                    .as_deref()
                    .is_some_and(|v| crate::bundle::same_version(v, version))
                && self.dir.join(&a.file).is_file()
        })
    }

    /// Records `artifact`, replacing an entry of the same kind, name, tag
    /// and version, and writes the index.
    pub fn record(&mut self, artifact: Artifact) -> Result<(), Error> {
        self.index.artifacts.retain(|a| {
            !(a.kind == artifact.kind
                && a.name == artifact.name
                && a.tag == artifact.tag
                && a.version == artifact.version)
        });
        self.index.artifacts.push(artifact);
        self.index
            .artifacts
            .sort_by(|a, b| (&a.kind, &a.name, &a.version).cmp(&(&b.kind, &b.name, &b.version)));
        let path = self.dir.join(INDEX_FILE);
        let text = serde_json::to_string_pretty(&self.index).expect("index serializes");
        write_atomically(&path, text.as_bytes())
    }

    /// A path beside `file` to write to before renaming it into place.
    pub fn partial(&self, file: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(format!("{file}.partial"));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| write_error(parent, e))?;
        }
        Ok(path)
    }

    /// Moves a verified partial file to its name.
    pub fn commit(&self, partial: &Path, file: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(file);
        std::fs::rename(partial, &path).map_err(|e| write_error(&path, e))?;
        Ok(path)
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension("json.partial");
    std::fs::write(&tmp, bytes).map_err(|e| write_error(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| write_error(path, e))
}

fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::prerequisite(format!(
        "cannot write the artifact cache at {}: {e}",
        path.display()
    ))
    .with_hint(
        "free disk space or make the directory writable (the cache lives under DEVSTACK_HOME)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(version: &str, file: &str) -> Artifact {
        Artifact {
            kind: "flux-install".into(),
            role: None,
            name: "flux-install".into(),
            tag: None,
            version: Some(version.into()),
            digest: Some(format!("sha256:{}", "0".repeat(64))),
            size: Some(3),
            file: file.into(),
        }
    }

    #[test]
    fn entries_count_only_with_their_file_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = Cache::open(dir.path()).unwrap();
        cache.record(artifact("v2.9.5", "a.yaml")).unwrap();
        assert!(
            cache
                .find("flux-install", "flux-install", None, "v2.9.5")
                .is_none()
        );
        let partial = cache.partial("a.yaml").unwrap();
        std::fs::write(&partial, "abc").unwrap();
        cache.commit(&partial, "a.yaml").unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert!(
            cache
                .find("flux-install", "flux-install", None, "2.9.5")
                .is_some()
        );
        assert!(
            cache
                .find("flux-install", "flux-install", None, "v2.9.4")
                .is_none()
        );
        let bundle = crate::bundle::Bundle::open(dir.path()).unwrap();
        assert_eq!(bundle.versions_of("flux-install"), ["v2.9.5"]);
    }

    #[test]
    fn recording_again_replaces_the_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = Cache::open(dir.path()).unwrap();
        cache.record(artifact("v2.9.5", "a.yaml")).unwrap();
        cache.record(artifact("v2.9.5", "b.yaml")).unwrap();
        cache.record(artifact("v2.9.4", "c.yaml")).unwrap();
        let bundle = crate::bundle::Bundle::open(dir.path()).unwrap();
        let files: Vec<_> = bundle
            .index
            .artifacts
            .iter()
            .map(|a| a.file.as_str())
            .collect();
        assert_eq!(files, ["c.yaml", "b.yaml"]);
    }
}
