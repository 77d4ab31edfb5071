//! Deleting a kind cluster: its node containers removed through the
//! engine, as `kind delete cluster` removes them, until no node of the
//! stack's own is left, with the nodes' frozen cgroups thawed first.
//!
//! devstack does what `kind delete cluster` does rather than running kind:
//! kind (`pkg/cluster/internal/delete`, `providers/docker`) lists the
//! containers labelled `io.x-k8s.kind.cluster=<name>`, removes its entry
//! from the kubeconfig it is given and runs `docker rm -f -v` on them. The
//! listing is [`find_cluster`]'s, the removal [`docker::remove_container`]'s
//! (forced, anonymous volumes included: the nodes' `/var`), and devstack
//! never lets kind write a kubeconfig but a throw-away one (its own merged
//! context is [`crate::cluster::delete`]'s business). So `down` and rollback
//! need neither the kind binary nor the Docker CLI: a stack made with a
//! bundle's or a downloaded kind comes down from a shell that has neither,
//! offline. kind's shared `kind` network stays, as kind leaves it (other
//! kind clusters use it); the stack's own network, which the nodes also
//! joined, is removed by the caller once unused.

use std::time::Duration;

use super::cli::tail_lines;
use super::nodes::{Found, KindNode, find_cluster, foreign_cluster};
use super::{LABEL_CLUSTER, STDERR_TAIL_LINES, cluster_name};
use crate::docker::{self, Engine, exec_in};
use crate::error::Error;
use crate::profile::{HumanDuration, Settings};

/// Deletes the stack's kind cluster. Only kind's own containers are
/// touched; the stack network and LocalStack are other modules' business. A
/// cluster of the same name devstack did not create is left alone, with a
/// warning.
pub async fn delete(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    match find_cluster(engine, settings).await? {
        Found::None => Ok(false),
        Found::Foreign => {
            tracing::warn!("{}; left untouched", foreign_cluster(settings).message());
            Ok(false)
        }
        Found::Ours(_) => {
            // No kubeconfig: its `up` was stopped during `kind create`, nodes may still come.
            let in_flight = !crate::state::kubeconfig_path(settings).exists();
            delete_ours(engine, settings, in_flight).await
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
    use crate::docker::models::{ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum};
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

/// After a removal that failed: thaws, from the host, the nodes left (a
/// frozen process in them cannot die), for the next round to remove.
/// `failed` when they cannot be thawed.
async fn thaw_what_was_left(
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
                "could not remove {} ({}); thawed from the host: {}",
                node_names(&left),
                failed.message(),
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

fn node_names(nodes: &[KindNode]) -> String {
    nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Force-removes `nodes` with their anonymous volumes (`docker rm -f -v`,
/// kind's `DeleteNodes`), all at once; the first failure, if any.
async fn remove_nodes(engine: &dyn Engine, nodes: &[KindNode]) -> Result<(), Error> {
    let removed = futures::future::join_all(
        nodes
            .iter()
            .map(|n| docker::remove_container(engine, &n.name)),
    )
    .await;
    removed
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

/// Removes the nodes until no node of the stack's own cluster is left.
/// After a stopped create (`in_flight`), nodes can still appear once the
/// first removal is done, so it also waits for a quiet spell.
async fn delete_ours(
    engine: &dyn Engine,
    settings: &Settings,
    in_flight: bool,
) -> Result<bool, Error> {
    let name = cluster_name(settings);
    let started = std::time::Instant::now();
    let mut deleted = false;
    let mut quiet_since = None;
    let mut last_failure: Option<Error> = None;
    loop {
        match find_cluster(engine, settings).await? {
            Found::Ours(nodes) => {
                if started.elapsed() >= ROLLBACK_PATIENCE {
                    let why = last_failure
                        .map(|e| format!(" (last: {})", e.message()))
                        .unwrap_or_default();
                    return Err(Error::internal(format!(
                        "kind cluster `{name}` still has nodes after removing them for {}: {}{why}",
                        HumanDuration(ROLLBACK_PATIENCE),
                        node_names(&nodes)
                    ))
                    .with_hint(format!(
                        "once Docker settles, run `down` again, or remove them by hand: \
                         `docker rm -f -v $(docker ps -aq --filter label={LABEL_CLUSTER}={name})`"
                    )));
                }
                if deleted {
                    // Nodes the first round missed (not listed yet, or still
                    // being created), or that could not die: no tight loop.
                    tokio::time::sleep(Duration::from_millis(250)).await;
                } else {
                    futures::future::join_all(
                        nodes
                            .iter()
                            .filter(|n| n.is_running())
                            .map(|n| quiesce_for_deletion(engine, &n.name)),
                    )
                    .await;
                }
                if let Err(failed) = remove_nodes(engine, &nodes).await {
                    let message = failed.message().to_string();
                    thaw_what_was_left(engine, settings, failed).await?;
                    last_failure = Some(Error::internal(message));
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
