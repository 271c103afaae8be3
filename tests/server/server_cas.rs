//! The CAS HTTP API over plain HTTP: every refusal of docs/cas-api.md §8–§9 (status, JSON code,
//! headers), and the reference fixtures uploaded, reconstructed (v1 and v2, whole and ranged),
//! downloaded through the presigned URLs (single ranges and multi-range) and rebuilt byte for
//! byte; global dedup answers, idempotent and concurrent uploads, persistence across a restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::time::Duration;

use common::server::{TestServer, READ_TOKEN, WRITE_TOKEN};
use git_xet::server::auth::{now_unix, Authority, Scope};
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;
use xet_format::hash::keyed_chunk_hash;
use xet_format::shard::Shard;
use xet_format::xorb::{CompressionPolicy, ParsedXorb, Push, XorbBuilder};
use xet_format::{ChunkHash, FileHash, XorbHash};
use xet_protocol::util::range::GrantedRanges;

const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn http() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Upload bodies (chunk regions) and stored forms of every fixture xorb.
fn fixture_xorbs() -> Vec<(XorbHash, Vec<u8>, Vec<u8>)> {
    let m = common::manifest();
    let mut out = Vec::new();
    for s in &m.sessions {
        for rel in &s.xorbs {
            let stored = common::read(rel);
            let parsed = ParsedXorb::parse(&stored).unwrap();
            out.push((
                parsed.hash(),
                parsed.chunk_region().to_vec(),
                stored.clone(),
            ));
        }
    }
    out
}

/// The upload form of every fixture session's shard, in session order.
fn upload_shards() -> Vec<Vec<u8>> {
    common::manifest()
        .sessions
        .iter()
        .map(|s| {
            Shard::from_bytes(&common::read(&s.shards[0]))
                .unwrap()
                .to_upload_bytes()
                .unwrap()
        })
        .collect()
}

fn auth(rb: RequestBuilder, token: &str) -> RequestBuilder {
    rb.header("Authorization", format!("Bearer {token}"))
}

fn post_xorb(s: &TestServer, hash: &str, body: Vec<u8>, token: &str) -> Response {
    auth(
        http().post(format!("{}/v1/xorbs/default/{hash}", s.url())),
        token,
    )
    .body(body)
    .send()
    .unwrap()
}

fn post_shard(s: &TestServer, version: u8, body: Vec<u8>, token: &str) -> Response {
    auth(http().post(format!("{}/v{version}/shards", s.url())), token)
        .body(body)
        .send()
        .unwrap()
}

/// Asserts a JSON error with this status and code; returns its message.
fn refused(r: Response, status: u16, code: &str) -> String {
    assert_eq!(r.status().as_u16(), status, "{:?}", r.text());
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"),
        "JSON error body"
    );
    if status == 401 {
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
    }
    let body: Value = r.json().unwrap();
    assert_eq!(body["error"], code, "{body}");
    assert!(body["request_id"].is_string(), "{body}");
    let message = body["message"].as_str().unwrap().to_string();
    assert!(!message.is_empty());
    message
}

/// The NDJSON frames of a v2 shard upload.
fn frames(r: Response) -> Vec<Value> {
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().unwrap();
    assert!(text.ends_with('\n'), "{text}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A server holding every fixture xorb and shard (shards alternate between v1 and v2).
fn loaded() -> TestServer {
    let s = common::server::start();
    for (hash, body, _) in fixture_xorbs() {
        let r = post_xorb(&s, &hash.to_hex(), body, WRITE_TOKEN);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["cache-control"], "no-store");
        assert_eq!(
            r.json::<Value>().unwrap(),
            serde_json::json!({"was_inserted": true})
        );
    }
    for (i, shard) in upload_shards().into_iter().enumerate() {
        if i % 2 == 0 {
            let r = post_shard(&s, 1, shard, WRITE_TOKEN);
            assert_eq!(r.status(), 200);
            assert_eq!(r.json::<Value>().unwrap(), serde_json::json!({"result": 1}));
        } else {
            let f = frames(post_shard(&s, 2, shard, WRITE_TOKEN));
            assert_eq!(f.first().unwrap()["type"], "validating");
            assert_eq!(f.last().unwrap(), &serde_json::json!({"type": "result"}));
        }
    }
    s
}

fn server_key(s: &TestServer) -> Authority {
    let key: [u8; 32] = std::fs::read(s.store_dir().join("server.key"))
        .unwrap()
        .try_into()
        .unwrap();
    Authority::new(vec![], key)
}

fn reconstruction(s: &TestServer, version: u8, file: &str, range: Option<&str>) -> Response {
    let mut rb = auth(
        http().get(format!("{}/v{version}/reconstructions/{file}", s.url())),
        READ_TOKEN,
    );
    if let Some(r) = range {
        rb = rb.header("Range", r);
    }
    rb.send().unwrap()
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort();
    k
}

/// Splits a `multipart/byteranges` body into (Content-Range start, bytes) parts.
fn multipart_parts(content_type: &str, body: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let boundary = content_type.split("boundary=").nth(1).unwrap().trim();
    let delimiter = format!("--{boundary}");
    let text_positions: Vec<usize> = body
        .windows(delimiter.len())
        .enumerate()
        .filter(|(_, w)| *w == delimiter.as_bytes())
        .map(|(i, _)| i)
        .collect();
    let mut parts = Vec::new();
    for w in text_positions.windows(2) {
        let part = &body[w[0] + delimiter.len() + 2..w[1] - 2];
        let split = part.windows(4).position(|x| x == b"\r\n\r\n").unwrap();
        let head = std::str::from_utf8(&part[..split]).unwrap();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: bytes "))
            .unwrap();
        let start: u64 = range.split('-').next().unwrap().parse().unwrap();
        parts.push((start, part[split + 4..].to_vec()));
    }
    assert!(body.ends_with(format!("{delimiter}--\r\n").as_bytes()));
    parts
}

/// Decodes a fetched run of whole chunks into `out[(xorb, chunk index)]`.
fn decode_into(out: &mut HashMap<(String, u32), Vec<u8>>, xorb: &str, first: u32, bytes: &[u8]) {
    let part = ParsedXorb::parse(bytes).unwrap();
    for i in 0..part.chunks().len() {
        out.insert(
            (xorb.to_string(), first + i as u32),
            part.extract(i..i + 1).unwrap(),
        );
    }
}

/// Multi-range fetches made by [`rebuild`], to check that the fixtures exercise them.
static MULTIRANGE_FETCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The bytes a reconstruction (v1 or v2 JSON) describes, fetched through its URLs: one GET per
/// range, or (v2, `multirange`) one multi-range GET per entry.
fn rebuild(json: &Value, multirange: bool) -> Vec<u8> {
    use std::sync::atomic::Ordering;
    let client = http();
    let mut chunks = HashMap::new();
    let fetch = |url: &str, range: String| {
        let r = client.get(url).header("Range", range).send().unwrap();
        assert_eq!(r.status(), 206);
        r
    };
    if let Some(info) = json.get("fetch_info") {
        for (xorb, entries) in info.as_object().unwrap() {
            for e in entries.as_array().unwrap() {
                assert_eq!(keys(e), ["range", "url", "url_range"]);
                let (s, t) = (
                    e["url_range"]["start"].as_u64().unwrap(),
                    e["url_range"]["end"].as_u64().unwrap(),
                );
                let r = fetch(e["url"].as_str().unwrap(), format!("bytes={s}-{t}"));
                assert!(r.headers()["content-range"]
                    .to_str()
                    .unwrap()
                    .starts_with(&format!("bytes {s}-{t}/")));
                let bytes = r.bytes().unwrap();
                assert_eq!(bytes.len() as u64, t - s + 1);
                decode_into(
                    &mut chunks,
                    xorb,
                    e["range"]["start"].as_u64().unwrap() as u32,
                    &bytes,
                );
            }
        }
    } else {
        for (xorb, entries) in json["xorbs"].as_object().unwrap() {
            for e in entries.as_array().unwrap() {
                assert_eq!(keys(e), ["ranges", "url"]);
                let ranges = e["ranges"].as_array().unwrap();
                let byte_range = |r: &Value| {
                    (
                        r["bytes"]["start"].as_u64().unwrap(),
                        r["bytes"]["end"].as_u64().unwrap(),
                    )
                };
                let first_chunk = |r: &Value| r["chunks"]["start"].as_u64().unwrap() as u32;
                if multirange && ranges.len() > 1 {
                    let header = ranges
                        .iter()
                        .map(|r| {
                            let (s, t) = byte_range(r);
                            format!("{s}-{t}")
                        })
                        .collect::<Vec<_>>()
                        .join(",");
                    let resp = fetch(e["url"].as_str().unwrap(), format!("bytes={header}"));
                    MULTIRANGE_FETCHES.fetch_add(1, Ordering::Relaxed);
                    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
                    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
                    let parts = multipart_parts(&ct, &resp.bytes().unwrap());
                    assert_eq!(parts.len(), ranges.len());
                    for (r, (start, bytes)) in ranges.iter().zip(parts) {
                        assert_eq!(start, byte_range(r).0);
                        decode_into(&mut chunks, xorb, first_chunk(r), &bytes);
                    }
                } else {
                    for r in ranges {
                        assert_eq!(keys(r), ["bytes", "chunks"]);
                        let (s, t) = byte_range(r);
                        let bytes = fetch(e["url"].as_str().unwrap(), format!("bytes={s}-{t}"))
                            .bytes()
                            .unwrap();
                        decode_into(&mut chunks, xorb, first_chunk(r), &bytes);
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for t in json["terms"].as_array().unwrap() {
        assert_eq!(keys(t), ["hash", "range", "unpacked_length"]);
        let before = out.len();
        let xorb = t["hash"].as_str().unwrap();
        for c in t["range"]["start"].as_u64().unwrap()..t["range"]["end"].as_u64().unwrap() {
            out.extend_from_slice(&chunks[&(xorb.to_string(), c as u32)]);
        }
        assert_eq!(
            (out.len() - before) as u64,
            t["unpacked_length"].as_u64().unwrap()
        );
    }
    out.drain(..json["offset_into_first_range"].as_u64().unwrap() as usize);
    out
}

fn hello_xorb_hash() -> String {
    fixture_xorbs()[0].0.to_hex()
}

#[test]
fn missing_invalid_and_expired_tokens_are_401_and_read_tokens_cannot_write() {
    let s = common::server::start();
    let x = hello_xorb_hash();
    let u = s.url();
    let key = server_key(&s);
    let expired = key.issue(Scope::Write, "", now_unix() - 3600);
    let calls: Vec<(&str, String)> = vec![
        ("GET", format!("{u}/v1/reconstructions/{ZERO}")),
        ("GET", format!("{u}/v2/reconstructions/{ZERO}")),
        ("GET", format!("{u}/reconstructions/{ZERO}")),
        ("GET", format!("{u}/v1/chunks/default/{x}")),
        ("GET", format!("{u}/chunks/default-merkledb/{x}")),
        ("POST", format!("{u}/v1/xorbs/default/{x}")),
        ("POST", format!("{u}/xorbs/default/{x}")),
        ("POST", format!("{u}/v1/xorb-grants/default/{x}")),
        ("POST", format!("{u}/v1/shards")),
        ("POST", format!("{u}/shards")),
        ("POST", format!("{u}/v2/shards")),
        ("POST", format!("{u}/v1/telemetry")),
    ];
    let client = http();
    for (method, url) in &calls {
        let rb = |token: Option<&str>| {
            let rb = match *method {
                "GET" => client.get(url),
                _ => client.post(url).body("{}"),
            };
            match token {
                Some(t) => rb.header("Authorization", t),
                None => rb,
            }
        };
        refused(rb(None).send().unwrap(), 401, "unauthorized");
        refused(
            rb(Some("Bearer not-a-known-token-at-all")).send().unwrap(),
            401,
            "unauthorized",
        );
        refused(rb(Some("Digest abc")).send().unwrap(), 401, "unauthorized");
        let m = refused(
            rb(Some(&format!("Bearer {expired}"))).send().unwrap(),
            401,
            "token_expired",
        );
        assert!(m.contains("expired"), "{m}");
        if *method == "POST" && !url.ends_with("/telemetry") {
            let m = refused(
                rb(Some(&format!("Bearer {READ_TOKEN}"))).send().unwrap(),
                403,
                "forbidden",
            );
            assert!(m.contains("write token"), "{url}: {m}");
        }
    }
    // A fresh CAS token issued by this server is accepted.
    let fresh = key.issue(Scope::Read, "team/repo", now_unix() + 600);
    let r = auth(client.get(format!("{u}/v1/reconstructions/{ZERO}")), &fresh)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[test]
fn malformed_hashes_and_unknown_prefixes_are_400() {
    let s = common::server::start();
    let u = s.url();
    let x = hello_xorb_hash();
    let bad_hashes = [
        "abc".to_string(),
        "g".repeat(64),
        format!("{x}0"),
        "..%2F..%2Fetc%2Fpasswd".to_string(),
        format!("{}%00", &x[..63]),
    ];
    let client = http();
    for bad in &bad_hashes {
        for url in [
            format!("{u}/v1/reconstructions/{bad}"),
            format!("{u}/v2/reconstructions/{bad}"),
            format!("{u}/v1/chunks/default/{bad}"),
        ] {
            let m = refused(
                auth(client.get(&url), READ_TOKEN).send().unwrap(),
                400,
                "invalid_hash",
            );
            assert!(m.contains("is not a hash"), "{m}");
        }
        refused(
            post_xorb(&s, bad, vec![1, 2, 3], WRITE_TOKEN),
            400,
            "invalid_hash",
        );
        refused(
            auth(
                client.post(format!("{u}/v1/xorb-grants/default/{bad}")),
                WRITE_TOKEN,
            )
            .send()
            .unwrap(),
            400,
            "invalid_hash",
        );
        refused(
            client
                .get(format!("{u}/v1/xorb-data/{bad}?e=1&s=x"))
                .send()
                .unwrap(),
            400,
            "invalid_hash",
        );
    }
    // Uppercase hex is accepted (and means the same hash).
    let r = auth(
        client.get(format!("{u}/v1/reconstructions/{}", ZERO.to_uppercase())),
        READ_TOKEN,
    )
    .send()
    .unwrap();
    assert_eq!(r.status(), 200);

    for (url, token) in [
        (format!("{u}/v1/chunks/other/{x}"), READ_TOKEN),
        (format!("{u}/chunks/merkledb/{x}"), READ_TOKEN),
    ] {
        let m = refused(
            auth(client.get(&url), token).send().unwrap(),
            400,
            "unknown_prefix",
        );
        assert!(m.contains("default-merkledb"), "{m}");
    }
    for url in [
        format!("{u}/v1/xorbs/default-merkledb/{x}"),
        format!("{u}/xorbs/other/{x}"),
        format!("{u}/v1/xorb-grants/foo/{x}"),
    ] {
        refused(
            auth(client.post(&url), WRITE_TOKEN)
                .body("x")
                .send()
                .unwrap(),
            400,
            "unknown_prefix",
        );
    }
    // Other methods: a JSON 405.
    refused(
        auth(
            client.delete(format!("{u}/v1/xorbs/default/{x}")),
            WRITE_TOKEN,
        )
        .send()
        .unwrap(),
        405,
        "method_not_allowed",
    );
    refused(
        client.get(format!("{u}/v1/shards")).send().unwrap(),
        405,
        "method_not_allowed",
    );
    // Optional endpoints this server does not offer: 404, so clients fall back.
    refused(
        auth(
            client.get(format!("{u}/v2/file-chunk-hashes/{x}")),
            READ_TOKEN,
        )
        .send()
        .unwrap(),
        404,
        "not_found",
    );
}

/// Sends only the request head with a large `Content-Length` and reads the answer: it must
/// come without the body ever being sent.
fn head_only(s: &TestServer, path: &str, token: &str, len: u64) -> String {
    let mut sock = std::net::TcpStream::connect(s.server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        sock,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Length: {len}\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock
            .read(&mut buf)
            .expect("an answer before the body is sent");
        assert!(n > 0, "connection closed without an answer");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).to_string()
}

#[test]
fn oversized_bodies_are_413_before_the_body_is_read() {
    let s = common::server::start();
    let x = hello_xorb_hash();
    let limit = git_xet::server::cas::upload::XORB_BODY_LIMIT;
    for (path, token, len) in [
        (format!("/v1/xorbs/default/{x}"), WRITE_TOKEN, limit + 1),
        (format!("/xorbs/default/{x}"), WRITE_TOKEN, 1 << 40),
        ("/v1/shards".to_string(), WRITE_TOKEN, 64 * 1024 * 1024 + 1),
        ("/v2/shards".to_string(), WRITE_TOKEN, 64 * 1024 * 1024 + 1),
        ("/v1/telemetry".to_string(), READ_TOKEN, 1024 * 1024 + 1),
    ] {
        let answer = head_only(&s, &path, token, len);
        assert!(answer.starts_with("HTTP/1.1 413"), "{path}: {answer}");
    }
    // Just under the xorb limit the server waits for the body instead (no early answer).
    let mut sock = std::net::TcpStream::connect(s.server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    write!(
        sock,
        "POST /v1/xorbs/default/{x} HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {WRITE_TOKEN}\r\nContent-Length: {limit}\r\n\r\n"
    )
    .unwrap();
    let mut buf = [0u8; 64];
    assert!(sock.read(&mut buf).is_err(), "no answer before the body");
}

#[test]
fn bad_xorb_bodies_are_400_and_name_the_xorb() {
    let s = common::server::start();
    let (hash, body, stored) = fixture_xorbs().into_iter().next().unwrap();
    let h = hash.to_hex();
    let m = refused(
        post_xorb(&s, &h, Vec::new(), WRITE_TOKEN),
        400,
        "empty_body",
    );
    assert!(m.contains(&h), "{m}");

    // The body of another xorb under this hash: both hashes are named.
    let (other, other_body, _) = fixture_xorbs().into_iter().nth(1).unwrap();
    let m = refused(
        post_xorb(&s, &h, other_body, WRITE_TOKEN),
        400,
        "xorb_hash_mismatch",
    );
    assert!(m.contains(&h) && m.contains(&other.to_hex()), "{m}");

    // A corrupted chunk header, a corrupted payload, a truncated body, trailing garbage.
    let mut bad = body.clone();
    bad[0] = 7; // chunk header version
    refused(post_xorb(&s, &h, bad, WRITE_TOKEN), 400, "invalid_xorb");
    let mut bad = body.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    let r = post_xorb(&s, &h, bad, WRITE_TOKEN);
    assert_eq!(r.status(), 400);
    refused(
        post_xorb(&s, &h, body[..body.len() - 1].to_vec(), WRITE_TOKEN),
        400,
        "invalid_xorb",
    );
    let mut bad = body.clone();
    bad.extend_from_slice(b"trailing");
    refused(post_xorb(&s, &h, bad, WRITE_TOKEN), 400, "invalid_xorb");

    // Nothing was stored by the refusals; the real body with a trailing footer is accepted.
    let health: Value = http()
        .get(format!("{}/health", s.url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["xorbs"], 0);
    let r = post_xorb(&s, &h, stored[..stored.len() - 4].to_vec(), WRITE_TOKEN);
    assert_eq!(r.json::<Value>().unwrap()["was_inserted"], true);
}

/// A grant of every byte of an object of `len` bytes (what no reconstruction hands out, but a
/// test of the byte server may sign with the server's key).
fn whole_of(len: usize) -> GrantedRanges {
    GrantedRanges::new([0..=len as u64 - 1]).unwrap()
}

#[test]
fn a_xorb_larger_than_axum_defaults_uploads_and_downloads_whole() {
    let s = common::server::start();
    let mut b = XorbBuilder::new(CompressionPolicy::None);
    let data = common::splitmix64(77, 40 * 131_072);
    for c in data.chunks(131_072) {
        assert!(matches!(b.add_chunk(c).unwrap(), Push::Added(_)));
    }
    let built = b.finish().unwrap();
    let body = built.upload_body().to_vec();
    assert!(body.len() > 5 << 20);
    let h = built.hash().to_hex();
    let r = post_xorb(&s, &h, body.clone(), WRITE_TOKEN);
    assert_eq!(r.json::<Value>().unwrap()["was_inserted"], true);
    let url = format!(
        "{}/v1/xorb-data/{h}?{}",
        s.url(),
        server_key(&s).presign(
            &built.hash(),
            now_unix() + 60,
            &whole_of(built.stored_form().len())
        )
    );
    // No Range: the granted range, here the whole object.
    let r = http().get(&url).send().unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.headers()["accept-ranges"], "bytes");
    assert_eq!(r.headers()["etag"], format!("\"{h}\"").as_str());
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    let cc = r.headers()["cache-control"].to_str().unwrap().to_string();
    assert!(
        cc.starts_with("public, max-age=") && cc.ends_with(", immutable"),
        "{cc}"
    );
    let max_age: u64 = cc["public, max-age=".len()..cc.len() - ", immutable".len()]
        .parse()
        .unwrap();
    assert!((55..=60).contains(&max_age), "{cc}");
    let whole = r.bytes().unwrap();
    assert_eq!(whole.to_vec(), built.stored_form());
    // Suffix and open-ended ranges.
    let r = http().get(&url).header("Range", "bytes=-4").send().unwrap();
    assert_eq!(r.status(), 206);
    let n = whole.len();
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes {}-{}/{n}", n - 4, n - 1).as_str()
    );
    assert_eq!(r.bytes().unwrap(), whole[n - 4..]);
    // Several ranges: one multipart/byteranges answer, parts in request order.
    let r = http()
        .get(&url)
        .header("Range", "bytes=0-9, 100-199,-4")
        .send()
        .unwrap();
    assert_eq!(r.status(), 206);
    assert!(r.headers().get("content-range").is_none());
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    let parts = multipart_parts(&ct, &r.bytes().unwrap());
    assert_eq!(
        parts,
        vec![
            (0, whole[..10].to_vec()),
            (100, whole[100..200].to_vec()),
            ((n - 4) as u64, whole[n - 4..].to_vec())
        ]
    );
    let r = http()
        .get(&url)
        .header("Range", format!("bytes={}-", n - 10))
        .send()
        .unwrap();
    assert_eq!(r.bytes().unwrap(), whole[n - 10..]);
}

#[test]
fn shards_naming_unknown_xorbs_are_refused_v1_400_v2_error_frame() {
    let s = common::server::start_with(|c| c.shard_heartbeat = Duration::from_millis(50));
    let shard = upload_shards().into_iter().next().unwrap();
    let m = refused(
        post_shard(&s, 1, shard.clone(), WRITE_TOKEN),
        400,
        "unknown_xorb",
    );
    assert!(m.contains("upload the xorb first"), "{m}");
    let f = frames(post_shard(&s, 2, shard.clone(), WRITE_TOKEN));
    let end = f.last().unwrap();
    assert_eq!(end["type"], "error");
    assert_eq!(end["retryable"], false);
    assert!(
        end["message"].as_str().unwrap().contains("unknown xorb"),
        "{end}"
    );
    // Not a shard at all: an ordinary 400 before any stream, for both versions.
    for v in [1, 2] {
        refused(
            post_shard(
                &s,
                v,
                b"definitely not a shard, but long enough to hold a header".to_vec(),
                WRITE_TOKEN,
            ),
            400,
            "invalid_shard",
        );
        refused(
            post_shard(&s, v, Vec::new(), WRITE_TOKEN),
            400,
            "empty_body",
        );
    }
    // A shard whose verification entry lies (after its xorb is stored): refused via v2 frames.
    let (hash, body, _) = fixture_xorbs().into_iter().next().unwrap();
    post_xorb(&s, &hash.to_hex(), body, WRITE_TOKEN);
    let mut lying = Shard::from_bytes(&shard).unwrap();
    lying.files[0].verification.as_mut().unwrap()[0] =
        xet_format::VerificationHash::from_bytes([1; 32]);
    let f = frames(post_shard(
        &s,
        2,
        lying.to_upload_bytes().unwrap(),
        WRITE_TOKEN,
    ));
    assert_eq!(f.last().unwrap()["type"], "error");
    assert!(f.last().unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("verification"));
    // The real one then passes: validating …, committing, result.
    let f = frames(post_shard(&s, 2, shard, WRITE_TOKEN));
    let types: Vec<&str> = f.iter().map(|v| v["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"validating"));
    assert_eq!(&types[types.len() - 2..], ["committing", "result"], "{f:?}");
}

#[test]
fn presigned_urls_refuse_bad_signatures_and_expiry_and_unsatisfiable_ranges() {
    let s = loaded();
    let (hash, _, stored) = fixture_xorbs().into_iter().next().unwrap();
    let h = hash.to_hex();
    let key = server_key(&s);
    let base = format!("{}/v1/xorb-data/{h}", s.url());
    let all = whole_of(stored.len());
    let good = format!("{base}?{}", key.presign(&hash, now_unix() + 60, &all));
    assert_eq!(http().get(&good).send().unwrap().status(), 206);

    let other = XorbHash::from_bytes([9; 32]);
    let tampered = good.replace("&s=", "&s=A");
    let foreign = format!("{base}?{}", key.presign(&other, now_unix() + 60, &all));
    let other_key = Authority::new(vec![], [3; 32]);
    let forged = format!("{base}?{}", other_key.presign(&hash, now_unix() + 60, &all));
    // Ranges other than those signed: widened, or dropped (a URL of the old form).
    let widened = good.replace(
        &format!("&r=0-{}&", stored.len() - 1),
        &format!("&r=0-{}&", stored.len()),
    );
    assert_ne!(widened, good);
    let unbound = good.replace(&format!("&r=0-{}", stored.len() - 1), "");
    for url in [
        tampered,
        foreign,
        forged,
        widened,
        unbound,
        base.clone(),
        format!("{base}?e=99999999999"),
    ] {
        let m = refused(http().get(&url).send().unwrap(), 403, "invalid_signature");
        assert!(m.contains(&h), "{m}");
    }
    let expired = format!("{base}?{}", key.presign(&hash, now_unix() - 5, &all));
    let m = refused(http().get(&expired).send().unwrap(), 403, "url_expired");
    assert!(m.contains("new reconstruction"), "{m}");
    // An Authorization header does not replace the signature.
    refused(
        auth(http().get(&base), WRITE_TOKEN).send().unwrap(),
        403,
        "invalid_signature",
    );

    let n = stored.len();
    for range in [
        format!("bytes={n}-"),
        format!("bytes={}-{}", n + 5, n + 9),
        "bytes=-0".into(),
    ] {
        let r = http().get(&good).header("Range", &range).send().unwrap();
        assert_eq!(
            r.headers()["content-range"],
            format!("bytes */{n}").as_str()
        );
        refused(r, 416, "range_not_satisfiable");
    }
    for range in ["bytes=5-1", "lines=0-1", "bytes=x"] {
        refused(
            http().get(&good).header("Range", range).send().unwrap(),
            400,
            "invalid_range",
        );
    }
    let many = format!("bytes={}", vec!["0-0"; 1025].join(","));
    refused(
        http().get(&good).header("Range", many).send().unwrap(),
        400,
        "invalid_range",
    );
    refused(
        http()
            .get(&good)
            .header("Range", "bytes=0-,0-")
            .send()
            .unwrap(),
        400,
        "invalid_range",
    );
    // Some ranges satisfiable: those are served.
    let r = http()
        .get(&good)
        .header("Range", format!("bytes=0-3,{n}-"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.bytes().unwrap(), stored[..4]);

    // Reconstruction ranges: 416 at or past the end, 400 when malformed.
    let file = &common::manifest().sessions[0].files[0];
    let r = reconstruction(
        &s,
        1,
        &file.xet_hash,
        Some(&format!("bytes={}-{}", file.size, file.size + 10)),
    );
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes */{}", file.size).as_str()
    );
    refused(r, 416, "range_not_satisfiable");
    refused(
        reconstruction(&s, 2, &file.xet_hash, Some("bytes=1000000-")),
        416,
        "range_not_satisfiable",
    );
    for bad in ["bytes=5-2", "bytes=-5", "bytes=0-1,4-5", "items=0-5"] {
        refused(
            reconstruction(&s, 1, &file.xet_hash, Some(bad)),
            400,
            "invalid_range",
        );
    }
    refused(
        reconstruction(&s, 2, &FileHash::from_bytes([7; 32]).to_hex(), None),
        404,
        "file_not_found",
    );
}

#[test]
fn fixtures_upload_reconstruct_and_rebuild_through_presigned_urls() {
    let s = loaded();
    let m = common::manifest();
    let mut files = 0;
    for file in m.sessions.iter().flat_map(|s| &s.files) {
        let content = file.content();
        let n = content.len() as u64;
        for version in [1u8, 2] {
            let r = reconstruction(&s, version, &file.xet_hash, None);
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers()["cache-control"], "private, no-store");
            let json: Value = r.json().unwrap();
            let top = if version == 1 {
                ["fetch_info", "offset_into_first_range", "terms"]
            } else {
                ["offset_into_first_range", "terms", "xorbs"]
            };
            assert_eq!(keys(&json), top);
            if n == 0 {
                assert_eq!(json["terms"], serde_json::json!([]));
                continue;
            }
            assert_eq!(rebuild(&json, false), content, "{} v{version}", file.name);
            if version == 2 {
                assert_eq!(rebuild(&json, true), content, "{} multirange", file.name);
            }
            // URLs point at this server's xorb-data endpoint.
            let text = json.to_string();
            assert!(text.contains(&format!("{}/v1/xorb-data/", s.url())));
            for (a, b) in [
                (0, 0),
                (n / 3, 2 * n / 3),
                (n - 1, n - 1),
                (n / 2, n + 1000),
            ] {
                let r =
                    reconstruction(&s, version, &file.xet_hash, Some(&format!("bytes={a}-{b}")));
                let json: Value = r.json().unwrap();
                let want = &content[a as usize..=b.min(n - 1) as usize];
                let mut got = rebuild(&json, version == 2);
                assert!(got.len() >= want.len());
                got.truncate(want.len());
                assert_eq!(got, want, "{} v{version} bytes {a}-{b}", file.name);
            }
        }
        files += 1;
    }
    assert_eq!(files, 10);
    // text-300k-edited.txt reuses two separate runs of text-300k.txt's xorb: one v2 entry with
    // two ranges, fetched with one multi-range request.
    assert!(MULTIRANGE_FETCHES.load(std::sync::atomic::Ordering::Relaxed) > 0);
    // The empty file (hash 0) reconstructs to nothing, with or without a Range.
    for range in [None, Some("bytes=0-10")] {
        let json: Value = reconstruction(&s, 2, ZERO, range).json().unwrap();
        assert_eq!(
            json,
            serde_json::json!({"offset_into_first_range": 0, "terms": [], "xorbs": {}})
        );
    }
    // Telemetry: accepted and discarded; malformed is 400.
    let tele = |body: &str| {
        auth(http().post(format!("{}/v1/telemetry", s.url())), READ_TOKEN)
            .body(body.to_string())
            .send()
            .unwrap()
    };
    let ok = tele(
        r#"{"time":"2026-07-28T12:00:00.000Z","event":"xet_upload_summary","metrics":{"outcome":"ok"}}"#,
    );
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["cache-control"], "no-store");
    refused(tele("{not json"), 400, "invalid_telemetry");
    refused(tele("[1,2]"), 400, "invalid_telemetry");
    // Upload grants: a grant for a stored xorb is 200, for a new one 201 with a URL on this
    // server; the body must match the grant; the commit finds the xorb stored.
    let h = hello_xorb_hash();
    let grant = |xorb: &str, body: &str| {
        auth(
            http().post(format!("{}/v1/xorb-grants/default/{xorb}", s.url())),
            WRITE_TOKEN,
        )
        .body(body.to_string())
        .send()
        .unwrap()
    };
    let r = grant(
        &h,
        r#"{"length": 10, "checksum": {"algo": "crc64nvme", "value": "1"}}"#,
    );
    assert_eq!(r.status(), 200, "stored already");
    refused(
        grant(
            &h,
            r#"{"length": 10, "checksum": {"algo": "md5", "value": "1"}}"#,
        ),
        404,
        "xorb_grants_not_offered",
    );
    refused(grant(&h, "{}"), 400, "invalid_grant_request");
    let mut b = XorbBuilder::new(CompressionPolicy::None);
    assert!(matches!(
        b.add_chunk(b"granted bytes").unwrap(),
        Push::Added(_)
    ));
    let built = b.finish().unwrap();
    let body = built.upload_body().to_vec();
    let x = built.hash().to_hex();
    let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &body);
    let r = grant(
        &x,
        &format!(
            r#"{{"length": {}, "checksum": {{"algo": "crc64nvme", "value": "{crc}"}}}}"#,
            body.len()
        ),
    );
    assert_eq!(r.status(), 201);
    let g: Value = r.json().unwrap();
    assert_eq!(g["method"], "PUT");
    let url = g["url"].as_str().unwrap().to_string();
    assert!(
        url.starts_with(&format!("{}/v1/xorb-uploads/", s.url())),
        "{url}"
    );
    let id = g["id"].as_str().unwrap().to_string();
    let commit = || {
        auth(
            http().post(format!(
                "{}/v1/xorb-commits/default/{x}/grant/{id}",
                s.url()
            )),
            WRITE_TOKEN,
        )
        .send()
        .unwrap()
    };
    refused(commit(), 404, "grant_not_found");
    // Wrong bytes, or a tampered grant, are refused; the right ones are stored.
    let mut wrong = body.clone();
    wrong[0] ^= 1;
    refused(
        http().put(&url).body(wrong).send().unwrap(),
        400,
        "checksum_mismatch",
    );
    refused(
        http().put(&url).body(body[1..].to_vec()).send().unwrap(),
        400,
        "length_mismatch",
    );
    let tampered = url.replace("/g1.", "/g1.A");
    refused(
        http().put(&tampered).body(body.clone()).send().unwrap(),
        403,
        "invalid_grant",
    );
    assert_eq!(
        http().put(&url).body(body.clone()).send().unwrap().status(),
        200
    );
    assert_eq!(
        http().put(&url).body(body.clone()).send().unwrap().status(),
        412,
        "a repeated upload is already done"
    );
    // The first commit inserts the xorb the grant stored; a repeated one finds it there.
    for expected in [true, false] {
        let r = commit();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.json::<Value>().unwrap(),
            serde_json::json!({"was_inserted": expected})
        );
    }
    // A commit needs a write credential.
    let r = auth(
        http().post(format!(
            "{}/v1/xorb-commits/default/{x}/grant/{id}",
            s.url()
        )),
        READ_TOKEN,
    )
    .send()
    .unwrap();
    assert_eq!(r.status(), 403);
}

/// A new xorb of one chunk: its hash, its upload body and that body's CRC-64/NVME.
fn one_chunk_xorb(data: &[u8]) -> (String, Vec<u8>, u64) {
    let mut b = XorbBuilder::new(CompressionPolicy::None);
    assert!(matches!(b.add_chunk(data).unwrap(), Push::Added(_)));
    let built = b.finish().unwrap();
    let body = built.upload_body().to_vec();
    let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &body);
    (built.hash().to_hex(), body, crc)
}

#[test]
fn grants_refuse_a_zero_length_and_commits_say_whether_they_inserted() {
    let s = common::server::start();
    let grant = |xorb: &str, length: u64, crc: u64| {
        auth(
            http().post(format!("{}/v1/xorb-grants/default/{xorb}", s.url())),
            WRITE_TOKEN,
        )
        .body(format!(
            r#"{{"length": {length}, "checksum": {{"algo": "crc64nvme", "value": "{crc}"}}}}"#
        ))
        .send()
        .unwrap()
    };
    let commit = |xorb: &str, id: &str| {
        let r = auth(
            http().post(format!(
                "{}/v1/xorb-commits/default/{xorb}/grant/{id}",
                s.url()
            )),
            WRITE_TOKEN,
        )
        .send()
        .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<Value>().unwrap()["was_inserted"]
            .as_bool()
            .unwrap()
    };
    let (x, body, crc) = one_chunk_xorb(b"a xorb stored two ways");
    // A length of 0 is a bad request that says so, not a body over a limit.
    let message = refused(grant(&x, 0, crc), 400, "invalid_grant_request");
    assert!(
        message.contains("length 0") && message.contains("positive") && message.contains(&x),
        "{message}"
    );
    // Over the limit is still 413.
    let limit = git_xet::server::cas::upload::XORB_BODY_LIMIT;
    refused(grant(&x, limit + 1, crc), 413, "body_too_large");

    // A grant whose xorb another upload stores first: its upload is 412, and its commit
    // inserted nothing.
    let r = grant(&x, body.len() as u64, crc);
    assert_eq!(r.status(), 201);
    let g: Value = r.json().unwrap();
    let (id, url) = (g["id"].as_str().unwrap(), g["url"].as_str().unwrap());
    let direct = post_xorb(&s, &x, body.clone(), WRITE_TOKEN);
    assert_eq!(
        direct.json::<Value>().unwrap(),
        serde_json::json!({"was_inserted": true})
    );
    assert_eq!(http().put(url).body(body).send().unwrap().status(), 412);
    assert!(!commit(&x, id));

    // A grant that stores its xorb: the first commit inserted it, later ones did not.
    let (y, body, crc) = one_chunk_xorb(b"a xorb stored through its grant");
    let g: Value = grant(&y, body.len() as u64, crc).json().unwrap();
    let (id, url) = (g["id"].as_str().unwrap(), g["url"].as_str().unwrap());
    assert_eq!(http().put(url).body(body).send().unwrap().status(), 200);
    assert!(commit(&y, id));
    assert!(!commit(&y, id));
    assert!(!commit(&y, id));
}

#[test]
fn global_dedup_answers_are_keyed_shards() {
    let s = loaded();
    let m = common::manifest();
    let text = m.sessions.iter().find(|s| s.name == "text").unwrap();
    let stored = common::read(&text.xorbs[0]);
    let parsed = ParsedXorb::parse(&stored).unwrap();
    let raw: Vec<ChunkHash> = parsed.chunks().iter().map(|c| c.hash).collect();
    let mut shard_keys = Vec::new();
    for prefix in ["default", "default-merkledb"] {
        let r = auth(
            http().get(format!(
                "{}/v1/chunks/{prefix}/{}",
                s.url(),
                raw[0].to_hex()
            )),
            READ_TOKEN,
        )
        .send()
        .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "application/octet-stream");
        assert_eq!(r.headers()["vary"], "authorization");
        assert_eq!(r.headers()["x-xet-dense-keys"], "64", "docs/format.md §5.5");
        let cc = r.headers()["cache-control"].to_str().unwrap().to_string();
        let age: u64 = cc.strip_prefix("max-age=").unwrap().parse().unwrap();
        assert!(age > 3000 && age <= 3600, "{cc}");
        let bytes = r.bytes().unwrap();
        let parsed_shard = xet_format::shard::read::parse(&bytes).unwrap();
        assert!(!parsed_shard.is_upload_form(), "complete form with footer");
        let shard = parsed_shard.shard;
        assert!(shard.files.is_empty());
        assert_eq!(shard.xorbs.len(), 1);
        assert_eq!(shard.xorbs[0].hash, parsed.hash());
        let meta = shard.meta;
        assert!(!meta.hmac_key.is_zero(), "keyed");
        let now = now_unix();
        assert!(meta.creation_timestamp <= now && meta.creation_timestamp + 60 >= now);
        assert!(meta.key_expiry > now + 3600 && meta.key_expiry < u64::MAX);
        let keyed: Vec<ChunkHash> = shard.xorbs[0].chunks.iter().map(|c| c.hash).collect();
        let want: Vec<ChunkHash> = raw
            .iter()
            .map(|h| keyed_chunk_hash(&meta.hmac_key, h))
            .collect();
        assert_eq!(keyed, want);
        assert_ne!(keyed[0], raw[0], "raw hashes are not disclosed");
        shard_keys.push(meta.hmac_key);
    }
    assert_eq!(shard_keys[0], shard_keys[1], "one key while it is current");
    // A chunk that is not tracked: 404 (also through the unversioned alias).
    let unknown = ChunkHash::from_bytes([4; 32]).to_hex();
    let r = auth(
        http().get(format!("{}/chunks/default/{unknown}", s.url())),
        READ_TOKEN,
    )
    .send()
    .unwrap();
    assert_eq!(r.headers()["x-xet-dense-keys"], "64", "on a miss too");
    refused(r, 404, "chunk_not_found");
}

#[test]
fn reuploads_are_idempotent_concurrent_uploads_insert_once_and_the_index_survives_a_restart() {
    let s = loaded();
    for (hash, body, _) in fixture_xorbs() {
        let r = post_xorb(&s, &hash.to_hex(), body, WRITE_TOKEN);
        assert_eq!(
            r.json::<Value>().unwrap(),
            serde_json::json!({"was_inserted": false})
        );
    }
    for shard in upload_shards() {
        let r = post_shard(&s, 1, shard.clone(), WRITE_TOKEN);
        assert_eq!(r.json::<Value>().unwrap(), serde_json::json!({"result": 0}));
        let f = frames(post_shard(&s, 2, shard, WRITE_TOKEN));
        assert_eq!(f.last().unwrap()["type"], "result");
    }

    // Six clients upload one new xorb at once through the unversioned alias and /v1.
    let mut b = XorbBuilder::new(CompressionPolicy::Lz4);
    for c in common::splitmix64(5, 1 << 20).chunks(65_536) {
        assert!(matches!(b.add_chunk(c).unwrap(), Push::Added(_)));
    }
    let built = b.finish().unwrap();
    let h = built.hash().to_hex();
    let body = built.upload_body().to_vec();
    let url = s.url().to_string();
    let inserted: Vec<bool> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let (h, body, url) = (&h, body.clone(), &url);
                scope.spawn(move || {
                    let path = if i % 2 == 0 { "v1/xorbs" } else { "xorbs" };
                    let r = auth(
                        http().post(format!("{url}/{path}/default/{h}")),
                        WRITE_TOKEN,
                    )
                    .body(body)
                    .send()
                    .unwrap();
                    assert_eq!(r.status(), 200);
                    r.json::<Value>().unwrap()["was_inserted"]
                        .as_bool()
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(inserted.iter().filter(|i| **i).count(), 1, "{inserted:?}");

    let s = common::server::restart(s);
    let health: Value = http()
        .get(format!("{}/health", s.url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["files"], 10);
    let m = common::manifest();
    for file in m
        .sessions
        .iter()
        .flat_map(|s| &s.files)
        .filter(|f| f.size > 0)
    {
        let json: Value = reconstruction(&s, 2, &file.xet_hash, None).json().unwrap();
        assert_eq!(rebuild(&json, false), file.content(), "{}", file.name);
    }
    // The aliases serve the same as /v1.
    let file = &m.sessions[1].files[0];
    let a: Value = reconstruction(&s, 1, &file.xet_hash, None).json().unwrap();
    let b: Value = auth(
        http().get(format!("{}/reconstructions/{}", s.url(), file.xet_hash)),
        READ_TOKEN,
    )
    .send()
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(a["terms"], b["terms"]);
}

#[test]
fn lfs_oids_find_their_xet_files() {
    let s = loaded();
    let m = common::manifest();
    let url = |oid: &str| format!("{}/v1/lfs-files/{oid}", s.url());
    for f in m
        .sessions
        .iter()
        .flat_map(|s| &s.files)
        .filter(|f| f.size > 0)
    {
        let r = auth(http().get(url(&f.sha256)), READ_TOKEN).send().unwrap();
        assert_eq!(r.status(), 200, "{}", f.name);
        let v: Value = r.json().unwrap();
        assert_eq!(v["file_hash"], f.xet_hash.as_str());
        assert_eq!(v["size"], f.size);
        assert_eq!(v["oid"], f.sha256.as_str());
        // An uploader's question (the index as it is) gets the same answer.
        let fresh = format!("{}?fresh=index", url(&f.sha256));
        let r = auth(http().get(fresh), READ_TOKEN).send().unwrap();
        assert_eq!(r.status(), 200, "{}", f.name);
        assert_eq!(r.json::<Value>().unwrap()["file_hash"], f.xet_hash.as_str());
    }
    let unknown = "ab".repeat(32);
    refused(
        auth(
            http().get(format!("{}?fresh=index", url(&unknown))),
            READ_TOKEN,
        )
        .send()
        .unwrap(),
        404,
        "oid_not_found",
    );
    refused(
        auth(
            http().get(format!("{}?fresh=later", url(&unknown))),
            READ_TOKEN,
        )
        .send()
        .unwrap(),
        400,
        "invalid_query",
    );
    refused(
        auth(http().get(url(&unknown)), READ_TOKEN).send().unwrap(),
        404,
        "oid_not_found",
    );
    refused(
        auth(http().get(url("xyz")), READ_TOKEN).send().unwrap(),
        400,
        "invalid_oid",
    );
    refused(
        http().get(url(&unknown)).send().unwrap(),
        401,
        "unauthorized",
    );
}
