//! The snapshot store: one private directory per snapshot under the state
//! directory, its manifest, and the hashed files its archives are.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::manifest::{Info, MANIFEST, Manifest, check};
use crate::error::Error;
use crate::profile::Settings;

/// A snapshot in the store, its manifest read and checked against the
/// settings it is to be restored with.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub manifest: Manifest,
    pub dir: PathBuf,
}

/// Where this state directory keeps its snapshots.
pub fn store_dir(settings: &Settings) -> PathBuf {
    settings.state_dir.join("snapshots")
}

/// A snapshot name is a directory name and appears in commands: lowercase
/// letters, digits, `.`, `_` and `-`, starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(
            Error::user(format!("`{name}` is not a valid snapshot name")).with_hint(
                "use up to 63 lowercase letters, digits, `.`, `_` or `-`, starting with a letter or digit",
            ),
        )
    }
}

pub(super) fn io_error(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::internal(what).with_source(e)
}

/// Writes a file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(format!("create {}", path.display())))?;
    file.write_all(bytes)
        .map_err(io_error(format!("write {}", path.display())))
}

fn create_private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            Error::prerequisite(format!("cannot create {}", dir.display()))
                .with_source(e)
                .with_hint("make devstack's state directory (DEVSTACK_HOME) writable")
        })
}

/// A directory beside the store's snapshots, removed when dropped unless
/// it was moved into place: a save or import that fails leaves nothing.
pub(super) struct Partial(Option<PathBuf>);

impl Partial {
    pub(super) fn new(settings: &Settings, name: &str) -> Result<Self, Error> {
        let store = store_dir(settings);
        create_private_dir(&store)?;
        let dir = store.join(format!(".partial-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        create_private_dir(&dir)?;
        Ok(Partial(Some(dir)))
    }

    pub(super) fn path(&self) -> &Path {
        self.0.as_deref().expect("not yet moved")
    }

    /// Moves the directory to `dest`, replacing what is there.
    pub(super) fn finish(mut self, dest: &Path) -> Result<bool, Error> {
        let dir = self.0.take().expect("not yet moved");
        let replaced = dest.exists();
        if replaced {
            std::fs::remove_dir_all(dest)
                .map_err(io_error(format!("remove {}", dest.display())))?;
        }
        std::fs::rename(&dir, dest).map_err(io_error(format!("move {}", dir.display())))?;
        Ok(replaced)
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

pub(super) fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), Error> {
    let text = serde_json::to_vec_pretty(manifest).expect("manifest serializes");
    write_private(&dir.join(MANIFEST), &text)
}

pub(super) fn not_found(name: &str) -> Error {
    Error::user(format!("there is no snapshot `{name}`")).with_hint(
        "`devstack snapshot list` shows the snapshots; `devstack snapshot import FILE` adds one",
    )
}

pub(super) fn read_manifest(dir: &Path, name: &str) -> Result<Manifest, Error> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read(&path).map_err(io_error(format!("read {}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| damaged(name, &format!("its manifest: {e}")))
}

pub(super) fn damaged(name: &str, what: &str) -> Error {
    Error::user(format!("snapshot `{name}` is damaged: {what}")).with_hint(format!(
        "remove it (`devstack snapshot rm {name}`) and save or import a good copy"
    ))
}

/// Snapshot `name` from the store, checked against `settings`.
pub fn open(settings: &Settings, name: &str) -> Result<Snapshot, Error> {
    check_name(name)?;
    let dir = store_dir(settings).join(name);
    if !dir.join(MANIFEST).exists() {
        return Err(not_found(name));
    }
    let manifest = read_manifest(&dir, name)?;
    check(&manifest, settings)?;
    for file in &manifest.files {
        let size = std::fs::metadata(dir.join(&file.file)).map(|m| m.len());
        if size.as_ref().ok() != Some(&file.bytes) {
            return Err(damaged(
                name,
                &format!("{} is missing or has another size", file.file),
            ));
        }
    }
    Ok(Snapshot { manifest, dir })
}

/// The provider snapshot `name`'s cluster was made with, when the store
/// has it and its manifest says (what [`open`] then checks).
pub fn saved_provider(settings: &Settings, name: &str) -> Option<crate::profile::Provider> {
    check_name(name).ok()?;
    let manifest = read_manifest(&store_dir(settings).join(name), name).ok()?;
    match manifest.versions.get("provider")?.as_str() {
        "kind" => Some(crate::profile::Provider::Kind),
        "k3s" => Some(crate::profile::Provider::K3s),
        _ => None,
    }
}

/// Every snapshot in the store, by name.
pub fn list(settings: &Settings) -> Result<Vec<Info>, Error> {
    let store = store_dir(settings);
    let entries = match std::fs::read_dir(&store) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(format!("read {}", store.display()))(e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if let Ok(manifest) = read_manifest(&entry.path(), &name) {
            out.push(manifest.info(&entry.path()));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Every readable snapshot manifest in the store.
pub(super) fn manifests(settings: &Settings) -> Vec<Manifest> {
    let Ok(entries) = std::fs::read_dir(store_dir(settings)) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            read_manifest(&entry.path(), &name).ok()
        })
        .collect()
}

/// A reader that hashes what passes through it.
pub(super) struct Hashing<R> {
    pub(super) inner: R,
    pub(super) hasher: blake3::Hasher,
    pub(super) bytes: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_directory_safe() {
        for good in ["ci", "ci-2026.11", "a_b"] {
            check_name(good).unwrap();
        }
        for bad in ["", "../x", "Ci", "-x", "a/b", ".hidden"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
