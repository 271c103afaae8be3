//! Standalone endpoints per remote (`remote.<name>.xetEndpoint`, written by `git xet install
//! --local --endpoint … --remote NAME`), and downloads that never create a store. Real git and
//! git-lfs, embedded stores in temporary directories.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::git::{count_files, GitEnv};
use xet_format::LfsOid;

fn xet(env: &GitEnv, dir: &Path, args: &[&str]) -> common::git::Output {
    let mut all = vec!["xet"];
    all.extend_from_slice(args);
    env.run_in(dir, "git", &all)
}

fn ok(out: common::git::Output, what: &str) -> common::git::Output {
    assert_eq!(out.status, Some(0), "{what}: {}", out.all());
    out
}

/// Whether the store in `dir` has the file with LFS oid `oid` (hex).
fn holds(dir: &Path, oid: &str) -> bool {
    let store = common::open_store_after_transfers(dir);
    let found = store
        .file_by_oid(&LfsOid::from_hex(oid).unwrap())
        .expect("the index answers");
    found.is_some()
}

/// Commits `name` with `data` in `work`; returns its oid.
fn commit(env: &GitEnv, work: &Path, name: &str, data: &[u8]) -> String {
    std::fs::write(work.join(name), data).unwrap();
    env.git(work, &["add", "."]);
    env.git(work, &["commit", "-q", "-m", name]);
    common::sha256_hex(data)
}

/// Two bare remotes (`remote.git`, `mirror.git`), a work repository with both as remotes
/// (`origin`, `mirror`) tracking `*.bin`, and git-xet installed locally: `store-a` for the
/// repository, `store-b` for `mirror`.
fn two_remotes(env: &GitEnv) -> (PathBuf, PathBuf, PathBuf) {
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "--bare", "mirror.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    env.git(&work, &["remote", "add", "mirror", "../mirror.git"]);
    let a = env.path().join("store-a");
    let b = env.path().join("store-b");
    ok(
        xet(
            env,
            &work,
            &["install", "--local", "--endpoint", a.to_str().unwrap()],
        ),
        "install",
    );
    let out = ok(
        xet(
            env,
            &work,
            &[
                "install",
                "--local",
                "--endpoint",
                b.to_str().unwrap(),
                "--remote",
                "mirror",
            ],
        ),
        "install --remote mirror",
    );
    assert!(
        out.stdout.contains("remote.mirror.xetEndpoint"),
        "{}",
        out.stdout
    );
    (work, a, b)
}

#[needs(git_lfs)]
#[test]
fn each_remote_pushes_to_its_own_endpoint_without_an_override() {
    let env = GitEnv::new();
    let (work, a, b) = two_remotes(&env);
    assert_eq!(
        env.git(&work, &["config", "--get", "remote.mirror.xetEndpoint"])
            .stdout
            .trim(),
        b.to_str().unwrap()
    );

    // One push per remote, no environment: each lands in its own store.
    let one = commit(&env, &work, "one.bin", &common::splitmix64(1, 300_000));
    env.git(&work, &["push", "-q", "origin", "main"]);
    let two = commit(&env, &work, "two.bin", &common::splitmix64(2, 200_000));
    env.git(&work, &["push", "-q", "mirror", "main"]);
    assert!(holds(&a, &one), "origin's push went to store-a");
    assert!(!holds(&a, &two), "mirror's push must not reach store-a");
    assert!(
        holds(&b, &one) && holds(&b, &two),
        "mirror's push sent both commits' objects to store-b"
    );
    env.git(&work, &["push", "-q", "origin", "main"]);
    assert!(holds(&a, &two), "origin catches up in store-a");

    // A push to a URL (git-lfs names the URL in init): the remote with that URL decides.
    let three = commit(&env, &work, "three.bin", &common::splitmix64(3, 100_000));
    env.git(&work, &["push", "-q", "../mirror.git", "main"]);
    assert!(
        holds(&b, &three),
        "the push to mirror's URL went to store-b"
    );
    assert!(!holds(&a, &three));

    // The journal names the endpoint of each upload.
    let journal = std::fs::read_to_string(work.join(".git/xet/transfers.jsonl")).unwrap();
    let endpoint_of = |oid: &str| -> Vec<String> {
        journal
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["oid"] == oid && r["direction"] == "upload")
            .map(|r| r["endpoint"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        endpoint_of(&three).iter().all(|e| e.contains("store-b")),
        "{journal}"
    );

    // A clone of the mirror whose origin uses store-b gets every file back.
    env.clone_skip_smudge("mirror.git", "clone");
    let clone = env.path().join("clone");
    ok(
        xet(
            &env,
            &clone,
            &[
                "install",
                "--local",
                "--endpoint",
                b.to_str().unwrap(),
                "--remote",
                "origin",
            ],
        ),
        "install in the clone",
    );
    env.git(&clone, &["lfs", "pull"]);
    assert!(std::fs::read(clone.join("three.bin")).unwrap() == common::splitmix64(3, 100_000));
    assert!(std::fs::read(clone.join("one.bin")).unwrap() == common::splitmix64(1, 300_000));

    // Uninstall removes the remote's endpoint with the rest.
    ok(xet(&env, &work, &["uninstall", "--local"]), "uninstall");
    let out = env.run_in(
        &work,
        "git",
        &["config", "--get", "remote.mirror.xetEndpoint"],
    );
    assert_eq!(out.status, Some(1), "{}", out.all());
}

#[needs(git_lfs)]
#[test]
fn install_remote_needs_local_scope_an_existing_remote_and_an_endpoint() {
    let env = GitEnv::new();
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    let out = xet(
        &env,
        &work,
        &[
            "install",
            "--global",
            "--endpoint",
            "/x",
            "--remote",
            "origin",
        ],
    );
    assert_eq!(out.status, Some(1), "{}", out.all());
    assert!(
        out.stderr.contains("--remote needs --local"),
        "{}",
        out.all()
    );

    let out = xet(
        &env,
        &work,
        &["install", "--local", "--endpoint", "/x", "--remote", "nope"],
    );
    assert_eq!(out.status, Some(1), "{}", out.all());
    assert!(
        out.stderr.contains("no remote named \"nope\"") && out.stderr.contains("git remote add"),
        "{}",
        out.all()
    );

    let out = xet(&env, &work, &["install", "--local", "--remote", "origin"]);
    assert_eq!(
        out.status,
        Some(2),
        "clap refuses --remote alone: {}",
        out.all()
    );
    assert!(out.stderr.contains("--endpoint"), "{}", out.all());
}

#[needs(git_lfs)]
#[test]
fn a_download_from_a_directory_without_a_store_fails_and_creates_nothing() {
    let env = GitEnv::new();
    let (work, a, _) = two_remotes(&env);
    let data = common::splitmix64(9, 150_000);
    commit(&env, &work, "data.bin", &data);
    env.git(&work, &["push", "-q", "origin", "main"]);

    // A clone whose endpoint is a directory that does not exist: the checkout fails with a
    // message, and no store appears there.
    let missing = env.path().join("nowhere/store");
    let global = xet(
        &env,
        env.path(),
        &[
            "install",
            "--global",
            "--endpoint",
            missing.to_str().unwrap(),
        ],
    );
    ok(global, "install --global");
    let out = env.run_in(env.path(), "git", &["clone", "-q", "remote.git", "clone"]);
    let text = out.all();
    assert!(
        text.contains("does not exist") && text.contains("holds no git-xet store"),
        "{text}"
    );
    assert!(text.contains("nothing was created"), "{text}");
    assert!(
        !env.path().join("nowhere").exists(),
        "a download created {}",
        missing.display()
    );
    let clone = env.path().join("clone");
    assert_eq!(count_files(&clone.join(".git/lfs/objects")), 0);

    // An empty directory stays empty.
    let empty = env.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = env.run_with(
        &clone,
        "git",
        &["lfs", "pull"],
        &[("GIT_XET_ENDPOINT", empty.to_str().unwrap())],
    );
    assert_ne!(out.status, Some(0), "{}", out.all());
    assert!(out.all().contains("is empty"), "{}", out.all());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);

    // Pointed at the real store, the same clone downloads.
    env.git(&clone, &["config", "xet.endpoint", a.to_str().unwrap()]);
    env.git(&clone, &["lfs", "pull"]);
    assert!(std::fs::read(clone.join("data.bin")).unwrap() == data);
}

#[needs(git_lfs)]
#[test]
fn the_pre_push_guard_expects_git_xet_for_a_remote_with_its_own_endpoint() {
    let env = GitEnv::new();
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "--bare", "mirror.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    env.git(&work, &["remote", "add", "mirror", "../mirror.git"]);
    ok(xet(&env, &work, &["install", "--local"]), "install --local");
    std::fs::write(work.join("README"), "x\n").unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "x"]);
    // Only the mirror expects git-xet, and git-lfs cannot run it.
    let store = env.path().join("store-b");
    env.git(
        &work,
        &[
            "config",
            "remote.mirror.xetEndpoint",
            store.to_str().unwrap(),
        ],
    );
    env.git(&work, &["config", "--unset", "lfs.customtransfer.xet.path"]);
    let out = env.run_in(&work, "git", &["push", "-q", "mirror", "main"]);
    assert_ne!(out.status, Some(0), "{}", out.all());
    assert!(
        out.stderr.contains("remote.mirror.xetEndpoint is set")
            && out.stderr.contains("git xet install"),
        "{}",
        out.all()
    );
    let out = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    assert_eq!(out.status, Some(0), "origin expects nothing: {}", out.all());
}
