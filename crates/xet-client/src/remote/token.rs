//! Where the CAS bearer token comes from: a fixed token (standalone mode) or a token handed out
//! with the LFS actions and renewed through a refresh route (negotiated mode, docs/lfs-agent.md
//! §12.2). The HTTP side of a refresh lives in [`super::AsyncRemoteCas`]; this module holds the state
//! and the decisions (when to refresh, which answer to keep). Every token it is given or
//! receives is registered with [`xet_protocol::redact`].

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use xet_protocol::util::now_unix;
use xet_protocol::util::secret::Secret;
use xet_protocol::util::sync::LockAnyway as _;

/// Refresh this long before the token expires (the reference client's `REFRESH_BUFFER_SEC`).
pub const REFRESH_BUFFER_SECS: u64 = 30;

/// A freshly refreshed token that already looks due is not refreshed again for this long, so a
/// server with a skewed clock cannot make every request refresh.
pub(crate) const MIN_REFRESH_INTERVAL_SECS: u64 = 5;

/// Produces the `Authorization` header value of a refresh request (e.g. by running
/// `git-lfs-authenticate` again), or `None` for no header. Its error is shown to the user.
pub(crate) type AuthorizationFn = dyn Fn() -> Result<Option<Secret>, String> + Send + Sync;

/// Where the bearer token of CAS requests comes from. Cheap to clone (shared state).
#[derive(Clone, Default)]
pub enum TokenSource {
    /// No `Authorization` header (a server that needs none).
    #[default]
    None,
    /// The same token on every request; a 401 is final (standalone mode).
    Static(Secret),
    /// A token renewed through a refresh route (negotiated mode).
    Refreshing(Arc<RefreshingToken>),
}

impl TokenSource {
    /// A fixed token, or none (also for an empty or blank token).
    pub fn fixed(token: Option<Secret>) -> Self {
        match token.and_then(|t| Secret::non_blank(t.expose())) {
            Some(t) => TokenSource::Static(t),
            None => TokenSource::None,
        }
    }

    /// A refreshing token.
    pub fn refreshing(token: RefreshingToken) -> Self {
        TokenSource::Refreshing(Arc::new(token))
    }
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::None => f.write_str("TokenSource::None"),
            TokenSource::Static(_) => f.write_str("TokenSource::Static(<redacted>)"),
            TokenSource::Refreshing(r) => write!(f, "TokenSource::Refreshing({r:?})"),
        }
    }
}

/// A CAS token with its expiry and the route that renews it: `GET href` (with the optional
/// `Authorization` value) answers `{"casUrl", "accessToken", "exp"}` (docs/cas-api.md §2.1).
///
/// The token is refreshed before a request when it expires within [`REFRESH_BUFFER_SECS`]
/// (never when its expiry is 0, i.e. unknown), when there is none yet, and once when the server
/// answers 401. One refresh runs at a time: a refresh holds the token's refresh lock
/// (an async lock, so that a task waiting for it gives its thread to others), and whoever
/// waited finds the new token. The state itself is locked only to read or write it, never
/// across a request.
pub struct RefreshingToken {
    href: String,
    authorization: Box<AuthorizationFn>,
    state: Mutex<TokenState>,
    refreshing: tokio::sync::Mutex<()>,
}

/// The mutable part of a [`RefreshingToken`].
#[derive(Debug, Clone, Default)]
pub(super) struct TokenState {
    pub token: Option<Secret>,
    /// Unix seconds; 0 = unknown (no proactive refresh).
    pub expires_at: u64,
    /// No proactive refresh before this (unix seconds).
    pub not_before: u64,
    /// The `casUrl` of the last refresh answer.
    pub cas_url: Option<String>,
    pub refreshes: u64,
}

impl TokenState {
    /// Whether the token must be refreshed before a request at `now`.
    pub fn due(&self, now: u64) -> bool {
        match &self.token {
            None => true,
            Some(_) => {
                self.expires_at != 0
                    && now >= self.not_before
                    && now.saturating_add(REFRESH_BUFFER_SECS) >= self.expires_at
            }
        }
    }

    /// Keeps a refresh answer received at `now`.
    pub fn refreshed(&mut self, token: Secret, expires_at: u64, cas_url: String, now: u64) {
        self.token = Some(token);
        self.expires_at = expires_at;
        self.not_before = now.saturating_add(MIN_REFRESH_INTERVAL_SECS);
        self.cas_url = Some(cas_url);
        self.refreshes += 1;
    }
}

impl RefreshingToken {
    /// The token from the LFS action (`X-Xet-Access-Token`, or `None` to fetch one first), its
    /// expiry in unix seconds (`X-Xet-Token-Expiration`; 0 = unknown) and the refresh route
    /// (the action's `href`). No `Authorization` header on refreshes until one is set.
    pub fn new(href: impl Into<String>, token: Option<Secret>, expires_at: u64) -> Self {
        Self {
            href: href.into(),
            authorization: Box::new(|| Ok(None)),
            state: Mutex::new(TokenState {
                token: token.filter(|t| !t.expose().is_empty()),
                expires_at,
                ..TokenState::default()
            }),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// Sends this `Authorization` value (e.g. `Bearer …` or `Basic …`) with every refresh.
    pub fn with_authorization(self, value: impl Into<String>) -> Self {
        let value: String = value.into();
        xet_protocol::redact::register_authorization(&value);
        let value = Secret::new(value);
        self.with_authorization_fn(move || Ok(Some(value.clone())))
    }

    /// Asks `f` for the `Authorization` value before every refresh (credentials that are
    /// themselves short-lived, e.g. from `git-lfs-authenticate` over SSH).
    pub fn with_authorization_fn(
        mut self,
        f: impl Fn() -> Result<Option<Secret>, String> + Send + Sync + 'static,
    ) -> Self {
        self.authorization = Box::new(f);
        self
    }

    /// The refresh route.
    pub fn href(&self) -> &str {
        &self.href
    }

    /// The current token, if any (without refreshing).
    pub fn current(&self) -> Option<Secret> {
        self.lock().token.clone()
    }

    /// The current expiry, unix seconds (0 = unknown).
    pub fn expires_at(&self) -> u64 {
        self.lock().expires_at
    }

    /// How many refreshes succeeded so far.
    pub fn refreshes(&self) -> u64 {
        self.lock().refreshes
    }

    /// The `casUrl` of the last refresh answer, if there was one.
    pub fn refreshed_cas_url(&self) -> Option<String> {
        self.lock().cas_url.clone()
    }

    /// Whether the token is due for a refresh now.
    pub fn is_due(&self) -> bool {
        self.lock().due(now_unix())
    }

    /// The `Authorization` value for the next refresh (registered with [`xet_protocol::redact`]).
    pub(super) fn authorization(&self) -> Result<Option<Secret>, String> {
        let value = (self.authorization)()?;
        if let Some(v) = &value {
            xet_protocol::redact::register_authorization(v.expose());
        }
        Ok(value)
    }

    /// The right to refresh, held during a refresh request (one at a time).
    pub(super) async fn refreshing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.refreshing.lock().await
    }

    /// The state, locked. A poisoned lock (a panic during a refresh) still holds a consistent
    /// state: it is only written whole after a successful refresh.
    pub(super) fn lock(&self) -> MutexGuard<'_, TokenState> {
        self.state.lock_anyway()
    }
}

impl fmt::Debug for RefreshingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("RefreshingToken")
            .field("href", &self.href)
            .field("token", &state.token)
            .field("expires_at", &state.expires_at)
            .field("refreshes", &state.refreshes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_a_token_is_due() {
        let now = 1_000_000;
        let state = |token: Option<&str>, expires_at| TokenState {
            token: token.map(Secret::from),
            expires_at,
            ..TokenState::default()
        };
        assert!(state(None, 0).due(now), "no token yet");
        assert!(
            !state(Some("t"), 0).due(now),
            "unknown expiry: never proactively"
        );
        assert!(!state(Some("t"), now + 31).due(now));
        assert!(state(Some("t"), now + 30).due(now), "within the buffer");
        assert!(state(Some("t"), now - 5).due(now), "expired");
        let mut s = state(Some("t"), now + 10);
        s.refreshed("u".into(), now + 10, "http://cas".into(), now);
        assert!(!s.due(now + 1), "a fresh answer is kept for a few seconds");
        assert!(s.due(now + MIN_REFRESH_INTERVAL_SECS));
        assert_eq!(s.refreshes, 1);
    }

    #[test]
    fn debug_hides_tokens() {
        let t = RefreshingToken::new("http://x/refresh", Some("secret-token".into()), 5);
        assert!(!format!("{t:?}").contains("secret-token"));
        let s = TokenSource::fixed(Some("secret-token".into()));
        assert!(!format!("{s:?}").contains("secret-token"));
    }
}
