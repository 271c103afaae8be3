//! The HTTP CAS client ([`RemoteCas`]) against scripted fake servers on loopback
//! (`xet_client::fake_server`): retries and their limits, `Retry-After`, connection errors,
//! token refresh and the 401 rule, presigned fetches without credentials, the v2 → v1
//! fallback, final statuses with the server's code, redirects that never carry credentials.
//! Fast, and with no server of this project: the tests against a real `git xet serve` are
//! git-xet's (tests/store/remote_cas.rs).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xet_client::fake_server::{reply, Fake, Reply};
use xet_client::{RefreshingToken, RemoteCas, RemoteConfig, RetryPolicy, TokenSource};
use xet_format::{FileHash, LfsOid, XorbHash};
use xet_protocol::util::now_unix;
use xet_protocol::wire::ErrorCode;
use xet_protocol::FetchRange;
use xet_protocol::{CasTarget, Endpoint, TargetError, XorbSource};

fn config(url: &str, token: TokenSource) -> RemoteConfig {
    let mut c = RemoteConfig::new(url, token);
    c.retry = RetryPolicy::quick(3);
    c.timeout = Duration::from_secs(30);
    c
}

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
    xet_client::fake_server::refreshing_cas(Duration::ZERO)
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
