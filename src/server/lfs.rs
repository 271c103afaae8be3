//! The Git LFS side of `git xet serve`: the batch API with `xet` and `basic` transfers
//! (docs/lfs-agent.md §11, §12), basic object transfers through the upload pipeline, the
//! token-refresh route the Xet agent calls, and the File Locking API ([`locks`]).
//!
//! Every route lives under an LFS endpoint `{repo}/info/lfs`, where `{repo}` is one or more path
//! segments of `[A-Za-z0-9._-]` not starting with `.` (e.g. `team/models.git`). The repository
//! id used in tokens drops a trailing `.git`, so `team/models` and `team/models.git` are one
//! repository. This server has one store; repositories scope tokens and locks, not storage.
//!
//! | route | credential, scope | behaviour |
//! |---|---|---|
//! | `POST {repo}/info/lfs/objects/batch` | git token; read (download), write (upload) | validates every object (oid 64 lowercase hex, size ≥ 0; per-object 422), at most [`batch::MAX_OBJECTS`] (else 413). Client offers `xet` (uploads) or `xet-download` (downloads): that transfer, actions whose `href` is the token-refresh route and whose `header` carries `X-Xet-Cas-Url`, `X-Xet-Access-Token`, `X-Xet-Token-Expiration`, `X-Xet-Session-Id`, and for downloads `X-Xet-Hash`. Otherwise `"transfer":"basic"` with `href`s to the object routes below, a short-lived `Authorization` header, and a `verify` action for uploads. Stored objects whose oid the server has checked get no upload action (an oid only claimed by a shard still gets one, see `server::claims`); unknown ones get a per-object 404 on download |
//! | `GET {repo}/info/lfs/xet-token/read` | git token; read | `{"casUrl","accessToken","exp"}` (docs/cas-api.md §2.1), a read CAS token |
//! | `GET {repo}/info/lfs/xet-token/write` | git token; write | the same with a write CAS token |
//! | `PUT {repo}/info/lfs/objects/{oid}` | git token or CAS token of the repo; write | basic upload: the body is spooled to disk, then runs through the upload pipeline (chunk dedup against the store); its length must equal `Content-Length` (400) and its SHA-256 the oid (422); nothing is stored or registered otherwise. An object already stored is acknowledged (the body is drained) |
//! | `GET {repo}/info/lfs/objects/{oid}` | git token or CAS token of the repo; read | basic download: the file rebuilt from the store, streamed chunk by chunk |
//! | `POST {repo}/info/lfs/verify` | git token or CAS token of the repo; write | `{oid, size}`: 200 if that object is registered with that size, else 404 / 422 |
//! | `POST {repo}/info/lfs/locks` | git token; write | create a lock (201), or 409 with the lock that holds the path |
//! | `GET {repo}/info/lfs/locks` | git token; read | list locks (`path`, `id`, `cursor`, `limit`), newest first, paginated |
//! | `POST {repo}/info/lfs/locks/verify` | git token; write | the locks of a push split into `ours` and `theirs`, paginated |
//! | `POST {repo}/info/lfs/locks/{id}/unlock` | git token; write | remove a lock: one's own, or anyone's with `force` |
//!
//! Credentials: `Authorization: Bearer <token>`, or `Basic` with the token as password (what git
//! sends from a credential helper). A "git token" is a long-lived secret of the server
//! (`--token`, `--read-token`, the token file); the short-lived CAS tokens this API hands out are
//! refused on the batch, token and locking routes (403), so a leaked CAS token cannot renew
//! itself or act as a user. A missing or bad credential is 401 with
//! `LFS-Authenticate: Basic realm="git-xet"` and the same `WWW-Authenticate`, which makes
//! git-lfs ask git's credential helpers and retry.
//!
//! **Locking.** Lock owners are the user a git token speaks for: its name in the token file, else
//! the `Basic` user name git sends with it, else a pseudonym of the token
//! ([`super::auth`] has the rule); [`locks`] has the routes, limits and storage. Because
//! `POST …/locks/verify` now answers 200, git-lfs (checked against 3.3.0,
//! `commands/lockverifier.go`) verifies locks on every push: with
//! `lfs.<endpoint>.locksverify` unset it prints "Locking support detected on remote …" and only
//! warns about files locked by others; with it `true` it refuses such pushes ("Cannot update
//! locked files."); with it `false` it skips verification.
//!
//! Errors of every route here are the JSON of [`ApiError`] with the LFS media type
//! ([`error_response`]).

pub mod batch;
pub mod locks;
pub mod rebuild;
pub mod transfer;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use xet_protocol::wire::ErrorCode;

use super::auth::{Grant, Scope};
use super::error::ApiError;
use super::{AppState, SharedState};

/// The media type of LFS requests and responses.
pub(crate) const LFS_MEDIA_TYPE: &str = "application/vnd.git-lfs+json";

/// The realm named in `LFS-Authenticate` / `WWW-Authenticate`.
const REALM: &str = "Basic realm=\"git-xet\"";

/// The LFS routes: one catch-all, dispatched on the part after `/info/lfs/`.
pub fn routes() -> Router<SharedState> {
    Router::new().route("/{*path}", any(dispatch))
}

/// A repository path as it appears in URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// As in the URL, e.g. `team/models.git`.
    pub path: String,
    /// The id tokens carry: the path without a trailing `.git`, e.g. `team/models`.
    pub id: xet_store::RepoName,
}

impl Repo {
    /// Parses a repository path; `None` unless every segment is `[A-Za-z0-9._-]+` not starting
    /// with `.`, with at most 16 segments and 256 bytes.
    pub fn parse(path: &str) -> Option<Self> {
        if path.is_empty() || path.len() > 256 || path.split('/').count() > 16 {
            return None;
        }
        if !path.split('/').all(super::auth::is_repo_segment) {
            return None;
        }
        let id = path.strip_suffix(".git").unwrap_or(path);
        if id.ends_with('/') {
            return None;
        }
        Some(Self {
            path: path.to_string(),
            id: xet_store::RepoName::new(id).ok()?,
        })
    }

    /// `{public}/{repo}/info/lfs`.
    pub fn endpoint(&self, state: &AppState) -> String {
        format!("{}/{}/info/lfs", state.public_url, self.path)
    }
}

/// Splits `/…{repo}/info/lfs/{rest}` into the repository and `rest`.
fn split_path(path: &str) -> Option<(Repo, &str)> {
    let path = path.strip_prefix('/')?;
    let at = path.find("/info/lfs/")?;
    let repo = Repo::parse(&path[..at])?;
    Some((repo, &path[at + "/info/lfs/".len()..]))
}

/// The route template of an LFS request path, for metrics: one of a fixed set whatever the
/// repository, the oid or the lock id (`/{*path}` for paths that are no LFS route).
pub(crate) fn route_template(path: &str) -> &'static str {
    let Some((_, rest)) = split_path(path) else {
        return "/{*path}";
    };
    match rest {
        "objects/batch" => "/{repo}/info/lfs/objects/batch",
        "xet-token/read" => "/{repo}/info/lfs/xet-token/read",
        "xet-token/write" => "/{repo}/info/lfs/xet-token/write",
        "verify" => "/{repo}/info/lfs/verify",
        "locks" => "/{repo}/info/lfs/locks",
        "locks/verify" => "/{repo}/info/lfs/locks/verify",
        r if r.starts_with("locks/") && r.ends_with("/unlock") => {
            "/{repo}/info/lfs/locks/{id}/unlock"
        }
        r if r.starts_with("objects/") && !r.contains("/batch") => "/{repo}/info/lfs/objects/{oid}",
        _ => "/{*path}",
    }
}

async fn dispatch(
    State(state): State<SharedState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some((repo, rest)) = split_path(uri.path()) else {
        return ApiError::new(ErrorCode::NotFound, "no such endpoint").into_response();
    };
    let rest = rest.to_string();
    let result = match (&method, rest.as_str()) {
        (&Method::POST, "objects/batch") => batch::batch(&state, &repo, &headers, body).await,
        (&Method::GET, "xet-token/read") => batch::token(&state, &repo, &headers, Scope::Read),
        (&Method::GET, "xet-token/write") => batch::token(&state, &repo, &headers, Scope::Write),
        (&Method::POST, "verify") => transfer::verify(&state, &repo, &headers, body).await,
        (m, r) if r == "locks" || r.starts_with("locks/") => {
            locks::route(&state, &repo, m, r, &uri, &headers, body).await
        }
        (m, r) if r.starts_with("objects/") && !r.contains("/batch") => {
            let oid = &r["objects/".len()..];
            match *m {
                Method::PUT => transfer::put(&state, &repo, oid, &headers, body).await,
                Method::GET => transfer::get(&state, &repo, oid, &headers).await,
                _ => Err(method_not_allowed()),
            }
        }
        (_, "objects/batch" | "xet-token/read" | "xet-token/write" | "verify") => {
            Err(method_not_allowed())
        }
        _ => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no such LFS endpoint: {rest:?} under {}", repo.path),
        )),
    };
    result.unwrap_or_else(error_response)
}

/// 405 for a route that exists with other methods.
pub(crate) fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this endpoint does not take that method",
    )
}

/// An LFS error response: the JSON [`ApiError`] with the LFS media type, and the headers
/// git-lfs needs on 401.
pub(crate) fn error_response(e: ApiError) -> Response {
    let unauthorized = e.status() == StatusCode::UNAUTHORIZED;
    // 507 is logged where it is decided (a full disk, or a client over a quota).
    if e.status().is_server_error()
        && e.status() != StatusCode::NOT_IMPLEMENTED
        && e.status() != StatusCode::INSUFFICIENT_STORAGE
    {
        tracing::error!(code = %e.code, message = %e.message, "LFS request failed");
    }
    let mut response = e.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(LFS_MEDIA_TYPE),
    );
    if unauthorized {
        h.insert("lfs-authenticate", HeaderValue::from_static(REALM));
        h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(REALM));
    }
    response
}

/// Checks a git credential (a configured secret, not a CAS token) for `needed` on `repo`.
pub(crate) fn authorize_user(
    state: &AppState,
    headers: &HeaderMap,
    repo: &Repo,
    needed: Scope,
    what: &'static str,
) -> Result<Grant, ApiError> {
    let grant = state.authorize(headers, Scope::Read, what)?;
    check_repo(&grant, repo)?;
    if grant.expires.is_some() {
        return Err(ApiError::new(
            ErrorCode::CasTokenNotAccepted,
            format!(
                "{what} needs the token configured for git, not a short-lived CAS access token"
            ),
        ));
    }
    require(&grant, needed, what)?;
    Ok(grant)
}

/// Checks a credential for an object transfer: a git credential, or a CAS token issued for
/// this repository.
pub(crate) fn authorize_transfer(
    state: &AppState,
    headers: &HeaderMap,
    repo: &Repo,
    needed: Scope,
    what: &'static str,
) -> Result<Grant, ApiError> {
    let grant = state.authorize(headers, Scope::Read, what)?;
    check_repo(&grant, repo)?;
    if grant.expires.is_some() && grant.repo != *repo.id {
        return Err(ApiError::new(
            ErrorCode::WrongRepository,
            format!(
                "this access token was issued for repository {:?}, not {:?}",
                grant.repo, repo.id
            ),
        ));
    }
    require(&grant, needed, what)?;
    Ok(grant)
}

/// A secret limited to some repositories must name one of them.
fn check_repo(grant: &Grant, repo: &Repo) -> Result<(), ApiError> {
    if grant.expires.is_some() || grant.may_use_repo(&repo.id) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::WrongRepository,
        format!(
            "this token is for {}, not for repository {:?}",
            grant.repos.as_ref().map_or("*", |p| p.as_str()),
            repo.id
        ),
    ))
}

/// Whether `grant` reads only what `repo` registered (a scoped secret, or a CAS token issued
/// to one): then the repository id to check files against.
pub(crate) fn limited_to<'a>(grant: &Grant, repo: &'a Repo) -> Option<&'a xet_store::RepoName> {
    grant.repos.as_ref().map(|_| &repo.id)
}

fn require(grant: &Grant, needed: Scope, what: &'static str) -> Result<(), ApiError> {
    if grant.scope.allows(needed) {
        Ok(())
    } else {
        Err(super::auth::AuthError::Forbidden { what }.into())
    }
}

/// A JSON response with the LFS media type.
pub(crate) fn lfs_json(status: StatusCode, value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut r = (status, body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(LFS_MEDIA_TYPE),
            );
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        Err(e) => error_response(ApiError::internal(format!(
            "cannot encode the response: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_see_a_few_lfs_routes_whatever_the_repository_or_object() {
        assert_eq!(
            route_template("/team/m.git/info/lfs/objects/batch"),
            "/{repo}/info/lfs/objects/batch"
        );
        assert_eq!(
            route_template(&format!("/a/b/c/info/lfs/objects/{}", "ab".repeat(32))),
            "/{repo}/info/lfs/objects/{oid}"
        );
        assert_eq!(
            route_template("/m/info/lfs/locks/17/unlock"),
            "/{repo}/info/lfs/locks/{id}/unlock"
        );
        assert_eq!(
            route_template("/m/info/lfs/locks/verify"),
            "/{repo}/info/lfs/locks/verify"
        );
        assert_eq!(
            route_template("/m/info/lfs/xet-token/write"),
            "/{repo}/info/lfs/xet-token/write"
        );
        assert_eq!(route_template("/nothing/here"), "/{*path}");
        assert_eq!(route_template("/m/info/lfs/elsewhere"), "/{*path}");
    }

    #[test]
    fn repository_paths() {
        let (repo, rest) = split_path("/team/models.git/info/lfs/objects/batch").unwrap();
        assert_eq!(
            (repo.path.as_str(), repo.id.as_str()),
            ("team/models.git", "team/models")
        );
        assert_eq!(rest, "objects/batch");
        let (repo, rest) = split_path("/a/b/c/info/lfs/locks/verify").unwrap();
        assert_eq!((repo.id.as_str(), rest), ("a/b/c", "locks/verify"));
        for bad in [
            "/info/lfs/objects/batch",
            "/../x/info/lfs/objects/batch",
            "/a//b/info/lfs/objects/batch",
            "/a/.git/info/lfs/objects/batch",
            "/a%2Fb/info/lfs/objects/batch",
            "/.git/info/lfs/x",
            "/team/models.git/info/lfs",
        ] {
            assert!(split_path(bad).is_none(), "{bad}");
        }
        assert!(Repo::parse(&"a/".repeat(20)).is_none());
    }

    /// The catch-all must merge with the CAS routes' static and parameter segments (a routing
    /// conflict would panic here rather than when the two routers meet in `server::router`).
    #[test]
    fn catch_all_merges_with_cas_style_routes() {
        use axum::routing::{get, post};
        let _ = Router::<SharedState>::new()
            .route("/health", get(|| async {}))
            .route("/v1/xorbs/{prefix}/{xorb_hash}", post(|| async {}))
            .route("/v1/reconstructions/{file_hash}", get(|| async {}))
            .route("/shards", post(|| async {}))
            .merge(routes());
    }
}
