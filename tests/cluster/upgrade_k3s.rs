//! Cluster tier: the upgrade path. A stack made with the previous release's
//! defaults (ESO chart 0.19.2, LocalStack 4.3.0) converges with a plain `up`
//! to the current ones: LocalStack recreated on the new image and re-seeded,
//! the CRDs applied server-side over the old ones, Flux upgrading the
//! HelmRelease, and the round trip green before and after.

use crate::common::*;

const OLD_ESO_CHART: &str = "0.19.2";
const OLD_LOCALSTACK: &str = "localstack/localstack:4.3.0";

/// profiles/ci.yaml for this stack, from the bundle, optionally pinned to
/// the previous release's versions.
fn ci_profile(stack: &TestStack, previous_release: bool) -> std::path::PathBuf {
    let profile = profile::ci(&stack.name);
    if previous_release {
        profile
            .localstack(&format!("  image: {OLD_LOCALSTACK}\n"))
            .append(&format!("eso:\n  chartVersion: {OLD_ESO_CHART}\n"))
            .write(&stack.dir.path().join("previous.yaml"))
    } else {
        profile.write(&stack.dir.path().join("current.yaml"))
    }
}

/// Whether the bundle carries the previous release's pieces (the kit builds
/// them for this test); otherwise the test says why it cannot run.
fn bundle_has_previous_release() -> bool {
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle_dir().join("index.json")).unwrap())
            .unwrap();
    let artifacts = index["artifacts"].as_array().cloned().unwrap_or_default();
    let chart = artifacts.iter().any(|a| {
        a["kind"] == "eso-chart"
            && a["version"].as_str().map(|v| v.trim_start_matches('v')) == Some(OLD_ESO_CHART)
    });
    let localstack = docker(&["image", "inspect", OLD_LOCALSTACK])
        .status
        .success();
    if chart && localstack {
        return true;
    }
    let why = format!(
        "the kit lacks ESO chart {OLD_ESO_CHART} or {OLD_LOCALSTACK} (kit/components/eso.sh, localstack.sh build both releases)"
    );
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "{why}"
    );
    say_skipped(&why);
    false
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn a_stack_of_the_previous_release_upgrades_with_up() {
    if !require_cluster_kit() || !bundle_has_previous_release() {
        return;
    }
    let stack = TestStack::new("upgrade");
    let rt = runtime();

    let previous = ci_profile(&stack, true);
    let report = stack.run(&previous, &["up", "--json"]).ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let localstack = format!("devstack-{}-localstack", stack.name);
    let image = docker(&["inspect", "-f", "{{.Config.Image}}", &localstack]);
    assert_eq!(
        String::from_utf8_lossy(&image.stdout).trim(),
        OLD_LOCALSTACK
    );
    assert!(
        eso_operator_image(&rt, &stack).ends_with(&format!(":v{OLD_ESO_CHART}")),
        "{}",
        eso_operator_image(&rt, &stack)
    );

    let current = ci_profile(&stack, false);
    let upgraded = stack.run(&current, &["up", "--json"]);
    let report = upgraded.ok().json();
    assert_eq!(report["created"], false, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(
        report["gitops"]["chain"]["failures"]
            .as_array()
            .map(Vec::len),
        Some(0),
        "{report}"
    );
    let repaired = serde_json::to_string(&report["repaired"]).unwrap();
    assert!(repaired.contains("LocalStack recreated"), "{report}");
    let image = docker(&["inspect", "-f", "{{.Config.Image}}", &localstack]);
    assert_eq!(
        String::from_utf8_lossy(&image.stdout).trim(),
        devstack::versions::LOCALSTACK_IMAGE
    );
    let operator = eso_operator_image(&rt, &stack);
    assert!(
        operator.ends_with(&format!(":v{}", devstack::versions::ESO_CHART_VERSION)),
        "{operator}"
    );
    assert_running_versions_match_the_matrix(&stack, devstack::versions::K3S_IMAGE);
    // The seeded secret came back with the new LocalStack, and the cluster
    // still has it synced: its Secret holds the value LocalStack holds now
    // (ESO given a few seconds for a sync in flight).
    assert_eq!(report["seed"]["created"], 1, "{report}");
    let status = stack.run(&current, &["status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.all());
    let status = status.json();
    assert_eq!(status["settled"], true, "{status}");
    let port = status["ports"]["localstack"]
        .as_u64()
        .expect("LocalStack port") as u16;
    let settings = settings(&current).with_localstack_port(port);
    let remote = rt
        .block_on(secret_value(&settings, "ci/app/token"))
        .expect("ci/app/token in LocalStack");
    let client = kube_client(&rt, &stack);
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client, "default");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let synced = rt
            .block_on(secrets.get_opt("app-token"))
            .unwrap()
            .and_then(|s| s.data)
            .and_then(|d| d.get("value").map(|v| v.0.clone()));
        if synced.as_deref() == Some(remote.as_bytes()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Secret default/app-token does not hold LocalStack's ci/app/token 30 s after the upgrade ({})",
            match synced {
                None => "no Secret or no `value` key".to_string(),
                Some(v) => format!("it holds another value of {} bytes", v.len()),
            }
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }

    stack.run(&current, &["down"]).ok();
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
}
