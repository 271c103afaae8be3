//! Small objects downloaded together: the agents' side of `X-Xet-Pack` on download actions
//! (docs/lfs-agent.md §12.5).
//!
//! git-lfs hands an agent one object at a time, so many small objects would cost a request
//! each. `git xet serve`'s batch answer names, on each small object's download action, the
//! *download pack* it belongs to: neighbouring objects of the batch (oid, size and Xet hash of
//! each). The first agent to get a member asks the CAS server for every member's
//! reconstruction in one request (`GET /v1/reconstructions?file_id=…`), fetches each run of
//! neighbouring xorb bytes once, rebuilds and checks every member (chunk hashes and Xet file
//! hash, as for one object) into git-lfs's temp directory (its `xet-packs` directory, from
//! where git-lfs moves each member into its object store), and writes down which members it
//! wrote; the agents that get the other members wait for it and hand git-lfs the file already
//! there. Coordination is as for upload packs (`pack`): `xet-dpack-<id>.lock`, held while the
//! pack is fetched, and `xet-dpack-<id>.done`, the members written or why the pack failed.
//! Anything unexpected (a server without the batch query, a member that does not verify, a
//! failed pack) leaves the member to be downloaded on its own, which reports its own errors.
//! Members git-lfs never asks for are removed with the pack's files an hour later.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::pack::{pack_id, Outcome};
use super::{Agent, Operation, Transfer};
use crate::agent::error::TransferError;
use crate::agent::journal::{Direction, Record};
use crate::agent::protocol::ProtocolWriter;
use xet_client::pipeline::download::{write_file_at_with, Written};
use xet_client::pipeline::prior::LocalChunks;
use xet_format::{FileHash, LfsOid, XorbHash};
use xet_protocol::target::TargetError;
use xet_protocol::wire::{DownloadPack, PACK_HEADER};
use xet_protocol::{Endpoint, FetchRange, Origin, ReconstructionPlan, XorbSource};

/// The start of the names of every file of a download pack (in `pack::PACK_DIR`).
pub(super) const FILE_PREFIX: &str = "xet-dpack-";

/// A pack whose fetch ranges add up to more than this is not fetched together (its members
/// are downloaded one by one): what a pack holds in memory at once.
const MAX_PACK_FETCH: u64 = 128 << 20;

/// The download pack header on `t`'s action, if it names `t`'s object with its size. Only the
/// agent that fetches the pack parses it whole (every member's agent gets the same header).
pub(super) fn download_pack_of(t: &Transfer) -> Option<&str> {
    let text = t.action.as_ref()?.header(PACK_HEADER)?;
    let member = format!("{}:{}:", t.oid.to_hex(), t.size);
    let named = text.split(',').any(|item| item.trim().starts_with(&member));
    named.then_some(text)
}

/// Where a download pack `id` writes its member `oid`.
fn member_path(dir: &Path, id: &str, oid: &LfsOid) -> PathBuf {
    dir.join(format!("{FILE_PREFIX}{id}-{}", oid.to_hex()))
}

impl Agent {
    /// The file of `t`'s object written by its download pack (by this agent or another), or
    /// `None` when the pack did not write it (the object is then downloaded on its own).
    pub(super) fn download_in_pack<W: std::io::Write>(
        &mut self,
        t: &Transfer,
        header: &str,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<Option<PathBuf>, TransferError> {
        let dir = self.made_pack_dir()?;
        let id = pack_id(t, header);
        let outcome = self.pack_outcome(&dir, &format!("{FILE_PREFIX}{id}"), &t.oid, |agent| {
            let fetched = DownloadPack::from_header(header)
                .map_err(|e| {
                    TransferError::Setup(format!("the LFS server sent an unusable pack: {e}"))
                })
                .and_then(|pack| agent.fetch_pack(t, &pack, &dir, &id, writer));
            Outcome::concluded(fetched, &t.oid, "downloading")
        })?;
        let mine = member_path(&dir, &id, &t.oid);
        Ok((outcome.has(&t.oid) && mine.is_file()).then_some(mine))
    }

    /// Rebuilds every member of `pack` it can into `dir` and records each in the transfer
    /// journal; returns the members written.
    fn fetch_pack<W: std::io::Write>(
        &mut self,
        t: &Transfer,
        pack: &DownloadPack,
        dir: &Path,
        id: &str,
        writer: &mut ProtocolWriter<W>,
    ) -> Result<Vec<LfsOid>, TransferError> {
        let lease = self.endpoint(t, Operation::Download)?;
        let endpoint = lease.get();
        let failed = |e: TargetError| TransferError::Lookup(e.to_string());
        let hashes: Vec<FileHash> = pack.0.iter().map(|(_, _, hash)| *hash).collect();
        let Some(plans) = endpoint.reconstructions(&hashes).map_err(failed)? else {
            return Err(TransferError::Lookup(format!(
                "{} cannot plan several files in one request",
                endpoint.describe()
            )));
        };
        writer
            .progress(&t.oid, 1)
            .map_err(TransferError::Progress)?;
        let runs = runs_of(plans.values());
        let total: u64 = runs
            .iter()
            .map(|r| r.bytes.end() - r.bytes.start() + 1)
            .sum();
        if total > MAX_PACK_FETCH {
            return Err(TransferError::Lookup(format!(
                "the pack's {total} bytes are more than one fetch holds"
            )));
        }
        let source = Prefetched::fetch(endpoint, runs).map_err(failed)?;
        let described = xet_protocol::redact::redact(&endpoint.describe());
        let mut written = Vec::with_capacity(pack.0.len());
        for (oid, size, hash) in &pack.0 {
            let Some(plan) = plans.get(hash).filter(|p| p.file_size == *size) else {
                tracing::debug!(%oid, "pack member without a plan of its size; left to its agent");
                continue;
            };
            let path = member_path(dir, id, oid);
            match write_member(&source, hash, plan, &path) {
                Ok(w) => {
                    let mut record = Record::new(Direction::Download, oid, hash, *size);
                    record.reused_bytes = w.cached;
                    record.endpoint.clone_from(&described);
                    written.push((*oid, record));
                }
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    tracing::debug!(%oid, "pack member not written; left to its agent: {e}");
                }
            }
        }
        share_fetched(&mut written, source.fetched());
        tracing::info!(
            oid = %t.oid,
            members = written.len(),
            requests = source.parts.len(),
            fetched = source.fetched(),
            "downloaded a pack"
        );
        drop(lease);
        Ok(written
            .into_iter()
            .map(|(oid, record)| {
                self.record(record);
                oid
            })
            .collect())
    }
}

/// Shares the xorb bytes a pack fetched (`fetched`) out among the journal records of the
/// members it wrote, by the bytes of each that did not come from this machine: the records
/// add up to what crossed the wire.
fn share_fetched(members: &mut [(LfsOid, Record)], fetched: u64) {
    let new: Vec<u64> = members
        .iter()
        .map(|(_, r)| r.size.saturating_sub(r.reused_bytes))
        .collect();
    let all_new: u64 = new.iter().sum();
    let mut given = 0u64;
    for ((_, record), n) in members.iter_mut().zip(&new) {
        let share = u128::from(fetched) * u128::from(*n) / u128::from(all_new.max(1));
        record.transferred_bytes = u64::try_from(share).unwrap_or(fetched);
        given += record.transferred_bytes;
    }
    // What rounding left (or everything, when every member came from this machine) goes to
    // the member with the most new bytes.
    let most = (0..new.len()).max_by_key(|&i| new[i]);
    if let Some(most) = most {
        members[most].1.transferred_bytes += fetched.saturating_sub(given);
    }
}

/// Rebuilds one member into `path` from the fetched bytes; the chunk hashes and the Xet file
/// hash are checked as the file is written.
fn write_member(
    source: &Prefetched<'_>,
    hash: &FileHash,
    plan: &ReconstructionPlan,
    path: &Path,
) -> Result<Written, String> {
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let n = write_file_at_with(
        source,
        hash,
        plan,
        &file,
        &LocalChunks::default(),
        &mut |_| Ok(()),
    )
    .map_err(|e| e.to_string())?;
    if n.written != plan.file_size {
        return Err(format!(
            "rebuilt {} bytes, not {}",
            n.written, plan.file_size
        ));
    }
    Ok(n)
}

/// One request of a pack: the ranges of one xorb served by one URL, gathered into the range
/// from the first to the last (the server gives ranges that touch one URL granting them all).
#[derive(Debug, Clone)]
struct Run {
    xorb: XorbHash,
    chunks: std::ops::Range<u32>,
    bytes: RangeInclusive<u64>,
    url: Option<String>,
}

/// The requests that fetch every range of `plans`: one per xorb and URL.
fn runs_of<'a>(plans: impl Iterator<Item = &'a ReconstructionPlan>) -> Vec<Run> {
    let mut runs: BTreeMap<(XorbHash, Option<String>), Run> = BTreeMap::new();
    for plan in plans {
        for (xorb, ranges) in &plan.fetch {
            for r in ranges {
                runs.entry((*xorb, r.url.clone()))
                    .and_modify(|run| {
                        run.chunks =
                            run.chunks.start.min(r.chunks.start)..run.chunks.end.max(r.chunks.end);
                        run.bytes = *run.bytes.start().min(r.bytes.start())
                            ..=*run.bytes.end().max(r.bytes.end());
                    })
                    .or_insert_with(|| Run {
                        xorb: *xorb,
                        chunks: r.chunks.clone(),
                        bytes: r.bytes.clone(),
                        url: r.url.clone(),
                    });
            }
        }
    }
    runs.into_values().collect()
}

/// The bytes of a pack's runs, fetched once; the members' ranges are served from them.
struct Prefetched<'a> {
    /// Each run, its bytes, and which of its chunks came from the download chunk cache.
    parts: Vec<(Run, Vec<u8>, Origin)>,
    /// Where a range no run holds is read (never, for plans the runs were made from).
    endpoint: &'a dyn Endpoint,
    /// Xorb bytes fetched from the endpoint: the runs', and any range read later.
    fetched: AtomicU64,
}

impl<'a> Prefetched<'a> {
    fn fetch(endpoint: &'a dyn Endpoint, runs: Vec<Run>) -> Result<Self, TargetError> {
        let mut parts = Vec::with_capacity(runs.len());
        let mut fetched = 0u64;
        for run in runs {
            let range = FetchRange {
                chunks: run.chunks.clone(),
                bytes: run.bytes.clone(),
                url: run.url.clone(),
            };
            let (bytes, origin) = endpoint.read_xorb_range_from(&run.xorb, &range, false)?;
            fetched += origin.fetched;
            parts.push((run, bytes, origin));
        }
        Ok(Self {
            parts,
            endpoint,
            fetched: AtomicU64::new(fetched),
        })
    }

    /// Xorb bytes fetched from the endpoint so far.
    fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }
}

impl XorbSource for Prefetched<'_> {
    fn read_xorb_range(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Vec<u8>, TargetError> {
        self.read_xorb_range_from(xorb, range, false)
            .map(|(bytes, _)| bytes)
    }

    /// A range out of a run (nothing fetched for it now; the chunks the run read from the
    /// chunk cache are local), else read from the endpoint.
    fn read_xorb_range_from(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        _keep: bool,
    ) -> Result<(Vec<u8>, Origin), TargetError> {
        let held = self.parts.iter().find(|(run, bytes, _)| {
            run.xorb == *xorb
                && run.bytes.start() <= range.bytes.start()
                && range.bytes.end() <= run.bytes.end()
                && bytes.len() as u64 == run.bytes.end() - run.bytes.start() + 1
        });
        match held {
            Some((run, bytes, origin)) => {
                let from = (range.bytes.start() - run.bytes.start()) as usize;
                let to = (range.bytes.end() - run.bytes.start()) as usize;
                let local = origin
                    .local
                    .iter()
                    .map(|l| l.start.max(range.chunks.start)..l.end.min(range.chunks.end))
                    .filter(|l| !l.is_empty())
                    .collect();
                Ok((bytes[from..=to].to_vec(), Origin { fetched: 0, local }))
            }
            None => {
                let read = self.endpoint.read_xorb_range_from(xorb, range, false)?;
                self.fetched.fetch_add(read.1.fetched, Ordering::Relaxed);
                Ok(read)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(chunks: std::ops::Range<u32>, bytes: RangeInclusive<u64>, url: &str) -> FetchRange {
        FetchRange {
            chunks,
            bytes,
            url: Some(url.to_string()),
        }
    }

    #[test]
    fn ranges_sharing_a_url_are_fetched_in_one_run() {
        let x = XorbHash::from_bytes([1; 32]);
        let y = XorbHash::from_bytes([2; 32]);
        let a = ReconstructionPlan {
            fetch: vec![(x, vec![range(0..2, 0..=99, "u1")])],
            ..Default::default()
        };
        let b = ReconstructionPlan {
            fetch: vec![
                (
                    x,
                    vec![range(2..5, 100..=249, "u1"), range(7..8, 400..=449, "u2")],
                ),
                (y, vec![range(0..1, 0..=9, "u1")]),
            ],
            ..Default::default()
        };
        let runs = runs_of([&a, &b].into_iter());
        let got: Vec<(XorbHash, std::ops::Range<u32>, RangeInclusive<u64>)> = runs
            .iter()
            .map(|r| (r.xorb, r.chunks.clone(), r.bytes.clone()))
            .collect();
        assert_eq!(
            got,
            vec![(x, 0..5, 0..=249), (x, 7..8, 400..=449), (y, 0..1, 0..=9)]
        );
    }

    #[test]
    fn a_packs_wire_bytes_are_shared_out_by_what_each_member_did_not_have() {
        let record = |size: u64, reused: u64| {
            let oid = LfsOid::of(&size.to_le_bytes());
            let mut r = Record::new(Direction::Download, &oid, &FileHash::ZERO, size);
            r.reused_bytes = reused;
            (oid, r)
        };
        let mut members = vec![record(1000, 0), record(3000, 1000), record(500, 500)];
        share_fetched(&mut members, 3001);
        let shares: Vec<u64> = members.iter().map(|(_, r)| r.transferred_bytes).collect();
        // 1000 and 2000 new bytes: a third and two thirds, the rounding to the larger.
        assert_eq!(shares, [1000, 2001, 0]);
        // Everything from this machine: whatever crossed still lands somewhere.
        let mut members = vec![record(10, 10), record(20, 20)];
        share_fetched(&mut members, 7);
        assert_eq!(
            members
                .iter()
                .map(|(_, r)| r.transferred_bytes)
                .sum::<u64>(),
            7
        );
    }

    #[test]
    fn a_download_pack_must_name_the_object() {
        let oid = LfsOid::of(b"a");
        let other = LfsOid::of(b"b");
        let pack = DownloadPack(vec![(other, 10, FileHash::ZERO), (oid, 1, FileHash::ZERO)]);
        let t = |size: u64| -> Transfer {
            let line = serde_json::json!({
                "event": "download", "oid": oid.to_hex(), "size": size,
                "action": {"href": "http://x", "header": {"X-Xet-Pack": pack.to_header()}}
            });
            match crate::agent::protocol::parse_request(&line.to_string(), 1).unwrap() {
                crate::agent::protocol::Request::Download(t) => t,
                other => panic!("not a download: {other:?}"),
            }
        };
        let header = pack.to_header();
        assert_eq!(download_pack_of(&t(1)), Some(header.as_str()));
        assert_eq!(download_pack_of(&t(10)), None);
        assert_eq!(download_pack_of(&t(2)), None);
    }
}
