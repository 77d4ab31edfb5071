//! `devstack facts`: the facts Flux substitutes in the stack's manifests.

use crate::cli::FactsArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::gitops::repository;
use crate::ui::Table;

pub async fn run(ctx: &Context, args: FactsArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let report = repository::report(&settings).await?;
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("facts serialize"));
        return Ok(0);
    }
    if args.dotenv {
        ctx.ui.print(repository::dotenv(&report));
        return Ok(0);
    }
    let mut table = Table::new(&["NAME", "VALUE", "SOURCE"]);
    for row in &report.facts {
        let value = row
            .value
            .clone()
            .unwrap_or_else(|| repository::REDACTED.to_string());
        table.row([row.name.clone(), value, row.source.clone()]);
    }
    ctx.ui.out(table);
    let mut published = format!(
        "published in ConfigMap(s) {}",
        report.config_maps.join(", ")
    );
    if let Some(secret) = &report.secret {
        published.push_str(&format!(
            " and, sensitive ones, Secret {secret} (`kubectl -n {ns} get secret {secret} -o jsonpath='{{.data.NAME}}' | base64 -d` reads one)",
            ns = crate::gitops::FLUX_NAMESPACE
        ));
    }
    ctx.ui.info(published);
    Ok(0)
}
