//! The server's frame: startup, health, JSON errors with request ids, the `serve` binary's
//! start-up line, configuration errors and bounded lifetime.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::server::WRITE_TOKEN;

#[test]
fn health_and_json_errors() {
    let server = common::server::start();
    let http = reqwest::blocking::Client::new();

    let health = http.get(format!("{}/health", server.url())).send().unwrap();
    assert_eq!(health.status(), 200);
    assert!(health.headers().contains_key("x-request-id"));
    let body: serde_json::Value = health.json().unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["files"], 0);

    let missing = http
        .get(format!("{}/no/such/thing", server.url()))
        .send()
        .unwrap();
    assert_eq!(missing.status(), 404);
    let id = missing.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: serde_json::Value = missing.json().unwrap();
    assert_eq!(body["error"], "not_found");
    assert_eq!(
        body["request_id"],
        id.as_str(),
        "the error body names the request"
    );
    server.server.stop().unwrap();
}

#[test]
fn serve_binary_starts_announces_and_stops_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_git-xet"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--max-lifetime",
            "3",
            "--data",
        ])
        .arg(dir.path().join("store"))
        .env("GIT_XET_TOKEN", WRITE_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("start-up line")
        .to_string();
    let health = reqwest::blocking::get(format!("{url}/health")).unwrap();
    assert_eq!(health.status(), 200);
    let status = child.wait().unwrap();
    assert!(status.success(), "stops cleanly at its maximum lifetime");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(dir.path().join("store/STORE-VERSION").exists());
    assert!(dir.path().join("store/server.key").exists());
}

#[test]
fn serve_refuses_to_start_without_tokens_or_with_short_ones() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_git-xet"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--max-lifetime",
                "1",
                "--data",
            ])
            .arg(dir.path().join("store"))
            .args(args)
            .env_remove("GIT_XET_TOKEN")
            .env_remove("GIT_XET_READ_TOKEN")
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tokens configured"));
    let out = run(&["--token", "short"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16 characters"));
}

/// The value of the sample `name` (with its labels, as printed) in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn metrics_count_requests_traffic_and_what_deduplication_saved() {
    use xet_client::pipeline::upload::{upload, UploadOptions};
    use xet_client::{RemoteCas, RemoteConfig, TokenSource};

    let server = common::server::start();
    let http = reqwest::blocking::Client::new();
    for _ in 0..2 {
        assert_eq!(
            http.get(format!("{}/health", server.url()))
                .send()
                .unwrap()
                .status(),
            200
        );
    }
    let ready = http.get(format!("{}/ready", server.url())).send().unwrap();
    assert_eq!(ready.status(), 200);
    let missing = http.get(format!("{}/nothing/here", server.url())).send();
    assert_eq!(missing.unwrap().status(), 404);
    // A made-up method adds no series of its own.
    let brew = reqwest::Method::from_bytes(b"BREW").unwrap();
    let odd = http
        .request(brew, format!("{}/health", server.url()))
        .send();
    assert_eq!(odd.unwrap().status(), 405);
    // Two unauthenticated batch requests under two repositories.
    for repo in ["team-a/models.git", "team-b/data"] {
        let batch = http
            .post(format!("{}/{repo}/info/lfs/objects/batch", server.url()))
            .header("Accept", "application/vnd.git-lfs+json")
            .body(r#"{"operation":"download","objects":[]}"#)
            .send()
            .unwrap();
        assert_eq!(batch.status(), 401);
    }

    // The same 3 MiB file twice: stored once, registered once.
    let cas = RemoteCas::new(RemoteConfig::new(
        server.url(),
        TokenSource::fixed(Some(WRITE_TOKEN.into())),
    ))
    .unwrap();
    let data = common::splitmix64(77, 3 << 20);
    let first = upload(&cas, &data[..], &UploadOptions::default()).unwrap();
    upload(&cas, &data[..], &UploadOptions::default()).unwrap();

    let response = http
        .get(format!("{}/metrics", server.url()))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = response.text().unwrap();
    let get =
        |name: &str| sample(&text, name).unwrap_or_else(|| panic!("no sample {name} in:\n{text}"));
    assert_eq!(
        get(r#"gitxet_http_requests_total{route="/health",method="GET",status="200"}"#),
        2.0
    );
    // Paths that are no route are one label, whatever they are.
    assert_eq!(
        get(r#"gitxet_http_requests_total{route="/{*path}",method="GET",status="404"}"#),
        1.0
    );
    // LFS requests under any repository are labelled by their LFS route.
    assert_eq!(
        get(
            r#"gitxet_http_requests_total{route="/{repo}/info/lfs/objects/batch",method="POST",status="401"}"#
        ),
        2.0
    );
    assert!(!text.contains("team-a"), "no repository in a label");
    assert_eq!(
        get(r#"gitxet_http_requests_total{route="/health",method="other",status="405"}"#),
        1.0
    );
    assert!(!text.contains("BREW"));
    assert_eq!(
        get(r#"gitxet_http_request_duration_seconds_count{route="/health"}"#),
        3.0
    );
    assert_eq!(get("gitxet_files"), 1.0);
    assert_eq!(
        get("gitxet_catch_up_age_seconds"),
        0.0,
        "no other node on a directory"
    );
    assert_eq!(get("gitxet_gc_running_seconds"), 0.0, "no collection runs");
    assert_eq!(get("gitxet_gc_last_end_timestamp_seconds"), 0.0);
    assert!(get("gitxet_data_free_bytes") > 0.0);
    assert_eq!(get("gitxet_registered_file_bytes_total"), data.len() as f64);
    let stored = get("gitxet_stored_xorb_bytes_total");
    assert!(stored > 0.0 && stored < data.len() as f64 * 1.1, "{stored}");
    assert_eq!(
        get("gitxet_received_xorb_bytes_total"),
        stored,
        "the second upload sent no xorb"
    );
    assert!(first.new_xorbs >= 1);
    assert_eq!(
        get(r#"gitxet_storage_errors_total{operation="request"}"#),
        0.0
    );
    server.server.stop().unwrap();
}
