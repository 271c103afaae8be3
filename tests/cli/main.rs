//! Integration tests of the `git xet` commands: install, status, maintenance, the documented walkthrough, and the paths the docs name.
//!
//! One test binary per layer (each links the whole crate once); each file below is one
//! module of it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod codebase_rules;
mod commands;
mod docs_paths;
mod install;
mod maintenance_cli;
mod status_blind_spots;
