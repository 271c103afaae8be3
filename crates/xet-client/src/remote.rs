//! The HTTP client of a remote Xet CAS server: [`AsyncRemoteCas`], the CAS API
//! (docs/cas-api.md) of `git xet serve` or of Hugging Face as async operations, and
//! [`RemoteCas`], the blocking [`Endpoint`] over it that the pipelines' threads use
//! (`remote/blocking.rs`).
//!
//! It owns everything between the pipeline's trait calls and the wire: the routes, the bearer
//! token ([`TokenSource`]: fixed, or renewed through a refresh route), retries with backoff
//! ([`RetryPolicy`]), timeouts, validation of every answer, and error messages that say which
//! server refused what and what to do about it. Both are `Sync`: one `reqwest` client (with its
//! connection pool) serves every task or thread of an upload or download. The async client's
//! operations run on whatever tokio runtime polls them (time and I/O enabled), and their
//! futures are `Send` (a test checks), so an async program can spawn them; the blocking client
//! runs each on a runtime without threads of its own that the calling thread drives, so that a
//! small request costs no hand-off between threads.
//!
//! | operation | request | answers |
//! |---|---|---|
//! | [`CasTarget::put_xorb`] | `POST {cas}/v1/xorbs/default/{xorb}` | `{"was_inserted": bool}` |
//! | [`CasTarget::register_shard`] | `POST {cas}/v1/shards` | `{"result": 0 \| 1}`; 400 = the shard was rejected |
//! | [`CasTarget::dedup_query`] | `GET {cas}/v1/chunks/default/{chunk}` | a shard; 404 = no match |
//! | [`CasTarget::file_by_sha256`], [`Endpoint::locate_oid`] | `GET {cas}/v1/lfs-files/{oid}` (our server's extension) | `{"oid","file_hash","size","intact"}`; 404/405/501 = unknown (or a server without the route); `intact: false` is not "stored" for uploads |
//! | [`Endpoint::reconstruction`] | `GET {cas}/v2/reconstructions/{file}`, `Range: bytes=S-E` | v2 JSON; falls back to `/v1/…` when v2 is not offered |
//! | [`XorbSource::read_xorb_range`] | `GET {presigned url}`, `Range: bytes=S-E`, **no** `Authorization` | the bytes; 403 = the URL expired |
//!
//! [`CasTarget::has_xorb`] always answers `false`: the API has no cheap existence check and
//! xorb uploads are idempotent.
//!
//! Decisions:
//! - **Dedup prefix.** Dedup queries use the prefix `default`, what the reference client sends
//!   (docs/cas-api.md §5.4); the OpenAPI file's `default-merkledb` is accepted by our server too, but
//!   `default` is the one production is known to serve.
//! - **v2 → v1.** A v2 reconstruction answered with 405 or 501, or with a 404 that is not our
//!   server's `file_not_found`, is asked again at `/v1/…`; once v1 has answered where v2 did
//!   not, v1 is used from then on. A 404 from both means the file is unknown (`None`).
//! - **401.** With a [`TokenSource::Refreshing`] token, a 401 refreshes the token once per
//!   request and tries again (the reference client treats 401 as final; refreshing once is
//!   cheap and saves a push whose token was revoked early). A second 401 is final.
//! - **Timeouts.** Connecting: [`RemoteConfig::connect_timeout`]. A whole request, answer
//!   included: [`RemoteConfig::timeout`] plus one second per [`UPLOAD_BYTES_PER_SEC`] bytes of
//!   upload body; shard registrations get at least [`SHARD_TIMEOUT`] (a server may validate a
//!   64 MiB shard silently for minutes).
//! - **Retries** ([`RetryPolicy`]): connection errors, timeouts, 408, 429 and 5xx are retried
//!   with backoff for about a minute since the first attempt (a server restart is survived);
//!   `Retry-After` (seconds or a date) is honoured. 501, 505 and **507** (the server is out of
//!   storage) are final, and so is a 500 whose error code is [`ErrorCode::XorbDamaged`] (the server's
//!   copy is damaged; its administrator runs `git xet scrub`). Every refusal's JSON `error`
//!   code is kept in [`TargetError::Remote`]'s `code`.
//! - **Redirects.** Requests that carry a credential (CAS requests, token refreshes with an
//!   `Authorization`) follow only same-origin redirects (scheme, host and port); a redirect to
//!   another origin is a final error naming it. Requests without credentials (presigned
//!   URLs) follow redirects anywhere.
//! - **Truncated xorbs.** A presigned fetch answered with a shorter range or body than the
//!   reconstruction promised, or a 416 past the object's end, is reported as damage of that
//!   xorb on the server, not as a generic mismatch.
//! - **Secrets.** Every token given or received is registered with [`xet_protocol::redact`]; a CAS
//!   URL with a user name or password in it is refused.
//! - **Empty file.** The all-zero file hash is the empty file everywhere: its plan is empty
//!   and no request is sent.

mod blocking;
mod http;
pub mod proxy;
mod tls;
pub mod token;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xet_protocol::util::secret::Secret;
use xet_protocol::wire::ErrorCode;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Client;
use reqwest::{Method, StatusCode};

pub use self::blocking::RemoteCas;
pub use self::http::RetryPolicy;
pub use self::http::{cert_advice, cert_problem, origin, parse_retry_after, CertProblem};
use self::http::{
    content_range, read_body, retry_after, retryable_status, runtime, same_origin_redirects, send,
    server_says, shown, status_text, stream_body, transport_failure, Auth, Failure, Request,
    Response, MAX_REDIRECTS,
};
use self::token::REFRESH_BUFFER_SECS;
pub use self::token::{RefreshingToken, TokenSource};
use xet_format::shard::{Shard, MAX_SHARD_SIZE};
use xet_format::{ChunkHash, ChunkRef, FileHash, LfsOid, XorbHash};
#[cfg(doc)]
use xet_protocol::target::{CasTarget, Endpoint, RangeSink, XorbSource};
use xet_protocol::target::{SentBytes, TargetError, XorbPut};
use xet_protocol::util::now_unix;
use xet_protocol::util::sync::LockAnyway as _;
use xet_protocol::wire::{
    self, CasTokenInfo, LfsFile, ReconstructionV1, ReconstructionV2, ShardRegistered, XorbUploaded,
};
use xet_protocol::{FetchRange, ReconstructionPlan};

/// Runs the attempts of `$req` (see [`Tries`]; `$auth`: its `Authorization` value when it does
/// not use the CAS token) until handling an answer, `$handle` with the answer bound to `$resp`
/// (it may await, and `?` returns from the caller), gives a value: that value, or the caller
/// returns the final error. A macro, not a function taking the handling as a closure: the
/// futures of async closures that borrow are not proven `Send`.
macro_rules! attempts {
    ($cas:expr, $req:expr, $auth:expr, |$resp:ident| $handle:expr) => {{
        let mut tries = $cas.tries($req, $auth);
        loop {
            let $resp = tries.answer().await?;
            let handled = $handle;
            if let Some(value) = tries.settle(handled).await? {
                break value;
            }
        }
    }};
}

/// The default `User-Agent`.
pub(crate) const DEFAULT_USER_AGENT: &str = concat!("git-xet/", env!("CARGO_PKG_VERSION"));

/// The prefix of dedup queries (see the module documentation).
pub(crate) const DEDUP_PREFIX: &str = "default";

/// Upload bodies extend a request's timeout by one second per this many bytes.
pub const UPLOAD_BYTES_PER_SEC: u64 = 256 * 1024;

/// The least time a shard registration may take.
pub const SHARD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The largest reconstruction JSON read (about a million terms).
pub(crate) const MAX_RECONSTRUCTION_JSON: u64 = 256 << 20;

/// The largest small JSON answer read (uploads, lookups, tokens).
const MAX_SMALL_JSON: u64 = 1 << 20;

/// The file of each xorb of a directory store on this machine (the storage engine knows its
/// layout; the client only reads the files).
#[derive(Clone)]
pub struct LocalXorbs(Arc<dyn Fn(&XorbHash) -> std::path::PathBuf + Send + Sync>);

impl LocalXorbs {
    /// Xorb files found by `path_of`.
    pub fn new(path_of: impl Fn(&XorbHash) -> std::path::PathBuf + Send + Sync + 'static) -> Self {
        Self(Arc::new(path_of))
    }

    /// The file of `xorb`.
    pub fn path(&self, xorb: &XorbHash) -> std::path::PathBuf {
        (self.0)(xorb)
    }
}

impl std::fmt::Debug for LocalXorbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalXorbs")
    }
}

/// How to reach a CAS server.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The base URL (`casUrl`), e.g. `https://cas-server.xethub.hf.co`; a trailing `/` is
    /// ignored.
    pub cas_url: String,
    pub token: TokenSource,
    /// Sent as `X-Xet-Session-Id` on CAS requests.
    pub session_id: Option<String>,
    pub retry: RetryPolicy,
    pub user_agent: String,
    pub connect_timeout: Duration,
    /// The time one request may take, answer included (see the module documentation).
    pub timeout: Duration,
    /// Appended to the message of a refused fixed token: where the user configures it.
    pub token_hint: String,
    /// What [`Endpoint::describe`] says (the journal, messages); default the CAS URL.
    pub name: Option<String>,
    /// Never through a proxy (a server on this machine).
    pub no_proxy: bool,
    /// TLS trust, client certificate and proxy (git's `http.*` settings).
    pub http: HttpOptions,
    /// Where the directory store the server serves keeps each xorb, when it is on this
    /// machine: xorb ranges are read from its files directly (they are immutable once stored),
    /// and fetched over HTTP only if that fails. What is read is checked like what is fetched.
    pub local_xorbs: Option<LocalXorbs>,
    /// Told once, after [`SLOW_NOTICE_AFTER`] of retries, what is failing and for how long
    /// requests will keep trying (the agent shows it on the user's terminal; git-lfs shows
    /// nothing while a request retries).
    pub on_slow: Option<SlowNotice>,
}

/// How long requests retry before [`RemoteConfig::on_slow`] is told.
pub const SLOW_NOTICE_AFTER: Duration = Duration::from_secs(3);

/// Whom to tell, in words, that requests have been retrying for a while.
#[derive(Clone)]
pub struct SlowNotice(pub std::sync::Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for SlowNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SlowNotice")
    }
}

/// How the HTTP client reaches servers: whom it trusts, which certificate it shows, which
/// proxy it goes through. Filled from git's `http.*` settings by `lfs::settings::http_options`;
/// the default is what a client with no settings does (the system's and the compiled-in
/// roots, no client certificate, proxies from the environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// PEM files of more CA certificates to trust (`http.sslCAInfo`, `GIT_SSL_CAINFO`).
    pub ca_files: Vec<std::path::PathBuf>,
    /// Directories of CA certificates in PEM files (`http.sslCAPath`, `GIT_SSL_CAPATH`).
    pub ca_dirs: Vec<std::path::PathBuf>,
    /// `false`: certificates are not checked at all (`http.sslVerify=false`,
    /// `GIT_SSL_NO_VERIFY`).
    pub verify: bool,
    /// A client certificate (PEM) and its key (PEM; `None`: in the certificate's file), for
    /// servers that ask for one (`http.sslCert`, `http.sslKey`).
    pub client_cert: Option<(std::path::PathBuf, Option<std::path::PathBuf>)>,
    /// The proxy for every request (`http.proxy`); `None`: `HTTPS_PROXY`, `HTTP_PROXY` and
    /// `ALL_PROXY` from the environment, as curl reads them. `NO_PROXY` applies either way
    /// (see [`proxy`]).
    pub proxy: Option<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            ca_files: Vec::new(),
            ca_dirs: Vec::new(),
            verify: true,
            client_cert: None,
            proxy: None,
        }
    }
}

impl HttpOptions {
    /// The CA certificates to trust besides the system's, each with the file it came from; an
    /// unreadable or empty `ca_files` entry is an error naming it.
    pub fn certificates(&self) -> Result<Vec<(reqwest::Certificate, std::path::PathBuf)>, String> {
        let mut out = Vec::new();
        for file in &self.ca_files {
            let bytes = std::fs::read(file)
                .map_err(|e| format!("cannot read the CA file {}: {e}", file.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&bytes)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| {
                    format!("the CA file {} holds no PEM certificate", file.display())
                })?;
            out.extend(certs.into_iter().map(|c| (c, file.clone())));
        }
        for dir in &self.ca_dirs {
            let entries = std::fs::read_dir(dir)
                .map_err(|e| format!("cannot list the CA directory {}: {e}", dir.display()))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if !path.is_file() {
                    continue;
                }
                // c_rehash links and .pem/.crt files alike; what does not parse is skipped.
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                for cert in reqwest::Certificate::from_pem_bundle(&bytes).unwrap_or_default() {
                    out.push((cert, path.clone()));
                }
            }
        }
        Ok(out)
    }

    /// The client certificate with its key, if one is configured.
    pub fn identity(&self) -> Result<Option<reqwest::Identity>, String> {
        let Some((cert, key)) = &self.client_cert else {
            return Ok(None);
        };
        let read = |path: &std::path::Path, what: &str| {
            std::fs::read(path)
                .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
        };
        let mut pem = read(cert, "client certificate")?;
        if let Some(key) = key {
            pem.push(b'\n');
            pem.extend_from_slice(&read(key, "client key")?);
        }
        reqwest::Identity::from_pem(&pem).map(Some).map_err(|e| {
            format!(
                "the client certificate {} (with its key) cannot be used: {e}",
                cert.display()
            )
        })
    }

    /// Which proxy each request goes through: the configured one or the environment's, with
    /// the environment's `NO_PROXY` (see [`proxy`]); a proxy's password is registered for
    /// redaction, and a proxy setting that is not a URL is an error naming it.
    pub fn proxy_rules(&self) -> Result<proxy::ProxyRules, String> {
        proxy::ProxyRules::new(self.proxy.as_deref(), |name| std::env::var(name).ok())
    }

    /// Applies these options to a client being built (an unreadable file is an error naming
    /// it), for a client that makes https requests (`tls`) or only plain http ones: that one
    /// needs no CA certificates nor client certificate, whose files are then not read (a
    /// company's CA bundle of a few hundred certificates took milliseconds to parse, twice in
    /// every agent process, for plain-http servers too).
    pub(crate) fn apply_for(
        &self,
        mut builder: reqwest::ClientBuilder,
        tls: bool,
    ) -> Result<reqwest::ClientBuilder, String> {
        if tls && self.verify && !(self.ca_files.is_empty() && self.ca_dirs.is_empty()) {
            // Our own TLS configuration: reqwest's cannot accept a self-signed CA certificate
            // from the CA file as the server's own, which git does (see `remote/tls.rs`).
            builder = builder.use_preconfigured_tls(tls::client_config(self)?);
        } else if tls {
            for (cert, _) in self.certificates()? {
                builder = builder.add_root_certificate(cert);
            }
            if let Some(identity) = self.identity()? {
                builder = builder.identity(identity);
            }
        }
        if !self.verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        // Our rules, not reqwest's reading of the environment: its NO_PROXY ignores ports.
        builder = builder.no_proxy();
        if let Some(proxy) = self.proxy_rules()?.to_reqwest() {
            builder = builder.proxy(proxy);
        }
        Ok(builder)
    }
}

/// A client for a command's few requests (`git xet status` probes, a reader's LFS batch
/// requests, a local server's health check) on a current-thread runtime that the caller drives,
/// the runtime model of [`RemoteCas`] (no client thread of its own, as reqwest's blocking
/// client has): options applied, a timeout per request (connecting: at most 10 s of it), no
/// redirects (an answer, not followed).
pub struct OneShotClient {
    client: Client,
    /// Which proxy each request goes through (empty without proxies).
    proxies: Box<proxy::ProxyRules>,
    /// Declared after the client, so that it is dropped last.
    rt: std::sync::Arc<tokio::runtime::Runtime>,
}

/// An answer of a [`OneShotClient`], its body read whole (up to the limit asked for).
#[derive(Debug)]
pub struct OneShotAnswer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: bytes::Bytes,
}

impl OneShotClient {
    /// A client for requests to `url`'s origin, with `options` and a `timeout` per request;
    /// `proxy: false` never uses one (a server on this machine). For a plain `http://` URL no
    /// certificate is loaded (the system's trust store and a configured CA bundle take
    /// milliseconds to parse, in every agent that checks its directory store's local server),
    /// so such a client cannot make https requests.
    pub fn for_url(
        options: &HttpOptions,
        url: &str,
        timeout: Duration,
        proxy: bool,
    ) -> Result<Self, String> {
        let tls = !url
            .get(..7)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"));
        let rt = runtime().map_err(|e| format!("cannot start the HTTP runtime: {e}"))?;
        let _inside = rt.enter();
        let builder = options
            .apply_for(Client::builder(), tls)?
            .tls_built_in_native_certs(tls)
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(DEFAULT_USER_AGENT);
        let (builder, proxies) = if proxy {
            (builder, options.proxy_rules()?)
        } else {
            (builder.no_proxy(), proxy::ProxyRules::default())
        };
        let client = builder.build().map_err(|e| {
            format!(
                "cannot build an HTTP client: {}",
                xet_protocol::util::error::chain_text(&e)
            )
        })?;
        Ok(Self {
            client,
            proxies: Box::new(proxies),
            rt,
        })
    }

    /// The proxy a request to `url` goes through, if any (to name it when it fails).
    pub fn proxy_for(&self, url: &str) -> Option<&proxy::ProxyChoice> {
        self.proxies.proxy_for_str(url)
    }

    /// A request to build (`GET url`).
    pub fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.client.get(url)
    }

    /// A request to build (`POST url`).
    pub fn post(&self, url: &str) -> reqwest::RequestBuilder {
        self.client.post(url)
    }

    /// Sends `request` and reads at most `max_body` bytes of its body (the rest is dropped).
    pub fn send(
        &self,
        request: reqwest::RequestBuilder,
        max_body: usize,
    ) -> Result<OneShotAnswer, reqwest::Error> {
        self.rt.block_on(async move {
            let mut response = request.send().await?;
            let status = response.status();
            let headers = response.headers().clone();
            let mut body = Vec::new();
            while body.len() < max_body {
                match response.chunk().await? {
                    Some(piece) => {
                        let room = max_body - body.len();
                        body.extend_from_slice(&piece[..piece.len().min(room)]);
                    }
                    None => break,
                }
            }
            Ok(OneShotAnswer {
                status,
                headers,
                body: body.into(),
            })
        })
    }
}

impl RemoteConfig {
    /// The defaults: retries for about 60 s ([`RetryPolicy::default`]), connect timeout 10 s,
    /// request timeout 300 s.
    pub fn new(cas_url: impl Into<String>, token: TokenSource) -> Self {
        Self {
            cas_url: cas_url.into(),
            token,
            name: None,
            no_proxy: false,
            http: HttpOptions::default(),
            local_xorbs: None,
            session_id: None,
            retry: RetryPolicy::default(),
            user_agent: DEFAULT_USER_AGENT.to_string(),
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
            token_hint: "set GIT_XET_TOKEN or store the token with a git credential helper"
                .to_string(),
            on_slow: None,
        }
    }
}

/// What the clients of a [`RemoteCas`] are built from.
struct ClientSpec {
    http: HttpOptions,
    no_proxy: bool,
    connect_timeout: Duration,
    user_agent: String,
}

impl ClientSpec {
    /// A client following `redirects`. `tls`: it will make https requests, so it loads the
    /// system's trust store and the configured CA and client certificates (a few milliseconds
    /// per client: every agent process built two, for plain-http servers too).
    fn build(&self, redirects: reqwest::redirect::Policy, tls: bool) -> Result<Client, String> {
        let builder = self.http.apply_for(Client::builder(), tls)?;
        let builder = if self.no_proxy {
            builder.no_proxy()
        } else {
            builder
        };
        builder
            .tls_built_in_native_certs(tls)
            .connect_timeout(self.connect_timeout)
            .user_agent(self.user_agent.clone())
            .redirect(redirects)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }
}

/// The HTTP client of a remote CAS server, async: every request runs on the runtime that
/// polls it. See the module documentation; [`RemoteCas`] is the blocking client over it.
pub struct AsyncRemoteCas {
    cas_url: String,
    /// What `describe` says.
    name: String,
    /// For requests that carry a credential: follows same-origin redirects only.
    client: Client,
    /// For requests without any (presigned URLs): follows redirects anywhere. Built when first
    /// needed, one for http URLs and one for https URLs (see [`ClientSpec::build`]).
    anonymous: [std::sync::OnceLock<Result<Client, String>>; 2],
    /// How clients are built.
    spec: ClientSpec,
    /// Which proxy each request goes through (empty with [`RemoteConfig::no_proxy`]), to name
    /// it when it cannot be reached.
    proxies: proxy::ProxyRules,
    retry: RetryPolicy,
    token: TokenSource,
    token_hint: String,
    timeout: Duration,
    /// `X-Xet-Session-Id` (CAS requests only).
    session: HeaderMap,
    /// Set once the server has shown it offers only v1 reconstructions.
    v1_only: AtomicBool,
    /// Plans an oid lookup brought along (see [`AsyncRemoteCas::take_plan`]).
    plans: std::sync::Mutex<std::collections::VecDeque<(FileHash, ReconstructionPlan)>>,
    /// Set once an oid lookup's answer said the server checks SHA-256 claims
    /// (`X-Xet-Checks-Sha256: 1`, see [`CasTarget::checks_sha256_claims`]).
    checks_claims: AtomicBool,
    /// The dense-key modulus the last dedup answer announced (`X-Xet-Dense-Keys`, see
    /// [`CasTarget::dense_key_modulus`]); 0 before any answer, or when it announced none.
    dense_keys: AtomicU64,
    /// See [`RemoteConfig::on_slow`]; taken when told.
    on_slow: std::sync::Mutex<Option<SlowNotice>>,
}

/// A reconstruction request's outcome, before the v1 fallback.
enum Answer {
    Plan(ReconstructionPlan),
    FileUnknown,
    /// 404 that is not clearly "unknown file", 405, 501.
    Unsupported,
}

impl AsyncRemoteCas {
    /// A client for `config.cas_url`. Fails if the URL is not `http(s)://…` or the HTTP client
    /// cannot be built. Sends nothing. [`RemoteConfig::local_xorbs`] is for the blocking
    /// [`RemoteCas`] (reading a file would hold up the runtime); this client fetches every
    /// range over HTTP.
    pub fn new(config: RemoteConfig) -> Result<Self, TargetError> {
        let cas_url = config.cas_url.trim().trim_end_matches('/').to_string();
        let invalid = |why: String| TargetError::Remote {
            what: format!(
                "CAS URL {:?}",
                xet_protocol::redact::redact(&config.cas_url)
            ),
            message: why,
            retryable: false,
            code: None,
        };
        match reqwest::Url::parse(&cas_url) {
            Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                xet_protocol::redact::register_secret(u.password().unwrap_or_default());
                return Err(TargetError::Remote {
                    what: format!(
                        "CAS URL {:?}",
                        xet_protocol::redact::redact(&config.cas_url)
                    ),
                    message: "has a user name or password in it; the credential goes in the \
                              token, not the URL"
                        .into(),
                    retryable: false,
                    code: None,
                });
            }
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {}
            Ok(_) => return Err(invalid("is not an http:// or https:// URL".into())),
            Err(e) => return Err(invalid(format!("is not a URL: {e}"))),
        }
        let mut session = HeaderMap::new();
        if let Some(id) = &config.session_id {
            let value = HeaderValue::from_str(id)
                .map_err(|_| invalid(format!("session id {id:?} is not a valid header value")))?;
            session.insert(HeaderName::from_static("x-xet-session-id"), value);
        }
        let spec = ClientSpec {
            http: config.http.clone(),
            no_proxy: config.no_proxy,
            connect_timeout: config.connect_timeout,
            user_agent: config.user_agent.clone(),
        };
        // Built now, so that a bad setting (a CA file that cannot be read) is found at once
        // (for an https server; a plain-http one's client reads no certificate).
        let client = spec
            .build(same_origin_redirects(), cas_url.starts_with("https:"))
            .map_err(&invalid)?;
        let proxies = if config.no_proxy {
            proxy::ProxyRules::default()
        } else {
            config.http.proxy_rules().map_err(&invalid)?
        };
        Ok(Self {
            name: config.name.unwrap_or_else(|| cas_url.clone()),
            cas_url,
            client,
            anonymous: Default::default(),
            spec,
            proxies,
            retry: config.retry,
            token: config.token,
            token_hint: config.token_hint,
            timeout: config.timeout,
            session,
            v1_only: AtomicBool::new(false),
            plans: Default::default(),
            checks_claims: AtomicBool::new(false),
            dense_keys: AtomicU64::new(0),
            on_slow: std::sync::Mutex::new(config.on_slow),
        })
    }

    /// The client for requests to `url` without credentials (built the first time).
    fn anonymous_client(&self, url: &str) -> Result<&Client, String> {
        let tls = url.starts_with("https:");
        let cell = &self.anonymous[usize::from(tls)];
        let built = cell.get_or_init(|| {
            self.spec
                .build(reqwest::redirect::Policy::limited(MAX_REDIRECTS), tls)
        });
        built.as_ref().map_err(Clone::clone)
    }

    /// The CAS base URL, without a trailing `/`.
    pub fn cas_url(&self) -> &str {
        &self.cas_url
    }

    /// Where the bearer token comes from.
    pub fn token(&self) -> &TokenSource {
        &self.token
    }

    fn cas_request(&self, method: Method, path: &str, what: String) -> Request {
        let url = format!("{}{path}", self.cas_url);
        Request {
            method,
            shown_url: shown(&url),
            url,
            server: format!("CAS server {}", self.cas_url),
            what,
            auth: Auth::Cas,
            body: None,
            range: None,
            timeout: self.timeout,
            sent: None,
        }
    }

    fn upload_timeout(&self, len: usize) -> Duration {
        self.timeout + Duration::from_secs(len as u64 / UPLOAD_BYTES_PER_SEC)
    }

    /// The `Authorization` value for a CAS request, refreshing the token first when due.
    async fn bearer(&self) -> Result<Option<String>, TargetError> {
        match &self.token {
            TokenSource::None => Ok(None),
            TokenSource::Static(t) => Ok(Some(format!("Bearer {}", t.expose()))),
            TokenSource::Refreshing(r) => {
                let due = r.lock().due(now_unix());
                if due {
                    let _refreshing = r.refreshing().await;
                    // Whoever refreshed while this waited leaves nothing to do.
                    let still_due = r.lock().due(now_unix());
                    if still_due {
                        self.refresh(r).await?;
                    }
                }
                Ok(current_bearer(r))
            }
        }
    }

    /// After a 401 with `rejected` as the `Authorization` value: refreshes the token unless
    /// another thread already did. `false` when the token cannot be refreshed.
    async fn refresh_rejected(&self, rejected: Option<&str>) -> Result<bool, TargetError> {
        let TokenSource::Refreshing(r) = &self.token else {
            return Ok(false);
        };
        let _refreshing = r.refreshing().await;
        if current_bearer(r).as_deref() == rejected {
            self.refresh(r).await?;
        }
        Ok(true)
    }

    /// `GET href` → `{"casUrl","accessToken","exp"}`, kept in the token's state. Called with
    /// the token's refresh lock held, so only one refresh runs at a time. Boxed: the request
    /// goes through [`Tries::answer`], which may call [`Self::bearer`], which refreshes (a
    /// refresh's own request carries no CAS token, so it never does, but the types would be
    /// infinite).
    fn refresh<'a>(
        &'a self,
        r: &'a RefreshingToken,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), TargetError>> + Send + 'a>>
    {
        Box::pin(async move {
            let href = r.href();
            let what = format!("refreshing the CAS token at {}", shown(href));
            let authorization = r.authorization().map_err(|e| TargetError::Remote {
                what: what.clone(),
                message: format!("cannot get a credential for the token refresh: {e}"),
                retryable: false,
                code: None,
            })?;
            let req = Request {
                method: Method::GET,
                url: href.to_string(),
                shown_url: shown(href),
                server: format!("token refresh route {}", shown(href)),
                what: what.clone(),
                auth: Auth::None,
                body: None,
                range: None,
                timeout: self.timeout.min(Duration::from_secs(60)),
                sent: None,
            };
            let authorization = authorization.as_ref().map(Secret::expose);
            let info: CasTokenInfo =
                attempts!(self, &req, authorization, |resp| token_info(&req, resp)
                    .await);
            let token = info.access_token.trim().to_string();
            if token.is_empty() || HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                return Err(TargetError::Remote {
                    what,
                    message: format!(
                        "token refresh route {} answered an empty or malformed accessToken",
                        shown(href)
                    ),
                    retryable: false,
                    code: None,
                });
            }
            let token = Secret::new(token);
            let now = now_unix();
            if info.exp != 0 && info.exp <= now.saturating_add(REFRESH_BUFFER_SECS) {
                tracing::warn!(
                    href = %shown(href),
                    exp = info.exp,
                    now,
                    "the refreshed CAS token expires within {REFRESH_BUFFER_SECS} s; is a clock wrong?"
                );
            }
            let cas = info.cas_url.trim().trim_end_matches('/');
            if !cas.is_empty() && cas != self.cas_url {
                tracing::warn!(
                    configured = %self.cas_url,
                    refreshed = %cas,
                    "the token refresh names another CAS URL; keeping the configured one"
                );
            }
            tracing::debug!(href = %shown(href), exp = info.exp, "CAS token refreshed");
            r.lock().refreshed(token, info.exp, info.cas_url, now);
            Ok(())
        })
    }

    /// The attempts of `req` (see [`Tries`]). `authorization` is the `Authorization` value of
    /// requests that do not use the CAS token ([`Auth::None`]: e.g. a refresh route's
    /// credential).
    fn tries<'a>(&'a self, req: &'a Request, authorization: Option<&'a str>) -> Tries<'a> {
        Tries {
            cas: self,
            req,
            authorization,
            started: Instant::now(),
            attempt: 0,
            refreshed: false,
        }
    }

    /// The client for `req`: credentials (`auth`) never follow a redirect to another origin,
    /// so a request without them uses the anonymous client.
    fn client_for(&self, req: &Request, auth: Option<&str>) -> Result<&Client, TargetError> {
        match (auth, req.auth) {
            (None, Auth::None) => {
                self.anonymous_client(&req.url)
                    .map_err(|message| TargetError::Remote {
                        what: req.what.clone(),
                        message,
                        retryable: false,
                        code: None,
                    })
            }
            _ => Ok(&self.client),
        }
    }

    /// What an answer says about the server rather than the request, for every request alike:
    /// a refused token (401 to the CAS), no storage left (507), or a status worth a retry
    /// (unless the server says its copy is damaged). Any other answer is given back, for the
    /// request's own handling.
    async fn server_failure(&self, req: &Request, resp: Response) -> Screened {
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED && req.auth == Auth::Cas {
            let says = server_says(resp).await;
            let hint = match &self.token {
                TokenSource::None => {
                    "no token is configured for it; ".to_string() + &self.token_hint
                }
                TokenSource::Static(_) => {
                    format!("the token is wrong or expired; {}", self.token_hint)
                }
                TokenSource::Refreshing(r) => format!(
                    "the token was refused even after a refresh from {}",
                    shown(r.href())
                ),
            };
            return Screened::Failure(fatal(
                req,
                format!(
                    "{} refused the access token (401){}; {hint}",
                    req.server,
                    says.suffix()
                ),
            ));
        }
        if status == StatusCode::INSUFFICIENT_STORAGE {
            let says = server_says(resp).await;
            return Screened::Failure(fatal_coded(
                req,
                format!(
                    "{} is out of storage ({}){}; trying again will not help until its \
                     administrator frees or adds disk space",
                    req.server,
                    status_text(status),
                    says.suffix()
                ),
                says.code,
            ));
        }
        if !retryable_status(status) {
            return Screened::Pass(resp);
        }
        let after = retry_after(&resp);
        let says = server_says(resp).await;
        if says.code == Some(ErrorCode::XorbDamaged) {
            return Screened::Failure(fatal_coded(
                req,
                format!(
                    "{} says its stored copy of the data is damaged ({}){}; trying again \
                     cannot help: the server's administrator should run `git xet scrub`",
                    req.server,
                    status_text(status),
                    says.suffix()
                ),
                says.code,
            ));
        }
        Screened::Failure(Failure::Retry {
            reason: format!(
                "{} answered {}{}",
                req.server,
                status_text(status),
                says.suffix()
            ),
            retry_after: after,
            code: says.code,
        })
    }

    /// After a failure worth a retry (`reason`): waits before attempt `attempt + 1` (as long
    /// as the retry policy says, `retry_after` if the server asked), telling the user when the
    /// wait has become long; or, when the policy's attempts or horizon are spent, the error.
    async fn wait_to_retry(
        &self,
        req: &Request,
        attempt: u32,
        started: Instant,
        reason: String,
        retry_after: Option<Duration>,
        code: Option<ErrorCode>,
    ) -> Result<(), TargetError> {
        let elapsed = started.elapsed();
        if !self.retry.should_retry(attempt, elapsed) {
            let message = if attempt > 1 {
                format!(
                    "{reason} (after {attempt} attempts over {} s)",
                    elapsed.as_secs()
                )
            } else {
                reason
            };
            return Err(TargetError::Remote {
                what: req.what.clone(),
                message,
                retryable: true,
                code,
            });
        }
        let delay = self.retry.delay(attempt, retry_after);
        if elapsed + delay >= SLOW_NOTICE_AFTER {
            self.tell_slow(&req.what, &reason);
        }
        tracing::warn!(
            attempt,
            elapsed_ms = elapsed.as_millis() as u64,
            delay_ms = delay.as_millis() as u64,
            url = %req.shown_url,
            "{}: {reason}; retrying",
            req.what
        );
        tokio::time::sleep(delay).await;
        Ok(())
    }

    /// Tells [`RemoteConfig::on_slow`] (once) that `what` keeps failing with `reason`.
    fn tell_slow(&self, what: &str, reason: &str) {
        let notice = self.on_slow.lock().ok().and_then(|mut n| n.take());
        if let Some(SlowNotice(tell)) = notice {
            tell(&format!(
                "{what}: {reason}; still trying, for up to {} s in all (GIT_XET_RETRY_SECS sets \
                 how long)",
                self.retry.horizon.as_secs()
            ));
        }
    }

    /// One reconstruction request (v2 or v1).
    async fn ask_reconstruction(
        &self,
        v2: bool,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Answer, TargetError> {
        let version = if v2 { "v2" } else { "v1" };
        let what = match range {
            Some((s, e)) => format!("planning bytes {s}-{e} of file {file}"),
            None => format!("planning the download of file {file}"),
        };
        let mut req = self.cas_request(
            Method::GET,
            &format!("/{version}/reconstructions/{file}"),
            what,
        );
        req.range = range;
        let req = &req;
        Ok(attempts!(self, req, None, |resp| async {
            let status = resp.status();
            match status {
                StatusCode::OK => {}
                StatusCode::NOT_FOUND => {
                    let says = server_says(resp).await;
                    return Ok(if says.code == Some(ErrorCode::FileNotFound) || !v2 {
                        Answer::FileUnknown
                    } else {
                        Answer::Unsupported
                    });
                }
                StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED => {
                    return Ok(Answer::Unsupported)
                }
                StatusCode::RANGE_NOT_SATISFIABLE => {
                    let size = content_range(&resp).and_then(|c| c.total);
                    let (s, _) = range.unwrap_or((0, 0));
                    let size = size.map_or(String::new(), |n| format!(" ({n} bytes)"));
                    return Err(fatal(
                        req,
                        format!(
                            "{} answered 416: byte {s} is at or past the end of the file{size}",
                            req.server
                        ),
                    ));
                }
                _ => return Err(refused(req, resp, "").await),
            }
            let body = read_body(req, resp, MAX_RECONSTRUCTION_JSON).await?;
            let parsed = if v2 {
                serde_json::from_slice::<ReconstructionV2>(&body)
            } else {
                serde_json::from_slice::<ReconstructionV1>(&body).map(ReconstructionV1::into_v2)
            };
            let invalid = |e: String| {
                fatal(
                    req,
                    format!(
                        "{} sent an unusable {version} reconstruction: {e}",
                        req.server
                    ),
                )
            };
            let json = parsed.map_err(|e| invalid(e.to_string()))?;
            let plan = json
                .into_plan(range.map(|(s, _)| s))
                .map_err(|e| invalid(e.0))?;
            Ok(Answer::Plan(plan))
        }
        .await))
    }
}

impl AsyncRemoteCas {
    async fn ask_reconstructions(
        &self,
        files: &[FileHash],
    ) -> Result<Option<std::collections::BTreeMap<FileHash, ReconstructionPlan>>, TargetError> {
        let query: Vec<String> = files.iter().map(|f| format!("file_id={f}")).collect();
        let req = self.cas_request(
            Method::GET,
            &format!("/v1/reconstructions?{}", query.join("&")),
            format!("planning the download of {} files", files.len()),
        );
        let req = &req;
        Ok(attempts!(self, req, None, |resp| async {
            match resp.status() {
                StatusCode::OK => {}
                StatusCode::NOT_FOUND
                | StatusCode::METHOD_NOT_ALLOWED
                | StatusCode::NOT_IMPLEMENTED => return Ok(None),
                _ => return Err(refused(req, resp, "").await),
            }
            let body = read_body(req, resp, MAX_RECONSTRUCTION_JSON).await?;
            let invalid = |e: String| {
                fatal(
                    req,
                    format!("{} sent an unusable batch reconstruction: {e}", req.server),
                )
            };
            let json = serde_json::from_slice::<xet_protocol::wire::BatchReconstructionV1>(&body)
                .map_err(|e| invalid(e.to_string()))?;
            json.into_plans().map(Some).map_err(|e| invalid(e.0))
        }
        .await))
    }
}

/// The `Authorization` value of `r`'s current token, if it has one.
fn current_bearer(r: &RefreshingToken) -> Option<String> {
    r.lock()
        .token
        .as_ref()
        .map(|t| format!("Bearer {}", t.expose()))
}

/// The answer of a token refresh route: a [`CasTokenInfo`], or a final error saying why not.
async fn token_info(req: &Request, resp: Response) -> Result<CasTokenInfo, Failure> {
    match resp.status() {
        StatusCode::OK => {
            parse_json(req, resp, r#"a token ({"casUrl","accessToken","exp"})"#).await
        }
        status @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
            let says = server_says(resp).await;
            let message = format!(
                "{} refused the credential ({}){}: check the git credentials for this remote",
                req.server,
                status_text(status),
                says.suffix()
            );
            Err(fatal_coded(req, message, says.code))
        }
        _ => Err(refused(req, resp, "").await),
    }
}

/// A final error of `req`.
fn fatal(req: &Request, message: String) -> Failure {
    fatal_coded(req, message, None)
}

/// A final error of `req` with the server's error code.
fn fatal_coded(req: &Request, message: String, code: Option<ErrorCode>) -> Failure {
    Failure::Fatal(TargetError::Remote {
        what: req.what.clone(),
        message,
        retryable: false,
        code,
    })
}

/// The final error for an unexpected status (never 401, 408, 429 or 5xx: [`Tries::answer`]
/// handles those). `hint_403` is added to a 403.
async fn refused(req: &Request, resp: Response, hint_403: &str) -> Failure {
    let status = resp.status();
    let says = server_says(resp).await;
    let message = match status {
        StatusCode::FORBIDDEN if !hint_403.is_empty() => format!(
            "{} refused the request ({}){}; {hint_403}",
            req.server,
            status_text(status),
            says.suffix()
        ),
        StatusCode::FORBIDDEN => format!(
            "{} refused the request ({}){}; the access token does not allow it",
            req.server,
            status_text(status),
            says.suffix()
        ),
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "{} refused the request as too large ({}){}",
            req.server,
            status_text(status),
            says.suffix()
        ),
        _ => format!(
            "{} answered {}{}",
            req.server,
            status_text(status),
            says.suffix()
        ),
    };
    fatal_coded(req, message, says.code)
}

async fn parse_json<T: serde::de::DeserializeOwned>(
    req: &Request,
    resp: Response,
    shape: &str,
) -> Result<T, Failure> {
    let body = read_body(req, resp, MAX_SMALL_JSON).await?;
    serde_json::from_slice(&body).map_err(|e| {
        fatal(
            req,
            format!("{} did not answer with {shape}: {e}", req.server),
        )
    })
}

const WRITE_HINT: &str = "uploads need an access token with write access";

/// The answer to an upload of a `what` ("xorb", "shard"): its JSON body (`shape`) on 200 or
/// 201; a 400 is the server rejecting the object (with its error code), any other status a
/// refusal.
async fn upload_answer<T: serde::de::DeserializeOwned>(
    req: &Request,
    resp: Response,
    what: &str,
    shape: &str,
) -> Result<T, Failure> {
    match resp.status() {
        StatusCode::OK | StatusCode::CREATED => parse_json(req, resp, shape).await,
        StatusCode::BAD_REQUEST => {
            let says = server_says(resp).await;
            Err(fatal_coded(
                req,
                format!("{} rejected the {what}{}", req.server, says.suffix()),
                says.code,
            ))
        }
        _ => Err(refused(req, resp, WRITE_HINT).await),
    }
}

/// The operations of [`CasTarget`] (the blocking [`RemoteCas`] implements the trait over them).
impl AsyncRemoteCas {
    /// `POST /v1/shards`: registers a shard (see [`CasTarget::register_shard`]).
    pub async fn register_shard(&self, shard: &[u8]) -> Result<(), TargetError> {
        let mut req = self.cas_request(
            Method::POST,
            "/v1/shards",
            format!("registering a shard of {} bytes", shard.len()),
        );
        req.timeout = self.upload_timeout(shard.len()).max(SHARD_TIMEOUT);
        req.body = Some(Bytes::copy_from_slice(shard));
        let req = &req;
        attempts!(self, req, None, |resp| {
            let answer: Result<ShardRegistered, Failure> =
                upload_answer(req, resp, "shard", "{\"result\": 0 | 1}").await;
            answer.and_then(|answer| match answer.result {
                0 | 1 => Ok(()),
                n => Err(fatal(
                    req,
                    format!("{} answered an unknown result {n}", req.server),
                )),
            })
        });
        Ok(())
    }

    /// `GET /v1/chunks/default/{chunk}`: a shard naming `chunk`, if the server has one (see
    /// [`CasTarget::dedup_query`]).
    pub async fn dedup_query(&self, chunk: &ChunkHash) -> Result<Option<Shard>, TargetError> {
        let req = self.cas_request(
            Method::GET,
            &format!("/v1/chunks/{DEDUP_PREFIX}/{chunk}"),
            format!("asking for chunk {chunk} (global dedup)"),
        );
        let req = &req;
        Ok(attempts!(self, req, None, |resp| async {
            match resp.status() {
                StatusCode::OK => {
                    self.note_dense_keys(resp.headers());
                    let body = read_body(req, resp, MAX_SHARD_SIZE).await?;
                    Shard::from_bytes(&body).map(Some).map_err(|e| {
                        fatal(
                            req,
                            format!("{} answered with an invalid shard: {e}", req.server),
                        )
                    })
                }
                StatusCode::NOT_FOUND => {
                    self.note_dense_keys(resp.headers());
                    Ok(None)
                }
                _ => Err(refused(req, resp, "").await),
            }
        }
        .await))
    }

    /// See [`CasTarget::dense_key_modulus`].
    pub fn dense_key_modulus(&self) -> Option<u64> {
        match self.dense_keys.load(Ordering::Relaxed) {
            0 => None,
            m => Some(m),
        }
    }

    /// The file stored intact for SHA-256 `oid`, and its size (see
    /// [`CasTarget::file_by_sha256`]).
    pub async fn file_by_sha256(
        &self,
        oid: &LfsOid,
    ) -> Result<Option<(FileHash, u64)>, TargetError> {
        // A file the server holds damaged is not "stored": uploading it again repairs it. Nor
        // is one whose SHA-256 is only an unchecked claim.
        Ok(self
            .lookup_oid(oid, false)
            .await?
            .filter(|found| found.intact && found.sha256_checked)
            .map(|found| (found.file, found.size)))
    }

    /// See [`CasTarget::checks_sha256_claims`].
    pub fn checks_sha256_claims(&self) -> bool {
        self.checks_claims.load(Ordering::Relaxed)
    }
}

/// What an oid lookup found.
struct FoundOid {
    file: FileHash,
    size: u64,
    intact: bool,
    sha256_checked: bool,
}

impl AsyncRemoteCas {
    /// Keeps the dense-key modulus a dedup answer announced (0 when it announced none, or one
    /// this client cannot use).
    fn note_dense_keys(&self, headers: &HeaderMap) {
        let modulus = headers
            .get(wire::DENSE_KEYS_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .and_then(xet_format::dedup::RunProbes::usable_modulus)
            .unwrap_or(0);
        self.dense_keys.store(modulus, Ordering::Relaxed);
    }

    /// `POST /v1/xorbs/default/{xorb}`, telling `sent` how much of the body went out; the
    /// body's buffer comes back when the connection let go of every piece of it (see
    /// [`CasTarget::put_xorb_with_progress`]).
    pub async fn put_xorb(
        &self,
        xorb: XorbHash,
        body: Vec<u8>,
        sent: Option<SentBytes>,
    ) -> Result<XorbPut, TargetError> {
        let mut req = self.cas_request(
            Method::POST,
            &format!("/v1/xorbs/default/{xorb}"),
            format!("uploading xorb {xorb}"),
        );
        req.sent = sent;
        req.timeout = self.upload_timeout(body.len());
        // `Bytes` from the vector takes it over without copying; retries clone the handle.
        req.body = Some(Bytes::from(body));
        let sending = &req;
        let inserted = attempts!(self, sending, None, |resp| {
            upload_answer::<XorbUploaded>(sending, resp, "xorb", "{\"was_inserted\": bool}")
                .await
                .map(|answer| answer.was_inserted)
        });
        // Unique once the connection dropped its pieces; otherwise it is not waited for.
        let buffer = req.body.take().filter(Bytes::is_unique).map(Vec::from);
        Ok(XorbPut { inserted, buffer })
    }

    /// `GET /v1/lfs-files/{oid}`: the file registered for `oid`, its size, and whether the
    /// server holds it intact (servers that do not say are taken at their word).
    /// With `with_plan`, asks for the reconstruction of a small file along, and keeps it for
    /// the [`Endpoint::reconstruction`] that follows (see [`Self::take_plan`]). Without
    /// `with_plan` (an upload's question) the server answers from its index as it is
    /// (`fresh=index`): on shared storage a miss would otherwise list what the other nodes
    /// registered, once per new file, and a miss here only costs an upload.
    async fn lookup_oid(
        &self,
        oid: &LfsOid,
        with_plan: bool,
    ) -> Result<Option<FoundOid>, TargetError> {
        let query = if with_plan {
            "?reconstruction=v2"
        } else {
            "?fresh=index"
        };
        let req = self.cas_request(
            Method::GET,
            &format!("/v1/lfs-files/{oid}{query}"),
            format!("looking up SHA-256 {oid}"),
        );
        let req = &req;
        Ok(attempts!(self, req, None, |resp| async {
            if resp
                .headers()
                .get(wire::CHECKS_SHA256_HEADER)
                .is_some_and(|v| v.as_bytes() == b"1")
            {
                self.checks_claims.store(true, Ordering::Relaxed);
            }
            self.oid_answer(oid, req, resp).await
        }
        .await))
    }

    async fn oid_answer(
        &self,
        oid: &LfsOid,
        req: &Request,
        resp: Response,
    ) -> Result<Option<FoundOid>, Failure> {
        match resp.status() {
            StatusCode::OK => {
                let answer: LfsFile =
                    parse_json(req, resp, "{\"oid\", \"file_hash\", \"size\"}").await?;
                let file = answer.file_hash;
                if answer.oid != *oid {
                    return Err(fatal(
                        req,
                        format!("{} answered about another oid ({})", req.server, answer.oid),
                    ));
                }
                if let Some(v2) = answer.reconstruction {
                    match v2.into_plan(None) {
                        Ok(plan) if plan.file_size == answer.size => self.keep_plan(file, plan),
                        Ok(_) => tracing::debug!(%oid, "ignoring a plan of another size"),
                        Err(e) => tracing::debug!(%oid, "ignoring an unusable plan: {}", e.0),
                    }
                }
                Ok(Some(FoundOid {
                    file,
                    size: answer.size,
                    intact: answer.intact.unwrap_or(true),
                    sha256_checked: answer.sha256_checked.unwrap_or(true),
                }))
            }
            StatusCode::NOT_FOUND
            | StatusCode::METHOD_NOT_ALLOWED
            | StatusCode::NOT_IMPLEMENTED => Ok(None),
            _ => Err(refused(req, resp, "").await),
        }
    }
}

/// Plans that came with an oid lookup, kept for the download that follows it.
const KEPT_PLANS: usize = 16;

impl AsyncRemoteCas {
    fn keep_plan(&self, file: FileHash, plan: ReconstructionPlan) {
        let mut plans = self.plans.lock_anyway();
        plans.retain(|(f, _)| *f != file);
        if plans.len() == KEPT_PLANS {
            plans.pop_front();
        }
        plans.push_back((file, plan));
    }

    /// The plan of `file` an oid lookup brought along, once.
    fn take_plan(&self, file: &FileHash) -> Option<ReconstructionPlan> {
        let mut plans = self.plans.lock_anyway();
        let at = plans.iter().position(|(f, _)| f == file)?;
        plans.remove(at).map(|(_, p)| p)
    }
}

/// The xorb ranges of [`XorbSource`] (the blocking [`RemoteCas`] implements the trait over
/// them, reading a local directory store's files first).
impl AsyncRemoteCas {
    /// Bytes `range` of the stored `xorb` (see [`XorbSource::read_xorb_range`]).
    pub async fn read_xorb_range(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
    ) -> Result<Vec<u8>, TargetError> {
        let (start, end) = (*range.bytes.start(), *range.bytes.end());
        // Room for the whole range at once (a multi-MiB range would otherwise be copied each
        // time the buffer doubles), from the kept buffers.
        let want = end.saturating_sub(start).saturating_add(1);
        let room = usize::try_from(want.min(MAX_RANGE_ROOM)).unwrap_or(0);
        let mut buf = xet_protocol::util::buffers::take(room);
        self.stream_xorb_range(xorb, range, &mut |offset, piece| {
            // A retry starts again from the range's first byte.
            buf.truncate(usize::try_from(offset).unwrap_or(usize::MAX));
            buf.extend_from_slice(piece);
            ControlFlow::Continue(())
        })
        .await?;
        Ok(buf)
    }
}

/// Checks a 206 answer's `Content-Range` against bytes `start..=end` asked for: a range that
/// stops short is a damaged copy on the server (`damaged`), any other range is wrong.
fn check_content_range(
    req: &Request,
    resp: &Response,
    (start, end): (u64, u64),
    damaged: &(dyn Fn(&Request, String) -> Failure + Sync),
) -> Result<(), Failure> {
    let Some(c) = content_range(resp) else {
        return Ok(());
    };
    match c.range {
        Some((s, e)) if s == start && e < end => {
            let total = c.total.map_or(String::new(), |n| format!(" of {n}"));
            Err(damaged(
                req,
                format!(
                    "{} sent bytes {s}-{e}{total} when asked for {start}-{end}",
                    req.server
                ),
            ))
        }
        Some((s, e)) if (s, e) != (start, end) => Err(fatal(
            req,
            format!(
                "{} sent bytes {s}-{e} of {}, not the bytes asked for",
                req.server, req.shown_url
            ),
        )),
        _ => Ok(()),
    }
}

/// What a 416 answer to bytes `start..=end` means: a stored object shorter than that is a
/// damaged copy (`damaged`); otherwise the server's refusal, with what it says.
async fn unsatisfiable(
    req: &Request,
    resp: Response,
    (start, end): (u64, u64),
    damaged: &(dyn Fn(&Request, String) -> Failure + Sync),
) -> Failure {
    let total = content_range(&resp).and_then(|c| c.total);
    let says = server_says(resp).await;
    match total {
        Some(n) if n <= end => damaged(
            req,
            format!(
                "{} holds {n} bytes and cannot serve bytes {start}-{end}",
                req.server
            ),
        ),
        _ => fatal_coded(
            req,
            format!(
                "{} cannot serve bytes {start}-{end} (416){}",
                req.server,
                says.suffix()
            ),
            says.code,
        ),
    }
}

/// The attempts of one request, with retries: [`Tries::answer`] gives the next answer whose
/// status is not worth a retry (nor the 401 that refreshes the token), for the request's own
/// handling, and [`Tries::settle`] takes what that handling made of it: a value, or a failure
/// (a final error, or a wait before the next attempt). A loop at each request rather than one
/// function taking the handling as an async closure: the futures of closures that borrow are
/// not proven `Send`, and an async program needs to spawn them.
struct Tries<'a> {
    cas: &'a AsyncRemoteCas,
    req: &'a Request,
    authorization: Option<&'a str>,
    started: Instant,
    attempt: u32,
    /// Whether a 401 already refreshed the token (once per request).
    refreshed: bool,
}

impl Tries<'_> {
    /// The next answer for the request's own handling (after retries of what the server or
    /// the network got wrong), or the final error.
    async fn answer(&mut self) -> Result<Response, TargetError> {
        let (cas, req) = (self.cas, self.req);
        let no_headers = HeaderMap::new();
        loop {
            self.attempt += 1;
            let (auth, extra) = match req.auth {
                Auth::Cas => (cas.bearer().await?, &cas.session),
                Auth::None => (self.authorization.map(String::from), &no_headers),
            };
            let client = cas.client_for(req, auth.as_deref())?;
            let failure = match send(client, req, auth.as_deref(), extra).await {
                Err(e) => transport_failure(req, &e, cas.proxies.proxy_for_str(&req.url)),
                Ok(resp) => {
                    if resp.status() == StatusCode::UNAUTHORIZED
                        && req.auth == Auth::Cas
                        && !self.refreshed
                        && matches!(cas.token, TokenSource::Refreshing(_))
                    {
                        self.refreshed = true;
                        tracing::warn!(
                            url = %req.shown_url,
                            "{} refused the access token (401); refreshing it and trying again",
                            req.server
                        );
                        drop(resp);
                        cas.refresh_rejected(auth.as_deref()).await?;
                        self.attempt -= 1;
                        continue;
                    }
                    match cas.server_failure(req, resp).await {
                        Screened::Failure(failure) => failure,
                        Screened::Pass(resp) => return Ok(resp),
                    }
                }
            };
            self.wait_or_fail(failure).await?;
        }
    }

    /// What the request's handling made of an answer: its value, or `None` once the wait
    /// before the next attempt is over (a failure worth a retry), or the final error.
    async fn settle<T>(&mut self, handled: Result<T, Failure>) -> Result<Option<T>, TargetError> {
        match handled {
            Ok(value) => Ok(Some(value)),
            Err(failure) => self.wait_or_fail(failure).await.map(|()| None),
        }
    }

    async fn wait_or_fail(&mut self, failure: Failure) -> Result<(), TargetError> {
        match failure {
            Failure::Fatal(e) => Err(e),
            Failure::Retry {
                reason,
                retry_after,
                code,
            } => {
                self.cas
                    .wait_to_retry(
                        self.req,
                        self.attempt,
                        self.started,
                        reason,
                        retry_after,
                        code,
                    )
                    .await
            }
        }
    }
}

/// What [`AsyncRemoteCas::server_failure`] made of an answer.
enum Screened {
    /// A failure of the server, whatever the request.
    Failure(Failure),
    /// An answer for the request's own handling.
    Pass(Response),
}

/// The most room [`AsyncRemoteCas::read_xorb_range`] sets aside before a range's bytes arrive: a
/// stored xorb with its footer (the reconstruction's ranges are never longer).
const MAX_RANGE_ROOM: u64 = xet_format::xorb::MAX_ACCEPTED_BODY + (1 << 20);

impl AsyncRemoteCas {
    /// Fetches bytes `range` of the stored `xorb` over HTTP, handing them to `sink` as they
    /// arrive (see [`XorbSource::stream_xorb_range`]); an answer shorter than the range is a
    /// damaged copy on the server.
    ///
    /// The future is `Send` when `sink` is (a [`RangeSink`] trait object is not).
    pub async fn stream_xorb_range<S>(
        &self,
        xorb: &XorbHash,
        range: &FetchRange,
        sink: &mut S,
    ) -> Result<(), TargetError>
    where
        S: FnMut(u64, &[u8]) -> ControlFlow<()> + ?Sized,
    {
        let req = self.range_request(xorb, range)?;
        let (start, end) = (*range.bytes.start(), *range.bytes.end());
        let want = end - start + 1;
        // A stored xorb shorter than the reconstruction says shows as a short range, a short
        // body or a 416: the server's copy is damaged, which no retry mends.
        let damaged = |req: &Request, detail: String| {
            fatal(
                req,
                format!(
                    "the server's copy of xorb {xorb} is damaged: it is shorter than its \
                     reconstruction says ({detail}); the server's administrator should run \
                     `git xet scrub`"
                ),
            )
        };
        let req = &req;
        attempts!(self, req, None, |resp| async {
            match resp.status() {
                StatusCode::PARTIAL_CONTENT => {
                    check_content_range(req, &resp, (start, end), &damaged)?;
                    match stream_body(req, resp, 0, want, true, sink).await? {
                        Some(got) if got < want => Err(damaged(
                            req,
                            format!("{} sent {got} bytes of the {want} asked for", req.server),
                        )),
                        _ => Ok(()),
                    }
                }
                StatusCode::OK => {
                    // The whole object (a server that ignores Range): hand on the bytes
                    // asked for.
                    match stream_body(req, resp, start, want, false, sink).await? {
                        Some(got) if got < want => Err(damaged(
                            req,
                            format!(
                                "{} sent the whole xorb, {} bytes, which does not reach byte {end}",
                                req.server,
                                start + got
                            ),
                        )),
                        _ => Ok(()),
                    }
                }
                StatusCode::RANGE_NOT_SATISFIABLE => {
                    Err(unsatisfiable(req, resp, (start, end), &damaged).await)
                }
                StatusCode::FORBIDDEN => {
                    let says = server_says(resp).await;
                    Err(fatal(
                        req,
                        format!(
                "{} refused the presigned URL {} (403){}: it has probably expired; plan \
                 the download again",
                req.server,
                req.shown_url,
                says.suffix()
            ),
                    ))
                }
                StatusCode::NOT_FOUND => Err(Failure::Fatal(TargetError::NotFound {
                    what: format!("xorb {xorb} at {}", req.shown_url),
                })),
                _ => Err(refused(req, resp, "").await),
            }
        }
        .await);
        Ok(())
    }
}

impl AsyncRemoteCas {
    /// The GET of `range` of `xorb` from the URL the reconstruction gave for it (no credential
    /// of ours: the URL is presigned); refused before any request when there is no URL or the
    /// range is inverted.
    fn range_request(&self, xorb: &XorbHash, range: &FetchRange) -> Result<Request, TargetError> {
        let (start, end) = (*range.bytes.start(), *range.bytes.end());
        let what = format!("downloading bytes {start}-{end} of xorb {xorb}");
        let refuse = |what: String, message: &str| TargetError::Remote {
            what,
            message: message.into(),
            retryable: false,
            code: None,
        };
        let Some(url) = range.url.as_deref() else {
            return Err(refuse(
                what,
                "the reconstruction gave no URL for this range",
            ));
        };
        if end < start {
            return Err(refuse(what, "the range ends before it starts"));
        }
        Ok(Request {
            method: Method::GET,
            url: url.to_string(),
            shown_url: shown(url),
            server: format!("xorb storage {}", origin(url)),
            what,
            auth: Auth::None,
            body: None,
            range: Some((start, end)),
            timeout: self.timeout,
            sent: None,
        })
    }
}

/// The operations of [`Endpoint`] (the blocking [`RemoteCas`] implements the trait over them).
impl AsyncRemoteCas {
    /// The plan of bytes `range` (inclusive) of `file`, with presigned URLs; see
    /// [`ReconstructionV2::into_plan`] for what `file_size` means for a ranged plan.
    pub async fn reconstruction(
        &self,
        file: &FileHash,
        range: Option<(u64, u64)>,
    ) -> Result<Option<ReconstructionPlan>, TargetError> {
        if file.is_zero() {
            return Ok(Some(ReconstructionPlan::default()));
        }
        if range.is_none() {
            if let Some(plan) = self.take_plan(file) {
                return Ok(Some(plan));
            }
        }
        if let Some((s, e)) = range {
            if e < s {
                return Err(TargetError::Remote {
                    what: format!("planning bytes {s}-{e} of file {file}"),
                    message: "the range ends before it starts".into(),
                    retryable: false,
                    code: None,
                });
            }
        }
        let mut fell_back = false;
        if !self.v1_only.load(Ordering::Relaxed) {
            match self.ask_reconstruction(true, file, range).await? {
                Answer::Plan(p) => return Ok(Some(p)),
                Answer::FileUnknown => return Ok(None),
                Answer::Unsupported => fell_back = true,
            }
        }
        match self.ask_reconstruction(false, file, range).await? {
            Answer::Plan(p) => {
                if fell_back && !self.v1_only.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        cas = %self.cas_url,
                        "the CAS server offers no v2 reconstructions; using v1"
                    );
                }
                Ok(Some(p))
            }
            Answer::FileUnknown => Ok(None),
            Answer::Unsupported => Err(TargetError::Remote {
                what: format!("planning the download of file {file}"),
                message: format!(
                    "CAS server {} offers no reconstruction API (v2 and v1 refused)",
                    self.cas_url
                ),
                retryable: false,
                code: None,
            }),
        }
    }

    /// `GET /v1/reconstructions?file_id=…` (the batch query); `None` when the server does not
    /// offer it.
    pub async fn reconstructions(
        &self,
        files: &[FileHash],
    ) -> Result<Option<std::collections::BTreeMap<FileHash, ReconstructionPlan>>, TargetError> {
        self.ask_reconstructions(files).await
    }

    /// The file registered for SHA-256 `oid` and its size (see [`Endpoint::locate_oid`]); the
    /// plan of a small file comes along, for the [`Self::reconstruction`] that follows.
    pub async fn locate_oid(&self, oid: &LfsOid) -> Result<Option<(FileHash, u64)>, TargetError> {
        Ok(self
            .lookup_oid(oid, true)
            .await?
            .map(|found| (found.file, found.size)))
    }

    /// `GET /v1/file-chunks/{file}` (`git xet serve`'s extension); `None` on 404 (unknown file,
    /// or a server without the route) and on 413 (a list too long to be given).
    pub async fn file_chunks(&self, file: &FileHash) -> Result<Option<Vec<ChunkRef>>, TargetError> {
        if file.is_zero() {
            return Ok(Some(Vec::new()));
        }
        let req = self.cas_request(
            Method::GET,
            &format!("/v1/file-chunks/{file}"),
            format!("listing the chunks of file {file}"),
        );
        let req = &req;
        Ok(attempts!(self, req, None, |resp| async {
            match resp.status() {
                StatusCode::OK => {
                    let limit = (xet_protocol::wire::MAX_LISTED_CHUNKS
                        * xet_protocol::wire::FILE_CHUNK_RECORD)
                        as u64;
                    let body = read_body(req, resp, limit).await?;
                    xet_protocol::wire::decode_file_chunks(&body)
                        .map(Some)
                        .map_err(|e| fatal(req, format!("{} answered {e}", req.server)))
                }
                StatusCode::NOT_FOUND | StatusCode::PAYLOAD_TOO_LARGE => Ok(None),
                _ => Err(refused(req, resp, "").await),
            }
        }
        .await))
    }

    /// What the journal and messages call this server (see [`Endpoint::describe`]).
    pub fn describe(&self) -> String {
        self.name.clone()
    }
}
