//! git-xet: a Git LFS custom transfer agent and a self-hostable server for the Xet protocol.
//!
//! Layers point one way, and the workspace's crates show them: `xet-format` (pure bytes in,
//! bytes out) → `xet-protocol` (wire bodies, error codes, the traits of every place objects
//! live) → `xet-client` (the CAS client, its caches and the upload, download and hashing
//! pipelines) beside `xet-store` (the storage engine) → this crate: [`agent`], `git`,
//! `server`, [`mount`] (reading a repository's files without downloading them) → [`cli`] (the
//! only place that knows about argv, exit codes and the environment).

//! Items the integration tests, the binary or the other crates use are `pub`; everything else
//! is `pub(crate)` at most. The module documentation is for the people who work on this crate
//! and names crate-private items too: `cargo doc --document-private-items` shows them.
#![allow(rustdoc::private_intra_doc_links)]
// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod agent;
pub mod cli;
pub mod git;
pub mod mount;
#[cfg(feature = "server")]
pub mod server;
