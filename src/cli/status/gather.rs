//! Gathering the report: git's configuration with scopes, the registration, the repository, its
//! remotes and endpoints, the cache and the journal.

use std::path::{Path, PathBuf};

use super::*;
use crate::git::Git;
use crate::lfs::journal;
use crate::lfs::settings::{self, EndpointSpec, TransferMode};
use xet_client::redact::redact;
use xet_client::util::url::http_origin;

pub(super) fn gather(args: &StatusArgs) -> Result<Report, Error> {
    let git = Git::new();
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    let exe = std::env::current_exe()
        .ok()
        .map(|p| p.canonicalize().unwrap_or(p));
    let git_xet = Program {
        version: env!("CARGO_PKG_VERSION"),
        path: exe.as_ref().map(|p| p.display().to_string()),
    };
    let cache = dir_info(cache_dir());

    let git_version = version_of(&git, &["--version"], "git version ");
    if git_version.is_none() {
        warnings.push("git: not found; install git, then run `git xet install`".to_string());
        return Ok(Report {
            git_xet,
            git: None,
            git_lfs: None,
            registration: Registration::default(),
            repository: None,
            cache,
            warnings,
            notes,
        });
    }
    let lfs_version = version_of(&git, &["lfs", "version"], "git-lfs/");
    if lfs_version.is_none() {
        warnings.push("git-lfs: not found — install it: https://git-lfs.com".to_string());
    }

    let registration = registration(&git, exe.as_deref(), &mut warnings)?;

    let repository = if git.in_repository() {
        Some(repository(
            &git,
            args,
            lfs_version.is_some(),
            &mut warnings,
            &mut notes,
        )?)
    } else {
        notes.push("not inside a git repository: only global settings are shown".to_string());
        None
    };

    Ok(Report {
        git_xet,
        git: git_version,
        git_lfs: lfs_version,
        registration,
        repository,
        cache,
        warnings,
        notes,
    })
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
pub fn config_with_scope(git: &Git, key: &str) -> Result<Option<Setting>, Error> {
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
    warnings: &mut Vec<String>,
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
    match &r.path {
        None => warnings.push(
            "git-xet is not registered as Git LFS's `xet` transfer agent \
             (lfs.customtransfer.xet.path is not set): run `git xet install`"
                .to_string(),
        ),
        Some(path) => {
            r.registered = true;
            let resolved = super::super::program::resolve(&path.value);
            r.runnable = Some(resolved.is_some());
            match &resolved {
                None => warnings.push(format!(
                    "lfs.customtransfer.xet.path ({} configuration) is {:?}, which cannot be run: \
                     run `git xet install` again",
                    path.scope, path.value
                )),
                Some(program) => {
                    let same = exe.is_some_and(|exe| {
                        program.canonicalize().unwrap_or_else(|_| program.clone()) == exe
                    });
                    r.this_executable = Some(same);
                    let ours = same
                        || exe.is_some_and(|exe| {
                            super::super::program::is_this_project(&path.value, exe)
                        });
                    if !ours {
                        let other = super::super::program::describe(&path.value);
                        warnings.push(format!(
                            "the `xet` agent registered in the {} configuration is another \
                             program, not git-xet: {other}. Pushes and fetches use it (Hugging \
                             Face's git-xet registers under the same name). To use this git-xet \
                             there instead, run `git xet install{} --force`; or install it in \
                             a narrower scope (`git xet install --local` in a repository)",
                            path.scope,
                            scope_flag(&path.scope)
                        ));
                        r.other_agent = Some(other);
                    }
                }
            }
            if r.args.as_ref().map(|a| a.value.trim()) != Some("transfer") {
                warnings.push(
                    "lfs.customtransfer.xet.args is not `transfer`: git-lfs will not start the \
                     agent correctly; run `git xet install` again"
                        .to_string(),
                );
            }
        }
    }
    if r.direction
        .as_ref()
        .is_some_and(|d| d.value.trim() == "download")
    {
        warnings.push(
            "lfs.customtransfer.xet.direction is `download`: git-lfs does not use git-xet for \
             uploads"
                .to_string(),
        );
    }
    if r.basic_transfers_only
        .as_ref()
        .is_some_and(|b| is_true(&b.value))
    {
        warnings.push(
            "lfs.basictransfersonly is true: git-lfs uses no custom transfer agent, so not \
             git-xet; unset it with `git config --unset lfs.basictransfersonly`"
                .to_string(),
        );
    }
    if r.filter_lfs_process.is_none() {
        warnings.push(
            "git-lfs's filters are not set up (filter.lfs.process is not set): run \
             `git xet install` (it runs `git lfs install`)"
                .to_string(),
        );
    }
    Ok(r)
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
    warnings: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<Repository, Error> {
    let common = git.common_dir()?;
    let work_tree = git
        .run(&["rev-parse", "--show-toplevel"])
        .ok()
        .filter(|s| !s.is_empty());
    let base = match &work_tree {
        Some(w) => PathBuf::from(w),
        None => std::env::current_dir().unwrap_or_else(|_| common.clone()),
    };

    let standalone_agent = config_with_scope(git, "lfs.standalonetransferagent")?;
    let standalone = standalone_agent.as_ref().is_some_and(|s| s.value == "xet");
    if let Some(other) = standalone_agent.as_ref().filter(|s| s.value != "xet") {
        warnings.push(format!(
            "lfs.standalonetransferagent is {:?} ({} configuration): git-lfs sends every \
             transfer to that agent, not to git-xet",
            other.value, other.scope
        ));
    }
    for (key, value) in url_standalone_agents(git) {
        if value == "xet" && !standalone {
            notes.push(format!(
                "{key} = xet: standalone mode for LFS URLs matching that URL"
            ));
        }
    }

    let endpoint = match settings::endpoint(git, &base) {
        Ok(e) => e,
        Err(e) => {
            warnings.push(format!(
                "{e}: fix it with `git xet install --local --endpoint URL-or-DIR`"
            ));
            None
        }
    };

    // Each remote: its LFS URL as git-lfs resolves it, how git-lfs transfers for it, and (when
    // git-xet does, in standalone mode) the endpoint the agent would use for it.
    let configured = settings::remotes(git);
    let lfs_urls = if have_lfs {
        lfs_env_urls(git)
    } else {
        derived_lfs_urls(git)
    };
    let pairs: Vec<(Option<String>, String)> = lfs_urls
        .iter()
        .map(|u| (u.remote.clone(), u.url.clone()))
        .collect();
    let mut remotes = Vec::new();
    for r in &configured {
        let lfs_url = settings::lfs_url_of(&pairs, &configured, &r.name);
        let mode = settings::transfer_mode(git, lfs_url.as_deref());
        let endpoint = if mode.is_xet_standalone() {
            match settings::endpoint_for_remote(git, &base, Some(&r.name)) {
                Ok(found) => found,
                Err(e) => {
                    warnings.push(format!(
                        "remote {}: {e}: fix it with `git xet install --local --endpoint \
                         URL-or-DIR --remote {}`",
                        r.name, r.name
                    ));
                    None
                }
            }
        } else {
            None
        };
        remotes.push((r, lfs_url, mode, endpoint));
    }

    // Each distinct endpoint is checked once: the repository's, then the remotes' own.
    let mut checked: Vec<(EndpointSpec, EndpointCheck)> = Vec::new();
    let mut check =
        |spec: &EndpointSpec, source: &str, warnings: &mut Vec<String>, notes: &mut Vec<String>| {
            if let Some((_, c)) = checked.iter().find(|(s, _)| s == spec) {
                return c.clone();
            }
            let c = check_endpoint(git, spec, source, args.no_network, warnings, notes);
            checked.push((spec.clone(), c.clone()));
            c
        };

    let mut reachability = Vec::new();
    let mut store = None;
    let mut endpoint_state = None;
    let mut endpoint_credential = None;
    let any_xet_remote = remotes.iter().any(|(_, _, m, _)| m.is_xet_standalone());
    let remote_without_endpoint = remotes
        .iter()
        .any(|(_, _, m, e)| m.is_xet_standalone() && e.is_none());
    if standalone || any_xet_remote {
        match &endpoint {
            None if standalone && (configured.is_empty() || remote_without_endpoint) => warnings
                .push(
                    "standalone mode is on (lfs.standalonetransferagent = xet) but no endpoint \
                     is set, so git-xet has nowhere to store objects: run `git xet install \
                     --local --endpoint URL-or-DIR` (or `git config xet.endpoint URL-or-DIR`; \
                     `--remote NAME` for one remote's own)"
                        .to_string(),
                ),
            None => {}
            Some((spec, source)) => {
                let c = check(spec, source, warnings, notes);
                if let Some(h) = c.health.clone() {
                    reachability.push(h);
                }
                store = c.store.clone();
                endpoint_state = c.state;
                endpoint_credential = c.credential.clone();
            }
        }
    } else if let Some((_, source)) = &endpoint {
        warnings.push(format!(
            "an endpoint is set ({source}) but standalone mode is off \
             (lfs.standalonetransferagent is not xet), so it is not used: run \
             `git xet install --local --endpoint URL-or-DIR` to turn standalone mode on"
        ));
    }

    let mut remote_infos = Vec::new();
    for (r, lfs_url, mode, ep) in &remotes {
        let name = &r.name;
        let mut info = RemoteInfo {
            name: name.clone(),
            url: r.url.as_deref().map(redact),
            lfs_url: lfs_url.as_deref().map(redact),
            transfer: match mode {
                TransferMode::Standalone(a) if a == "xet" => "standalone",
                TransferMode::Standalone(_) => "other-agent",
                TransferMode::FileAdapter => "git-lfs-file",
                TransferMode::Negotiated => "negotiated",
            },
            standalone_agent: match mode {
                TransferMode::Standalone(a) => Some(a.clone()),
                _ => None,
            },
            endpoint: None,
        };
        // git-lfs's rule: lfs.url wins over remote.<name>.lfsurl.
        if let (Some(own), Some(effective)) = (&r.lfs_url, lfs_url) {
            if own.trim_end_matches('/') != effective.trim_end_matches('/') {
                warnings.push(format!(
                    "remote.{name}.lfsurl is {} but git-lfs uses {} for remote {name} (lfs.url, \
                     or an .lfsconfig, takes precedence over remote.<name>.lfsurl for every \
                     remote): unset lfs.url (`git config --unset lfs.url`) and give each remote \
                     its own remote.<name>.lfsurl",
                    redact(own),
                    redact(effective)
                ));
            }
        }
        match mode {
            TransferMode::FileAdapter => warnings.push(format!(
                "remote {name}: its LFS URL is {}, so git-lfs copies LFS objects there with its \
                 own file adapter and never starts git-xet (no deduplication; `git lfs prune \
                 --verify-remote` checks nothing there): to store them with git-xet, run `git \
                 xet install --local --endpoint DIR-or-URL --remote {name}` (standalone mode)",
                redact(lfs_url.as_deref().unwrap_or("file://…"))
            )),
            TransferMode::Standalone(a) if a != "xet" => warnings.push(format!(
                "remote {name}: git-lfs sends its transfers to the standalone agent {a:?} \
                 (lfs.<url>.standalonetransferagent or lfs.standalonetransferagent), not git-xet"
            )),
            TransferMode::Standalone(_) => match ep {
                None => {
                    if endpoint.is_some() || !standalone {
                        warnings.push(format!(
                            "remote {name}: standalone mode, but no endpoint is set for it: run \
                             `git xet install --local --endpoint URL-or-DIR --remote {name}`"
                        ));
                    }
                }
                Some((spec, source)) => {
                    let c = check(spec, source, warnings, notes);
                    if let Some(h) = &c.health {
                        if !reachability.iter().any(|x: &Reachability| x.url == h.url) {
                            reachability.push(h.clone());
                        }
                    }
                    info.endpoint = Some(EndpointInfo {
                        kind: spec_kind(spec),
                        value: redact(&spec.display()),
                        source: source.clone(),
                        state: c.state,
                        credential: c.credential.clone(),
                    });
                }
            },
            TransferMode::Negotiated => {
                if let Some(own) = &r.xet_endpoint {
                    warnings.push(format!(
                        "remote.{name}.xetEndpoint is set ({}) but git-lfs does not use git-xet in \
                         standalone mode for remote {name}, so it is not used: run `git xet \
                         install --local --endpoint URL-or-DIR --remote {name}` to turn \
                         standalone mode on",
                        redact(own)
                    ));
                }
            }
        }
        remote_infos.push(info);
    }

    let credential_checks = if standalone {
        Vec::new()
    } else {
        lfs_server_checks(
            git,
            args,
            &lfs_urls,
            &remote_infos,
            &configured,
            &mut reachability,
            warnings,
            notes,
        )
    };

    if (standalone || any_xet_remote) && crate::lfs::prune::prune_verifies_always(git) {
        warnings.push(
            "lfs.pruneverifyremotealways is true, but git-lfs cannot verify objects git-xet \
                 stores in standalone mode (it does not ask the agent): git-xet refuses those \
                 checks, so `git lfs prune` prunes nothing reachable and `git lfs fetch --prune` \
                 fails; prune with `git xet prune` instead, and unset it (`git config --unset \
                 lfs.pruneverifyremotealways`)"
                .to_string(),
        );
    }

    let hooks_dir = hooks::hooks_dir(git).ok();
    let pre_push_hook = hooks_dir
        .as_deref()
        .map_or(HookKind::None, |d| hooks::kind_in(d, "pre-push"))
        .name();
    let pre_push_chained = hooks_dir
        .as_deref()
        .map(|d| d.join(format!("pre-push{}", hooks::BEFORE_SUFFIX)))
        .filter(|p| pre_push_hook == "git-xet" && p.is_file())
        .map(|p| p.display().to_string());

    // A store that is missing or empty is normal before the first push, but not when this
    // repository already has LFS files that must come from it.
    let storeless: Vec<String> = checked
        .iter()
        .filter(|(_, c)| matches!(c.state, Some("missing" | "empty")))
        .map(|(s, _)| s.display())
        .collect();
    if !storeless.is_empty() && have_lfs {
        let files = lfs_file_count(git);
        if files > 0 {
            for dir in storeless {
                warnings.push(format!(
                    "this repository has {files} LFS file{} but the endpoint directory {dir} \
                     holds no store, so they cannot be downloaded from it: check the path (`git \
                     xet install --local --endpoint DIR`, or `--remote NAME` for one remote)",
                    if files == 1 { "" } else { "s" }
                ));
            }
        }
    }

    Ok(Repository {
        work_tree,
        git_dir: common.display().to_string(),
        mode: if standalone {
            "standalone"
        } else {
            "negotiated"
        },
        standalone_agent,
        endpoint: endpoint.as_ref().map(|(spec, source)| EndpointInfo {
            kind: spec_kind(spec),
            value: redact(&spec.display()),
            source: source.clone(),
            state: endpoint_state,
            credential: endpoint_credential,
        }),
        remotes: remote_infos,
        lfs_urls,
        reachability,
        credential_checks,
        store,
        hooks_dir: hooks_dir.map(|d| d.display().to_string()),
        pre_push_hook,
        pre_push_chained,
        journal: journal_info(&common),
    })
}

/// The transfer journal under `common` (the git common directory): whether it exists, its
/// records and the objects they name.
fn journal_info(common: &Path) -> JournalInfo {
    let path = journal::path(common);
    let (exists, records) = match std::fs::read_to_string(&path) {
        Ok(text) => (
            true,
            text.lines()
                .filter(|l| serde_json::from_str::<journal::Record>(l).is_ok())
                .count() as u64,
        ),
        Err(_) => (false, 0),
    };
    JournalInfo {
        path: path.display().to_string(),
        exists,
        records,
        objects: journal::read(common).map(|m| m.len() as u64).unwrap_or(0),
    }
}

/// In negotiated mode: each LFS server git-lfs will ask is reachable (its origin's `/health`,
/// added to `reachability`), and accepts the credential git would send; what is wrong goes to
/// `warnings`, what could not be checked to `notes`.
#[allow(clippy::too_many_arguments)]
fn lfs_server_checks(
    git: &Git,
    args: &StatusArgs,
    lfs_urls: &[LfsUrl],
    remote_infos: &[RemoteInfo],
    configured: &[settings::Remote],
    reachability: &mut Vec<Reachability>,
    warnings: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Vec<CredentialCheck> {
    let mut credential_checks = Vec::new();
    if lfs_urls.is_empty() {
        notes.push("no remote yet: the LFS server is the remote's, once one is added".to_string());
    }
    if !args.no_network {
        let mut seen: Vec<String> = Vec::new();
        let mut asked: Vec<String> = Vec::new();
        for lfs in lfs_urls {
            let negotiated = match &lfs.remote {
                Some(n) => remote_infos
                    .iter()
                    .find(|r| r.name == *n)
                    .is_none_or(|r| r.transfer == "negotiated"),
                None => {
                    remote_infos.iter().all(|r| r.transfer == "negotiated")
                        || remote_infos.is_empty()
                }
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
                warn_if_unverified(git, &origin, warnings);
                let check = probe(git, &url);
                if !check.reachable {
                    warnings.push(format!(
                        "the LFS server {} does not answer ({})",
                        redact(&origin),
                        check.error.as_deref().unwrap_or("no answer")
                    ));
                }
                let reachable = check.reachable;
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
            if over_ssh || asked.contains(&lfs.url) {
                continue;
            }
            asked.push(lfs.url.clone());
            let c = probe_lfs_credential(git, &lfs.url);
            let who = lfs
                .remote
                .as_deref()
                .map_or("the default remote".to_string(), |r| format!("remote {r}"));
            match c.verdict {
                "refused" => warnings.push(format!(
                    "the LFS server {} refused the stored credential ({}, HTTP {}) for {who}: \
                     the stored credential is wrong or expired; replace it (`git credential \
                     reject` for that URL, then push once to be asked, or store the right \
                     one with `git credential approve`)",
                    redact(&lfs.url),
                    c.source.as_deref().unwrap_or("credential helper"),
                    c.http_status.unwrap_or(0)
                )),
                "missing" => warnings.push(format!(
                    "the LFS server {} needs a credential for {who} and none is stored \
                     (HTTP {}): git-lfs will ask for one on the next push or fetch; store it \
                     with your credential helper to avoid that",
                    redact(&lfs.url),
                    c.http_status.unwrap_or(0)
                )),
                "unknown" if c.http_status == Some(404) => warnings.push(format!(
                    "the LFS URL {} of {who} answers 404 (not found) for its batch API \
                     ({}): git-lfs's pushes and fetches there will fail with \"Repository or \
                     object not found\"; check the URL (`lfs.url` in .lfsconfig or git \
                     config, or the remote's URL){}",
                    redact(&lfs.url),
                    c.url,
                    lfs_url_hint(&lfs.url)
                )),
                "unknown" => notes.push(format!(
                    "could not check the credential for the LFS server {} ({who}): {}",
                    redact(&lfs.url),
                    c.error.as_deref().unwrap_or("unexpected answer")
                )),
                _ => {}
            }
            credential_checks.push(c);
        }
    }
    credential_checks
}

pub(super) fn spec_kind(spec: &EndpointSpec) -> &'static str {
    match spec {
        EndpointSpec::Http(_) => "http",
        EndpointSpec::Dir(_) => "dir",
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
