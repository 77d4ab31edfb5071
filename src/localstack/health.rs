//! LocalStack's health endpoint, and what it says of the profile's services.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::Error;
use crate::profile::Settings;

/// The profile's services that LocalStack's health report does not give as
/// `available` or `running`.
pub fn unavailable_services<'a>(
    settings: &'a Settings,
    health: &BTreeMap<String, String>,
) -> Vec<&'a String> {
    settings
        .localstack
        .services
        .iter()
        .filter(|s| {
            !matches!(
                health.get(*s).map(String::as_str),
                Some("available" | "running")
            )
        })
        .collect()
}

/// LocalStack's health endpoint (`/_localstack/health`): the one client
/// `up`, `status`, `verify` and `localstack status` ask, with a short
/// timeout so a hung LocalStack is reported, not waited on.
pub struct HealthClient {
    http: reqwest::Client,
    url: String,
}

impl HealthClient {
    /// For LocalStack at `endpoint` (`http://127.0.0.1:4566`).
    pub fn new(endpoint: &str) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .no_proxy()
            .build()
            .map_err(|e| Error::internal(format!("HTTP client: {e}")))?;
        Ok(HealthClient {
            http,
            url: format!("{endpoint}/_localstack/health"),
        })
    }

    /// Service name -> state, or why LocalStack did not answer.
    pub async fn services(&self) -> Result<BTreeMap<String, String>, String> {
        health(&self.http, &self.url).await
    }
}

async fn health(client: &reqwest::Client, url: &str) -> Result<BTreeMap<String, String>, String> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("health endpoint: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("health endpoint answered {}", response.status()));
    }
    let body: serde_json::Value = response
        .json()
        .await
        .map_err(|e| format!("health endpoint: {e}"))?;
    Ok(body
        .get("services")
        .and_then(|s| s.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("?").to_string()))
                .collect()
        })
        .unwrap_or_default())
}
