//! Recorded protocol sessions against `git-xet transfer`, without git-lfs: the message shapes
//! git-lfs really sends (action `null`, zero `expires_at`, unknown fields, missing `header`) and
//! the mistakes it must survive (requests out of order, the wrong direction, malformed lines).
//! The endpoint is an embedded store given by `GIT_XET_ENDPOINT`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::Path;
use std::process::Command;

use crate::common;

struct Session {
    status: Option<i32>,
    replies: Vec<serde_json::Value>,
    stderr: String,
}

/// Runs the agent in `dir` with `lines` on stdin and collects its replies.
fn session(dir: &Path, store: &Path, lines: &[String]) -> Session {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_git-xet"));
    cmd.arg("transfer")
        .current_dir(dir)
        .env("GIT_XET_ENDPOINT", store)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", dir.join("no-global-config"))
        .env("GIT_XET_CACHE_DIR", store.with_extension("cache"))
        .env_remove("GIT_XET_LOG");
    let input: Vec<u8> = lines
        .iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect();
    let run = common::agent::run_agent(cmd, input);
    Session {
        status: run.status,
        replies: run.replies,
        stderr: run.stderr,
    }
}

fn init(op: &str) -> String {
    format!(
        r#"{{"event":"init","operation":"{op}","remote":"origin","concurrent":true,"concurrenttransfers":8}}"#
    )
}

fn completes(s: &Session) -> Vec<&serde_json::Value> {
    s.replies
        .iter()
        .filter(|r| r["event"] == "complete")
        .collect()
}

fn git_init(dir: &Path) {
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn standalone_upload_then_download_with_git_lfs_shaped_messages() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git_init(&repo);
    let store = dir.path().join("store");
    let data = common::splitmix64(7, 3 << 20);
    let oid = common::sha256_hex(&data);
    let object = dir.path().join("object");
    std::fs::write(&object, &data).unwrap();

    // Upload: action null (standalone), an unknown field, then a second copy of the same
    // object (skipped as already stored), then terminate.
    let upload = format!(
        r#"{{"event":"upload","oid":"{oid}","size":{},"path":"{}","action":null,"extra":{{"x":1}}}}"#,
        data.len(),
        object.display()
    );
    let s = session(
        &repo,
        &store,
        &[
            init("upload"),
            upload.clone(),
            upload,
            r#"{"event":"terminate"}"#.into(),
        ],
    );
    assert_eq!(s.status, Some(0), "{}", s.stderr);
    assert_eq!(
        s.replies[0],
        serde_json::json!({}),
        "init answered with {{}}"
    );
    let done = completes(&s);
    assert_eq!(done.len(), 2, "{:?}", s.replies);
    for c in &done {
        assert_eq!(c["oid"], oid.as_str());
        assert!(c.get("error").is_none(), "{c}");
    }
    // Progress: starts with the 1-byte release, is monotonic, ends at the size, and each
    // bytesSinceLast is the difference.
    let progress: Vec<&serde_json::Value> = s
        .replies
        .iter()
        .take_while(|r| r["event"] != "complete")
        .filter(|r| r["event"] == "progress")
        .collect();
    assert_eq!(progress[0]["bytesSoFar"], 1);
    let mut last = 0;
    for p in &progress {
        let so_far = p["bytesSoFar"].as_u64().unwrap();
        assert!(so_far > last);
        assert_eq!(p["bytesSinceLast"].as_u64().unwrap(), so_far - last);
        last = so_far;
    }
    assert_eq!(last, data.len() as u64);

    // Download: zero expires_at on a header-less action is what git-lfs sends for a server
    // without one; here it is null (standalone). The file lands in .git/lfs/tmp.
    let download = format!(
        r#"{{"event":"download","oid":"{oid}","size":{},"action":null}}"#,
        data.len()
    );
    let s = session(
        &repo,
        &store,
        &[
            init("download"),
            download,
            r#"{"event":"terminate"}"#.into(),
        ],
    );
    assert_eq!(s.status, Some(0), "{}", s.stderr);
    let done = completes(&s);
    assert_eq!(done.len(), 1);
    let path = done[0]["path"].as_str().expect("a path");
    assert!(Path::new(path).is_absolute());
    assert!(
        Path::new(path).starts_with(repo.join(".git/lfs/tmp")),
        "{path} is in git-lfs's temp dir"
    );
    assert!(std::fs::read(path).unwrap() == data);
}

#[test]
fn per_object_failures_are_answered_and_the_process_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git_init(&repo);
    let store = dir.path().join("store");
    let data = b"some content\n".repeat(100);
    let oid = common::sha256_hex(&data);
    let object = dir.path().join("object");
    std::fs::write(&object, &data).unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, b"other content").unwrap();
    let other_oid = common::sha256_hex(b"never uploaded");
    let lines = vec![
        init("upload"),
        // The wrong direction for this process.
        format!(r#"{{"event":"download","oid":"{oid}","size":1,"action":null}}"#),
        // Content that does not match the oid.
        format!(
            r#"{{"event":"upload","oid":"{oid}","size":13,"path":"{}","action":null}}"#,
            wrong.display()
        ),
        // A missing file.
        format!(
            r#"{{"event":"upload","oid":"{oid}","size":13,"path":"{}","action":null}}"#,
            dir.path().join("missing").display()
        ),
        // No path.
        format!(r#"{{"event":"upload","oid":"{oid}","size":13,"action":null}}"#),
        // Negotiated, but the server sent no CAS URL (zero expires_at, no header).
        format!(
            r#"{{"event":"upload","oid":"{oid}","size":{},"path":"{}","action":{{"href":"https://lfs.example/x","expires_at":"0001-01-01T00:00:00Z"}}}}"#,
            data.len(),
            object.display()
        ),
        // And a good one still works afterwards.
        format!(
            r#"{{"event":"upload","oid":"{oid}","size":{},"path":"{}","action":null}}"#,
            data.len(),
            object.display()
        ),
        r#"{"event":"terminate"}"#.into(),
    ];
    let s = session(&repo, &store, &lines);
    assert_eq!(s.status, Some(0), "{}", s.stderr);
    let done = completes(&s);
    assert_eq!(done.len(), 6, "{:?}", s.replies);
    let errors: Vec<String> = done[..5]
        .iter()
        .map(|c| {
            assert_eq!(c["error"]["code"], 2, "{c}");
            c["error"]["message"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(
        errors[0].contains("download") && errors[0].contains("Upload"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains("does not match its oid"),
        "{}",
        errors[1]
    );
    assert!(
        errors[2].contains("cannot read the LFS object"),
        "{}",
        errors[2]
    );
    assert!(errors[3].contains("without a path"), "{}", errors[3]);
    assert!(errors[4].contains("X-Xet-Cas-Url"), "{}", errors[4]);
    assert!(done[5].get("error").is_none(), "{}", done[5]);

    // Downloading an object nobody uploaded fails with a message saying so.
    let s = session(
        &repo,
        &store,
        &[
            init("download"),
            format!(r#"{{"event":"download","oid":"{other_oid}","size":14,"action":null}}"#),
        ],
    );
    assert_eq!(
        s.status,
        Some(0),
        "EOF without terminate still exits 0: {}",
        s.stderr
    );
    let done = completes(&s);
    assert!(
        done[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has no file with LFS oid"),
        "{}",
        done[0]
    );
    assert_eq!(
        common::git::count_files(&repo.join(".git/lfs/tmp")),
        0,
        "no temp file left behind"
    );
}

#[test]
fn protocol_violations_without_an_object_end_the_process_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let oid = common::sha256_hex(b"x");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["not json".into()], "not a JSON object"),
        (
            vec![init("upload"), r#"{"event":"dance"}"#.into()],
            "unknown event",
        ),
        (vec![init("upload"), init("upload")], "second init"),
        (
            vec![format!(
                r#"{{"event":"upload","oid":"{oid}","size":1,"path":"/x"}}"#
            )],
            "before init",
        ),
    ];
    for (lines, expected) in cases {
        let s = session(dir.path(), &store, &lines);
        assert_eq!(s.status, Some(1), "{lines:?} must fail: {}", s.stderr);
        assert!(
            s.stderr.contains(expected),
            "{lines:?}: stderr {}",
            s.stderr
        );
        for r in &s.replies {
            assert_ne!(r["event"], "complete", "nothing to complete: {r}");
        }
    }
}
