//! The version matrix: every component devstack runs, with its default,
//! what is tested here, the newest upstream release and its support
//! status. The single source: defaults, `devstack version`, `doctor`'s
//! Kubernetes checks and README's version table (a test keeps README in
//! step) all read this file. The offline kit (`kit/`) builds the
//! defaults, so online and offline runs use the same image references.

use serde::Serialize;

/// devstack's own build, from build.rs: the commit (short sha, `-dirty`
/// when tracked files differed from it, `unknown` without git), the build
/// day (UTC) and the target triple. A bug report names the exact build.
pub mod build {
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    pub const COMMIT: &str = env!("DEVSTACK_BUILD_COMMIT");
    pub const DATE: &str = env!("DEVSTACK_BUILD_DATE");
    pub const TARGET: &str = env!("DEVSTACK_BUILD_TARGET");
    /// What follows `devstack ` in `--version` and `devstack version`.
    pub const LONG: &str = concat!(
        env!("CARGO_PKG_VERSION"),
        " (commit ",
        env!("DEVSTACK_BUILD_COMMIT"),
        ", built ",
        env!("DEVSTACK_BUILD_DATE"),
        ", ",
        env!("DEVSTACK_BUILD_TARGET"),
        ")"
    );
}

/// K3s node image: Kubernetes 1.32, out of upstream support and below Flux
/// 2.9's minimum (see [`MATRIX`]); Kind is the default provider.
pub const K3S_IMAGE: &str = "rancher/k3s:v1.32.0-k3s1";
/// Kind node image: one of the four kind v0.33.0 publishes, Kubernetes 1.36,
/// the version ESO 2.9 is tested on. Its kubelet needs `failCgroupV1: false`
/// on cgroup v1 hosts, which devstack's kind config sets.
pub const KIND_NODE_IMAGE: &str = "kindest/node:v1.36.4";
/// Oldest kind CLI devstack drives: node images of Kubernetes 1.36 are built
/// from kind's base files of v0.30.0 to v0.33.0 (identical in those), and
/// older CLIs are untried with them.
pub const KIND_MIN_VERSION: (u64, u64, u64) = (0, 30, 0);
/// The kind CLI devstack fetches when none is installed.
pub const KIND_CLI_VERSION: &str = "v0.33.0";
/// The last LocalStack release that runs without an auth token: `latest`
/// and the calendar-versioned tags need `LOCALSTACK_AUTH_TOKEN`.
pub const LOCALSTACK_IMAGE: &str = "localstack/localstack:4.14.0";
/// The stack registry's image (`registry.enabled`): Docker's official image
/// of distribution v3.0.0, the current release of the reference registry.
pub const REGISTRY_IMAGE: &str = "registry:3.0.0";
/// Flux 2.9's newest release whose controllers devstack is tested with
/// (2.10 needs Kubernetes >= 1.35.2, which the K3s provider cannot reach).
pub const FLUX_VERSION: &str = "v2.9.5";
/// ESO's chart; ESO supports only its current minor, and 0.19.x reached
/// end of life on 2025-09-22.
pub const ESO_CHART_VERSION: &str = "2.9.0";
/// The image chart 2.9.0 runs by default (controller, webhook and
/// cert-controller are one binary); devstack does not override it.
pub const ESO_IMAGE: &str = "ghcr.io/external-secrets/external-secrets:v2.9.0";
/// ESO's Helm repository (named in the GitOps layout users copy).
pub const ESO_CHART_REPOSITORY: &str = "https://charts.external-secrets.io";
/// ESO's source repository: its CRDs live in `deploy/crds/bundle.yaml`.
pub const ESO_GIT_REPOSITORY: &str = "https://github.com/external-secrets/external-secrets";
/// The commit tag `v2.9.0` points at: CRDs are read at a commit, which
/// cannot move, not at a tag, which can.
pub const ESO_CRDS_COMMIT: &str = "378bdb622ed9712ef4a58370f6a17af033b7d343";

/// An image as upstream published it: the tag people read, and the digest
/// that decides what runs (a retagged image no longer matches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagePin {
    pub reference: &'static str,
    pub digest: &'static str,
    /// The page that publishes the digest (or, where upstream publishes
    /// none, where it was read).
    pub published: &'static str,
}

/// A download as upstream published it, with the sha256 of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FilePin {
    pub url: &'static str,
    pub sha256: &'static str,
    pub published: &'static str,
}

const KIND_RELEASE: &str = "https://github.com/kubernetes-sigs/kind/releases/tag/v0.33.0";
const FLUX_RELEASE: &str = "https://github.com/fluxcd/flux2/releases/tag/v2.9.5";

/// The node images kind v0.33.0 publishes, each to be used by its digest
/// (its release notes list exactly these); `cluster.version` picks one.
pub const KIND_NODE_IMAGES: &[ImagePin] = &[
    ImagePin {
        reference: "kindest/node:v1.37.0",
        digest: "sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5",
        published: KIND_RELEASE,
    },
    ImagePin {
        reference: "kindest/node:v1.36.4",
        digest: "sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed",
        published: KIND_RELEASE,
    },
    ImagePin {
        reference: "kindest/node:v1.35.8",
        digest: "sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0",
        published: KIND_RELEASE,
    },
    ImagePin {
        reference: "kindest/node:v1.34.11",
        digest: "sha256:44e222ee2132dab25ff87301682f89eb82c7880ea3a1bf543bfe9708fd08d67d",
        published: KIND_RELEASE,
    },
];

/// K3s's node image (a multi-platform index digest).
pub const K3S_IMAGES: &[ImagePin] = &[ImagePin {
    reference: K3S_IMAGE,
    digest: "sha256:b7a31cc883051a89334a7865a7e75ef0bfcec5a5d13aba228b37388160a0be75",
    // Docker Hub's digest for the tag; one public pin confirms it
    // (hivemq/helm-charts, k3s.dockerfile).
    published: "https://hub.docker.com/r/rancher/k3s/tags?name=v1.32.0-k3s1",
}];

const K3S_RELEASE: &str = "https://github.com/k3s-io/k3s/releases/tag/v1.32.0%2Bk3s1";

/// What K3s v1.32.0+k3s1 itself runs that devstack keeps (its release's
/// `k3s-images.txt`; the stack disables the rest): multi-platform index
/// digests as Docker Hub serves them.
pub const K3S_SYSTEM_IMAGES: &[ImagePin] = &[
    ImagePin {
        reference: "rancher/mirrored-pause:3.6",
        digest: "sha256:74c4244427b7312c5b901fe0f67cbc53683d06f4f24c6faee65d4182bf0fa893",
        published: K3S_RELEASE,
    },
    ImagePin {
        reference: "rancher/mirrored-coredns-coredns:1.12.0",
        digest: "sha256:82979ddf442c593027a57239ad90616deb874e90c365d1a96ad508c2104bdea5",
        published: K3S_RELEASE,
    },
];

pub const LOCALSTACK_IMAGES: &[ImagePin] = &[ImagePin {
    reference: LOCALSTACK_IMAGE,
    digest: "sha256:3ebc37595918b8accb852f8048fef2aff047d465167edd655528065b07bc364a",
    published: "https://hub.docker.com/r/localstack/localstack/tags?name=4.14.0",
}];

/// The official image's multi-platform index digest for the tag, as
/// Docker Hub serves it; ten unrelated public repositories pin the same
/// digest for `registry:3.0.0` (2026).
pub const REGISTRY_IMAGES: &[ImagePin] = &[ImagePin {
    reference: REGISTRY_IMAGE,
    digest: "sha256:6c5666b861f3505b116bb9aa9b25175e71210414bd010d92035ff64018f9457e",
    published: "https://hub.docker.com/_/registry/tags?name=3.0.0",
}];

/// The controller images Flux v2.9.5's install.yaml names (by tag; the
/// digests are those of Flux Operator's image catalogue for v2.9.5,
/// controlplaneio-fluxcd/flux-operator `config/data/flux-images/v2.9.5`).
pub const FLUX_IMAGES: &[ImagePin] = &[
    ImagePin {
        reference: "ghcr.io/fluxcd/source-controller:v1.9.5",
        digest: "sha256:6f20d232d596a758c923d2861f23511718fc303b8a2e36a1434a7c736b9f4268",
        published: FLUX_RELEASE,
    },
    ImagePin {
        reference: "ghcr.io/fluxcd/kustomize-controller:v1.9.5",
        digest: "sha256:a3a955eb2bc432c2eaa94d2d3714e3beae7fdf17586fd23aadf71ab597ac3339",
        published: FLUX_RELEASE,
    },
    ImagePin {
        reference: "ghcr.io/fluxcd/helm-controller:v1.6.4",
        digest: "sha256:8ff15409e46d354338045f483d58ca9cb35dffa2f87e4addd1f5eba1e6a9175f",
        published: FLUX_RELEASE,
    },
    ImagePin {
        reference: "ghcr.io/fluxcd/notification-controller:v1.9.4",
        digest: "sha256:840f318265ee26f0d2c48a158bf7896b22aa4e998e320a18646309f0e40b15da",
        published: FLUX_RELEASE,
    },
];

/// ESO's image as the chart's release runs it (GHCR's digest for the tag;
/// ESO's release notes name images by tag only).
pub const ESO_IMAGES: &[ImagePin] = &[ImagePin {
    reference: ESO_IMAGE,
    digest: "sha256:44eb290f1c7f5d8f4eec2168cea4a6cfbc72a955c6781eb835e1c40700475dbd",
    published: "https://github.com/external-secrets/external-secrets/releases/tag/v2.9.0",
}];

/// The kind CLI of [`KIND_CLI_VERSION`] per `(os, arch)` as Rust names them,
/// from the release's `.sha256sum` assets.
pub const KIND_CLI: &[((&str, &str), FilePin)] = &[
    (
        ("linux", "x86_64"),
        FilePin {
            url: "https://github.com/kubernetes-sigs/kind/releases/download/v0.33.0/kind-linux-amd64",
            sha256: "aee6151561422756b764a4ae28e7f44cda5af5a9eead3cc9985112b1de8d8e0d",
            published: KIND_RELEASE,
        },
    ),
    (
        ("linux", "aarch64"),
        FilePin {
            url: "https://github.com/kubernetes-sigs/kind/releases/download/v0.33.0/kind-linux-arm64",
            sha256: "20022bee6cfcd5086cb7234d218e3454e6090022f2a8f55d1fa7fcf42c3867a2",
            published: KIND_RELEASE,
        },
    ),
    (
        ("macos", "x86_64"),
        FilePin {
            url: "https://github.com/kubernetes-sigs/kind/releases/download/v0.33.0/kind-darwin-amd64",
            sha256: "5a99f26f57246dc9319dd294803313197a0f34d33c525b3ea8b655db5916ece0",
            published: KIND_RELEASE,
        },
    ),
    (
        ("macos", "aarch64"),
        FilePin {
            url: "https://github.com/kubernetes-sigs/kind/releases/download/v0.33.0/kind-darwin-arm64",
            sha256: "0c8c7dbe5e23594a198b786c4bc13dacc101fa6196b0cb0b23a1ca44e61f4b4f",
            published: KIND_RELEASE,
        },
    ),
];

/// Flux's install manifest; its sha256 is the one the release's
/// cosign-signed `flux_2.9.5_checksums.txt` lists.
pub const FLUX_INSTALL: FilePin = FilePin {
    url: "https://github.com/fluxcd/flux2/releases/download/v2.9.5/install.yaml",
    sha256: "cc3dcd743af16215838b6937e1fce83745bf24c0dcc6c59737c59df15429caaf",
    published: FLUX_RELEASE,
};

/// ESO's chart archive; its sha256 is the `digest` of charts.external-secrets.io's index.
pub const ESO_CHART: FilePin = FilePin {
    url: "https://github.com/external-secrets/external-secrets/releases/download/helm-chart-2.9.0/external-secrets-2.9.0.tgz",
    sha256: "da2d5c126a103b4c1b16a9dc1c168c4332a3687144e88ac070e594f81a0b6578",
    published: "https://charts.external-secrets.io/index.yaml",
};

/// ESO's CRDs at the commit of tag v2.9.0. Upstream publishes no checksum
/// for this file: the sha256 was computed from its published bytes
/// (1,949,635 bytes, 25 CRDs).
pub const ESO_CRDS: FilePin = FilePin {
    url: "https://raw.githubusercontent.com/external-secrets/external-secrets/378bdb622ed9712ef4a58370f6a17af033b7d343/deploy/crds/bundle.yaml",
    sha256: "08b08d88e9522436698d6c90510b530d491081fbf92015faa7a571bb8b50bc5b",
    published: "https://github.com/external-secrets/external-secrets/releases/tag/v2.9.0",
};

/// Every image pin devstack ships.
pub fn image_pins() -> impl Iterator<Item = &'static ImagePin> {
    KIND_NODE_IMAGES
        .iter()
        .chain(K3S_IMAGES)
        .chain(K3S_SYSTEM_IMAGES)
        .chain(LOCALSTACK_IMAGES)
        .chain(REGISTRY_IMAGES)
        .chain(FLUX_IMAGES)
        .chain(ESO_IMAGES)
}

/// Every download pin devstack ships.
pub fn file_pins() -> impl Iterator<Item = &'static FilePin> {
    KIND_CLI
        .iter()
        .map(|(_, pin)| pin)
        .chain([&FLUX_INSTALL, &ESO_CHART, &ESO_CRDS])
}

/// `reference@digest` of a default image, as the version table shows it.
pub fn pinned(reference: &str) -> Option<String> {
    image_pins()
        .find(|p| p.reference == reference)
        .map(|p| format!("{}@{}", p.reference, p.digest))
}

/// Kubernetes minor versions (`1.N`), inclusive; `None` = open-ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeRange {
    /// Oldest supported Kubernetes `(major, minor, patch)`.
    #[serde(serialize_with = "dotted3")]
    pub min: Option<(u64, u64, u64)>,
    /// Newest Kubernetes minor upstream tests (`(1, 36)`), when it names one.
    #[serde(serialize_with = "dotted2")]
    pub tested_up_to: Option<(u64, u64)>,
    /// Oldest Kubernetes minor upstream tests.
    #[serde(serialize_with = "dotted2")]
    pub tested_from: Option<(u64, u64)>,
    /// What upstream says, for messages.
    pub says: &'static str,
}

/// `--json` shows versions as people write them (`"1.33.0"`), not arrays.
fn dotted3<S: serde::Serializer>(v: &Option<(u64, u64, u64)>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some((a, b, c)) => s.serialize_some(&format!("{a}.{b}.{c}")),
        None => s.serialize_none(),
    }
}

fn dotted2<S: serde::Serializer>(v: &Option<(u64, u64)>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some((a, b)) => s.serialize_some(&format!("{a}.{b}")),
        None => s.serialize_none(),
    }
}

/// Support status, as upstream states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Support {
    Supported,
    OutOfSupport,
    EndOfLife,
}

impl Support {
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Supported => "supported",
            Support::OutOfSupport => "out of support",
            Support::EndOfLife => "end of life",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// Stable key for `--json` and bundle checks.
    pub id: &'static str,
    pub name: &'static str,
    /// What devstack uses unless the profile says otherwise.
    pub default: &'static str,
    /// What this release of devstack is tested with.
    pub tested_with: &'static str,
    /// Newest upstream release as of 2026-11-23, when the matrix was last
    /// checked (ESO 2.14.0:
    /// <https://github.com/external-secrets/external-secrets/releases/tag/v2.14.0>).
    pub newest_upstream: &'static str,
    pub support: Support,
    /// Why, in one line.
    pub support_note: &'static str,
    /// The Kubernetes versions this component supports, when it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubeRange>,
}

/// Flux 2.9's `flux check` refuses Kubernetes below 1.33.
pub const FLUX_KUBERNETES: KubeRange = KubeRange {
    min: Some((1, 33, 0)),
    tested_from: None,
    tested_up_to: None,
    says: "Flux 2.9 requires Kubernetes >= 1.33",
};
/// ESO's support table lists 2.9 as tested on Kubernetes 1.36 only.
pub const ESO_KUBERNETES: KubeRange = KubeRange {
    min: None,
    tested_from: Some((1, 36)),
    tested_up_to: Some((1, 36)),
    says: "ESO 2.9 is tested upstream on Kubernetes 1.36",
};

/// The matrix, one row per component.
pub const MATRIX: &[Component] = &[
    Component {
        id: "kind-node",
        name: "Kind node (Kubernetes)",
        default: KIND_NODE_IMAGE,
        tested_with: "v1.36.4",
        newest_upstream: "kindest/node:v1.37.0 (Kubernetes 1.37.x)",
        support: Support::Supported,
        support_note: "Kubernetes 1.36 is maintained upstream; the default provider",
        kubernetes: None,
    },
    Component {
        id: "kind-cli",
        name: "kind CLI",
        default: KIND_CLI_VERSION,
        tested_with: KIND_CLI_VERSION,
        newest_upstream: "v0.33.0",
        support: Support::Supported,
        support_note: "v0.30.0 or newer is accepted",
        kubernetes: None,
    },
    Component {
        id: "k3s",
        name: "K3s",
        default: K3S_IMAGE,
        tested_with: "v1.32.0-k3s1",
        newest_upstream: "v1.37.x (1.36, 1.35, 1.34 maintained)",
        support: Support::OutOfSupport,
        support_note: "Kubernetes 1.32 is out of upstream support and below Flux 2.9's minimum 1.33; use the Kind provider for a supported Kubernetes",
        kubernetes: None,
    },
    Component {
        id: "localstack",
        name: "LocalStack",
        default: LOCALSTACK_IMAGE,
        tested_with: "4.14.0",
        newest_upstream: "2026.03.0+ (calendar versions, auth token required)",
        support: Support::Supported,
        support_note: "4.14.0 is the last release that runs without an auth token",
        kubernetes: None,
    },
    Component {
        id: "registry",
        name: "Registry (`registry.enabled`)",
        default: REGISTRY_IMAGE,
        tested_with: "3.0.0",
        newest_upstream: "3.0.0",
        support: Support::Supported,
        support_note: "distribution v3.0.0, the current release",
        kubernetes: None,
    },
    Component {
        id: "flux",
        name: "Flux",
        default: FLUX_VERSION,
        tested_with: FLUX_VERSION,
        newest_upstream: "v2.10.0 (2.9 line: v2.9.6)",
        support: Support::Supported,
        support_note: "2.10 needs Kubernetes >= 1.35.2; Flux 2.9 needs >= 1.33",
        kubernetes: Some(FLUX_KUBERNETES),
    },
    Component {
        id: "eso-chart",
        name: "External Secrets Operator chart",
        default: ESO_CHART_VERSION,
        tested_with: ESO_CHART_VERSION,
        newest_upstream: "2.14.0",
        support: Support::OutOfSupport,
        support_note: "ESO supports only its current minor (2.14); devstack is tested with 2.9.0, which upstream tests on Kubernetes 1.36; 0.19.x reached end of life on 2025-09-22",
        kubernetes: Some(ESO_KUBERNETES),
    },
    Component {
        id: "eso-image",
        name: "External Secrets Operator image",
        default: ESO_IMAGE,
        tested_with: "v2.9.0",
        newest_upstream: "v2.14.0",
        support: Support::OutOfSupport,
        support_note: "the chart's default image",
        kubernetes: None,
    },
];

pub fn component(id: &str) -> Option<&'static Component> {
    MATRIX.iter().find(|c| c.id == id)
}

/// README's version table, as devstack renders it: the test in
/// `tests/unit/cli.rs` requires README to contain exactly these lines.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| component | default | tested with | newest upstream | support status |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for c in MATRIX {
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {} | {}: {} |\n",
            c.name,
            short_pinned(c.default),
            c.tested_with,
            c.newest_upstream,
            c.support.as_str(),
            c.support_note
        ));
    }
    out
}

/// `kindest/node:v1.36.4@sha256:099e0493…`: the default with the start of
/// its digest (the whole one is in `devstack version --json`).
pub fn short_pinned(reference: &str) -> String {
    match image_pins().find(|p| p.reference == reference) {
        Some(pin) => format!("{reference}@{}…", &pin.digest[..15]),
        None => reference.to_string(),
    }
}

/// `v1.32.0+k3s1`, `v1.36.5`, `1.33` -> `(1, 32, 0)` ...
pub fn parse_kube_version(text: &str) -> Option<(u64, u64, u64)> {
    let text = text.trim().trim_start_matches('v');
    let core = text.split(['+', '-']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().unwrap_or(Some(0))?;
    Some((major, minor, patch))
}

/// The Kubernetes version a node image runs, from its tag
/// (`rancher/k3s:v1.32.0-k3s1`, `kindest/node:v1.36.5`); `None` when the
/// tag does not say (a digest, `latest`, a custom name).
pub fn kubernetes_of_image(image: &str) -> Option<(u64, u64, u64)> {
    let image = image.split('@').next().unwrap_or(image);
    let (_, tag) = image.rsplit_once(':')?;
    if tag.contains('/') || !tag.starts_with('v') {
        return None;
    }
    parse_kube_version(tag)
}

/// Why the stack's components may not suit Kubernetes `version`: one
/// reason per range it falls outside, empty when it is inside all of them.
/// Callers name the version; the stack still runs (devstack's chain does
/// not need `flux check`), so these are warnings.
pub fn kubernetes_warnings(version: (u64, u64, u64)) -> Vec<String> {
    let (major, minor, _) = version;
    let mut out = Vec::new();
    for range in [FLUX_KUBERNETES, ESO_KUBERNETES] {
        if let Some(min) = range.min
            && version < min
        {
            out.push(format!("below the minimum: {}", range.says));
        }
        let outside_tested = range.tested_from.is_some_and(|from| (major, minor) < from)
            || range.tested_up_to.is_some_and(|to| (major, minor) > to);
        if outside_tested {
            out.push(format!("outside upstream's tests: {}", range.says));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_server_and_image_tags() {
        assert_eq!(parse_kube_version("v1.32.0+k3s1"), Some((1, 32, 0)));
        assert_eq!(parse_kube_version("v1.36.5"), Some((1, 36, 5)));
        assert_eq!(parse_kube_version("1.33"), Some((1, 33, 0)));
        assert_eq!(parse_kube_version("latest"), None);
        assert_eq!(kubernetes_of_image(K3S_IMAGE), Some((1, 32, 0)));
        assert_eq!(kubernetes_of_image(KIND_NODE_IMAGE), Some((1, 36, 4)));
        assert_eq!(
            kubernetes_of_image(&pinned(KIND_NODE_IMAGE).unwrap()),
            Some((1, 36, 4)),
            "digest references keep their tag's version"
        );
        assert_eq!(kubernetes_of_image("localhost:5000/node"), None);
        assert_eq!(kubernetes_of_image("my/node:latest"), None);
    }

    #[test]
    fn k3s_1_32_is_below_flux_and_outside_eso_testing() {
        let warnings = kubernetes_warnings((1, 32, 0));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("Flux 2.9 requires Kubernetes >= 1.33"));
        assert!(warnings[1].contains("ESO 2.9 is tested upstream on Kubernetes 1.36"));
        assert!(kubernetes_warnings((1, 36, 5)).is_empty());
        let newer = kubernetes_warnings((1, 37, 0));
        assert_eq!(newer.len(), 1, "{newer:?}");
        assert_eq!(kubernetes_warnings((1, 34, 2)).len(), 1);
    }

    #[test]
    fn the_matrix_carries_the_defaults_devstack_uses() {
        for (id, default) in [
            ("k3s", K3S_IMAGE),
            ("kind-node", KIND_NODE_IMAGE),
            ("localstack", LOCALSTACK_IMAGE),
            ("registry", REGISTRY_IMAGE),
            ("flux", FLUX_VERSION),
            ("eso-chart", ESO_CHART_VERSION),
            ("eso-image", ESO_IMAGE),
        ] {
            assert_eq!(component(id).map(|c| c.default), Some(default), "{id}");
        }
        let ids: std::collections::BTreeSet<_> = MATRIX.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), MATRIX.len(), "ids are unique");
        // The ESO image's tag is the chart's appVersion.
        assert!(ESO_IMAGE.ends_with(&format!(":v{ESO_CHART_VERSION}")));
    }

    #[test]
    fn the_markdown_table_has_a_row_per_component() {
        let table = markdown_table();
        assert_eq!(table.lines().count(), MATRIX.len() + 2);
        assert!(table.contains("| K3s | `rancher/k3s:v1.32.0-k3s1@sha256:b7a31cc8…` |"));
    }
}
