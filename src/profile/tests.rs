use std::collections::HashMap;
use std::path::PathBuf;

use super::load::{Position, parse_for_test};
use super::schema::{HostPort, Provider};
use super::settings::{Origin, Overrides, SecretSource, resolve_with_env};

const HEADER: &str = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\n";

fn err_of(text: &str) -> super::ProfileError {
    parse_for_test(text).expect_err("profile should be rejected")
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
    assert_eq!(err.position, at(5, 9));
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
    assert_eq!(s.cluster.provider, Provider::K3s);

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
        let err = port(bad).expect_err(bad);
        assert!(
            err.message().contains("localstack"),
            "{bad}: {}",
            err.message()
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
