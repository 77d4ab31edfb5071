//! A cluster the user already has, named by a context of their kubeconfig.
//! The kubeconfig is read as kubectl reads it (`KUBECONFIG`'s files merged,
//! first one wins, else `~/.kube/config`) so that `--context` means what it
//! means to kubectl. What devstack keeps is a minified copy holding only that
//! context, its cluster and its user: the rest of the user's kubeconfig (other
//! clusters' credentials) never reaches devstack's state or its clients, and
//! a later edit of the user's file does not move a stack to another cluster.

use std::fmt;
use std::path::{Path, PathBuf};

use kube::config::{Kubeconfig, KubeconfigError};

use crate::envvars;
use crate::error::Error;

/// One context of the user's kubeconfig, minified.
#[derive(Clone)]
pub struct ContextConfig {
    pub context: String,
    /// A kubeconfig with only this context, its cluster and user (with their
    /// credentials, which is why `Debug` leaves it out), current-context set.
    pub kubeconfig_yaml: String,
    /// The cluster's API server URL, for messages.
    pub server: String,
}

impl fmt::Debug for ContextConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextConfig")
            .field("context", &self.context)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// The user's kubeconfig files: `KUBECONFIG`'s list, else `~/.kube/config`.
fn kubeconfig_paths() -> Vec<PathBuf> {
    if let Some(list) = std::env::var_os(envvars::KUBECONFIG) {
        let paths: Vec<PathBuf> = std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            return paths;
        }
    }
    let home = std::env::var_os(envvars::HOME).unwrap_or_else(|| ".".into());
    vec![PathBuf::from(home).join(".kube/config")]
}

/// Context `context` (else the current context) of the user's kubeconfig.
pub fn load(context: Option<&str>) -> Result<ContextConfig, Error> {
    load_from(&kubeconfig_paths(), context)
}

/// [`load`] from the files `paths`, merged in order.
pub fn load_from(paths: &[PathBuf], context: Option<&str>) -> Result<ContextConfig, Error> {
    let merged = read_merged(paths)?;
    let name = match context {
        Some(name) => name.to_string(),
        None => merged
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                Error::user(format!(
                    "the kubeconfig ({}) sets no current context; its contexts: {}",
                    shown(paths),
                    context_names(&merged)
                ))
                .with_hint("name one with `--context NAME`, or `cluster.context` in the profile")
            })?,
    };
    minify(merged, &name, paths)
}

/// Merges the files that exist as kubectl does: a missing file in the list
/// is skipped, an unreadable or invalid one is an error.
fn read_merged(paths: &[PathBuf]) -> Result<Kubeconfig, Error> {
    let mut merged: Option<Kubeconfig> = None;
    for path in paths.iter().filter(|p| p.exists()) {
        let config = Kubeconfig::read_from(path).map_err(|e| read_error(path, e))?;
        merged = Some(match merged {
            None => config,
            Some(m) => m.merge(config).map_err(|e| {
                Error::user(format!("cannot merge kubeconfig {}: {e}", path.display())).with_hint(
                    "list only kubeconfig files of one kind and apiVersion in KUBECONFIG",
                )
            })?,
        });
    }
    merged.ok_or_else(|| {
        Error::prerequisite(format!("no kubeconfig found (looked for {})", shown(paths))).with_hint(
            "point KUBECONFIG at the kubeconfig of the cluster to use (the file kubectl \
                 reads), or let devstack create a cluster (`cluster.provider: kind` or `k3s`)",
        )
    })
}

fn read_error(path: &Path, error: KubeconfigError) -> Error {
    match error {
        // The parser quotes the text around a mistake, and a kubeconfig's
        // text holds credentials: say where, not what.
        KubeconfigError::Parse(_) => Error::user(format!(
            "kubeconfig {} is not a valid kubeconfig",
            path.display()
        ))
        .with_hint(format!(
            "`kubectl --kubeconfig {} config view` names the problem",
            path.display()
        )),
        e => Error::user(format!("cannot read kubeconfig {}: {e}", path.display()))
            .with_hint("fix the file's permissions, or drop it from KUBECONFIG"),
    }
}

/// Only context `name`, its cluster and user, as YAML.
fn minify(merged: Kubeconfig, name: &str, paths: &[PathBuf]) -> Result<ContextConfig, Error> {
    let names = context_names(&merged);
    let Some(named) = merged.contexts.iter().find(|c| c.name == name).cloned() else {
        return Err(Error::user(format!(
            "the kubeconfig ({}) has no context `{name}`; its contexts: {names}",
            shown(paths)
        ))
        .with_hint(
            "pick one of those with `--context NAME` or `cluster.context` in the profile \
             (`kubectl config get-contexts` lists them)",
        ));
    };
    let broken = |what: String| {
        Error::user(format!("kubeconfig context `{name}` {what}")).with_hint(format!(
            "`kubectl config view --minify --context {name}` shows it"
        ))
    };
    let Some(ctx) = named.context.as_ref() else {
        return Err(broken("has no cluster".into()));
    };
    let Some(cluster) = merged.clusters.iter().find(|c| c.name == ctx.cluster) else {
        return Err(broken(format!(
            "names cluster `{}`, which is not defined",
            ctx.cluster
        )));
    };
    let server = cluster
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| broken(format!("has cluster `{}` without a server", ctx.cluster)))?;
    let auth_infos = match &ctx.user {
        Some(user) => match merged.auth_infos.iter().find(|u| &u.name == user) {
            Some(info) => vec![info.clone()],
            None => return Err(broken(format!("names user `{user}`, which is not defined"))),
        },
        None => Vec::new(),
    };
    let minified = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![cluster.clone()],
        auth_infos,
        current_context: Some(name.to_string()),
        contexts: vec![named],
        ..Default::default()
    };
    let kubeconfig_yaml = serde_saphyr::to_string(&minified)
        .map_err(|e| Error::internal(format!("write kubeconfig of context `{name}`: {e}")))?;
    Ok(ContextConfig {
        context: name.to_string(),
        kubeconfig_yaml,
        server,
    })
}

fn context_names(config: &Kubeconfig) -> String {
    if config.contexts.is_empty() {
        return "none".into();
    }
    let names: Vec<&str> = config.contexts.iter().map(|c| c.name.as_str()).collect();
    names.join(", ")
}

fn shown(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// A client for the context's cluster, as [`super::client_from_kubeconfig`]
/// makes one for a stack's own.
pub async fn client(config: &ContextConfig) -> Result<kube::Client, Error> {
    super::client_from_kubeconfig(&config.kubeconfig_yaml)
        .await
        .map_err(|e| e.context(format!("kube context `{}`", config.context)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    const WORK: &str = "\
apiVersion: v1
kind: Config
current-context: work
contexts:
- name: work
  context: {cluster: work-cluster, user: work-user, namespace: team}
- name: staging
  context: {cluster: staging-cluster, user: staging-user}
clusters:
- name: work-cluster
  cluster: {server: 'https://work.example:6443', certificate-authority: ca.crt}
- name: staging-cluster
  cluster: {server: 'https://staging.example:6443'}
users:
- name: work-user
  user: {token: work-token-value}
- name: staging-user
  user: {token: staging-token-value}
";

    const HOME: &str = "\
apiVersion: v1
kind: Config
current-context: home
contexts:
- name: home
  context: {cluster: home-cluster, user: home-user}
- name: work
  context: {cluster: shadowed, user: shadowed}
clusters:
- name: home-cluster
  cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}
users:
- name: home-user
  user: {token: home-token-value}
";

    fn files(contents: &[&str]) -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        let paths = contents
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let path = dir.path().join(format!("config{i}"));
                std::fs::write(&path, text).unwrap();
                path
            })
            .collect();
        (dir, paths)
    }

    fn parsed(config: &ContextConfig) -> Kubeconfig {
        Kubeconfig::from_yaml(&config.kubeconfig_yaml).unwrap()
    }

    #[test]
    fn the_current_context_of_the_first_file_wins_and_is_minified() {
        let (dir, paths) = files(&[WORK, HOME]);
        let config = load_from(&paths, None).unwrap();
        assert_eq!(config.context, "work");
        assert_eq!(config.server, "https://work.example:6443");
        let kubeconfig = parsed(&config);
        assert_eq!(kubeconfig.current_context.as_deref(), Some("work"));
        assert_eq!(kubeconfig.contexts.len(), 1);
        assert_eq!(kubeconfig.contexts[0].name, "work");
        let context = kubeconfig.contexts[0].context.as_ref().unwrap();
        assert_eq!(context.namespace.as_deref(), Some("team"));
        assert_eq!(kubeconfig.clusters.len(), 1);
        assert_eq!(kubeconfig.clusters[0].name, "work-cluster");
        // A relative path in the user's file still points at its file.
        let ca = dir.path().join("ca.crt");
        let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority.as_deref(), ca.to_str());
        assert_eq!(kubeconfig.auth_infos.len(), 1);
        assert_eq!(kubeconfig.auth_infos[0].name, "work-user");
        // The credentials are kept, those of other users are not.
        assert!(config.kubeconfig_yaml.contains("work-token-value"));
        assert!(!config.kubeconfig_yaml.contains("staging"));
        assert!(!config.kubeconfig_yaml.contains("home-"));
        assert!(!format!("{config:?}").contains("token"));
    }

    #[test]
    fn an_explicit_context_is_picked_from_any_file() {
        let (_dir, paths) = files(&[WORK, HOME]);
        let config = load_from(&paths, Some("home")).unwrap();
        assert_eq!(config.context, "home");
        assert_eq!(config.server, "https://127.0.0.1:6443");
        let kubeconfig = parsed(&config);
        assert_eq!(kubeconfig.current_context.as_deref(), Some("home"));
        assert_eq!(kubeconfig.auth_infos[0].name, "home-user");
        assert!(config.kubeconfig_yaml.contains("home-token-value"));
        assert!(!config.kubeconfig_yaml.contains("work"));

        // The first file to define a name wins, as with kubectl.
        let (_dir, paths) = files(&[HOME, WORK]);
        let error = load_from(&paths, Some("work")).unwrap_err();
        assert!(error.message().contains("cluster `shadowed`"), "{error:?}");

        let config = load_from(&paths[1..], Some("staging")).unwrap();
        assert_eq!(config.server, "https://staging.example:6443");
    }

    #[test]
    fn an_unknown_context_lists_the_ones_there_are() {
        let (_dir, paths) = files(&[WORK, HOME]);
        let error = load_from(&paths, Some("prod")).unwrap_err();
        assert_eq!(error.kind(), Kind::User);
        assert!(
            error
                .message()
                .contains("no context `prod`; its contexts: work, staging, home"),
            "{error:?}"
        );
        assert!(error.hint().unwrap().contains("--context NAME"));
        assert!(error.hint().unwrap().contains("cluster.context"));
    }

    #[test]
    fn no_current_context_asks_for_one() {
        let (_dir, paths) = files(&[&WORK.replace("current-context: work\n", "")]);
        let error = load_from(&paths, None).unwrap_err();
        assert_eq!(error.kind(), Kind::User);
        assert!(error.message().contains("work, staging"), "{error:?}");
        assert!(error.hint().unwrap().contains("--context NAME"));
    }

    #[test]
    fn missing_files_are_skipped_and_none_at_all_is_an_error() {
        let (dir, paths) = files(&[WORK]);
        let absent = dir.path().join("absent");
        let config = load_from(&[absent.clone(), paths[0].clone()], None).unwrap();
        assert_eq!(config.context, "work");

        let error = load_from(std::slice::from_ref(&absent), None).unwrap_err();
        assert_eq!(error.kind(), Kind::Prerequisite);
        assert!(error.message().contains(&absent.display().to_string()));
        assert!(error.hint().unwrap().contains("KUBECONFIG"));
    }

    #[test]
    fn an_invalid_file_is_named_without_its_text() {
        let (_dir, paths) = files(&["users:\n- name: u\n  user: {token: secret-value\n"]);
        let error = load_from(&paths, None).unwrap_err();
        assert_eq!(error.kind(), Kind::User);
        let shown = format!("{error:?}");
        assert!(shown.contains(&paths[0].display().to_string()), "{shown}");
        assert!(!shown.contains("secret-value"), "{shown}");
    }

    #[tokio::test]
    async fn a_client_is_made_from_the_minified_kubeconfig() {
        let (_dir, paths) = files(&[HOME]);
        let config = load_from(&paths, None).unwrap();
        let client = client(&config).await.unwrap();
        assert_eq!(client.default_namespace(), "default");
    }
}
