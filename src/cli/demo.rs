//! `git xet demo`: a real round trip in a temporary directory — push a large file, edit it,
//! push again, clone fresh — through git, git-lfs and the agent with an embedded store, then a
//! table of what plain Git LFS would have sent against what git-xet sent.
//!
//! It never touches the user's configuration: every git command runs with a private global
//! config (`GIT_CONFIG_GLOBAL`) and no system config, which registers this very binary as the
//! agent in standalone mode.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use super::CmdResult;
use crate::agent::journal::{self, Direction};

/// What the demo ends with: how to use git-xet on a real repository. `git xet install` alone
/// (which install.sh has just run) changes nothing for a repository whose LFS server does not
/// offer Xet, such as GitHub's or GitLab's, so the ways that do are spelled out.
const NEXT_STEPS: &str = "\n\
To use it on a real repository, git-xet needs a place that speaks Xet for the chunks:\n\
  - your own server (negotiated mode; clones work for everyone with git-xet or plain git-lfs):\n\
      git xet serve --data ~/xet-data --listen 0.0.0.0:8080 --token-file ~/xet-tokens\n\
      git config -f .lfsconfig lfs.url http://HOST:8080/team/repo/info/lfs   # and commit it\n\
  - any git host (GitHub, GitLab, ...): keep the LFS objects on that server or in a directory\n\
    (standalone mode; every clone needs git-xet installed the same way):\n\
      git xet install --local --endpoint http://HOST:8080    # or --endpoint /shared/xet-store\n\
  - Hugging Face Hub repositories that use Xet storage: nothing more; pushes already use git-xet.\n\
Then `git xet status` in the repository says which mode applies and whether the server answers.\n\
Details: `git xet --help`, `git xet install --help`, `git xet serve --help`.";

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Show what git-xet does, with real git and git-lfs, in a temporary \
directory: push a large file, change a small part of it, push again, and clone the repository \
fresh. Objects go through the git-xet agent into a local store (standalone mode with the \
embedded store), so no server is needed. Prints, for each step, the bytes plain Git LFS would \
have sent and the bytes git-xet sent.\n\nYour git configuration is not touched. Needs git and \
git-lfs.",
    after_long_help = "Examples:\n  git xet demo\n  git xet demo --size 256 --keep"
)]
pub(crate) struct DemoArgs {
    /// Size of the demo file in MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub size: u64,
    /// Keep the temporary directory (its path is printed) instead of removing it.
    #[arg(long)]
    pub keep: bool,
}

struct Sandbox {
    root: PathBuf,
    exe: PathBuf,
}

impl Sandbox {
    fn git(&self, dir: &Path, args: &[&str]) -> Result<String, String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", self.root.join("gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_XET_CACHE_DIR", self.root.join("cache"))
            .env_remove("GIT_XET_ENDPOINT")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run git: {e}; is git installed?"))?;
        if !out.status.success() {
            return Err(format!(
                "`git {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn config(&self, key: &str, value: &str) -> Result<(), String> {
        self.git(&self.root, &["config", "--global", key, value])
            .map(|_| ())
    }

    /// Bytes of xorb bodies the agent sent for the uploads in `repo`'s journal so far.
    fn sent(&self, repo: &Path) -> Result<u64, String> {
        let records = journal::read(&repo.join(".git"))
            .map_err(|e| format!("cannot read the transfer journal: {e}"))?;
        Ok(records
            .values()
            .filter(|r| r.direction == Direction::Upload)
            .map(|r| r.transferred_bytes)
            .sum())
    }
}

/// Deterministic demo content: a mix of incompressible and compressible regions, like a model
/// file with tables of small integers between blocks of random-looking floats.
fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x = seed;
    let mut block = 0u64;
    while out.len() < len {
        let n = (1 << 20).min(len - out.len());
        if block % 4 == 3 {
            out.extend((0..n).map(|i| ((i / 64) % 7) as u8));
        } else {
            for _ in 0..n {
                // xorshift64*: any fixed generator will do for demo bytes.
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                out.push((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8);
            }
        }
        block += 1;
    }
    out
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
}

pub fn run(args: &DemoArgs) -> CmdResult {
    let tmp = tempfile::Builder::new().prefix("git-xet-demo-").tempdir()?;
    let sandbox = Sandbox {
        root: tmp.path().to_path_buf(),
        exe: std::env::current_exe()?,
    };
    let result = demo(&sandbox, args);
    if args.keep {
        let kept = tmp.keep();
        println!("\nkept {}", kept.display());
    }
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(format!("the demo failed: {e}").into()),
    }
}

fn demo(s: &Sandbox, args: &DemoArgs) -> Result<(), String> {
    let root = &s.root;
    println!("git-xet demo in {}", root.display());
    let work = set_up(s)?;

    let size = (args.size << 20) as usize;
    println!("\n1. commit and push model.bin ({})", mib(size as u64));
    let mut data = content(size, 0x9e37_79b9_7f4a_7c15);
    std::fs::write(work.join("model.bin"), &data).map_err(|e| e.to_string())?;
    s.git(&work, &["add", "."])?;
    s.git(&work, &["commit", "-q", "-m", "add model"])?;
    let t = std::time::Instant::now();
    s.git(&work, &["push", "-q", "origin", "main"])?;
    let first = s.sent(&work)?;
    println!("   pushed in {:.1} s", t.elapsed().as_secs_f64());

    println!("2. change 1 MiB in the middle and append 100 KiB, commit and push");
    let mid = size / 2;
    let patch = content(1 << 20, 42);
    let end = (mid + patch.len()).min(size);
    data[mid..end].copy_from_slice(&patch[..end - mid]);
    data.extend(content(100 << 10, 43));
    std::fs::write(work.join("model.bin"), &data).map_err(|e| e.to_string())?;
    s.git(&work, &["commit", "-q", "-am", "fine-tune"])?;
    let t = std::time::Instant::now();
    s.git(&work, &["push", "-q", "origin", "main"])?;
    let second = s.sent(&work)? - first;
    println!("   pushed in {:.1} s", t.elapsed().as_secs_f64());

    println!("3. clone the repository fresh");
    let t = std::time::Instant::now();
    s.git(root, &["clone", "-q", "remote.git", "clone"])?;
    println!("   cloned in {:.1} s", t.elapsed().as_secs_f64());
    let cloned = std::fs::read(root.join("clone/model.bin")).map_err(|e| e.to_string())?;
    if cloned != data {
        return Err("the cloned model.bin differs from the pushed one".into());
    }
    println!("   model.bin in the clone is identical to the pushed file");

    print_table([size as u64, data.len() as u64], [first, second]);
    println!("{NEXT_STEPS}");
    Ok(())
}

/// Configures the sandbox's git (identity, git-lfs, git-xet in standalone mode with a
/// directory store) and makes a work repository with a bare remote; returns the work tree.
fn set_up(s: &Sandbox) -> Result<std::path::PathBuf, String> {
    let root = &s.root;
    let lfs = s.git(root, &["lfs", "version"]).map_err(|_| {
        "git-lfs is not installed: install it (https://git-lfs.com, or `apt-get install git-lfs`)"
            .to_string()
    })?;
    println!("using {lfs}");
    let store = root.join("store");
    s.config("user.name", "git-xet demo")?;
    s.config("user.email", "demo@git-xet.invalid")?;
    s.config("init.defaultBranch", "main")?;
    s.git(root, &["lfs", "install", "--skip-repo"])?;
    let exe = s.exe.to_string_lossy().into_owned();
    s.config("lfs.customtransfer.xet.path", &exe)?;
    s.config("lfs.customtransfer.xet.args", "transfer")?;
    s.config("lfs.customtransfer.xet.concurrent", "true")?;
    s.config(
        "lfs.standalonetransferagent",
        xet_protocol::wire::XET_TRANSFER,
    )?;
    s.config("xet.endpoint", &store.to_string_lossy())?;
    s.git(root, &["init", "-q", "--bare", "remote.git"])?;
    s.git(root, &["init", "-q", "work"])?;
    let work = root.join("work");
    s.git(&work, &["lfs", "track", "*.bin"])?;
    s.git(&work, &["remote", "add", "origin", "../remote.git"])?;
    Ok(work)
}

/// The table of bytes sent by each push, against what plain Git LFS sends (the whole file).
fn print_table(plain: [u64; 2], sent: [u64; 2]) {
    println!(
        "\n{:<14} {:>16} {:>16} {:>8}",
        "push", "plain Git LFS", "git-xet", "ratio"
    );
    for (i, name) in ["first", "after the edit"].iter().enumerate() {
        println!(
            "{:<14} {:>16} {:>16} {:>7.1}%",
            name,
            mib(plain[i]),
            mib(sent[i]),
            100.0 * sent[i] as f64 / plain[i].max(1) as f64
        );
    }
    println!(
        "\nThe edited push sent {} instead of {}: only the chunks around the change.",
        mib(sent[1]),
        mib(plain[1])
    );
}
