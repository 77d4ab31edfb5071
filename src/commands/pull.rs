//! `devstack pull`: every artifact the profile needs, fetched and checked
//! against its pin into the cache (or a portable bundle with `--bundle`).

use crate::artifacts::{self, Outcome, PullOptions};
use crate::commands::Context;
use crate::error::Error;

pub async fn run(ctx: &Context) -> Result<i32, Error> {
    // `--bundle DIR` names where to write a bundle, not one to read.
    let target = ctx.global.bundle.clone();
    let settings = ctx.settings(|o| o.bundle = None)?;
    let docker = crate::docker::connect().await?;
    let recorded = crate::stack::Found::recorded(&settings).provider();
    let (settings, choice) = crate::cluster::choice::settle(&docker, &settings, recorded).await?;
    if let Some(notice) = choice.notice() {
        ctx.ui.warn(notice);
    }
    let dir = target.clone().unwrap_or_else(|| settings.artifact_cache());
    let step = std::sync::Arc::new(ctx.ui.step(format!(
        "Artifacts for {} ({})",
        settings.name,
        settings.cluster.provider.as_str()
    )));
    let progress_step = step.clone();
    let report = artifacts::pull(
        docker.as_ref(),
        &settings,
        PullOptions {
            images: true,
            dir,
            with_kind: target.is_some(),
            progress: &move |m| progress_step.progress(m),
        },
    )
    .await;
    let step = std::sync::Arc::try_unwrap(step).ok();
    let report = match report {
        Ok(report) => {
            if let Some(step) = step {
                step.done(report.summary());
            }
            report
        }
        Err(err) => {
            if let Some(step) = step {
                step.fail(err.message());
            }
            return Err(err);
        }
    };
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
        return Ok(0);
    }
    let rows: Vec<[String; 4]> = report
        .artifacts
        .iter()
        .map(|a| {
            let digest = a
                .digest
                .as_deref()
                .map(|d| format!("{}…", &d[..d.len().min(19)]))
                .unwrap_or_else(|| "(not pinned)".into());
            let how = match a.outcome {
                Outcome::Cached => "cached",
                Outcome::FromDocker => "from Docker",
                Outcome::Pulled => "pulled",
                Outcome::Downloaded => "downloaded",
            };
            [
                a.name.clone(),
                digest,
                artifacts::human_bytes(a.size),
                how.to_string(),
            ]
        })
        .collect();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1), width(2));
    for [name, digest, size, how] in &rows {
        ctx.ui
            .out(format!("{name:<w0$}  {digest:<w1$}  {size:>w2$}  {how}"));
    }
    if let Some(path) = &report.pins_file {
        ctx.ui
            .info(format!("pins: {} (DEVSTACK_PINS)", path.display()));
    }
    match &target {
        Some(dir) => ctx.ui.info(format!(
            "bundle: {} (use it on another machine with DEVSTACK_BUNDLE={} or --bundle)",
            dir.display(),
            dir.display()
        )),
        None => ctx.ui.info(format!("cache: {}", report.dir.display())),
    }
    Ok(0)
}
