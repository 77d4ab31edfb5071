//! `snapshot export` and `import`: a snapshot packed into one tar file (for
//! a CI cache) and unpacked into the store, every archive checked against
//! its checksum on the way.

use std::io::{Read, Write};
use std::path::Path;

use super::CHUNK;
use super::manifest::{FORMAT, Info, MANIFEST, Manifest};
use super::store::{
    Hashing, Partial, check_name, damaged, io_error, not_found, read_manifest, store_dir,
    write_manifest,
};
use crate::error::Error;
use crate::profile::Settings;

/// Packs snapshot `name` into one tar file: the manifest first, then every
/// archive, each checked against its checksum as it is copied (a damaged
/// snapshot is not exported). Written beside `dest` and renamed into place.
pub async fn export(settings: &Settings, name: &str, dest: &Path) -> Result<Info, Error> {
    check_name(name)?;
    let dir = store_dir(settings).join(name);
    if !dir.join(MANIFEST).exists() {
        return Err(not_found(name));
    }
    let manifest = read_manifest(&dir, name)?;
    let dest = dest.to_path_buf();
    let name = name.to_string();
    let info = manifest.info(&dir);
    tokio::task::spawn_blocking(move || export_blocking(&dir, &manifest, &name, &dest))
        .await
        .map_err(|e| Error::internal("export task").with_source(e))??;
    Ok(info)
}

fn export_blocking(dir: &Path, manifest: &Manifest, name: &str, dest: &Path) -> Result<(), Error> {
    let partial = dest.with_file_name(format!(
        ".{}.partial",
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "snapshot".into())
    ));
    let result = (|| {
        let out = std::fs::File::create(&partial).map_err(|e| {
            Error::user(format!("cannot write {}", partial.display()))
                .with_source(e)
                .with_hint("choose a FILE in a writable directory")
        })?;
        let mut builder = tar::Builder::new(std::io::BufWriter::with_capacity(CHUNK, out));
        let append = |builder: &mut tar::Builder<_>, path: &Path, entry: &str| {
            let file =
                std::fs::File::open(path).map_err(io_error(format!("read {}", path.display())))?;
            let size = file
                .metadata()
                .map_err(io_error(format!("read {}", path.display())))?
                .len();
            let mut header = tar::Header::new_gnu();
            header.set_size(size);
            header.set_mode(0o600);
            let mut reader = Hashing {
                inner: file,
                hasher: blake3::Hasher::new(),
                bytes: 0,
            };
            builder
                .append_data(&mut header, entry, &mut reader)
                .map_err(io_error(format!("write {}", partial.display())))?;
            Ok::<_, Error>((reader.bytes, reader.hasher.finalize().to_hex().to_string()))
        };
        append(&mut builder, &dir.join(MANIFEST), MANIFEST)?;
        for file in &manifest.files {
            let (bytes, hash) = append(&mut builder, &dir.join(&file.file), &file.file)?;
            if bytes != file.bytes || hash != file.blake3 {
                return Err(damaged(
                    name,
                    &format!("{} does not match its checksum", file.file),
                ));
            }
        }
        let mut out = builder
            .into_inner()
            .map_err(io_error(format!("write {}", partial.display())))?;
        out.flush()
            .map_err(io_error(format!("write {}", partial.display())))?;
        std::fs::rename(&partial, dest).map_err(io_error(format!("write {}", dest.display())))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// Adds the snapshot packed in `file` to the store, as `name` (default: the
/// name it was saved as). Every archive is checked against the manifest's
/// checksum before the snapshot appears; a damaged file adds nothing.
pub async fn import(settings: &Settings, file: &Path, name: Option<&str>) -> Result<Info, Error> {
    if let Some(name) = name {
        check_name(name)?;
    }
    let settings = settings.clone();
    let file = file.to_path_buf();
    let name = name.map(String::from);
    tokio::task::spawn_blocking(move || import_blocking(&settings, &file, name.as_deref()))
        .await
        .map_err(|e| Error::internal("import task").with_source(e))?
}

fn import_blocking(settings: &Settings, file: &Path, name: Option<&str>) -> Result<Info, Error> {
    let shown = file.display().to_string();
    let not_snapshot = |why: String| {
        Error::user(format!("{shown} is not a devstack snapshot file: {why}")).with_hint(
            "pass a file written by `devstack snapshot export`; a cut-off download or cache entry is refused",
        )
    };
    let source = std::fs::File::open(file).map_err(|e| {
        Error::user(format!("cannot read {shown}"))
            .with_source(e)
            .with_hint("check the path")
    })?;
    let mut archive = tar::Archive::new(std::io::BufReader::with_capacity(CHUNK, source));
    let mut entries = archive
        .entries()
        .map_err(|e| not_snapshot(format!("not a tar archive ({e})")))?;
    let mut first = entries
        .next()
        .ok_or_else(|| not_snapshot("it is empty".into()))?
        .map_err(|e| not_snapshot(format!("not a tar archive ({e})")))?;
    let first_name = first
        .path()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    if first_name != MANIFEST {
        return Err(not_snapshot(format!(
            "its first entry is `{first_name}`, not {MANIFEST}"
        )));
    }
    let mut text = Vec::new();
    first
        .read_to_end(&mut text)
        .map_err(|e| not_snapshot(format!("its manifest cannot be read ({e})")))?;
    let mut manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| not_snapshot(format!("its manifest cannot be read ({e})")))?;
    if manifest.format != FORMAT {
        return Err(Error::user(format!(
            "{shown} holds a snapshot of format {}, and this devstack reads format {FORMAT}",
            manifest.format
        ))
        .with_hint("import it with the devstack that exported it, or save the snapshot again with this one"));
    }
    let name = name.map(String::from).unwrap_or(manifest.name.clone());
    check_name(&name)?;
    let dest = store_dir(settings).join(&name);
    if dest.exists() {
        return Err(
            Error::user(format!("a snapshot named `{name}` exists already")).with_hint(format!(
                "remove it first (`devstack snapshot rm {name}`), or import under another name (`devstack snapshot import {shown} NAME`)"
            )),
        );
    }
    let partial = Partial::new(settings, &name)?;
    let mut seen = std::collections::BTreeSet::new();
    for entry in entries {
        let mut entry =
            entry.map_err(|e| not_snapshot(format!("it is cut off or damaged ({e})")))?;
        let entry_name = entry
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(saved) = manifest.files.iter().find(|f| f.file == entry_name) else {
            return Err(not_snapshot(format!(
                "it holds `{entry_name}`, which its manifest does not list"
            )));
        };
        let path = partial.path().join(&saved.file);
        let mut out = std::io::BufWriter::with_capacity(
            CHUNK,
            std::fs::File::create(&path).map_err(io_error(format!("create {}", path.display())))?,
        );
        let mut reader = Hashing {
            inner: &mut entry,
            hasher: blake3::Hasher::new(),
            bytes: 0,
        };
        std::io::copy(&mut reader, &mut out)
            .map_err(|e| not_snapshot(format!("it is cut off or damaged ({e})")))?;
        out.flush()
            .map_err(io_error(format!("write {}", path.display())))?;
        if reader.bytes < saved.bytes {
            return Err(Error::user(format!(
                "{shown} is damaged: it is cut off ({} has {} of its {} bytes)",
                saved.file, reader.bytes, saved.bytes
            ))
            .with_hint("export the snapshot again, or restore a whole copy of the file; nothing was imported"));
        }
        if reader.bytes != saved.bytes || reader.hasher.finalize().to_hex().as_str() != saved.blake3
        {
            return Err(Error::user(format!(
                "{shown} is damaged: {} does not match its checksum",
                saved.file
            ))
            .with_hint("export the snapshot again, or restore a good copy of the file; nothing was imported"));
        }
        seen.insert(saved.file.clone());
    }
    if let Some(missing) = manifest.files.iter().find(|f| !seen.contains(&f.file)) {
        return Err(not_snapshot(format!(
            "it is cut off: {} is missing",
            missing.file
        )));
    }
    manifest.name = name.clone();
    write_manifest(partial.path(), &manifest)?;
    partial.finish(&dest)?;
    Ok(manifest.info(&dest))
}
