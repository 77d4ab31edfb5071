//! Resolved settings: what everything downstream reads instead of the raw
//! profile, and the rules their values follow. [`super::resolve`] builds them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::duration::HumanDuration;
use super::schema::*;
use super::secret::SecretString;
use crate::error::Error;
use crate::versions;

/// LocalStack services the stack cannot work without, and who needs them.
pub const REQUIRED_LOCALSTACK_SERVICES: &[(&str, &str)] = &[
    ("secretsmanager", "the External Secrets Operator uses"),
    ("sts", "the External Secrets Operator uses"),
    ("s3", "holds the stack's GitOps source (a Flux Bucket)"),
];
pub const DEFAULT_LOCALSTACK_SERVICES: &[&str] = &["secretsmanager", "sts", "s3"];
pub const FLUX_COMPONENTS: &[&str] = &[
    "source-controller",
    "kustomize-controller",
    "helm-controller",
    "notification-controller",
];
pub const REQUIRED_FLUX_COMPONENTS: &[&str] = &[
    "source-controller",
    "kustomize-controller",
    "helm-controller",
];
pub const BUILTIN_PROFILE_NAME: &str = "devstack";

/// Values given on the command line; `None` means "not given".
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub name: Option<String>,
    pub provider: Option<Provider>,
    /// `--context`: an existing cluster's kubeconfig context.
    pub context: Option<String>,
    pub localstack_port: Option<HostPort>,
    pub localstack_image: Option<String>,
    pub bundle: Option<PathBuf>,
}

/// Where a setting's value came from, for `profile show --origin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Flag,
    Env,
    Profile,
    Default,
}

/// The profile resolved with flags, environment and defaults: what was
/// asked, which no run changes. Code below the orchestrator reads one
/// value, so a few fields also carry what runs found (`stack::Found`),
/// put in by `stack::Found::settings` alone: `cluster.provider` once an
/// unpinned provider is settled ([`Self::with_provider`]),
/// `localstack.bound_port`, `eso.cluster`, `images.nodes_pull` and `names`
/// (the cluster's own ESO, whether its nodes pull the images, and the
/// object names on a shared cluster). `state_dir` and `user_kubeconfig` are
/// the environment's, resolved once.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    pub name: String,
    /// Profile file or shipped profile this came from.
    pub profile: String,
    /// The profile as the user named it (`--profile` or DEVSTACK_PROFILE),
    /// for commands printed back to them.
    #[serde(skip)]
    pub profile_reference: Option<String>,
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// Where stack state (kubeconfigs, port records, locks) and caches
    /// live: `$DEVSTACK_HOME`, else `$XDG_STATE_HOME/devstack`, else
    /// `~/.local/state/devstack`. Resolved here, once, so library code never
    /// looks at the environment for it.
    pub state_dir: PathBuf,
    /// The user's kubeconfig file, which `cluster.kubeconfig.merge` merges
    /// into: the first `$KUBECONFIG` entry, else `~/.kube/config`. Resolved
    /// here for the same reason as `state_dir`.
    #[serde(skip)]
    pub user_kubeconfig: PathBuf,
    pub cluster: ClusterSettings,
    pub localstack: LocalStackSettings,
    pub registry: RegistrySettings,
    pub flux: FluxSettings,
    pub eso: EsoSettings,
    pub gitops: GitopsSettings,
    pub images: ImageSettings,
    pub secrets: Vec<SecretSettings>,
    /// SSM parameters (`parameters`); none: no Parameter Store store.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<ParameterSettings>,
    pub facts: FactsSettings,
    pub verify: VerifySettings,
    pub timeouts: Timeouts,
    /// The names of the stack's objects on its cluster: its own when it
    /// shares the cluster with another stack. Known once `up` met the
    /// cluster (`stack::Found`).
    #[serde(skip_serializing_if = "is_alone")]
    pub names: super::StackNames,
    /// Which layer decided the values that can be overridden.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub origins: BTreeMap<String, Origin>,
    /// What resolution set aside of a shipped profile because the run asked
    /// for something else (`--context` with `-p ci`), one line each, for
    /// the command to tell the user.
    #[serde(skip)]
    pub notices: Vec<String>,
}

fn is_alone(names: &super::StackNames) -> bool {
    !names.shares_cluster()
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSettings {
    pub provider: Provider,
    pub image: String,
    /// `cluster.version` as the profile asks for it (the image is derived
    /// from it); only versions with a pinned node image are accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub servers: u8,
    pub agents: u8,
    /// `auto`: a free port chosen at creation (kept in the kubeconfig).
    pub api_server_port: HostPort,
    pub ports: Vec<PortMappingSpec>,
    pub registry_mirrors: BTreeMap<String, Vec<String>>,
    pub merge_kubeconfig: bool,
    pub switch_context: bool,
    pub k3s_args: Vec<String>,
    /// `existing`: the kubeconfig context (`None`: the current one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalStackSettings {
    pub mode: LocalStackMode,
    pub image: String,
    pub services: Vec<String>,
    /// As configured; the port in use is recorded with the stack
    /// ([`crate::state::StackRecord`]) and reported by `env` and `status`.
    pub port: HostPort,
    /// The port this machine reaches the stack's LocalStack at when it is
    /// not the fixed `port`: the one `auto` chose, or a port-forward's
    /// (`stack::Found`; `None` before LocalStack is created).
    #[serde(skip)]
    pub bound_port: Option<u16>,
    pub bind_address: IpAddr,
    pub region: String,
    pub auth_token_env: String,
    /// Whether the token variable is set (never the token itself).
    pub auth_token_present: bool,
    pub env: BTreeMap<String, String>,
}

/// The stack's image registry (`registry` in the profile).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySettings {
    pub enabled: bool,
    pub image: String,
    /// As configured; `auto` is resolved once and recorded with the stack.
    pub port: HostPort,
    /// The port `auto` chose (`stack::Found`; `None` before the stack is
    /// created).
    #[serde(skip)]
    pub bound_port: Option<u16>,
}

impl RegistrySettings {
    /// The host port the registry is published on, once known.
    pub fn host_port(&self) -> Option<u16> {
        self.port.fixed().or(self.bound_port)
    }

    /// `localhost:<port>`: the one name of the registry, on this machine
    /// and in the nodes' pod specs alike.
    pub fn host(&self) -> Option<String> {
        self.host_port()
            .filter(|_| self.enabled)
            .map(|port| format!("localhost:{port}"))
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FluxSettings {
    pub version: String,
    pub components: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EsoSettings {
    pub install: EsoInstall,
    pub chart_version: String,
    pub values: serde_json::Map<String, serde_json::Value>,
    /// How the stores authenticate (`eso.auth`); left out when static, so
    /// that what a snapshot recorded of a static stack stays the same.
    #[serde(skip_serializing_if = "EsoAuth::is_static")]
    pub auth: EsoAuth,
    /// The ESO the cluster already ran that the stack uses instead of
    /// installing its own (`eso.install`). Known once `up` met the
    /// cluster (`stack::Found`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterEso>,
}

/// An External Secrets Operator that devstack did not install, whose
/// controller serves the stack: its AWS endpoint is the stack's LocalStack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterEso {
    pub namespace: String,
    /// The controller's Deployment.
    pub deployment: String,
    /// Its `--controller-class`, which the stack's store then names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_class: Option<String>,
}

impl Settings {
    /// Names the stack's objects after it, as a stack that joined a
    /// cluster another stack runs on (see [`super::StackNames`]); its
    /// round trip's namespace too, which `down` removes. For
    /// `stack::Found::settings`, which knows when.
    pub fn share_cluster(&mut self) {
        self.names = super::StackNames::sharing(&self.name);
        self.verify.namespace = self.names.of(&self.verify.namespace);
    }

    /// The ESO controller class the stack's store names: the cluster's
    /// ESO's, or, for the ESO devstack installs on a cluster it did not
    /// create, one of the stack's own. Stores without a class are served by
    /// every controller (ESO's `ShouldProcessStore`), so each stack on a
    /// shared cluster must name its own controller, the first stack too.
    pub fn controller_class(&self) -> Option<String> {
        match &self.eso.cluster {
            Some(eso) => eso.controller_class.clone(),
            None => (self.cluster.provider == super::Provider::Existing)
                .then(|| format!("devstack-{}", self.name)),
        }
    }
}

impl EsoSettings {
    /// Whether devstack delivers ESO itself (the CRD and operator levels).
    pub fn installs(&self) -> bool {
        self.cluster.is_none()
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GitopsSettings {
    pub source: GitopsSourceKind,
    /// Local manifests; `None` = the copy built into devstack.
    pub path: Option<PathBuf>,
    pub git_url: Option<String>,
    pub git_branch: String,
    pub git_path: String,
    pub layout: GitopsLayout,
    pub interval: HumanDuration,
    /// The user's Kustomizations, dependencies before their dependents,
    /// otherwise in profile order.
    pub apps: Vec<AppSettings>,
}

/// Names of the Kustomizations devstack applies itself, which no app may take.
pub const DEVSTACK_KUSTOMIZATIONS: &[&str] = &[
    "devstack",
    "localstack",
    "external-secrets-crds",
    "external-secrets-operator",
    "external-secrets-crs",
];

/// One of the user's Kustomizations (`gitops.apps`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppSettings {
    pub name: String,
    /// Normalized (`./apps/` -> `apps`, `.` for the root): for
    /// `gitops.source: local` relative to the profile file's directory
    /// ([`Settings::base_dir`]), for `git` inside the repository.
    pub path: String,
    pub depends_on: Vec<String>,
    pub wait: bool,
    pub timeout: HumanDuration,
}

/// The name of the Secret that holds sensitive facts when the profile names none.
pub const DEFAULT_FACTS_SECRET: &str = "devstack-stack-secrets";

/// The user's facts (`facts`), resolved: every source read, precedence applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FactsSettings {
    /// ConfigMaps in flux-system that carry the facts besides
    /// `devstack-stack-facts`.
    pub config_maps: Vec<String>,
    /// The Secret in flux-system that carries the sensitive facts.
    pub secret: String,
    pub facts: BTreeMap<String, Fact>,
    pub helm_values: Vec<HelmValuesSettings>,
}

impl Default for FactsSettings {
    fn default() -> Self {
        FactsSettings {
            config_maps: Vec::new(),
            secret: DEFAULT_FACTS_SECRET.into(),
            facts: BTreeMap::new(),
            helm_values: Vec::new(),
        }
    }
}

impl FactsSettings {
    /// Whether any fact belongs in the Secret rather than a ConfigMap.
    pub fn sensitive_any(&self) -> bool {
        self.facts.values().any(|f| f.sensitive)
    }
}

/// One fact. `Debug` never shows the value; `Serialize` shows it only when
/// the fact is not sensitive, so `profile show` can list plain facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub value: SecretString,
    pub sensitive: bool,
    pub source: FactSource,
}

impl Serialize for Fact {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("Fact", 3)?;
        if self.sensitive {
            out.serialize_field("value", &self.value)?;
        } else {
            out.serialize_field("value", self.value.expose())?;
        }
        out.serialize_field("sensitive", &self.sensitive)?;
        out.serialize_field("source", &self.source)?;
        out.end()
    }
}

/// Where a fact's value came from. Paths are as the profile wrote them,
/// relative to its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FactSource {
    /// `facts.values`.
    Profile,
    Env {
        variable: String,
    },
    File {
        path: PathBuf,
        line: usize,
    },
    Terraform {
        path: PathBuf,
        output: String,
    },
}

impl std::fmt::Display for FactSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FactSource::Profile => f.write_str("profile facts.values"),
            FactSource::Env { variable } => write!(f, "env {variable}"),
            FactSource::File { path, line } => write!(f, "{}:{line}", path.display()),
            FactSource::Terraform { path, output } => {
                write!(f, "{} output {output}", path.display())
            }
        }
    }
}

impl Serialize for FactSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A ConfigMap of Helm values (`facts.helmValues`). `${NAME}` in `values`
/// is left as written: it is substituted when the ConfigMap is rendered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HelmValuesSettings {
    pub name: String,
    pub namespace: String,
    pub key: String,
    pub values: serde_json::Map<String, serde_json::Value>,
}

/// The key `valuesFrom` reads when it names none.
pub const DEFAULT_HELM_VALUES_KEY: &str = "values.yaml";

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageSettings {
    /// An offline bundle the user named; `None` = the artifact cache
    /// ([`Settings::bundle_dir`]), which `up` and `pull` fill.
    pub bundle: Option<PathBuf>,
    pub preload: Vec<String>,
    /// Registry host -> mirror (`http(s)://host[:port][/prefix]`), from
    /// `images.mirrors` and `DEVSTACK_MIRRORS` (which wins per registry).
    pub mirrors: BTreeMap<String, String>,
    /// `DEVSTACK_DOWNLOAD_MIRROR`: serves `<url>/<host>/<path>` for every download.
    pub download_mirror: Option<String>,
    /// `DEVSTACK_PINS`: a file of pins that replace the built-in ones.
    pub pins_file: Option<PathBuf>,
    /// The cluster's nodes pull the stack's images themselves (an existing
    /// cluster whose nodes are not containers here), through `mirrors`.
    /// Known once `up` met the nodes (`stack::Found`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nodes_pull: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum SecretSource {
    Literal(SecretString),
    Json(BTreeMap<String, SecretString>),
    Env(String),
    File(PathBuf),
    Generate(GenerateSpec),
}

impl SecretSource {
    /// The value as it is stored, for sources the profile alone decides
    /// (`value`, `json`); the others are read when seeding.
    pub fn inline_value(&self) -> Option<SecretString> {
        match self {
            SecretSource::Literal(value) => Some(value.clone()),
            SecretSource::Json(map) => {
                let object: BTreeMap<&str, &str> =
                    map.iter().map(|(k, v)| (k.as_str(), v.expose())).collect();
                Some(SecretString::new(
                    serde_json::to_string(&object).expect("string map serializes"),
                ))
            }
            SecretSource::Env(_) | SecretSource::File(_) | SecretSource::Generate(_) => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretSettings {
    pub name: String,
    pub description: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub source: SecretSource,
    pub format: SecretFormat,
    pub sync: Option<SyncSpec>,
}

/// A parameter resolved: its value's source read at seeding time.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParameterSettings {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ParameterType,
    /// The tier an inline value needs (values read when seeding pick theirs then).
    pub tier: ParameterTier,
    pub description: Option<String>,
    pub source: SecretSource,
    pub sync: Option<SyncSpec>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifySettings {
    pub on_up: bool,
    pub namespace: String,
    pub push_secret: bool,
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    pub preflight: HumanDuration,
    pub localstack: HumanDuration,
    pub cluster: HumanDuration,
    pub preload: HumanDuration,
    pub flux: HumanDuration,
    pub eso: HumanDuration,
    pub seed: HumanDuration,
    pub verify: HumanDuration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            preflight: HumanDuration::secs(30),
            localstack: HumanDuration::secs(120),
            cluster: HumanDuration::secs(300),
            preload: HumanDuration::secs(300),
            flux: HumanDuration::secs(300),
            eso: HumanDuration::secs(600),
            seed: HumanDuration::secs(120),
            verify: HumanDuration::secs(180),
        }
    }
}

impl Settings {
    /// Name of the Docker network, and prefix of every container.
    pub fn resource_prefix(&self) -> String {
        format!("devstack-{}", self.name)
    }

    pub fn kube_context(&self) -> String {
        format!("devstack-{}", self.name)
    }

    /// Whether the provider was chosen by a flag, an environment variable
    /// or the profile; otherwise it is the built-in default, which devstack
    /// may replace (the existing stack's provider, or the K3s fallback).
    pub fn provider_pinned(&self) -> bool {
        !matches!(
            self.origins.get("cluster.provider"),
            None | Some(Origin::Default)
        )
    }

    /// These settings on another provider, with that provider's default node
    /// image. Only for an unpinned provider: a profile that names a provider
    /// has a `cluster` block, and with it its image and node counts.
    pub fn with_provider(&self, provider: Provider) -> Result<Settings, Error> {
        let mut settings = self.clone();
        if provider == settings.cluster.provider {
            return Ok(settings);
        }
        if provider == Provider::K3s && settings.cluster.servers > 1 {
            return Err(Error::user(format!(
                "`cluster.servers: {}` is not supported with provider k3s",
                settings.cluster.servers
            ))
            .with_hint("use one server, or install kind for several control planes"));
        }
        settings.cluster.provider = provider;
        settings.cluster.version = None;
        settings.cluster.image = match provider {
            Provider::K3s => versions::K3S_IMAGE.to_string(),
            Provider::Kind => versions::KIND_NODE_IMAGE.to_string(),
            Provider::Existing => String::new(),
        };
        if provider == Provider::Existing {
            // The only mode an existing cluster's pods can reach.
            settings.localstack.mode = crate::profile::LocalStackMode::InCluster;
        }
        Ok(settings)
    }

    /// Where pulled artifacts are kept, in the offline bundle's format, so
    /// that online and offline runs read them the same way.
    pub fn artifact_cache(&self) -> PathBuf {
        self.state_dir.join("cache").join("artifacts")
    }

    /// The bundle runs read artifacts from: the one the user named, else
    /// the artifact cache once something was pulled into it.
    pub fn bundle_dir(&self) -> Option<PathBuf> {
        if let Some(dir) = &self.images.bundle {
            return Some(dir.clone());
        }
        let cache = self.artifact_cache();
        cache.join("index.json").is_file().then_some(cache)
    }

    /// These settings with LocalStack's host port known.
    pub fn with_localstack_port(&self, port: u16) -> Settings {
        let mut settings = self.clone();
        settings.localstack.bound_port = Some(port);
        settings
    }

    /// The global flags that select this stack, as a user would type them
    /// after `devstack` (e.g. ` -p ci --name job1`), so that a printed
    /// command reaches this stack when pasted. Values that came from a flag
    /// or an environment variable are repeated; a profile picked up from
    /// `./devstack.yaml` or the built-in default needs no flag.
    pub fn cli_flags(&self) -> String {
        let mut flags = String::new();
        if let Some(profile) = &self.profile_reference {
            flags.push_str(&format!(" -p {}", shell_word(profile)));
        }
        let decided_outside_profile =
            |key: &str| matches!(self.origins.get(key), Some(Origin::Flag | Origin::Env));
        if decided_outside_profile("name") {
            flags.push_str(&format!(" --name {}", shell_word(&self.name)));
        }
        if decided_outside_profile("cluster.provider") {
            flags.push_str(&format!(" --provider {}", self.cluster.provider.as_str()));
        }
        flags
    }
}

impl LocalStackSettings {
    /// LocalStack runs in the cluster (`localstack.mode: in-cluster`).
    pub fn in_cluster(&self) -> bool {
        self.mode == LocalStackMode::InCluster
    }

    /// The host port in use: the one bound (chosen for `auto`, or the
    /// port-forward to an in-cluster LocalStack, which opens on a free port
    /// whatever the profile fixes), else the fixed one.
    pub fn host_port(&self) -> Option<u16> {
        self.bound_port.or(self.port.fixed())
    }

    /// The URL clients on this host use. With `port: auto` the port is
    /// known once the stack's LocalStack exists; before that the URL names
    /// port 0, which no client can reach, never another stack.
    pub fn endpoint_url(&self) -> String {
        let host = if self.bind_address.is_unspecified() {
            "127.0.0.1".to_string()
        } else if self.bind_address.is_ipv6() {
            format!("[{}]", self.bind_address)
        } else {
            self.bind_address.to_string()
        };
        format!("http://{host}:{}", self.host_port().unwrap_or(0))
    }
}

/// A word a POSIX shell reads back unchanged.
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@+,".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Namespace and name of the ExternalSecret (and of its target Secret) that
/// stands for a profile secret: the sync spec's namespace (default
/// `default`) and `secretName`, else the secret's name with `/` replaced by
/// `-`, made a valid Kubernetes name (lowercase; other characters AWS allows
/// but Kubernetes does not become `-`).
pub fn profile_external_secret_name(secret: &SecretSettings) -> (String, String) {
    let namespace = secret
        .sync
        .as_ref()
        .map(|s| s.namespace.clone())
        .unwrap_or_else(|| "default".into());
    let name = match secret.sync.as_ref().and_then(|s| s.secret_name.clone()) {
        Some(name) => name,
        None => kube_name(&secret.name),
    };
    (namespace, name)
}

/// A DNS-1123 subdomain from an AWS secret name.
pub(crate) fn kube_name(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut out: String = trimmed.chars().take(253).collect();
    while out.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        out.pop();
    }
    if out.is_empty() { "secret".into() } else { out }
}

pub(super) const SECRET_NAME_HINT: &str =
    "AWS Secrets Manager names use letters, digits and /_+=.@- (at most 512)";

/// AWS Secrets Manager refuses a larger `SecretString` (CreateSecret, PutSecretValue).
pub const MAX_SECRET_STRING_BYTES: usize = 65_536;

pub const SECRET_SIZE_HINT: &str =
    "AWS Secrets Manager refuses a SecretString over 65,536 bytes; store a reference or split it";

/// Why a value cannot be stored, as the end of a sentence naming the secret.
/// Gives the size only: the value itself must never reach a message.
pub fn check_secret_size(value: &SecretString) -> Result<(), String> {
    let bytes = value.expose().len();
    if bytes > MAX_SECRET_STRING_BYTES {
        return Err(format!(
            "is {bytes} bytes, over the {MAX_SECRET_STRING_BYTES}-byte limit of a SecretString"
        ));
    }
    Ok(())
}

/// AWS Secrets Manager's rules for a secret name (CreateSecret `Name`).
pub fn validate_secret_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 512 {
        return Err("must be 1 to 512 characters".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "/_+=.@-".contains(*c)))
    {
        return Err(format!("character `{bad}` is not allowed"));
    }
    Ok(())
}

/// A Kubernetes object name (RFC 1123 subdomain): ConfigMaps, Secrets.
pub fn validate_dns_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("must be 1 to 253 characters".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Err(format!(
            "character `{bad}` is not allowed (lowercase letters, digits, '-' and '.')"
        ));
    }
    if name
        .split('.')
        .any(|part| part.is_empty() || part.starts_with('-') || part.ends_with('-'))
    {
        return Err("must start and end with a letter or digit, around each '.' too".into());
    }
    Ok(())
}

/// A Kubernetes label-like name (RFC 1123 label): namespaces, and names
/// that become part of other names.
pub fn validate_dns_label(name: &str, max: usize) -> Result<(), String> {
    if name.is_empty() || name.len() > max {
        return Err(format!("must be 1 to {max} characters"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!(
            "character `{bad}` is not allowed (lowercase letters, digits and '-')"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}
