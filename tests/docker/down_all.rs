//! Docker tier: `devstack down --all` removes every stack carrying
//! devstack's labels and nothing else. It removes *every* devstack stack on
//! the machine, so it runs only where that is allowed
//! (DEVSTACK_TEST_DOWN_ALL=1, set by tests/run.sh), never on a developer's
//! machine by surprise.

use crate::common::*;

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn down_all_removes_every_labelled_stack_and_nothing_else() {
    if !require_docker() {
        return;
    }
    if std::env::var_os("DEVSTACK_TEST_DOWN_ALL").is_none() {
        say_skipped(
            "set DEVSTACK_TEST_DOWN_ALL=1 to let this test remove every devstack stack here",
        );
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let first = TestStack::new("all1");
    let second = TestStack::new("all2");
    let first_profile = first.profile("");
    let second_profile = second.profile("");
    first.run(&first_profile, &["localstack", "up"]).ok();
    second.run(&second_profile, &["localstack", "up"]).ok();
    let bystander = format!("devstack-{}-localstack-bystander", first.name);
    assert!(
        docker(&["create", "--name", &bystander, LOCALSTACK_IMAGE])
            .status
            .success()
    );

    let down = first.run(&first_profile, &["down", "--all", "--json"]);
    let report = down.ok().json();
    let stacks: Vec<&str> = report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stack"].as_str().unwrap())
        .collect();
    assert!(stacks.contains(&first.name.as_str()), "{report}");
    assert!(stacks.contains(&second.name.as_str()), "{report}");
    assert!(first.containers().is_empty() && second.containers().is_empty());
    assert!(first.networks().is_empty() && second.networks().is_empty());
    let bystander_left = docker(&["inspect", &bystander]).status.success();
    let _ = docker(&["rm", "-f", "-v", &bystander]);
    assert!(bystander_left, "an unlabelled container must be left alone");

    let again = first.run(&first_profile, &["down", "--all"]);
    assert!(
        again.ok().stderr.contains("no devstack stacks"),
        "{}",
        again.stderr
    );
}
