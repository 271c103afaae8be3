//! Who may do what: long-lived secrets, short-lived CAS access tokens and presigned xorb URLs.
//!
//! - **Secrets** are configured by the operator (`--token`, `--read-token`, a token file or the
//!   environment) and grant [`Scope::Write`] (which implies read) or [`Scope::Read`]. Git
//!   clients present them to the LFS batch API; the CAS API also accepts them directly, which is
//!   how the reference client is driven in tests.
//! - **CAS access tokens** are what the batch API hands to agents (`X-Xet-Access-Token`):
//!   `gx1.<payload>.<mac>`, where payload is base64url (no padding) of
//!   `{"s":"r"|"w","e":<unix expiry>,"r":"<repo>"}` and mac is base64url of
//!   HMAC-SHA256(server key, "cas-token\0" ‖ payload). They expire (default 15 minutes).
//! - **Presigned URLs** for xorb bytes carry `e=<expiry>&r=<ranges>&s=<mac>` with
//!   mac = HMAC-SHA256(server key, "xorb-ranges\0" ‖ hash ‖ "\0" ‖ expiry ‖ "\0" ‖ ranges),
//!   where ranges is the [`GrantedRanges`] the URL grants (`S-E,S-E…`, inclusive): exactly the
//!   byte ranges of the reconstruction entry it was issued for. A request for any other byte
//!   is refused (docs/cas-api.md §5.9).
//!
//! The server key is 32 random bytes kept in the data directory (`server.key`, mode 0600), so
//! tokens and URLs stay valid across restarts. Secrets are compared in constant time.
//!
//! **Who a credential speaks for** ([`Grant::user`], the owner of Git LFS locks). Secrets are
//! server-wide and carry no identity of their own, so the user is decided per request:
//!
//! 1. a secret given a name in the token file (`write <secret> alice`) is always that user,
//!    whatever user name the client sends;
//! 2. otherwise, the user name of `Basic` credentials (git sends the credential helper's
//!    `username`), if it is usable ([`usable_user_name`]), is not the name of a named secret (a
//!    shared token cannot pose as a named user) and is not itself a secret (a token put in both
//!    fields is never shown as an owner);
//! 3. otherwise a stable pseudonym of the secret, `token-` and 12 hex digits of
//!    HMAC-SHA256(server key, "owner\0" ‖ secret): the same across restarts, and it reveals
//!    nothing of the secret.
//!
//! CAS access tokens speak for nobody (`None`); the routes that need a user refuse them.
//!
//! **Admin tokens** ([`AdminToken`]: `--admin-token`, `GIT_XET_ADMIN_TOKEN`, or an
//! `admin <secret>` line of the token file) open the status page (`server::status`) and
//! nothing else: they are kept apart from the read and write secrets, so that an admin token
//! is refused by the CAS and LFS APIs and a read or write token is refused by the status page.
//! A secret may not be both.

use std::path::Path;
use xet_store::RepoName;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use xet_format::XorbHash;
use xet_protocol::util::range::GrantedRanges;

type HmacSha256 = Hmac<Sha256>;

/// What a credential allows. Write implies read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scope {
    Read,
    Write,
}

impl Scope {
    /// Whether a credential with this scope may do what `needed` requires.
    pub fn allows(self, needed: Scope) -> bool {
        self >= needed
    }

    fn letter(self) -> &'static str {
        match self {
            Scope::Read => "r",
            Scope::Write => "w",
        }
    }
}

/// Longest user name (lock owner) accepted, in bytes.
pub(crate) const MAX_USER_NAME: usize = 128;

/// Whether `name` can name a lock owner: 1 to [`MAX_USER_NAME`] bytes, no control characters,
/// not blank. `Err` says why not.
pub(crate) fn usable_user_name(name: &str) -> Result<(), &'static str> {
    if name.trim().is_empty() {
        Err("it is empty")
    } else if name.len() > MAX_USER_NAME {
        Err("it is longer than 128 bytes")
    } else if name.chars().any(char::is_control) {
        Err("it contains control characters")
    } else {
        Ok(())
    }
}

/// A configured long-lived secret.
#[derive(Clone)]
pub struct ServerToken {
    value: xet_protocol::util::secret::Secret,
    pub scope: Scope,
    /// The user this secret always speaks for (from the token file), if any.
    name: Option<String>,
    /// The repositories it is good for (a [`RepoPattern`]); `None`: every one.
    repos: Option<RepoPattern>,
}

impl std::fmt::Debug for ServerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerToken({:?}", self.scope)?;
        if let Some(name) = &self.name {
            write!(f, ", {name:?}")?;
        }
        if let Some(repos) = &self.repos {
            write!(f, ", {}", repos.0)?;
        }
        write!(f, ", ****)")
    }
}

/// Whether `seg` can be one segment of a repository path: `[A-Za-z0-9._-]+`, not starting with
/// `.` (so no `.` or `..`).
pub(crate) fn is_repo_segment(seg: &str) -> bool {
    !seg.is_empty()
        && !seg.starts_with('.')
        && seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The repositories a scoped secret is good for: `team/models` (that one), `team/*` (every
/// repository under `team/`, at any depth) or `*` (all). Repository ids are URL paths without
/// a trailing `.git`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPattern(String);

impl RepoPattern {
    /// Parses a pattern; `Err` says why it is not one.
    pub fn parse(text: &str) -> Result<Self, String> {
        let body = text.strip_suffix("/*").unwrap_or(text);
        if text == "*" {
            return Ok(Self(text.to_string()));
        }
        if body.is_empty() || !body.split('/').all(is_repo_segment) {
            return Err(format!(
                "{text:?} is not a repository pattern (team/models, team/*, or *)"
            ));
        }
        Ok(Self(text.trim_end_matches(".git").to_string()))
    }

    /// Whether the repository `id` is one of this pattern's.
    pub fn matches(&self, id: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some("") => true,
            Some(prefix) => id.starts_with(prefix) && id.len() > prefix.len(),
            None => self.0 == id,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A problem with the token configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("token file {path}, line {line}: {reason}")]
    TokenFile {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("cannot read token file {path}: {source}")]
    ReadTokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error("a token must be at least 16 characters long ({what} is {len})")]
    TooShort { what: String, len: usize },
    #[error(
        "an admin token is also a read or write token: give the status page a secret of its own"
    )]
    AdminReused,
    #[error("server key {path}: {detail}")]
    Key { path: String, detail: String },
    #[error("user name {name:?} for {what}: {reason}")]
    UserName {
        what: String,
        name: String,
        reason: &'static str,
    },
}

impl ServerToken {
    /// A secret with the given scope; at least 16 characters.
    pub fn new(value: &str, scope: Scope, what: &str) -> Result<Self, ConfigError> {
        let value = value.trim();
        if value.len() < 16 {
            return Err(ConfigError::TooShort {
                what: what.to_string(),
                len: value.len(),
            });
        }
        Ok(Self {
            // Never in a log line, whatever writes it (registered with `redact` too).
            value: xet_protocol::util::secret::Secret::new(value),
            scope,
            name: None,
            repos: None,
        })
    }

    /// This secret, good only for the repositories `repos` matches. Its CAS tokens then read
    /// only files registered through that repository (see [`Grant::visibility`]).
    pub fn scoped(mut self, repos: RepoPattern) -> Self {
        self.repos = Some(repos);
        self
    }

    /// This secret, speaking for the user `name` whatever user name clients send (see the
    /// module documentation).
    pub fn named(mut self, name: &str, what: &str) -> Result<Self, ConfigError> {
        usable_user_name(name).map_err(|reason| ConfigError::UserName {
            what: what.to_string(),
            name: name.chars().take(MAX_USER_NAME).collect(),
            reason,
        })?;
        self.name = Some(name.to_string());
        Ok(self)
    }

    /// The user this secret always speaks for, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The read and write secrets of a token file (see [`TokenFile::parse`]; its admin
    /// tokens are left out).
    pub fn parse_file(path: &Path) -> Result<Vec<ServerToken>, ConfigError> {
        Ok(TokenFile::parse(path)?.tokens)
    }
}

/// A secret that opens the status page and nothing else (see the module documentation).
#[derive(Clone)]
pub struct AdminToken(xet_protocol::util::secret::Secret);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminToken(****)")
    }
}

impl AdminToken {
    /// An admin secret; at least 16 characters.
    pub fn new(value: &str, what: &str) -> Result<Self, ConfigError> {
        let value = value.trim();
        if value.len() < 16 {
            return Err(ConfigError::TooShort {
                what: what.to_string(),
                len: value.len(),
            });
        }
        Ok(Self(xet_protocol::util::secret::Secret::new(value)))
    }

    /// Whether `candidate` is this secret, compared in constant time.
    fn matches(&self, candidate: &str) -> bool {
        bool::from(self.0.expose().as_bytes().ct_eq(candidate.as_bytes()))
    }
}

/// What a token file configures.
#[derive(Debug, Default)]
pub struct TokenFile {
    /// Its `write` and `read` lines.
    pub tokens: Vec<ServerToken>,
    /// Its `admin` lines.
    pub admin: Vec<AdminToken>,
}

impl TokenFile {
    /// Parses a token file: one `write <secret> [<name>] [<repos>]`,
    /// `read <secret> [<name>] [<repos>]` or `admin <secret>` per line, fields separated by
    /// whitespace (so a secret cannot contain any); `#` comments and blank lines are ignored.
    /// `<name>` is the user the secret speaks for (lock owner); `<repos>`, a field with a `/`
    /// or `*` in it, the repositories it is good for ([`RepoPattern`]: `team/*`,
    /// `team/models`, `*`). An admin secret opens the status page only.
    pub fn parse(path: &Path) -> Result<TokenFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadTokenFile {
            path: path.display().to_string(),
            source,
        })?;
        let mut out = Vec::new();
        let mut admin = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |reason: String| ConfigError::TokenFile {
                path: path.display().to_string(),
                line: i + 1,
                reason,
            };
            const FORM: &str = "expected `write <secret> [<name>] [<repos>]`, `read <secret> \
                                [<name>] [<repos>]` or `admin <secret>`";
            let mut fields = line.split_whitespace();
            let (Some(kind), Some(value)) = (fields.next(), fields.next()) else {
                return Err(err(FORM.into()));
            };
            if kind == "admin" {
                if fields.next().is_some() {
                    return Err(err(format!("too many fields: {FORM}")));
                }
                let what = format!("the admin token on line {}", i + 1);
                admin.push(AdminToken::new(value, &what).map_err(|e| err(e.to_string()))?);
                continue;
            }
            let (mut name, mut repos) = (None, None);
            for field in fields {
                if field.contains('/') || field.contains('*') {
                    if repos.is_some() {
                        return Err(err(format!("two repository patterns: {FORM}")));
                    }
                    repos = Some(RepoPattern::parse(field).map_err(err)?);
                } else if name.is_none() {
                    name = Some(field);
                } else {
                    return Err(err(format!(
                        "too many fields: {FORM} (a secret or name cannot contain spaces)"
                    )));
                }
            }
            let scope = match kind {
                "write" => Scope::Write,
                "read" => Scope::Read,
                other => {
                    return Err(err(format!(
                        "unknown scope {other:?}: use write, read or admin"
                    )))
                }
            };
            let what = format!("the token on line {}", i + 1);
            let mut secret =
                ServerToken::new(value, scope, &what).map_err(|e| err(e.to_string()))?;
            if let Some(name) = name {
                secret = secret.named(name, &what).map_err(|e| err(e.to_string()))?;
            }
            if let Some(repos) = repos {
                secret = secret.scoped(repos);
            }
            out.push(secret);
        }
        Ok(TokenFile { tokens: out, admin })
    }
}

#[derive(Serialize, Deserialize)]
struct Claims {
    s: String,
    e: u64,
    #[serde(default)]
    r: String,
    /// Issued to a repository-scoped secret: reads only what that repository registered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    x: bool,
}

/// A verified credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub scope: Scope,
    /// Expiry of a CAS token (unix seconds); `None` for a long-lived secret.
    pub expires: Option<u64>,
    /// The repository a CAS token was issued for ("" for secrets).
    pub repo: String,
    /// The user a secret speaks for (see the module documentation); `None` for CAS tokens.
    pub user: Option<String>,
    /// A secret's repositories (`None`: all); for a CAS token, whether it was issued to a
    /// scoped secret (then `Some` of its one repository).
    pub repos: Option<RepoPattern>,
}

/// Which registered files a credential may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Visibility {
    /// Every file (server-wide secrets, and CAS tokens issued to them).
    All,
    /// Files registered through this repository (CAS tokens issued to a scoped secret).
    Repo(RepoName),
}

impl Grant {
    /// Whether this credential may act on repository `id` (its LFS API, its CAS tokens).
    pub(crate) fn may_use_repo(&self, id: &str) -> bool {
        if self.expires.is_some() {
            return self.repo == id;
        }
        self.repos.as_ref().is_none_or(|p| p.matches(id))
    }

    /// What files this credential may read through the CAS API; `None` for a scoped secret
    /// presented there directly (it names no one repository: it gets CAS tokens from the batch
    /// API of each).
    pub(crate) fn visibility(&self) -> Option<Visibility> {
        match (&self.repos, self.expires) {
            (None, _) => Some(Visibility::All),
            // A token naming no repository reads nothing (none is issued so).
            (Some(_), Some(_)) => RepoName::new(self.repo.clone()).ok().map(Visibility::Repo),
            (Some(_), None) => None,
        }
    }

    /// The repository files registered with this credential are recorded under: a CAS
    /// token's repository, if it has one.
    pub(crate) fn registering_repo(&self) -> Option<RepoName> {
        self.expires?;
        RepoName::new(self.repo.clone()).ok()
    }
}

/// Why a credential was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing Authorization header: send `Authorization: Bearer <token>`")]
    Missing,
    #[error(
        "unsupported Authorization scheme: use Bearer <token> or Basic with the token as password"
    )]
    Scheme,
    #[error("unknown or malformed token")]
    Invalid,
    #[error("token expired at {expired} (now {now}); get a fresh one from the batch API")]
    Expired { expired: u64, now: u64 },
    #[error("this token is read-only; {what} needs a write token")]
    Forbidden { what: &'static str },
}

/// Seconds of clock skew tolerated past a token's expiry (docs/cas-api.md §2.3).
pub(crate) const EXPIRY_SKEW_SECS: u64 = 60;

/// The server's credentials and signing key.
pub struct Authority {
    secrets: Vec<ServerToken>,
    key: [u8; 32],
    /// The secrets that open the status page ([`AdminToken`]).
    admin: Vec<AdminToken>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("secrets", &self.secrets)
            .finish()
    }
}

pub use xet_protocol::util::now_unix;

impl Authority {
    pub fn new(secrets: Vec<ServerToken>, key: [u8; 32]) -> Self {
        Self {
            secrets,
            key,
            admin: Vec::new(),
        }
    }

    /// This authority, with `admin` as the secrets that open the status page. An admin secret
    /// that is also a read or write secret is refused: each secret grants one kind of access.
    pub fn with_admin(mut self, admin: Vec<AdminToken>) -> Result<Self, ConfigError> {
        if admin
            .iter()
            .any(|a| self.secrets.iter().any(|s| a.matches(s.value.expose())))
        {
            return Err(ConfigError::AdminReused);
        }
        self.admin = admin;
        Ok(self)
    }

    /// True when an admin token is configured (the status page is on).
    pub(crate) fn has_admin(&self) -> bool {
        !self.admin.is_empty()
    }

    /// Whether an `Authorization` header value carries an admin token: `Bearer <token>`, or
    /// `Basic` with the token as the password (any user name), as a browser sends what its
    /// prompt was given. Compared in constant time.
    pub(crate) fn is_admin_header(&self, header: Option<&str>) -> bool {
        let Some((scheme, value)) = header.map(str::trim).and_then(|h| h.split_once(' ')) else {
            return false;
        };
        let value = value.trim();
        let candidate = if scheme.eq_ignore_ascii_case("bearer") {
            value.to_string()
        } else if scheme.eq_ignore_ascii_case("basic") {
            let Some(text) = base64::engine::general_purpose::STANDARD
                .decode(value)
                .ok()
                .and_then(|d| String::from_utf8(d).ok())
            else {
                return false;
            };
            match text.split_once(':') {
                Some((_, password)) => password.to_string(),
                None => return false,
            }
        } else {
            return false;
        };
        // Every admin secret is compared, whichever matches.
        self.admin
            .iter()
            .fold(false, |found, a| a.matches(&candidate) | found)
    }

    /// Loads the server key from `path`, creating it (mode 0600) on first use.
    pub fn load_or_create_key(path: &Path) -> Result<[u8; 32], ConfigError> {
        let err = |detail: String| ConfigError::Key {
            path: path.display().to_string(),
            detail,
        };
        match std::fs::read(path) {
            Ok(bytes) => bytes
                .as_slice()
                .try_into()
                .map_err(|_| err(format!("{} bytes, expected 32; delete it to make a new key (this invalidates issued tokens)", bytes.len()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = xet_protocol::random_bytes::<32>()
                    .map_err(|e| err(format!("no random source: {e}")))?;
                write_private(path, &key).map_err(|e| err(e.to_string()))?;
                Ok(key)
            }
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// True when no secret is configured (the server then refuses every authenticated call).
    pub(crate) fn has_secrets(&self) -> bool {
        !self.secrets.is_empty()
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = HmacSha256::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                mac.update(b"\0");
            }
            mac.update(p);
        }
        mac
    }

    /// Issues a CAS access token for `repo`; `restricted`: it reads only what that repository
    /// registered (for tokens of a scoped secret).
    pub fn issue(&self, scope: Scope, repo: &str, expires: u64) -> String {
        self.issue_for(scope, repo, expires, false)
    }

    /// [`Self::issue`], restricted or not.
    pub(crate) fn issue_for(
        &self,
        scope: Scope,
        repo: &str,
        expires: u64,
        restricted: bool,
    ) -> String {
        let claims = Claims {
            s: scope.letter().to_string(),
            e: expires,
            r: repo.to_string(),
            x: restricted,
        };
        // Serialising a struct of strings and integers cannot fail.
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let mac = self
            .mac(&[b"cas-token", payload.as_bytes()])
            .finalize()
            .into_bytes();
        format!("gx1.{payload}.{}", URL_SAFE_NO_PAD.encode(mac))
    }

    /// The configured secret equal to `token`, compared in constant time.
    fn secret(&self, token: &str) -> Option<&ServerToken> {
        self.secrets
            .iter()
            .find(|s| bool::from(s.value.expose().as_bytes().ct_eq(token.as_bytes())))
    }

    /// The stable pseudonym of an unnamed secret: `token-` and 12 hex digits of a MAC of it.
    fn pseudonym(&self, secret: &ServerToken) -> String {
        let mac = self
            .mac(&[b"owner", secret.value.expose().as_bytes()])
            .finalize()
            .into_bytes();
        let hex: String = mac[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("token-{hex}")
    }

    /// The user `secret` speaks for when the client calls itself `declared` (see the module
    /// documentation).
    fn user_of(&self, secret: &ServerToken, declared: Option<&str>) -> String {
        if let Some(name) = &secret.name {
            return name.clone();
        }
        match declared {
            Some(d)
                if usable_user_name(d).is_ok()
                    && !self.secrets.iter().any(|s| s.name.as_deref() == Some(d))
                    && self.secret(d).is_none() =>
            {
                d.to_string()
            }
            _ => self.pseudonym(secret),
        }
    }

    /// Checks a bearer credential: a configured secret or a CAS token.
    pub fn verify(&self, token: &str, now: u64) -> Result<Grant, AuthError> {
        self.verify_as(token, None, now)
    }

    /// [`Authority::verify`] for a client that gave the user name `declared`.
    fn verify_as(&self, token: &str, declared: Option<&str>, now: u64) -> Result<Grant, AuthError> {
        if let Some(s) = self.secret(token) {
            return Ok(Grant {
                scope: s.scope,
                expires: None,
                repo: String::new(),
                user: Some(self.user_of(s, declared)),
                repos: s.repos.clone(),
            });
        }
        let rest = token.strip_prefix("gx1.").ok_or(AuthError::Invalid)?;
        let (payload, mac) = rest.split_once('.').ok_or(AuthError::Invalid)?;
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| AuthError::Invalid)?;
        self.mac(&[b"cas-token", payload.as_bytes()])
            .verify_slice(&mac)
            .map_err(|_| AuthError::Invalid)?;
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(AuthError::Invalid)?;
        let scope = match claims.s.as_str() {
            "r" => Scope::Read,
            "w" => Scope::Write,
            _ => return Err(AuthError::Invalid),
        };
        if claims.e.saturating_add(EXPIRY_SKEW_SECS) < now {
            return Err(AuthError::Expired {
                expired: claims.e,
                now,
            });
        }
        // A restricted token's one repository, as a pattern matching only it.
        let repos = claims.x.then(|| RepoPattern(claims.r.clone()));
        Ok(Grant {
            scope,
            expires: Some(claims.e),
            repo: claims.r,
            user: None,
            repos,
        })
    }

    /// Checks an `Authorization` header value: `Bearer <token>`, or `Basic` with the token as
    /// the password, as git sends credentials. The user name of `Basic` only decides who an
    /// unnamed secret speaks for ([`Grant::user`]).
    pub(crate) fn verify_header(&self, header: Option<&str>, now: u64) -> Result<Grant, AuthError> {
        let header = header.ok_or(AuthError::Missing)?.trim();
        let (scheme, value) = header.split_once(' ').ok_or(AuthError::Scheme)?;
        let value = value.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            self.verify(value, now)
        } else if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(value)
                .map_err(|_| AuthError::Invalid)?;
            let text = String::from_utf8(decoded).map_err(|_| AuthError::Invalid)?;
            let (user, password) = text.split_once(':').ok_or(AuthError::Invalid)?;
            self.verify_as(password, Some(user), now)
        } else {
            Err(AuthError::Scheme)
        }
    }

    /// The query string (`e=…&r=…&s=…`) presigning fetches of `ranges` of `xorb` until
    /// `expires`.
    pub fn presign(&self, xorb: &XorbHash, expires: u64, ranges: &GrantedRanges) -> String {
        let e = expires.to_string();
        let r = ranges.to_param();
        let mac = self
            .mac(&[
                PRESIGN_TAG,
                xorb.to_hex().as_bytes(),
                e.as_bytes(),
                r.as_bytes(),
            ])
            .finalize()
            .into_bytes();
        format!("e={e}&r={r}&s={}", URL_SAFE_NO_PAD.encode(mac))
    }

    /// Checks a presigned fetch (`ranges` as written in the URL): the signature matches and
    /// has not expired. The answer is the ranges the URL grants.
    pub(crate) fn verify_presigned(
        &self,
        xorb: &XorbHash,
        expires: u64,
        ranges: &str,
        signature: &str,
        now: u64,
    ) -> Result<GrantedRanges, AuthError> {
        let mac = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| AuthError::Invalid)?;
        let e = expires.to_string();
        self.mac(&[
            PRESIGN_TAG,
            xorb.to_hex().as_bytes(),
            e.as_bytes(),
            ranges.as_bytes(),
        ])
        .verify_slice(&mac)
        .map_err(|_| AuthError::Invalid)?;
        // Signed by this server, so well formed; checked all the same.
        let granted = GrantedRanges::parse_param(ranges).map_err(|_| AuthError::Invalid)?;
        if expires < now {
            return Err(AuthError::Expired {
                expired: expires,
                now,
            });
        }
        Ok(granted)
    }
}

/// A xorb upload grant (docs/cas-api.md §5.11): what `PUT /v1/xorb-uploads/{id}` may store,
/// carried in the grant id itself (signed), so any node sharing the key honours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct UploadGrant {
    pub xorb: XorbHash,
    /// The body's length in bytes.
    pub length: u64,
    /// The body's CRC-64/NVME.
    pub crc64nvme: u64,
    /// Unix seconds after which the upload is refused (the commit is not).
    pub expires: u64,
}

impl Authority {
    /// The id of `grant`: `g1.<payload>.<mac>`, base64url, with payload
    /// `<xorb hex>:<length>:<crc>:<expiry>` and mac = HMAC-SHA256(server key, "upload-grant\0" ‖
    /// payload). URL-safe as it is.
    pub(crate) fn issue_upload_grant(&self, grant: &UploadGrant) -> String {
        let payload = format!(
            "{}:{}:{}:{}",
            grant.xorb.to_hex(),
            grant.length,
            grant.crc64nvme,
            grant.expires
        );
        let mac = self
            .mac(&[b"upload-grant", payload.as_bytes()])
            .finalize()
            .into_bytes();
        format!(
            "g1.{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(mac)
        )
    }

    /// The grant an id stands for, if this server (or one sharing its key) issued it. The
    /// caller checks the expiry where it matters.
    pub(crate) fn verify_upload_grant(&self, id: &str) -> Result<UploadGrant, AuthError> {
        let rest = id.strip_prefix("g1.").ok_or(AuthError::Invalid)?;
        let (payload, mac) = rest.split_once('.').ok_or(AuthError::Invalid)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| AuthError::Invalid)?;
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| AuthError::Invalid)?;
        self.mac(&[b"upload-grant", &payload])
            .verify_slice(&mac)
            .map_err(|_| AuthError::Invalid)?;
        let text = String::from_utf8(payload).map_err(|_| AuthError::Invalid)?;
        let parts: Vec<&str> = text.split(':').collect();
        let [xorb, length, crc, expires] = parts[..] else {
            return Err(AuthError::Invalid);
        };
        Ok(UploadGrant {
            xorb: XorbHash::from_hex(xorb).map_err(|_| AuthError::Invalid)?,
            length: length.parse().map_err(|_| AuthError::Invalid)?,
            crc64nvme: crc.parse().map_err(|_| AuthError::Invalid)?,
            expires: expires.parse().map_err(|_| AuthError::Invalid)?,
        })
    }
}

/// What a presigned-URL signature starts with (URLs signed before ranges were bound used
/// another tag, so none of them can pass for a grant of every byte).
const PRESIGN_TAG: &[u8] = b"xorb-ranges";

/// Writes a file readable only by its owner.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority() -> Authority {
        Authority::new(
            vec![
                ServerToken::new("write-secret-0123456789", Scope::Write, "t").unwrap(),
                ServerToken::new("read-secret-0123456789", Scope::Read, "t").unwrap(),
            ],
            [7; 32],
        )
    }

    #[test]
    fn secrets_tokens_and_basic_auth() {
        let a = authority();
        assert_eq!(
            a.verify("write-secret-0123456789", 0).unwrap().scope,
            Scope::Write
        );
        assert_eq!(
            a.verify("read-secret-0123456789", 0).unwrap().scope,
            Scope::Read
        );
        assert_eq!(a.verify("nope", 0), Err(AuthError::Invalid));
        let t = a.issue(Scope::Read, "team/models", 1000);
        let g = a.verify(&t, 900).unwrap();
        assert_eq!(
            (g.scope, g.expires, g.repo.as_str()),
            (Scope::Read, Some(1000), "team/models")
        );
        assert!(a.verify(&t, 1000 + EXPIRY_SKEW_SECS).is_ok());
        assert!(matches!(
            a.verify(&t, 1000 + EXPIRY_SKEW_SECS + 1),
            Err(AuthError::Expired { .. })
        ));
        // Tampering with the payload (scope upgrade) breaks the MAC.
        let forged = t.replacen("gx1.", "gx1.x", 1);
        assert_eq!(a.verify(&forged, 900), Err(AuthError::Invalid));
        // Another server's key does not verify it.
        let other = Authority::new(vec![], [8; 32]);
        assert_eq!(other.verify(&t, 900), Err(AuthError::Invalid));
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("git:write-secret-0123456789")
        );
        assert_eq!(
            a.verify_header(Some(&basic), 0).unwrap().scope,
            Scope::Write
        );
        assert_eq!(a.verify_header(None, 0), Err(AuthError::Missing));
        assert_eq!(a.verify_header(Some("Digest x"), 0), Err(AuthError::Scheme));
        assert!(Scope::Write.allows(Scope::Read) && !Scope::Read.allows(Scope::Write));
    }

    fn basic_as(user: &str, token: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"))
        )
    }

    #[test]
    fn who_a_credential_speaks_for() {
        let shared = "shared-secret-0123456789";
        let a = Authority::new(
            vec![
                ServerToken::new(shared, Scope::Write, "t").unwrap(),
                ServerToken::new("alice-secret-0123456789", Scope::Write, "t")
                    .unwrap()
                    .named("alice", "t")
                    .unwrap(),
            ],
            [7; 32],
        );
        let user = |h: &str| a.verify_header(Some(h), 0).unwrap().user.unwrap();
        // A named secret is its name, whatever the client calls itself.
        assert_eq!(
            user(&basic_as("mallory", "alice-secret-0123456789")),
            "alice"
        );
        assert_eq!(user("Bearer alice-secret-0123456789"), "alice");
        // An unnamed one: the Basic user name...
        assert_eq!(user(&basic_as("bob", shared)), "bob");
        assert_eq!(user(&basic_as("Jane Doe", shared)), "Jane Doe");
        // ... unless there is none, it is unusable, or it is a named secret's name: then a
        // stable pseudonym that does not contain the secret.
        let pseudonym = user(&format!("Bearer {shared}"));
        assert!(
            pseudonym.starts_with("token-") && pseudonym.len() == 18,
            "{pseudonym}"
        );
        assert!(!pseudonym.contains("shared"));
        for declared in [
            "",
            "  ",
            "alice",
            "bad\nname",
            &"x".repeat(MAX_USER_NAME + 1),
            shared,
            "alice-secret-0123456789",
        ] {
            assert_eq!(user(&basic_as(declared, shared)), pseudonym, "{declared:?}");
        }
        // The same under another server key gives another pseudonym (keyed, not a plain hash);
        // the same key gives the same one (stable across restarts).
        let again = Authority::new(
            vec![ServerToken::new(shared, Scope::Write, "t").unwrap()],
            [7; 32],
        );
        assert_eq!(again.verify(shared, 0).unwrap().user.unwrap(), pseudonym);
        let other = Authority::new(
            vec![ServerToken::new(shared, Scope::Write, "t").unwrap()],
            [8; 32],
        );
        assert_ne!(other.verify(shared, 0).unwrap().user.unwrap(), pseudonym);
        // CAS tokens speak for nobody.
        let t = a.issue(Scope::Write, "r", 100);
        assert_eq!(a.verify(&t, 0).unwrap().user, None);
        assert!(ServerToken::new(shared, Scope::Read, "t")
            .unwrap()
            .named("tab\there", "t")
            .is_err());
    }

    #[test]
    fn presigned_urls_bind_hash_expiry_and_ranges() {
        let a = authority();
        let x = XorbHash::from_bytes([1; 32]);
        let granted = GrantedRanges::new([0..=99, 200..=299]).unwrap();
        let q = a.presign(&x, 500, &granted);
        assert!(q.starts_with("e=500&r=0-99,200-299&s="), "{q}");
        let sig = q.split("&s=").nth(1).unwrap();
        let r = "0-99,200-299";
        assert_eq!(a.verify_presigned(&x, 500, r, sig, 499), Ok(granted));
        assert!(matches!(
            a.verify_presigned(&x, 500, r, sig, 501),
            Err(AuthError::Expired { .. })
        ));
        assert_eq!(
            a.verify_presigned(&x, 501, r, sig, 0),
            Err(AuthError::Invalid)
        );
        let y = XorbHash::from_bytes([2; 32]);
        assert_eq!(
            a.verify_presigned(&y, 500, r, sig, 0),
            Err(AuthError::Invalid)
        );
        // Another range set (wider, or the whole object) is not covered by the signature.
        for other in ["0-299", "0-99", "0-99,200-300", ""] {
            assert_eq!(
                a.verify_presigned(&x, 500, other, sig, 0),
                Err(AuthError::Invalid),
                "{other}"
            );
        }
    }

    #[test]
    fn upload_grants_round_trip_and_cannot_be_altered() {
        let a = authority();
        let grant = UploadGrant {
            xorb: XorbHash::from_bytes([3; 32]),
            length: 1234,
            crc64nvme: u64::MAX,
            expires: 99,
        };
        let id = a.issue_upload_grant(&grant);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        assert_eq!(a.verify_upload_grant(&id), Ok(grant));
        let other = Authority::new(vec![], [9; 32]);
        assert_eq!(other.verify_upload_grant(&id), Err(AuthError::Invalid));
        let forged = a
            .issue_upload_grant(&UploadGrant { length: 1, ..grant })
            .split('.')
            .nth(1)
            .unwrap()
            .to_string();
        let mac = id.rsplit('.').next().unwrap();
        assert_eq!(
            a.verify_upload_grant(&format!("g1.{forged}.{mac}")),
            Err(AuthError::Invalid)
        );
        for bad in ["", "g1.", "g1.a.b", "x1.a.b", "g1..."] {
            assert_eq!(a.verify_upload_grant(bad), Err(AuthError::Invalid), "{bad}");
        }
    }

    #[test]
    fn admin_tokens_open_only_the_status_page() {
        let admin = "admin-secret-0123456789";
        let a = authority()
            .with_admin(vec![AdminToken::new(admin, "t").unwrap()])
            .unwrap();
        assert!(a.has_admin());
        assert!(a.is_admin_header(Some(&format!("Bearer {admin}"))));
        assert!(a.is_admin_header(Some(&basic_as("anyone", admin))));
        for refused in [
            None,
            Some("Bearer write-secret-0123456789".to_string()),
            Some(basic_as("git", "read-secret-0123456789")),
            Some(format!("Bearer {admin}x")),
            Some(format!("Digest {admin}")),
            Some("Basic !!!".to_string()),
        ] {
            assert!(!a.is_admin_header(refused.as_deref()), "{refused:?}");
        }
        // The CAS and LFS APIs do not know it.
        assert_eq!(a.verify(admin, 0), Err(AuthError::Invalid));
        // Without one, nothing opens the page.
        assert!(!authority().has_admin());
        assert!(!authority().is_admin_header(Some(&format!("Bearer {admin}"))));
        // A secret is one kind of access only.
        assert!(matches!(
            authority().with_admin(vec![
                AdminToken::new("write-secret-0123456789", "t").unwrap()
            ]),
            Err(ConfigError::AdminReused)
        ));
        assert!(!format!("{:?}", AdminToken::new(admin, "t").unwrap()).contains("admin-secret"));
    }

    #[test]
    fn token_files_and_short_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(
            &path,
            "# team\nwrite aaaaaaaaaaaaaaaaaaaa\n\nread bbbbbbbbbbbbbbbbbbbb\n",
        )
        .unwrap();
        let s = ServerToken::parse_file(&path).unwrap();
        assert_eq!(
            s.iter().map(|s| s.scope).collect::<Vec<_>>(),
            [Scope::Write, Scope::Read]
        );
        // A third field names the user the token speaks for; old two-field lines are unchanged.
        std::fs::write(
            &path,
            "write aaaaaaaaaaaaaaaaaaaa alice\nread bbbbbbbbbbbbbbbbbbbb\twalter@example.org\n\
             write cccccccccccccccccccc\n",
        )
        .unwrap();
        let s = ServerToken::parse_file(&path).unwrap();
        assert_eq!(
            s.iter().map(|s| (s.scope, s.name())).collect::<Vec<_>>(),
            [
                (Scope::Write, Some("alice")),
                (Scope::Read, Some("walter@example.org")),
                (Scope::Write, None)
            ]
        );
        std::fs::write(&path, "write aaaaaaaaaaaaaaaaaaaa alice extra\n").unwrap();
        let e = ServerToken::parse_file(&path).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("too many fields"), "{e}");
        std::fs::write(&path, "write\n").unwrap();
        assert!(ServerToken::parse_file(&path).is_err());
        std::fs::write(&path, "owner cccccccccccccccccccc\n").unwrap();
        assert!(ServerToken::parse_file(&path)
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        // Admin lines: a secret of their own, no other field, at least 16 characters.
        std::fs::write(
            &path,
            "write aaaaaaaaaaaaaaaaaaaa\nadmin dddddddddddddddddddd\n",
        )
        .unwrap();
        let file = TokenFile::parse(&path).unwrap();
        assert_eq!((file.tokens.len(), file.admin.len()), (1, 1));
        assert_eq!(ServerToken::parse_file(&path).unwrap().len(), 1);
        for bad in ["admin dddddddddddddddddddd alice\n", "admin short\n"] {
            std::fs::write(&path, bad).unwrap();
            let e = TokenFile::parse(&path).unwrap_err().to_string();
            assert!(e.contains("line 1"), "{e}");
        }
        assert!(ServerToken::new("short", Scope::Read, "--token").is_err());
        let key_path = dir.path().join("server.key");
        let k1 = Authority::load_or_create_key(&key_path).unwrap();
        assert_eq!(Authority::load_or_create_key(&key_path).unwrap(), k1);
    }
}
