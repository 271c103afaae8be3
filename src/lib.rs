//! git-xet: a Git LFS custom transfer agent and a self-hostable server for the Xet protocol.
//!
//! Layers point one way: [`format`](mod@format) (pure bytes in, bytes out) → `store` (where bytes live) →
//! [`pipeline`] (upload, download and hashing orchestration) → `lfs`, `git`, `server`, [`mount`]
//! (reading a repository's files without downloading them) → [`cli`]
//! (the only place that knows about argv and exit codes). [`redact`] (pure text in, text out:
//! secrets masked) is used by every layer that shows text, and [`util`] (the clock, sizes, URLs,
//! error chains, `Range` headers, atomic writes) by every layer above `format`.

// Tests may unwrap, expect and panic: a failing test should stop right there.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod cli;
/// The Xet formats: the `xet-format` crate (crates/xet-format), under its old name.
pub use xet_format as format;
pub mod git;
pub mod lfs;
pub mod mount;
pub mod pipeline;
pub mod redact;
pub mod server;
pub mod store;
pub mod util;
