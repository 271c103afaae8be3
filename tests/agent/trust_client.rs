//! The client's trust rules, end to end:
//!
//! - **a secret goes only to the origin it was issued for**: `git-xet transfer` driven over
//!   stdin/stdout with negotiated actions that name a foreign refresh route and CAS (what any
//!   repository's committed `.lfsconfig` can do), with `GIT_XET_TOKEN`, `HF_TOKEN` and a
//!   credential helper for another host set: the foreign origin gets none of them, only what
//!   the action itself carries; a CAS that redirects elsewhere does not pass the token on;
//! - **redaction everywhere**: a standalone endpoint `http://git:SECRET@127.0.0.1:PORT` through
//!   `git xet install`, push, clone, the agent's log, the journal, `ls-files --json`, `status`
//!   and a failing push's output: the secret appears nowhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::{Path, PathBuf};
use xet_test_tools::needs;

use crate::common;

use common::agent::{run_agent, Sandbox};
use common::git::GitEnv;
use common::server::WRITE_TOKEN;
use xet_client::fake_server::{reply, Fake, Reply, Seen};

const ENV_XET_TOKEN: &str = "env-xet-token-secret-0001";
const ENV_HF_TOKEN: &str = "hf_envHuggingFaceSecret0002";
const OTHER_HOST_SECRET: &str = "helper-secret-for-another-host-0003";

/// What one agent process did.
struct Run {
    status: Option<i32>,
    replies: Vec<serde_json::Value>,
    stderr: String,
    log: String,
}

impl Run {
    fn completes(&self) -> Vec<&serde_json::Value> {
        self.replies
            .iter()
            .filter(|r| r["event"] == "complete")
            .collect()
    }

    /// Everything the agent wrote.
    fn all(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.replies
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            self.stderr,
            self.log
        )
    }
}

/// What the tests here do with a sandbox ([`Sandbox`]: a git repository, an isolated global
/// configuration and a private cache).
trait TrustSandbox {
    fn git_config(&self, key: &str, value: &str);
    fn helper_for(&self, url: &str, password: &str);
    fn agent(&self, vars: &[(&str, &str)], lines: &[String]) -> Run;
}

impl TrustSandbox for Sandbox {
    fn git_config(&self, key: &str, value: &str) {
        let ok = self
            .command("git")
            .args(["config", "--global", key, value])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// A credential helper answering `password` for URLs matching `url` only.
    fn helper_for(&self, url: &str, password: &str) {
        self.git_config(
            &format!("credential.{url}.helper"),
            &format!(
                "!f() {{ test \"$1\" = get && echo username=git && echo password={password}; }}; f"
            ),
        );
    }

    /// Runs `git-xet transfer` with `lines` on stdin and `vars` set; bounded by a minute.
    fn agent(&self, vars: &[(&str, &str)], lines: &[String]) -> Run {
        let _ = std::fs::remove_file(self.dir.path().join("agent.log"));
        let mut cmd = self.command(env!("CARGO_BIN_EXE_git-xet"));
        cmd.arg("transfer");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let input = (lines.join("\n") + "\n").into_bytes();
        let run = run_agent(cmd, input);
        Run {
            status: run.status,
            replies: run.replies,
            stderr: run.stderr,
            log: self.log(),
        }
    }
}

fn init_upload() -> String {
    r#"{"event":"init","operation":"upload","remote":"origin","concurrent":true,"concurrenttransfers":1}"#.into()
}

/// An upload request whose action names `href` and the CAS `cas`, with a CAS token that has
/// already expired (so the agent refreshes through `href` first) and `extra` headers.
fn negotiated_upload(
    object: &(PathBuf, String, usize),
    href: &str,
    cas: &str,
    extra: &[(&str, &str)],
) -> String {
    let mut header = serde_json::json!({
        "X-Xet-Cas-Url": cas,
        "X-Xet-Access-Token": "action-cas-token-expired",
        "X-Xet-Token-Expiration": "1000",
        "X-Xet-Session-Id": "session-1",
    });
    for (k, v) in extra {
        header[*k] = serde_json::Value::String(v.to_string());
    }
    serde_json::json!({
        "event": "upload",
        "oid": object.1,
        "size": object.2,
        "path": object.0,
        "action": {"href": href, "header": header, "expires_at": "0001-01-01T00:00:00Z"},
    })
    .to_string()
}

/// A foreign server acting as both refresh route (`/refresh`) and CAS: it accepts anything.
fn foreign_cas() -> Fake {
    Fake::start(|req: &Seen| {
        let path = req.path.as_str();
        if path == "/refresh" {
            let exp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                + 900;
            reply(
                200,
                &format!(
                    r#"{{"casUrl":"http://ignored.example","accessToken":"cas-token-from-refresh","exp":{exp}}}"#
                ),
            )
        } else if path.starts_with("/v1/xorbs/") {
            reply(200, r#"{"was_inserted":true}"#)
        } else if path.starts_with("/v1/shards") {
            reply(200, r#"{"result":0}"#)
        } else {
            reply(404, r#"{"error":"not_found"}"#)
        }
    })
}

/// The user's secrets: none may reach a foreign origin.
fn env_secrets() -> Vec<(&'static str, &'static str)> {
    vec![("GIT_XET_TOKEN", ENV_XET_TOKEN), ("HF_TOKEN", ENV_HF_TOKEN)]
}

fn assert_never_received(fake: &Fake, secrets: &[&str]) {
    for seen in fake.seen() {
        let text = seen.text();
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{secret} reached the foreign origin:\n{text}"
            );
        }
    }
}

#[test]
fn a_foreign_href_and_cas_get_only_what_the_action_carries() {
    let s = Sandbox::new();
    let foreign = foreign_cas();
    // The user's credential helper is for their real LFS server, on another port.
    s.helper_for("http://127.0.0.1:1", OTHER_HOST_SECRET);
    let object = s.object(1, 300_000);
    let href = format!("{}/refresh", foreign.url);
    let run = s.agent(
        &env_secrets(),
        &[
            init_upload(),
            negotiated_upload(&object, &href, &foreign.url, &[]),
            r#"{"event":"terminate"}"#.into(),
        ],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let done = run.completes();
    assert_eq!(done.len(), 1);
    assert!(done[0].get("error").is_none(), "{}", done[0]);

    let seen = foreign.seen();
    assert_never_received(&foreign, &[ENV_XET_TOKEN, ENV_HF_TOKEN, OTHER_HOST_SECRET]);
    // The refresh went without a credential: nothing was issued for that origin.
    let refresh = seen
        .iter()
        .find(|r| r.path == "/refresh")
        .expect("refreshed");
    assert_eq!(refresh.header("authorization"), None);
    // The CAS got the token it issued, and nothing else.
    let cas: Vec<&Seen> = seen.iter().filter(|r| r.path.starts_with("/v1/")).collect();
    assert!(!cas.is_empty());
    for r in cas {
        assert_eq!(
            r.header("authorization"),
            Some("Bearer cas-token-from-refresh"),
            "{}",
            r.path
        );
    }
    // Nor do the user's secrets appear in what the agent wrote.
    for secret in [ENV_XET_TOKEN, ENV_HF_TOKEN, "cas-token-from-refresh"] {
        assert!(
            !run.all().contains(secret),
            "{secret} shown:\n{}",
            run.all()
        );
    }
}

#[test]
fn the_actions_own_authorization_is_used_for_the_refresh() {
    let s = Sandbox::new();
    let foreign = foreign_cas();
    s.helper_for("http://127.0.0.1:1", OTHER_HOST_SECRET);
    let object = s.object(2, 100_000);
    let href = format!("{}/refresh", foreign.url);
    let action_auth = "Basic YWN0aW9uOmlzc3VlZC1mb3ItdGhpcy1ocmVm";
    let run = s.agent(
        &env_secrets(),
        &[
            init_upload(),
            // Header names are case-insensitive.
            negotiated_upload(
                &object,
                &href,
                &foreign.url,
                &[("authorization", action_auth)],
            ),
        ],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.completes()[0].get("error").is_none(), "{}", run.all());
    let refresh = foreign
        .seen()
        .into_iter()
        .find(|r| r.path == "/refresh")
        .expect("refreshed");
    assert_eq!(refresh.header("authorization"), Some(action_auth));
    assert_never_received(&foreign, &[ENV_XET_TOKEN, ENV_HF_TOKEN, OTHER_HOST_SECRET]);
    assert!(!run.all().contains("YWN0aW9uOmlzc3VlZC1mb3ItdGhpcy1ocmVm"));
}

#[test]
fn a_credential_helper_answers_only_for_the_url_it_matches() {
    let s = Sandbox::new();
    let foreign = foreign_cas();
    // A helper for the refresh route's own origin is used; one for another host is not.
    s.helper_for("http://127.0.0.1:1", OTHER_HOST_SECRET);
    s.helper_for(&foreign.url, "helper-secret-for-this-origin");
    let object = s.object(3, 50_000);
    let href = format!("{}/refresh", foreign.url);
    let run = s.agent(
        &env_secrets(),
        &[
            init_upload(),
            negotiated_upload(&object, &href, &foreign.url, &[]),
        ],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let refresh = foreign
        .seen()
        .into_iter()
        .find(|r| r.path == "/refresh")
        .expect("refreshed");
    assert_eq!(
        refresh.header("authorization"),
        Some("Bearer helper-secret-for-this-origin")
    );
    assert_never_received(&foreign, &[ENV_XET_TOKEN, ENV_HF_TOKEN, OTHER_HOST_SECRET]);
    assert!(
        !run.all().contains("helper-secret-for-this-origin"),
        "{}",
        run.all()
    );
}

/// An `href` that smuggles a second line into the credential request (`host=` another site)
/// gets no credential at all: git is asked only about plain URLs.
#[test]
fn an_href_with_a_newline_cannot_ask_for_another_hosts_credential() {
    let s = Sandbox::new();
    let foreign = foreign_cas();
    s.helper_for("https://victim.example", OTHER_HOST_SECRET);
    let object = s.object(5, 50_000);
    let href = format!(
        "{}/refresh\nhost=victim.example\nprotocol=https",
        foreign.url
    );
    let run = s.agent(
        &[],
        &[
            init_upload(),
            negotiated_upload(&object, &href, &foreign.url, &[]),
        ],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_never_received(&foreign, &[OTHER_HOST_SECRET]);
    assert!(!run.all().contains(OTHER_HOST_SECRET), "{}", run.all());
}

#[test]
fn a_cas_redirecting_elsewhere_does_not_pass_the_token_on() {
    let s = Sandbox::new();
    let elsewhere = foreign_cas();
    let target = elsewhere.url.clone();
    let cas = Fake::start(move |req: &Seen| Reply {
        status: 307,
        headers: vec![("Location", format!("{target}{}", req.path))],
        body: vec![],
    });
    let object = s.object(4, 50_000);
    // A valid token (expiry 0: never refreshed), for `cas` only.
    let mut upload: serde_json::Value = serde_json::from_str(&negotiated_upload(
        &object,
        "http://127.0.0.1:1/r",
        &cas.url,
        &[],
    ))
    .unwrap();
    upload["action"]["header"]["X-Xet-Access-Token"] = "token-issued-for-the-cas".into();
    upload["action"]["header"]["X-Xet-Token-Expiration"] = "0".into();
    let run = s.agent(&env_secrets(), &[init_upload(), upload.to_string()]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let done = run.completes();
    let message = done[0]["error"]["message"]
        .as_str()
        .expect("the upload fails");
    assert!(message.contains("another origin"), "{message}");
    assert!(!cas.seen().is_empty());
    assert!(elsewhere.seen().is_empty(), "nothing followed the redirect");
    assert!(
        !run.all().contains("token-issued-for-the-cas"),
        "{}",
        run.all()
    );
}

// ---------------------------------------------------------------------------------------------
// Redaction through git, git-lfs and a real server.

fn xet(env: &GitEnv, dir: &Path, args: &[&str]) -> common::git::Output {
    let mut all = vec!["xet"];
    all.extend_from_slice(args);
    env.run_in(dir, "git", &all)
}

#[needs(git_lfs)]
#[test]
fn a_password_in_the_endpoint_url_is_used_and_never_shown() {
    let server = common::server::start();
    let port = server.server.addr.port();
    let secret_url = format!("http://git:{WRITE_TOKEN}@127.0.0.1:{port}");
    let mut env = GitEnv::new();
    env.vars.push(("GIT_XET_LOG_LEVEL".into(), "debug".into()));
    env.vars.push(("GIT_XET_RETRY_SECS".into(), "2".into()));
    let mut shown = String::new();

    let install = xet(
        &env,
        env.path(),
        &["install", "--global", "--endpoint", &secret_url],
    );
    assert_eq!(install.status, Some(0), "{}", install.all());
    assert!(
        install.stderr.contains("clear text") && install.stderr.contains("credential"),
        "install warns: {}",
        install.all()
    );
    assert!(
        install.stdout.contains("git:***@127.0.0.1"),
        "{}",
        install.all()
    );
    shown += &install.all();

    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    let data = common::splitmix64(99, 1 << 20);
    std::fs::write(work.join("data.bin"), &data).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "data"]);
    let push = env.run_with(
        &work,
        "git",
        &["push", "origin", "main"],
        &[("GIT_TRACE", "1")],
    );
    assert_eq!(push.status, Some(0), "{}", push.all());
    shown += &push.all();
    env.git(env.path(), &["clone", "-q", "remote.git", "clone"]);
    let clone = env.path().join("clone");
    assert!(std::fs::read(clone.join("data.bin")).unwrap() == data);

    let journal = std::fs::read_to_string(work.join(".git/xet/transfers.jsonl")).unwrap();
    assert!(
        journal.contains(&format!("\"endpoint\":\"http://127.0.0.1:{port}\"")),
        "{journal}"
    );
    shown += &journal;
    shown += &std::fs::read_to_string(clone.join(".git/xet/transfers.jsonl")).unwrap();
    let ls = xet(&env, &work, &["ls-files", "--json"]);
    assert_eq!(ls.status, Some(0), "{}", ls.all());
    assert!(
        ls.stdout.contains(&format!("http://127.0.0.1:{port}")),
        "{}",
        ls.all()
    );
    shown += &ls.all();
    let status = xet(&env, &work, &["status"]);
    assert!(
        status.stdout.contains("git:***@127.0.0.1"),
        "{}",
        status.all()
    );
    shown += &status.all();
    shown += &xet(&env, &work, &["status", "--json"]).all();

    // A wrong password: the push fails, says why, and shows neither password.
    let wrong = "wrong-password-0123456789";
    env.git(
        env.path(),
        &[
            "config",
            "--global",
            "xet.endpoint",
            &format!("http://git:{wrong}@127.0.0.1:{port}"),
        ],
    );
    std::fs::write(work.join("more.bin"), common::splitmix64(100, 300_000)).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "more"]);
    let failed = env.run_with(
        &work,
        "git",
        &["push", "origin", "main"],
        &[("GIT_TRACE", "1")],
    );
    assert_ne!(failed.status, Some(0));
    assert!(failed.all().contains("401"), "{}", failed.all());
    shown += &failed.all();
    shown += &env.agent_log();

    assert!(env.agent_log().contains("uploaded"), "the log was written");
    for secret in [WRITE_TOKEN, wrong] {
        assert!(!shown.contains(secret), "{secret} was shown:\n{shown}");
    }
}
