//! Cluster tier: SSM Parameter Store and IRSA-style authentication, one
//! body on K3s and on Kind. A profile with secrets and parameters in
//! `eso.auth: serviceAccount` mode comes up to a verified round trip of
//! both backends; no Secret and no pod of the cluster holds a static AWS
//! key; the user's store with no `auth` block at all (only `service` and
//! `region`, as EKS users write it) becomes Valid and syncs, unchanged; a
//! parameter deleted from LocalStack is found by `diagnose` and seeded
//! again; a missing role is named with its fix.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};

use crate::common::*;
use crate::providers::Provider;

const DB_URL: &str = "postgres://db.internal:5432/app";

/// Where LocalStack runs: a container beside the cluster, or a Deployment
/// in it (what a cluster devstack did not create uses).
#[derive(Clone, Copy, PartialEq, Eq)]
enum LocalStack {
    Container,
    InCluster,
}

fn profile(provider: &Provider, stack: &TestStack, localstack: LocalStack) -> std::path::PathBuf {
    let mode = match localstack {
        LocalStack::Container => "container",
        LocalStack::InCluster => "in-cluster",
    };
    let path = stack.dir.path().join("profile.yaml");
    let text = format!(
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: {name}\nlocalstack:\n  port: {port}\n  mode: {mode}\ntimeouts:\n  localstack: 120s\n  seed: 60s\ncluster:\n  provider: {provider}\n  kubeconfig: {{merge: false}}\nimages:\n  bundle: {bundle}\neso:\n  auth: serviceAccount\nsecrets:\n  - name: app/token\n    generate: {{length: 24}}\n    sync: {{namespace: default, secretName: app-token}}\nparameters:\n  - name: /dev/app/db-url\n    type: SecureString\n    value: {DB_URL}\n    sync: {{namespace: default}}\n  - name: /dev/app/hosts\n    type: StringList\n    value: [a.internal, b.internal]\n    sync: {{namespace: default, secretName: app-hosts}}\n",
        name = stack.name,
        port = stack.port,
        provider = provider.name(),
        bundle = bundle_dir().display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Key names that hold a static AWS key, in a Secret's data or a pod's env.
fn static_key_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase().replace(['-', '_'], "");
    [
        "accesskeyid",
        "secretaccesskey",
        "accesskey",
        "secretkey",
        "awsaccesskeyid",
    ]
    .iter()
    .any(|k| n == *k || n.ends_with(k))
}

/// Every Secret and every pod's environment in the cluster, checked for a
/// static AWS key; returns how many of each were looked at.
fn assert_no_static_key(rt: &tokio::runtime::Runtime, client: &kube::Client) -> (usize, usize) {
    rt.block_on(async {
        let secrets = Api::<Secret>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert!(!secrets.is_empty(), "the cluster lists no Secret at all");
        for secret in &secrets {
            let name = format!(
                "{}/{}",
                secret.metadata.namespace.as_deref().unwrap_or_default(),
                secret.metadata.name.as_deref().unwrap_or_default()
            );
            for key in secret.data.iter().flat_map(|d| d.keys()) {
                assert!(!static_key_name(key), "Secret {name} holds `{key}`");
            }
            for key in secret.string_data.iter().flat_map(|d| d.keys()) {
                assert!(!static_key_name(key), "Secret {name} holds `{key}`");
            }
        }
        let pods = Api::<Pod>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert!(!pods.is_empty(), "the cluster lists no pod at all");
        for pod in &pods {
            let spec = pod.spec.as_ref().unwrap();
            for container in spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
            {
                for env in container.env.iter().flatten() {
                    assert!(
                        !static_key_name(&env.name),
                        "pod {} sets {}",
                        pod.metadata.name.as_deref().unwrap_or_default(),
                        env.name
                    );
                }
            }
        }
        (secrets.len(), pods.len())
    })
}

/// Waits until the Secret `name` in `default` holds `key` = `expected`.
fn wait_secret(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    name: &str,
    key: &str,
    expected: &str,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let until = Instant::now() + Duration::from_secs(120);
    let mut last = String::new();
    while Instant::now() < until {
        match rt.block_on(secrets.get_opt(name)).unwrap() {
            Some(s) => {
                let value = s
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|v| v.0.clone());
                if value.as_deref() == Some(expected.as_bytes()) {
                    return;
                }
                last = format!("{key} is {:?}", value.map(|v| v.len()));
            }
            None => last = "absent".into(),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("Secret default/{name} never held its value: {last}");
}

/// The finding of `detector` in `diagnose --json`, which exits 4.
#[track_caller]
fn cluster_secret_store(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    name: &str,
) -> Option<serde_json::Value> {
    get_json(
        rt,
        client,
        "external-secrets.io/v1",
        "ClusterSecretStore",
        None,
        name,
    )
}

fn diagnosed(stack: &TestStack, profile: &std::path::Path, detector: &str) -> serde_json::Value {
    let run = stack.run(profile, &["diagnose", "--json"]);
    assert_eq!(run.code, 4, "{}", run.all());
    run.json()
        .as_array()
        .expect("a list of findings")
        .iter()
        .find(|f| f["detector"] == detector)
        .cloned()
        .unwrap_or_else(|| panic!("no `{detector}` finding:\n{}", run.all()))
}

fn parameters_and_irsa(provider: Provider, localstack: LocalStack) {
    let stack = TestStack::new(&format!("ssm-{}", provider.name()));
    let _kind = provider.guard(&stack);
    let profile = profile(&provider, &stack, localstack);

    let started = Instant::now();
    let up = stack.run(&profile, &["up", "--json"]);
    let report = up.ok().json();
    eprintln!(
        "{}: cold up with eso.auth serviceAccount, secrets and parameters: {:.1}s",
        provider.name(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let checks = report["verify"]["checks"].as_array().unwrap();
    for name in [
        "sync",
        "rotate",
        "recreate",
        "parameterStore",
        "parameterSync",
        "parameterRotate",
        "parameterRecreate",
    ] {
        assert!(
            checks
                .iter()
                .any(|c| c["name"] == name && c["passed"] == true),
            "check {name} passed: {report}"
        );
    }
    let profile_checks: Vec<&str> = checks
        .iter()
        .filter(|c| c["name"] == "profileExternalSecret" && c["passed"] == true)
        .filter_map(|c| c["object"].as_str())
        .collect();
    assert_eq!(
        profile_checks.len(),
        3,
        "the secret's and both parameters' ExternalSecrets: {report}"
    );
    assert!(!up.all().contains(DB_URL), "a parameter value was printed");

    let rt = runtime();
    let client = kube_client(&rt, &stack);
    // The values, as the profile gives them, in the cluster.
    wait_secret(&rt, &client, "dev-app-db-url", "value", DB_URL);
    wait_secret(&rt, &client, "app-hosts", "value", "a.internal,b.internal");

    // No static key anywhere: every Secret, every pod's environment.
    let (secrets, pods) = assert_no_static_key(&rt, &client);
    eprintln!("checked {secrets} Secrets and {pods} pods for static AWS keys");
    // The stores authenticate through the controller's ServiceAccount.
    for store in ["localstack", "localstack-parameters"] {
        let object = cluster_secret_store(&rt, &client, store)
            .unwrap_or_else(|| panic!("no ClusterSecretStore {store}"));
        assert_eq!(
            object["spec"]["provider"]["aws"]["auth"]["jwt"]["serviceAccountRef"]["name"],
            "external-secrets",
            "{object}"
        );
    }
    let account = get_json(
        &rt,
        &client,
        "v1",
        "ServiceAccount",
        Some("external-secrets"),
        "external-secrets",
    )
    .unwrap();
    // This machine reaches the stack's LocalStack as devstack does: a
    // port-forward when it runs in the cluster.
    let _home = ScopedEnv::set("DEVSTACK_HOME", stack.dir.path().join("state"));
    let reached = rt
        .block_on(devstack::localstack::in_cluster::reach(&aws::settings(
            &profile,
        )))
        .unwrap();
    assert_eq!(
        reached.forward.is_some(),
        localstack == LocalStack::InCluster
    );
    let settings = reached.settings.clone();
    let role_arn = devstack::seed::role::role_arn(&settings);
    assert_eq!(
        account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        role_arn.as_str()
    );

    // A user's store written as on EKS with ambient credentials: no `auth`.
    let ambient = serde_json::json!({
        "apiVersion": "external-secrets.io/v1", "kind": "ClusterSecretStore",
        "metadata": {"name": format!("{}-ambient", stack.name)},
        "spec": {"provider": {"aws": {"service": "ParameterStore", "region": "us-east-1"}}},
    });
    let reader = serde_json::json!({
        "apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
        "metadata": {"name": "ambient-reader", "namespace": "default"},
        "spec": {
            "refreshInterval": "1h",
            "secretStoreRef": {"kind": "ClusterSecretStore", "name": format!("{}-ambient", stack.name)},
            "target": {"name": "ambient-reader"},
            "data": [{"secretKey": "url", "remoteRef": {"key": "/dev/app/db-url"}}],
        },
    });
    rt.block_on(async {
        devstack::k8s::apply(&client, &ambient).await.unwrap();
        devstack::k8s::apply(&client, &reader).await.unwrap();
    });
    let until = Instant::now() + Duration::from_secs(120);
    let store_name = format!("{}-ambient", stack.name);
    loop {
        let store = cluster_secret_store(&rt, &client, &store_name).unwrap();
        let ready = store["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .cloned();
        if ready.as_ref().is_some_and(|c| c["status"] == "True") {
            assert_eq!(ready.unwrap()["reason"], "Valid", "{store}");
            break;
        }
        assert!(
            Instant::now() < until,
            "the store without auth never became Valid: {store}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_secret(&rt, &client, "ambient-reader", "url", DB_URL);
    let stored = cluster_secret_store(&rt, &client, &store_name).unwrap();
    assert!(
        stored["spec"]["provider"]["aws"].get("auth").is_none(),
        "the store is the user's, unchanged: {stored}"
    );

    // status shows the Parameter Store's store and the parameters' ExternalSecrets.
    let status = stack.run(&profile, &["status", "--json"]);
    let status = status.ok().json();
    let rows = status["rows"].as_array().unwrap();
    for (component, name) in [
        ("clustersecretstore", "localstack-parameters"),
        ("externalsecret", "default/dev-app-db-url"),
        ("externalsecret", "default/app-hosts"),
    ] {
        assert!(
            rows.iter()
                .any(|r| r["component"] == component && r["name"] == name && r["healthy"] == true),
            "{component} {name}: {status}"
        );
    }

    // A parameter deleted from LocalStack is found, with the command that restores it.
    rt.block_on(async {
        devstack::aws::ssm(&settings)
            .delete_parameter()
            .name("/dev/app/db-url")
            .send()
            .await
            .unwrap();
    });
    let finding = diagnosed(&stack, &profile, "parameter-missing-in-localstack");
    assert_eq!(
        finding["symptom"],
        "ExternalSecret default/dev-app-db-url reads parameter `/dev/app/db-url`, which LocalStack does not hold"
    );
    assert!(
        finding["fix"]["command"]
            .as_str()
            .unwrap()
            .ends_with(" seed"),
        "{finding}"
    );
    stack.run(&profile, &["seed"]).ok();
    let restored = rt.block_on(async {
        devstack::aws::ssm(&settings)
            .get_parameter()
            .name("/dev/app/db-url")
            .with_decryption(true)
            .send()
            .await
            .unwrap()
            .parameter
            .unwrap()
    });
    assert_eq!(restored.value.as_deref(), Some(DB_URL));
    assert_eq!(
        restored.r#type.map(|t| t.as_str().to_string()).as_deref(),
        Some("SecureString")
    );

    // The role deleted: diagnose names it with its fix, and seed restores it.
    rt.block_on(async {
        devstack::aws::iam(&settings)
            .delete_role()
            .role_name(devstack::seed::role::role_name(&settings))
            .send()
            .await
            .unwrap();
    });
    let finding = diagnosed(&stack, &profile, "eso-role");
    assert_eq!(
        finding["symptom"],
        format!(
            "the role ESO assumes (`eso.auth: serviceAccount`) cannot be assumed: the IAM role `{}` does not exist in LocalStack",
            devstack::seed::role::role_name(&settings)
        )
    );
    let seeded = stack.run(&profile, &["seed", "--json"]);
    assert_eq!(
        seeded.ok().json()["role"]["outcome"],
        "created",
        "{}",
        seeded.stdout
    );
    let verify = stack.run(&profile, &["verify", "--json"]);
    assert_eq!(verify.ok().json()["passed"], true, "{}", verify.stdout);

    stack.run(&profile, &["down"]).ok();
    assert!(stack.leftovers().is_empty(), "{:?}", stack.leftovers());
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn parameters_and_irsa_on_k3s() {
    if let Some(provider) = Provider::k3s() {
        parameters_and_irsa(provider, LocalStack::Container);
    }
}

/// LocalStack in the cluster, as on a cluster devstack did not create:
/// the role and parameters seeded through a port-forward, STS reached at
/// the in-cluster Service.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn parameters_and_irsa_with_localstack_in_the_cluster_on_k3s() {
    if let Some(provider) = Provider::k3s() {
        parameters_and_irsa(provider, LocalStack::InCluster);
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn parameters_and_irsa_on_kind() {
    if let Some(provider) = Provider::kind("parameters_and_irsa_on_kind") {
        parameters_and_irsa(provider, LocalStack::Container);
    }
}
