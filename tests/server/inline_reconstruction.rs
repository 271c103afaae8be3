//! `git xet serve`'s batch answer carries the reconstruction of small objects in the download
//! action (`X-Xet-Reconstruction`), and the agent uses it instead of asking the CAS server:
//!
//! - the header is there for objects up to 4 MiB offered the `xet` transfer, and parses to a
//!   plan of the object; not for larger objects, nor for basic transfers;
//! - an agent whose action names a CAS server that is down still downloads the object through
//!   the inline plan's presigned URLs (so it did not ask the CAS for the plan);
//! - a stale inline plan (its URLs refused) or a garbled one falls back to asking the CAS
//!   server, and the download succeeds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use serde_json::{json, Value};

use crate::common;

use common::agent::{run_agent, Sandbox};
use common::server::{TestServer, READ_TOKEN, WRITE_TOKEN};

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::new()
}

fn endpoint(server: &TestServer) -> String {
    format!("{}/team/models.git/info/lfs", server.url())
}

/// Stores `bytes` through the basic LFS route; its oid.
fn put(server: &TestServer, bytes: &[u8]) -> String {
    let oid = common::sha256_hex(bytes);
    let r = client()
        .put(format!("{}/objects/{oid}", endpoint(server)))
        .header("Authorization", format!("Bearer {WRITE_TOKEN}"))
        .body(bytes.to_vec())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text());
    oid
}

/// The batch download answer for `objects` (oid, size), offering `transfers`.
fn batch(server: &TestServer, objects: &[(&str, usize)], transfers: &[&str]) -> Value {
    let objects: Vec<Value> = objects
        .iter()
        .map(|(oid, size)| json!({"oid": oid, "size": size}))
        .collect();
    let r = client()
        .post(format!("{}/objects/batch", endpoint(server)))
        .header("Authorization", format!("Bearer {READ_TOKEN}"))
        .header("Accept", "application/vnd.git-lfs+json")
        .header("Content-Type", "application/vnd.git-lfs+json")
        .body(
            json!({"operation": "download", "transfers": transfers, "objects": objects})
                .to_string(),
        )
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().unwrap()
}

/// Downloads `oid` with `action` through `git-xet transfer` in `s`; the file's bytes, or the
/// error message.
fn download(s: &Sandbox, oid: &str, size: usize, action: &Value) -> Result<Vec<u8>, String> {
    let _ = std::fs::remove_file(s.dir.path().join("agent.log"));
    let mut cmd = s.command(env!("CARGO_BIN_EXE_git-xet"));
    // A dead CAS fails fast instead of being retried for minutes.
    cmd.arg("transfer").env("GIT_XET_RETRY_SECS", "1");
    let lines = [
        r#"{"event":"init","operation":"download","remote":"origin","concurrent":true,"concurrenttransfers":1}"#.to_string(),
        json!({"event": "download", "oid": oid, "size": size, "action": action}).to_string(),
        r#"{"event":"terminate"}"#.to_string(),
    ];
    let run = run_agent(cmd, (lines.join("\n") + "\n").into_bytes());
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let done = run.completes();
    match done[0]["path"].as_str() {
        Some(path) => Ok(std::fs::read(path).unwrap()),
        None => Err(done[0]["error"]["message"].to_string()),
    }
}

/// A port nothing listens on.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

#[test]
fn small_objects_come_with_their_plan_and_the_agent_needs_no_cas_request() {
    let server = common::server::start();
    let small = common::splitmix64(7, 300_000);
    let large = common::splitmix64(8, 5 << 20);
    let (small_oid, large_oid) = (put(&server, &small), put(&server, &large));

    let answer = batch(
        &server,
        &[(&small_oid, small.len()), (&large_oid, large.len())],
        &["xet-download", "xet", "basic"],
    );
    assert_eq!(answer["transfer"], "xet-download");
    let small_action = &answer["objects"][0]["actions"]["download"];
    let header = small_action["header"]["X-Xet-Reconstruction"]
        .as_str()
        .expect("a small object's action carries its plan");
    let plan = serde_json::from_str::<xet_protocol::wire::ReconstructionV2>(header)
        .unwrap()
        .into_plan(None)
        .unwrap();
    assert_eq!(plan.file_size, small.len() as u64);
    assert!(!plan.terms.is_empty());
    let large_header = &answer["objects"][1]["actions"]["download"]["header"];
    assert!(large_header.get("X-Xet-Hash").is_some());
    assert!(
        large_header.get("X-Xet-Reconstruction").is_none(),
        "objects over 4 MiB are left to the CAS route"
    );
    let basic = batch(&server, &[(&small_oid, small.len())], &["basic"]);
    assert!(basic["objects"][0]["actions"]["download"]["header"]
        .get("X-Xet-Reconstruction")
        .is_none());

    let s = Sandbox::new();
    // The CAS named by the action is down: only the inline plan's presigned URLs can serve.
    let mut cas_down = small_action.clone();
    cas_down["header"]["X-Xet-Cas-Url"] = dead_url().into();
    assert!(download(&s, &small_oid, small.len(), &cas_down).unwrap() == small);
    // Without the plan, the same action fails: the agent had to ask the dead CAS.
    let mut no_plan = cas_down.clone();
    no_plan["header"]
        .as_object_mut()
        .unwrap()
        .remove("X-Xet-Reconstruction");
    let e = download(&s, &small_oid, small.len(), &no_plan).unwrap_err();
    assert!(e.contains("reconstruction"), "{e}");
}

#[test]
fn a_stale_or_garbled_inline_plan_falls_back_to_the_cas_server() {
    let server = common::server::start();
    let data = common::splitmix64(9, 200_000);
    let oid = put(&server, &data);
    let answer = batch(&server, &[(&oid, data.len())], &["xet-download"]);
    let action = &answer["objects"][0]["actions"]["download"];
    let header = action["header"]["X-Xet-Reconstruction"].as_str().unwrap();
    let s = Sandbox::new();

    // URLs whose signature no longer holds (as when they expired while git-lfs queued the
    // object): the first fetch is refused, the agent asks for a new plan.
    let stale = header.replace("&s=", "&s=A");
    assert_ne!(stale, header, "the presigned URLs carry a signature");
    let mut stale_action = action.clone();
    stale_action["header"]["X-Xet-Reconstruction"] = stale.into();
    assert!(download(&s, &oid, data.len(), &stale_action).unwrap() == data);
    assert!(
        s.log().contains("asking the CAS server for a new plan"),
        "{}",
        s.log()
    );

    // Not JSON, or JSON of the wrong shape: ignored.
    for garbled in ["{not json", r#"{"terms":"none"}"#] {
        let mut bad = action.clone();
        bad["header"]["X-Xet-Reconstruction"] = garbled.into();
        assert!(download(&s, &oid, data.len(), &bad).unwrap() == data);
        assert!(
            s.log()
                .contains("ignoring the reconstruction sent with the action"),
            "{}",
            s.log()
        );
    }
}

#[test]
fn an_oid_lookup_brings_the_plan_of_a_small_file_along() {
    use xet_protocol::Endpoint as _;
    let server = common::server::start();
    let small = common::splitmix64(11, 150_000);
    let large = common::splitmix64(12, 5 << 20);
    let (small_oid, large_oid) = (put(&server, &small), put(&server, &large));
    let lookup = |oid: &str, query: &str| {
        client()
            .get(format!("{}/v1/lfs-files/{oid}{query}", server.url()))
            .header("Authorization", format!("Bearer {READ_TOKEN}"))
            .send()
            .unwrap()
    };
    let with: Value = lookup(&small_oid, "?reconstruction=v2").json().unwrap();
    let plan = serde_json::from_value::<xet_protocol::wire::ReconstructionV2>(
        with["reconstruction"].clone(),
    )
    .expect("the plan comes along")
    .into_plan(None)
    .unwrap();
    assert_eq!(plan.file_size, small.len() as u64);
    let without: Value = lookup(&small_oid, "").json().unwrap();
    assert!(without.get("reconstruction").is_none(), "{without}");
    let large_answer: Value = lookup(&large_oid, "?reconstruction=v2").json().unwrap();
    assert!(large_answer.get("reconstruction").is_none());
    assert_eq!(lookup(&small_oid, "?reconstruction=v9").status(), 400);

    // The client keeps the plan for the download that follows: it needs no server for it.
    let mut config = xet_client::RemoteConfig::new(
        server.url(),
        xet_client::TokenSource::fixed(Some(READ_TOKEN.into())),
    );
    config.retry = xet_client::RetryPolicy::quick(1);
    let remote = xet_client::RemoteCas::new(config).unwrap();
    let oid = xet_format::LfsOid::from_hex(&small_oid).unwrap();
    let (file, size) = remote.locate_oid(&oid).unwrap().unwrap();
    assert_eq!(size, small.len() as u64);
    drop(server);
    let kept = remote.reconstruction(&file, None).unwrap().unwrap();
    assert_eq!((kept.file_size, &kept.terms), (plan.file_size, &plan.terms));
    // Once: the next request for it goes to the (stopped) server.
    assert!(remote.reconstruction(&file, None).is_err());
}
