//! Unit tests of `parameters` and `eso.auth`: every bad input refused at
//! its position with a hint, nothing resolved; good input resolved.

use std::path::PathBuf;

use crate::profile::load::parse_recovering;
use crate::profile::parameters::{EsoAuth, ParameterTier, ParameterType};
use crate::profile::resolve::resolve_with_env;
use crate::profile::settings::{Overrides, SecretSource};

const HEADER: &str = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: x\n";

fn no_env(_: &str) -> Option<String> {
    None
}

fn resolve(text: &str) -> crate::Result<crate::profile::Settings> {
    let loaded = parse_recovering("p.yaml", text, PathBuf::from("."))
        .map_err(crate::profile::ProfileErrors::into_error)?;
    resolve_with_env(loaded, &Overrides::default(), &no_env)
}

/// The one error of a profile as `(line:column, message, hint)`.
fn error_of(text: &str) -> (String, String, String) {
    let err = match resolve(text) {
        Err(err) => err,
        Ok(_) => panic!("profile should be rejected:\n{text}"),
    };
    assert_eq!(err.kind(), crate::Kind::User);
    assert_eq!(err.exit_code(), 2, "a profile error exits 2");
    let message = err.message().to_string();
    let rest = message
        .strip_prefix("invalid profile p.yaml:")
        .unwrap_or_else(|| panic!("one positioned error expected: {message}"));
    let (line, rest) = rest.split_once(':').unwrap();
    let (column, rest) = rest.split_once(": ").unwrap();
    (
        format!("{line}:{column}"),
        rest.to_string(),
        err.hint().unwrap_or_default().to_string(),
    )
}

fn parameters(body: &str) -> String {
    format!("{HEADER}parameters:\n{body}")
}

#[test]
fn a_hierarchical_name_without_its_leading_slash_is_refused_at_the_name() {
    let (at, message, hint) = error_of(&parameters("  - name: dev/app/db-url\n    value: x\n"));
    assert_eq!(at, "5:11");
    assert_eq!(
        message,
        "invalid parameter name `dev/app/db-url`: has a `/`, which makes it hierarchical, and a hierarchical name must start with `/`"
    );
    assert!(hint.contains("`/dev/app/db-url`"), "{hint}");
}

#[test]
fn a_name_over_2048_characters_is_refused_without_quoting_all_of_it() {
    let long = format!("/{}", "n".repeat(2048));
    let (at, message, hint) = error_of(&parameters(&format!("  - value: x\n    name: {long}\n")));
    assert_eq!(at, "6:11");
    assert!(
        message.ends_with(": must be 1 to 2048 characters (it has 2049)"),
        "{message}"
    );
    assert!(message.len() < 200, "the whole name was quoted");
    assert!(hint.contains("at most 2,048"), "{hint}");
}

#[test]
fn a_value_over_8_kb_is_refused_and_one_over_4_kb_goes_to_the_advanced_tier() {
    let (at, message, hint) = error_of(&parameters(&format!(
        "  - name: /big\n    value: {}\n",
        "v".repeat(8193)
    )));
    assert_eq!(at, "6:12");
    assert_eq!(
        message,
        "parameter `/big`: `value` is 8193 bytes, over the 8192-byte limit of SSM's Advanced tier"
    );
    assert!(
        hint.contains("4 KB in its Standard tier and 8 KB"),
        "{hint}"
    );
    assert!(!message.contains("vvvv"));

    let settings = resolve(&parameters(&format!(
        "  - name: /fits\n    value: {}\n  - name: /larger\n    value: {}\n",
        "v".repeat(4096),
        "w".repeat(4097)
    )))
    .unwrap();
    let tiers: Vec<ParameterTier> = settings.parameters.iter().map(|p| p.tier).collect();
    assert_eq!(tiers, [ParameterTier::Standard, ParameterTier::Advanced]);
    assert_eq!(
        settings.notices,
        [
            "parameter `/larger` is 4097 bytes, over the Standard tier's 4096: it is stored in the Advanced tier (up to 8192 bytes; on AWS that tier is charged)"
        ]
    );
}

#[test]
fn a_string_list_given_an_object_is_refused_at_the_value() {
    let (at, message, hint) = error_of(&parameters(
        "  - name: /dev/hosts\n    type: StringList\n    value: {a: b}\n",
    ));
    assert_eq!(at, "7:12");
    assert_eq!(
        message,
        "parameter `/dev/hosts` is a StringList and is given an object"
    );
    assert!(hint.contains("`value: [a, b]`"), "{hint}");
    let (at, message, _) = error_of(&parameters(
        "  - name: /dev/hosts\n    type: StringList\n    json: {a: b}\n",
    ));
    assert_eq!(at, "7:11");
    assert_eq!(
        message,
        "parameter `/dev/hosts` is a StringList and is given an object (`json`)"
    );
}

#[test]
fn two_parameters_with_one_name_are_refused_at_the_second() {
    let (at, message, hint) = error_of(&parameters(
        "  - name: /dev/a\n    value: x\n  - name: /dev/a\n    value: y\n",
    ));
    assert_eq!(at, "7:11");
    assert_eq!(
        message,
        "parameter `/dev/a` is declared twice (first at line 5)"
    );
    assert!(hint.contains("unique name"), "{hint}");
}

#[test]
fn an_unknown_eso_auth_is_refused_with_the_known_ones() {
    let (at, message, hint) = error_of(&format!("{HEADER}eso:\n  auth: irsa\n"));
    assert_eq!(at, "5:9");
    assert!(message.contains("unknown value `irsa`"), "{message}");
    assert!(hint.contains("`static`, `serviceAccount`"), "{hint}");
}

#[test]
fn every_mistake_is_reported_in_one_run_and_nothing_resolves() {
    let text = parameters(
        "  - name: dev/a\n    value: x\n  - name: /b\n    type: StringList\n    value: {k: v}\n  - name: /b\n    value: z\n",
    );
    let err = resolve(&text).expect_err("rejected");
    let message = err.message();
    assert!(
        message.starts_with("invalid profile p.yaml: 3 errors"),
        "{message}"
    );
    for at in ["p.yaml:5:11:", "p.yaml:9:12:", "p.yaml:10:11:"] {
        assert!(message.contains(at), "{at} in {message}");
    }
}

#[test]
fn good_parameters_resolve_with_their_types_sources_and_services() {
    let settings = resolve(&format!(
        "{HEADER}eso:\n  auth: serviceAccount\nparameters:\n  - name: /dev/app/db-url\n    value: postgres://db\n    sync: {{namespace: apps}}\n  - name: /dev/app/hosts\n    type: StringList\n    value: [a, b, c]\n  - name: /dev/app/token\n    type: SecureString\n    generate: {{length: 24}}\n  - name: flat\n    json: {{user: u}}\n"
    ))
    .unwrap();
    assert_eq!(settings.eso.auth, EsoAuth::ServiceAccount);
    let kinds: Vec<ParameterType> = settings.parameters.iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        [
            ParameterType::String,
            ParameterType::StringList,
            ParameterType::SecureString,
            ParameterType::String
        ]
    );
    assert_eq!(
        settings.parameters[1]
            .source
            .inline_value()
            .unwrap()
            .expose(),
        "a,b,c"
    );
    assert!(matches!(
        settings.parameters[2].source,
        SecretSource::Generate(_)
    ));
    assert_eq!(
        crate::profile::parameter_external_secret_name(&settings.parameters[0]),
        ("apps".to_string(), "dev-app-db-url".to_string())
    );
    // SSM for the parameters, IAM for the role, beside the defaults.
    for service in ["secretsmanager", "sts", "s3", "ssm", "iam"] {
        assert!(
            settings.localstack.services.iter().any(|s| s == service),
            "{service}: {:?}",
            settings.localstack.services
        );
    }
    // Values stay masked in what `profile show` prints.
    let shown = serde_json::to_string(&settings).unwrap();
    assert!(!shown.contains("postgres://db"), "{shown}");
}

#[test]
fn listed_services_must_include_ssm_and_iam_when_needed() {
    let (at, message, hint) = error_of(&format!(
        "{HEADER}localstack:\n  services: [secretsmanager, sts, s3]\nparameters:\n  - {{name: /a, value: x}}\n"
    ));
    assert_eq!(at, "5:13");
    assert_eq!(
        message,
        "`localstack.services` lacks `ssm`, which the profile's `parameters` are stored in"
    );
    assert_eq!(hint, "add `ssm` to localstack.services");
}

#[test]
fn a_profile_without_parameters_has_static_keys_and_no_extra_services() {
    let settings = resolve(HEADER).unwrap();
    assert_eq!(settings.eso.auth, EsoAuth::Static);
    assert!(settings.parameters.is_empty());
    assert_eq!(
        settings.localstack.services,
        ["secretsmanager", "sts", "s3"]
    );
}
