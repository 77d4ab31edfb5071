//! `devstack env`: shell exports for using the stack from other tools.

use crate::cli::{EnvArgs, ShellKind};
use crate::commands::Context;
use crate::error::Error;
use crate::{docker, localstack};

pub async fn run(ctx: &Context, args: EnvArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    if settings.localstack.mode == crate::profile::LocalStackMode::InCluster {
        return Err(Error::user(format!(
            "stack `{}` runs LocalStack in its cluster, which this machine reaches only through a port-forward",
            settings.name
        ))
        .with_hint(
            "`devstack localstack forward` keeps one open and prints these variables for it",
        ));
    }
    // Without a port there is no endpoint to export: say how to get one
    // rather than print an address of no stack (or of another one).
    localstack::require_port(&settings)?;
    let vars = crate::stack::exports(&settings);
    // Telling the user is useful; failing is not: the exports are right
    // either way once the stack runs.
    if let Ok(docker) = docker::connect().await
        && docker::inspect(docker.as_ref(), &localstack::container_name(&settings))
            .await?
            .is_none()
    {
        ctx.ui.warn(format!(
            "stack `{}` has no LocalStack running; start it with `devstack{flags} up` or `devstack{flags} localstack up`",
            settings.name,
            flags = settings.cli_flags()
        ));
    }
    let format = if ctx.ui.json() {
        ShellKind::Json
    } else {
        args.shell
    };
    ctx.ui.print(format_args!("{}\n", render(&vars, format)));
    Ok(0)
}

pub fn render(vars: &[(&str, String)], format: ShellKind) -> String {
    let quote = |v: &str| format!("'{}'", v.replace('\'', r"'\''"));
    match format {
        ShellKind::Sh => vars
            .iter()
            .map(|(k, v)| format!("export {k}={}", quote(v)))
            .collect::<Vec<_>>()
            .join("\n"),
        ShellKind::Fish => vars
            .iter()
            .map(|(k, v)| format!("set -gx {k} {};", quote(v).replace(r"'\''", r"\'")))
            .collect::<Vec<_>>()
            .join("\n"),
        ShellKind::Json => {
            let map: serde_json::Map<String, serde_json::Value> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone().into()))
                .collect();
            serde_json::to_string_pretty(&map).expect("JSON map serializes")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_shell() {
        let vars = vec![("A", "x y".to_string()), ("B", "it's".to_string())];
        assert_eq!(
            render(&vars, ShellKind::Sh),
            "export A='x y'\nexport B='it'\\''s'"
        );
        assert_eq!(
            render(&vars, ShellKind::Fish),
            "set -gx A 'x y';\nset -gx B 'it\\'s';"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&vars, ShellKind::Json)).unwrap();
        assert_eq!(json["B"], "it's");
    }
}
