//! `devstack profile validate|show|list`.

use serde_json::json;

use crate::cli::ProfileCommand;
use crate::commands::Context;
use crate::error::Error;
use crate::profile::{self, load};

pub fn run(ctx: &Context, cmd: ProfileCommand) -> Result<i32, Error> {
    match cmd {
        ProfileCommand::Validate { files } => validate(ctx, &files),
        ProfileCommand::Show { origins } => show(ctx, origins),
        ProfileCommand::List => list(ctx),
    }
}

fn validate(ctx: &Context, files: &[std::path::PathBuf]) -> Result<i32, Error> {
    let mut results = Vec::new();
    let mut failed = 0;
    for file in files {
        // As `--profile` reads it: a file, else a shipped profile's name.
        let loaded = match file.to_str() {
            Some(reference) => profile::load_reference(reference),
            None => load::load_file(file),
        };
        let outcome = loaded
            .and_then(|loaded| profile::Settings::resolve(loaded, &profile::Overrides::default()))
            .and_then(|settings| {
                crate::gitops::repository::check_substitution(&settings)?;
                // As `up` refuses it in preflight: a version no node image is pinned for.
                let pins = crate::artifacts::Pins::load(settings.images.pins_file.as_deref())?;
                crate::artifacts::check_version(&settings, &pins).map_err(|err| {
                    let named = Error::user(format!(
                        "invalid profile {}: {}",
                        settings.profile,
                        err.message()
                    ));
                    match err.hint() {
                        Some(hint) => named.with_hint(hint),
                        None => named,
                    }
                })?;
                Ok(settings)
            });
        match outcome {
            Ok(settings) => {
                ctx.ui.info(format!(
                    "{} {}: valid (stack `{}`, provider {})",
                    ctx.ui.check_mark(true),
                    file.display(),
                    settings.name,
                    settings.cluster.provider.as_str()
                ));
                for notice in &settings.notices {
                    ctx.ui.warn(format!("{}: {notice}", file.display()));
                }
                results.push(json!({
                    "file": file, "valid": true, "name": settings.name,
                    "notices": settings.notices,
                }));
            }
            Err(err) => {
                failed += 1;
                ctx.ui.error(&err);
                results.push(json!({
                    "file": file, "valid": false,
                    "error": err.message(), "hint": err.hint(),
                }));
            }
        }
    }
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&json!({"valid": failed == 0, "profiles": results}));
    }
    if failed > 0 {
        return Ok(crate::error::Kind::User.exit_code());
    }
    Ok(0)
}

fn show(ctx: &Context, origins: bool) -> Result<i32, Error> {
    let mut settings = ctx.settings(|_| {})?;
    let provider_pinned = settings.provider_pinned();
    if !origins {
        settings.origins.clear();
    }
    let render_error =
        |e: &dyn std::fmt::Display| Error::internal(format!("cannot render settings: {e}"));
    if ctx.ui.json() {
        let value = serde_json::to_value(&settings).map_err(|e| render_error(&e))?;
        ctx.ui.emit_json(&value);
    } else {
        let yaml = serde_saphyr::to_string(&settings).map_err(|e| render_error(&e))?;
        ctx.ui.out(yaml.trim_end());
        // What `up` settles only when it runs (it may fetch kind).
        if !provider_pinned {
            ctx.ui.info(
                "note: cluster.provider is not pinned: a new stack uses Kind when kind is on PATH, in the bundle or can be fetched, else K3s; `devstack doctor` says which this machine gets",
            );
        }
    }
    Ok(0)
}

fn list(ctx: &Context) -> Result<i32, Error> {
    let mut rows = Vec::new();
    for (name, text) in profile::SHIPPED {
        let loaded = load::parse(name, text, std::path::PathBuf::from("."))
            .map_err(profile::ProfileErrors::into_error)?;
        let description = loaded.spec.description.clone().unwrap_or_default();
        rows.push(json!({"name": name, "description": description}));
        ctx.ui.out(format!("{name:<6} {description}"));
    }
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!(rows));
    }
    Ok(0)
}
