//! CLI surface: help text and error output, checked as snapshots.

use std::process::Command;

pub(crate) fn devstack(args: &[&str], cwd: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_devstack"))
        .args(args)
        .current_dir(cwd)
        .env("CI", "true")
        .env("NO_COLOR", "1")
        .env("COLUMNS", "100")
        .env_remove("DEVSTACK_PROFILE")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn manifest_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn help_texts() {
    for args in [
        vec!["--help"],
        vec!["up", "--help"],
        vec!["down", "--help"],
        vec!["stop", "--help"],
        vec!["start", "--help"],
        vec!["sync", "--help"],
        vec!["profile", "--help"],
        vec!["localstack", "--help"],
        vec!["cluster", "--help"],
        vec!["seed", "--help"],
        vec!["verify", "--help"],
        vec!["status", "--help"],
        vec!["diagnose", "--help"],
        vec!["env", "--help"],
        vec!["load", "--help"],
        vec!["doctor", "--help"],
        vec!["snapshot", "--help"],
        vec!["logs", "--help"],
        vec!["kubeconfig", "--help"],
        vec!["pull", "--help"],
        vec!["list", "--help"],
        vec!["version", "--help"],
        vec!["localstack", "logs", "--help"],
        vec!["snapshot", "import", "--help"],
    ] {
        let (code, stdout, _) = devstack(&args, &manifest_dir());
        assert_eq!(code, 0);
        insta::assert_snapshot!(format!("help_{}", args.join("_").replace("--", "")), stdout);
    }
}

/// devstack run in `home` with its state in `home/state`, taking no
/// profile or stack name from the environment.
pub(crate) fn devstack_in_home(home: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_devstack"));
    command
        .args(args)
        .current_dir(home)
        .env("CI", "true")
        .env("NO_COLOR", "1")
        .env("DEVSTACK_HOME", home.join("state"))
        .env_remove("DEVSTACK_PROFILE")
        .env_remove("DEVSTACK_NAME");
    command
}

/// Exit code, stdout and stderr of a finished run.
pub(crate) fn outcome(out: std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// devstack with its state in `home`, for the snapshot store, on the ci
/// profile when the command reads a stack (the others refuse `--profile`).
fn devstack_at(home: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut command = devstack_in_home(home, args);
    let path: Vec<&str> = args.iter().take(2).copied().collect();
    let stackless = (1..=path.len())
        .any(|n| devstack::cli::unused_global_options(&path[..n]).contains(&"profile"));
    if !stackless {
        command.args(["--profile", "ci"]);
    }
    outcome(command.output().unwrap())
}

#[test]
fn snapshot_commands_refuse_what_they_cannot_use_with_a_hint() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = devstack_at(home.path(), &["snapshot", "list", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()["snapshots"],
        serde_json::json!([])
    );
    let (code, _, stderr) = devstack_at(home.path(), &["snapshot", "list"]);
    assert_eq!(code, 0);
    assert!(stderr.contains("no snapshots in"), "{stderr}");

    let refused = |args: &[&str], message: &str| {
        let (code, _, stderr) = devstack_at(home.path(), args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: no `{message}` in {stderr}"
        );
        assert!(stderr.contains("hint:"), "{args:?}: {stderr}");
    };
    refused(&["snapshot", "rm", "nope"], "there is no snapshot `nope`");
    // The store is the same whatever the stack: no command in the hint
    // carries a stack's name, even one from the environment.
    let (code, _, stderr) = outcome(
        devstack_in_home(home.path(), &["snapshot", "rm", "nope"])
            .env("DEVSTACK_NAME", "nosuch")
            .output()
            .unwrap(),
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("hint: `devstack snapshot list` shows the snapshots"),
        "{stderr}"
    );
    assert!(!stderr.contains("--name"), "{stderr}");
    refused(
        &["up", "--from-snapshot", "nope"],
        "there is no snapshot `nope`",
    );
    refused(
        &["snapshot", "save", "Bad/Name"],
        "not a valid snapshot name",
    );
    refused(
        &["snapshot", "export", "nope", "out.tar"],
        "there is no snapshot `nope`",
    );
    // Input is judged before any engine is reached: the same without one.
    for args in [
        &["snapshot", "save", "Bad/Name"][..],
        &["up", "--from-snapshot", "nope"],
    ] {
        let mut command = devstack_in_home(home.path(), args);
        command.env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
        let (code, _, stderr) = outcome(command.output().unwrap());
        assert_eq!(code, 2, "{args:?} without an engine: {stderr}");
    }
    std::fs::write(home.path().join("junk.tar"), b"not a tar archive at all").unwrap();
    refused(
        &["snapshot", "import", "junk.tar"],
        "is not a devstack snapshot file",
    );
    refused(
        &["snapshot", "import", "missing.tar"],
        "cannot read missing.tar",
    );
    // A tar whose first entry is no manifest.
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(2);
    header.set_mode(0o600);
    builder
        .append_data(&mut header, "other.txt", &b"hi"[..])
        .unwrap();
    std::fs::write(home.path().join("other.tar"), builder.into_inner().unwrap()).unwrap();
    refused(&["snapshot", "import", "other.tar"], "not manifest.json");
    let store = home.path().join("state/snapshots");
    let left: Vec<_> = std::fs::read_dir(&store)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a refused import leaves nothing: {left:?}");
}

#[test]
fn completions_of_every_shell_name_the_commands() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let (code, stdout, stderr) = devstack(&["completions", shell], &manifest_dir());
        assert_eq!(code, 0, "{shell}: {stderr}");
        for command in ["up", "snapshot", "kubeconfig", "logs", "completions"] {
            assert!(
                stdout.contains(command),
                "{shell} completions do not name `{command}`"
            );
        }
    }
    let (code, _, stderr) = devstack(&["completions", "tcsh"], &manifest_dir());
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn man_pages_render_for_devstack_and_its_commands() {
    let (code, page, stderr) = devstack(&["man", "up"], &manifest_dir());
    assert_eq!(code, 0, "{stderr}");
    assert!(page.contains(".TH devstack-up 1"), "{page}");
    assert!(
        page.contains(".SH NAME\ndevstack\\-up \\- Bring the whole stack up"),
        "{page}"
    );
    assert!(page.contains("Examples:"), "{page}");
    let (code, page, _) = devstack(&["man"], &manifest_dir());
    assert_eq!(code, 0);
    assert!(page.contains(".SH NAME\ndevstack \\- "), "{page}");
    let (code, _, stderr) = devstack(&["man", "snapshot", "nope"], &manifest_dir());
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("hint: commands there: save, list"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man");
    let (code, _, stderr) = devstack(
        &["man", "--out-dir", out.to_str().unwrap()],
        &manifest_dir(),
    );
    assert_eq!(code, 0, "{stderr}");
    for page in ["devstack.1", "devstack-logs.1", "devstack-snapshot-save.1"] {
        assert!(out.join(page).is_file(), "{page}: {stderr}");
    }
}

#[test]
fn kubeconfig_of_a_stack_without_a_cluster_is_unhealthy_with_a_hint() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = devstack_at(home.path(), &["kubeconfig", "--path"]);
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("has no cluster"), "{stderr}");
    assert!(
        stderr.contains("hint: create the stack with `devstack -p ci up`"),
        "the hint carries the flags that reach the stack: {stderr}"
    );

    let kubeconfig = home.path().join("state/stacks/ci/kubeconfig");
    std::fs::create_dir_all(kubeconfig.parent().unwrap()).unwrap();
    std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
    let (code, stdout, stderr) = devstack_at(home.path(), &["kubeconfig", "--path"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim_end(), kubeconfig.display().to_string());
    let (_, stdout, _) = devstack_at(home.path(), &["kubeconfig"]);
    assert_eq!(stdout, "apiVersion: v1\nkind: Config\n");
    let (_, stdout, _) = devstack_at(home.path(), &["kubeconfig", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["context"], "devstack-ci");
    assert!(json.get("kubeconfig").is_none(), "no credentials in JSON");
}

#[test]
fn profile_errors_render_with_position_and_hint() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("typo.yaml"),
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: demo\nlocalstack:\n  prot: 4566\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("version.yaml"),
        "apiVersion: devstack.dev/v2\nkind: Profile\nname: demo\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("type.yaml"),
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: demo\ntimeouts:\n  cluster: soon\n",
    )
    .unwrap();
    let (code, stdout, stderr) = devstack(
        &[
            "profile",
            "validate",
            "typo.yaml",
            "version.yaml",
            "type.yaml",
        ],
        dir.path(),
    );
    assert_eq!(code, 2, "user errors exit 2");
    assert_eq!(stdout, "");
    insta::assert_snapshot!("profile_validate_errors", stderr);
}

#[test]
fn profile_validate_reports_every_error_of_a_file() {
    let (code, stdout, stderr) = devstack(
        &["profile", "validate", "tests/fixtures/three-mistakes.yaml"],
        &manifest_dir(),
    );
    assert_eq!(code, 2, "user errors exit 2");
    assert_eq!(stdout, "");
    insta::assert_snapshot!("profile_validate_three_errors", stderr);
}

#[test]
fn unknown_profile_name_suggests_the_closest_shipped_one() {
    let (code, _, stderr) = devstack(&["profile", "show", "--profile", "dve"], &manifest_dir());
    assert_eq!(code, 2);
    insta::assert_snapshot!("unknown_profile", stderr);
}

#[test]
fn shipped_profiles_validate_from_disk() {
    let (code, _, stderr) = devstack(
        &[
            "profile",
            "validate",
            "profiles/dev.yaml",
            "profiles/ci.yaml",
            "profiles/demo.yaml",
        ],
        &manifest_dir(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr.matches("valid (stack").count(), 3, "{stderr}");
}

#[test]
fn readme_lists_every_environment_variable_devstack_reads() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    for (name, _) in devstack::envvars::ALL {
        assert!(
            readme.contains(&format!("`{name}`")),
            "README.md does not document {name}"
        );
    }
}

/// `--version`, `version` and `version --json` name the build: the commit
/// this checkout had when it was built, the day and the target.
#[test]
fn version_names_the_commit_date_and_target_of_the_build() {
    use devstack::versions::build;
    let line = format!(
        "devstack {} (commit {}, built {}, {})",
        env!("CARGO_PKG_VERSION"),
        build::COMMIT,
        build::DATE,
        build::TARGET
    );
    let (code, stdout, stderr) = devstack(&["--version"], &manifest_dir());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim_end(), line);
    let (code, stdout, _) = devstack(&["version"], &manifest_dir());
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().next(), Some(line.as_str()), "{stdout}");
    let (code, stdout, _) = devstack(&["version", "--json"], &manifest_dir());
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        json["build"],
        serde_json::json!({"commit": build::COMMIT, "date": build::DATE, "target": build::TARGET})
    );

    // What build.rs found is this checkout's (its own tests cover the rest).
    assert!(
        build::TARGET.contains(std::env::consts::ARCH)
            && build::TARGET.contains(std::env::consts::OS),
        "{}",
        build::TARGET
    );
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    let date: Vec<&str> = build::DATE.split('-').collect();
    let widths: Vec<usize> = date.iter().map(|part| part.len()).collect();
    assert!(
        widths == [4, 2, 2] && date.iter().all(|part| digits(part)),
        "{}",
        build::DATE
    );
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(manifest_dir())
        .output();
    match head {
        Ok(out) if out.status.success() => {
            let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let built = build::COMMIT.trim_end_matches("-dirty");
            assert_eq!(built, sha, "built from {}, HEAD is {sha}", build::COMMIT);
        }
        _ => eprintln!(
            "SKIPPED: version_names_the_commit_date_and_target_of_the_build: this checkout is no git repository, so its commit cannot be compared"
        ),
    }
}

#[test]
fn version_json_prints_the_matrix_and_the_pins_in_effect() {
    use devstack::versions;
    let (code, stdout, stderr) = devstack(&["version", "--json"], &manifest_dir());
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["devstack"], env!("CARGO_PKG_VERSION"));
    assert!(json["build"]["commit"].is_string(), "{json}");
    let components = json["components"].as_array().unwrap();
    assert_eq!(components.len(), versions::MATRIX.len());
    for (row, c) in components.iter().zip(versions::MATRIX) {
        assert_eq!(row["id"], c.id);
        assert_eq!(row["default"], c.default);
        assert_eq!(row["testedWith"], c.tested_with);
        assert_eq!(row["newestUpstream"], c.newest_upstream);
    }
    let eso = components.iter().find(|c| c["id"] == "eso-chart").unwrap();
    assert_eq!(eso["default"], versions::ESO_CHART_VERSION);
    let (major, minor) = versions::ESO_KUBERNETES.tested_up_to.unwrap();
    assert_eq!(eso["kubernetes"]["testedUpTo"], format!("{major}.{minor}"));
    let (a, b, c) = versions::FLUX_KUBERNETES.min.unwrap();
    assert_eq!(json["kubernetes"]["flux"]["min"], format!("{a}.{b}.{c}"));
    let node = versions::KIND_NODE_IMAGES
        .iter()
        .find(|p| p.reference == versions::KIND_NODE_IMAGE)
        .expect("the default Kind node image is one kind publishes");
    assert_eq!(json["pins"]["images"][node.reference], node.digest);
    assert_eq!(
        json["pins"]["files"][versions::FLUX_INSTALL.url],
        format!("sha256:{}", versions::FLUX_INSTALL.sha256)
    );
    assert!(json["pins"].get("replacedBy").is_none(), "{}", json["pins"]);

    let (code, plain, _) = devstack(&["version"], &manifest_dir());
    assert_eq!(code, 0);
    for c in versions::MATRIX {
        assert!(plain.contains(c.default), "{plain}");
    }
    assert!(
        plain.contains(&format!("{}@{}", node.reference, node.digest)),
        "{plain}"
    );

    // A pins file replaces the pins it names, and says so.
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("pins.json");
    let digest = format!("sha256:{}", "cd".repeat(32));
    std::fs::write(
        &pins,
        serde_json::json!({"apiVersion": "devstack.dev/v1alpha1", "kind": "Pins",
            "images": {(versions::KIND_NODE_IMAGE): digest}})
        .to_string(),
    )
    .unwrap();
    let out = assert_cmd::Command::cargo_bin("devstack")
        .unwrap()
        .args(["version", "--json"])
        .env("DEVSTACK_PINS", &pins)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["pins"]["replacedBy"], pins.display().to_string());
    assert_eq!(json["pins"]["images"][versions::KIND_NODE_IMAGE], digest);
}

/// README's version table is the matrix in `src/versions.rs`, rendered:
/// change one, and this fails until the other agrees.
#[test]
fn readme_version_table_matches_the_matrix() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    let expected = devstack::versions::markdown_table();
    let start = readme
        .find("| component | default | tested with |")
        .expect("README.md has a version table");
    let table: String = readme[start..]
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        table, expected,
        "README.md's version table differs from src/versions.rs; paste the expected table above"
    );
}

/// README is for users: at most 400 lines, and its one-line-per-command
/// list (the `## Commands` section) names exactly the subcommands
/// `devstack --help` lists, as `devstack <name>` in backquotes.
#[test]
fn readme_lists_exactly_the_commands_help_lists_and_stays_short() {
    use std::collections::BTreeSet;
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "README.md has {lines} lines; keep it at most 400 and move details to docs/"
    );

    let (code, help, stderr) = devstack(&["--help"], &manifest_dir());
    assert_eq!(code, 0, "{stderr}");
    // Under "Commands:", a command's line starts with two spaces and its
    // name; a wrapped description continues further indented.
    let in_help: BTreeSet<&str> = help
        .lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(
        in_help.contains("up") && in_help.contains("snapshot"),
        "no commands parsed from --help:\n{help}"
    );

    let section: Vec<&str> = readme
        .lines()
        .skip_while(|l| l.trim_end() != "## Commands")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect();
    assert!(
        !section.is_empty(),
        "README.md has no `## Commands` section"
    );
    let mut in_readme = BTreeSet::new();
    for line in &section {
        for (at, _) in line.match_indices("`devstack ") {
            let word: String = line[at + "`devstack ".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if word.starts_with(|c: char| c.is_ascii_lowercase()) {
                in_readme.insert(word);
            }
        }
    }
    let in_readme: BTreeSet<&str> = in_readme.iter().map(String::as_str).collect();
    let missing: Vec<_> = in_help.difference(&in_readme).collect();
    let unknown: Vec<_> = in_readme.difference(&in_help).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "README.md's `## Commands` list and `devstack --help` differ: \
         missing from README {missing:?}, not in --help {unknown:?}"
    );
}

#[test]
fn profile_validate_takes_shipped_profile_names_as_profile_does() {
    let (code, stdout, stderr) = devstack(
        &["profile", "validate", "dev", "ci", "demo", "--json"],
        &manifest_dir(),
    );
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["valid"], true, "{json}");
    let names: Vec<&str> = devstack::profile::SHIPPED.iter().map(|(n, _)| *n).collect();
    let validated: Vec<&str> = json["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["file"].as_str().unwrap())
        .collect();
    assert_eq!(validated, names);
    assert!(
        stderr.contains("✓ ci: valid (stack `ci`, provider k3s)"),
        "{stderr}"
    );

    // A file of that name wins, as with --profile.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ci"),
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: Bad_Name\n",
    )
    .unwrap();
    let (code, _, stderr) = devstack(&["profile", "validate", "ci"], dir.path());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("error: invalid profile ci:3:"), "{stderr}");

    let (code, _, stderr) = devstack(&["profile", "validate", "cj"], dir.path());
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "error: profile `cj` not found: no such file and no shipped profile of that name\n\
             hint: did you mean the shipped profile `ci`?"
        ),
        "{stderr}"
    );
}

#[test]
fn the_context_variable_runs_the_stack_on_the_existing_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let show = |env: &[(&str, &str)]| {
        let out = devstack_in_home(dir.path(), &["profile", "show", "--origins", "--json"])
            .env_remove("DEVSTACK_PROVIDER")
            .env_remove("DEVSTACK_CONTEXT")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let settings = show(&[("DEVSTACK_CONTEXT", "kind-ci")]);
    assert_eq!(settings["cluster"]["provider"], "existing", "{settings}");
    assert_eq!(settings["cluster"]["context"], "kind-ci");
    assert_eq!(settings["origins"]["cluster.provider"], "env");
    assert_eq!(settings["localstack"]["mode"], "in-cluster");
    let settings = show(&[]);
    assert_eq!(settings["cluster"]["provider"], "kind", "{settings}");
}

/// `devstack ARGS` in a fresh home, with no provider or context from the
/// environment but `env`: exit code, stdout, stderr.
fn profile_run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = devstack_in_home(dir.path(), args)
        .env_remove("DEVSTACK_PROVIDER")
        .env_remove("DEVSTACK_CONTEXT")
        .env_remove("DEVSTACK_LOCALSTACK_PORT")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    outcome(out)
}

#[test]
fn shipped_profiles_run_on_an_existing_cluster_with_their_node_shape_set_aside() {
    for profile in ["ci", "dev", "demo"] {
        let notice =
            format!("of the shipped profile {profile}: they shape a cluster devstack creates");
        let args = [
            "-p",
            profile,
            "--context",
            "kind-x",
            "profile",
            "show",
            "--json",
        ];
        let (code, stdout, stderr) = profile_run(&args, &[]);
        assert_eq!(code, 0, "{profile}: {stderr}");
        assert!(
            stderr.contains("warning: ignoring cluster.servers"),
            "{stderr}"
        );
        assert!(stderr.contains(&notice), "{stderr}");
        assert_eq!(stderr.matches("warning:").count(), 1, "told once: {stderr}");
        let settings: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(settings["cluster"]["provider"], "existing", "{settings}");
        assert_eq!(settings["cluster"]["context"], "kind-x", "{settings}");

        let args = ["-p", profile, "profile", "show"];
        let (code, _, stderr) = profile_run(&args, &[("DEVSTACK_CONTEXT", "kind-x")]);
        assert_eq!(code, 0, "{profile}: {stderr}");
        assert!(
            stderr.contains("and `DEVSTACK_CONTEXT=kind-x` uses a cluster devstack did not create"),
            "{stderr}"
        );
    }
    let args = ["profile", "validate", "ci", "dev", "demo", "--json"];
    let (code, stdout, stderr) = profile_run(&args, &[("DEVSTACK_CONTEXT", "kind-x")]);
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["valid"], true, "{report}");
    for checked in report["profiles"].as_array().unwrap() {
        let notices = checked["notices"].to_string();
        assert!(notices.contains("ignoring cluster.servers"), "{checked}");
    }
    assert!(stderr.contains("warning: ci: ignoring"), "{stderr}");

    // A context beside a provider that creates the cluster is refused.
    let args = ["--provider", "kind", "--context", "foo", "profile", "show"];
    let (code, _, stderr) = profile_run(&args, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("error: `--provider kind` creates a cluster, and `--context foo` names one that exists\nhint: drop `--provider`"),
        "{stderr}"
    );
}

#[test]
fn profile_validate_refuses_what_up_would() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("v.yaml"),
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: v\ncluster:\n  provider: kind\n  version: v1.33.5\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: v\ncluster:\n  provider: kind\n    servers: 1\n",
    )
    .unwrap();
    let (code, stdout, stderr) = devstack(
        &["profile", "validate", "v.yaml", "bad.yaml", "."],
        dir.path(),
    );
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stdout, "");
    for part in [
        "error: invalid profile v.yaml: `cluster.version: v1.33.5` has no published kind node image that devstack knows",
        "hint: set `cluster.version` to one of",
        // A YAML syntax error has its hint too.
        "error: invalid profile bad.yaml:6:12:",
        "hint: quote a value that holds `: `",
        "error: profile `.` is a directory, not a profile file\nhint: pass the profile file itself",
    ] {
        assert!(stderr.contains(part), "{part}:\n{stderr}");
    }
}

#[test]
fn origins_call_the_built_in_default_s_values_defaults() {
    let (code, stdout, stderr) = profile_run(&["profile", "show", "--origins", "--json"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let settings: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(settings["origins"]["name"], "default", "{settings}");
    assert_eq!(
        settings["origins"]["images.downloadMirror"], "default",
        "{settings}"
    );
}

#[test]
fn show_says_when_up_settles_the_provider_itself() {
    let (code, stdout, stderr) = profile_run(&["profile", "show"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("provider: kind"), "{stdout}");
    assert!(
        stderr
            .contains("cluster.provider is not pinned: a new stack uses Kind when kind is on PATH"),
        "{stderr}"
    );
    let (code, _, stderr) = profile_run(&["-p", "ci", "profile", "show"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("not pinned"), "ci pins k3s: {stderr}");
}

#[test]
fn a_bad_port_variable_names_the_forms_a_port_takes() {
    for bad in ["abc", "70000"] {
        let (code, _, stderr) =
            profile_run(&["profile", "show"], &[("DEVSTACK_LOCALSTACK_PORT", bad)]);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("hint: use a number from 1 to 65535, or `auto` (or 0) for a free port, or unset DEVSTACK_LOCALSTACK_PORT"),
            "{stderr}"
        );
    }
    let (code, _, stderr) = profile_run(&["localstack", "up", "--port", "abc"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("use a number from 1 to 65535, or `auto` (or 0) for a free port"),
        "{stderr}"
    );
}

/// U4: a global option a command has no use for is refused, naming it,
/// rather than silently ignored; its variable may stay set.
#[test]
fn global_options_a_command_has_no_use_for_are_refused() {
    for (args, option, command) in [
        (vec!["-p", "nosuch", "version"], "--profile", "version"),
        (vec!["--name", "BAD", "list"], "--name", "list"),
        (
            vec!["-p", "nosuch", "completions", "bash"],
            "--profile",
            "completions",
        ),
        (
            vec!["completions", "bash", "--json"],
            "--json",
            "completions",
        ),
        (vec!["man", "--json"], "--json", "man"),
        (
            vec!["--provider", "k3s", "profile", "list"],
            "--provider",
            "profile list",
        ),
        (
            vec!["--bundle", "b", "snapshot", "rm", "x"],
            "--bundle",
            "snapshot rm",
        ),
        (
            vec!["profile", "validate", "ci", "--context", "c"],
            "--context",
            "profile validate",
        ),
    ] {
        let (code, stdout, stderr) = devstack(&args, &manifest_dir());
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}: nothing runs");
        assert!(
            stderr.starts_with(&format!(
                "error: {option} has no effect on `devstack {command}`: "
            )),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("hint: leave {option} out")),
            "{args:?}: {stderr}"
        );
    }
    // What those commands do take, and the variables of the refused flags.
    let home = tempfile::tempdir().unwrap();
    for args in [
        vec!["version", "--json"],
        vec!["-q", "list", "--json"],
        vec!["profile", "list", "--json"],
        vec!["completions", "bash", "-q"],
    ] {
        let (code, _, stderr) = outcome(
            devstack_in_home(home.path(), &args)
                .env("DEVSTACK_PROFILE", "nosuch")
                .env("DEVSTACK_NAME", "BAD")
                .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
                .output()
                .unwrap(),
        );
        assert_eq!(code, 0, "{args:?}: {stderr}");
    }
    // A command that reads a stack still takes them all.
    let (code, _, stderr) = devstack(
        &[
            "-p",
            "ci",
            "--name",
            "job1",
            "--provider",
            "k3s",
            "profile",
            "show",
            "--json",
        ],
        &manifest_dir(),
    );
    assert_eq!(code, 0, "{stderr}");
}
