//! `devstack kubeconfig [--path]`: the stack's kubeconfig, as `kind get
//! kubeconfig` prints a cluster's.

use serde_json::json;

use crate::cli::KubeconfigArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::state;

pub fn run(ctx: &Context, args: KubeconfigArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    // Read even for --path: a path to no file would only fail later, elsewhere.
    let yaml = state::read_kubeconfig(&settings)?;
    let path = state::kubeconfig_path(&settings);
    if ctx.ui.json() {
        // The path, never the credentials the file holds.
        ctx.ui.emit_json(&json!({
            "stack": settings.name,
            "path": path,
            "context": settings.kube_context(),
        }));
    } else if args.path {
        ctx.ui.print(format_args!("{}\n", path.display()));
    } else if yaml.ends_with('\n') {
        ctx.ui.print(yaml);
    } else {
        ctx.ui.print(format_args!("{yaml}\n"));
    }
    Ok(0)
}
