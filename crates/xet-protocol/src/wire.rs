//! The JSON bodies of the CAS API (docs/cas-api.md §2.1, §5, §6), written once for both sides: the
//! server (git-xet's `server` module) serialises them, the remote client (`xet_client::remote`) parses them.
//!
//! Field names are the wire names; serde ignores unknown fields when parsing, so newer servers
//! may add some. The server writes a plan as JSON with URLs of its own (git-xet's
//! `server::cas::plan_json`); converting JSON received from a server into a
//! [`ReconstructionPlan`] ([`ReconstructionV2::into_plan`]) checks everything and turns
//! nonsense into a [`WireError`].

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::{FetchRange, PlannedTerm, ReconstructionPlan};
use xet_format::xorb::header::{CHUNK_HEADER_LEN, MAX_CHUNK_LEN, MAX_COMPRESSED_LEN};
use xet_format::xorb::MAX_XORB_CHUNKS;
use xet_format::{FileHash, LfsOid, XorbHash};

/// A chunk-index range, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRange {
    pub start: u32,
    pub end: u32,
}

/// A byte range, end inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

/// One term of a reconstruction (same in v1 and v2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Term {
    /// The xorb (the Xet string form on the wire).
    pub hash: XorbHash,
    pub unpacked_length: u32,
    pub range: ChunkRange,
}

/// A v1 `fetch_info` entry: one URL, one byte range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchInfoV1 {
    pub range: ChunkRange,
    pub url: String,
    pub url_range: ByteRange,
}

/// `QueryReconstructionResponse` (§6.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconstructionV1 {
    pub offset_into_first_range: u64,
    pub terms: Vec<Term>,
    pub fetch_info: BTreeMap<XorbHash, Vec<FetchInfoV1>>,
}

/// One range of a v2 entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeV2 {
    pub chunks: ChunkRange,
    pub bytes: ByteRange,
}

/// A v2 `xorbs` entry: one URL and the ranges it serves, sorted by chunk start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XorbEntryV2 {
    pub url: String,
    pub ranges: Vec<RangeV2>,
}

/// `QueryReconstructionResponseV2` (§6.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconstructionV2 {
    pub offset_into_first_range: u64,
    pub terms: Vec<Term>,
    pub xorbs: BTreeMap<XorbHash, Vec<XorbEntryV2>>,
}

/// The answer to `POST /v1/xorbs/{prefix}/{xorb}` (§5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct XorbUploaded {
    pub was_inserted: bool,
}

/// The answer to `POST /v1/shards` (§5.7): 1 when registered now, 0 when it already was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRegistered {
    pub result: u8,
}

/// The header on oid lookups (`GET /v1/lfs-files/{oid}`) by which a server says it checks the
/// SHA-256 claims of shards itself (value `1`; see `server::claims`).
pub const CHECKS_SHA256_HEADER: &str = "x-xet-checks-sha256";

/// The Git LFS transfer of Xet uploads (and of downloads from servers that predate
/// [`XET_DOWNLOAD_TRANSFER`]): git-lfs's custom transfer `xet`, the name Hugging Face's agent
/// registers too.
pub const XET_TRANSFER: &str = "xet";

/// The Git LFS transfer of Xet downloads through git-xet's agent: a second custom transfer that
/// only `git xet install` registers (for downloads, the same program). git-lfs offers it in a
/// download's batch request only where it is registered, so a server that answers it knows the
/// agent git-lfs will run downloads; a client that offers only `xet` may have an agent that
/// cannot (Hugging Face's uploads only), and is answered `basic`.
pub const XET_DOWNLOAD_TRANSFER: &str = "xet-download";

/// The header on dedup answers (`GET /v1/chunks/…`, 200 and 404) by which a server says it
/// indexes dense keys, with their modulus in decimal (`64`; docs/format.md §5.5): a client may
/// then ask about the leading chunks and dense keys of every run of a file. Servers without it
/// (Hugging Face's, older ones of this project) are asked only about first, eligible and
/// file-start probe chunks.
pub const DENSE_KEYS_HEADER: &str = "x-xet-dense-keys";

/// The answer to this server's `GET /v1/lfs-files/{oid}`: the Xet file registered for a Git LFS
/// oid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LfsFile {
    /// The SHA-256 (plain hex on the wire).
    pub oid: LfsOid,
    /// The Xet file hash (string form on the wire).
    pub file_hash: FileHash,
    pub size: u64,
    /// `false` when the server holds the file but a xorb it needs is missing or damaged (an
    /// upload should send it again, which repairs it); absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intact: Option<bool>,
    /// `false` while the SHA-256 is only a shard's claim the server has not checked yet (an
    /// uploader should not skip the file on its strength); absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256_checked: Option<bool>,
    /// The file's v2 reconstruction, when asked for (`?reconstruction=v2`) and the file is
    /// small: a download then needs no second request for it. One that does not parse is
    /// dropped (the download asks for the plan again) rather than failing the lookup.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_plan"
    )]
    pub reconstruction: Option<ReconstructionV2>,
}

/// `reconstruction` of an [`LfsFile`]: `None` when absent, null or not a v2 reconstruction.
fn optional_plan<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<ReconstructionV2>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|v| match serde_json::from_value(v) {
        Ok(plan) => Some(plan),
        Err(e) => {
            tracing::debug!("ignoring an unusable reconstruction sent along: {e}");
            None
        }
    }))
}

/// The CAS token JSON (§2.1), answered by token-refresh routes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CasTokenInfo {
    pub cas_url: String,
    pub access_token: String,
    /// Expiry, unix seconds.
    pub exp: u64,
}

/// The JSON body of a refusal (§9). Every field is optional when parsing: other servers send
/// other shapes (or none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable machine-readable code (our server) or a message (other servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The header of a download action that carries the object's v2 reconstruction JSON (an
/// extension of `git xet serve`'s LFS server; an agent that finds it skips
/// `GET /v2/reconstructions/{file}`).
pub const RECONSTRUCTION_HEADER: &str = "X-Xet-Reconstruction";

/// The header of an upload action that names the object's *pack* (an extension of
/// `git xet serve`'s LFS server, docs/lfs-agent.md §12.4): the small objects of the batch that
/// one agent may upload together as one session, the object itself among them. Its value is
/// [`Pack::to_header`]; an agent that does not know it uploads each object on its own.
pub const PACK_HEADER: &str = "X-Xet-Pack";

/// The most members a pack names.
pub const MAX_PACK_MEMBERS: usize = 64;

/// The objects of a pack ([`PACK_HEADER`]): oid and size of each, in the server's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pack(pub Vec<(LfsOid, u64)>);

impl Pack {
    /// `oid:size` of each member, joined by commas.
    pub fn to_header(&self) -> String {
        let mut out = String::with_capacity(self.0.len() * 80);
        for (i, (oid, size)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&oid.to_hex());
            out.push(':');
            out.push_str(&size.to_string());
        }
        out
    }

    /// Parses [`Self::to_header`]'s form: at least two and at most [`MAX_PACK_MEMBERS`]
    /// distinct members.
    pub fn from_header(text: &str) -> Result<Pack, String> {
        let items = pack_items(text)?;
        let mut members = Vec::with_capacity(items.len());
        for item in items {
            let (oid, size) = item
                .split_once(':')
                .ok_or_else(|| format!("pack member {item:?} is not oid:size"))?;
            let oid = LfsOid::from_hex(oid).map_err(|e| format!("pack member {oid:?}: {e}"))?;
            let size = size
                .parse::<u64>()
                .map_err(|e| format!("size {size:?} of pack member {oid}: {e}"))?;
            if members.iter().any(|(o, _)| *o == oid) {
                return Err(format!("pack member {oid} is named twice"));
            }
            members.push((oid, size));
        }
        Ok(Pack(members))
    }
}

/// The objects of a download pack: [`PACK_HEADER`] on a download action (docs/lfs-agent.md
/// §12.5): oid, size and Xet file hash of each member, in the server's order. One agent
/// fetches the members' reconstructions in one request ([`BatchReconstructionV1`]) and their
/// bytes once per xorb range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadPack(pub Vec<(LfsOid, u64, FileHash)>);

impl DownloadPack {
    /// `oid:size:hash` of each member, joined by commas.
    pub fn to_header(&self) -> String {
        let mut out = String::with_capacity(self.0.len() * 150);
        for (i, (oid, size, hash)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!("{}:{size}:{}", oid.to_hex(), hash.to_hex()));
        }
        out
    }

    /// Parses [`Self::to_header`]'s form: at least two and at most [`MAX_PACK_MEMBERS`]
    /// distinct members.
    pub fn from_header(text: &str) -> Result<DownloadPack, String> {
        let mut members = Vec::new();
        for item in pack_items(text)? {
            let mut parts = item.split(':');
            let (Some(oid), Some(size), Some(hash), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("pack member {item:?} is not oid:size:hash"));
            };
            let oid = LfsOid::from_hex(oid).map_err(|e| format!("pack member {oid:?}: {e}"))?;
            let size = size
                .parse::<u64>()
                .map_err(|e| format!("size {size:?} of pack member {oid}: {e}"))?;
            let hash =
                FileHash::from_hex(hash).map_err(|e| format!("hash of pack member {oid}: {e}"))?;
            if members.iter().any(|(o, _, _)| *o == oid) {
                return Err(format!("pack member {oid} is named twice"));
            }
            members.push((oid, size, hash));
        }
        Ok(DownloadPack(members))
    }
}

/// The comma-separated members of a pack header, 2 to [`MAX_PACK_MEMBERS`] of them.
fn pack_items(text: &str) -> Result<Vec<&str>, String> {
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    if items.len() < 2 || items.len() > MAX_PACK_MEMBERS {
        return Err(format!(
            "a pack names {} objects, not 2 to {MAX_PACK_MEMBERS}",
            items.len()
        ));
    }
    Ok(items)
}

/// At most this many files in one batch reconstruction (`GET /v1/reconstructions?file_id=…`).
pub const MAX_BATCH_FILES: usize = MAX_PACK_MEMBERS;

/// `BatchQueryReconstructionResponse`, the answer of `GET /v1/reconstructions?file_id=A&file_id=B`
/// (docs/cas-api.md §5.1): the terms of each file the server has, and the fetch entries of
/// their xorbs, shared by the files. Files the server does not have are left out.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchReconstructionV1 {
    pub files: BTreeMap<FileHash, Vec<Term>>,
    pub fetch_info: BTreeMap<XorbHash, Vec<FetchInfoV1>>,
}

impl BatchReconstructionV1 {
    /// The whole-file plan of each file: its terms, with the fetch entries of its xorbs that
    /// overlap them (every URL, range and term checked as for one file).
    pub fn into_plans(self) -> Result<BTreeMap<FileHash, ReconstructionPlan>, WireError> {
        let mut plans = BTreeMap::new();
        for (file, terms) in self.files {
            let mut fetch_info = BTreeMap::new();
            for t in &terms {
                let Some(entries) = self.fetch_info.get(&t.hash) else {
                    continue;
                };
                let mine: &mut Vec<FetchInfoV1> = fetch_info.entry(t.hash).or_default();
                for e in entries {
                    let overlaps = e.range.start < t.range.end && t.range.start < e.range.end;
                    if overlaps && !mine.contains(e) {
                        mine.push(e.clone());
                    }
                }
            }
            let one = ReconstructionV1 {
                offset_into_first_range: 0,
                terms,
                fetch_info,
            };
            let plan = one
                .into_v2()
                .into_plan(None)
                .map_err(|e| WireError(format!("file {file}: {}", e.0)))?;
            plans.insert(file, plan);
        }
        Ok(plans)
    }
}

/// The answer of `GET /v1/file-chunks/{file}` (this server's extension): per chunk of the file,
/// in order, its hash (32 bytes) and length (u32, little-endian).
pub const FILE_CHUNK_RECORD: usize = 36;

/// At most this many chunks are listed by `GET /v1/file-chunks/{file}` (files up to about
/// 64 GiB); a longer file's list is refused, and a reader goes without it.
pub const MAX_LISTED_CHUNKS: usize = 1 << 20;

/// The body of a chunk list.
pub fn encode_file_chunks(chunks: &[xet_format::ChunkRef]) -> Vec<u8> {
    let mut out = Vec::with_capacity(chunks.len() * FILE_CHUNK_RECORD);
    for c in chunks {
        out.extend_from_slice(c.hash.as_bytes());
        out.extend_from_slice(&u32::try_from(c.len).unwrap_or(u32::MAX).to_le_bytes());
    }
    out
}

/// A chunk list read back, checked: whole records, at most [`MAX_LISTED_CHUNKS`], no chunk
/// longer than a chunk can be.
pub fn decode_file_chunks(body: &[u8]) -> Result<Vec<xet_format::ChunkRef>, WireError> {
    if !body.len().is_multiple_of(FILE_CHUNK_RECORD) {
        return Err(WireError(format!(
            "a chunk list of {} bytes is not whole {FILE_CHUNK_RECORD}-byte records",
            body.len()
        )));
    }
    let n = body.len() / FILE_CHUNK_RECORD;
    if n > MAX_LISTED_CHUNKS {
        return Err(WireError(format!(
            "a chunk list of {n} chunks is longer than {MAX_LISTED_CHUNKS}"
        )));
    }
    let mut out = Vec::with_capacity(n);
    for record in body.chunks_exact(FILE_CHUNK_RECORD) {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&record[..32]);
        let mut len = [0u8; 4];
        len.copy_from_slice(&record[32..]);
        let len = u32::from_le_bytes(len);
        if len == 0 || len > MAX_CHUNK_LEN {
            return Err(WireError(format!("a chunk of {len} bytes in a chunk list")));
        }
        out.push(xet_format::ChunkRef::new(
            xet_format::ChunkHash::from_bytes(hash),
            u64::from(len),
        ));
    }
    Ok(out)
}

/// Why a reconstruction received from a server cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid reconstruction: {0}")]
pub struct WireError(pub String);

impl ReconstructionV1 {
    /// The same reconstruction in the v2 shape: one range per URL, as the reference client
    /// converts it.
    pub fn into_v2(self) -> ReconstructionV2 {
        let xorbs = self
            .fetch_info
            .into_iter()
            .map(|(hash, entries)| {
                let entries = entries
                    .into_iter()
                    .map(|e| XorbEntryV2 {
                        url: e.url,
                        ranges: vec![RangeV2 {
                            chunks: e.range,
                            bytes: e.url_range,
                        }],
                    })
                    .collect();
                (hash, entries)
            })
            .collect();
        ReconstructionV2 {
            offset_into_first_range: self.offset_into_first_range,
            terms: self.terms,
            xorbs,
        }
    }
}

/// Checks one fetch range: ordered, within the chunk limit of a xorb, and with a byte length
/// that whole chunks of that count can have.
fn check_range(xorb: &XorbHash, r: &RangeV2) -> Result<(), WireError> {
    let (c, b) = (r.chunks, r.bytes);
    let bad = |why: &str| {
        Err(WireError(format!(
            "xorb {xorb}: fetch range of chunks {}..{} at bytes {}-{} {why}",
            c.start, c.end, b.start, b.end
        )))
    };
    if c.start >= c.end {
        return bad("is empty or inverted");
    }
    if c.end as usize > MAX_XORB_CHUNKS {
        return bad(&format!(
            "goes past the {MAX_XORB_CHUNKS} chunks a xorb can hold"
        ));
    }
    if b.end < b.start {
        return bad("ends before it starts");
    }
    let len = u128::from(b.end - b.start) + 1;
    let n = u128::from(c.end - c.start);
    let per_chunk = (
        CHUNK_HEADER_LEN as u128,
        CHUNK_HEADER_LEN as u128 + u128::from(MAX_COMPRESSED_LEN),
    );
    if len < n * per_chunk.0 || len > n * per_chunk.1 {
        return bad("has a byte length that so many chunks cannot have");
    }
    Ok(())
}

fn check_url(xorb: &XorbHash, url: &str) -> Result<(), WireError> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        let shown: String = url.chars().take(80).collect();
        return Err(WireError(format!(
            "xorb {xorb}: fetch URL {shown:?} is not an http(s) URL"
        )));
    }
    Ok(())
}

impl ReconstructionV2 {
    /// The plan this reconstruction describes, checked: hashes parse, ranges are ordered and
    /// sane, every term is served by a fetch range with a URL, `offset_into_first_range` lies
    /// within the first term. `range_start` is the start of the requested byte range (`None`:
    /// the whole file).
    ///
    /// The JSON does not carry the file's size. For a whole-file reconstruction
    /// [`ReconstructionPlan::file_size`] is the sum of the term lengths (exact); for a ranged
    /// one it is the file offset just past the last byte the terms cover, a lower bound that
    /// is exact when the range reaches the end of the file.
    pub fn into_plan(self, range_start: Option<u64>) -> Result<ReconstructionPlan, WireError> {
        let fetch_of = fetch_ranges(self.xorbs)?;
        let mut plan = ReconstructionPlan {
            offset_into_first_range: self.offset_into_first_range,
            ..Default::default()
        };
        let mut total: u64 = 0;
        for (i, t) in self.terms.iter().enumerate() {
            let xorb = t.hash;
            let ranges = term_ranges(i, t, &fetch_of)?;
            if !plan.fetch.iter().any(|(x, _)| *x == xorb) {
                plan.fetch.push((xorb, ranges.clone()));
            }
            total += u64::from(t.unpacked_length);
            plan.terms.push(PlannedTerm {
                xorb,
                chunks: t.range.start..t.range.end,
                unpacked_len: t.unpacked_length,
            });
        }
        plan.file_size = file_size(&plan, total, range_start)?;
        Ok(plan)
    }
}

/// The fetch ranges of each xorb, flattened over its entries (each range with its entry's
/// URL) and sorted by chunk range; every URL and range checked.
fn fetch_ranges(
    xorbs: BTreeMap<XorbHash, Vec<XorbEntryV2>>,
) -> Result<HashMap<XorbHash, Vec<FetchRange>>, WireError> {
    let mut fetch_of: HashMap<XorbHash, Vec<FetchRange>> = HashMap::new();
    for (xorb, entries) in xorbs {
        if entries.is_empty() {
            return Err(WireError(format!("xorb {xorb} has no fetch entry")));
        }
        let mut ranges = Vec::new();
        for entry in entries {
            check_url(&xorb, &entry.url)?;
            if entry.ranges.is_empty() {
                return Err(WireError(format!(
                    "xorb {xorb}: a fetch entry has no range"
                )));
            }
            for r in &entry.ranges {
                check_range(&xorb, r)?;
                ranges.push(FetchRange {
                    chunks: r.chunks.start..r.chunks.end,
                    bytes: r.bytes.start..=r.bytes.end,
                    url: Some(entry.url.clone()),
                });
            }
        }
        ranges.sort_by_key(|r| (r.chunks.start, r.chunks.end));
        if fetch_of.insert(xorb, ranges).is_some() {
            return Err(WireError(format!("xorb {xorb} is listed twice")));
        }
    }
    Ok(fetch_of)
}

/// Checks term `i`: a valid chunk range, a length so many chunks can hold, and a fetch range
/// of its xorb that covers it. Returns its xorb's fetch ranges.
fn term_ranges<'a>(
    i: usize,
    t: &Term,
    fetch_of: &'a HashMap<XorbHash, Vec<FetchRange>>,
) -> Result<&'a Vec<FetchRange>, WireError> {
    let xorb = t.hash;
    let (s, e) = (t.range.start, t.range.end);
    let bad = |why: String| {
        Err(WireError(format!(
            "term {i} (xorb {xorb}, chunks {s}..{e}) {why}"
        )))
    };
    if s >= e || e as usize > MAX_XORB_CHUNKS {
        return bad("is not a valid chunk range".into());
    }
    let max_len = u64::from(e - s) * u64::from(MAX_CHUNK_LEN);
    if t.unpacked_length == 0 || u64::from(t.unpacked_length) > max_len {
        return bad(format!(
            "claims {} bytes, which so many chunks cannot hold",
            t.unpacked_length
        ));
    }
    let Some(ranges) = fetch_of.get(&xorb) else {
        return bad("names a xorb with no fetch entry".into());
    };
    if !ranges
        .iter()
        .any(|r| r.chunks.start <= s && e <= r.chunks.end)
    {
        return bad("is not covered by any fetch range of its xorb".into());
    }
    Ok(ranges)
}

/// The file size of a plan whose terms add up to `total` bytes, once its
/// `offset_into_first_range` is checked to lie within the first term (and to be 0 for a
/// whole-file reconstruction, `range_start` `None`).
fn file_size(
    plan: &ReconstructionPlan,
    total: u64,
    range_start: Option<u64>,
) -> Result<u64, WireError> {
    let offset = plan.offset_into_first_range;
    match plan.terms.first() {
        None if offset != 0 => {
            return Err(WireError(format!(
                "offset_into_first_range is {offset} but there are no terms"
            )))
        }
        Some(first) if offset >= u64::from(first.unpacked_len) => {
            return Err(WireError(format!(
                "offset_into_first_range {offset} is not within the first term ({} bytes)",
                first.unpacked_len
            )))
        }
        _ => {}
    }
    match range_start {
        None if offset != 0 => Err(WireError(format!(
            "offset_into_first_range is {offset} for a whole-file reconstruction"
        ))),
        None => Ok(total),
        Some(start) => Ok(start.saturating_add(total - offset)),
    }
}

/// Declares [`ErrorCode`]: each variant with its wire text.
macro_rules! error_codes {
    ($($variant:ident => $text:literal,)*) => {
        /// The machine-readable `error` code of a JSON error body (docs/cas-api.md §9), one
        /// variant per code this server sends or a client decides on. Clients keep the text of
        /// codes they do not know ([`ErrorCode::parse`] gives `None`) for messages only.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            /// Every code, in the order declared.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as sent on the wire (`snake_case`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }

            /// The code a server sent, if it is one of these.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    AlreadyStored => "already_stored",
    BodyReadFailed => "body_read_failed",
    BodyTimeout => "body_timeout",
    BodyTooLarge => "body_too_large",
    CasTokenNotAccepted => "cas_token_not_accepted",
    CatchingUp => "catching_up",
    ChecksumMismatch => "checksum_mismatch",
    ChunkNotFound => "chunk_not_found",
    ChunkRange => "chunk_range",
    ClaimsBacklog => "claims_backlog",
    EmptyBody => "empty_body",
    FileHashMismatch => "file_hash_mismatch",
    FileNotFound => "file_not_found",
    Forbidden => "forbidden",
    GrantExpired => "grant_expired",
    GrantMismatch => "grant_mismatch",
    GrantNotFound => "grant_not_found",
    InsufficientStorage => "insufficient_storage",
    InternalError => "internal_error",
    InvalidCursor => "invalid_cursor",
    InvalidForce => "invalid_force",
    InvalidGrant => "invalid_grant",
    InvalidGrantRequest => "invalid_grant_request",
    InvalidHash => "invalid_hash",
    InvalidJson => "invalid_json",
    InvalidLength => "invalid_length",
    InvalidLimit => "invalid_limit",
    InvalidObjects => "invalid_objects",
    InvalidOid => "invalid_oid",
    InvalidOperation => "invalid_operation",
    InvalidPath => "invalid_path",
    InvalidQuery => "invalid_query",
    InvalidRange => "invalid_range",
    InvalidShard => "invalid_shard",
    InvalidSignature => "invalid_signature",
    InvalidTelemetry => "invalid_telemetry",
    InvalidUrlPath => "invalid_url_path",
    InvalidVerifyRequest => "invalid_verify_request",
    InvalidXorb => "invalid_xorb",
    KeyedShard => "keyed_shard",
    LengthMismatch => "length_mismatch",
    LockExists => "lock_exists",
    LockForwardLoop => "lock_forward_loop",
    LockNotFound => "lock_not_found",
    LockOwnedByAnotherUser => "lock_owned_by_another_user",
    LockOwnerUnreachable => "lock_owner_unreachable",
    MethodNotAllowed => "method_not_allowed",
    MissingPath => "missing_path",
    MissingVerification => "missing_verification",
    NoTerms => "no_terms",
    NotAcceptable => "not_acceptable",
    NotFound => "not_found",
    NotReady => "not_ready",
    ObjectNotFound => "object_not_found",
    OidMismatch => "oid_mismatch",
    OidNotFound => "oid_not_found",
    PathTooLong => "path_too_long",
    RangeNotGranted => "range_not_granted",
    RangeNotSatisfiable => "range_not_satisfiable",
    RepositoryScopedToken => "repository_scoped_token",
    ServerBusy => "server_busy",
    SizeMismatch => "size_mismatch",
    TlsCertificate => "tls_certificate",
    TokenExpired => "token_expired",
    TooManyLocks => "too_many_locks",
    TooManyObjects => "too_many_objects",
    Unauthorized => "unauthorized",
    UnknownFlags => "unknown_flags",
    UnknownPrefix => "unknown_prefix",
    UnknownXorb => "unknown_xorb",
    UnpackedLengthMismatch => "unpacked_length_mismatch",
    UnsupportedHashAlgo => "unsupported_hash_algo",
    UrlExpired => "url_expired",
    VerificationMismatch => "verification_mismatch",
    WrongRepository => "wrong_repository",
    XorbBlockMismatch => "xorb_block_mismatch",
    XorbDamaged => "xorb_damaged",
    XorbGrantsNotOffered => "xorb_grants_not_offered",
    XorbHashMismatch => "xorb_hash_mismatch",
    XorbNotFound => "xorb_not_found",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_round_trip_and_malformed_ones_are_refused() {
        let pack = Pack(
            (0..3u8)
                .map(|i| (LfsOid::of(&[i]), u64::from(i) * 1000 + 1))
                .collect(),
        );
        let header = pack.to_header();
        assert_eq!(Pack::from_header(&header).unwrap(), pack);
        let one = Pack(pack.0[..1].to_vec()).to_header();
        let many = Pack(
            (0..=MAX_PACK_MEMBERS as u32)
                .map(|i| (LfsOid::of(&i.to_le_bytes()), 1))
                .collect(),
        )
        .to_header();
        let a = LfsOid::of(b"a").to_hex();
        for bad in [
            one,
            many,
            String::new(),
            format!("{a}:1,{a}:2"),
            format!("{a}:1,zz:2"),
            format!("{a}:1,{}:-2", LfsOid::of(b"b").to_hex()),
            format!("{a}:1,{}", LfsOid::of(b"b").to_hex()),
        ] {
            assert!(Pack::from_header(&bad).is_err(), "{bad:?}");
        }
    }

    const X: &str = "0101010101010101020202020202020203030303030303030404040404040404";

    #[test]
    fn download_packs_round_trip_and_malformed_ones_are_refused() {
        let pack = DownloadPack(
            (0..3u8)
                .map(|i| {
                    (
                        LfsOid::of(&[i]),
                        u64::from(i) + 1,
                        FileHash::from_bytes([i; 32]),
                    )
                })
                .collect(),
        );
        assert_eq!(DownloadPack::from_header(&pack.to_header()).unwrap(), pack);
        let (a, h) = (LfsOid::of(b"a").to_hex(), FileHash::ZERO.to_hex());
        let b = LfsOid::of(b"b").to_hex();
        for bad in [
            format!("{a}:1:{h}"),
            format!("{a}:1:{h},{a}:2:{h}"),
            format!("{a}:1:{h},{b}:2"),
            format!("{a}:1:{h},{b}:2:{h}:3"),
            format!("{a}:1:{h},{b}:x:{h}"),
            format!("{a}:1:{h},{b}:2:zz"),
            // An upload pack is not a download pack.
            format!("{a}:1,{b}:2"),
        ] {
            assert!(DownloadPack::from_header(&bad).is_err(), "{bad:?}");
        }
    }

    fn xorb() -> XorbHash {
        XorbHash::from_hex(X).unwrap()
    }

    fn v2(terms: Vec<Term>, ranges: Vec<RangeV2>) -> ReconstructionV2 {
        ReconstructionV2 {
            offset_into_first_range: 0,
            terms,
            xorbs: BTreeMap::from([(
                xorb(),
                vec![XorbEntryV2 {
                    url: "http://cas.test/v1/xorb-data/x?e=1&s=2".into(),
                    ranges,
                }],
            )]),
        }
    }

    fn term(s: u32, e: u32, len: u32) -> Term {
        Term {
            hash: xorb(),
            unpacked_length: len,
            range: ChunkRange { start: s, end: e },
        }
    }

    fn range(s: u32, e: u32, bs: u64, be: u64) -> RangeV2 {
        RangeV2 {
            chunks: ChunkRange { start: s, end: e },
            bytes: ByteRange { start: bs, end: be },
        }
    }

    #[test]
    fn chunk_lists_round_trip_and_nonsense_is_refused() {
        use xet_format::{ChunkHash, ChunkRef};
        let list = vec![
            ChunkRef::new(ChunkHash::from_bytes([1; 32]), 65_536),
            ChunkRef::new(ChunkHash::from_bytes([2; 32]), 9),
        ];
        let body = encode_file_chunks(&list);
        assert_eq!(body.len(), 2 * FILE_CHUNK_RECORD);
        assert_eq!(decode_file_chunks(&body).unwrap(), list);
        assert!(decode_file_chunks(&body[1..]).is_err());
        let mut zero = body.clone();
        zero[32..36].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode_file_chunks(&zero).is_err());
        assert!(decode_file_chunks(&[]).unwrap().is_empty());
    }

    #[test]
    fn nonsense_is_refused() {
        let ok = v2(vec![term(0, 2, 200)], vec![range(0, 2, 0, 215)]);
        assert!(ok.clone().into_plan(None).is_ok());
        let ranged = ReconstructionV2 {
            offset_into_first_range: 50,
            ..ok.clone()
        };
        assert_eq!(
            ranged.clone().into_plan(Some(1050)).unwrap().file_size,
            1200
        );
        assert!(ranged.into_plan(None).is_err());
        let cases = [
            v2(vec![term(2, 2, 10)], vec![range(0, 2, 0, 215)]),
            v2(vec![term(0, 2, 0)], vec![range(0, 2, 0, 215)]),
            v2(vec![term(0, 2, 300_000)], vec![range(0, 2, 0, 215)]),
            v2(vec![term(0, 3, 200)], vec![range(0, 2, 0, 215)]),
            v2(vec![term(0, 2, 200)], vec![range(0, 2, 215, 0)]),
            v2(vec![term(0, 2, 200)], vec![range(0, 2, 0, 3)]),
            v2(vec![term(0, 2, 200)], vec![range(0, 9000, 0, 900_000)]),
            v2(vec![term(0, 2, 200)], vec![]),
            ReconstructionV2 {
                offset_into_first_range: 200,
                ..ok.clone()
            },
            ReconstructionV2 {
                offset_into_first_range: 1,
                terms: vec![],
                xorbs: BTreeMap::new(),
            },
            ReconstructionV2 {
                xorbs: BTreeMap::new(),
                ..ok.clone()
            },
        ];
        for (i, case) in cases.into_iter().enumerate() {
            assert!(case.into_plan(None).is_err(), "case {i}");
        }
        // Hashes are checked as the JSON is read.
        let bad_hash = r#"{"offset_into_first_range":0,"xorbs":{},
            "terms":[{"hash":"zz","unpacked_length":1,"range":{"start":0,"end":1}}]}"#;
        let err = serde_json::from_str::<ReconstructionV2>(bad_hash).unwrap_err();
        assert!(
            err.to_string().contains("\"zz\" is not a XorbHash"),
            "{err}"
        );
        let mut bad_url = ok;
        bad_url.xorbs.values_mut().next().unwrap()[0].url = "file:///etc/passwd".into();
        assert!(bad_url.into_plan(None).is_err());
    }

    #[test]
    fn error_codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            assert!(code
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()));
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
        assert_eq!(
            serde_json::to_string(&ErrorCode::XorbDamaged).unwrap(),
            "\"xorb_damaged\""
        );
    }
}
