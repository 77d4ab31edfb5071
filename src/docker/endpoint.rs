//! Which engine devstack talks to, found as the Docker CLI finds it
//! (docker/cli `resolveContextName`): `DOCKER_HOST`; else the context named
//! by `DOCKER_CONTEXT`; else `currentContext` in `$DOCKER_CONFIG/config.json`
//! (`~/.docker` by default); else the local socket. A context's address and
//! TLS files come from the CLI's context store. Every command resolves
//! through [`resolve`], and the `docker` and `kind` processes devstack runs
//! are given the same choice ([`Endpoint::cli_env`]), so all of them reach
//! one engine.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::Docker;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::envvars;
use crate::error::Error;

/// The platform's socket: the `default` context when `DOCKER_HOST` is unset.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";
/// The Docker CLI's built-in context: `DOCKER_HOST`, else the platform's socket.
pub const DEFAULT_CONTEXT: &str = "default";
/// bollard's own default request timeout, in seconds.
const REQUEST_TIMEOUT_SECS: u64 = 120;

/// Why devstack talks to the engine it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `DOCKER_HOST`, which beats any context, as for the Docker CLI.
    DockerHost,
    /// A context named by `DOCKER_CONTEXT`.
    EnvContext(String),
    /// A context named by `currentContext` in this config.json (what
    /// `docker context use` writes).
    ConfigContext { name: String, config: PathBuf },
    /// Nothing chosen: the platform's socket.
    DefaultSocket,
}

impl Source {
    /// The context's name, when a context was chosen.
    pub fn context(&self) -> Option<&str> {
        match self {
            Source::EnvContext(name) | Source::ConfigContext { name, .. } => Some(name),
            Source::DockerHost | Source::DefaultSocket => None,
        }
    }

    /// `DOCKER_HOST`, `context colima from ~/.docker/config.json`,
    /// `context x from DOCKER_CONTEXT`, `default socket`.
    pub fn describe(&self) -> String {
        match (self, self.context()) {
            (_, Some(name)) => format!("context `{name}` from {}", self.origin()),
            (Source::DockerHost, _) => envvars::DOCKER_HOST.to_string(),
            _ => "default socket".to_string(),
        }
    }

    /// What named the engine: `DOCKER_HOST`, `DOCKER_CONTEXT`, the
    /// config.json file, or nothing (`default socket`).
    pub fn origin(&self) -> String {
        match self {
            Source::DockerHost => envvars::DOCKER_HOST.to_string(),
            Source::EnvContext(_) => envvars::DOCKER_CONTEXT.to_string(),
            Source::ConfigContext { config, .. } => home_relative(config),
            Source::DefaultSocket => "default socket".to_string(),
        }
    }
}

/// The files of a TLS connection to the engine; `cert` and `key` may be
/// absent (an engine that asks no client certificate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The engine devstack is to talk to, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `unix:///var/run/docker.sock`, `tcp://10.0.0.5:2376`, ...
    pub host: String,
    pub tls: Option<Tls>,
    pub source: Source,
}

impl Endpoint {
    /// `unix:///x.sock (context `alt` from DOCKER_CONTEXT)`, for people.
    pub fn describe(&self) -> String {
        let tls = if self.tls.is_some() { " over TLS" } else { "" };
        format!("{}{tls} ({})", self.host, self.source.describe())
    }

    /// A client for this engine; nothing is asked of the engine yet.
    pub(super) fn client(&self) -> Result<Docker, bollard::errors::Error> {
        let version = bollard::API_DEFAULT_VERSION;
        if self.host.starts_with("unix://") {
            return Docker::connect_with_unix(&self.host, REQUEST_TIMEOUT_SECS, version);
        }
        match &self.tls {
            Some(tls) => {
                // Both rustls crypto back ends are linked (the AWS SDK and
                // kube pick different ones), so rustls cannot choose alone.
                let _ = rustls::crypto::ring::default_provider().install_default();
                Docker::connect_with_ssl(
                    &self.host,
                    &tls.key,
                    &tls.cert,
                    &tls.ca,
                    REQUEST_TIMEOUT_SECS,
                    version,
                )
            }
            None => Docker::connect_with_http(&self.host, REQUEST_TIMEOUT_SECS, version),
        }
    }

    /// The environment that makes the Docker CLI (and kind, which runs it)
    /// reach this same engine, whatever `docker context use` says meanwhile.
    pub fn cli_env(&self) -> Vec<(&'static str, String)> {
        match &self.source {
            // The CLI reads the same variables devstack did.
            Source::DockerHost => vec![(envvars::DOCKER_HOST, self.host.clone())],
            Source::EnvContext(name) | Source::ConfigContext { name, .. } => {
                vec![(envvars::DOCKER_CONTEXT, name.clone())]
            }
            Source::DefaultSocket => vec![(envvars::DOCKER_CONTEXT, DEFAULT_CONTEXT.into())],
        }
    }
}

/// What the resolution reads from the process environment, gathered so
/// that tests can give their own.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    pub docker_host: Option<String>,
    pub docker_context: Option<String>,
    /// The Docker CLI's configuration directory: `DOCKER_CONFIG`, else `~/.docker`.
    pub config_dir: Option<PathBuf>,
    /// `DOCKER_TLS_VERIFY` set (to anything, as the CLI reads it).
    pub tls_verify: bool,
    /// `DOCKER_CERT_PATH`: where `ca.pem`, `cert.pem` and `key.pem` are.
    pub cert_path: Option<PathBuf>,
}

impl Environment {
    pub fn current() -> Self {
        let config_dir = envvars::get(envvars::DOCKER_CONFIG)
            .map(PathBuf::from)
            .or_else(|| envvars::get(envvars::HOME).map(|h| Path::new(&h).join(".docker")));
        Environment {
            docker_host: envvars::get(envvars::DOCKER_HOST),
            docker_context: envvars::get(envvars::DOCKER_CONTEXT),
            config_dir,
            tls_verify: envvars::is_set(envvars::DOCKER_TLS_VERIFY),
            cert_path: envvars::get(envvars::DOCKER_CERT_PATH).map(PathBuf::from),
        }
    }
}

/// The engine the Docker CLI would reach in this process's environment.
pub fn resolve() -> Result<Endpoint, Error> {
    resolve_in(&Environment::current())
}

/// The engine the Docker CLI would reach in `env`.
pub fn resolve_in(env: &Environment) -> Result<Endpoint, Error> {
    if env.docker_host.is_some() {
        return default_context(env, Source::DockerHost);
    }
    let source = match (&env.docker_context, current_context(env)?) {
        (Some(name), _) => Source::EnvContext(name.clone()),
        (None, Some((name, config))) => Source::ConfigContext { name, config },
        (None, None) => return default_context(env, Source::DefaultSocket),
    };
    let name = source.context().unwrap_or_default().to_string();
    if name == DEFAULT_CONTEXT {
        return default_context(env, source);
    }
    let Some(config_dir) = env.config_dir.as_deref() else {
        return Err(unknown_context(&source, None));
    };
    let meta_path = context_dir(config_dir, "meta", &name).join("meta.json");
    let text = match std::fs::read_to_string(&meta_path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(unknown_context(&source, Some(&meta_path)));
        }
        Err(e) => {
            return Err(Error::prerequisite(format!(
                "cannot read Docker context `{name}` ({}): {e}",
                meta_path.display()
            ))
            .with_hint(recreate_hint(&name)));
        }
    };
    let endpoint = parse_meta(&text).map_err(|detail| {
        Error::prerequisite(format!(
            "Docker context `{name}` ({}) {detail}",
            meta_path.display()
        ))
        .with_hint(recreate_hint(&name))
    })?;
    let host = if endpoint.host.is_empty() {
        DEFAULT_HOST.to_string()
    } else {
        endpoint.host
    };
    let tls_dir = context_dir(config_dir, "tls", &name).join("docker");
    let tls = context_tls(&tls_dir, &source, endpoint.skip_tls_verify)?;
    checked(host, tls, source)
}

/// What a context's `meta.json` says of its Docker endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DockerEndpointMeta {
    #[serde(rename = "Host", default)]
    pub host: String,
    #[serde(rename = "SkipTLSVerify", default)]
    pub skip_tls_verify: bool,
}

#[derive(Deserialize)]
struct ContextMeta {
    #[serde(rename = "Endpoints", default)]
    endpoints: HashMap<String, serde_json::Value>,
}

/// The Docker endpoint of a context's `meta.json`, or what is wrong with it.
pub fn parse_meta(text: &str) -> Result<DockerEndpointMeta, String> {
    let meta: ContextMeta =
        serde_json::from_str(text).map_err(|e| format!("is not valid JSON: {e}"))?;
    let docker = meta
        .endpoints
        .get("docker")
        .ok_or("has no docker endpoint (`Endpoints.docker`)")?;
    serde_json::from_value(docker.clone())
        .map_err(|e| format!("has a docker endpoint devstack cannot read: {e}"))
}

/// The directory of one context in the store: the CLI names it by the
/// SHA-256 of the context's name, in hex.
pub fn context_dir(config_dir: &Path, part: &str, name: &str) -> PathBuf {
    config_dir
        .join("contexts")
        .join(part)
        .join(hex::encode(Sha256::digest(name.as_bytes())))
}

/// `currentContext` of the CLI's config.json, with the file's path; none
/// when the file or the field is absent.
fn current_context(env: &Environment) -> Result<Option<(String, PathBuf)>, Error> {
    let Some(config_dir) = env.config_dir.as_deref() else {
        return Ok(None);
    };
    let path = config_dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(
                Error::prerequisite(format!("cannot read {}: {e}", path.display())).with_hint(
                    "make it readable, or point DOCKER_CONFIG at the Docker CLI's configuration directory",
                ),
            );
        }
    };
    let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::prerequisite(format!(
            "the Docker CLI's configuration {} is not valid JSON: {e}",
            path.display()
        ))
        .with_hint(
            "fix the file (`currentContext` names the Docker context devstack uses), \
             or set DOCKER_HOST or DOCKER_CONTEXT to choose the engine",
        )
    })?;
    Ok(config
        .get("currentContext")
        .and_then(serde_json::Value::as_str)
        .filter(|name| !name.is_empty())
        .map(|name| (name.to_string(), path)))
}

/// The `default` context: `DOCKER_HOST`, else the platform's socket, with
/// TLS as `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` say.
fn default_context(env: &Environment, source: Source) -> Result<Endpoint, Error> {
    let host = env
        .docker_host
        .clone()
        .unwrap_or_else(|| DEFAULT_HOST.to_string());
    if !env.tls_verify || host.starts_with("unix://") {
        return checked(host, None, source);
    }
    let dir = env.cert_path.as_deref().or(env.config_dir.as_deref());
    let Some(dir) = dir.filter(|d| d.join("ca.pem").is_file()) else {
        return Err(Error::prerequisite(format!(
            "{} is set but there is no ca.pem in {} to verify the engine at {host} with",
            envvars::DOCKER_TLS_VERIFY,
            dir.map_or_else(|| envvars::DOCKER_CERT_PATH.to_string(), home_relative)
        ))
        .with_hint(format!(
            "set {} to the directory holding the engine's ca.pem (and cert.pem, key.pem), \
             or unset {} for an engine without TLS",
            envvars::DOCKER_CERT_PATH,
            envvars::DOCKER_TLS_VERIFY
        )));
    };
    checked(host, Some(tls_files(dir)), source)
}

/// A context's TLS files: the CLI keeps those it was given under
/// `contexts/tls/<id>/docker`; a context without them talks plain HTTP.
fn context_tls(dir: &Path, source: &Source, skip_verify: bool) -> Result<Option<Tls>, Error> {
    let name = source.context().unwrap_or_default();
    if skip_verify {
        return Err(Error::prerequisite(format!(
            "Docker context `{name}` (from {}) skips verifying the engine's certificate \
             (`SkipTLSVerify`), which devstack does not do",
            source.origin()
        ))
        .with_hint(format!(
            "give the context the engine's CA: `docker context update {name} --docker \"host=...,ca=CA.pem,cert=CERT.pem,key=KEY.pem,skip-tls-verify=false\"`"
        )));
    }
    let any = ["ca.pem", "cert.pem", "key.pem"]
        .iter()
        .any(|f| dir.join(f).is_file());
    if !any {
        return Ok(None);
    }
    if !dir.join("ca.pem").is_file() {
        return Err(Error::prerequisite(format!(
            "Docker context `{name}` has a client certificate but no CA to verify the engine with (no ca.pem in {})",
            dir.display()
        ))
        .with_hint(format!(
            "add the engine's CA: `docker context update {name} --docker \"host=...,ca=CA.pem,cert=CERT.pem,key=KEY.pem\"`"
        )));
    }
    Ok(Some(tls_files(dir)))
}

fn tls_files(dir: &Path) -> Tls {
    Tls {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    }
}

/// The address in the form bollard takes, or why devstack cannot use it.
fn checked(host: String, tls: Option<Tls>, source: Source) -> Result<Endpoint, Error> {
    let host = if host.contains("://") {
        host
    } else {
        // The CLI reads a bare `HOST:PORT` as TCP.
        format!("tcp://{host}")
    };
    let scheme = host.split("://").next().unwrap_or_default();
    match scheme {
        "unix" => Ok(Endpoint {
            host,
            // A Unix socket is local: the CLI uses no TLS on it either.
            tls: None,
            source,
        }),
        "tcp" | "http" | "https" => Ok(Endpoint { host, tls, source }),
        "ssh" => Err(Error::prerequisite(format!(
            "the Docker engine at {host} ({}) is reached over SSH, which devstack does not speak",
            source.describe()
        ))
        .with_hint(format!(
            "forward the engine's socket and point DOCKER_HOST at it: \
             `ssh -nNT -L $HOME/.devstack-engine.sock:/var/run/docker.sock {} &` then \
             `DOCKER_HOST=unix://$HOME/.devstack-engine.sock devstack ...`",
            host.trim_start_matches("ssh://")
        ))),
        _ => Err(Error::prerequisite(format!(
            "the Docker engine address {host} ({}) is not one devstack can use",
            source.describe()
        ))
        .with_hint(
            "use a unix:// socket or a tcp:// address (`docker context ls` shows each context's address)",
        )),
    }
}

fn unknown_context(source: &Source, looked_at: Option<&Path>) -> Error {
    let name = source.context().unwrap_or_default();
    let place = looked_at.map_or_else(
        || "no Docker configuration directory (set DOCKER_CONFIG or HOME)".to_string(),
        |p| format!("no {}", p.display()),
    );
    let fix = match source {
        Source::ConfigContext { config, .. } => format!(
            "`docker context ls` lists the contexts there are; `docker context use default` \
             (or another) replaces `currentContext` in {}",
            home_relative(config)
        ),
        _ => format!(
            "`docker context ls` lists the contexts there are: set {} to one of them, or unset it",
            envvars::DOCKER_CONTEXT
        ),
    };
    Error::prerequisite(format!(
        "Docker context `{name}` (from {}) does not exist: {place}",
        source.origin()
    ))
    .with_hint(fix)
}

fn recreate_hint(name: &str) -> String {
    format!(
        "`docker context inspect {name}` shows what the Docker CLI reads; \
         recreate it (`docker context rm {name}` and `docker context create {name} --docker host=...`)"
    )
}

/// What devstack would reach were `DOCKER_HOST` (or, with `context`,
/// `DOCKER_CONTEXT`) unset, for hints that suggest unsetting it.
pub fn without(env: &Environment, variable: &str) -> String {
    let mut env = env.clone();
    if variable == envvars::DOCKER_HOST {
        env.docker_host = None;
    } else {
        env.docker_context = None;
    }
    match resolve_in(&env).map(|e| e.source) {
        Ok(Source::DefaultSocket) => "the local socket".to_string(),
        Ok(source) => source.describe(),
        Err(_) => "the Docker CLI's current context".to_string(),
    }
}

/// `~/...` for paths under the home directory: shorter, and the same on
/// every machine.
fn home_relative(path: &Path) -> String {
    envvars::get(envvars::HOME)
        .and_then(|home| {
            path.strip_prefix(&home)
                .ok()
                .map(|rest| format!("~/{}", rest.display()))
        })
        .unwrap_or_else(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_in(config_dir: &Path) -> Environment {
        Environment {
            config_dir: Some(config_dir.to_path_buf()),
            ..Default::default()
        }
    }

    /// A context as `docker context create` lays it out.
    fn write_context(config_dir: &Path, name: &str, meta: &str) -> PathBuf {
        let dir = context_dir(config_dir, "meta", name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("meta.json"), meta).unwrap();
        dir
    }

    fn meta(name: &str, host: &str) -> String {
        format!(
            r#"{{"Name":"{name}","Metadata":{{}},"Endpoints":{{"docker":{{"Host":"{host}","SkipTLSVerify":false}}}}}}"#
        )
    }

    #[test]
    fn the_store_names_a_context_by_the_sha256_of_its_name() {
        // `docker context create alt` made .../meta/4d48fba6...
        assert_eq!(
            context_dir(Path::new("/c"), "meta", "alt"),
            Path::new(
                "/c/contexts/meta/4d48fba6cf5f7d6abfb35e695f453297870a7a56568ceae968f06d04701b0047"
            )
        );
        assert_eq!(
            context_dir(Path::new("/c"), "tls", "alt"),
            Path::new(
                "/c/contexts/tls/4d48fba6cf5f7d6abfb35e695f453297870a7a56568ceae968f06d04701b0047"
            )
        );
    }

    #[test]
    fn meta_json_gives_the_docker_endpoint() {
        let endpoint = parse_meta(&meta(
            "colima",
            "unix:///Users/me/.colima/default/docker.sock",
        ))
        .unwrap();
        assert_eq!(
            endpoint.host,
            "unix:///Users/me/.colima/default/docker.sock"
        );
        assert!(!endpoint.skip_tls_verify);
        let skip = parse_meta(
            r#"{"Name":"r","Endpoints":{"docker":{"Host":"tcp://h:2376","SkipTLSVerify":true}}}"#,
        )
        .unwrap();
        assert!(skip.skip_tls_verify);
        assert!(
            parse_meta(r#"{"Name":"k","Endpoints":{"kubernetes":{}}}"#)
                .unwrap_err()
                .contains("no docker endpoint")
        );
        assert!(parse_meta("{").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn docker_host_beats_docker_context_and_the_current_context() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"currentContext":"nope"}"#,
        )
        .unwrap();
        let env = Environment {
            docker_host: Some("unix:///run/other.sock".into()),
            docker_context: Some("also-nope".into()),
            ..env_in(dir.path())
        };
        let endpoint = resolve_in(&env).unwrap();
        assert_eq!(endpoint.host, "unix:///run/other.sock");
        assert_eq!(endpoint.source, Source::DockerHost);
        assert_eq!(
            endpoint.cli_env(),
            vec![("DOCKER_HOST", "unix:///run/other.sock".to_string())]
        );
    }

    #[test]
    fn docker_context_beats_the_current_context_and_default_is_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), r#"{"currentContext":"b"}"#).unwrap();
        write_context(dir.path(), "a", &meta("a", "unix:///run/a.sock"));
        write_context(dir.path(), "b", &meta("b", "tcp://10.0.0.5:2375"));

        let by_env = resolve_in(&Environment {
            docker_context: Some("a".into()),
            ..env_in(dir.path())
        })
        .unwrap();
        assert_eq!(by_env.host, "unix:///run/a.sock");
        assert_eq!(by_env.source, Source::EnvContext("a".into()));
        assert_eq!(by_env.source.describe(), "context `a` from DOCKER_CONTEXT");
        assert_eq!(by_env.cli_env(), vec![("DOCKER_CONTEXT", "a".to_string())]);

        let by_config = resolve_in(&env_in(dir.path())).unwrap();
        assert_eq!(by_config.host, "tcp://10.0.0.5:2375");
        assert_eq!(by_config.tls, None);
        assert_eq!(
            by_config.source,
            Source::ConfigContext {
                name: "b".into(),
                config: dir.path().join("config.json")
            }
        );

        let default = resolve_in(&Environment {
            docker_context: Some("default".into()),
            ..env_in(dir.path())
        })
        .unwrap();
        assert_eq!(default.host, DEFAULT_HOST);

        let empty = tempfile::tempdir().unwrap();
        let nothing = resolve_in(&env_in(empty.path())).unwrap();
        assert_eq!(nothing.source, Source::DefaultSocket);
        assert_eq!(
            nothing.describe(),
            format!("{DEFAULT_HOST} (default socket)")
        );
        assert_eq!(
            nothing.cli_env(),
            vec![("DOCKER_CONTEXT", "default".to_string())]
        );
    }

    #[test]
    fn an_unknown_context_is_an_error_naming_it_and_where_it_was_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_in(&Environment {
            docker_context: Some("nope".into()),
            ..env_in(dir.path())
        })
        .unwrap_err();
        assert_eq!(err.kind(), crate::error::Kind::Prerequisite);
        assert!(
            err.message()
                .starts_with("Docker context `nope` (from DOCKER_CONTEXT) does not exist: no "),
            "{}",
            err.message()
        );
        assert!(err.message().contains("meta.json"), "{}", err.message());
        assert!(err.hint().unwrap().contains("docker context ls"));

        std::fs::write(
            dir.path().join("config.json"),
            r#"{"currentContext":"gone"}"#,
        )
        .unwrap();
        let err = resolve_in(&env_in(dir.path())).unwrap_err();
        assert!(err.message().contains("`gone`"), "{}", err.message());
        assert!(
            err.hint().unwrap().contains("docker context use default"),
            "{:?}",
            err.hint()
        );
    }

    #[test]
    fn a_context_with_tls_files_connects_over_tls_and_one_skipping_verification_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_context(dir.path(), "remote", &meta("remote", "tcp://10.0.0.5:2376"));
        let tls = context_dir(dir.path(), "tls", "remote").join("docker");
        std::fs::create_dir_all(&tls).unwrap();
        std::fs::write(tls.join("ca.pem"), "").unwrap();
        let endpoint = resolve_in(&Environment {
            docker_context: Some("remote".into()),
            ..env_in(dir.path())
        })
        .unwrap();
        assert_eq!(endpoint.tls.as_ref().unwrap().ca, tls.join("ca.pem"));
        assert!(
            endpoint.describe().contains("over TLS"),
            "{}",
            endpoint.describe()
        );

        write_context(
            dir.path(),
            "lax",
            r#"{"Name":"lax","Endpoints":{"docker":{"Host":"tcp://h:2376","SkipTLSVerify":true}}}"#,
        );
        let err = resolve_in(&Environment {
            docker_context: Some("lax".into()),
            ..env_in(dir.path())
        })
        .unwrap_err();
        assert!(err.message().contains("SkipTLSVerify"), "{}", err.message());
        assert!(err.hint().unwrap().contains("docker context update lax"));
    }

    #[test]
    fn docker_tls_verify_takes_the_certificates_of_docker_cert_path() {
        let certs = tempfile::tempdir().unwrap();
        let env = Environment {
            docker_host: Some("tcp://10.0.0.5:2376".into()),
            tls_verify: true,
            cert_path: Some(certs.path().to_path_buf()),
            ..Default::default()
        };
        let err = resolve_in(&env).unwrap_err();
        assert!(err.message().contains("no ca.pem"), "{}", err.message());
        assert!(err.hint().unwrap().contains("DOCKER_CERT_PATH"));
        std::fs::write(certs.path().join("ca.pem"), "").unwrap();
        let endpoint = resolve_in(&env).unwrap();
        assert_eq!(endpoint.tls.unwrap().key, certs.path().join("key.pem"));
    }

    #[test]
    fn ssh_is_refused_with_a_way_round() {
        let ssh = resolve_in(&Environment {
            docker_host: Some("ssh://me@build-box".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(ssh.message().contains("over SSH"), "{}", ssh.message());
        assert!(ssh.hint().unwrap().contains("ssh -nNT -L"));
    }

    #[test]
    fn an_unset_variable_falls_back_as_the_cli_would() {
        let dir = tempfile::tempdir().unwrap();
        let env = Environment {
            docker_host: Some("unix:///run/x.sock".into()),
            ..env_in(dir.path())
        };
        assert_eq!(without(&env, envvars::DOCKER_HOST), "the local socket");
        std::fs::write(dir.path().join("config.json"), r#"{"currentContext":"c"}"#).unwrap();
        write_context(dir.path(), "c", &meta("c", "unix:///run/c.sock"));
        assert!(
            without(&env, envvars::DOCKER_HOST).starts_with("context `c` from "),
            "{}",
            without(&env, envvars::DOCKER_HOST)
        );
    }
}
