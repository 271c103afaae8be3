//! Pruning in standalone mode loses nothing that exists nowhere else: `git lfs prune
//! --verify-remote` (which git-lfs cannot really do through a standalone agent: it counts every
//! object as verified) is refused by the agent, and `git xet prune` deletes only what the
//! endpoint holds. Real git and git-lfs, embedded stores.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};

use common::git::{GitEnv, Output};
use common::server::{self, WRITE_TOKEN};
use xet_format::LfsOid;

fn object_path(work: &Path, oid: &str) -> PathBuf {
    work.join(".git/lfs/objects")
        .join(&oid[0..2])
        .join(&oid[2..4])
        .join(oid)
}

fn local(work: &Path, oid: &str) -> bool {
    object_path(work, oid).is_file()
}

/// Whether the store in `dir` holds `oid` (false if there is no store: nothing is created).
fn held(dir: &Path, oid: &str) -> bool {
    if !dir.join("STORE-VERSION").is_file() {
        return false;
    }
    let store = common::open_store_after_transfers(dir);
    store
        .intact_file_by_oid(&LfsOid::from_hex(oid).unwrap(), None)
        .unwrap()
        .is_some()
}

/// Every object is still somewhere: in the work repository or in one of the stores.
fn nothing_lost(work: &Path, stores: &[&Path], oids: &[String]) {
    for oid in oids {
        assert!(
            local(work, oid) || stores.iter().any(|s| held(s, oid)),
            "object {oid} exists nowhere any more"
        );
    }
}

fn xet(env: &GitEnv, dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["xet"];
    all.extend_from_slice(args);
    env.run_in(dir, "git", &all)
}

/// A standalone repository on `store` with three versions of `a.bin` pushed to `origin`:
/// the first two are what `git lfs prune` would delete.
fn three_versions(env: &GitEnv, store: &Path) -> (PathBuf, Vec<String>) {
    let (work, oids) = three_versions_at(env, store.to_str().unwrap());
    for oid in &oids {
        assert!(held(store, oid) && local(&work, oid));
    }
    (work, oids)
}

/// [`three_versions`] with any endpoint (a directory or a URL).
fn three_versions_at(env: &GitEnv, endpoint: &str) -> (PathBuf, Vec<String>) {
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    let out = xet(env, &work, &["install", "--local", "--endpoint", endpoint]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    let mut oids = Vec::new();
    for i in 0..3u64 {
        let data = common::splitmix64(100 + i, 120_000);
        std::fs::write(work.join("a.bin"), &data).unwrap();
        env.git(&work, &["add", "."]);
        env.git(&work, &["commit", "-q", "-m", &format!("v{i}")]);
        oids.push(common::sha256_hex(&data));
    }
    env.git(&work, &["push", "-q", "origin", "main"]);
    (work, oids)
}

#[needs(git_lfs)]
#[test]
fn git_lfs_prune_verify_remote_deletes_nothing_the_endpoint_does_not_hold() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let (work, oids) = three_versions(&env, &store);

    // The endpoint is gone: git-lfs alone would report "2 verified with remote" and delete both.
    let away = env.path().join("store.away");
    std::fs::rename(&store, &away).unwrap();
    let out = env.run_in(&work, "git", &["lfs", "prune", "--verify-remote"]);
    assert_ne!(out.status, Some(0), "{}", out.all());
    assert!(
        out.all().contains("missing on remote") && !out.all().contains("verified with remote"),
        "{}",
        out.all()
    );
    for oid in &oids {
        assert!(local(&work, oid), "git lfs prune deleted {oid}");
    }
    let log = env.agent_log();
    assert!(
        log.contains("cannot verify objects that git-xet stores") && log.contains("git xet prune"),
        "the agent says why: {log}"
    );
    assert!(!store.exists(), "nothing created the endpoint");

    // lfs.pruneverifyremotealways makes a plain `git lfs prune` verify: refused the same way.
    env.git(&work, &["config", "lfs.pruneverifyremotealways", "true"]);
    let out = env.run_in(&work, "git", &["lfs", "prune"]);
    assert_ne!(out.status, Some(0), "{}", out.all());
    for oid in &oids {
        assert!(local(&work, oid), "git lfs prune deleted {oid}");
    }
    let out = env.run_in(&work, "git", &["lfs", "fetch", "--prune", "origin"]);
    assert_ne!(out.status, Some(0), "{}", out.all());
    for oid in &oids {
        assert!(local(&work, oid), "git lfs fetch --prune deleted {oid}");
    }
    env.git(&work, &["config", "--unset", "lfs.pruneverifyremotealways"]);

    // Back in place, git-lfs still cannot verify (it would not ask): still refused.
    std::fs::rename(&away, &store).unwrap();
    let out = env.run_in(&work, "git", &["lfs", "prune", "--verify-remote"]);
    assert_ne!(out.status, Some(0), "{}", out.all());
    nothing_lost(&work, &[&store], &oids);
    assert!(oids.iter().all(|o| local(&work, o)));

    // Without verification, git-lfs's own rules apply (and it starts no agent): unchanged.
    let out = env.run_in(&work, "git", &["lfs", "prune", "--dry-run"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
}

#[needs(git_lfs)]
#[test]
fn git_xet_prune_deletes_only_what_the_endpoint_holds() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let (work, oids) = three_versions(&env, &store);
    let (old, newest) = (&oids[..2], &oids[2]);

    // The endpoint does not exist: everything is kept, nothing is created.
    let away = env.path().join("store.away");
    std::fs::rename(&store, &away).unwrap();
    let out = xet(&env, &work, &["prune"]);
    assert_eq!(out.status, Some(2), "{}", out.all());
    assert!(
        out.stdout.contains("Kept 2 objects") && out.stdout.contains("does not exist"),
        "{}",
        out.stdout
    );
    assert!(!store.exists(), "git xet prune created the endpoint");
    assert!(oids.iter().all(|o| local(&work, o)));

    // Another endpoint that holds only the first version (incomplete): that one goes, the
    // second stays, with the command that uploads it.
    let partial = env.path().join("partial");
    env.git(
        &work,
        &["config", "xet.endpoint", partial.to_str().unwrap()],
    );
    env.git(&work, &["lfs", "push", "--object-id", "origin", &old[0]]);
    assert!(held(&partial, &old[0]) && !held(&partial, &old[1]));
    let out = xet(&env, &work, &["prune", "--dry-run", "--json"]);
    assert_eq!(out.status, Some(2), "{}", out.all());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["candidates"], 2, "{v}");
    assert_eq!(
        (v["pruned"].as_u64(), v["kept"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(
        oids.iter().all(|o| local(&work, o)),
        "--dry-run deletes nothing"
    );

    let out = xet(&env, &work, &["prune"]);
    assert_eq!(out.status, Some(2), "{}", out.all());
    assert!(!local(&work, &old[0]), "the held object was pruned");
    assert!(local(&work, &old[1]), "the missing one was kept");
    assert!(local(&work, newest), "git-lfs retains the checkout's");
    let upload = format!("git lfs push --object-id origin {}", old[1]);
    assert!(out.stdout.contains(&upload), "{}", out.stdout);
    nothing_lost(&work, &[&partial, &away], &oids);

    // Doing what it says, then pruning again: nothing kept, exit 0.
    env.git(&work, &["lfs", "push", "--object-id", "origin", &old[1]]);
    let out = xet(&env, &work, &["prune", "--verbose"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(
        out.stdout.contains("Deleted 1 local object"),
        "{}",
        out.stdout
    );
    assert!(!local(&work, &old[1]) && local(&work, newest));
    nothing_lost(&work, &[&partial], &oids);

    // Nothing left to prune.
    let out = xet(&env, &work, &["prune"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(out.stdout.contains("nothing to do"), "{}", out.stdout);
}

#[needs(git_lfs)]
#[test]
fn git_xet_prune_refuses_remotes_git_xet_does_not_serve() {
    let env = GitEnv::new();
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    // No standalone mode: git-lfs uses its own file adapter for this file:// LFS URL.
    let out = xet(&env, &work, &["prune"]);
    assert_eq!(out.status, Some(1), "{}", out.all());
    assert!(out.stderr.contains("own file adapter"), "{}", out.all());
    let out = xet(&env, &work, &["prune", "--remote", "nope"]);
    assert_eq!(out.status, Some(1), "{}", out.all());
    assert!(out.stderr.contains("no remote named"), "{}", out.all());
}

#[needs(git_lfs)]
#[test]
fn git_xet_prune_asks_an_http_endpoint_and_keeps_everything_while_it_is_down() {
    let running = server::start();
    let mut env = GitEnv::new();
    env.credential_helper(WRITE_TOKEN);
    // A server that is down is given up on after a second, not a minute.
    env.vars.push(("GIT_XET_RETRY_SECS".into(), "1".into()));
    let (work, oids) = three_versions_at(&env, running.url());

    // Down: nothing can be checked, so nothing is deleted (and only one object is tried).
    let stopped = running.dir;
    running.server.stop().unwrap();
    let out = xet(&env, &work, &["prune", "--json"]);
    assert_eq!(out.status, Some(2), "{}", out.all());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (v["pruned"].as_u64(), v["kept"].as_u64()),
        (Some(0), Some(2)),
        "{v}"
    );
    assert!(
        v["objects"][1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not checked"),
        "{v}"
    );
    assert!(oids.iter().all(|o| local(&work, o)));
    // And git-lfs's own check is refused there too.
    let out = env.run_in(&work, "git", &["lfs", "prune", "--verify-remote"]);
    assert_ne!(out.status, Some(0), "{}", out.all());
    assert!(oids.iter().all(|o| local(&work, o)));

    // Back (on another port): both old versions are held, so both go.
    let back = server::start_on(stopped);
    env.git(&work, &["config", "xet.endpoint", back.url()]);
    let out = xet(&env, &work, &["prune"]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(
        out.stdout.contains("Deleted 2 local objects"),
        "{}",
        out.stdout
    );
    assert!(!local(&work, &oids[0]) && !local(&work, &oids[1]) && local(&work, &oids[2]));
}
