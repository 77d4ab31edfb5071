//! A stopped stack: its containers are all there and none runs, after
//! `devstack stop` or a machine restart. Its status says so in one row per
//! container, rather than as a cluster whose API does not answer.

use std::sync::Arc;

use serde::Serialize;

use super::{Health, StatusReport, StatusRow};
use crate::docker::models::{ContainerSummary, ContainerSummaryStateEnum};
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::{Provider, Settings};

/// What a stopped stack's rows tell the user to run.
pub const START_HINT: &str = "`devstack start` starts it again";

/// One of the stack's containers, as the engine lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StackContainer {
    pub name: String,
    /// `localstack`, `registry`, or `node` (a K3s or Kind node, Kind's load
    /// balancer).
    pub component: &'static str,
    /// Running, paused or restarting: it holds memory.
    pub running: bool,
    /// The engine's words for its state: `Exited (0) 2 minutes ago`.
    pub status: String,
}

impl StackContainer {
    fn of(summary: &ContainerSummary) -> Self {
        let role = summary
            .labels
            .as_ref()
            .and_then(|l| l.get(docker::LABEL_ROLE));
        StackContainer {
            name: docker::container_name_of(summary),
            component: match role.map(String::as_str) {
                Some(crate::localstack::ROLE) => "localstack",
                Some(crate::registry::ROLE) => "registry",
                _ => "node",
            },
            running: matches!(
                summary.state,
                Some(
                    ContainerSummaryStateEnum::RUNNING
                        | ContainerSummaryStateEnum::PAUSED
                        | ContainerSummaryStateEnum::RESTARTING
                )
            ),
            status: summary.status.clone().unwrap_or_default(),
        }
    }
}

/// Every container of the stack, running or not: those carrying devstack's
/// labels (LocalStack, K3s nodes), and the nodes of its Kind cluster, found
/// by kind's label when the cluster is the stack's own (not a kind cluster
/// of the same name devstack did not create).
pub async fn stack_containers(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
) -> Result<Vec<StackContainer>, Error> {
    let labelled =
        docker::find_containers(engine.as_ref(), docker::stack_filter(Some(&settings.name)))
            .await?;
    let mut found: Vec<StackContainer> = labelled.iter().map(StackContainer::of).collect();
    let kind_nodes = kind_nodes(engine.as_ref(), settings).await?;
    if !kind_nodes.is_empty() {
        let mut on_kind = settings.clone();
        on_kind.cluster.provider = Provider::Kind;
        let kind = crate::cluster::provider_for(engine.clone(), &on_kind);
        if kind.exists(&on_kind).await? {
            found.extend(kind_nodes.iter().map(StackContainer::of));
        }
    }
    Ok(found)
}

async fn kind_nodes(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<Vec<ContainerSummary>, Error> {
    use crate::cluster::kind::{LABEL_CLUSTER, cluster_name};
    let label = format!("{LABEL_CLUSTER}={}", cluster_name(settings));
    docker::find_containers(engine, vec![label]).await
}

/// The status of a stack whose containers are all stopped: the cluster, then
/// each container, saying so. `None` when one runs, when it has none, or
/// when no engine answers (the usual rows then tell what is there).
pub(super) async fn report(settings: &Settings) -> Option<StatusReport> {
    if crate::cluster::on_existing_cluster(settings) {
        return None;
    }
    let engine = docker::connect().await.ok()?;
    let containers = stack_containers(&engine, settings).await.ok()?;
    if containers.is_empty() || containers.iter().any(|c| c.running) {
        return None;
    }
    Some(stopped_report(settings, &containers))
}

fn stopped_report(settings: &Settings, containers: &[StackContainer]) -> StatusReport {
    let cluster = StatusRow::new(
        "cluster",
        settings.kube_context(),
        Health::Unhealthy,
        "stopped",
    )
    .detail(format!(
        "{}: every container of the stack is stopped",
        settings.cluster.provider.as_str()
    ))
    .hint(START_HINT);
    let mut rows = vec![cluster];
    // Nodes first, as the running stack's rows list them.
    let (beside, nodes): (Vec<_>, Vec<_>) = containers.iter().partition(|c| c.component != "node");
    for container in nodes.into_iter().chain(beside) {
        rows.push(
            StatusRow::new(
                container.component,
                &container.name,
                Health::Unhealthy,
                "stopped",
            )
            .detail(&container.status)
            .hint(START_HINT),
        );
    }
    StatusReport {
        stack: settings.name.clone(),
        healthy: false,
        settled: false,
        ports: crate::state::StackRecord::load(settings).ports,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::fake::{FakeContainer, FakeEngine};

    fn settings() -> Settings {
        let mut settings = crate::profile::select(Some("ci"), &Default::default()).unwrap();
        settings.name = "t".into();
        settings
    }

    fn container(labels: &[(&str, &str)], running: bool, binds: &[String]) -> FakeContainer {
        FakeContainer {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            running,
            binds: binds.to_vec(),
            ..Default::default()
        }
    }

    fn kind_node(binds: &[String]) -> FakeContainer {
        let labels = [
            (crate::cluster::kind::LABEL_CLUSTER, "devstack-t"),
            ("io.x-k8s.kind.role", "control-plane"),
        ];
        container(&labels, false, binds)
    }

    async fn found(fake: FakeEngine) -> Vec<(String, &'static str, bool)> {
        let engine: Arc<dyn Engine> = Arc::new(fake);
        let mut found = stack_containers(&engine, &settings()).await.unwrap();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
            .into_iter()
            .map(|c| (c.name, c.component, c.running))
            .collect()
    }

    #[tokio::test]
    async fn the_stack_s_containers_are_its_labelled_ones_and_its_own_kind_nodes() {
        let labelled = |stack: &str, role: &str, running: bool| {
            let labels = docker::labels(stack, role);
            let pairs: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            container(&pairs, running, &[])
        };
        let fake = FakeEngine::default();
        fake.with(|s| {
            let ours = labelled("t", crate::localstack::ROLE, false);
            s.containers.insert("devstack-t-localstack".into(), ours);
            let node = labelled("t", "k3s-server", true);
            s.containers.insert("devstack-t-server-0".into(), node);
            let other = labelled("other", "k3s-server", false);
            s.containers.insert("devstack-other-server-0".into(), other);
            // A kind cluster named like the stack that devstack did not create.
            let foreign = kind_node(&["/somewhere:/var".to_string()]);
            s.containers
                .insert("devstack-t-control-plane".into(), foreign);
        });
        let ours = [
            ("devstack-t-localstack".to_string(), "localstack", false),
            ("devstack-t-server-0".to_string(), "node", true),
        ];
        assert_eq!(found(fake).await, ours);

        let fake = FakeEngine::default();
        let marker = crate::cluster::kind::owner_marker_dir(&settings());
        let owned = kind_node(&[format!("{}:/etc/devstack", marker.display())]);
        fake.with(|s| {
            s.containers
                .insert("devstack-t-control-plane".into(), owned)
        });
        assert_eq!(
            found(fake).await,
            [("devstack-t-control-plane".to_string(), "node", false)]
        );
    }

    #[test]
    fn a_stopped_stack_s_rows_say_stopped_and_how_to_start_it() {
        let container = |name: &str, component| StackContainer {
            name: name.into(),
            component,
            running: false,
            status: "Exited (0) 2 minutes ago".into(),
        };
        let report = stopped_report(
            &settings(),
            &[
                container("devstack-t-localstack", "localstack"),
                container("devstack-t-server-0", "node"),
            ],
        );
        let rows: Vec<(&str, &str, &str)> = report
            .rows
            .iter()
            .map(|r| (r.component.as_str(), r.name.as_str(), r.state.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("cluster", "devstack-t", "stopped"),
                ("node", "devstack-t-server-0", "stopped"),
                ("localstack", "devstack-t-localstack", "stopped"),
            ]
        );
        let err = report.to_error().expect("a stopped stack is not healthy");
        assert_eq!(err.kind(), crate::error::Kind::Unhealthy);
        assert!(
            err.message()
                .contains("stack `t` is not healthy: cluster devstack-t stopped (and 2 more)"),
            "{}",
            err.message()
        );
        assert_eq!(err.hint(), Some(START_HINT));
    }
}
