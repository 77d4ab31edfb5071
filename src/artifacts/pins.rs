//! The digests artifacts must match: devstack's built-in pins
//! ([`crate::versions`]), replaced entry by entry by a `DEVSTACK_PINS`
//! file for a private rebuild (a mirror cannot change what runs, a pins
//! file can, so `version --json` says when one is in effect).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bundle::normalize_reference;
use crate::envvars;
use crate::error::Error;
use crate::versions;

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pins {
    /// Normalized image reference (`kindest/node:v1.36.4`) -> `sha256:…`.
    pub images: BTreeMap<String, String>,
    /// Upstream URL -> `sha256:…` of the file's bytes.
    pub files: BTreeMap<String, String>,
    /// The `DEVSTACK_PINS` file in effect, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<PathBuf>,
}

/// The file format `DEVSTACK_PINS` names (the one `tests/online/mirror.sh`
/// writes for the kit's rebuilds).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PinsFile {
    api_version: String,
    kind: String,
    #[serde(default)]
    images: BTreeMap<String, String>,
    #[serde(default)]
    files: BTreeMap<String, String>,
}

impl Pins {
    /// The pins devstack ships.
    pub fn builtin() -> Pins {
        let mut pins = Pins::default();
        for pin in versions::image_pins() {
            pins.images
                .insert(normalize_reference(pin.reference), pin.digest.to_string());
        }
        for pin in versions::file_pins() {
            pins.files
                .insert(pin.url.to_string(), format!("sha256:{}", pin.sha256));
        }
        pins
    }

    /// The built-in pins, with the entries of `file` (`DEVSTACK_PINS`) in
    /// place of theirs.
    pub fn load(file: Option<&Path>) -> Result<Pins, Error> {
        let mut pins = Pins::builtin();
        let Some(path) = file else {
            return Ok(pins);
        };
        let bad = |why: String| {
            Error::user(format!(
                "the pins file {} ({}) {why}",
                path.display(),
                envvars::DEVSTACK_PINS
            ))
            .with_hint(
                "write `{\"apiVersion\": \"devstack.dev/v1alpha1\", \"kind\": \"Pins\", \"images\": {\"REF\": \"sha256:…\"}, \"files\": {\"URL\": \"sha256:…\"}}`, or unset DEVSTACK_PINS",
            )
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
        let file: PinsFile =
            serde_json::from_str(&text).map_err(|e| bad(format!("is invalid: {e}")))?;
        if file.kind != "Pins" || file.api_version != "devstack.dev/v1alpha1" {
            return Err(bad(format!(
                "is `{}` `{}`, not `devstack.dev/v1alpha1` `Pins`",
                file.api_version, file.kind
            )));
        }
        for (key, digest) in file.images.iter().chain(file.files.iter()) {
            if !is_sha256(digest) {
                return Err(bad(format!(
                    "pins `{key}` to `{digest}`, which is not `sha256:` and 64 hex digits"
                )));
            }
        }
        for (reference, digest) in file.images {
            pins.images.insert(normalize_reference(&reference), digest);
        }
        pins.files.extend(file.files);
        pins.replaced_by = Some(path.to_path_buf());
        Ok(pins)
    }

    pub fn image(&self, reference: &str) -> Option<&str> {
        self.images
            .get(&normalize_reference(reference))
            .map(String::as_str)
    }

    pub fn file(&self, url: &str) -> Option<&str> {
        self.files.get(url).map(String::as_str)
    }

    /// Tags of `repository` (`kindest/node`) that carry a pin.
    pub fn tags_of(&self, repository: &str) -> Vec<String> {
        let wanted = normalize_reference(&format!("{repository}:x"));
        let wanted = wanted.trim_end_matches(":x");
        self.images
            .keys()
            .filter_map(|r| r.rsplit_once(':'))
            .filter(|(repo, _)| *repo == wanted)
            .map(|(_, tag)| tag.to_string())
            .collect()
    }
}

pub fn is_sha256(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_artifact_is_pinned() {
        let pins = Pins::builtin();
        for image in [
            versions::KIND_NODE_IMAGE,
            versions::K3S_IMAGE,
            versions::LOCALSTACK_IMAGE,
            versions::ESO_IMAGE,
        ] {
            let digest = pins
                .image(image)
                .unwrap_or_else(|| panic!("{image} has no pin"));
            assert!(is_sha256(digest), "{image}: {digest}");
        }
        for digest in pins.images.values().chain(pins.files.values()) {
            assert!(is_sha256(digest), "{digest}");
        }
        assert_eq!(
            pins.tags_of("kindest/node"),
            ["v1.34.11", "v1.35.8", "v1.36.4", "v1.37.0"]
        );
        assert_eq!(pins.tags_of("docker.io/kindest/node").len(), 4);
    }

    #[test]
    fn a_pins_file_replaces_entries_and_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        let digest = format!("sha256:{}", "ab".repeat(32));
        std::fs::write(
            &path,
            serde_json::json!({"apiVersion": "devstack.dev/v1alpha1", "kind": "Pins",
                "images": {"docker.io/kindest/node:v1.36.4": digest},
                "files": {versions::FLUX_INSTALL.url: digest}})
            .to_string(),
        )
        .unwrap();
        let pins = Pins::load(Some(&path)).unwrap();
        assert_eq!(pins.image(versions::KIND_NODE_IMAGE), Some(digest.as_str()));
        assert_eq!(pins.file(versions::FLUX_INSTALL.url), Some(digest.as_str()));
        assert_eq!(pins.replaced_by.as_deref(), Some(path.as_path()));
        assert_eq!(
            pins.image(versions::K3S_IMAGE),
            Pins::builtin().image(versions::K3S_IMAGE),
            "entries the file does not name keep their built-in pin"
        );

        std::fs::write(
            &path,
            r#"{"apiVersion": "devstack.dev/v1alpha1", "kind": "Pins", "images": {"x:1": "sha256:12"}}"#,
        )
        .unwrap();
        let err = Pins::load(Some(&path)).unwrap_err();
        assert_eq!(err.kind(), crate::Kind::User);
        assert!(
            err.message()
                .contains("pins `x:1` to `sha256:12`, which is not"),
            "{}",
            err.message()
        );
    }
}
