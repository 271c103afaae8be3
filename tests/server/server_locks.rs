//! The Git LFS File Locking API of `git xet serve`: over HTTP (shapes, statuses, owners,
//! pagination, limits, bad input, repositories kept apart, restarts), and with real `git lfs
//! lock`, `locks`, `unlock` and pushes refused by git-lfs's lock verification, for two users.
//!
//! Every server listens on 127.0.0.1 and stops by itself; every git command runs under a
//! timeout in an isolated environment (tests/common/git.rs).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::io::{Read as _, Write as _};
use std::path::Path;
use xet_test_tools::needs;

use base64::Engine as _;
use git_xet::server::auth::{Scope, ServerToken};
use git_xet::server::lfs::locks::{LockLimits, MAX_BODY};
use git_xet::server::ServeConfig;
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::{json, Value};

use crate::common;

use common::git::{GitEnv, Output};
use common::server::{TestServer, READ_TOKEN, WRITE_TOKEN};

const LFS: &str = "application/vnd.git-lfs+json";
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

/// The test tokens, plus write tokens named alice and bob.
fn named_users(config: &mut ServeConfig) {
    config.secrets.extend([
        ServerToken::new(ALICE, Scope::Write, "test")
            .unwrap()
            .named("alice", "test")
            .unwrap(),
        ServerToken::new(BOB, Scope::Write, "test")
            .unwrap()
            .named("bob", "test")
            .unwrap(),
    ]);
}

fn start() -> TestServer {
    common::server::start_with(named_users)
}

fn basic(user: &str, token: &str) -> String {
    let creds = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"));
    format!("Basic {creds}")
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The locking API of one repository of a server.
struct Api {
    client: Client,
    base: String,
}

impl Api {
    fn new(server: &TestServer, repo: &str) -> Self {
        Self {
            client: Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .unwrap(),
            base: format!("{}/{repo}/info/lfs", server.url()),
        }
    }

    fn req(&self, method: &str, rest: &str, auth: Option<&str>) -> RequestBuilder {
        let url = format!("{}/{rest}", self.base);
        let mut r = self
            .client
            .request(method.parse().unwrap(), url)
            .header("Accept", LFS);
        if let Some(a) = auth {
            r = r.header("Authorization", a);
        }
        r
    }

    fn post(&self, rest: &str, auth: &str, body: Value) -> Response {
        self.req("POST", rest, Some(auth))
            .header("Content-Type", LFS)
            .body(body.to_string())
            .send()
            .unwrap()
    }

    fn get(&self, rest: &str, auth: &str) -> Response {
        self.req("GET", rest, Some(auth)).send().unwrap()
    }

    /// Creates a lock that must be new; returns it.
    fn lock(&self, auth: &str, path: &str) -> Value {
        let (status, body) = answer(self.post(
            "locks",
            auth,
            json!({"path": path, "ref": {"name": "refs/heads/main"}}),
        ));
        assert_eq!(status, 201, "{body}");
        body["lock"].clone()
    }

    /// Every lock of the repository, following `next_cursor` with pages of `limit`.
    fn all(&self, auth: &str, limit: usize) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor = String::new();
        for _ in 0..1000 {
            let (status, body) = answer(self.get(
                &format!("locks?limit={limit}&cursor={cursor}&refspec=refs/heads/main"),
                auth,
            ));
            assert_eq!(status, 200, "{body}");
            let page = body["locks"].as_array().unwrap();
            assert!(page.len() <= limit);
            out.extend(page.iter().cloned());
            match body["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => return out,
            }
        }
        panic!("pagination does not end");
    }
}

/// The status and JSON body of an answer, checking that it has the LFS media type.
fn answer(r: Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(ct.starts_with(LFS), "status {status}: content type {ct:?}");
    let body: Value = r.json().unwrap();
    (status, body)
}

/// Checks an error answer: status, code, and a message git-lfs can print.
fn refused(r: Response, status: u16, code: &str) -> String {
    let (s, body) = answer(r);
    assert_eq!((s, body["error"].as_str()), (status, Some(code)), "{body}");
    assert!(body["request_id"].is_string(), "{body}");
    body["message"].as_str().unwrap().to_string()
}

fn ids(locks: &[Value]) -> Vec<u64> {
    locks
        .iter()
        .map(|l| l["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn create_list_verify_unlock_with_owners_and_scopes() {
    let server = start();
    let api = Api::new(&server, "team/models.git");
    let (alice, bob) = (bearer(ALICE), basic("whoever", BOB));

    // Create: 201, the lock in git-lfs's shape.
    let lock = api.lock(&alice, "assets/hero.psd");
    assert_eq!(lock["path"], "assets/hero.psd");
    assert_eq!(lock["owner"], json!({"name": "alice"}));
    let id = lock["id"].as_str().unwrap().to_string();
    let at = lock["locked_at"].as_str().unwrap();
    assert!(
        at.len() == 20 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
        "{at}"
    );

    // The same path again, by anyone: 409 with the existing lock and a message.
    for who in [&bob, &alice] {
        let (status, body) = answer(api.post("locks", who, json!({"path": "assets/hero.psd"})));
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["lock"], lock);
        assert!(body["request_id"].is_string(), "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("already locked"), "{message}");
    }
    let (_, body) = answer(api.post("locks", &bob, json!({"path": "assets/hero.psd"})));
    assert!(body["message"].as_str().unwrap().contains("by alice"));

    let bobs = api.lock(&bob, "assets/villain.psd");
    assert_eq!(bobs["owner"]["name"], "bob");

    // List: read tokens may; filters by path and id; unknown ids match nothing.
    let read = bearer(READ_TOKEN);
    assert_eq!(ids(&api.all(&read, 100)).len(), 2);
    let (status, body) = answer(api.get("locks?path=assets/hero.psd", &read));
    assert_eq!((status, body["locks"].clone()), (200, json!([lock])));
    assert!(body.get("next_cursor").is_none());
    let (_, body) = answer(api.get(&format!("locks?id={id}"), &read));
    assert_eq!(body["locks"], json!([lock]));
    let (_, body) = answer(api.get(&format!("locks?id={id}&path=other"), &read));
    assert_eq!(body["locks"], json!([]));
    for bad in ["abc", "0", "007", "99999999999999999999999"] {
        let (status, body) = answer(api.get(&format!("locks?id={bad}"), &read));
        assert_eq!((status, body["locks"].clone()), (200, json!([])), "{bad}");
    }
    let (_, body) = answer(api.get("locks?path=nothing/here", &read));
    assert_eq!(body["locks"], json!([]));

    // Verify: ours and theirs, from the caller's point of view.
    let (status, body) = answer(api.post("locks/verify", &alice, json!({})));
    assert_eq!(status, 200);
    assert_eq!(body["ours"], json!([lock]));
    assert_eq!(body["theirs"], json!([bobs]));
    let (_, body) = answer(api.post(
        "locks/verify",
        &bob,
        json!({"ref": {"name": "refs/heads/main"}}),
    ));
    assert_eq!(
        (body["ours"].clone(), body["theirs"].clone()),
        (json!([bobs]), json!([lock]))
    );

    // Scopes: read tokens cannot lock, verify or unlock; CAS tokens are not users; no
    // credential is 401 with the header that makes git-lfs ask for one.
    refused(
        api.post("locks", &read, json!({"path": "x"})),
        403,
        "forbidden",
    );
    refused(api.post("locks/verify", &read, json!({})), 403, "forbidden");
    refused(
        api.post(&format!("locks/{id}/unlock"), &read, json!({})),
        403,
        "forbidden",
    );
    let (_, token) = answer(api.get("xet-token/write", &bearer(WRITE_TOKEN)));
    let cas = bearer(token["accessToken"].as_str().unwrap());
    refused(
        api.post("locks", &cas, json!({"path": "x"})),
        403,
        "cas_token_not_accepted",
    );
    refused(api.get("locks", &cas), 403, "cas_token_not_accepted");
    let r = api.req("GET", "locks", None).send().unwrap();
    assert_eq!(r.headers()["lfs-authenticate"], "Basic realm=\"git-xet\"");
    refused(r, 401, "unauthorized");

    // Unlock: not someone else's without force (403, the lock stays); with force, yes.
    let message = refused(
        api.post(&format!("locks/{id}/unlock"), &bob, json!({"force": false})),
        403,
        "lock_owned_by_another_user",
    );
    assert!(
        message.contains("alice") && message.contains("--force"),
        "{message}"
    );
    assert_eq!(api.all(&read, 100).len(), 2);
    let (status, body) = answer(api.post(
        &format!("locks/{id}/unlock"),
        &bob,
        json!({"force": true, "ref": {"name": "refs/heads/main"}}),
    ));
    assert_eq!((status, body["lock"].clone()), (200, lock.clone()));
    refused(
        api.post(&format!("locks/{id}/unlock"), &alice, json!({})),
        404,
        "lock_not_found",
    );
    // One's own lock, no force needed; the path can be locked again, with a new id.
    let bobs_id = bobs["id"].as_str().unwrap();
    let (status, _) = answer(api.post(&format!("locks/{bobs_id}/unlock"), &bob, json!({})));
    assert_eq!(status, 200);
    let again = api.lock(&alice, "assets/hero.psd");
    assert_ne!(again["id"], lock["id"]);
}

#[test]
fn owners_from_basic_user_names_and_pseudonyms() {
    let server = start();
    let api = Api::new(&server, "team/names");
    // The shared (unnamed) write token: the user name git sends, as given.
    let carol = api.lock(&basic("carol", WRITE_TOKEN), "c.bin");
    assert_eq!(carol["owner"]["name"], "carol");
    let jane = api.lock(&basic("Jane Doe", WRITE_TOKEN), "j.bin");
    assert_eq!(jane["owner"]["name"], "Jane Doe");
    // No user name (Bearer, or empty): a pseudonym, never the token; the same every time.
    let p1 = api.lock(&bearer(WRITE_TOKEN), "p1.bin");
    let p2 = api.lock(&basic("", WRITE_TOKEN), "p2.bin");
    let pseudonym = p1["owner"]["name"].as_str().unwrap().to_string();
    assert!(pseudonym.starts_with("token-"), "{pseudonym}");
    assert!(!pseudonym.contains("test-write-token"));
    assert_eq!(p2["owner"]["name"], pseudonym.as_str());
    // A shared token cannot pose as a named user.
    let posing = api.lock(&basic("alice", WRITE_TOKEN), "posing.bin");
    assert_eq!(posing["owner"]["name"], pseudonym.as_str());
    // carol's lock is carol's: dave (same token) does not own it.
    let (_, body) = answer(api.post("locks/verify", &basic("dave", WRITE_TOKEN), json!({})));
    assert_eq!(body["ours"], json!([]));
    assert_eq!(body["theirs"].as_array().unwrap().len(), 5);
    let (_, body) = answer(api.post("locks/verify", &basic("carol", WRITE_TOKEN), json!({})));
    assert_eq!(body["ours"], json!([carol]));
    let c_id = carol["id"].as_str().unwrap();
    refused(
        api.post(
            &format!("locks/{c_id}/unlock"),
            &basic("dave", WRITE_TOKEN),
            json!({}),
        ),
        403,
        "lock_owned_by_another_user",
    );
}

#[test]
fn pages_are_newest_first_and_bounded() {
    let server = start();
    let api = Api::new(&server, "team/pages");
    let alice = bearer(ALICE);
    let created: Vec<u64> = (0..7)
        .map(|i| {
            let auth = if i % 2 == 0 {
                alice.clone()
            } else {
                bearer(BOB)
            };
            api.lock(&auth, &format!("f{i}.bin"))["id"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    let mut newest_first = created.clone();
    newest_first.reverse();
    for limit in [1, 3, 7, 100] {
        assert_eq!(ids(&api.all(&alice, limit)), newest_first, "limit {limit}");
    }
    // limit=0 means the server's default page.
    let (_, body) = answer(api.get("locks?limit=0", &alice));
    assert_eq!(body["locks"].as_array().unwrap().len(), 7);

    // Verify pages the same way, splitting each page into ours and theirs.
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut req = json!({"limit": 2, "ref": {"name": "refs/heads/main"}});
        if let Some(c) = &cursor {
            req["cursor"] = json!(c);
        }
        let (status, body) = answer(api.post("locks/verify", &alice, req));
        assert_eq!(status, 200, "{body}");
        let (o, t) = (
            body["ours"].as_array().unwrap(),
            body["theirs"].as_array().unwrap(),
        );
        assert!(o.len() + t.len() <= 2);
        ours.extend(ids(o));
        theirs.extend(ids(t));
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(ours.len() + theirs.len(), 7);
    assert_eq!(ours.len(), 4, "alice made f0, f2, f4, f6");

    // A cursor written while locks are created and removed still pages consistently.
    let (_, body) = answer(api.get("locks?limit=3", &alice));
    let next = body["next_cursor"].as_str().unwrap().to_string();
    api.lock(&alice, "newer.bin");
    let (_, body) = answer(api.get(&format!("locks?limit=100&cursor={next}"), &alice));
    assert_eq!(ids(body["locks"].as_array().unwrap()), newest_first[3..]);

    // Bad cursors and limits.
    refused(api.get("locks?cursor=zzz", &alice), 400, "invalid_cursor");
    refused(api.get("locks?limit=many", &alice), 400, "invalid_limit");
    refused(api.get("locks?limit=-1", &alice), 400, "invalid_limit");
    refused(
        api.post("locks/verify", &alice, json!({"cursor": "zzz"})),
        400,
        "invalid_cursor",
    );
    refused(
        api.post("locks/verify", &alice, json!({"cursor": 5})),
        400,
        "invalid_cursor",
    );
    refused(
        api.post("locks/verify", &alice, json!({"limit": "ten"})),
        400,
        "invalid_limit",
    );
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let server = start();
    let api = Api::new(&server, "team/bad");
    let alice = bearer(ALICE);
    let raw = |rest: &str, body: &'static str| {
        api.req("POST", rest, Some(&alice))
            .header("Content-Type", LFS)
            .body(body)
            .send()
            .unwrap()
    };
    refused(raw("locks", "{\"path\": "), 400, "invalid_json");
    refused(raw("locks", "[\"a.bin\"]"), 400, "invalid_json");
    refused(raw("locks", ""), 422, "missing_path");
    refused(raw("locks/verify", "nope"), 400, "invalid_json");
    refused(raw("locks/1/unlock", "{"), 400, "invalid_json");
    refused(
        api.post("locks", &alice, json!({"ref": {"name": "x"}})),
        422,
        "missing_path",
    );
    refused(
        api.post("locks", &alice, json!({"path": 7})),
        422,
        "invalid_path",
    );
    for bad in [
        "",
        "/etc/passwd",
        "a/../../b",
        "a//b",
        "dir/",
        "line\nbreak",
    ] {
        let message = refused(
            api.post("locks", &alice, json!({"path": bad})),
            422,
            "invalid_path",
        );
        assert!(message.contains("invalid path"), "{message}");
    }
    let long = "d/".repeat(600) + "f.bin";
    let message = refused(
        api.post("locks", &alice, json!({"path": long})),
        422,
        "path_too_long",
    );
    assert!(message.contains("1024"), "{message}");

    // Bodies over 64 KiB: declared (413 before reading) or streamed without a length.
    let huge = json!({"path": "a.bin", "pad": "x".repeat(100 << 10)}).to_string();
    refused(
        api.req("POST", "locks", Some(&alice))
            .body(huge.clone())
            .send()
            .unwrap(),
        413,
        "body_too_large",
    );
    // A chunked body one chunk longer than the limit, sent in full before the answer is read
    // (the server answers without reading the rest).
    let mut request = format!(
        "POST /team/bad/info/lfs/locks/verify HTTP/1.1\r\nHost: x\r\nAuthorization: {alice}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..(MAX_BODY / 8192 + 1) {
        request.extend_from_slice(b"2000\r\n");
        request.extend_from_slice(&[b' '; 8192]);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let mut sock = common::server::connect(server.server.addr);
    let _ = sock.write_all(&request);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && sock.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // Ids that name no lock of this repository.
    let lock = api.lock(&alice, "a.bin");
    let id = lock["id"].as_str().unwrap();
    for bad in [
        "abc",
        "0",
        &format!("0{id}"),
        "18446744073709551615",
        "99999999999999999999999",
    ] {
        let message = refused(
            api.post(&format!("locks/{bad}/unlock"), &alice, json!({})),
            404,
            "lock_not_found",
        );
        assert!(message.contains("team/bad"), "{message}");
    }
    let other = Api::new(&server, "team/other");
    refused(
        other.post(
            &format!("locks/{id}/unlock"),
            &alice,
            json!({"force": true}),
        ),
        404,
        "lock_not_found",
    );
    refused(
        api.post(
            &format!("locks/{id}/unlock"),
            &alice,
            json!({"force": "yes"}),
        ),
        422,
        "invalid_force",
    );
    // Wrong methods and unknown locking routes.
    refused(
        api.req("GET", "locks/verify", Some(&alice)).send().unwrap(),
        405,
        "method_not_allowed",
    );
    refused(
        api.req("DELETE", "locks", Some(&alice)).send().unwrap(),
        405,
        "method_not_allowed",
    );
    refused(
        api.req("GET", &format!("locks/{id}/unlock"), Some(&alice))
            .send()
            .unwrap(),
        405,
        "method_not_allowed",
    );
    for rest in [
        format!("locks/{id}"),
        format!("locks/{id}/lock"),
        "locks/a/b/unlock".into(),
    ] {
        refused(api.post(&rest, &alice, json!({})), 404, "not_found");
    }
    // Nothing above changed the lock.
    assert_eq!(api.all(&alice, 10), vec![lock]);
}

#[test]
fn clients_racing_for_one_path_get_one_lock() {
    let server = start();
    let api = std::sync::Arc::new(Api::new(&server, "team/race"));
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|i| {
                let api = std::sync::Arc::clone(&api);
                s.spawn(move || {
                    let auth = basic(&format!("user{i}"), WRITE_TOKEN);
                    answer(api.post("locks", &auth, json!({"path": "race.bin"})))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 201)
        .map(|(_, b)| &b["lock"])
        .collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    for (status, body) in &answers {
        assert!(*status == 201 || *status == 409, "{status} {body}");
        assert_eq!(&body["lock"], winners[0]);
    }
    assert_eq!(api.all(&bearer(READ_TOKEN), 100).len(), 1);
}

#[test]
fn too_many_locks_are_refused_per_repository_and_in_all() {
    let server = common::server::start_with(|c| {
        named_users(c);
        c.locks = LockLimits {
            per_repo: 3,
            per_scope: 100,
            total: 5,
        };
    });
    let a = Api::new(&server, "team/a");
    let b = Api::new(&server, "team/b");
    let alice = bearer(ALICE);
    for i in 0..3 {
        a.lock(&alice, &format!("{i}.bin"));
    }
    let message = refused(
        a.post("locks", &alice, json!({"path": "3.bin"})),
        507,
        "too_many_locks",
    );
    assert!(
        message.contains("lock limit per repository")
            && message.contains("team/a has 3 locks")
            && message.contains("git lfs unlock"),
        "{message}"
    );
    // A locked path is still answered 409 with its lock.
    let (status, body) = answer(a.post("locks", &bearer(BOB), json!({"path": "0.bin"})));
    assert_eq!(
        (status, body["lock"]["path"].as_str()),
        (409, Some("0.bin"))
    );
    // Another repository has room until the server-wide limit.
    b.lock(&alice, "x.bin");
    b.lock(&alice, "y.bin");
    let message = refused(
        b.post("locks", &alice, json!({"path": "z.bin"})),
        507,
        "too_many_locks",
    );
    assert!(
        message.contains("server-wide lock limit") && message.contains("the server has 5 locks"),
        "{message}"
    );
    // Unlocking makes room.
    let first = a.all(&alice, 10).pop().unwrap();
    let id = first["id"].as_str().unwrap();
    assert_eq!(
        answer(a.post(&format!("locks/{id}/unlock"), &alice, json!({}))).0,
        200
    );
    b.lock(&alice, "z.bin");
}

const TEAM_A: &str = "team-a-token-0123456789";
const TEAM_B: &str = "team-b-token-0123456789";
const TEAM_B_TOO: &str = "team-b-other-token-0123456789";

#[test]
fn a_team_at_its_scope_limit_leaves_other_teams_able_to_lock() {
    let server = common::server::start_with(|c| {
        c.secrets.extend(common::server::team_secrets(&[
            (TEAM_A, Scope::Write, "team a", Some("team-a/*")),
            (TEAM_B, Scope::Write, "team b", Some("team-b/*")),
            (TEAM_B_TOO, Scope::Write, "team b", Some("team-b/*")),
        ]));
        c.locks = LockLimits {
            per_repo: 3,
            per_scope: 5,
            total: 8,
        };
    });
    let (a, b, b_too) = (bearer(TEAM_A), bearer(TEAM_B), bearer(TEAM_B_TOO));
    // Team b creates repositories as it goes (any path is one) and locks in each: its locks
    // count against its scope, whichever of its tokens and repositories they are in.
    let repos: Vec<Api> = (0..3)
        .map(|i| Api::new(&server, &format!("team-b/r{i}")))
        .collect();
    for i in 0..3 {
        repos[0].lock(&b, &format!("{i}.bin"));
    }
    repos[1].lock(&b, "0.bin");
    repos[1].lock(&b_too, "1.bin");
    for (api, token) in [(&repos[1], &b), (&repos[2], &b), (&repos[2], &b_too)] {
        let message = refused(
            api.post("locks", token, json!({"path": "more.bin"})),
            507,
            "too_many_locks",
        );
        assert!(
            message.contains("lock limit per token scope")
                && message.contains("team-b/*")
                && message.contains("5 locks")
                && message.contains("git lfs unlock"),
            "{message}"
        );
        assert!(!message.contains("per repository"), "{message}");
    }
    // The server has room (5 of 8): team a locks, in its repository.
    let team_a = Api::new(&server, "team-a/models");
    let theirs = team_a.lock(&a, "weights.bin");
    team_a.lock(&a, "config.json");
    // A write token for every repository is not charged to team b's scope, even in its
    // repositories; then the total (8) is reached, for everyone.
    repos[2].lock(&bearer(WRITE_TOKEN), "wide.bin");
    let message = refused(
        team_a.post("locks", &a, json!({"path": "tokenizer.json"})),
        507,
        "too_many_locks",
    );
    assert!(message.contains("server-wide lock limit"), "{message}");
    // Team b unlocks one of its own (with the other token, by force): its scope has room
    // again, and the server too.
    let first = repos[0].all(&b, 10).pop().unwrap();
    let id = first["id"].as_str().unwrap();
    let unlock = json!({"force": true});
    assert_eq!(
        answer(repos[0].post(&format!("locks/{id}/unlock"), &b_too, unlock)).0,
        200
    );
    repos[2].lock(&b, "more.bin");
    // Team a's lock was never touched.
    assert_eq!(team_a.all(&a, 10).last(), Some(&theirs));
}

#[test]
fn repositories_are_apart_and_locks_survive_a_restart() {
    let server = start();
    let alice = bearer(ALICE);
    let models = Api::new(&server, "team/models.git");
    let lock = models.lock(&alice, "weights.bin");
    // `team/models` is the same repository as `team/models.git`; `team/other` is not.
    let same = Api::new(&server, "team/models");
    assert_eq!(same.all(&alice, 10), vec![lock.clone()]);
    let other = Api::new(&server, "team/other");
    assert_eq!(other.all(&alice, 10), Vec::<Value>::new());
    let (_, body) = answer(other.post("locks/verify", &alice, json!({})));
    assert_eq!(
        (body["ours"].clone(), body["theirs"].clone()),
        (json!([]), json!([]))
    );
    // The same path locks independently there.
    let theirs = other.lock(&bearer(BOB), "weights.bin");
    assert_ne!(theirs["id"], lock["id"]);

    // Restart on the same data directory (a new port): the locks are there, unchanged.
    let TestServer {
        server: running,
        dir,
    } = server;
    running.stop().unwrap();
    assert!(dir.path().join("store/locks.redb").is_file());
    let server = common::server::start_on_with(dir, named_users);
    let models = Api::new(&server, "team/models.git");
    assert_eq!(models.all(&alice, 10), vec![lock.clone()]);
    let other = Api::new(&server, "team/other");
    assert_eq!(other.all(&alice, 10), vec![theirs.clone()]);
    let (_, body) = answer(models.post("locks/verify", &alice, json!({})));
    assert_eq!(body["ours"], json!([lock]));
    // Ids are never reused after a restart.
    let newer = models.lock(&alice, "more.bin");
    let newest: u64 = newer["id"].as_str().unwrap().parse().unwrap();
    assert!(newest > ids(&[lock, theirs]).into_iter().max().unwrap());
}

// ---------------------------------------------------------------------------------------------
// Real git and git-lfs.

/// A credential helper answering `user` and `token`, as a `credential.helper` value.
fn helper(user: &str, token: &str) -> String {
    format!("!f() {{ test \"$1\" = get && echo username={user} && echo password={token}; }}; f")
}

/// Runs a git command that must fail; returns its output.
fn git_fails(env: &GitEnv, dir: &Path, args: &[&str]) -> Output {
    let out = env.run_in(dir, "git", args);
    assert_ne!(out.status, Some(0), "git {args:?} succeeded: {}", out.all());
    out
}

fn writable(path: &Path) -> bool {
    !std::fs::metadata(path).unwrap().permissions().readonly()
}

fn make_writable(path: &Path) {
    let mut p = std::fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    p.set_readonly(false);
    std::fs::set_permissions(path, p).unwrap();
}

/// `git lfs locks --json` (add `--verify` for ours/theirs) in `dir`.
fn locks_json(env: &GitEnv, dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["lfs", "locks", "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&env.git(dir, &args).stdout).unwrap()
}

/// A repository `name` under the env's root whose LFS endpoint is `lfs_url`, speaking as `user`
/// with `token`, with git-lfs's hooks installed and lock verification on (as a team using
/// locks configures it: then git-lfs refuses pushes of files others locked).
fn configure_repo(env: &GitEnv, dir: &Path, lfs_url: &str, user: &str, token: &str) {
    env.git(dir, &["lfs", "install", "--local"]);
    env.git(dir, &["config", "lfs.url", lfs_url]);
    env.git(dir, &["config", "credential.helper", &helper(user, token)]);
    env.git(
        dir,
        &["config", &format!("lfs.{lfs_url}.locksverify"), "true"],
    );
}

#[needs(git_lfs)]
#[test]
fn git_lfs_lock_locks_unlock_and_push_verification_for_two_users() {
    let server = start();
    let env = GitEnv::new();
    let root = env.path().to_path_buf();
    let lfs_url = format!("{}/team/art.git/info/lfs", server.url());
    env.git(&root, &["init", "-q", "--bare", "remote.git"]);

    // alice creates the repository with lockable files.
    env.git(&root, &["init", "-q", "alice"]);
    let a = root.join("alice");
    configure_repo(&env, &a, &lfs_url, "alice", ALICE);
    env.git(&a, &["lfs", "track", "--lockable", "*.bin"]);
    std::fs::write(a.join(".lfsconfig"), format!("[lfs]\n\turl = {lfs_url}\n")).unwrap();
    std::fs::write(a.join("hero.bin"), common::splitmix64(1, 40_000)).unwrap();
    std::fs::write(a.join("villain.bin"), common::splitmix64(2, 30_000)).unwrap();
    env.git(&a, &["add", "."]);
    env.git(&a, &["commit", "-q", "-m", "art"]);
    env.git(&a, &["remote", "add", "origin", "../remote.git"]);
    let push = env.git(&a, &["push", "-q", "origin", "main"]);
    assert!(
        !push.all().contains("Locking support detected"),
        "{}",
        push.all()
    );

    let out = env.git(&a, &["lfs", "lock", "hero.bin"]);
    assert!(out.stdout.contains("Locked hero.bin"), "{}", out.all());
    assert!(
        writable(&a.join("hero.bin")),
        "`git lfs lock` makes the file writable"
    );
    let list = env.git(&a, &["lfs", "locks"]).stdout;
    assert!(
        list.contains("hero.bin") && list.contains("alice") && list.contains("ID:"),
        "{list}"
    );
    let locks = locks_json(&env, &a, &[]);
    assert_eq!(locks.as_array().unwrap().len(), 1, "{locks}");
    assert_eq!(locks[0]["path"], "hero.bin");
    assert_eq!(locks[0]["owner"]["name"], "alice");
    let hero_id = locks[0]["id"].as_str().unwrap().to_string();

    // bob clones: the lockable files are read-only in his checkout.
    let helper_bob = format!("credential.helper={}", helper("bob", BOB));
    env.git(
        &root,
        &["clone", "-q", "-c", &helper_bob, "remote.git", "bob"],
    );
    let b = root.join("bob");
    configure_repo(&env, &b, &lfs_url, "bob", BOB);
    // The clone ran before git-lfs's hooks existed; a checkout runs post-checkout now.
    env.git(&b, &["checkout", "--", "."]);
    assert!(!writable(&b.join("hero.bin")) && !writable(&b.join("villain.bin")));

    // bob sees alice's lock, as hers ("theirs" in verification).
    let list = env.git(&b, &["lfs", "locks"]).stdout;
    assert!(
        list.contains("hero.bin") && list.contains("alice"),
        "{list}"
    );
    let verify = locks_json(&env, &b, &["--verify"]);
    assert_eq!(verify["ours"], json!([]), "{verify}");
    assert_eq!(verify["theirs"][0]["id"], hero_id.as_str());
    let verify = locks_json(&env, &a, &["--verify"]);
    assert_eq!(verify["ours"][0]["id"], hero_id.as_str(), "{verify}");

    // bob cannot lock what alice locked; he can lock another file.
    let out = git_fails(&env, &b, &["lfs", "lock", "hero.bin"]);
    assert!(
        out.stderr.contains("already locked by alice"),
        "{}",
        out.all()
    );
    let out = env.git(&b, &["lfs", "lock", "villain.bin"]);
    assert!(out.stdout.contains("Locked villain.bin"), "{}", out.all());
    assert!(writable(&b.join("villain.bin")));

    // bob edits alice's file anyway: git-lfs's lock verification refuses the push.
    make_writable(&b.join("hero.bin"));
    std::fs::write(b.join("hero.bin"), common::splitmix64(3, 40_000)).unwrap();
    env.git(&b, &["commit", "-q", "-am", "bob edits hero"]);
    let before = env
        .git(&root.join("remote.git"), &["rev-parse", "main"])
        .stdout;
    let out = git_fails(&env, &b, &["push", "-q", "origin", "main"]);
    let all = out.all();
    assert!(
        all.contains("Unable to push locked files") && all.contains("hero.bin - alice"),
        "{all}"
    );
    assert!(all.contains("Cannot update locked files"), "{all}");
    let after = env
        .git(&root.join("remote.git"), &["rev-parse", "main"])
        .stdout;
    assert_eq!(before, after, "the refused push changed nothing");

    // Unlocking someone else's lock needs --force.
    let out = git_fails(&env, &b, &["lfs", "unlock", "hero.bin"]);
    assert!(
        out.stderr.contains("locked by alice") && out.stderr.contains("--force"),
        "{}",
        out.all()
    );
    assert_eq!(locks_json(&env, &b, &[]).as_array().unwrap().len(), 2);
    let out = env.git(&b, &["lfs", "unlock", "--force", "hero.bin"]);
    assert!(out.stdout.contains("Unlocked hero.bin"), "{}", out.all());

    // Now the push goes through.
    env.git(&b, &["push", "-q", "origin", "main"]);
    let after = env
        .git(&root.join("remote.git"), &["rev-parse", "main"])
        .stdout;
    assert_ne!(before, after);

    // alice sees only bob's lock, as theirs; bob unlocks it (his own: no force) and the file
    // is read-only again.
    let verify = locks_json(&env, &a, &["--verify"]);
    assert_eq!(verify["ours"], json!([]), "{verify}");
    assert_eq!(verify["theirs"][0]["path"], "villain.bin");
    assert_eq!(verify["theirs"][0]["owner"]["name"], "bob");
    let out = env.git(&b, &["lfs", "unlock", "villain.bin"]);
    assert!(out.stdout.contains("Unlocked villain.bin"), "{}", out.all());
    assert!(
        !writable(&b.join("villain.bin")),
        "unlocked lockable files are read-only"
    );
    assert_eq!(locks_json(&env, &a, &[]), json!([]));

    // alice locks and unlocks by id.
    env.git(&a, &["pull", "-q", "--ff-only", "origin", "main"]);
    env.git(&a, &["lfs", "lock", "hero.bin"]);
    let id = locks_json(&env, &a, &[])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(writable(&a.join("hero.bin")));
    let out = env.git(&a, &["lfs", "unlock", "--id", &id]);
    assert!(
        out.stdout.contains(&format!("Unlocked Lock {id}")),
        "{}",
        out.all()
    );
    assert!(
        !writable(&a.join("hero.bin")),
        "unlocked lockable files are read-only"
    );
    assert_eq!(locks_json(&env, &a, &[]), json!([]));
}

#[needs(git_lfs)]
#[test]
fn git_lfs_locks_of_shared_token_users_survive_a_restart_and_stay_in_their_repository() {
    let server = common::server::start();
    let env = GitEnv::new();
    let root = env.path().to_path_buf();
    let url_of = |server: &TestServer, repo: &str| format!("{}/{repo}/info/lfs", server.url());

    // carol and dave share the server's write token; git's user names tell them apart.
    env.git(&root, &["init", "-q", "--bare", "remote.git"]);
    let mut repos = Vec::new();
    for user in ["carol", "dave"] {
        env.git(&root, &["init", "-q", user]);
        let dir = root.join(user);
        configure_repo(&env, &dir, &url_of(&server, "team/game"), user, WRITE_TOKEN);
        env.git(&dir, &["remote", "add", "origin", "../remote.git"]);
        repos.push(dir);
    }
    let (c, d) = (&repos[0], &repos[1]);
    env.git(c, &["lfs", "track", "*.bin"]);
    std::fs::write(c.join("level.bin"), common::splitmix64(4, 20_000)).unwrap();
    env.git(c, &["add", "."]);
    env.git(c, &["commit", "-q", "-m", "level"]);
    env.git(c, &["push", "-q", "origin", "main"]);
    env.git(c, &["lfs", "lock", "level.bin"]);
    let locks = locks_json(&env, d, &[]);
    assert_eq!(locks[0]["owner"]["name"], "carol", "{locks}");
    let verify = locks_json(&env, d, &["--verify"]);
    assert_eq!(verify["ours"], json!([]), "{verify}");

    // Another repository on the same server sees none of them.
    env.git(&root, &["init", "-q", "elsewhere"]);
    let e = root.join("elsewhere");
    configure_repo(
        &env,
        &e,
        &url_of(&server, "team/other"),
        "carol",
        WRITE_TOKEN,
    );
    env.git(&e, &["remote", "add", "origin", "../remote.git"]);
    assert_eq!(locks_json(&env, &e, &[]), json!([]));

    // Restart the server (a new port): the lock is still there, same id, owner and time.
    let server = common::server::restart(server);
    for dir in [c, d] {
        let url = url_of(&server, "team/game");
        env.git(dir, &["config", "lfs.url", &url]);
        env.git(dir, &["config", &format!("lfs.{url}.locksverify"), "true"]);
    }
    assert_eq!(locks_json(&env, d, &[]), locks);
    // dave's edit of carol's locked file is refused after the restart too.
    env.git(d, &["pull", "-q", "origin", "main"]);
    std::fs::write(d.join("level.bin"), common::splitmix64(5, 20_000)).unwrap();
    env.git(d, &["commit", "-q", "-am", "dave edits level"]);
    let out = git_fails(&env, d, &["push", "-q", "origin", "main"]);
    assert!(out.all().contains("level.bin - carol"), "{}", out.all());
    // carol unlocks her own lock.
    let out = env.git(c, &["lfs", "unlock", "level.bin"]);
    assert!(out.stdout.contains("Unlocked level.bin"), "{}", out.all());
    env.git(d, &["push", "-q", "origin", "main"]);
}
