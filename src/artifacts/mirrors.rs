//! Where a pull or a download really goes: a registry mirror per upstream
//! registry (`images.mirrors`, `DEVSTACK_MIRRORS`), a download mirror for
//! every HTTP download (`DEVSTACK_DOWNLOAD_MIRROR`). Digests stay pinned
//! to upstream's, so a mirror can only serve what upstream published.

use std::collections::BTreeMap;

use super::Pins;
use crate::profile::ImageSettings;

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
    let repository = mirrored_repository(mirrors, &name)?;
    Some(format!("{repository}:{}", name.tag))
}

/// `host[:port][/prefix]/<path>` of `name` in its registry's mirror.
fn mirrored_repository(mirrors: &BTreeMap<String, String>, name: &ImageName) -> Option<String> {
    let base = mirrors
        .get(&name.registry)?
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    Some(format!("{base}/{}", name.path))
}

/// The repository and tag a node of the stack's cluster pulls for
/// `reference` when the nodes pull the images themselves and its registry
/// has a mirror: the mirror's, with the pinned digest after the tag
/// (`v1.2.3@sha256:...`), so a node runs only what devstack would have
/// checked. `None` otherwise: devstack gives the nodes their images, or
/// they pull `reference` from its own registry.
pub fn node_image(images: &ImageSettings, reference: &str) -> Option<(String, String)> {
    if !images.nodes_pull {
        return None;
    }
    let name = ImageName::parse(reference);
    let repository = mirrored_repository(&images.mirrors, &name)?;
    let pins = Pins::load(images.pins_file.as_deref()).ok();
    let tag = match pins.as_ref().and_then(|p| p.image(reference)) {
        Some(digest) => format!("{}@{digest}", name.tag),
        None => name.tag,
    };
    Some((repository, tag))
}

/// [`node_image`] as one reference, else `reference` itself.
pub fn node_reference(images: &ImageSettings, reference: &str) -> String {
    match node_image(images, reference) {
        Some((repository, tag)) => format!("{repository}:{tag}"),
        None => reference.to_string(),
    }
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

    fn images(nodes_pull: bool) -> ImageSettings {
        ImageSettings {
            bundle: None,
            preload: Vec::new(),
            mirrors: BTreeMap::from([(
                "docker.io".to_string(),
                "https://harbor.example.com/dockerhub/".to_string(),
            )]),
            download_mirror: None,
            pins_file: None,
            nodes_pull,
        }
    }

    #[test]
    fn nodes_that_pull_get_the_mirror_at_the_pinned_digest() {
        let localstack = crate::versions::LOCALSTACK_IMAGE;
        let digest = Pins::builtin().image(localstack).unwrap().to_string();
        let tag = ImageName::parse(localstack).tag;
        assert_eq!(
            node_reference(&images(true), localstack),
            format!("harbor.example.com/dockerhub/localstack/localstack:{tag}@{digest}")
        );
        // Given their images by devstack, nodes run the upstream name.
        assert_eq!(node_reference(&images(false), localstack), localstack);
        // A registry without a mirror: the nodes pull from it.
        let eso = crate::versions::ESO_IMAGE;
        assert_eq!(node_image(&images(true), eso), None);
        assert_eq!(node_reference(&images(true), eso), eso);
        // An image devstack does not pin goes by its tag.
        assert_eq!(
            node_reference(&images(true), "app:1"),
            "harbor.example.com/dockerhub/library/app:1"
        );
    }

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
