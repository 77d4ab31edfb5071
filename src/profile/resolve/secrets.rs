//! The `secrets` section: each secret's name, its one value source and format.

use std::collections::{BTreeMap, BTreeSet};

use serde_saphyr::{Location, Spanned};

use super::{NAMESPACE_HINT, Resolver};
use crate::profile::load::{position_of, position_of_path};
use crate::profile::schema::{SecretFormat, SecretSpec, SyncSpec};
use crate::profile::settings::{
    SECRET_NAME_HINT, SECRET_SIZE_HINT, SecretSettings, SecretSource, check_secret_size,
    profile_external_secret_name, validate_dns_label, validate_dns_subdomain, validate_secret_name,
};

pub(super) fn resolve(r: &mut Resolver, specs: Vec<Spanned<SecretSpec>>) -> Vec<SecretSettings> {
    let mut seen = BTreeSet::new();
    // Each Kubernetes Secret a secret syncs to, with the secret that does.
    let mut targets: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut out = Vec::new();
    for (index, entry) in specs.into_iter().enumerate() {
        let location = entry.referenced;
        let sync = entry.value.sync.clone();
        let name = entry.value.name.clone();
        let names_valid = sync.as_ref().is_none_or(|s| sync_names_valid(r, index, s));
        let Some(settings) = secret(r, index, entry, &mut seen) else {
            continue;
        };
        if settings.sync.is_some() && names_valid {
            let target = profile_external_secret_name(&settings);
            if let Some(first) = targets.get(&target) {
                let (namespace, secret_name) = &target;
                let at = match sync.as_ref().and_then(|s| s.secret_name.as_ref()) {
                    Some(_) => format!("secrets[{index}].sync.secretName"),
                    None => format!("secrets[{index}].sync"),
                };
                let position = position_of_path(r.problems.text, &at)
                    .unwrap_or_else(|| position_of(&location));
                r.problems.push(
                    Some(position),
                    format!(
                        "secret `{name}` syncs to the Secret {namespace}/{secret_name}, as secret `{first}` does"
                    ),
                    Some("give one of them its own `sync.secretName` (or `sync.namespace`): each Kubernetes Secret has one ExternalSecret".into()),
                );
                continue;
            }
            targets.insert(target, name);
        }
        out.push(settings);
    }
    out
}

/// The Kubernetes names a secret's `sync` gives; whether they are valid.
fn sync_names_valid(r: &mut Resolver, index: usize, sync: &SyncSpec) -> bool {
    let mut valid = true;
    if let Err(why) = validate_dns_label(&sync.namespace, 63) {
        valid = false;
        r.problems.at_path(
            &format!("secrets[{index}].sync.namespace"),
            format!(
                "`sync.namespace` `{}` is no namespace name: {why}",
                sync.namespace
            ),
            Some(NAMESPACE_HINT.into()),
        );
    }
    if let Some(secret_name) = &sync.secret_name
        && let Err(why) = validate_dns_subdomain(secret_name)
    {
        valid = false;
        r.problems.at_path(
            &format!("secrets[{index}].sync.secretName"),
            format!("`sync.secretName` `{secret_name}` is no Secret name: {why}"),
            Some("a Secret name has lowercase letters, digits, '-' and '.', starting and ending with a letter or digit (at most 253), e.g. `app-token`; remove it for one derived from the secret's name".into()),
        );
    }
    valid
}

/// One secret; `None` when it has no single value source to resolve.
fn secret(
    r: &mut Resolver,
    index: usize,
    entry: Spanned<SecretSpec>,
    seen: &mut BTreeSet<String>,
) -> Option<SecretSettings> {
    let location = entry.referenced;
    let mut s = entry.value;
    if let Err(why) = validate_secret_name(&s.name) {
        r.problems.at(
            &location,
            format!("invalid secret name `{}`: {why}", s.name),
            Some(SECRET_NAME_HINT.into()),
        );
    }
    if !seen.insert(s.name.clone()) {
        r.problems.at(
            &location,
            format!("secret `{}` is declared twice", s.name),
            Some("give each secret a unique name".into()),
        );
    }
    let (key, source) = single_source(r, &location, &mut s)?;
    if let Some(value) = source.inline_value()
        && let Err(why) = check_secret_size(&value)
    {
        r.problems.at_path(
            &format!("secrets[{index}].{key}"),
            format!("secret `{}`: `{key}` {why}", s.name),
            Some(SECRET_SIZE_HINT.into()),
        );
    }
    let format = match (&source, s.format) {
        (SecretSource::Json(_), _) => SecretFormat::Json,
        (SecretSource::Generate(_), Some(SecretFormat::Json)) => {
            r.problems.at(
                &location,
                format!(
                    "secret `{}`: a generated value cannot have `format: json`",
                    s.name
                ),
                Some("remove `format`, or use `json:` with generated keys written out".into()),
            );
            SecretFormat::Text
        }
        (_, format) => format.unwrap_or(SecretFormat::Text),
    };
    Some(SecretSettings {
        name: s.name,
        description: s.description,
        tags: s.tags,
        source,
        format,
        sync: s.sync,
    })
}

/// The secret's value source, taken out of `s`, with the profile key that
/// gave it; `None` (and a problem) unless there is exactly one.
fn single_source(
    r: &mut Resolver,
    location: &Location,
    s: &mut SecretSpec,
) -> Option<(&'static str, SecretSource)> {
    let mut sources = Vec::new();
    if let Some(v) = s.value.take() {
        sources.push(("value", SecretSource::Literal(v)));
    }
    if let Some(j) = s.json.take() {
        if j.is_empty() {
            r.problems.at(
                location,
                format!("secret `{}` has an empty `json` object", s.name),
                Some("add at least one key".into()),
            );
        }
        sources.push(("json", SecretSource::Json(j)));
    }
    if let Some(e) = s.from_env.take() {
        sources.push(("fromEnv", SecretSource::Env(e)));
    }
    if let Some(f) = s.from_file.take() {
        sources.push(("fromFile", SecretSource::File(r.relative(&f))));
    }
    if let Some(g) = s.generate.take() {
        if g.length == 0 || g.length > 4096 {
            r.problems.at(
                location,
                format!(
                    "secret `{}`: generate.length must be between 1 and 4096",
                    s.name
                ),
                Some("use a length from 1 to 4096, e.g. `generate: {length: 32}` (32 is the default)".into()),
            );
        }
        sources.push(("generate", SecretSource::Generate(g)));
    }
    if sources.len() != 1 {
        let found: Vec<&str> = sources.iter().map(|(k, _)| *k).collect();
        r.problems.at(
            location,
            if found.is_empty() {
                format!("secret `{}` has no value source", s.name)
            } else {
                format!(
                    "secret `{}` has several value sources: {}",
                    s.name,
                    found.join(", ")
                )
            },
            Some("give exactly one of: value, json, fromEnv, fromFile, generate".into()),
        );
        return None;
    }
    sources.pop()
}
