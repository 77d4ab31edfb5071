//! The `facts` section: the user's facts from every source, the objects
//! that carry them, and the Helm values ConfigMaps.
//!
//! Precedence, later wins: `values` < `fromFiles` (in list order) <
//! `fromTerraform` (in list order) < `fromEnv`. Literals are the defaults,
//! files what a checkout or an infrastructure run produced, and the
//! environment what this one run says. A fact is sensitive when any source
//! that set it said so (a sensitive Terraform output, `sensitive`): a value
//! overridden from elsewhere is most likely the same kind of value.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_saphyr::{Location, Spanned};

use super::Resolver;
use crate::profile::SecretString;
use crate::profile::facts::{
    FACT_NAME_RULE, TerraformError, parse_dotenv, parse_terraform_outputs, reserved_fact_meaning,
    valid_fact_name,
};
use crate::profile::load::Position;
use crate::profile::names::base;
use crate::profile::schema::{FactsSpec, HelmValuesSpec};
use crate::profile::settings::{
    DEFAULT_FACTS_SECRET, DEFAULT_HELM_VALUES_KEY, Fact, FactSource, FactsSettings,
    HelmValuesSettings, validate_dns_label, validate_dns_subdomain,
};

/// The namespace of the facts' ConfigMaps and Secret, beside Flux's objects.
const FACTS_NAMESPACE: &str = "flux-system";

pub(super) fn resolve(r: &mut Resolver, spec: Option<FactsSpec>) -> FactsSettings {
    let Some(spec) = spec else {
        return FactsSettings::default();
    };
    let secret = secret_name(r, spec.secret);
    let config_maps = config_maps(r, spec.config_maps, &secret);
    let mut facts = Facts::default();
    for (key, value) in spec.values.0 {
        let at = Place::Profile(key.referenced);
        facts.set(r, key.value, value.value.0, false, FactSource::Profile, at);
    }
    for entry in spec.from_files {
        dotenv(r, &entry, &mut facts);
    }
    for entry in spec.from_terraform {
        terraform(r, &entry, &mut facts);
    }
    for (key, variable) in spec.from_env.0 {
        match r.env(&variable.value) {
            Some(value) => {
                let source = FactSource::Env {
                    variable: variable.value,
                };
                let at = Place::Profile(key.referenced);
                facts.set(r, key.value, SecretString::new(value), false, source, at);
            }
            None => {
                facts.named.insert(key.value.clone());
                r.problems.at(
                    &variable.referenced,
                    format!(
                        "fact `{}`: environment variable {} is not set",
                        key.value, variable.value
                    ),
                    Some(format!(
                        "`export {}=…`, or remove `{}` from facts.fromEnv",
                        variable.value, key.value
                    )),
                );
            }
        }
    }
    for entry in spec.sensitive {
        match facts.facts.get_mut(&entry.value) {
            Some(fact) => fact.sensitive = true,
            // A fact refused for its own sake was reported already.
            None if facts.named.contains(&entry.value) => {}
            None => {
                let known: Vec<String> = facts.facts.keys().cloned().collect();
                let hint = match crate::profile::load::closest_match(&entry.value, &known) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None if known.is_empty() => "there are no facts to mark".to_string(),
                    None => format!("facts: {}", known.join(", ")),
                };
                r.problems.at(
                    &entry.referenced,
                    format!(
                        "`facts.sensitive` names `{}`, which is no fact",
                        entry.value
                    ),
                    Some(hint),
                );
            }
        }
    }
    let helm_values = helm_values(r, spec.helm_values, &config_maps);
    FactsSettings {
        config_maps,
        secret,
        facts: facts.facts,
        helm_values,
    }
}

/// Where a fact was written, for errors about it.
enum Place {
    /// A key in the profile.
    Profile(Location),
    /// A line of a dotenv file (shown path, position).
    File(String, Position),
    /// An output of a Terraform file: at the profile's entry naming the file.
    Terraform(Location),
}

#[derive(Default)]
struct Facts {
    facts: BTreeMap<String, Fact>,
    /// Every name a source gave, accepted or not.
    named: BTreeSet<String>,
}

impl Facts {
    /// Sets a fact over any earlier one, unless its name is refused.
    fn set(
        &mut self,
        r: &mut Resolver,
        name: String,
        value: SecretString,
        sensitive: bool,
        source: FactSource,
        at: Place,
    ) {
        self.named.insert(name.clone());
        if let Some((message, hint)) = refused_name(&name, &source) {
            match at {
                Place::Profile(location) | Place::Terraform(location) => {
                    r.problems.at(&location, message, Some(hint))
                }
                Place::File(origin, position) => {
                    r.problems
                        .in_file(origin, Some(position), message, Some(hint))
                }
            }
            return;
        }
        let sensitive = sensitive || self.facts.get(&name).is_some_and(|f| f.sensitive);
        self.facts.insert(
            name,
            Fact {
                value,
                sensitive,
                source,
            },
        );
    }
}

/// Why a fact cannot have `name`, with the fix.
fn refused_name(name: &str, source: &FactSource) -> Option<(String, String)> {
    if !valid_fact_name(name) {
        return Some(match source {
            FactSource::Terraform { path, output } => (
                format!(
                    "output `{output}` of {} is no valid fact name: {FACT_NAME_RULE}",
                    path.display()
                ),
                "rename the output in Terraform (letters, digits and `_`), e.g. `app_bucket`"
                    .into(),
            ),
            _ => (
                format!("invalid fact name `{name}` from {source}: {FACT_NAME_RULE}"),
                "rename it, e.g. `APP_BUCKET`".into(),
            ),
        });
    }
    reserved_fact_meaning(name).map(|meaning| {
        (
            format!("fact `{name}` from {source} is devstack's own ({meaning})"),
            format!("rename it, e.g. `APP_{name}`: devstack publishes `{name}` itself"),
        )
    })
}

fn dotenv(r: &mut Resolver, entry: &Spanned<String>, facts: &mut Facts) {
    let shown = r.shown(&entry.value);
    let text = match std::fs::read_to_string(r.relative(&entry.value)) {
        Ok(text) => text,
        Err(e) => {
            r.problems.at(
                &entry.referenced,
                format!("cannot read dotenv file {shown}: {e}"),
                Some("create it, or remove it from facts.fromFiles".into()),
            );
            return;
        }
    };
    let (lines, errors) = parse_dotenv(&text);
    for line in lines {
        let source = FactSource::File {
            path: PathBuf::from(&entry.value),
            line: line.line,
        };
        let position = Position {
            line: line.line as u64,
            column: line.column as u64,
        };
        let at = Place::File(shown.clone(), position);
        facts.set(
            r,
            line.key,
            SecretString::new(line.value),
            false,
            source,
            at,
        );
    }
    for e in errors {
        let position = Position {
            line: e.line as u64,
            column: e.column as u64,
        };
        r.problems
            .in_file(shown.clone(), Some(position), e.message, Some(e.hint));
    }
}

const TERRAFORM_HINT: &str =
    "write it with `terraform output -json > FILE` (or `tofu output -json`)";

fn terraform(r: &mut Resolver, entry: &Spanned<String>, facts: &mut Facts) {
    let shown = r.shown(&entry.value);
    let text = match std::fs::read_to_string(r.relative(&entry.value)) {
        Ok(text) => text,
        Err(e) => {
            r.problems.at(
                &entry.referenced,
                format!("cannot read Terraform outputs {shown}: {e}"),
                Some(format!(
                    "{TERRAFORM_HINT}, or remove it from facts.fromTerraform"
                )),
            );
            return;
        }
    };
    match parse_terraform_outputs(&text) {
        Ok(outputs) => {
            for output in outputs {
                let source = FactSource::Terraform {
                    path: PathBuf::from(&entry.value),
                    output: output.name.clone(),
                };
                let at = Place::Terraform(entry.referenced);
                let (name, value) = (output.name, SecretString::new(output.value));
                facts.set(r, name, value, output.sensitive, source, at);
            }
        }
        Err(errors) => {
            for e in errors {
                let (message, hint) = match e {
                    TerraformError::NotOutputs(why) => (
                        format!("{shown} is not `terraform output -json` output: {why}"),
                        TERRAFORM_HINT.to_string(),
                    ),
                    TerraformError::Output { output, message } => (
                        format!("{shown}: output `{output}` {message}"),
                        format!("give `{output}` a value in Terraform, or stop reading this file"),
                    ),
                };
                r.problems.at(&entry.referenced, message, Some(hint));
            }
        }
    }
}

fn secret_name(r: &mut Resolver, spec: Option<Spanned<String>>) -> String {
    let Some(secret) = spec else {
        return DEFAULT_FACTS_SECRET.into();
    };
    if let Err(why) = validate_dns_subdomain(&secret.value) {
        r.problems.at(
            &secret.referenced,
            format!("facts.secret `{}` is no Secret name: {why}", secret.value),
            Some(format!("e.g. `{DEFAULT_FACTS_SECRET}`")),
        );
    }
    secret.value
}

fn config_maps(r: &mut Resolver, specs: Vec<Spanned<String>>, secret: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for entry in specs {
        let name = &entry.value;
        let problem = if let Err(why) = validate_dns_subdomain(name) {
            Some((
                format!("facts.configMaps `{name}` is no ConfigMap name: {why}"),
                "e.g. `flux-runtime-info`".to_string(),
            ))
        } else if name == base::FACTS {
            Some((
                format!("facts.configMaps lists `{name}`, which devstack always publishes"),
                format!("remove `{name}` from facts.configMaps"),
            ))
        } else if name == secret {
            Some((
                format!("facts.configMaps lists `{name}`, the name of facts.secret"),
                "give the ConfigMap and the Secret different names".to_string(),
            ))
        } else if out.contains(name) {
            Some((
                format!("facts.configMaps lists `{name}` twice"),
                "remove one of them".to_string(),
            ))
        } else {
            None
        };
        match problem {
            Some((message, hint)) => r.problems.at(&entry.referenced, message, Some(hint)),
            None => out.push(entry.value),
        }
    }
    out
}

fn helm_values(
    r: &mut Resolver,
    specs: Vec<Spanned<HelmValuesSpec>>,
    config_maps: &[String],
) -> Vec<HelmValuesSettings> {
    let mut out: Vec<HelmValuesSettings> = Vec::new();
    for (index, entry) in specs.into_iter().enumerate() {
        let location = entry.referenced;
        let spec = entry.value;
        let path = |key: &str| format!("facts.helmValues[{index}].{key}");
        let mut valid = true;
        if let Err(why) = validate_dns_subdomain(&spec.name) {
            valid = false;
            r.problems.at_path(
                &path("name"),
                format!("helmValues `{}`: invalid name: {why}", spec.name),
                Some("a ConfigMap name, e.g. `karpenter-values`".into()),
            );
        }
        if let Err(why) = validate_dns_label(&spec.namespace, 63) {
            valid = false;
            r.problems.at_path(
                &path("namespace"),
                format!(
                    "helmValues `{}`: invalid namespace `{}`: {why}",
                    spec.name, spec.namespace
                ),
                Some("a namespace is a DNS-1123 label, e.g. `karpenter`".into()),
            );
        }
        let key = spec
            .key
            .unwrap_or_else(|| DEFAULT_HELM_VALUES_KEY.to_string());
        if let Err(why) = validate_config_map_key(&key) {
            valid = false;
            r.problems.at_path(
                &path("key"),
                format!("helmValues `{}`: invalid key `{key}`: {why}", spec.name),
                Some(format!(
                    "remove `key` for `{DEFAULT_HELM_VALUES_KEY}`, which `valuesFrom` reads by default"
                )),
            );
        }
        if !valid {
            continue;
        }
        let qualified = format!("{}/{}", spec.namespace, spec.name);
        let problem = if out
            .iter()
            .any(|h| h.namespace == spec.namespace && h.name == spec.name)
        {
            Some((
                format!("helmValues `{qualified}` is declared twice"),
                "merge the two entries' values into one".to_string(),
            ))
        } else if spec.namespace == FACTS_NAMESPACE
            && (spec.name == base::FACTS || config_maps.contains(&spec.name))
        {
            Some((
                format!("helmValues `{qualified}` is also a ConfigMap of the facts"),
                "give the Helm values ConfigMap another name".to_string(),
            ))
        } else {
            None
        };
        if let Some((message, hint)) = problem {
            r.problems.at(&location, message, Some(hint));
            continue;
        }
        out.push(HelmValuesSettings {
            name: spec.name,
            namespace: spec.namespace,
            key,
            values: spec.values,
        });
    }
    out
}

/// A ConfigMap data key: letters, digits, `-`, `_` and `.`.
fn validate_config_map_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 253 {
        return Err("must be 1 to 253 characters".into());
    }
    if let Some(bad) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(*c)))
    {
        return Err(format!(
            "character `{bad}` is not allowed (letters, digits, '-', '_' and '.')"
        ));
    }
    if key == "." || key == ".." {
        return Err("must not be `.` or `..`".into());
    }
    Ok(())
}
