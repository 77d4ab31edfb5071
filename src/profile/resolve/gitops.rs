//! The `flux`, `eso` and `gitops` sections: what delivers the External
//! Secrets stack, and where its manifests come from.

use super::Resolver;
use crate::profile::duration::HumanDuration;
use crate::profile::schema::{
    EsoInstall, EsoSpec, FluxSpec, GitopsLayout, GitopsSourceKind, GitopsSpec, Provider,
};
use crate::profile::settings::{
    EsoSettings, FLUX_COMPONENTS, FluxSettings, GitopsSettings, REQUIRED_FLUX_COMPONENTS,
};
use crate::versions;

pub(super) fn resolve_flux(r: &mut Resolver, spec: Option<FluxSpec>) -> FluxSettings {
    let components: Vec<String> = spec
        .as_ref()
        .and_then(|f| f.components.clone())
        .unwrap_or_else(|| {
            REQUIRED_FLUX_COMPONENTS
                .iter()
                .map(|s| s.to_string())
                .collect()
        });
    for (index, component) in components.iter().enumerate() {
        if !FLUX_COMPONENTS.contains(&component.as_str()) {
            let known: Vec<String> = FLUX_COMPONENTS.iter().map(|s| s.to_string()).collect();
            let hint = match crate::profile::load::closest_match(component, &known) {
                Some(c) => format!("did you mean `{c}`? known: {}", FLUX_COMPONENTS.join(", ")),
                None => format!("known components: {}", FLUX_COMPONENTS.join(", ")),
            };
            r.problems.at_path(
                &format!("flux.components[{index}]"),
                format!("unknown Flux component `{component}`"),
                Some(hint),
            );
        }
    }
    for required in REQUIRED_FLUX_COMPONENTS {
        if !components.iter().any(|c| c == required) {
            r.problems.at_path(
                "flux.components",
                format!(
                    "`flux.components` lacks `{required}`, which delivers the External Secrets stack"
                ),
                Some(format!("add `{required}` to flux.components")),
            );
        }
    }
    FluxSettings {
        version: spec
            .and_then(|f| f.version)
            .unwrap_or_else(|| versions::FLUX_VERSION.to_string()),
        components,
    }
}

pub(super) fn resolve_eso(
    r: &mut Resolver,
    spec: Option<EsoSpec>,
    provider: Provider,
) -> EsoSettings {
    let install = spec.as_ref().and_then(|e| e.install).unwrap_or_default();
    if install == EsoInstall::Never && provider != Provider::Existing {
        r.problems.at_path(
            "eso.install",
            format!("`eso.install: never` uses an External Secrets Operator the cluster already runs, and the {} cluster devstack creates has none", provider.as_str()),
            Some("remove `eso.install`, or use `cluster.provider: existing` with a cluster that runs ESO".into()),
        );
    }
    EsoSettings {
        install,
        auth: spec.as_ref().and_then(|e| e.auth).unwrap_or_default(),
        cluster: None,
        chart_version: spec
            .as_ref()
            .and_then(|e| e.chart_version.clone())
            .unwrap_or_else(|| versions::ESO_CHART_VERSION.to_string()),
        values: spec.and_then(|e| e.values).unwrap_or_default(),
    }
}

/// The GitOps source; `eso` is checked against the manifests devstack ships.
pub(super) fn resolve_gitops(
    r: &mut Resolver,
    mut spec: Option<GitopsSpec>,
    eso: &EsoSettings,
) -> GitopsSettings {
    let source = spec
        .as_ref()
        .and_then(|g| g.source)
        .unwrap_or(GitopsSourceKind::Local);
    let apps = spec
        .as_mut()
        .map(|g| std::mem::take(&mut g.apps))
        .unwrap_or_default();
    let git = spec.as_ref().and_then(|g| g.git.as_ref());
    if source == GitopsSourceKind::Git && git.is_none() {
        r.problems.at_path(
            "gitops.source",
            "`gitops.source: git` needs `gitops.git.url`".into(),
            Some("add gitops.git with url, branch and path, or use `gitops.source: local`".into()),
        );
    }
    let mut gitops = GitopsSettings {
        source,
        path: spec
            .as_ref()
            .and_then(|g| g.path.as_deref())
            .map(|p| r.relative(p)),
        git_url: git.map(|g| g.url.clone()),
        git_branch: git
            .and_then(|g| g.branch.clone())
            .unwrap_or_else(|| "main".into()),
        git_path: git
            .and_then(|g| g.path.clone())
            .unwrap_or_else(|| "./manifests/external-secrets".into()),
        layout: spec
            .as_ref()
            .and_then(|g| g.layout)
            .unwrap_or(GitopsLayout::Chain),
        interval: spec
            .as_ref()
            .and_then(|g| g.interval)
            .unwrap_or(HumanDuration::secs(600)),
        apps: Vec::new(),
    };
    super::refuse_zero(r, "gitops.interval", gitops.interval, "10m");
    gitops.apps = super::apps::resolve(r, apps, source);
    if gitops.source == GitopsSourceKind::Local && gitops.path.is_none() {
        for (key, why) in renamed_or_dropped_eso_workloads(&eso.values) {
            r.problems.at_path(
                &format!("eso.values.{key}"),
                format!("`eso.values.{key}` {why}, which devstack's operator level health-checks by name"),
                Some(format!(
                    "remove `{key}` from eso.values, or deliver your own manifests with `gitops.path`"
                )),
            );
        }
    }
    gitops
}

/// Chart values that rename or drop the ESO chart's Deployments (release
/// `external-secrets`: `external-secrets`, `-webhook`, `-cert-controller`),
/// each with what it does to them. The shipped operator level is Ready only
/// once those Deployments are Available, so with such a value it never is.
pub fn renamed_or_dropped_eso_workloads(
    values: &serde_json::Map<String, serde_json::Value>,
) -> Vec<(&'static str, &'static str)> {
    use serde_json::Value;
    let at = |path: &[&str]| {
        let (first, rest) = path.split_first()?;
        rest.iter()
            .try_fold(values.get(*first)?, |value, key| value.get(*key))
    };
    let set = |path: &[&str]| at(path).is_some_and(|v| !v.is_null() && v != "");
    let is = |path: &[&str], value: bool| at(path).and_then(Value::as_bool) == Some(value);
    let mut found = Vec::new();
    if set(&["fullnameOverride"]) {
        found.push(("fullnameOverride", "renames the chart's Deployments"));
    }
    if set(&["nameOverride"]) {
        found.push(("nameOverride", "renames the chart's Deployments"));
    }
    if is(&["createOperator"], false) {
        found.push(("createOperator", "drops the operator's Deployment"));
    }
    if is(&["webhook", "create"], false) {
        found.push(("webhook.create", "drops the webhook's Deployment"));
    }
    if is(&["certController", "create"], false) {
        found.push((
            "certController.create",
            "drops the cert-controller's Deployment",
        ));
    }
    if is(&["webhook", "certManager", "enabled"], true) {
        found.push((
            "webhook.certManager.enabled",
            "drops the cert-controller's Deployment",
        ));
    }
    found
}
