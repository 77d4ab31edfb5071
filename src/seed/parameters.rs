//! Seeding SSM Parameter Store in LocalStack from the profile's
//! `parameters`, as the secrets are seeded: every value read before the
//! first write, each parameter converged on its own (created, updated or
//! left alone), a generated value kept unless rotating. Errors name
//! parameters, never values.

use futures::StreamExt;
use serde::Serialize;

use super::{AwsErrorInfo, Desired, Outcome, SeedOptions, generate, read_source};
use crate::error::{Error, Kind};
use crate::profile::parameters::{
    PARAMETER_SIZE_HINT, ParameterSettings, ParameterTier, ParameterType, tier_for,
};
use crate::profile::{SecretString, Settings};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParameterResult {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ParameterType,
    pub tier: ParameterTier,
    pub outcome: Outcome,
    /// What changed for `updated`: value, type, tier, description.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<&'static str>,
}

/// A parameter's value once read, with the tier it needs.
pub(super) struct Wanted {
    desired: Desired,
    tier: ParameterTier,
}

/// Reads every parameter's source; fails on the first bad one, before any write.
pub(super) fn resolve_all(parameters: &[ParameterSettings]) -> Result<Vec<Wanted>, Error> {
    parameters.iter().map(resolve_one).collect()
}

fn resolve_one(parameter: &ParameterSettings) -> Result<Wanted, Error> {
    let name = &parameter.name;
    let desired = read_source(&format!("parameter `{name}`"), &parameter.source)?;
    let tier = match &desired {
        Desired::Generate(spec) => tier_for(spec.length as usize),
        Desired::Value(value) => tier_for(value.expose().len()),
    }
    .map_err(|why| {
        Error::user(format!(
            "parameter `{name}`: the value from {} {why}",
            super::describe_source(&parameter.source)
        ))
        .with_hint(PARAMETER_SIZE_HINT)
    })?;
    if let Desired::Value(value) = &desired
        && value.is_empty()
    {
        return Err(Error::user(format!(
            "parameter `{name}`: the value from {} is empty, and SSM stores no empty parameter",
            super::describe_source(&parameter.source)
        ))
        .with_hint("give the parameter a value"));
    }
    Ok(Wanted { desired, tier })
}

/// Creates or updates the profile's parameters.
pub(super) async fn seed(
    settings: &Settings,
    wanted: Vec<Wanted>,
    options: SeedOptions,
) -> Result<Vec<ParameterResult>, Error> {
    if settings.parameters.is_empty() {
        return Ok(Vec::new());
    }
    let client = crate::aws::ssm(settings);
    let endpoint = settings.localstack.endpoint_url();
    let work = settings
        .parameters
        .iter()
        .zip(wanted)
        .map(|(parameter, wanted)| {
            let (client, endpoint) = (&client, endpoint.as_str());
            async move { converge(client, parameter, wanted, options, endpoint).await }
        });
    let results: Vec<Result<ParameterResult, Error>> = futures::stream::iter(work)
        .buffered(options.concurrency.max(1))
        .collect()
        .await;
    let total = results.len();
    let mut done = Vec::new();
    let mut first_error = None;
    for result in results {
        match result {
            Ok(r) => done.push(r),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        None => Ok(done),
        Some(err) if total > 1 => Err(err.context(format!(
            "{} of {total} parameters failed ({} converged; a re-run finishes the rest)",
            total - done.len(),
            done.len()
        ))),
        Some(err) => Err(err),
    }
}

async fn converge(
    client: &aws_sdk_ssm::Client,
    parameter: &ParameterSettings,
    wanted: Wanted,
    options: SeedOptions,
    endpoint: &str,
) -> Result<ParameterResult, Error> {
    let name = parameter.name.as_str();
    let fail = |op: &str, e: &dyn AwsErrorInfo| sdk_error(name, op, e, endpoint);
    let stored = match client
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
    {
        Ok(out) => out.parameter,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_parameter_not_found()) =>
        {
            None
        }
        Err(e) => return Err(fail("read", &e)),
    };
    let description = match &stored {
        Some(_) => describe(client, name)
            .await
            .map_err(|e| fail("describe", &*e))?,
        None => None,
    };
    let current = stored
        .as_ref()
        .and_then(|p| p.value.clone())
        .map(SecretString::new);
    let stored_type = stored
        .as_ref()
        .and_then(|p| p.r#type.as_ref())
        .map(|t| t.as_str().to_string());
    let value = match wanted.desired {
        Desired::Value(v) => v,
        Desired::Generate(_) if current.is_some() && !options.rotate => {
            current.clone().expect("checked")
        }
        Desired::Generate(spec) => generate(&spec),
    };
    let mut changed = Vec::new();
    if stored.is_some() {
        if current.as_ref() != Some(&value) {
            changed.push("value");
        }
        if stored_type.as_deref() != Some(parameter.kind.as_str()) {
            changed.push("type");
        }
        if description.as_ref().map(|d| d.tier.as_str()) != Some(wanted.tier.as_str()) {
            changed.push("tier");
        }
        if parameter.description.is_some()
            && description.as_ref().and_then(|d| d.description.as_deref())
                != parameter.description.as_deref()
        {
            changed.push("description");
        }
    }
    let outcome = match (&stored, changed.is_empty()) {
        (None, _) => Outcome::Created,
        (Some(_), true) => Outcome::Unchanged,
        (Some(_), false) => Outcome::Updated,
    };
    if !options.dry_run && outcome != Outcome::Unchanged {
        // SSM refuses to move a parameter back to the Standard tier, and
        // some versions to change its type in place: such a change replaces it.
        if changed.contains(&"type") || changed.contains(&"tier") {
            match client.delete_parameter().name(name).send().await {
                Ok(_) => {}
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_parameter_not_found()) => {}
                Err(e) => return Err(fail("replace", &e)),
            }
        }
        client
            .put_parameter()
            .name(name)
            .value(value.expose())
            .r#type(parameter.kind.as_str().into())
            .tier(wanted.tier.as_str().into())
            .set_description(parameter.description.clone())
            .overwrite(stored.is_some() && !changed.contains(&"type") && !changed.contains(&"tier"))
            .send()
            .await
            .map_err(|e| fail(if stored.is_some() { "update" } else { "create" }, &e))?;
    }
    Ok(ParameterResult {
        name: name.to_string(),
        kind: parameter.kind,
        tier: wanted.tier,
        outcome,
        changed,
    })
}

/// A stored parameter's tier and description (GetParameter gives neither).
struct Described {
    tier: String,
    description: Option<String>,
}

async fn describe(
    client: &aws_sdk_ssm::Client,
    name: &str,
) -> Result<Option<Described>, Box<dyn AwsErrorInfo + Send + Sync>> {
    use aws_sdk_ssm::types::ParameterStringFilter;
    let filter = ParameterStringFilter::builder()
        .key("Name")
        .option("Equals")
        .values(name)
        .build()
        .expect("key is set");
    let out = client
        .describe_parameters()
        .parameter_filters(filter)
        .send()
        .await
        .map_err(|e| Box::new(e) as Box<dyn AwsErrorInfo + Send + Sync>)?;
    Ok(out
        .parameters()
        .iter()
        .find(|p| p.name() == Some(name))
        .map(|p| Described {
            tier: p
                .tier()
                .map(|t| t.as_str().to_string())
                .unwrap_or_else(|| "Standard".into()),
            description: p.description().map(String::from),
        }))
}

fn sdk_error(name: &str, op: &str, err: &dyn AwsErrorInfo, endpoint: &str) -> Error {
    if err.is_dispatch_or_timeout() {
        return Error::new(
            Kind::Prerequisite,
            format!("cannot {op} parameter `{name}`: LocalStack at {endpoint} did not answer"),
        )
        .with_hint("start it with `devstack localstack up` (or `devstack up`), then seed again: seeding converges");
    }
    let code = err.code().unwrap_or("Unknown");
    let message = err.message().unwrap_or("no message");
    let (kind, hint) = match code {
        "ValidationException"
        | "InvalidParameterException"
        | "HierarchyLevelLimitExceededException"
        | "ParameterPatternMismatchException"
        | "UnsupportedParameterType" => (
            Kind::User,
            "check the parameter's name, type and value in the profile (SSM's rules apply)",
        ),
        _ => (
            Kind::Internal,
            "run with -v for detail; `devstack localstack logs` shows LocalStack's side (is `ssm` in localstack.services?)",
        ),
    };
    Error::new(
        kind,
        format!("cannot {op} parameter `{name}`: LocalStack rejected it: {code}: {message}"),
    )
    .with_hint(hint)
}

pub(super) fn summary(results: &[ParameterResult]) -> String {
    let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
    let advanced = results
        .iter()
        .filter(|r| r.tier == ParameterTier::Advanced)
        .count();
    let mut text = format!(
        "{} parameter(s): {} created, {} updated, {} unchanged",
        results.len(),
        count(Outcome::Created),
        count(Outcome::Updated),
        count(Outcome::Unchanged)
    );
    if advanced > 0 {
        text.push_str(&format!(
            " ({advanced} in the Advanced tier, being over 4 KB)"
        ));
    }
    text
}

/// ARNs of the profile's parameters that exist in LocalStack.
pub async fn parameter_arns(settings: &Settings) -> std::collections::BTreeMap<String, String> {
    if settings.parameters.is_empty() {
        return Default::default();
    }
    let client = crate::aws::ssm(settings);
    let lookups = settings.parameters.iter().map(|p| {
        let client = client.clone();
        async move {
            let arn = client
                .get_parameter()
                .name(&p.name)
                .send()
                .await
                .ok()
                .and_then(|out| out.parameter)
                .and_then(|p| p.arn);
            arn.map(|a| (p.name.clone(), a))
        }
    });
    futures::future::join_all(lookups)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Names of the parameters in the stack's Parameter Store; values are never read.
pub async fn parameter_names(settings: &Settings) -> Result<Vec<String>, String> {
    let client = crate::aws::ssm(settings);
    let mut names = Vec::new();
    let mut pages = client.describe_parameters().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| e.to_string())?;
        names.extend(
            page.parameters()
                .iter()
                .filter_map(|p| p.name().map(String::from)),
        );
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::SecretSource;

    fn from_file(path: std::path::PathBuf) -> ParameterSettings {
        ParameterSettings {
            name: "/dev/blob".into(),
            kind: ParameterType::String,
            tier: ParameterTier::Standard,
            description: None,
            source: SecretSource::File(path),
            sync: None,
        }
    }

    #[test]
    fn a_file_picks_its_tier_and_one_over_8_kb_is_refused_before_any_write() {
        let dir = tempfile::tempdir().unwrap();
        let (small, big, huge) = (
            dir.path().join("small"),
            dir.path().join("big"),
            dir.path().join("huge"),
        );
        std::fs::write(&small, "x".repeat(4096)).unwrap();
        std::fs::write(&big, "y".repeat(4097)).unwrap();
        std::fs::write(&huge, "z".repeat(8193)).unwrap();
        let tiers: Vec<ParameterTier> = resolve_all(&[from_file(small), from_file(big.clone())])
            .unwrap()
            .into_iter()
            .map(|w| w.tier)
            .collect();
        assert_eq!(tiers, [ParameterTier::Standard, ParameterTier::Advanced]);
        let err = match resolve_all(&[from_file(big), from_file(huge.clone())]) {
            Err(err) => err,
            Ok(_) => panic!("an 8,193-byte value was accepted"),
        };
        assert_eq!(err.kind(), Kind::User);
        assert_eq!(
            err.message(),
            format!(
                "parameter `/dev/blob`: the value from fromFile {} is 8193 bytes, over the 8192-byte limit of SSM's Advanced tier",
                huge.display()
            )
        );
        assert!(!err.message().contains("zzzz"));
        assert_eq!(err.hint(), Some(PARAMETER_SIZE_HINT));
    }

    #[test]
    fn a_missing_variable_names_the_parameter() {
        let mut p = from_file("unused".into());
        p.source = SecretSource::Env("DEVSTACK_TEST_SURELY_UNSET_57".into());
        let err = match resolve_all(&[p]) {
            Err(err) => err,
            Ok(_) => panic!("an unset variable was accepted"),
        };
        assert_eq!(
            err.message(),
            "parameter `/dev/blob` reads environment variable DEVSTACK_TEST_SURELY_UNSET_57, which is not set"
        );
    }
}
