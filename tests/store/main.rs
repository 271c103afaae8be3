//! Integration tests of the client and storage crates: the store and its integrity checks, the shard cache, the CAS client against servers real and fake, the hasher against the reference client, object storage on Garage.
//!
//! One test binary per layer (each links the whole crate once); each file below is one
//! module of it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

#[path = "../common/mod.rs"]
mod common;

mod checkpoints;
mod chunking_oracle;
mod remote_cas;
mod s3_storage;
mod shard_cache;
mod storage_failover;
mod store;
mod store_integrity;
mod trust_integrity;
