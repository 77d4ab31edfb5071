//! Flux 2.9's strict substitution, applied before anything is created.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{fact_names, list, render_helm_values};
use crate::error::Error;
use crate::gitops::substitute;
use crate::profile::{GitopsSourceKind, Settings};

/// The strict substitution rule of Flux 2.9 applied before anything is
/// created: every `${VAR}` without a default in the apps' manifests (a local
/// repository) and in the Helm values must have a fact. Every missing name
/// is reported at its file and line at once.
pub fn check_substitution(settings: &Settings) -> Result<(), Error> {
    let provided = fact_names(settings);
    let mut plain: BTreeMap<String, String> = provided
        .iter()
        .map(|n| (n.clone(), String::new()))
        .collect();
    for (name, fact) in &settings.facts.facts {
        if !fact.sensitive {
            plain.insert(name.clone(), fact.value.expose().to_string());
        }
    }
    // Sensitive facts are absent here so that their use in values is found.
    for (name, fact) in &settings.facts.facts {
        if fact.sensitive {
            plain.remove(name);
        }
    }
    let values = render_helm_values_checked(settings, &plain);
    let apps = if settings.gitops.source == GitopsSourceKind::Local {
        missing_in_apps(settings, &provided)
    } else {
        Ok(())
    };
    match (values, apps) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(values), Err(apps)) => {
            Err(
                Error::user(format!("{}\n{}", apps.message(), values.message()))
                    .with_hint(apps.hint().unwrap_or_default().to_string()),
            )
        }
    }
}

fn render_helm_values_checked(
    settings: &Settings,
    plain: &BTreeMap<String, String>,
) -> Result<(), Error> {
    render_helm_values(settings, plain).map(|_| ())
}

fn missing_in_apps(settings: &Settings, provided: &BTreeSet<String>) -> Result<(), Error> {
    let root = &settings.base_dir;
    let mut lines = Vec::new();
    let mut names = BTreeSet::new();
    for app in &settings.gitops.apps {
        let missing =
            substitute::missing(root, Path::new(&app.path), &|name| provided.contains(name))?;
        for m in missing {
            lines.push(format!(
                "  {}:{}:{}: ${{{}}} (app `{}`)",
                root.join(&m.file).display(),
                m.line,
                m.column,
                m.name,
                app.name
            ));
            names.insert(m.name);
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    Err(Error::user(format!(
        "Flux would fail on {} variable(s) that no fact provides and that have no default:\n{}",
        names.len(),
        lines.join("\n")
    ))
    .with_hint(format!(
        "add {} to the profile's `facts` (values, fromEnv, fromFiles or fromTerraform), give each a default (`${{NAME:=value}}`), or escape it (`$${{NAME}}`); `devstack facts` lists what is provided",
        list(&names)
    )))
}
