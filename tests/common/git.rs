//! Real git and git-lfs in an isolated environment: every command runs with a cleared
//! environment (`PATH` with the built `git-xet` first, `HOME` in a temporary directory,
//! `GIT_CONFIG_NOSYSTEM=1`, `GIT_TERMINAL_PROMPT=0`, a private shard cache and agent log),
//! under a timeout, so nothing touches the user's configuration and nothing hangs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a single git command may take.
pub const TIMEOUT: Duration = Duration::from_secs(240);

/// A temporary world: `home/` (global config), and room for repositories and stores.
pub struct GitEnv {
    pub root: tempfile::TempDir,
    /// Extra environment variables for every command.
    pub vars: Vec<(String, String)>,
}

/// What a command printed.
#[derive(Debug)]
pub struct Output {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// The directory holding the built `git-xet` binary, so that `git xet …` finds it.
pub fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_git-xet"))
        .parent()
        .unwrap()
        .to_path_buf()
}

impl GitEnv {
    /// A fresh world with a global identity, `main` as the default branch, and git-lfs's
    /// filters installed globally.
    pub fn new() -> Self {
        let env = GitEnv {
            root: tempfile::tempdir().unwrap(),
            vars: Vec::new(),
        };
        std::fs::create_dir_all(env.home()).unwrap();
        let home = env.home();
        env.git(&home, &["config", "--global", "user.name", "Test"]);
        env.git(
            &home,
            &["config", "--global", "user.email", "test@example.com"],
        );
        env.git(&home, &["config", "--global", "init.defaultBranch", "main"]);
        env.git(&home, &["lfs", "install", "--skip-repo"]);
        env
    }

    /// A person's machine: its own HOME, caches and log, `git xet install --global`, and a
    /// credential helper answering `token`.
    #[allow(dead_code)]
    pub fn machine(token: &str) -> Self {
        let env = Self::new();
        env.credential_helper(token);
        let out = env.run_in(env.path(), "git", &["xet", "install", "--global"]);
        assert_eq!(out.status, Some(0), "git xet install: {}", out.all());
        env
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// The agent's log file (`GIT_XET_LOG`), for failure messages.
    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("agent.log")).unwrap_or_default()
    }

    /// The records of `repo`'s transfer journal (`.git/xet/transfers.jsonl`), oldest first.
    pub fn journal(&self, repo: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(repo.join(".git/xet/transfers.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a journal record"))
            .collect()
    }

    /// The oids `repo`'s transfer journal records as uploaded (each once).
    pub fn uploaded_oids(&self, repo: &Path) -> std::collections::BTreeSet<String> {
        self.journal(repo)
            .iter()
            .filter(|r| r["direction"] == "upload")
            .filter_map(|r| Some(r["oid"].as_str()?.to_string()))
            .collect()
    }

    /// A credential helper answering `token` as the password for every URL.
    pub fn credential_helper(&self, token: &str) {
        let helper = format!(
            "!f() {{ test \"$1\" = get && echo username=git && echo password={token}; }}; f"
        );
        self.git(
            &self.home(),
            &["config", "--global", "credential.helper", &helper],
        );
    }

    /// Runs `program args` in `dir` with the isolated environment and a timeout.
    pub fn run_in(&self, dir: &Path, program: &str, args: &[&str]) -> Output {
        self.run_with(dir, program, args, &[])
    }

    /// [`GitEnv::run_in`] with extra variables.
    pub fn run_with(
        &self,
        dir: &Path,
        program: &str,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> Output {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out_path = self.root.path().join(format!("cmd{n}.out"));
        let err_path = self.root.path().join(format!("cmd{n}.err"));
        let mut cmd = self.command(dir, program, args);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code();
            }
            if started.elapsed() > TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{program} {args:?} timed out after {TIMEOUT:?}; stderr: {}",
                    std::fs::read_to_string(&err_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = Output {
            status,
            stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        };
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        out
    }

    /// `program args` in `dir` with the isolated environment, to be run by the caller (no
    /// timeout: the caller's to keep).
    pub fn command(&self, dir: &Path, program: &str, args: &[&str]) -> Command {
        let path = std::env::join_paths(std::iter::once(bin_dir()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .unwrap();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.home().join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_LFS_SKIP_SMUDGE", "0")
            .env("GIT_XET_CACHE_DIR", self.root.path().join("cache"))
            .env("GIT_XET_LOG", self.root.path().join("agent.log"))
            .env("LC_ALL", "C");
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd
    }

    /// Installs git-xet globally (`git xet install --global` plus `install_args`), a credential
    /// helper answering `token`, a bare `remote.git` and a work tree `work` tracking `*.bin`
    /// whose `.lfsconfig` sends LFS traffic to `lfs_url` (negotiated mode), with `origin` set;
    /// returns the work tree.
    #[allow(dead_code)]
    pub fn negotiated_work_tree(
        &self,
        token: &str,
        install_args: &[&str],
        lfs_url: &str,
    ) -> PathBuf {
        self.credential_helper(token);
        let mut args = vec!["xet", "install", "--global"];
        args.extend_from_slice(install_args);
        let out = self.run_in(self.path(), "git", &args);
        assert_eq!(out.status, Some(0), "{}", out.all());
        self.git(self.path(), &["init", "-q", "--bare", "remote.git"]);
        self.git(self.path(), &["init", "-q", "work"]);
        let work = self.path().join("work");
        self.git(&work, &["lfs", "track", "*.bin"]);
        self.git(&work, &["remote", "add", "origin", "../remote.git"]);
        std::fs::write(
            work.join(".lfsconfig"),
            format!("[lfs]\n\turl = {lfs_url}\n"),
        )
        .unwrap();
        work
    }

    /// Clones `remote` into `name` (both under the root) without downloading LFS objects
    /// (`GIT_LFS_SKIP_SMUDGE=1`); must succeed.
    pub fn clone_skip_smudge(&self, remote: &str, name: &str) {
        let out = self.run_with(
            self.path(),
            "git",
            &["clone", "-q", remote, name],
            &[("GIT_LFS_SKIP_SMUDGE", "1")],
        );
        assert_eq!(out.status, Some(0), "clone of {remote}: {}", out.all());
    }

    /// A world with git-xet installed globally in standalone mode on the directory `store`
    /// with `concurrency` agents, a bare `remote.git` and a work repository tracking `*.bin`
    /// with it as `origin`; the work repository's path.
    pub fn standalone_world(&self, store: &Path, concurrency: u32) -> PathBuf {
        let out = self.run_in(
            self.path(),
            "git",
            &[
                "xet",
                "install",
                "--global",
                "--endpoint",
                store.to_str().unwrap(),
                "--concurrency",
                &concurrency.to_string(),
            ],
        );
        assert_eq!(out.status, Some(0), "git xet install: {}", out.all());
        self.git(self.path(), &["init", "-q", "--bare", "remote.git"]);
        self.git(self.path(), &["init", "-q", "work"]);
        let work = self.path().join("work");
        self.git(&work, &["lfs", "track", "*.bin"]);
        self.git(&work, &["remote", "add", "origin", "../remote.git"]);
        work
    }

    /// A world with git-xet installed globally in standalone mode on the `git xet serve` at
    /// `url` (its token from a credential helper), a bare `remote.git` and a work repository
    /// tracking `*.bin` with it as `origin`; the work repository's path.
    #[allow(dead_code)]
    pub fn standalone_http_world(&self, url: &str, token: &str) -> PathBuf {
        self.credential_helper(token);
        let out = self.run_in(
            self.path(),
            "git",
            &["xet", "install", "--global", "--endpoint", url],
        );
        assert_eq!(out.status, Some(0), "git xet install: {}", out.all());
        self.git(self.path(), &["init", "-q", "--bare", "remote.git"]);
        self.git(self.path(), &["init", "-q", "work"]);
        let work = self.path().join("work");
        self.git(&work, &["lfs", "track", "*.bin"]);
        self.git(&work, &["remote", "add", "origin", "../remote.git"]);
        work
    }

    /// `git xet install --local --endpoint ENDPOINT` in `repo` (a directory or a URL), which
    /// must succeed: a standalone repository as the guide sets one up, with git-xet's pre-push
    /// hook.
    #[allow(dead_code)]
    pub fn install_local(&self, repo: &Path, endpoint: &str) {
        let out = self.run_in(
            repo,
            "git",
            &["xet", "install", "--local", "--endpoint", endpoint],
        );
        assert_eq!(
            out.status,
            Some(0),
            "git xet install --local: {}",
            out.all()
        );
    }

    /// Runs a git command that must succeed.
    pub fn git(&self, dir: &Path, args: &[&str]) -> Output {
        let out = self.run_in(dir, "git", args);
        assert_eq!(
            out.status,
            Some(0),
            "git {args:?} failed\nstdout: {}\nstderr: {}\nagent log (tail):\n{}",
            out.stdout,
            out.stderr,
            tail(&self.agent_log(), 40)
        );
        out
    }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Total size of the files under `dir` (0 if it does not exist).
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Files under `dir`, recursively.
pub fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => count_files(&e.path()),
                    Ok(_) => 1,
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}
