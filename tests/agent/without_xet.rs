//! The pre-push hook says when a push's LFS objects went without git-xet, and why: on a plain
//! Git LFS server (basic transfers only, as GitHub's), and with `lfs.basictransfersonly` on a
//! server that offers Xet. It says nothing when nothing was uploaded (no LFS objects, or the
//! server already had them) and, when git-xet uploaded, prints its usual summary instead.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use xet_test_tools::needs;

use crate::common;

use common::git::GitEnv;
use common::server::WRITE_TOKEN;
use xet_client::fake_server::{Fake, Reply, Seen};

/// A plain Git LFS server (the batch API answering `basic` whatever is offered, and uploads by
/// PUT), keeping the oids it stored.
fn plain_lfs_server() -> (Fake, Arc<Mutex<BTreeSet<String>>>) {
    let base: Arc<OnceLock<String>> = Arc::new(OnceLock::new());
    let stored = Arc::new(Mutex::new(BTreeSet::new()));
    let (base2, stored2) = (base.clone(), stored.clone());
    let fake = Fake::start(move |req: &Seen| {
        let json = |status: u16, body: serde_json::Value| Reply {
            status,
            headers: vec![("Content-Type", "application/vnd.git-lfs+json".into())],
            body: body.to_string().into_bytes(),
        };
        if req.method == "POST" && req.path.ends_with("/objects/batch") {
            let request: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
            let have = stored2.lock().unwrap();
            let objects: Vec<serde_json::Value> = request["objects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    let oid = o["oid"].as_str().unwrap();
                    if have.contains(oid) {
                        serde_json::json!({"oid": oid, "size": o["size"]})
                    } else {
                        serde_json::json!({"oid": oid, "size": o["size"], "actions": {"upload": {
                            "href": format!("{}/upload/{oid}", base2.get().unwrap()),
                            "expires_in": 3600,
                        }}})
                    }
                })
                .collect();
            return json(
                200,
                serde_json::json!({"transfer": "basic", "objects": objects}),
            );
        }
        if req.method == "PUT" {
            if let Some(oid) = req.path.strip_prefix("/upload/") {
                stored2.lock().unwrap().insert(oid.to_string());
                return Reply {
                    status: 200,
                    headers: vec![],
                    body: vec![],
                };
            }
        }
        json(404, serde_json::json!({"message": "not found"}))
    });
    base.set(fake.url.clone()).unwrap();
    (fake, stored)
}

/// `git push -q origin main` (or to `remote`) in `work`; must succeed; its stderr.
fn push(env: &GitEnv, work: &Path, remote: &str) -> String {
    let out = env.git(work, &["push", "-q", remote, "main"]);
    out.stderr
}

/// The hook's "without git-xet" lines in `said`.
fn without_lines(said: &str) -> Vec<&str> {
    said.lines()
        .filter(|l| l.contains("without git-xet"))
        .collect()
}

/// A negotiated-mode work tree on `lfs_url` with the pre-push hook (`git xet install --local`).
fn work_tree_with_hook(env: &GitEnv, lfs_url: &str) -> std::path::PathBuf {
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], lfs_url);
    let out = env.run_in(&work, "git", &["xet", "install", "--local"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    // No locking API on the plain server: no hint about it on every push.
    env.git(
        &work,
        &["config", &format!("lfs.{lfs_url}.locksverify"), "false"],
    );
    work
}

#[needs(git_lfs)]
#[test]
fn a_push_to_a_plain_lfs_server_says_git_xet_was_not_used() {
    let (server, stored) = plain_lfs_server();
    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url);
    let env = GitEnv::new();
    let work = work_tree_with_hook(&env, &lfs_url);

    // No LFS object in the push: nothing to say.
    std::fs::write(work.join("README.md"), "hello\n").unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "readme"]);
    let said = push(&env, &work, "origin");
    assert!(without_lines(&said).is_empty(), "{said}");

    // Two LFS objects, uploaded by git-lfs with basic: one line, which says why and what to do.
    std::fs::write(work.join("a.bin"), common::splitmix64(1, 300_000)).unwrap();
    std::fs::write(work.join("b.bin"), common::splitmix64(2, 200_000)).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "models"]);
    let said = push(&env, &work, "origin");
    eprintln!("the push said:\n{said}");
    assert_eq!(stored.lock().unwrap().len(), 2, "git-lfs uploaded both");
    let lines = without_lines(&said);
    assert_eq!(lines.len(), 1, "one line: {said}");
    let line = lines[0];
    assert!(
        line.starts_with("git-xet: git-lfs uploaded 2 LFS objects (488.3 KiB) without git-xet"),
        "{line}"
    );
    assert!(
        line.contains(&format!("the LFS server {lfs_url} does not offer Xet"))
            && line.contains("git xet serve")
            && line.contains("git xet status"),
        "{line}"
    );
    assert!(!said.contains("git-xet: pushed"), "{said}");
    // The agent's log says it too.
    assert!(
        env.agent_log().contains("push without git-xet"),
        "{}",
        env.agent_log()
    );

    // A push of commits without new LFS objects: nothing.
    std::fs::write(work.join("README.md"), "hello again\n").unwrap();
    env.git(&work, &["commit", "-q", "-am", "readme again"]);
    let said = push(&env, &work, "origin");
    assert!(without_lines(&said).is_empty(), "{said}");

    // The same objects pushed to another git remote on the same LFS server, which has them
    // already: git-lfs uploads nothing, and nothing is said.
    env.git(env.path(), &["init", "-q", "--bare", "other.git"]);
    env.git(&work, &["remote", "add", "other", "../other.git"]);
    let batches = || {
        server
            .seen()
            .iter()
            .filter(|s| s.path.ends_with("/objects/batch"))
            .count()
    };
    let before = batches();
    let said = push(&env, &work, "other");
    assert!(without_lines(&said).is_empty(), "{said}");
    assert_eq!(stored.lock().unwrap().len(), 2);
    assert_eq!(
        batches() - before,
        2,
        "the hook's check asked the server (and git-lfs did): the objects were there"
    );

    // The state files of the hook are gone.
    let leftovers: Vec<_> = std::fs::read_dir(work.join(".git/xet"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pre-push-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[needs(git_lfs)]
#[test]
fn the_hook_says_when_configuration_keeps_git_xet_out_and_not_when_it_was_used() {
    let server = common::server::start();
    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    let env = GitEnv::new();
    let work = work_tree_with_hook(&env, &lfs_url);

    // The server offers Xet: git-xet uploads, and the usual summary is printed.
    std::fs::write(work.join("a.bin"), common::splitmix64(3, 300_000)).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "a"]);
    let said = push(&env, &work, "origin");
    assert!(said.contains("git-xet: pushed 1 object"), "{said}");
    assert!(without_lines(&said).is_empty(), "{said}");

    // lfs.basictransfersonly: git-lfs uploads with basic; the line names the setting.
    env.git(&work, &["config", "lfs.basictransfersonly", "true"]);
    std::fs::write(work.join("b.bin"), common::splitmix64(4, 100_000)).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "b"]);
    let said = push(&env, &work, "origin");
    eprintln!("the push said:\n{said}");
    let lines = without_lines(&said);
    assert_eq!(lines.len(), 1, "{said}");
    assert!(
        lines[0].starts_with("git-xet: git-lfs uploaded 1 LFS object (97.7 KiB) without git-xet")
            && lines[0].contains("lfs.basictransfersonly is true"),
        "{}",
        lines[0]
    );
}
