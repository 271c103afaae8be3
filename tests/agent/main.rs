//! Integration tests of the transfer agent with real git and git-lfs: standalone and negotiated mode, caches and history, company networks, pruning, mounts, what a new user meets.
//!
//! One test binary per layer (each links the whole crate once); each file below is one
//! module of it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

#[path = "../common/mod.rs"]
mod common;

mod agent_limits;
mod agent_protocol;
mod agent_server;
mod agent_standalone;
mod cold_machine;
mod company_network;
mod dedup_neighbourhood;
mod dedup_runs;
mod download_resume;
mod download_reuse;
mod first_contact;
mod git_lfs_basic;
mod journal_split;
mod local_copies;
mod mount;
mod prune;
mod push_history;
mod remotes;
mod shared_store;
mod trust_client;
mod without_xet;
mod xet_fetch;
