//! Cluster tier: the example GitOps repository (examples/gitops-repo) run
//! unchanged on K3s and on Kind: facts from a dotenv file, a Terraform
//! outputs file, the environment and the profile substituted by Flux into
//! the apps layer; a per-release values ConfigMap read by a HelmRelease; an
//! ExternalSecret of the apps reading a seeded secret. A changed fact on a
//! second `up` reaches its objects and nudges only the app that uses it.
//! The kit's flux CLI renders the repository offline with
//! `devstack facts --dotenv`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::gitserver::{GitServer, WorkTree, gitserver_kit};
use crate::common::kind::{KindGuard, kind_kit};
use crate::common::*;

/// Where the sensitive Terraform output must never show.
const SENSITIVE_VALUE: &str = "tf-local-api-token";

/// The example repository copied for `stack`, its profile given the test
/// stack's name, port, provider and the offline bundle; nothing else of it
/// changes.
fn example_repository(stack: &TestStack, cluster: &str) -> PathBuf {
    let repo = stack.dir.path().join("repo");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gitops-repo"),
        &repo,
    );
    let profile = repo.join("devstack.yaml");
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(
        text.contains("\nname: shop\n"),
        "the example changed:\n{text}"
    );
    let text = text.replace("\nname: shop\n", &format!("\nname: {}\n", stack.name));
    let text = format!(
        "{text}cluster:\n{cluster}  kubeconfig: {{merge: false}}\nlocalstack:\n  port: {}\nimages:\n  bundle: {}\ntimeouts:\n  localstack: 120s\n  seed: 60s\n  eso: 5m\n",
        stack.port,
        bundle_dir().display()
    );
    std::fs::write(&profile, text).unwrap();
    profile
}

/// Polls `read` until it gives `want` (bounded: the object is another
/// controller's to update, and a watch would say no more).
fn eventually(what: &str, want: &str, mut read: impl FnMut() -> Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = read();
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: wanted {want:?}, still {got:?} after 120 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn secret_value(object: &serde_json::Value, key: &str) -> String {
    use base64::Engine;
    let encoded = object["data"][key].as_str().unwrap_or_default();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap()
}

fn requested_at(object: &serde_json::Value) -> Option<String> {
    object["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
        .as_str()
        .map(String::from)
}

/// One body for both providers.
fn example_repository_comes_up_unchanged(stack: &TestStack, profile: &Path) {
    let env = [("SHOP_DOMAIN", "shop.test")];
    let started = Instant::now();
    let up = stack.run_env(profile, &["up", "--json"], &env);
    eprintln!(
        "example repository: cold up with the apps layer {:?}",
        started.elapsed()
    );
    let report = up.ok().json();
    assert!(
        !up.all().contains(SENSITIVE_VALUE),
        "a sensitive fact in up's output"
    );
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let levels = chain_level_names(&report["gitops"]);
    assert_eq!(
        &levels[levels.len() - 3..],
        ["external-secrets-crs", "infrastructure", "apps"],
        "{report}"
    );

    let rt = runtime();
    let client = kube_client(&rt, stack);
    let kustomization = |name: &str| {
        get_json(
            &rt,
            &client,
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some("flux-system"),
            name,
        )
        .unwrap_or_else(|| panic!("Kustomization {name} exists"))
    };
    for app in ["infrastructure", "apps"] {
        let object = kustomization(app);
        let ready = devstack::gitops::chain::ready_condition(&object).unwrap();
        assert_eq!(ready.status, "True", "{app}: {object}");
    }

    // Every substituted value, in the objects Flux applied.
    let config = get_json(&rt, &client, "v1", "ConfigMap", Some("shop"), "shop-config")
        .expect("the app's ConfigMap");
    let data = &config["data"];
    for (key, want) in [
        ("CLUSTER_NAME", "shop-dev"),
        ("ENVIRONMENT", "dev"),
        ("DOMAIN", "shop.test"),
        ("BUCKET", "shop-uploads-dev"),
        ("LOG_LEVEL", "debug"),
        ("FEATURE_FLAGS", "checkout,search"),
        ("AWS_REGION", "us-east-1"),
        (
            "AWS_ENDPOINT_URL",
            "http://localstack.localstack.svc.cluster.local:4566",
        ),
        ("GREETING", "Hello ${USER}"),
    ] {
        assert_eq!(data[key], want, "shop-config {key}: {config}");
    }
    let token = get_json(&rt, &client, "v1", "Secret", Some("shop"), "shop-api-token")
        .expect("the app's Secret from a sensitive fact");
    assert_eq!(secret_value(&token, "token"), SENSITIVE_VALUE);
    // The ExternalSecret of the app, synced from the seeded secret.
    eventually("Secret shop/shop-database", "24", || {
        get_json(&rt, &client, "v1", "Secret", Some("shop"), "shop-database")
            .map(|s| secret_value(&s, "password").len().to_string())
    });
    // The HelmRelease's values, from the per-release ConfigMap devstack wrote.
    let platform = || {
        get_json(
            &rt,
            &client,
            "v1",
            "ConfigMap",
            Some("platform"),
            "platform-info",
        )
    };
    let info = platform().expect("the chart's ConfigMap");
    assert_eq!(info["data"]["clusterName"], "shop-dev", "{info}");
    assert_eq!(info["data"]["domain"], "shop.test", "{info}");
    let runtime_info = get_json(
        &rt,
        &client,
        "v1",
        "ConfigMap",
        Some("flux-system"),
        "flux-runtime-info",
    )
    .expect("flux-runtime-info");
    assert_eq!(runtime_info["data"]["cluster_name"], "shop-dev");
    assert!(
        runtime_info["data"]["api_token"].is_null(),
        "{runtime_info}"
    );

    // `status` shows the apps as rows of their own.
    let status = stack.run_env(profile, &["status", "--json"], &env);
    let rows = status.ok().json()["rows"].to_string();
    for app in ["flux-system/infrastructure", "flux-system/apps"] {
        assert!(rows.contains(app), "{app} in status: {rows}");
    }

    // `facts`: sources named, the sensitive value never shown.
    let facts = stack.run_env(profile, &["facts", "--json"], &env);
    assert!(!facts.ok().all().contains(SENSITIVE_VALUE));
    let facts = facts.json();
    let row = |name: &str| {
        facts["facts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("fact {name}: {facts}"))
            .clone()
    };
    assert_eq!(row("cluster_name")["value"], "shop-dev");
    assert_eq!(
        row("cluster_name")["source"],
        "infra/outputs.json output cluster_name"
    );
    assert_eq!(row("DOMAIN")["source"], "env SHOP_DOMAIN");
    assert_eq!(row("api_token")["sensitive"], true);
    assert!(row("api_token")["value"].is_null());
    assert!(
        row("SECRET_SHOP_DB_PASSWORD_ARN")["value"]
            .as_str()
            .unwrap()
            .starts_with("arn:aws:secretsmanager:")
    );

    // A changed fact: its objects change, and only the app using it is nudged.
    let before_infrastructure = requested_at(&kustomization("infrastructure"));
    let before_apps = requested_at(&kustomization("apps"));
    stack
        .run_env(
            profile,
            &["up", "--no-verify"],
            &[("SHOP_DOMAIN", "shop2.test")],
        )
        .ok();
    let config = get_json(&rt, &client, "v1", "ConfigMap", Some("shop"), "shop-config").unwrap();
    assert_eq!(config["data"]["DOMAIN"], "shop2.test", "{config}");
    assert_ne!(
        requested_at(&kustomization("apps")),
        before_apps,
        "the app substituting DOMAIN was nudged"
    );
    assert_eq!(
        requested_at(&kustomization("infrastructure")),
        before_infrastructure,
        "infrastructure substitutes no changed fact: left alone"
    );
    eventually("the chart's domain", "shop2.test", || {
        platform().and_then(|c| c["data"]["domain"].as_str().map(String::from))
    });

    stack.run_env(profile, &["down"], &env).ok();
    assert!(
        stack.containers().is_empty(),
        "{:?} left",
        stack.containers()
    );
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn example_repository_on_k3s() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("repo");
    let profile = example_repository(&stack, "  provider: k3s\n");
    example_repository_comes_up_unchanged(&stack, &profile);
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn example_repository_on_kind() {
    const TEST: &str = "example_repository_on_kind";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    let stack = TestStack::new("repok");
    let _guard = KindGuard::new(kind, &stack);
    let profile = example_repository(&stack, "  provider: kind\n  servers: 1\n  agents: 0\n");
    example_repository_comes_up_unchanged(&stack, &profile);
}

/// The same repository from git: pushed to the kit's git server with the
/// External Secrets manifests beside it, the apps read from the
/// GitRepository, the HelmRelease's chart too.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn example_repository_from_git() {
    if !require_cluster_kit() || !gitserver_kit() {
        return;
    }
    let stack = TestStack::new("repog");
    let server = GitServer::start(&stack);
    let profile = example_repository(&stack, "  provider: k3s\n");
    let repo = WorkTree::init(profile.parent().unwrap(), &server.host_url("platform.git"));
    repo.copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/external-secrets"),
        "manifests/external-secrets",
    );
    // The shipped layout runs LocalStack in the cluster (its
    // deployment-localstack level), as a repository copied from it does.
    let text = std::fs::read_to_string(&profile)
        .unwrap()
        .replace("localstack:\n", "localstack:\n  mode: in-cluster\n")
        .replace(
        "gitops:\n  apps:\n",
        &format!(
            "gitops:\n  source: git\n  git: {{url: {}, branch: main, path: ./manifests/external-secrets}}\n  apps:\n",
            server.cluster_url("platform.git")
        ),
    );
    assert!(text.contains("source: git"), "{text}");
    std::fs::write(&profile, text).unwrap();
    repo.commit_and_push("a production-shaped repository");

    let up = stack.run_env(&profile, &["up", "--json"], &[("SHOP_DOMAIN", "git.test")]);
    let report = up.ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let levels = chain_level_names(&report["gitops"]);
    assert_eq!(
        &levels[levels.len() - 2..],
        ["infrastructure", "apps"],
        "{report}"
    );
    let rt = runtime();
    let client = kube_client(&rt, &stack);
    let apps = get_json(
        &rt,
        &client,
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some("flux-system"),
        "apps",
    )
    .unwrap();
    assert_eq!(apps["spec"]["sourceRef"]["kind"], "GitRepository", "{apps}");
    let config = get_json(&rt, &client, "v1", "ConfigMap", Some("shop"), "shop-config").unwrap();
    assert_eq!(config["data"]["DOMAIN"], "git.test", "{config}");
    let info = get_json(
        &rt,
        &client,
        "v1",
        "ConfigMap",
        Some("platform"),
        "platform-info",
    )
    .expect("the chart from the git repository");
    assert_eq!(info["data"]["clusterName"], "shop-dev", "{info}");
    stack
        .run_env(&profile, &["down"], &[("SHOP_DOMAIN", "git.test")])
        .ok();
}

/// The kit's flux CLI renders the repository offline with the facts
/// `devstack facts --dotenv` prints, and fails without them.
#[test]
#[ignore = "needs the offline kit's flux CLI: make test-cluster"]
fn flux_renders_the_example_offline_with_the_dotenv_facts() {
    let flux = bundle_dir().parent().unwrap().join("bin/flux");
    if !flux.is_file() {
        let why = format!(
            "needs the kit's flux CLI at {} (run `make kit`)",
            flux.display()
        );
        assert!(
            std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
            "{why}"
        );
        say_skipped(&why);
        return;
    }
    let stack = TestStack::new("render");
    let profile = example_repository(&stack, "  provider: k3s\n");
    let repo = profile.parent().unwrap();
    let dotenv = stack.run_env(
        &profile,
        &["facts", "--dotenv"],
        &[("SHOP_DOMAIN", "shop.test")],
    );
    assert!(!dotenv.ok().all().contains(SENSITIVE_VALUE));
    let facts = stack.dir.path().join("facts.env");
    std::fs::write(&facts, &dotenv.stdout).unwrap();

    let render = |with_facts: bool, file: &str| {
        let script = if with_facts {
            format!(
                "set -a; . '{}'; set +a; exec \"$0\" envsubst --strict < '{file}'",
                facts.display()
            )
        } else {
            format!("exec \"$0\" envsubst --strict < '{file}'")
        };
        std::process::Command::new("sh")
            .args(["-c", &script])
            .arg(&flux)
            .current_dir(repo)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    for file in [
        "apps/config.yaml",
        "apps/database.yaml",
        "apps/api-token.yaml",
        "infrastructure/platform-info.yaml",
    ] {
        let out = render(true, file);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "flux envsubst --strict {file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains("${cluster_name}"), "{text}");
        if file == "apps/config.yaml" {
            assert!(text.contains("CLUSTER_NAME: shop-dev"), "{text}");
            assert!(text.contains("DOMAIN: shop.test"), "{text}");
        }
    }
    // `flux build --dry-run` skips substituteFrom: its output, through
    // `flux envsubst`, is what the cluster's Kustomization would apply.
    let script = format!(
        "set -a; . '{}'; set +a; \"$0\" build kustomization apps --path ./apps --kustomization-file clusters/dev/apps.yaml --dry-run | \"$0\" envsubst --strict",
        facts.display()
    );
    let built = std::process::Command::new("sh")
        .args(["-c", &script])
        .arg(&flux)
        .current_dir(repo)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "flux build | flux envsubst: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    for rendered in [
        "CLUSTER_NAME: shop-dev",
        "GREETING: Hello ${USER}",
        "kind: ExternalSecret",
    ] {
        assert!(text.contains(rendered), "{rendered}:\n{text}");
    }

    let without = render(false, "apps/config.yaml");
    assert!(
        !without.status.success(),
        "strict rendering without the facts passed"
    );
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(stderr.contains("cluster_name"), "{stderr}");
}
