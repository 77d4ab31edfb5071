//! Every environment variable devstack reads, in one place, with those
//! its libraries read for it (`PATH`, the proxy variables). The README's
//! "Environment variables" table lists the same names; a unit test keeps
//! the two in step.

/// Profile to use when `--profile` is not given (a path or a shipped profile name).
pub const DEVSTACK_PROFILE: &str = "DEVSTACK_PROFILE";
/// Stack name, overriding the profile's `name`.
pub const DEVSTACK_NAME: &str = "DEVSTACK_NAME";
/// Cluster provider (`k3s`, `kind` or `existing`), overriding the profile.
pub const DEVSTACK_PROVIDER: &str = "DEVSTACK_PROVIDER";
/// Kubeconfig context of an existing cluster, overriding the profile's;
/// like `--context`, it implies the provider `existing`.
pub const DEVSTACK_CONTEXT: &str = "DEVSTACK_CONTEXT";
/// LocalStack host port (a number, or `auto` for a free one), overriding the profile.
pub const DEVSTACK_LOCALSTACK_PORT: &str = "DEVSTACK_LOCALSTACK_PORT";
/// LocalStack image, overriding the profile.
pub const DEVSTACK_LOCALSTACK_IMAGE: &str = "DEVSTACK_LOCALSTACK_IMAGE";
/// Offline bundle directory (the kit's format), overriding the profile.
pub const DEVSTACK_BUNDLE: &str = "DEVSTACK_BUNDLE";
/// The kind CLI to drive (a path); else `kind` on `PATH`, else the bundle's,
/// else the pinned release, fetched into the cache.
pub const DEVSTACK_KIND: &str = "DEVSTACK_KIND";
/// Registry mirrors for image pulls: `docker.io=URL,ghcr.io=URL`.
pub const DEVSTACK_MIRRORS: &str = "DEVSTACK_MIRRORS";
/// Base URL that serves every download as `<url>/<host>/<path>`.
pub const DEVSTACK_DOWNLOAD_MIRROR: &str = "DEVSTACK_DOWNLOAD_MIRROR";
/// A pins file replacing the built-in artifact pins (a private rebuild).
pub const DEVSTACK_PINS: &str = "DEVSTACK_PINS";
/// Where devstack keeps per-stack state (kubeconfig files, caches).
pub const DEVSTACK_HOME: &str = "DEVSTACK_HOME";
/// LocalStack auth token, passed through to the container when set.
pub const LOCALSTACK_AUTH_TOKEN: &str = "LOCALSTACK_AUTH_TOKEN";
/// Docker engine address, as the Docker CLI reads it; beats any context.
pub const DOCKER_HOST: &str = "DOCKER_HOST";
/// Docker CLI context naming the engine, beating config.json's `currentContext`.
pub const DOCKER_CONTEXT: &str = "DOCKER_CONTEXT";
/// The Docker CLI's configuration directory (config.json, the context store).
pub const DOCKER_CONFIG: &str = "DOCKER_CONFIG";
/// With `DOCKER_HOST`: TLS to the engine, verified with `DOCKER_CERT_PATH`'s CA.
pub const DOCKER_TLS_VERIFY: &str = "DOCKER_TLS_VERIFY";
/// Directory of ca.pem, cert.pem and key.pem for `DOCKER_TLS_VERIFY`.
pub const DOCKER_CERT_PATH: &str = "DOCKER_CERT_PATH";
/// Kubeconfig search path, as kubectl reads it.
pub const KUBECONFIG: &str = "KUBECONFIG";
/// Set in CI systems: progress is printed as plain lines.
pub const CI: &str = "CI";
/// Disables colour when set to any value (<https://no-color.org>).
pub const NO_COLOR: &str = "NO_COLOR";
/// Log filter for `tracing` (`RUST_LOG=devstack=debug`).
pub const RUST_LOG: &str = "RUST_LOG";
/// Base for the default state directory when `DEVSTACK_HOME` is unset.
pub const XDG_STATE_HOME: &str = "XDG_STATE_HOME";
/// The user's home directory.
pub const HOME: &str = "HOME";
/// Where the `kind` and `docker` CLIs are looked up.
pub const PATH: &str = "PATH";
/// Proxies for devstack's own downloads, honoured by its HTTP client
/// (reqwest's system proxy); image pulls go through the Docker engine,
/// which has proxy settings of its own.
pub const HTTPS_PROXY: &str = "HTTPS_PROXY";
pub const HTTP_PROXY: &str = "HTTP_PROXY";
pub const NO_PROXY: &str = "NO_PROXY";

/// All of the above with a one-line description, for the man page's
/// ENVIRONMENT section and the README test.
pub const ALL: &[(&str, &str)] = &[
    (
        DEVSTACK_PROFILE,
        "profile path or shipped profile name used when --profile is absent",
    ),
    (DEVSTACK_NAME, "stack name (overrides the profile's `name`)"),
    (
        DEVSTACK_PROVIDER,
        "cluster provider `k3s`, `kind` or `existing` (overrides the profile)",
    ),
    (
        DEVSTACK_CONTEXT,
        "kubeconfig context of an existing cluster (overrides `cluster.context`; implies the provider `existing`)",
    ),
    (
        DEVSTACK_LOCALSTACK_PORT,
        "LocalStack host port, a number or `auto` for a free one (overrides the profile)",
    ),
    (
        DEVSTACK_LOCALSTACK_IMAGE,
        "LocalStack image (overrides the profile)",
    ),
    (
        DEVSTACK_BUNDLE,
        "offline bundle directory (overrides `images.bundle`)",
    ),
    (
        DEVSTACK_KIND,
        "path of the kind CLI (default: `kind` on PATH, else the offline bundle's `bin/kind`, else the pinned kind release, fetched into the cache)",
    ),
    (
        DEVSTACK_MIRRORS,
        "registry mirrors for every image pull, `docker.io=URL,ghcr.io=URL` (overrides `images.mirrors` per registry)",
    ),
    (
        DEVSTACK_DOWNLOAD_MIRROR,
        "base URL serving every download as `<url>/<host>/<path>` (Flux manifests, ESO chart and CRDs, kind)",
    ),
    (
        DEVSTACK_PINS,
        "JSON file of digests replacing the built-in pins, for a private rebuild (shown by `version --json`)",
    ),
    (
        DEVSTACK_HOME,
        "state directory (default: $XDG_STATE_HOME/devstack or ~/.local/state/devstack)",
    ),
    (
        LOCALSTACK_AUTH_TOKEN,
        "LocalStack auth token for calendar-versioned images, passed to the container when set (never printed)",
    ),
    (
        DOCKER_HOST,
        "Docker engine address; beats any Docker context",
    ),
    (
        DOCKER_CONTEXT,
        "Docker context naming the engine (default: `currentContext` in $DOCKER_CONFIG/config.json, else the local socket)",
    ),
    (
        DOCKER_CONFIG,
        "the Docker CLI's configuration directory, holding config.json and the contexts (default: ~/.docker)",
    ),
    (
        DOCKER_TLS_VERIFY,
        "with DOCKER_HOST: TLS to the engine, verified with the CA in DOCKER_CERT_PATH",
    ),
    (
        DOCKER_CERT_PATH,
        "ca.pem, cert.pem and key.pem for DOCKER_TLS_VERIFY (default: DOCKER_CONFIG)",
    ),
    (
        KUBECONFIG,
        "kubeconfig files the devstack context is merged into",
    ),
    (CI, "when set, progress is printed as plain lines"),
    (NO_COLOR, "when set, no colour"),
    (
        RUST_LOG,
        "log filter for detailed logs, e.g. `devstack=debug`",
    ),
    (XDG_STATE_HOME, "base of the default state directory"),
    (HOME, "home directory (state directory, default kubeconfig)"),
    (
        PATH,
        "where the `kind` and `docker` CLIs are found (kind runs `docker`)",
    ),
    (
        HTTPS_PROXY,
        "proxy for devstack's HTTPS downloads (Flux's manifests, ESO's chart and CRDs, kind); image pulls use the Docker engine's own proxy settings",
    ),
    (
        HTTP_PROXY,
        "proxy for plain-HTTP downloads (a `DEVSTACK_DOWNLOAD_MIRROR` on http://)",
    ),
    (NO_PROXY, "hosts reached without the proxy, comma-separated"),
];

/// Reads a variable, treating an empty value as unset.
pub fn get(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub fn is_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}
