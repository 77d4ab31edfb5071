//! Per-stack files on the host, under the state directory: the kubeconfig,
//! the stack's record (what its runs found: ports, provider, what its
//! cluster holds for it), and the lock one run holds.
//!
//! The state directory itself comes with the settings
//! ([`Settings::state_dir`]); nothing here looks at the environment.

use std::path::PathBuf;

use crate::envvars;
use crate::error::Error;
use crate::profile::Settings;

pub fn stack_dir(settings: &Settings) -> PathBuf {
    settings.state_dir.join("stacks").join(&settings.name)
}

/// The stack's own kubeconfig file (mode 0600).
pub fn kubeconfig_path(settings: &Settings) -> PathBuf {
    stack_dir(settings).join("kubeconfig")
}

/// The stack's kubeconfig (YAML). A stack without one has no cluster:
/// unhealthy (exit 4), with the command that creates it.
pub fn read_kubeconfig(settings: &Settings) -> Result<String, Error> {
    let path = kubeconfig_path(settings);
    match std::fs::read_to_string(&path) {
        Ok(yaml) => Ok(yaml),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::unhealthy(format!(
            "stack `{}` has no cluster (no kubeconfig at {})",
            settings.name,
            path.display()
        ))
        .with_hint("create the stack with `devstack up`")),
        Err(e) => Err(Error::internal(format!(
            "cannot read the kubeconfig {}: {}",
            path.display(),
            e.kind()
        ))),
    }
}

/// Caches shared by every stack (Flux install manifests, preload images).
pub fn cache_dir(settings: &Settings) -> PathBuf {
    settings.state_dir.clone()
}

/// Host ports a stack was created with: `auto` ports are chosen then, so
/// this record is where `env`, `status` and later runs learn them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ports {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub localstack: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_server: Option<u16>,
    /// The stack registry's (`registry.enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<u16>,
}

/// What devstack records about a stack next to its kubeconfig: what its
/// runs found (`stack::Found`, the one writer), for the commands after
/// them. Fields are only ever added, each optional, so that a record of an
/// earlier release still reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackRecord {
    #[serde(default)]
    pub ports: Ports,
    /// The provider the stack's cluster was made with, so a profile that
    /// does not pin one keeps reaching it (the default may have changed, or
    /// `up` may have fallen back to K3s). Absent in records of releases
    /// before Kind became the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<crate::profile::Provider>,
    /// The cluster's nodes pull the stack's images themselves
    /// ([`crate::profile::ImageSettings::nodes_pull`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nodes_pull: bool,
    /// The cluster's ESO the stack uses instead of its own
    /// ([`crate::profile::ClusterEso`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_eso: Option<crate::profile::ClusterEso>,
    /// The stack joined a cluster another stack runs on, and names its
    /// objects after itself ([`crate::profile::StackNames`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shares_cluster: bool,
}

/// The record's file name in a stack's directory.
const RECORD_FILE: &str = "stack.json";

/// Names of the stacks recorded under `state_dir` whose cluster is one
/// devstack did not create: they have no container or network of their
/// own, so only their record says they exist. Those that joined a cluster
/// another stack runs on come first: that stack goes down after them.
pub fn stacks_on_existing_clusters(state_dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("stacks")) else {
        return Vec::new();
    };
    let mut stacks: Vec<(bool, String)> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let record = StackRecord::read(&entry.path().join(RECORD_FILE))?;
            (record.provider == Some(crate::profile::Provider::Existing)).then(|| {
                let name = entry.file_name().to_string_lossy().into_owned();
                (!record.shares_cluster, name)
            })
        })
        .collect();
    stacks.sort();
    stacks.into_iter().map(|(_, name)| name).collect()
}

/// One writer at a time in this process, whichever stack (other processes
/// are kept out of a stack by [`StackLock`]).
static RECORD_WRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl StackRecord {
    pub fn path(settings: &Settings) -> PathBuf {
        stack_dir(settings).join(RECORD_FILE)
    }

    /// The record, or an empty one when the stack has none (yet).
    pub fn load(settings: &Settings) -> StackRecord {
        Self::read(&Self::path(settings)).unwrap_or_default()
    }

    /// The record at `path`, if there is a readable one.
    fn read(path: &std::path::Path) -> Option<StackRecord> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Read, change and atomically replace the record.
    pub fn update(settings: &Settings, change: impl FnOnce(&mut StackRecord)) -> Result<(), Error> {
        let _guard = RECORD_WRITE.lock().unwrap_or_else(|e| e.into_inner());
        let mut record = Self::load(settings);
        let before = record.clone();
        change(&mut record);
        let path = Self::path(settings);
        if record == before && path.exists() {
            return Ok(());
        }
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(stack_dir(settings))?;
            let tmp = path.with_extension("json.tmp");
            std::fs::write(
                &tmp,
                serde_json::to_vec_pretty(&record).expect("record serializes"),
            )?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            Error::internal(format!("cannot write {}: {e}", path.display())).with_hint(format!(
                "check that {} is writable (or set {})",
                settings.state_dir.display(),
                envvars::DEVSTACK_HOME
            ))
        })
    }
}

/// An exclusive lock on one stack for the length of a run that changes it
/// (`up`, `down`), so two runs never create the same containers. It is an
/// `flock` on a file outside the stack's directory (which `down` removes):
/// the kernel releases it when the process exits, even on a crash.
pub struct StackLock {
    _file: std::fs::File,
}

impl StackLock {
    pub fn path(settings: &Settings) -> PathBuf {
        settings
            .state_dir
            .join("locks")
            .join(format!("{}.lock", settings.name))
    }

    /// Takes the lock, waiting for another run to finish first; `waiting` is
    /// told once who holds it.
    pub async fn acquire(
        settings: &Settings,
        command: &str,
        waiting: &(dyn Fn(String) + Sync),
    ) -> Result<StackLock, Error> {
        Self::acquire_at(
            settings,
            Self::path(settings),
            &format!("stack `{}`", settings.name),
            command,
            waiting,
        )
        .await
    }

    /// Takes the lock file `path` guarding `what` (told in the message
    /// while waiting), under `settings`' state directory.
    pub async fn acquire_at(
        settings: &Settings,
        path: PathBuf,
        what: &str,
        command: &str,
        waiting: &(dyn Fn(String) + Sync),
    ) -> Result<StackLock, Error> {
        use std::io::{Read, Seek, Write};
        use std::os::fd::AsRawFd;
        let open = || -> std::io::Result<std::fs::File> {
            std::fs::create_dir_all(path.parent().expect("lock path has a parent"))?;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
        };
        let mut file = open().map_err(|e| {
            Error::internal(format!(
                "cannot open the stack lock {}: {e}",
                path.display()
            ))
            .with_hint(format!(
                "check that {} is writable (or set {})",
                settings.state_dir.display(),
                envvars::DEVSTACK_HOME
            ))
        })?;
        let mut told = false;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(Error::internal(format!(
                    "cannot lock {}: {err}",
                    path.display()
                )));
            }
            if !told {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                waiting(format!(
                    "waiting for another devstack run on {what} to finish ({})",
                    if holder.is_empty() {
                        "starting"
                    } else {
                        holder
                    }
                ));
                told = true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = write!(file, "`devstack {command}`, pid {}", std::process::id());
        let _ = file.flush();
        Ok(StackLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_records_round_trip() {
        let record = StackRecord {
            ports: Ports {
                localstack: Some(4566),
                api_server: None,
                registry: None,
            },
            provider: None,
            nodes_pull: false,
            cluster_eso: None,
            shares_cluster: false,
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json, serde_json::json!({"ports": {"localstack": 4566}}));
        let back: StackRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, record);
        assert_eq!(
            serde_json::from_str::<StackRecord>("{}").unwrap(),
            StackRecord::default()
        );
    }

    #[test]
    fn stacks_on_existing_clusters_are_found_by_their_records_alone() {
        let dir = tempfile::tempdir().unwrap();
        assert!(stacks_on_existing_clusters(dir.path()).is_empty());
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.state_dir = dir.path().to_path_buf();
        for (name, provider, joined) in [
            ("shared-b", Some(crate::profile::Provider::Existing), false),
            ("own", Some(crate::profile::Provider::Kind), false),
            ("shared-a", Some(crate::profile::Provider::Existing), false),
            ("joined", Some(crate::profile::Provider::Existing), true),
            ("old", None, false),
        ] {
            settings.name = name.into();
            StackRecord::update(&settings, |r| {
                r.provider = provider;
                r.shares_cluster = joined;
            })
            .unwrap();
        }
        std::fs::create_dir_all(dir.path().join("stacks/no-record")).unwrap();
        // A stack that joined another's cluster goes down before it.
        assert_eq!(
            stacks_on_existing_clusters(dir.path()),
            ["joined", "shared-a", "shared-b"]
        );
    }
}
