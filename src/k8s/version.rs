//! The Kubernetes version a stack's API server reports, and whether the
//! stack's components support it.

use std::time::Duration;

use serde::Serialize;

use crate::profile::Settings;

#[derive(Debug, Clone, Serialize)]
pub struct KubernetesCheck {
    pub version: String,
    pub warnings: Vec<String>,
}

/// `None` when the stack's API server does not answer (no cluster yet).
pub async fn check(settings: &Settings) -> Option<KubernetesCheck> {
    let client = super::stack_client(settings).await.ok()?;
    let info = tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
        .await
        .ok()?
        .ok()?;
    let warnings = crate::versions::parse_kube_version(&info.git_version)
        .map(crate::versions::kubernetes_warnings)
        .unwrap_or_default();
    Some(KubernetesCheck {
        version: info.git_version,
        warnings,
    })
}
