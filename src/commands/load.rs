//! `devstack load IMAGE…`: local images into the stack's nodes.

use crate::cli::LoadArgs;
use crate::commands::Context;
use crate::error::Error;

pub async fn run(ctx: &Context, args: LoadArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let engine = crate::docker::connect().await?;
    let step = ctx.ui.step(format!(
        "Loading {} into the {} cluster of stack `{}`",
        args.images.join(", "),
        settings.cluster.provider.as_str(),
        settings.name
    ));
    match crate::cluster::load_local_images(&engine, &settings, &args.images, &step).await {
        Ok(imported) => {
            step.done(format!("{imported} import(s)"));
            if ctx.ui.json() {
                ctx.ui.emit_json(&serde_json::json!({
                    "stack": settings.name,
                    "images": args.images,
                    "imports": imported,
                }));
            }
            Ok(0)
        }
        Err(e) => {
            step.fail("failed");
            Err(e)
        }
    }
}
