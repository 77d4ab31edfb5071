//! `devstack version`: devstack's own version and the version matrix.

use serde_json::json;

use crate::commands::Context;
use crate::error::Error;
use crate::versions::{self, MATRIX};

pub fn run(ctx: &Context) -> Result<i32, Error> {
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({
            "devstack": env!("CARGO_PKG_VERSION"),
            "components": MATRIX,
            "kubernetes": {
                "flux": versions::FLUX_KUBERNETES,
                "eso": versions::ESO_KUBERNETES,
            },
        }));
        return Ok(0);
    }
    ctx.ui
        .out(format!("devstack {}", env!("CARGO_PKG_VERSION")));
    for c in MATRIX {
        ctx.ui.out(format!("\n{} ({})", c.name, c.support.as_str()));
        ctx.ui.out(format!("  default          {}", c.default));
        ctx.ui.out(format!("  tested here      {}", c.tested_here));
        ctx.ui
            .out(format!("  newest upstream  {}", c.newest_upstream));
        ctx.ui.out(format!("  support          {}", c.support_note));
        if let Some(range) = c.kubernetes {
            ctx.ui.out(format!("  kubernetes       {}", range.says));
        }
    }
    Ok(0)
}
