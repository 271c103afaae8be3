//! The async client ([`AsyncRemoteCas`]) inside async programs: its operations run on the
//! caller's tokio runtime (multi-threaded, or one thread shared with other tasks), their
//! futures are `Send` (spawned here), retries wait without holding a worker, and concurrent
//! tasks share one token refresh. Against scripted fake servers on loopback
//! (`xet_client::fake_server`); the blocking [`RemoteCas`](xet_client::RemoteCas) over it is
//! tests/remote.rs's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xet_client::fake_server::{refreshing_cas, reply, Fake, Reply};
use xet_client::{AsyncRemoteCas, RefreshingToken, RemoteConfig, RetryPolicy, TokenSource};
use xet_format::{FileHash, XorbHash};
use xet_protocol::util::now_unix;
use xet_protocol::FetchRange;

const XORB: &str = "0101010101010101020202020202020203030303030303030404040404040404";

fn xorb() -> XorbHash {
    XorbHash::from_hex(XORB).unwrap()
}

fn client(url: &str, token: TokenSource, retry: RetryPolicy) -> Arc<AsyncRemoteCas> {
    let mut c = RemoteConfig::new(url, token);
    c.retry = retry;
    c.timeout = Duration::from_secs(30);
    Arc::new(AsyncRemoteCas::new(c).unwrap())
}

/// A CAS with one file of 10 bytes in one xorb, whose range is served at `/xorb`.
fn small_cas() -> Fake {
    let body: Vec<u8> = (0..100u8).collect();
    Fake::start(move |req| {
        let path = req.path.as_str();
        if path.starts_with("/v1/xorbs/default/") {
            reply(200, r#"{"was_inserted":true}"#)
        } else if path == "/v1/shards" {
            reply(200, r#"{"result":1}"#)
        } else if path.starts_with("/v2/reconstructions/") {
            let base = format!("http://{}", req.header("host").unwrap());
            reply(
                200,
                &format!(
                    r#"{{"offset_into_first_range":0,
                        "terms":[{{"hash":"{XORB}","unpacked_length":10,"range":{{"start":0,"end":1}}}}],
                        "xorbs":{{"{XORB}":[{{"chunks":{{"start":0,"end":1}},
                            "url":"{base}/xorb?sig=s",
                            "ranges":[{{"chunks":{{"start":0,"end":1}},"bytes":{{"start":10,"end":19}}}}]}}]}}}}"#
                ),
            )
        } else if path.starts_with("/xorb") {
            Reply {
                status: 206,
                headers: vec![("Content-Range", "bytes 10-19/100".into())],
                body: body[10..20].to_vec(),
            }
        } else {
            reply(404, "")
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_run_on_the_callers_runtime_and_can_be_spawned() {
    let fake = small_cas();
    let cas = client(
        &fake.url,
        TokenSource::fixed(Some("tok".into())),
        RetryPolicy::quick(2),
    );
    // Spawned: the futures are Send, and several run at once on the runtime's workers.
    let mut tasks = Vec::new();
    for i in 0..4u8 {
        let cas = Arc::clone(&cas);
        tasks.push(tokio::spawn(async move {
            cas.put_xorb(xorb(), vec![i; 64], None).await
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap().unwrap().inserted);
    }
    let registered = {
        let cas = Arc::clone(&cas);
        tokio::spawn(async move { cas.register_shard(b"not checked by the fake").await })
    };
    registered.await.unwrap().unwrap();

    let file = FileHash::from_bytes([7; 32]);
    let plan = {
        let cas = Arc::clone(&cas);
        tokio::spawn(async move { cas.reconstruction(&file, None).await })
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    assert_eq!(plan.terms.len(), 1);
    let range: FetchRange = plan.fetch[0].1[0].clone();
    let bytes = {
        let cas = Arc::clone(&cas);
        tokio::spawn(async move { cas.read_xorb_range(&xorb(), &range).await })
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(bytes, (10..20u8).collect::<Vec<u8>>());

    let seen = fake.seen();
    let uploads = seen.iter().filter(|s| s.path.starts_with("/v1/xorbs/"));
    assert_eq!(uploads.count(), 4);
    let fetch = seen.iter().find(|s| s.path.starts_with("/xorb")).unwrap();
    assert_eq!(fetch.header("range"), Some("bytes=10-19"));
    assert!(
        fetch.header("authorization").is_none(),
        "presigned fetches carry no credential"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_retry_waits_without_holding_the_thread_other_tasks_run_on() {
    // 503 with Retry-After: 1 twice, then the answer: about two seconds of waiting, during
    // which a ticker on the same (only) thread must keep ticking.
    let mut n = 0;
    let fake = Fake::start(move |_| {
        n += 1;
        if n <= 2 {
            Reply {
                status: 503,
                headers: vec![("Retry-After", "1".into())],
                body: br#"{"error":"busy","message":"restarting"}"#.to_vec(),
            }
        } else {
            reply(200, r#"{"was_inserted":false}"#)
        }
    });
    let mut retry = RetryPolicy::quick(3);
    retry.max_retry_after = Duration::from_secs(2);
    let cas = client(&fake.url, TokenSource::None, retry);
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let ticks = Arc::clone(&ticks);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let put = cas.put_xorb(xorb(), b"body".to_vec(), None).await.unwrap();
    ticker.abort();
    assert!(!put.inserted);
    assert_eq!(fake.seen().len(), 3);
    let ticked = ticks.load(Ordering::Relaxed);
    // A blocking sleep would have let the ticker run only between requests (a handful of
    // ticks at most); 2 s of async waiting gives it dozens.
    assert!(
        ticked >= 15,
        "the ticker ran {ticked} times during the retries"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_share_one_token_refresh() {
    // The refresh is slow enough that every task finds it under way.
    let fake = refreshing_cas(Duration::from_millis(200));
    let token = Arc::new(RefreshingToken::new(
        format!("{}/refresh", fake.url),
        Some("stale".into()),
        now_unix() - 1,
    ));
    let cas = client(
        &fake.url,
        TokenSource::Refreshing(Arc::clone(&token)),
        RetryPolicy::quick(2),
    );
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let cas = Arc::clone(&cas);
            tokio::spawn(async move { cas.put_xorb(xorb(), b"x".to_vec(), None).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(token.refreshes(), 1);
    let paths = fake.paths();
    assert_eq!(
        paths.iter().filter(|p| *p == "/refresh").count(),
        1,
        "{paths:?}"
    );
    assert_eq!(paths.len(), 7, "{paths:?}");
}
