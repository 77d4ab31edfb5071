//! Seeding AWS Secrets Manager in LocalStack from the profile.
//!
//! All values are resolved before anything is written, so bad input (a
//! missing variable, an unreadable file, invalid JSON) writes nothing. Each
//! secret is then converged on its own — created, updated or left alone — so
//! an interrupted run is completed by the next one. Values only ever travel
//! inside [`SecretString`]; errors name secrets, never values.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_secretsmanager::operation::describe_secret::DescribeSecretOutput;
use futures::StreamExt;
use rand::Rng;
use serde::Serialize;

use crate::error::{Error, Kind};
use crate::profile::schema::{Charset, GenerateSpec, SecretFormat};
use crate::profile::settings::{SECRET_SIZE_HINT, SecretSettings, check_secret_size};
use crate::profile::{SecretSource, SecretString, Settings};

#[derive(Debug, Clone, Copy)]
pub struct SeedOptions {
    pub rotate: bool,
    pub dry_run: bool,
    pub concurrency: usize,
}

impl Default for SeedOptions {
    fn default() -> Self {
        SeedOptions {
            rotate: false,
            dry_run: false,
            concurrency: 8,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Created,
    Updated,
    Unchanged,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretResult {
    pub name: String,
    pub outcome: Outcome,
    /// What changed for `updated`: value, description, tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedReport {
    pub dry_run: bool,
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub secrets: Vec<SecretResult>,
    /// The profile's SSM parameters, converged like the secrets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<parameters::ParameterResult>,
    /// The ESO role of `eso.auth: serviceAccount`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<role::RoleResult>,
    pub elapsed_ms: u64,
}

pub mod parameters;
pub mod role;

/// The value a secret should have, once its source is read.
enum Desired {
    Value(SecretString),
    /// Keep the stored value if there is one (unless rotating).
    Generate(GenerateSpec),
}

/// Reads every secret's source. Fails on the first bad one, before any write.
fn resolve_all(secrets: &[SecretSettings]) -> Result<Vec<Desired>, Error> {
    secrets.iter().map(resolve_one).collect()
}

fn resolve_one(secret: &SecretSettings) -> Result<Desired, Error> {
    let name = &secret.name;
    let value = match read_source(&format!("secret `{name}`"), &secret.source)? {
        Desired::Value(value) => value,
        generate => return Ok(generate),
    };
    if let Err(why) = check_secret_size(&value) {
        return Err(Error::user(format!(
            "secret `{name}`: the value from {} {why}",
            describe_source(&secret.source)
        ))
        .with_hint(SECRET_SIZE_HINT));
    }
    if secret.format == SecretFormat::Json {
        json_object(name, &value)?;
    }
    Ok(Desired::Value(value))
}

/// Reads a value's source; `what` names its owner in errors ("secret `x`").
fn read_source(what: &str, source: &SecretSource) -> Result<Desired, Error> {
    let value = match source {
        SecretSource::Literal(_) | SecretSource::Json(_) => source
            .inline_value()
            .expect("value and json sources are known from the profile"),
        SecretSource::Env(var) => match std::env::var(var) {
            Ok(v) => SecretString::new(v),
            Err(_) => {
                return Err(Error::user(format!(
                    "{what} reads environment variable {var}, which is not set"
                ))
                .with_hint(format!(
                    "export {var}=... before seeding, or change the source in the profile"
                )));
            }
        },
        SecretSource::File(path) => match std::fs::read_to_string(path) {
            // One trailing newline is an artefact of editors and `echo`, not part of the value.
            Ok(v) => SecretString::new(v.strip_suffix('\n').unwrap_or(&v).to_string()),
            Err(e) => {
                return Err(Error::user(format!(
                    "{what} reads file {}, which cannot be read: {}",
                    path.display(),
                    e.kind()
                ))
                .with_hint("check the path (relative paths start at the profile's directory) and its permissions"));
            }
        },
        SecretSource::Generate(spec) => return Ok(Desired::Generate(*spec)),
    };
    Ok(Desired::Value(value))
}

/// Refuses a value that is not a JSON object (`format: json`).
fn json_object(name: &str, value: &SecretString) -> Result<(), Error> {
    match serde_json::from_str::<serde_json::Value>(value.expose()) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(_) => Err(Error::user(format!(
            "secret `{name}` must be a JSON object (format: json)"
        ))
        .with_hint("write the value as {\"key\": \"value\", ...}")),
        // serde_json's messages give line and column only, never the input.
        Err(e) => Err(Error::user(format!(
            "secret `{name}` is not valid JSON (format: json): {e}"
        ))
        .with_hint("fix the JSON, or remove `format: json` to store it as text")),
    }
}

/// Where a value comes from, for messages: never the value itself.
pub(crate) fn describe_source(source: &SecretSource) -> String {
    match source {
        SecretSource::Literal(_) => "`value`".into(),
        SecretSource::Json(_) => "`json`".into(),
        SecretSource::Env(var) => format!("fromEnv {var}"),
        SecretSource::File(path) => format!("fromFile {}", path.display()),
        SecretSource::Generate(_) => "`generate`".into(),
    }
}

pub fn generate(spec: &GenerateSpec) -> SecretString {
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const HEX: &[u8] = b"0123456789abcdef";
    const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const ASCII: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&()*+,-./:;<=>?@[]^_{|}~";
    let alphabet = match spec.charset {
        Charset::Alphanumeric => ALNUM,
        Charset::Hex => HEX,
        Charset::Base64url => B64URL,
        Charset::Ascii => ASCII,
    };
    let mut rng = rand::rng();
    let value: String = (0..spec.length)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect();
    SecretString::new(value)
}

/// Creates or updates the profile's secrets.
pub async fn seed(
    settings: &Settings,
    client: &Client,
    options: SeedOptions,
) -> Result<SeedReport, Error> {
    let started = Instant::now();
    let desired = resolve_all(&settings.secrets)?;
    // Every value is read before the first write, the parameters' too.
    let parameter_values = parameters::resolve_all(&settings.parameters)?;
    let endpoint = settings.localstack.endpoint_url();
    let work = settings
        .secrets
        .iter()
        .zip(desired)
        .map(|(secret, desired)| {
            let endpoint = endpoint.clone();
            async move { converge(client, secret, desired, options, &endpoint).await }
        });
    let results: Vec<Result<SecretResult, Error>> = futures::stream::iter(work)
        .buffered(options.concurrency.max(1))
        .collect()
        .await;
    let mut secrets = Vec::new();
    let mut first_error = None;
    let mut failed = 0;
    for result in results {
        match result {
            Ok(r) => secrets.push(r),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(err) = first_error {
        let done = secrets.len();
        return Err(if failed > 1 || done > 0 {
            err.context(format!(
                "{failed} of {} secrets failed ({done} converged; a re-run finishes the rest)",
                done + failed
            ))
        } else {
            err
        });
    }
    let parameters = parameters::seed(settings, parameter_values, options).await?;
    let role = role::ensure(settings, options).await?;
    let count = |o: Outcome| secrets.iter().filter(|s| s.outcome == o).count();
    Ok(SeedReport {
        dry_run: options.dry_run,
        created: count(Outcome::Created),
        updated: count(Outcome::Updated),
        unchanged: count(Outcome::Unchanged),
        secrets,
        parameters,
        role,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

async fn converge(
    client: &Client,
    secret: &SecretSettings,
    desired: Desired,
    options: SeedOptions,
    endpoint: &str,
) -> Result<SecretResult, Error> {
    let convergence = Convergence {
        client,
        secret,
        options,
        endpoint,
    };
    match convergence.describe().await? {
        None => convergence.create(desired).await,
        Some(existing) => convergence.update(&existing, desired).await,
    }
}

/// One secret brought to what the profile says; a dry run decides every
/// change but writes none.
struct Convergence<'a> {
    client: &'a Client,
    secret: &'a SecretSettings,
    options: SeedOptions,
    endpoint: &'a str,
}

impl Convergence<'_> {
    fn name(&self) -> &str {
        &self.secret.name
    }

    fn fail(&self, op: &str, e: &dyn AwsErrorInfo) -> Error {
        sdk_error(self.name(), op, e, self.endpoint)
    }

    /// The stored secret, or `None` when there is none.
    async fn describe(&self) -> Result<Option<DescribeSecretOutput>, Error> {
        match self
            .client
            .describe_secret()
            .secret_id(self.name())
            .send()
            .await
        {
            Ok(d) => Ok(Some(d)),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.fail("describe", &e)),
        }
    }

    async fn create(&self, desired: Desired) -> Result<SecretResult, Error> {
        let secret = self.secret;
        if !self.options.dry_run {
            let value = match desired {
                Desired::Value(v) => v,
                Desired::Generate(spec) => generate(&spec),
            };
            let tags: Vec<_> = secret.tags.iter().map(tag).collect();
            self.client
                .create_secret()
                .name(self.name())
                .set_description(secret.description.clone())
                .set_tags((!tags.is_empty()).then_some(tags))
                .secret_string(value.expose())
                .send()
                .await
                .map_err(|e| self.fail("create", &e))?;
        }
        Ok(SecretResult {
            name: self.name().into(),
            outcome: Outcome::Created,
            changed: vec![],
        })
    }

    /// Restores, then brings value, description and tags in line, in that order.
    async fn update(
        &self,
        existing: &DescribeSecretOutput,
        desired: Desired,
    ) -> Result<SecretResult, Error> {
        let mut changed = Vec::new();
        if existing.deleted_date.is_some() {
            changed.push("restored");
            self.restore().await?;
        }
        let current = self.current_value(existing).await?;
        if self.converge_value(desired, current).await? {
            changed.push("value");
        }
        if self.converge_description(existing).await? {
            changed.push("description");
        }
        if self.converge_tags(existing).await? {
            changed.push("tags");
        }
        let outcome = if changed.is_empty() {
            Outcome::Unchanged
        } else {
            Outcome::Updated
        };
        Ok(SecretResult {
            name: self.name().into(),
            outcome,
            changed,
        })
    }

    async fn restore(&self) -> Result<(), Error> {
        if !self.options.dry_run {
            self.client
                .restore_secret()
                .secret_id(self.name())
                .send()
                .await
                .map_err(|e| self.fail("restore", &e))?;
        }
        Ok(())
    }

    /// The stored value, if there is one that can be read.
    async fn current_value(
        &self,
        existing: &DescribeSecretOutput,
    ) -> Result<Option<SecretString>, Error> {
        let name = self.name();
        match self.client.get_secret_value().secret_id(name).send().await {
            Ok(v) => Ok(v.secret_string.map(SecretString::new)),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(e) if existing.deleted_date.is_some() => {
                // A deleted secret's value is unreadable until restored (dry run).
                tracing::debug!(
                    "value of deleted secret {name} not readable: {}",
                    ProvideErrorMetadata::code(&e).unwrap_or("?")
                );
                Ok(None)
            }
            Err(e) => Err(self.fail("read", &e)),
        }
    }

    /// Writes the desired value when it differs; a generated one is kept
    /// unless rotating. Returns whether it changed.
    async fn converge_value(
        &self,
        desired: Desired,
        current: Option<SecretString>,
    ) -> Result<bool, Error> {
        let target = match desired {
            Desired::Value(v) => Some(v),
            Desired::Generate(_) if current.is_some() && !self.options.rotate => None,
            Desired::Generate(spec) => Some(generate(&spec)),
        };
        let Some(value) = target.filter(|v| Some(v) != current.as_ref()) else {
            return Ok(false);
        };
        if !self.options.dry_run {
            self.client
                .put_secret_value()
                .secret_id(self.name())
                .secret_string(value.expose())
                .send()
                .await
                .map_err(|e| self.fail("update", &e))?;
        }
        Ok(true)
    }

    /// Sets the profile's description when it has one that differs.
    async fn converge_description(&self, existing: &DescribeSecretOutput) -> Result<bool, Error> {
        let Some(description) = &self.secret.description else {
            return Ok(false);
        };
        if existing.description.as_deref() == Some(description.as_str()) {
            return Ok(false);
        }
        if !self.options.dry_run {
            self.client
                .update_secret()
                .secret_id(self.name())
                .description(description)
                .send()
                .await
                .map_err(|e| self.fail("update description of", &e))?;
        }
        Ok(true)
    }

    /// Adds or corrects the profile's tags; tags it does not name are left alone.
    async fn converge_tags(&self, existing: &DescribeSecretOutput) -> Result<bool, Error> {
        let stored: BTreeMap<&str, &str> = existing
            .tags
            .iter()
            .flatten()
            .filter_map(|t| Some((t.key.as_deref()?, t.value.as_deref().unwrap_or(""))))
            .collect();
        let missing: Vec<_> = self
            .secret
            .tags
            .iter()
            .filter(|(k, v)| stored.get(k.as_str()) != Some(&v.as_str()))
            .map(tag)
            .collect();
        if missing.is_empty() {
            return Ok(false);
        }
        if !self.options.dry_run {
            self.client
                .tag_resource()
                .secret_id(self.name())
                .set_tags(Some(missing))
                .send()
                .await
                .map_err(|e| self.fail("tag", &e))?;
        }
        Ok(true)
    }
}

fn tag((key, value): (&String, &String)) -> aws_sdk_secretsmanager::types::Tag {
    aws_sdk_secretsmanager::types::Tag::builder()
        .key(key)
        .value(value)
        .build()
}

/// What we need from an SDK error, object-safe.
trait AwsErrorInfo {
    fn code(&self) -> Option<&str>;
    fn message(&self) -> Option<&str>;
    fn is_dispatch_or_timeout(&self) -> bool;
}

impl<E: ProvideErrorMetadata, R> AwsErrorInfo for SdkError<E, R> {
    fn code(&self) -> Option<&str> {
        ProvideErrorMetadata::code(self)
    }
    fn message(&self) -> Option<&str> {
        ProvideErrorMetadata::message(self)
    }
    fn is_dispatch_or_timeout(&self) -> bool {
        matches!(
            self,
            SdkError::DispatchFailure(_) | SdkError::TimeoutError(_)
        )
    }
}

fn sdk_error(name: &str, op: &str, err: &dyn AwsErrorInfo, endpoint: &str) -> Error {
    if err.is_dispatch_or_timeout() {
        return Error::new(
            Kind::Prerequisite,
            format!("cannot {op} secret `{name}`: LocalStack at {endpoint} did not answer"),
        )
        .with_hint("start it with `devstack localstack up` (or `devstack up`), then seed again: seeding converges");
    }
    let code = err.code().unwrap_or("Unknown");
    let message = err.message().unwrap_or("no message");
    let (kind, hint) = match code {
        "InvalidParameterException" | "ValidationException" | "InvalidRequestException" => (
            Kind::User,
            "check the secret's name and fields in the profile (AWS Secrets Manager rules apply)",
        ),
        _ => (
            Kind::Internal,
            "run with -v for detail; `devstack localstack logs` shows LocalStack's side",
        ),
    };
    Error::new(
        kind,
        format!("cannot {op} secret `{name}`: LocalStack rejected it: {code}: {message}"),
    )
    .with_hint(hint)
}

pub fn summary(report: &SeedReport) -> String {
    let verb = if report.dry_run {
        "would seed"
    } else {
        "seeded"
    };
    let mut text = format!(
        "{verb} {} secret(s): {} created, {} updated, {} unchanged",
        report.secrets.len(),
        report.created,
        report.updated,
        report.unchanged
    );
    if !report.parameters.is_empty() {
        text.push_str(&format!("; {}", parameters::summary(&report.parameters)));
    }
    if let Some(role) = &report.role {
        text.push_str(&format!("; role {} {}", role.name, role.outcome_word()));
    }
    text
}

/// The Seeding step's title: the secrets, and the parameters when the
/// profile has any (a profile without parameters keeps the title it had).
pub fn step_title(settings: &Settings) -> String {
    match settings.parameters.len() {
        0 => format!("Seeding {} secret(s)", settings.secrets.len()),
        parameters => format!(
            "Seeding {} secret(s) and {parameters} parameter(s)",
            settings.secrets.len()
        ),
    }
}

pub fn default_timeout(settings: &Settings) -> Duration {
    settings.timeouts.seed.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_secret(path: std::path::PathBuf) -> SecretSettings {
        SecretSettings {
            name: "app/blob".into(),
            description: None,
            tags: BTreeMap::new(),
            source: SecretSource::File(path),
            format: SecretFormat::Text,
            sync: None,
        }
    }

    #[test]
    fn a_file_over_the_secret_string_limit_is_refused_before_any_write() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.txt");
        let fits = dir.path().join("fits.txt");
        // The trailing newline is dropped, so 65,536 bytes plus one still fit.
        std::fs::write(&fits, format!("{}\n", "x".repeat(65_536))).unwrap();
        std::fs::write(&big, "y".repeat(65_537)).unwrap();

        let secrets = [file_secret(fits.clone()), file_secret(big.clone())];
        let err = match resolve_all(&secrets) {
            Err(err) => err,
            Ok(_) => panic!("a 65,537-byte value was accepted"),
        };
        assert_eq!(err.kind(), Kind::User);
        assert!(
            err.message().contains("secret `app/blob`"),
            "{}",
            err.message()
        );
        assert!(
            err.message()
                .contains(&format!("fromFile {}", big.display())),
            "{}",
            err.message()
        );
        assert!(err.message().contains("65537 bytes"), "{}", err.message());
        assert!(
            !err.message().contains("yyyy"),
            "value leaked: {}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("65,536"));
        assert!(resolve_all(&secrets[..1]).is_ok());
    }

    #[test]
    fn the_seeding_title_names_the_parameters_only_when_there_are_some() {
        let loaded = crate::profile::load_reference("ci").unwrap();
        let mut settings = Settings::resolve(loaded, &Default::default()).unwrap();
        assert_eq!(settings.secrets.len(), 1);
        assert_eq!(step_title(&settings), "Seeding 1 secret(s)");
        for name in ["/dev/app/db-url", "flat"] {
            settings
                .parameters
                .push(crate::profile::parameters::ParameterSettings {
                    name: name.into(),
                    kind: crate::profile::parameters::ParameterType::String,
                    tier: crate::profile::parameters::ParameterTier::Standard,
                    description: None,
                    source: SecretSource::Env("UNUSED".into()),
                    sync: None,
                });
        }
        assert_eq!(
            step_title(&settings),
            "Seeding 1 secret(s) and 2 parameter(s)"
        );
        settings.secrets.clear();
        assert_eq!(
            step_title(&settings),
            "Seeding 0 secret(s) and 2 parameter(s)"
        );
    }
}
