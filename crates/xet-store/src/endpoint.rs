//! [`Store`] as the client's pipelines see it: an upload target ([`CasTarget`]), a xorb source
//! ([`XorbSource`]) and an endpoint ([`Endpoint`]), so that the agent's embedded mode and the
//! server's own uploads run the same pipelines as a remote client.

use std::ops::RangeInclusive;

use xet_format::shard::Shard;
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, XorbHash};
use xet_protocol::target::{CasTarget, Endpoint, LocalFailure, TargetError, XorbSource};
use xet_protocol::wire::ErrorCode;
use xet_protocol::{FetchRange, ReconstructionPlan};

use crate::{ShardRejection, Store, StoreError};

impl From<StoreError> for TargetError {
    fn from(e: StoreError) -> Self {
        TargetError::Store(Box::new(LocalFailure {
            code: client_code(&e),
            error: Box::new(e),
        }))
    }
}

/// The wire code of the store's failures that clients act on: a shard refused because a xorb
/// it relies on is lost or damaged (the upload sends the xorb again), and a full disk.
fn client_code(e: &StoreError) -> Option<ErrorCode> {
    match e {
        StoreError::ShardRejected(
            ShardRejection::UnknownXorb { .. } | ShardRejection::UnknownXorbBlock { .. },
        ) => Some(ErrorCode::UnknownXorb),
        StoreError::ShardRejected(ShardRejection::DamagedXorb { .. }) => {
            Some(ErrorCode::XorbDamaged)
        }
        _ if e.is_storage_full() => Some(ErrorCode::InsufficientStorage),
        _ => None,
    }
}

impl CasTarget for Store {
    fn has_xorb(&self, xorb: &XorbHash) -> Result<bool, TargetError> {
        // The upload will rely on it: its grace period against collection starts again.
        Ok(Store::already_stored(self, xorb)?)
    }

    fn put_xorb(&self, xorb: XorbHash, body: &[u8]) -> Result<bool, TargetError> {
        Ok(Store::put_xorb(self, xorb, body)?)
    }

    fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        Store::register_shard(self, shard, &mut |_| {})?;
        Ok(())
    }

    fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        Ok(self.dedup_shard(chunk)?)
    }

    fn dense_key_modulus(&self) -> Option<u64> {
        Some(xet_format::dedup::DENSE_KEY_MODULUS)
    }

    fn file_by_sha256(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        Ok(self.intact_file_by_oid(oid, None)?)
    }

    fn sha256_computed(&self, oid: &LfsOid, file: &FileHash) -> Result<(), TargetError> {
        Ok(self.settle_claim(oid, file, true)?)
    }
}

impl XorbSource for Store {
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError> {
        let range: RangeInclusive<u64> = range.bytes.clone();
        let (start, end) = (*range.start(), *range.end());
        self.read_xorb(xorb, range)?
            .ok_or_else(|| TargetError::NotFound {
                what: format!("xorb {xorb}"),
            })
            .and_then(|bytes| {
                if bytes.len() as u64 == end.saturating_sub(start).saturating_add(1) {
                    Ok(bytes)
                } else {
                    Err(TargetError::NotFound {
                        what: format!("bytes {start}-{end} of xorb {xorb}"),
                    })
                }
            })
    }
}

impl Endpoint for Store {
    fn reconstruction(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ReconstructionPlan>, TargetError> {
        Ok(Store::reconstruction(self, file, range)?)
    }

    fn locate_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        Ok(self.file_by_oid(oid)?)
    }

    fn file_chunks(&self, file: &FileHash) -> Result<Option<Vec<ChunkRef>>, TargetError> {
        Ok(Store::file_chunks(self, file)?)
    }

    fn describe(&self) -> String {
        self.root().display().to_string()
    }
}
