//! Cluster tier: `devstack diagnose` on real stacks. A healthy ci stack has
//! no finding, on K3s and on Kind. On one K3s stack, brought up once, each
//! symptom of the ESO platform's runbooks is induced in turn: `diagnose`
//! names it with the right detector, cause and fix, the fix it printed is
//! run as printed, and `status` is healthy again (and `diagnose` quiet).

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::common::kind::{KindGuard, kind_kit};
use crate::common::*;

/// How long `status --wait` may take to see a repaired stack settle.
const SETTLE: &str = "6m";
const ESO_NAMESPACE: &str = "external-secrets";

#[track_caller]
fn assert_no_finding(stack: &TestStack, profile: &Path) {
    let run = stack.run(profile, &["diagnose", "--json"]);
    assert_eq!(run.code, 0, "{}", run.all());
    assert_eq!(run.json(), json!([]), "{}", run.all());
}

/// The finding of `detector` in `diagnose --json`, which exits 4.
#[track_caller]
fn diagnosed(stack: &TestStack, profile: &Path, detector: &str) -> Value {
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

/// Runs a fix as `diagnose` printed it: `devstack ...` commands joined by
/// `&&`, each with this stack's state.
fn run_fix(stack: &TestStack, command: &str) {
    for part in command.split(" && ") {
        assert!(!part.contains('\''), "a quoted word in `{command}`");
        let words: Vec<&str> = part.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"devstack"), "`{command}`");
        let run = run_devstack_raw(stack.dir.path(), &words[1..], &[]);
        assert_eq!(run.code, 0, "`{part}`:\n{}", run.all());
    }
}

/// The symptom induced just before is diagnosed by `detector` with a cause
/// that says `cause` and the fix `devstack <fix>` for this stack; `prepare`
/// does what the fix's words ask beside the command; the command run as
/// printed makes the stack healthy again.
#[track_caller]
fn diagnose_and_repair(
    stack: &TestStack,
    profile: &Path,
    detector: &str,
    cause: &str,
    fix: &str,
    prepare: impl FnOnce(),
) {
    let finding = diagnosed(stack, profile, detector);
    assert!(
        finding["cause"]
            .as_str()
            .unwrap_or_default()
            .contains(cause),
        "cause of {finding:#}"
    );
    let command = finding["fix"]["command"]
        .as_str()
        .unwrap_or_else(|| panic!("no command in {finding:#}"))
        .to_string();
    assert_eq!(command, format!("devstack -p {} {fix}", profile.display()));
    eprintln!("{detector}: {}; running `{command}`", finding["symptom"]);
    prepare();
    run_fix(stack, &command);
    let status = stack.run(profile, &["status", "--wait", SETTLE]);
    assert_eq!(status.code, 0, "after `{command}`:\n{}", status.all());
    assert_no_finding(stack, profile);
}

fn scale(rt: &tokio::runtime::Runtime, client: &kube::Client, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ESO_NAMESPACE);
    rt.block_on(api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    ))
    .unwrap();
}

/// Waits until Deployment `name` has no pod left.
fn wait_no_pods(rt: &tokio::runtime::Runtime, client: &kube::Client, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ESO_NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let pods = rt.block_on(api.list(&ListParams::default())).unwrap();
        let left = pods.items.iter().any(|p| {
            p.metadata.name.as_deref().is_some_and(|n| {
                n.strip_prefix(name)
                    .is_some_and(|rest| rest.matches('-').count() == 2)
            })
        });
        if !left {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}'s pods still run after 90 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Empties the caBundle of every webhook that calls the ESO webhook.
fn empty_ca_bundles(rt: &tokio::runtime::Runtime, client: &kube::Client) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let listed = rt.block_on(api.list(&ListParams::default())).unwrap();
    let mut emptied = 0;
    for configuration in listed.items {
        let webhooks: Vec<Value> = configuration
            .webhooks
            .iter()
            .flatten()
            .filter(|w| {
                w.client_config
                    .service
                    .as_ref()
                    .is_some_and(|s| s.name == "external-secrets-webhook")
            })
            .map(|w| json!({"name": w.name, "clientConfig": {"caBundle": ""}}))
            .collect();
        if webhooks.is_empty() {
            continue;
        }
        emptied += webhooks.len();
        let name = configuration.metadata.name.unwrap();
        rt.block_on(api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"webhooks": webhooks})),
        ))
        .unwrap();
    }
    assert!(emptied > 0, "no webhook calls the ESO webhook");
}

/// Asks Flux to reconcile `name` of `api` and waits until it has, failed.
fn reconcile_until_failed(rt: &tokio::runtime::Runtime, api: &Api<DynamicObject>, name: &str) {
    let token = rt
        .block_on(devstack::gitops::chain::request_reconcile(api, name))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let object = serde_json::to_value(rt.block_on(api.get(name)).unwrap()).unwrap();
        let ready = devstack::k8s::conditions::condition(&object, "Ready");
        let failed = ready.as_ref().is_some_and(|c| {
            c.status == "False"
                && !devstack::gitops::chain::waiting(
                    c.reason.as_deref().unwrap_or_default(),
                    c.message.as_deref().unwrap_or_default(),
                )
        });
        if failed && object["status"]["lastHandledReconcileAt"] == token.as_str() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not fail within 240 s: {ready:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn delete_secret(rt: &tokio::runtime::Runtime, stack: &TestStack, profile: &Path, name: &str) {
    let port = stack.run(profile, &["status", "--json"]).json()["ports"]["localstack"]
        .as_u64()
        .expect("LocalStack port") as u16;
    let settings = settings(profile).with_localstack_port(port);
    rt.block_on(
        devstack::aws::secrets_manager(&settings)
            .delete_secret()
            .secret_id(name)
            .force_delete_without_recovery(true)
            .send(),
    )
    .unwrap();
}

fn missing_key_external_secret(name: &str, key: &str) -> Value {
    json!({
        "apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "refreshInterval": "10s",
            "secretStoreRef": {"kind": "ClusterSecretStore", "name": "localstack"},
            "target": {"name": name},
            "data": [{"secretKey": "value", "remoteRef": {"key": key}}],
        },
    })
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn each_runbook_symptom_is_diagnosed_and_its_printed_fix_repairs_it() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("diag");
    let path = stack.dir.path().join("profile.yaml");
    let profile = profile::ci(&stack.name).write(&path);

    // No stack yet: its own error, with the command that creates it.
    let none = stack.run(&profile, &["diagnose"]);
    assert_eq!(none.code, 4, "{}", none.all());
    assert!(none.stderr.contains("does not exist"), "{}", none.stderr);
    assert!(
        none.stderr.contains(&format!(
            "hint: create it with {}",
            quoted_command(&profile, "up")
        )),
        "{}",
        none.stderr
    );

    stack.run(&profile, &["up"]).ok();
    assert_no_finding(&stack, &profile);
    let text = stack.run(&profile, &["diagnose"]);
    assert_eq!(text.code, 0, "{}", text.all());
    assert!(text.stderr.contains("nothing found"), "{}", text.stderr);
    let rt = runtime();
    let client = kube_client(&rt, &stack);

    // LocalStack stopped: `status` fails and points at the finding.
    let localstack = format!("devstack-{}-localstack", stack.name);
    assert!(docker(&["stop", "-t", "2", &localstack]).status.success());
    let status = stack.run(&profile, &["status"]);
    assert_eq!(status.code, 4, "{}", status.all());
    assert!(
        status.stderr.contains("found: LocalStack is exited"),
        "{}",
        status.stderr
    );
    diagnose_and_repair(
        &stack,
        &profile,
        "localstack-container",
        "stopped",
        "up",
        || {},
    );

    // A seeded secret deleted in LocalStack while its ExternalSecret exists.
    delete_secret(&rt, &stack, &profile, "ci/app/token");
    diagnose_and_repair(
        &stack,
        &profile,
        "secret-missing-in-localstack",
        "`ci/app/token`",
        "seed",
        || {},
    );

    // The webhook's caBundle emptied. The cert-controller would inject it
    // again within a second, so it is scaled down first.
    scale(&rt, &client, "external-secrets-cert-controller", 0);
    wait_no_pods(&rt, &client, "external-secrets-cert-controller");
    empty_ca_bundles(&rt, &client);
    diagnose_and_repair(
        &stack,
        &profile,
        "webhook-ca-bundle",
        "does not trust",
        "up",
        || {},
    );

    // The ESO controller scaled to 0.
    scale(&rt, &client, "external-secrets", 0);
    diagnose_and_repair(
        &stack,
        &profile,
        "eso-not-running",
        "scaled down",
        "up",
        || {},
    );

    // A Kustomization pointed at a path that does not build.
    let kustomizations = devstack::gitops::chain::kustomizations(&client);
    rt.block_on(kustomizations.patch(
        "external-secrets-crs",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"path": "./does-not-exist"}})),
    ))
    .unwrap();
    reconcile_until_failed(&rt, &kustomizations, "external-secrets-crs");
    diagnose_and_repair(
        &stack,
        &profile,
        "kustomization-failing",
        "does-not-exist",
        "sync",
        || {},
    );

    // A HelmRelease with a values error, through the values devstack gives it.
    let values: Api<ConfigMap> = Api::namespaced(client.clone(), ESO_NAMESPACE);
    rt.block_on(values.patch(
        "devstack-eso-values",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"values.yaml": "{\"replicaCount\": \"not-a-number\"}"}})),
    ))
    .unwrap();
    let releases = devstack::gitops::chain::helm_releases(&client, "external-secrets");
    reconcile_until_failed(&rt, &releases, "external-secrets");
    diagnose_and_repair(
        &stack,
        &profile,
        "helmrelease-failed",
        "values",
        "sync",
        || {},
    );

    // An ExternalSecret naming a key nobody seeds: the fix adds it to the
    // profile, then runs the printed command.
    let key = "ci/diagnose/absent";
    let probe = missing_key_external_secret("diagnose-missing-key", key);
    rt.block_on(devstack::k8s::apply(&client, &probe)).unwrap();
    diagnose_and_repair(
        &stack,
        &profile,
        "external-secret-failing",
        &format!("`{key}`"),
        "seed",
        || {
            profile::ci(&stack.name)
                .secrets(&format!("  - name: {key}\n    value: diagnose-present\n"))
                .write(&path);
        },
    );
    let external_secrets = devstack::k8s::dynamic_api(
        &client,
        "external-secrets.io/v1",
        "ExternalSecret",
        Some("default"),
    );
    rt.block_on(external_secrets.delete("diagnose-missing-key", &Default::default()))
        .unwrap();

    stack.run(&profile, &["down"]).ok();
}

/// No false positive on the other provider either.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn a_healthy_kind_stack_has_no_finding() {
    const TEST: &str = "a_healthy_kind_stack_has_no_finding";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    let stack = TestStack::new("diagkind");
    let _guard = KindGuard::new(kind, &stack);
    let text = profile::ci(&stack.name)
        .text()
        .replacen("provider: k3s", "provider: kind", 1);
    assert!(
        text.contains("provider: kind"),
        "profiles/ci.yaml changed shape"
    );
    let path = stack.dir.path().join("profile.yaml");
    std::fs::write(&path, text).unwrap();
    stack.run(&path, &["up"]).ok();
    assert_no_finding(&stack, &path);
    stack.run(&path, &["down"]).ok();
}

/// An `up` that fails names its cause, read before the rollback removed
/// the evidence: here ESO's image, which no node can pull. Retained, the
/// stack's `status` names it too.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn a_failed_up_names_its_cause_before_rolling_back() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("diagup");
    let path = stack.dir.path().join("profile.yaml");
    let profile = profile::ci(&stack.name)
        .replace_line("  eso: 6m\n", "  eso: 90s\n")
        .append(
            "eso:\n  values:\n    image:\n      repository: registry.invalid/external-secrets\n",
        )
        .write(&path);
    let up = stack.run(&profile, &["up"]);
    assert_eq!(up.code, 5, "{}", up.all());
    assert!(up.stderr.contains("rolled back"), "{}", up.stderr);
    assert!(
        up.stderr
            .contains("found: pod external-secrets/external-secrets-")
            && up
                .stderr
                .contains("cannot get image registry.invalid/external-secrets:"),
        "{}",
        up.stderr
    );
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());

    // Retained, the stack stays to be looked at: `status` names the image.
    let retained = stack.run(&profile, &["up", "--retain"]);
    assert_eq!(retained.code, 5, "{}", retained.all());
    let status = stack.run(&profile, &["status"]);
    assert_eq!(status.code, 4, "{}", status.all());
    assert!(
        status
            .stderr
            .contains("cannot get image registry.invalid/external-secrets:"),
        "{}",
        status.all()
    );
    println!("{}\n{}", up.stderr, status.all());
    stack.run(&profile, &["down"]).ok();
}
