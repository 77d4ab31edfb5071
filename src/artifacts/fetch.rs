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
use crate::docker::{self, Engine};
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
        // The index's digest says what was checked when the file came in,
        // not what is on disk now: the file is hashed again before every
        // use (the kind CLI devstack runs included). A file damaged or
        // replaced since is fetched again; offline that fails, naming it.
        let mut damaged = None;
        if let Some(found) = cache.find(wanted.kind, name, None, &wanted.version)
            && found.digest.as_deref() == Some(pin)
        {
            let path = cache.dir().join(&found.file);
            let size = found.size.unwrap_or(0);
            match sha256_file(&path) {
                Ok(digest) if digest == pin => {
                    return Ok(fetched(
                        wanted,
                        name,
                        Some(pin),
                        size,
                        0,
                        Outcome::Cached,
                        None,
                    ));
                }
                Ok(digest) => damaged = Some((path, digest)),
                Err(e) => damaged = Some((path, format!("unreadable ({e})"))),
            }
        }
        if let Some((path, _)) = &damaged {
            (self.progress)(format!(
                "the cached {name} at {} does not match its pin: fetching it again",
                path.display()
            ));
        }
        let refuse_damaged = |err: Error| match &damaged {
            Some((path, digest)) => damaged_entry(name, path, pin, digest, Some(&err)),
            None => err,
        };
        let from = mirrors::download_url(self.download_mirror, url);
        let partial = cache.partial(file)?;
        let result = self.download(&from, &partial, name).await;
        let (size, digest) = match result {
            Ok(got) => got,
            Err(err) => {
                let _ = std::fs::remove_file(&partial);
                return Err(refuse_damaged(err));
            }
        };
        if digest != pin {
            let _ = std::fs::remove_file(&partial);
            return Err(refuse_damaged(mismatch(
                name, &from, pin, &digest, "download",
            )));
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
                "check network access; behind a proxy set {} (and {} for hosts it must not serve); with a mirror set {} (files are fetched from `<url>/<host>/<path>`); or use an offline bundle (--bundle, `devstack pull --bundle DIR` on a machine with access)",
                envvars::HTTPS_PROXY,
                envvars::NO_PROXY,
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
        docker: &dyn Engine,
        cache: &mut Cache,
        wanted: &Wanted,
    ) -> Result<Fetched, Error> {
        let (reference, name, repository, local) = image_names(wanted);
        // A digest the profile writes into the reference is its own pin.
        let pin = reference
            .split_once('@')
            .map(|(_, digest)| digest)
            .filter(|digest| super::pins::is_sha256(digest))
            .or_else(|| self.pins.image(reference));
        // Hashing every tarball (GiBs) would cost a warm `up` seconds, so
        // a cached tarball is checked for its size here, which catches a
        // truncated or partly overwritten file, and for its content when it
        // is loaded: `docker load` checks each layer against the image's
        // content-addressed config, and a node's containerd checks each
        // blob against its digest, so damaged bytes fail the import.
        let mut damaged = None;
        if let Some(found) = cache.find("image", &repository, Some(&name.tag), &name.tag)
            && (pin.is_none() || found.digest.as_deref() == pin)
        {
            let path = cache.dir().join(&found.file);
            let on_disk = std::fs::metadata(&path).map(|m| m.len()).ok();
            match found.size {
                Some(size) if on_disk != Some(size) => {
                    let now = on_disk.map_or("unreadable".to_string(), |n| format!("{n} bytes"));
                    damaged = Some((path, format!("{size} bytes"), now));
                }
                size => {
                    return Ok(fetched(
                        wanted,
                        &local,
                        pin,
                        size.unwrap_or(0),
                        0,
                        Outcome::Cached,
                        None,
                    ));
                }
            }
        }
        if let Some((path, _, _)) = &damaged {
            (self.progress)(format!(
                "the cached {local} at {} is not the size it was saved with: fetching it again",
                path.display()
            ));
        }
        self.image_into_cache(docker, cache, wanted, pin)
            .await
            .map_err(|err| match &damaged {
                Some((path, expected, found)) => {
                    damaged_entry(&local, path, expected, found, Some(&err))
                }
                None => err,
            })
    }

    /// An image not (or no longer) in the cache: saved from the Docker
    /// engine when it holds `pin`, else pulled and checked, then saved.
    async fn image_into_cache(
        &self,
        docker: &dyn Engine,
        cache: &mut Cache,
        wanted: &Wanted,
        pin: Option<&str>,
    ) -> Result<Fetched, Error> {
        let (reference, name, repository, local) = image_names(wanted);
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
        let saved = docker::save_image(docker, &local, partial.clone()).await;
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
        docker: &dyn Engine,
        local: &str,
        repository: &str,
        mirror: Option<&str>,
        pin: Option<&str>,
    ) -> Option<Option<String>> {
        let image = docker.inspect_image(local).await.ok()?;
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
        docker: &dyn Engine,
        from: &str,
        local: &str,
        pin: Option<&str>,
    ) -> Result<(Option<String>, u64), Error> {
        let name = ImageName::parse(from);
        let pull_repository = match name.registry.as_str() {
            "docker.io" => name.local_repository(),
            registry => format!("{registry}/{}", name.path),
        };
        let had_tag = docker.inspect_image(from).await.ok().map(|i| i.id);
        (self.progress)(format!("pulling {from}"));
        let mut stream = docker.pull_progress(&pull_repository, &name.tag);
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
                    "check network access to the registry (the Docker engine pulls: behind a proxy, set the engine's proxy, not devstack's); behind a registry mirror set `images.mirrors` or {} (e.g. `docker.io=https://mirror.example.com`); or use an offline bundle (--bundle)",
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
            None => docker
                .inspect_image(from)
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
            let now = docker.inspect_image(from).await.ok().map(|i| i.id);
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
            docker
                .tag_image(from, &target.local_repository(), &target.tag)
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
    docker: &dyn Engine,
    tag: &str,
    repository: &str,
    digest: Option<&str>,
) {
    let by_digest = digest.map(|d| format!("{repository}@{d}"));
    for reference in std::iter::once(tag).chain(by_digest.as_deref()) {
        if let Err(e) = docker.remove_image(reference).await {
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

/// The sha256 of a file, as pins write it (`sha256:<hex>`), read in
/// blocks: a warm `up` hashes every cached file it uses (measured in
/// docs/offline.md, "Cache verification").
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1024 * 1024];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// The refusal of a cache entry whose file is no longer what was checked
/// when it entered the cache (`found`: its digest now, or why it cannot be
/// read), with why fetching it again failed (`refetch`).
pub fn damaged_entry(
    name: &str,
    path: &Path,
    expected: &str,
    found: &str,
    refetch: Option<&Error>,
) -> Error {
    let refetch = refetch
        .map(|e| format!("; fetching it again failed: {}", e.message()))
        .unwrap_or_default();
    Error::prerequisite(format!(
        "the cached {name} at {} is damaged or was replaced since it was fetched: it is {found}, \
         not {expected}, and devstack does not use it{refetch}",
        path.display()
    ))
    .with_hint(format!(
        "run `devstack pull` where its source answers (or with {} set to a mirror): it fetches \
         {name} again and replaces the file; offline, use an offline bundle (--bundle)",
        envvars::DEVSTACK_DOWNLOAD_MIRROR
    ))
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
/// An image's reference as the profile gives it, parsed, and the
/// repository and `repository:tag` it has in the engine and the cache.
fn image_names(wanted: &Wanted) -> (&str, ImageName, String, String) {
    let Origin::Image(reference) = &wanted.origin else {
        unreachable!("image() is given images");
    };
    let name = ImageName::parse(reference);
    let repository = name.local_repository();
    let local = format!("{repository}:{}", name.tag);
    (reference, name, repository, local)
}
