//! Helpers shared by the Docker, cluster and online tiers, by concern.
#![allow(dead_code, unused_imports)]

pub mod aws;
pub mod cluster;
pub mod gitserver;
pub mod kind;
pub mod profile;
pub mod skip;
pub mod stack;

pub use aws::*;
pub use cluster::*;
pub use skip::*;
pub use stack::*;

/// The image devstack runs by default (the version matrix's).
pub const LOCALSTACK_IMAGE: &str = devstack::versions::LOCALSTACK_IMAGE;
pub const K3S_IMAGE: &str = devstack::versions::K3S_IMAGE;
