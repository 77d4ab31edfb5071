//! The `parameters` section: each SSM parameter's name, type, one value
//! source and the tier its value needs.

use std::collections::BTreeMap;

use serde_saphyr::Spanned;

use super::Resolver;
use crate::profile::SecretString;
use crate::profile::load::position_of_path;
use crate::profile::parameters::{
    PARAMETER_NAME_HINT, PARAMETER_SIZE_HINT, ParameterSettings, ParameterSpec, ParameterTier,
    ParameterType, ParameterValue, advanced_notice, parameter_external_secret_name, tier_for,
    validate_parameter_name,
};
use crate::profile::settings::{SecretSettings, SecretSource, profile_external_secret_name};

pub(super) fn resolve(
    r: &mut Resolver,
    specs: Vec<Spanned<ParameterSpec>>,
    secrets: &[SecretSettings],
) -> Vec<ParameterSettings> {
    // Name -> the line it was first declared at.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    // Each Kubernetes Secret something syncs to, with what does.
    let mut targets: BTreeMap<(String, String), String> = secrets
        .iter()
        .filter(|s| s.sync.is_some())
        .map(|s| {
            (
                profile_external_secret_name(s),
                format!("secret `{}`", s.name),
            )
        })
        .collect();
    let mut out = Vec::new();
    for (index, entry) in specs.into_iter().enumerate() {
        let location = entry.referenced;
        let line = crate::profile::load::position_of(&location).line as usize;
        let p = entry.value;
        let name_at = format!("parameters[{index}].name");
        if let Err(why) = validate_parameter_name(&p.name) {
            // The name itself may be 2,048 characters: the message quotes its start.
            let shown: String = p.name.chars().take(60).collect();
            let shown = if shown.len() < p.name.len() {
                format!("{shown}…")
            } else {
                shown
            };
            r.problems.at_path(
                &name_at,
                format!("invalid parameter name `{shown}`: {why}"),
                Some(PARAMETER_NAME_HINT.into()),
            );
        }
        if let Some(first) = seen.get(&p.name) {
            r.problems.at_path(
                &name_at,
                format!(
                    "parameter `{}` is declared twice (first at line {first})",
                    p.name
                ),
                Some("give each parameter a unique name: SSM holds one value per name".into()),
            );
            continue;
        }
        seen.insert(p.name.clone(), line);
        let Some((key, source)) = single_source(r, index, &location, &p) else {
            continue;
        };
        let mut tier = ParameterTier::Standard;
        if let Some(value) = inline_value(&source) {
            let bytes = value.expose().len();
            match tier_for(bytes) {
                Ok(t) => {
                    if t == ParameterTier::Advanced {
                        r.notices.push(advanced_notice(&p.name, bytes));
                    }
                    tier = t;
                }
                Err(why) => r.problems.at_path(
                    &format!("parameters[{index}].{key}"),
                    format!("parameter `{}`: `{key}` {why}", p.name),
                    Some(PARAMETER_SIZE_HINT.into()),
                ),
            }
        }
        let settings = ParameterSettings {
            name: p.name,
            kind: p.kind,
            tier,
            description: p.description,
            source,
            sync: p.sync,
        };
        if settings.sync.is_some() {
            let target = parameter_external_secret_name(&settings);
            if let Some(first) = targets.get(&target) {
                let (namespace, secret_name) = &target;
                let at = format!("parameters[{index}].sync");
                let position = position_of_path(r.problems.text, &at);
                r.problems.push(
                    position,
                    format!(
                        "parameter `{}` syncs to the Secret {namespace}/{secret_name}, as {first} does",
                        settings.name
                    ),
                    Some("give one of them its own `sync.secretName` (or `sync.namespace`): each Kubernetes Secret has one ExternalSecret".into()),
                );
                continue;
            }
            targets.insert(target, format!("parameter `{}`", settings.name));
        }
        out.push(settings);
    }
    out
}

/// The value as stored, for the sources the profile alone decides.
pub fn inline_value(source: &SecretSource) -> Option<SecretString> {
    source.inline_value()
}

/// The parameter's one value source, with the profile key that gave it;
/// `None` (and a problem) unless there is exactly one that fits its type.
fn single_source(
    r: &mut Resolver,
    index: usize,
    location: &serde_saphyr::Location,
    p: &ParameterSpec,
) -> Option<(&'static str, SecretSource)> {
    let name = &p.name;
    let mut sources = Vec::new();
    if let Some(value) = &p.value {
        let at = format!("parameters[{index}].value");
        match (value, p.kind) {
            (ParameterValue::Text(text), _) => {
                sources.push(("value", Some(SecretSource::Literal(text.clone()))));
            }
            (ParameterValue::List(items), ParameterType::StringList) => {
                if items.iter().any(|i| i.expose().contains(',')) {
                    r.problems.at_path(
                        &at,
                        format!("parameter `{name}`: an item of a StringList contains a `,`, which SSM reads as a separator"),
                        Some("split the item, or use `type: String` to store the text as it is".into()),
                    );
                }
                let joined: Vec<&str> = items.iter().map(SecretString::expose).collect();
                sources.push((
                    "value",
                    Some(SecretSource::Literal(SecretString::new(joined.join(",")))),
                ));
            }
            (ParameterValue::List(_), kind) => {
                r.problems.at_path(
                    &at,
                    format!(
                        "parameter `{name}` is a {} and is given a list",
                        kind.as_str()
                    ),
                    Some(
                        "use `type: StringList` for a list, or write the value as one string"
                            .into(),
                    ),
                );
                sources.push(("value", None));
            }
            (ParameterValue::Object, kind) => {
                let hint = if kind == ParameterType::StringList {
                    "a StringList holds strings: write `value: [a, b]` (or `value: a,b`), or use `type: String` with `json:` to store the object as JSON text"
                } else {
                    "write the object under `json:` to store it as JSON text"
                };
                r.problems.at_path(
                    &at,
                    format!(
                        "parameter `{name}` is a {} and is given an object",
                        kind.as_str()
                    ),
                    Some(hint.into()),
                );
                sources.push(("value", None));
            }
        }
    }
    if let Some(j) = &p.json {
        let at = format!("parameters[{index}].json");
        if p.kind == ParameterType::StringList {
            r.problems.at_path(
                &at,
                format!("parameter `{name}` is a StringList and is given an object (`json`)"),
                Some("a StringList holds strings: write `value: [a, b]`, or use `type: String` (or SecureString) to store the object as JSON text".into()),
            );
            sources.push(("json", None));
        } else if j.is_empty() {
            r.problems.at_path(
                &at,
                format!("parameter `{name}` has an empty `json` object"),
                Some("add at least one key".into()),
            );
            sources.push(("json", None));
        } else {
            sources.push(("json", Some(SecretSource::Json(j.clone()))));
        }
    }
    if let Some(e) = &p.from_env {
        sources.push(("fromEnv", Some(SecretSource::Env(e.clone()))));
    }
    if let Some(f) = &p.from_file {
        sources.push(("fromFile", Some(SecretSource::File(r.relative(f)))));
    }
    if let Some(g) = p.generate {
        if g.length == 0 || g.length as usize > crate::profile::parameters::MAX_STANDARD_VALUE {
            r.problems.at_path(
                &format!("parameters[{index}].generate"),
                format!("parameter `{name}`: generate.length must be between 1 and 4096"),
                Some("use a length from 1 to 4096, e.g. `generate: {length: 32}` (32 is the default)".into()),
            );
        }
        sources.push(("generate", Some(SecretSource::Generate(g))));
    }
    if sources.len() != 1 {
        let found: Vec<&str> = sources.iter().map(|(k, _)| *k).collect();
        r.problems.at(
            location,
            if found.is_empty() {
                format!("parameter `{name}` has no value source")
            } else {
                format!(
                    "parameter `{name}` has several value sources: {}",
                    found.join(", ")
                )
            },
            Some("give exactly one of: value, json, fromEnv, fromFile, generate".into()),
        );
        return None;
    }
    let (key, source) = sources.pop()?;
    Some((key, source?))
}

/// LocalStack serves SSM when the profile has parameters, and IAM (the
/// role) besides STS with `eso.auth: serviceAccount`: added to the default
/// services, required of services the profile lists.
pub(super) fn require_services(
    r: &mut Resolver,
    localstack: &mut crate::profile::settings::LocalStackSettings,
    services_given: bool,
    parameters: &[ParameterSettings],
    eso: &crate::profile::settings::EsoSettings,
) {
    let mut needed: Vec<(&str, &str)> = Vec::new();
    if !parameters.is_empty() {
        needed.push(("ssm", "the profile's `parameters` are stored in"));
    }
    if eso.auth == crate::profile::parameters::EsoAuth::ServiceAccount {
        needed.push(("iam", "`eso.auth: serviceAccount` creates the ESO role in"));
    }
    for (service, why) in needed {
        if localstack.services.iter().any(|s| s == service) {
            continue;
        }
        if services_given {
            r.problems.at_path(
                "localstack.services",
                format!("`localstack.services` lacks `{service}`, which {why}"),
                Some(format!("add `{service}` to localstack.services")),
            );
        } else {
            localstack.services.push(service.to_string());
        }
    }
}
