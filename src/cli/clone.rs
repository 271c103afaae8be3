//! `git xet clone`: a clone of a standalone-mode repository in one command. A plain `git clone`
//! of such a repository fails in git-lfs's smudge filter ("remote missing object"), because
//! the objects are at the standalone endpoint, which only git config names; this clones
//! without smudging, sets the endpoint up in the new repository (`install --local
//! --endpoint`), then checks the LFS files out through the agent (`git lfs pull`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use super::CmdResult;
use crate::git::{Git, Scope};
use crate::lfs::settings;

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Clone a repository whose LFS files are stored in standalone mode (at a \
`git xet serve` or a directory store, not on the git host), and check its LFS files out \
through git-xet.\n\nA plain `git clone` of such a repository stops with git-lfs's \"remote \
missing object … smudge filter lfs failed\": the git host has only the pointers. This runs \
`git clone` without LFS downloads, then `git xet install --local --endpoint ENDPOINT` in the \
new repository (so its pushes and fetches use that endpoint), then `git lfs pull`, which \
downloads every LFS file of the checkout through the agent.\n\nThe endpoint is --endpoint, else \
the one configured globally (`xet.endpoint`, written by `git xet install --global --endpoint`). \
Arguments after `--` go to `git clone` (e.g. `-- --branch dev --depth 1`).\n\nA clone that \
already failed the plain way is repaired in place: `git xet install --local --endpoint \
ENDPOINT`, then `git restore --source=HEAD :/`.",
    after_long_help = "Examples:\n  git xet clone --endpoint https://xet.example.org \
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
    /// More arguments for `git clone`, after `--`.
    #[arg(last = true, value_name = "GIT-CLONE-ARGS")]
    pub git_args: Vec<OsString>,
}

pub fn run(args: &CloneArgs) -> CmdResult {
    let here = Git::new();
    if !here.has_git_lfs() {
        return Err(super::install::git_lfs_missing());
    }
    let endpoint = match &args.endpoint {
        Some(e) => e.clone(),
        None => here
            .config_get_in(Some(Scope::Global), settings::ENDPOINT_KEY)?
            .ok_or(
                "which endpoint holds this repository's LFS files? Give it with --endpoint \
                 URL-or-DIR (a `git xet serve` URL or a directory store; the repository's \
                 README or whoever pushed it knows), or configure one for every repository \
                 with `git xet install --global --endpoint URL-or-DIR`",
            )?,
    };
    // Checked before anything is cloned (install would refuse it afterwards), and a relative
    // directory made absolute: install runs in the new repository.
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let endpoint = match settings::EndpointSpec::parse(&endpoint, &cwd)
        .map_err(|e| format!("--endpoint: {e}"))?
    {
        settings::EndpointSpec::Http(_) => endpoint,
        settings::EndpointSpec::Dir(path) => path.display().to_string(),
    };
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => PathBuf::from(default_dir(&args.repository).ok_or_else(|| {
            format!(
                "cannot tell the directory name from {:?}; give it after the repository",
                xet_client::redact::redact(&args.repository)
            )
        })?),
    };

    let mut clone = Command::new("git");
    clone
        .arg("clone")
        .args(&args.git_args)
        .arg("--")
        .arg(&args.repository)
        .arg(&dir)
        .env("GIT_LFS_SKIP_SMUDGE", "1");
    run_step(&mut clone, "git clone")?;

    let exe = std::env::current_exe().map_err(|e| format!("cannot find git-xet itself: {e}"))?;
    let mut install = Command::new(exe);
    install
        .args(["install", "--local", "--endpoint", &endpoint])
        .current_dir(&dir);
    run_step(&mut install, "git xet install --local --endpoint")?;

    let mut pull = Command::new("git");
    pull.args(["lfs", "pull"]).current_dir(&dir);
    if let Err(e) = run_step(&mut pull, "git lfs pull") {
        return Err(format!(
            "{e}. The repository is cloned in {} and set up for the endpoint; once the cause \
             is fixed, run `git lfs pull` there",
            dir.display()
        )
        .into());
    }
    eprintln!(
        "git-xet: cloned into {} with its LFS files from {}; pushes and fetches there use that \
         endpoint (`git xet status` shows the setup)",
        dir.display(),
        xet_client::redact::redact(&endpoint)
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs a step with the terminal as its output; an error naming it if it fails.
fn run_step(cmd: &mut Command, name: &str) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status}); see its message above"))
    }
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
