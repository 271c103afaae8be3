//! Reading without downloading: `git xet cat` and `git xet mount` on a clone whose LFS objects
//! were never downloaded (`GIT_LFS_SKIP_SMUDGE=1`), against `git xet serve` on 127.0.0.1 (the
//! batch API negotiates the CAS) and against a directory store (standalone mode). Bytes are
//! compared with the files; what the server sent is its `sent_xorb_bytes`.
//!
//! The FUSE tests need /dev/fuse and fusermount3 (Debian's fuse3): under CI they must be there;
//! elsewhere the tests say that they skip.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::git::GitEnv;
use common::server::{TestServer, WRITE_TOKEN};

const MIB: usize = 1 << 20;

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

#[needs(git_lfs)]
#[test]
fn cat_reads_ranges_and_moves_only_their_chunks() {
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

#[needs(git_lfs, fuse)]
#[test]
fn a_mount_shows_the_tree_and_reads_only_what_is_read() {
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

/// Reads `regions` (offset, length) of `file` in `step`-byte reads taken from each region in
/// turn, as pyarrow reads the column chunks of a column; returns the bytes of each region.
fn read_round_robin(file: &std::fs::File, regions: &[(u64, usize)], step: usize) -> Vec<Vec<u8>> {
    use std::os::unix::fs::FileExt as _;
    let mut got: Vec<Vec<u8>> = regions.iter().map(|_| Vec::new()).collect();
    loop {
        let mut more = false;
        for (i, &(offset, len)) in regions.iter().enumerate() {
            let done = got[i].len();
            if done >= len {
                continue;
            }
            more = true;
            let mut buf = vec![0u8; step.min(len - done)];
            let n = file.read_at(&mut buf, offset + done as u64).unwrap();
            assert!(n > 0, "a read inside the file returned nothing");
            got[i].extend_from_slice(&buf[..n]);
        }
        if !more {
            return got;
        }
    }
}

#[needs(git_lfs, fuse)]
#[test]
fn interleaved_readers_of_one_file_get_their_bytes_and_little_more() {
    use std::os::unix::fs::FileExt as _;
    let p = pushed();
    let clone = bare_clone(&p, "clone");
    let sent = || p.server.health("sent_xorb_bytes");
    let m = Mounted::start(&p.env, &clone, &[], &p.env.path().join("mnt"));
    let model = m.dir.join("model.bin");
    let n = p.v2.len() as u64;
    // What a region may cost beyond its own bytes: the read-ahead window it had grown by its
    // end (half its run), and a chunk at each end (fetches are whole chunks).
    let slack = |len: usize| len as u64 / 2 + 2 * (128 << 10);

    // Eight regions 3 MiB apart, 1 MiB each, read 128 KiB at a time in turn through one
    // handle.
    let regions: Vec<(u64, usize)> = (0..8).map(|i| (i * 3 * MIB as u64 + 777, MIB)).collect();
    let file = std::fs::File::open(&model).unwrap();
    let before = sent();
    let got = read_round_robin(&file, &regions, 128 << 10);
    for (&(offset, len), bytes) in regions.iter().zip(&got) {
        let o = offset as usize;
        assert!(bytes[..] == p.v2[o..o + len], "region at {offset}");
    }
    let moved = sent() - before;
    let bound: u64 = regions
        .iter()
        .map(|&(_, len)| len as u64 + slack(len))
        .sum();
    assert!(
        moved >= 8 * MIB as u64 - (1 << 20),
        "{moved}: the regions came from the server"
    );
    assert!(
        moved <= bound,
        "{moved} bytes sent for 8 MiB read (at most {bound})"
    );

    // Reads of nothing, past the end and far past it answer nothing and fetch nothing.
    let before = sent();
    let mut buf = vec![0u8; 4096];
    assert_eq!(file.read_at(&mut buf[..0], 5).unwrap(), 0);
    assert_eq!(file.read_at(&mut buf, n).unwrap(), 0);
    assert_eq!(file.read_at(&mut buf, n + 12345).unwrap(), 0);
    assert_eq!(file.read_at(&mut buf, 1 << 60).unwrap(), 0);
    assert_eq!(file.read_at(&mut buf, n - 10).unwrap(), 10);
    assert!(buf[..10] == p.v2[p.v2.len() - 10..]);
    assert!(sent() - before <= 256 << 10, "only the last chunk");

    // Eight threads on one handle, each reading its own region in order (pyarrow's I/O
    // threads): regions between those above, 1.5 MiB each.
    let file = std::sync::Arc::new(file);
    let regions: Vec<(u64, usize)> = (0..8)
        .map(|i| (i * 3 * MIB as u64 + MIB as u64 + 100_000, 3 * MIB / 2 + 5))
        .collect();
    assert!(regions.iter().all(|&(o, len)| o + len as u64 <= n));
    let before = sent();
    let threads: Vec<_> = regions
        .iter()
        .map(|&region| {
            let file = std::sync::Arc::clone(&file);
            std::thread::spawn(move || read_round_robin(&file, &[region], 128 << 10))
        })
        .collect();
    for (t, &(offset, len)) in threads.into_iter().zip(&regions) {
        let bytes = t.join().unwrap().remove(0);
        let o = offset as usize;
        assert!(bytes[..] == p.v2[o..o + len], "region at {offset}");
    }
    let moved = sent() - before;
    let bound: u64 = regions
        .iter()
        .map(|&(_, len)| len as u64 + slack(len))
        .sum();
    assert!(
        moved <= bound,
        "{moved} bytes sent for 12 MiB read (at most {bound})"
    );
    drop(file);
    m.unmount(&p.env);
}

#[needs(git_lfs, fuse)]
#[test]
fn reads_through_a_mount_keep_the_chunk_cache_within_its_limit() {
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

    // A new mount (negotiated mode: the CAS and its token come from the LFS server's batch
    // answer) reads a region again from the chunk cache, not from the server: 4 MiB read
    // first through one mount, then through another. What may still move: pieces of a xorb
    // smaller than the cache keeps (256 KiB), at the region's ends, and read-ahead past the
    // region reaching further than the first mount's did (its window depends on timing).
    use std::os::unix::fs::FileExt as _;
    let sent = || p.server.health("sent_xorb_bytes");
    let region = |m: &Mounted| {
        let f = std::fs::File::open(m.dir.join("model.bin")).unwrap();
        let mut buf = vec![0u8; 4 * MIB];
        f.read_exact_at(&mut buf, 12 * MIB as u64).unwrap();
        assert!(buf[..] == p.v2[12 * MIB..16 * MIB]);
    };
    // The reads above left some of the file in the cache: start from an empty one.
    std::fs::remove_dir_all(p.env.path().join("cache/chunks")).unwrap();
    let m = Mounted::start(&p.env, &clone, &[], &p.env.path().join("mnt2"));
    let before = sent();
    region(&m);
    let first = sent() - before;
    m.unmount(&p.env);
    let m = Mounted::start(&p.env, &clone, &[], &p.env.path().join("mnt3"));
    let before = sent();
    region(&m);
    let moved = sent() - before;
    assert!(
        first >= 4 * MIB as u64,
        "{first} bytes sent for the region's first read"
    );
    assert!(
        moved <= 2 * MIB as u64,
        "{moved} bytes sent for 4 MiB read through an earlier mount (the first read: {first})"
    );
    m.unmount(&p.env);
}

#[needs(git_lfs, fuse)]
#[test]
fn a_damaged_xorb_fails_that_read_and_the_mount_stays_up() {
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

#[needs(git_lfs, fuse)]
#[test]
fn standalone_mode_reads_from_the_directory_store() {
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

    // Without GIT_XET_LOG: the log goes to mount.log in the cache directory, named on the
    // terminal, which gets no info lines.
    let m = Mounted::start_with(
        &env,
        &clone,
        &[],
        &env.path().join("mnt"),
        &[("GIT_XET_LOG", "")],
    );
    let file = m.dir.join("weights/big.bin");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), big.len() as u64);
    assert!(read_range(&file, at as u64, 70_000).unwrap() == big[at..at + 70_000]);
    assert!(std::fs::read(&file).unwrap() == big);
    m.unmount(&env);
    let terminal = std::fs::read_to_string(env.path().join("mount-mnt.err")).unwrap();
    let log = env.path().join("cache/logs/mount.log");
    assert!(
        terminal.contains(&format!("the mount's log: {}", log.display())),
        "{terminal}"
    );
    assert!(!terminal.contains(" INFO "), "{terminal}");
    assert!(
        std::fs::read_to_string(&log).unwrap().contains(" INFO "),
        "the log file has the info lines"
    );
}

#[needs(git_lfs, fuse)]
#[test]
fn reads_wait_for_a_restarted_server() {
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

#[needs(git_lfs, fuse)]
#[test]
fn standalone_http_endpoint_and_objects_already_here() {
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

#[needs(git_lfs, fuse)]
#[test]
fn sigterm_unmounts_and_a_mount_left_behind_is_explained() {
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

/// A repository without LFS files and without a remote: its tree is read and mounted from git
/// alone (there is no LFS server to name, and none is needed).
#[needs(git_lfs, fuse)]
#[test]
fn a_tree_without_lfs_files_needs_no_remote() {
    let env = GitEnv::new();
    env.git(env.path(), &["init", "-q", "repo"]);
    let repo = env.path().join("repo");
    std::fs::write(repo.join("notes.txt"), b"plain git\n").unwrap();
    env.git(&repo, &["add", "."]);
    env.git(&repo, &["commit", "-q", "-m", "one"]);
    assert_eq!(cat(&env, &repo, &["notes.txt"]), b"plain git\n");
    let m = Mounted::start(&env, &repo, &[], &env.path().join("mnt"));
    assert_eq!(
        std::fs::read(m.dir.join("notes.txt")).unwrap(),
        b"plain git\n"
    );
    m.unmount(&env);
}

#[needs(git_lfs, fuse)]
#[test]
fn mount_errors_say_what_to_do() {
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

/// What `git checkout` would not write, in one commit (`evil`, in a clone whose LFS objects were
/// never downloaded): a `.git` directory whose `config` sets `core.fsmonitor`, the spellings
/// NTFS and HFS+ read as `.git`, `..` and `.`, a name holding `/`, a `.git` file in a directory
/// pointing at another repository whose `core.fsmonitor` is set too, a symbolic link named
/// `.gitmodules`; next to what git writes: ordinary files, a name with a backslash, a symbolic
/// link and an LFS file.
struct Hostile {
    env: GitEnv,
    clone: PathBuf,
    model: Vec<u8>,
    text: Vec<u8>,
    /// Written by the `core.fsmonitor` command of the tree's `.git/config`.
    dotgit_marker: PathBuf,
    /// Written by that of the repository `sub/.git` points at.
    gitfile_marker: PathBuf,
    /// The entries git refuses, as paths from the root (a name holding `/` as it reads).
    refused: Vec<&'static str>,
}

/// `bytes` as a git object of type `kind` in `repo`, written as it is (`--literally`); its id.
fn write_object(env: &GitEnv, repo: &Path, kind: &str, bytes: &[u8]) -> String {
    let file = env.path().join("object.tmp");
    std::fs::write(&file, bytes).unwrap();
    let file = file.display().to_string();
    let out = env.git(
        repo,
        &["hash-object", "-w", "--literally", "-t", kind, &file],
    );
    out.stdout.trim().to_string()
}

/// The entries of the tree `rev` names in `repo`: git's mode, name, object id.
fn ls_tree(env: &GitEnv, repo: &Path, rev: &str) -> Vec<(&'static str, Vec<u8>, String)> {
    let listed = env.git(repo, &["ls-tree", "-z", rev]).stdout;
    listed
        .split('\0')
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (meta, name) = line.split_once('\t').unwrap();
            let fields: Vec<&str> = meta.split(' ').collect();
            let mode = match fields[0] {
                "040000" => "40000",
                "100755" => "100755",
                "120000" => "120000",
                _ => "100644",
            };
            (mode, name.as_bytes().to_vec(), fields[2].to_string())
        })
        .collect()
}

/// A tree of `entries` (git's mode, name, object id), in git's order, whatever the names.
fn write_tree(env: &GitEnv, repo: &Path, entries: &[(&str, Vec<u8>, String)]) -> String {
    let mut sorted: Vec<&(&str, Vec<u8>, String)> = entries.iter().collect();
    sorted.sort_by_key(|(mode, name, _)| {
        let mut key = name.clone();
        if *mode == "40000" {
            key.push(b'/');
        }
        key
    });
    let mut bytes = Vec::new();
    for (mode, name, id) in sorted {
        bytes.extend_from_slice(mode.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend(
            (0..40)
                .step_by(2)
                .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap()),
        );
    }
    write_object(env, repo, "tree", &bytes)
}

fn hostile() -> Hostile {
    let env = GitEnv::new();
    let store = env.path().join("store");
    let work = env.standalone_world(&store, 2);
    let model = common::splitmix64(91, 3 * MIB + 11);
    let text = b"an ordinary file\n".to_vec();
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::write(work.join("model.bin"), &model).unwrap();
    std::fs::write(work.join("a.txt"), &text).unwrap();
    std::fs::write(work.join("a\\b.txt"), b"a backslash is a letter here\n").unwrap();
    std::fs::write(work.join("sub/b.txt"), b"in a directory\n").unwrap();
    std::os::unix::fs::symlink("a.txt", work.join("link")).unwrap();
    env.git(&work, &["add", "."]);
    env.git(&work, &["commit", "-q", "-m", "what git writes"]);
    env.git(&work, &["push", "-q", "origin", "main"]);
    env.clone_skip_smudge("remote.git", "clone");
    let clone = env.path().join("clone");

    let dotgit_marker = env.path().join("dotgit-ran");
    let gitfile_marker = env.path().join("gitfile-ran");
    // The repository a `.git` file points at, with a command of its own.
    env.git(env.path(), &["init", "-q", "elsewhere"]);
    let command = format!("echo ran >> {}; :", gitfile_marker.display());
    env.git(
        &env.path().join("elsewhere"),
        &["config", "core.fsmonitor", &command],
    );

    let head = b"ref: refs/heads/main\n".to_vec();
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = \"echo ran >> {}; :\"\n",
        dotgit_marker.display()
    )
    .into_bytes();
    let gitfile = format!("gitdir: {}\n", env.path().join("elsewhere/.git").display()).into_bytes();
    let blob = |bytes: &[u8]| write_object(&env, &clone, "blob", bytes);
    let keep = blob(b"");
    let objects = write_tree(&env, &clone, &[("100644", b"keep".to_vec(), keep.clone())]);
    let heads = write_tree(&env, &clone, &[("100644", b".keep".to_vec(), keep.clone())]);
    let refs = write_tree(&env, &clone, &[("40000", b"heads".to_vec(), heads)]);
    let dotgit = write_tree(
        &env,
        &clone,
        &[
            ("100644", b"HEAD".to_vec(), blob(&head)),
            ("100644", b"config".to_vec(), blob(&config)),
            ("40000", b"objects".to_vec(), objects.clone()),
            ("40000", b"refs".to_vec(), refs.clone()),
        ],
    );
    let escaped = write_tree(
        &env,
        &clone,
        &[(
            "100644",
            b"escaped.txt".to_vec(),
            blob(b"out of the mount\n"),
        )],
    );

    // What the first commit holds, with `sub` rewritten.
    let mut root = ls_tree(&env, &clone, "HEAD");
    root.retain(|(_, name, _)| name != b"sub");
    assert!(
        root.iter().any(|(m, n, _)| *m == "120000" && n == b"link"),
        "{root:?}"
    );
    assert!(root.iter().any(|(_, n, _)| n == b"a\\b.txt"), "{root:?}");
    let mut sub = ls_tree(&env, &clone, "HEAD:sub");
    sub.push(("100644", b".git".to_vec(), blob(&gitfile)));
    root.push(("40000", b"sub".to_vec(), write_tree(&env, &clone, &sub)));
    for name in [
        ".git",
        ".GIT",
        "git~1",
        ".git ",
        ".git.",
        ".git::$INDEX_ALLOCATION",
        ".\u{200c}git",
        "a\\.git",
    ] {
        root.push(("40000", name.as_bytes().to_vec(), dotgit.clone()));
    }
    root.push(("40000", b"..".to_vec(), escaped));
    root.push(("100644", b".".to_vec(), blob(b"dot\n")));
    root.push((
        "100644",
        b"sub/evil.txt".to_vec(),
        blob(b"a name with a slash\n"),
    ));
    root.push(("120000", b".gitmodules".to_vec(), blob(b"a.txt")));
    let tree = write_tree(&env, &clone, &root);
    let commit = env
        .git(&clone, &["commit-tree", &tree, "-p", "HEAD", "-m", "evil"])
        .stdout
        .trim()
        .to_string();
    env.git(&clone, &["update-ref", "refs/heads/evil", &commit]);

    // The commands are live: in a plain directory holding the same files, git runs them.
    let live = env.path().join("live");
    for (path, bytes) in [
        (".git/HEAD", &head),
        (".git/config", &config),
        (".git/objects/keep", &Vec::new()),
        (".git/refs/heads/.keep", &Vec::new()),
        ("sub/.git", &gitfile),
    ] {
        std::fs::create_dir_all(live.join(path).parent().unwrap()).unwrap();
        std::fs::write(live.join(path), bytes).unwrap();
    }
    let ceiling = env.path().display().to_string();
    for (at, marker) in [
        (live.clone(), &dotgit_marker),
        (live.join("sub"), &gitfile_marker),
    ] {
        let out = env.run_with(
            &at,
            "git",
            &["status"],
            &[("GIT_CEILING_DIRECTORIES", &ceiling)],
        );
        assert!(
            marker.exists(),
            "git status in {} did not run the command: {}",
            at.display(),
            out.all()
        );
        std::fs::remove_file(marker).unwrap();
    }

    Hostile {
        env,
        clone,
        model,
        text,
        dotgit_marker,
        gitfile_marker,
        refused: vec![
            ".",
            "..",
            ".GIT",
            ".git",
            ".git ",
            ".git.",
            ".git::$INDEX_ALLOCATION",
            ".gitmodules",
            ".\u{200c}git",
            "a\\.git",
            "git~1",
            "sub/.git",
            "sub/evil.txt",
        ],
    }
}

#[needs(git_lfs, fuse)]
#[test]
fn a_mount_shows_only_what_a_checkout_writes() {
    let h = hostile();
    let dir = h.env.path().join("mnt");
    let m = Mounted::start(&h.env, &h.clone, &["evil"], &dir);

    // Every directory read: exactly what a checkout writes, nothing named `.git` anywhere.
    let mut seen = Vec::new();
    let mut dirs = vec![dir.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            }
            let path = e.path();
            seen.push(
                path.strip_prefix(&dir)
                    .unwrap()
                    .to_string_lossy()
                    .to_string(),
            );
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            ".gitattributes",
            "a.txt",
            "a\\b.txt",
            "link",
            "model.bin",
            "sub",
            "sub/b.txt"
        ]
    );
    // `.` and `..` are listed once each: the directory's own.
    let ls = Command::new("ls").arg("-a1").arg(&dir).output().unwrap();
    let ls = String::from_utf8_lossy(&ls.stdout).to_string();
    for own in [".", ".."] {
        assert_eq!(ls.lines().filter(|l| *l == own).count(), 1, "{ls}");
    }
    // Looking up what was left out finds nothing.
    for path in [
        ".git",
        ".git/config",
        ".GIT",
        ".GIT/HEAD",
        "git~1",
        ".git ",
        ".git.",
        ".git::$INDEX_ALLOCATION",
        ".\u{200c}git",
        "a\\.git",
        "sub/.git",
        "sub/evil.txt",
        ".gitmodules",
        "escaped.txt",
    ] {
        let err = std::fs::symlink_metadata(dir.join(path)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{path:?}: {err}");
    }
    // What a checkout writes reads as written, the LFS file from the store.
    assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), h.text);
    assert_eq!(
        std::fs::read(dir.join("a\\b.txt")).unwrap(),
        b"a backslash is a letter here\n"
    );
    assert_eq!(
        std::fs::read(dir.join("sub/b.txt")).unwrap(),
        b"in a directory\n"
    );
    assert!(std::fs::read(dir.join("model.bin")).unwrap() == h.model);
    let link = dir.join("link");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("a.txt"));
    assert_eq!(std::fs::read(&link).unwrap(), h.text);

    // git finds no repository in the mount, and runs nothing from the tree.
    let ceiling = h.env.path().display().to_string();
    for at in [dir.clone(), dir.join("sub")] {
        let out = h.env.run_with(
            &at,
            "git",
            &["status"],
            &[("GIT_CEILING_DIRECTORIES", &ceiling)],
        );
        assert_ne!(out.status, Some(0), "{}: {}", at.display(), out.all());
        assert!(
            out.stderr.contains("not a git repository"),
            "{}: {}",
            at.display(),
            out.stderr
        );
    }
    assert!(!h.dotgit_marker.exists(), "the tree's .git/config ran");
    assert!(
        !h.gitfile_marker.exists(),
        "the repository sub/.git points at ran"
    );

    // Each entry left out was logged once, when the mount started, however often looked up.
    let log = std::fs::read_to_string(h.env.path().join("mount.log")).unwrap_or_default();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("is left out")).collect();
    assert_eq!(warnings.len(), h.refused.len(), "{log}");
    for path in &h.refused {
        let named = format!("{path:?} at evil is left out");
        assert_eq!(
            warnings.iter().filter(|l| l.contains(&named)).count(),
            1,
            "{named}:\n{log}"
        );
    }
    m.unmount(&h.env);
}

#[needs(git_lfs)]
#[test]
fn cat_refuses_what_a_checkout_does_not_write() {
    let h = hostile();
    for path in [
        ".git/config",
        "./.git/HEAD",
        ".GIT/config",
        "git~1/config",
        ".git::$INDEX_ALLOCATION/config",
        "sub/.git",
        "sub/../.git/config",
        "sub/evil.txt",
        ".gitmodules",
    ] {
        let out = h
            .env
            .run_in(&h.clone, "git", &["xet", "cat", "--ref", "evil", path]);
        assert_ne!(out.status, Some(0), "{path}: {}", out.all());
        assert!(out.stdout.is_empty(), "{path}: {}", out.stdout);
        assert!(
            out.stderr.contains("git does not check it out"),
            "{path}: {}",
            out.stderr
        );
    }
    let out = h.env.run_in(
        &h.clone,
        "git",
        &["xet", "cat", "--ref", "evil", ".git/config"],
    );
    assert!(
        out.stderr.contains("\".git/config\"") && out.stderr.contains("`.git`"),
        "{}",
        out.stderr
    );
    // What a checkout writes reads as written.
    assert_eq!(cat(&h.env, &h.clone, &["--ref", "evil", "a.txt"]), h.text);
    assert_eq!(
        cat(&h.env, &h.clone, &["--ref", "evil", "a\\b.txt"]),
        b"a backslash is a letter here\n"
    );
    assert!(cat_bytes(&h.env, &h.clone, &["--ref", "evil", "model.bin"]) == h.model);
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
