//! Snapshots: a verified K3s or Kind stack's cluster saved as files, and
//! new stacks created from them in seconds instead of a cold `up`.
//!
//! A snapshot is a directory under `<state dir>/snapshots/<name>/`: one tar
//! archive per saved path of each node ([`crate::cluster::snapshot_layout`]:
//! for K3s the datastore, containerd's images and containers, kubelet and
//! CNI files, the node password; for Kind the node's `/var` and what
//! kubeadm, kind and devstack wrote in its root filesystem) and
//! `manifest.json` ([`Manifest`]), which records the profile and the
//! version matrix it was made with, the nodes' Kubernetes names and every
//! archive's size and BLAKE3 checksum. `export` packs the directory into
//! one tar file for a CI cache; `import` unpacks it, checking every archive.
//!
//! The nodes are paused while their files are read, so the archives are one
//! consistent cut, as after a power cut: the datastore (SQLite) and
//! containerd's database are built to start from that. LocalStack is not
//! saved (community LocalStack keeps no state): a restore seeds a new one
//! from the profile, and `up` refills the GitOps bucket and lets Flux and
//! ESO reconcile against it.
//!
//! A snapshot holds the cluster's credentials (its CA keys, the join token)
//! and the Kubernetes Secrets ESO synced: its files are readable by their
//! owner only.
//!
//! Files: `manifest` (what a snapshot records, whether it fits), `store`
//! (the directory of snapshots), `save`, `restore`, `upload` (an archive
//! streamed into a container, checked), `shared` (a node's archive split
//! into its own and its shared part), `volume` (the Docker volumes shared
//! parts live in), `remove`, `transfer` (`export` and `import`).

mod manifest;
mod remove;
mod restore;
mod save;
mod shared;
mod store;
mod transfer;
mod upload;
mod volume;

pub use manifest::{
    FORMAT, Info, Manifest, SavedFile, check, nothing_to_save, profile_digests, require_supported,
    versions,
};
pub use remove::{Removal, remove};
pub use restore::{AfterRestore, after_restore, check_restorable, restore_nodes};
pub use save::{SaveReport, save};
pub use store::{Snapshot, check_name, list, open, saved_provider, store_dir};
pub use transfer::{export, import};
pub use volume::prune_shared_volumes;

/// Read and hashed in pieces this large while streaming to the engine.
const CHUNK: usize = 4 << 20;
