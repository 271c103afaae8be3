//! Where a request's objects go: the endpoint of a transfer, resolved per request.
//!
//! A request with an action goes to the CAS the LFS server named (negotiated mode), through one
//! client per CAS URL and refresh route. A request without one goes to the standalone endpoint
//! of the remote, resolved once per process: a `git xet serve` URL, or a store directory,
//! reached through the private server the agents of that store share, else opened in-process
//! for one transfer. Remote clients sit behind the local shard and chunk caches.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use xet_client::remote::SlowNotice;
use xet_client::LocalXorbs;
use xet_protocol::util::secret::Secret;

/// An endpoint for one request: a store opened for it, or a shared remote client.
pub(crate) enum Lease {
    Owned(Box<dyn Endpoint>),
    Shared(Arc<dyn Endpoint>),
}

impl Lease {
    pub(crate) fn get(&self) -> &dyn Endpoint {
        match self {
            Lease::Owned(e) => e.as_ref(),
            Lease::Shared(e) => e.as_ref(),
        }
    }
}

/// The standalone endpoint, resolved on first use.
pub(super) enum Standalone {
    /// A store directory, opened per transfer, where it was configured, and its shard cache,
    /// kept across transfers.
    Dir(PathBuf, String, Option<Arc<ShardCache>>),
    Remote(Arc<dyn Endpoint>),
}

/// After this long without a transfer, the shared server is checked (and started again if it
/// stopped) before the next one.
pub(super) const SHARED_RECHECK: Duration = Duration::from_secs(1);

/// The local shard cache of `endpoint`, or `None` (with a warning) if it cannot be used:
/// transfers work without it, they only deduplicate less.
pub(super) fn shard_cache(endpoint: &str) -> Option<ShardCache> {
    match settings::cache_config() {
        Ok(config) => Some(ShardCache::for_endpoint(&config, endpoint)),
        Err(e) => {
            tracing::warn!("the local shard cache is not available ({e}); continuing without it");
            None
        }
    }
}

/// `remote` behind the local shard cache and the download chunk cache of its URL, as far as
/// they can be used.
pub(super) fn with_cache(remote: RemoteCas) -> Arc<dyn Endpoint> {
    let chunks = match settings::cache_config() {
        Ok(config) => ChunkCache::for_endpoint(&config, remote.cas_url()),
        Err(e) => {
            tracing::warn!(
                "the download chunk cache is not available ({e}); continuing without it"
            );
            None
        }
    };
    match shard_cache(remote.cas_url()) {
        Some(cache) => {
            let cached = Cached::new(remote, cache);
            Arc::new(match chunks {
                Some(c) => cached.with_chunk_cache(c),
                None => cached,
            })
        }
        None => Arc::new(remote),
    }
}

/// The retry policy of remote requests: the default, or the horizon of
/// [`settings::RETRY_SECS_ENV`].
pub(super) fn retry_policy() -> RetryPolicy {
    settings::retry_horizon().map_or_else(RetryPolicy::default, RetryPolicy::for_horizon)
}

/// The standalone endpoint of `remote` (a remote name or URL; `None`: the repository's), opened
/// as the agent would for `op`: for a download from a directory, only if it holds a store.
/// For `git xet prune`, which checks objects there.
pub(crate) fn open_standalone(
    options: AgentOptions,
    remote: Option<&str>,
    op: Operation,
) -> Result<Lease, TransferError> {
    let mut agent = Agent::new(options);
    agent.remote = remote.map(str::to_string);
    agent.standalone_endpoint(op)
}

/// Why a download from the directory endpoint `dir` (configured in `source`) cannot be
/// served, and what to do.
pub(super) fn no_store_message(dir: &Path, source: &str, why: &str) -> String {
    format!(
        "the endpoint directory {} ({source}) {why}, so it holds no git-xet store to download \
         from; nothing was created there. If the objects are elsewhere, point this repository at \
         that store (`git xet install --local --endpoint DIR`, or `--remote NAME` for one \
         remote); `git xet status` shows the endpoint of each remote",
        dir.display()
    )
}

/// A client for the `git xet serve` (or other CAS) at `url` in standalone mode, with `token`
/// (sent to that origin only; the URL's own userinfo is not part of requests).
pub(super) fn connect_standalone(
    git: &Git,
    url: &str,
    token: Option<(Secret, settings::TokenOrigin)>,
) -> Result<Arc<dyn Endpoint>, TransferError> {
    let bare = settings::split_userinfo(url).bare;
    let origin = token.as_ref().map(|(_, o)| *o);
    let mut config = RemoteConfig::new(bare.clone(), TokenSource::fixed(token.map(|(t, _)| t)));
    config.retry = retry_policy();
    config.http = crate::agent::http_settings::http_options(git, &bare);
    config.token_hint = standalone_token_hint(&bare, origin);
    config.on_slow = slow_notice(git);
    RemoteCas::new(config)
        .map(with_cache)
        .map_err(|e| TransferError::Connect {
            what: format!("the endpoint {bare}"),
            source: Box::new(e),
        })
}

/// Shows requests that keep retrying on the terminal of the git-lfs command that started this
/// agent (once per command; see [`crate::agent::terminal`]): git-lfs itself shows nothing until
/// the retry horizon has passed.
fn slow_notice(git: &Git) -> Option<SlowNotice> {
    let (pid, _) = crate::agent::terminal::git_lfs_ancestor()?;
    let git = git.clone();
    Some(SlowNotice(Arc::new(move |message: &str| {
        crate::agent::terminal::tell_user_once(&git, pid, "slow", message)
    })))
}

/// What to do when the standalone endpoint `bare` refuses the token that came from `origin`
/// (none: no token was sent).
fn standalone_token_hint(bare: &str, origin: Option<settings::TokenOrigin>) -> String {
    use settings::TokenOrigin;
    match origin {
        None => format!(
            "set {}, or store the token for {bare} with a git credential helper",
            settings::TOKEN_ENV
        ),
        Some(TokenOrigin::Env) => format!(
            "the token came from {}, which is set: check that it is a token this server \
             accepts (its administrator's `git xet serve --token` or a scoped token that has \
             not expired), or unset it to use your git credential helper's",
            settings::TOKEN_ENV
        ),
        Some(TokenOrigin::UrlPassword) => format!(
            "the token came from the password in the endpoint URL: fix it there, or remove it \
             and set {} or a git credential helper instead",
            settings::TOKEN_ENV
        ),
        Some(TokenOrigin::CredentialHelper) => format!(
            "the token came from your git credential helper for {bare}: replace the stored one \
             (`git credential reject` then store the right token), or set {}",
            settings::TOKEN_ENV
        ),
    }
}

/// A client for the CAS named in a negotiated action (docs/lfs-agent.md §12.1): the action's token,
/// sent to the action's `X-Xet-Cas-Url` (the CAS the same LFS server named, so the origin the
/// token was issued for), refreshed through `href` with the credential
/// [`settings::refresh_authorization`] picks (the action's own `Authorization`, `HF_TOKEN` on
/// Hugging Face, `git-lfs-authenticate`'s for an SSH `remote` (a remote's name or URL, as
/// git-lfs names it), the netrc file's, or a git credential for `href`; never
/// `GIT_XET_TOKEN`), asked for only when a refresh is due.
pub(crate) fn connect_negotiated(
    git: &Git,
    action: &Action,
    op: Operation,
    remote: Option<&str>,
) -> Result<Arc<dyn Endpoint>, TransferError> {
    let cas_url = action
        .header("X-Xet-Cas-Url")
        .unwrap_or_default()
        .to_string();
    let token = action.header("X-Xet-Access-Token").map(Secret::from);
    if token.is_none() {
        return Err(TransferError::Setup(
            "the LFS server chose the xet transfer but sent no X-Xet-Access-Token header".into(),
        ));
    }
    let expires_at = match action.header("X-Xet-Token-Expiration") {
        Some(text) => text.trim().parse::<u64>().map_err(|_| {
            TransferError::Setup(format!(
                "the LFS server sent a bad X-Xet-Token-Expiration {:?} (want unix seconds)",
                xet_protocol::redact::clip(text, 100)
            ))
        })?,
        None => 0,
    };
    let href = action.href.clone();
    let action_authorization = action.header("Authorization").map(str::to_string);
    if let Some(a) = &action_authorization {
        xet_protocol::redact::register_authorization(a);
    }
    let credential_git = git.clone();
    let credential_url = href.clone();
    let remote = remote.map(str::to_string);
    // The transfer's SSH remote, found when a refresh first needs a credential of its own.
    let ssh = std::sync::OnceLock::new();
    let refresher =
        RefreshingToken::new(href.clone(), token, expires_at).with_authorization_fn(move || {
            let ssh = ssh.get_or_init(|| {
                // git-lfs's default remote when none was named (an in-process fetch).
                settings::ssh_remote_of(&credential_git, remote.as_deref().unwrap_or("origin")).map(
                    |remote| settings::SshRefresh {
                        remote,
                        operation: op,
                    },
                )
            });
            Ok(settings::refresh_authorization(
                &credential_git,
                &credential_url,
                action_authorization.as_deref(),
                ssh.as_ref(),
            ))
        });
    let mut config = RemoteConfig::new(cas_url.clone(), TokenSource::refreshing(refresher));
    config.session_id = action.header("X-Xet-Session-Id").map(str::to_string);
    config.retry = retry_policy();
    config.on_slow = slow_notice(git);
    config.http = crate::agent::http_settings::http_options(git, &cas_url);
    config.token_hint = format!(
        "the token from the LFS server was refused; it is refreshed through {} with the \
         action's Authorization header or your git credential for that URL",
        xet_protocol::redact::clip(&xet_protocol::redact::redact(&href), 300)
    );
    tracing::debug!(cas = %cas_url, ?op, "negotiated CAS");
    RemoteCas::new(config)
        .map(with_cache)
        .map_err(|e| TransferError::Connect {
            what: format!("the CAS {cas_url} the LFS server named"),
            source: Box::new(e),
        })
}

impl Agent {
    /// The endpoint serving `t`.
    pub(super) fn endpoint(&mut self, t: &Transfer, op: Operation) -> Result<Lease, TransferError> {
        match &t.action {
            Some(action) => self.negotiated(action, op).map(Lease::Shared),
            None => self.standalone_endpoint(op),
        }
    }

    /// The standalone endpoint of the remote, for one request. A download from a directory
    /// that holds no store fails and creates nothing (only an upload creates a store).
    pub(super) fn standalone_endpoint(&mut self, op: Operation) -> Result<Lease, TransferError> {
        match self.resolved_standalone() {
            Err(e) => Err(TransferError::Again(e.clone())),
            Ok(Standalone::Remote(r)) => Ok(Lease::Shared(r.clone())),
            Ok(Standalone::Dir(dir, source, cache)) => {
                if op == Operation::Download {
                    let state = settings::inspect_dir_endpoint(dir);
                    if let Some(why) = state.why_not_a_store() {
                        return Err(TransferError::Setup(no_store_message(dir, source, &why)));
                    }
                }
                let (dir, source, cache) = (dir.clone(), source.clone(), cache.clone());
                if let Some(shared) = self.shared_server(&dir, cache.as_ref()) {
                    return Ok(Lease::Shared(shared));
                }
                let store = Store::open_waiting(&dir, self.options.store_patience, || {
                    tracing::info!(
                        store = %dir.display(),
                        "waiting for another git-xet process to finish with the store"
                    )
                })
                .map_err(|e| TransferError::OpenStore {
                    dir: dir.clone(),
                    configured: source.clone(),
                    source: Box::new(e),
                })?;
                Ok(Lease::Owned(match cache {
                    Some(c) => Box::new(Cached::shared(store, c.clone())),
                    None => Box::new(store),
                }))
            }
        }
    }

    /// The private server the agents of the store in `dir` share (see [`crate::agent::shared_server`]),
    /// behind the store's shard cache; `None` (the agent then opens the store itself) when
    /// sharing is off or no server answers. Checked again before a transfer that follows a
    /// pause, in which the server may have stopped.
    pub(super) fn shared_server(
        &mut self,
        dir: &Path,
        cache: Option<&Arc<ShardCache>>,
    ) -> Option<Arc<dyn Endpoint>> {
        if !crate::agent::shared_server::enabled() || self.shared_failed {
            return None;
        }
        if let Some((endpoint, _, used)) = &mut self.shared {
            if used.elapsed() < SHARED_RECHECK {
                *used = Instant::now();
                return Some(endpoint.clone());
            }
        }
        let announce = match crate::agent::shared_server::connect_or_start(dir) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("{e}; opening the store in this process instead");
                self.shared_failed = true;
                return None;
            }
        };
        if let Some((endpoint, url, used)) = &mut self.shared {
            if *url == announce.url {
                *used = Instant::now();
                return Some(endpoint.clone());
            }
        }
        let mut config = RemoteConfig::new(
            announce.url.clone(),
            TokenSource::fixed(Some(Secret::new(announce.token))),
        );
        config.retry = retry_policy();
        config.name = Some(dir.display().to_string());
        config.no_proxy = true;
        let root = dir.to_path_buf();
        config.local_xorbs = Some(LocalXorbs::new(move |xorb| {
            xet_store::backend::xorb_path(&root, xorb)
        }));
        let remote = match RemoteCas::new(config) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("cannot use the store's private server: {e}; opening the store in this process instead");
                self.shared_failed = true;
                return None;
            }
        };
        tracing::info!(store = %dir.display(), url = %announce.url, "using the store's shared server");
        let endpoint: Arc<dyn Endpoint> = match cache {
            Some(c) => Arc::new(Cached::shared(remote, c.clone())),
            None => Arc::new(remote),
        };
        self.shared = Some((endpoint.clone(), announce.url, Instant::now()));
        Some(endpoint)
    }

    /// The remote's standalone endpoint as resolved at first use, or why there is none.
    pub(super) fn resolved_standalone(&mut self) -> &Result<Standalone, Arc<TransferError>> {
        let resolved = match self.standalone.take() {
            Some(r) => r,
            None => self.resolve_standalone().map_err(Arc::new),
        };
        self.standalone.insert(resolved)
    }

    pub(super) fn resolve_standalone(&self) -> Result<Standalone, TransferError> {
        let remote = self.remote.as_deref();
        let found =
            settings::endpoint_for_remote(&self.options.git, &self.options.base_dir, remote)
                .map_err(TransferError::Settings)?;
        let Some((spec, source)) = found else {
            let remote_key =
                match remote.and_then(|r| settings::configured_remote(&self.options.git, r)) {
                    Some(name) => format!("{}, ", settings::remote_endpoint_key(&name)),
                    None => String::new(),
                };
            return Err(TransferError::Setup(format!(
                "standalone mode (lfs.standalonetransferagent=xet) needs an endpoint{}, and none \
                 is set: run `git xet install --local --endpoint URL-or-DIR` (add `--remote NAME` \
                 for one remote's own), or set {remote_key}{} or {}",
                remote
                    .map(|r| format!(" for remote {:?}", xet_protocol::redact::redact(r)))
                    .unwrap_or_default(),
                settings::ENDPOINT_KEY,
                settings::ENDPOINT_ENV
            )));
        };
        tracing::info!(endpoint = %spec.display(), %source, "standalone endpoint");
        match spec {
            EndpointSpec::Dir(dir) => {
                let cache = shard_cache(&dir.display().to_string()).map(Arc::new);
                Ok(Standalone::Dir(dir, source, cache))
            }
            EndpointSpec::Http(url) => {
                let token = settings::endpoint_token(&self.options.git, &url);
                if let Some((_, origin)) = &token {
                    tracing::debug!(?origin, "token for the standalone endpoint");
                }
                connect_standalone(&self.options.git, &url, token).map(Standalone::Remote)
            }
        }
    }

    pub(super) fn negotiated(
        &mut self,
        action: &Action,
        op: Operation,
    ) -> Result<Arc<dyn Endpoint>, TransferError> {
        let cas_url = action.header("X-Xet-Cas-Url").ok_or_else(|| {
            TransferError::Setup(
                "the LFS server chose the xet transfer but sent no X-Xet-Cas-Url header; \
                 ask its administrator, or run `git xet uninstall` to use plain LFS"
                    .to_string(),
            )
        })?;
        let key = (cas_url.to_string(), action.href.clone());
        if let Some((_, e)) = self.negotiated.iter().find(|(k, _)| *k == key) {
            return Ok(e.clone());
        }
        let endpoint = connect_negotiated(&self.options.git, action, op, self.remote.as_deref())?;
        self.negotiated.push((key, endpoint.clone()));
        Ok(endpoint)
    }
}
