//! Locks with several nodes: one node owns them, the others forward the locking API to it.
//!
//! Nodes on one bucket share objects but not `locks.redb`. Object stores differ in whether they
//! honour conditional writes (Garage ignores `If-None-Match: *`), so locks do not live in the
//! bucket: one node keeps them, named in every other node's configuration (`git xet serve
//! --lock-owner URL`), and the others pass each locking request to it as it came (method, path
//! and query, body, `Authorization`, `Content-Type`, `Accept`) and its answer back. One lock
//! database decides, so two users racing for one path through two nodes get exactly one lock,
//! and a lock taken anywhere is seen and enforced everywhere.
//!
//! If the owner does not answer, locking requests fail with 503 `lock_owner_unreachable`,
//! saying so; pushes and clones do not depend on it (git-lfs only warns when it cannot verify
//! locks before a push, unless `lfs.<url>.locksverify` is `true`).
//!
//! The credential is forwarded to the owner as it came: the client's `Authorization` header,
//! its token in it, goes to the owner unchanged, since the owner is another node of the same
//! deployment, configured with the same secrets, and decides who the user is. Over plain
//! `http` anyone on the network between the nodes could read those tokens, so an owner URL of
//! `http` to a host other than this machine's loopback (`localhost`, `127.0.0.0/8`, `::1`) is
//! refused at startup ([`LockOwnerError::PlainHttp`]) unless the operator allows it explicitly
//! (`--lock-owner-insecure-http`, for a network they trust). A request already forwarded once
//! is not forwarded again (a misconfigured loop is refused with 508).

use std::time::Duration;
use xet_protocol::wire::ErrorCode;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};

use crate::server::body::read_body;
use crate::server::error::ApiError;
use crate::server::AppState;

/// The header a forwarding node adds.
pub(crate) const FORWARDED_HEADER: &str = "x-git-xet-lock-forwarded";

/// How long a forwarded request may take.
pub(crate) const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer taken from the owner (a page of 1000 locks is about 200 KB).
const MAX_ANSWER: usize = 4 << 20;

/// Why the URL of the node that owns locks cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LockOwnerError {
    #[error("{url:?} is not an http(s) URL of the node that owns locks")]
    NotHttp { url: String },
    #[error(
        "{url} is plain http to {host}, which is not this machine: every locking request \
         forwarded there would carry the client's token (its Authorization header) unencrypted; \
         give the owner's https:// URL, or, if the network between the nodes is private and \
         trusted, add --lock-owner-insecure-http"
    )]
    PlainHttp { url: String, host: String },
    #[error("cannot build the HTTP client for {url}: {detail}")]
    Client { url: String, detail: String },
}

/// Whether `host` (of a parsed URL) is this machine's loopback: `localhost`, `127.0.0.0/8` or
/// `::1`.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    // An IPv6 host is written in brackets.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
    }
}

/// Checks an owner URL (trimmed, without a trailing `/`): http or https with a host, and plain
/// http only to the loopback unless `insecure_http` allows it.
pub(crate) fn check_owner_url(url: &str, insecure_http: bool) -> Result<(), LockOwnerError> {
    let parsed = match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => u,
        _ => {
            return Err(LockOwnerError::NotHttp {
                url: url.to_string(),
            })
        }
    };
    if parsed.scheme() == "http" && !insecure_http && !is_loopback(&parsed) {
        return Err(LockOwnerError::PlainHttp {
            url: url.to_string(),
            host: parsed.host_str().unwrap_or_default().to_string(),
        });
    }
    Ok(())
}

/// The node that owns locks, and the client that reaches it.
#[derive(Debug, Clone)]
pub struct LockOwner {
    url: String,
    client: reqwest::Client,
}

impl LockOwner {
    /// The owner at `url` (`http(s)://host[:port]`, the node's public URL); plain `http` only
    /// to this machine's loopback, or anywhere with `insecure_http` (see the module
    /// documentation).
    pub fn new(url: &str, insecure_http: bool) -> Result<Self, LockOwnerError> {
        let url = url.trim().trim_end_matches('/').to_string();
        check_owner_url(&url, insecure_http)?;
        let client = reqwest::Client::builder()
            .timeout(FORWARD_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| LockOwnerError::Client {
                url: url.clone(),
                detail: e.to_string(),
            })?;
        Ok(Self { url, client })
    }

    /// The owner's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Passes a locking request to the owner and its answer back.
pub async fn forward(
    state: &AppState,
    owner: &LockOwner,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if headers.contains_key(FORWARDED_HEADER) {
        return Err(ApiError::new(
            ErrorCode::LockForwardLoop,
            format!(
                "this node forwards locks to {} and was itself reached by a forwarded request: \
                 give every node the same --lock-owner, and the owner none",
                owner.url
            ),
        ));
    }
    let body = read_body(
        &state.resources.body_budget,
        headers,
        body,
        super::MAX_BODY,
        "lock request",
    )
    .await?;
    let target = format!(
        "{}{}",
        owner.url,
        uri.path_and_query().map_or(uri.path(), |p| p.as_str())
    );
    let mut request = owner
        .client
        .request(method.clone(), &target)
        .header(FORWARDED_HEADER, "1")
        .body(body.to_vec());
    for name in [header::AUTHORIZATION, header::CONTENT_TYPE, header::ACCEPT] {
        if let Some(v) = headers.get(&name) {
            request = request.header(name, v);
        }
    }
    let unreachable = |why: String| unreachable(owner, why);
    let answer = request.send().await.map_err(|e| {
        unreachable(format!(
            "does not answer: {}",
            xet_protocol::util::error::root_cause_text(&e)
        ))
    })?;
    let status = answer.status();
    let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
    let bytes = read_answer(owner, answer).await?;
    let mut response = (status, bytes).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        content_type.unwrap_or(HeaderValue::from_static("application/vnd.git-lfs+json")),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The refusal when the node that owns locks cannot be reached (503, retry in 5 s).
fn unreachable(owner: &LockOwner, why: String) -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::LockOwnerUnreachable,
        format!(
            "file locking is unavailable: the node that owns locks ({}) {why}; try again \
             later (pushes and clones do not need it)",
            owner.url
        ),
    );
    e.retry_after = Some(5);
    e
}

/// The owner's answer body, at most [`MAX_ANSWER`] bytes.
async fn read_answer(
    owner: &LockOwner,
    mut answer: reqwest::Response,
) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::new();
    while let Some(piece) = answer
        .chunk()
        .await
        .map_err(|e| unreachable(owner, format!("broke off its answer: {e}")))?
    {
        if bytes.len() + piece.len() > MAX_ANSWER {
            return Err(unreachable(
                owner,
                format!("answered with more than {MAX_ANSWER} bytes"),
            ));
        }
        bytes.extend_from_slice(&piece);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_owners_only_on_the_loopback_unless_allowed() {
        for ok in [
            "https://locks.example.org",
            "https://10.0.0.5:8443",
            "http://127.0.0.1:8080",
            "http://127.3.4.5",
            "http://[::1]:8080",
            "http://localhost:8080",
            "http://LOCALHOST.",
        ] {
            assert!(check_owner_url(ok, false).is_ok(), "{ok}");
        }
        for plain in [
            "http://10.0.0.5:8080",
            "http://locks.example.org",
            "http://[2001:db8::1]",
            "http://localhost.example.org",
            "http://0.0.0.0:8080",
        ] {
            let e = check_owner_url(plain, false).unwrap_err();
            assert!(
                matches!(e, LockOwnerError::PlainHttp { .. }),
                "{plain}: {e}"
            );
            let text = e.to_string();
            assert!(
                text.contains(plain)
                    && text.contains("https://")
                    && text.contains("--lock-owner-insecure-http"),
                "{text}"
            );
            // The operator may allow it.
            assert!(check_owner_url(plain, true).is_ok(), "{plain}");
        }
        for bad in ["ftp://x", "locks.example.org", "http://", ""] {
            assert!(
                matches!(
                    check_owner_url(bad, true),
                    Err(LockOwnerError::NotHttp { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            LockOwner::new("http://10.0.0.5:8080/", false),
            Err(LockOwnerError::PlainHttp { .. })
        ));
        let owner = LockOwner::new(" http://10.0.0.5:8080/ ", true).unwrap();
        assert_eq!(owner.url(), "http://10.0.0.5:8080");
    }
}
