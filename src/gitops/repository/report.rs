//! The facts as `devstack facts` prints them.

use super::{REDACTED, publishes_secret};
use crate::error::Error;
use crate::profile::Settings;

/// One fact as `devstack facts` shows it: never a sensitive value.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FactRow {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub sensitive: bool,
    /// `devstack`, `profile facts.values`, `env DEV_DOMAIN`,
    /// `env/dev.env:3`, `infra/outputs.json output app_bucket`.
    pub source: String,
}

/// Where the facts are published on the cluster, for `devstack facts`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FactsReport {
    pub stack: String,
    pub config_maps: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub facts: Vec<FactRow>,
}

/// The resolved facts of the profile, or of the running stack (the ARNs of
/// the secrets its LocalStack holds), each with its source.
pub async fn report(settings: &Settings) -> Result<FactsReport, Error> {
    // A bundle `up` would refuse still has facts to show; `up` says what is wrong with it.
    let offline = crate::gitops::source::offline_eso(settings).ok().flatten();
    let arns = crate::gitops::source::secret_arns(settings).await;
    let own = crate::gitops::source::facts(settings, offline.as_ref(), &arns);
    let mut rows: Vec<FactRow> = own
        .into_iter()
        .map(|(name, value)| FactRow {
            name,
            value: Some(value),
            sensitive: false,
            source: "devstack".into(),
        })
        .collect();
    for (name, fact) in &settings.facts.facts {
        rows.push(FactRow {
            name: name.clone(),
            value: (!fact.sensitive).then(|| fact.value.expose().to_string()),
            sensitive: fact.sensitive,
            source: fact.source.to_string(),
        });
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    let config_maps = std::iter::once(settings.names.facts())
        .chain(settings.facts.config_maps.iter().cloned())
        .collect();
    Ok(FactsReport {
        stack: settings.name.clone(),
        config_maps,
        secret: publishes_secret(settings).then(|| settings.facts.secret.clone()),
        facts: rows,
    })
}

/// `KEY='value'` lines a POSIX shell sources (`set -a; . FILE`), which is
/// how `flux envsubst` reads variables (`flux build kustomization
/// --dry-run` skips substitution, its output piped through `flux envsubst`
/// renders the same); a sensitive fact gets a stand-in so strict rendering
/// passes.
pub fn dotenv(report: &FactsReport) -> String {
    let quote = |v: &str| format!("'{}'", v.replace('\'', r"'\''"));
    let mut out = format!(
        "# facts of stack `{}` (devstack facts --dotenv)\n",
        report.stack
    );
    for row in &report.facts {
        if row.sensitive {
            out.push_str(&format!(
                "# {} is sensitive: its value is in Secret {}/{} on the stack\n",
                row.name,
                crate::gitops::FLUX_NAMESPACE,
                report.secret.as_deref().unwrap_or_default()
            ));
        }
        let value = row.value.as_deref().unwrap_or(REDACTED);
        out.push_str(&format!("{}={}\n", row.name, quote(value)));
    }
    out
}
