//! Where a pull or a download really goes: a registry mirror per upstream
//! registry (`images.mirrors`, `DEVSTACK_MIRRORS`), a download mirror for
//! every HTTP download (`DEVSTACK_DOWNLOAD_MIRROR`). Digests stay pinned
//! to upstream's, so a mirror can only serve what upstream published.

use std::collections::BTreeMap;

/// An image reference split into its registry, repository path and tag:
/// `kindest/node:v1.36.4` -> (`docker.io`, `kindest/node`, `v1.36.4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageName {
    pub registry: String,
    pub path: String,
    pub tag: String,
}

impl ImageName {
    pub fn parse(reference: &str) -> ImageName {
        let reference = reference.split('@').next().unwrap_or(reference);
        let (name, tag) = match reference.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => (name, tag),
            _ => (reference, "latest"),
        };
        let (registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            Some(_) => ("docker.io".to_string(), name.to_string()),
            None => ("docker.io".to_string(), format!("library/{name}")),
        };
        ImageName {
            registry,
            path,
            tag: tag.to_string(),
        }
    }

    /// The repository as Docker names it locally (`kindest/node`,
    /// `ghcr.io/fluxcd/source-controller`).
    pub fn local_repository(&self) -> String {
        if self.registry == "docker.io" {
            self.path
                .strip_prefix("library/")
                .unwrap_or(&self.path)
                .to_string()
        } else {
            format!("{}/{}", self.registry, self.path)
        }
    }
}

/// The reference Docker pulls for `reference`: the mirror's
/// `host[:port][/prefix]/<path>:<tag>` when its registry has a mirror.
pub fn pull_reference(mirrors: &BTreeMap<String, String>, reference: &str) -> Option<String> {
    let name = ImageName::parse(reference);
    let mirror = mirrors.get(&name.registry)?;
    let base = mirror
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    Some(format!("{base}/{}:{}", name.path, name.tag))
}

/// Where `url` is downloaded from: `<mirror>/<host>/<path>` with a
/// download mirror, else `url` itself.
pub fn download_url(mirror: Option<&str>, url: &str) -> String {
    let Some(mirror) = mirror else {
        return url.to_string();
    };
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or(url);
    format!("{}/{rest}", mirror.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_as_docker_reads_them() {
        let name = ImageName::parse("kindest/node:v1.36.4");
        assert_eq!(
            (
                name.registry.as_str(),
                name.path.as_str(),
                name.tag.as_str()
            ),
            ("docker.io", "kindest/node", "v1.36.4")
        );
        assert_eq!(name.local_repository(), "kindest/node");
        let name = ImageName::parse("ghcr.io/fluxcd/source-controller:v1.9.5@sha256:ab");
        assert_eq!(name.registry, "ghcr.io");
        assert_eq!(name.local_repository(), "ghcr.io/fluxcd/source-controller");
        let name = ImageName::parse("redis");
        assert_eq!(
            (name.path.as_str(), name.tag.as_str()),
            ("library/redis", "latest")
        );
        assert_eq!(name.local_repository(), "redis");
        assert_eq!(
            ImageName::parse("localhost:5000/x:1").registry,
            "localhost:5000"
        );
    }

    #[test]
    fn mirrors_rewrite_pulls_of_their_registry_only() {
        let mirrors = BTreeMap::from([(
            "docker.io".to_string(),
            "http://127.0.0.1:5015/docker.io/".to_string(),
        )]);
        assert_eq!(
            pull_reference(&mirrors, "kindest/node:v1.36.4").as_deref(),
            Some("127.0.0.1:5015/docker.io/kindest/node:v1.36.4")
        );
        assert_eq!(
            pull_reference(&mirrors, "redis:7").as_deref(),
            Some("127.0.0.1:5015/docker.io/library/redis:7")
        );
        assert_eq!(pull_reference(&mirrors, "ghcr.io/a/b:1"), None);
    }

    #[test]
    fn downloads_go_to_the_mirror_under_host_and_path() {
        let url = "https://github.com/fluxcd/flux2/releases/download/v2.9.5/install.yaml";
        assert_eq!(download_url(None, url), url);
        assert_eq!(
            download_url(Some("http://127.0.0.1:8095/"), url),
            "http://127.0.0.1:8095/github.com/fluxcd/flux2/releases/download/v2.9.5/install.yaml"
        );
    }
}
