//! Gathering the report: git's configuration with scopes, the registration, the repository, its
//! remotes and endpoints, the cache and the journal.

use std::path::{Path, PathBuf};

use super::*;
use crate::agent::journal;
use crate::agent::settings::{self, EndpointSpec, TransferMode};
use crate::git::Git;
use xet_client::url::http_origin;
use xet_protocol::redact::redact;
use xet_protocol::wire::XET_TRANSFER;

pub(super) fn gather(args: &StatusArgs) -> Result<Report, Error> {
    let git = Git::new();
    let mut findings = Findings::default();
    let exe = std::env::current_exe()
        .ok()
        .map(|p| p.canonicalize().unwrap_or(p));
    let git_xet = Program {
        version: env!("CARGO_PKG_VERSION"),
        path: exe.as_ref().map(|p| p.display().to_string()),
    };
    let cache = dir_info(cache_dir());
    let report = |git, git_lfs, registration, repository, findings: Findings| Report {
        git_xet,
        git,
        git_lfs,
        registration,
        repository,
        cache,
        warnings: findings.lines(Level::Warning),
        notes: findings.lines(Level::Note),
        findings: findings.0,
    };

    let git_version = version_of(&git, &["--version"], "git version ");
    if git_version.is_none() {
        findings
            .warn("git was not found")
            .fix("install git, then run `git xet install`");
        return Ok(report(None, None, Registration::default(), None, findings));
    }
    let lfs_version = version_of(&git, &["lfs", "version"], "git-lfs/");
    if lfs_version.is_none() {
        findings
            .warn("git-lfs was not found")
            .fix("install it from https://git-lfs.com");
    }

    let registration = registration(&git, exe.as_deref(), &mut findings)?;

    let repository = if git.in_repository() {
        Some(repository(
            &git,
            args,
            lfs_version.is_some(),
            &mut findings,
        )?)
    } else {
        findings.note("not inside a git repository: only global settings are shown");
        None
    };
    Ok(report(
        git_version,
        lfs_version,
        registration,
        repository,
        findings,
    ))
}

/// The first line of a `--version`-style output, without `prefix` and anything after a space.
pub(super) fn version_of(git: &Git, args: &[&str], prefix: &str) -> Option<String> {
    let out = git.output(args).ok().filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim();
    let rest = line.strip_prefix(prefix).unwrap_or(line);
    Some(rest.split_whitespace().next().unwrap_or(rest).to_string())
}

/// A configuration value as git resolves it, with the scope it comes from.
pub(crate) fn config_with_scope(git: &Git, key: &str) -> Result<Option<Setting>, Error> {
    let out = git.output(["config", "--show-scope", "--get", key])?;
    match out.status.code() {
        Some(0) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.trim_end_matches(['\n', '\r']);
            let (scope, value) = line.split_once('\t').unwrap_or(("", line));
            Ok(Some(Setting {
                value: value.to_string(),
                scope: scope.to_string(),
            }))
        }
        Some(1) => Ok(None),
        code => Err(format!(
            "`git config --show-scope --get {key}` failed (exit {}): {}",
            code.unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into()),
    }
}

pub(super) fn registration(
    git: &Git,
    exe: Option<&Path>,
    findings: &mut Findings,
) -> Result<Registration, Error> {
    let key = |k: &str| config_with_scope(git, k);
    let mut r = Registration {
        path: key("lfs.customtransfer.xet.path")?,
        args: key("lfs.customtransfer.xet.args")?,
        concurrent: key("lfs.customtransfer.xet.concurrent")?,
        direction: key("lfs.customtransfer.xet.direction")?,
        filter_lfs_process: key("filter.lfs.process")?,
        basic_transfers_only: key("lfs.basictransfersonly")?,
        ..Registration::default()
    };
    match r.path.clone() {
        None => findings
            .warn(
                "git-xet is not registered as Git LFS's `xet` transfer agent \
                 (lfs.customtransfer.xet.path is not set)",
            )
            .fix("run `git xet install`"),
        Some(path) => registered_agent(&mut r, &path, exe, findings),
    }
    if r.direction
        .as_ref()
        .is_some_and(|d| d.value.trim() == "download")
    {
        findings.warn(
            "lfs.customtransfer.xet.direction is `download`: git-lfs does not use git-xet for \
             uploads",
        );
    }
    let download = xet_protocol::wire::XET_DOWNLOAD_TRANSFER;
    if r.path.is_some()
        && r.other_agent.is_none()
        && key(&format!("lfs.customtransfer.{download}.path"))?.is_none()
    {
        findings
            .note(format!(
                "git-xet is registered for uploads only as far as servers can tell:                  lfs.customtransfer.{download}.* is not set (an install by an older git-xet), so                  git xet serve answers downloads with plain LFS transfers"
            ))
            .fix("run `git xet install` again (with the same scope flag) for chunked downloads");
    }
    if r.basic_transfers_only
        .as_ref()
        .is_some_and(|b| is_true(&b.value))
    {
        findings
            .warn(
                "lfs.basictransfersonly is true: git-lfs uses no custom transfer agent, so not \
                 git-xet",
            )
            .fix("unset it with `git config --unset lfs.basictransfersonly`");
    }
    if r.filter_lfs_process.is_none() {
        findings
            .warn("git-lfs's filters are not set up (filter.lfs.process is not set)")
            .fix("run `git xet install` (it runs `git lfs install`)");
    }
    Ok(r)
}

/// The registered `xet` agent at `path`: can it run, is it this git-xet (or another build of
/// this project), and are its arguments right.
fn registered_agent(
    r: &mut Registration,
    path: &Setting,
    exe: Option<&Path>,
    findings: &mut Findings,
) {
    use super::super::program;
    r.registered = true;
    let resolved = program::resolve(&path.value);
    r.runnable = Some(resolved.is_some());
    match &resolved {
        None => findings
            .warn(format!(
                "lfs.customtransfer.xet.path ({} configuration) is {:?}, which cannot be run",
                path.scope, path.value
            ))
            .fix("run `git xet install` again"),
        Some(found) => {
            let same = exe
                .is_some_and(|exe| found.canonicalize().unwrap_or_else(|_| found.clone()) == exe);
            r.this_executable = Some(same);
            let ours = same || exe.is_some_and(|exe| program::is_this_project(&path.value, exe));
            if !ours {
                let other = program::describe(&path.value);
                findings
                    .warn(format!(
                        "the `xet` agent registered in the {} configuration is another \
                         program, not git-xet: {other}. Pushes and fetches use it (Hugging \
                         Face's git-xet registers under the same name)",
                        path.scope
                    ))
                    .fix(format!(
                        "to use this git-xet there instead, run `git xet install{} --force`; \
                         or install it in a narrower scope (`git xet install --local` in a \
                         repository)",
                        scope_flag(&path.scope)
                    ));
                r.other_agent = Some(other);
            }
        }
    }
    if r.args.as_ref().map(|a| a.value.trim()) != Some("transfer") {
        findings
            .warn(
                "lfs.customtransfer.xet.args is not `transfer`: git-lfs will not start the \
                 agent correctly",
            )
            .fix("run `git xet install` again");
    }
}

/// The `git xet install` flag of a scope as `git config --show-scope` names it.
fn scope_flag(scope: &str) -> &'static str {
    match scope {
        "local" => " --local",
        "system" => " --system",
        _ => "",
    }
}

pub(super) fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "true" | "yes" | "on" | "1"
    )
}

pub(super) fn repository(
    git: &Git,
    args: &StatusArgs,
    have_lfs: bool,
    findings: &mut Findings,
) -> Result<Repository, Error> {
    let common = git.common_dir()?;
    let (work_tree, base) = work_tree(git, &common);
    let standalone_agent = config_with_scope(git, "lfs.standalonetransferagent")?;
    let standalone = standalone_agent
        .as_ref()
        .is_some_and(|s| s.value == XET_TRANSFER);
    standalone_agent_checks(git, standalone_agent.as_ref(), findings);
    let endpoint = settings::endpoint(git, &base).unwrap_or_else(|e| {
        findings
            .warn(e.to_string())
            .fix("fix it with `git xet install --local --endpoint URL-or-DIR`");
        None
    });
    let checked = transfer_checks(
        git,
        args,
        have_lfs,
        &base,
        standalone,
        endpoint.as_ref(),
        findings,
    );
    let hooks = hooks_info(git);
    let check = checked.repository.unwrap_or_default();

    Ok(Repository {
        work_tree,
        git_dir: common.display().to_string(),
        mode: if standalone {
            Mode::Standalone
        } else {
            Mode::Negotiated
        },
        standalone_agent,
        endpoint: endpoint.as_ref().map(|(spec, source)| EndpointInfo {
            kind: spec_kind(spec),
            value: redact(&spec.display()),
            source: source.clone(),
            state: check.state,
            credential: check.credential,
        }),
        remotes: checked.remotes,
        lfs_urls: checked.lfs_urls,
        reachability: checked.reachability,
        credential_checks: checked.credential_checks,
        store: check.store,
        hooks_dir: hooks.dir,
        pre_push_hook: hooks.pre_push,
        pre_push_chained: hooks.chained,
        journal: journal_info(&common),
    })
}

/// The work tree (`None` in a bare repository) and the directory relative endpoints are
/// resolved against: the work tree, else the current directory, else `common`.
fn work_tree(git: &Git, common: &Path) -> (Option<String>, PathBuf) {
    let work_tree = git
        .run(&["rev-parse", "--show-toplevel"])
        .ok()
        .filter(|s| !s.is_empty());
    let base = match &work_tree {
        Some(w) => PathBuf::from(w),
        None => std::env::current_dir().unwrap_or_else(|_| common.to_path_buf()),
    };
    (work_tree, base)
}

/// What [`transfer_checks`] found out about how the repository's objects are transferred.
struct TransferChecks {
    /// The check of the repository's own endpoint, when it is used.
    repository: Option<EndpointCheck>,
    remotes: Vec<RemoteInfo>,
    lfs_urls: Vec<LfsUrl>,
    reachability: Vec<Reachability>,
    credential_checks: Vec<CredentialCheck>,
}

/// How git-lfs transfers for the repository and each remote: their LFS URLs, the endpoints
/// git-xet would use (each checked once), the LFS servers and their credentials in negotiated
/// mode, and the settings that go with them; what is wrong is a finding.
fn transfer_checks(
    git: &Git,
    args: &StatusArgs,
    have_lfs: bool,
    base: &Path,
    standalone: bool,
    endpoint: Option<&(EndpointSpec, String)>,
    findings: &mut Findings,
) -> TransferChecks {
    let configured = settings::remotes(git);
    let lfs_urls = if have_lfs {
        lfs_env_urls(git)
    } else {
        derived_lfs_urls(git)
    };
    let transfers = remote_transfers(git, base, &configured, &lfs_urls, findings);
    let any_xet_remote = transfers.iter().any(|t| t.mode.is_xet_standalone());

    let mut endpoints = EndpointChecks {
        git,
        no_network: args.no_network,
        done: Vec::new(),
    };
    let repository =
        repository_endpoint_check(&mut endpoints, standalone, endpoint, &transfers, findings);
    let remotes: Vec<RemoteInfo> = transfers
        .iter()
        .map(|t| remote_check(&mut endpoints, t, standalone, endpoint.is_some(), findings))
        .collect();
    let mut reachability = endpoints.reachability();
    let credential_checks = if standalone {
        Vec::new()
    } else {
        lfs_server_checks(
            git,
            args,
            &lfs_urls,
            &remotes,
            &configured,
            &mut reachability,
            findings,
        )
    };
    if standalone || any_xet_remote {
        prune_setting_check(git, findings);
    }
    if have_lfs {
        storeless_check(git, &endpoints, findings);
    }
    TransferChecks {
        repository,
        remotes,
        lfs_urls,
        reachability,
        credential_checks,
    }
}

/// `lfs.standalonetransferagent` set to another agent than git-xet, and the URLs whose own
/// setting turns git-xet's standalone mode on.
fn standalone_agent_checks(git: &Git, agent: Option<&Setting>, findings: &mut Findings) {
    if let Some(other) = agent.filter(|s| s.value != xet_protocol::wire::XET_TRANSFER) {
        findings.warn(format!(
            "lfs.standalonetransferagent is {:?} ({} configuration): git-lfs sends every \
             transfer to that agent, not to git-xet",
            other.value, other.scope
        ));
    }
    let standalone = agent.is_some_and(|s| s.value == XET_TRANSFER);
    for (key, value) in url_standalone_agents(git) {
        if value == XET_TRANSFER && !standalone {
            findings.note(format!(
                "{key} = xet: standalone mode for LFS URLs matching that URL"
            ));
        }
    }
}

/// How git-lfs transfers one remote's objects, and (when git-xet does, in standalone mode)
/// the endpoint the agent would use for it.
struct RemoteTransfer<'a> {
    remote: &'a settings::Remote,
    lfs_url: Option<String>,
    mode: TransferMode,
    endpoint: Option<(EndpointSpec, String)>,
}

/// Each configured remote's transfer, its LFS URL as git-lfs resolves it; a standalone remote's
/// endpoint that cannot be read is a finding.
fn remote_transfers<'a>(
    git: &Git,
    base: &Path,
    configured: &'a [settings::Remote],
    lfs_urls: &[LfsUrl],
    findings: &mut Findings,
) -> Vec<RemoteTransfer<'a>> {
    let pairs: Vec<(Option<String>, String)> = lfs_urls
        .iter()
        .map(|u| (u.remote.clone(), u.url.clone()))
        .collect();
    configured
        .iter()
        .map(|remote| {
            let lfs_url = settings::lfs_url_of(&pairs, configured, &remote.name);
            let mode = settings::transfer_mode(git, lfs_url.as_deref());
            let endpoint = if mode.is_xet_standalone() {
                settings::endpoint_for_remote(git, base, Some(&remote.name)).unwrap_or_else(|e| {
                    findings
                        .warn(format!("remote {}: {e}", remote.name))
                        .fix(format!(
                        "fix it with `git xet install --local --endpoint URL-or-DIR --remote {}`",
                        remote.name
                    ));
                    None
                })
            } else {
                None
            };
            RemoteTransfer {
                remote,
                lfs_url,
                mode,
                endpoint,
            }
        })
        .collect()
}

/// Each distinct endpoint checked once (the repository's, then the remotes' own), in the order
/// first asked.
struct EndpointChecks<'a> {
    git: &'a Git,
    no_network: bool,
    done: Vec<(EndpointSpec, EndpointCheck)>,
}

impl EndpointChecks<'_> {
    fn check(
        &mut self,
        spec: &EndpointSpec,
        source: &str,
        findings: &mut Findings,
    ) -> EndpointCheck {
        if let Some((_, c)) = self.done.iter().find(|(s, _)| s == spec) {
            return c.clone();
        }
        let c = check_endpoint(self.git, spec, source, self.no_network, findings);
        self.done.push((spec.clone(), c.clone()));
        c
    }

    /// The answers of the URLs checked, one per URL.
    fn reachability(&self) -> Vec<Reachability> {
        let mut out: Vec<Reachability> = Vec::new();
        for h in self.done.iter().filter_map(|(_, c)| c.health.as_ref()) {
            if !out.iter().any(|x| x.url == h.url) {
                out.push(h.clone());
            }
        }
        out
    }
}

/// The repository's own endpoint, checked when git-xet stores objects in standalone mode (for
/// the repository or for one of its remotes); an endpoint set where nothing uses it, and
/// standalone mode without one, are findings.
fn repository_endpoint_check(
    endpoints: &mut EndpointChecks,
    standalone: bool,
    endpoint: Option<&(EndpointSpec, String)>,
    transfers: &[RemoteTransfer],
    findings: &mut Findings,
) -> Option<EndpointCheck> {
    let any_xet_remote = transfers.iter().any(|t| t.mode.is_xet_standalone());
    if !standalone && !any_xet_remote {
        if let Some((_, source)) = endpoint {
            findings
                .warn(format!(
                    "an endpoint is set ({source}) but standalone mode is off \
                     (lfs.standalonetransferagent is not xet), so it is not used"
                ))
                .fix("run `git xet install --local --endpoint URL-or-DIR` to turn standalone mode on");
        }
        return None;
    }
    match endpoint {
        Some((spec, source)) => Some(endpoints.check(spec, source, findings)),
        None => {
            let remote_without_endpoint = transfers
                .iter()
                .any(|t| t.mode.is_xet_standalone() && t.endpoint.is_none());
            if standalone && (transfers.is_empty() || remote_without_endpoint) {
                findings
                    .warn(
                        "standalone mode is on (lfs.standalonetransferagent = xet) but no \
                         endpoint is set, so git-xet has nowhere to store objects",
                    )
                    .fix(
                        "run `git xet install --local --endpoint URL-or-DIR` (or `git config \
                         xet.endpoint URL-or-DIR`; `--remote NAME` for one remote's own)",
                    );
            }
            None
        }
    }
}

/// One remote: what the report shows of it, and what is wrong with how git-lfs transfers for
/// it (its endpoint checked when git-xet stores its objects).
fn remote_check(
    endpoints: &mut EndpointChecks,
    t: &RemoteTransfer,
    standalone: bool,
    repository_endpoint: bool,
    findings: &mut Findings,
) -> RemoteInfo {
    let name = &t.remote.name;
    let mut info = remote_info(t);
    lfs_url_precedence_check(t, findings);
    match &t.mode {
        TransferMode::FileAdapter => {
            findings
                .warn(format!(
                    "remote {name}: its LFS URL is {}, so git-lfs copies LFS objects there with \
                     its own file adapter and never starts git-xet (no deduplication; `git lfs \
                     prune --verify-remote` checks nothing there)",
                    redact(t.lfs_url.as_deref().unwrap_or("file://…"))
                ))
                .fix(format!(
                    "to store them with git-xet, run `git xet install --local --endpoint \
                     DIR-or-URL --remote {name}` (standalone mode)"
                ));
        }
        TransferMode::OtherStandalone(a) => {
            findings.warn(format!(
                "remote {name}: git-lfs sends its transfers to the standalone agent {a:?} \
                 (lfs.<url>.standalonetransferagent or lfs.standalonetransferagent), not git-xet"
            ));
        }
        TransferMode::Standalone => match &t.endpoint {
            None if repository_endpoint || !standalone => {
                findings
                    .warn(format!(
                        "remote {name}: standalone mode, but no endpoint is set for it"
                    ))
                    .fix(format!(
                        "run `git xet install --local --endpoint URL-or-DIR --remote {name}`"
                    ));
            }
            None => {}
            Some((spec, source)) => {
                let c = endpoints.check(spec, source, findings);
                info.endpoint = Some(EndpointInfo {
                    kind: spec_kind(spec),
                    value: redact(&spec.display()),
                    source: source.clone(),
                    state: c.state,
                    credential: c.credential,
                });
            }
        },
        TransferMode::Negotiated => {
            if let Some(own) = &t.remote.xet_endpoint {
                findings
                    .warn(format!(
                        "remote.{name}.xetEndpoint is set ({}) but git-lfs does not use git-xet \
                         in standalone mode for remote {name}, so it is not used",
                        redact(own)
                    ))
                    .fix(format!(
                        "run `git xet install --local --endpoint URL-or-DIR --remote {name}` to \
                         turn standalone mode on"
                    ));
            }
        }
    }
    info
}

/// What `status` shows of a remote before its endpoint is checked.
fn remote_info(t: &RemoteTransfer) -> RemoteInfo {
    RemoteInfo {
        name: t.remote.name.clone(),
        url: t.remote.url.as_deref().map(redact),
        lfs_url: t.lfs_url.as_deref().map(redact),
        transfer: match &t.mode {
            TransferMode::Standalone => Transfer::Standalone,
            TransferMode::OtherStandalone(_) => Transfer::OtherAgent,
            TransferMode::FileAdapter => Transfer::GitLfsFile,
            TransferMode::Negotiated => Transfer::Negotiated,
        },
        standalone_agent: match &t.mode {
            TransferMode::Standalone => Some(XET_TRANSFER.to_string()),
            TransferMode::OtherStandalone(a) => Some(a.clone()),
            _ => None,
        },
        endpoint: None,
    }
}

/// git-lfs's rule, lfs.url wins over remote.<name>.lfsurl: a remote's own LFS URL that is not
/// the one used.
fn lfs_url_precedence_check(t: &RemoteTransfer, findings: &mut Findings) {
    let name = &t.remote.name;
    if let (Some(own), Some(effective)) = (&t.remote.lfs_url, &t.lfs_url) {
        if own.trim_end_matches('/') != effective.trim_end_matches('/') {
            findings
                .warn(format!(
                    "remote.{name}.lfsurl is {} but git-lfs uses {} for remote {name} (lfs.url, \
                     or an .lfsconfig, takes precedence over remote.<name>.lfsurl for every \
                     remote)",
                    redact(own),
                    redact(effective)
                ))
                .fix(
                    "unset lfs.url (`git config --unset lfs.url`) and give each remote its own \
                     remote.<name>.lfsurl",
                );
        }
    }
}

/// `lfs.pruneverifyremotealways` where git-xet stores objects in standalone mode.
fn prune_setting_check(git: &Git, findings: &mut Findings) {
    if crate::agent::prune::prune_verifies_always(git) {
        findings
            .warn(
                "lfs.pruneverifyremotealways is true, but git-lfs cannot verify objects git-xet \
                 stores in standalone mode (it does not ask the agent): git-xet refuses those \
                 checks, so `git lfs prune` prunes nothing reachable and `git lfs fetch --prune` \
                 fails",
            )
            .fix(
                "prune with `git xet prune` instead, and unset it (`git config --unset \
                 lfs.pruneverifyremotealways`)",
            );
    }
}

/// A store directory that is missing or empty is normal before the first push, but not when
/// this repository already has LFS files that must come from it.
fn storeless_check(git: &Git, endpoints: &EndpointChecks, findings: &mut Findings) {
    let storeless: Vec<String> = endpoints
        .done
        .iter()
        .filter(|(_, c)| matches!(c.state, Some(StoreState::Missing | StoreState::Empty)))
        .map(|(s, _)| s.display())
        .collect();
    if storeless.is_empty() {
        return;
    }
    let files = lfs_file_count(git);
    if files == 0 {
        return;
    }
    for dir in storeless {
        findings
            .warn(format!(
                "this repository has {files} LFS file{} but the endpoint directory {dir} holds \
                 no store, so they cannot be downloaded from it",
                if files == 1 { "" } else { "s" }
            ))
            .fix(
                "check the path (`git xet install --local --endpoint DIR`, or `--remote NAME` \
                 for one remote)",
            );
    }
}

/// The hooks directory and who wrote its pre-push hook.
struct HooksInfo {
    dir: Option<String>,
    pre_push: HookKind,
    /// The hook git-xet's pre-push replaced and runs after its check, if any.
    chained: Option<String>,
}

fn hooks_info(git: &Git) -> HooksInfo {
    let dir = hooks::hooks_dir(git).ok();
    let pre_push = dir
        .as_deref()
        .map_or(HookKind::None, |d| hooks::kind_in(d, "pre-push"));
    let chained = dir
        .as_deref()
        .map(|d| d.join(format!("pre-push{}", hooks::BEFORE_SUFFIX)))
        .filter(|p| pre_push == HookKind::GitXet && p.is_file())
        .map(|p| p.display().to_string());
    HooksInfo {
        dir: dir.map(|d| d.display().to_string()),
        pre_push,
        chained,
    }
}

/// The transfer journal under `common` (the git common directory): whether it exists, its
/// records, the objects they name, and what its uploads and downloads add up to.
fn journal_info(common: &Path) -> JournalInfo {
    let path = journal::path(common);
    let mut info = JournalInfo {
        path: path.display().to_string(),
        exists: false,
        records: 0,
        objects: journal::read(common).map(|m| m.len() as u64).unwrap_or(0),
        uploads: 0,
        sent_bytes: 0,
        downloads: 0,
        downloaded_bytes: 0,
        reused_bytes: 0,
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return info;
    };
    info.exists = true;
    for record in text
        .lines()
        .filter_map(|l| serde_json::from_str::<journal::Record>(l).ok())
    {
        info.records += 1;
        match record.direction {
            journal::Direction::Upload => {
                info.uploads += 1;
                info.sent_bytes += record.transferred_bytes;
            }
            journal::Direction::Download => {
                info.downloads += 1;
                info.downloaded_bytes += record.transferred_bytes;
                info.reused_bytes += record.reused();
            }
        }
    }
    info
}

/// In negotiated mode: each LFS server git-lfs will ask is reachable (its origin's `/health`,
/// added to `reachability`), and accepts the credential git would send; what is wrong is a
/// warning, what could not be checked a note.
fn lfs_server_checks(
    git: &Git,
    args: &StatusArgs,
    lfs_urls: &[LfsUrl],
    remotes: &[RemoteInfo],
    configured: &[settings::Remote],
    reachability: &mut Vec<Reachability>,
    findings: &mut Findings,
) -> Vec<CredentialCheck> {
    if lfs_urls.is_empty() {
        findings.note("no remote yet: the LFS server is the remote's, once one is added");
    }
    if args.no_network {
        return Vec::new();
    }
    let mut credential_checks = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut asked: Vec<&str> = Vec::new();
    for lfs in lfs_urls {
        let negotiated = match &lfs.remote {
            Some(n) => remotes
                .iter()
                .find(|r| r.name == *n)
                .is_none_or(|r| r.transfer == Transfer::Negotiated),
            None => remotes.iter().all(|r| r.transfer == Transfer::Negotiated),
        };
        let Some(origin) = http_origin(&lfs.url) else {
            continue;
        };
        if !negotiated {
            continue;
        }
        let url = format!("{origin}/health");
        if !seen.contains(&url) {
            seen.push(url.clone());
            warn_if_unverified(git, &origin, findings);
            let check = probe(git, &url);
            let reachable = check.reachable;
            if !reachable {
                findings.warn(format!(
                    "the LFS server {} does not answer ({})",
                    redact(&origin),
                    check.error.as_deref().unwrap_or("no answer")
                ));
            }
            reachability.push(check);
            if !reachable {
                continue;
            }
        }
        let over_ssh = lfs.remote.as_ref().is_some_and(|n| {
            configured
                .iter()
                .any(|r| r.name == *n && r.url.as_deref().is_some_and(is_ssh_url))
        });
        if over_ssh || asked.contains(&lfs.url.as_str()) {
            continue;
        }
        asked.push(&lfs.url);
        let c = probe_lfs_credential(git, &lfs.url);
        lfs_credential_finding(lfs, &c, findings);
        credential_checks.push(c);
    }
    credential_checks
}

/// What an LFS server's answer to the stored credential means for the user.
fn lfs_credential_finding(lfs: &LfsUrl, c: &CredentialCheck, findings: &mut Findings) {
    let who = lfs
        .remote
        .as_deref()
        .map_or("the default remote".to_string(), |r| format!("remote {r}"));
    match c.verdict {
        Verdict::Refused => findings
            .warn(format!(
                "the LFS server {} refused the stored credential ({}, HTTP {}) for {who}: the \
                 stored credential is wrong or expired",
                redact(&lfs.url),
                c.source.as_deref().unwrap_or("credential helper"),
                c.http_status.unwrap_or(0)
            ))
            .fix(
                "replace it (`git credential reject` for that URL, then push once to be asked, \
                 or store the right one with `git credential approve`)",
            ),
        Verdict::Missing => findings
            .warn(format!(
                "the LFS server {} needs a credential for {who} and none is stored (HTTP {}): \
                 git-lfs will ask for one on the next push or fetch",
                redact(&lfs.url),
                c.http_status.unwrap_or(0)
            ))
            .fix("store it with your credential helper to avoid that"),
        Verdict::Unknown if c.http_status == Some(404) => findings
            .warn(format!(
                "the LFS URL {} of {who} answers 404 (not found) for its batch API ({}): \
                 git-lfs's pushes and fetches there will fail with \"Repository or object not \
                 found\"",
                redact(&lfs.url),
                c.url,
            ))
            .fix(format!(
                "check the URL (`lfs.url` in .lfsconfig or git config, or the remote's URL){}",
                lfs_url_hint(&lfs.url)
            )),
        Verdict::Unknown => {
            findings.note(format!(
                "could not check the credential for the LFS server {} ({who}): {}",
                redact(&lfs.url),
                c.error.as_deref().unwrap_or("unexpected answer")
            ));
        }
        _ => {}
    }
}

pub(super) fn spec_kind(spec: &EndpointSpec) -> EndpointKind {
    match spec {
        EndpointSpec::Http(_) => EndpointKind::Http,
        EndpointSpec::Dir(_) => EndpointKind::Dir,
    }
}

/// How many LFS files the tree of `HEAD` has, read in-process ([`crate::git::objects`]); 0
/// when it cannot be read.
pub(super) fn lfs_file_count(git: &Git) -> usize {
    crate::git::objects::open(git.dir())
        .and_then(|repo| crate::git::objects::lfs_pointers(&repo, "HEAD"))
        .map_or(0, |files| files.len())
}

/// `lfs.<url>.standalonetransferagent` keys and values.
pub(super) fn url_standalone_agents(git: &Git) -> Vec<(String, String)> {
    let Ok(out) = git.output([
        "config",
        "--get-regexp",
        r"^lfs\..*\.standalonetransferagent$",
    ]) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The local cache directory, as the shard cache computes it (`GIT_XET_CACHE_DIR`, else the
/// platform's cache directory for git-xet).
pub(crate) fn cache_dir() -> Option<PathBuf> {
    settings::cache_root().ok()
}

/// Whether `dir` exists, and the total size and number of the files under it (symbolic links
/// are not followed; unreadable parts are skipped).
pub(super) fn dir_info(dir: Option<PathBuf>) -> DirInfo {
    let Some(dir) = dir else {
        return DirInfo::default();
    };
    let mut info = DirInfo {
        path: Some(dir.display().to_string()),
        exists: dir.is_dir(),
        bytes: 0,
        files: 0,
    };
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                info.bytes += meta.len();
                info.files += 1;
            }
        }
    }
    info
}

/// A hint for an LFS URL that answered 404: what its path should end with.
fn lfs_url_hint(url: &str) -> String {
    let path = settings::split_userinfo(url).bare;
    let path = path.trim_end_matches('/');
    if path.ends_with("/info/lfs") {
        String::new()
    } else {
        "; an LFS URL usually ends in `/info/lfs` (e.g. https://host/team/repo.git/info/lfs)"
            .to_string()
    }
}
