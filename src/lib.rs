//! git-xet: a Git LFS custom transfer agent and a self-hostable server for the Xet protocol.
//!
//! Layers point one way, and the workspace's crates show them: `xet-format` (pure bytes in,
//! bytes out) → `xet-client` (the CAS client, its caches and the upload, download and hashing
//! pipelines) → `xet-store` (the storage engine) → this crate: `lfs` (the agent), `git`,
//! `server`, [`mount`] (reading a repository's files without downloading them) → [`cli`] (the
//! only place that knows about argv, exit codes and the environment).

//! Items the integration tests, the binary or the other crates use are `pub`; everything else
//! is `pub(crate)` at most. The module documentation is for the people who work on this crate
//! and names crate-private items too: `cargo doc --document-private-items` shows them.
#![allow(rustdoc::private_intra_doc_links)]
// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod cli;
/// The Xet formats: the `xet-format` crate (crates/xet-format), under its old name.
pub use xet_format as format;
pub mod git;
pub mod lfs;
pub mod mount;
#[cfg(feature = "server")]
pub mod server;
