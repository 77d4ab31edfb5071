//! The part of a saved node that every stack restored from the snapshot
//! shares instead of copying: containerd's content blobs and overlay
//! snapshots (the image layers, most of a node's bytes). Neither changes once
//! written, so a restore puts them once in a Docker volume of the snapshot,
//! mounted read-only into each restored node, and fills the node's own state
//! with symlinks into it. containerd reads through the links and mounts
//! layers through them; what a restored node writes later (new layers, new
//! blobs, containers' upper directories) lands in its own volume.
//!
//! This module turns a node's archive into the two archives a snapshot
//! keeps: the node's own files, with a symlink where each shared entry was,
//! and the shared entries by their place in the volume.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};

use crate::cluster::k3s::SHARED_IN_NODE;

/// The directories below a node archive's root that are shared, each with
/// its place in the volume (`crate::cluster::SnapshotLayout::shared_dirs`).
pub type SharedDirs = &'static [(&'static str, &'static str)];

/// A shared entry's place: the directory it is under in the volume
/// (`snapshots`) and its path below that (`12/fs/bin`).
fn shared_place<'p>(
    dirs: SharedDirs,
    path: &'p str,
    root: &str,
) -> Option<(&'static str, &'p str)> {
    let below_root = path.strip_prefix(root)?.strip_prefix('/')?;
    dirs.iter().find_map(|(dir, in_volume)| {
        below_root
            .strip_prefix(dir)
            .and_then(|rest| rest.strip_prefix('/'))
            .filter(|rest| !rest.is_empty())
            .map(|rest| (*in_volume, rest))
    })
}

/// The first component of a path below a shared directory: one blob, or one
/// overlay snapshot's directory, which is what a symlink stands for.
fn top(rest: &str) -> &str {
    rest.split('/').next().unwrap_or(rest)
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Splits archives of a node's state into its own part and the shared part.
pub struct Split<O: Write, S: Write> {
    dirs: SharedDirs,
    own: tar::Builder<O>,
    shared: tar::Builder<S>,
    /// Shared tops a symlink was written for (`snapshots/12`).
    linked: BTreeSet<String>,
    /// Shared tops the node links to already (a node restored from a
    /// snapshot), which come from its mounted volume.
    inherited: BTreeSet<String>,
    /// Inherited tops found in the volume's archive.
    found: BTreeSet<String>,
}

impl<O: Write, S: Write> Split<O, S> {
    pub fn new(own: O, shared: S, dirs: SharedDirs) -> Self {
        Split {
            dirs,
            own: tar::Builder::new(own),
            shared: tar::Builder::new(shared),
            linked: BTreeSet::new(),
            inherited: BTreeSet::new(),
            found: BTreeSet::new(),
        }
    }

    /// Whether the node shares a snapshot's volume already, whose archive
    /// [`Split::volume_archive`] must then read.
    pub fn needs_volume(&self) -> bool {
        !self.inherited.is_empty()
    }

    /// Reads the archive of the node's state directory, whose entries are
    /// under `root` (its last component, `k3s`).
    pub fn node_archive(&mut self, archive: impl Read, root: &str) -> io::Result<()> {
        let mut archive = tar::Archive::new(archive);
        for entry in archive.entries()? {
            let mut entry = entry?;
            let path = entry_path(&entry)?;
            let Some((in_volume, rest)) = shared_place(self.dirs, &path, root) else {
                copy_entry(&mut self.own, &mut entry, &path, None)?;
                continue;
            };
            let key = format!("{in_volume}/{}", top(rest));
            let link = entry_link(&entry)?;
            let is_top = rest == top(rest);
            if let Some(target) = link
                .as_deref()
                .filter(|_| is_top && entry.header().entry_type() == tar::EntryType::Symlink)
                .and_then(|l| l.strip_prefix(SHARED_IN_NODE))
                .and_then(|l| l.strip_prefix('/'))
            {
                self.inherited.insert(target.to_string());
                copy_entry(&mut self.own, &mut entry, &path, None)?;
                continue;
            }
            if self.linked.insert(key.clone()) {
                let at = &path[..path.len() - rest.len() + top(rest).len()];
                append_symlink(&mut self.own, at, &format!("{SHARED_IN_NODE}/{key}"))?;
            }
            let hard_link = match (entry.header().entry_type(), link) {
                (tar::EntryType::Link, Some(target)) => {
                    match shared_place(self.dirs, &target, root) {
                        Some((dir, below)) => Some(format!("{dir}/{below}")),
                        None => {
                            return Err(invalid(format!(
                                "{path} is a hard link to {target}, outside the shared directories"
                            )));
                        }
                    }
                }
                _ => None,
            };
            copy_entry(
                &mut self.shared,
                &mut entry,
                &format!("{in_volume}/{rest}"),
                hard_link,
            )?;
        }
        Ok(())
    }

    /// Reads the archive of the volume a restored node shares (entries under
    /// `root`, the mount's last component), taking what the node links to.
    pub fn volume_archive(&mut self, archive: impl Read, root: &str) -> io::Result<()> {
        let mut archive = tar::Archive::new(archive);
        for entry in archive.entries()? {
            let mut entry = entry?;
            let path = entry_path(&entry)?;
            let Some(below) = path.strip_prefix(root).and_then(|p| p.strip_prefix('/')) else {
                continue;
            };
            let Some(key) = self.dirs.iter().find_map(|(_, in_volume)| {
                let rest = below.strip_prefix(in_volume)?.strip_prefix('/')?;
                (!rest.is_empty()).then(|| format!("{in_volume}/{}", top(rest)))
            }) else {
                continue;
            };
            if !self.inherited.contains(&key) {
                continue;
            }
            self.found.insert(key);
            let hard_link = match entry.header().entry_type() {
                tar::EntryType::Link => entry_link(&entry)?.map(|target| {
                    target
                        .strip_prefix(root)
                        .and_then(|t| t.strip_prefix('/'))
                        .unwrap_or(&target)
                        .to_string()
                }),
                _ => None,
            };
            copy_entry(&mut self.shared, &mut entry, below, hard_link)?;
        }
        Ok(())
    }

    /// Ends both archives; the writers back.
    pub fn finish(self) -> io::Result<(O, S)> {
        if let Some(missing) = self.inherited.difference(&self.found).next() {
            return Err(invalid(format!(
                "the node links to {SHARED_IN_NODE}/{missing}, which its snapshot volume lacks"
            )));
        }
        Ok((self.own.into_inner()?, self.shared.into_inner()?))
    }
}

fn entry_path(entry: &tar::Entry<'_, impl Read>) -> io::Result<String> {
    Ok(entry
        .path()?
        .to_string_lossy()
        .trim_end_matches('/')
        .to_string())
}

fn entry_link(entry: &tar::Entry<'_, impl Read>) -> io::Result<Option<String>> {
    Ok(entry
        .link_name()?
        .map(|l| l.to_string_lossy().trim_end_matches('/').to_string()))
}

/// Writes `entry` at `path` (its hard link's target replaced by `link`),
/// with the extended attributes its PAX header carried.
fn copy_entry<W: Write>(
    out: &mut tar::Builder<W>,
    entry: &mut tar::Entry<'_, impl Read>,
    path: &str,
    link: Option<String>,
) -> io::Result<()> {
    let mut attributes = Vec::new();
    if let Some(extensions) = entry.pax_extensions()? {
        for extension in extensions {
            let extension = extension?;
            let key = extension.key().map_err(|e| invalid(e.to_string()))?;
            if key.starts_with("SCHILY.xattr.") || key.starts_with("LIBARCHIVE.xattr.") {
                attributes.push((key.to_string(), extension.value_bytes().to_vec()));
            }
        }
    }
    if !attributes.is_empty() {
        append_pax(out, &attributes)?;
    }
    let mut header = entry.header().clone();
    // A UStar header keeps a long path's first part in `prefix`, which
    // setting a path that fits `name` alone leaves in place.
    if let Some(ustar) = header.as_ustar_mut() {
        ustar.prefix = [0; 155];
    }
    match header.entry_type() {
        tar::EntryType::Link | tar::EntryType::Symlink => {
            let target = match link {
                Some(target) => target,
                None => entry_link(entry)?.unwrap_or_default(),
            };
            out.append_link(&mut header, path, target)
        }
        tar::EntryType::Directory => out.append_data(&mut header, format!("{path}/"), entry),
        _ => out.append_data(&mut header, path, entry),
    }
}

/// A PAX extended header for the entry that follows.
fn append_pax<W: Write>(
    out: &mut tar::Builder<W>,
    records: &[(String, Vec<u8>)],
) -> io::Result<()> {
    let mut data = Vec::new();
    for (key, value) in records {
        // Each record is "<length> <key>=<value>\n", its length counting
        // its own digits.
        let body = key.len() + value.len() + 3;
        let mut length = body + body.to_string().len();
        if length.to_string().len() != body.to_string().len() {
            length += 1;
        }
        data.extend_from_slice(format!("{length} {key}=").as_bytes());
        data.extend_from_slice(value);
        data.push(b'\n');
    }
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::XHeader);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    out.append_data(&mut header, "././@PaxHeader", data.as_slice())
}

fn append_symlink<W: Write>(out: &mut tar::Builder<W>, at: &str, target: &str) -> io::Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_mode(0o777);
    header.set_size(0);
    out.append_link(&mut header, at, target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::k3s::SHARED_DIRS;

    const BLOBS: &str = "k3s/agent/containerd/io.containerd.content.v1.content/blobs/sha256";
    const SNAPS: &str = "k3s/agent/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots";

    enum Item<'a> {
        Dir(&'a str),
        File(&'a str, &'a [u8]),
        Symlink(&'a str, &'a str),
        HardLink(&'a str, &'a str),
    }

    fn archive(items: &[Item<'_>]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for item in items {
            let mut header = tar::Header::new_ustar();
            header.set_mode(0o755);
            match item {
                Item::Dir(path) => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    builder
                        .append_data(&mut header, format!("{path}/"), io::empty())
                        .unwrap();
                }
                Item::File(path, data) => {
                    header.set_size(data.len() as u64);
                    builder.append_data(&mut header, path, *data).unwrap();
                }
                Item::Symlink(path, target) | Item::HardLink(path, target) => {
                    header.set_entry_type(if matches!(item, Item::Symlink(..)) {
                        tar::EntryType::Symlink
                    } else {
                        tar::EntryType::Link
                    });
                    header.set_size(0);
                    builder.append_link(&mut header, path, target).unwrap();
                }
            }
        }
        builder.into_inner().unwrap()
    }

    /// Path, kind, link target or contents of every entry.
    fn entries(bytes: &[u8]) -> Vec<(String, char, String)> {
        let mut archive = tar::Archive::new(bytes);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let path = entry_path(&e).unwrap();
                let kind = e.header().entry_type();
                let (kind, detail) = match kind {
                    tar::EntryType::Directory => ('d', String::new()),
                    tar::EntryType::Symlink => ('s', entry_link(&e).unwrap().unwrap()),
                    tar::EntryType::Link => ('h', entry_link(&e).unwrap().unwrap()),
                    _ => {
                        let mut text = String::new();
                        e.read_to_string(&mut text).unwrap();
                        ('f', text)
                    }
                };
                (path, kind, detail)
            })
            .collect()
    }

    fn e(path: &str, kind: char, detail: &str) -> (String, char, String) {
        (path.to_string(), kind, detail.to_string())
    }

    #[test]
    fn layers_and_blobs_go_to_the_shared_archive_and_the_node_keeps_symlinks() {
        let long = format!("{SNAPS}/7/fs/{}", "deep/".repeat(30) + "file");
        // Too long for a UStar name: written with a prefix, which the
        // shorter path in the volume must not keep.
        let blob = "a".repeat(64);
        let node = archive(&[
            Item::Dir("k3s"),
            Item::File("k3s/server/db/state.db", b"datastore"),
            Item::Dir(BLOBS),
            Item::File(&format!("{BLOBS}/{blob}"), b"blob"),
            Item::Dir(SNAPS),
            Item::Dir(&format!("{SNAPS}/7")),
            Item::Dir(&format!("{SNAPS}/7/fs")),
            Item::File(&format!("{SNAPS}/7/fs/perl5"), b"perl"),
            Item::HardLink(
                &format!("{SNAPS}/7/fs/perl"),
                &format!("{SNAPS}/7/fs/perl5"),
            ),
            Item::Symlink(&format!("{SNAPS}/7/fs/sh"), "/bin/busybox"),
            Item::File(&long, b"long"),
        ]);
        let mut split = Split::new(Vec::new(), Vec::new(), SHARED_DIRS);
        split.node_archive(node.as_slice(), "k3s").unwrap();
        assert!(!split.needs_volume());
        let (own, shared) = split.finish().unwrap();
        assert_eq!(
            entries(&own),
            [
                e("k3s", 'd', ""),
                e("k3s/server/db/state.db", 'f', "datastore"),
                e(BLOBS, 'd', ""),
                e(
                    &format!("{BLOBS}/{blob}"),
                    's',
                    &format!("/devstack/snapshot/blobs/sha256/{blob}")
                ),
                e(SNAPS, 'd', ""),
                e(&format!("{SNAPS}/7"), 's', "/devstack/snapshot/snapshots/7"),
            ]
        );
        let long_in_volume = long.replacen(SNAPS, "snapshots", 1);
        assert_eq!(
            entries(&shared),
            [
                e(&format!("blobs/sha256/{blob}"), 'f', "blob"),
                e("snapshots/7", 'd', ""),
                e("snapshots/7/fs", 'd', ""),
                e("snapshots/7/fs/perl5", 'f', "perl"),
                e("snapshots/7/fs/perl", 'h', "snapshots/7/fs/perl5"),
                e("snapshots/7/fs/sh", 's', "/bin/busybox"),
                e(&long_in_volume, 'f', "long"),
            ]
        );
    }

    #[test]
    fn a_restored_node_keeps_its_links_and_its_volume_supplies_what_they_point_to() {
        let node = archive(&[
            Item::Dir("k3s"),
            Item::Dir(SNAPS),
            Item::Symlink(&format!("{SNAPS}/7"), "/devstack/snapshot/snapshots/7"),
            Item::Dir(&format!("{SNAPS}/9")),
            Item::File(&format!("{SNAPS}/9/new"), b"since the restore"),
        ]);
        let volume = archive(&[
            Item::Dir("snapshot"),
            Item::File("snapshot/.devstack-filled", b""),
            Item::Dir("snapshot/snapshots/7"),
            Item::File("snapshot/snapshots/7/a", b"layer"),
            Item::HardLink("snapshot/snapshots/7/b", "snapshot/snapshots/7/a"),
            Item::Dir("snapshot/snapshots/8"),
            Item::File("snapshot/snapshots/8/gone", b"no longer linked"),
        ]);
        let mut split = Split::new(Vec::new(), Vec::new(), SHARED_DIRS);
        split.node_archive(node.as_slice(), "k3s").unwrap();
        assert!(split.needs_volume());
        split.volume_archive(volume.as_slice(), "snapshot").unwrap();
        let (own, shared) = split.finish().unwrap();
        assert_eq!(
            entries(&own),
            [
                e("k3s", 'd', ""),
                e(SNAPS, 'd', ""),
                e(&format!("{SNAPS}/7"), 's', "/devstack/snapshot/snapshots/7"),
                e(&format!("{SNAPS}/9"), 's', "/devstack/snapshot/snapshots/9"),
            ]
        );
        assert_eq!(
            entries(&shared),
            [
                e("snapshots/9", 'd', ""),
                e("snapshots/9/new", 'f', "since the restore"),
                e("snapshots/7", 'd', ""),
                e("snapshots/7/a", 'f', "layer"),
                e("snapshots/7/b", 'h', "snapshots/7/a"),
            ]
        );
    }

    #[test]
    fn a_volume_without_what_the_node_links_to_is_an_error() {
        let node = archive(&[Item::Symlink(
            &format!("{SNAPS}/7"),
            "/devstack/snapshot/snapshots/7",
        )]);
        let mut split = Split::new(Vec::new(), Vec::new(), SHARED_DIRS);
        split.node_archive(node.as_slice(), "k3s").unwrap();
        split
            .volume_archive(archive(&[Item::Dir("snapshot")]).as_slice(), "snapshot")
            .unwrap();
        let err = split.finish().expect_err("a missing layer fails");
        assert!(err.to_string().contains("snapshots/7"), "{err}");
    }

    #[test]
    fn a_kind_nodes_var_shares_containerds_layers_and_keeps_the_rest() {
        use crate::cluster::kind::snapshot::SHARED_DIRS as KIND;
        let blobs = "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256";
        let snaps = "var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots";
        let node = archive(&[
            Item::Dir("var"),
            Item::File("var/lib/etcd/member/snap/db", b"etcd"),
            Item::File(&format!("{blobs}/ab"), b"blob"),
            Item::Dir(&format!("{snaps}/3")),
            Item::File(&format!("{snaps}/3/fs/kubelet"), b"bin"),
        ]);
        let mut split = Split::new(Vec::new(), Vec::new(), KIND);
        split.node_archive(node.as_slice(), "var").unwrap();
        let (own, shared) = split.finish().unwrap();
        assert_eq!(
            entries(&own),
            [
                e("var", 'd', ""),
                e("var/lib/etcd/member/snap/db", 'f', "etcd"),
                e(
                    &format!("{blobs}/ab"),
                    's',
                    "/devstack/snapshot/blobs/sha256/ab"
                ),
                e(&format!("{snaps}/3"), 's', "/devstack/snapshot/snapshots/3"),
            ]
        );
        assert_eq!(
            entries(&shared),
            [
                e("blobs/sha256/ab", 'f', "blob"),
                e("snapshots/3", 'd', ""),
                e("snapshots/3/fs/kubelet", 'f', "bin"),
            ]
        );
    }

    #[test]
    fn extended_attributes_survive_the_split() {
        let mut builder = tar::Builder::new(Vec::new());
        append_pax(
            &mut builder,
            &[("SCHILY.xattr.trusted.overlay.opaque".into(), b"y".to_vec())],
        )
        .unwrap();
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        builder
            .append_data(&mut header, format!("{SNAPS}/7/fs/etc/"), io::empty())
            .unwrap();
        let node = builder.into_inner().unwrap();
        let mut split = Split::new(Vec::new(), Vec::new(), SHARED_DIRS);
        split.node_archive(node.as_slice(), "k3s").unwrap();
        let (_, shared) = split.finish().unwrap();
        let mut archive = tar::Archive::new(shared.as_slice());
        let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry_path(&entry).unwrap(), "snapshots/7/fs/etc");
        let found: Vec<(String, Vec<u8>)> = entry
            .pax_extensions()
            .unwrap()
            .unwrap()
            .map(|x| {
                let x = x.unwrap();
                (x.key().unwrap().to_string(), x.value_bytes().to_vec())
            })
            .collect();
        assert_eq!(
            found,
            [(
                "SCHILY.xattr.trusted.overlay.opaque".to_string(),
                b"y".to_vec()
            )]
        );
    }
}
