//! Unit tier: needs nothing but this checkout. The CLI without an engine,
//! the code's layering, and the shape of the test tree itself.

mod cli;
mod layers;
mod shape;
mod tiers;
