//! Cluster tier: Flux and the External Secrets chain in a real K3s node from
//! the offline kit, delivered from the stack's LocalStack S3 bucket, with
//! ESO's CRDs and chart from the offline bundle.

use crate::common::*;

fn gitops_profile(stack: &TestStack, gitops: &str) -> std::path::PathBuf {
    stack.profile(&format!(
        "cluster:\n  provider: k3s\n  kubeconfig: {{merge: false}}\nimages:\n  bundle: {}\ngitops:\n{gitops}\n",
        bundle_dir().display()
    ))
}

/// The chain from a fresh cluster: Ready with zero failed reconciliations;
/// a second sync changes nothing; an edited manifest is applied; a broken
/// one is a clear error naming the object.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn chain_installs_race_free_and_sync_applies_edits() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("chain");
    let manifests = stack.dir.path().join("gitops");
    copy_dir(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/external-secrets"),
        &manifests,
    );
    let profile = gitops_profile(
        &stack,
        &format!(
            "  source: local\n  path: {}\n  layout: chain",
            manifests.display()
        ),
    );
    stack.run(&profile, &["localstack", "up"]).ok();
    stack.run(&profile, &["cluster", "up"]).ok();

    let first = stack.run(&profile, &["sync", "--json"]);
    let report = first.ok().json();
    assert_eq!(report["offlineEso"], true, "{report}");
    assert_eq!(report["flux"]["source"], "bundle", "{report}");
    assert_eq!(
        report["chain"]["failures"].as_array().unwrap().len(),
        0,
        "the chain must install with zero failed reconciliations: {report}"
    );
    let levels: Vec<&str> = report["chain"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        levels,
        [
            "devstack",
            "external-secrets-crds",
            "external-secrets-operator",
            "external-secrets-crs"
        ]
    );
    let ready_after: Vec<u64> = report["chain"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["readyAfterMs"].as_u64().unwrap())
        .collect();
    assert!(
        ready_after.windows(2).all(|w| w[0] <= w[1]),
        "levels turn Ready in chain order: {ready_after:?}"
    );
    assert!(
        first.stderr.contains("External Secrets chain"),
        "{}",
        first.stderr
    );

    let rt = runtime();
    let client = kube_client(&rt, &stack);
    let store_object = |rt: &tokio::runtime::Runtime| {
        get_json(
            rt,
            &client,
            "external-secrets.io/v1",
            "ClusterSecretStore",
            None,
            "localstack",
        )
        .expect("the ClusterSecretStore exists")
    };
    let store = store_object(&rt);
    let ready = devstack::gitops::chain::ready_condition(&store);
    assert!(ready.is_some_and(|c| c.is_true()), "{store}");
    // The chain's wait ends the operator level's health check early
    // through this gate; without it a reconcile request would not cancel
    // the running check and the level would wait for Flux's next 5 s poll.
    let controller = get_json(
        &rt,
        &client,
        "apps/v1",
        "Deployment",
        Some("flux-system"),
        "kustomize-controller",
    )
    .expect("kustomize-controller is installed");
    let args = &controller["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array().is_some_and(|args| args
            .iter()
            .any(|a| a == "--feature-gates=CancelHealthCheckOnNewRevision=true")),
        "kustomize-controller runs with the health-check gate: {args}"
    );
    // Flux's downloads need no cluster DNS: artifacts are advertised at the
    // source-controller Service's cluster IP, and the Bucket reaches
    // LocalStack at its Service's.
    let cluster_ip = |namespace: &str, name: &str| {
        get_json(&rt, &client, "v1", "Service", Some(namespace), name)
            .unwrap_or_else(|| panic!("Service {namespace}/{name}"))["spec"]["clusterIP"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let source_ip = cluster_ip("flux-system", "source-controller");
    let source = get_json(
        &rt,
        &client,
        "apps/v1",
        "Deployment",
        Some("flux-system"),
        "source-controller",
    )
    .unwrap();
    let args = &source["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array().is_some_and(|args| args
            .iter()
            .any(|a| *a == format!("--storage-adv-addr={source_ip}"))),
        "the source-controller advertises {source_ip}: {args}"
    );
    let bucket = get_json(
        &rt,
        &client,
        "source.toolkit.fluxcd.io/v1",
        "Bucket",
        Some("flux-system"),
        "devstack",
    )
    .unwrap();
    let url = bucket["status"]["artifact"]["url"]
        .as_str()
        .unwrap_or_default();
    assert!(
        url.starts_with(&format!("http://{source_ip}/")),
        "the Bucket's artifact is served at the cluster IP: {url}"
    );
    assert_eq!(
        bucket["spec"]["endpoint"],
        format!("{}:4566", cluster_ip("localstack", "localstack"))
    );
    let facts = get_json(
        &rt,
        &client,
        "v1",
        "ConfigMap",
        Some("flux-system"),
        "devstack-stack-facts",
    )
    .unwrap();
    assert_eq!(
        facts["data"]["LOCALSTACK_ENDPOINT"],
        "http://localstack.localstack.svc.cluster.local:4566"
    );
    let release = get_json(
        &rt,
        &client,
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        Some("external-secrets"),
        "external-secrets",
    )
    .unwrap();
    let env = serde_json::to_string(&release["spec"]["values"]["extraEnv"]).unwrap();
    assert!(
        env.contains("http://localstack.localstack.svc.cluster.local:4566"),
        "the endpoint comes from the stack facts: {env}"
    );
    let bucket_revision = |rt: &tokio::runtime::Runtime| {
        get_json(
            rt,
            &client,
            "source.toolkit.fluxcd.io/v1",
            "Bucket",
            Some("flux-system"),
            "devstack",
        )
        .unwrap()["status"]["artifact"]["revision"]
            .clone()
    };
    let history = |rt: &tokio::runtime::Runtime| {
        get_json(
            rt,
            &client,
            "helm.toolkit.fluxcd.io/v2",
            "HelmRelease",
            Some("external-secrets"),
            "external-secrets",
        )
        .unwrap()["status"]["history"]
            .as_array()
            .map(Vec::len)
    };
    let (revision, releases) = (bucket_revision(&rt), history(&rt));

    // Re-installing over the existing install changes nothing.
    let again = stack.run(&profile, &["sync", "--json"]).ok().json();
    assert_eq!(
        again["chain"]["failures"].as_array().unwrap().len(),
        0,
        "{again}"
    );
    assert_eq!(
        bucket_revision(&rt),
        revision,
        "same manifests, same revision"
    );
    assert_eq!(history(&rt), releases, "no Helm upgrade on a re-install");

    // An edited manifest is applied by sync.
    let store_file = manifests.join("crs/cluster-secret-store.yaml");
    let original = std::fs::read_to_string(&store_file).unwrap();
    let edited = original.replacen(
        "metadata:\n  name: localstack\n",
        "metadata:\n  name: localstack\n  labels:\n    edited-by: devstack-test\n",
        1,
    );
    assert_ne!(edited, original);
    std::fs::write(&store_file, &edited).unwrap();
    stack.run(&profile, &["sync"]).ok();
    let store = store_object(&rt);
    assert_eq!(
        store["metadata"]["labels"]["edited-by"], "devstack-test",
        "{store}"
    );
    assert_ne!(bucket_revision(&rt), revision);

    // A manifest the API rejects: the error names the level and the object.
    std::fs::write(
        &store_file,
        edited.replace("service: SecretsManager", "service: NoSuchService"),
    )
    .unwrap();
    let broken = stack.run(&profile, &["sync"]);
    assert_eq!(broken.code, 2, "{}", broken.stderr);
    assert!(
        broken
            .stderr
            .contains("Kustomization flux-system/external-secrets-crs failed"),
        "{}",
        broken.stderr
    );
    assert!(
        broken.stderr.contains("ClusterSecretStore/localstack"),
        "{}",
        broken.stderr
    );
    assert!(broken.stderr.contains("hint:"), "{}", broken.stderr);

    // Broken YAML never leaves the machine: file, line and column.
    std::fs::write(&store_file, "apiVersion: [\n").unwrap();
    let invalid = stack.run(&profile, &["sync"]);
    assert_eq!(invalid.code, 2, "{}", invalid.stderr);
    assert!(
        invalid.stderr.contains("crs/cluster-secret-store.yaml:"),
        "{}",
        invalid.stderr
    );

    std::fs::write(&store_file, &original).unwrap();
    let healed = stack.run(&profile, &["sync", "--json"]).ok().json();
    assert_eq!(healed["chain"]["levels"].as_array().unwrap().len(), 4);

    stack.run(&profile, &["down"]).ok();
    assert!(stack.containers().is_empty());
}

/// The naive layout (every level independent, as hand-written repositories
/// often are) records at least one failed reconciliation on a fresh cluster.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn naive_layout_shows_the_race() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("naive");
    // The naive layout retries only at the interval: keep it short here.
    let profile = gitops_profile(&stack, "  source: local\n  layout: naive\n  interval: 1m");
    stack.run(&profile, &["localstack", "up"]).ok();
    stack.run(&profile, &["cluster", "up"]).ok();
    let run = stack.run(&profile, &["sync", "--json"]);
    let report = run.ok().json();
    let failures = report["chain"]["failures"].as_array().unwrap();
    assert!(
        !failures.is_empty(),
        "the naive layout should record a failed reconciliation: {report}"
    );
    assert!(
        failures.iter().any(|f| f["object"]
            .as_str()
            .unwrap()
            .contains("external-secrets-crs")),
        "the custom resources level is the one that races: {report}"
    );
    stack.run(&profile, &["down"]).ok();
}
