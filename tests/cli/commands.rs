//! `git xet status`, `git xet ls-files`, the pre-push hook and install.sh, with real git and
//! git-lfs in an isolated configuration (temporary HOME, global config file and cache, no system
//! config).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests stop at the first failure

use crate::common;
use xet_test_tools::needs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use git_xet::agent::journal::{self, Direction, Record};
use serde_json::Value;
use xet_format::{FileHash, LfsOid};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let s = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(s.home()).unwrap();
        std::fs::create_dir_all(s.repo()).unwrap();
        s
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn home(&self) -> PathBuf {
        self.path().join("home")
    }
    fn repo(&self) -> PathBuf {
        self.path().join("repo")
    }
    fn cache(&self) -> PathBuf {
        self.path().join("cache")
    }
    fn env(&self, c: &mut Command) {
        c.env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("XDG_CACHE_HOME", self.home().join(".cache"))
            .env("GIT_CONFIG_GLOBAL", self.home().join(".gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_XET_CACHE_DIR", self.cache())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .env_remove("GIT_XET_ENDPOINT")
            .env_remove("GIT_XET_ALLOW_FALLBACK")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .stdin(Stdio::null());
    }
    fn git_xet(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_git-xet"));
        self.env(&mut c);
        c.current_dir(cwd).args(args).output().unwrap()
    }
    fn git_out(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut c = Command::new("git");
        self.env(&mut c);
        c.current_dir(cwd).args(args).output().unwrap()
    }
    /// Runs git and requires success.
    fn git(&self, cwd: &Path, args: &[&str]) -> String {
        ok(&self.git_out(cwd, args), &format!("git {}", args.join(" ")))
    }
    fn local(&self, key: &str) -> String {
        let out = self.git_out(&self.repo(), &["config", "--local", "--get", key]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
    fn status_json(&self, cwd: &Path) -> Value {
        let out = self.git_xet(cwd, &["status", "--json"]);
        serde_json::from_str(&ok(&out, "status --json")).unwrap()
    }
    fn status_text(&self, cwd: &Path) -> String {
        ok(&self.git_xet(cwd, &["status"]), "status")
    }
    /// `git init` of the repository with git-lfs's hooks and filters.
    fn init_lfs_repo(&self) {
        let repo = self.repo();
        self.git(&repo, &["init", "-q", "-b", "main"]);
        self.git(&repo, &["lfs", "install", "--local"]);
        self.git(&repo, &["lfs", "track", "*.bin"]);
    }
    /// [`Sandbox::init_lfs_repo`], `git xet install --local` with a directory endpoint
    /// (`store`), and a bare `origin`; returns the bare repository.
    fn standalone_repo_with_origin(&self) -> PathBuf {
        let repo = self.repo();
        self.init_lfs_repo();
        let store = self.path().join("store");
        ok(
            &self.git_xet(
                &repo,
                &["install", "--local", "--endpoint", store.to_str().unwrap()],
            ),
            "install",
        );
        let bare = self.path().join("remote.git");
        self.git(
            self.path(),
            &["init", "-q", "--bare", bare.to_str().unwrap()],
        );
        self.git(&repo, &["remote", "add", "origin", bare.to_str().unwrap()]);
        bare
    }
    fn hooks(&self) -> PathBuf {
        self.repo().join(".git").join("hooks")
    }
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed ({:?})\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Deterministic test content.
fn content(seed: u64, len: usize) -> Vec<u8> {
    common::splitmix64(seed, len)
}

// ---------------------------------------------------------------------------------------------
// status

#[test]
fn status_outside_a_repository_shows_global_facts_only() {
    let s = Sandbox::new();
    let text = s.status_text(s.path());
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    assert!(
        text.contains("git-lfs  3.") || text.contains("git-lfs  2."),
        "{text}"
    );
    assert!(text.contains("NOT REGISTERED"), "{text}");
    assert!(text.contains("not inside a git repository"), "{text}");
    assert!(text.contains("run `git xet install`"), "{text}");
    assert!(text.contains(&s.cache().display().to_string()), "{text}");

    let v = s.status_json(s.path());
    assert!(v["repository"].is_null(), "{v}");
    let alias = ok(&s.git_xet(s.path(), &["env", "--json"]), "env --json");
    assert!(serde_json::from_str::<Value>(&alias).is_ok(), "{alias}");
    assert_eq!(v["registration"]["registered"], false);
    assert_eq!(v["git_xet"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        v["git"].as_str().is_some_and(|g| g.starts_with("2.")),
        "{v}"
    );
    assert_eq!(v["cache"]["exists"], false);

    // Installed globally: registered, with the scope, and the cache's size.
    ok(&s.git_xet(s.path(), &["install"]), "install");
    std::fs::create_dir_all(s.cache().join("shards")).unwrap();
    std::fs::write(s.cache().join("shards/a"), vec![7u8; 3000]).unwrap();
    let v = s.status_json(s.path());
    assert_eq!(v["registration"]["registered"], true, "{v}");
    assert_eq!(v["registration"]["runnable"], true, "{v}");
    assert_eq!(v["registration"]["this_executable"], true, "{v}");
    assert_eq!(v["registration"]["path"]["scope"], "global", "{v}");
    assert_eq!(v["registration"]["args"]["value"], "transfer", "{v}");
    assert_eq!(v["registration"]["filter_lfs_process"]["scope"], "global");
    assert_eq!(v["cache"]["exists"], true);
    assert_eq!(v["cache"]["bytes"], 3000);
    assert_eq!(v["cache"]["files"], 1);
    assert_eq!(v["warnings"].as_array().unwrap().len(), 0, "{v}");
    let text = s.status_text(s.path());
    assert!(text.contains("Agent registration: registered"), "{text}");
    assert!(text.contains("[global]"), "{text}");
    assert!(text.contains("2.9 KiB, 1 file"), "{text}");
}

#[test]
fn status_says_when_git_lfs_is_missing() {
    let s = Sandbox::new();
    // A PATH with git and nothing else: `git lfs` is not found.
    let bin = s.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let git = which("git").expect("git on PATH");
    std::os::unix::fs::symlink(&git, bin.join("git")).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_git-xet"));
    s.env(&mut c);
    let out = c
        .env("PATH", &bin)
        .current_dir(s.path())
        .arg("status")
        .output()
        .unwrap();
    let text = ok(&out, "status");
    assert!(
        text.contains("git-lfs was not found: install it from https://git-lfs.com"),
        "{text}"
    );
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[test]
fn status_in_a_repository_before_and_after_a_standalone_install() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.git(&repo, &["init", "-q"]);
    let v = s.status_json(&repo);
    let r = &v["repository"];
    assert_eq!(r["mode"], "negotiated", "{v}");
    assert!(r["endpoint"].is_null());
    assert_eq!(r["pre_push_hook"], "none");
    assert_eq!(r["journal"]["exists"], false);
    assert!(r["journal"]["path"]
        .as_str()
        .unwrap()
        .ends_with(".git/xet/transfers.jsonl"));
    assert_eq!(v["registration"]["registered"], false);
    let text = s.status_text(&repo);
    assert!(text.contains("negotiated"), "{text}");
    assert!(text.contains("NOT REGISTERED"), "{text}");

    // A store (its version file and 112 bytes of objects): 128 bytes in 2 files.
    let store = s.path().join("store");
    std::fs::create_dir_all(store.join("xorbs")).unwrap();
    std::fs::write(store.join("xorbs/x"), vec![1u8; 112]).unwrap();
    std::fs::write(store.join("STORE-VERSION"), "git-xet-store 1\n").unwrap();
    ok(
        &s.git_xet(
            &repo,
            &["install", "--local", "--endpoint", store.to_str().unwrap()],
        ),
        "install",
    );
    let text = s.status_text(&repo);
    assert!(text.contains("standalone"), "{text}");
    assert!(text.contains(&store.display().to_string()), "{text}");
    assert!(text.contains("from git config xet.endpoint"), "{text}");
    assert!(text.contains("128 B, 2 files"), "{text}");
    assert!(text.contains("No problems found."), "{text}");
    assert!(
        text.contains("sends a push's small files in packs first"),
        "{text}"
    );

    let v = s.status_json(&repo);
    let r = &v["repository"];
    assert_eq!(r["mode"], "standalone", "{v}");
    assert_eq!(r["standalone_agent"]["value"], "xet");
    assert_eq!(r["standalone_agent"]["scope"], "local");
    assert_eq!(r["endpoint"]["kind"], "dir");
    assert_eq!(r["endpoint"]["value"], store.to_str().unwrap());
    assert_eq!(r["endpoint"]["source"], "git config xet.endpoint");
    assert_eq!(r["store"]["exists"], true);
    assert_eq!(r["store"]["bytes"], 128);
    assert_eq!(r["store"]["files"], 2);
    assert_eq!(r["pre_push_hook"], "git-xet");
    assert_eq!(v["registration"]["path"]["scope"], "local");
    assert!(r["reachability"].as_array().unwrap().is_empty());
    for key in [
        "git_xet",
        "git",
        "git_lfs",
        "registration",
        "repository",
        "cache",
        "warnings",
        "notes",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }

    // The journal's records are counted.
    let oid = LfsOid::from_hex(&"11".repeat(32)).unwrap();
    let hash = FileHash::from_hex(&"22".repeat(32)).unwrap();
    let common = repo.join(".git");
    journal::append(&common, &Record::new(Direction::Upload, &oid, &hash, 5)).unwrap();
    journal::append(&common, &Record::new(Direction::Download, &oid, &hash, 5)).unwrap();
    let v = s.status_json(&repo);
    assert_eq!(v["repository"]["journal"]["records"], 2, "{v}");
    assert_eq!(v["repository"]["journal"]["objects"], 1, "{v}");

    // Standalone with no endpoint is called out.
    s.git(&repo, &["config", "--local", "--unset", "xet.endpoint"]);
    let out = s.git_xet(&repo, &["status"]);
    let text = ok(&out, "status without endpoint");
    assert!(text.contains("NONE SET"), "{text}");
    assert!(
        text.contains("standalone mode is on (lfs.standalonetransferagent = xet) but no endpoint"),
        "{text}"
    );
}

#[test]
fn status_checks_whether_the_server_answers() {
    let server = common::server::start();
    let s = Sandbox::new();
    let repo = s.repo();
    s.git(&repo, &["init", "-q"]);
    ok(
        &s.git_xet(&repo, &["install", "--local", "--endpoint", server.url()]),
        "install",
    );
    let v = s.status_json(&repo);
    let r = &v["repository"];
    assert_eq!(r["endpoint"]["kind"], "http", "{v}");
    assert_eq!(r["endpoint"]["value"], server.url());
    let check = &r["reachability"][0];
    assert_eq!(check["url"], format!("{}/health", server.url()));
    assert_eq!(check["reachable"], true, "{v}");
    assert_eq!(check["git_xet_server"], true, "{v}");
    assert_eq!(check["server_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(check["http_status"], 200);
    let text = s.status_text(&repo);
    assert!(text.contains("reachable: git-xet server"), "{text}");
    assert!(!text.contains("unreachable"), "{text}");

    // --no-network skips the check.
    let out = s.git_xet(&repo, &["status", "--json", "--no-network"]);
    let v: Value = serde_json::from_str(&ok(&out, "status")).unwrap();
    assert!(v["repository"]["reachability"]
        .as_array()
        .unwrap()
        .is_empty());

    // A closed port: unreachable, a warning, still exit 0.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let closed_url = format!("http://127.0.0.1:{closed}");
    s.git(&repo, &["config", "--local", "xet.endpoint", &closed_url]);
    let v = s.status_json(&repo);
    let check = &v["repository"]["reachability"][0];
    assert_eq!(check["reachable"], false, "{v}");
    assert!(check["error"].as_str().unwrap().contains("connect"), "{v}");
    assert!(v["warnings"][0]
        .as_str()
        .unwrap()
        .contains("does not answer"));
    // The same finding with its level, text and fix apart.
    let finding = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["text"].as_str().unwrap().contains("does not answer"))
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(finding["level"], "warning", "{v}");
    assert!(
        finding["fix"].as_str().unwrap().contains("server running"),
        "{v}"
    );
    assert_eq!(
        v["warnings"][0].as_str().unwrap(),
        format!(
            "{}: {}",
            finding["text"].as_str().unwrap(),
            finding["fix"].as_str().unwrap()
        )
    );
    let text = s.status_text(&repo);
    assert!(text.contains("unreachable"), "{text}");
    assert!(text.contains(&closed_url), "{text}");

    // Negotiated mode: the LFS URL (here lfs.url) is shown and its server checked.
    ok(&s.git_xet(&repo, &["uninstall", "--local"]), "uninstall");
    ok(&s.git_xet(&repo, &["install", "--local"]), "install");
    s.git(
        &repo,
        &[
            "remote",
            "add",
            "origin",
            "https://example.invalid/team/models.git",
        ],
    );
    let lfs_url = format!("{}/team/models.git/info/lfs", server.url());
    s.git(&repo, &["config", "--local", "lfs.url", &lfs_url]);
    let v = s.status_json(&repo);
    let r = &v["repository"];
    assert_eq!(r["mode"], "negotiated", "{v}");
    assert_eq!(r["lfs_urls"][0]["url"], lfs_url, "{v}");
    assert_eq!(r["lfs_urls"][0]["source"], "git lfs env");
    assert_eq!(r["reachability"][0]["reachable"], true, "{v}");
    assert_eq!(r["reachability"][0]["git_xet_server"], true, "{v}");
    let text = s.status_text(&repo);
    assert!(text.contains(&format!("LFS URL    {lfs_url}")), "{text}");
}

// ---------------------------------------------------------------------------------------------
// ls-files

#[test]
fn ls_files_joins_the_journal_and_computes_missing_hashes() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.init_lfs_repo();
    let a = content(1, 300_000);
    let b = content(2, 150_000);
    std::fs::write(repo.join("a.bin"), &a).unwrap();
    std::fs::create_dir_all(repo.join("sub dir")).unwrap();
    std::fs::write(repo.join("sub dir/b.bin"), &b).unwrap();
    std::fs::write(repo.join("c.bin"), b"gone").unwrap();
    s.git(&repo, &["add", "."]);
    s.git(&repo, &["commit", "-q", "-m", "lfs files"]);

    // a.bin: uploaded, a quarter of it deduplicated.
    let a_oid = common::sha256_hex(&a);
    let a_hash = xet_client::pipeline::hasher::hash_bytes(&a, Default::default()).file_hash;
    let mut record = Record::new(
        Direction::Upload,
        &LfsOid::from_hex(&a_oid).unwrap(),
        &a_hash,
        a.len() as u64,
    );
    record.dedup_bytes = 75_000;
    record.transferred_bytes = 200_000;
    record.endpoint = "/srv/store".into();
    journal::append(&repo.join(".git"), &record).unwrap();

    // c.bin: not in the local LFS store (nor in the work tree, from which git-lfs's clean
    // filter would store it again).
    let c_oid = common::sha256_hex(b"gone");
    std::fs::remove_file(repo.join("c.bin")).unwrap();
    std::fs::remove_file(
        repo.join(".git/lfs/objects")
            .join(&c_oid[0..2])
            .join(&c_oid[2..4])
            .join(&c_oid),
    )
    .unwrap();

    // b.bin's computed hash is what `git-xet hash` says.
    let hashed = ok(&s.git_xet(&repo, &["hash", "sub dir/b.bin"]), "hash");
    let b_hash = hashed.split_whitespace().next().unwrap().to_string();

    let text = ok(&s.git_xet(&repo, &["ls-files"]), "ls-files");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    assert!(text.starts_with("XET HASH"), "{text}");
    let a_line = line("a.bin");
    assert!(a_line.starts_with(&a_hash.to_hex()[..12]), "{a_line}");
    assert!(!a_line.contains(&a_hash.to_hex()), "short hash: {a_line}");
    assert!(a_line.contains("25.0%"), "{a_line}");
    assert!(a_line.contains("293.0 KiB"), "{a_line}");
    assert!(!a_line.contains("(computed)"), "{a_line}");
    let b_line = line("b.bin");
    assert!(b_line.starts_with(&b_hash[..12]), "{b_line}");
    assert!(b_line.ends_with("sub dir/b.bin  (computed)"), "{b_line}");
    assert!(line("c.bin").contains("(not downloaded)"), "{text}");

    let long = ok(
        &s.git_xet(&repo, &["ls-files", "--long"]),
        "ls-files --long",
    );
    assert!(long.contains(&a_hash.to_hex()), "{long}");
    assert!(long.contains(&b_hash), "{long}");
    assert!(long.contains(" 300000 "), "{long}");

    // From a subdirectory, as JSON.
    let out = s.git_xet(&repo.join("sub dir"), &["ls-files", "--json"]);
    let v: Value = serde_json::from_str(&ok(&out, "ls-files --json")).unwrap();
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{v}");
    let get = |name: &str| files.iter().find(|f| f["path"] == name).unwrap().clone();
    let fa = get("a.bin");
    assert_eq!(fa["oid"], a_oid);
    assert_eq!(fa["size"], 300_000);
    assert_eq!(fa["xet_hash"], a_hash.to_hex());
    assert_eq!(fa["hash_source"], "journal");
    assert_eq!(fa["direction"], "upload");
    assert_eq!(fa["dedup_bytes"], 75_000);
    assert_eq!(fa["dedup_percent"], 25.0);
    assert_eq!(fa["transferred_bytes"], 200_000);
    assert_eq!(fa["endpoint"], "/srv/store");
    let fb = get("sub dir/b.bin");
    assert_eq!(fb["xet_hash"], b_hash.as_str());
    assert_eq!(fb["hash_source"], "computed");
    assert!(fb["dedup_percent"].is_null());
    let fc = get("c.bin");
    assert!(fc["xet_hash"].is_null());
    assert!(fc["hash_source"].is_null());

    // Outside a repository: an error, exit 1.
    let out = s.git_xet(s.path(), &["ls-files"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("inside a git repository"));
}

#[test]
fn ls_files_lists_a_fresh_clone_and_any_ref_from_the_objects() {
    let s = Sandbox::new();
    let repo = s.repo();
    let bare = s.standalone_repo_with_origin();
    s.git(&repo, &["add", ".gitattributes"]);
    s.git(&repo, &["commit", "-q", "-m", "base"]);
    s.git(&repo, &["tag", "base"]);
    let v1 = content(11, 40_000);
    let v2 = content(12, 50_000);
    std::fs::create_dir_all(repo.join("data")).unwrap();
    std::fs::write(repo.join("data/model.bin"), &v1).unwrap();
    std::fs::write(repo.join("notes.txt"), "plain git\n").unwrap();
    s.git(&repo, &["add", "."]);
    s.git(&repo, &["commit", "-q", "-m", "v1"]);
    s.git(&repo, &["tag", "v1"]);
    std::fs::write(repo.join("data/model.bin"), &v2).unwrap();
    s.git(&repo, &["commit", "-q", "-am", "v2"]);
    s.git(&repo, &["push", "-q", "origin", "main", "v1"]);

    // A clone that downloaded nothing and has no journal: every file, with oid and size.
    let mut clone = Command::new("git");
    s.env(&mut clone);
    let out = clone
        .current_dir(s.path())
        .env("GIT_LFS_SKIP_SMUDGE", "1")
        .args(["clone", "-q", "-b", "main", bare.to_str().unwrap(), "clone"])
        .output()
        .unwrap();
    ok(&out, "git clone");
    let clone = s.path().join("clone");
    assert!(!clone.join(".git/xet/transfers.jsonl").exists());
    let v: Value = serde_json::from_str(&ok(
        &s.git_xet(&clone, &["ls-files", "--json"]),
        "ls-files --json",
    ))
    .unwrap();
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{v}");
    assert_eq!(files[0]["path"], "data/model.bin");
    assert_eq!(files[0]["oid"], common::sha256_hex(&v2));
    assert_eq!(files[0]["size"], 50_000);
    assert!(files[0]["xet_hash"].is_null(), "{v}");
    let text = ok(&s.git_xet(&clone, &["ls-files", "--long"]), "ls-files");
    assert!(text.lines().next().unwrap().contains("OID"), "{text}");
    let line = text.lines().nth(1).unwrap();
    assert!(line.contains(&common::sha256_hex(&v2)), "{line}");
    assert!(line.contains(" 50000 "), "{line}");
    assert!(line.ends_with("data/model.bin  (not downloaded)"), "{line}");

    // An older version by tag, in the work tree that pushed it: hash and dedup from the journal.
    let v: Value = serde_json::from_str(&ok(
        &s.git_xet(&repo, &["ls-files", "--json", "v1"]),
        "ls-files v1",
    ))
    .unwrap();
    let file = &v["files"][0];
    assert_eq!(file["oid"], common::sha256_hex(&v1), "{v}");
    assert_eq!(file["hash_source"], "journal", "{v}");
    assert_eq!(file["direction"], "upload", "{v}");
    let v1_hash = xet_client::pipeline::hasher::hash_bytes(&v1, Default::default()).file_hash;
    assert_eq!(file["xet_hash"], v1_hash.to_hex());

    // A tree without LFS files, and a name that is nothing.
    let empty = ok(&s.git_xet(&repo, &["ls-files", "base"]), "ls-files base");
    assert_eq!(empty, "no Git LFS files in base\n");
    let out = s.git_xet(&repo, &["ls-files", "no-such-ref"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("\"no-such-ref\""), "{}", stderr(&out));
}

#[test]
fn ls_files_masks_a_password_in_an_old_journals_endpoint() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.init_lfs_repo();
    let a = content(7, 10_000);
    std::fs::write(repo.join("a.bin"), &a).unwrap();
    s.git(&repo, &["add", "."]);
    s.git(&repo, &["commit", "-q", "-m", "a"]);
    // A line as a version before redaction wrote it (journal::append redacts now).
    let line = serde_json::json!({
        "direction": "upload",
        "oid": common::sha256_hex(&a),
        "xet_hash": "ab".repeat(32),
        "size": a.len(),
        "endpoint": "http://git:old-journal-secret@127.0.0.1:9/",
    });
    std::fs::create_dir_all(repo.join(".git/xet")).unwrap();
    std::fs::write(repo.join(".git/xet/transfers.jsonl"), format!("{line}\n")).unwrap();
    let out = ok(
        &s.git_xet(&repo, &["ls-files", "--json"]),
        "ls-files --json",
    );
    assert!(!out.contains("old-journal-secret"), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files"][0]["endpoint"], "http://git:***@127.0.0.1:9/");
    let table = ok(&s.git_xet(&repo, &["ls-files", "--long"]), "ls-files");
    assert!(!table.contains("old-journal-secret"), "{table}");
}

// ---------------------------------------------------------------------------------------------
// hooks

#[test]
fn install_local_puts_the_guard_in_front_of_git_lfs_and_uninstall_restores_it() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.init_lfs_repo();
    let hooks = s.hooks();
    let lfs_hook = std::fs::read_to_string(hooks.join("pre-push")).unwrap();
    assert!(lfs_hook.contains("git lfs pre-push \"$@\""), "{lfs_hook}");
    let store = s.path().join("store");

    let out = ok(
        &s.git_xet(
            &repo,
            &["install", "--local", "--endpoint", store.to_str().unwrap()],
        ),
        "install",
    );
    assert!(out.contains("git-lfs's hook moved to"), "{out}");
    let ours = std::fs::read_to_string(hooks.join("pre-push")).unwrap();
    assert!(ours.contains("# git-xet-hook: pre-push"), "{ours}");
    assert!(ours.contains("git lfs pre-push \"$@\""), "{ours}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push.before-xet")).unwrap(),
        lfs_hook,
        "git-lfs's hook is kept as it was"
    );
    assert_eq!(s.local("xet.managedhooks"), "pre-push");
    for other in ["post-checkout", "post-commit", "post-merge"] {
        assert!(
            std::fs::read_to_string(hooks.join(other))
                .unwrap()
                .contains(&format!("git lfs {other}")),
            "git-lfs's {other} is untouched"
        );
    }

    // Idempotent.
    let out = ok(&s.git_xet(&repo, &["install", "--local"]), "install again");
    assert!(out.contains("pre-push (unchanged)"), "{out}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push")).unwrap(),
        ours
    );
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push.before-xet")).unwrap(),
        lfs_hook
    );
    // git-lfs's own install refuses to overwrite our hook, so install must not ask it to.
    s.git(
        &repo,
        &["config", "--local", "--unset", "filter.lfs.process"],
    );
    let out = ok(
        &s.git_xet(&repo, &["install", "--local"]),
        "install after unset filter",
    );
    assert!(out.contains("--skip-repo"), "{out}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push")).unwrap(),
        ours
    );

    let out = ok(&s.git_xet(&repo, &["uninstall", "--local"]), "uninstall");
    assert!(out.contains("restored"), "{out}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push")).unwrap(),
        lfs_hook
    );
    assert!(!hooks.join("pre-push.before-xet").exists());
    assert_eq!(s.local("xet.managedhooks"), "");
    let out = ok(
        &s.git_xet(&repo, &["uninstall", "--local"]),
        "uninstall again",
    );
    assert!(out.contains("was not installed"), "{out}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push")).unwrap(),
        lfs_hook
    );
}

#[test]
fn a_users_own_pre_push_hook_is_kept_and_still_runs() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.git(&repo, &["init", "-q", "-b", "main"]);
    let hooks = s.hooks();
    std::fs::create_dir_all(&hooks).unwrap();
    let ran = s.path().join("user-hook-ran");
    let user_hook = format!(
        "#!/bin/sh\n# my checks\necho \"$1 $2\" > '{}'\ncat >> '{}'\nexit 0\n",
        ran.display(),
        ran.display()
    );
    std::fs::write(hooks.join("pre-push"), &user_hook).unwrap();
    make_executable(&hooks.join("pre-push"));

    let out = ok(&s.git_xet(&repo, &["install", "--local"]), "install");
    assert!(out.contains("your hook moved to"), "{out}");
    assert!(
        out.contains("git-lfs did not install its hooks because this repository has its own ("),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push.before-xet")).unwrap(),
        user_hook
    );

    // A push runs the user's hook, with git's arguments and the refs on stdin.
    let bare = s.path().join("remote.git");
    s.git(s.path(), &["init", "-q", "--bare", bare.to_str().unwrap()]);
    s.git(&repo, &["remote", "add", "origin", bare.to_str().unwrap()]);
    std::fs::write(repo.join("README"), "hi\n").unwrap();
    s.git(&repo, &["add", "."]);
    s.git(&repo, &["commit", "-q", "-m", "one"]);
    s.git(&repo, &["push", "-q", "origin", "main"]);
    let seen = std::fs::read_to_string(&ran).unwrap();
    assert!(
        seen.starts_with(&format!("origin {}", bare.display())),
        "{seen}"
    );
    assert!(
        seen.contains("refs/heads/main"),
        "stdin reached the hook: {seen}"
    );

    // A later hook that is not ours is never removed by uninstall.
    ok(&s.git_xet(&repo, &["uninstall", "--local"]), "uninstall");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push")).unwrap(),
        user_hook
    );
    assert!(!hooks.join("pre-push.before-xet").exists());
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn pre_push_stops_when_xet_is_expected_but_not_registered() {
    let s = Sandbox::new();
    let repo = s.repo();
    let bare = s.standalone_repo_with_origin();
    std::fs::write(repo.join("model.bin"), content(3, 10_000)).unwrap();
    s.git(&repo, &["add", "."]);
    s.git(&repo, &["commit", "-q", "-m", "model"]);

    // The agent registration goes away (say, a global uninstall); xet.endpoint stays.
    for key in ["path", "args", "concurrent"] {
        s.git(
            &repo,
            &[
                "config",
                "--local",
                "--unset",
                &format!("lfs.customtransfer.xet.{key}"),
            ],
        );
    }
    s.git(
        &repo,
        &[
            "config",
            "--local",
            "--unset",
            "lfs.standalonetransferagent",
        ],
    );
    assert!(!s.local("xet.endpoint").is_empty());
    let out = s.git_out(&repo, &["push", "origin", "main"]);
    assert!(!out.status.success(), "the push must fail");
    let err = stderr(&out);
    assert!(err.contains("git-xet: push stopped"), "{err}");
    assert!(err.contains("xet.endpoint is set"), "{err}");
    assert!(
        err.contains("lfs.customtransfer.xet.path is not set"),
        "{err}"
    );
    assert!(err.contains("git xet install"), "{err}");
    let refs = s.git(&bare, &["for-each-ref"]);
    assert!(refs.is_empty(), "nothing was pushed: {refs}");

    // A registered program that cannot run is caught as well.
    s.git(
        &repo,
        &[
            "config",
            "--local",
            "lfs.customtransfer.xet.path",
            "/nonexistent/git-xet",
        ],
    );
    let err = stderr(&s.git_out(&repo, &["push", "origin", "main"]));
    assert!(err.contains("not an executable file"), "{err}");

    // xet.required alone is enough to expect git-xet.
    s.git(&repo, &["config", "--local", "--unset", "xet.endpoint"]);
    s.git(&repo, &["config", "--local", "xet.required", "true"]);
    let err = stderr(&s.git_out(&repo, &["push", "origin", "main"]));
    assert!(err.contains("xet.required is true"), "{err}");

    // Without the registration issue the guard passes and hands over to `git lfs pre-push`
    // (a branch with no LFS object, so no transfer agent is needed for it).
    ok(&s.git_xet(&repo, &["install", "--local"]), "install");
    s.git(&repo, &["checkout", "-q", "--orphan", "plain"]);
    s.git(&repo, &["rm", "-q", "-r", "--cached", "."]);
    std::fs::remove_file(repo.join("model.bin")).unwrap();
    std::fs::write(repo.join("README"), "no LFS here\n").unwrap();
    s.git(&repo, &["add", "README"]);
    s.git(&repo, &["commit", "-q", "-m", "plain"]);
    let mut c = Command::new("git");
    s.env(&mut c);
    let out = c
        .current_dir(&repo)
        .env("GIT_TRACE", "1")
        .args(["push", "origin", "plain"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("push stopped"), "{err}");
    assert!(err.contains("pre-push"), "git-lfs's pre-push ran: {err}");
    assert!(!s
        .git(&bare, &["for-each-ref", "refs/heads/plain"])
        .is_empty());
}

#[test]
fn pre_push_gives_the_fix_for_settings_install_does_not_write() {
    let s = Sandbox::new();
    let repo = s.repo();
    let bare = s.standalone_repo_with_origin();
    std::fs::write(repo.join("model.bin"), content(4, 10_000)).unwrap();
    s.git(&repo, &["add", "."]);
    s.git(&repo, &["commit", "-q", "-m", "model"]);

    // `git xet install` would not change lfs.basictransfersonly: the hook says what does.
    s.git(
        &repo,
        &["config", "--local", "lfs.basictransfersonly", "true"],
    );
    let err = stderr(&s.git_out(&repo, &["push", "origin", "main"]));
    assert!(err.contains("git-xet: push stopped"), "{err}");
    assert!(err.contains("lfs.basictransfersonly is true"), "{err}");
    assert!(
        err.contains("Fix it with:    git config --local --unset lfs.basictransfersonly"),
        "{err}"
    );
    assert!(!err.contains("Fix it with:    git xet install"), "{err}");
    s.git(
        &repo,
        &["config", "--local", "--unset", "lfs.basictransfersonly"],
    );

    s.git(
        &repo,
        &[
            "config",
            "--local",
            "lfs.customtransfer.xet.direction",
            "download",
        ],
    );
    let err = stderr(&s.git_out(&repo, &["push", "origin", "main"]));
    assert!(
        err.contains("git config --local --unset lfs.customtransfer.xet.direction"),
        "{err}"
    );
    assert!(
        s.git(&bare, &["for-each-ref"]).is_empty(),
        "nothing was pushed"
    );
}

#[test]
fn pre_push_prints_what_the_push_sent_and_what_deduplication_saved() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.standalone_repo_with_origin();

    // A branch without LFS objects: nothing uploaded, no summary.
    std::fs::write(repo.join("README"), "hi\n").unwrap();
    s.git(&repo, &["add", "README", ".gitattributes"]);
    s.git(&repo, &["commit", "-q", "-m", "readme"]);
    let out = s.git_out(&repo, &["push", "origin", "main"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("git-xet: pushed"),
        "{}",
        stderr(&out)
    );

    // The first push of a 4 MiB file sends about all of it.
    let mut data = content(11, 4 << 20);
    std::fs::write(repo.join("model.bin"), &data).unwrap();
    s.git(&repo, &["add", "model.bin"]);
    s.git(&repo, &["commit", "-q", "-m", "model"]);
    let out = s.git_out(&repo, &["push", "origin", "main"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("git-xet: pushed 1 object (4.0 MiB): stored "),
        "a directory store: {err}"
    );
    assert!(err.contains("(0%) was already in the store"), "{err}");

    // An edit of 64 KiB in the middle: the summary shows most of it was deduplicated.
    for b in &mut data[2 << 20..(2 << 20) + (64 << 10)] {
        *b = b.wrapping_add(1);
    }
    std::fs::write(repo.join("model.bin"), &data).unwrap();
    s.git(&repo, &["commit", "-q", "-am", "edit"]);
    let out = s.git_out(&repo, &["push", "origin", "main"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("git-xet: pushed 1 object"))
        .unwrap_or_else(|| panic!("no summary: {err}"));
    let percent: u32 = line
        .rsplit_once('(')
        .and_then(|(_, rest)| rest.split_once("%)"))
        .map(|(p, _)| p.parse().unwrap())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(percent >= 90, "most of the edit was deduplicated: {line}");
    assert!(
        line.ends_with("of it found through earlier versions"),
        "the earlier version of model.bin was used: {line}"
    );

    // Outside a repository: a sentence that says where to run it, not git's error.
    let elsewhere = s.path().join("not-a-repo");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = s.git_xet(&elsewhere, &["push-summary"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not inside a git repository") && !err.contains("rev-parse"),
        "{err}"
    );

    // A replaced hook that fails still stops the push, after the summary logic.
    let hooks = s.hooks();
    std::fs::write(hooks.join("pre-push.before-xet"), "#!/bin/sh\nexit 3\n").unwrap();
    make_executable(&hooks.join("pre-push.before-xet"));
    std::fs::write(repo.join("README"), "again\n").unwrap();
    s.git(&repo, &["commit", "-q", "-am", "readme again"]);
    let out = s.git_out(&repo, &["push", "origin", "main"]);
    assert!(
        !out.status.success(),
        "the replaced hook's failure stops the push"
    );
}

// ---------------------------------------------------------------------------------------------
// install.sh

fn install_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh")
}

#[test]
fn install_sh_parses_and_has_help() {
    let out = Command::new("sh")
        .arg("-n")
        .arg(install_sh())
        .output()
        .unwrap();
    assert!(out.status.success(), "sh -n: {}", stderr(&out));
    let out = Command::new("sh")
        .arg(install_sh())
        .arg("--help")
        .output()
        .unwrap();
    let help = ok(&out, "install.sh --help");
    for word in [
        "Usage:",
        "-y",
        "--endpoint",
        "--no-demo",
        "--agent-only",
        "cargo install --path . --locked",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
    let out = Command::new("sh")
        .arg(install_sh())
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown option: --bogus"));

    if which("shellcheck").is_some() {
        let out = Command::new("shellcheck")
            .arg(install_sh())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/pre-push"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// Runs install.sh with stand-ins for git, cargo and the package managers on PATH, which log
/// their arguments; returns the log and the script's output.
fn run_install_sh(args: &[&str], demo_exists: bool) -> (String, Output) {
    run_install_sh_with(args, demo_exists, &[])
}

/// [`run_install_sh`] with more environment: `FAKE_CARGO_FAILS=1` makes the stand-in cargo's
/// install fail as a real build does (messages on stderr, exit 101).
fn run_install_sh_with(args: &[&str], demo_exists: bool, env: &[(&str, &str)]) -> (String, Output) {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    let log = dir.path().join("log");
    let script = |name: &str, body: &str| {
        let p = fake.join(name);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"{name} $*\" >> \"$FAKE_LOG\"\n{body}"),
        )
        .unwrap();
        make_executable(&p);
    };
    script(
        "git",
        "case $1 in\n  lfs) echo 'git-lfs/3.3.0 (fake)' ;;\n  xet) shift; exec git-xet \"$@\" ;;\nesac\nexit 0\n",
    );
    script(
        "cargo",
        "case $1 in\n  --version) echo 'cargo 1.85.0 (fake)' ;;\n  install) if [ -n \"${FAKE_CARGO_FAILS:-}\" ]; then echo 'error: could not compile `git-xet`' >&2; exit 101; fi; mkdir -p \"$CARGO_HOME/bin\" && cp \"$FAKE_DIR/git-xet.fake\" \"$CARGO_HOME/bin/git-xet\" ;;\nesac\nexit 0\n",
    );
    script("cc", "exit 0\n");
    // FUSE is there, whatever this machine has: install.sh offers fuse3 only without it.
    script("fusermount3", "exit 0\n");
    for refused in ["apt-get", "sudo", "brew", "curl", "rustup"] {
        script(refused, "exit 1\n");
    }
    let demo_rc = if demo_exists { 0 } else { 2 };
    let p = fake.join("git-xet.fake");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\necho \"git-xet $*\" >> \"$FAKE_LOG\"\n\
             if [ \"$*\" = \"demo --help\" ]; then exit {demo_rc}; fi\n\
             if [ \"$1\" = --version ]; then echo 'git-xet 0.0.0'; fi\nexit 0\n"
        ),
    )
    .unwrap();
    make_executable(&p);
    let cwd = dir.path().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let out = Command::new("sh")
        .arg(install_sh())
        .args(args)
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", fake.display()))
        .env("HOME", dir.path().join("home"))
        .env("CARGO_HOME", dir.path().join("cargo"))
        .env("FAKE_LOG", &log)
        .env("FAKE_DIR", &fake)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let logged = logged.replace(&cwd.display().to_string(), "<cwd>");
    (logged, out)
}

#[test]
fn install_sh_builds_registers_and_runs_the_demo_when_there_is_one() {
    let (log, out) = run_install_sh(&["-y", "--endpoint", "store", "--no-demo"], true);
    let text = ok(&out, "install.sh");
    assert!(log.contains("cargo install --path . --locked"), "{log}");
    assert!(
        log.contains("git-xet install --endpoint <cwd>/store"),
        "the endpoint is passed through, absolute: {log}"
    );
    assert!(!log.contains("demo"), "--no-demo: {log}");
    assert!(!log.contains("apt-get") && !log.contains("curl"), "{log}");
    assert!(text.contains("done"), "{text}");
    assert!(
        stderr(&out).contains("is not on your PATH"),
        "{}",
        stderr(&out)
    );

    let (log, out) = run_install_sh(&[], true);
    ok(&out, "install.sh");
    let man = log
        .find("git-xet man\n")
        .expect("the man pages were installed");
    let install = log.find("git-xet install\n").expect("git xet install ran");
    assert!(man < install, "{log}");
    let demo = log.find("git-xet demo\n").expect("the demo ran");
    assert!(install < demo, "{log}");

    let (log, out) = run_install_sh(&[], false);
    let text = ok(&out, "install.sh");
    assert!(log.contains("git-xet demo --help"), "{log}");
    assert!(!log.contains("git-xet demo\n"), "{log}");
    assert!(text.contains("no demo"), "{text}");
}

#[test]
fn install_sh_builds_into_the_checkout_and_says_how_long_it_took() {
    let (log, out) = run_install_sh(&["-y", "--no-demo"], true);
    let text = ok(&out, "install.sh");
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    assert!(
        log.contains(&format!("--target-dir {}", target.display())),
        "the build goes to the checkout's target/, so that a rerun resumes: {log}"
    );
    assert!(!log.contains("--no-default-features"), "{log}");
    assert!(text.contains("about 1 GB of disk"), "{text}");
    assert!(text.contains("built in "), "{text}");

    let (log, out) = run_install_sh(&["-y", "--no-demo", "--agent-only"], true);
    let text = ok(&out, "install.sh --agent-only");
    assert!(log.contains("--no-default-features"), "{log}");
    assert!(text.contains("git-xet (agent only)"), "{text}");
}

#[test]
fn a_failed_build_says_what_failed_and_that_a_rerun_resumes() {
    let (log, out) = run_install_sh_with(&["-y", "--no-demo"], true, &[("FAKE_CARGO_FAILS", "1")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("could not compile"),
        "cargo's own message stays: {err}"
    );
    assert!(err.contains("building git-xet failed after"), "{err}");
    assert!(err.contains("Run ./install.sh again"), "{err}");
    assert!(err.contains("resumes where it stopped"), "{err}");
    assert!(
        !log.contains("git-xet install"),
        "nothing is registered after a failed build: {log}"
    );
}

/// The shell blocks of the section `heading` (a whole heading line) of the document `file`
/// (relative to the crate root), in order: up to the next heading, of any level.
fn doc_shell_blocks(file: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let mut lines = text.lines().skip_while(|l| *l != heading);
    assert!(lines.next().is_some(), "{file} has no {heading:?}");
    let (mut blocks, mut block, mut fence) = (Vec::new(), None::<String>, false);
    for line in lines {
        if line.starts_with("```") {
            if let Some(b) = block.take() {
                blocks.push(b);
            } else if line == "```sh" {
                block = Some(String::new());
            }
            fence = !fence;
        } else if let Some(b) = block.as_mut() {
            b.push_str(line);
            b.push('\n');
        } else if !fence && line.starts_with('#') {
            break;
        }
    }
    blocks
}

/// The walkthrough of the user guide (docs/guide.md; README.md links to it), run as written.
#[needs(git_lfs)]
#[test]
fn the_readme_walkthrough_works_as_written() {
    let blocks = doc_shell_blocks(
        "docs/guide.md",
        "## Walkthrough: your own server (negotiated mode)",
    );
    assert_eq!(
        blocks.len(),
        4,
        "server, once per machine, repository, locksverify: {blocks:#?}"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Changed from the guide only: the port (a free one), the model file (made here), a
    // lifetime for the server, and waiting for it to listen.
    let mut script = String::from("set -eux\nexec 2>&1\n");
    let substitute = |text: &str, from: &str, to: &str| -> String {
        assert!(
            text.contains(from),
            "the walkthrough no longer has {from:?}:\n{text}"
        );
        text.replace(from, to)
    };
    let server = substitute(&blocks[0], "127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let server = substitute(
        &server,
        "git xet serve --data",
        "git xet serve --max-lifetime 200 --data",
    );
    script.push_str(&server);
    script.push_str(&format!(
        "server=$!\ntrap 'kill $server' EXIT\n\
         until (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; do sleep 0.1; done\n"
    ));
    script.push_str(&substitute(
        &blocks[1],
        "127.0.0.1:8080",
        &format!("127.0.0.1:{port}"),
    ));
    let repo = substitute(&blocks[2], "127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let repo = substitute(
        &repo,
        "cp /path/to/model.safetensors .",
        "head -c 3000000 /dev/urandom > model.safetensors",
    );
    script.push_str(&repo);
    script.push_str(
        "cmp copy/model.safetensors my-repo/model.safetensors\n\
         test \"$(wc -l < my-repo/.git/xet/transfers.jsonl)\" -eq 1\n",
    );
    // git-lfs's locksverify hint, then the choice the guide gives (its first line): a second
    // push no longer prints the hint.
    let choice = substitute(&blocks[3], "127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let choice = choice.lines().next().unwrap().to_string();
    script.push_str(&format!(
        "cd my-repo\n{choice}\necho SECOND-PUSH\n\
         head -c 100000 /dev/urandom > more.safetensors\n\
         git add more.safetensors && git commit -q -m more && git push origin HEAD\n"
    ));

    let s = Sandbox::new();
    let home = s.home();
    let mut c = Command::new("bash");
    s.env(&mut c);
    // Only what a new user has: an identity (no default branch name, no credential helper).
    s.git(&home, &["config", "--global", "user.name", "New User"]);
    s.git(
        &home,
        &["config", "--global", "user.email", "new@example.com"],
    );
    let path = std::env::join_paths(
        std::iter::once(common::git::bin_dir())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let out = c
        .current_dir(&home)
        .env("PATH", path)
        .arg("-c")
        .arg(&script)
        .env_remove("GIT_XET_ENDPOINT")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the walkthrough failed:\n{text}");
    assert!(text.contains("negotiated"), "{text}");
    assert!(
        text.contains("credential from your git credential helper accepted"),
        "{text}"
    );
    // The push summary the walkthrough promises, printed by the hook of `install --local`.
    assert!(text.contains("git-xet: pushed 1 object"), "{text}");
    let (first, second) = text
        .split_once("\nSECOND-PUSH")
        .expect("the second push ran");
    assert!(
        first.contains("Locking support detected on remote"),
        "the hint the guide explains: {first}"
    );
    assert!(
        !second.contains("Locking support detected") && second.contains("git-xet: pushed 1 object"),
        "after the guide's choice: {second}"
    );
}

/// git's automatic gc in the background (a commit of many files starts it) would pack and
/// delete loose objects while git-lfs's pre-push scan reads them; git-xet's hook waits for it
/// and says so before handing over.
#[test]
fn the_pre_push_hook_waits_for_gits_background_gc() {
    let s = Sandbox::new();
    let repo = s.repo();
    s.git(&repo, &["init", "-q", "-b", "main"]);
    let hooks = s.hooks();
    std::fs::create_dir_all(&hooks).unwrap();
    // The hook git-xet hands over to records whether the "gc" was still running.
    let seen = s.path().join("seen");
    let user_hook = format!(
        "#!/bin/sh\nif kill -0 \"$(cut -d' ' -f1 < .git/gc.pid)\" 2>/dev/null; then echo running; else echo done; fi > '{}'\nexit 0\n",
        seen.display()
    );
    std::fs::write(hooks.join("pre-push"), &user_hook).unwrap();
    make_executable(&hooks.join("pre-push"));
    ok(&s.git_xet(&repo, &["install", "--local"]), "install");
    let bare = s.path().join("remote.git");
    s.git(s.path(), &["init", "-q", "--bare", bare.to_str().unwrap()]);
    s.git(&repo, &["remote", "add", "origin", bare.to_str().unwrap()]);
    std::fs::write(repo.join("README"), "hi\n").unwrap();
    s.git(&repo, &["add", "."]);
    s.git(&repo, &["commit", "-q", "-m", "one"]);

    // A stand-in for the gc: a process of this machine named in gc.pid, gone in two seconds
    // (reaped at once, so that no zombie stays "alive").
    let mut gc = Command::new("sleep").arg("2").spawn().unwrap();
    let host = Command::new("uname").arg("-n").output().unwrap();
    let host = String::from_utf8_lossy(&host.stdout).trim().to_string();
    std::fs::write(repo.join(".git/gc.pid"), format!("{} {host}", gc.id())).unwrap();
    let reaper = std::thread::spawn(move || gc.wait());
    let push = s.git_out(&repo, &["push", "-q", "origin", "main"]);
    ok(&push, "push");
    assert!(
        stderr(&push).contains("waiting for git's background gc"),
        "{}",
        stderr(&push)
    );
    assert_eq!(std::fs::read_to_string(&seen).unwrap().trim(), "done");
    reaper.join().unwrap().unwrap();

    // A gc.pid of a process that is gone (or of another machine) is not waited for.
    std::fs::write(repo.join(".git/gc.pid"), format!("999999999 {host}")).unwrap();
    std::fs::write(repo.join("README"), "again\n").unwrap();
    s.git(&repo, &["commit", "-q", "-am", "two"]);
    let push = s.git_out(&repo, &["push", "-q", "origin", "main"]);
    ok(&push, "push");
    assert!(!stderr(&push).contains("waiting"), "{}", stderr(&push));
}
