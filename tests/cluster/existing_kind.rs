//! Cluster tier: `cluster.provider: existing` on a Kind cluster made outside
//! devstack with the kit's `kind create cluster`. A kubeconfig user who may
//! only read (a ServiceAccount bound to `view`) is refused in preflight with
//! every missing permission listed and nothing created; Ctrl-C during `up`
//! removes what it applied; `up` -> `verify --push-secret` -> `status` ->
//! a second stack beside the first (its own names and ESO controller, both
//! verified, the first one's `down` refused until the second's) -> `down`
//! leaves the cluster's namespaces, CRDs and cluster roles as they were,
//! and the cluster running. An ESO devstack did not install is refused
//! before anything is created.

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::kind::{KindGuard, create_kind_cluster, kind_cluster, kind_kit, kind_nodes};
use crate::common::*;

/// The ci profile's secrets on the existing provider (no node shapes).
pub(crate) fn existing_profile(stack: &TestStack, context: &str) -> PathBuf {
    let text = format!(
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: {name}\ncluster:\n  provider: existing\n  context: {context}\nimages:\n  bundle: {bundle}\nsecrets:\n  - name: ci/app/token\n    generate: {{length: 32, charset: hex}}\n    sync:\n      namespace: default\n      secretName: app-token\ntimeouts:\n  localstack: 90s\n  flux: 4m\n  eso: 6m\n  verify: 2m\n",
        name = stack.name,
        bundle = bundle_dir().display()
    );
    let path = stack.dir.path().join("profile.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Names of the cluster's namespaces, CRDs, cluster roles and bindings.
pub(crate) fn inventory(rt: &tokio::runtime::Runtime, client: &kube::Client) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (api_version, kind) in [
        ("v1", "Namespace"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ] {
        let api = devstack::k8s::dynamic_api(client, api_version, kind, None);
        let list = rt.block_on(api.list(&Default::default())).unwrap();
        for object in list.items {
            names.insert(format!("{kind}/{}", object.metadata.name.unwrap()));
        }
    }
    names
}

#[track_caller]
pub(crate) fn assert_same_inventory(
    before: &BTreeSet<String>,
    after: &BTreeSet<String>,
    when: &str,
) {
    let added: Vec<&String> = after.difference(before).collect();
    let gone: Vec<&String> = before.difference(after).collect();
    assert!(
        added.is_empty() && gone.is_empty(),
        "{when}: left behind {added:?}, removed {gone:?}"
    );
}

/// A kubeconfig whose context `viewer` is a ServiceAccount bound to the
/// built-in `view` role: it may read, not write.
fn viewer_kubeconfig(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    admin: &Path,
    out: &Path,
) -> PathBuf {
    for object in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "devstack-test-viewer", "namespace": "default"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "devstack-test-viewer"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "ServiceAccount", "name": "devstack-test-viewer", "namespace": "default"}]}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": "devstack-test-viewer", "namespace": "default",
                            "annotations": {"kubernetes.io/service-account.name": "devstack-test-viewer"}}}),
    ] {
        rt.block_on(devstack::k8s::apply(client, &object)).unwrap();
    }
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), "default");
    let token = (0..60)
        .find_map(|_| {
            let secret = rt.block_on(secrets.get("devstack-test-viewer")).unwrap();
            let token = secret.data.and_then(|d| d.get("token").cloned());
            if token.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            token
        })
        .expect("the token controller fills the viewer's token");
    let admin: Value = serde_saphyr::from_str(&std::fs::read_to_string(admin).unwrap()).unwrap();
    let cluster = admin["clusters"][0].clone();
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "viewer", "user": {"token": String::from_utf8(token.0).unwrap()}}],
        "contexts": [{"name": "viewer", "context": {"cluster": cluster["name"], "user": "viewer"}}],
        "current-context": "viewer",
    });
    std::fs::write(out, serde_json::to_string(&config).unwrap()).unwrap();
    out.to_path_buf()
}

/// An ESO that devstack did not install (here its CRD as Helm leaves it,
/// with no controller running) is refused before anything is created; the
/// test removes its CRD after. tests/cluster/cluster_eso.rs has a whole one.
fn foreign_eso_is_refused(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    stack: &TestStack,
    profile: &Path,
    env: &[(&str, &str)],
) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "externalsecrets.external-secrets.io",
                     "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"group": "external-secrets.io", "scope": "Namespaced",
                 "names": {"kind": "ExternalSecret", "plural": "externalsecrets",
                           "singular": "externalsecret", "listKind": "ExternalSecretList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    rt.block_on(devstack::k8s::apply(client, &crd)).unwrap();
    let before = inventory(rt, client);
    let refused = stack.run_env(profile, &["up"], env);
    let after = inventory(rt, client);
    let crds = devstack::k8s::dynamic_api(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
    );
    rt.block_on(crds.delete("externalsecrets.external-secrets.io", &Default::default()))
        .unwrap();
    assert!(rt.block_on(devstack::k8s::wait_gone(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
        "externalsecrets.external-secrets.io",
        std::time::Duration::from_secs(60),
    )));
    assert_eq!(refused.code, 2, "{}", refused.all());
    for part in [
        "runs an External Secrets Operator that devstack did not install",
        "managed by Helm, versions v1",
        "no controller Deployment labelled app.kubernetes.io/name=external-secrets runs",
        "nothing was created",
    ] {
        assert!(refused.stderr.contains(part), "{part}:\n{}", refused.stderr);
    }
    assert_same_inventory(&before, &after, "a refused ESO");
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn existing_kind_cluster_is_left_as_it_was() {
    const TEST: &str = "existing_kind_cluster_is_left_as_it_was";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    let stack = TestStack::new("exist");
    let _guard = KindGuard::new(kind.clone(), &stack);
    let name = kind_cluster(&stack);
    let admin = stack.dir.path().join("admin.kubeconfig");
    create_kind_cluster(&kind, &name, &admin);
    let context = format!("kind-{name}");
    let profile = existing_profile(&stack, &context);
    let as_admin = [("KUBECONFIG", admin.to_str().unwrap())];
    let rt = runtime();
    let client = rt
        .block_on(devstack::k8s::client_from_kubeconfig(
            &std::fs::read_to_string(&admin).unwrap(),
        ))
        .unwrap();
    let viewer = viewer_kubeconfig(&rt, &client, &admin, &stack.dir.path().join("viewer"));
    let before = inventory(&rt, &client);

    // Read-only: refused before anything is created, every lack listed.
    let refused = stack.run_env(
        &profile,
        &["--context", "viewer", "up"],
        &[("KUBECONFIG", viewer.to_str().unwrap())],
    );
    assert_eq!(refused.code, 3, "{}", refused.all());
    for lack in [
        "lacks",
        "nothing was created",
        "create customresourcedefinitions.apiextensions.k8s.io (cluster-wide)",
        "create clusterroles.rbac.authorization.k8s.io (cluster-wide)",
        "create deployments.apps in namespace localstack",
        "create pods/portforward in namespace localstack",
    ] {
        assert!(refused.stderr.contains(lack), "{lack}:\n{}", refused.stderr);
    }
    assert_same_inventory(&before, &inventory(&rt, &client), "a refused preflight");
    let check = |kubeconfig: &Path, context: &str, name: &str| {
        let args = ["--context", context, "doctor", "--json"];
        let run = stack.run_env(
            &profile,
            &args,
            &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        );
        let report = run.json();
        doctor_check(&report, name)
    };
    let refused = check(&viewer, "viewer", "cluster");
    assert_eq!(refused["status"], "fail", "{refused}");
    assert!(refused["detail"].to_string().contains("lacks"), "{refused}");
    assert_eq!(check(&admin, &context, "cluster")["status"], "pass");
    let kubernetes = check(&admin, &context, "kubernetes");
    assert!(
        kubernetes["detail"]
            .to_string()
            .contains("the existing cluster's API server"),
        "{kubernetes}"
    );

    foreign_eso_is_refused(&rt, &client, &stack, &profile, &as_admin);
    assert_same_inventory(&before, &inventory(&rt, &client), "a refused ESO");

    interrupted_up_removes_what_it_applied(&stack, &profile, &admin);
    assert_same_inventory(&before, &inventory(&rt, &client), "an interrupted up");

    let up = stack.run_env(&profile, &["up", "--json"], &as_admin);
    let report = up.ok().json();
    assert_eq!(report["cluster"]["provider"], "existing", "{report}");
    assert_eq!(report["cluster"]["created"], false, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let verify = stack.run_env(&profile, &["verify", "--push-secret", "--json"], &as_admin);
    assert_eq!(verify.ok().json()["passed"], true, "{}", verify.all());
    let status = stack.run_env(&profile, &["status"], &as_admin);
    status.ok();
    assert!(
        status.stdout.contains("existing, Kubernetes v1.36.4"),
        "{}",
        status.stdout
    );
    a_second_stack_shares_the_cluster(&rt, &client, &stack, (&profile, &context), &as_admin);
    let profile = with_a_repository(&rt, &client, &stack, &profile, &as_admin);

    let down = stack.run_env(&profile, &["down", "--json"], &as_admin);
    let removed = down.ok().json()["stacks"][0]["uninstalled"].to_string();
    assert!(removed.contains("Flux"), "{removed}");
    assert!(removed.contains("Namespace localstack"), "{removed}");
    for published in [
        "Kustomization flux-system/app",
        "ConfigMap flux-system/flux-runtime-info",
        "ConfigMap values-ns/app-values",
    ] {
        assert!(removed.contains(published), "{published}: {removed}");
    }
    let config = get_json(
        &rt,
        &client,
        "v1",
        "ConfigMap",
        Some("default"),
        "app-config",
    );
    assert!(
        config.is_none(),
        "the app's objects outlived down: {config:?}"
    );
    assert_same_inventory(&before, &inventory(&rt, &client), "down");
    assert!(!kind_nodes(&stack).is_empty(), "the cluster itself stays");
}

/// The stack synced with a repository (facts, a Helm values ConfigMap in a
/// namespace devstack creates, one app substituting a fact): everything
/// published, which `down` must then remove. Returns that profile.
fn with_a_repository(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    stack: &TestStack,
    profile: &Path,
    env: &[(&str, &str)],
) -> PathBuf {
    let repo = stack.dir.path().join("repo");
    std::fs::create_dir_all(repo.join("app")).unwrap();
    std::fs::write(
        repo.join("app/config.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n  namespace: default\ndata:\n  greeting: ${GREETING}\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(profile).unwrap()
        + "facts:\n  configMaps: [flux-runtime-info]\n  values: {GREETING: hello}\n  helmValues:\n    - {name: app-values, namespace: values-ns, values: {greeting: \"${GREETING}\"}}\ngitops:\n  apps:\n    - {name: app, path: app}\n";
    let path = repo.join("devstack.yaml");
    std::fs::write(&path, text).unwrap();
    stack.run_env(&path, &["sync"], env).ok();
    let config = get_json(rt, client, "v1", "ConfigMap", Some("default"), "app-config")
        .expect("the app's ConfigMap");
    assert_eq!(config["data"]["greeting"], "hello", "{config}");
    let values = get_json(
        rt,
        client,
        "v1",
        "ConfigMap",
        Some("values-ns"),
        "app-values",
    )
    .expect("the values ConfigMap in a namespace devstack made");
    assert!(
        values["data"]["values.yaml"]
            .as_str()
            .unwrap()
            .contains("hello"),
        "{values}"
    );
    path
}

/// A second stack on the cluster: refused while its profile would sync a
/// secret where the first one does; then up beside the first one under its
/// own names, with its own ESO controller and the first one's CRDs and
/// webhook. Both verify side by side; the first one cannot go down while
/// the second uses its ESO; the second's `down`, even without its record,
/// leaves the first verified and its own objects gone.
fn a_second_stack_shares_the_cluster(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    stack: &TestStack,
    (profile, context): (&Path, &str),
    as_admin: &[(&str, &str)],
) {
    let second = format!("{}-b", stack.name);
    let with_first = inventory(rt, client);
    let taking_over = stack.run_env(profile, &["--name", &second, "up"], as_admin);
    assert_eq!(taking_over.code, 2, "{}", taking_over.all());
    for part in [
        format!("where stack `{}` already syncs one", stack.name),
        "nothing was created".to_string(),
    ] {
        assert!(
            taking_over.stderr.contains(&part),
            "{part}:\n{}",
            taking_over.stderr
        );
    }
    assert_same_inventory(
        &with_first,
        &inventory(rt, client),
        "a refused second stack",
    );

    let profile_b = second_profile(stack, profile, &second);
    let up = stack.run_env(&profile_b, &["up", "--json"], as_admin);
    let report = up.ok().json();
    assert_eq!(report["cluster"]["sharesCluster"], true, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let levels: Vec<&str> = report["gitops"]["chain"]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    let own = |base: &str| format!("{base}-{second}");
    assert_eq!(
        levels,
        [
            own("devstack"),
            own("localstack"),
            own("external-secrets-operator"),
            own("external-secrets-crs")
        ],
        "{report}"
    );
    // Each store names its own stack's controller.
    let stores = devstack::gitops::cluster_secret_stores(client);
    for (store, stack_name) in [
        ("localstack".to_string(), &stack.name),
        (own("localstack"), &second),
    ] {
        let object = rt.block_on(stores.get(&store)).unwrap();
        assert_eq!(
            object.data["spec"]["controller"],
            format!("devstack-{stack_name}"),
            "{store}"
        );
    }
    for profile in [profile, profile_b.as_path()] {
        let verify = stack.run_env(profile, &["verify", "--push-secret", "--json"], as_admin);
        assert_eq!(verify.ok().json()["passed"], true, "{}", verify.all());
        stack.run_env(profile, &["status"], as_admin).ok();
    }
    // Its ESO is its own controller: one source, its lines bare.
    let logs = stack.run_env(&profile_b, &["logs", "eso", "--tail", "20"], as_admin);
    assert!(!logs.ok().stdout.trim().is_empty(), "{}", logs.all());
    let diagnose = stack.run_env(&profile_b, &["diagnose", "--json"], as_admin);
    assert_eq!(diagnose.code, 0, "{}", diagnose.all());
    assert_eq!(diagnose.json(), json!([]), "{}", diagnose.all());

    let first_down = stack.run_env(profile, &["--context", context, "down"], as_admin);
    assert_eq!(first_down.code, 2, "{}", first_down.all());
    assert!(
        first_down.stderr.contains(&format!("`{second}`")),
        "{}",
        first_down.stderr
    );
    // Its record lost (as after a run killed before writing it): `down`
    // still finds its objects by their names, and only its own.
    let record = stack
        .dir
        .path()
        .join(format!("state/stacks/{second}/stack.json"));
    std::fs::remove_file(&record).unwrap();
    let down = stack.run_env(&profile_b, &["down", "--json"], as_admin);
    let removed = down.ok().json()["stacks"][0]["uninstalled"].to_string();
    for part in [
        own("Namespace localstack"),
        own("Kustomization flux-system/devstack"),
    ] {
        assert!(removed.contains(&part), "{part}: {removed}");
    }
    assert!(
        !removed.contains("namespace flux-system"),
        "the first stack's Flux stays: {removed}"
    );
    assert_same_inventory(
        &with_first,
        &inventory(rt, client),
        "the second stack's down",
    );
    let verify = stack.run_env(profile, &["verify", "--push-secret", "--json"], as_admin);
    assert_eq!(verify.ok().json()["passed"], true, "{}", verify.all());
}

/// The first stack's profile for stack `second`, which syncs its secret
/// to its own Secret.
fn second_profile(stack: &TestStack, profile: &Path, second: &str) -> PathBuf {
    let text = std::fs::read_to_string(profile)
        .unwrap()
        .replace(
            &format!("name: {}\n", stack.name),
            &format!("name: {second}\n"),
        )
        .replace("secretName: app-token", "secretName: app-token-b");
    assert!(
        text.contains(second) && text.contains("app-token-b"),
        "{text}"
    );
    let path = stack.dir.path().join(format!("{second}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// SIGINT once the Flux step starts: `up` rolls back what it applied.
fn interrupted_up_removes_what_it_applied(stack: &TestStack, profile: &Path, admin: &Path) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_devstack"));
    let mut child = command
        .current_dir(stack.dir.path())
        .args(["up", "--profile"])
        .arg(profile)
        .env("DEVSTACK_HOME", stack.dir.path().join("state"))
        .env("KUBECONFIG", admin)
        .env("CI", "true")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap();
        let flux = line.contains("• Flux");
        seen.push(line);
        if flux {
            // SAFETY: signalling the child this test spawned.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGINT);
            }
        }
    }
    let status = child.wait().unwrap();
    let log = seen.join("\n");
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(
        log.contains("what the stack put in the existing cluster"),
        "{log}"
    );
}

/// Flux from the kit's install manifest, its three controllers' images
/// loaded into the nodes first, as a platform team installs it.
fn install_flux_beforehand(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    kind: &Path,
    cluster: &str,
) {
    const CONTROLLERS: [&str; 3] = [
        "source-controller",
        "kustomize-controller",
        "helm-controller",
    ];
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(bundle_dir().join("index.json")).unwrap())
            .unwrap();
    let artifacts = index["artifacts"].as_array().unwrap();
    for artifact in artifacts {
        let name = artifact["name"].as_str().unwrap_or_default();
        if artifact["kind"] == "image" && CONTROLLERS.iter().any(|c| name.ends_with(c)) {
            let tarball = bundle_dir().join(artifact["file"].as_str().unwrap());
            let out = std::process::Command::new(kind)
                .args(["load", "image-archive", "--name", cluster])
                .arg(&tarball)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let manifest = artifacts
        .iter()
        .find(|a| a["name"] == "flux-install")
        .and_then(|a| a["file"].as_str())
        .expect("the kit bundles Flux's install manifest");
    let text = std::fs::read_to_string(bundle_dir().join(manifest)).unwrap();
    let docs: Vec<Value> = devstack::k8s::apply::parse_documents(&text, "flux-install")
        .unwrap()
        .into_iter()
        .filter(|d| {
            d["kind"] != "Deployment"
                || CONTROLLERS.contains(&d["metadata"]["name"].as_str().unwrap_or_default())
        })
        .collect();
    let budget = devstack::k8s::Budget::new(std::time::Duration::from_secs(240), "test");
    rt.block_on(devstack::k8s::apply::apply_all(client, &docs, budget))
        .unwrap();
    let names: Vec<String> = CONTROLLERS.iter().map(|c| c.to_string()).collect();
    let budget = devstack::k8s::Budget::new(std::time::Duration::from_secs(240), "test");
    rt.block_on(devstack::k8s::wait_deployments_available(
        client,
        "flux-system",
        &names,
        budget,
        "",
    ))
    .unwrap();
}

/// The first stack runs the shipped ci profile as it is, on the Kind
/// cluster named by `--context` (then by DEVSTACK_CONTEXT): its node shape
/// is set aside with a notice, the rest of it (its secret, its timeouts)
/// used.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn a_flux_installed_beforehand_is_used_and_left_in_place() {
    const TEST: &str = "a_flux_installed_beforehand_is_used_and_left_in_place";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    let stack = TestStack::new("exflux");
    let _guard = KindGuard::new(kind.clone(), &stack);
    let name = kind_cluster(&stack);
    let admin = stack.dir.path().join("admin.kubeconfig");
    create_kind_cluster(&kind, &name, &admin);
    let context = format!("kind-{name}");
    let bundle = bundle_dir();
    let as_admin = [
        ("KUBECONFIG", admin.to_str().unwrap()),
        ("DEVSTACK_BUNDLE", bundle.to_str().unwrap()),
    ];
    let ci = Path::new("ci");
    let on_the_cluster = ["--name", &stack.name, "--context", &context];
    let by_variable = [as_admin[0], as_admin[1], ("DEVSTACK_CONTEXT", &context)];
    let rt = runtime();
    let client = rt
        .block_on(devstack::k8s::client_from_kubeconfig(
            &std::fs::read_to_string(&admin).unwrap(),
        ))
        .unwrap();
    install_flux_beforehand(&rt, &client, &kind, &name);
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), "flux-system");
    let generation = |name: &str| {
        rt.block_on(deployments.get(name))
            .unwrap()
            .metadata
            .generation
    };
    let flux_before = generation("kustomize-controller");
    let before = inventory(&rt, &client);

    let up = stack.run_env(
        ci,
        &[&on_the_cluster[..], &["up", "--json"]].concat(),
        &as_admin,
    );
    let notice = "ignoring cluster.servers, cluster.apiServerPort of the shipped profile ci";
    assert!(up.stderr.contains(notice), "{}", up.stderr);
    let report = up.ok().json();
    assert_eq!(report["cluster"]["provider"], "existing", "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(
        report["gitops"]["flux"]["source"], "already-installed",
        "{report}"
    );
    assert_eq!(
        generation("kustomize-controller"),
        flux_before,
        "the installed Flux was changed"
    );
    // The ci profile's secret, synced where the profile says.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while get_json(&rt, &client, "v1", "Secret", Some("default"), "app-token")
        .is_none_or(|token| !token["data"]["value"].is_string())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the ci profile's secret is not synced to default/app-token after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let verify = stack.run_env(
        ci,
        &["--name", &stack.name, "verify", "--json"],
        &by_variable,
    );
    assert_eq!(verify.ok().json()["passed"], true, "{}", verify.all());

    // A second stack uses the same Flux; both go down, it first.
    let second = format!("{}-b", stack.name);
    let profile = existing_profile(&stack, &context);
    let profile_b = second_profile(&stack, &profile, &second);
    let report = stack
        .run_env(&profile_b, &["up", "--json"], &as_admin)
        .ok()
        .json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(report["cluster"]["sharesCluster"], true, "{report}");
    assert_eq!(
        report["gitops"]["flux"]["source"], "already-installed",
        "{report}"
    );
    take_down(
        &stack,
        &[
            (&second, &profile_b, &[]),
            (&stack.name, ci, &on_the_cluster),
        ],
        &as_admin,
    );
    assert_same_inventory(&before, &inventory(&rt, &client), "down");
    assert_eq!(generation("kustomize-controller"), flux_before);
}

/// `down --all` through an unrelated profile that pins another provider,
/// where the test may remove every stack here (DEVSTACK_TEST_DOWN_ALL=1,
/// set by tests/run.sh): the stacks are found by their records alone,
/// having no container of their own, and a stack that joined the cluster
/// goes down before the one it joined. Elsewhere, each stack's own `down`
/// (with the flags that select it), in the order given.
fn take_down(stack: &TestStack, stacks: &[(&str, &Path, &[&str])], env: &[(&str, &str)]) {
    if std::env::var_os("DEVSTACK_TEST_DOWN_ALL").is_none() {
        say_skipped(
            "`down --all` on an existing cluster: set DEVSTACK_TEST_DOWN_ALL=1 to let this test remove every devstack stack here",
        );
        for (_, profile, flags) in stacks {
            stack
                .run_env(profile, &[flags, &["down"][..]].concat(), env)
                .ok();
        }
        return;
    }
    let unrelated = stack.dir.path().join("unrelated.yaml");
    std::fs::write(
        &unrelated,
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: unrelated\ncluster:\n  provider: kind\n",
    )
    .unwrap();
    let report = stack
        .run_env(&unrelated, &["down", "--all", "--json"], env)
        .ok()
        .json();
    let reported = report["stacks"].as_array().unwrap();
    let found: Vec<&str> = reported
        .iter()
        .filter_map(|s| s["stack"].as_str())
        .filter(|name| stacks.iter().any(|(ours, _, _)| ours == name))
        .collect();
    let expected: Vec<&str> = stacks.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(found, expected, "{report}");
    for (name, _, _) in stacks {
        let ours = reported.iter().find(|s| s["stack"] == *name).unwrap();
        let uninstalled = ours["uninstalled"].as_array().unwrap();
        assert!(
            uninstalled.iter().any(|u| u
                .as_str()
                .unwrap()
                .starts_with("Kustomization flux-system/devstack")),
            "{report}"
        );
        assert!(!stack.dir.path().join("state/stacks").join(name).exists());
    }
}
