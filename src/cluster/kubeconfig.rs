//! Kubeconfig files: the stack's own (mode 0600), and merging its context
//! into the user's kubeconfig without touching any other entry.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::Error;

fn parse(yaml: &str, what: &str) -> Result<Value, Error> {
    if yaml.trim().is_empty() {
        return Ok(
            json!({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []}),
        );
    }
    serde_saphyr::from_str(yaml).map_err(|e| {
        Error::user(format!(
            "{what} is not a valid kubeconfig: {}",
            crate::profile::load::raw_message(&e)
        ))
        .with_hint("fix or move the file; devstack only adds and removes its own entries")
    })
}

fn render(value: &Value) -> Result<String, Error> {
    serde_saphyr::to_string(value)
        .map_err(|e| Error::internal(format!("cannot render kubeconfig: {e}")))
}

/// Renames the single cluster, user and context of `yaml` to `name`,
/// optionally replacing the server URL.
pub fn rename_context(yaml: &str, name: &str, server: Option<&str>) -> Result<String, Error> {
    let mut config = parse(yaml, "the cluster's kubeconfig")?;
    let first = |key: &str, config: &Value| {
        config
            .get(key)
            .and_then(|v| v.as_array())
            .and_then(|a| a.first())
            .cloned()
    };
    let (Some(mut cluster), Some(mut user), Some(mut context)) = (
        first("clusters", &config),
        first("users", &config),
        first("contexts", &config),
    ) else {
        return Err(Error::internal(
            "the cluster's kubeconfig lacks a cluster, user or context",
        ));
    };
    cluster["name"] = json!(name);
    if let Some(server) = server {
        cluster["cluster"]["server"] = json!(server);
    }
    user["name"] = json!(name);
    context["name"] = json!(name);
    context["context"]["cluster"] = json!(name);
    context["context"]["user"] = json!(name);
    config["clusters"] = json!([cluster]);
    config["users"] = json!([user]);
    config["contexts"] = json!([context]);
    config["current-context"] = json!(name);
    render(&config)
}

/// Fails with a user error when `path` could not be written later.
pub fn check_writable(path: &Path) -> Result<(), Error> {
    let dir = path.parent().unwrap_or(Path::new("."));
    // A check leaves no trace: a directory it had to make would tell the
    // next step (a rollback deciding whether this run made the stack's
    // state directory) that it was there before.
    let existing = dir.ancestors().find(|d| d.exists()).map(Path::to_path_buf);
    let probe = dir.join(".devstack-write-probe");
    let result = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&probe, b""));
    let _ = std::fs::remove_file(&probe);
    for made in dir.ancestors() {
        if Some(made) == existing.as_deref() || std::fs::remove_dir(made).is_err() {
            break;
        }
    }
    result.map_err(|e| {
        Error::user(format!("cannot write kubeconfig {}: {e}", path.display())).with_hint(
            "make the directory writable, or set DEVSTACK_HOME / KUBECONFIG to a writable location",
        )
    })
}

/// Writes `contents` to `path` with mode 0600, atomically.
pub fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let unwritable = |e: std::io::Error| {
        Error::user(format!("cannot write kubeconfig {}: {e}", path.display())).with_hint(
            "make the directory writable, or set DEVSTACK_HOME / KUBECONFIG to a writable location",
        )
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    // One temporary file per process: parallel runs never share one.
    let tmp = dir.join(format!(
        ".{}.devstack-tmp-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("kubeconfig"),
        std::process::id()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(unwritable)?;
    file.write_all(contents.as_bytes()).map_err(unwritable)?;
    file.sync_all().map_err(unwritable)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        unwritable(e)
    })
}

fn upsert(list: &mut Value, entry: Value) {
    let name = entry["name"].clone();
    let items = list.as_array_mut().expect("kubeconfig lists are arrays");
    match items.iter_mut().find(|i| i["name"] == name) {
        Some(existing) => *existing = entry,
        None => items.push(entry),
    }
}

/// Adds (or replaces) the stack's cluster, user and context in `target`,
/// leaving every other entry alone. Sets current-context only when asked.
pub fn merge_into(target: &str, stack_config: &str, switch_context: bool) -> Result<String, Error> {
    let mut merged = parse(target, "your kubeconfig")?;
    let ours = parse(stack_config, "the stack's kubeconfig")?;
    for key in ["clusters", "users", "contexts"] {
        if !merged.get(key).is_some_and(Value::is_array) {
            merged[key] = json!([]);
        }
        for entry in ours[key].as_array().into_iter().flatten() {
            upsert(&mut merged[key], entry.clone());
        }
    }
    if merged.get("apiVersion").is_none() {
        merged["apiVersion"] = json!("v1");
        merged["kind"] = json!("Config");
    }
    let no_current = merged
        .get("current-context")
        .is_none_or(|c| c.as_str().unwrap_or("").is_empty());
    if (switch_context || no_current)
        && let Some(name) = ours["current-context"].as_str()
    {
        merged["current-context"] = json!(name);
    }
    render(&merged)
}

/// Removes entries named `name`; clears current-context if it pointed there.
pub fn remove_from(target: &str, name: &str) -> Result<(String, bool), Error> {
    let mut config = parse(target, "your kubeconfig")?;
    let mut removed = false;
    for key in ["clusters", "users", "contexts"] {
        if let Some(items) = config.get_mut(key).and_then(Value::as_array_mut) {
            let before = items.len();
            items.retain(|i| i["name"] != json!(name));
            removed |= items.len() != before;
        }
    }
    if config.get("current-context").and_then(Value::as_str) == Some(name) {
        config["current-context"] = json!("");
    }
    Ok((render(&config)?, removed))
}

/// Merges into the user's kubeconfig file.
pub fn merge_into_user(
    path: &Path,
    stack_config: &str,
    switch_context: bool,
) -> Result<PathBuf, Error> {
    merge_into_file(path, stack_config, switch_context)?;
    Ok(path.to_path_buf())
}

fn merge_into_file(path: &Path, stack_config: &str, switch_context: bool) -> Result<(), Error> {
    with_file_locked(path, || {
        let current = std::fs::read_to_string(path).unwrap_or_default();
        let merged = merge_into(&current, stack_config, switch_context)?;
        write_private(path, &merged)
    })
}

/// Runs a read-modify-write of `path` while holding an exclusive `flock`
/// on a lock file beside it: stacks brought up in parallel all merge into
/// the one user kubeconfig, and none may lose another's entries.
fn with_file_locked<T>(path: &Path, change: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    use std::os::fd::AsRawFd;
    let dir = path.parent().unwrap_or(Path::new("."));
    let lock_path = dir.join(format!(
        ".{}.devstack-lock",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("kubeconfig")
    ));
    let lock = std::fs::create_dir_all(dir)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
        })
        .map_err(|e| {
            Error::user(format!("cannot lock kubeconfig {}: {e}", path.display()))
                .with_hint("make the directory writable, or set KUBECONFIG to a writable location")
        })?;
    // SAFETY: flock on a descriptor this function owns; the kernel releases
    // it when `lock` is closed, also if this process dies.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(Error::internal(format!(
            "cannot lock {}: {}",
            lock_path.display(),
            std::io::Error::last_os_error()
        )));
    }
    let result = change();
    drop(lock);
    result
}

/// Removes the stack's entries from the user's kubeconfig file, if present.
pub fn remove_from_user(path: &Path, name: &str) -> Result<bool, Error> {
    if !path.exists() {
        return Ok(false);
    }
    with_file_locked(path, || {
        let Ok(current) = std::fs::read_to_string(path) else {
            return Ok(false);
        };
        let (rest, removed) = remove_from(&current, name)?;
        if removed {
            write_private(path, &rest)?;
        }
        Ok(removed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const K3S: &str = "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
users:
- name: default
  user:
    client-certificate-data: Q0VSVA==
";

    #[test]
    fn the_writability_check_leaves_no_directory_it_made() {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join("stacks/dev/kubeconfig");
        check_writable(&path).unwrap();
        assert!(!home.path().join("stacks").exists());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        check_writable(&path).unwrap();
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            0
        );
    }

    #[test]
    fn renames_and_repoints() {
        let renamed = rename_context(K3S, "devstack-x", Some("https://127.0.0.1:40000")).unwrap();
        let v: Value = serde_saphyr::from_str(&renamed).unwrap();
        assert_eq!(v["clusters"][0]["name"], "devstack-x");
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:40000"
        );
        assert_eq!(v["contexts"][0]["context"]["user"], "devstack-x");
        assert_eq!(v["current-context"], "devstack-x");
        assert_eq!(v["users"][0]["user"]["client-certificate-data"], "Q0VSVA==");
    }

    #[test]
    fn merge_keeps_other_entries_and_current_context() {
        let ours = rename_context(K3S, "devstack-x", None).unwrap();
        let theirs = rename_context(K3S, "work", None).unwrap();
        let merged = merge_into(&theirs, &ours, false).unwrap();
        let v: Value = serde_saphyr::from_str(&merged).unwrap();
        assert_eq!(v["contexts"].as_array().unwrap().len(), 2);
        assert_eq!(v["current-context"], "work");
        let switched: Value =
            serde_saphyr::from_str(&merge_into(&theirs, &ours, true).unwrap()).unwrap();
        assert_eq!(switched["current-context"], "devstack-x");
        // Merging twice replaces rather than duplicates.
        let twice: Value =
            serde_saphyr::from_str(&merge_into(&merged, &ours, false).unwrap()).unwrap();
        assert_eq!(twice["users"].as_array().unwrap().len(), 2);

        let (rest, removed) =
            remove_from(&merge_into(&theirs, &ours, true).unwrap(), "devstack-x").unwrap();
        assert!(removed);
        let v: Value = serde_saphyr::from_str(&rest).unwrap();
        assert_eq!(v["contexts"].as_array().unwrap().len(), 1);
        assert_eq!(v["contexts"][0]["name"], "work");
        assert_eq!(v["current-context"], "");
    }

    #[test]
    fn merge_into_an_empty_file_makes_ours_current() {
        let ours = rename_context(K3S, "devstack-x", None).unwrap();
        let v: Value = serde_saphyr::from_str(&merge_into("", &ours, false).unwrap()).unwrap();
        assert_eq!(v["current-context"], "devstack-x");
    }

    #[test]
    fn private_files_are_0600_and_unwritable_paths_are_user_errors() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/kubeconfig");
        write_private(&path, "x").unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let err = write_private(Path::new("/proc/devstack-cannot/kubeconfig"), "x").unwrap_err();
        assert_eq!(err.kind(), crate::Kind::User);
        assert!(err.hint().is_some());
    }

    #[test]
    fn stacks_merging_at_once_keep_every_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let ours = rename_context(K3S, &format!("devstack-s{i}"), None).unwrap();
                    merge_into_file(&path, &ours, false).unwrap();
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let merged = std::fs::read_to_string(&path).unwrap();
        for i in 0..8 {
            assert!(
                merged.contains(&format!("name: devstack-s{i}")),
                "s{i} lost:\n{merged}"
            );
        }
    }
}
