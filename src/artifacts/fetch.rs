//! Fetching one artifact into the cache and checking it against its pin:
//! images through the Docker engine (from their registry's mirror when one
//! is set), files over HTTPS (from the download mirror when one is set).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::cache::Cache;
use super::mirrors::{self, ImageName};
use super::{Fetched, Origin, Outcome, Pins, Wanted, human_bytes};
use crate::bundle::Artifact;
use crate::docker;
use crate::envvars;
use crate::error::Error;

/// Files need no Docker engine; images are fetched through the one
/// [`Fetcher::image`] is given.
pub struct Fetcher<'a> {
    pub pins: &'a Pins,
    pub mirrors: &'a BTreeMap<String, String>,
    pub download_mirror: Option<&'a str>,
    pub progress: &'a (dyn Fn(String) + Sync),
}

impl Fetcher<'_> {
    /// A file: from the cache, else downloaded and checked against its pin.
    /// A download without a pin is refused: devstack runs no file it cannot check.
    pub async fn file(&self, cache: &mut Cache, wanted: &Wanted) -> Result<Fetched, Error> {
        let Origin::Download { url, file, name } = &wanted.origin else {
            unreachable!("file() is given downloads");
        };
        let pin = self.pins.file(url).ok_or_else(|| {
            Error::user(format!(
                "devstack has no checksum for {name} {} ({url}), so it does not download it",
                wanted.version
            ))
            .with_hint(format!(
                "use the version devstack pins (`devstack version` lists them), an offline bundle (--bundle), or add the file's sha256 to a pins file ({})",
                envvars::DEVSTACK_PINS
            ))
        })?;
        if let Some(found) = cache.find(wanted.kind, name, None, &wanted.version)
            && found.digest.as_deref() == Some(pin)
        {
            return Ok(fetched(
                wanted,
                name,
                Some(pin),
                found.size.unwrap_or(0),
                0,
                Outcome::Cached,
                None,
            ));
        }
        let from = mirrors::download_url(self.download_mirror, url);
        let partial = cache.partial(file)?;
        let result = self.download(&from, &partial, name).await;
        let (size, digest) = match result {
            Ok(got) => got,
            Err(err) => {
                let _ = std::fs::remove_file(&partial);
                return Err(err);
            }
        };
        if digest != pin {
            let _ = std::fs::remove_file(&partial);
            return Err(mismatch(name, &from, pin, &digest, "download"));
        }
        cache.commit(&partial, file)?;
        cache.record(Artifact {
            kind: wanted.kind.to_string(),
            role: None,
            name: name.clone(),
            tag: None,
            version: Some(wanted.version.clone()),
            digest: Some(digest),
            size: Some(size),
            file: file.clone(),
        })?;
        let mirrored = (from != *url).then_some(from);
        Ok(fetched(
            wanted,
            name,
            Some(pin),
            size,
            size,
            Outcome::Downloaded,
            mirrored,
        ))
    }

    async fn download(&self, url: &str, dest: &Path, name: &str) -> Result<(u64, String), Error> {
        let unreachable = |e: String| {
            Error::prerequisite(format!("cannot download {name} from {url}: {e}")).with_hint(format!(
                "check network access; behind a proxy or mirror set {} (files are fetched from `<url>/<host>/<path>`); or use an offline bundle (--bundle, `devstack pull --bundle DIR` on a machine with access)",
                envvars::DEVSTACK_DOWNLOAD_MIRROR
            ))
        };
        let mut response = reqwest::get(url)
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| unreachable(e.to_string()))?;
        let total = response.content_length();
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| Error::internal(format!("create {}: {e}", dest.display())))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut shown = Shown::default();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unreachable(e.to_string()))?
        {
            hasher.update(&chunk);
            size += chunk.len() as u64;
            file.write_all(&chunk)
                .await
                .map_err(|e| Error::internal(format!("write {}: {e}", dest.display())))?;
            shown.report(self.progress, name, size, total);
        }
        file.flush()
            .await
            .map_err(|e| Error::internal(format!("write {}: {e}", dest.display())))?;
        Ok((size, format!("sha256:{}", hex::encode(hasher.finalize()))))
    }

    /// An image: from the cache, else saved from the Docker engine when it
    /// holds the pinned digest, else pulled (through the registry's mirror)
    /// and checked, then saved into the cache.
    pub async fn image(
        &self,
        docker: &bollard::Docker,
        cache: &mut Cache,
        wanted: &Wanted,
    ) -> Result<Fetched, Error> {
        let Origin::Image(reference) = &wanted.origin else {
            unreachable!("image() is given images");
        };
        let name = ImageName::parse(reference);
        let repository = name.local_repository();
        let local = format!("{repository}:{}", name.tag);
        // A digest the profile writes into the reference is its own pin.
        let pin = reference
            .split_once('@')
            .map(|(_, digest)| digest)
            .filter(|digest| super::pins::is_sha256(digest))
            .or_else(|| self.pins.image(reference));
        if let Some(found) = cache.find("image", &repository, Some(&name.tag), &name.tag)
            && (pin.is_none() || found.digest.as_deref() == pin)
        {
            return Ok(fetched(
                wanted,
                &local,
                pin,
                found.size.unwrap_or(0),
                0,
                Outcome::Cached,
                None,
            ));
        }
        let mirror = mirrors::pull_reference(self.mirrors, reference);
        let (outcome, downloaded, digest) = match self
            .held_digest(docker, &local, &repository, mirror.as_deref(), pin)
            .await
        {
            Some(digest) => (Outcome::FromDocker, 0, digest),
            None => {
                let from = mirror.clone().unwrap_or_else(|| local.clone());
                let (digest, downloaded) = self.pull(docker, &from, &local, pin).await?;
                (Outcome::Pulled, downloaded, digest)
            }
        };
        let file = format!(
            "images/{}-{}.tar",
            repository.replace(['/', ':'], "_"),
            name.tag
        );
        let partial = cache.partial(&file)?;
        (self.progress)(format!("saving {local} into the cache"));
        let saved =
            docker::save_image(docker::shared(docker).as_ref(), &local, partial.clone()).await;
        if let Err(err) = saved {
            let _ = std::fs::remove_file(&partial);
            return Err(err);
        }
        let size = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        cache.commit(&partial, &file)?;
        cache.record(Artifact {
            kind: "image".into(),
            role: wanted.role.clone(),
            name: repository,
            tag: Some(name.tag.clone()),
            version: Some(wanted.version.clone()),
            digest: digest.clone(),
            size: Some(size),
            file,
        })?;
        let from = (outcome == Outcome::Pulled).then(|| mirror.unwrap_or(local.clone()));
        Ok(Fetched {
            kind: "image".into(),
            name: local,
            digest,
            size,
            downloaded,
            outcome,
            from,
        })
    }

    /// The digest the engine's copy of `local` was pulled with, when it is
    /// the pin (from upstream or the mirror); for an image without a pin,
    /// any copy the engine holds is the one the profile names.
    async fn held_digest(
        &self,
        docker: &bollard::Docker,
        local: &str,
        repository: &str,
        mirror: Option<&str>,
        pin: Option<&str>,
    ) -> Option<Option<String>> {
        let image = docker::inspect_image(docker, local).await.ok()?;
        let Some(pin) = pin else {
            return Some(None);
        };
        let mirror_repository = mirror
            .map(ImageName::parse)
            .map(|n| format!("{}/{}", n.registry, n.path));
        let held = image.repo_digests.unwrap_or_default().iter().any(|d| {
            d.rsplit_once('@').is_some_and(|(repo, digest)| {
                digest == pin
                    && (ImageName::parse(repo).local_repository() == repository
                        || Some(repo) == mirror_repository.as_deref())
            })
        });
        held.then(|| Some(pin.to_string()))
    }

    /// Pulls `from`, checks the digest the registry served against `pin`,
    /// and names the image `local`. A mismatch leaves no new reference.
    async fn pull(
        &self,
        docker: &bollard::Docker,
        from: &str,
        local: &str,
        pin: Option<&str>,
    ) -> Result<(Option<String>, u64), Error> {
        let name = ImageName::parse(from);
        let pull_repository = match name.registry.as_str() {
            "docker.io" => name.local_repository(),
            registry => format!("{registry}/{}", name.path),
        };
        let had_tag = docker::inspect_image(docker, from).await.ok().map(|i| i.id);
        (self.progress)(format!("pulling {from}"));
        let mut stream = docker::pull_progress(docker, &pull_repository, &name.tag);
        let mut layers: HashMap<String, (u64, u64)> = HashMap::new();
        let mut served = None;
        let mut shown = Shown::default();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| {
                Error::prerequisite(format!(
                    "cannot pull image `{from}`: {}",
                    docker::docker_message(&e)
                ))
                .with_hint(format!(
                    "check network access to the registry; behind a registry mirror set `images.mirrors` or {} (e.g. `docker.io=https://mirror.example.com`); or use an offline bundle (--bundle)",
                    envvars::DEVSTACK_MIRRORS
                ))
            })?;
            if let Some(message) = info.error_detail.and_then(|d| d.message) {
                return Err(Error::prerequisite(format!(
                    "cannot pull image `{from}`: {message}"
                )));
            }
            let status = info.status.unwrap_or_default();
            if let Some(digest) = status.strip_prefix("Digest: ") {
                served = Some(digest.trim().to_string());
            }
            if let (Some(id), Some(detail)) = (info.id, info.progress_detail)
                && status == "Downloading"
                && let (Some(current), Some(total)) = (detail.current, detail.total)
            {
                layers.insert(id, (current.max(0) as u64, total.max(0) as u64));
                let (current, total) = layers
                    .values()
                    .fold((0, 0), |(c, t), (lc, lt)| (c + lc, t + lt));
                shown.report(self.progress, from, current, Some(total));
            }
        }
        let downloaded = layers.values().map(|(_, total)| total).sum();
        let served = match served {
            Some(digest) => Some(digest),
            None => docker::inspect_image(docker, from)
                .await
                .ok()
                .and_then(|i| i.repo_digests)
                .and_then(|digests| {
                    digests.iter().find_map(|d| {
                        d.strip_prefix(&format!("{pull_repository}@"))
                            .map(String::from)
                    })
                }),
        };
        if let Some(pin) = pin
            && served.as_deref() != Some(pin)
        {
            // The tag was not there before, or now names what the registry
            // served: either way it must not stay.
            let now = docker::inspect_image(docker, from).await.ok().map(|i| i.id);
            if had_tag.is_none() || had_tag != now {
                drop_pulled_references(docker, from, &pull_repository, served.as_deref()).await;
            }
            return Err(mismatch(
                local,
                from,
                pin,
                served
                    .as_deref()
                    .unwrap_or("none (the registry sent no digest)"),
                "image",
            ));
        }
        if from != local {
            let target = ImageName::parse(local);
            docker::tag_image(docker, from, &target.local_repository(), &target.tag)
                .await
                .map_err(|e| docker::engine_error(format!("tag {from} as {local}"), e))?;
            // The mirror's name would make the engine look as if it held the
            // image from the mirror next time; it is the upstream name that counts.
            if had_tag.is_none() {
                drop_pulled_references(docker, from, &pull_repository, served.as_deref()).await;
            }
        }
        Ok((served, downloaded))
    }
}

/// Removes the references a pull added: its tag and its digest (never the
/// image another reference still names).
async fn drop_pulled_references(
    docker: &bollard::Docker,
    tag: &str,
    repository: &str,
    digest: Option<&str>,
) {
    let by_digest = digest.map(|d| format!("{repository}@{d}"));
    for reference in std::iter::once(tag).chain(by_digest.as_deref()) {
        if let Err(e) = docker::remove_image(docker, reference).await {
            tracing::debug!("remove {reference}: {e}");
        }
    }
}

fn fetched(
    wanted: &Wanted,
    name: &str,
    pin: Option<&str>,
    size: u64,
    downloaded: u64,
    outcome: Outcome,
    from: Option<String>,
) -> Fetched {
    Fetched {
        kind: wanted.kind.to_string(),
        name: name.to_string(),
        digest: pin.map(String::from),
        size,
        downloaded,
        outcome,
        from,
    }
}

/// The refusal of an artifact whose bytes are not the ones pinned.
fn mismatch(name: &str, from: &str, expected: &str, received: &str, what: &str) -> Error {
    Error::prerequisite(format!(
        "{what} {name} from {from} does not match its pin: expected {expected}, received {received}; it was not used and nothing was kept"
    ))
    .with_hint(format!(
        "the source serves other bytes than upstream published: check the mirror ({} / {}) or pin what you rebuilt privately in a pins file ({})",
        envvars::DEVSTACK_MIRRORS,
        envvars::DEVSTACK_DOWNLOAD_MIRROR,
        envvars::DEVSTACK_PINS
    ))
}

/// Progress lines at each quarter of an artifact (each 16 MiB when its
/// size is unknown), so CI logs stay short.
#[derive(Default)]
struct Shown {
    step: Option<u64>,
}

impl Shown {
    fn report(
        &mut self,
        progress: &(dyn Fn(String) + Sync),
        name: &str,
        current: u64,
        total: Option<u64>,
    ) {
        let step = match total.filter(|t| *t > 0) {
            Some(total) => current.min(total) * 4 / total,
            None => current / (16 * 1024 * 1024),
        };
        if self.step == Some(step) {
            return;
        }
        self.step = Some(step);
        let size = match total {
            Some(total) => format!("{} of {}", human_bytes(current), human_bytes(total)),
            None => human_bytes(current),
        };
        progress(format!("{name}: {size}"));
    }
}
