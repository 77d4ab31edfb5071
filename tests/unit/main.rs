//! Unit tier: needs nothing but this checkout. The CLI without an engine,
//! the code's layering, and the shape of the test tree itself.

mod cli;
mod docs;
mod help;
mod layers;
mod list;
mod pipes;
mod shape;
mod tiers;
