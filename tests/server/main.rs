//! Integration tests of `git xet serve`: the CAS and LFS APIs, what `deploy/` ships for operators, limits and hostile clients, locks, tokens and tenants, SHA-256 claims, the operator's status page, the reference client as a client.
//!
//! One test binary per layer (each links the whole crate once); each file below is one
//! module of it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

#[path = "../common/mod.rs"]
mod common;

mod deploy;
mod inline_reconstruction;
mod repo_scopes;
mod server_cas;
mod server_core;
mod server_hostile;
mod server_lfs;
mod server_limits;
mod server_locks;
mod server_reference;
mod sha256_claims;
mod status_page;
mod tenant_isolation;
