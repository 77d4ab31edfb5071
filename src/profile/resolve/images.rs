//! The `images` section: the offline bundle, images to preload, and
//! registry and download mirrors.

use std::path::PathBuf;

use super::Resolver;
use crate::envvars;
use crate::profile::schema::ImagesSpec;
use crate::profile::settings::{ClusterSettings, ImageSettings, Origin};

const MIRRORS_HINT: &str = "write mirrors as `REGISTRY=URL` pairs, e.g. `docker.io=https://harbor.example.com/dockerhub-proxy,ghcr.io=https://harbor.example.com/ghcr-proxy`";

/// The images settings; a mirror of a whole registry is added to `cluster`'s
/// registry mirrors too, so the nodes' own pulls use it.
pub(super) fn resolve(
    r: &mut Resolver,
    spec: Option<ImagesSpec>,
    cluster: &mut ClusterSettings,
) -> ImageSettings {
    let bundle = r.pick(
        "images.bundle",
        r.overrides.bundle.clone().map(Some),
        r.env(envvars::DEVSTACK_BUNDLE)
            .map(|b| Some(PathBuf::from(b))),
        spec.as_ref()
            .and_then(|i| i.bundle.as_deref())
            .map(|b| Some(r.relative(b))),
        None,
    );
    let (preload, mirrors) = spec.map(|i| (i.preload, i.mirrors)).unwrap_or_default();
    let mirrors = mirrors_with_env(r, mirrors);
    let download_mirror = download_mirror(r);
    // A mirror under a path (a Harbor proxy project) needs containerd told the path: not here.
    for (registry, url) in &mirrors {
        let path = url.splitn(4, '/').nth(3).unwrap_or("");
        if path.trim_matches('/').is_empty() {
            cluster
                .registry_mirrors
                .entry(registry.clone())
                .or_insert_with(|| vec![url.trim_end_matches('/').to_string()]);
        }
    }
    // Set by the environment alone: no flag, no profile key.
    let pins_file = r.pick(
        "images.pinsFile",
        None,
        r.env(envvars::DEVSTACK_PINS)
            .map(|p| Some(PathBuf::from(p))),
        None,
        None,
    );
    ImageSettings {
        bundle,
        preload,
        mirrors,
        download_mirror,
        pins_file,
        nodes_pull: false,
    }
}

/// The profile's mirrors with `DEVSTACK_MIRRORS` applied (it wins per registry).
fn mirrors_with_env(
    r: &mut Resolver,
    mut mirrors: std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    if let Some(list) = r.env(envvars::DEVSTACK_MIRRORS) {
        match parse_mirror_list(&list) {
            Ok(from_env) => {
                for (registry, url) in from_env {
                    r.origins
                        .insert(format!("images.mirrors.{registry}"), Origin::Env);
                    mirrors.insert(registry, url);
                }
            }
            Err(why) => r.problems.at_path(
                "images.mirrors",
                format!("{} is invalid: {why}", envvars::DEVSTACK_MIRRORS),
                Some(MIRRORS_HINT.into()),
            ),
        }
    }
    for (registry, url) in &mirrors {
        if let Err(why) = check_mirror(registry, url) {
            r.problems.at_path(
                &format!("images.mirrors.{registry}"),
                why,
                Some(MIRRORS_HINT.into()),
            );
        }
    }
    mirrors
}

fn download_mirror(r: &mut Resolver) -> Option<String> {
    let from_env = r
        .env(envvars::DEVSTACK_DOWNLOAD_MIRROR)
        .map(|url| Some(url.trim_end_matches('/').to_string()));
    let download_mirror = r.pick("images.downloadMirror", None, from_env, None, None);
    if let Some(url) = &download_mirror
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        r.problems.at_path(
            "images.mirrors",
            format!(
                "{} `{url}` is not an http(s) URL",
                envvars::DEVSTACK_DOWNLOAD_MIRROR
            ),
            Some("set it to the mirror's base URL, e.g. `https://files.example.com`: downloads are fetched from `<url>/<host>/<path>`".into()),
        );
    }
    download_mirror
}

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
