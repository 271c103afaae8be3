//! Orchestration of hashing, uploads and downloads over the format layer.
pub mod hasher;
