//! The IAM role of `eso.auth: serviceAccount`: created in LocalStack's IAM
//! with the trust policy EKS gives an IRSA role (web identity from the
//! cluster's OIDC issuer, for the ESO controller's ServiceAccount), so the
//! store's `AssumeRoleWithWebIdentity` names a role that exists. LocalStack
//! does not check the token's signature nor evaluate the policy: the role
//! and its policy are there so that the setup reads as production's, and so
//! that `diagnose` can tell a missing role or a wrong policy.

use serde::Serialize;
use serde_json::{Value, json};

use super::{AwsErrorInfo, Outcome, SeedOptions};
use crate::error::{Error, Kind};
use crate::profile::Settings;
use crate::profile::parameters::EsoAuth;

/// LocalStack's account for any credentials that name none.
pub const LOCALSTACK_ACCOUNT: &str = "000000000000";
/// The issuer of service-account tokens in K3s and Kind clusters (their
/// API servers' default `--service-account-issuer`), as the OIDC provider
/// EKS registers for a cluster is named after its issuer.
pub const CLUSTER_ISSUER: &str = "kubernetes.default.svc.cluster.local";
/// The audience EKS's pod identity webhook requests for the token.
pub const TOKEN_AUDIENCE: &str = "sts.amazonaws.com";

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleResult {
    pub name: String,
    pub arn: String,
    pub outcome: Outcome,
}

impl RoleResult {
    pub fn outcome_word(&self) -> &'static str {
        match self.outcome {
            Outcome::Created => "created",
            Outcome::Updated => "updated (trust policy)",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// The role's name: `<stack>-eso`.
pub fn role_name(settings: &Settings) -> String {
    format!("{}-eso", settings.name)
}

/// The ARN the ESO controller's ServiceAccount is annotated with.
pub fn role_arn(settings: &Settings) -> String {
    format!(
        "arn:aws:iam::{LOCALSTACK_ACCOUNT}:role/{}",
        role_name(settings)
    )
}

/// The ServiceAccount (namespace, name) the role trusts: the controller's,
/// which the chart names after the release.
pub fn service_account(settings: &Settings) -> (String, String) {
    settings.names.helm_release()
}

/// The trust policy EKS documents for an IRSA role.
pub fn trust_policy(settings: &Settings) -> Value {
    let (namespace, account) = service_account(settings);
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": format!("arn:aws:iam::{LOCALSTACK_ACCOUNT}:oidc-provider/{CLUSTER_ISSUER}")},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                format!("{CLUSTER_ISSUER}:sub"): format!("system:serviceaccount:{namespace}:{account}"),
                format!("{CLUSTER_ISSUER}:aud"): TOKEN_AUDIENCE,
            }},
        }],
    })
}

/// What is wrong with a stored trust policy (as IAM returns it: JSON,
/// maybe URL-encoded), or `None` when it lets the controller's token in.
pub fn trust_policy_problem(settings: &Settings, stored: &str) -> Option<String> {
    let decoded = percent_decode(stored);
    let Ok(policy) = serde_json::from_str::<Value>(&decoded) else {
        return Some("it is not JSON".into());
    };
    let (namespace, account) = service_account(settings);
    let subject = format!("system:serviceaccount:{namespace}:{account}");
    let statements: Vec<&Value> = match &policy["Statement"] {
        Value::Array(list) => list.iter().collect(),
        single @ Value::Object(_) => vec![single],
        _ => Vec::new(),
    };
    let action_ok = |s: &Value| match &s["Action"] {
        Value::String(a) => a == "sts:AssumeRoleWithWebIdentity",
        Value::Array(list) => list.iter().any(|a| a == "sts:AssumeRoleWithWebIdentity"),
        _ => false,
    };
    let allowing: Vec<&&Value> = statements
        .iter()
        .filter(|s| s["Effect"] == "Allow" && action_ok(s))
        .collect();
    if allowing.is_empty() {
        return Some("no statement allows `sts:AssumeRoleWithWebIdentity`".into());
    }
    let federated = allowing.iter().any(|s| {
        s["Principal"]["Federated"]
            .as_str()
            .is_some_and(|f| f.contains(":oidc-provider/"))
    });
    if !federated {
        return Some("its principal is no `Federated` OIDC provider".into());
    }
    let subjects: Vec<String> = allowing
        .iter()
        .flat_map(|s| {
            s["Condition"]
                .as_object()
                .into_iter()
                .flat_map(|ops| ops.values())
                .filter_map(|c| c.as_object())
                .flat_map(|c| c.iter())
                .filter(|(k, _)| k.ends_with(":sub"))
                .flat_map(|(_, v)| match v {
                    Value::Array(list) => list
                        .iter()
                        .filter_map(|x| x.as_str())
                        .map(String::from)
                        .collect(),
                    other => other
                        .as_str()
                        .map(String::from)
                        .into_iter()
                        .collect::<Vec<_>>(),
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if !subjects.is_empty() && !subjects.iter().any(|s| s == &subject || s == "*") {
        return Some(format!(
            "its `:sub` condition names {}, not the controller's ServiceAccount `{subject}`",
            subjects.join(", ")
        ));
    }
    None
}

fn percent_decode(text: &str) -> String {
    if !text.contains('%') {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(hex) = std::str::from_utf8(&bytes[i + 1..i + 3])
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Creates the role, or puts its trust policy right; nothing without
/// `eso.auth: serviceAccount`.
pub(super) async fn ensure(
    settings: &Settings,
    options: SeedOptions,
) -> Result<Option<RoleResult>, Error> {
    if settings.eso.auth != EsoAuth::ServiceAccount {
        return Ok(None);
    }
    let iam = crate::aws::iam(settings);
    let name = role_name(settings);
    let endpoint = settings.localstack.endpoint_url();
    let fail = |op: &str, e: &dyn AwsErrorInfo| role_error(&name, op, e, &endpoint);
    let policy = trust_policy(settings).to_string();
    let outcome = match iam.get_role().role_name(&name).send().await {
        Ok(out) => {
            let stored = out
                .role()
                .and_then(|r| r.assume_role_policy_document())
                .unwrap_or_default();
            if trust_policy_problem(settings, stored).is_none() {
                Outcome::Unchanged
            } else {
                if !options.dry_run {
                    iam.update_assume_role_policy()
                        .role_name(&name)
                        .policy_document(&policy)
                        .send()
                        .await
                        .map_err(|e| fail("update the trust policy of", &e))?;
                }
                Outcome::Updated
            }
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) =>
        {
            if !options.dry_run {
                iam.create_role()
                    .role_name(&name)
                    .assume_role_policy_document(&policy)
                    .description(format!(
                        "devstack stack {}: the External Secrets Operator's role (IRSA)",
                        settings.name
                    ))
                    .send()
                    .await
                    .map_err(|e| fail("create", &e))?;
            }
            Outcome::Created
        }
        Err(e) => return Err(fail("read", &e)),
    };
    Ok(Some(RoleResult {
        arn: role_arn(settings),
        name,
        outcome,
    }))
}

fn role_error(name: &str, op: &str, err: &dyn AwsErrorInfo, endpoint: &str) -> Error {
    if err.is_dispatch_or_timeout() {
        return Error::new(
            Kind::Prerequisite,
            format!("cannot {op} IAM role `{name}`: LocalStack at {endpoint} did not answer"),
        )
        .with_hint("start it with `devstack localstack up` (or `devstack up`), then seed again: seeding converges");
    }
    Error::new(
        Kind::Internal,
        format!(
            "cannot {op} IAM role `{name}`: LocalStack rejected it: {}: {}",
            err.code().unwrap_or("Unknown"),
            err.message().unwrap_or("no message")
        ),
    )
    .with_hint("`eso.auth: serviceAccount` needs `iam` and `sts` in localstack.services; `devstack localstack logs` shows LocalStack's side")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let text = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\neso:\n  auth: serviceAccount\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.yaml");
        std::fs::write(&path, text).unwrap();
        crate::profile::select(Some(path.to_str().unwrap()), &Default::default()).unwrap()
    }

    #[test]
    fn the_trust_policy_is_irsas_and_is_checked_as_such() {
        let s = settings();
        assert_eq!(role_arn(&s), "arn:aws:iam::000000000000:role/t-eso");
        let policy = trust_policy(&s);
        assert_eq!(
            policy["Statement"][0]["Condition"]["StringEquals"]["kubernetes.default.svc.cluster.local:sub"],
            "system:serviceaccount:external-secrets:external-secrets"
        );
        assert_eq!(trust_policy_problem(&s, &policy.to_string()), None);
        // IAM hands policies back URL-encoded.
        let encoded = policy
            .to_string()
            .replace('{', "%7B")
            .replace('}', "%7D")
            .replace('"', "%22");
        assert_eq!(trust_policy_problem(&s, &encoded), None);
        let mut other = policy.clone();
        other["Statement"][0]["Condition"]["StringEquals"]["kubernetes.default.svc.cluster.local:sub"] =
            "system:serviceaccount:x:y".into();
        assert_eq!(
            trust_policy_problem(&s, &other.to_string()).unwrap(),
            "its `:sub` condition names system:serviceaccount:x:y, not the controller's ServiceAccount `system:serviceaccount:external-secrets:external-secrets`"
        );
        let assume = json!({"Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
        assert_eq!(
            trust_policy_problem(&s, &assume.to_string()).unwrap(),
            "no statement allows `sts:AssumeRoleWithWebIdentity`"
        );
    }
}
