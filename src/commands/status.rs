//! `devstack status`: renders the health model ([`crate::health`]) as a
//! table or JSON; `--wait` polls it until the stack is settled, or a
//! signal stops the wait.

use crate::cli::StatusArgs;
use crate::commands::Context;
use crate::error::{Error, Kind};
use crate::health::{self, StatusRow};
use crate::signals::Signals;
use crate::ui::Table;

pub async fn run(ctx: &Context, args: StatusArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let report = match args.wait {
        None => health::collect(&settings).await,
        Some(limit) => {
            let mut signals = Signals::listen()
                .map_err(|e| Error::internal(format!("cannot listen for signals: {e}")))?;
            let progress = |what: &str| ctx.ui.info(format!("waiting for {what}"));
            let waited = health::wait_settled(&settings, limit.get(), &progress);
            tokio::select! {
                report = waited => report,
                signal = signals.next() => {
                    return Err(Error::new(
                        Kind::Interrupted,
                        format!("stopped waiting for stack `{}` to settle", settings.name),
                    )
                    .with_hint("nothing was changed; `devstack status` shows where it stands")
                    .interrupted_by(signal));
                }
            }
        }
    };
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    } else {
        ctx.ui
            .out(render_table(&report.rows, &|ok| ctx.ui.check_mark(ok)));
    }
    if let Some(err) = report.to_error() {
        return Err(crate::commands::diagnose::point(ctx, err).await);
    }
    if let (Some(limit), false) = (args.wait, report.settled) {
        let what = report.first_problem(true).unwrap_or_default();
        let err = Error::timeout(format!(
            "stack `{}` is healthy but did not settle within {limit}: {what}",
            report.stack
        ))
        .with_hint(
            "Flux is still reconciling; wait longer (`devstack status --wait 10m`) or see `kubectl -n flux-system get kustomizations`",
        );
        return Err(crate::commands::diagnose::point(ctx, err).await);
    }
    Ok(0)
}

/// The table on stdout: a mark, then aligned columns.
pub fn render_table(rows: &[StatusRow], mark: &dyn Fn(bool) -> String) -> String {
    let mut table = Table::new(&["COMPONENT", "NAME", "STATE", "DETAIL"]).indent(2);
    for r in rows {
        table.marked_row(
            mark(r.healthy),
            [
                r.component.as_str(),
                r.name.as_str(),
                r.state.as_str(),
                r.detail.as_str(),
            ],
        );
    }
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Health;

    fn plain(ok: bool) -> String {
        if ok { "✓".into() } else { "✗".into() }
    }

    #[test]
    fn table_aligns_columns_and_marks_rows() {
        let rows = vec![
            StatusRow::new("cluster", "devstack-dev", Health::Healthy, "reachable")
                .detail("k3s, 1 node(s)"),
            StatusRow::new(
                "kustomization",
                "flux-system/external-secrets-crs",
                Health::Unhealthy,
                "DependencyNotReady",
            )
            .detail("dependency 'flux-system/external-secrets-operator'\n is not ready"),
            StatusRow::new(
                "localstack",
                "devstack-dev-localstack",
                Health::Missing,
                "missing",
            ),
        ];
        let table = render_table(&rows, &plain);
        insta::assert_snapshot!(table, @r"
          COMPONENT      NAME                              STATE               DETAIL
        ✓ cluster        devstack-dev                      reachable           k3s, 1 node(s)
        ✗ kustomization  flux-system/external-secrets-crs  DependencyNotReady  dependency 'flux-system/external-secrets-operator' is not ready
        ✗ localstack     devstack-dev-localstack           missing
        ");
    }
}
