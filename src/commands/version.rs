//! `devstack version`: devstack's own version, the version matrix and the
//! pins every default is checked against.

use serde_json::json;

use crate::artifacts::Pins;
use crate::commands::Context;
use crate::envvars;
use crate::error::Error;
use crate::ui::Table;
use crate::versions::{self, MATRIX, build};

pub fn run(ctx: &Context) -> Result<i32, Error> {
    let pins_file = envvars::get(envvars::DEVSTACK_PINS).map(std::path::PathBuf::from);
    let pins = Pins::load(pins_file.as_deref())?;
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({
            "devstack": build::VERSION,
            "build": {
                "commit": build::COMMIT,
                "date": build::DATE,
                "target": build::TARGET,
            },
            "components": MATRIX,
            "kubernetes": {
                "flux": versions::FLUX_KUBERNETES,
                "eso": versions::ESO_KUBERNETES,
            },
            "pins": pins,
        }));
        return Ok(0);
    }
    ctx.ui.out(format!("devstack {}", build::LONG));
    for c in MATRIX {
        ctx.ui.out(format!("\n{} ({})", c.name, c.support.as_str()));
        let default = versions::pinned(c.default).unwrap_or_else(|| c.default.to_string());
        let mut table = Table::headless(2).indent(2);
        table.row(["default", default.as_str()]);
        table.row(["tested with", c.tested_with]);
        table.row(["newest upstream", c.newest_upstream]);
        table.row(["support", c.support_note]);
        if let Some(range) = c.kubernetes {
            table.row(["kubernetes", range.says]);
        }
        ctx.ui.out(table);
    }
    if let Some(path) = &pins.replaced_by {
        ctx.ui.out(format!(
            "\npins: {} replaces the built-in pins ({})",
            path.display(),
            envvars::DEVSTACK_PINS
        ));
    }
    Ok(0)
}
