//! Many teams on one server: secrets limited to repositories (`write SECRET team-a/*`), CAS
//! tokens limited to the repository they were issued for, and files readable only through a
//! repository that registered them: another team that guesses an oid or a Xet hash learns
//! nothing, and gets the file only by uploading it itself (which deduplicates).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use common::server::{start_with, TestServer};
use git_xet::server::auth::{Scope, ServerToken};
use serde_json::{json, Value};

const TEAM_A: &str = "team-a-secret-0123456789";
const TEAM_B: &str = "team-b-secret-0123456789";
const ADMIN: &str = "admin-secret-0123456789ab";

fn server() -> TestServer {
    start_with(|c| {
        c.secrets = common::server::team_secrets(&[
            (TEAM_A, Scope::Write, "a", Some("team-a/*")),
            (TEAM_B, Scope::Write, "b", Some("team-b/*")),
            (ADMIN, Scope::Write, "admin", None),
        ]);
    })
}

struct Client<'a> {
    http: reqwest::blocking::Client,
    s: &'a TestServer,
}

impl Client<'_> {
    fn lfs(&self, repo: &str, rest: &str) -> String {
        format!("{}/{repo}/info/lfs/{rest}", self.s.url())
    }

    fn put(&self, secret: &str, repo: &str, oid: &str, data: &[u8]) -> u16 {
        self.http
            .put(self.lfs(repo, &format!("objects/{oid}")))
            .basic_auth("git", Some(secret))
            .body(data.to_vec())
            .send()
            .unwrap()
            .status()
            .as_u16()
    }

    fn get(&self, secret: &str, repo: &str, oid: &str) -> (u16, Vec<u8>) {
        let r = self
            .http
            .get(self.lfs(repo, &format!("objects/{oid}")))
            .basic_auth("git", Some(secret))
            .send()
            .unwrap();
        (r.status().as_u16(), r.bytes().unwrap().to_vec())
    }

    /// A batch request; (status, body).
    fn batch(
        &self,
        secret: &str,
        repo: &str,
        operation: &str,
        oid: &str,
        size: usize,
    ) -> (u16, Value) {
        let r = self
            .http
            .post(self.lfs(repo, "objects/batch"))
            .basic_auth("git", Some(secret))
            .header("Accept", "application/vnd.git-lfs+json")
            .header("Content-Type", "application/vnd.git-lfs+json")
            .json(&json!({
                "operation": operation,
                "transfers": ["xet-download", "xet", "basic"],
                "objects": [{"oid": oid, "size": size}],
            }))
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().unwrap_or(Value::Null))
    }

    /// A CAS token for `repo` from the token route.
    fn cas_token(&self, secret: &str, repo: &str) -> String {
        let v: Value = self
            .http
            .get(self.lfs(repo, "xet-token/read"))
            .basic_auth("git", Some(secret))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v["accessToken"].as_str().unwrap().to_string()
    }

    fn cas(&self, bearer: &str, path: &str) -> u16 {
        self.http
            .get(format!("{}{path}", self.s.url()))
            .bearer_auth(bearer)
            .send()
            .unwrap()
            .status()
            .as_u16()
    }
}

#[test]
fn a_teams_files_are_not_there_for_another_team_until_it_uploads_them() {
    let s = server();
    let c = Client {
        http: reqwest::blocking::Client::new(),
        s: &s,
    };
    let data = common::splitmix64(41, 300_000);
    let oid = common::sha256_hex(&data);

    // Team A stores a file in its repository and reads it back.
    assert_eq!(c.put(TEAM_A, "team-a/models", &oid, &data), 200);
    assert_eq!(c.get(TEAM_A, "team-a/models", &oid), (200, data.clone()));
    // In another repository of its own, A has not registered it.
    let (status, body) = c.batch(TEAM_A, "team-a/other", "download", &oid, data.len());
    assert_eq!(status, 200);
    assert_eq!(body["objects"][0]["error"]["code"], 404, "{body}");

    // Team B cannot use A's repository at all.
    assert_eq!(
        c.batch(TEAM_B, "team-a/models", "download", &oid, data.len())
            .0,
        403
    );
    assert_eq!(c.get(TEAM_B, "team-a/models", &oid).0, 403);
    // In its own repository, B's guess of the oid finds nothing, by batch or basic GET.
    let (status, body) = c.batch(TEAM_B, "team-b/x", "download", &oid, data.len());
    assert_eq!(status, 200);
    assert_eq!(body["objects"][0]["error"]["code"], 404, "{body}");
    assert_eq!(c.get(TEAM_B, "team-b/x", &oid).0, 404);
    // An upload batch asks B for the object: to B it is not stored.
    let (_, body) = c.batch(TEAM_B, "team-b/x", "upload", &oid, data.len());
    assert!(
        body["objects"][0]["actions"]["upload"].is_object(),
        "{body}"
    );

    // Through the CAS API, with the Xet hash (say, guessed): B's CAS token finds nothing, A's
    // finds the file, the server-wide secret sees everything, and a scoped secret presented
    // directly is told to use its repository's CAS tokens.
    let info: Value = c
        .http
        .get(format!("{}/v1/lfs-files/{oid}", s.url()))
        .bearer_auth(ADMIN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let file = info["file_hash"].as_str().unwrap().to_string();
    let recon = format!("/v2/reconstructions/{file}");
    let lookup = format!("/v1/lfs-files/{oid}");
    let b_token = c.cas_token(TEAM_B, "team-b/x");
    let a_token = c.cas_token(TEAM_A, "team-a/models");
    assert_eq!(c.cas(&b_token, &recon), 404);
    assert_eq!(c.cas(&b_token, &lookup), 404);
    assert_eq!(c.cas(&a_token, &recon), 200);
    assert_eq!(c.cas(&a_token, &lookup), 200);
    assert_eq!(c.cas(ADMIN, &recon), 200);
    assert_eq!(c.cas(TEAM_A, &recon), 403);

    // B uploads the same bytes to its repository; from then on they are B's too.
    assert_eq!(c.put(TEAM_B, "team-b/x", &oid, &data), 200);
    assert_eq!(c.get(TEAM_B, "team-b/x", &oid), (200, data.clone()));
    let b_token = c.cas_token(TEAM_B, "team-b/x");
    assert_eq!(c.cas(&b_token, &recon), 200);
    // An upload with the wrong bytes for the oid registers nothing.
    let other = common::splitmix64(42, 1000);
    assert_ne!(c.put(TEAM_A, "team-a/third", &oid, &other), 200);
    assert_eq!(c.get(TEAM_A, "team-a/third", &oid).0, 404);
}

#[test]
fn token_file_lines_scope_secrets_to_repositories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(
        &path,
        "write team-a-secret-0123456789 team-a/*\n\
         read  team-b-secret-0123456789 bob team-b/models\n\
         write admin-secret-0123456789ab\n",
    )
    .unwrap();
    let secrets = ServerToken::parse_file(&path).unwrap();
    assert_eq!(secrets.len(), 3);
    assert!(format!("{:?}", secrets[0]).contains("team-a/*"));
    assert_eq!(secrets[1].name(), Some("bob"));
    for bad in [
        "write team-a-secret-0123456789 team-a/* team-b/*\n",
        "write team-a-secret-0123456789 team-a/../b\n",
        "write team-a-secret-0123456789 /*\n",
    ] {
        std::fs::write(&path, bad).unwrap();
        let e = ServerToken::parse_file(&path).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{bad}: {e}");
    }
}

#[needs(git_lfs)]
#[test]
fn two_teams_push_the_same_file_through_the_agent_and_each_reads_only_its_own() {
    let s = server();
    let data = common::splitmix64(43, 3 << 20);
    // Each team in its own world (home, credential helper answering its own token).
    let push = |secret: &str, repo: &str| {
        let env = common::git::GitEnv::new();
        let work = env.negotiated_work_tree(secret, &[], &format!("{}/{repo}/info/lfs", s.url()));
        std::fs::write(work.join("model.bin"), &data).unwrap();
        env.git(&work, &["add", "."]);
        env.git(&work, &["commit", "-q", "-m", "model"]);
        env.git(&work, &["push", "-q", "origin", "HEAD:main"]);
        env
    };
    let _a = push(TEAM_A, "team-a/models");
    let stored_after_a = s.health("xorbs");
    let c = Client {
        http: reqwest::blocking::Client::new(),
        s: &s,
    };
    let oid = common::sha256_hex(&data);
    assert_eq!(c.get(TEAM_B, "team-b/models", &oid).0, 404);
    // B's push of the same bytes uploads no new xorb (global dedup) and registers the file
    // for B, which can then read it.
    let _b = push(TEAM_B, "team-b/models");
    assert_eq!(
        s.health("xorbs"),
        stored_after_a,
        "B's push stored xorbs again"
    );
    assert_eq!(c.get(TEAM_B, "team-b/models", &oid), (200, data.clone()));
    assert_eq!(c.get(TEAM_A, "team-a/models", &oid), (200, data));
}
