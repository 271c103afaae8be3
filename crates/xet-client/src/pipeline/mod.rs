//! Orchestration of hashing, uploads and downloads over the format layer.
//!
//! | module | owns |
//! |---|---|
//! | [`hasher`] | the chunk-and-hash engine uploads share; hashing whole files as fast as the machine allows |
//! | [`upload`] | one stream in, one registered Xet file out, against any [`CasTarget`](xet_protocol::CasTarget) |
//! | [`cached`] | [`cached::Cached`]: a target plus the local shard cache of its endpoint |
//! | [`download`] | rebuilding a file from its reconstruction plan, streaming |
//! | [`prior`] | earlier versions of a file on this machine, matched against the endpoint's record |
//! | [`direct`] | writing a download's bytes past the page cache, for an object nothing reads soon |
//! | [`mirror`] | a second file a download's bytes also go to as they are written (a checkout in the same pass) |
//! | [`resume`] | a download's partial file and the record of what it holds, which a later download of the file resumes from |
//! | [`ranged`] | reading byte ranges of a stored file without downloading it, every chunk checked |
pub mod cached;
pub mod direct;
pub mod download;
pub mod hasher;
pub mod mirror;
pub mod prior;
pub mod ranged;
pub mod resume;
pub mod sha256_landed;
pub mod upload;
