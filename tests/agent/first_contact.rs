//! What a new user meets when something is off, with real git and git-lfs: a server that does
//! not answer (the agent says so on the terminal within seconds), a token that is refused (the
//! advice names where that token came from), a plain clone of a standalone repository, and
//! what uninstalling a standalone repository changes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use std::path::Path;
use xet_test_tools::needs;

use crate::common;

use common::git::{GitEnv, Output};

/// A loopback URL nothing listens on.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// Runs `command` (a shell line) in `dir` on a pseudo-terminal (`script`), as a user at a
/// terminal would; what the terminal showed is in `stdout`.
fn on_terminal(env: &GitEnv, dir: &Path, command: &str, extra: &[(&str, &str)]) -> Output {
    env.run_with(dir, "script", &["-qec", command, "/dev/null"], extra)
}

/// A work tree with one committed LFS file, in a world installed in standalone mode on `url`.
fn committed_work_tree(env: &GitEnv, url: &str, token: &str) -> std::path::PathBuf {
    let work = env.standalone_http_world(url, token);
    std::fs::write(work.join("model.bin"), common::splitmix64(7, 200_000)).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "model"]);
    work
}

#[needs(git_lfs)]
#[test]
fn a_server_that_does_not_answer_is_shown_on_the_terminal_while_the_agent_retries() {
    let env = GitEnv::new();
    let url = dead_url();
    let work = committed_work_tree(&env, &url, common::server::WRITE_TOKEN);
    let out = on_terminal(
        &env,
        &work,
        "git push -q origin main",
        &[("GIT_XET_RETRY_SECS", "8")],
    );
    let shown = out.stdout.replace('\r', "");
    assert_ne!(out.status, Some(0), "the push cannot succeed:\n{shown}");
    let notice = shown
        .lines()
        .find(|l| l.starts_with("git-xet: ") && l.contains("still trying"))
        .unwrap_or_else(|| panic!("no notice on the terminal:\n{shown}"));
    eprintln!("the terminal showed: {notice}");
    assert!(
        notice.contains(&url)
            && notice.contains("up to 8 s")
            && notice.contains("GIT_XET_RETRY_SECS"),
        "the notice names the server, how long and the setting: {notice}"
    );
    assert_eq!(
        shown.matches("still trying").count(),
        1,
        "one notice per command, however many agents retry:\n{shown}"
    );
}

#[needs(git_lfs)]
#[test]
fn a_refused_token_is_explained_by_where_it_came_from() {
    let server = common::server::start();
    let env = GitEnv::new();
    let work = committed_work_tree(&env, server.url(), common::server::WRITE_TOKEN);

    // GIT_XET_TOKEN wins over the credential helper: the advice must not be "set it".
    let out = env.run_with(
        &work,
        "git",
        &["push", "-q", "origin", "main"],
        &[("GIT_XET_TOKEN", "wrong-token-0123456789abcdef")],
    );
    assert_ne!(out.status, Some(0), "{}", out.all());
    let said = out.all();
    eprintln!("git push said: {said}");
    assert!(
        said.contains("401") && said.contains("came from GIT_XET_TOKEN, which is set"),
        "{said}"
    );
    assert!(
        !said.contains("wrong-token-0123456789abcdef"),
        "never printed: {said}"
    );

    // A wrong token stored in the credential helper: the advice is to replace it there.
    env.credential_helper("stale-token-0123456789abcdef");
    let out = env.run_in(&work, "git", &["push", "-q", "origin", "main"]);
    assert_ne!(out.status, Some(0), "{}", out.all());
    let said = out.all();
    assert!(
        said.contains("came from your git credential helper")
            && said.contains("git credential reject"),
        "{said}"
    );
    assert!(
        !said.contains("stale-token-0123456789abcdef"),
        "never printed: {said}"
    );
}

#[needs(git_lfs)]
#[test]
fn a_standalone_repository_clones_in_one_command() {
    let env = GitEnv::new();
    let store = env.path().join("store");
    env.git(env.path(), &["init", "-q", "--bare", "remote.git"]);
    env.git(env.path(), &["init", "-q", "work"]);
    let work = env.path().join("work");
    env.install_local(&work, store.to_str().unwrap());
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);
    let model = common::splitmix64(31, 3 << 20);
    std::fs::write(work.join("model.bin"), &model).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "model"]);
    env.git(&work, &["push", "-q", "origin", "main"]);

    // A plain clone cannot check the file out: the git host has only the pointer.
    let plain = env.run_in(env.path(), "git", &["clone", "-q", "remote.git", "plain"]);
    assert_ne!(plain.status, Some(0), "{}", plain.all());
    // Repaired in place as `git xet clone --help` and the guide say.
    let broken = env.path().join("plain");
    env.install_local(&broken, store.to_str().unwrap());
    env.git(
        &broken,
        &["restore", "--source=HEAD", "--staged", "--worktree", ":/"],
    );
    assert!(std::fs::read(broken.join("model.bin")).unwrap() == model);
    // Nothing staged, nothing untracked: the next commit changes nothing.
    let status = env.git(&broken, &["status", "--porcelain"]);
    assert_eq!(status.stdout.trim(), "", "the repaired clone is clean");

    // Without an endpoint: nothing is cloned, and the message says what to give.
    let out = env.run_in(
        env.path(),
        "git",
        &["xet", "clone", "remote.git", "nothing"],
    );
    assert_eq!(out.status, Some(1), "{}", out.all());
    assert!(
        out.stderr.contains("--endpoint URL-or-DIR"),
        "{}",
        out.stderr
    );
    assert!(!env.path().join("nothing").exists());

    // One command, the endpoint relative to where it runs: the file is checked out.
    let out = env.run_in(
        env.path(),
        "git",
        &[
            "xet",
            "clone",
            "--endpoint",
            "store",
            "remote.git",
            "--",
            "-q",
        ],
    );
    assert_eq!(out.status, Some(0), "{}\n{}", out.all(), env.agent_log());
    let copy = env.path().join("remote");
    assert!(
        std::fs::read(copy.join("model.bin")).unwrap() == model,
        "model.bin checked out with its content"
    );
    assert!(
        out.stderr.contains("git-xet: cloned into remote"),
        "{}",
        out.stderr
    );
    let configured = env.git(&copy, &["config", "--local", "xet.endpoint"]);
    assert_eq!(configured.stdout.trim(), store.to_str().unwrap());

    // The clone pushes to the same endpoint: an edit is stored there, not on the git host.
    let mut edited = model.clone();
    edited[1 << 20] ^= 0xff;
    std::fs::write(copy.join("model.bin"), &edited).unwrap();
    env.git(&copy, &["commit", "-q", "-am", "edit"]);
    env.git(&copy, &["push", "-q", "origin", "main"]);
    let pulled = env.git(&work, &["pull", "-q", "origin", "main"]);
    assert!(pulled.status == Some(0));
    assert!(std::fs::read(work.join("model.bin")).unwrap() == edited);
}

/// A stand-in for Hugging Face's git-xet, as its installer registers it: the `xet` agent for
/// both directions, which refuses every download at `init`.
fn upload_only_agent(env: &GitEnv) {
    let script = env.path().join("upload-only-agent");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         while IFS= read -r line; do\n\
           case \"$line\" in\n\
             *'\"event\":\"init\"'*'\"operation\":\"download\"'*)\n\
               echo '{\"error\":{\"code\":32,\"message\":\"custom transfer for download is not implemented yet\"}}' ;;\n\
             *'\"event\":\"init\"'*) echo '{}' ;;\n\
             *'\"event\":\"terminate\"'*) exit 0 ;;\n\
           esac\n\
         done\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let home = env.home();
    let path = script.to_str().unwrap();
    env.git(
        &home,
        &["config", "--global", "lfs.customtransfer.xet.path", path],
    );
    env.git(
        &home,
        &[
            "config",
            "--global",
            "lfs.customtransfer.xet.concurrent",
            "true",
        ],
    );
}

#[needs(git_lfs)]
#[test]
fn a_client_whose_xet_agent_cannot_download_still_clones_from_our_server() {
    let s = common::server::start();
    let token = common::server::WRITE_TOKEN;
    let pusher = GitEnv::machine(token);
    let lfs_url = format!("{}/team/coexist.git/info/lfs", s.url());
    let work = pusher.negotiated_work_tree(token, &[], &lfs_url);
    let model = common::splitmix64(41, 3 << 20);
    std::fs::write(work.join("model.bin"), &model).unwrap();
    pusher.git(&work, &["add", "-A"]);
    pusher.git(&work, &["commit", "-q", "-m", "model"]);
    pusher.git(&work, &["push", "-q", "origin", "main"]);
    let remote = pusher.path().join("remote.git");

    // Another machine with only the upload-only `xet` agent: git-lfs offers `xet` for the
    // download, our server answers basic, and the clone works.
    let theirs = GitEnv::new();
    theirs.credential_helper(token);
    upload_only_agent(&theirs);
    let out = theirs.run_in(
        theirs.path(),
        "git",
        &["clone", "-q", remote.to_str().unwrap(), "copy"],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(std::fs::read(theirs.path().join("copy/model.bin")).unwrap() == model);

    // With git-xet installed the same clone downloads through its agent (the journal has it).
    let ours = GitEnv::machine(token);
    let out = ours.run_in(
        ours.path(),
        "git",
        &["clone", "-q", remote.to_str().unwrap(), "copy"],
    );
    assert_eq!(out.status, Some(0), "{}", out.all());
    let copy = ours.path().join("copy");
    assert!(std::fs::read(copy.join("model.bin")).unwrap() == model);
    let downloads = ours
        .journal(&copy)
        .into_iter()
        .filter(|r| r["direction"] == "download")
        .count();
    assert_eq!(downloads, 1, "{}", ours.agent_log());
}
