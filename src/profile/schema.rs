//! The profile file format, `apiVersion: devstack.dev/v1alpha1`, as written
//! by users. Every struct rejects unknown fields; optional fields fall back to
//! built-in defaults during resolution (see `resolve/`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::duration::HumanDuration;
use super::secret::SecretString;

pub const API_VERSION_V1ALPHA1: &str = "devstack.dev/v1alpha1";
pub const SUPPORTED_API_VERSIONS: &[&str] = &[API_VERSION_V1ALPHA1];
pub const KIND_PROFILE: &str = "Profile";

/// Only the fields needed to pick a schema; everything else is ignored here.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub api_version: Option<Spanned<String>>,
    pub kind: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProfileV1Alpha1 {
    #[allow(dead_code)]
    pub api_version: String,
    #[allow(dead_code)]
    pub kind: String,
    /// The stack name: prefixes every container, network and kube context.
    pub name: Spanned<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub cluster: Option<ClusterSpec>,
    #[serde(default)]
    pub localstack: Option<LocalStackSpec>,
    #[serde(default)]
    pub registry: Option<RegistrySpec>,
    #[serde(default)]
    pub flux: Option<FluxSpec>,
    #[serde(default)]
    pub eso: Option<EsoSpec>,
    #[serde(default)]
    pub gitops: Option<GitopsSpec>,
    #[serde(default)]
    pub images: Option<ImagesSpec>,
    #[serde(default)]
    pub secrets: Vec<Spanned<SecretSpec>>,
    /// SSM Parameter Store parameters, seeded beside the secrets.
    #[serde(default)]
    pub parameters: Vec<Spanned<ParameterSpec>>,
    #[serde(default)]
    pub verify: Option<VerifySpec>,
    #[serde(default)]
    pub timeouts: Option<TimeoutsSpec>,
    #[serde(default)]
    pub facts: Option<FactsSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    K3s,
    Kind,
    /// A cluster devstack did not create, reached by a kubeconfig context
    /// (`cluster.context`): devstack installs into it and never removes it.
    Existing,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::K3s => "k3s",
            Provider::Kind => "kind",
            Provider::Existing => "existing",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    pub provider: Provider,
    /// Kubernetes version with a pinned node image, e.g. `v1.36.4` (Kind) or
    /// `v1.32.0` (K3s); picks the provider's node image.
    pub version: Option<String>,
    /// Node image; overrides `version`.
    pub image: Option<String>,
    /// Control-plane nodes (kind) / server nodes (k3s).
    pub servers: Option<u8>,
    /// Worker nodes (kind) / agent nodes (k3s).
    pub agents: Option<u8>,
    /// Host port of the API server: a number, or `auto` (also 0 or absent)
    /// for a free port chosen at creation.
    pub api_server_port: Option<HostPort>,
    #[serde(default)]
    pub ports: Vec<PortMappingSpec>,
    /// Registry mirrors for the nodes' containerd: registry host -> endpoints.
    #[serde(default)]
    pub registry_mirrors: BTreeMap<String, Vec<String>>,
    pub kubeconfig: Option<KubeconfigSpec>,
    /// Extra arguments for the k3s server (ignored by kind).
    #[serde(default)]
    pub k3s_args: Vec<String>,
    /// The kubeconfig context of an `existing` cluster (default: the
    /// current context of `KUBECONFIG`, else ~/.kube/config).
    pub context: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PortMappingSpec {
    pub host_port: u16,
    pub container_port: u16,
    #[serde(default = "default_protocol")]
    pub protocol: String,
    #[serde(default = "default_bind_address")]
    pub bind_address: String,
}

/// A host port: fixed, or chosen free when the stack is created, so that
/// parallel stacks of one profile never collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostPort {
    #[default]
    Auto,
    Fixed(u16),
}

impl HostPort {
    pub fn fixed(self) -> Option<u16> {
        match self {
            HostPort::Auto => None,
            HostPort::Fixed(port) => Some(port),
        }
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPort::Auto => f.write_str("auto"),
            HostPort::Fixed(port) => write!(f, "{port}"),
        }
    }
}

/// The forms a host port is written in, wherever it is given: `0` is read
/// as `auto`, as kind reads an `apiServerPort` of 0.
pub const PORT_FORMS: &str = "a number from 1 to 65535, or `auto` (or 0) for a free port";

impl std::str::FromStr for HostPort {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "auto" | "0" => Ok(HostPort::Auto),
            other => other
                .parse::<u16>()
                .map(HostPort::Fixed)
                .map_err(|_| format!("`{other}` is not a port: use {PORT_FORMS}")),
        }
    }
}

impl Serialize for HostPort {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HostPort::Auto => s.serialize_str("auto"),
            HostPort::Fixed(port) => s.serialize_u16(*port),
        }
    }
}

impl<'de> Deserialize<'de> for HostPort {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HostPort;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(PORT_FORMS)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<HostPort, E> {
                match u16::try_from(v) {
                    Ok(0) => Ok(HostPort::Auto),
                    Ok(port) => Ok(HostPort::Fixed(port)),
                    Err(_) => Err(E::invalid_value(serde::de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<HostPort, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HostPort, E> {
                if v == "auto" {
                    Ok(HostPort::Auto)
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(v), &self))
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn default_protocol() -> String {
    "tcp".into()
}
pub fn default_bind_address() -> String {
    "127.0.0.1".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeconfigSpec {
    /// Merge the stack's context into the user's kubeconfig (default true).
    pub merge: Option<bool>,
    /// Also make it the current context (default false).
    pub switch_context: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalStackSpec {
    /// Where LocalStack runs: a container beside the cluster (the default),
    /// or a Deployment inside it.
    pub mode: Option<LocalStackMode>,
    pub image: Option<String>,
    pub services: Option<Vec<String>>,
    /// Host port: a number, or `auto` (the default) for a free port chosen
    /// at creation and recorded with the stack.
    pub port: Option<HostPort>,
    pub bind_address: Option<String>,
    pub region: Option<String>,
    /// Environment variable holding the auth token (default LOCALSTACK_AUTH_TOKEN).
    pub auth_token_env: Option<String>,
    /// Extra environment for the LocalStack container (no secrets: use auth_token_env).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The stack's own image registry: a container beside the cluster whose
/// `localhost:<port>` the nodes pull from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RegistrySpec {
    pub enabled: Option<bool>,
    /// Host port on 127.0.0.1: a number, or `auto` (the default) for a free
    /// port chosen when the stack is created and recorded with it.
    pub port: Option<HostPort>,
    pub image: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LocalStackMode {
    /// A Docker container on the stack network, reached by pods through a
    /// Service without selector.
    Container,
    /// A Deployment and Service in namespace `localstack`, delivered as the
    /// Flux level the ESO operator depends on; this machine reaches it
    /// through a port-forward.
    InCluster,
}

impl LocalStackMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LocalStackMode::Container => "container",
            LocalStackMode::InCluster => "in-cluster",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FluxSpec {
    pub version: Option<String>,
    pub components: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EsoSpec {
    pub install: Option<EsoInstall>,
    pub chart_version: Option<String>,
    /// Helm values merged over devstack's own (mapping).
    pub values: Option<serde_json::Map<String, serde_json::Value>>,
    /// How the stores authenticate: `static` keys (default) or the
    /// controller's `serviceAccount` (IRSA, as on EKS).
    pub auth: Option<EsoAuth>,
}

/// Whether devstack installs the External Secrets Operator (`eso.install`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EsoInstall {
    /// Use an ESO the cluster already runs when it can serve the stack;
    /// else install devstack's own.
    #[default]
    Auto,
    /// Install devstack's own; an ESO already there is refused.
    Always,
    /// Use the ESO the cluster already runs; none there is refused.
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GitopsSourceKind {
    /// devstack publishes local manifests to a source inside the stack.
    Local,
    /// Flux reads a git repository.
    Git,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GitopsLayout {
    /// crds -> operator (wait) -> crs (dependsOn operator): race-free.
    Chain,
    /// Every level independent (no dependsOn, no wait), as many hand-written
    /// repositories are: demonstrates the CRD and webhook races.
    Naive,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitopsSpec {
    pub source: Option<GitopsSourceKind>,
    /// Local manifests directory (source: local), relative to the profile file.
    pub path: Option<String>,
    pub git: Option<GitSpec>,
    pub layout: Option<GitopsLayout>,
    pub interval: Option<HumanDuration>,
    /// The user's own Kustomizations, delivered after devstack's.
    #[serde(default)]
    pub apps: Vec<Spanned<AppSpec>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AppSpec {
    pub name: String,
    /// A directory: relative to the profile file (`gitops.source: local`),
    /// or inside the git repository (`gitops.source: git`).
    pub path: String,
    #[serde(default)]
    pub depends_on: Vec<Spanned<String>>,
    /// Wait for the app's workloads to be ready (default true).
    pub wait: Option<bool>,
    /// How long Flux waits for them (default 5m).
    pub timeout: Option<HumanDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitSpec {
    pub url: String,
    pub branch: Option<String>,
    pub path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImagesSpec {
    /// Offline bundle directory (the kit's format), relative to the profile file.
    pub bundle: Option<String>,
    /// Extra images to load into the nodes before workloads start.
    #[serde(default)]
    pub preload: Vec<String>,
    /// Registry mirrors for every image devstack pulls: `docker.io:
    /// https://harbor.example.com/dockerhub-proxy`.
    #[serde(default)]
    pub mirrors: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretSpec {
    pub name: String,
    pub description: Option<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Literal value.
    pub value: Option<SecretString>,
    /// JSON object of key/values, stored as a JSON string.
    pub json: Option<BTreeMap<String, SecretString>>,
    /// Name of an environment variable holding the value.
    pub from_env: Option<String>,
    /// File holding the value, relative to the profile file.
    pub from_file: Option<String>,
    /// Random value, stable across re-seeding unless `--rotate`.
    pub generate: Option<GenerateSpec>,
    /// `json` requires the value to be a JSON object (checked before writing).
    pub format: Option<SecretFormat>,
    /// Sync into the cluster as an ExternalSecret.
    pub sync: Option<SyncSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Charset {
    Alphanumeric,
    Hex,
    Base64url,
    /// Printable ASCII without space and quotes.
    Ascii,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GenerateSpec {
    #[serde(default = "default_generate_length")]
    pub length: u16,
    #[serde(default = "default_charset")]
    pub charset: Charset,
}

fn default_generate_length() -> u16 {
    32
}
fn default_charset() -> Charset {
    Charset::Alphanumeric
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SyncSpec {
    #[serde(default = "default_sync_namespace")]
    pub namespace: String,
    /// Kubernetes Secret name; defaults to the secret's name with `/` -> `-`.
    pub secret_name: Option<String>,
    pub refresh_interval: Option<HumanDuration>,
}

fn default_sync_namespace() -> String {
    "default".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VerifySpec {
    /// Run the round trip at the end of `up` (default true).
    pub on_up: Option<bool>,
    /// Namespace for probe objects.
    pub namespace: Option<String>,
    /// Also push a value back to LocalStack with a PushSecret.
    pub push_secret: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TimeoutsSpec {
    pub preflight: Option<HumanDuration>,
    pub localstack: Option<HumanDuration>,
    pub cluster: Option<HumanDuration>,
    pub preload: Option<HumanDuration>,
    pub flux: Option<HumanDuration>,
    pub eso: Option<HumanDuration>,
    pub seed: Option<HumanDuration>,
    pub verify: Option<HumanDuration>,
}

/// `facts`: values the user's manifests substitute (`${NAME}`), published
/// beside devstack's own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FactsSpec {
    /// ConfigMaps in flux-system the user's Kustomizations read with
    /// `postBuild.substituteFrom`, besides `devstack-stack-facts`.
    #[serde(default)]
    pub config_maps: Vec<Spanned<String>>,
    #[serde(default)]
    pub values: Entries<FactValue>,
    /// Fact name -> environment variable.
    #[serde(default)]
    pub from_env: Entries<String>,
    /// Dotenv files, relative to the profile file.
    #[serde(default)]
    pub from_files: Vec<Spanned<String>>,
    /// `terraform output -json` files, relative to the profile file.
    #[serde(default)]
    pub from_terraform: Vec<Spanned<String>>,
    /// The Secret in flux-system that holds the sensitive facts.
    pub secret: Option<Spanned<String>>,
    /// Facts to treat as sensitive besides sensitive Terraform outputs.
    #[serde(default)]
    pub sensitive: Vec<Spanned<String>>,
    #[serde(default)]
    pub helm_values: Vec<Spanned<HelmValuesSpec>>,
}

/// A ConfigMap of Helm values a HelmRelease reads with `valuesFrom`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HelmValuesSpec {
    pub name: String,
    pub namespace: String,
    pub values: serde_json::Map<String, serde_json::Value>,
    /// The ConfigMap key (default `values.yaml`, the one `valuesFrom` reads).
    pub key: Option<String>,
}

/// A fact's value as written: any YAML scalar, as text, because
/// substitution only ever produces text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactValue(pub SecretString);

impl<'de> Deserialize<'de> for FactValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = FactValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a fact value: a string, number or bool")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FactValue, E> {
                Ok(FactValue(SecretString::new(v)))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<FactValue, E> {
                Ok(FactValue(SecretString::new(v.to_string())))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<FactValue, E> {
                Ok(FactValue(SecretString::new(v.to_string())))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<FactValue, E> {
                Ok(FactValue(SecretString::new(v.to_string())))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<FactValue, E> {
                Ok(FactValue(SecretString::new(v.to_string())))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// A mapping kept in file order with the position of every key and value,
/// so that an error about a key (a fact's name) points at it.
#[derive(Debug)]
pub struct Entries<V>(pub Vec<(Spanned<String>, Spanned<V>)>);

impl<V> Default for Entries<V> {
    fn default() -> Self {
        Entries(Vec::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Entries<V>, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let value = map.next_value::<Spanned<V>>()?;
                    entries.push((key, value));
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(Visitor(std::marker::PhantomData))
    }
}

/// How the External Secrets Operator's stores authenticate to AWS (`eso.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EsoAuth {
    /// Static test keys in a Secret the stores reference (`auth.secretRef`).
    #[default]
    Static,
    /// The EKS way (IRSA): the stores name the controller's ServiceAccount
    /// (`auth.jwt.serviceAccountRef`), annotated with a role that LocalStack's
    /// STS lets its token assume; no static key anywhere in the cluster.
    ServiceAccount,
}

impl EsoAuth {
    pub fn is_static(&self) -> bool {
        *self == EsoAuth::Static
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EsoAuth::Static => "static",
            EsoAuth::ServiceAccount => "serviceAccount",
        }
    }
}

/// SSM's parameter types (`PutParameter` `Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub enum ParameterType {
    #[default]
    String,
    StringList,
    SecureString,
}

impl ParameterType {
    pub fn as_str(self) -> &'static str {
        match self {
            ParameterType::String => "String",
            ParameterType::StringList => "StringList",
            ParameterType::SecureString => "SecureString",
        }
    }
}

/// SSM's storage tiers: the Standard one holds up to 4 KB, Advanced up to 8 KB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ParameterTier {
    Standard,
    Advanced,
}

impl ParameterTier {
    pub fn as_str(self) -> &'static str {
        match self {
            ParameterTier::Standard => "Standard",
            ParameterTier::Advanced => "Advanced",
        }
    }
}

/// A parameter's `value` as written: text, a list (for `StringList`), or a
/// mapping (which no parameter type takes as `value`: it is refused with a
/// position, not lost in a parser's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParameterValue {
    Text(SecretString),
    List(Vec<SecretString>),
    Object,
}

impl<'de> Deserialize<'de> for ParameterValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ParameterValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a scalar parameter value, or a list for a StringList")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ParameterValue, E> {
                Ok(ParameterValue::Text(SecretString::new(v)))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ParameterValue, E> {
                Ok(ParameterValue::Text(SecretString::new(v.to_string())))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ParameterValue, E> {
                Ok(ParameterValue::Text(SecretString::new(v.to_string())))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ParameterValue, E> {
                Ok(ParameterValue::Text(SecretString::new(v.to_string())))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ParameterValue, E> {
                Ok(ParameterValue::Text(SecretString::new(v.to_string())))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ParameterValue, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<SecretString>()? {
                    items.push(item);
                }
                Ok(ParameterValue::List(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<ParameterValue, A::Error> {
                // Drained without keeping anything: the value is refused.
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(ParameterValue::Object)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// One entry of `parameters`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ParameterSpec {
    /// Hierarchical (`/dev/app/db-url`) or flat (`app-db-url`).
    pub name: String,
    #[serde(rename = "type", default)]
    pub kind: ParameterType,
    pub description: Option<String>,
    /// Literal value; a list for `StringList`.
    pub value: Option<ParameterValue>,
    /// JSON object of key/values, stored as a JSON string.
    pub json: Option<BTreeMap<String, SecretString>>,
    pub from_env: Option<String>,
    pub from_file: Option<String>,
    /// Random value, stable across re-seeding unless `--rotate`.
    pub generate: Option<GenerateSpec>,
    /// Sync into the cluster as an ExternalSecret through the Parameter
    /// Store's ClusterSecretStore.
    pub sync: Option<SyncSpec>,
}
