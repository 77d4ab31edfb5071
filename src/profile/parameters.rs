//! SSM Parameter Store in profiles: the rules AWS gives parameter names
//! and sizes, and what the rest of devstack derives from the parameters
//! (their ExternalSecrets, ARNs). The types are the schema's and the
//! settings' own, re-exported here.

pub use super::schema::{EsoAuth, ParameterSpec, ParameterTier, ParameterType, ParameterValue};
pub use super::settings::ParameterSettings;

use super::Settings;
use super::settings::{kube_name, profile_external_secret_name};

/// SSM's limits (PutParameter): a name of up to 2,048 characters, a value
/// of up to 4 KB in the Standard tier and 8 KB in the Advanced one.
pub const MAX_PARAMETER_NAME: usize = 2048;
pub const MAX_STANDARD_VALUE: usize = 4096;
pub const MAX_ADVANCED_VALUE: usize = 8192;
/// SSM allows at most 15 levels below the root.
const MAX_LEVELS: usize = 15;

pub const PARAMETER_NAME_HINT: &str = "SSM parameter names use letters, digits and _.-/ (at most 2,048); a hierarchical name starts with `/`, e.g. `/dev/app/db-url`";
pub const PARAMETER_SIZE_HINT: &str = "SSM stores up to 4 KB in its Standard tier and 8 KB in its Advanced one; store a reference or split the value";

/// SSM's rules for a parameter name (PutParameter `Name`).
pub fn validate_parameter_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_PARAMETER_NAME {
        return Err(format!(
            "must be 1 to {MAX_PARAMETER_NAME} characters (it has {})",
            name.chars().count()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.-/".contains(*c)))
    {
        return Err(format!("character `{bad}` is not allowed"));
    }
    if name.contains('/') && !name.starts_with('/') {
        return Err(
            "has a `/`, which makes it hierarchical, and a hierarchical name must start with `/`"
                .into(),
        );
    }
    if (name.len() > 1 && name.ends_with('/')) || name.contains("//") || name == "/" {
        return Err("has an empty level (`//`, or a trailing `/`)".into());
    }
    let first = name.trim_start_matches('/').to_ascii_lowercase();
    if first.starts_with("aws") || first.starts_with("ssm") {
        return Err("must not begin with `aws` or `ssm` (SSM reserves them)".into());
    }
    if name.matches('/').count() > MAX_LEVELS {
        return Err(format!(
            "has more than {MAX_LEVELS} levels of hierarchy (SSM's limit)"
        ));
    }
    Ok(())
}

/// The tier a value of `bytes` needs, or why none holds it (the end of a
/// sentence naming the parameter; the value itself never reaches a message).
pub fn tier_for(bytes: usize) -> Result<ParameterTier, String> {
    if bytes <= MAX_STANDARD_VALUE {
        Ok(ParameterTier::Standard)
    } else if bytes <= MAX_ADVANCED_VALUE {
        Ok(ParameterTier::Advanced)
    } else {
        Err(format!(
            "is {bytes} bytes, over the {MAX_ADVANCED_VALUE}-byte limit of SSM's Advanced tier"
        ))
    }
}

/// What a user is told when a value goes to the Advanced tier.
pub fn advanced_notice(name: &str, bytes: usize) -> String {
    format!(
        "parameter `{name}` is {bytes} bytes, over the Standard tier's {MAX_STANDARD_VALUE}: it is stored in the Advanced tier (up to {MAX_ADVANCED_VALUE} bytes; on AWS that tier is charged)"
    )
}

/// The ARN LocalStack gives a parameter: the name without its leading `/`
/// after `parameter/` (as AWS writes it).
pub fn parameter_arn(region: &str, account: &str, name: &str) -> String {
    format!(
        "arn:aws:ssm:{region}:{account}:parameter/{}",
        name.trim_start_matches('/')
    )
}

/// Namespace and name of the ExternalSecret (and its Secret) a parameter
/// syncs to: `sync.secretName`, else the name made a Kubernetes name
/// (`/dev/app/db-url` -> `dev-app-db-url`).
pub fn parameter_external_secret_name(parameter: &ParameterSettings) -> (String, String) {
    let sync = parameter.sync.as_ref();
    let namespace = sync
        .map(|s| s.namespace.clone())
        .unwrap_or_else(|| "default".into());
    let name = sync
        .and_then(|s| s.secret_name.clone())
        .unwrap_or_else(|| kube_name(&parameter.name));
    (namespace, name)
}

/// An ExternalSecret the profile declares: its namespace and name, and
/// what it syncs (secret `app/db`, parameter `/dev/x`).
pub struct SyncTarget {
    pub namespace: String,
    pub name: String,
    pub of: String,
}

/// Every ExternalSecret the profile declares, the secrets' then the parameters'.
pub fn sync_targets(settings: &Settings) -> Vec<SyncTarget> {
    let secrets = settings
        .secrets
        .iter()
        .filter(|s| s.sync.is_some())
        .map(|s| {
            let (namespace, name) = profile_external_secret_name(s);
            let of = format!("secret `{}`", s.name);
            SyncTarget {
                namespace,
                name,
                of,
            }
        });
    let parameters = settings
        .parameters
        .iter()
        .filter(|p| p.sync.is_some())
        .map(|p| {
            let (namespace, name) = parameter_external_secret_name(p);
            let of = format!("parameter `{}`", p.name);
            SyncTarget {
                namespace,
                name,
                of,
            }
        });
    secrets.chain(parameters).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_ssm() {
        for good in ["/dev/app/db-url", "flat_name", "a.b-c", "/x"] {
            validate_parameter_name(good).unwrap();
        }
        let why = |n: &str| validate_parameter_name(n).unwrap_err();
        assert!(why("dev/app").contains("must start with `/`"));
        assert!(why("/dev//x").contains("empty level"));
        assert!(why("/dev/").contains("empty level"));
        assert!(why("/aws/x").contains("`aws`"));
        assert!(why("SSM-x").contains("`ssm`"));
        assert!(why("/a b").contains("character ` `"));
        assert!(why(&format!("/{}", "a".repeat(2048))).contains("it has 2049"));
        validate_parameter_name(&format!("/{}", "a".repeat(2047))).unwrap();
        assert!(why(&"/a".repeat(16)).contains("15 levels"));
    }

    #[test]
    fn tiers_hold_4_and_8_kb() {
        assert_eq!(tier_for(4096), Ok(ParameterTier::Standard));
        assert_eq!(tier_for(4097), Ok(ParameterTier::Advanced));
        assert_eq!(tier_for(8192), Ok(ParameterTier::Advanced));
        assert!(tier_for(8193).unwrap_err().contains("8193 bytes"));
    }

    #[test]
    fn arns_drop_the_leading_slash() {
        assert_eq!(
            parameter_arn("us-east-1", "000000000000", "/dev/app/db-url"),
            "arn:aws:ssm:us-east-1:000000000000:parameter/dev/app/db-url"
        );
        assert_eq!(
            parameter_arn("eu-west-1", "000000000000", "flat"),
            "arn:aws:ssm:eu-west-1:000000000000:parameter/flat"
        );
    }
}
