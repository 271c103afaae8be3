//! The HTTP CAS client (`xet_client::remote`): against a real `git xet serve` (upload,
//! plan, download whole and ranged, global dedup, LFS oid lookup, token scopes, token refresh
//! through the server's own route) and against tiny fake servers on loopback (retries, their
//! limits, connection errors, token refresh and the 401 rule, presigned fetches without
//! credentials, the v2 → v1 fallback).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use xet_protocol::wire::ErrorCode;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fake::{reply, Fake, Reply, FAKE_LENGTH};
use common::server::{TestServer, READ_TOKEN, WRITE_TOKEN};
use xet_client::pipeline::download::write_plan;
use xet_client::pipeline::upload::{upload, UploadError, UploadOptions};
use xet_client::{RefreshingToken, RemoteCas, RemoteConfig, RetryPolicy, TokenSource};
use xet_format::{FileHash, LfsOid, XorbHash};
use xet_protocol::util::now_unix;
use xet_protocol::FetchRange;
use xet_protocol::{CasTarget, Endpoint, TargetError, XorbSource};

fn config(url: &str, token: TokenSource) -> RemoteConfig {
    let mut c = RemoteConfig::new(url, token);
    c.retry = RetryPolicy::quick(3);
    c.timeout = Duration::from_secs(30);
    c
}

fn remote(s: &TestServer, token: &str) -> RemoteCas {
    RemoteCas::new(config(s.url(), TokenSource::fixed(Some(token.into())))).unwrap()
}

fn download(remote: &RemoteCas, file: &FileHash, range: Option<(u64, u64)>) -> Vec<u8> {
    let plan = remote
        .reconstruction(file, range)
        .unwrap()
        .expect("the file is known");
    let mut out = Vec::new();
    write_plan(remote, &plan, &mut |chunk| {
        out.extend_from_slice(chunk);
        Ok(())
    })
    .unwrap();
    if let Some((s, e)) = range {
        out.truncate((e - s + 1) as usize);
    }
    out
}

fn remote_error(e: UploadError) -> TargetError {
    match e {
        UploadError::Target { source, .. } => source,
        other => panic!("expected a target error, got {other}"),
    }
}

#[test]
fn upload_plan_download_and_dedup_against_the_server() {
    let server = common::server::start();
    let cas = remote(&server, WRITE_TOKEN);
    assert_eq!(cas.describe(), server.url());
    let data = common::splitmix64(0x5eed, 3 * 1024 * 1024 + 12_345);
    let oid = LfsOid::of(&data);
    let options = UploadOptions {
        expected_sha256: Some(oid),
        expected_size: Some(data.len() as u64),
        ..UploadOptions::default()
    };
    // The server says it indexes dense keys on its dedup answers (docs/format.md §5.5); the
    // first chunk's query is the first such answer.
    assert_eq!(
        cas.dense_key_modulus(),
        None,
        "not known before a dedup answer"
    );
    let first = upload(&cas, &data[..], &options).unwrap();
    assert_eq!(
        cas.dense_key_modulus(),
        Some(xet_format::dedup::DENSE_KEY_MODULUS)
    );
    assert!(!first.already_stored);
    assert_eq!(first.size, data.len() as u64);
    assert!(first.new_xorbs >= 1 && first.shards == 1);
    assert!(first.uploaded_bytes > data.len() as u64 / 2);

    // Whole and ranged downloads, with a read-only token.
    let reader = remote(&server, READ_TOKEN);
    let plan = reader
        .reconstruction(&first.file_hash, None)
        .unwrap()
        .unwrap();
    assert_eq!(plan.file_size, data.len() as u64);
    assert!(plan
        .fetch
        .iter()
        .all(|(_, r)| r.iter().all(|f| f.url.is_some())));
    assert_eq!(download(&reader, &first.file_hash, None), data);
    for (s, e) in [
        (0, 0),
        (1_000_000, 1_500_000),
        (100, 200_000),
        (3_000_000, u64::MAX),
    ] {
        let end = e.min(data.len() as u64 - 1);
        assert_eq!(
            download(&reader, &first.file_hash, Some((s, e))),
            &data[s as usize..=end as usize],
            "bytes {s}-{e}"
        );
    }
    let ranged = reader
        .reconstruction(&first.file_hash, Some((1_000_000, 1_500_000)))
        .unwrap()
        .unwrap();
    assert!(ranged.offset_into_first_range > 0);

    // The LFS oid lookup, and the upload it lets the pipeline skip.
    assert_eq!(
        reader.file_by_sha256(&oid).unwrap(),
        Some((first.file_hash, data.len() as u64))
    );
    assert_eq!(reader.file_by_sha256(&LfsOid::of(b"nope")).unwrap(), None);
    let again = upload(&cas, &data[..], &options).unwrap();
    assert!(again.already_stored);
    assert_eq!(again.uploaded_bytes, 0);

    // An edited copy: global dedup finds the first upload's xorb, little is sent.
    let mut edited = data.clone();
    for b in &mut edited[1_500_000..1_500_100] {
        *b ^= 0xff;
    }
    let second = upload(&cas, &edited[..], &UploadOptions::default()).unwrap();
    assert!(second.dedup_queries >= 1);
    assert!(second.dedup_chunks > 0);
    assert!(
        second.uploaded_bytes < data.len() as u64 / 8,
        "uploaded {} of {} bytes",
        second.uploaded_bytes,
        data.len()
    );
    assert_eq!(download(&reader, &second.file_hash, None), edited);

    // Unknown files, the empty file, ranges past the end.
    let unknown = FileHash::from_bytes([7; 32]);
    assert_eq!(reader.reconstruction(&unknown, None).unwrap(), None);
    let empty = reader
        .reconstruction(&FileHash::ZERO, None)
        .unwrap()
        .unwrap();
    assert!(empty.terms.is_empty() && empty.file_size == 0);
    let e = reader
        .reconstruction(
            &first.file_hash,
            Some((data.len() as u64, data.len() as u64 + 5)),
        )
        .unwrap_err();
    assert!(!e.is_retryable());
    let text = e.to_string();
    assert!(
        text.contains("416") && text.contains(&data.len().to_string()),
        "{text}"
    );
}

#[test]
fn tokens_are_checked_with_clear_messages() {
    let server = common::server::start();
    let data = common::splitmix64(9, 300_000);

    let wrong = remote(&server, "not-the-token-0123456789");
    let e = remote_error(upload(&wrong, &data[..], &UploadOptions::default()).unwrap_err());
    assert!(!e.is_retryable());
    let text = e.to_string();
    assert!(text.contains("401") && text.contains("token"), "{text}");
    assert!(text.contains(server.url()), "{text}");
    let e = wrong
        .reconstruction(&FileHash::from_bytes([1; 32]), None)
        .unwrap_err();
    assert!(!e.is_retryable() && e.to_string().contains("401"), "{e}");

    let read_only = remote(&server, READ_TOKEN);
    let e = remote_error(upload(&read_only, &data[..], &UploadOptions::default()).unwrap_err());
    assert!(!e.is_retryable());
    let text = e.to_string();
    assert!(
        text.contains("403") && text.contains("write access"),
        "{text}"
    );

    // A shard the server rejects: 400, not retried, the server's reason in the message.
    let writer = remote(&server, WRITE_TOKEN);
    let e = writer
        .register_shard(b"definitely not a shard")
        .unwrap_err();
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("rejected the shard"), "{e}");
    assert!(e.to_string().contains("invalid_shard"), "{e}");
}

#[test]
fn refreshing_token_through_the_servers_route() {
    let server = common::server::start();
    let href = format!("{}/team/models.git/info/lfs/xet-token/write", server.url());
    // No token yet: the first request refreshes.
    let token =
        RefreshingToken::new(href, None, 0).with_authorization(format!("Bearer {WRITE_TOKEN}"));
    let source = TokenSource::refreshing(token);
    let cas = RemoteCas::new(config(server.url(), source.clone())).unwrap();
    let data = common::splitmix64(77, 200_000);
    let summary = upload(&cas, &data[..], &UploadOptions::default()).unwrap();
    assert_eq!(download(&cas, &summary.file_hash, None), data);
    let TokenSource::Refreshing(t) = &source else {
        unreachable!()
    };
    assert_eq!(t.refreshes(), 1);
    assert!(t.expires_at() > now_unix());
    assert_eq!(t.refreshed_cas_url().as_deref(), Some(server.url()));

    // A refresh route that refuses the credential: a clear, final error.
    let bad = RefreshingToken::new(
        format!("{}/team/models.git/info/lfs/xet-token/write", server.url()),
        None,
        0,
    )
    .with_authorization("Bearer wrong-wrong-wrong-wrong");
    let cas = RemoteCas::new(config(server.url(), TokenSource::refreshing(bad))).unwrap();
    let e = cas.reconstruction(&summary.file_hash, None).unwrap_err();
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("refused the credential"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Fake servers.

const XORB: &str = "0101010101010101020202020202020203030303030303030404040404040404";

fn xorb() -> XorbHash {
    XorbHash::from_hex(XORB).unwrap()
}

fn fake_remote(url: &str, token: TokenSource, attempts: u32) -> RemoteCas {
    let mut c = config(url, token);
    c.retry = RetryPolicy::quick(attempts);
    RemoteCas::new(c).unwrap()
}

#[test]
fn retries_5xx_and_429_then_succeeds() {
    let mut n = 0;
    let fake = Fake::start(move |_| {
        n += 1;
        match n {
            1 | 2 => reply(503, r#"{"error":"busy","message":"try later"}"#),
            3 => Reply {
                status: 429,
                headers: vec![("Retry-After", "3600".into())],
                body: vec![],
            },
            _ => reply(200, r#"{"was_inserted":true}"#),
        }
    });
    let cas = fake_remote(&fake.url, TokenSource::fixed(Some("tok".into())), 5);
    let started = Instant::now();
    assert!(cas.put_xorb(xorb(), b"some body").unwrap());
    // Retry-After: 3600 was capped by the (quick) policy.
    assert!(started.elapsed() < Duration::from_secs(5));
    let seen = fake.seen();
    assert_eq!(seen.len(), 4);
    for s in &seen {
        assert_eq!(s.method, "POST");
        assert_eq!(s.path, format!("/v1/xorbs/default/{XORB}"));
        assert_eq!(s.body, b"some body");
        assert_eq!(s.header("authorization"), Some("Bearer tok"));
    }
}

#[test]
fn retries_stop_after_the_configured_attempts() {
    let fake = Fake::start(|_| reply(503, "overloaded"));
    let cas = fake_remote(&fake.url, TokenSource::None, 4);
    let e = cas.put_xorb(xorb(), b"x").unwrap_err();
    assert!(e.is_retryable());
    let text = e.to_string();
    assert!(
        text.contains("503") && text.contains("after 4 attempts"),
        "{text}"
    );
    assert_eq!(e.code(), None, "a text body has no code");
    assert!(
        text.contains(&fake.url) && text.contains("overloaded"),
        "{text}"
    );
    assert_eq!(fake.seen().len(), 4);
    assert!(fake.seen()[0].header("authorization").is_none());

    // 4xx other than 429 is final at once, with the server's words.
    let fake = Fake::start(|_| reply(400, r#"{"error":"invalid_shard","message":"bad footer"}"#));
    let cas = fake_remote(&fake.url, TokenSource::None, 4);
    let e = cas.register_shard(b"shard").unwrap_err();
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("bad footer"), "{e}");
    assert_eq!(fake.paths(), vec!["/v1/shards".to_string()]);
}

#[test]
fn a_closed_port_is_a_retryable_connection_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let cas = fake_remote(&url, TokenSource::None, 3);
    let e = cas.put_xorb(xorb(), b"x").unwrap_err();
    assert!(e.is_retryable());
    let text = e.to_string();
    assert!(
        text.contains(&format!("cannot reach CAS server {url}"))
            && text.contains("after 3 attempts"),
        "{text}"
    );
    assert!(text.contains("connection refused"), "{text}");
}

#[test]
fn a_proxy_that_refuses_connections_is_named_without_its_password() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = config("http://cas.test:8080", TokenSource::None);
    c.http.proxy = Some(format!("http://user:pr0xy-pw-0451@127.0.0.1:{port}"));
    c.retry = RetryPolicy::quick(2);
    let cas = RemoteCas::new(c).unwrap();
    let text = cas.put_xorb(xorb(), b"x").unwrap_err().to_string();
    assert!(
        text.contains(&format!(
            "cannot reach CAS server http://cas.test:8080 through the proxy \
             http://user:***@127.0.0.1:{port} (from http.proxy)"
        )) && text.contains("NO_PROXY"),
        "{text}"
    );
    assert!(!text.contains("pr0xy-pw-0451"), "{text}");
}

/// A fake CAS whose `/refresh` hands out `fresh` and whose xorb route accepts only `fresh`.
fn refreshing_fake() -> Fake {
    Fake::start(|req| {
        if req.path == "/refresh" {
            let exp = now_unix() + 900;
            return reply(
                200,
                &format!(r#"{{"casUrl":"http://cas.example","accessToken":"fresh","exp":{exp}}}"#),
            );
        }
        if req.header("authorization") == Some("Bearer fresh") {
            reply(200, r#"{"was_inserted":false}"#)
        } else {
            reply(
                401,
                r#"{"error":"token_expired","message":"token expired"}"#,
            )
        }
    })
}

fn refreshing(fake: &Fake, token: &str, exp: u64) -> (Arc<RefreshingToken>, RemoteCas) {
    let t = Arc::new(
        RefreshingToken::new(format!("{}/refresh", fake.url), Some(token.into()), exp)
            .with_authorization("Basic dXNlcjpwYXNz"),
    );
    let cas = fake_remote(&fake.url, TokenSource::Refreshing(t.clone()), 3);
    (t, cas)
}

#[test]
fn expiring_tokens_are_refreshed_before_the_request() {
    for exp in [now_unix() - 10, now_unix() + 20] {
        let fake = refreshing_fake();
        let (t, cas) = refreshing(&fake, "stale", exp);
        assert!(t.is_due());
        assert!(!cas.put_xorb(xorb(), b"x").unwrap());
        let seen = fake.seen();
        assert_eq!(seen.len(), 2, "{:?}", fake.paths());
        assert_eq!(seen[0].path, "/refresh");
        assert_eq!(seen[0].header("authorization"), Some("Basic dXNlcjpwYXNz"));
        assert_eq!(seen[1].header("authorization"), Some("Bearer fresh"));
        assert_eq!(t.refreshes(), 1);
        assert_eq!(t.current().as_ref().map(|s| s.expose()), Some("fresh"));
        // The next request uses the fresh token without refreshing.
        cas.put_xorb(xorb(), b"x").unwrap();
        assert_eq!(fake.seen().len(), 3);
    }
}

#[test]
fn concurrent_requests_share_one_refresh() {
    let fake = refreshing_fake();
    let (t, cas) = refreshing(&fake, "stale", now_unix() - 1);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| cas.put_xorb(xorb(), b"x").unwrap());
        }
    });
    assert_eq!(t.refreshes(), 1);
    let paths = fake.paths();
    assert_eq!(
        paths.iter().filter(|p| *p == "/refresh").count(),
        1,
        "{paths:?}"
    );
    assert_eq!(paths.len(), 5);
}

#[test]
fn a_401_refreshes_once() {
    // A token that should still be good but was revoked: one refresh, then success.
    let fake = refreshing_fake();
    let (t, cas) = refreshing(&fake, "revoked", now_unix() + 900);
    assert!(!t.is_due());
    cas.put_xorb(xorb(), b"x").unwrap();
    let expected_paths = vec![
        format!("/v1/xorbs/default/{XORB}"),
        "/refresh".to_string(),
        format!("/v1/xorbs/default/{XORB}"),
    ];
    assert_eq!(fake.paths(), expected_paths);
    assert_eq!(t.refreshes(), 1);

    // A server that refuses even the fresh token: one refresh only, then a final error.
    let fake = Fake::start(|req| {
        if req.path == "/refresh" {
            reply(200, r#"{"casUrl":"","accessToken":"fresh","exp":0}"#)
        } else {
            reply(401, "")
        }
    });
    let (t, cas) = refreshing(&fake, "whatever", 0);
    let e = cas.put_xorb(xorb(), b"x").unwrap_err();
    assert!(!e.is_retryable());
    assert!(
        e.to_string().contains("401") && e.to_string().contains("after a refresh"),
        "{e}"
    );
    assert_eq!(fake.paths(), expected_paths);
    assert_eq!(t.refreshes(), 1);
    assert_eq!(t.expires_at(), 0);

    // Expiry 0 and no 401: never refreshed.
    let fake = refreshing_fake();
    let (t, cas) = refreshing(&fake, "fresh", 0);
    cas.put_xorb(xorb(), b"x").unwrap();
    cas.put_xorb(xorb(), b"x").unwrap();
    assert_eq!(t.refreshes(), 0);
    assert_eq!(fake.seen().len(), 2);
}

#[test]
fn presigned_fetches_carry_no_credentials_and_are_checked() {
    let body: Vec<u8> = (0..100u8).collect();
    let b = body.clone();
    let fake = Fake::start(move |req| match req.path.as_str() {
        p if p.starts_with("/good") => Reply {
            status: 206,
            headers: vec![("Content-Range", "bytes 10-19/100".into())],
            body: b[10..20].to_vec(),
        },
        p if p.starts_with("/whole") => reply(200, std::str::from_utf8(&[b'a'; 100]).unwrap()),
        p if p.starts_with("/short") => Reply {
            status: 206,
            headers: vec![],
            body: b[10..15].to_vec(),
        },
        p if p.starts_with("/expired") => reply(403, r#"{"error":"url_expired"}"#),
        _ => reply(404, "no"),
    });
    let cas = fake_remote(&fake.url, TokenSource::fixed(Some("secret".into())), 2);
    let range = |path: &str| FetchRange {
        chunks: 0..1,
        bytes: 10..=19,
        url: Some(format!("{}{path}?sig=capability", fake.url)),
    };
    assert_eq!(
        cas.read_xorb_range(&xorb(), &range("/good")).unwrap(),
        body[10..20]
    );
    assert_eq!(
        cas.read_xorb_range(&xorb(), &range("/whole")).unwrap(),
        vec![b'a'; 10]
    );
    let seen = fake.seen();
    assert!(seen.iter().all(|s| s.header("authorization").is_none()));
    assert!(seen.iter().all(|s| s.header("x-xet-session-id").is_none()));
    assert_eq!(seen[0].header("range"), Some("bytes=10-19"));
    assert_eq!(seen[0].path, "/good?sig=capability");

    let e = cas.read_xorb_range(&xorb(), &range("/short")).unwrap_err();
    assert!(e.to_string().contains("5 bytes"), "{e}");
    let e = cas
        .read_xorb_range(&xorb(), &range("/expired"))
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("403") && text.contains("expired"), "{text}");
    assert!(
        !text.contains("capability"),
        "signatures stay out of messages: {text}"
    );
    assert!(matches!(
        cas.read_xorb_range(&xorb(), &range("/missing"))
            .unwrap_err(),
        TargetError::NotFound { .. }
    ));
    let no_url = FetchRange {
        url: None,
        ..range("/good")
    };
    assert!(cas.read_xorb_range(&xorb(), &no_url).is_err());
}

#[test]
fn a_range_that_breaks_off_is_fetched_again_and_streamed_from_its_start() {
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let b = body.clone();
    let mut calls = 0;
    let fake = Fake::start(move |_| {
        calls += 1;
        let whole = 206;
        let range = (
            "Content-Range",
            format!("bytes 0-{}/{}", b.len() - 1, b.len()),
        );
        if calls % 2 == 1 {
            // The first answer of each pair breaks off after 80 000 bytes.
            Reply {
                status: whole,
                headers: vec![range, (FAKE_LENGTH, b.len().to_string())],
                body: b[..80_000].to_vec(),
            }
        } else {
            Reply {
                status: whole,
                headers: vec![range],
                body: b.clone(),
            }
        }
    });
    let cas = fake_remote(&fake.url, TokenSource::fixed(None), 3);
    let range = FetchRange {
        chunks: 0..1,
        bytes: 0..=(body.len() as u64 - 1),
        url: Some(format!("{}/xorb", fake.url)),
    };
    // Streamed: the pieces of the second answer start again at offset 0.
    let mut got = Vec::new();
    let mut restarts = 0;
    cas.stream_xorb_range(&xorb(), &range, &mut |at, piece| {
        if at == 0 && !got.is_empty() {
            restarts += 1;
        }
        got.truncate(at as usize);
        got.extend_from_slice(piece);
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert!(got == body);
    assert_eq!(restarts, 1);
    // Gathered: the same bytes.
    assert!(cas.read_xorb_range(&xorb(), &range).unwrap() == body);
    assert_eq!(fake.seen().len(), 4);
    // A sink that stops ends the read without an error and without a retry.
    let mut pieces = 0;
    cas.stream_xorb_range(&xorb(), &range, &mut |_, _| {
        pieces += 1;
        std::ops::ControlFlow::Break(())
    })
    .unwrap();
    assert_eq!((pieces, fake.seen().len()), (1, 5));
}

#[test]
fn v1_fallback_and_foreign_servers() {
    let file = FileHash::from_bytes([3; 32]);
    let v1 = format!(
        r#"{{"offset_into_first_range":0,
            "terms":[{{"hash":"{XORB}","unpacked_length":1000,"range":{{"start":0,"end":2}}}}],
            "fetch_info":{{"{XORB}":[{{"range":{{"start":0,"end":2}},"url":"http://x.test/a",
                                      "url_range":{{"start":0,"end":1015}}}}]}}}}"#
    );
    let fake = Fake::start(move |req| {
        if req.path.starts_with("/v2/") {
            reply(404, "Not Found")
        } else if req.path.starts_with("/v1/reconstructions/") {
            reply(200, &v1)
        } else {
            reply(404, "")
        }
    });
    let mut c = config(&fake.url, TokenSource::None);
    c.session_id = Some("session-1".into());
    let cas = RemoteCas::new(c).unwrap();
    for _ in 0..2 {
        let plan = cas.reconstruction(&file, Some((5, 900))).unwrap().unwrap();
        assert_eq!(plan.terms.len(), 1);
        assert_eq!(plan.fetch[0].1[0].url.as_deref(), Some("http://x.test/a"));
        assert_eq!(plan.file_size, 5 + 1000);
    }
    // v2 once, then v1 only.
    let paths = fake.paths();
    assert_eq!(paths.len(), 3, "{paths:?}");
    assert!(
        paths[0].starts_with("/v2/")
            && paths[1].starts_with("/v1/")
            && paths[2].starts_with("/v1/")
    );
    let seen = fake.seen();
    assert_eq!(seen[0].header("range"), Some("bytes=5-900"));
    assert_eq!(seen[0].header("x-xet-session-id"), Some("session-1"));
    assert!(seen[0]
        .header("user-agent")
        .unwrap()
        .starts_with("git-xet/"));
    // No lfs-files route, no dedup match: both mean "none".
    let oid = LfsOid::of(b"x");
    assert_eq!(cas.file_by_sha256(&oid).unwrap(), None);
    assert!(cas
        .dedup_query(&xet_format::ChunkHash::from_bytes([1; 32]))
        .unwrap()
        .is_none());

    // Nonsense in a reconstruction is an error, not a panic.
    let fake = Fake::start(|_| {
        reply(
            200,
            &format!(
                r#"{{"offset_into_first_range":0,"terms":[{{"hash":"{XORB}","unpacked_length":5,"range":{{"start":3,"end":1}}}}],"xorbs":{{}}}}"#
            ),
        )
    });
    let cas = fake_remote(&fake.url, TokenSource::None, 2);
    let e = cas.reconstruction(&file, None).unwrap_err();
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("unusable v2 reconstruction"), "{e}");
}

#[test]
fn bad_configuration_is_refused() {
    for url in ["ftp://x", "not a url", ""] {
        assert!(
            RemoteCas::new(RemoteConfig::new(url, TokenSource::None)).is_err(),
            "{url}"
        );
    }
    let cas = RemoteCas::new(RemoteConfig::new("http://127.0.0.1:1/", TokenSource::None)).unwrap();
    assert_eq!(cas.cas_url(), "http://127.0.0.1:1");
    assert!(!cas.has_xorb(&xorb()).unwrap());
    // A CA file that cannot be read is found at once for an https server; a plain-http
    // server's client reads no certificate.
    let with_ca = |url: &str| {
        let mut c = RemoteConfig::new(url, TokenSource::None);
        c.http.ca_files = vec![std::path::PathBuf::from("/no/such/ca.pem")];
        RemoteCas::new(c)
    };
    let e = with_ca("https://127.0.0.1:1/").err().expect("refused");
    assert!(e.to_string().contains("/no/such/ca.pem"), "{e}");
    assert!(with_ca("http://127.0.0.1:1/").is_ok());
}

#[test]
fn a_one_shot_client_for_plain_http_reads_no_certificate() {
    let options = xet_client::remote::HttpOptions {
        ca_files: vec![std::path::PathBuf::from("/no/such/ca.pem")],
        ..Default::default()
    };
    let client = |url: &str| {
        xet_client::remote::OneShotClient::for_url(&options, url, Duration::from_secs(5), false)
    };
    for url in ["https://127.0.0.1:1/", "HTTPS://127.0.0.1:1/"] {
        let e = client(url).err().expect("refused");
        assert!(e.contains("/no/such/ca.pem"), "{url}: {e}");
    }
    // A plain-http client builds, and talks to a plain-http server.
    let server = common::server::start();
    let http = client(&format!("{}/", server.url())).expect("no certificate read");
    let answer = http
        .send(http.get(&format!("{}/health", server.url())), 64 << 10)
        .expect("health answered");
    assert!(answer.status.is_success(), "{:?}", answer.status);
    assert!(client("HTTP://127.0.0.1:1/").is_ok());
}

// ---------------------------------------------------------------------------------------------
// Retries over a horizon, final statuses, damage.

/// The default policy with short delays and a 10 s horizon.
fn patient() -> RetryPolicy {
    RetryPolicy {
        horizon: Duration::from_secs(10),
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(400),
        max_retry_after: Duration::from_secs(5),
        ..RetryPolicy::default()
    }
}

fn patient_remote(url: &str) -> RemoteCas {
    let mut c = config(url, TokenSource::fixed(Some("tok-123456".into())));
    c.retry = patient();
    RemoteCas::new(c).unwrap()
}

#[test]
fn retries_outlast_a_server_that_is_unavailable_for_seconds() {
    let started = Instant::now();
    let fake = Fake::start(move |_| {
        if started.elapsed() < Duration::from_secs(3) {
            reply(503, r#"{"error":"restarting","message":"come back later"}"#)
        } else {
            reply(200, r#"{"was_inserted":true}"#)
        }
    });
    let cas = patient_remote(&fake.url);
    assert!(cas.put_xorb(xorb(), b"body").unwrap());
    assert!(started.elapsed() >= Duration::from_secs(3));
    let seen = fake.seen();
    assert!(seen.len() >= 3, "{} attempts", seen.len());
    assert!(seen.iter().all(|s| s.body == b"body"));
}

#[test]
fn retries_reach_a_server_restarted_on_the_same_port() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let client = std::thread::spawn(move || {
        let cas = patient_remote(&url);
        cas.put_xorb(xorb(), b"body")
    });
    // Connections are refused for two seconds, then the server is back.
    std::thread::sleep(Duration::from_secs(2));
    let fake = Fake::start_on(port, |_| reply(200, r#"{"was_inserted":false}"#));
    let result = client.join().unwrap();
    assert!(!result.unwrap(), "the upload reached the restarted server");
    assert_eq!(fake.seen().len(), 1);
}

#[test]
fn final_statuses_are_tried_once_with_the_servers_code() {
    let fake = Fake::start(|_| {
        reply(
            507,
            r#"{"error":"insufficient_storage","message":"no space left on the server"}"#,
        )
    });
    let e = patient_remote(&fake.url)
        .put_xorb(xorb(), b"x")
        .unwrap_err();
    assert!(!e.is_retryable());
    assert_eq!(e.code(), Some(ErrorCode::InsufficientStorage));
    let text = e.to_string();
    assert!(
        text.contains("out of storage") && text.contains("507"),
        "{text}"
    );
    assert_eq!(fake.seen().len(), 1);

    let fake = Fake::start(|_| reply(400, r#"{"error":"invalid_xorb","message":"bad"}"#));
    let e = patient_remote(&fake.url)
        .put_xorb(xorb(), b"x")
        .unwrap_err();
    assert!(!e.is_retryable());
    assert_eq!(e.code(), Some(ErrorCode::InvalidXorb));
    assert_eq!(fake.seen().len(), 1);

    // A code this client does not know: no decision rests on it, the message still shows it.
    let fake = Fake::start(|_| reply(400, r#"{"error":"some_new_code","message":"bad"}"#));
    let e = patient_remote(&fake.url)
        .put_xorb(xorb(), b"x")
        .unwrap_err();
    assert_eq!(e.code(), None);
    assert!(e.to_string().contains("[some_new_code"), "{e}");

    // 501: the server does not offer the route; for the oid lookup that means "unknown".
    let fake = Fake::start(|_| reply(501, "not implemented"));
    let cas = patient_remote(&fake.url);
    assert_eq!(cas.file_by_sha256(&LfsOid::of(b"x")).unwrap(), None);
    let e = cas.put_xorb(xorb(), b"x").unwrap_err();
    assert!(!e.is_retryable() && e.to_string().contains("501"), "{e}");
    assert_eq!(fake.seen().len(), 2);
}

#[test]
fn retry_after_is_honoured_in_seconds_and_as_a_date() {
    for form in ["seconds", "date"] {
        let mut n = 0;
        let fake = Fake::start(move |_| {
            n += 1;
            if n == 1 {
                let after = match form {
                    "seconds" => "2".to_string(),
                    _ => httpdate::fmt_http_date(
                        std::time::SystemTime::now() + Duration::from_secs(3),
                    ),
                };
                Reply {
                    status: 503,
                    headers: vec![("Retry-After", after)],
                    body: vec![],
                }
            } else {
                reply(200, r#"{"was_inserted":true}"#)
            }
        });
        patient_remote(&fake.url).put_xorb(xorb(), b"x").unwrap();
        let seen = fake.seen();
        assert_eq!(seen.len(), 2);
        let waited = seen[1].at - seen[0].at;
        // The date has one-second resolution: 3 s ahead is at least 2 s.
        assert!(
            waited >= Duration::from_millis(1900) && waited < Duration::from_secs(5),
            "{form}: waited {waited:?}"
        );
    }
}

#[test]
fn a_damaged_copy_on_the_server_is_final_and_says_so() {
    let fake = Fake::start(|_| {
        reply(
            500,
            &format!(r#"{{"error":"xorb_damaged","message":"xorb {XORB} failed its check"}}"#),
        )
    });
    let cas = patient_remote(&fake.url);
    let e = cas
        .reconstruction(&FileHash::from_bytes([5; 32]), None)
        .unwrap_err();
    assert!(!e.is_retryable());
    assert_eq!(e.code(), Some(ErrorCode::XorbDamaged));
    let text = e.to_string();
    assert!(
        text.contains("damaged") && text.contains("git xet scrub") && text.contains(XORB),
        "{text}"
    );
    assert_eq!(fake.seen().len(), 1, "not retried");

    // A truncated xorb behind a presigned URL: a short range, a short body, or a 416.
    let fake = Fake::start(|req| match req.path.as_str() {
        p if p.starts_with("/short-range") => Reply {
            status: 206,
            headers: vec![("Content-Range", "bytes 10-14/15".into())],
            body: vec![1; 5],
        },
        p if p.starts_with("/short-whole") => reply(200, "0123456789abc"),
        _ => Reply {
            status: 416,
            headers: vec![("Content-Range", "bytes */15".into())],
            body: vec![],
        },
    });
    let cas = patient_remote(&fake.url);
    for (path, bytes) in [
        ("/short-range", 10..=19),
        ("/short-whole", 10..=19),
        ("/past-the-end", 20..=29),
    ] {
        let range = FetchRange {
            chunks: 0..1,
            bytes,
            url: Some(format!("{}{path}?s=sig", fake.url)),
        };
        let e = cas.read_xorb_range(&xorb(), &range).unwrap_err();
        let text = e.to_string();
        assert!(!e.is_retryable(), "{path}: {text}");
        assert!(
            text.contains(&format!("copy of xorb {XORB} is damaged"))
                && text.contains("shorter than its reconstruction says")
                && text.contains("git xet scrub"),
            "{path}: {text}"
        );
    }
    assert_eq!(fake.seen().len(), 3, "none retried");
}

// ---------------------------------------------------------------------------------------------
// Redirects.

#[test]
fn credentials_never_follow_a_redirect_to_another_origin() {
    const XORB2: &str = "0909090909090909090909090909090909090909090909090909090909090909";
    let foreign = Fake::start(|_| reply(200, r#"{"was_inserted":true}"#));
    let target = foreign.url.clone();
    let home = Fake::start(move |req| {
        let to = match req.path.as_str() {
            "/refresh" => format!("{target}/steal"),
            "/landed" => return reply(200, r#"{"was_inserted":true}"#),
            p if p.ends_with(XORB2) => "/landed".to_string(),
            p if p.starts_with("/presigned") => format!("{target}/bytes"),
            _ => format!("{target}/v1/xorbs/default/{XORB}"),
        };
        Reply {
            status: 307,
            headers: vec![("Location", to)],
            body: vec![],
        }
    });
    let secret = "cas-secret-token-1234";
    let cas = fake_remote(&home.url, TokenSource::fixed(Some(secret.into())), 3);
    let e = cas.put_xorb(xorb(), b"x").unwrap_err();
    assert!(!e.is_retryable());
    let text = e.to_string();
    assert!(
        text.contains("another origin") && text.contains(&foreign.url),
        "{text}"
    );
    assert!(!text.contains(secret), "{text}");

    // A same-origin redirect is followed, with the credential.
    assert!(cas
        .put_xorb(XorbHash::from_hex(XORB2).unwrap(), b"y")
        .unwrap());
    let landed = home
        .seen()
        .into_iter()
        .find(|s| s.path == "/landed")
        .unwrap();
    assert_eq!(
        landed.header("authorization"),
        Some(format!("Bearer {secret}").as_str())
    );
    assert_eq!(landed.body, b"y", "307 keeps the method and body");

    // A refresh route redirecting elsewhere: its credential stays home too.
    let refresher = RefreshingToken::new(format!("{}/refresh", home.url), None, 0)
        .with_authorization("Bearer refresh-credential-5678");
    let cas = fake_remote(&home.url, TokenSource::refreshing(refresher), 3);
    let e = cas.put_xorb(xorb(), b"x").unwrap_err();
    assert!(e.to_string().contains("another origin"), "{e}");

    // Presigned URLs carry no credential: their redirects are followed.
    let cas = fake_remote(&home.url, TokenSource::fixed(Some(secret.into())), 3);
    let first = cas
        .read_xorb_range(
            &xorb(),
            &FetchRange {
                chunks: 0..1,
                bytes: 0..=3,
                url: Some(format!("{}/presigned?s=sig", home.url)),
            },
        )
        .unwrap();
    assert_eq!(first, br#"{"wa"#);
    let seen = foreign.seen();
    assert_eq!(
        seen.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        vec!["/bytes"],
        "only the presigned fetch reached the other origin"
    );
    assert!(seen[0].header("authorization").is_none());
}

fn sent_xorb_bytes(server: &TestServer) -> u64 {
    server.health("sent_xorb_bytes")
}

#[test]
fn a_client_on_the_stores_machine_reads_xorb_ranges_from_its_files() {
    let server = common::server::start();
    let data = common::splitmix64(0x10ca1, 2 << 20);
    let stored = upload(
        &remote(&server, WRITE_TOKEN),
        &data[..],
        &UploadOptions::default(),
    )
    .unwrap();

    let mut settings = config(server.url(), TokenSource::fixed(Some(READ_TOKEN.into())));
    settings.local_xorbs = Some(local_xorbs(server.store_dir()));
    let local = RemoteCas::new(settings).unwrap();
    assert!(download(&local, &stored.file_hash, None) == data);
    assert_eq!(
        sent_xorb_bytes(&server),
        0,
        "every range came from the files"
    );

    // A store whose files are elsewhere: the ranges come over HTTP.
    let mut settings = config(server.url(), TokenSource::fixed(Some(READ_TOKEN.into())));
    settings.local_xorbs = Some(local_xorbs(
        std::env::temp_dir().join("no-such-git-xet-store"),
    ));
    let elsewhere = RemoteCas::new(settings).unwrap();
    assert!(download(&elsewhere, &stored.file_hash, None) == data);
    assert!(sent_xorb_bytes(&server) > 0);
}

#[test]
fn upload_progress_follows_the_wire_on_a_slow_link() {
    use xet_client::pipeline::upload::{upload_with_progress, UploadOptions, UploadProgress};
    let s = common::server::start();
    let addr: std::net::SocketAddr = s.url().trim_start_matches("http://").parse().unwrap();
    // 16 MB/s up: a 40 MiB file (one xorb) takes about 2.6 s to go out.
    let slow = common::throttle::Throttle::start(addr, 16_000_000);
    let cas = RemoteCas::new(config(
        &slow.url(),
        TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap();
    let data = common::splitmix64(77, 40 << 20);
    let mut seen: Vec<u64> = Vec::new();
    let summary = upload_with_progress(
        &cas,
        &data[..],
        &UploadOptions::default(),
        &mut |p: UploadProgress| seen.push(p.bytes_done),
    )
    .unwrap();
    assert_eq!(summary.new_xorbs, 1, "one xorb");
    // The counter moves while the one xorb goes out, in steps far smaller than the xorb,
    // and never backwards.
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    let mut steps: Vec<u64> = seen
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&d| d > 0)
        .collect();
    steps.sort_unstable();
    assert!(steps.len() >= 10, "{} steps: {seen:?}", steps.len());
    // The first step is the largest: the kernel's socket buffers on both sides of the
    // throttle take the first several MiB at once (8.2-8.7 MiB seen, with TCP autotuning).
    // Progress counted when the xorb is handed over would jump by all 40 MiB at once.
    let largest = *steps.last().unwrap();
    assert!(largest < 16 << 20, "a jump of {largest} bytes: {seen:?}");
    assert_eq!(*seen.last().unwrap(), data.len() as u64);
}

/// The xorb files of the directory store at `root`.
fn local_xorbs(root: std::path::PathBuf) -> xet_client::LocalXorbs {
    xet_client::LocalXorbs::new(move |xorb| xet_store::backend::xorb_path(&root, xorb))
}
