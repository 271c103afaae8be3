//! LFS URLs: the ones `git lfs env` reports, and the ones derived from remote URLs the way
//! git-lfs derives them (after `url.<base>.insteadOf`).

use super::*;
use crate::agent::settings;
use crate::git::Git;
use xet_client::url::without_userinfo;

/// Whether a remote URL makes git-lfs authenticate over ssh (`ssh://…`, `user@host:path`).
pub(super) fn is_ssh_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("ssh://") || lower.starts_with("git+ssh://") {
        return true;
    }
    !url.contains("://")
        && url
            .split_once(':')
            .is_some_and(|(host, _)| !host.contains('/') && host.len() > 1)
}

/// The LFS URLs `git lfs env` reports: `Endpoint=URL (auth=…)` for the default remote and
/// `Endpoint (NAME)=URL (auth=…)` for the others.
pub(super) fn lfs_env_urls(git: &Git) -> Vec<LfsUrl> {
    to_lfs_urls(settings::lfs_env_endpoints(git))
}

pub(super) fn to_lfs_urls(pairs: Vec<(Option<String>, String)>) -> Vec<LfsUrl> {
    pairs
        .into_iter()
        .map(|(remote, url)| LfsUrl {
            remote,
            url,
            source: "git lfs env".to_string(),
        })
        .collect()
}

/// The LFS URL of each remote as git-lfs would derive it, for when git-lfs is missing:
/// `remote.<name>.lfsurl`, else `lfs.url`, else the remote's URL + `/info/lfs`.
pub(super) fn derived_lfs_urls(git: &Git) -> Vec<LfsUrl> {
    let remotes = git.run(&["remote"]).unwrap_or_default();
    let lfs_url = git.config_get("lfs.url").ok().flatten();
    let mut urls = Vec::new();
    for name in remotes.lines().map(str::trim).filter(|n| !n.is_empty()) {
        let (url, source) = if let Ok(Some(u)) = git.config_get(&format!("remote.{name}.lfsurl")) {
            (u, format!("remote.{name}.lfsurl"))
        } else if let Some(u) = &lfs_url {
            (u.clone(), "lfs.url".to_string())
        } else if let Some(u) = remote_url(git, name) {
            (
                lfs_url_from_remote(&u),
                format!("remote.{name}.url + /info/lfs"),
            )
        } else {
            continue;
        };
        urls.push(LfsUrl {
            remote: Some(name.to_string()),
            url,
            source,
        });
    }
    urls
}

/// The URL of remote `name` with `url.<base>.insteadOf` applied, as git and git-lfs use it
/// (`git remote get-url`).
pub(super) fn remote_url(git: &Git, name: &str) -> Option<String> {
    git.run(&["remote", "get-url", name])
        .ok()
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
}

/// git-lfs's rule: `<url>.git/info/lfs`, or `<url>/info/lfs` when it already ends in `.git`;
/// `user@host:path` becomes `https://host/path`.
pub(super) fn lfs_url_from_remote(remote: &str) -> String {
    let mut url = remote.trim().trim_end_matches('/').to_string();
    if !url.contains("://") {
        if let Some((host, path)) = url.split_once(':') {
            if !host.contains('/') && !path.starts_with("//") && host.len() > 1 {
                let host = without_userinfo(host);
                url = format!("https://{host}/{}", path.trim_start_matches('/'));
            }
        }
    } else if let Some(rest) = url.strip_prefix("ssh://") {
        let rest = without_userinfo(rest);
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = host.split(':').next().unwrap_or(host);
        url = format!("https://{host}/{path}");
    }
    if url.ends_with(".git") {
        format!("{url}/info/lfs")
    } else {
        format!("{url}.git/info/lfs")
    }
}
