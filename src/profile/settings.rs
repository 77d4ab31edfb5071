//! Resolved settings: the profile with defaults filled in and overrides
//! applied, in the order flag > environment variable > profile > built-in
//! default. Everything downstream reads these, never the raw profile.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::duration::HumanDuration;
use super::load::{
    LoadedProfile, Position, ProfileError, ProfileErrors, position_of, position_of_path,
};
use super::schema::*;
use super::secret::SecretString;
use crate::envvars;
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
    pub flux: FluxSettings,
    pub eso: EsoSettings,
    pub gitops: GitopsSettings,
    pub images: ImageSettings,
    pub secrets: Vec<SecretSettings>,
    pub verify: VerifySettings,
    pub timeouts: Timeouts,
    /// Which layer decided the values that can be overridden.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub origins: BTreeMap<String, Origin>,
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
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalStackSettings {
    pub image: String,
    pub services: Vec<String>,
    /// As configured; the port in use is recorded with the stack
    /// ([`crate::state::StackRecord`]) and reported by `env` and `status`.
    pub port: HostPort,
    /// The port this stack's LocalStack was given when `port` is `auto`
    /// (from the stack's record; `None` before it is created).
    #[serde(skip)]
    pub bound_port: Option<u16>,
    pub bind_address: IpAddr,
    pub region: String,
    pub auth_token_env: String,
    /// Whether the token variable is set (never the token itself).
    pub auth_token_present: bool,
    pub env: BTreeMap<String, String>,
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
    pub chart_version: String,
    pub values: serde_json::Map<String, serde_json::Value>,
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
}

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
    /// Settings when no profile is given at all: a Kind stack, because Kind
    /// runs the current Kubernetes; the provider is not pinned, so `up`
    /// falls back to K3s (nothing but Docker) where no kind CLI is found.
    pub fn builtin(overrides: &Overrides) -> Result<Settings, Error> {
        let text = format!(
            "apiVersion: {API_VERSION_V1ALPHA1}\nkind: {KIND_PROFILE}\nname: {BUILTIN_PROFILE_NAME}\n"
        );
        let loaded = super::load::parse("<built-in default>", &text, PathBuf::from("."))
            .map_err(ProfileErrors::into_error)?;
        Settings::resolve(loaded, overrides)
    }

    pub fn resolve(loaded: LoadedProfile, overrides: &Overrides) -> Result<Settings, Error> {
        resolve_with_env(loaded, overrides, &|name| envvars::get(name))
    }

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
        };
        Ok(settings)
    }

    /// These settings with LocalStack's host port known.
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
    /// The host port in use: the fixed one, or the one chosen for `auto`.
    pub fn host_port(&self) -> Option<u16> {
        self.port.fixed().or(self.bound_port)
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

type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One overridable value with its origin.
fn pick<T>(
    origins: &mut BTreeMap<String, Origin>,
    key: &str,
    flag: Option<T>,
    env: Option<T>,
    profile: Option<T>,
    default: T,
) -> T {
    let (value, origin) = if let Some(v) = flag {
        (v, Origin::Flag)
    } else if let Some(v) = env {
        (v, Origin::Env)
    } else if let Some(v) = profile {
        (v, Origin::Profile)
    } else {
        (default, Origin::Default)
    };
    origins.insert(key.to_string(), origin);
    value
}

fn env_parsed<T: std::str::FromStr>(env: EnvLookup, name: &str) -> Result<Option<T>, Error> {
    match env(name) {
        None => Ok(None),
        Some(raw) => raw.parse().map(Some).map_err(|_| {
            Error::user(format!(
                "environment variable {name} has an invalid value `{raw}`"
            ))
            .with_hint(format!("fix or unset {name}"))
        }),
    }
}

/// A profile's errors, collected so that one run reports all of them.
struct Problems<'a> {
    origin: &'a str,
    /// The text the spec was read from, to find positions in.
    text: &'a str,
    errors: Vec<ProfileError>,
}

impl Problems<'_> {
    fn at(&mut self, location: &serde_saphyr::Location, message: String, hint: Option<String>) {
        self.push(Some(position_of(location)), message, hint);
    }

    /// An error about the node at a dotted path such as `cluster.ports[1].protocol`.
    fn at_path(&mut self, path: &str, message: String, hint: Option<String>) {
        self.push(position_of_path(self.text, path), message, hint);
    }

    fn push(&mut self, position: Option<Position>, message: String, hint: Option<String>) {
        self.errors.push(ProfileError {
            origin: self.origin.to_string(),
            position,
            message,
            hint,
        });
    }

    fn finish(self) -> Result<(), Error> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ProfileErrors(self.errors).into_error())
        }
    }
}

const BIND_ADDRESS_HINT: &str = "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)";

/// Resolves every setting. Errors in the profile do not stop resolution: it
/// goes on with a stand-in value so that the later ones are found too, and
/// fails at the end with all of them. Errors in flags and environment
/// variables fail at once, being about this run rather than the file.
pub(crate) fn resolve_with_env(
    loaded: LoadedProfile,
    overrides: &Overrides,
    env: EnvLookup,
) -> Result<Settings, Error> {
    let origin_name = loaded.origin.clone();
    let base_dir = loaded.base_dir.clone();
    let spec = loaded.spec;
    let mut problems = Problems {
        origin: &loaded.origin,
        text: &loaded.text,
        errors: loaded.structural_errors.clone(),
    };
    let relative = |p: &str| -> PathBuf {
        let path = Path::new(p);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            base_dir.join(path)
        }
    };
    let mut origins = BTreeMap::new();

    let name = pick(
        &mut origins,
        "name",
        overrides.name.clone(),
        env(envvars::DEVSTACK_NAME),
        Some(spec.name.value.clone()),
        String::new(),
    );
    if let Err(why) = validate_stack_name(&name) {
        match origins["name"] {
            Origin::Profile => problems.at(&spec.name.referenced, why, Some(NAME_HINT.into())),
            _ => {
                return Err(
                    Error::user(format!("invalid stack name `{name}`: {why}")).with_hint(NAME_HINT)
                );
            }
        }
    }

    // Cluster
    let cluster_spec = spec.cluster;
    let env_provider = match env(envvars::DEVSTACK_PROVIDER).as_deref() {
        None => None,
        Some("k3s") => Some(Provider::K3s),
        Some("kind") => Some(Provider::Kind),
        Some(other) => {
            return Err(Error::user(format!(
                "environment variable {} has an invalid value `{other}`",
                envvars::DEVSTACK_PROVIDER
            ))
            .with_hint("use `k3s` or `kind`"));
        }
    };
    let provider = pick(
        &mut origins,
        "cluster.provider",
        overrides.provider,
        env_provider,
        cluster_spec.as_ref().map(|c| c.provider),
        // Kind runs the current Kubernetes (K3s newer than 1.32 cannot be
        // built offline); `up` falls back to K3s when no kind CLI is usable
        // (see `cluster::choice`).
        Provider::Kind,
    );
    let (version, image, servers, agents, api_port, ports, mirrors, kubeconfig, k3s_args) =
        match cluster_spec {
            Some(c) => (
                c.version,
                c.image,
                c.servers,
                c.agents,
                c.api_server_port,
                c.ports,
                c.registry_mirrors,
                c.kubeconfig,
                c.k3s_args,
            ),
            None => Default::default(),
        };
    let asked_version = if image.is_none() {
        version.clone()
    } else {
        None
    };
    let image = match (image, version) {
        (Some(image), _) => image,
        (None, Some(version)) => node_image_for_version(provider, &version),
        (None, None) => match provider {
            Provider::K3s => versions::K3S_IMAGE.to_string(),
            Provider::Kind => versions::KIND_NODE_IMAGE.to_string(),
        },
    };
    let servers = servers.unwrap_or(1);
    if servers == 0 {
        problems.at_path(
            "cluster.servers",
            "`cluster.servers` must be at least 1".into(),
            None,
        );
    }
    if provider == Provider::K3s && servers > 1 {
        problems.at_path(
            "cluster.servers",
            format!("`cluster.servers: {servers}` is not supported with provider k3s"),
            Some("use one server and add `cluster.agents` for more nodes".into()),
        );
    }
    for (index, mapping) in ports.iter().enumerate() {
        if mapping.bind_address.parse::<IpAddr>().is_err() {
            problems.at_path(
                &format!("cluster.ports[{index}].bindAddress"),
                format!(
                    "`cluster.ports` bindAddress `{}` is not an IP address",
                    mapping.bind_address
                ),
                Some(BIND_ADDRESS_HINT.into()),
            );
        }
        if !matches!(mapping.protocol.as_str(), "tcp" | "udp" | "sctp") {
            problems.at_path(
                &format!("cluster.ports[{index}].protocol"),
                format!(
                    "`cluster.ports` protocol `{}` is not tcp, udp or sctp",
                    mapping.protocol
                ),
                Some("use tcp (the default), udp or sctp".into()),
            );
        }
    }
    let cluster = ClusterSettings {
        provider,
        image,
        version: asked_version,
        servers,
        agents: agents.unwrap_or(0),
        api_server_port: api_port.unwrap_or_default(),
        ports,
        registry_mirrors: mirrors,
        merge_kubeconfig: kubeconfig.as_ref().and_then(|k| k.merge).unwrap_or(true),
        switch_context: kubeconfig
            .as_ref()
            .and_then(|k| k.switch_context)
            .unwrap_or(false),
        k3s_args,
    };

    // LocalStack
    let ls = spec.localstack;
    let ls_image = pick(
        &mut origins,
        "localstack.image",
        overrides.localstack_image.clone(),
        env(envvars::DEVSTACK_LOCALSTACK_IMAGE),
        ls.as_ref().and_then(|l| l.image.clone()),
        versions::LOCALSTACK_IMAGE.to_string(),
    );
    let ls_port = pick(
        &mut origins,
        "localstack.port",
        overrides.localstack_port,
        env_parsed::<HostPort>(env, envvars::DEVSTACK_LOCALSTACK_PORT)?,
        ls.as_ref().and_then(|l| l.port),
        HostPort::Auto,
    );
    let services: Vec<String> = ls
        .as_ref()
        .and_then(|l| l.services.clone())
        .unwrap_or_else(|| {
            DEFAULT_LOCALSTACK_SERVICES
                .iter()
                .map(|s| s.to_string())
                .collect()
        });
    for (required, why) in REQUIRED_LOCALSTACK_SERVICES {
        if !services.iter().any(|s| s == required) {
            problems.at_path(
                "localstack.services",
                format!("`localstack.services` lacks `{required}`, which {why}"),
                Some(format!("add `{required}` to localstack.services")),
            );
        }
    }
    let bind = ls
        .as_ref()
        .and_then(|l| l.bind_address.clone())
        .unwrap_or_else(default_bind_address);
    let bind_address: IpAddr = bind.parse().unwrap_or_else(|_| {
        problems.at_path(
            "localstack.bindAddress",
            format!("`localstack.bindAddress` `{bind}` is not an IP address"),
            Some(BIND_ADDRESS_HINT.into()),
        );
        IpAddr::from([127, 0, 0, 1])
    });
    let auth_token_env = ls
        .as_ref()
        .and_then(|l| l.auth_token_env.clone())
        .unwrap_or_else(|| envvars::LOCALSTACK_AUTH_TOKEN.to_string());
    let localstack = LocalStackSettings {
        image: ls_image,
        services,
        port: ls_port,
        bound_port: None,
        bind_address,
        region: ls
            .as_ref()
            .and_then(|l| l.region.clone())
            .unwrap_or_else(|| "us-east-1".into()),
        auth_token_present: env(&auth_token_env).is_some(),
        auth_token_env,
        env: ls.map(|l| l.env).unwrap_or_default(),
    };

    // Flux and ESO
    let flux_spec = spec.flux;
    let components: Vec<String> = flux_spec
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
            let hint = match super::load::closest_match(component, &known) {
                Some(c) => format!("did you mean `{c}`? known: {}", FLUX_COMPONENTS.join(", ")),
                None => format!("known components: {}", FLUX_COMPONENTS.join(", ")),
            };
            problems.at_path(
                &format!("flux.components[{index}]"),
                format!("unknown Flux component `{component}`"),
                Some(hint),
            );
        }
    }
    for required in REQUIRED_FLUX_COMPONENTS {
        if !components.iter().any(|c| c == required) {
            problems.at_path(
                "flux.components",
                format!(
                    "`flux.components` lacks `{required}`, which delivers the External Secrets stack"
                ),
                Some(format!("add `{required}` to flux.components")),
            );
        }
    }
    let flux = FluxSettings {
        version: flux_spec
            .and_then(|f| f.version)
            .unwrap_or_else(|| versions::FLUX_VERSION.to_string()),
        components,
    };
    let eso_spec = spec.eso;
    let eso = EsoSettings {
        chart_version: eso_spec
            .as_ref()
            .and_then(|e| e.chart_version.clone())
            .unwrap_or_else(|| versions::ESO_CHART_VERSION.to_string()),
        values: eso_spec.and_then(|e| e.values).unwrap_or_default(),
    };

    // GitOps source
    let g = spec.gitops;
    let source = g
        .as_ref()
        .and_then(|g| g.source)
        .unwrap_or(GitopsSourceKind::Local);
    let git = g.as_ref().and_then(|g| g.git.as_ref());
    if source == GitopsSourceKind::Git && git.is_none() {
        problems.at_path(
            "gitops.source",
            "`gitops.source: git` needs `gitops.git.url`".into(),
            Some("add gitops.git with url, branch and path, or use `gitops.source: local`".into()),
        );
    }
    let gitops = GitopsSettings {
        source,
        path: g.as_ref().and_then(|g| g.path.as_deref()).map(relative),
        git_url: git.map(|g| g.url.clone()),
        git_branch: git
            .and_then(|g| g.branch.clone())
            .unwrap_or_else(|| "main".into()),
        git_path: git
            .and_then(|g| g.path.clone())
            .unwrap_or_else(|| "./manifests/external-secrets".into()),
        layout: g
            .as_ref()
            .and_then(|g| g.layout)
            .unwrap_or(GitopsLayout::Chain),
        interval: g
            .as_ref()
            .and_then(|g| g.interval)
            .unwrap_or(HumanDuration::secs(600)),
    };

    if gitops.source == GitopsSourceKind::Local && gitops.path.is_none() {
        for (key, why) in renamed_or_dropped_eso_workloads(&eso.values) {
            problems.at_path(
                &format!("eso.values.{key}"),
                format!("`eso.values.{key}` {why}, which devstack's operator level health-checks by name"),
                Some(format!(
                    "remove `{key}` from eso.values, or deliver your own manifests with `gitops.path`"
                )),
            );
        }
    }

    // Images
    let images_spec = spec.images;
    let bundle = pick(
        &mut origins,
        "images.bundle",
        overrides.bundle.clone().map(Some),
        env(envvars::DEVSTACK_BUNDLE).map(|b| Some(PathBuf::from(b))),
        images_spec
            .as_ref()
            .and_then(|i| i.bundle.as_deref())
            .map(|b| Some(relative(b))),
        None,
    );
    let (preload, mut mirrors) = images_spec
        .map(|i| (i.preload, i.mirrors))
        .unwrap_or_default();
    if let Some(list) = env(envvars::DEVSTACK_MIRRORS) {
        match parse_mirror_list(&list) {
            Ok(from_env) => {
                for (registry, url) in from_env {
                    origins.insert(format!("images.mirrors.{registry}"), Origin::Env);
                    mirrors.insert(registry, url);
                }
            }
            Err(why) => problems.at_path(
                "images.mirrors",
                format!("{} is invalid: {why}", envvars::DEVSTACK_MIRRORS),
                Some(MIRRORS_HINT.into()),
            ),
        }
    }
    for (registry, url) in &mirrors {
        if let Err(why) = check_mirror(registry, url) {
            problems.at_path(
                &format!("images.mirrors.{registry}"),
                why,
                Some(MIRRORS_HINT.into()),
            );
        }
    }
    let download_mirror =
        env(envvars::DEVSTACK_DOWNLOAD_MIRROR).map(|url| url.trim_end_matches('/').to_string());
    if let Some(url) = &download_mirror
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        problems.at_path(
            "images.mirrors",
            format!(
                "{} `{url}` is not an http(s) URL",
                envvars::DEVSTACK_DOWNLOAD_MIRROR
            ),
            Some("set it to the mirror's base URL, e.g. `https://files.example.com`: downloads are fetched from `<url>/<host>/<path>`".into()),
        );
    }
    // A mirror of a whole registry also serves the nodes' own pulls (the
    // images a workload names); one under a path (a Harbor proxy project)
    // needs the node's containerd told that path, so it is left to
    // `cluster.registryMirrors`, which the profile sets explicitly.
    let mut cluster = cluster;
    for (registry, url) in &mirrors {
        let path = url.splitn(4, '/').nth(3).unwrap_or("");
        if path.trim_matches('/').is_empty() {
            cluster
                .registry_mirrors
                .entry(registry.clone())
                .or_insert_with(|| vec![url.trim_end_matches('/').to_string()]);
        }
    }
    let images = ImageSettings {
        bundle,
        preload,
        mirrors,
        download_mirror,
        pins_file: env(envvars::DEVSTACK_PINS).map(PathBuf::from),
    };

    // Secrets
    let mut secrets = Vec::new();
    let mut seen = BTreeMap::new();
    for (index, entry) in spec.secrets.into_iter().enumerate() {
        let location = entry.referenced;
        let s = entry.value;
        if let Err(why) = validate_secret_name(&s.name) {
            problems.at(
                &location,
                format!("invalid secret name `{}`: {why}", s.name),
                Some(SECRET_NAME_HINT.into()),
            );
        }
        if seen.insert(s.name.clone(), ()).is_some() {
            problems.at(
                &location,
                format!("secret `{}` is declared twice", s.name),
                Some("give each secret a unique name".into()),
            );
        }
        let mut sources = Vec::new();
        if let Some(v) = s.value {
            sources.push(("value", SecretSource::Literal(v)));
        }
        if let Some(j) = s.json {
            if j.is_empty() {
                problems.at(
                    &location,
                    format!("secret `{}` has an empty `json` object", s.name),
                    Some("add at least one key".into()),
                );
            }
            sources.push(("json", SecretSource::Json(j)));
        }
        if let Some(e) = s.from_env {
            sources.push(("fromEnv", SecretSource::Env(e)));
        }
        if let Some(f) = s.from_file {
            sources.push(("fromFile", SecretSource::File(relative(&f))));
        }
        if let Some(g) = s.generate {
            if g.length == 0 || g.length > 4096 {
                problems.at(
                    &location,
                    format!(
                        "secret `{}`: generate.length must be between 1 and 4096",
                        s.name
                    ),
                    None,
                );
            }
            sources.push(("generate", SecretSource::Generate(g)));
        }
        if sources.len() != 1 {
            let found: Vec<&str> = sources.iter().map(|(k, _)| *k).collect();
            problems.at(
                &location,
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
            continue;
        }
        let (key, source) = sources.pop().expect("exactly one source");
        if let Some(value) = source.inline_value()
            && let Err(why) = check_secret_size(&value)
        {
            problems.at_path(
                &format!("secrets[{index}].{key}"),
                format!("secret `{}`: `{key}` {why}", s.name),
                Some(SECRET_SIZE_HINT.into()),
            );
        }
        let format = match (&source, s.format) {
            (SecretSource::Json(_), _) => SecretFormat::Json,
            (SecretSource::Generate(_), Some(SecretFormat::Json)) => {
                problems.at(
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
        secrets.push(SecretSettings {
            name: s.name,
            description: s.description,
            tags: s.tags,
            source,
            format,
            sync: s.sync,
        });
    }

    let v = spec.verify;
    let verify = VerifySettings {
        on_up: v.as_ref().and_then(|v| v.on_up).unwrap_or(true),
        namespace: v
            .as_ref()
            .and_then(|v| v.namespace.clone())
            .unwrap_or_else(|| "devstack-verify".into()),
        push_secret: v.as_ref().and_then(|v| v.push_secret).unwrap_or(false),
    };

    let t = spec.timeouts.unwrap_or_default();
    let d = Timeouts::default();
    let timeouts = Timeouts {
        preflight: t.preflight.unwrap_or(d.preflight),
        localstack: t.localstack.unwrap_or(d.localstack),
        cluster: t.cluster.unwrap_or(d.cluster),
        preload: t.preload.unwrap_or(d.preload),
        flux: t.flux.unwrap_or(d.flux),
        eso: t.eso.unwrap_or(d.eso),
        seed: t.seed.unwrap_or(d.seed),
        verify: t.verify.unwrap_or(d.verify),
    };

    problems.finish()?;
    Ok(Settings {
        name,
        profile: origin_name.clone(),
        profile_reference: None,
        base_dir: base_dir.clone(),
        state_dir: state_dir(env),
        user_kubeconfig: user_kubeconfig(env),
        cluster,
        localstack,
        flux,
        eso,
        gitops,
        images,
        secrets,
        verify,
        timeouts,
        origins,
    })
}

fn state_dir(env: EnvLookup) -> PathBuf {
    if let Some(dir) = env(envvars::DEVSTACK_HOME) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = env(envvars::XDG_STATE_HOME) {
        return PathBuf::from(dir).join("devstack");
    }
    let home = env(envvars::HOME).unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".local/state/devstack")
}

fn user_kubeconfig(env: EnvLookup) -> PathBuf {
    if let Some(list) = env(envvars::KUBECONFIG)
        && let Some(first) = std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty())
    {
        return first;
    }
    let home = env(envvars::HOME).unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".kube/config")
}

const NAME_HINT: &str =
    "use 1-32 lowercase letters, digits and '-', starting with a letter (e.g. `dev`)";

pub fn validate_stack_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 32 {
        return Err("must be 1 to 32 characters".into());
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("must start with a lowercase letter".into());
    }
    if name.ends_with('-') {
        return Err("must not end with '-'".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!("character `{bad}` is not allowed"));
    }
    Ok(())
}

const SECRET_NAME_HINT: &str =
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

const MIRRORS_HINT: &str = "write mirrors as `REGISTRY=URL` pairs, e.g. `docker.io=https://harbor.example.com/dockerhub-proxy,ghcr.io=https://harbor.example.com/ghcr-proxy`";

/// `docker.io=URL,ghcr.io=URL` -> pairs.
pub fn parse_mirror_list(list: &str) -> Result<Vec<(String, String)>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| match item.split_once('=') {
            Some((registry, url)) if !registry.trim().is_empty() && !url.trim().is_empty() => {
                Ok((registry.trim().to_string(), url.trim().to_string()))
            }
            _ => Err(format!("`{item}` is not `REGISTRY=URL`")),
        })
        .collect()
}

/// A mirror entry is a registry host and an http(s) URL without query.
fn check_mirror(registry: &str, url: &str) -> Result<(), String> {
    let host_like = registry.contains('.') || registry.contains(':') || registry == "localhost";
    if !host_like || registry.contains('/') {
        return Err(format!(
            "mirror key `{registry}` is not a registry host (e.g. `docker.io`, `ghcr.io`)"
        ));
    }
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return Err(format!(
            "mirror `{url}` for {registry} is not an http(s) URL"
        ));
    };
    if rest.is_empty() || rest.starts_with('/') || rest.contains(['?', '#', '@']) {
        return Err(format!(
            "mirror `{url}` for {registry} is not `http(s)://host[:port][/path]`"
        ));
    }
    Ok(())
}

fn node_image_for_version(provider: Provider, version: &str) -> String {
    let v = if version.starts_with('v') {
        version.to_string()
    } else {
        format!("v{version}")
    };
    match provider {
        Provider::K3s if v.contains("k3s") => format!("rancher/k3s:{v}"),
        Provider::K3s => format!("rancher/k3s:{v}-k3s1"),
        Provider::Kind => format!("kindest/node:{v}"),
    }
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
