//! `git xet install`, `uninstall`, `track` and `untrack`: the git configuration around the agent.
//!
//! `install` registers the agent with git-lfs under the name `xet` (so an LFS server that offers
//! Xet, like `git xet serve` or Hugging Face Hub, can choose it), runs `git lfs install` when
//! git-lfs's filters are not set up yet, and with `--endpoint` turns on standalone mode for any
//! git host. It records the keys it wrote in `xet.managedkeys` of the same scope, so that
//! `uninstall` removes exactly those and never a value the user set. Both are idempotent.
//! `--local` also installs the pre-push guard of [`super::hooks`]. An endpoint URL with a
//! password is accepted, with a warning that git keeps it in clear text; everything install
//! prints goes through [`xet_protocol::redact`].

use std::path::PathBuf;
use std::process::ExitCode;
use xet_protocol::wire::XET_TRANSFER;

use super::CmdResult;
use crate::agent::settings::EndpointSpec;
use crate::git::{Git, Scope};

/// `println!` through [`xet_protocol::redact`]: what install prints never shows a password.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", xet_protocol::redact::redact(&format!($($arg)*)))
    };
}

/// Where install writes, from the mutually exclusive flags.
#[derive(Debug, Clone, clap::Args)]
#[group(multiple = false)]
pub(crate) struct ScopeArgs {
    /// The user's configuration (~/.gitconfig); the default.
    #[arg(long)]
    pub global: bool,
    /// This repository's configuration (.git/config), and its pre-push hook.
    #[arg(long)]
    pub local: bool,
    /// The system configuration (/etc/gitconfig); usually needs root.
    #[arg(long)]
    pub system: bool,
}

impl ScopeArgs {
    pub fn scope(&self) -> Scope {
        if self.local {
            Scope::Local
        } else if self.system {
            Scope::System
        } else {
            Scope::Global
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Register git-xet as Git LFS's `xet` custom transfer agent.\n\n\
Writes lfs.customtransfer.xet.{path,args,concurrent} (and the same agent for downloads as \
lfs.customtransfer.xet-download.*, a name only git-xet registers, so that servers can tell it \
downloads) in the chosen scope and runs `git lfs install` \
if git-lfs's filters are not configured yet. Servers that offer Xet (git xet serve, Hugging Face \
Hub) then get chunk-deduplicated uploads through git-xet; others keep using plain LFS.\n\n\
With --endpoint, also turns on standalone mode (lfs.standalonetransferagent=xet): git-lfs skips \
the LFS server entirely and git-xet stores objects at the endpoint, the URL of a `git xet serve` \
or a local directory. This works with any git host.\n\n\
With --endpoint and --remote NAME (needs --local), the endpoint is that remote's own \
(remote.NAME.xetEndpoint): pushes and fetches through NAME use it, other remotes use xet.endpoint. \
Run it once per remote, e.g. for a mirror on a second server.\n\n\
With --local, also installs a pre-push hook in the repository: when the repository expects \
git-xet (standalone mode, xet.endpoint, or xet.required=true) but git-lfs cannot run it, the push \
stops with a message instead of falling back to whole-object uploads; otherwise the hook runs \
`git lfs pre-push`, then prints what the push's uploads sent and what deduplication saved, or, \
when git-lfs uploaded them without git-xet (an LFS server that does not offer Xet), one line \
saying so and why. An \
existing pre-push hook (git-lfs's or your own) is kept as pre-push.before-xet and still runs, \
after the check.\n\n\
Running it again is harmless. `git xet uninstall` with the same scope removes exactly what it wrote; to leave standalone mode but keep the agent, run `git xet uninstall` and then `git xet install` without --endpoint.",
    after_long_help = "Examples:\n  \
git xet install                        # every repository; the LFS server decides (negotiated)\n  \
git xet install --local                # this repository only, plus the pre-push hook\n  \
git xet install --endpoint https://xet.example.org   # standalone, for every repository\n  \
git xet install --local --endpoint /shared/xet-store # standalone into a directory\n  \
git xet install --local --remote mirror --endpoint https://xet.other.org\n  \
git xet install --concurrency 1        # one agent process per transfer"
)]
pub(crate) struct InstallArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Standalone mode: store LFS objects at this `git xet serve` URL or local directory.
    #[arg(long, value_name = "URL-or-DIR")]
    pub endpoint: Option<String>,
    /// With --endpoint and --local: the endpoint of this remote only
    /// (remote.NAME.xetEndpoint), e.g. a mirror; other remotes keep xet.endpoint.
    #[arg(long, value_name = "NAME", requires = "endpoint")]
    pub remote: Option<String>,
    /// Agent processes git-lfs runs at once (1: one process for all transfers).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: Option<u32>,
    /// Replace another program registered as the `xet` agent in this scope (Hugging Face's
    /// git-xet uses the same name); its settings are kept and `git xet uninstall` puts them back.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Remove what `git xet install` wrote to the chosen scope (and nothing \
else: values you set yourself stay): the agent's registration and, if install set them, standalone \
mode and the endpoint. With --local, also removes git-xet's pre-push hook and puts back the hook \
it had replaced. git-lfs then uses plain LFS transfers again.\n\n\
Left in place: git-lfs's own configuration, the filter.lfs block that `git lfs install` wrote \
(remove it with `git lfs uninstall`, which stops Git LFS altogether), your .gitattributes, the \
local LFS objects, and git-xet's cache (`git xet cache clear` deletes it).",
    after_long_help = "Examples:\n  git xet uninstall            # what `git xet install` wrote to ~/.gitconfig\n  \
git xet uninstall --local    # what `git xet install --local` wrote to this repository\n  \
git xet uninstall && git xet install   # from standalone (--endpoint) back to negotiated mode"
)]
pub(crate) struct UninstallArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Track files matching the patterns with Git LFS (and so with git-xet): \
adds `PATTERN filter=lfs diff=lfs merge=lfs -text` lines to .gitattributes, exactly as \
`git lfs track` does. Without patterns, lists the tracked patterns. Commit .gitattributes \
with the files.",
    after_long_help = "Examples:\n  git xet track '*.safetensors' '*.gguf'\n  \
git add .gitattributes model.safetensors && git commit -m 'Add the model'\n  \
git xet track                # list the tracked patterns"
)]
pub(crate) struct TrackArgs {
    /// Patterns, e.g. '*.safetensors' (quote them so the shell does not expand them).
    pub patterns: Vec<String>,
}

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Stop tracking the patterns: removes their lines from .gitattributes, \
as `git lfs untrack` does. Files already committed keep their LFS pointers.",
    after_long_help = "Example:\n  git xet untrack '*.bin' && git commit -m 'Stop tracking *.bin' .gitattributes"
)]
pub(crate) struct UntrackArgs {
    /// Patterns previously given to `track`.
    #[arg(required = true)]
    pub patterns: Vec<String>,
}

/// The key where install records the keys it wrote (space-separated).
pub(crate) const MANAGED_KEYS: &str = "xet.managedkeys";
/// Where `install --force` keeps the settings of the `xet` agent it replaced
/// (`xet.replaced.path`, `.args`, `.concurrent`), for `uninstall` to put back.
const REPLACED_PREFIX: &str = "xet.replaced.";
/// The agent settings kept and put back.
const AGENT_KEYS: [&str; 4] = ["path", "args", "concurrent", "direction"];
/// The standalone endpoint key.
pub(crate) use crate::agent::settings::ENDPOINT_KEY;

pub(super) fn git_lfs_missing() -> Box<dyn std::error::Error> {
    "git-lfs is not installed: install it first (Debian/Ubuntu: `sudo apt-get install git-lfs`, \
     macOS: `brew install git-lfs`), then run this again"
        .into()
}

/// The program path git-lfs should run: this executable, absolute.
fn agent_path() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the path of this git-xet executable: {e}"))?;
    Ok(exe.canonicalize().unwrap_or(exe))
}

/// Another program registered as the `xet` agent in `scope` (one this install did not write,
/// that is not git-xet: Hugging Face's `git-xet`, say) is left alone unless `force`; with it,
/// its settings are kept under [`REPLACED_PREFIX`] for `uninstall` to put back.
fn replace_other_agent(
    git: &Git,
    scope: Scope,
    managed: &[String],
    exe: &std::path::Path,
    force: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    const PATH_KEY: &str = "lfs.customtransfer.xet.path";
    let Some(current) = git.config_get_in(Some(scope), PATH_KEY)? else {
        return Ok(());
    };
    // A bare name (Hugging Face's installer writes `git-xet`) is another installer's: this
    // one always writes an absolute path, and which program a bare name runs depends on PATH.
    let bare = !current.contains('/') && !current.contains('\\');
    if managed.iter().any(|k| k == PATH_KEY)
        || (!bare && super::program::is_this_project(&current, exe))
    {
        return Ok(());
    }
    let other = if bare {
        format!(
            "{current:?}, a bare name another installer wrote (Hugging Face's git-xet does), \
             which on this PATH runs {}",
            super::program::describe(&current)
        )
    } else {
        super::program::describe(&current)
    };
    let flag = match scope {
        Scope::Global => String::new(),
        other => format!(" {}", other.flag()),
    };
    if !force {
        return Err(format!(
            "another program is registered as Git LFS's `xet` agent in the {} configuration: \
             {other}. It is left as it is (Hugging Face's git-xet registers under the same name, \
             and only one program can be the `xet` agent of a scope). To use this git-xet there \
             instead, run `git xet install{flag} --force` (the other's settings are kept, and \
             `git xet uninstall{flag}` puts them back); or install this one in a narrower scope, \
             e.g. `git xet install --local` in a repository",
            scope.name()
        )
        .into());
    }
    for key in AGENT_KEYS {
        let registered = format!("lfs.customtransfer.xet.{key}");
        if let Some(value) = git.config_get_in(Some(scope), &registered)? {
            git.config_set(scope, &format!("{REPLACED_PREFIX}{key}"), &value)?;
            if key == "direction" {
                // Not one this install writes (the agent goes both ways): kept, and put back by
                // uninstall with the rest.
                git.config_unset(scope, &registered)?;
            }
        }
    }
    say!(
        "{} {PATH_KEY} was {other}: replaced by this git-xet; its settings are kept in \
         {REPLACED_PREFIX}*, and `git xet uninstall{flag}` puts them back",
        scope.name()
    );
    Ok(())
}

/// Puts back the `xet` agent `install --force` replaced in `scope`, if any; the line to print.
fn restore_replaced_agent(
    git: &Git,
    scope: Scope,
) -> Result<Option<String>, Box<dyn std::error::Error>> {
    let mut restored = None;
    for key in AGENT_KEYS {
        let kept = format!("{REPLACED_PREFIX}{key}");
        if let Some(value) = git.config_get_in(Some(scope), &kept)? {
            git.config_set(scope, &format!("lfs.customtransfer.xet.{key}"), &value)?;
            git.config_unset(scope, &kept)?;
            if key == "path" {
                restored = Some(value);
            }
        }
    }
    Ok(restored.map(|path| {
        format!(
            "{} lfs.customtransfer.xet.path = {path} again: the `xet` agent `git xet install \
             --force` had replaced",
            scope.name()
        )
    }))
}

/// For an endpoint URL with a password in it (accepted: git-xet sends it, as the endpoint's
/// token, only to that endpoint, and never shows it), the warning that git keeps it in clear
/// text, with the safer way. The password itself is registered with [`xet_protocol::redact`].
fn password_warning(endpoint: &str, scope: Scope) -> Option<String> {
    let split = crate::agent::settings::split_userinfo(endpoint);
    split.password.as_ref()?;
    Some(format!(
        "warning: the endpoint URL holds a password, which git stores in clear text in the {} \
         configuration (git-xet sends it only to {}, as the endpoint's token, and never prints \
         it). A credential helper keeps it safer: install with the URL without it \
         (`git xet install --endpoint {}`) and store the token with \
         `printf 'url={}\\nusername=git\\npassword=TOKEN\\n\\n' | git credential approve`, or set \
         GIT_XET_TOKEN.",
        scope.name(),
        split.bare,
        split.bare,
        split.bare
    ))
}

/// The endpoint as install writes it: parsed by the same parser as every reader of it
/// ([`EndpointSpec::parse`], relative to the current directory), so `HTTP://host` is a URL,
/// `s3://…` is refused, and `~/store` is in the home directory.
fn normalise_endpoint(endpoint: &str) -> Result<String, Box<dyn std::error::Error>> {
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    Ok(EndpointSpec::parse(endpoint, &cwd)?.config_value())
}

pub fn install(args: &InstallArgs) -> CmdResult {
    let git = Git::new();
    let scope = args.scope.scope();
    check_scope(&git, scope, args.remote.as_deref())?;
    if !git.has_git_lfs() {
        return Err(git_lfs_missing());
    }
    // Another `xet` agent is left alone (before anything is written) unless --force.
    let exe = agent_path()?;
    let managed_before = managed_keys(&git, scope)?;
    replace_other_agent(&git, scope, &managed_before, &exe, args.force)?;
    set_up_git_lfs(&git, scope)?;
    let wanted = wanted_settings(args, scope, &exe)?;
    let mut managed = managed_keys(&git, scope)?;
    for (key, value) in &wanted {
        apply_setting(&git, scope, key, value, &mut managed)?;
    }
    managed.sort();
    managed.dedup();
    git.config_set(scope, MANAGED_KEYS, &managed.join(" "))?;
    if scope == Scope::Local {
        for line in super::hooks::install(&git)? {
            say!("{line}");
        }
    }
    say!(
        "git-xet is installed ({} configuration){}",
        scope.name(),
        match (&args.endpoint, &args.remote) {
            (Some(_), Some(remote)) =>
                format!("; standalone mode is on, and remote {remote:?} has its own endpoint"),
            (Some(_), None) => "; standalone mode is on".to_string(),
            _ => String::new(),
        }
    );
    if let (Scope::Local, Some(endpoint), None) = (scope, &args.endpoint, &args.remote) {
        // The repository's clones need the same endpoint, which git config does not carry.
        say!(
            "others clone this repository with `git xet clone --endpoint {} <repository URL>` \
             (a plain `git clone` cannot check its LFS files out: the git host has only \
             pointers)",
            normalise_endpoint(endpoint).unwrap_or_else(|_| endpoint.clone())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--local` needs a repository, and `--remote` needs `--local` and a remote of that name.
fn check_scope(
    git: &Git,
    scope: Scope,
    remote: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    if scope == Scope::Local && !git.in_repository() {
        return Err("--local needs to run inside a git repository".into());
    }
    let Some(remote) = remote else {
        return Ok(());
    };
    if scope != Scope::Local {
        return Err(format!(
            "--remote needs --local: a remote belongs to one repository (run `git xet \
             install --local --endpoint URL-or-DIR --remote {remote}` inside it)"
        )
        .into());
    }
    if !crate::agent::settings::remotes(git)
        .iter()
        .any(|r| r.name == remote)
    {
        return Err(format!(
            "this repository has no remote named {remote:?}: add it first (`git remote add \
             {remote} URL`), then run this again"
        )
        .into());
    }
    Ok(())
}

/// The keys git-xet set in `scope` (and may change or remove later).
fn managed_keys(git: &Git, scope: Scope) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    Ok(git
        .config_get_in(Some(scope), MANAGED_KEYS)?
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default())
}

/// Runs `git lfs install` in `scope` if nobody set git-lfs's filters up yet.
fn set_up_git_lfs(git: &Git, scope: Scope) -> Result<(), Box<dyn std::error::Error>> {
    if git.config_get("filter.lfs.process")?.is_some() {
        return Ok(());
    }
    let mut lfs_args = vec!["lfs", "install"];
    if scope != Scope::Global {
        lfs_args.push(scope.flag());
    }
    // git-lfs refuses to install its hooks over git-xet's pre-push (and fails): its hooks are
    // already there, behind ours, so leave the repository's hooks alone.
    if git.in_repository() && super::hooks::ours_installed(git) {
        lfs_args.push("--skip-repo");
    }
    match git.run(&lfs_args) {
        Ok(_) => say!("ran `git {}`", lfs_args.join(" ")),
        // A hook of the user's is in the way of git-lfs's: git-lfs has set its filters and
        // stopped. Finish without its hooks; ours (with --local) keeps the user's hook.
        Err(e) if e.to_string().contains("Hook already exists") => {
            lfs_args.push("--skip-repo");
            git.run(&lfs_args)?;
            say!(
                "ran `git {}`: git-lfs did not install its hooks because this repository has \
                 its own (`git lfs update --manual` explains how to merge them)",
                lfs_args.join(" ")
            );
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// The settings an install asks for: the agent's registration, the concurrency, and with
/// `--endpoint` standalone mode and the (repository's or remote's) endpoint.
fn wanted_settings(
    args: &InstallArgs,
    scope: Scope,
    exe: &std::path::Path,
) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let mut wanted: Vec<(String, String)> = vec![
        (
            "lfs.customtransfer.xet.path".to_string(),
            exe.to_string_lossy().into_owned(),
        ),
        (
            "lfs.customtransfer.xet.args".to_string(),
            "transfer".to_string(),
        ),
        (
            "lfs.customtransfer.xet.concurrent".to_string(),
            (args.concurrency != Some(1)).to_string(),
        ),
    ];
    // The same agent once more for downloads, under the name only git-xet registers: git-lfs
    // offers it in download requests, and servers that know it (git xet serve) then let the
    // agent download; to a client offering only `xet`, whose agent may upload only, they
    // answer `basic` (see xet_protocol::wire::XET_DOWNLOAD_TRANSFER).
    let download = xet_protocol::wire::XET_DOWNLOAD_TRANSFER;
    for (key, value) in [
        ("path", exe.to_string_lossy().into_owned()),
        ("args", "transfer".to_string()),
        ("concurrent", (args.concurrency != Some(1)).to_string()),
        ("direction", "download".to_string()),
    ] {
        wanted.push((format!("lfs.customtransfer.{download}.{key}"), value));
    }
    if let Some(n) = args.concurrency.filter(|n| *n > 1) {
        wanted.push(("lfs.concurrenttransfers".to_string(), n.to_string()));
    }
    if let Some(endpoint) = &args.endpoint {
        wanted.push((
            "lfs.standalonetransferagent".to_string(),
            XET_TRANSFER.to_string(),
        ));
        let endpoint = normalise_endpoint(endpoint)?;
        if let Some(warning) = password_warning(&endpoint, scope) {
            eprintln!("{warning}");
        }
        match &args.remote {
            Some(remote) => wanted.push((
                crate::agent::settings::remote_endpoint_key(remote),
                endpoint,
            )),
            None => wanted.push((ENDPOINT_KEY.to_string(), endpoint)),
        }
    }
    Ok(wanted)
}

/// Sets `key` to `value` in `scope`, unless it is already, or it is a value the user set
/// themselves (the agent's own `lfs.customtransfer.xet.*` keys excepted); a key git-xet sets
/// joins `managed`.
fn apply_setting(
    git: &Git,
    scope: Scope,
    key: &str,
    value: &str,
    managed: &mut Vec<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let current = git.config_get_in(Some(scope), key)?;
    let ours = managed.iter().any(|k| k == key);
    match current {
        Some(v) if v == value => {
            if !ours && key.starts_with("lfs.customtransfer.xet.") {
                managed.push(key.to_string());
            }
            say!("{} {key} = {value} (unchanged)", scope.name());
        }
        Some(v) if !ours && !key.starts_with("lfs.customtransfer.xet.") => {
            say!(
                "{} {key} is already {v:?}, set by you; left as it is (wanted {value:?})",
                scope.name()
            );
        }
        _ => {
            git.config_set(scope, key, value)?;
            if !ours {
                managed.push(key.to_string());
            }
            say!("{} {key} = {value}", scope.name());
        }
    }
    Ok(())
}

pub fn uninstall(args: &UninstallArgs) -> CmdResult {
    let git = Git::new();
    let scope = args.scope.scope();
    if scope == Scope::Local && !git.in_repository() {
        return Err("--local needs to run inside a git repository".into());
    }
    let managed: Vec<String> = match git.config_get_in(Some(scope), MANAGED_KEYS)? {
        Some(v) => v.split_whitespace().map(String::from).collect(),
        None => {
            // Not installed by us (or by an older version): remove only the agent's own keys.
            ["path", "args", "concurrent", "direction"]
                .iter()
                .map(|k| format!("lfs.customtransfer.xet.{k}"))
                .collect()
        }
    };
    // Whether this scope's standalone mode was what the repository (or this user) used: said
    // after removal if nothing else keeps it on.
    let standalone_before = git
        .config_get_in(Some(scope), "lfs.standalonetransferagent")?
        .as_deref()
        == Some(XET_TRANSFER)
        && managed.iter().any(|k| k == "lfs.standalonetransferagent");
    let endpoint_before = git.config_get_in(Some(scope), crate::agent::settings::ENDPOINT_KEY)?;
    let mut removed = 0;
    for key in &managed {
        if git.config_unset(scope, key)? {
            say!("{} {key} removed", scope.name());
            removed += 1;
        }
    }
    git.config_unset(scope, MANAGED_KEYS)?;
    if let Some(line) = restore_replaced_agent(&git, scope)? {
        say!("{line}");
        removed += 1;
    }
    if scope == Scope::Local {
        for line in super::hooks::uninstall(&git)? {
            say!("{line}");
            removed += 1;
        }
    }
    if removed == 0 {
        say!(
            "git-xet was not installed in the {} configuration",
            scope.name()
        );
    } else {
        say!("git-xet is uninstalled ({} configuration)", scope.name());
    }
    if standalone_before {
        if let Some(line) = standalone_left(&git, scope, endpoint_before.as_deref())? {
            say!("{line}");
        }
    }
    // git-lfs's own setup stays (other repositories may rely on it); say how to remove it.
    if git
        .config_get_in(Some(scope), "filter.lfs.process")?
        .is_some()
    {
        let flag = match scope {
            Scope::Global => String::new(),
            other => format!(" {}", other.flag()),
        };
        say!(
            "left in place: git-lfs's own setup (filter.lfs.*, from `git lfs install`); \
             `git lfs uninstall{flag}` removes it, which turns Git LFS off"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What leaving standalone mode in `scope` changes, unless another scope keeps it on: later
/// pushes go to the git host's LFS server as whole objects, and files stored only at the
/// endpoint cannot be fetched from there.
fn standalone_left(
    git: &Git,
    scope: Scope,
    endpoint: Option<&str>,
) -> Result<Option<String>, Box<dyn std::error::Error>> {
    if git.config_get("lfs.standalonetransferagent")?.as_deref() == Some(XET_TRANSFER) {
        return Ok(None);
    }
    let (at, back) = match endpoint {
        Some(e) => (e.to_string(), e.to_string()),
        None => (
            "the standalone endpoint".to_string(),
            "URL-or-DIR".to_string(),
        ),
    };
    let (whom, uses, again) = match scope {
        Scope::Global => ("your repositories", "use", "--global"),
        _ => ("this repository", "uses", "--local"),
    };
    Ok(Some(format!(
        "note: {whom} no longer {uses} standalone mode. Later pushes send LFS files to the git \
         host's LFS server as whole objects (git-lfs's basic transfer), or fail where the host \
         has none, and files stored only at {at} can no longer be fetched; objects already \
         there stay there. To go back: `git xet install {again} --endpoint {back}`"
    )))
}

fn lfs_passthrough(verb: &str, patterns: &[String]) -> CmdResult {
    let git = Git::new();
    if !git.has_git_lfs() {
        return Err(git_lfs_missing());
    }
    if !git.in_repository() {
        return Err(format!("`git xet {verb}` needs to run inside a git repository").into());
    }
    let status = std::process::Command::new("git")
        .arg("lfs")
        .arg(verb)
        .args(patterns)
        .status()
        .map_err(|e| format!("cannot run git lfs {verb}: {e}"))?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn track(args: &TrackArgs) -> CmdResult {
    lfs_passthrough("track", &args.patterns)
}

pub fn untrack(args: &UntrackArgs) -> CmdResult {
    lfs_passthrough("untrack", &args.patterns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_written_as_the_readers_parse_them() {
        assert_eq!(
            normalise_endpoint("https://x.example/").unwrap(),
            "https://x.example"
        );
        assert_eq!(
            normalise_endpoint("HTTP://x.example:8080").unwrap(),
            "http://x.example:8080"
        );
        assert_eq!(
            normalise_endpoint("file:///srv/../srv/xet").unwrap(),
            "/srv/xet"
        );
        let rel = normalise_endpoint("../store").unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            PathBuf::from(&rel),
            crate::agent::settings::lexically_clean(&cwd.join("../store"))
        );
        let e = normalise_endpoint("s3://bucket/x").unwrap_err().to_string();
        assert!(e.contains("not usable"), "{e}");
        let home = std::env::var_os("HOME").expect("HOME is set");
        assert_eq!(
            PathBuf::from(normalise_endpoint("~/store").unwrap()),
            crate::agent::settings::lexically_clean(&PathBuf::from(home).join("store"))
        );
    }

    #[test]
    fn a_password_in_the_endpoint_is_warned_about_and_never_printed() {
        let w = password_warning("http://git:install-secret-9@h.example:8080", Scope::Local)
            .expect("a warning");
        assert!(!w.contains("install-secret-9"), "{w}");
        assert!(
            w.contains("clear text") && w.contains("http://h.example:8080"),
            "{w}"
        );
        assert!(password_warning("https://h.example", Scope::Global).is_none());
        assert!(password_warning("/srv/store", Scope::Global).is_none());
        assert!(!xet_protocol::redact::redact("install-secret-9").contains("secret"));
    }
}
