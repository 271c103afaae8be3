//! `git xet status` in the situations it used to call "No problems found": a wrong stored
//! credential, a `file://` LFS URL (git-lfs's own adapter, git-xet never started), an endpoint
//! directory that cannot be created or is not a store, each remote's own LFS URL and endpoint,
//! an LFS URL that answers 404.
//! And it only reads: no store and no directory is created. Real git and git-lfs, a real
//! `git xet serve` on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::Path;

use common::git::GitEnv;
use common::server::{self, WRITE_TOKEN};
use serde_json::Value;

/// `git xet status --json` in `dir`, with extra variables; must exit 0.
fn status(env: &GitEnv, dir: &Path, extra: &[(&str, &str)]) -> Value {
    let out = env.run_with(dir, "git", &["xet", "status", "--json"], extra);
    assert_eq!(out.status, Some(0), "status: {}", out.all());
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// `git xet status` (text) in `dir`; must exit 0.
fn status_text(env: &GitEnv, dir: &Path, extra: &[(&str, &str)]) -> String {
    let out = env.run_with(dir, "git", &["xet", "status"], extra);
    assert_eq!(out.status, Some(0), "status: {}", out.all());
    out.stdout
}

fn warnings(v: &Value) -> Vec<String> {
    v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

fn notes(v: &Value) -> Vec<String> {
    v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

fn has(list: &[String], needle: &str) -> bool {
    list.iter().any(|w| w.contains(needle))
}

/// A work repository `work` with git-xet registered locally.
fn repo(env: &GitEnv) -> std::path::PathBuf {
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    let out = env.run_in(&work, "git", &["xet", "install", "--local"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    work
}

#[needs(git_lfs)]
#[test]
fn a_wrong_stored_credential_is_told_apart_from_a_right_one() {
    let server = server::start();
    let env = GitEnv::new();
    let work = repo(&env);
    env.git(&work, &["config", "lfs.standalonetransferagent", "xet"]);
    env.git(&work, &["config", "xet.endpoint", server.url()]);

    // No credential at all: the server wants one.
    let v = status(&env, &work, &[]);
    let cred = &v["repository"]["endpoint"]["credential"];
    assert_eq!(cred["verdict"], "missing", "{v}");
    assert_eq!(cred["http_status"], 401, "{v}");
    assert!(has(&warnings(&v), "needs a token"), "{v}");

    // A wrong token in the credential helper: refused, said so, never shown.
    let wrong = "wrong-token-that-must-stay-secret-42";
    env.credential_helper(wrong);
    let v = status(&env, &work, &[]);
    let cred = &v["repository"]["endpoint"]["credential"];
    assert_eq!(cred["verdict"], "refused", "{v}");
    assert_eq!(cred["source"], "your git credential helper", "{v}");
    let w = warnings(&v);
    assert!(has(&w, "the stored credential is wrong"), "{w:?}");
    assert!(has(&w, "git credential approve"), "{w:?}");
    let text = status_text(&env, &work, &[]);
    assert!(text.contains("REFUSED"), "{text}");
    assert!(
        !text.contains(wrong) && !v.to_string().contains(wrong),
        "{text}"
    );

    // GIT_XET_TOKEN comes first: a right one is accepted, a wrong one refused and named.
    let v = status(&env, &work, &[("GIT_XET_TOKEN", WRITE_TOKEN)]);
    let cred = &v["repository"]["endpoint"]["credential"];
    assert_eq!(cred["verdict"], "accepted", "{v}");
    assert_eq!(cred["source"], "GIT_XET_TOKEN", "{v}");
    assert!(warnings(&v).is_empty(), "{v}");
    let v = status(&env, &work, &[("GIT_XET_TOKEN", wrong)]);
    assert_eq!(
        v["repository"]["endpoint"]["credential"]["verdict"],
        "refused"
    );
    assert!(has(&warnings(&v), "from GIT_XET_TOKEN"), "{v}");

    // The right token in the credential helper: no problem.
    env.credential_helper(WRITE_TOKEN);
    let text = status_text(&env, &work, &[]);
    assert!(text.contains("No problems found."), "{text}");
    assert!(text.contains("accepted"), "{text}");
    assert!(!text.contains(WRITE_TOKEN), "{text}");

    // Negotiated mode: the LFS server is asked with the credential git-lfs would send.
    env.git(&work, &["config", "--unset", "lfs.standalonetransferagent"]);
    env.git(&work, &["config", "--unset", "xet.endpoint"]);
    env.git(
        &work,
        &["remote", "add", "origin", "https://example.invalid/t/m.git"],
    );
    let lfs_url = format!("{}/t/m.git/info/lfs", server.url());
    env.git(&work, &["config", "lfs.url", &lfs_url]);
    let v = status(&env, &work, &[]);
    let checks = v["repository"]["credential_checks"].as_array().unwrap();
    assert_eq!(checks.len(), 1, "{v}");
    assert_eq!(checks[0]["verdict"], "accepted", "{v}");
    env.credential_helper(wrong);
    let v = status(&env, &work, &[]);
    assert_eq!(
        v["repository"]["credential_checks"][0]["verdict"], "refused",
        "{v}"
    );
    assert!(has(&warnings(&v), "the stored credential is wrong"), "{v}");
    assert!(!v.to_string().contains(wrong));
}

#[needs(git_lfs)]
#[test]
fn an_lfs_url_that_answers_not_found_is_a_problem() {
    let server = server::start();
    let env = GitEnv::new();
    let work = repo(&env);
    env.credential_helper(WRITE_TOKEN);
    env.git(
        &work,
        &["remote", "add", "origin", "https://example.invalid/t/m.git"],
    );
    // A typo in the LFS URL: nothing answers the batch API there.
    let typo = format!("{}/t/m.git/info/lsf", server.url());
    env.git(&work, &["config", "lfs.url", &typo]);
    let v = status(&env, &work, &[]);
    assert_eq!(
        v["repository"]["credential_checks"][0]["http_status"], 404,
        "{v}"
    );
    let w = warnings(&v);
    assert!(has(&w, "answers 404"), "{w:?}");
    assert!(has(&w, "ends in `/info/lfs`"), "{w:?}");
    let text = status_text(&env, &work, &[]);
    assert!(!text.contains("No problems found"), "{text}");

    // The right URL: no problem.
    let right = format!("{}/t/m.git/info/lfs", server.url());
    env.git(&work, &["config", "lfs.url", &right]);
    let text = status_text(&env, &work, &[]);
    assert!(text.contains("No problems found."), "{text}");
}

#[needs(git_lfs)]
#[test]
fn a_file_lfs_url_is_called_out_because_git_xet_never_runs_there() {
    let env = GitEnv::new();
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    let work = repo(&env);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    let v = status(&env, &work, &[]);
    let origin = &v["repository"]["remotes"][0];
    assert_eq!(origin["name"], "origin", "{v}");
    assert_eq!(origin["transfer"], "git-lfs-file", "{v}");
    assert!(
        origin["lfs_url"].as_str().unwrap().starts_with("file://"),
        "{v}"
    );
    let w = warnings(&v);
    assert!(
        has(&w, "own file adapter and never starts git-xet"),
        "{w:?}"
    );
    assert!(
        has(
            &w,
            "git xet install --local --endpoint DIR-or-URL --remote origin"
        ),
        "{w:?}"
    );

    // Standalone mode for that URL (url-matched, as git-lfs matches it): git-xet runs there.
    let url = origin["lfs_url"].as_str().unwrap().to_string();
    env.git(
        &work,
        &[
            "config",
            &format!("lfs.{url}.standalonetransferagent"),
            "xet",
        ],
    );
    let store = env.path().join("store");
    env.git(&work, &["config", "xet.endpoint", store.to_str().unwrap()]);
    let v = status(&env, &work, &[]);
    let origin = &v["repository"]["remotes"][0];
    assert_eq!(origin["transfer"], "standalone", "{v}");
    assert_eq!(origin["endpoint"]["value"], store.to_str().unwrap(), "{v}");
    assert_eq!(origin["endpoint"]["state"], "missing", "{v}");
    assert!(!has(&warnings(&v), "file adapter"), "{v}");
    assert!(!store.exists(), "status created {}", store.display());
}

#[needs(git_lfs)]
#[test]
fn endpoint_directories_that_cannot_work_are_warned_about_and_nothing_is_created() {
    let env = GitEnv::new();
    let work = repo(&env);
    env.git(&work, &["config", "lfs.standalonetransferagent", "xet"]);
    let set = |dir: &Path| env.git(&work, &["config", "xet.endpoint", dir.to_str().unwrap()]);

    // A parent is a file.
    let file = env.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    set(&file.join("store"));
    let v = status(&env, &work, &[]);
    assert_eq!(v["repository"]["endpoint"]["state"], "cannot_create", "{v}");
    let w = warnings(&v);
    assert!(
        has(&w, "cannot be created") && has(&w, "is a file, not a directory"),
        "{w:?}"
    );
    assert!(file.is_file());

    // The endpoint is itself a file.
    set(&file);
    let v = status(&env, &work, &[]);
    assert_eq!(v["repository"]["endpoint"]["state"], "not_a_directory");
    assert!(has(&warnings(&v), "is not a directory"), "{v}");

    // A directory with other files and no STORE-VERSION: neither pushes nor pulls work.
    let other = env.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    set(&other);
    let v = status(&env, &work, &[]);
    assert_eq!(v["repository"]["endpoint"]["state"], "not_a_store");
    assert!(has(&warnings(&v), "is not a git-xet store"), "{v}");
    assert!(!other.join("STORE-VERSION").exists());

    // A store of another version.
    let future = env.path().join("future");
    std::fs::create_dir_all(&future).unwrap();
    std::fs::write(future.join("STORE-VERSION"), "git-xet-store 9\n").unwrap();
    set(&future);
    let v = status(&env, &work, &[]);
    assert_eq!(v["repository"]["endpoint"]["state"], "other_version");
    assert!(has(&warnings(&v), "git-xet-store 9"), "{v}");

    // No permission to create it (root may write anywhere: then only the rest is checked).
    let locked = env.path().join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    set(&locked.join("store"));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    let root = xet_protocol::util::os::may_write_dir(&locked);
    let v = status(&env, &work, &[]);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    if !root {
        assert_eq!(v["repository"]["endpoint"]["state"], "cannot_create", "{v}");
        assert!(has(&warnings(&v), "no permission"), "{v}");
    } else {
        assert_eq!(v["repository"]["endpoint"]["state"], "missing", "{v}");
    }
    assert!(!locked.join("store").exists());

    // Missing, in a repository without LFS files: a note (the first push creates it).
    let missing = env.path().join("deep/missing/store");
    set(&missing);
    let v = status(&env, &work, &[]);
    assert_eq!(v["repository"]["endpoint"]["state"], "missing");
    assert!(has(&notes(&v), "does not exist yet"), "{v}");
    assert!(!has(&warnings(&v), "missing/store"), "{v}");
    // … but with LFS files in the checkout, nothing could be downloaded: a warning.
    env.git(&work, &["lfs", "track", "*.bin"]);
    std::fs::write(work.join("a.bin"), b"data").unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "lfs file"]);
    let text = status_text(&env, &work, &[]);
    assert!(
        text.contains("has 1 LFS file but the endpoint directory") && text.contains("no store"),
        "{text}"
    );
    assert!(
        !env.path().join("deep").exists(),
        "status created the endpoint's parents"
    );
}

#[needs(git_lfs)]
#[test]
fn each_remote_shows_its_own_lfs_url_and_endpoint() {
    let first = server::start();
    let second = server::start();
    let env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    let work = repo(&env);
    env.git(
        &work,
        &["remote", "add", "origin", "https://example.invalid/t/m.git"],
    );
    env.git(
        &work,
        &["remote", "add", "mirror", "https://example.invalid/t/n.git"],
    );
    let a = format!("{}/t/m.git/info/lfs", first.url());
    let b = format!("{}/t/n.git/info/lfs", second.url());
    env.git(&work, &["config", "remote.origin.lfsurl", &a]);
    env.git(&work, &["config", "remote.mirror.lfsurl", &b]);

    // Negotiated: each remote's LFS URL, each server checked.
    let v = status(&env, &work, &[]);
    let remotes = v["repository"]["remotes"].as_array().unwrap();
    assert_eq!(remotes.len(), 2, "{v}");
    assert_eq!(remotes[0]["lfs_url"], a.as_str(), "{v}");
    assert_eq!(remotes[1]["name"], "mirror", "{v}");
    assert_eq!(remotes[1]["lfs_url"], b.as_str(), "{v}");
    assert_eq!(remotes[1]["transfer"], "negotiated", "{v}");
    let urls: Vec<&str> = v["repository"]["reachability"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["url"].as_str().unwrap())
        .collect();
    assert!(
        urls.contains(&format!("{}/health", first.url()).as_str())
            && urls.contains(&format!("{}/health", second.url()).as_str()),
        "{urls:?}"
    );
    assert_eq!(
        v["repository"]["credential_checks"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{v}"
    );
    assert!(warnings(&v).is_empty(), "{v}");

    // lfs.url silently wins over the mirror's own remote.<name>.lfsurl in git-lfs: said so.
    env.git(&work, &["config", "lfs.url", &a]);
    let v = status(&env, &work, &[]);
    assert_eq!(v["repository"]["remotes"][1]["lfs_url"], a.as_str(), "{v}");
    assert!(
        has(&warnings(&v), "remote.mirror.lfsurl is") && has(&warnings(&v), "takes precedence"),
        "{v}"
    );
    env.git(&work, &["config", "--unset", "lfs.url"]);

    // Standalone: the repository's endpoint and the mirror's own, each with its source.
    let store = env.path().join("store");
    env.install_local(&work, store.to_str().unwrap());
    let out = env.run_in(
        &work,
        "git",
        &[
            "xet",
            "install",
            "--local",
            "--endpoint",
            second.url(),
            "--remote",
            "mirror",
        ],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    let v = status(&env, &work, &[]);
    let remotes = v["repository"]["remotes"].as_array().unwrap();
    assert_eq!(remotes[0]["transfer"], "standalone", "{v}");
    assert_eq!(remotes[0]["endpoint"]["value"], store.to_str().unwrap());
    assert_eq!(remotes[0]["endpoint"]["source"], "git config xet.endpoint");
    assert_eq!(remotes[1]["endpoint"]["value"], second.url(), "{v}");
    assert_eq!(
        remotes[1]["endpoint"]["source"],
        "git config remote.mirror.xetEndpoint"
    );
    assert_eq!(
        remotes[1]["endpoint"]["credential"]["verdict"], "accepted",
        "{v}"
    );
    let text = status_text(&env, &work, &[]);
    assert!(
        text.contains(&format!("mirror: git-xet standalone -> {}", second.url())),
        "{text}"
    );
    assert!(!store.exists(), "status created the store");

    // git-lfs cannot verify in standalone mode: lfs.pruneverifyremotealways is a trap.
    env.git(&work, &["config", "lfs.pruneverifyremotealways", "true"]);
    let v = status(&env, &work, &[]);
    assert!(has(&warnings(&v), "git xet prune"), "{v}");
}

#[needs(git_lfs)]
#[test]
fn an_install_without_the_download_registration_is_pointed_out() {
    let env = GitEnv::new();
    let work = repo(&env);
    let v = status(&env, &work, &[]);
    assert!(!has(&notes(&v), "xet-download"), "{v}");
    // As an older git-xet installed it: the `xet` agent only.
    for key in ["path", "args", "concurrent", "direction"] {
        env.run_in(
            &work,
            "git",
            &[
                "config",
                "--local",
                "--unset",
                &format!("lfs.customtransfer.xet-download.{key}"),
            ],
        );
    }
    let v = status(&env, &work, &[]);
    assert!(has(&notes(&v), "lfs.customtransfer.xet-download"), "{v}");
    assert!(
        status_text(&env, &work, &[]).contains("git xet install"),
        "the fix is said"
    );
}
