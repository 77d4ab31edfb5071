//! GitOps: Flux installation (and, next, the ESO chain delivered through it).

pub mod flux;
