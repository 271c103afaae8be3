//! Several teams on one server, each with secrets scoped to its repositories, and one of them
//! hostile. Global dedup shares xorbs across teams; what crosses is chunk existence, never
//! bytes:
//!
//! - a presigned fetch URL grants exactly the byte ranges of the reconstruction entry it came
//!   with: without `Range` it serves those ranges, any other byte (another team's chunks in
//!   the same xorb, the xorb's footer with their hashes) is refused;
//! - an oid resolves, for a scoped token, only through its own repository's registrations and
//!   claims: another team's claim on the oid never hides this team's upload;
//! - the reference client still downloads through range-bound URLs (single and multi-range).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use common::server::{start_with, team_secrets, TestServer};
use git_xet::server::auth::Scope;
use serde_json::{json, Value};
use xet_client::pipeline::upload::{upload, UploadOptions};
use xet_client::{RemoteCas, RemoteConfig, RetryPolicy, TokenSource};
use xet_format::{FileHash, LfsOid};

const TEAM_A: &str = "team-a-secret-0123456789";
const TEAM_A_READ: &str = "team-a-reader-0123456789";
const TEAM_B: &str = "team-b-secret-0123456789";
const ADMIN: &str = "admin-secret-0123456789ab";

fn server() -> TestServer {
    start_with(|c| {
        c.secrets = team_secrets(&[
            (TEAM_A, Scope::Write, "a", Some("team-a/*")),
            (TEAM_A_READ, Scope::Read, "a-reader", Some("team-a/*")),
            (TEAM_B, Scope::Write, "b", Some("team-b/*")),
            (ADMIN, Scope::Write, "admin", None),
        ]);
        // No background claim checks: what is found must not depend on them.
        c.maintenance.claims_interval = None;
    })
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::new()
}

/// `PUT` of an object through the LFS basic transfer of `repo`.
fn put(s: &TestServer, secret: &str, repo: &str, data: &[u8]) -> String {
    let oid = common::sha256_hex(data);
    let status = http()
        .put(format!("{}/{repo}/info/lfs/objects/{oid}", s.url()))
        .basic_auth("git", Some(secret))
        .body(data.to_vec())
        .send()
        .unwrap()
        .status();
    assert_eq!(status, 200, "PUT {oid} to {repo}");
    oid
}

/// A CAS token for `repo` (`read` or `write`).
fn cas_token(s: &TestServer, secret: &str, repo: &str, scope: &str) -> String {
    let v: Value = http()
        .get(format!("{}/{repo}/info/lfs/xet-token/{scope}", s.url()))
        .basic_auth("git", Some(secret))
        .send()
        .unwrap()
        .json()
        .unwrap();
    v["accessToken"].as_str().unwrap().to_string()
}

/// The Xet file `oid` stands for, to `bearer`.
fn file_of(s: &TestServer, bearer: &str, oid: &str) -> Option<String> {
    let r = http()
        .get(format!("{}/v1/lfs-files/{oid}", s.url()))
        .bearer_auth(bearer)
        .send()
        .unwrap();
    (r.status() == 200).then(|| {
        r.json::<Value>().unwrap()["file_hash"]
            .as_str()
            .unwrap()
            .into()
    })
}

/// The v1 or v2 reconstruction of `file`, to `bearer`.
fn reconstruction(s: &TestServer, bearer: &str, version: u8, file: &str) -> Value {
    let r = http()
        .get(format!("{}/v{version}/reconstructions/{file}", s.url()))
        .bearer_auth(bearer)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().unwrap()
}

/// A fetch entry of a reconstruction: the xorb, the URL, the byte ranges (inclusive).
type Entry = (String, String, Vec<(u64, u64)>);

/// Every fetch entry of a v1 or v2 reconstruction.
fn fetch_entries(recon: &Value) -> Vec<Entry> {
    let mut out = Vec::new();
    let range = |r: &Value| (r["start"].as_u64().unwrap(), r["end"].as_u64().unwrap());
    if let Some(info) = recon["fetch_info"].as_object() {
        for (xorb, entries) in info {
            for e in entries.as_array().unwrap() {
                let url = e["url"].as_str().unwrap().to_string();
                out.push((xorb.clone(), url, vec![range(&e["url_range"])]));
            }
        }
    }
    if let Some(xorbs) = recon["xorbs"].as_object() {
        for (xorb, entries) in xorbs {
            for e in entries.as_array().unwrap() {
                let url = e["url"].as_str().unwrap().to_string();
                let ranges = e["ranges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| range(&r["bytes"]))
                    .collect();
                out.push((xorb.clone(), url, ranges));
            }
        }
    }
    out
}

fn xorbs_of(recon: &Value) -> Vec<String> {
    recon["terms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["hash"].as_str().unwrap().to_string())
        .collect()
}

/// Whether `haystack` holds any 64-byte window of `secret` taken every 4 KiB.
fn leaks(haystack: &[u8], secret: &[u8]) -> bool {
    secret
        .chunks(4096)
        .filter(|c| c.len() >= 64)
        .any(|c| haystack.windows(64).any(|w| w == &c[..64]))
}

fn status_and_code(r: reqwest::blocking::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let body: Value = r.json().unwrap_or_default();
    (status, body["error"].as_str().unwrap_or("").to_string())
}

#[test]
fn a_fetch_url_serves_the_bytes_of_its_entry_and_no_other_teams_bytes() {
    let s = server();
    // Team B's file: a public part P, then its secret S.
    let public = common::splitmix64(1, 1 << 20);
    let secret = common::splitmix64(2, 1 << 20);
    let b_file: Vec<u8> = [public.clone(), secret.clone()].concat();
    let b_oid = put(&s, TEAM_B, "team-b/models", &b_file);
    // Team A stores P alone: its chunks deduplicate against B's xorb.
    let a_oid = put(&s, TEAM_A, "team-a/models", &public);
    let b_hash = file_of(&s, ADMIN, &b_oid).unwrap();
    let b_xorbs = xorbs_of(&reconstruction(&s, ADMIN, 2, &b_hash));

    for token in [
        cas_token(&s, TEAM_A, "team-a/models", "read"),
        cas_token(&s, TEAM_A, "team-a/models", "write"),
        cas_token(&s, TEAM_A_READ, "team-a/models", "read"),
    ] {
        let a_hash = file_of(&s, &token, &a_oid).expect("A sees its own file");
        assert_eq!(file_of(&s, &token, &b_oid), None, "A cannot see B's oid");
        for version in [1, 2] {
            let recon = reconstruction(&s, &token, version, &a_hash);
            let shared: Vec<String> = xorbs_of(&recon)
                .into_iter()
                .filter(|x| b_xorbs.contains(x))
                .collect();
            assert!(!shared.is_empty(), "A's file deduplicated against B's xorb");
            let entries = fetch_entries(&recon);
            assert!(!entries.is_empty());
            let mut served_of_shared = 0;
            for (xorb, url, ranges) in entries {
                let granted: u64 = ranges.iter().map(|(a, b)| b - a + 1).sum();
                // Without Range: exactly the granted ranges, nothing of S.
                let r = http().get(&url).send().unwrap();
                assert_eq!(r.status(), 206, "{url}");
                let body = r.bytes().unwrap().to_vec();
                if ranges.len() == 1 {
                    assert_eq!(body.len() as u64, granted, "{url}");
                } else {
                    assert!(body.len() as u64 > granted, "multipart framing");
                }
                assert!(!leaks(&body, &secret), "B's secret bytes served to A");
                if shared.contains(&xorb) {
                    served_of_shared += body.len();
                }
                // Each granted range, and any part of one, is served.
                for &(start, end) in &ranges {
                    let r = http()
                        .get(&url)
                        .header("Range", format!("bytes={start}-{end}"))
                        .send()
                        .unwrap();
                    assert_eq!(r.status(), 206);
                    assert_eq!(r.bytes().unwrap().len() as u64, end - start + 1);
                    let r = http()
                        .get(&url)
                        .header(
                            "Range",
                            format!("bytes={}-{end}", start + (end - start) / 2),
                        )
                        .send()
                        .unwrap();
                    assert_eq!(r.status(), 206);
                }
                // Everything else is refused: the rest of the xorb, its footer (the chunk
                // hashes of B's data), a range reaching one byte past the grant.
                let (start, end) = ranges[ranges.len() - 1];
                for range in [
                    "bytes=0-".to_string(),
                    "bytes=-200".to_string(),
                    format!("bytes={start}-{}", end + 1),
                    format!("bytes={}-{}", end + 1, end + 100),
                    format!("bytes={start}-{end},{}-{}", end + 1, end + 1),
                ] {
                    let r = http().get(&url).header("Range", &range).send().unwrap();
                    assert_eq!(
                        status_and_code(r),
                        (403, "range_not_granted".to_string()),
                        "{range} on {url}"
                    );
                }
            }
            assert!(served_of_shared > 0);
            assert!(
                served_of_shared < public.len() + (64 << 10),
                "A got {served_of_shared} bytes of the shared xorb for a {} byte file",
                public.len()
            );
        }
    }
}

#[test]
fn another_teams_claim_never_hides_this_teams_upload() {
    let s = server();
    // Larger than what the server checks before answering the shard upload: both claims stay
    // claims (and the background check is off).
    let real = common::splitmix64(3, 9 << 20);
    let garbage = common::splitmix64(4, 9 << 20);
    let oid = LfsOid::from_hex(&common::sha256_hex(&real)).unwrap();
    let remote = |secret: &str, repo: &str| {
        let token = cas_token(&s, secret, repo, "write");
        let mut c = RemoteConfig::new(s.url(), TokenSource::fixed(Some(token.into())));
        c.retry = RetryPolicy::quick(2);
        RemoteCas::new(c).unwrap()
    };
    let declared = |len: usize| UploadOptions {
        expected_sha256: Some(oid),
        expected_size: Some(len as u64),
        sha256_declared_by_namer: true,
        ..UploadOptions::default()
    };
    // Team A claims B's oid for garbage before B pushes.
    let a = remote(TEAM_A, "team-a/models");
    let lie = upload(&a, &garbage[..], &declared(garbage.len())).unwrap();
    assert!(!lie.sha256_computed, "sent as a claim");
    // Team B pushes the real content the way the agent does with this server: the oid as a
    // claim, unhashed.
    let b = remote(TEAM_B, "team-b/models");
    let real_up = upload(&b, &real[..], &declared(real.len())).unwrap();
    assert!(!real_up.sha256_computed);
    assert_ne!(real_up.file_hash, lie.file_hash);

    // With no claim checked yet, B's download finds B's file, by batch and by CAS lookup.
    let batch: Value = http()
        .post(format!("{}/team-b/models/info/lfs/objects/batch", s.url()))
        .basic_auth("git", Some(TEAM_B))
        .header("Accept", "application/vnd.git-lfs+json")
        .header("Content-Type", "application/vnd.git-lfs+json")
        .body(
            json!({
                "operation": "download",
                "transfers": ["xet-download"],
                "objects": [{"oid": oid.to_hex(), "size": real.len()}],
            })
            .to_string(),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let action = &batch["objects"][0]["actions"]["download"];
    assert!(action.is_object(), "{batch}");
    assert_eq!(
        action["header"]["X-Xet-Hash"].as_str(),
        Some(real_up.file_hash.to_hex().as_str()),
        "{batch}"
    );
    let b_token = cas_token(&s, TEAM_B, "team-b/models", "read");
    assert_eq!(
        file_of(&s, &b_token, &oid.to_hex()),
        Some(real_up.file_hash.to_hex())
    );
    // The basic transfer too.
    let r = http()
        .get(format!(
            "{}/team-b/models/info/lfs/objects/{}",
            s.url(),
            oid.to_hex()
        ))
        .basic_auth("git", Some(TEAM_B))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().unwrap().to_vec() == real);
    assert_eq!(
        s.health("unchecked_sha256_claims"),
        2,
        "nothing was checked"
    );
    // A's lookup answers A's own claim (git-lfs would refuse the bytes), never B's file.
    let a_token = cas_token(&s, TEAM_A, "team-a/models", "read");
    assert_eq!(
        file_of(&s, &a_token, &oid.to_hex()),
        Some(lie.file_hash.to_hex())
    );
    let _: FileHash = real_up.file_hash;
}

#[needs(hf_xet)]
#[test]
fn the_reference_client_downloads_through_range_bound_urls() {
    let python = common::reference_python();
    let s = server();
    let dir = tempfile::tempdir().unwrap();
    // A file whose plan names ranges of xorbs shared with another team's file, and a file of
    // several xorbs: single- and multi-range entries.
    let public = common::splitmix64(5, 1 << 20);
    let secret = common::splitmix64(6, 1 << 20);
    put(
        &s,
        TEAM_B,
        "team-b/models",
        &[public.clone(), secret].concat(),
    );
    let a_oid = put(&s, TEAM_A, "team-a/models", &public);
    let pieces: Vec<Vec<u8>> = (0..4)
        .map(|i| common::splitmix64(10 + i, 1 << 20))
        .collect();
    for p in &pieces {
        put(&s, TEAM_A, "team-a/models", p);
    }
    // Pieces 0 and 2 of xorbs stored apart, in one file: its plan has ranges of several xorbs.
    let mixed: Vec<u8> = [pieces[0].clone(), pieces[2].clone(), pieces[0].clone()].concat();
    let mixed_oid = put(&s, TEAM_A, "team-a/models", &mixed);
    let token = cas_token(&s, TEAM_A_READ, "team-a/models", "read");
    let files = [(a_oid, public), (mixed_oid, mixed)];
    for (i, env) in [
        Vec::new(),
        vec![("HF_XET_CLIENT_ENABLE_MULTIRANGE_FETCHING", "true")],
    ]
    .into_iter()
    .enumerate()
    {
        let peer = common::hfxet::Peer {
            python: python.clone(),
            env,
        };
        let spec: Vec<(std::path::PathBuf, String, u64)> = files
            .iter()
            .enumerate()
            .map(|(k, (oid, data))| {
                (
                    dir.path().join(format!("out-{i}-{k}")),
                    file_of(&s, &token, oid).unwrap(),
                    data.len() as u64,
                )
            })
            .collect();
        peer.download_as(
            s.url(),
            &token,
            &dir.path().join(format!("cache-{i}")),
            &spec,
        );
        for ((path, _, _), (_, data)) in spec.iter().zip(&files) {
            assert!(std::fs::read(path).unwrap() == *data, "{}", path.display());
        }
    }
}

#[test]
fn a_dedup_answer_tells_chunk_existence_and_never_lets_a_team_read_anothers_bytes() {
    use xet_format::chunking::chunk_boundaries;
    use xet_format::hash::{file_hash, verification_hash};
    use xet_format::shard::{FileInfo, ParsedShard, Shard, Term};
    use xet_format::{ChunkHash, ChunkRef};

    let s = server();
    let public = common::splitmix64(7, 1 << 20);
    let secret = common::splitmix64(8, 1 << 20);
    let b_data: Vec<u8> = [public.clone(), secret.clone()].concat();
    put(&s, TEAM_B, "team-b/models", &b_data);
    // B's chunks as the server stored them; which of them hold S's bytes.
    let ends = chunk_boundaries(&b_data);
    let mut raw: Vec<(ChunkHash, u64, bool)> = Vec::new();
    let mut start = 0;
    for &end in &ends {
        let c = &b_data[start..end];
        raw.push((ChunkHash::of(c), c.len() as u64, end > public.len()));
        start = end;
    }

    // A has P: it asks about its first chunk (the same as B's) and gets B's xorb, keyed.
    let a_write = cas_token(&s, TEAM_A, "team-a/models", "write");
    let r = http()
        .get(format!(
            "{}/v1/chunks/default-merkledb/{}",
            s.url(),
            raw[0].0.to_hex()
        ))
        .bearer_auth(&a_write)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer = ParsedShard::parse(&r.bytes().unwrap()).unwrap().shard;
    assert!(
        answer.is_keyed(),
        "dedup answers carry keyed chunk hashes only"
    );
    let block = answer.xorbs[0].clone();
    assert_eq!(
        block.chunks.len(),
        raw.len(),
        "one xorb holds all of B's file"
    );
    // A can match the chunks it has (it keys its own raw hashes)...
    assert!(answer.find_chunk(&raw[0].0).is_some());
    // ...and learns no raw hash of B's secret chunks.
    let listed: Vec<ChunkHash> = block.chunks.iter().map(|c| c.hash).collect();
    for (hash, _, in_secret) in &raw {
        if *in_secret {
            assert!(
                !listed.contains(hash),
                "a raw hash of B's secret was listed"
            );
        }
    }

    // A shard that claims B's secret chunks with what the answer gave fails validation, so
    // nothing is registered for A to read.
    let first_secret = raw.iter().position(|c| c.2).unwrap() as u32;
    let n = raw.len() as u32;
    let forge = |hashes: &[ChunkHash]| {
        let refs: Vec<ChunkRef> = hashes
            .iter()
            .zip(&raw[first_secret as usize..])
            .map(|(h, c)| ChunkRef::new(*h, c.1))
            .collect();
        let size: u64 = refs.iter().map(|c| c.len).sum();
        let mut file = FileInfo::new(
            file_hash(&refs),
            vec![Term::new(block.hash, size as u32, first_secret, n)],
        );
        file.verification = Some(vec![verification_hash(hashes)]);
        let mut shard = Shard::new();
        shard.files.push(file.clone());
        (shard.to_upload_bytes().unwrap(), file.hash)
    };
    let (forged, forged_hash) = forge(&listed[first_secret as usize..]);
    let r = http()
        .post(format!("{}/v1/shards", s.url()))
        .bearer_auth(&a_write)
        .body(forged)
        .send()
        .unwrap();
    let (status, code) = status_and_code(r);
    assert_eq!(
        (status, code.as_str()),
        (400, "verification_mismatch"),
        "a shard built from keyed hashes"
    );
    let r = http()
        .get(format!("{}/v2/reconstructions/{forged_hash}", s.url()))
        .bearer_auth(&a_write)
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    // The same shard with the raw hashes (what only S's bytes give) is accepted: the check
    // that stopped A is knowledge of the bytes.
    let raw_hashes: Vec<ChunkHash> = raw[first_secret as usize..].iter().map(|c| c.0).collect();
    let (honest, honest_hash) = forge(&raw_hashes);
    let b_write = cas_token(&s, TEAM_B, "team-b/models", "write");
    let r = http()
        .post(format!("{}/v1/shards", s.url()))
        .bearer_auth(&b_write)
        .body(honest)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let _: FileHash = honest_hash;
}

/// The batch reconstruction (`GET /v1/reconstructions?file_id=…`): the files the caller may read,
/// each entry's URL serving that entry's bytes; ids are checked.
#[test]
fn a_batch_reconstruction_answers_only_for_the_callers_files() {
    let s = server();
    let a1 = common::splitmix64(11, 30_000);
    let a2 = common::splitmix64(12, 50_000);
    let b1 = common::splitmix64(13, 40_000);
    let oid_a1 = put(&s, TEAM_A, "team-a/models", &a1);
    let oid_a2 = put(&s, TEAM_A, "team-a/models", &a2);
    let oid_b1 = put(&s, TEAM_B, "team-b/models", &b1);
    let token_a = cas_token(&s, TEAM_A_READ, "team-a/models", "read");
    let token_b = cas_token(&s, TEAM_B, "team-b/models", "read");
    let admin = cas_token(&s, ADMIN, "team-b/models", "read");
    let fa1 = file_of(&s, &token_a, &oid_a1).unwrap();
    let fa2 = file_of(&s, &token_a, &oid_a2).unwrap();
    let fb1 = file_of(&s, &admin, &oid_b1).unwrap();
    let unknown = FileHash::from_bytes([7; 32]).to_hex();
    let ask = |bearer: &str, ids: &[&str]| {
        let query: Vec<String> = ids.iter().map(|i| format!("file_id={i}")).collect();
        http()
            .get(format!(
                "{}/v1/reconstructions?{}",
                s.url(),
                query.join("&")
            ))
            .bearer_auth(bearer)
            .send()
            .unwrap()
    };
    let all = [fa1.as_str(), fa2.as_str(), fb1.as_str(), unknown.as_str()];
    let files = |r: reqwest::blocking::Response| -> Value {
        assert_eq!(r.status(), 200);
        r.json().unwrap()
    };
    // Team A gets its two files; team B its one; nobody an unknown one.
    let answer = files(ask(&token_a, &all));
    let mut got: Vec<&String> = answer["files"].as_object().unwrap().keys().collect();
    got.sort();
    let mut want = vec![&fa1, &fa2];
    want.sort();
    assert_eq!(got, want);
    let answer_b = files(ask(&token_b, &all));
    let got_b: Vec<&String> = answer_b["files"].as_object().unwrap().keys().collect();
    assert_eq!(got_b, vec![&fb1]);
    // Every entry's URL serves its range, whose bytes are none of team B's.
    let entries = fetch_entries(&answer);
    assert!(!entries.is_empty());
    for (xorb, url, ranges) in &entries {
        assert!(
            xorbs_of(&json!({"terms": answer["files"][&fa1]})).contains(xorb)
                || xorbs_of(&json!({"terms": answer["files"][&fa2]})).contains(xorb)
        );
        let (start, end) = ranges[0];
        let r = http()
            .get(url)
            .header("Range", format!("bytes={start}-{end}"))
            .send()
            .unwrap();
        assert_eq!(r.status(), 206, "{url}");
        let bytes = r.bytes().unwrap();
        assert_eq!(bytes.len() as u64, end - start + 1);
        assert!(!leaks(&bytes, &b1));
    }
    // The client side: plans of both files, with which they are rebuilt.
    let mut config = RemoteConfig::new(s.url(), TokenSource::fixed(Some(token_a.clone().into())));
    config.retry = RetryPolicy::quick(2);
    let cas = RemoteCas::new(config).unwrap();
    let ids = [
        FileHash::from_hex(&fa1).unwrap(),
        FileHash::from_hex(&fa2).unwrap(),
    ];
    let plans = xet_protocol::Endpoint::reconstructions(&cas, &ids)
        .unwrap()
        .unwrap();
    for (id, data) in ids.iter().zip([&a1, &a2]) {
        let mut out = Vec::new();
        let mut sink = |b: &[u8]| {
            out.extend_from_slice(b);
            Ok(())
        };
        xet_client::pipeline::download::write_file(&cas, id, &plans[id], &mut sink).unwrap();
        assert!(out == *data);
    }
    // No id, more than 64, or a bad one: 400 naming the query.
    let (status, code) = status_and_code(ask(&token_a, &[]));
    assert_eq!((status, code.as_str()), (400, "invalid_query"));
    let many: Vec<String> = (0..65u8)
        .map(|i| FileHash::from_bytes([i; 32]).to_hex())
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let (status, code) = status_and_code(ask(&token_a, &many));
    assert_eq!((status, code.as_str()), (400, "invalid_query"));
    let (status, code) = status_and_code(ask(&token_a, &["nothex"]));
    assert_eq!((status, code.as_str()), (400, "invalid_hash"));
    // Without a token: 401.
    let r = http()
        .get(format!("{}/v1/reconstructions?file_id={fa1}", s.url()))
        .send()
        .unwrap();
    assert_eq!(r.status(), 401);
}
