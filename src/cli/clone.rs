//! `git xet clone`: a clone with its LFS files downloaded by git-xet in this process, in
//! either mode. git clones without smudging; for a standalone-mode repository (an endpoint
//! given or configured globally) the endpoint is set up in the new repository (`install
//! --local --endpoint`: a plain `git clone` of such a repository fails in git-lfs's smudge
//! filter, "remote missing object", because only git config names the endpoint); git checks
//! out the pointers; then the LFS files of HEAD are fetched in this process, each work-tree
//! file written as its object lands in git-lfs's store ([`super::fetch::fetch_and_checkout`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use super::fetch::run_step;
use super::CmdResult;
use crate::agent::settings;
use crate::git::{Git, Scope};

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Clone a repository and download its LFS files with git-xet, in this \
process: `git clone` without git-lfs's downloads, then the LFS files of the checkout fetched \
as `git xet fetch` does (several at once, chunks already on this machine copied, each file's \
SHA-256 computed as it is written), then the work tree checked out: git writes the pointers, and \
each LFS file is copied from its local object and recorded in git's index, so nothing is read or \
hashed again (not by git-lfs, not by the next `git status`).\n\nFor a \
repository whose LFS files are stored in standalone mode (at a `git xet serve` or a directory \
store, not on the git host), give the endpoint: --endpoint, else the one configured globally \
(`xet.endpoint`, written by `git xet install --global --endpoint`) is used, and `git xet \
install --local --endpoint ENDPOINT` sets the new repository up for it. A plain `git clone` of \
such a repository stops with git-lfs's \"remote missing object … smudge filter lfs failed\": \
the git host has only the pointers. Without an endpoint, the LFS server the repository names \
is asked (negotiated mode); one that does not offer the xet transfer is fetched with `git lfs \
fetch`.\n\nArguments after `--` go to `git clone` (e.g. `-- --branch dev --depth 1`).\n\nA \
clone that already failed the plain way is repaired in place: `git xet install --local \
--endpoint ENDPOINT`, then `git restore --source=HEAD --staged --worktree :/`.",
    after_long_help = "Examples:\n  git xet clone https://git.example.org/team/models.git\n  \
git xet clone --endpoint https://xet.example.org \
https://git.example.org/team/models.git\n  git xet clone --endpoint /shared/xet-store \
git@host:team/data.git data -- --branch dev"
)]
pub(crate) struct CloneArgs {
    /// The standalone endpoint holding the repository's LFS objects: a `git xet serve` URL or
    /// a directory store (default: the global `xet.endpoint`).
    #[arg(long, value_name = "URL-or-DIR")]
    pub endpoint: Option<String>,
    /// The repository to clone, as `git clone` takes it.
    #[arg(value_name = "REPOSITORY")]
    pub repository: String,
    /// The directory to clone into (default: as `git clone` names it).
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// LFS files downloaded at once.
    #[arg(long, short = 'j', value_name = "N", default_value_t = 3)]
    pub jobs: usize,
    /// More arguments for `git clone`, after `--`.
    #[arg(last = true, value_name = "GIT-CLONE-ARGS")]
    pub git_args: Vec<OsString>,
}

pub fn run(args: &CloneArgs) -> CmdResult {
    super::fetch::start_logging();
    let here = Git::new();
    if !here.has_git_lfs() {
        return Err(super::install::git_lfs_missing());
    }
    let endpoint = match &args.endpoint {
        Some(e) => Some(e.clone()),
        None => here.config_get_in(Some(Scope::Global), settings::ENDPOINT_KEY)?,
    };
    if endpoint.is_none() && is_local_path(&args.repository) && !names_lfs_url(&args.repository) {
        // No LFS server behind a repository on this machine unless its `.lfsconfig` names
        // one: its LFS files are in a standalone store, which only the endpoint names.
        return Err(
            "which endpoint holds this repository's LFS files? Give it with --endpoint \
             URL-or-DIR (a `git xet serve` URL or a directory store; the repository's README or \
             whoever pushed it knows), or configure one for every repository with `git xet \
             install --global --endpoint URL-or-DIR`"
                .into(),
        );
    }
    // Checked before anything is cloned (install would refuse it afterwards), and a relative
    // directory made absolute: install runs in the new repository.
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let endpoint = match endpoint {
        None => None,
        Some(endpoint) => Some(
            match settings::EndpointSpec::parse(&endpoint, &cwd)
                .map_err(|e| format!("--endpoint: {e}"))?
            {
                settings::EndpointSpec::Http(_) => endpoint,
                settings::EndpointSpec::Dir(path) => path.display().to_string(),
            },
        ),
    };
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => PathBuf::from(default_dir(&args.repository).ok_or_else(|| {
            format!(
                "cannot tell the directory name from {:?}; give it after the repository",
                xet_protocol::redact::redact(&args.repository)
            )
        })?),
    };

    // No checkout by git clone: the LFS files are fetched first, then checked out from the
    // local objects.
    let given = |flags: &[&str]| {
        args.git_args
            .iter()
            .any(|a| a.to_str().is_some_and(|a| flags.contains(&a)))
    };
    let no_checkout = given(&["-n", "--no-checkout", "--bare", "--mirror"]);
    let mut clone = Command::new("git");
    clone.arg("clone");
    if !no_checkout {
        clone.arg("--no-checkout");
    }
    clone
        .args(&args.git_args)
        .arg("--")
        .arg(&args.repository)
        .arg(&dir)
        .env("GIT_LFS_SKIP_SMUDGE", "1");
    run_step(&mut clone, "git clone")?;

    if let Some(endpoint) = &endpoint {
        install_endpoint(&dir, endpoint)?;
    }

    let git = Git::in_dir(&dir);
    let fetched = if no_checkout {
        let head = ["HEAD".to_string()];
        let scope = super::fetch::Scope::Trees(&head);
        super::fetch::fetch_refs(&git, &dir, None, scope, args.jobs, &Default::default())
    } else {
        // git writes the tree with pointers in place of the LFS files (quick: they are
        // small); then the LFS files are downloaded, each written to the work tree as its
        // object lands in git-lfs's store (or copied from the object), and recorded in git's
        // index (see fetch_and_checkout).
        let mut checkout = Command::new("git");
        checkout
            .args(["reset", "-q", "--hard", "HEAD"])
            .env("GIT_LFS_SKIP_SMUDGE", "1")
            .current_dir(&dir);
        run_step(&mut checkout, "git checkout")
            .and_then(|()| super::fetch::fetch_and_checkout(&git, &dir, None, args.jobs))
            .and_then(
                |()| match super::fetch::recurse_submodules(&args.git_args) {
                    Some(pathspec) => {
                        check_out_submodules(&dir, pathspec, endpoint.as_deref(), args.jobs)
                    }
                    None => Ok(()),
                },
            )
    };
    if let Err(e) = fetched {
        return Err(format!(
            "{e}. The repository is cloned in {}{}; once the cause is fixed, run `git xet pull` \
             there",
            dir.display(),
            if endpoint.is_some() {
                " and set up for the endpoint"
            } else {
                ""
            }
        )
        .into());
    }
    match &endpoint {
        Some(endpoint) => eprintln!(
            "git-xet: cloned into {} with its LFS files from {}; pushes and fetches there use \
             that endpoint (`git xet status` shows the setup)",
            dir.display(),
            xet_protocol::redact::redact(endpoint)
        ),
        None => eprintln!("git-xet: cloned into {} with its LFS files", dir.display()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Sets the repository at `dir` up for the standalone `endpoint` (`git xet install --local
/// --endpoint`, run as a step of its own).
pub(super) fn install_endpoint(dir: &std::path::Path, endpoint: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find git-xet itself: {e}"))?;
    let mut install = Command::new(exe);
    install
        .args(["install", "--local", "--endpoint", endpoint])
        .current_dir(dir);
    run_step(&mut install, "git xet install --local --endpoint")
}

/// Checks out the submodules of the clone at `dir` (those `pathspec` names, else all, and
/// theirs) with their LFS files as pointers, then fetches and writes each one's LFS files as
/// for the clone itself (with `endpoint`, in standalone mode, set up in each first).
fn check_out_submodules(
    dir: &std::path::Path,
    pathspec: Option<&str>,
    endpoint: Option<&str>,
    jobs: usize,
) -> Result<(), String> {
    let mut update = Command::new("git");
    update
        .args(["submodule", "update", "--init", "--recursive"])
        .args(pathspec.map(|p| ["--", p]).into_iter().flatten())
        .env("GIT_LFS_SKIP_SMUDGE", "1")
        .current_dir(dir);
    run_step(&mut update, "git submodule update")?;
    super::fetch::fetch_in_submodules(dir, endpoint, jobs)
}

/// Whether `repository` is a repository on this machine (a path or a `file://` URL), which
/// has no LFS server of its own.
fn is_local_path(repository: &str) -> bool {
    if repository.starts_with("file://") {
        return true;
    }
    if repository.contains("://") {
        return false;
    }
    // `host:path` is scp-like ssh, unless the part before the colon has a slash (a path).
    match repository.split_once(':') {
        Some((before, _)) => before.contains('/'),
        None => true,
    }
}

/// Whether the repository at the local path `repository` names an LFS server in the
/// `.lfsconfig` of its HEAD (`lfs.url`).
fn names_lfs_url(repository: &str) -> bool {
    let path = repository.strip_prefix("file://").unwrap_or(repository);
    Command::new("git")
        .args([
            "-C",
            path,
            "config",
            "--blob",
            "HEAD:.lfsconfig",
            "--get",
            "lfs.url",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.trim_ascii().is_empty())
}

/// The directory `git clone` makes for `repository`: its last path component without a
/// trailing `/.git` or `.git`.
fn default_dir(repository: &str) -> Option<String> {
    let trimmed = repository.trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/.git").unwrap_or(trimmed);
    let trimmed = trimmed.trim_end_matches('/');
    let last = trimmed.rsplit(['/', ':', '\\']).next()?;
    let name = last.strip_suffix(".git").unwrap_or(last);
    (!name.is_empty() && name != "." && name != "..").then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_repositories_are_told_apart_from_remote_ones() {
        for local in [
            "remote.git",
            "../a/b.git",
            "/srv/git/r",
            "file:///srv/r.git",
            "./x:y",
        ] {
            assert!(is_local_path(local), "{local}");
        }
        for remote in [
            "https://git.example.org/t/m.git",
            "ssh://git@host/t/m.git",
            "git@host:team/data.git",
            "host:data",
        ] {
            assert!(!is_local_path(remote), "{remote}");
        }
    }

    #[test]
    fn the_directory_is_named_as_git_clone_names_it() {
        for (repo, dir) in [
            ("https://git.example.org/team/models.git", "models"),
            ("https://git.example.org/team/models", "models"),
            ("https://git.example.org/team/models/", "models"),
            ("git@host:team/data.git", "data"),
            ("host:data", "data"),
            ("/srv/git/repo.git", "repo"),
            ("/srv/git/repo/.git", "repo"),
            ("../remote.git", "remote"),
        ] {
            assert_eq!(default_dir(repo).as_deref(), Some(dir), "{repo}");
        }
        assert_eq!(default_dir("/"), None);
        assert_eq!(default_dir(".git"), None);
    }
}
