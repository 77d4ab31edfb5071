//! Unit tests of profile loading and resolution: positions, hints,
//! precedence, every error in one run, limits.

use std::collections::HashMap;
use std::path::PathBuf;

use super::load::{Position, parse_for_test};
use super::resolve::resolve_with_env;
use super::schema::{HostPort, Provider};
use super::settings::{Origin, Overrides, SecretSource};

/// `parameters` and `eso.auth`.
mod parameters;

const HEADER: &str = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\n";

/// The one error of a profile with one mistake.
fn err_of(text: &str) -> super::ProfileError {
    let mut errors = parse_for_test(text)
        .expect_err("profile should be rejected")
        .0;
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.remove(0)
}

fn at(line: u64, column: u64) -> Option<Position> {
    Some(Position { line, column })
}

#[test]
fn unknown_key_names_key_parent_position_and_closest_match() {
    let text = format!("{HEADER}name: x\nlocalstack:\n  prot: 4566\n");
    let err = err_of(&text);
    assert_eq!(err.position, at(5, 3));
    assert_eq!(err.message, "unknown key `prot` in `localstack`");
    let hint = err.hint.unwrap();
    assert!(hint.starts_with("did you mean `port`?"), "{hint}");
}

#[test]
fn unknown_top_level_key_is_reported_at_top_level() {
    let err = err_of(&format!("{HEADER}name: x\nsecerts: []\n"));
    assert_eq!(err.position, at(4, 1));
    assert_eq!(err.message, "unknown key `secerts` at the top level");
    assert!(err.hint.unwrap().contains("did you mean `secrets`?"));
}

#[test]
fn unknown_key_inside_a_list_item() {
    let text = format!("{HEADER}name: x\nsecrets:\n  - name: a\n    valeu: b\n");
    let err = err_of(&text);
    assert_eq!(err.position, at(6, 5));
    assert_eq!(err.message, "unknown key `valeu` in `secrets[]`");
    assert!(err.hint.unwrap().contains("did you mean `value`?"));
}

#[test]
fn wrong_type_names_the_key_and_position() {
    let text = format!("{HEADER}name: x\nlocalstack:\n  port: lots\n");
    let err = err_of(&text);
    // A port is read by its own visitor, so the parser reports the key's position.
    assert_eq!(err.position, at(5, 3));
    assert!(
        err.message.starts_with("wrong type for `localstack.port`"),
        "{}",
        err.message
    );
}

#[test]
fn missing_required_key_is_named() {
    let err = err_of(HEADER);
    assert!(
        err.message.contains("missing required key `name`"),
        "{}",
        err.message
    );
    assert!(err.position.is_some());
}

#[test]
fn missing_required_nested_key_is_named() {
    let err = err_of(&format!("{HEADER}name: x\ncluster:\n  servers: 1\n"));
    assert!(
        err.message.contains("missing required key `provider`"),
        "{}",
        err.message
    );
}

#[test]
fn unknown_api_version_points_at_its_value() {
    let err = err_of("kind: Profile\napiVersion: devstack.dev/v9\nname: x\n");
    assert_eq!(err.position, at(2, 13));
    assert_eq!(err.message, "unknown apiVersion `devstack.dev/v9`");
    assert!(err.hint.unwrap().contains("devstack.dev/v1alpha1"));
}

#[test]
fn missing_api_version_and_wrong_kind() {
    assert!(
        err_of("kind: Profile\nname: x\n")
            .message
            .contains("apiVersion")
    );
    let err = err_of("apiVersion: devstack.dev/v1alpha1\nkind: Cluster\nname: x\n");
    assert_eq!(err.message, "unknown kind `Cluster`");
    assert_eq!(err.position, at(2, 7));
}

#[test]
fn unknown_enum_value_suggests_the_closest() {
    let err = err_of(&format!("{HEADER}name: x\ncluster:\n  provider: k3d\n"));
    assert_eq!(err.position.as_ref().map(|p| p.line), Some(5));
    assert!(
        err.message.contains("unknown value `k3d`"),
        "{}",
        err.message
    );
    assert!(err.hint.unwrap().contains("did you mean `k3s`?"));
}

#[test]
fn yaml_syntax_errors_have_positions() {
    let err = err_of(&format!("{HEADER}name: x\ncluster: [unclosed\n"));
    assert!(err.position.is_some(), "{err:?}");
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn resolve(
    text: &str,
    overrides: &Overrides,
    env: &HashMap<&str, &str>,
) -> crate::Result<super::Settings> {
    let loaded = parse_for_test(text).expect("valid syntax");
    let lookup = |name: &str| env.get(name).map(|v| v.to_string());
    resolve_with_env(loaded, overrides, &lookup)
}

#[test]
fn precedence_is_flag_then_env_then_profile_then_default() {
    let text = format!("{HEADER}name: from-profile\nlocalstack:\n  port: 5000\n");
    let none = HashMap::new();
    let env: HashMap<&str, &str> = [
        ("DEVSTACK_NAME", "from-env"),
        ("DEVSTACK_LOCALSTACK_PORT", "6000"),
    ]
    .into();

    let s = resolve(&text, &Overrides::default(), &none).unwrap();
    assert_eq!(
        (s.name.as_str(), s.localstack.port),
        ("from-profile", HostPort::Fixed(5000))
    );
    assert_eq!(s.origins["name"], Origin::Profile);
    assert_eq!(s.origins["cluster.provider"], Origin::Default);
    assert_eq!(s.cluster.provider, Provider::Kind);
    assert_eq!(s.cluster.image, crate::versions::KIND_NODE_IMAGE);
    assert!(!s.provider_pinned());
    let fallback = s.with_provider(Provider::K3s).unwrap();
    assert_eq!(
        (fallback.cluster.provider, fallback.cluster.image.as_str()),
        (Provider::K3s, crate::versions::K3S_IMAGE)
    );

    let s = resolve(&text, &Overrides::default(), &env).unwrap();
    assert_eq!(
        (s.name.as_str(), s.localstack.port),
        ("from-env", HostPort::Fixed(6000))
    );
    assert_eq!(s.origins["localstack.port"], Origin::Env);

    let flags = Overrides {
        name: Some("from-flag".into()),
        localstack_port: Some(HostPort::Fixed(7000)),
        provider: Some(Provider::Kind),
        ..Overrides::default()
    };
    let s = resolve(&text, &flags, &env).unwrap();
    assert_eq!(
        (s.name.as_str(), s.localstack.port),
        ("from-flag", HostPort::Fixed(7000))
    );
    assert_eq!(s.cluster.provider, Provider::Kind);
    assert_eq!(s.cluster.image, crate::versions::KIND_NODE_IMAGE);
    assert_eq!(s.origins["name"], Origin::Flag);

    let s = resolve(&format!("{HEADER}name: x\n"), &Overrides::default(), &none).unwrap();
    assert_eq!(s.localstack.port, HostPort::Auto);
    assert_eq!(s.origins["localstack.port"], Origin::Default);
}

#[test]
fn invalid_environment_value_is_a_user_error_naming_the_variable() {
    let env: HashMap<&str, &str> = [("DEVSTACK_LOCALSTACK_PORT", "many")].into();
    let err = resolve(&format!("{HEADER}name: x\n"), &Overrides::default(), &env).unwrap_err();
    assert_eq!(err.kind(), crate::Kind::User);
    assert!(err.message().contains("DEVSTACK_LOCALSTACK_PORT"));
}

#[test]
fn invalid_stack_name_points_at_the_name() {
    let err = resolve(
        &format!("{HEADER}name: Bad_Name\n"),
        &Overrides::default(),
        &HashMap::new(),
    )
    .unwrap_err();
    assert!(err.message().contains("test.yaml:3:7"), "{}", err.message());
    assert!(err.hint().is_some());
}

#[test]
fn secrets_need_exactly_one_source() {
    let text = format!("{HEADER}name: x\nsecrets:\n  - name: a\n    value: v\n    fromEnv: X\n");
    let err = resolve(&text, &Overrides::default(), &HashMap::new()).unwrap_err();
    assert!(
        err.message()
            .contains("several value sources: value, fromEnv"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("test.yaml:5:"), "{}", err.message());
    let text = format!("{HEADER}name: x\nsecrets:\n  - name: a\n");
    let err = resolve(&text, &Overrides::default(), &HashMap::new()).unwrap_err();
    assert!(err.message().contains("has no value source"));
}

#[test]
fn duplicate_and_invalid_secret_names_are_rejected() {
    let dup = format!(
        "{HEADER}name: x\nsecrets:\n  - {{name: a, value: v}}\n  - {{name: a, value: w}}\n"
    );
    let err = resolve(&dup, &Overrides::default(), &HashMap::new()).unwrap_err();
    assert!(err.message().contains("declared twice"));
    let bad = format!("{HEADER}name: x\nsecrets:\n  - {{name: 'a b', value: v}}\n");
    let err = resolve(&bad, &Overrides::default(), &HashMap::new()).unwrap_err();
    assert!(err.message().contains("invalid secret name `a b`"));
}

#[test]
fn secret_values_are_masked_in_resolved_settings() {
    let text = format!(
        "{HEADER}name: x\nsecrets:\n  - name: lit\n    value: s3cr3t-literal\n  - name: js\n    json: {{user: admin, password: s3cr3t-json}}\n"
    );
    let s = resolve(&text, &Overrides::default(), &HashMap::new()).unwrap();
    let rendered = serde_json::to_string(&s).unwrap();
    let yaml = serde_saphyr::to_string(&serde_json::to_value(&s).unwrap()).unwrap();
    let debug = format!("{s:?}");
    for output in [&rendered, &yaml, &debug] {
        assert!(!output.contains("s3cr3t"), "secret leaked: {output}");
        assert!(output.contains(super::secret::MASK));
    }
    match &s.secrets[0].source {
        SecretSource::Literal(v) => assert_eq!(v.expose(), "s3cr3t-literal"),
        other => panic!("unexpected source {other:?}"),
    }
}

#[test]
fn relative_paths_resolve_against_the_profile_directory() {
    let text = format!(
        "{HEADER}name: x\nimages:\n  bundle: kit/bundle\nsecrets:\n  - {{name: f, fromFile: ./secret.txt}}\n"
    );
    let loaded = super::load::parse("p.yaml", &text, PathBuf::from("/etc/devstack")).unwrap();
    let s = resolve_with_env(loaded, &Overrides::default(), &no_env).unwrap();
    assert_eq!(
        s.images.bundle,
        Some(PathBuf::from("/etc/devstack/kit/bundle"))
    );
    assert_eq!(
        s.secrets[0].source,
        SecretSource::File(PathBuf::from("/etc/devstack/./secret.txt"))
    );
}

#[test]
fn shipped_profiles_validate() {
    for (name, text) in super::SHIPPED {
        let loaded = super::load::parse(name, text, PathBuf::from("."))
            .unwrap_or_else(|e| panic!("shipped profile {name}: {e:?}"));
        let s = resolve_with_env(loaded, &Overrides::default(), &no_env)
            .unwrap_or_else(|e| panic!("shipped profile {name}: {e:?}"));
        assert_eq!(&s.name, name);
    }
}

#[test]
fn shipped_profiles_on_disk_match_the_embedded_copies() {
    for (name, text) in super::SHIPPED {
        let path = format!("{}/profiles/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), *text, "{path}");
    }
}

#[test]
fn unknown_profile_reference_suggests_a_shipped_one() {
    let err = super::load_reference("dve").unwrap_err();
    assert_eq!(err.kind(), crate::Kind::User);
    assert!(err.hint().unwrap().contains("`dev`"));
}

#[test]
fn duplicate_keys_are_reported_without_parser_advice() {
    let err = err_of(&format!("{HEADER}name: x\nname: y\n"));
    assert!(
        err.message.contains("duplicate mapping key"),
        "{}",
        err.message
    );
    assert!(
        !err.message.contains("DuplicateKeyPolicy"),
        "{}",
        err.message
    );
    assert_eq!(err.position.map(|p| p.line), Some(4));
}

#[test]
fn host_ports_are_numbers_or_auto() {
    let port = |yaml: &str| {
        let text = format!(
            "{HEADER}name: p\nlocalstack:\n  port: {yaml}\ncluster:\n  provider: k3s\n  apiServerPort: {yaml}\n"
        );
        resolve(&text, &Overrides::default(), &HashMap::new())
            .map(|s| (s.localstack.port, s.cluster.api_server_port))
    };
    assert_eq!(port("auto").unwrap(), (HostPort::Auto, HostPort::Auto));
    assert_eq!(
        port("0").unwrap(),
        (HostPort::Auto, HostPort::Auto),
        "0 keeps meaning a free port"
    );
    assert_eq!(
        port("4566").unwrap(),
        (HostPort::Fixed(4566), HostPort::Fixed(4566))
    );
    for bad in ["automatic", "70000", "-1"] {
        let text = format!("{HEADER}name: p\nlocalstack:\n  port: {bad}\n");
        let err = err_of(&text);
        assert!(
            err.message.starts_with("wrong type for `localstack.port`"),
            "{bad}: {}",
            err.message
        );
    }
    let env: HashMap<&str, &str> = [("DEVSTACK_LOCALSTACK_PORT", "auto")].into();
    let text = format!("{HEADER}name: p\nlocalstack:\n  port: 4566\n");
    let s = resolve(&text, &Overrides::default(), &env).unwrap();
    assert_eq!(s.localstack.port, HostPort::Auto);
    assert_eq!("auto".parse::<HostPort>(), Ok(HostPort::Auto));
    assert!("x".parse::<HostPort>().is_err());
    assert_eq!(serde_json::to_value(HostPort::Auto).unwrap(), "auto");
    assert_eq!(serde_json::to_value(HostPort::Fixed(1)).unwrap(), 1);
}

#[test]
fn printed_commands_repeat_the_flags_that_select_the_stack() {
    let text = format!("{HEADER}name: from-profile\n");
    let none = HashMap::new();
    let s = resolve(&text, &Overrides::default(), &none).unwrap();
    assert_eq!(
        s.cli_flags(),
        "",
        "a profile found on its own needs no flag"
    );
    let flags = Overrides {
        name: Some("job1".into()),
        ..Overrides::default()
    };
    let mut s = resolve(&text, &flags, &none).unwrap();
    s.profile_reference = Some("ci".into());
    assert_eq!(s.cli_flags(), " -p ci --name job1");
    s.profile_reference = Some("my dir/p.yaml".into());
    assert_eq!(s.cli_flags(), " -p 'my dir/p.yaml' --name job1");
    let env: HashMap<&str, &str> = [("DEVSTACK_PROVIDER", "kind")].into();
    let s = resolve(&text, &Overrides::default(), &env).unwrap();
    assert_eq!(s.cli_flags(), " --provider kind");
}

/// Loads like `devstack profile validate` does (structural errors do not stop
/// resolution) and gives each reported error as `line:column: message`.
fn all_errors(text: &str) -> Vec<String> {
    let loaded = super::load::parse_recovering("test.yaml", text, PathBuf::from("."))
        .map_err(super::ProfileErrors::into_error);
    let err = match loaded.and_then(|l| resolve_with_env(l, &Overrides::default(), &no_env)) {
        Err(err) => err,
        Ok(_) => panic!("profile should be rejected"),
    };
    assert_eq!(err.kind(), crate::Kind::User);
    err.message()
        .lines()
        .filter_map(|line| line.strip_prefix("test.yaml:"))
        .map(str::to_string)
        .collect()
}

/// Shared with the CLI snapshot test.
const THREE_MISTAKES: &str = include_str!("../../tests/fixtures/three-mistakes.yaml");

#[test]
fn a_profile_with_three_mistakes_reports_three_errors() {
    let errors = all_errors(THREE_MISTAKES);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors[0].starts_with("9:17: `cluster.ports` protocol `tpc`"),
        "{}",
        errors[0]
    );
    assert_eq!(errors[1], "11:3: unknown key `prot` in `localstack`");
    assert!(
        errors[2].starts_with("13:12: wrong type for `timeouts.cluster`"),
        "{}",
        errors[2]
    );
}

#[test]
fn several_errors_render_one_line_and_one_hint_each() {
    let loaded = super::load::parse_recovering("p.yaml", THREE_MISTAKES, PathBuf::from("."));
    let err = resolve_with_env(loaded.unwrap(), &Overrides::default(), &no_env).unwrap_err();
    let lines: Vec<&str> = err.message().lines().collect();
    assert_eq!(lines[0], "invalid profile p.yaml: 3 errors");
    assert_eq!(lines.len(), 7, "{}", err.message());
    assert!(
        lines[2].starts_with("  hint: use tcp (the default), udp or sctp"),
        "{}",
        lines[2]
    );
    assert!(
        lines[4].starts_with("  hint: did you mean `port`?"),
        "{}",
        lines[4]
    );
    assert!(err.hint().is_none());
}

#[test]
fn every_structural_error_is_reported_once_in_file_order() {
    let text = format!(
        "{HEADER}name: x\ncluster:\n  prvider: k3s\n  servers: 1\nsecrets:\n  - nmae: a\n    value: v\n  - name: b\n    valeu: w\nlocalstack:\n  port: lots\nsecerts: []\n"
    );
    let errors = err_list(&text);
    let summary: Vec<(u64, &str)> = errors
        .iter()
        .map(|e| (e.position.as_ref().unwrap().line, e.message.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (5, "unknown key `prvider` in `cluster`"),
            (8, "unknown key `nmae` in `secrets[]`"),
            (11, "unknown key `valeu` in `secrets[]`"),
            (
                13,
                "wrong type for `localstack.port`: invalid value: string \"lots\", expected a number from 1 to 65535, or `auto` (or 0) for a free port"
            ),
            (14, "unknown key `secerts` at the top level"),
        ],
        "{errors:#?}"
    );
}

fn err_list(text: &str) -> Vec<super::ProfileError> {
    parse_for_test(text)
        .expect_err("profile should be rejected")
        .0
}

#[test]
fn a_missing_required_key_is_reported_along_with_the_rest() {
    let text = format!("{HEADER}name: x\ncluster:\n  servers: 1\nlocalstack:\n  prot: 1\n");
    let errors = err_list(&text);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors[0]
            .message
            .contains("missing required key `provider`")
    );
    assert!(errors[1].message.contains("unknown key `prot`"));
    // At the top level nothing can stand in for it: reading stops there.
    let errors = err_list(&format!("{HEADER}cluster:\n  prvider: k3s\n"));
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert!(messages[0].contains("missing required key `name`"));
    assert!(messages[1].contains("unknown key `prvider`"));
}

#[test]
fn structural_and_semantic_errors_are_reported_together() {
    let text = format!(
        "{HEADER}name: Bad_Name\nlocalstack:\n  services: [secretsmanager, sts]\n  bindAddress: localhost\n  regoin: us-east-1\nsecrets:\n  - name: a\n    value: v\n    fromEnv: A\n"
    );
    let errors = all_errors(&text);
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(errors[0].starts_with("3:7: "), "{}", errors[0]);
    assert!(
        errors[1].starts_with("5:13: `localstack.services` lacks `s3`"),
        "{}",
        errors[1]
    );
    assert!(
        errors[2].starts_with("6:16: `localstack.bindAddress` `localhost`"),
        "{}",
        errors[2]
    );
    assert!(
        errors[3].starts_with("7:3: unknown key `regoin`"),
        "{}",
        errors[3]
    );
    assert!(
        errors[4].starts_with("9:5: secret `a` has several value sources"),
        "{}",
        errors[4]
    );
}

#[test]
fn literal_and_json_values_are_held_to_the_secret_string_limit() {
    let literal = |bytes: usize| {
        format!(
            "{HEADER}name: x\nsecrets:\n  - name: big\n    value: {}\n",
            "v".repeat(bytes)
        )
    };
    let none = HashMap::new();
    assert!(resolve(&literal(65_536), &Overrides::default(), &none).is_ok());
    let err = resolve(&literal(65_537), &Overrides::default(), &none).unwrap_err();
    assert_eq!(err.kind(), crate::Kind::User);
    assert!(
        err.message()
            .contains("test.yaml:6:12: secret `big`: `value` is 65537 bytes"),
        "{}",
        &err.message()[..200.min(err.message().len())]
    );
    assert!(!err.message().contains("vvvv"), "value leaked");
    assert!(err.hint().unwrap().contains("65,536 bytes"));

    // Measured as stored: `{"k":"..."}` adds 8 bytes to the value.
    let json = format!(
        "{HEADER}name: x\nsecrets:\n  - name: doc\n    json:\n      k: {}\n",
        "j".repeat(65_529)
    );
    let err = resolve(&json, &Overrides::default(), &none).unwrap_err();
    assert!(
        err.message()
            .contains("secret `doc`: `json` is 65537 bytes"),
        "{}",
        &err.message()[..200.min(err.message().len())]
    );
}

#[test]
fn secret_names_follow_the_secrets_manager_rules() {
    let named = |name: &str| format!("{HEADER}name: x\nsecrets:\n  - name: {name}\n    value: v\n");
    let none = HashMap::new();
    assert!(resolve(&named(&"n".repeat(512)), &Overrides::default(), &none).is_ok());
    assert!(
        resolve(
            &named("team/app+db=1.x@y_z-AB"),
            &Overrides::default(),
            &none
        )
        .is_ok()
    );
    let err = resolve(&named(&"n".repeat(513)), &Overrides::default(), &none).unwrap_err();
    assert!(
        err.message().contains("must be 1 to 512 characters"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("test.yaml:5:"), "{}", err.message());
}

#[test]
fn positions_of_key_paths() {
    use super::load::position_of_path;
    let text = "name: x\ncluster:\n  ports:\n    - hostPort: 1\n      protocol: tcp\n    - hostPort: 2\n      protocol: udp\n  k3sArgs:\n  - --a\nflux:\n  components: [a, b]\nsecrets:\n  -\n    name: s\n";
    let at = |path: &str| position_of_path(text, path).map(|p| (p.line, p.column));
    assert_eq!(at("name"), Some((1, 7)));
    assert_eq!(at("cluster"), Some((2, 1)));
    assert_eq!(at("cluster.ports[0]"), Some((4, 7)));
    assert_eq!(at("cluster.ports[1].protocol"), Some((7, 17)));
    assert_eq!(at("cluster.k3sArgs[0]"), Some((9, 5)));
    // Flow style is not looked into: the closest enclosing value is given.
    assert_eq!(at("flux.components[1]"), Some((11, 15)));
    assert_eq!(at("secrets[0].name"), Some((14, 11)));
    assert_eq!(at("cluster.ports[2].protocol"), Some((3, 3)));
    assert_eq!(at("localstack.port"), None);
}

#[test]
fn the_state_directory_is_resolved_once_from_the_environment() {
    let text = format!("{HEADER}name: p\n");
    let dir = |env: &[(&'static str, &'static str)]| {
        let env: HashMap<&str, &str> = env.iter().copied().collect();
        resolve(&text, &Overrides::default(), &env)
            .unwrap()
            .state_dir
    };
    assert_eq!(
        dir(&[("HOME", "/home/u")]),
        PathBuf::from("/home/u/.local/state/devstack")
    );
    assert_eq!(
        dir(&[("HOME", "/home/u"), ("XDG_STATE_HOME", "/xdg")]),
        PathBuf::from("/xdg/devstack")
    );
    assert_eq!(
        dir(&[
            ("HOME", "/home/u"),
            ("XDG_STATE_HOME", "/xdg"),
            ("DEVSTACK_HOME", "/d")
        ]),
        PathBuf::from("/d")
    );
}

/// The token is for users who pin calendar-versioned LocalStack images:
/// the settings know only that it is set, so `profile show`, `--json` and
/// errors cannot print it.
#[test]
fn a_localstack_auth_token_is_known_to_be_set_but_never_held() {
    let env: HashMap<&str, &str> = [("LOCALSTACK_AUTH_TOKEN", "ls-token-do-not-print")].into();
    let s = resolve(&format!("{HEADER}name: x\n"), &Overrides::default(), &env).unwrap();
    assert!(s.localstack.auth_token_present);
    assert_eq!(s.localstack.auth_token_env, "LOCALSTACK_AUTH_TOKEN");
    let shown = format!("{} {s:?}", serde_json::to_string(&s).unwrap());
    assert!(!shown.contains("ls-token-do-not-print"), "{shown}");
    assert_eq!(s.localstack.image, crate::versions::LOCALSTACK_IMAGE);
}

#[test]
fn the_user_kubeconfig_is_resolved_once_from_the_environment() {
    let text = format!("{HEADER}name: p\n");
    let path = |env: &[(&'static str, &'static str)]| {
        let env: HashMap<&str, &str> = env.iter().copied().collect();
        resolve(&text, &Overrides::default(), &env)
            .unwrap()
            .user_kubeconfig
    };
    assert_eq!(
        path(&[("HOME", "/home/u")]),
        PathBuf::from("/home/u/.kube/config")
    );
    assert_eq!(
        path(&[("HOME", "/home/u"), ("KUBECONFIG", "/a/one:/b/two")]),
        PathBuf::from("/a/one"),
        "the first KUBECONFIG entry"
    );
}

#[test]
fn eso_values_that_rename_or_drop_the_checked_workloads_are_refused_where_they_are() {
    let none = HashMap::new();
    let text = format!(
        "{HEADER}name: x\neso:\n  values:\n    replicaCount: 1\n    webhook:\n      create: false\n"
    );
    let err = resolve(&text, &Overrides::default(), &none).unwrap_err();
    assert_eq!(err.kind(), crate::Kind::User);
    assert!(
        err.message().contains("eso.values.webhook.create"),
        "{}",
        err.message()
    );
    assert!(err.message().contains("test.yaml:8:"), "{}", err.message());
    assert!(err.hint().unwrap_or_default().contains("gitops.path"));

    // Values that keep every Deployment and its name are fine, as is anything with own manifests.
    let fine = format!(
        "{HEADER}name: x\neso:\n  values:\n    webhook:\n      create: true\n    fullnameOverride: \"\"\n"
    );
    resolve(&fine, &Overrides::default(), &none).unwrap();
    let own = format!(
        "{HEADER}name: x\neso:\n  values:\n    fullnameOverride: eso\ngitops:\n  path: ./mine\n"
    );
    resolve(&own, &Overrides::default(), &none).unwrap();
}

#[test]
fn every_value_that_changes_the_eso_workloads_is_named() {
    let values = serde_json::json!({
        "fullnameOverride": "a", "nameOverride": "b", "createOperator": false,
        "webhook": {"create": false, "certManager": {"enabled": true}},
        "certController": {"create": false},
    });
    let keys: Vec<&str> =
        super::resolve::renamed_or_dropped_eso_workloads(values.as_object().unwrap())
            .into_iter()
            .map(|(key, _)| key)
            .collect();
    assert_eq!(
        keys,
        [
            "fullnameOverride",
            "nameOverride",
            "createOperator",
            "webhook.create",
            "certController.create",
            "webhook.certManager.enabled"
        ]
    );
    let harmless = serde_json::json!({"createOperator": true, "webhook": {"port": 1}});
    assert!(
        super::resolve::renamed_or_dropped_eso_workloads(harmless.as_object().unwrap()).is_empty()
    );
}

#[test]
fn mirrors_come_from_the_profile_and_the_environment_wins_per_registry() {
    let text = format!(
        "{HEADER}name: x\nimages:\n  mirrors:\n    docker.io: https://harbor.example.com/dockerhub\n    quay.io: http://cache:5000\n"
    );
    let env = HashMap::from([
        (
            "DEVSTACK_MIRRORS",
            "docker.io=http://127.0.0.1:5015/docker.io, ghcr.io=http://127.0.0.1:5015",
        ),
        ("DEVSTACK_DOWNLOAD_MIRROR", "http://127.0.0.1:8095/"),
        ("DEVSTACK_PINS", "/tmp/pins.json"),
    ]);
    let s = resolve(&text, &Overrides::default(), &env).unwrap();
    let mirrors: Vec<(&str, &str)> = s
        .images
        .mirrors
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        mirrors,
        [
            ("docker.io", "http://127.0.0.1:5015/docker.io"),
            ("ghcr.io", "http://127.0.0.1:5015"),
            ("quay.io", "http://cache:5000"),
        ]
    );
    assert_eq!(s.origins["images.mirrors.docker.io"], Origin::Env);
    assert_eq!(
        s.images.download_mirror.as_deref(),
        Some("http://127.0.0.1:8095")
    );
    assert_eq!(s.images.pins_file, Some(PathBuf::from("/tmp/pins.json")));
    // Whole-registry mirrors also serve the nodes; one under a path does not.
    let nodes: Vec<&str> = s
        .cluster
        .registry_mirrors
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(nodes, ["ghcr.io", "quay.io"]);
    assert_eq!(s.cluster.registry_mirrors["quay.io"], ["http://cache:5000"]);
}

#[test]
fn bad_mirrors_are_refused_with_the_form_to_write() {
    let text = format!("{HEADER}name: x\nimages:\n  mirrors:\n    dockerhub: https://h\n");
    let err = resolve(&text, &Overrides::default(), &HashMap::new()).unwrap_err();
    assert!(
        err.message().contains(
            "mirror key `dockerhub` is not a registry host (e.g. `docker.io`, `ghcr.io`)"
        ),
        "{}",
        err.message()
    );
    let hint = err.hint().unwrap_or_default();
    assert!(
        hint.starts_with("write mirrors as `REGISTRY=URL` pairs"),
        "{hint}"
    );
    let env = HashMap::from([("DEVSTACK_MIRRORS", "docker.io")]);
    let err = resolve(&format!("{HEADER}name: x\n"), &Overrides::default(), &env).unwrap_err();
    assert!(
        err.message()
            .contains("DEVSTACK_MIRRORS is invalid: `docker.io` is not `REGISTRY=URL`"),
        "{}",
        err.message()
    );
    let env = HashMap::from([("DEVSTACK_DOWNLOAD_MIRROR", "files.example.com")]);
    let err = resolve(&format!("{HEADER}name: x\n"), &Overrides::default(), &env).unwrap_err();
    assert!(
        err.message()
            .contains("DEVSTACK_DOWNLOAD_MIRROR `files.example.com` is not an http(s) URL"),
        "{}",
        err.message()
    );
}

#[test]
fn an_existing_cluster_runs_localstack_inside_it_and_takes_no_node_shape() {
    let none = HashMap::new();
    let text = format!("{HEADER}name: x\ncluster:\n  provider: existing\n  context: kind-ci\n");
    let s = resolve(&text, &Overrides::default(), &none).unwrap();
    assert_eq!(s.cluster.provider, Provider::Existing);
    assert_eq!(s.cluster.context.as_deref(), Some("kind-ci"));
    assert_eq!(s.localstack.mode, super::LocalStackMode::InCluster);
    assert!(
        !s.cluster.merge_kubeconfig,
        "the user's own context is not merged"
    );
    assert_eq!(s.cluster.image, "");

    let container = format!("{text}localstack:\n  mode: container\n");
    let err = resolve(&container, &Overrides::default(), &none).unwrap_err();
    assert!(err.message().contains("cannot reach"), "{}", err.message());
    assert!(
        err.hint().unwrap_or_default().contains("in-cluster"),
        "{err:?}"
    );

    let shaped = format!(
        "{HEADER}name: x\ncluster:\n  provider: existing\n  agents: 2\n  image: kindest/node:v1.36.4\n"
    );
    let err = resolve(&shaped, &Overrides::default(), &none).unwrap_err();
    for key in ["cluster.agents", "cluster.image"] {
        assert!(err.message().contains(key), "{key}: {}", err.message());
    }
}

#[test]
fn a_context_flag_picks_the_existing_provider_and_wins_over_env_and_profile() {
    let text =
        format!("{HEADER}name: x\ncluster:\n  provider: existing\n  context: from-profile\n");
    let env: HashMap<&str, &str> = [("DEVSTACK_CONTEXT", "from-env")].into();
    let s = resolve(&text, &Overrides::default(), &env).unwrap();
    assert_eq!(s.cluster.context.as_deref(), Some("from-env"));
    assert_eq!(s.origins["cluster.context"], Origin::Env);

    let flag = Overrides {
        context: Some("from-flag".into()),
        ..Overrides::default()
    };
    let s = resolve(&format!("{HEADER}name: x\n"), &flag, &HashMap::new()).unwrap();
    assert_eq!(s.cluster.provider, Provider::Existing);
    assert_eq!(s.cluster.context.as_deref(), Some("from-flag"));
    assert_eq!(s.localstack.mode, super::LocalStackMode::InCluster);

    let s = resolve(
        &format!("{HEADER}name: x\n"),
        &Overrides::default(),
        &HashMap::new(),
    )
    .unwrap();
    assert_eq!(s.localstack.mode, super::LocalStackMode::Container);
    assert_eq!(s.cluster.context, None);
}

#[test]
fn eso_install_never_needs_a_cluster_that_runs_eso() {
    let none = HashMap::new();
    let text = format!("{HEADER}name: x\ncluster:\n  provider: kind\neso:\n  install: never\n");
    let err = resolve(&text, &Overrides::default(), &none).unwrap_err();
    assert!(
        err.message().contains("`eso.install: never`"),
        "{}",
        err.message()
    );
    assert!(
        err.message()
            .contains("the kind cluster devstack creates has none"),
        "{}",
        err.message()
    );
    assert!(
        err.hint()
            .unwrap_or_default()
            .contains("cluster.provider: existing")
    );

    let text = format!(
        "{HEADER}name: x\ncluster:\n  provider: existing\n  context: ci\neso:\n  install: never\n"
    );
    let settings = resolve(&text, &Overrides::default(), &none).unwrap();
    assert_eq!(settings.eso.install, crate::profile::EsoInstall::Never);
    assert!(settings.eso.installs(), "until `up` met the cluster's ESO");
    let err = err_of(&format!("{HEADER}name: x\neso:\n  install: sometimes\n"));
    assert!(err.message.contains("unknown value `sometimes`"), "{err:?}");
    assert!(
        err.hint
            .unwrap_or_default()
            .contains("`auto`, `always`, `never`")
    );
}

// Facts and apps (`facts`, `gitops.apps`).

/// A profile directory with the files a profile reads.
struct ProfileDir(tempfile::TempDir);

impl ProfileDir {
    fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        ProfileDir(dir)
    }

    fn resolve(&self, body: &str, env: &[(&str, &str)]) -> crate::Result<super::Settings> {
        let text = format!("{HEADER}name: x\n{body}");
        let loaded = super::load::parse_recovering("p.yaml", &text, self.0.path().to_path_buf())
            .map_err(super::ProfileErrors::into_error)?;
        let env: HashMap<&str, &str> = env.iter().copied().collect();
        let lookup = |name: &str| env.get(name).map(|v| v.to_string());
        resolve_with_env(loaded, &Overrides::default(), &lookup)
    }

    /// Each reported error as `origin:line:column: message`, with origins
    /// inside the directory relative to it, and the hints.
    fn errors(&self, body: &str, env: &[(&str, &str)]) -> (Vec<String>, Vec<String>) {
        let err = match self.resolve(body, env) {
            Err(err) => err,
            Ok(_) => panic!("profile should be rejected:\n{body}"),
        };
        assert_eq!(err.kind(), crate::Kind::User);
        let dir = format!("{}/", self.0.path().display());
        let message = err.message().replace(&dir, "");
        let mut errors = Vec::new();
        let mut hints: Vec<String> = err.hint().map(str::to_string).into_iter().collect();
        match message.strip_prefix("invalid profile ") {
            Some(one) if !one.contains('\n') => errors.push(one.to_string()),
            _ => {
                for line in message.lines().skip(1) {
                    match line.strip_prefix("  hint: ") {
                        Some(hint) => hints.push(hint.to_string()),
                        None => errors.push(line.to_string()),
                    }
                }
            }
        }
        (errors, hints)
    }

    fn one_error(&self, body: &str, env: &[(&str, &str)]) -> (String, String) {
        let (mut errors, mut hints) = self.errors(body, env);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        (errors.remove(0), hints.pop().unwrap_or_default())
    }
}

fn tf(outputs: &[(&str, &str, bool)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = outputs
        .iter()
        .map(|(name, value, sensitive)| {
            let output =
                serde_json::json!({"value": value, "type": "string", "sensitive": sensitive});
            (name.to_string(), output)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

#[test]
fn facts_take_values_then_files_then_terraform_then_the_environment() {
    let dir = ProfileDir::new(&[
        ("env/one.env", "FILES=one\nLATER_FILE=one\nTERRAFORM=one\n"),
        ("env/two.env", "# second\nLATER_FILE=two\n"),
        (
            "infra/a.json",
            &tf(&[
                ("TERRAFORM", "a", false),
                ("ENV", "a", false),
                ("LATER_TF", "a", false),
            ]),
        ),
        ("infra/b.json", &tf(&[("LATER_TF", "b", false)])),
    ]);
    let body = "facts:\n  values:\n    VALUES: v\n    FILES: v\n    TERRAFORM: v\n    ENV: v\n    NUMBER: 3\n    FLAG: true\n  fromFiles: [env/one.env, env/two.env]\n  fromTerraform: [infra/a.json, infra/b.json]\n  fromEnv:\n    ENV: FROM_ENV\n";
    let s = dir.resolve(body, &[("FROM_ENV", "env")]).unwrap();
    let found: Vec<(&str, &str, String)> = s
        .facts
        .facts
        .iter()
        .map(|(name, fact)| (name.as_str(), fact.value.expose(), fact.source.to_string()))
        .collect();
    let expected = [
        ("ENV", "env", "env FROM_ENV"),
        ("FILES", "one", "env/one.env:1"),
        ("FLAG", "true", "profile facts.values"),
        ("LATER_FILE", "two", "env/two.env:2"),
        ("LATER_TF", "b", "infra/b.json output LATER_TF"),
        ("NUMBER", "3", "profile facts.values"),
        ("TERRAFORM", "a", "infra/a.json output TERRAFORM"),
        ("VALUES", "v", "profile facts.values"),
    ];
    assert_eq!(
        found,
        expected.map(|(n, v, s)| (n, v, s.to_string())),
        "{:#?}",
        s.facts
    );
    assert_eq!(
        s.facts.facts["LATER_FILE"].source,
        super::FactSource::File {
            path: PathBuf::from("env/two.env"),
            line: 2
        }
    );
    assert_eq!(s.facts.secret, "devstack-stack-secrets");
    assert!(s.facts.config_maps.is_empty());
    assert!(!s.facts.sensitive_any());
}

#[test]
fn no_facts_section_means_no_facts_and_the_default_secret() {
    let s = ProfileDir::new(&[]).resolve("", &[]).unwrap();
    assert_eq!(s.facts, super::FactsSettings::default());
    assert_eq!(s.facts.secret, "devstack-stack-secrets");
    assert!(s.gitops.apps.is_empty());
}

#[test]
fn sensitive_facts_are_masked_everywhere_but_plain_ones_are_shown() {
    let dir = ProfileDir::new(&[(
        "out.json",
        &tf(&[
            ("TF_TOKEN", "tf-s3cr3t", true),
            ("BUCKET", "plain-bucket", false),
        ]),
    )]);
    let body = "facts:\n  secret: flux-runtime-secrets\n  configMaps: [flux-runtime-info]\n  values:\n    API_TOKEN: api-s3cr3t\n    OVERRIDDEN: first\n  fromTerraform: [out.json]\n  fromEnv:\n    OVERRIDDEN: OVERRIDE\n  sensitive: [API_TOKEN]\n";
    let dir_with_override = ProfileDir::new(&[(
        "out.json",
        &tf(&[
            ("TF_TOKEN", "tf-s3cr3t", true),
            ("BUCKET", "plain-bucket", false),
            ("OVERRIDDEN", "tf-s3cr3t-too", true),
        ]),
    )]);
    for dir in [&dir, &dir_with_override] {
        let s = dir.resolve(body, &[("OVERRIDE", "env-value")]).unwrap();
        let facts = &s.facts;
        assert!(facts.sensitive_any());
        assert!(facts.facts["TF_TOKEN"].sensitive);
        assert!(facts.facts["API_TOKEN"].sensitive);
        assert!(!facts.facts["BUCKET"].sensitive);
        assert_eq!(facts.facts["TF_TOKEN"].value.expose(), "tf-s3cr3t");
        assert_eq!(facts.secret, "flux-runtime-secrets");
        assert_eq!(facts.config_maps, ["flux-runtime-info"]);
        let json = serde_json::to_string(&s).unwrap();
        let debug = format!("{s:?}");
        for output in [&json, &debug] {
            assert!(
                !output.contains("s3cr3t"),
                "a sensitive fact leaked: {output}"
            );
            assert!(output.contains(super::secret::MASK));
        }
        assert!(json.contains(r#""value":"plain-bucket""#), "{json}");
        assert!(
            json.contains(r#""source":"out.json output BUCKET""#),
            "{json}"
        );
        assert!(!debug.contains("plain-bucket"), "{debug}");
    }
    // Overridden from the environment, a sensitive output stays sensitive.
    let s = dir_with_override
        .resolve(body, &[("OVERRIDE", "env-s3cr3t")])
        .unwrap();
    let fact = &s.facts.facts["OVERRIDDEN"];
    assert_eq!(fact.value.expose(), "env-s3cr3t");
    assert!(fact.sensitive);
    assert!(!serde_json::to_string(&s).unwrap().contains("s3cr3t"));
    let s = dir.resolve(body, &[("OVERRIDE", "env-value")]).unwrap();
    assert!(!s.facts.facts["OVERRIDDEN"].sensitive);
}

#[test]
fn fact_names_follow_flux_and_devstack_keeps_its_own() {
    let dir = ProfileDir::new(&[("env/dev.env", "# dev\nAPP=1\nAWS_REGION=eu-west-1\n")]);
    let (error, hint) = dir.one_error("facts:\n  values:\n    bad-name: x\n", &[]);
    assert!(
        error.starts_with("p.yaml:6:5: invalid fact name `bad-name` from profile facts.values:"),
        "{error}"
    );
    assert!(hint.contains("rename"), "{hint}");
    let (error, hint) = dir.one_error("facts:\n  fromFiles: [env/dev.env]\n", &[]);
    assert_eq!(
        error,
        "env/dev.env:3:1: fact `AWS_REGION` from env/dev.env:3 is devstack's own (its LocalStack region)"
    );
    assert!(hint.starts_with("rename it"), "{hint}");
    let (errors, _) = dir.errors(
        "facts:\n  values:\n    DEVSTACK_X: a\n    SECRET_DB_ARN: b\n  fromEnv:\n    STACK_NAME: NAME\n",
        &[("NAME", "n")],
    );
    assert_eq!(
        errors,
        [
            "p.yaml:6:5: fact `DEVSTACK_X` from profile facts.values is devstack's own (the prefix of its own facts)",
            "p.yaml:7:5: fact `SECRET_DB_ARN` from profile facts.values is devstack's own (a seeded secret's ARN)",
            "p.yaml:9:5: fact `STACK_NAME` from env NAME is devstack's own (the stack's name)",
        ]
    );
}

#[test]
fn a_fact_written_twice_in_the_profile_is_refused_by_the_parser() {
    let (error, _) = ProfileDir::new(&[]).one_error("facts:\n  values:\n    A: 1\n    A: 2\n", &[]);
    assert!(error.starts_with("p.yaml:7:5: "), "{error}");
    assert!(error.contains("duplicate"), "{error}");
}

#[test]
fn unreadable_dotenv_lines_are_reported_at_their_file_line_and_column() {
    let dir = ProfileDir::new(&[
        ("bad.env", "OK=1\nno equals\n1X=2\n"),
        ("quote.env", "\nA=\"open\n"),
    ]);
    let (errors, hints) = dir.errors("facts:\n  fromFiles: [bad.env, quote.env, gone.env]\n", &[]);
    assert_eq!(errors.len(), 4, "{errors:#?}");
    assert!(
        errors[0].starts_with("p.yaml:5:35: cannot read dotenv file gone.env:"),
        "{}",
        errors[0]
    );
    assert_eq!(errors[1], "bad.env:2:1: line has no `=`");
    assert!(
        errors[2].starts_with("bad.env:3:1: invalid fact name `1X`"),
        "{}",
        errors[2]
    );
    assert_eq!(
        errors[3],
        "quote.env:2:3: `A`: unterminated \"-quoted value"
    );
    assert!(hints[1].contains("KEY=value"), "{hints:#?}");
}

#[test]
fn terraform_files_must_be_terraform_outputs_with_values() {
    let dir = ProfileDir::new(&[
        ("plain.json", r#"{"bucket": "app-uploads"}"#),
        (
            "null.json",
            r#"{"gone": {"value": null, "type": "string"}}"#,
        ),
        ("names.json", &tf(&[("app-bucket", "x", false)])),
    ]);
    let (error, hint) = dir.one_error("facts:\n  fromTerraform: [plain.json]\n", &[]);
    assert_eq!(
        error,
        "p.yaml:5:19: plain.json is not `terraform output -json` output: output `bucket` is a string, not an object with `value`"
    );
    assert!(hint.contains("terraform output -json > FILE"), "{hint}");
    let (error, _) = dir.one_error("facts:\n  fromTerraform: [null.json]\n", &[]);
    assert_eq!(error, "p.yaml:5:19: null.json: output `gone` is null");
    let (error, hint) = dir.one_error("facts:\n  fromTerraform: [names.json]\n", &[]);
    assert!(
        error.starts_with("p.yaml:5:19: output `app-bucket` of names.json is no valid fact name"),
        "{error}"
    );
    assert!(hint.contains("rename the output"), "{hint}");
}

#[test]
fn an_unset_environment_variable_or_an_unknown_sensitive_fact_is_named() {
    let dir = ProfileDir::new(&[]);
    let (error, hint) = dir.one_error("facts:\n  fromEnv:\n    DOMAIN: DEV_DOMAIN\n", &[]);
    assert_eq!(
        error,
        "p.yaml:6:13: fact `DOMAIN`: environment variable DEV_DOMAIN is not set"
    );
    assert!(hint.starts_with("`export DEV_DOMAIN=…`"), "{hint}");
    let (error, hint) = dir.one_error(
        "facts:\n  values:\n    API_TOKEN: t\n  sensitive: [API_TOKNE]\n",
        &[],
    );
    assert_eq!(
        error,
        "p.yaml:7:15: `facts.sensitive` names `API_TOKNE`, which is no fact"
    );
    assert_eq!(hint, "did you mean `API_TOKEN`?");
}

#[test]
fn facts_objects_need_valid_distinct_names() {
    let dir = ProfileDir::new(&[]);
    let (errors, _) = dir.errors(
        "facts:\n  secret: Bad_Secret\n  configMaps:\n    - devstack-stack-facts\n    - info\n    - info\n    - Upper\n",
        &[],
    );
    assert_eq!(errors.len(), 4, "{errors:#?}");
    assert!(
        errors[0].starts_with("p.yaml:5:11: facts.secret `Bad_Secret`"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with("p.yaml:7:7: facts.configMaps lists `devstack-stack-facts`"),
        "{}",
        errors[1]
    );
    assert_eq!(errors[2], "p.yaml:9:7: facts.configMaps lists `info` twice");
    assert!(
        errors[3].starts_with("p.yaml:10:7: facts.configMaps `Upper`"),
        "{}",
        errors[3]
    );
    let (error, _) = dir.one_error("facts:\n  secret: same\n  configMaps: [same]\n", &[]);
    assert!(error.contains("the name of facts.secret"), "{error}");
}

#[test]
fn helm_values_are_kept_as_written_under_valid_distinct_names() {
    let dir = ProfileDir::new(&[]);
    let body = "facts:\n  helmValues:\n    - name: karpenter-values\n      namespace: karpenter\n      values:\n        settings: {clusterName: \"${CLUSTER_NAME}\"}\n    - {name: other, namespace: apps, key: custom.yaml, values: {}}\n";
    let s = dir.resolve(body, &[]).unwrap();
    let helm = &s.facts.helm_values;
    assert_eq!(helm.len(), 2);
    assert_eq!(
        (
            helm[0].name.as_str(),
            helm[0].namespace.as_str(),
            helm[0].key.as_str()
        ),
        ("karpenter-values", "karpenter", "values.yaml")
    );
    assert_eq!(
        helm[0].values["settings"]["clusterName"],
        serde_json::json!("${CLUSTER_NAME}")
    );
    assert_eq!(helm[1].key, "custom.yaml");

    let (error, hint) = dir.one_error(
        "facts:\n  helmValues:\n    - name: v\n      namespace: Karpenter_NS\n      values: {}\n",
        &[],
    );
    assert!(
        error.starts_with(
            "p.yaml:7:18: helmValues `v`: invalid namespace `Karpenter_NS`: character `K`"
        ),
        "{error}"
    );
    assert!(hint.contains("e.g. `karpenter`"), "{hint}");
    let (error, _) = dir.one_error(
        "facts:\n  helmValues:\n    - {name: v, namespace: a, values: {}}\n    - {name: v, namespace: a, values: {x: 1}}\n    - {name: v, namespace: b, values: {}}\n",
        &[],
    );
    assert_eq!(error, "p.yaml:7:7: helmValues `a/v` is declared twice");
    let (error, _) = dir.one_error(
        "facts:\n  helmValues:\n    - name: v\n      namespace: a\n      values: [1, 2]\n",
        &[],
    );
    assert_eq!(
        error,
        "p.yaml:8:15: wrong type for `facts.helmValues[].values`: expected a mapping (`key: value` lines or `{...}`)"
    );
}

#[test]
fn apps_are_checked_and_ordered_dependencies_first() {
    let dir = ProfileDir::new(&[
        ("infrastructure/kustomization.yaml", ""),
        ("apps/kustomization.yaml", ""),
        ("monitoring/kustomization.yaml", ""),
    ]);
    let body = "gitops:\n  apps:\n    - {name: apps, path: ./apps/, dependsOn: [infrastructure, monitoring], wait: false}\n    - {name: monitoring, path: monitoring, timeout: 10m}\n    - {name: infrastructure, path: infrastructure}\n    - {name: everything, path: .}\n";
    let s = dir.resolve(body, &[]).unwrap();
    let apps: Vec<(&str, &str)> = s
        .gitops
        .apps
        .iter()
        .map(|a| (a.name.as_str(), a.path.as_str()))
        .collect();
    assert_eq!(
        apps,
        [
            ("monitoring", "monitoring"),
            ("infrastructure", "infrastructure"),
            ("apps", "apps"),
            ("everything", "."),
        ]
    );
    let app = &s.gitops.apps[2];
    assert_eq!(app.depends_on, ["infrastructure", "monitoring"]);
    assert!(!app.wait);
    assert_eq!(app.timeout, super::HumanDuration::secs(300));
    assert!(s.gitops.apps[0].wait);
    assert_eq!(s.gitops.apps[0].timeout, super::HumanDuration::secs(600));

    // In a git repository the path is not this machine's to check.
    let body = "gitops:\n  source: git\n  git: {url: 'https://example.com/r.git'}\n  apps:\n    - {name: apps, path: clusters/dev/apps}\n";
    let s = dir.resolve(body, &[]).unwrap();
    assert_eq!(s.gitops.apps[0].path, "clusters/dev/apps");
}

#[test]
fn app_paths_are_normalized_and_kept_inside_their_root() {
    use super::resolve::normalize_app_path;
    assert_eq!(normalize_app_path("./apps/").unwrap(), "apps");
    assert_eq!(normalize_app_path("a//./b").unwrap(), "a/b");
    assert_eq!(normalize_app_path("./").unwrap(), ".");
    assert!(normalize_app_path("/etc").is_err());
    assert!(normalize_app_path("apps/../../x").is_err());
    assert!(normalize_app_path("").is_err());
}

#[test]
fn bad_apps_are_each_named() {
    let dir = ProfileDir::new(&[("apps/k.yaml", ""), ("file", "")]);
    let (errors, hints) = dir.errors(
        "gitops:\n  apps:\n    - name: apps\n      path: missing\n    - name: apps\n      path: apps\n    - name: devstack\n      path: apps\n    - name: a\n      path: apps\n      dependsOn: [b]\n    - name: b\n      path: apps\n      dependsOn: [a, infra]\n    - name: c\n      path: ../outside\n    - name: d\n      path: file\n    - name: this-name-is-much-longer-than-forty-characters\n      path: apps\n",
        &[],
    );
    // The directory's own path is cut from the messages.
    let dir_path = "";
    assert_eq!(
        errors,
        [
            format!("p.yaml:7:13: app `apps`: path `missing` does not exist ({dir_path}missing)"),
            "p.yaml:8:7: app `apps` is declared twice".into(),
            "p.yaml:10:13: app name `devstack` is the name of one of devstack's own Kustomizations".into(),
            "p.yaml:12:7: apps depend on each other in a cycle: a -> b -> a".into(),
            "p.yaml:17:22: app `b` depends on `infra`, which is no app".into(),
            "p.yaml:19:13: app `c`: path `../outside` has a `..` component: it must stay inside its root".into(),
            "p.yaml:21:13: app `d`: path `file` is not a directory (file)".into(),
            "p.yaml:22:13: invalid app name `this-name-is-much-longer-than-forty-characters`: must be 1 to 40 characters".into(),
        ]
    );
    assert!(hints[4].starts_with("apps: apps, a, b, d"), "{hints:#?}");
}

#[test]
fn facts_and_apps_errors_are_reported_with_the_rest() {
    let dir = ProfileDir::new(&[("dev.env", "AWS_REGION=x\nbroken\n")]);
    let (errors, _) = dir.errors(
        "localstack:\n  prot: 1\nfacts:\n  values:\n    bad-name: x\n  fromFiles: [dev.env]\n  fromEnv:\n    DOMAIN: DEV_DOMAIN\n  sensitive: [NOPE]\ngitops:\n  apps:\n    - {name: apps, path: apps}\n",
        &[],
    );
    assert_eq!(errors.len(), 7, "{errors:#?}");
    assert!(
        errors[0].starts_with("p.yaml:5:3: unknown key `prot`"),
        "{}",
        errors[0]
    );
    // The profile's errors come first, then those of the files it reads.
    assert!(
        errors[5].starts_with("dev.env:1:1: fact `AWS_REGION`"),
        "{}",
        errors[5]
    );
    assert_eq!(errors[6], "dev.env:2:1: line has no `=`");
}

#[test]
fn the_bound_port_is_the_one_clients_use_even_when_the_profile_fixes_one() {
    // An in-cluster LocalStack is reached through a port-forward on a free
    // port, whatever `localstack.port` says.
    let text = format!("{HEADER}name: p\nlocalstack:\n  mode: in-cluster\n  port: 4566\n");
    let s = resolve(&text, &Overrides::default(), &HashMap::new()).unwrap();
    assert_eq!(s.localstack.endpoint_url(), "http://127.0.0.1:4566");
    let forwarded = s.with_localstack_port(40123);
    assert_eq!(
        forwarded.localstack.endpoint_url(),
        "http://127.0.0.1:40123"
    );
}

/// Each error of a rejected profile as `line:column: message`, one or several.
fn reported(text: &str) -> Vec<String> {
    let loaded = super::load::parse_recovering("test.yaml", text, PathBuf::from("."))
        .map_err(super::ProfileErrors::into_error);
    let err = match loaded.and_then(|l| resolve_with_env(l, &Overrides::default(), &no_env)) {
        Err(err) => err,
        Ok(_) => panic!("profile should be rejected:\n{text}"),
    };
    match err.message().strip_prefix("invalid profile test.yaml:") {
        Some(one) if !one.contains('\n') => vec![one.to_string()],
        _ => err
            .message()
            .lines()
            .filter_map(|line| line.strip_prefix("test.yaml:"))
            .map(str::to_string)
            .collect(),
    }
}

// A shipped profile on a cluster devstack did not create (`--context`).

/// A shipped profile resolved with these flags and environment.
fn shipped(
    name: &str,
    overrides: &Overrides,
    env: &[(&str, &str)],
) -> crate::Result<super::Settings> {
    let loaded = super::load_reference(name)?;
    let env: HashMap<&str, &str> = env.iter().copied().collect();
    let lookup = |name: &str| env.get(name).map(|v| v.to_string());
    resolve_with_env(loaded, overrides, &lookup)
}

fn context_flag(context: &str) -> Overrides {
    Overrides {
        context: Some(context.into()),
        ..Overrides::default()
    }
}

#[test]
fn a_shipped_profile_on_an_existing_cluster_sets_its_node_shape_aside_with_a_notice() {
    let expected = [
        ("ci", "cluster.servers, cluster.apiServerPort"),
        (
            "dev",
            "cluster.servers, cluster.agents, cluster.apiServerPort, cluster.ports",
        ),
        (
            "demo",
            "cluster.servers, cluster.agents, cluster.apiServerPort",
        ),
    ];
    for (name, keys) in expected {
        let s = shipped(name, &context_flag("kind-x"), &[]).unwrap();
        assert_eq!(s.cluster.provider, Provider::Existing, "{name}");
        assert_eq!(s.cluster.context.as_deref(), Some("kind-x"));
        assert!(
            s.cluster.ports.is_empty() && s.cluster.agents == 0,
            "{name}"
        );
        assert!(!s.cluster.merge_kubeconfig && !s.cluster.switch_context);
        assert_eq!(
            s.notices,
            [format!(
                "ignoring {keys} of the shipped profile {name}: they shape a cluster devstack creates, and `--context kind-x` uses a cluster devstack did not create"
            )]
        );
        // The rest of the profile is kept: its secrets.
        assert!(!s.secrets.is_empty(), "{name}");

        let s = shipped(
            name,
            &Overrides::default(),
            &[("DEVSTACK_CONTEXT", "kind-x")],
        )
        .unwrap();
        assert_eq!(s.cluster.provider, Provider::Existing, "{name}");
        assert!(
            s.notices[0]
                .ends_with("and `DEVSTACK_CONTEXT=kind-x` uses a cluster devstack did not create"),
            "{:?}",
            s.notices
        );
    }
    let existing = Overrides {
        provider: Some(Provider::Existing),
        ..Overrides::default()
    };
    let s = shipped("ci", &existing, &[]).unwrap();
    assert!(
        s.notices[0].ends_with("and `--provider existing` uses the current context's cluster, which devstack did not create"),
        "{:?}",
        s.notices
    );
    // Without a context nothing is set aside.
    assert!(
        shipped("dev", &Overrides::default(), &[])
            .unwrap()
            .notices
            .is_empty()
    );
}

#[test]
fn a_node_shape_the_user_wrote_is_refused_on_an_existing_cluster_where_it_is() {
    let text = format!("{HEADER}name: x\ncluster:\n  provider: kind\n  servers: 1\n  agents: 2\n");
    let loaded = parse_for_test(&text).unwrap();
    let err = resolve_with_env(loaded, &context_flag("kind-x"), &no_env).unwrap_err();
    let message = err.message();
    assert!(
        message.starts_with("invalid profile test.yaml: 2 errors"),
        "{message}"
    );
    assert!(
        message.contains("test.yaml:6:12: `cluster.servers` shapes a cluster devstack creates, and `--context kind-x` uses a cluster devstack did not create\n  hint: remove `cluster.servers` from the profile, or drop `--context` to have devstack create the cluster"),
        "{message}"
    );
    assert!(
        message.contains("test.yaml:7:11: `cluster.agents`"),
        "{message}"
    );
    assert!(!message.contains("shipped"), "{message}");

    let env: HashMap<&str, &str> = [("DEVSTACK_CONTEXT", "kind-x")].into();
    let err = resolve(&text, &Overrides::default(), &env).unwrap_err();
    assert!(
        err.message()
            .contains("unset DEVSTACK_CONTEXT to have devstack create the cluster"),
        "{}",
        err.message()
    );
}

#[test]
fn a_context_beside_a_provider_that_creates_the_cluster_is_never_kept_silently() {
    // Both in the profile: refused where the context is.
    let text = format!("{HEADER}name: x\ncluster:\n  provider: kind\n  context: foo\n");
    let err = reported(&text);
    assert_eq!(
        err,
        [
            "6:12: `cluster.context` names an existing cluster, and `cluster.provider: kind` creates one"
        ]
    );
    // Both as flags, or both in the environment: refused at once.
    let both = Overrides {
        provider: Some(Provider::Kind),
        context: Some("foo".into()),
        ..Overrides::default()
    };
    let err = resolve(&format!("{HEADER}name: x\n"), &both, &HashMap::new()).unwrap_err();
    assert_eq!(
        err.message(),
        "`--provider kind` creates a cluster, and `--context foo` names one that exists"
    );
    assert!(err.hint().unwrap().contains("drop `--provider`"), "{err:?}");
    let env: HashMap<&str, &str> =
        [("DEVSTACK_PROVIDER", "k3s"), ("DEVSTACK_CONTEXT", "foo")].into();
    let err = resolve(&format!("{HEADER}name: x\n"), &Overrides::default(), &env).unwrap_err();
    assert!(
        err.message()
            .starts_with("`DEVSTACK_PROVIDER=k3s` creates a cluster"),
        "{err:?}"
    );
    // A provider given at a higher level sets the context aside, and says so.
    let k3s = Overrides {
        provider: Some(Provider::K3s),
        ..Overrides::default()
    };
    let env: HashMap<&str, &str> = [("DEVSTACK_CONTEXT", "foo")].into();
    let s = resolve(&format!("{HEADER}name: x\n"), &k3s, &env).unwrap();
    assert_eq!(
        (s.cluster.provider, s.cluster.context),
        (Provider::K3s, None)
    );
    assert!(!s.origins.contains_key("cluster.context"));
    assert_eq!(
        s.notices,
        ["ignoring `DEVSTACK_CONTEXT=foo`: `--provider k3s` has devstack create the cluster"]
    );
    let existing = format!("{HEADER}name: x\ncluster:\n  provider: existing\n  context: foo\n");
    let s = resolve(&existing, &k3s, &HashMap::new()).unwrap();
    assert_eq!(s.cluster.context, None);
    assert_eq!(
        s.notices,
        [
            "ignoring `cluster.context: foo` of the profile: `--provider k3s` has devstack create the cluster"
        ]
    );
}

#[test]
fn origins_name_the_built_in_default_and_the_download_mirror() {
    let builtin = super::Settings::builtin(&Overrides::default()).unwrap();
    assert_eq!(
        builtin.origins["name"],
        Origin::Default,
        "no profile named it"
    );
    let s = shipped("ci", &Overrides::default(), &[]).unwrap();
    assert_eq!(s.origins["name"], Origin::Profile);
    assert_eq!(s.origins["images.downloadMirror"], Origin::Default);
    let s = shipped(
        "ci",
        &Overrides::default(),
        &[("DEVSTACK_DOWNLOAD_MIRROR", "https://files.example.com")],
    )
    .unwrap();
    assert_eq!(s.origins["images.downloadMirror"], Origin::Env);
}

// Every error of one mapping, each with a hint.

#[test]
fn every_error_of_one_mapping_is_reported_flow_or_block() {
    let port = "wrong type for `localstack.port`";
    let services = "unknown key `servics` in `localstack`";
    for (body, first, second) in [
        ("localstack: {port: 99999, servics: [s3]}\n", port, services),
        ("localstack: {servics: [s3], port: 99999}\n", services, port),
        (
            "localstack:\n  port: 99999\n  servics: [s3]\n",
            port,
            services,
        ),
        (
            "localstack:\n  servics: [s3]\n  port: 99999\n",
            services,
            port,
        ),
    ] {
        let errors = reported(&format!("{HEADER}name: x\n{body}"));
        assert_eq!(errors.len(), 2, "{body}: {errors:#?}");
        assert!(errors[0].contains(first), "{body}: {errors:#?}");
        assert!(errors[1].contains(second), "{body}: {errors:#?}");
    }
    // A flow entry blanked for its value is not reported missing as well.
    let errors = reported(&format!(
        "{HEADER}name: x\ncluster: {{provider: kindd, servers: 0}}\n"
    ));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].contains("unknown value `kindd` in `cluster`"),
        "{errors:#?}"
    );
}

/// Bad profiles, one or more mistakes each, covering every kind of error a
/// profile can have.
const BAD_PROFILES: &[&str] = &[
    "name: x\ncluster: [unclosed\n",
    "name: x\ncluster:\n  provider: kind\n    servers: 2\n",
    "name: x\nlocalstack:\n\tport: 1\n",
    "name: x\nname: y\n",
    "name: x\nsecerts: []\n",
    "name: x\ncluster:\n  provider: kindd\n",
    "name: x\ncluster:\n  servers: 1\n",
    "cluster:\n  provider: kind\n",
    "name: x\nlocalstack:\n  port: lots\n",
    "name: x\nlocalstack: {port: 99999, servics: [s3]}\n",
    "name: Bad_Name\n",
    "name: x\ncluster:\n  provider: kind\n  servers: 0\n",
    "name: x\ncluster:\n  provider: k3s\n  servers: 3\n  ports:\n    - {hostPort: 1, containerPort: 2, protocol: tpc, bindAddress: here}\n",
    "name: x\ncluster:\n  provider: existing\n  agents: 1\n",
    "name: x\ncluster:\n  provider: kind\n  context: foo\n",
    "name: x\nlocalstack:\n  services: [s3]\n  bindAddress: localhost\n  mode: container\ncluster:\n  provider: existing\n",
    "name: x\nflux:\n  components: [source-controler]\n",
    "name: x\neso:\n  install: never\n  values: {fullnameOverride: eso}\n",
    "name: x\ngitops:\n  source: git\n  interval: 0s\n  apps:\n    - {name: Bad, path: /abs}\n    - {name: a, path: a, dependsOn: [b], timeout: 0s}\n",
    "name: x\nsecrets:\n  - name: 'bad name'\n    value: v\n  - name: a\n  - name: b\n    value: v\n    fromEnv: B\n  - name: c\n    generate: {length: 0}\n  - name: d\n    generate: {length: 8}\n    format: json\n  - name: e\n    json: {}\n",
    "name: x\nsecrets:\n  - name: a\n    value: v\n  - name: a\n    value: v\n",
    "name: x\nsecrets:\n  - name: a\n    value: v\n    sync: {namespace: Bad_NS, secretName: UPPER}\n  - name: b\n    value: v\n    sync: {secretName: same}\n  - name: c\n    value: v\n    sync: {secretName: same}\n",
    "name: x\nverify:\n  namespace: Not_A_Namespace\ntimeouts:\n  cluster: 0\n  eso: 0s\n",
    "name: x\nimages:\n  mirrors: {docker: 'ftp://x'}\n",
    "name: x\nfacts:\n  configMaps: [Bad, devstack-stack-facts]\n  secret: Bad_Secret\n  values: {bad-name: 1, NAMESPACE_X: 2}\n  sensitive: [nope]\n  helmValues:\n    - {name: Bad, namespace: Bad_NS, values: {}, key: 'a/b'}\n",
    "name: x\nfacts:\n  fromEnv: {APP: DEVSTACK_TEST_UNSET_VARIABLE}\n  fromFiles: [missing.env]\n  fromTerraform: [missing.json]\n",
];

#[test]
fn every_profile_error_has_a_hint_of_its_own() {
    let mut walked = 0;
    for body in BAD_PROFILES {
        let text = format!("{HEADER}{body}");
        let err = match super::load::parse_recovering("bad.yaml", &text, PathBuf::from("."))
            .map_err(super::ProfileErrors::into_error)
            .and_then(|loaded| resolve_with_env(loaded, &Overrides::default(), &no_env))
        {
            Err(err) => err,
            Ok(_) => panic!("profile should be rejected:\n{body}"),
        };
        let message = err.message();
        let (errors, hints): (Vec<&str>, Vec<&str>) = if message.contains('\n') {
            let lines: Vec<&str> = message.lines().skip(1).collect();
            lines.iter().partition(|line| !line.starts_with("  hint: "))
        } else {
            (vec![message], err.hint().into_iter().collect())
        };
        assert_eq!(errors.len(), hints.len(), "{body}:\n{message}");
        for (error, hint) in errors.iter().zip(&hints) {
            let hint = hint.trim_start().trim_start_matches("hint: ");
            assert!(
                !hint.is_empty() && hint != "see the profile reference in README.md",
                "{body}: no hint of its own for {error}"
            );
        }
        walked += errors.len();
    }
    assert!(walked >= 55, "only {walked} errors walked");
}

// Kubernetes names and zero durations.

#[test]
fn synced_secrets_need_kubernetes_names_and_a_secret_each() {
    let text = format!(
        "{HEADER}name: x\nsecrets:\n  - name: a\n    value: v\n    sync:\n      namespace: Bad_NS\n      secretName: UPPER\n  - name: app/db\n    value: v\n    sync: {{}}\n  - name: app-db\n    value: v\n    sync:\n      namespace: default\n  - name: c\n    value: v\n    sync:\n      secretName: app-db\nverify:\n  namespace: x.y\n"
    );
    let errors = reported(&text);
    let expected = [
        "8:18: `sync.namespace` `Bad_NS` is no namespace name: character `B` is not allowed",
        "9:19: `sync.secretName` `UPPER` is no Secret name: character `U` is not allowed",
        "15:5: secret `app-db` syncs to the Secret default/app-db, as secret `app/db` does",
        "20:19: secret `c` syncs to the Secret default/app-db, as secret `app/db` does",
        "22:14: `verify.namespace` `x.y` is no namespace name: character `.` is not allowed",
    ];
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (error, expected) in errors.iter().zip(expected) {
        assert!(error.starts_with(expected), "{error}\nexpected {expected}");
    }
    // The same name in two namespaces is two Secrets.
    let text = format!(
        "{HEADER}name: x\nsecrets:\n  - name: a\n    value: v\n    sync: {{secretName: s}}\n  - name: b\n    value: v\n    sync: {{namespace: other, secretName: s}}\n"
    );
    resolve(&text, &Overrides::default(), &HashMap::new()).unwrap();
}

#[test]
fn a_zero_timeout_or_interval_is_refused() {
    for (body, at) in [
        (
            "timeouts:\n  cluster: 0\n",
            "5:12: `timeouts.cluster` is zero",
        ),
        (
            "timeouts:\n  verify: 0s\n",
            "5:11: `timeouts.verify` is zero",
        ),
        (
            "gitops:\n  interval: 0m\n",
            "5:13: `gitops.interval` is zero",
        ),
    ] {
        let errors = reported(&format!("{HEADER}name: x\n{body}"));
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(errors[0].starts_with(at), "{}", errors[0]);
    }
    let dir = ProfileDir::new(&[("apps/a/x.yaml", "")]);
    let (error, hint) = dir.one_error(
        "gitops:\n  apps:\n    - name: a\n      path: apps/a\n      timeout: 0s\n",
        &[],
    );
    assert!(
        error.starts_with("p.yaml:8:16: `gitops.apps[0].timeout` is zero"),
        "{error}"
    );
    assert!(
        hint.contains("remove `gitops.apps[0].timeout` for the default (5m)"),
        "{hint}"
    );
}

#[test]
fn a_port_from_the_environment_follows_the_flag_s_rule() {
    let text = format!("{HEADER}name: x\n");
    for bad in ["abc", "70000", "-1"] {
        let env: HashMap<&str, &str> = [("DEVSTACK_LOCALSTACK_PORT", bad)].into();
        let err = resolve(&text, &Overrides::default(), &env).unwrap_err();
        assert_eq!(
            err.hint(),
            Some(
                "use a number from 1 to 65535, or `auto` (or 0) for a free port, or unset DEVSTACK_LOCALSTACK_PORT"
            ),
            "{bad}"
        );
        let flag = bad.parse::<HostPort>().unwrap_err();
        assert!(flag.ends_with(super::schema::PORT_FORMS), "{flag}");
    }
    let env: HashMap<&str, &str> = [("DEVSTACK_LOCALSTACK_PORT", "0")].into();
    let s = resolve(&text, &Overrides::default(), &env).unwrap();
    assert_eq!(s.localstack.port, HostPort::Auto, "0 means auto everywhere");
    assert_eq!("0".parse::<HostPort>(), Ok(HostPort::Auto));
}

#[test]
fn a_directory_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().to_str().unwrap();
    let err = super::load_reference(reference).unwrap_err();
    assert_eq!(
        err.message(),
        format!("profile `{reference}` is a directory, not a profile file")
    );
    std::fs::write(dir.path().join("devstack.yaml"), "").unwrap();
    let err = super::load_reference(reference).unwrap_err();
    assert!(
        err.hint()
            .unwrap()
            .starts_with("did you mean the profile in it"),
        "{err:?}"
    );
}
