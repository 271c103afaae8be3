//! The Git LFS side of `git xet serve` over HTTP: batch API negotiation (xet and basic),
//! token refresh, per-object errors, refusals, and basic PUT/GET through the upload pipeline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::io::{Read as _, Write as _};

use base64::Engine as _;
use git_xet::server::auth::{now_unix, Authority, Scope};
use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};
use xet_format::LfsOid;

use crate::common;

use common::server::{TestServer, READ_TOKEN, WRITE_TOKEN};

const LFS: &str = "application/vnd.git-lfs+json";
const REPO: &str = "team/models.git";

fn client() -> Client {
    Client::new()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// What git sends from a credential helper: Basic with the token as password.
fn basic(token: &str) -> String {
    let creds = base64::engine::general_purpose::STANDARD.encode(format!("git:{token}"));
    format!("Basic {creds}")
}

fn endpoint(server: &TestServer) -> String {
    format!("{}/{REPO}/info/lfs", server.url())
}

fn batch_raw(server: &TestServer, auth: Option<&str>, body: &str) -> Response {
    let mut req = client()
        .post(format!("{}/objects/batch", endpoint(server)))
        .header("Accept", LFS)
        .header("Content-Type", format!("{LFS}; charset=utf-8"))
        .body(body.to_string());
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    req.send().unwrap()
}

fn batch(server: &TestServer, auth: &str, body: Value) -> Value {
    let r = batch_raw(server, Some(auth), &body.to_string());
    assert_eq!(r.status(), 200, "{:?}", r.text());
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with(LFS));
    r.json().unwrap()
}

fn data(seed: u64, n: usize) -> Vec<u8> {
    common::splitmix64(seed, n)
}

fn oid_of(bytes: &[u8]) -> String {
    LfsOid::of(bytes).to_hex()
}

/// The server's signing key, to check the tokens it issues.
fn authority(server: &TestServer) -> Authority {
    let key = Authority::load_or_create_key(&server.store_dir().join("server.key")).unwrap();
    Authority::new(vec![], key)
}

/// Uploads `bytes` through the basic transfer: batch, PUT with the action's header, verify.
fn basic_upload(server: &TestServer, bytes: &[u8]) -> Value {
    let oid = oid_of(bytes);
    let answer = batch(
        server,
        &basic(WRITE_TOKEN),
        json!({"operation": "upload", "objects": [{"oid": oid, "size": bytes.len()}]}),
    );
    assert_eq!(answer["transfer"], "basic");
    let object = &answer["objects"][0];
    let upload = &object["actions"]["upload"];
    let put = client()
        .put(upload["href"].as_str().unwrap())
        .header(
            "Authorization",
            upload["header"]["Authorization"].as_str().unwrap(),
        )
        .body(bytes.to_vec())
        .send()
        .unwrap();
    assert_eq!(put.status(), 200, "{:?}", put.text());
    let verify = &object["actions"]["verify"];
    let v = client()
        .post(verify["href"].as_str().unwrap())
        .header(
            "Authorization",
            verify["header"]["Authorization"].as_str().unwrap(),
        )
        .header("Content-Type", LFS)
        .body(json!({"oid": oid, "size": bytes.len()}).to_string())
        .send()
        .unwrap();
    assert_eq!(v.status(), 200, "{:?}", v.text());
    answer
}

fn files_registered(server: &TestServer) -> u64 {
    let h: Value = client()
        .get(format!("{}/health", server.url()))
        .send()
        .unwrap()
        .json()
        .unwrap();
    h["files"].as_u64().unwrap()
}

fn stored_xorb_bytes(server: &TestServer) -> u64 {
    fn walk(p: &std::path::Path) -> u64 {
        std::fs::read_dir(p)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| {
                        let m = e.metadata().unwrap();
                        if m.is_dir() {
                            walk(&e.path())
                        } else {
                            m.len()
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(&server.store_dir().join("xorbs"))
}

#[test]
fn xet_negotiation_shape_headers_and_tokens() {
    let server = common::server::start();
    let bytes = data(1, 100_000);
    let oid = oid_of(&bytes);
    let before = now_unix();
    let answer = batch(
        &server,
        &basic(WRITE_TOKEN),
        json!({
            "operation": "upload",
            "transfers": ["lfs-standalone-file", "basic", "xet", "ssh"],
            "ref": {"name": "refs/heads/main"},
            "objects": [{"oid": oid, "size": bytes.len()}],
            "hash_algo": "sha256",
        }),
    );
    assert_eq!(answer["transfer"], "xet");
    assert_eq!(answer["hash_algo"], "sha256");
    let object = &answer["objects"][0];
    assert_eq!(object["oid"], oid.as_str());
    assert_eq!(object["size"], bytes.len());
    assert_eq!(object["authenticated"], true);
    let actions = object["actions"].as_object().unwrap();
    assert_eq!(actions.keys().collect::<Vec<_>>(), ["upload"]);
    let upload = &actions["upload"];
    assert_eq!(
        upload["href"],
        format!("{}/xet-token/write", endpoint(&server))
    );
    assert_eq!(upload["expires_in"], 900);
    let header = upload["header"].as_object().unwrap();
    assert_eq!(
        header.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "X-Xet-Access-Token",
            "X-Xet-Cas-Url",
            "X-Xet-Session-Id",
            "X-Xet-Token-Expiration"
        ]
    );
    assert_eq!(header["X-Xet-Cas-Url"], server.url());
    let exp: u64 = header["X-Xet-Token-Expiration"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((before + 900..=now_unix() + 900).contains(&exp));
    let token = header["X-Xet-Access-Token"].as_str().unwrap();
    let grant = authority(&server).verify(token, now_unix()).unwrap();
    assert_eq!(
        (grant.scope, grant.expires, grant.repo.as_str()),
        (Scope::Write, Some(exp), "team/models")
    );

    // The issued token is a working credential for this repository's object routes (the
    // same check the CAS API applies), and for no other repository.
    let put = client()
        .put(format!("{}/objects/{oid}", endpoint(&server)))
        .header("Authorization", bearer(token))
        .body(bytes.clone())
        .send()
        .unwrap();
    assert_eq!(put.status(), 200, "{:?}", put.text());
    let other = client()
        .put(format!("{}/other.git/info/lfs/objects/{oid}", server.url()))
        .header("Authorization", bearer(token))
        .body(bytes.clone())
        .send()
        .unwrap();
    assert_eq!(other.status(), 403);
    // It is not a git credential: the batch API refuses it.
    let refused = batch_raw(
        &server,
        Some(&bearer(token)),
        &json!({"operation": "download", "objects": []}).to_string(),
    );
    assert_eq!(refused.status(), 403);

    // Download negotiation: a read token and the Xet hash of the file.
    let answer = batch(
        &server,
        &bearer(READ_TOKEN),
        json!({
            "operation": "download",
            "transfers": ["xet", "basic"],
            "objects": [{"oid": oid, "size": bytes.len()}],
        }),
    );
    // A client offering only `xet` may have an agent that cannot download (Hugging Face's
    // uploads only): it is answered basic, as the Hub answers downloads.
    assert_eq!(answer["transfer"], "basic");
    assert!(answer["objects"][0]["actions"]["download"]["href"]
        .as_str()
        .unwrap()
        .contains("/objects/"));
    let answer = batch(
        &server,
        &bearer(READ_TOKEN),
        json!({
            "operation": "download",
            "transfers": ["xet-download", "xet", "basic"],
            "objects": [{"oid": oid, "size": bytes.len()}],
        }),
    );
    assert_eq!(answer["transfer"], "xet-download");
    let download = &answer["objects"][0]["actions"]["download"];
    assert_eq!(
        download["href"],
        format!("{}/xet-token/read", endpoint(&server))
    );
    let expected = xet_client::pipeline::hasher::hash_bytes(&bytes, Default::default()).file_hash;
    assert_eq!(download["header"]["X-Xet-Hash"], expected.to_hex());
    let token = download["header"]["X-Xet-Access-Token"].as_str().unwrap();
    let grant = authority(&server).verify(token, now_unix()).unwrap();
    assert_eq!(grant.scope, Scope::Read);
}

#[test]
fn token_refresh_route() {
    let server = common::server::start();
    let get = |path: &str, auth: Option<&str>| {
        let mut req = client().get(format!("{}/xet-token/{path}", endpoint(&server)));
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        req.send().unwrap()
    };
    let r = get("write", Some(&basic(WRITE_TOKEN)));
    assert_eq!(r.status(), 200);
    let body: Value = r.json().unwrap();
    assert_eq!(body["casUrl"], server.url());
    let exp = body["exp"].as_u64().unwrap();
    assert!(exp > now_unix() + 800);
    let grant = authority(&server)
        .verify(body["accessToken"].as_str().unwrap(), now_unix())
        .unwrap();
    assert_eq!(
        (grant.scope, grant.repo.as_str()),
        (Scope::Write, "team/models")
    );

    let r = get("read", Some(&bearer(READ_TOKEN)));
    assert_eq!(r.status(), 200);
    let body: Value = r.json().unwrap();
    let grant = authority(&server)
        .verify(body["accessToken"].as_str().unwrap(), now_unix())
        .unwrap();
    assert_eq!(grant.scope, Scope::Read);

    let r = get("write", Some(&bearer(READ_TOKEN)));
    assert_eq!(r.status(), 403);
    let msg: Value = r.json().unwrap();
    assert!(
        msg["message"].as_str().unwrap().contains("read-only"),
        "{msg}"
    );

    let r = get("write", None);
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["lfs-authenticate"], "Basic realm=\"git-xet\"");

    // A CAS token cannot renew itself.
    let cas = body["accessToken"].as_str().unwrap();
    assert_eq!(get("read", Some(&bearer(cas))).status(), 403);
    assert_eq!(
        client()
            .post(format!("{}/xet-token/read", endpoint(&server)))
            .header("Authorization", bearer(READ_TOKEN))
            .send()
            .unwrap()
            .status(),
        405
    );
}

#[test]
fn stored_objects_get_no_upload_action_and_errors_are_per_object() {
    let server = common::server::start();
    let stored = data(2, 300_000);
    basic_upload(&server, &stored);
    let missing = oid_of(b"never uploaded");
    let answer = batch(
        &server,
        &bearer(WRITE_TOKEN),
        json!({
            "operation": "upload",
            "transfers": ["xet"],
            "objects": [
                {"oid": oid_of(&stored), "size": stored.len()},
                {"oid": missing, "size": 14},
                {"oid": oid_of(&stored).to_uppercase(), "size": 1},
                {"oid": "abc", "size": 1},
                {"oid": missing, "size": -1},
                {"oid": missing},
                {"size": 3},
                {"oid": oid_of(&stored), "size": 5},
                {"oid": oid_of(b""), "size": 0},
            ],
        }),
    );
    let objects = answer["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 9);
    assert!(objects[0].get("actions").is_none() && objects[0].get("error").is_none());
    assert!(objects[1]["actions"]["upload"].is_object());
    for (i, o) in objects.iter().enumerate().skip(2).take(6) {
        assert_eq!(o["error"]["code"], 422, "object {i}: {o}");
        assert!(o.get("actions").is_none());
    }
    assert!(objects[2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("lowercase"));
    assert_eq!(objects[4]["size"], -1, "sizes are echoed as sent");
    assert!(objects[7]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("stored with 300000 bytes"));
    assert!(
        objects[8].get("actions").is_none(),
        "the empty file is always stored"
    );

    let answer = batch(
        &server,
        &bearer(READ_TOKEN),
        json!({
            "operation": "download",
            "objects": [
                {"oid": missing, "size": 14},
                {"oid": oid_of(&stored), "size": stored.len()},
            ],
        }),
    );
    assert_eq!(answer["transfer"], "basic");
    assert_eq!(answer["objects"][0]["error"]["code"], 404);
    assert!(answer["objects"][0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&missing));
    assert!(answer["objects"][1]["actions"]["download"].is_object());
}

#[test]
fn refusals() {
    let server = common::server::start();
    let upload = json!({"operation": "upload", "objects": [{"oid": oid_of(b"x"), "size": 1}]});

    let r = batch_raw(&server, None, &upload.to_string());
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["lfs-authenticate"], "Basic realm=\"git-xet\"");
    assert_eq!(r.headers()["www-authenticate"], "Basic realm=\"git-xet\"");
    let body: Value = r.json().unwrap();
    assert!(body["message"].is_string() && body["request_id"].is_string());

    let r = batch_raw(
        &server,
        Some(&basic("not-a-configured-token")),
        &upload.to_string(),
    );
    assert_eq!(r.status(), 401);

    let r = batch_raw(&server, Some(&basic(READ_TOKEN)), &upload.to_string());
    assert_eq!(r.status(), 403);
    let body: Value = r.json().unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("write token"),
        "{body}"
    );

    let r = batch_raw(&server, Some(&bearer(WRITE_TOKEN)), "{not json");
    assert_eq!(r.status(), 400);
    for bad in [
        json!({"objects": []}),
        json!({"operation": "delete", "objects": []}),
        json!({"operation": "download"}),
        json!({"operation": "download", "objects": {"oid": "x"}}),
    ] {
        let r = batch_raw(&server, Some(&bearer(WRITE_TOKEN)), &bad.to_string());
        assert_eq!(r.status(), 422, "{bad}");
    }
    let r = batch_raw(
        &server,
        Some(&bearer(WRITE_TOKEN)),
        &json!({"operation": "download", "objects": [], "hash_algo": "sha512"}).to_string(),
    );
    assert_eq!(r.status(), 409);
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"oid": oid_of(format!("{i}").as_bytes()), "size": 1}))
        .collect();
    let r = batch_raw(
        &server,
        Some(&bearer(WRITE_TOKEN)),
        &json!({"operation": "download", "objects": many}).to_string(),
    );
    assert_eq!(r.status(), 413);
    let r = client()
        .post(format!("{}/objects/batch", endpoint(&server)))
        .header("Accept", "text/html")
        .header("Authorization", bearer(WRITE_TOKEN))
        .body(json!({"operation": "download", "objects": []}).to_string())
        .send()
        .unwrap();
    assert_eq!(r.status(), 406);

    // Bad repository paths, unknown LFS routes, locks.
    let r = client()
        .post(format!("{}/a/.git/info/lfs/objects/batch", server.url()))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client()
        .get(format!("{}/objects/batch", endpoint(&server)))
        .send()
        .unwrap();
    assert_eq!(r.status(), 405);
    let r = client()
        .post(format!("{}/locks/verify", endpoint(&server)))
        .header("Content-Type", LFS)
        .body(json!({"ref": {"name": "refs/heads/main"}}).to_string())
        .send()
        .unwrap();
    // Locking is implemented (tests/server/server_locks.rs): without a credential, git-lfs is asked
    // for one, as on the batch API.
    assert_eq!(r.status(), 401);
    assert!(r.headers().contains_key("lfs-authenticate"));
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with(LFS));
    let r = client()
        .put(format!("{}/objects/NOT-AN-OID", endpoint(&server)))
        .header("Authorization", bearer(WRITE_TOKEN))
        .body("x")
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client()
        .get(format!("{}/objects/{}", endpoint(&server), oid_of(b"x")))
        .header("Authorization", bearer(READ_TOKEN))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    // The rest of the server still answers as before.
    assert_eq!(
        client()
            .get(format!("{}/no/such/thing", server.url()))
            .send()
            .unwrap()
            .status(),
        404
    );
}

#[test]
fn basic_put_get_round_trip() {
    let server = common::server::start();
    // Several MB: the download streams chunk by chunk.
    let bytes = data(3, 5 << 20);
    let oid = oid_of(&bytes);
    basic_upload(&server, &bytes);
    assert_eq!(files_registered(&server), 1);
    let answer = batch(
        &server,
        &basic(READ_TOKEN),
        json!({"operation": "download", "transfers": ["basic"], "objects": [{"oid": oid, "size": bytes.len()}]}),
    );
    let download = &answer["objects"][0]["actions"]["download"];
    assert_eq!(
        download["href"],
        format!("{}/objects/{oid}", endpoint(&server))
    );
    let r = client()
        .get(download["href"].as_str().unwrap())
        .header(
            "Authorization",
            download["header"]["Authorization"].as_str().unwrap(),
        )
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-length"],
        bytes.len().to_string().as_str()
    );
    let got = r.bytes().unwrap();
    assert!(got[..] == bytes[..], "downloaded bytes differ");

    // The same through a git credential, and a second upload of the same object is a no-op.
    let r = client()
        .get(format!("{}/objects/{oid}", endpoint(&server)))
        .header("Authorization", basic(WRITE_TOKEN))
        .send()
        .unwrap();
    assert_eq!(r.bytes().unwrap().len(), bytes.len());
    let xorbs = stored_xorb_bytes(&server);
    let r = client()
        .put(format!("{}/objects/{oid}", endpoint(&server)))
        .header("Authorization", bearer(WRITE_TOKEN))
        .body(bytes.clone())
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(stored_xorb_bytes(&server), xorbs);

    // A read token cannot upload; downloads need a credential.
    let other = data(4, 1000);
    let r = client()
        .put(format!("{}/objects/{}", endpoint(&server), oid_of(&other)))
        .header("Authorization", bearer(READ_TOKEN))
        .body(other)
        .send()
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = client()
        .get(format!("{}/objects/{oid}", endpoint(&server)))
        .send()
        .unwrap();
    assert_eq!(r.status(), 401);

    // The empty object.
    let empty = oid_of(b"");
    let r = client()
        .get(format!("{}/objects/{empty}", endpoint(&server)))
        .header("Authorization", bearer(READ_TOKEN))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().unwrap().is_empty());
}

#[test]
fn wrong_sha256_or_size_is_refused_and_nothing_is_stored() {
    let server = common::server::start();
    let bytes = data(5, 2 << 20);
    let claimed = oid_of(b"some other content");
    let r = client()
        .put(format!("{}/objects/{claimed}", endpoint(&server)))
        .header("Authorization", bearer(WRITE_TOKEN))
        .body(bytes.clone())
        .send()
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: Value = r.json().unwrap();
    assert_eq!(body["error"], "oid_mismatch");
    assert!(
        body["message"].as_str().unwrap().contains(&claimed),
        "{body}"
    );
    assert_eq!(files_registered(&server), 0);
    assert_eq!(
        stored_xorb_bytes(&server),
        0,
        "no xorb of a refused upload is kept"
    );
    let staged = std::fs::read_dir(server.store_dir().join("tmp"))
        .unwrap()
        .count();
    assert_eq!(staged, 0, "staging files are removed");

    // A body shorter than its Content-Length (the client gives up half-way).
    let oid = oid_of(&bytes);
    let addr = server.server.addr;
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        tcp,
        "PUT /{REPO}/info/lfs/objects/{oid} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\nContent-Length: {}\r\n\r\n",
        bearer(WRITE_TOKEN),
        bytes.len()
    )
    .unwrap();
    tcp.write_all(&bytes[..bytes.len() / 2]).unwrap();
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("body_read_failed"), "{answer}");
    // Give the server a moment to finish with the aborted request.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(files_registered(&server), 0);
    assert_eq!(stored_xorb_bytes(&server), 0);

    // Then the right body for the right oid goes through.
    basic_upload(&server, &bytes);
    assert_eq!(files_registered(&server), 1);
    let r = client()
        .post(format!("{}/verify", endpoint(&server)))
        .header("Authorization", bearer(WRITE_TOKEN))
        .body(json!({"oid": oid, "size": 1}).to_string())
        .send()
        .unwrap();
    assert_eq!(r.status(), 422);
    let r = client()
        .post(format!("{}/verify", endpoint(&server)))
        .header("Authorization", bearer(WRITE_TOKEN))
        .body(json!({"oid": claimed, "size": 1}).to_string())
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn edited_file_upload_stores_only_the_change() {
    let server = common::server::start();
    let mut bytes = data(6, 8 << 20);
    basic_upload(&server, &bytes);
    let before = stored_xorb_bytes(&server);
    bytes[4 << 20] ^= 1;
    basic_upload(&server, &bytes);
    let grown = stored_xorb_bytes(&server) - before;
    assert!(
        grown < 1 << 20,
        "the store grew by {grown} bytes for a one-byte edit"
    );
    assert_eq!(files_registered(&server), 2);
}
