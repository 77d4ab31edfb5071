//! Cluster tier: `eso.install` on a Kind cluster made outside devstack that
//! already runs an External Secrets Operator, installed as a platform does
//! it (the kit's Helm and ESO chart, with its webhook and cert-controller,
//! in namespace `external-secrets`). Before it is there, `eso.install: never`
//! is refused; pointed elsewhere, it is refused before anything is created;
//! `eso.install: always` refuses it too; pointed at the stack's LocalStack,
//! it serves the stack (`up` -> `up` again -> `verify --push-secret` -> `status` ->
//! `diagnose` -> `logs eso` -> `down`, the later commands knowing it from the
//! stack's record) and stays exactly as it was.

use std::path::{Path, PathBuf};

use crate::common::kind::{KindGuard, create_kind_cluster, kind_cluster, kind_kit, kind_nodes};
use crate::common::*;
use crate::existing_kind::{assert_same_inventory, existing_profile, inventory};

const ESO_NAMESPACE: &str = "external-secrets";

/// The kit's Helm CLI (kit/components/eso.sh builds it beside the bundle).
fn kit_helm(test: &str) -> Option<PathBuf> {
    let helm = std::env::var_os("KIT_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| bundle_dir().parent().unwrap().join("bin/helm"));
    if helm.is_file() {
        return Some(helm);
    }
    let why = format!(
        "no helm at {} (kit/components/eso.sh builds it)",
        helm.display()
    );
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "{test}: {why}"
    );
    eprintln!("SKIPPED: {test}: {why}");
    None
}

/// The bundle's ESO chart and image for the version devstack defaults to.
fn eso_chart_and_image() -> (PathBuf, PathBuf) {
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle_dir().join("index.json")).unwrap())
            .unwrap();
    let version = devstack::versions::ESO_CHART_VERSION;
    let file = |kind: &str, role: &str| {
        index["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| {
                (a["kind"] == kind || a["role"] == role)
                    && a["version"]
                        .as_str()
                        .is_some_and(|v| v.trim_start_matches('v') == version)
            })
            .and_then(|a| a["file"].as_str())
            .map(|f| bundle_dir().join(f))
            .unwrap_or_else(|| panic!("the bundle has no {kind}/{role} {version}"))
    };
    (file("eso-chart", "-"), file("-", "eso"))
}

/// `helm upgrade --install` of ESO with its controller's Secrets Manager
/// endpoint, waiting for its Deployments.
fn helm_eso(helm: &Path, admin: &Path, chart: &Path, endpoint: &str) {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(helm)
        .env("KUBECONFIG", admin)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .args(["upgrade", "--install", "external-secrets"])
        .arg(chart)
        .args([
            "-n",
            ESO_NAMESPACE,
            "--create-namespace",
            "--set",
            "installCRDs=true",
        ])
        .args(["--set", "extraEnv[0].name=AWS_SECRETSMANAGER_ENDPOINT"])
        .args(["--set", &format!("extraEnv[0].value={endpoint}")])
        .args(["--wait", "--timeout", "5m"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm upgrade --install ESO:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ESO image into every node, as a platform's registry would serve it.
fn import_image(stack: &TestStack, image: &Path) {
    for node in kind_nodes(stack) {
        let out = std::process::Command::new("docker")
            .args([
                "exec",
                "-i",
                &node,
                "ctr",
                "--namespace",
                "k8s.io",
                "images",
                "import",
                "-",
            ])
            .stdin(std::fs::File::open(image).unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "import {} into {node}: {}",
            image.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The uid and generation of the platform ESO's Deployments: what `up` and
/// `down` must leave as they were.
fn eso_deployments(rt: &tokio::runtime::Runtime, client: &kube::Client) -> Vec<String> {
    let api: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), ESO_NAMESPACE);
    let mut out: Vec<String> = rt
        .block_on(api.list(&Default::default()))
        .unwrap()
        .items
        .into_iter()
        .map(|d| {
            format!(
                "{} {} generation {}",
                d.metadata.name.unwrap(),
                d.metadata.uid.unwrap(),
                d.metadata.generation.unwrap_or_default()
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn an_eso_the_cluster_runs_serves_the_stack_and_stays_as_it_was() {
    const TEST: &str = "an_eso_the_cluster_runs_serves_the_stack_and_stays_as_it_was";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    let Some(helm) = kit_helm(TEST) else {
        return;
    };
    let stack = TestStack::new("clueso");
    let _guard = KindGuard::new(kind.clone(), &stack);
    let name = kind_cluster(&stack);
    let admin = stack.dir.path().join("admin.kubeconfig");
    create_kind_cluster(&kind, &name, &admin);
    let context = format!("kind-{name}");
    let as_admin = [("KUBECONFIG", admin.to_str().unwrap())];
    let profile = existing_profile(&stack, &context);
    let with_install = |install: &str| {
        let path = stack.dir.path().join(format!("{install}.yaml"));
        let text = std::fs::read_to_string(&profile).unwrap();
        std::fs::write(&path, format!("{text}eso:\n  install: {install}\n")).unwrap();
        path
    };

    // No ESO yet: `never` has none to use.
    let refused = stack.run_env(&with_install("never"), &["up"], &as_admin);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(
        refused
            .stderr
            .contains("`eso.install: never`, and the cluster of context")
            && refused.stderr.contains("runs no External Secrets Operator"),
        "{}",
        refused.stderr
    );

    let (chart, image) = eso_chart_and_image();
    import_image(&stack, &image);
    helm_eso(
        &helm,
        &admin,
        &chart,
        "https://secretsmanager.us-east-1.amazonaws.com",
    );
    let rt = runtime();
    let client = rt
        .block_on(devstack::k8s::client_from_kubeconfig(
            &std::fs::read_to_string(&admin).unwrap(),
        ))
        .unwrap();
    let before = inventory(&rt, &client);
    let deployments = eso_deployments(&rt, &client);
    assert_eq!(deployments.len(), 3, "{deployments:?}");

    // Pointed at AWS: refused, naming the controller and the fix.
    let refused = stack.run_env(&profile, &["up"], &as_admin);
    assert_eq!(refused.code, 2, "{}", refused.all());
    for part in [
        "runs an External Secrets Operator that devstack did not install",
        "managed by Helm",
        "Deployment external-secrets/external-secrets has AWS_SECRETSMANAGER_ENDPOINT=https://secretsmanager.us-east-1.amazonaws.com, not the stack's LocalStack http://localstack.localstack.svc.cluster.local:4566",
        "hint: set AWS_SECRETSMANAGER_ENDPOINT=http://localstack.localstack.svc.cluster.local:4566 on its controller",
        "nothing was created",
    ] {
        assert!(refused.stderr.contains(part), "{part}:\n{}", refused.stderr);
    }
    assert_same_inventory(&before, &inventory(&rt, &client), "a refused ESO");

    let endpoint =
        devstack::k8s::localstack_in_cluster_url(&devstack::profile::StackNames::alone());
    helm_eso(&helm, &admin, &chart, &endpoint);
    let before = inventory(&rt, &client);
    let deployments = eso_deployments(&rt, &client);

    let refused = stack.run_env(&with_install("always"), &["up"], &as_admin);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(
        refused
            .stderr
            .contains("`eso.install: always` would take its CRDs over"),
        "{}",
        refused.stderr
    );
    assert_same_inventory(&before, &inventory(&rt, &client), "eso.install: always");

    // `never` uses it as `auto` does.
    let up = stack.run_env(&with_install("never"), &["up", "--json"], &as_admin);
    let report = up.ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(
        report["cluster"]["clusterEso"],
        serde_json::json!({"namespace": ESO_NAMESPACE, "deployment": "external-secrets"}),
        "{report}"
    );
    assert_eq!(
        chain_level_names(&report["gitops"]),
        ["devstack", "localstack", "external-secrets-crs"],
        "{report}"
    );
    // Again, with the default profile: the record says which ESO serves;
    // the chain only re-applies, and nothing needed repair.
    let again = stack.run_env(&profile, &["up", "--json"], &as_admin);
    let again = again.ok().json();
    assert_eq!(again["verify"]["passed"], true, "{again}");
    assert_eq!(again["repaired"], serde_json::json!([]), "{again}");
    assert_eq!(
        again["cluster"]["clusterEso"],
        report["cluster"]["clusterEso"]
    );
    let verify = stack.run_env(&profile, &["verify", "--push-secret", "--json"], &as_admin);
    assert_push_verified(&verify.ok().json());
    let status = stack.run_env(&profile, &["status", "--json"], &as_admin);
    let status = status.ok().json();
    let rows = status["rows"].as_array().unwrap();
    let eso = rows
        .iter()
        .find(|r| r["component"] == "eso")
        .unwrap_or_else(|| panic!("no eso row: {status}"));
    assert_eq!(eso["healthy"], true, "{eso}");
    assert!(
        !rows.iter().any(|r| r["component"] == "helmrelease"),
        "{status}"
    );
    assert_eq!(status["healthy"], true, "{status}");
    // Nothing to find: the findings about devstack's own ESO do not apply.
    let diagnose = stack.run_env(&profile, &["diagnose", "--json"], &as_admin);
    assert_eq!(diagnose.code, 0, "{}", diagnose.all());
    assert_eq!(diagnose.json(), serde_json::json!([]), "{}", diagnose.all());
    // One source, the cluster's controller, so its lines come bare: its
    // own JSON log, with what it did for the stack's round trip.
    let logs = stack.run_env(&profile, &["logs", "eso", "--tail", "50"], &as_admin);
    let lines: Vec<&str> = logs.ok().stdout.lines().filter(|l| !l.is_empty()).collect();
    assert!(!lines.is_empty(), "{}", logs.all());
    assert!(lines.iter().all(|l| l.starts_with('{')), "{}", logs.stdout);
    assert!(logs.stdout.contains("devstack-verify"), "{}", logs.stdout);
    assert_eq!(
        eso_deployments(&rt, &client),
        deployments,
        "up left ESO as it was"
    );

    let down = stack.run_env(&profile, &["down", "--json"], &as_admin);
    down.ok();
    assert_same_inventory(&before, &inventory(&rt, &client), "down");
    assert_eq!(
        eso_deployments(&rt, &client),
        deployments,
        "down left ESO as it was"
    );
    let stores = devstack::gitops::cluster_secret_stores(&client);
    let left = rt.block_on(stores.list(&Default::default())).unwrap().items;
    assert!(left.is_empty(), "the stack's store went with it: {left:?}");
}
