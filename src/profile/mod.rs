//! Profiles: versioned, strictly loaded YAML that describes a stack.

pub mod duration;
pub mod facts;
pub mod load;
pub mod names;
pub mod parameters;
pub mod resolve;
pub mod schema;
pub mod secret;
pub mod settings;
mod text;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use duration::HumanDuration;
pub use load::{LoadedProfile, ProfileError, ProfileErrors, Provenance};
pub use names::StackNames;
pub use parameters::parameter_external_secret_name;
pub use schema::{EsoInstall, GitopsLayout, GitopsSourceKind, HostPort, LocalStackMode, Provider};
pub use secret::SecretString;
pub use settings::{
    AppSettings, ClusterEso, Fact, FactSource, FactsSettings, HelmValuesSettings, ImageSettings,
    Overrides, SecretSource, Settings,
};

use crate::envvars;
use crate::error::Error;

/// Profiles built into the binary, usable by name from anywhere.
pub const SHIPPED: &[(&str, &str)] = &[
    ("dev", include_str!("../../profiles/dev.yaml")),
    ("ci", include_str!("../../profiles/ci.yaml")),
    ("demo", include_str!("../../profiles/demo.yaml")),
];

/// A profile in the current directory picked up when no profile is named.
pub const LOCAL_PROFILE_FILE: &str = "devstack.yaml";

/// Loads the profile named by `--profile`, `DEVSTACK_PROFILE`, a
/// `devstack.yaml` in the current directory, or the built-in default, in
/// that order, and resolves it with the overrides.
pub fn select(profile_arg: Option<&str>, overrides: &Overrides) -> Result<Settings, Error> {
    let chosen = profile_arg
        .map(str::to_string)
        .or_else(|| envvars::get(envvars::DEVSTACK_PROFILE));
    match chosen {
        Some(reference) => {
            let mut settings = Settings::resolve(load_reference(&reference)?, overrides)?;
            settings.profile_reference = Some(reference);
            Ok(settings)
        }
        None if Path::new(LOCAL_PROFILE_FILE).is_file() => {
            Settings::resolve(load::load_file(Path::new(LOCAL_PROFILE_FILE))?, overrides)
        }
        None => Settings::builtin(overrides),
    }
}

/// A path to a profile file, or the name of a shipped profile.
pub fn load_reference(reference: &str) -> Result<LoadedProfile, Error> {
    let path = Path::new(reference);
    if path.is_file() {
        return load::load_file(path);
    }
    if let Some((name, text)) = SHIPPED.iter().find(|(name, _)| *name == reference) {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let mut loaded = load::parse_recovering(&format!("<shipped profile {name}>"), text, cwd)
            .map_err(ProfileErrors::into_error)?;
        loaded.provenance = load::Provenance::Shipped(name.to_string());
        return Ok(loaded);
    }
    if path.is_dir() {
        let inside = path.join(LOCAL_PROFILE_FILE);
        let hint = if inside.is_file() {
            format!("did you mean the profile in it, {}?", inside.display())
        } else {
            format!("pass the profile file itself, e.g. {}", inside.display())
        };
        return Err(Error::user(format!(
            "profile `{reference}` is a directory, not a profile file"
        ))
        .with_hint(hint));
    }
    let names: Vec<String> = SHIPPED.iter().map(|(n, _)| n.to_string()).collect();
    let hint = match load::closest_match(reference, &names) {
        Some(close) => format!("did you mean the shipped profile `{close}`?"),
        None => format!(
            "pass a profile file path, or one of the shipped profiles: {}",
            names.join(", ")
        ),
    };
    Err(Error::user(format!(
        "profile `{reference}` not found: no such file and no shipped profile of that name"
    ))
    .with_hint(hint))
}
