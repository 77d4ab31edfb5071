//! `devstack snapshot save|list|rm|export|import`: the library's snapshot
//! store, rendered.

use serde_json::json;

use crate::cli::SnapshotCommand;
use crate::commands::Context;
use crate::error::Error;
use crate::snapshot::{self, Info};
use crate::stack::Stack;
use crate::ui::{Table, format_duration};

pub async fn run(ctx: &Context, command: SnapshotCommand) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    match command {
        SnapshotCommand::Save { snapshot: name } => {
            let stack = Stack::new(settings).with_ui(ctx.ui.clone());
            let report = stack.snapshot_save(name.as_deref()).await?;
            let info = &report.snapshot;
            ctx.ui.info(format!(
                "snapshot `{}` {} in {} ({}, nodes paused {}): {}",
                info.name,
                if report.replaced { "replaced" } else { "saved" },
                millis(report.elapsed_ms),
                size(info.bytes),
                millis(report.paused_ms),
                info.path.display()
            ));
            let profile = stack
                .settings()
                .profile_reference
                .as_ref()
                .map(|p| format!(" -p {p}"))
                .unwrap_or_default();
            ctx.ui.info(format!(
                "next:\n  devstack{profile} --name NEW up --from-snapshot {0}   # a new stack from it\n  devstack snapshot export {0} {0}.devstack-snapshot   # one file for a CI cache",
                info.name
            ));
            if ctx.ui.json() {
                ctx.ui
                    .emit_json(&serde_json::to_value(&report).expect("report serializes"));
            }
        }
        SnapshotCommand::List => {
            let snapshots = snapshot::list(&settings)?;
            if ctx.ui.json() {
                ctx.ui.emit_json(&json!({ "snapshots": snapshots }));
            } else if snapshots.is_empty() {
                ctx.ui.info(format!(
                    "no snapshots in {} (`devstack snapshot save` makes one)",
                    snapshot::store_dir(&settings).display()
                ));
            } else {
                ctx.ui.out(table(&snapshots));
            }
        }
        SnapshotCommand::Rm { snapshot: name } => {
            let removal = snapshot::remove(&settings, &name).await?;
            ctx.ui.info(format!("removed snapshot `{name}`"));
            if !removal.volumes_in_use.is_empty() {
                ctx.ui.info(format!(
                    "volume(s) {} stay until the stacks restored from `{name}` are down",
                    removal.volumes_in_use.join(", ")
                ));
            }
            if removal.docker_unreachable {
                ctx.ui.info(
                    "Docker is not reachable: the snapshot's shared volume stays until the next `devstack down` or `snapshot rm` with Docker running",
                );
            }
            if ctx.ui.json() {
                ctx.ui.emit_json(&json!({
                    "removed": name,
                    "volumesInUse": removal.volumes_in_use,
                    "dockerUnreachable": removal.docker_unreachable,
                }));
            }
        }
        SnapshotCommand::Export {
            snapshot: name,
            file,
        } => {
            let started = std::time::Instant::now();
            let info = snapshot::export(&settings, &name, &file).await?;
            ctx.ui.info(format!(
                "exported snapshot `{name}` to {} ({}) in {}",
                file.display(),
                size(info.bytes),
                format_duration(started.elapsed())
            ));
            if ctx.ui.json() {
                ctx.ui.emit_json(&json!({ "snapshot": info, "file": file }));
            }
        }
        SnapshotCommand::Import {
            file,
            snapshot: name,
        } => {
            let started = std::time::Instant::now();
            let info = snapshot::import(&settings, &file, name.as_deref()).await?;
            ctx.ui.info(format!(
                "imported snapshot `{}` from {} ({}) in {}",
                info.name,
                file.display(),
                size(info.bytes),
                format_duration(started.elapsed())
            ));
            if ctx.ui.json() {
                ctx.ui.emit_json(&json!({ "snapshot": info }));
            }
        }
    }
    Ok(0)
}

fn millis(ms: u64) -> String {
    format_duration(std::time::Duration::from_millis(ms))
}

fn size(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn table(snapshots: &[Info]) -> String {
    let mut table = Table::new(&["NAME", "PROFILE", "STACK", "SIZE", "CLUSTER IMAGE"])
        .gap(1)
        .gap_before(4, 2)
        .min_widths(&[20, 10, 12, 10])
        .right_aligned(3);
    for s in snapshots {
        let image = s.versions.get("clusterImage").map_or("?", String::as_str);
        table.row([
            s.name.as_str(),
            s.profile.as_str(),
            s.stack.as_str(),
            &size(s.bytes),
            image,
        ]);
    }
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, profile: &str, stack: &str, bytes: u64, image: Option<&str>) -> Info {
        Info {
            name: name.into(),
            created: 0,
            stack: stack.into(),
            profile: profile.into(),
            versions: image
                .map(|i| [("clusterImage".to_string(), i.to_string())].into())
                .unwrap_or_default(),
            nodes: Vec::new(),
            bytes,
            path: "/tmp/s".into(),
        }
    }

    #[test]
    fn table_pads_fixed_columns_and_right_aligns_the_size() {
        let snapshots = vec![
            info(
                "base",
                "dev",
                "dev",
                512 * 1024 * 1024,
                Some("rancher/k3s:v1.32.0-k3s1"),
            ),
            info("seeded", "ci", "job1", 3 * 1024 * 1024 * 1024, None),
        ];
        insta::assert_snapshot!(table(&snapshots), @r"
        NAME                 PROFILE    STACK              SIZE  CLUSTER IMAGE
        base                 dev        dev           512.0 MiB  rancher/k3s:v1.32.0-k3s1
        seeded               ci         job1         3072.0 MiB  ?
        ");
    }

    #[test]
    fn cells_wider_than_a_column_widen_it_for_every_row() {
        let snapshots = vec![
            info(
                "base",
                "<built-in default>",
                "dev",
                1024 * 1024,
                Some("kindest/node:v1.36.4"),
            ),
            info("seeded", "ci", "job1", 2 * 1024 * 1024, None),
        ];
        insta::assert_snapshot!(table(&snapshots), @r"
        NAME                 PROFILE            STACK              SIZE  CLUSTER IMAGE
        base                 <built-in default> dev             1.0 MiB  kindest/node:v1.36.4
        seeded               ci                 job1            2.0 MiB  ?
        ");
    }
}
