//! Docker tier: seeding SSM Parameter Store and the IRSA role in a real
//! LocalStack: every value source and type, the tier a value needs, the
//! ARN devstack publishes as a fact, idempotence, `--rotate`, a changed
//! type, bad input writing nothing, and no value in any output.

use crate::common::*;

const DB_URL: &str = "postgres://db-PARAM-7a1c:5432/app";
const ENV_VALUE: &str = "env-PARAM-41bd";
const CHANGED: &str = "changed-PARAM-0e0e";

fn profile(stack: &TestStack, db_url: &str, db_type: &str) -> std::path::PathBuf {
    // Over 4 KB: the Advanced tier.
    std::fs::write(stack.dir.path().join("big.txt"), "b".repeat(5000)).unwrap();
    stack.profile(&format!(
        "eso:
  auth: serviceAccount
parameters:
  - name: /dev/app/db-url
    type: {db_type}
    description: the database
    value: {db_url}
  - name: /dev/app/hosts
    type: StringList
    value: [a.internal, b.internal]
  - name: /dev/app/token
    type: SecureString
    generate: {{length: 20, charset: hex}}
  - name: /dev/app/env
    fromEnv: DEVSTACK_TEST_PARAMETER
  - name: /dev/app/config
    json: {{user: admin}}
  - name: /dev/app/big
    fromFile: big.txt
"
    ))
}

struct Stored {
    value: String,
    kind: String,
    tier: String,
    arn: String,
}

fn stored(
    rt: &tokio::runtime::Runtime,
    settings: &devstack::profile::Settings,
    name: &str,
) -> Option<Stored> {
    rt.block_on(async {
        let ssm = devstack::aws::ssm(settings);
        let p = ssm
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
            .ok()?
            .parameter?;
        let described = ssm
            .describe_parameters()
            .parameter_filters(
                aws_sdk_ssm::types::ParameterStringFilter::builder()
                    .key("Name")
                    .option("Equals")
                    .values(name)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
        let tier = described
            .parameters()
            .first()
            .and_then(|d| d.tier())
            .map(|t| t.as_str().to_string())
            .unwrap_or_default();
        Some(Stored {
            value: p.value.unwrap_or_default(),
            kind: p.r#type.map(|t| t.as_str().to_string()).unwrap_or_default(),
            tier,
            arn: p.arn.unwrap_or_default(),
        })
    })
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn parameters_and_the_role_are_seeded_converged_and_rotated_without_leaking_values() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("ssm");
    let first_profile = profile(&stack, DB_URL, "String");
    let env = [("DEVSTACK_TEST_PARAMETER", ENV_VALUE)];
    let mut transcript = String::new();
    let mut run = |profile: &std::path::Path, args: &[&str]| {
        let r = stack.run_env(profile, args, &env);
        transcript.push_str(&r.all());
        r
    };
    run(&first_profile, &["localstack", "up"]).ok();
    let settings = aws::settings(&first_profile);
    let rt = runtime();

    let dry = run(&first_profile, &["seed", "--dry-run", "--json"]);
    let report = dry.ok().json();
    assert_eq!(
        report["parameters"].as_array().unwrap().len(),
        6,
        "{report}"
    );
    assert!(
        stored(&rt, &settings, "/dev/app/db-url").is_none(),
        "a dry run writes nothing"
    );

    let seeded = run(&first_profile, &["seed", "--json"]);
    let report = seeded.ok().json();
    let outcomes: Vec<&str> = report["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["created"; 6], "{report}");
    assert_eq!(report["role"]["outcome"], "created", "{report}");
    assert_eq!(
        report["role"]["arn"],
        devstack::seed::role::role_arn(&settings)
    );

    let db = stored(&rt, &settings, "/dev/app/db-url").unwrap();
    assert_eq!((db.value.as_str(), db.kind.as_str()), (DB_URL, "String"));
    assert_eq!(db.tier, "Standard");
    // The ARN devstack publishes as a fact is the one LocalStack gives.
    let facts = devstack::gitops::source::facts(&settings, None, &Default::default());
    assert_eq!(facts["PARAMETER_DEV_APP_DB_URL_ARN"], db.arn);
    let hosts = stored(&rt, &settings, "/dev/app/hosts").unwrap();
    assert_eq!(
        (hosts.value.as_str(), hosts.kind.as_str()),
        ("a.internal,b.internal", "StringList")
    );
    let token = stored(&rt, &settings, "/dev/app/token").unwrap();
    assert_eq!(token.kind, "SecureString");
    assert_eq!(token.value.len(), 20);
    assert_eq!(
        stored(&rt, &settings, "/dev/app/env").unwrap().value,
        ENV_VALUE
    );
    assert_eq!(
        stored(&rt, &settings, "/dev/app/config").unwrap().value,
        r#"{"user":"admin"}"#
    );
    let big = stored(&rt, &settings, "/dev/app/big").unwrap();
    assert_eq!((big.value.len(), big.tier.as_str()), (5000, "Advanced"));
    assert!(
        seeded.stderr.contains("in the Advanced tier"),
        "the user is told: {}",
        seeded.stderr
    );

    // The role, with IRSA's trust policy.
    let policy = rt.block_on(async {
        devstack::aws::iam(&settings)
            .get_role()
            .role_name(devstack::seed::role::role_name(&settings))
            .send()
            .await
            .unwrap()
            .role
            .unwrap()
            .assume_role_policy_document
            .unwrap()
    });
    assert_eq!(
        devstack::seed::role::trust_policy_problem(&settings, &policy),
        None
    );

    // Again: nothing changes, the generated value is kept.
    let again = run(&first_profile, &["seed", "--json"]).ok().json();
    let outcomes: Vec<&str> = again["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["unchanged"; 6], "{again}");
    assert_eq!(again["role"]["outcome"], "unchanged");
    assert_eq!(
        stored(&rt, &settings, "/dev/app/token").unwrap().value,
        token.value
    );

    // --rotate: a new generated value.
    run(&first_profile, &["seed", "--rotate"]).ok();
    assert_ne!(
        stored(&rt, &settings, "/dev/app/token").unwrap().value,
        token.value
    );

    // A changed value and type: updated, replaced as SSM requires.
    let second_profile = profile(&stack, CHANGED, "SecureString");
    let changed = run(&second_profile, &["seed", "--json"]).ok().json();
    let db_result = changed["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "/dev/app/db-url")
        .unwrap()
        .clone();
    assert_eq!(db_result["outcome"], "updated", "{changed}");
    assert_eq!(db_result["changed"], serde_json::json!(["value", "type"]));
    let db = stored(&rt, &settings, "/dev/app/db-url").unwrap();
    assert_eq!(
        (db.value.as_str(), db.kind.as_str()),
        (CHANGED, "SecureString")
    );

    // A trust policy someone changed is put right.
    rt.block_on(async {
        devstack::aws::iam(&settings)
            .update_assume_role_policy()
            .role_name(devstack::seed::role::role_name(&settings))
            .policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#)
            .send()
            .await
            .unwrap();
    });
    let fixed = run(&second_profile, &["seed", "--json"]).ok().json();
    assert_eq!(fixed["role"]["outcome"], "updated", "{fixed}");

    for value in [DB_URL, ENV_VALUE, CHANGED, token.value.as_str()] {
        assert!(!transcript.contains(value), "a value was printed");
    }
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn a_missing_variable_fails_before_any_parameter_is_written() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("ssmbad");
    let profile = stack.profile(
        "parameters:\n  - name: /ok/first\n    value: v1\n  - name: /bad/env\n    fromEnv: DEVSTACK_TEST_UNSET_PARAMETER\n",
    );
    stack.run(&profile, &["localstack", "up"]).ok();
    let run = stack.run(&profile, &["seed"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr.contains(
            "parameter `/bad/env` reads environment variable DEVSTACK_TEST_UNSET_PARAMETER, which is not set"
        ),
        "{}",
        run.stderr
    );
    let settings = aws::settings(&profile);
    assert!(
        stored(&runtime(), &settings, "/ok/first").is_none(),
        "nothing may be written on bad input"
    );
}
