//! Deleting a kind cluster: `kind delete cluster` until no node of the
//! stack's own is left, with the nodes' frozen cgroups thawed first.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use super::cli::{find_kind, kind_stdout, require_docker_cli, scratch_dir, tail_lines};
use super::nodes::{Found, find_cluster, foreign_cluster};
use super::{INSTALL_HINT, LABEL_CLUSTER, STDERR_TAIL_LINES, cluster_name};
use crate::docker::{Engine, exec_in};
use crate::error::Error;
use crate::profile::{HumanDuration, Settings};

const DELETE_TIMEOUT: Duration = Duration::from_secs(180);

/// `kind delete cluster`, pointed at a throw-away kubeconfig.
async fn delete_cluster(kind: &Path, name: &str) -> Result<(), Error> {
    let scratch = scratch_dir()?;
    let kubeconfig = scratch.path().join("kubeconfig");
    let args = [
        OsStr::new("delete"),
        OsStr::new("cluster"),
        OsStr::new("--name"),
        OsStr::new(name),
        OsStr::new("--kubeconfig"),
        kubeconfig.as_os_str(),
    ];
    kind_stdout(kind, &args, DELETE_TIMEOUT).await.map(drop)
}

/// Deletes the stack's kind cluster. Only kind's own containers are
/// touched; the stack network and LocalStack are other modules' business. A
/// cluster of the same name devstack did not create is left alone, with a
/// warning.
pub async fn down(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    match find_cluster(engine, settings).await? {
        Found::None => Ok(false),
        Found::Foreign => {
            tracing::warn!("{}; left untouched", foreign_cluster(settings).message());
            Ok(false)
        }
        Found::Ours(_) => {
            let name = cluster_name(settings);
            let kind = find_kind(settings)
                .await
                .map_err(|e| {
                    e.context(format!(
                        "kind cluster `{name}` exists but cannot be deleted"
                    ))
                    .with_hint(format!(
                        "{INSTALL_HINT}; or remove its nodes by hand: \
                             `docker rm -f $(docker ps -aq --filter label={LABEL_CLUSTER}={name})`"
                    ))
                })?
                .path;
            require_docker_cli()?;
            // No kubeconfig: its `up` was stopped during `kind create`, nodes may still come.
            let in_flight = !crate::state::kubeconfig_path(settings).exists();
            delete_ours(engine, settings, &kind, in_flight).await
        }
    }
}

/// Readies a node for deletion: stops the kubelet, lets runc calls under way
/// end, then thaws every frozen cgroup, printing each. On cgroup v1 a `runc
/// create` killed mid-way leaves `runc init` frozen, and a frozen process
/// keeps `docker rm -f` from removing the node. Runs before the delete: a
/// dying node can no longer be entered.
const QUIESCE_NODE: &str = r#"if command -v systemctl >/dev/null 2>&1; then
  timeout 5 systemctl stop kubelet >/dev/null 2>&1 || true
fi
i=0
while [ $i -lt 30 ]; do
  busy=
  for c in /proc/[0-9]*/comm; do
    [ "$(cat "$c" 2>/dev/null)" = runc ] && busy=1 && break
  done
  [ -z "$busy" ] && break
  sleep 0.1
  i=$((i + 1))
done
thaw_below /sys/fs/cgroup
"#;

/// A shell function that thaws every frozen cgroup below a directory (cgroup
/// v1's `freezer.state`, v2's `cgroup.freeze`), printing each. A thawed node
/// may die at once and its cgroups vanish under the loops: their complaints
/// are dropped.
const THAW_BELOW: &str = r#"thaw_below() {
  for f in $(find "$1" -name freezer.state 2>/dev/null); do
    case $(cat "$f" 2>/dev/null) in
      FROZEN|FREEZING) echo THAWED 2>/dev/null >"$f" && echo "$f" ;;
    esac
  done
  for f in $(find "$1" -name cgroup.freeze 2>/dev/null); do
    [ "$(cat "$f" 2>/dev/null)" = 1 ] && echo 0 2>/dev/null >"$f" && echo "$f"
  done
  true
}
"#;

/// Best effort: a node that cannot run it is deleted as it is.
async fn quiesce_for_deletion(engine: &dyn Engine, node: &str) {
    let script = format!("{THAW_BELOW}{QUIESCE_NODE}");
    match exec_in(engine, node, &["sh", "-c", &script]).await {
        Ok((0, thawed)) if !thawed.trim().is_empty() => tracing::info!(
            "node {node}: thawed frozen cgroup(s) so that it can be removed: {}",
            thawed.split_whitespace().collect::<Vec<_>>().join(", ")
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!("node {node}: readying it for deletion failed: {e}"),
    }
}

/// Thaws, from the host's side, the frozen cgroups of the nodes named (by
/// container id): what [`QUIESCE_NODE`] cannot reach once a node is dying.
/// A privileged container of the node image (present, since the nodes run
/// it) sees the host's cgroup trees; the node's own tree is the directory
/// whose name holds its id (cgroupfs `docker/ID`, systemd `docker-ID.scope`).
const THAW_FROM_HOST: &str = r#"for id in "$@"; do
  for d in $(find /sys/fs/cgroup -type d -name "*$id*" 2>/dev/null); do
    thaw_below "$d"
  done
done
"#;

/// How long the host-side thaw may take, its helper container included.
const THAW_FROM_HOST_LIMIT: Duration = Duration::from_secs(30);

/// Runs [`THAW_FROM_HOST`] for `node_ids` in a short-lived helper container,
/// removed afterwards; its output (the cgroups thawed) on success.
async fn thaw_from_host(
    engine: &dyn Engine,
    settings: &Settings,
    image: &str,
    node_ids: &[String],
) -> Result<String, Error> {
    use bollard::models::{ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum};
    let helper = format!("{}-thaw", cluster_name(settings));
    let _ = engine.remove_container(&helper).await;
    let mut cmd = vec![
        "-c".to_string(),
        format!("{THAW_BELOW}{THAW_FROM_HOST}"),
        "thaw".to_string(),
    ];
    cmd.extend(node_ids.iter().cloned());
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec!["sh".into()]),
        cmd: Some(cmd),
        labels: Some(crate::docker::labels(&settings.name, "kind-thaw")),
        host_config: Some(HostConfig {
            privileged: Some(true),
            cgroupns_mode: Some(HostConfigCgroupnsModeEnum::HOST),
            binds: Some(vec!["/sys/fs/cgroup:/sys/fs/cgroup:rw".into()]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let run = async {
        engine
            .create_container(&helper, body)
            .await
            .map_err(|e| crate::docker::engine_error(format!("create container {helper}"), e))?;
        engine
            .start_container(&helper)
            .await
            .map_err(|e| crate::docker::engine_error(format!("start container {helper}"), e))?;
        loop {
            let state = engine
                .inspect_container(&helper)
                .await
                .map_err(|e| crate::docker::engine_error(format!("inspect {helper}"), e))?
                .state
                .unwrap_or_default();
            if state.running != Some(true) {
                let output = engine.logs_tail(&helper, 200).await;
                return match state.exit_code {
                    Some(0) => Ok(output),
                    code => Err(Error::internal(format!(
                        "{helper} exited with {code:?}: {}",
                        tail_lines(&output, STDERR_TAIL_LINES)
                    ))),
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let outcome = tokio::time::timeout(THAW_FROM_HOST_LIMIT, run)
        .await
        .unwrap_or_else(|_| {
            Err(Error::timeout(format!(
                "{helper} did not finish within {}",
                HumanDuration(THAW_FROM_HOST_LIMIT)
            )))
        });
    let _ = engine.remove_container(&helper).await;
    outcome
}

/// How long a rollback keeps deleting the nodes of a `kind create` it
/// stopped: the engine finishes a container whose `docker run` was killed
/// mid-request, seconds later on a loaded machine.
const ROLLBACK_PATIENCE: Duration = Duration::from_secs(90);
/// No node seen for this long: no creation is still in flight.
const ROLLBACK_QUIET: Duration = Duration::from_secs(3);

/// After a failed `kind delete cluster`: thaws, from the host, the nodes it
/// left (a frozen process in them cannot die), for the next round to remove.
/// `failed` when they cannot be thawed.
async fn thaw_what_kind_left(
    engine: &dyn Engine,
    settings: &Settings,
    failed: Error,
) -> Result<(), Error> {
    let left = match find_cluster(engine, settings).await? {
        Found::Ours(left) => left,
        _ => Vec::new(),
    };
    if left.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = left.iter().map(|n| n.id.clone()).collect();
    match thaw_from_host(engine, settings, &left[0].image, &ids).await {
        Ok(thawed) => {
            tracing::info!(
                "kind could not remove {}; thawed from the host: {}",
                left.iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                thawed.split_whitespace().collect::<Vec<_>>().join(", ")
            );
            Ok(())
        }
        Err(e) => {
            tracing::debug!("thawing the nodes from the host: {e}");
            Err(failed)
        }
    }
}

/// `kind delete cluster` until no node of the stack's own cluster is left.
/// After a stopped create (`in_flight`), nodes can still appear once the
/// first delete is done, so it also waits for a quiet spell.
async fn delete_ours(
    engine: &dyn Engine,
    settings: &Settings,
    kind: &Path,
    in_flight: bool,
) -> Result<bool, Error> {
    let name = cluster_name(settings);
    let started = std::time::Instant::now();
    let mut deleted = false;
    let mut quiet_since = None;
    loop {
        match find_cluster(engine, settings).await? {
            Found::Ours(nodes) => {
                if started.elapsed() >= ROLLBACK_PATIENCE {
                    return Err(Error::internal(format!(
                        "kind cluster `{name}` still has nodes after deleting it for {}: {}",
                        HumanDuration(ROLLBACK_PATIENCE),
                        nodes
                            .iter()
                            .map(|n| n.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                    .with_hint(format!(
                        "`kind delete cluster --name {name}` once Docker settles"
                    )));
                }
                if deleted {
                    // Nodes kind's delete missed (not listed yet, or still being created).
                    for node in &nodes {
                        crate::docker::remove_container(engine, &node.name).await?;
                    }
                    // The engine may still be creating them: no tight loop.
                    tokio::time::sleep(Duration::from_millis(250)).await;
                } else {
                    futures::future::join_all(
                        nodes
                            .iter()
                            .filter(|n| n.is_running())
                            .map(|n| quiesce_for_deletion(engine, &n.name)),
                    )
                    .await;
                    if let Err(failed) = delete_cluster(kind, &name).await {
                        thaw_what_kind_left(engine, settings, failed).await?;
                    }
                }
                deleted = true;
                quiet_since = None;
            }
            Found::None | Found::Foreign if !in_flight => return Ok(deleted),
            Found::None | Found::Foreign => {
                let since = *quiet_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= ROLLBACK_QUIET {
                    return Ok(deleted);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}
