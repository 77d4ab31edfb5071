//! Cluster tier: whole stacks on real K3s and Kind clusters from the offline
//! kit. Every test is `#[ignore]`d so that a plain `cargo test` passes on
//! any machine; `make test-cluster` (tests/run.sh) runs them one at a time
//! with `--include-ignored`.

#[path = "../common/mod.rs"]
mod common;

mod cluster_eso;
mod cluster_k3s;
mod cluster_kind;
mod contract_k3s;
mod diagnose_k3s;
mod existing_kind;
mod gitops_git;
mod gitops_k3s;
mod localstack_in_cluster;
mod logs_k3s;
mod parameters;
mod providers;
mod registry;
mod repository;
mod restart_k3s;
mod snapshot_k3s;
mod snapshot_kind;
mod stack_k3s;
mod stop_start;
mod upgrade_k3s;
