//! Whether a test may run here: the engine, images and kit it needs, and
//! the `SKIPPED:` line tests/run.sh counts when it may not.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::*;

/// Prints the line tests/run.sh counts as a skipped test,
/// `SKIPPED: <test>: <why>`, naming the running test (libtest runs each
/// test on a thread named after it).
pub fn say_skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    eprintln!("SKIPPED: {test}: {why}");
}

/// Whether this runs under CI (`CI` set to anything but empty, `0` or
/// `false`), where nothing may be skipped on purpose.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

/// Whether the test must skip because DEVSTACK_TEST_SKIP_DOCKER asks it
/// to. The skip never wins over a demand: a test of a required tier, or
/// any test in CI, fails instead of reporting a skip as a pass.
fn docker_skip_requested() -> bool {
    if std::env::var_os("DEVSTACK_TEST_SKIP_DOCKER").is_none() {
        return false;
    }
    assert!(
        !in_ci(),
        "DEVSTACK_TEST_SKIP_DOCKER is refused when CI is set: CI must run the Docker tier"
    );
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "DEVSTACK_TEST_SKIP_DOCKER and DEVSTACK_TEST_REQUIRE_CLUSTER are both set: a required test cannot be skipped"
    );
    true
}

/// The engine must answer: a Docker-tier test that finds none fails loudly
/// (CI installs and starts one) unless explicitly skipped outside CI.
pub fn require_docker() -> bool {
    if docker_skip_requested() {
        say_skipped("DEVSTACK_TEST_SKIP_DOCKER is set");
        return false;
    }
    let ok = Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs a Docker engine: run `make host` (or set DEVSTACK_TEST_SKIP_DOCKER=1 to skip the Docker tier outside CI)"
    );
    true
}

pub fn require_image(image: &str) {
    let ok = Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "image {image} is missing: build it with `make kit` (kit/components/localstack.sh)"
    );
}

pub fn bundle_dir() -> std::path::PathBuf {
    std::env::var_os("DEVSTACK_KIT_BUNDLE")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap())
                .join(".cache/devstack/kit/bundle")
        })
}

/// The cluster tier needs the kit; without it the test says so loudly and
/// stops, unless DEVSTACK_TEST_REQUIRE_CLUSTER demands it.
pub fn require_cluster_kit() -> bool {
    if !require_docker() {
        return false;
    }
    let image = docker(&["image", "inspect", K3S_IMAGE]).status.success();
    let bundle = bundle_dir().join("index.json").is_file();
    if image && bundle {
        return true;
    }
    let why = format!(
        "needs the kit's {K3S_IMAGE} image and bundle at {} (run `make kit`)",
        bundle_dir().display()
    );
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "{why}"
    );
    say_skipped(&why);
    false
}
