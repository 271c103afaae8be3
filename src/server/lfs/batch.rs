//! The batch API (`POST {repo}/info/lfs/objects/batch`, git-lfs `docs/api/batch.md`) and the
//! Xet token-refresh route (docs/lfs-agent.md §12.2).
//!
//! The request is parsed as loose JSON so that every object can be judged on its own: a bad oid
//! or size is a per-object 422 in a 200 answer, never a failure of the whole batch. Whole-request
//! errors: 400 unparsable JSON, 422 a missing or unknown `operation` or a missing `objects`
//! array, 409 a `hash_algo` other than `sha256`, 413 more than [`MAX_OBJECTS`] objects, 406 an
//! `Accept` header that rules out JSON.
//!
//! Which transfer: uploads go through `xet` when the client offers it; downloads only when it
//! offers `xet-download` ([`XET_DOWNLOAD_TRANSFER`], which only git-xet's install registers),
//! answered by that name; otherwise `basic` (docs/lfs-agent.md §11.5). A client whose `xet` agent cannot download
//! (Hugging Face's) still clones.
//!
//! Xet actions carry one CAS token per response (scope write for uploads, read for downloads)
//! valid for the server's token lifetime; `expires_in` says the same, so git-lfs asks again for
//! objects it has not started when the token is about to expire, and an agent in the middle of
//! a transfer refreshes through `href`. Hugging Face's Hub sends `X-Xet-Cas-Url`,
//! `X-Xet-Access-Token`, `X-Xet-Token-Expiration` and `X-Xet-Session-Id` on upload actions
//! (§12.1); downloads add `X-Xet-Hash`, the Xet file hash for the oid (§12.3: this server's
//! answer to the oid → hash lookup). Small objects' download actions also carry their v2
//! reconstruction in `X-Xet-Reconstruction` (this server's extension), which saves the agent a
//! request per object. Small objects' upload actions name their *pack* in `X-Xet-Pack` (this
//! server's extension, docs/lfs-agent.md §12.4): the batch's small objects are dealt into a few
//! packs, each of which one agent uploads as one session (a few xorbs and one shard instead of
//! one of each per object). Small objects' download actions name their *download pack*
//! (§12.5): neighbours in the xorbs, which one agent plans in one request and fetches in a few;
//! the answer then lists the packed objects one from each pack in turn.

use std::collections::BTreeMap;
use xet_protocol::wire::ErrorCode;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use super::{authorize_user, lfs_json, Repo};
use crate::server::auth::{now_unix, Scope};
use crate::server::body::read_body;
use crate::server::cas::reconstruction::{inline_v2, small_plan};
use crate::server::error::ApiError;
use crate::server::{blocking, AppState};
use xet_format::{FileHash, LfsOid, XorbHash};
use xet_protocol::wire::{
    CasTokenInfo, DownloadPack, Pack, MAX_PACK_MEMBERS, PACK_HEADER, RECONSTRUCTION_HEADER,
    XET_DOWNLOAD_TRANSFER, XET_TRANSFER,
};
use xet_protocol::ReconstructionPlan;

/// Objects accepted in one batch request (git-lfs sends at most 100 by default).
pub(crate) const MAX_OBJECTS: usize = 1000;

/// Largest batch request body accepted.
pub const MAX_BODY: u64 = 1 << 20;

/// SHA-256 of the empty string: the oid of the empty file, which is always "stored".
pub(crate) const EMPTY_OID: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Upload,
    Download,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transfer {
    Xet,
    Basic,
}

/// One requested object, checked.
#[derive(Debug)]
struct Requested {
    /// The oid and size as sent (echoed back).
    oid_echo: Value,
    size_echo: Value,
    checked: Result<(LfsOid, u64), String>,
}

#[derive(Debug, Serialize)]
struct Action {
    href: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    header: BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_in: Option<u64>,
}

#[derive(Debug, Serialize)]
struct ObjectError {
    code: u16,
    message: String,
}

#[derive(Debug, Serialize)]
struct ObjectOut {
    oid: Value,
    size: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    authenticated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    actions: Option<BTreeMap<&'static str, Action>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ObjectError>,
}

#[derive(Debug, Serialize)]
struct BatchResponse {
    transfer: &'static str,
    objects: Vec<ObjectOut>,
    hash_algo: &'static str,
}

/// 406 unless `Accept` is absent or admits an LFS or JSON answer.
fn check_accept(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(accept) = headers.get(header::ACCEPT) else {
        return Ok(());
    };
    let accept = accept.to_str().unwrap_or("");
    let ok = accept.split(',').any(|part| {
        let media = part.split(';').next().unwrap_or("").trim();
        matches!(
            media.to_ascii_lowercase().as_str(),
            "application/vnd.git-lfs+json" | "application/json" | "application/*" | "*/*" | ""
        )
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::NotAcceptable,
            format!(
                "the batch API answers {}; Accept was {accept:?}",
                super::LFS_MEDIA_TYPE
            ),
        ))
    }
}

fn check_object(v: &Value) -> Requested {
    let oid_echo = v.get("oid").cloned().unwrap_or(Value::Null);
    let size_echo = v.get("size").cloned().unwrap_or(Value::Null);
    let checked = (|| {
        let oid = v
            .get("oid")
            .and_then(Value::as_str)
            .ok_or("missing oid: each object needs an \"oid\" string")?;
        let valid = oid.len() == 64
            && oid
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !valid {
            return Err(format!(
                "invalid oid {oid:?}: expected 64 lowercase hex characters (SHA-256)"
            ));
        }
        let oid = LfsOid::from_hex(oid).map_err(|e| format!("invalid oid {oid:?}: {e}"))?;
        let size = match v.get("size") {
            None | Some(Value::Null) => return Err(format!("object {oid}: missing size")),
            Some(s) => s.as_u64().ok_or_else(|| {
                format!("object {oid}: size {s} is not an integer of at least zero")
            })?,
        };
        Ok((oid, size))
    })();
    Requested {
        oid_echo,
        size_echo,
        checked,
    }
}

/// `POST {repo}/info/lfs/objects/batch`.
pub async fn batch(
    state: &std::sync::Arc<AppState>,
    repo: &Repo,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_accept(headers)?;
    let grant = authorize_user(state, headers, repo, Scope::Read, "the batch API")?;
    let limited = super::limited_to(&grant, repo).cloned();
    let bytes = read_body(
        &state.resources.body_budget,
        headers,
        body,
        MAX_BODY,
        "batch request",
    )
    .await?;
    let BatchRequest {
        operation,
        transfer,
        requested,
    } = parse_request(&bytes, grant.scope.allows(Scope::Write), repo)?;
    let oids: Vec<Option<LfsOid>> = requested
        .iter()
        .map(|r| r.checked.as_ref().ok().map(|(oid, _)| *oid))
        .collect();
    let looked_up = look_up(state, oids, limited, operation, transfer).await?;
    // A node that has not registered every shard in storage yet may lack what a download
    // asks for: come back shortly rather than fail. An upload goes ahead (what is stored
    // already is found by its xorbs and stored once).
    let absent = looked_up
        .iter()
        .filter(|(stored, _)| matches!(stored, Stored::Absent))
        .count();
    if absent > 0 && operation == Operation::Download && state.store.catching_up() {
        return Err(ApiError::missing(
            &state.store,
            ErrorCode::ObjectNotFound,
            format!("{absent} of the objects are not known to this server yet"),
        ));
    }
    let actions = Actions::new(state, repo, operation, transfer, grant.repos.is_some());
    let (packs, order) = packs(operation, transfer, &requested, &looked_up);
    let mut objects: Vec<Option<ObjectOut>> = requested
        .into_iter()
        .zip(looked_up)
        .zip(packs)
        .map(|((r, (stored, inline)), pack)| {
            Some(actions.object(r, stored, inline.map(|i| i.json), pack))
        })
        .collect();
    let objects: Vec<ObjectOut> = match order {
        Some(order) => order.iter().filter_map(|&i| objects[i].take()).collect(),
        None => objects.into_iter().flatten().collect(),
    };
    tracing::info!(
        repo = %repo.id,
        operation = ?operation,
        transfer = ?transfer,
        objects = objects.len(),
        "batch"
    );
    Ok(lfs_json(
        StatusCode::OK,
        &BatchResponse {
            transfer: match (transfer, operation) {
                (Transfer::Xet, Operation::Download) => XET_DOWNLOAD_TRANSFER,
                (Transfer::Xet, Operation::Upload) => XET_TRANSFER,
                (Transfer::Basic, _) => "basic",
            },
            objects,
            hash_algo: "sha256",
        },
    ))
}

/// The `X-Xet-Pack` header of each requested object (by position), and for downloads the order
/// in which the answer lists them ([`pack_headers`], [`download_pack_headers`]).
fn packs(
    operation: Operation,
    transfer: Transfer,
    requested: &[Requested],
    looked_up: &[(Stored, Option<Inline>)],
) -> (Vec<Option<String>>, Option<Vec<usize>>) {
    let (mut packs, order) = match (operation, transfer) {
        (Operation::Upload, Transfer::Xet) => (pack_headers(requested, looked_up), None),
        (Operation::Download, Transfer::Xet) => {
            let (packs, order) = download_pack_headers(requested, looked_up);
            (packs, Some(order))
        }
        _ => (Vec::new(), None),
    };
    packs.resize(requested.len(), None);
    (packs, order)
}

/// What a batch request asks for, checked: the operation (an upload only with a write
/// token), the transfer (xet when the client offers it) and each object.
struct BatchRequest {
    operation: Operation,
    transfer: Transfer,
    requested: Vec<Requested>,
}

fn parse_request(bytes: &[u8], may_write: bool, repo: &Repo) -> Result<BatchRequest, ApiError> {
    let request: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("batch request is not JSON: {e}"),
        )
    })?;
    let operation = match request.get("operation").and_then(Value::as_str) {
        Some("upload") => Operation::Upload,
        Some("download") => Operation::Download,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidOperation,
                format!("unknown operation {other:?}: use \"upload\" or \"download\""),
            ))
        }
        None => {
            return Err(ApiError::new(
                ErrorCode::InvalidOperation,
                "missing operation: use \"upload\" or \"download\"",
            ))
        }
    };
    if operation == Operation::Upload && !may_write {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "this token is read-only; uploading LFS objects to {} needs a write token",
                repo.path
            ),
        ));
    }
    match request.get("hash_algo") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "sha256" => {}
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::UnsupportedHashAlgo,
                format!("hash algorithm {other} is not supported: this server uses sha256"),
            ))
        }
    }
    let objects = request
        .get("objects")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidObjects, "missing \"objects\" array"))?;
    if objects.len() > MAX_OBJECTS {
        return Err(ApiError::new(
            ErrorCode::TooManyObjects,
            format!(
                "{} objects in one batch request; at most {MAX_OBJECTS} are accepted",
                objects.len()
            ),
        ));
    }
    // Downloads go through xet only for a client whose agent says it downloads (see
    // XET_DOWNLOAD_TRANSFER); any other gets basic, as from the Hub.
    let wanted = match operation {
        Operation::Download => XET_DOWNLOAD_TRANSFER,
        Operation::Upload => XET_TRANSFER,
    };
    let offered = request
        .get("transfers")
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|t| t.as_str() == Some(wanted)));
    Ok(BatchRequest {
        operation,
        transfer: if offered {
            Transfer::Xet
        } else {
            Transfer::Basic
        },
        requested: objects.iter().map(check_object).collect(),
    })
}

/// A small object's reconstruction sent along with its download action: the v2 JSON, and where
/// its first chunk is stored (by which download packs gather neighbours).
struct Inline {
    json: String,
    place: (XorbHash, u32),
}

/// What a batch learned of each xorb it checked (packed small files share xorbs).
type XorbVerdicts = std::collections::HashMap<XorbHash, Option<String>>;

/// A small object's plan as sent along with its download action: the v2 JSON with presigned
/// URLs (signing may wait for storage credentials), and where its first chunk is stored.
fn inline_plan(st: &AppState, plan: Option<ReconstructionPlan>) -> Option<Inline> {
    let plan = plan?;
    let first = plan.terms.first()?;
    let json = serde_json::to_string(&inline_v2(st, &plan)?).ok()?;
    Some(Inline {
        json,
        place: (first.xorb, first.chunks.start),
    })
}

/// What the store holds of one requested oid, from the index alone (see [`look_up`]).
fn look_up_one(
    st: &AppState,
    oid: &Option<LfsOid>,
    limited: Option<&xet_store::RepoName>,
    operation: Operation,
    with_plans: bool,
    checked: &mut XorbVerdicts,
) -> Result<(Stored, Option<Inline>), xet_store::StoreError> {
    let store = &st.store;
    let Some(oid) = oid else {
        return Ok((Stored::Absent, None));
    };
    if oid.to_hex() == EMPTY_OID {
        return Ok((Stored::Intact(FileHash::ZERO, 0), None));
    }
    // What another repository stored (or claimed) is absent for a token limited to this one:
    // an upload then registers it here (cheaply: its chunks deduplicate).
    let fresh = xet_store::cas::Freshness::IndexOnly;
    let Some(found) = store.oid_file(oid, limited, fresh)? else {
        return Ok((Stored::Absent, None));
    };
    let (file, size) = (found.file, found.size);
    // A download may use an unchecked SHA-256 claim (git-lfs checks what it downloads); an
    // upload is skipped only for a checked mapping, so that a wrong claim never keeps the
    // right content out (see `server::claims`).
    if operation == Operation::Upload && !found.checked {
        return Ok((Stored::Absent, None));
    }
    let purpose = match operation {
        Operation::Download => xet_store::cas::Purpose::Download,
        Operation::Upload => xet_store::cas::Purpose::Upload,
    };
    Ok(match store.file_damage_memo(&file, purpose, checked)? {
        None => {
            let plan = with_plans.then(|| small_plan(store, &file, size)).flatten();
            (Stored::Intact(file, size), inline_plan(st, plan))
        }
        Some((xorb, why)) => (Stored::Damaged { size, xorb, why }, None),
    })
}

/// What the store holds of each oid (as a token limited to `limited` sees it), on a blocking
/// thread. Downloads offered xet get the plans of small intact objects along
/// (`X-Xet-Reconstruction`, this server's extension): the agent then skips the reconstruction
/// request, half of the round trips of a small download. Agents that do not know the header
/// ignore it.
async fn look_up(
    state: &std::sync::Arc<AppState>,
    oids: Vec<Option<LfsOid>>,
    limited: Option<xet_store::RepoName>,
    operation: Operation,
    transfer: Transfer,
) -> Result<Vec<(Stored, Option<Inline>)>, ApiError> {
    let with_plans = operation == Operation::Download && transfer == Transfer::Xet;
    let st = std::sync::Arc::clone(state);
    blocking(move || {
        let store = &st.store;
        let one = |oid: &Option<LfsOid>, checked: &mut XorbVerdicts| {
            look_up_one(&st, oid, limited.as_ref(), operation, with_plans, checked)
        };
        // Each xorb is checked once per batch.
        let mut checked = XorbVerdicts::new();
        let mut found = oids
            .iter()
            .map(|oid| one(oid, &mut checked))
            .collect::<Result<Vec<_>, _>>()
            .map_err(ApiError::from)?;
        // On shared storage, the objects not found are looked up again after one catch-up with
        // the other nodes for the whole batch (none when every object was found). An upload's
        // objects are absent as a rule: when the scheduled catch-up ran less than
        // UPLOAD_CATCH_UP_AGE ago, what another node stored since may be sent again (bytes, not
        // correctness); a download's miss always looks afresh.
        let absent: Vec<usize> = (0..oids.len())
            .filter(|&i| oids[i].is_some() && matches!(found[i].0, Stored::Absent))
            .collect();
        let recent = operation == Operation::Upload
            && store
                .catch_up_age()
                .is_some_and(|age| age < UPLOAD_CATCH_UP_AGE);
        if !absent.is_empty() && !recent && store.caught_up_after_miss() {
            for i in absent {
                found[i] = one(&oids[i], &mut checked).map_err(ApiError::from)?;
            }
        }
        Ok(found)
    })
    .await
}

/// An upload batch on shared storage lists the other nodes' shard log for its absent objects
/// only when the last catch-up is older than this: two turns of the scheduled one.
const UPLOAD_CATCH_UP_AGE: std::time::Duration =
    crate::server::maintenance::SYNC_INTERVAL.saturating_mul(2);

/// Objects of at most this size are packed ([`pack_headers`]).
pub(crate) const PACK_MEMBER_MAX: u64 = 4 << 20;

/// Bytes of members a pack is dealt at most (on average: members are dealt in turn).
const PACK_BYTES: u64 = 32 << 20;

/// Runs of neighbours a download batch is cut into at least, so that that many agents fetch at
/// once (git-lfs hands the batch's objects in order to its agents, 8 by default).
const PACK_SPREAD: usize = 8;

/// Packs an upload batch is dealt into at least, so that that many agents upload at once
/// (dealing members in turn makes consecutive objects fall in different packs). Fewer than
/// git-lfs's 8 agents: each pack costs the store a xorb, a shard and their records whatever
/// its size (on object storage, requests whose cost is per object, not per byte), and git-lfs
/// asks for the next batch while one goes up. A push of 10,000 small files through a Garage
/// node took 17.1-17.3 s with 4 against 18.6-20.7 s with 8 (Garage's CPU 12 s against
/// 14.5-16.5 s), and 9.2-9.4 s against 9.4-10.6 s through a directory node; with 2 (a batch of
/// 100 is two packs of 50 in any case: [`MAX_PACK_MEMBERS`]) 8.9 s against 10.4 s (Garage's CPU
/// 4.4 s against 6.1 s), a directory node's time unchanged (6.0 s against 5.9 s).
const UPLOAD_PACK_SPREAD: usize = 2;

/// The `X-Xet-Pack` header of each requested object (by position; `None` for objects not
/// packed). The small objects to upload (absent or damaged, 1 byte to [`PACK_MEMBER_MAX`]) are
/// dealt in turn into `n` packs: at least [`UPLOAD_PACK_SPREAD`] while each gets two members, enough
/// that none has more than [`MAX_PACK_MEMBERS`] members or, on average, [`PACK_BYTES`]. A pack
/// of one member is no pack.
fn pack_headers(
    requested: &[Requested],
    looked_up: &[(Stored, Option<Inline>)],
) -> Vec<Option<String>> {
    let small: Vec<(usize, LfsOid, u64)> = requested
        .iter()
        .zip(looked_up)
        .enumerate()
        .filter_map(|(i, (r, (stored, _)))| {
            let (oid, size) = *r.checked.as_ref().ok()?;
            let to_upload = match stored {
                Stored::Absent => true,
                Stored::Damaged { size: s, .. } => *s == size,
                Stored::Intact(..) => false,
            };
            (to_upload && size > 0 && size <= PACK_MEMBER_MAX).then_some((i, oid, size))
        })
        .collect();
    let mut out = vec![None; requested.len()];
    if small.len() < 2 {
        return out;
    }
    let bytes: u64 = small.iter().map(|(_, _, size)| size).sum();
    let n = pack_count(small.len(), bytes, UPLOAD_PACK_SPREAD);
    let mut packs: Vec<Vec<(usize, LfsOid, u64)>> = vec![Vec::new(); n];
    for (k, member) in small.into_iter().enumerate() {
        packs[k % n].push(member);
    }
    for pack in packs.into_iter().filter(|p| p.len() >= 2) {
        let header = Pack(pack.iter().map(|&(_, oid, size)| (oid, size)).collect()).to_header();
        for (i, _, _) in pack {
            out[i] = Some(header.clone());
        }
    }
    out
}

/// How many packs `members` objects of `bytes` bytes in all are dealt into: at least `spread`
/// while each gets two members, enough that none has more than [`MAX_PACK_MEMBERS`] members
/// or, on average, [`PACK_BYTES`].
fn pack_count(members: usize, bytes: u64, spread: usize) -> usize {
    spread
        .min(members / 2)
        .max(members.div_ceil(MAX_PACK_MEMBERS))
        .max(usize::try_from(bytes.div_ceil(PACK_BYTES)).unwrap_or(usize::MAX))
        .clamp(1, members.max(1))
}

/// The `X-Xet-Pack` header of each small object to download (by position), and the order in
/// which the answer lists the objects (docs/lfs-agent.md §12.5). The intact objects whose
/// reconstruction goes along ([`Inline`]) are sorted by where their first chunk is stored and
/// cut into runs of neighbours (about [`pack_count`] runs of even length, none over
/// [`PACK_BYTES`] but by its last member), so that
/// one agent fetches a run's bytes in few requests. The answer then lists the packed objects
/// taking one from each pack in turn, in the places packed objects had: git-lfs hands objects
/// to its agents in the answer's order, so the first agents start different packs. A run of
/// one object is no pack.
fn download_pack_headers(
    requested: &[Requested],
    looked_up: &[(Stored, Option<Inline>)],
) -> (Vec<Option<String>>, Vec<usize>) {
    let mut small: Vec<Neighbour> = requested
        .iter()
        .zip(looked_up)
        .enumerate()
        .filter_map(|(index, (r, (stored, inline)))| {
            let (oid, size) = *r.checked.as_ref().ok()?;
            let at = inline.as_ref()?.place;
            match stored {
                Stored::Intact(file, s) if *s == size && size > 0 && size <= PACK_MEMBER_MAX => {
                    Some(Neighbour {
                        index,
                        member: (oid, size, *file),
                        at,
                    })
                }
                _ => None,
            }
        })
        .collect();
    let mut headers = vec![None; requested.len()];
    let mut order: Vec<usize> = (0..requested.len()).collect();
    if small.len() < 2 {
        return (headers, order);
    }
    let places: Vec<usize> = small.iter().map(|m| m.index).collect();
    small.sort_by_key(|m| m.at);
    let runs = neighbour_runs(&small);
    for run in runs.iter().filter(|r| r.len() >= 2) {
        let header = DownloadPack(run.iter().map(|m| m.member).collect()).to_header();
        for m in run {
            headers[m.index] = Some(header.clone());
        }
    }
    let longest = runs.iter().map(Vec::len).max().unwrap_or(0);
    let dealt = (0..longest).flat_map(|j| runs.iter().filter_map(move |r| r.get(j)));
    for (place, m) in places.into_iter().zip(dealt) {
        order[place] = m.index;
    }
    (headers, order)
}

/// A small object to download, for [`download_pack_headers`].
struct Neighbour {
    /// Its place in the request.
    index: usize,
    /// Its oid, size and Xet file.
    member: (LfsOid, u64, FileHash),
    /// Where its first chunk is stored.
    at: (XorbHash, u32),
}

/// `sorted` cut into [`pack_count`] runs of even length, a run cut again where it would pass
/// [`PACK_BYTES`].
fn neighbour_runs(sorted: &[Neighbour]) -> Vec<Vec<&Neighbour>> {
    let bytes: u64 = sorted.iter().map(|m| m.member.1).sum();
    let n = pack_count(sorted.len(), bytes, PACK_SPREAD);
    let mut runs = Vec::with_capacity(n);
    for j in 0..n {
        let even = &sorted[sorted.len() * j / n..sorted.len() * (j + 1) / n];
        let mut run: Vec<&Neighbour> = Vec::new();
        let mut run_bytes = 0;
        for m in even {
            if !run.is_empty() && run_bytes + m.member.1 > PACK_BYTES {
                runs.push(std::mem::take(&mut run));
                run_bytes = 0;
            }
            run.push(m);
            run_bytes += m.member.1;
        }
        runs.push(run);
    }
    runs
}

/// What the store holds of a requested object.
enum Stored {
    Absent,
    Intact(FileHash, u64),
    /// Registered, but a xorb it needs is missing or damaged: downloads fail with the reason,
    /// uploads are asked for again (which repairs it).
    Damaged {
        size: u64,
        xorb: xet_format::XorbHash,
        why: String,
    },
}

impl Stored {
    fn size(&self) -> Option<u64> {
        match self {
            Stored::Absent => None,
            Stored::Intact(_, size) | Stored::Damaged { size, .. } => Some(*size),
        }
    }
}

/// Builds the actions of one batch response.
struct Actions {
    operation: Operation,
    transfer: Transfer,
    endpoint: String,
    cas_url: String,
    token: String,
    exp: u64,
    ttl: u64,
    session: String,
}

impl Actions {
    fn new(
        state: &AppState,
        repo: &Repo,
        operation: Operation,
        transfer: Transfer,
        restricted: bool,
    ) -> Self {
        let ttl = state.token_ttl.as_secs().max(1);
        let exp = now_unix() + ttl;
        let scope = match operation {
            Operation::Upload => Scope::Write,
            Operation::Download => Scope::Read,
        };
        Self {
            operation,
            transfer,
            endpoint: repo.endpoint(state),
            cas_url: state.public_url.clone(),
            token: state.auth.issue_for(scope, &repo.id, exp, restricted),
            exp,
            ttl,
            session: xet_protocol::random_hex(16),
        }
    }

    fn object(
        &self,
        r: Requested,
        stored: Stored,
        inline: Option<String>,
        pack: Option<String>,
    ) -> ObjectOut {
        let mut out = ObjectOut {
            oid: r.oid_echo,
            size: r.size_echo,
            authenticated: None,
            actions: None,
            error: None,
        };
        let (oid, size) = match r.checked {
            Ok(v) => v,
            Err(message) => {
                out.error = Some(ObjectError { code: 422, message });
                return out;
            }
        };
        if let Some(stored_size) = stored.size().filter(|s| *s != size) {
            out.error = Some(ObjectError {
                code: 422,
                message: format!("object {oid} is stored with {stored_size} bytes, not {size}"),
            });
            return out;
        }
        match (self.operation, stored) {
            // Already stored intact: no actions, git-lfs skips it.
            (Operation::Upload, Stored::Intact(..)) => {}
            (Operation::Upload, Stored::Absent) => {
                out.authenticated = Some(true);
                out.actions = Some(self.upload_actions(&oid, pack));
            }
            (Operation::Upload, Stored::Damaged { xorb, .. }) => {
                tracing::warn!(%oid, %xorb, "batch: asking for a damaged object again to repair it");
                out.authenticated = Some(true);
                out.actions = Some(self.upload_actions(&oid, pack));
            }
            (Operation::Download, Stored::Absent) => {
                out.error = Some(ObjectError {
                    code: 404,
                    message: format!("object {oid} not found"),
                });
            }
            (Operation::Download, Stored::Damaged { xorb, why, .. }) => {
                out.error = Some(ObjectError {
                    code: 500,
                    message: format!(
                        "object {oid} cannot be downloaded: the server's copy of xorb {xorb} is \
                         damaged ({why}); pushing the object again from a clone that has it \
                         repairs it, and the administrator can run `git xet scrub`"
                    ),
                });
            }
            (Operation::Download, Stored::Intact(file, _)) => {
                out.authenticated = Some(true);
                out.actions = Some(self.download_actions(&oid, &file, inline, pack));
            }
        }
        out
    }

    fn xet_header(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("X-Xet-Cas-Url", self.cas_url.clone()),
            ("X-Xet-Access-Token", self.token.clone()),
            ("X-Xet-Token-Expiration", self.exp.to_string()),
            ("X-Xet-Session-Id", self.session.clone()),
        ])
    }

    fn bearer(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([("Authorization", format!("Bearer {}", self.token))])
    }

    fn action(&self, href: String, header: BTreeMap<&'static str, String>) -> Action {
        Action {
            href,
            header,
            expires_in: Some(self.ttl),
        }
    }

    fn upload_actions(&self, oid: &LfsOid, pack: Option<String>) -> BTreeMap<&'static str, Action> {
        match self.transfer {
            Transfer::Xet => {
                let mut header = self.xet_header();
                if let Some(pack) = pack {
                    header.insert(PACK_HEADER, pack);
                }
                BTreeMap::from([(
                    "upload",
                    self.action(format!("{}/xet-token/write", self.endpoint), header),
                )])
            }
            Transfer::Basic => BTreeMap::from([
                (
                    "upload",
                    self.action(format!("{}/objects/{oid}", self.endpoint), self.bearer()),
                ),
                (
                    "verify",
                    self.action(format!("{}/verify", self.endpoint), self.bearer()),
                ),
            ]),
        }
    }

    fn download_actions(
        &self,
        oid: &LfsOid,
        file: &FileHash,
        inline: Option<String>,
        pack: Option<String>,
    ) -> BTreeMap<&'static str, Action> {
        let action = match self.transfer {
            Transfer::Xet => {
                let mut header = self.xet_header();
                header.insert("X-Xet-Hash", file.to_hex());
                if let Some(json) = inline {
                    header.insert(RECONSTRUCTION_HEADER, json);
                }
                if let Some(pack) = pack {
                    header.insert(PACK_HEADER, pack);
                }
                self.action(format!("{}/xet-token/read", self.endpoint), header)
            }
            Transfer::Basic => {
                self.action(format!("{}/objects/{oid}", self.endpoint), self.bearer())
            }
        };
        BTreeMap::from([("download", action)])
    }
}

/// `GET {repo}/info/lfs/xet-token/{read|write}`: a fresh CAS token.
pub fn token(
    state: &AppState,
    repo: &Repo,
    headers: &HeaderMap,
    scope: Scope,
) -> Result<Response, ApiError> {
    let what = match scope {
        Scope::Read => "refreshing a read token",
        Scope::Write => "refreshing a write token",
    };
    let grant = authorize_user(state, headers, repo, scope, what)?;
    let exp = now_unix() + state.token_ttl.as_secs().max(1);
    Ok(lfs_json(
        StatusCode::OK,
        &CasTokenInfo {
            cas_url: state.public_url.clone(),
            access_token: state
                .auth
                .issue_for(scope, &repo.id, exp, grant.repos.is_some()),
            exp,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requested(i: u32, size: u64) -> Requested {
        Requested {
            oid_echo: Value::Null,
            size_echo: Value::Null,
            checked: Ok((LfsOid::of(&i.to_le_bytes()), size)),
        }
    }

    #[test]
    fn small_objects_to_upload_are_dealt_into_packs() {
        // 100 small absent objects, one large, one stored, one invalid.
        let mut req: Vec<Requested> = (0..100).map(|i| requested(i, 10_000)).collect();
        req.push(requested(100, PACK_MEMBER_MAX + 1));
        req.push(requested(101, 500));
        req.push(Requested {
            oid_echo: Value::Null,
            size_echo: Value::Null,
            checked: Err("bad".into()),
        });
        let mut stored: Vec<(Stored, Option<Inline>)> =
            (0..103).map(|_| (Stored::Absent, None)).collect();
        stored[101].0 = Stored::Intact(FileHash::ZERO, 500);
        let headers = pack_headers(&req, &stored);
        assert!(headers[100..].iter().all(Option::is_none));
        let packs: std::collections::BTreeSet<&String> = headers.iter().flatten().collect();
        assert_eq!(packs.len(), UPLOAD_PACK_SPREAD);
        for (i, h) in headers[..100].iter().enumerate() {
            let pack = Pack::from_header(h.as_ref().unwrap()).unwrap();
            assert_eq!(pack.0.len(), 100 / UPLOAD_PACK_SPREAD);
            assert!(pack
                .0
                .contains(&(LfsOid::of(&(i as u32).to_le_bytes()), 10_000)));
        }
        // Consecutive objects fall in different packs.
        assert_ne!(headers[0], headers[1]);

        // Three objects make one pack; one object none.
        let few = pack_headers(&req[..3], &stored[..3]);
        assert!(few.iter().all(|h| h.is_some() && *h == few[0]));
        assert!(pack_headers(&req[..1], &stored[..1])[0].is_none());

        // A thousand objects: no pack has more than MAX_PACK_MEMBERS.
        let req: Vec<Requested> = (0..1000).map(|i| requested(i, 1)).collect();
        let stored: Vec<(Stored, Option<Inline>)> =
            (0..1000).map(|_| (Stored::Absent, None)).collect();
        let headers = pack_headers(&req, &stored);
        for h in &headers {
            assert!(Pack::from_header(h.as_ref().unwrap()).unwrap().0.len() <= MAX_PACK_MEMBERS);
        }
    }

    #[test]
    fn small_objects_to_download_are_packed_with_their_neighbours() {
        // 100 small intact objects stored in 4 xorbs, in the order xorb k % 4 (as upload packs
        // leave them); then one without an inline plan and one too large.
        let xorb = |k: u8| XorbHash::from_bytes([k; 32]);
        let file = |i: u32| FileHash::from_bytes([(i % 251) as u8 + 1; 32]);
        let mut req: Vec<Requested> = (0..102).map(|i| requested(i, 10_000)).collect();
        req[101] = requested(101, PACK_MEMBER_MAX + 1);
        let mut stored: Vec<(Stored, Option<Inline>)> = (0..100)
            .map(|i| {
                let inline = Inline {
                    json: String::new(),
                    place: (xorb((i % 4) as u8), i / 4),
                };
                (Stored::Intact(file(i), 10_000), Some(inline))
            })
            .collect();
        stored.push((Stored::Intact(file(100), 10_000), None));
        stored.push((Stored::Intact(file(101), PACK_MEMBER_MAX + 1), None));
        let (headers, order) = download_pack_headers(&req, &stored);
        assert!(headers[100..].iter().all(Option::is_none));
        let packs: Vec<DownloadPack> = headers[..100]
            .iter()
            .map(|h| DownloadPack::from_header(h.as_ref().unwrap()).unwrap())
            .collect();
        let distinct: std::collections::BTreeSet<&String> = headers.iter().flatten().collect();
        assert_eq!(distinct.len(), PACK_SPREAD);
        for (i, pack) in packs.iter().enumerate() {
            assert!(pack.0.len() >= 12 && pack.0.len() <= 13, "{}", pack.0.len());
            assert!(pack.0.contains(&(
                LfsOid::of(&(i as u32).to_le_bytes()),
                10_000,
                file(i as u32)
            )));
            // Neighbours: a pack's members are stored in one or two of the four xorbs.
            let here = |m: &(LfsOid, u64, FileHash)| {
                (0..100u32)
                    .find(|&j| LfsOid::of(&j.to_le_bytes()) == m.0)
                    .unwrap()
                    % 4
            };
            let xorbs: std::collections::BTreeSet<u32> = pack.0.iter().map(here).collect();
            assert!(xorbs.len() <= 2, "{xorbs:?}");
        }
        // The answer lists every object once, the unpacked ones where they were, and the first
        // eight objects it lists are of eight different packs.
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..102).collect::<Vec<_>>());
        assert_eq!(&order[100..], &[100, 101]);
        let first: std::collections::BTreeSet<&String> = order[..8]
            .iter()
            .map(|&i| headers[i].as_ref().unwrap())
            .collect();
        assert_eq!(first.len(), 8);

        // One small object: no pack, the order unchanged.
        let (headers, order) = download_pack_headers(&req[..1], &stored[..1]);
        assert!(headers[0].is_none());
        assert_eq!(order, vec![0]);
    }
}
