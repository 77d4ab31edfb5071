//! Reading a test stack's LocalStack directly, bypassing devstack.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::*;

/// Settings for a test profile, to talk to its LocalStack directly.
pub fn settings(profile: &Path) -> devstack::profile::Settings {
    devstack::profile::select(Some(profile.to_str().unwrap()), &Default::default()).unwrap()
}

/// Reads a secret's current value straight from LocalStack.
pub async fn secret_value(settings: &devstack::profile::Settings, name: &str) -> Option<String> {
    let client = devstack::aws::secrets_manager(settings);
    client
        .get_secret_value()
        .secret_id(name)
        .send()
        .await
        .ok()?
        .secret_string
}

pub async fn secret_names(settings: &devstack::profile::Settings) -> Vec<String> {
    let client = devstack::aws::secrets_manager(settings);
    let list = client
        .list_secrets()
        .max_results(100)
        .send()
        .await
        .expect("list secrets");
    list.secret_list
        .unwrap_or_default()
        .into_iter()
        .filter_map(|s| s.name)
        .collect()
}
