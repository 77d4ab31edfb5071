//! devstack: a complete local GitOps secrets stack — Kubernetes in Docker
//! (K3s or Kind), LocalStack, Flux and the External Secrets Operator — for
//! laptops, CI jobs and Rust integration test suites.
//!
//! The binary is a thin layer over this library: [`profile`] loads and
//! resolves settings, the modules below act on Docker, LocalStack and the
//! cluster, and [`commands`] implements each CLI verb.

pub mod artifacts;
pub mod aws;
pub mod bundle;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod diagnose;
pub mod docker;
pub mod doctor;
pub mod envvars;
pub mod error;
pub mod gitops;
pub mod health;
pub mod hostinfo;
pub mod k8s;
pub mod localstack;
pub mod logs;
pub mod pipeline;
pub mod profile;
pub mod registry;
pub mod seed;
pub mod signals;
pub mod snapshot;
pub mod stack;
pub mod state;
pub mod timeline;
pub mod ui;
pub mod verify;
pub mod versions;

pub use error::{Error, Kind, Result};
