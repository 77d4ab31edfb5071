//! Unit tier: needs nothing but this checkout. The CLI without an engine,
//! the code's layering, and the shape of the test tree itself.

/// build.rs, for its own tests: cargo runs none of a build script's.
#[allow(dead_code)]
#[path = "../../build.rs"]
mod build_script;
mod cli;
mod docs;
mod doctor;
mod help;
mod layers;
mod list;
mod pipes;
mod shape;
mod tiers;
