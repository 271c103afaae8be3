//! Real git and git-lfs with the standard `basic` transfer against an in-process `git xet serve`:
//! push, fresh clone, and an edited file whose push stores only the changed chunks.
//!
//! Isolation: every command runs with a cleared environment (`PATH` only, plus `HOME` in a
//! temporary directory, `GIT_CONFIG_NOSYSTEM=1`, `GIT_TERMINAL_PROMPT=0`), under a timeout. The
//! token reaches git-lfs through a credential helper in that `HOME`, as a user would set it up;
//! git-lfs first gets a 401 from the batch API and then asks the helper. Git objects go to a
//! bare repository on disk; `lfs.url` (and a committed `.lfsconfig`, which clones read) points
//! git-lfs at the server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use common::git::{dir_bytes, GitEnv, Output};
use common::server::{TestServer, WRITE_TOKEN};

fn stored_xorb_bytes(server: &TestServer) -> u64 {
    dir_bytes(&server.store_dir().join("xorbs"))
}

fn registered_files(server: &TestServer) -> u64 {
    server.health("files")
}

/// Output a push or clone must not contain: lock-API hints, warnings, prompts.
fn assert_quiet(what: &str, out: &Output) {
    let all = format!("{}\n{}", out.stdout, out.stderr).to_lowercase();
    for noise in ["warning", "locking", "locksverify", "error", "username for"] {
        assert!(!all.contains(noise), "{what} printed {noise:?}:\n{all}");
    }
}

#[needs(git_lfs)]
#[test]
fn push_clone_and_dedup_with_stock_git_lfs() {
    let server = common::server::start();
    let env = GitEnv::new();
    let root = env.path().to_path_buf();
    env.credential_helper(WRITE_TOKEN);

    let lfs_url = format!("{}/team/repo.git/info/lfs", server.url());
    env.git(&root, &["init", "--bare", "remote.git"]);
    env.git(&root, &["init", "work"]);
    let work = root.join("work");
    env.git(&work, &["lfs", "install", "--local"]);
    env.git(&work, &["lfs", "track", "*.bin"]);
    env.git(&work, &["config", "lfs.url", &lfs_url]);
    // The server implements the locking API, so git-lfs verifies locks on push; unless this is
    // set (true: refuse pushes of files others locked; false: skip), it prints a hint to set it
    // on every push.
    env.git(
        &work,
        &["config", &format!("lfs.{lfs_url}.locksverify"), "true"],
    );
    std::fs::write(
        work.join(".lfsconfig"),
        format!("[lfs]\n\turl = {lfs_url}\n"),
    )
    .unwrap();

    let big = common::splitmix64(11, 6 << 20);
    let small_a = common::splitmix64(12, 3000);
    let small_b = b"a small text file tracked by LFS\n".repeat(40);
    std::fs::write(work.join("big.bin"), &big).unwrap();
    std::fs::write(work.join("small-a.bin"), &small_a).unwrap();
    std::fs::write(work.join("small-b.bin"), &small_b).unwrap();
    std::fs::write(work.join("README.md"), "plain git file\n").unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "first"]);
    let pointer = env.git(&work, &["show", "HEAD:big.bin"]).stdout;
    assert!(
        pointer.starts_with("version https://git-lfs.github.com/spec/v1"),
        "{pointer}"
    );
    env.git(&work, &["remote", "add", "origin", "../remote.git"]);

    let push = env.git(&work, &["push", "-q", "origin", "main"]);
    assert_quiet("the first push", &push);
    assert_eq!(registered_files(&server), 3, "three LFS objects registered");
    let locks = env
        .git(&work, &["config", "--get-regexp", "locksverify"])
        .stdout;
    assert!(
        locks.trim_end().ends_with("true"),
        "lock verification stays on: {locks}"
    );
    let after_first = stored_xorb_bytes(&server);
    eprintln!(
        "first push: {} bytes of LFS content, {after_first} bytes of stored xorbs",
        big.len() + small_a.len() + small_b.len()
    );

    // A fresh clone smudges every file from the server.
    let clone_out = env.git(&root, &["clone", "-q", "remote.git", "clone"]);
    assert_quiet("the clone", &clone_out);
    let clone = root.join("clone");
    assert!(
        std::fs::read(clone.join("big.bin")).unwrap() == big,
        "big.bin differs"
    );
    assert_eq!(std::fs::read(clone.join("small-a.bin")).unwrap(), small_a);
    assert_eq!(std::fs::read(clone.join("small-b.bin")).unwrap(), small_b);
    assert_eq!(
        std::fs::read_to_string(clone.join("README.md")).unwrap(),
        "plain git file\n"
    );

    // Edit the large file in the middle: the push stores only the chunks around the edit.
    let mut edited = big.clone();
    for b in &mut edited[3 << 20..(3 << 20) + 64] {
        *b = !*b;
    }
    std::fs::write(work.join("big.bin"), &edited).unwrap();
    env.git(&work, &["commit", "-q", "-am", "edit big.bin"]);
    let push = env.git(&work, &["push", "-q", "origin", "main"]);
    assert_quiet("the second push", &push);
    assert_eq!(registered_files(&server), 4);
    let grown = stored_xorb_bytes(&server) - after_first;
    eprintln!(
        "edited push: file of {} bytes, store grew by {grown} bytes",
        edited.len()
    );
    assert!(
        grown * 16 < edited.len() as u64,
        "the store grew by {grown} bytes for a 64-byte edit of a {}-byte file",
        edited.len()
    );

    // The clone pulls the edit.
    let pull = env.git(&clone, &["pull", "-q", "--ff-only"]);
    assert_quiet("the pull", &pull);
    assert!(
        std::fs::read(clone.join("big.bin")).unwrap() == edited,
        "pulled big.bin differs"
    );
    let fsck = env.git(&clone, &["lfs", "fsck"]);
    assert!(fsck.stdout.contains("fsck OK"), "{}", fsck.stdout);
}
