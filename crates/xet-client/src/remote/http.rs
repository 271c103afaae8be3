//! The HTTP plumbing of the remote client: the retry policy, sending one attempt of a request,
//! classifying what went wrong (worth retrying or not), reading bounded bodies, and turning a
//! refusal into a sentence a user can act on.

use std::sync::Arc;
use std::time::Duration;
use xet_protocol::wire::ErrorCode;

use bytes::{Buf, Bytes};
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_RANGE, RANGE, RETRY_AFTER};
use reqwest::Client;
use reqwest::{Method, StatusCode};
use tokio::runtime::Runtime;

use xet_protocol::util::error::root_cause_text;
use xet_protocol::wire::ErrorBody;

/// How often and how patiently a request is tried.
///
/// Connection errors, timeouts, broken bodies, 408, 429 and 5xx (except 501, 505 and 507, and
/// a server that says its copy is damaged) are retried with exponential backoff and full
/// jitter: before retry `n` (1-based) the client sleeps a random duration in
/// `[0, min(max_delay, base_delay · 2^(n-1))]`, or what `Retry-After` asks (seconds or an
/// HTTP date, at most `max_retry_after`). Retries go on until `horizon` has passed since the
/// first attempt, so that a server restart (seconds to a minute of refused connections and
/// 503s) does not fail a push; `max_attempts` caps them, and `min_attempts` are made however
/// long each took (a request that timed out after minutes still gets a second chance). Every
/// other status is final at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, including the first (at least 1).
    pub max_attempts: u32,
    /// Attempts made even when the horizon has passed (at most `max_attempts`).
    pub min_attempts: u32,
    /// No retry starts once this much time has passed since the first attempt.
    pub horizon: Duration,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Upper bound on a server's `Retry-After`.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 250 ms doubling to 10 s, for about 60 s (at most 40 attempts, at least 3).
    fn default() -> Self {
        Self {
            max_attempts: 40,
            min_attempts: 3,
            horizon: Duration::from_secs(60),
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            min_attempts: 1,
            ..Self::default()
        }
    }

    /// Exactly `max_attempts` attempts with millisecond delays (for tests).
    pub fn quick(max_attempts: u32) -> Self {
        Self {
            max_attempts,
            min_attempts: max_attempts,
            horizon: Duration::from_secs(60),
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_retry_after: Duration::from_millis(5),
        }
    }

    /// The default policy retrying for `horizon` instead of 60 s.
    pub fn for_horizon(horizon: Duration) -> Self {
        Self {
            horizon,
            ..Self::default()
        }
    }

    /// The upper bound of the sleep before retry `n` (1-based).
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    /// The sleep before retry `n` (1-based): uniformly random up to [`Self::ceiling`], or the
    /// server's `Retry-After` (capped) when it sent one.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(after) = retry_after {
            return after.min(self.max_retry_after);
        }
        let ceiling = u64::try_from(self.ceiling(retry).as_nanos()).unwrap_or(u64::MAX);
        if ceiling == 0 {
            return Duration::ZERO;
        }
        let r = getrandom::u64().unwrap_or_else(|_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos().into())
                .unwrap_or(0)
        });
        Duration::from_nanos(r % ceiling.saturating_add(1))
    }

    /// After `attempts` attempts that failed with something worth retrying, the first of
    /// them `elapsed` ago: whether to try again.
    pub(crate) fn should_retry(&self, attempts: u32, elapsed: Duration) -> bool {
        if attempts >= self.attempts() {
            return false;
        }
        attempts < self.min_attempts.min(self.attempts()) || elapsed < self.horizon
    }

    pub(super) fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }
}

/// How a request authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Auth {
    /// The CAS bearer token (and the session id).
    Cas,
    /// Nothing (presigned URLs: an object store rejects extra credentials).
    None,
}

/// One request, as tried again on every attempt.
pub(super) struct Request {
    pub method: Method,
    pub url: String,
    /// The URL as shown to users: no query string (presigned signatures are credentials).
    pub shown_url: String,
    /// Who answers, for messages: "CAS server http://…", "token refresh route http://…".
    pub server: String,
    /// What is being done, for messages: "uploading xorb …".
    pub what: String,
    pub auth: Auth,
    pub body: Option<Bytes>,
    pub range: Option<(u64, u64)>,
    pub timeout: Duration,
    /// Told how many bytes of the body each attempt has handed to the connection so far
    /// (the body then goes out in pieces of [`BODY_PIECE`] bytes).
    pub sent: Option<xet_protocol::target::SentBytes>,
}

/// Bytes of a request body handed to the connection at a time when its progress is followed.
pub(super) const BODY_PIECE: usize = 256 << 10;

/// The result of one attempt that did not succeed.
pub(super) enum Failure {
    /// Worth another attempt: `reason` says why (a sentence naming the server).
    Retry {
        reason: String,
        retry_after: Option<Duration>,
        /// The server's error code, if its answer had one this client knows.
        code: Option<ErrorCode>,
    },
    /// Final.
    Fatal(xet_protocol::target::TargetError),
}

/// The URL without its query string or fragment ([`crate::url::without_query`]).
pub(super) fn shown(url: &str) -> String {
    crate::url::without_query(url).to_string()
}

/// The scheme, host and port of a URL ([`crate::url::origin`]); a URL without a host is
/// shown without its query.
pub fn origin(url: &str) -> String {
    crate::url::origin(url).unwrap_or_else(|| shown(url))
}

/// Redirects followed per request, at most.
pub(super) const MAX_REDIRECTS: usize = 10;

/// A redirect that would carry credentials to another origin.
#[derive(Debug, thiserror::Error)]
#[error(
    "redirected from {from} to another origin, {to}; not followed, since credentials are sent \
     only to the origin they were issued for"
)]
pub(super) struct CrossOriginRedirect {
    from: String,
    to: String,
}

/// The redirect policy of requests that carry a credential: same-origin redirects (scheme,
/// host and port all equal) are followed, up to [`MAX_REDIRECTS`]; any other is an error
/// ([`CrossOriginRedirect`]). reqwest's default would follow it, dropping `Authorization`
/// only when the host or port changes (not on a downgrade from https to http).
pub(super) fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first() else {
            return attempt.stop();
        };
        let (from, to) = (origin(first.as_str()), origin(attempt.url().as_str()));
        if from != to {
            attempt.error(CrossOriginRedirect { from, to })
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// The runtime the remote client's requests run on: a current-thread runtime without threads
/// of its own, driven by whichever caller is waiting on it (`block_on`). Each request is sent
/// and its body read on the thread that asked for it, with no hand-off to a client thread and
/// back (reqwest's blocking client costs about four context switches per small request, which
/// a fetch of many small objects paid for every object). Threads that wait at the same time
/// share its I/O driver: the one holding it polls every connection.
pub(super) fn runtime() -> std::io::Result<Arc<Runtime>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(Arc::new)
}

/// A response whose headers have arrived; its body is read piece by piece as it arrives.
pub(super) struct Response {
    inner: Option<reqwest::Response>,
    /// What is left of the last piece read.
    pending: Bytes,
}

impl Response {
    pub(super) fn status(&self) -> StatusCode {
        self.inner
            .as_ref()
            .map_or(StatusCode::INTERNAL_SERVER_ERROR, |r| r.status())
    }

    pub(super) fn headers(&self) -> &HeaderMap {
        static EMPTY: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(HeaderMap::new);
        self.inner.as_ref().map_or(&EMPTY, |r| r.headers())
    }

    /// Waits for the next piece of the body unless one is pending; false at its end.
    async fn fill(&mut self) -> std::io::Result<bool> {
        while self.pending.is_empty() {
            let Some(inner) = self.inner.as_mut() else {
                return Ok(false);
            };
            match inner.chunk().await {
                Ok(Some(piece)) => self.pending = piece,
                Ok(None) => return Ok(false),
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
        Ok(true)
    }

    /// Appends the rest of the body to `buf` until it holds more than `limit` bytes or the
    /// body ends, piece by piece as they arrive.
    async fn append_to(&mut self, buf: &mut Vec<u8>, limit: u64) -> std::io::Result<()> {
        while (buf.len() as u64) <= limit && self.fill().await? {
            let room =
                usize::try_from(limit.saturating_add(1) - buf.len() as u64).unwrap_or(usize::MAX);
            let n = room.min(self.pending.len());
            buf.extend_from_slice(&self.pending[..n]);
            self.pending.advance(n);
        }
        Ok(())
    }
}

/// Sends one attempt of `req`, with `authorization` as the `Authorization` value, on the
/// runtime that polls it (the caller's).
pub(super) async fn send(
    client: &Client,
    req: &Request,
    authorization: Option<&str>,
    extra: &HeaderMap,
) -> Result<Response, reqwest::Error> {
    let mut rb = client
        .request(req.method.clone(), &req.url)
        .timeout(req.timeout)
        .headers(extra.clone());
    if let Some(value) = authorization {
        rb = rb.header(AUTHORIZATION, value);
    }
    if let Some((s, e)) = req.range {
        rb = rb.header(RANGE, format!("bytes={s}-{e}"));
    }
    if let Some(body) = &req.body {
        match &req.sent {
            None => rb = rb.body(body.clone()),
            Some(sent) => {
                // Pieces of the same buffer (no copy), counted as the connection takes them;
                // the length is declared, so the body is not sent chunked.
                let sent = std::sync::Arc::clone(sent);
                let pieces: Vec<Bytes> = (0..body.len())
                    .step_by(BODY_PIECE)
                    .map(|at| body.slice(at..(at + BODY_PIECE).min(body.len())))
                    .collect();
                let mut total = 0u64;
                let stream = futures_util::stream::iter(pieces.into_iter().map(move |piece| {
                    total += piece.len() as u64;
                    sent(total);
                    Ok::<Bytes, std::io::Error>(piece)
                }));
                rb = rb
                    .header(reqwest::header::CONTENT_LENGTH, body.len())
                    .body(reqwest::Body::wrap_stream(stream));
            }
        }
    }
    let resp = rb.send().await?;
    Ok(Response {
        inner: Some(resp),
        pending: Bytes::new(),
    })
}

/// A certificate the client did not accept, found under a transport error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertProblem {
    /// Issued by a CA the client does not trust.
    UnknownIssuer,
    /// Not valid for the host name.
    WrongName,
    /// Expired, or not valid yet.
    Expired,
    /// A CA certificate presented as the server's own (a self-signed certificate such as
    /// `openssl req -x509` makes) that is not in the configured CA file.
    SelfSignedCa,
    /// Revoked, self-signed without trust, or otherwise refused.
    Other,
}

/// The certificate problem under `e`, if a TLS handshake refused the server's certificate.
pub fn cert_problem(e: &(dyn std::error::Error + 'static)) -> Option<CertProblem> {
    use rustls::CertificateError as C;
    let classify = |c: &C| match c {
        C::UnknownIssuer => CertProblem::UnknownIssuer,
        C::NotValidForName | C::NotValidForNameContext { .. } => CertProblem::WrongName,
        C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. } => {
            CertProblem::Expired
        }
        c if super::tls::is_ca_as_server_cert(c) => CertProblem::SelfSignedCa,
        _ => CertProblem::Other,
    };
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        // An io::Error's source() skips the error it wraps (itself often another io::Error):
        // look inside, layer by layer.
        let mut layer: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(l) = layer {
            if let Some(rustls::Error::InvalidCertificate(c)) = l.downcast_ref::<rustls::Error>() {
                return Some(classify(c));
            }
            layer = l
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|i| i as &(dyn std::error::Error + 'static));
        }
        next = err.source();
    }
    None
}

/// What to tell a user whose client refused `host`'s certificate for `problem`.
pub fn cert_advice(host: &str, problem: CertProblem) -> String {
    match problem {
        CertProblem::UnknownIssuer => format!(
            "the TLS certificate of {host} is issued by a CA this machine does not trust. If it is \
             your organisation's own CA, install it in the system's trust store, or point git at \
             it: `git config --global http.sslCAInfo /path/to/ca.pem` (or \
             `http.https://{host}/.sslCAInfo` for this server only; GIT_SSL_CAINFO for one command)"
        ),
        CertProblem::WrongName => format!(
            "the TLS certificate of {host} is not valid for that name: use the name the \
             certificate was issued for, or ask the server's administrator for a certificate \
             naming {host}"
        ),
        CertProblem::Expired => format!(
            "the TLS certificate of {host} has expired or is not valid yet (or this machine's clock \
             is wrong): the server's administrator must renew it"
        ),
        CertProblem::SelfSignedCa => format!(
            "the TLS certificate of {host} is self-signed (a CA certificate the server presents \
             as its own, as `openssl req -x509` makes). If you trust this server, give git that \
             very certificate: `git config --global http.sslCAInfo /path/to/its-cert.pem` (or \
             `http.https://{host}/.sslCAInfo` for this server only; GIT_SSL_CAINFO for one \
             command)"
        ),
        CertProblem::Other => format!(
            "the TLS certificate of {host} was refused; if you trust this server anyway, \
             `git config http.sslVerify false` turns checks off (unsafe)"
        ),
    }
}

/// What a transport error means; `proxy`: the proxy the request went through.
pub(super) fn transport_failure(
    req: &Request,
    e: &reqwest::Error,
    proxy: Option<&super::proxy::ProxyChoice>,
) -> Failure {
    if let Some(problem) = cert_problem(e) {
        // No retry mends a certificate: say what to do instead.
        let host = crate::url::origin(&req.url)
            .map(|o| {
                o.split_once("://")
                    .map_or(o.clone(), |(_, h)| h.to_string())
            })
            .unwrap_or_else(|| req.server.clone());
        return Failure::Fatal(xet_protocol::target::TargetError::Remote {
            what: req.what.clone(),
            message: format!("{}: {}", req.server, cert_advice(&host, problem)),
            retryable: false,
            code: Some(ErrorCode::TlsCertificate),
        });
    }
    if e.is_builder() {
        return Failure::Fatal(xet_protocol::target::TargetError::Remote {
            what: req.what.clone(),
            message: format!(
                "invalid request to {}: {}",
                req.shown_url,
                root_cause_text(e)
            ),
            retryable: false,
            code: None,
        });
    }
    if e.is_redirect() {
        return Failure::Fatal(xet_protocol::target::TargetError::Remote {
            what: req.what.clone(),
            message: format!("{}: {}", req.server, root_cause_text(e)),
            retryable: false,
            code: None,
        });
    }
    let reason = if e.is_timeout() {
        format!(
            "{} did not answer within {} s",
            req.server,
            req.timeout.as_secs()
        )
    } else if let (true, Some(proxy)) = (e.is_connect(), proxy) {
        // The connection that failed may be the proxy's: name it, and where it was set.
        format!(
            "cannot reach {} through the proxy {} (from {}): {}; check that the proxy is \
             running and reachable, or name the server in NO_PROXY to go around it",
            req.server,
            proxy.shown(),
            proxy.source,
            root_cause_text(e)
        )
    } else if e.is_connect() {
        format!("cannot reach {}: {}", req.server, root_cause_text(e))
    } else {
        format!(
            "connection to {} failed: {}",
            req.server,
            root_cause_text(e)
        )
    };
    Failure::Retry {
        reason,
        retry_after: None,
        code: None,
    }
}

/// Statuses worth another attempt: 408, 429 and 5xx, except 501 (the server does not offer
/// this), 505 and 507 (out of storage: waiting a minute will not free any).
pub(super) fn retryable_status(status: StatusCode) -> bool {
    (status.is_server_error()
        && !matches!(
            status,
            StatusCode::NOT_IMPLEMENTED
                | StatusCode::HTTP_VERSION_NOT_SUPPORTED
                | StatusCode::INSUFFICIENT_STORAGE
        ))
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

/// `Retry-After` of a response: delay-seconds or an HTTP date (RFC 9110 §10.2.3).
pub(super) fn retry_after(resp: &Response) -> Option<Duration> {
    let v = resp.headers().get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(v, std::time::SystemTime::now())
}

/// `Retry-After` as a delay from `now`: seconds, or an HTTP date (a date in the past is no
/// delay). Anything else is ignored.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A parsed `Content-Range: bytes S-E/LEN`: `range` is `None` for `bytes */LEN`, `total` for
/// `bytes S-E/*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ContentRange {
    pub range: Option<(u64, u64)>,
    pub total: Option<u64>,
}

/// The `Content-Range` of a response, if it has a well-formed one.
pub(super) fn content_range(resp: &Response) -> Option<ContentRange> {
    let v = resp.headers().get(CONTENT_RANGE)?.to_str().ok()?.trim();
    let rest = v.strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let total = total.trim().parse().ok();
    let range = match range.trim() {
        "*" => None,
        r => {
            let (s, e) = r.split_once('-')?;
            Some((s.trim().parse().ok()?, e.trim().parse().ok()?))
        }
    };
    Some(ContentRange { range, total })
}

/// Reads at most `limit` bytes of a body; more is an error (`Ok(Err)`); a broken connection is
/// worth a retry.
pub(super) async fn read_body(
    req: &Request,
    resp: Response,
    limit: u64,
) -> Result<Vec<u8>, Failure> {
    // Room for the whole body at once when its length is announced (a multi-MiB xorb range
    // would otherwise be copied each time the buffer doubles); never more than the limit.
    let announced = resp
        .headers()
        .get(reqwest::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(0)
        .min(limit);
    let mut buf = xet_protocol::util::buffers::take(usize::try_from(announced).unwrap_or(0));
    let mut resp = resp;
    if let Err(e) = resp.append_to(&mut buf, limit).await {
        return Err(Failure::Retry {
            reason: format!(
                "the answer of {} broke off after {} bytes: {}",
                req.server,
                buf.len(),
                root_cause_text(&e)
            ),
            retry_after: None,
            code: None,
        });
    }
    if buf.len() as u64 > limit {
        return Err(Failure::Fatal(xet_protocol::target::TargetError::Remote {
            what: req.what.clone(),
            message: format!(
                "{} sent an answer larger than the {limit} bytes expected",
                req.server
            ),
            retryable: false,
            code: None,
        }));
    }
    Ok(buf)
}

/// Hands a body to `sink` as its pieces arrive: the first `skip` bytes are dropped, then at
/// most `want` bytes go to `sink` with their offset (counted from `skip`). A body that goes on
/// past `skip + want` bytes is an error when `exact` (a range answer longer than asked for),
/// else the rest is left unread (a whole object of which a range was wanted). Returns the bytes
/// handed over (fewer than `want` if the body ended early), or `None` if `sink` stopped the
/// read. A broken connection is worth a retry.
pub(super) async fn stream_body<S>(
    req: &Request,
    mut resp: Response,
    skip: u64,
    want: u64,
    exact: bool,
    sink: &mut S,
) -> Result<Option<u64>, Failure>
where
    S: FnMut(u64, &[u8]) -> std::ops::ControlFlow<()> + ?Sized,
{
    let mut seen = 0u64; // bytes of the body read, skipped ones included
    let mut given = 0u64;
    loop {
        match resp.fill().await {
            Ok(true) => {}
            Ok(false) => return Ok(Some(given)),
            Err(e) => {
                return Err(Failure::Retry {
                    reason: format!(
                        "the answer of {} broke off after {seen} bytes: {}",
                        req.server,
                        root_cause_text(&e)
                    ),
                    retry_after: None,
                    code: None,
                })
            }
        }
        let piece = std::mem::take(&mut resp.pending);
        let from = skip.saturating_sub(seen).min(piece.len() as u64) as usize;
        seen += piece.len() as u64;
        let room = want - given;
        let useful = &piece[from..];
        let n = (useful.len() as u64).min(room) as usize;
        if n > 0 {
            if sink(given, &useful[..n]).is_break() {
                return Ok(None);
            }
            given += n as u64;
        }
        if n < useful.len() {
            if !exact {
                return Ok(Some(given));
            }
            return Err(Failure::Fatal(xet_protocol::target::TargetError::Remote {
                what: req.what.clone(),
                message: format!(
                    "{} sent an answer larger than the {want} bytes expected",
                    req.server
                ),
                retryable: false,
                code: None,
            }));
        }
    }
}

/// What a refusal's body says, for a message: `"<message> [<code>, request <id>]"`, the start
/// of a text body, or nothing. Never fails: the body is a courtesy.
pub(super) async fn server_says(mut resp: Response) -> ServerText {
    let mut buf = Vec::new();
    let _ = resp.append_to(&mut buf, 64 * 1024 - 1).await;
    ServerText::parse(&buf)
}

/// The text of a refusal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ServerText {
    /// The JSON `error` code, when the body was our JSON shape with a code this client knows
    /// (any other is only in `text`).
    pub code: Option<ErrorCode>,
    /// A sentence for the user (empty: the server said nothing useful).
    pub text: String,
    /// Whether the body was a JSON object.
    pub json: bool,
}

impl ServerText {
    pub fn parse(buf: &[u8]) -> Self {
        let clean = |s: &str| -> String {
            let s: String = s
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(300)
                .collect();
            s.trim().to_string()
        };
        if let Ok(body) = serde_json::from_slice::<ErrorBody>(buf) {
            if serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(buf).is_ok() {
                let mut text = match (&body.message, &body.error) {
                    (Some(m), _) => clean(m),
                    (None, Some(e)) => clean(e),
                    (None, None) => String::new(),
                };
                let mut notes = Vec::new();
                if let (Some(_), Some(code)) = (&body.message, &body.error) {
                    notes.push(clean(code));
                }
                if let Some(id) = &body.request_id {
                    notes.push(format!("request {}", clean(id)));
                }
                if !notes.is_empty() && !text.is_empty() {
                    text.push_str(&format!(" [{}]", notes.join(", ")));
                }
                return Self {
                    code: body.error.as_deref().and_then(ErrorCode::parse),
                    text,
                    json: true,
                };
            }
        }
        Self {
            code: None,
            text: clean(&String::from_utf8_lossy(buf)),
            json: false,
        }
    }

    /// `": <text>"`, or nothing.
    pub fn suffix(&self) -> String {
        if self.text.is_empty() {
            String::new()
        } else {
            format!(": {}", self.text)
        }
    }
}

/// `"503 Service Unavailable"`.
pub(super) fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(r) => format!("{} {r}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        assert_eq!(p.ceiling(1), Duration::from_millis(250));
        assert_eq!(p.ceiling(2), Duration::from_millis(500));
        assert_eq!(p.ceiling(6), Duration::from_secs(8));
        assert_eq!(p.ceiling(7), Duration::from_secs(10));
        assert_eq!(p.ceiling(200), Duration::from_secs(10));
        for n in 1..10 {
            assert!(p.delay(n, None) <= p.ceiling(n));
        }
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(30)
        );
        assert_eq!(RetryPolicy::none().attempts(), 1);
    }

    #[test]
    fn retries_go_on_for_the_horizon_within_the_attempt_cap() {
        let p = RetryPolicy::default();
        let s = Duration::from_secs;
        assert!(p.should_retry(1, s(0)));
        assert!(p.should_retry(10, s(59)));
        assert!(!p.should_retry(10, s(60)), "the horizon has passed");
        assert!(
            p.should_retry(2, s(600)),
            "the first attempts are made anyway"
        );
        assert!(!p.should_retry(3, s(600)));
        assert!(!p.should_retry(40, s(1)), "the attempt cap");
        assert!(!RetryPolicy::none().should_retry(1, s(0)));
        let q = RetryPolicy::quick(4);
        assert!(q.should_retry(3, s(1000)) && !q.should_retry(4, s(0)));
        // The whole horizon is covered by the expected backoff, well within the cap.
        let expected: Duration = (1..p.max_attempts).map(|n| p.ceiling(n) / 2).sum();
        assert!(expected > p.horizon, "{expected:?}");
    }

    #[test]
    fn what_is_retried() {
        for code in [408, 429, 500, 502, 503, 504] {
            assert!(
                retryable_status(StatusCode::from_u16(code).unwrap()),
                "{code}"
            );
        }
        for code in [400, 401, 403, 404, 413, 416, 501, 505, 507] {
            assert!(
                !retryable_status(StatusCode::from_u16(code).unwrap()),
                "{code}"
            );
        }
    }

    #[test]
    fn retry_after_in_seconds_and_as_a_date() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example).
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn refusal_texts() {
        let t = ServerText::parse(
            br#"{"error":"invalid_shard","message":"shard: bad\nthing","request_id":"r1"}"#,
        );
        assert_eq!(t.code, Some(ErrorCode::InvalidShard));
        assert_eq!(t.text, "shard: bad thing [invalid_shard, request r1]");
        assert!(t.json);
        let t = ServerText::parse(br#"{"error":"something broke"}"#);
        assert_eq!(t.text, "something broke");
        let t = ServerText::parse(b"<html>Not Found</html>");
        assert!(!t.json);
        assert_eq!(t.text, "<html>Not Found</html>");
        assert_eq!(ServerText::parse(b"").suffix(), "");
        assert_eq!(shown("http://h/x?s=secret#f"), "http://h/x");
        assert_eq!(
            origin("http://127.0.0.1:8080/a/b?c"),
            "http://127.0.0.1:8080"
        );
    }
}
