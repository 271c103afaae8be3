//! Shared helpers for integration tests: the golden fixtures written by the reference client, and
//! finding the reference client itself for oracle tests.
#![allow(dead_code)] // each test binary uses a different subset

pub mod agent;
pub mod browser;
pub mod forward_proxy;
pub mod garage;
pub mod git;
pub mod hfxet;
pub mod loop_fs;
pub mod server;
pub mod throttle;
pub mod tls;

/// The reference client's golden fixtures and the deterministic test data, shared with the
/// format crate's tests.
#[path = "../../crates/xet-format/tests/format/fixtures.rs"]
mod fixtures;
pub use fixtures::*;

/// The SHA-256 of `data` as 64 lowercase hex digits (a Git LFS oid).
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Opens the store in `dir` after git transfers: the private server the agents shared holds it
/// until it stops by itself, two seconds after its last connection closed.
pub fn open_store_after_transfers(dir: &std::path::Path) -> xet_store::Store {
    xet_store::Store::open_waiting(dir, std::time::Duration::from_secs(30), || {})
        .expect("the store opens once its shared server stopped")
}
