//! What kind of engine devstack talks to: its version and API, the host's
//! cgroup version, the image store and the platform. Node specs, the image
//! cache and `doctor` depend on these, because the engines users run differ
//! exactly there (Docker 20.10 on cgroup v1 with the classic store; Docker
//! 27-29 on cgroup v2, often with the containerd image store; Podman).

use bollard::models::{SystemInfo, SystemInfoCgroupVersionEnum, SystemVersion};
use serde::Serialize;

/// The host's cgroup hierarchy as the engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cgroup {
    V1,
    V2,
    /// The engine did not say (very old engines, some remote ones).
    Unknown,
}

/// Where the engine keeps images: the classic graph-driver store or
/// containerd's (Docker's `containerd-snapshotter` feature, the default of
/// new Docker 29 installs and of Docker Desktop).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum ImageStore {
    /// A graph driver (`overlay2`, ...).
    Classic { driver: String },
    /// containerd's image store with this snapshotter (`overlayfs`, ...).
    Containerd { snapshotter: String },
}

/// The first API version whose image export takes a `platform`
/// (Docker 28.0): on the containerd store the only way to save one
/// platform of a multi-platform image whose other platforms were never
/// pulled.
pub const EXPORT_PLATFORM_API: (u32, u32) = (1, 48);

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineHost {
    /// `Docker Engine 28.5.2`, `Podman Engine 4.3.1`, ...
    pub product: String,
    pub version: String,
    /// The API version devstack and the engine agreed on.
    pub api: String,
    /// The oldest API version the engine accepts.
    pub min_api: Option<String>,
    pub cgroup: Cgroup,
    pub cgroup_driver: Option<String>,
    pub image_store: ImageStore,
    /// `linux/amd64`, `linux/arm64`, ...: the platform of the images it runs.
    pub platform: String,
    /// Where the engine keeps its data, as the engine sees it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_dir: Option<String>,
}

impl EngineHost {
    /// Reads the facts from the engine's `info` and `version` answers and
    /// the API version the client negotiated.
    pub fn from_answers(info: &SystemInfo, version: &SystemVersion, api: &str) -> Self {
        let product = version
            .components
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|c| c.name.as_str())
            .find(|name| name.ends_with("Engine"))
            // Docker calls its own component plain `Engine`.
            .filter(|name| *name != "Engine")
            .unwrap_or("Docker Engine")
            .to_string();
        let cgroup = match info.cgroup_version {
            Some(SystemInfoCgroupVersionEnum::_1) => Cgroup::V1,
            Some(SystemInfoCgroupVersionEnum::_2) => Cgroup::V2,
            _ => Cgroup::Unknown,
        };
        EngineHost {
            product,
            version: info
                .server_version
                .clone()
                .or_else(|| version.version.clone())
                .unwrap_or_else(|| "?".into()),
            api: api.to_string(),
            min_api: version.min_api_version.clone(),
            cgroup,
            cgroup_driver: info.cgroup_driver.as_ref().map(|d| d.to_string()),
            image_store: image_store(info),
            platform: format!(
                "{}/{}",
                info.os_type.as_deref().unwrap_or("linux"),
                go_arch(info.architecture.as_deref().unwrap_or("x86_64"))
            ),
            root_dir: info.docker_root_dir.clone(),
        }
    }

    pub fn containerd_store(&self) -> bool {
        matches!(self.image_store, ImageStore::Containerd { .. })
    }

    /// The platform to export images for: on the containerd store an image
    /// pulled from a multi-platform index holds only this platform's
    /// content, and exporting the whole index fails ("content digest ...
    /// not found"). None where the engine exports what it holds (the
    /// classic store) or cannot be asked (API below 1.48).
    pub fn export_platform(&self) -> Option<&str> {
        (self.containerd_store() && api_at_least(&self.api, EXPORT_PLATFORM_API))
            .then_some(self.platform.as_str())
    }

    /// One line for people: `Docker Engine 28.5.2 (API 1.51, min 1.44),
    /// cgroup v2 (systemd driver), containerd image store (overlayfs)`.
    pub fn summary(&self) -> String {
        let min = self
            .min_api
            .as_deref()
            .map(|m| format!(", min {m}"))
            .unwrap_or_default();
        let cgroup = match self.cgroup {
            Cgroup::V1 => "cgroup v1".to_string(),
            Cgroup::V2 => "cgroup v2".to_string(),
            Cgroup::Unknown => "cgroup version unknown".to_string(),
        };
        let driver = self
            .cgroup_driver
            .as_deref()
            .map(|d| format!(" ({d} driver)"))
            .unwrap_or_default();
        let store = match &self.image_store {
            ImageStore::Classic { driver } => format!("classic image store ({driver})"),
            ImageStore::Containerd { snapshotter } => {
                format!("containerd image store ({snapshotter})")
            }
        };
        format!(
            "{} {} (API {}{min}), {cgroup}{driver}, {store}, {}",
            self.product, self.version, self.api, self.platform
        )
    }
}

/// Docker reports the containerd store in `DriverStatus` as
/// `["driver-type", "io.containerd.snapshotter.v1"]`, its `Driver` then
/// being the snapshotter's name.
fn image_store(info: &SystemInfo) -> ImageStore {
    let driver = info.driver.clone().unwrap_or_default();
    let containerd = info
        .driver_status
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|pair| {
            pair.first().map(String::as_str) == Some("driver-type")
                && pair
                    .get(1)
                    .is_some_and(|v| v.starts_with("io.containerd.snapshotter"))
        });
    if containerd {
        ImageStore::Containerd {
            snapshotter: driver,
        }
    } else {
        ImageStore::Classic { driver }
    }
}

/// The engine reports `uname -m`; images name Go's architectures.
fn go_arch(machine: &str) -> &str {
    match machine {
        "x86_64" | "amd64" => "amd64",
        "aarch64" | "arm64" => "arm64",
        "armv7l" | "arm" => "arm",
        "ppc64le" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

/// Whether a `MAJOR.MINOR` API version is at least `wanted`.
pub fn api_at_least(api: &str, wanted: (u32, u32)) -> bool {
    let mut parts = api.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= wanted
}

/// The OCI platform JSON the export endpoint's `platform` parameter takes.
pub fn platform_json(platform: &str) -> String {
    let mut parts = platform.split('/');
    let os = parts.next().unwrap_or("linux");
    let architecture = parts.next().unwrap_or("amd64");
    let mut value = serde_json::json!({"os": os, "architecture": architecture});
    if let Some(variant) = parts.next() {
        value["variant"] = variant.into();
    }
    value.to_string()
}

/// Percent-encodes a query parameter's value (RFC 3986 unreserved kept).
pub fn url_encoded(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::SystemVersionComponents;

    fn info(
        driver: &str,
        status: &[(&str, &str)],
        cgroup: SystemInfoCgroupVersionEnum,
    ) -> SystemInfo {
        SystemInfo {
            server_version: Some("28.5.2".into()),
            driver: Some(driver.into()),
            driver_status: Some(
                status
                    .iter()
                    .map(|(k, v)| vec![k.to_string(), v.to_string()])
                    .collect(),
            ),
            cgroup_version: Some(cgroup),
            os_type: Some("linux".into()),
            architecture: Some("x86_64".into()),
            ..Default::default()
        }
    }

    fn version(product: &str, min: &str) -> SystemVersion {
        SystemVersion {
            components: Some(vec![SystemVersionComponents {
                name: product.into(),
                version: "x".into(),
                details: None,
            }]),
            min_api_version: Some(min.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_containerd_store_is_told_by_its_driver_type() {
        let containerd = EngineHost::from_answers(
            &info(
                "overlayfs",
                &[("driver-type", "io.containerd.snapshotter.v1")],
                SystemInfoCgroupVersionEnum::_2,
            ),
            &version("Engine", "1.44"),
            "1.51",
        );
        assert_eq!(containerd.product, "Docker Engine");
        assert_eq!(
            containerd.image_store,
            ImageStore::Containerd {
                snapshotter: "overlayfs".into()
            }
        );
        assert_eq!(containerd.cgroup, Cgroup::V2);
        assert_eq!(containerd.platform, "linux/amd64");
        assert_eq!(containerd.export_platform(), Some("linux/amd64"));
        assert!(
            containerd
                .summary()
                .contains("containerd image store (overlayfs)"),
            "{}",
            containerd.summary()
        );

        let classic = EngineHost::from_answers(
            &info(
                "overlay2",
                &[("Backing Filesystem", "extfs")],
                SystemInfoCgroupVersionEnum::_1,
            ),
            &version("Engine", "1.12"),
            "1.41",
        );
        assert_eq!(
            classic.image_store,
            ImageStore::Classic {
                driver: "overlay2".into()
            }
        );
        assert_eq!(classic.cgroup, Cgroup::V1);
        assert_eq!(classic.export_platform(), None);
    }

    #[test]
    fn an_engine_below_api_1_48_is_not_asked_for_a_platform() {
        let old = EngineHost::from_answers(
            &info(
                "overlayfs",
                &[("driver-type", "io.containerd.snapshotter.v1")],
                SystemInfoCgroupVersionEnum::_2,
            ),
            &version("Engine", "1.24"),
            "1.47",
        );
        assert!(old.containerd_store());
        assert_eq!(old.export_platform(), None);
        assert!(api_at_least("1.48", EXPORT_PLATFORM_API));
        assert!(api_at_least("2.0", EXPORT_PLATFORM_API));
        assert!(!api_at_least("1.9", EXPORT_PLATFORM_API));
    }

    #[test]
    fn podman_is_known_by_its_component() {
        let podman = EngineHost::from_answers(
            &info("overlay", &[], SystemInfoCgroupVersionEnum::_2),
            &version("Podman Engine", "1.24"),
            "1.41",
        );
        assert_eq!(podman.product, "Podman Engine");
        assert!(podman.summary().starts_with("Podman Engine 28.5.2"));
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            url_encoded(r#"{"os":"linux"}"#),
            "%7B%22os%22%3A%22linux%22%7D"
        );
    }

    #[test]
    fn platforms_become_oci_platform_json() {
        assert_eq!(
            platform_json("linux/amd64"),
            r#"{"architecture":"amd64","os":"linux"}"#
        );
        assert_eq!(
            platform_json("linux/arm/v7"),
            r#"{"architecture":"arm","os":"linux","variant":"v7"}"#
        );
    }
}
