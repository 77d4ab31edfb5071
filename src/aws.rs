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

pub fn secrets_manager(settings: &Settings) -> aws_sdk_secretsmanager::Client {
    let config = aws_sdk_secretsmanager::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(settings.localstack.endpoint_url())
        .region(Region::new(settings.localstack.region.clone()))
        .credentials_provider(credentials())
        .retry_config(retry())
        .timeout_config(timeouts())
        .build();
    aws_sdk_secretsmanager::Client::from_conf(config)
}

/// S3 on the stack's LocalStack, path-style (LocalStack's host name does not
/// resolve bucket subdomains).
pub fn s3(settings: &Settings) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(settings.localstack.endpoint_url())
        .region(Region::new(settings.localstack.region.clone()))
        .credentials_provider(credentials())
        .force_path_style(true)
        .retry_config(retry())
        .timeout_config(timeouts())
        .build();
    aws_sdk_s3::Client::from_conf(config)
}
