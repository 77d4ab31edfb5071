//! AWS clients pinned to the stack's LocalStack. Nothing here reads the
//! user's AWS environment (profiles, credentials, endpoints): the endpoint,
//! region and static test credentials are set explicitly, so a real AWS
//! account can never be reached by mistake.

use std::time::Duration;

use aws_sdk_secretsmanager::config::retry::RetryConfig;
use aws_sdk_secretsmanager::config::timeout::TimeoutConfig;
use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};

use crate::profile::Settings;

/// LocalStack accepts any credentials; these are the conventional ones.
pub const TEST_ACCESS_KEY_ID: &str = "test";
pub const TEST_SECRET_ACCESS_KEY: &str = "test";

fn credentials() -> Credentials {
    Credentials::new(
        TEST_ACCESS_KEY_ID,
        TEST_SECRET_ACCESS_KEY,
        None,
        None,
        "devstack-localstack",
    )
}

// Fail fast when LocalStack goes away instead of retrying for minutes.
fn retry() -> RetryConfig {
    RetryConfig::standard().with_max_attempts(3)
}

fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(Duration::from_secs(15))
        .build()
}

// One builder for every service: each SDK crate has its own `Config` type,
// so a macro rather than a function keeps them pinned to the same settings.
macro_rules! localstack_client {
    ($sdk:ident, $settings:expr $(, $extra:ident($arg:expr))*) => {{
        let settings: &Settings = $settings;
        let config = $sdk::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(settings.localstack.endpoint_url())
            .region(Region::new(settings.localstack.region.clone()))
            .credentials_provider(credentials())
            $(.$extra($arg))*
            .retry_config(retry())
            .timeout_config(timeouts())
            .build();
        $sdk::Client::from_conf(config)
    }};
}

pub fn secrets_manager(settings: &Settings) -> aws_sdk_secretsmanager::Client {
    localstack_client!(aws_sdk_secretsmanager, settings)
}

/// S3 on the stack's LocalStack, path-style (LocalStack's host name does not
/// resolve bucket subdomains).
pub fn s3(settings: &Settings) -> aws_sdk_s3::Client {
    localstack_client!(aws_sdk_s3, settings, force_path_style(true))
}

/// SSM (Parameter Store) on the stack's LocalStack.
pub fn ssm(settings: &Settings) -> aws_sdk_ssm::Client {
    localstack_client!(aws_sdk_ssm, settings)
}

/// IAM on the stack's LocalStack: the role `eso.auth: serviceAccount` uses.
pub fn iam(settings: &Settings) -> aws_sdk_iam::Client {
    localstack_client!(aws_sdk_iam, settings)
}
