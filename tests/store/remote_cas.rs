//! The HTTP CAS client (`xet_client::remote`) against a real `git xet serve` (upload, plan,
//! download whole and ranged, global dedup, LFS oid lookup, token scopes, token refresh
//! through the server's own route). Its behaviour against scripted fake servers (retries,
//! token refresh, presigned fetches, the v2 → v1 fallback, final statuses) is tested in
//! xet-client itself (crates/xet-client/tests/remote.rs).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use std::time::Duration;

use common::server::{TestServer, READ_TOKEN, WRITE_TOKEN};
use xet_client::fake_server::{Fake, Reply, FAKE_LENGTH};
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
// A fake presigned URL beside the real server (the other fake-server tests are xet-client's,
// crates/xet-client/tests/remote.rs).

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
    let cas = RemoteCas::new(config(&fake.url, TokenSource::fixed(None))).unwrap();
    let xorb = XorbHash::from_bytes([7; 32]);
    let range = FetchRange {
        chunks: 0..1,
        bytes: 0..=(body.len() as u64 - 1),
        url: Some(format!("{}/xorb", fake.url)),
    };
    // Streamed: the pieces of the second answer start again at offset 0.
    let mut got = Vec::new();
    let mut restarts = 0;
    cas.stream_xorb_range(&xorb, &range, &mut |at, piece| {
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
    assert!(cas.read_xorb_range(&xorb, &range).unwrap() == body);
    assert_eq!(fake.seen().len(), 4);
    // A sink that stops ends the read without an error and without a retry.
    let mut pieces = 0;
    cas.stream_xorb_range(&xorb, &range, &mut |_, _| {
        pieces += 1;
        std::ops::ControlFlow::Break(())
    })
    .unwrap();
    assert_eq!((pieces, fake.seen().len()), (1, 5));
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
// Reading xorbs beside the store, progress on a slow link.

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
    // throttle take the first several MiB at once (8.2-8.7 MiB seen, with TCP autotuning),
    // and the counter is read on a tick, so a thread kept off the cores by a busy machine
    // sees more at once (22.5 MB seen while the whole suite ran on two cores). Progress
    // counted when the xorb is handed over would jump by all 40 MiB at once.
    let largest = *steps.last().unwrap();
    assert!(largest < 30 << 20, "a jump of {largest} bytes: {seen:?}");
    assert_eq!(*seen.last().unwrap(), data.len() as u64);
}

/// The xorb files of the directory store at `root`.
fn local_xorbs(root: std::path::PathBuf) -> xet_client::LocalXorbs {
    xet_client::LocalXorbs::new(move |xorb| xet_store::backend::xorb_path(&root, xorb))
}
