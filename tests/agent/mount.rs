//! Reading without downloading: `git xet cat` and `git xet mount` on a clone whose LFS objects
//! were never downloaded (`GIT_LFS_SKIP_SMUDGE=1`), against `git xet serve` on 127.0.0.1 (the
//! batch API negotiates the CAS) and against a directory store (standalone mode). Bytes are
//! compared with the files; what the server sent is its `sent_xorb_bytes`.
//!
//! The FUSE tests need /dev/fuse and fusermount3 (Debian's fuse3): under CI they must be there;
//! elsewhere the tests say that they skip.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::git::{tools_available, GitEnv};
use common::server::{TestServer, WRITE_TOKEN};

const MIB: usize = 1 << 20;

/// Whether FUSE mounts can be made here; under CI it must be so.
fn fuse_available() -> bool {
    let ok = Path::new("/dev/fuse").exists()
        && Command::new("fusermount3")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "FUSE is needed under CI: /dev/fuse and fusermount3 (apt-get install fuse3)"
        );
        eprintln!("skipped: no FUSE here (/dev/fuse and fusermount3, from fuse3)");
    }
    ok
}

/// A repository pushed to a server: a large LFS file, a small LFS file, an ordinary file in a
/// directory; then the large file edited in a second commit. Returns the world, the server,
/// the remote and the contents (v1 of the large file, v2, small, text).
struct Pushed {
    env: GitEnv,
    server: TestServer,
    v1: Vec<u8>,
    v2: Vec<u8>,
    small: Vec<u8>,
    text: Vec<u8>,
}

fn pushed() -> Pushed {
    let server = common::server::start();
    let env = GitEnv::new();
    let lfs_url = format!("{}/team/models.git/info/lfs", server.url());
    let work = env.negotiated_work_tree(WRITE_TOKEN, &[], &lfs_url);
    let v1 = common::splitmix64(61, 24 * MIB + 12345);
    let small = common::splitmix64(62, 300_000);
    let text = b"an ordinary file, not in LFS\n".to_vec();
    std::fs::create_dir_all(work.join("docs")).unwrap();
    std::fs::write(work.join("model.bin"), &v1).unwrap();
    std::fs::write(work.join("small.bin"), &small).unwrap();
    std::fs::write(work.join("docs/readme.txt"), &text).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "v1"]);
    let mut v2 = v1.clone();
    for b in &mut v2[10 * MIB..10 * MIB + 4096] {
        *b ^= 0xa5;
    }
    std::fs::write(work.join("model.bin"), &v2).unwrap();
    env.git(&work, &["commit", "-q", "-am", "v2"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    Pushed {
        env,
        server,
        v1,
        v2,
        small,
        text,
    }
}

/// A clone without LFS objects.
fn bare_clone(p: &Pushed, name: &str) -> PathBuf {
    p.env.clone_skip_smudge("remote.git", name);
    let clone = p.env.path().join(name);
    assert!(
        !clone.join(".git/lfs/objects").exists()
            || common::git::count_files(&clone.join(".git/lfs/objects")) == 0,
        "no object downloaded"
    );
    clone
}

fn cat(env: &GitEnv, dir: &Path, args: &[&str]) -> Vec<u8> {
    let mut all = vec!["xet", "cat"];
    all.extend_from_slice(args);
    let out = env.run_in(dir, "git", &all);
    assert_eq!(out.status, Some(0), "git xet cat {args:?}: {}", out.stderr);
    // The output is binary: read it back as bytes from the helper's text is lossy, so cat to a
    // file instead when bytes matter (see `cat_bytes`).
    out.stdout.into_bytes()
}

/// `git xet cat` into a file, for exact bytes.
fn cat_bytes(env: &GitEnv, dir: &Path, args: &[&str]) -> Vec<u8> {
    let out_file = env.path().join("cat.out");
    let mut all: Vec<String> = vec!["xet".into(), "cat".into()];
    all.extend(args.iter().map(|a| a.to_string()));
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git {} > '{}'",
            all.iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(" "),
            out_file.display()
        ))
        .current_dir(dir)
        .env("PATH", path_with_bin())
        .env("HOME", env.home())
        .env("XDG_CONFIG_HOME", env.home().join(".config"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_XET_CACHE_DIR", env.path().join("cache"))
        .env("GIT_XET_LOG", env.path().join("agent.log"))
        .status()
        .unwrap();
    assert!(
        status.success(),
        "git xet cat {args:?}: {}",
        env.agent_log()
    );
    std::fs::read(out_file).unwrap()
}

fn path_with_bin() -> std::ffi::OsString {
    std::env::join_paths(
        std::iter::once(common::git::bin_dir()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap()
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
fn cat_reads_ranges_and_moves_only_their_chunks() {
    if !tools_available() {
        return;
    }
    let p = pushed();
    let clone = bare_clone(&p, "clone");
    let sent = || p.server.health("sent_xorb_bytes");

    // An ordinary file, whole.
    assert_eq!(cat(&p.env, &clone, &["docs/readme.txt"]), p.text);
    // The first 64 KiB of the large file move less than 256 KiB.
    let before = sent();
    let head = cat_bytes(&p.env, &clone, &["--range", "0-65535", "model.bin"]);
    assert!(head == p.v2[..65536], "first 64 KiB");
    let moved = sent() - before;
    assert!(moved < 256 << 10, "64 KiB read moved {moved} bytes");
    // 1 MiB at an odd offset moves less than 2 MiB.
    let before = sent();
    let at = 13 * MIB + 777;
    let range = format!("{at}-{}", at + MIB - 1);
    let piece = cat_bytes(&p.env, &clone, &["--range", &range, "model.bin"]);
    assert!(piece == p.v2[at..at + MIB]);
    let moved = sent() - before;
    assert!(moved < 2 * MIB as u64, "1 MiB read moved {moved} bytes");
    // The end, past the end, open-ended, a one-byte range, another ref.
    let n = p.v2.len();
    let tail = format!("{}-{}", n - 10, n + 100);
    assert!(cat_bytes(&p.env, &clone, &["--range", &tail, "model.bin"]) == p.v2[n - 10..]);
    assert!(
        cat_bytes(
            &p.env,
            &clone,
            &["--range", &format!("{}-", n - 3), "model.bin"]
        ) == p.v2[n - 3..]
    );
    assert!(cat_bytes(&p.env, &clone, &["--range", "5-5", "small.bin"]) == p.small[5..6]);
    assert!(cat_bytes(&p.env, &clone, &["--range", &format!("{n}-"), "model.bin"]).is_empty());
    let old = cat_bytes(
        &p.env,
        &clone,
        &["--ref", "HEAD~1", "--range", &range, "model.bin"],
    );
    assert!(old == p.v1[at..at + MIB], "the other ref");
    // Whole files.
    assert!(cat_bytes(&p.env, &clone, &["small.bin"]) == p.small);
    assert!(cat_bytes(&p.env, &clone, &["model.bin"]) == p.v2);
    // Errors say what is wrong.
    let out = p.env.run_in(&clone, "git", &["xet", "cat", "nope.bin"]);
    assert_ne!(out.status, Some(0));
    assert!(
        out.stderr.contains("\"nope.bin\" is not in HEAD"),
        "{}",
        out.stderr
    );
    let out = p.env.run_in(
        &clone,
        "git",
        &["xet", "cat", "--ref", "no-such-ref", "small.bin"],
    );
    assert_ne!(out.status, Some(0));
    assert!(out.stderr.contains("no-such-ref"), "{}", out.stderr);
}

/// A running `git xet mount`, unmounted and stopped when dropped.
struct Mounted {
    child: Child,
    dir: PathBuf,
}

impl Mounted {
    fn start(env: &GitEnv, repo: &Path, args: &[&str], dir: &Path) -> Self {
        Self::start_with(env, repo, args, dir, &[])
    }

    /// [`Mounted::start`] with extra environment variables for the mount process.
    fn start_with(
        env: &GitEnv,
        repo: &Path,
        args: &[&str],
        dir: &Path,
        vars: &[(&str, &str)],
    ) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let mut all = vec!["xet", "mount"];
        all.extend_from_slice(args);
        let dir_text = dir.display().to_string();
        all.push(&dir_text);
        let log = std::fs::File::create(env.path().join(format!(
            "mount-{}.err",
            dir.file_name().unwrap().to_string_lossy()
        )))
        .unwrap();
        let child = Command::new("git")
            .args(&all)
            .current_dir(repo)
            .env("PATH", path_with_bin())
            .env("HOME", env.home())
            .env("XDG_CONFIG_HOME", env.home().join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_XET_CACHE_DIR", env.path().join("cache"))
            .env("GIT_XET_LOG", env.path().join("mount.log"))
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let m = Self {
            child,
            dir: dir.to_path_buf(),
        };
        let started = Instant::now();
        while !is_mounted(dir) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "not mounted after 30 s: {}",
                std::fs::read_to_string(env.path().join("mount.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    /// `git xet mount --unmount`, and the process exits.
    fn unmount(mut self, env: &GitEnv) {
        let out = env.run_in(
            env.path(),
            "git",
            &["xet", "mount", "--unmount", &self.dir.display().to_string()],
        );
        assert_eq!(out.status, Some(0), "{}", out.all());
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the mount process went on"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!is_mounted(&self.dir));
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if is_mounted(&self.dir) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let dir = dir.display().to_string();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(dir.as_str()))
}

fn read_range(path: &Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = f.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
#[cfg_attr(
    all(missing_fuse, not(missing_git_lfs)),
    ignore = "needs FUSE: /dev/fuse and fusermount3 (apt-get install fuse3)"
)]
fn a_mount_shows_the_tree_and_reads_only_what_is_read() {
    if !tools_available() || !fuse_available() {
        return;
    }
    let p = pushed();
    let clone = bare_clone(&p, "clone");
    let sent = || p.server.health("sent_xorb_bytes");
    let before = sent();
    let dir = p.env.path().join("mnt");
    let m = Mounted::start(&p.env, &clone, &[], &dir);

    // Sizes and the tree without any download.
    let meta = std::fs::metadata(dir.join("model.bin")).unwrap();
    assert_eq!(meta.len(), p.v2.len() as u64);
    assert!(meta.permissions().readonly());
    assert_eq!(
        std::fs::metadata(dir.join("small.bin")).unwrap().len(),
        p.small.len() as u64
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".gitattributes",
            ".lfsconfig",
            "docs",
            "model.bin",
            "small.bin"
        ]
    );
    assert_eq!(std::fs::read(dir.join("docs/readme.txt")).unwrap(), p.text);
    assert_eq!(sent(), before, "listing and stat moved no object byte");

    // Ranges: the start, across chunk and xorb boundaries, the end, past the end, nothing.
    let model = dir.join("model.bin");
    let n = p.v2.len();
    for (offset, len) in [
        (0usize, 65536usize),
        (10 * MIB - 5000, 20_000),
        (17 * MIB + 3, 3 * MIB),
        (n - 100, 100),
        (n - 10, 1000),
        (n + 10, 10),
        (5, 0),
    ] {
        let got = read_range(&model, offset as u64, len).unwrap();
        let want = &p.v2[offset.min(n)..(offset + len).min(n)];
        assert!(got == want, "{offset}+{len}");
    }
    // A 1 MiB read at a random offset of a file not read before moves under 2 MiB.
    let before = sent();
    let got = read_range(&dir.join("small.bin"), 1000, 50_000).unwrap();
    assert!(got == p.small[1000..51_000]);
    let moved = sent() - before;
    assert!(moved < 2 * MIB as u64, "{moved}");
    // A whole sequential read.
    assert!(std::fs::read(&model).unwrap() == p.v2);
    // Writes are refused.
    assert!(std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .is_err());
    m.unmount(&p.env);

    // Another ref, at the same time as the mount of HEAD.
    let head = Mounted::start(&p.env, &clone, &[], &p.env.path().join("head"));
    let old = Mounted::start(&p.env, &clone, &["HEAD~1"], &p.env.path().join("old"));
    let at = 10 * MIB;
    assert!(
        read_range(&old.dir.join("model.bin"), at as u64, 4096).unwrap() == p.v1[at..at + 4096]
    );
    assert!(
        read_range(&head.dir.join("model.bin"), at as u64, 4096).unwrap() == p.v2[at..at + 4096]
    );
    old.unmount(&p.env);
    head.unmount(&p.env);
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
#[cfg_attr(
    all(missing_fuse, not(missing_git_lfs)),
    ignore = "needs FUSE: /dev/fuse and fusermount3 (apt-get install fuse3)"
)]
fn reads_through_a_mount_keep_the_chunk_cache_within_its_limit() {
    if !tools_available() || !fuse_available() {
        return;
    }
    let p = pushed();
    let clone = bare_clone(&p, "clone");
    let m = Mounted::start_with(
        &p.env,
        &clone,
        &[],
        &p.env.path().join("mnt"),
        &[("GIT_XET_CHUNK_CACHE_MAX_SIZE", "8M")],
    );
    // The whole 24 MiB file, sequentially, then a range near the start again.
    assert!(std::fs::read(m.dir.join("model.bin")).unwrap() == p.v2);
    let cached = common::git::dir_bytes(&p.env.path().join("cache/chunks"));
    assert!(cached > 0, "reads went through the chunk cache");
    assert!(
        cached <= 16 << 20,
        "the chunk cache holds {cached} bytes, limit 8 MiB"
    );
    m.unmount(&p.env);
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
#[cfg_attr(
    all(missing_fuse, not(missing_git_lfs)),
    ignore = "needs FUSE: /dev/fuse and fusermount3 (apt-get install fuse3)"
)]
fn a_damaged_xorb_fails_that_read_and_the_mount_stays_up() {
    if !tools_available() || !fuse_available() {
        return;
    }
    let p = pushed();
    let clone = bare_clone(&p, "clone");
    let m = Mounted::start(&p.env, &clone, &[], &p.env.path().join("mnt"));
    let model = m.dir.join("model.bin");
    // The file is opened (and its chunk list read) while the server's copy is sound ...
    let mut open = std::fs::File::open(&model).unwrap();
    let mut head = vec![0u8; 4096];
    open.read_exact(&mut head).unwrap();
    assert!(head == p.v2[..4096]);
    // ... then the middle of every stored xorb of more than 16 MiB (the large file's) goes bad.
    for entry in walk(&p.server.store_dir().join("xorbs")) {
        let len = std::fs::metadata(&entry).unwrap().len();
        if len > 16 << 20 {
            let mut bytes = std::fs::read(&entry).unwrap();
            let mid = bytes.len() / 2;
            for b in &mut bytes[mid..mid + 1000] {
                *b ^= 0xff;
            }
            std::fs::write(&entry, bytes).unwrap();
        }
    }
    // Some read of the damaged part fails with EIO, none returns wrong bytes ...
    let mut failed = false;
    for i in 1..24 {
        let at = i * MIB;
        let mut buf = vec![0u8; 4096];
        open.seek(SeekFrom::Start(at as u64)).unwrap();
        match open.read_exact(&mut buf) {
            Ok(()) => assert!(buf == p.v2[at..at + 4096], "wrong bytes at {at}"),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
                failed = true;
            }
        }
    }
    assert!(failed, "no read saw the damage");
    // ... and the mount goes on serving the rest.
    assert!(std::fs::read(m.dir.join("small.bin")).unwrap() == p.small);
    let log = std::fs::read_to_string(p.env.path().join("mount.log")).unwrap_or_default();
    assert!(log.contains("read failed (EIO)"), "log:\n{log}");
    drop(open);
    m.unmount(&p.env);
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
fn standalone_mode_reads_from_the_directory_store() {
    if !tools_available() {
        return;
    }
    let env = GitEnv::new();
    let store = env.path().join("store");
    let work = env.standalone_world(&store, 4);
    let big = common::splitmix64(71, 9 * MIB + 777);
    let small = common::splitmix64(72, 4000);
    std::fs::create_dir_all(work.join("weights")).unwrap();
    std::fs::write(work.join("weights/big.bin"), &big).unwrap();
    std::fs::write(work.join("small.bin"), &small).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "one"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");

    let at = 5 * MIB + 3;
    let range = format!("{at}-{}", at + 99_999);
    assert!(
        cat_bytes(&env, &clone, &["--range", &range, "weights/big.bin"]) == big[at..at + 100_000]
    );
    assert!(cat_bytes(&env, &clone, &["small.bin"]) == small);
    assert_eq!(
        common::git::count_files(&clone.join(".git/lfs/objects")),
        0,
        "nothing was downloaded into the LFS store"
    );

    if !fuse_available() {
        return;
    }
    let m = Mounted::start(&env, &clone, &[], &env.path().join("mnt"));
    let file = m.dir.join("weights/big.bin");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), big.len() as u64);
    assert!(read_range(&file, at as u64, 70_000).unwrap() == big[at..at + 70_000]);
    assert!(std::fs::read(&file).unwrap() == big);
    m.unmount(&env);
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
#[cfg_attr(
    all(missing_fuse, not(missing_git_lfs)),
    ignore = "needs FUSE: /dev/fuse and fusermount3 (apt-get install fuse3)"
)]
fn reads_wait_for_a_restarted_server() {
    if !tools_available() || !fuse_available() {
        return;
    }
    let p = pushed();
    let clone = bare_clone(&p, "clone");
    let m = Mounted::start_with(
        &p.env,
        &clone,
        &[],
        &p.env.path().join("mnt"),
        &[("GIT_XET_RETRY_SECS", "30")],
    );
    let model = m.dir.join("model.bin");
    let log = || std::fs::read_to_string(p.env.path().join("mount.log")).unwrap_or_default();
    let mut open = std::fs::File::open(&model)
        .unwrap_or_else(|e| panic!("open {}: {e}; mount log:\n{}", model.display(), log()));
    let mut head = vec![0u8; 4096];
    open.read_exact(&mut head)
        .unwrap_or_else(|e| panic!("first read: {e}; mount log:\n{}", log()));
    assert!(head == p.v2[..4096]);

    // The server stops (its port stays known) ...
    let Pushed {
        env, server, v2, ..
    } = p;
    let common::server::TestServer { server, dir } = server;
    let addr = server.addr;
    server.stop().unwrap();
    // ... a read of bytes not fetched yet waits for it ...
    let reader = std::thread::spawn(move || {
        let at = 20 * MIB;
        let mut buf = vec![0u8; 100_000];
        open.seek(SeekFrom::Start(at as u64)).unwrap();
        open.read_exact(&mut buf).map(|()| buf)
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !reader.is_finished(),
        "the read did not wait for the server"
    );
    // ... and gets the right bytes once it is back on the same address.
    let restarted = common::server::start_on_with(dir, |c| c.listen = addr);
    let got = reader
        .join()
        .unwrap()
        .expect("the read succeeds after the restart");
    assert!(got == v2[20 * MIB..20 * MIB + 100_000]);
    // The mount goes on after that.
    assert!(read_range(&model, (3 * MIB) as u64, 5000).unwrap() == v2[3 * MIB..3 * MIB + 5000]);
    m.unmount(&env);
    drop(restarted);
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
fn standalone_http_endpoint_and_objects_already_here() {
    if !tools_available() {
        return;
    }
    let server = common::server::start();
    let env = GitEnv::new();
    let work = env.standalone_http_world(server.url(), WRITE_TOKEN);
    let big = common::splitmix64(81, 6 * MIB + 99);
    let small = common::splitmix64(82, 70_000);
    std::fs::write(work.join("big.bin"), &big).unwrap();
    std::fs::write(work.join("small.bin"), &small).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "one"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");

    // Ranges from the server named by xet.endpoint.
    let before = server.health("sent_xorb_bytes");
    let at = 3 * MIB + 1;
    let range = format!("{at}-{}", at + 9_999);
    assert!(cat_bytes(&env, &clone, &["--range", &range, "big.bin"]) == big[at..at + 10_000]);
    assert!(
        server.health("sent_xorb_bytes") > before,
        "read from the server"
    );

    // small.bin is downloaded into the LFS store; then the server goes away.
    env.git(&clone, &["lfs", "pull", "--include", "small.bin"]);
    let common::server::TestServer { server, dir } = server;
    server.stop().unwrap();
    // The object here is read from the LFS store without the server ...
    assert!(cat_bytes(&env, &clone, &["small.bin"]) == small);
    if !fuse_available() {
        drop(dir);
        return;
    }
    let m = Mounted::start_with(
        &env,
        &clone,
        &[],
        &env.path().join("mnt"),
        &[("GIT_XET_RETRY_SECS", "1")],
    );
    assert!(std::fs::read(m.dir.join("small.bin")).unwrap() == small);
    // ... while a read that needs the server fails with EIO once the retries give up, and
    // the mount stays up.
    let err = read_range(&m.dir.join("big.bin"), at as u64, 1000).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(read_range(&m.dir.join("small.bin"), 5, 10).unwrap() == small[5..15]);
    m.unmount(&env);
    drop(dir);
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
#[cfg_attr(
    all(missing_fuse, not(missing_git_lfs)),
    ignore = "needs FUSE: /dev/fuse and fusermount3 (apt-get install fuse3)"
)]
fn sigterm_unmounts_and_a_mount_left_behind_is_explained() {
    if !tools_available() || !fuse_available() {
        return;
    }
    let p = pushed();
    let clone = bare_clone(&p, "clone");
    let spawn = |dir: &Path| {
        std::fs::create_dir_all(dir).unwrap();
        let child = Command::new(common::git::bin_dir().join("git-xet"))
            .arg("mount")
            .arg(dir)
            .current_dir(&clone)
            .env("PATH", path_with_bin())
            .env("HOME", p.env.home())
            .env("XDG_CONFIG_HOME", p.env.home().join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_XET_CACHE_DIR", p.env.path().join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !is_mounted(dir) {
            assert!(started.elapsed() < Duration::from_secs(30), "not mounted");
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    };
    let wait = |child: &mut Child| {
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "still running");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // SIGTERM: the mount goes and the process exits successfully.
    let dir = p.env.path().join("mnt-term");
    let mut child = spawn(&dir);
    assert_eq!(
        std::fs::metadata(dir.join("model.bin")).unwrap().len(),
        p.v2.len() as u64
    );
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert!(wait(&mut child).success());
    assert!(!is_mounted(&dir));

    // SIGKILL leaves the mount behind; mounting there again says how to clear it, and
    // --unmount does.
    let dir = p.env.path().join("mnt-kill");
    let mut child = spawn(&dir);
    child.kill().unwrap();
    wait(&mut child);
    assert!(is_mounted(&dir), "a killed FUSE process leaves its mount");
    let dir_text = dir.display().to_string();
    let out = p.env.run_in(&clone, "git", &["xet", "mount", &dir_text]);
    assert_ne!(out.status, Some(0));
    assert!(
        out.stderr.contains("left behind") && out.stderr.contains("--unmount"),
        "{}",
        out.stderr
    );
    let out = p
        .env
        .run_in(&clone, "git", &["xet", "mount", "--unmount", &dir_text]);
    assert_eq!(out.status, Some(0), "{}", out.all());
    assert!(!is_mounted(&dir));
}

#[test]
#[cfg_attr(missing_git_lfs, ignore = "needs git-lfs: apt-get install git-lfs")]
fn mount_errors_say_what_to_do() {
    if !tools_available() {
        return;
    }
    let env = GitEnv::new();
    let out = env.run_in(env.path(), "git", &["xet", "mount", "/nonexistent-dir-xyz"]);
    assert_ne!(out.status, Some(0));
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    let full = env.path().join("full");
    std::fs::create_dir_all(full.join("x")).unwrap();
    let out = env.run_in(
        env.path(),
        "git",
        &["xet", "mount", &full.display().to_string()],
    );
    assert!(out.stderr.contains("is not empty"), "{}", out.stderr);
    let empty = env.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = env.run_in(
        env.path(),
        "git",
        &["xet", "mount", &empty.display().to_string()],
    );
    assert_ne!(out.status, Some(0));
    assert!(
        out.stderr.contains("not in a git repository") || out.stderr.contains("FUSE"),
        "{}",
        out.stderr
    );
    // Without fusermount3 on PATH: which package to install.
    let bin_only = Command::new(common::git::bin_dir().join("git-xet"))
        .args(["mount", &empty.display().to_string()])
        .current_dir(env.path())
        .env("PATH", common::git::bin_dir())
        .env("HOME", env.home())
        .output()
        .unwrap();
    assert!(!bin_only.status.success());
    let stderr = String::from_utf8_lossy(&bin_only.stderr);
    assert!(
        stderr.contains("fuse3")
            && (stderr.contains("fusermount3") || stderr.contains("/dev/fuse")),
        "{stderr}"
    );
    // An unknown ref, in a repository.
    if fuse_available() {
        env.git(env.path(), &["init", "-q", "repo"]);
        let repo = env.path().join("repo");
        let out = env.run_in(
            &repo,
            "git",
            &["xet", "mount", "no-such-ref", &empty.display().to_string()],
        );
        assert_ne!(out.status, Some(0));
        assert!(out.stderr.contains("no-such-ref"), "{}", out.stderr);
        assert!(!is_mounted(&empty));
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}
