//! Docker tier: a real Docker engine and the kit's LocalStack image. Every
//! test is `#[ignore]`d so that a plain `cargo test` passes on any machine;
//! `make test-docker` (tests/run.sh) runs them with `--include-ignored`.

#[path = "../common/mod.rs"]
mod common;

mod contexts;
mod down_all;
mod exit_codes;
mod gitops;
mod localstack;
mod logs;
mod parameters;
mod podman;
mod seed;
