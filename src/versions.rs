//! The version matrix: every component devstack runs, with its default,
//! what is tested here, the newest upstream release and its support
//! status. The single source: defaults, `devstack version`, `doctor`'s
//! Kubernetes checks and README's version table (a test keeps README in
//! step) all read this file. The offline kit (`tests/kit/`) builds the
//! defaults, so online and offline runs use the same image references.

use serde::Serialize;

/// K3s node image. The newest K3s whose Go module the offline kit can build
/// (the module proxy refuses every 1.33+ tag), although 1.32 is out of
/// upstream support and below Flux 2.9's minimum: see [`MATRIX`].
pub const K3S_IMAGE: &str = "rancher/k3s:v1.32.0-k3s1";
/// Kind node image: the one the offline kit builds (tests/kit/kind/versions.sh),
/// Kubernetes 1.36, the version ESO 2.9 is tested on. Its kubelet needs
/// `failCgroupV1: false` on cgroup v1 hosts, which devstack's kind config sets.
pub const KIND_NODE_IMAGE: &str = "kindest/node:v1.36.5";
/// Oldest kind CLI devstack drives: node images of Kubernetes 1.36 are built
/// from kind's base files of v0.30.0 to v0.33.0 (identical in those), and
/// older CLIs are untried with them.
pub const KIND_MIN_VERSION: (u64, u64, u64) = (0, 30, 0);
/// The kind CLI the offline kit carries (`bin/kind`).
pub const KIND_CLI_VERSION: &str = "v0.33.0";
/// The last LocalStack release that runs without an auth token: `latest`
/// and the calendar-versioned tags need `LOCALSTACK_AUTH_TOKEN`.
pub const LOCALSTACK_IMAGE: &str = "localstack/localstack:4.14.0";
/// The newest complete Flux set the module proxy serves (2.10 is refused,
/// and needs Kubernetes >= 1.35.2, which K3s here cannot reach).
pub const FLUX_VERSION: &str = "v2.9.5";
/// ESO's chart; ESO supports only its current minor, and 0.19.x reached
/// end of life on 2025-09-22.
pub const ESO_CHART_VERSION: &str = "2.9.0";
/// The image chart 2.9.0 runs by default (controller, webhook and
/// cert-controller are one binary); devstack does not override it.
pub const ESO_IMAGE: &str = "ghcr.io/external-secrets/external-secrets:v2.9.0";
/// ESO's Helm repository, used when no offline bundle provides the chart.
pub const ESO_CHART_REPOSITORY: &str = "https://charts.external-secrets.io";
/// Where the online CRDs level reads ESO's CRDs: the release's tag of this
/// repository, folder `deploy/crds` (`bundle.yaml`).
pub const ESO_GIT_REPOSITORY: &str = "https://github.com/external-secrets/external-secrets";

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
    /// What this repository's suites run against (the offline kit builds it).
    pub tested_here: &'static str,
    /// Newest upstream release known to devstack (late 2026).
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
        tested_here: "v1.36.5",
        newest_upstream: "kindest/node:v1.37.0 (Kubernetes 1.37.x)",
        support: Support::Supported,
        support_note: "Kubernetes 1.36 is maintained upstream; the default provider",
        kubernetes: None,
    },
    Component {
        id: "kind-cli",
        name: "kind CLI",
        default: KIND_CLI_VERSION,
        tested_here: KIND_CLI_VERSION,
        newest_upstream: "v0.33.0",
        support: Support::Supported,
        support_note: "v0.30.0 or newer is accepted",
        kubernetes: None,
    },
    Component {
        id: "k3s",
        name: "K3s",
        default: K3S_IMAGE,
        tested_here: "v1.32.0-k3s1",
        newest_upstream: "v1.37.x (1.36, 1.35, 1.34 maintained)",
        support: Support::OutOfSupport,
        support_note: "Kubernetes 1.32 is out of upstream support and below Flux 2.9's minimum 1.33; the newest K3s buildable here",
        kubernetes: None,
    },
    Component {
        id: "localstack",
        name: "LocalStack",
        default: LOCALSTACK_IMAGE,
        tested_here: "4.14.0",
        newest_upstream: "2026.03.0+ (calendar versions, auth token required)",
        support: Support::Supported,
        support_note: "4.14.0 is the last release that runs without an auth token",
        kubernetes: None,
    },
    Component {
        id: "flux",
        name: "Flux",
        default: FLUX_VERSION,
        tested_here: FLUX_VERSION,
        newest_upstream: "v2.10.0 (2.9 line: v2.9.6)",
        support: Support::Supported,
        support_note: "2.10 needs Kubernetes >= 1.35.2; Flux 2.9 needs >= 1.33",
        kubernetes: Some(FLUX_KUBERNETES),
    },
    Component {
        id: "eso-chart",
        name: "External Secrets Operator chart",
        default: ESO_CHART_VERSION,
        tested_here: ESO_CHART_VERSION,
        newest_upstream: "2.14.0 (reported)",
        support: Support::OutOfSupport,
        support_note: "ESO supports only its current minor (2.14 reported); 2.9.0 is the newest release buildable here, tested upstream on Kubernetes 1.36; 0.19.x, the previous default, reached end of life on 2025-09-22",
        kubernetes: Some(ESO_KUBERNETES),
    },
    Component {
        id: "eso-image",
        name: "External Secrets Operator image",
        default: ESO_IMAGE,
        tested_here: "v2.9.0",
        newest_upstream: "v2.14.0 (reported)",
        support: Support::OutOfSupport,
        support_note: "the chart's default image; built from the 2.9.0 source offline",
        kubernetes: None,
    },
];

pub fn component(id: &str) -> Option<&'static Component> {
    MATRIX.iter().find(|c| c.id == id)
}

/// README's version table, as devstack renders it: the test in
/// `tests/cli.rs` requires README to contain exactly these lines.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| component | default | tested here | newest upstream | support status |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for c in MATRIX {
        out.push_str(&format!(
            "| {} | `{}` | `{}` | {} | {}: {} |\n",
            c.name,
            c.default,
            c.tested_here,
            c.newest_upstream,
            c.support.as_str(),
            c.support_note
        ));
    }
    out
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
        assert_eq!(kubernetes_of_image(KIND_NODE_IMAGE), Some((1, 36, 5)));
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
        assert!(table.contains("| K3s | `rancher/k3s:v1.32.0-k3s1` |"));
    }
}
