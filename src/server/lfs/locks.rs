//! The Git LFS File Locking API (git-lfs `docs/api/locking.md`), per repository, as git-lfs's
//! `git lfs lock`, `locks`, `unlock` and its push-time lock verification call it.
//!
//! | route | credential | answer |
//! |---|---|---|
//! | `POST {repo}/info/lfs/locks` `{"path","ref"?}` | write | 201 `{"lock"}`; 409 `{"lock","message"}` with the existing lock when the path is locked (by anyone, the caller included) |
//! | `GET {repo}/info/lfs/locks?path=&id=&cursor=&limit=&refspec=` | read | 200 `{"locks","next_cursor"?}` |
//! | `POST {repo}/info/lfs/locks/verify` `{"cursor"?,"limit"?,"ref"?}` | write | 200 `{"ours","theirs","next_cursor"?}` |
//! | `POST {repo}/info/lfs/locks/{id}/unlock` `{"force"?,"ref"?}` | write | 200 `{"lock"}` (the removed lock); 403 someone else's lock without `force`; 404 no such lock in this repository |
//!
//! A lock is `{"id","path","locked_at","owner":{"name"}}`; `locked_at` is RFC 3339 in UTC with
//! second precision. Answers and errors carry `Content-Type: application/vnd.git-lfs+json`;
//! errors are `{"error","message","request_id"}` (git-lfs prints `message`).
//!
//! **Scope.** Locks belong to a repository (the id of [`Repo`], so `team/models` and
//! `team/models.git` share them) and are invisible from any other. As the API document asks,
//! `ref` and `refspec` are accepted and ignored: a lock holds on every branch.
//!
//! **Owner.** A lock's owner is the user the credential speaks for
//! ([`crate::server::auth::Grant::user`]): the name a token has in the token file, else the
//! user name git sends with the token (`Basic`), else a pseudonym of the token. `ours` and
//! `theirs` in verification compare that name. CAS access tokens are refused (403).
//!
//! **Force.** Any write credential may break someone else's lock with `force` (`git lfs unlock
//! --force`); the server logs it (warning: repository, path, id, owner, who broke it). Locks are
//! advisory: git-lfs enforces them on the client, and a write credential can push anything, so
//! restricting `force` to a few tokens would protect nothing and leave a team stuck when the
//! lock's owner is away.
//!
//! **Limits.** Request bodies at most [`MAX_BODY`] bytes, read under the server's body budget
//! (413 beyond); paths at most [`MAX_PATH`] bytes, relative, without empty, `.` or `..`
//! segments or control characters (422); pages of [`DEFAULT_PAGE`] locks unless `limit` asks
//! for fewer or more, at most [`MAX_PAGE`]. A bad `cursor` or `limit` is 400; an id that names
//! no lock of the repository is 404 (ids are opaque to clients: any string that is not one is
//! just unknown).
//!
//! **How many locks.** At most [`LockLimits::per_repo`] per repository; at most
//! [`LockLimits::per_scope`] created by the tokens of one repository pattern (a token limited
//! to `team-b/*` charges its locks to `team-b/*`, in all of its repositories together, so one
//! team cannot use up the server's locks and refuse every other team); and at most
//! [`LockLimits::total`] in all, the last resort. Locks of server-wide tokens count against
//! their repository and the total only. Beyond a limit, creating a lock is 507
//! `too_many_locks`, with a message that names the limit (per repository, per token scope,
//! server-wide) and what to do.
//!
//! **Storage.** [`db::LockDb`], `locks.redb` in the data directory, opened by the server. With
//! several nodes, one owns locks and the others forward the locking API to it ([`forward`]).

pub mod db;
pub mod forward;

use std::sync::Arc;
use xet_protocol::wire::ErrorCode;

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::db::LockLimits;
use self::db::{Created, Lock, Removed};
pub(crate) use self::db::{LockDb, LockDbError};
use super::{authorize_user, lfs_json, method_not_allowed, Repo};
use crate::server::auth::{now_unix, Grant, Scope};
use crate::server::body::read_body;
use crate::server::error::ApiError;
use crate::server::{blocking, AppState};

/// Largest request body of a locking route.
pub const MAX_BODY: u64 = 64 << 10;

/// Longest lock path, in bytes.
pub(crate) const MAX_PATH: usize = 1024;

/// Locks in a page when the client does not say.
pub(crate) const DEFAULT_PAGE: usize = 100;

/// Most locks in a page, whatever the client asks.
pub(crate) const MAX_PAGE: usize = 1000;

/// Dispatches `rest` (the part after `info/lfs/`, starting with `locks`).
pub async fn route(
    state: &Arc<AppState>,
    repo: &Repo,
    method: &Method,
    rest: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if let Some(owner) = &state.lock_owner {
        return forward::forward(state, owner, method, uri, headers, body).await;
    }
    match (rest, method) {
        ("locks", &Method::GET) => list(state, repo, uri, headers).await,
        ("locks", &Method::POST) => create(state, repo, headers, body).await,
        ("locks/verify", &Method::POST) => verify(state, repo, headers, body).await,
        ("locks" | "locks/verify", _) => Err(method_not_allowed()),
        _ => {
            let id = rest
                .strip_prefix("locks/")
                .and_then(|r| r.strip_suffix("/unlock"))
                .filter(|id| !id.is_empty() && !id.contains('/'));
            match (id, method) {
                (Some(id), &Method::POST) => unlock(state, repo, id, headers, body).await,
                (Some(_), _) => Err(method_not_allowed()),
                (None, _) => Err(ApiError::new(
                    ErrorCode::NotFound,
                    format!("no such locking endpoint: {rest:?} under {}", repo.path),
                )),
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct Owner<'a> {
    name: &'a str,
}

/// A lock as git-lfs reads it.
#[derive(Debug, Serialize)]
struct LockJson<'a> {
    id: String,
    path: &'a str,
    locked_at: String,
    owner: Owner<'a>,
}

impl<'a> From<&'a Lock> for LockJson<'a> {
    fn from(l: &'a Lock) -> Self {
        Self {
            id: l.id.to_string(),
            path: &l.path,
            locked_at: rfc3339(l.locked_at),
            owner: Owner { name: &l.owner },
        }
    }
}

/// `secs` (unix) as `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A lock id as this server writes them: a decimal number without leading zeros. `None` for
/// anything else (which names no lock).
fn parse_id(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok().filter(|&id| id > 0)
}

fn parse_cursor(s: &str) -> Result<u64, ApiError> {
    parse_id(s).ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidCursor,
            format!("cursor {s:?} is not a next_cursor this server gave"),
        )
    })
}

/// The page size for a requested `limit` (absent or 0: the default; capped at the maximum).
fn page_size(limit: Option<u64>) -> usize {
    match limit {
        None | Some(0) => DEFAULT_PAGE,
        Some(n) => usize::try_from(n).unwrap_or(MAX_PAGE).min(MAX_PAGE),
    }
}

/// Checks a lock path; `Err` is the 422 to answer.
fn check_path(path: Option<&Value>) -> Result<String, ApiError> {
    let path = match path {
        None | Some(Value::Null) => {
            return Err(ApiError::new(
                ErrorCode::MissingPath,
                "missing path: send {\"path\": \"<file relative to the repository root>\"}",
            ))
        }
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidPath,
                format!("path must be a string, not {other}"),
            ))
        }
    };
    if path.len() > MAX_PATH {
        return Err(ApiError::new(
            ErrorCode::PathTooLong,
            format!(
                "path of {} bytes is longer than the limit of {MAX_PATH} bytes",
                path.len()
            ),
        ));
    }
    let shown: String = path.chars().take(80).collect();
    let bad = |why: &str| {
        ApiError::new(
            ErrorCode::InvalidPath,
            format!("invalid path {shown:?}: {why}"),
        )
    };
    if path.chars().any(char::is_control) {
        return Err(bad("it contains control characters"));
    }
    if path.starts_with('/') {
        return Err(bad("it must be relative to the repository root"));
    }
    if path
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(bad("it has an empty, `.` or `..` component"));
    }
    Ok(path.clone())
}

/// Reads an optional JSON object body (empty means `{}`).
async fn read_object(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    what: &str,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bytes = read_body(&state.resources.body_budget, headers, body, MAX_BODY, what).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::new(
            ErrorCode::InvalidJson,
            format!("{what} must be a JSON object, not {other}"),
        )),
        Err(e) => Err(ApiError::new(
            ErrorCode::InvalidJson,
            format!("{what} is not JSON: {e}"),
        )),
    }
}

/// The user a credential speaks for (locking routes take git credentials only, which always
/// have one).
fn user_of(grant: &Grant) -> Result<String, ApiError> {
    grant
        .user
        .clone()
        .ok_or_else(|| ApiError::internal("this credential names no user"))
}

fn db_error(e: LockDbError) -> ApiError {
    if e.is_storage_full() {
        ApiError::storage_full(&e)
    } else if matches!(e, LockDbError::Reopening { .. }) {
        ApiError::busy(
            "the server's lock database is being opened again after a full disk; try again in a \
             moment",
            2,
        )
    } else {
        // Paths and database errors are for the operator's log.
        tracing::error!(error = %e, "lock database failure");
        ApiError::internal("the server's lock database failed; its log has the details")
    }
}

/// Runs a lock-database read off the async threads.
async fn with_db<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&LockDb) -> Result<T, LockDbError> + Send + 'static,
) -> Result<T, ApiError> {
    let db = Arc::clone(&state.locks);
    blocking(move || f(&db).map_err(db_error)).await
}

/// Runs a lock-database write off the async threads, in its turn.
async fn with_db_write<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&LockDb) -> Result<T, LockDbError> + Send + 'static,
) -> Result<T, ApiError> {
    let _turn = state.locks.write_turn().await;
    with_db(state, f).await
}

/// `POST {repo}/info/lfs/locks`.
async fn create(
    state: &Arc<AppState>,
    repo: &Repo,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let grant = authorize_user(state, headers, repo, Scope::Write, "creating a lock")?;
    let owner = user_of(&grant)?;
    // A token limited to some repositories charges its locks to its pattern.
    let scope = grant.repos.as_ref().map(|p| p.as_str().to_string());
    let request = read_object(state, headers, body, "lock request").await?;
    let path = check_path(request.get("path"))?;
    let (repo_id, p, o) = (repo.id.clone(), path.clone(), owner.clone());
    let outcome = with_db_write(state, move |db| {
        db.create(&repo_id, &p, &o, scope.as_deref(), now_unix())
    })
    .await?;
    match outcome {
        Created::New(lock) => {
            tracing::info!(repo = %repo.id, path = %lock.path, id = lock.id, owner = %lock.owner, "lock created");
            Ok(lfs_json(
                StatusCode::CREATED,
                &serde_json::json!({ "lock": LockJson::from(&lock) }),
            ))
        }
        Created::Exists(lock) => {
            let whose = if lock.owner == owner {
                "you".to_string()
            } else {
                lock.owner.clone()
            };
            Ok(lfs_json(
                StatusCode::CONFLICT,
                &serde_json::json!({
                    "lock": LockJson::from(&lock),
                    "error": ErrorCode::LockExists,
                    "message": format!(
                        "{} is already locked by {whose} (lock {})",
                        lock.path, lock.id
                    ),
                }),
            ))
        }
        Created::RepoFull { limit } => {
            tracing::warn!(repo = %repo.id, limit, "lock refused: the repository has the most locks allowed");
            Err(too_many(format!(
                "lock limit per repository reached: repository {} has {limit} locks, the most \
                 this server keeps per repository; unlock some of them first (`git lfs locks` \
                 lists them, `git lfs unlock <path>` removes one)",
                repo.id
            )))
        }
        Created::ScopeFull { scope, limit } => {
            tracing::warn!(repo = %repo.id, scope = %scope, limit, "lock refused: the token scope has the most locks allowed");
            Err(too_many(format!(
                "lock limit per token scope reached: the tokens of {scope} hold {limit} locks \
                 in its repositories together, the most this server keeps per token scope; \
                 unlock some of them first, in any repository of {scope} (`git lfs locks` \
                 lists a repository's locks, `git lfs unlock <path>` removes one)"
            )))
        }
        Created::ServerFull { limit } => {
            tracing::warn!(repo = %repo.id, limit, "lock refused: the server has the most locks allowed");
            Err(too_many(format!(
                "server-wide lock limit reached: the server has {limit} locks in all \
                 repositories, the most it keeps; unlock some first, and tell the server's \
                 operator (its log records every lock created, with repository and owner)"
            )))
        }
    }
}

fn too_many(message: String) -> ApiError {
    ApiError::new(ErrorCode::TooManyLocks, message)
}

/// The query of `GET …/locks` (`refspec`, like any other parameter, is ignored: locks hold on
/// every ref).
#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    path: Option<String>,
    id: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

/// `GET {repo}/info/lfs/locks`.
async fn list(
    state: &Arc<AppState>,
    repo: &Repo,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    authorize_user(state, headers, repo, Scope::Read, "listing locks")?;
    let axum::extract::Query(q) = axum::extract::Query::<ListQuery>::try_from_uri(uri)
        .map_err(|e| ApiError::new(ErrorCode::InvalidQuery, e.body_text()))?;
    let limit = match q.limit.as_deref() {
        None | Some("") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidLimit,
                format!("limit {s:?} is not a number of locks"),
            )
        })?),
    };
    let size = page_size(limit);
    let cursor = q
        .cursor
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(parse_cursor)
        .transpose()?;
    let repo_id = repo.id.clone();
    let (locks, next) = match (q.id, q.path) {
        // A filter names at most one lock.
        (Some(id), path) => {
            let id = parse_id(&id);
            let found = match id {
                Some(id) => with_db(state, move |db| db.get(&repo_id, id)).await?,
                None => None,
            };
            let found = found.filter(|l| path.as_ref().is_none_or(|p| *p == l.path));
            (found.into_iter().collect(), None)
        }
        (None, Some(path)) => {
            let found = with_db(state, move |db| db.by_path(&repo_id, &path)).await?;
            (found.into_iter().collect(), None)
        }
        (None, None) => with_db(state, move |db| db.page(&repo_id, cursor, size)).await?,
    };
    // With a filter and a cursor, a lock newer than the cursor was on an earlier page.
    let locks: Vec<Lock> = locks
        .into_iter()
        .filter(|l| cursor.is_none_or(|c| l.id <= c))
        .collect();
    let mut out = serde_json::json!({
        "locks": locks.iter().map(LockJson::from).collect::<Vec<_>>(),
    });
    if let Some(next) = next {
        out["next_cursor"] = Value::String(next.to_string());
    }
    Ok(lfs_json(StatusCode::OK, &out))
}

/// `POST {repo}/info/lfs/locks/verify`.
async fn verify(
    state: &Arc<AppState>,
    repo: &Repo,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let grant = authorize_user(state, headers, repo, Scope::Write, "verifying locks")?;
    let me = user_of(&grant)?;
    let request = read_object(state, headers, body, "lock verification request").await?;
    let cursor = match request.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(parse_cursor(s)?),
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidCursor,
                format!("cursor must be a string, not {other}"),
            ))
        }
    };
    let limit = match request.get("limit") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidLimit,
                format!("limit must be a number of locks, not {v}"),
            )
        })?),
    };
    let size = page_size(limit);
    let repo_id = repo.id.clone();
    let (locks, next) = with_db(state, move |db| db.page(&repo_id, cursor, size)).await?;
    let (ours, theirs): (Vec<&Lock>, Vec<&Lock>) = locks.iter().partition(|l| l.owner == me);
    let mut out = serde_json::json!({
        "ours": ours.into_iter().map(LockJson::from).collect::<Vec<_>>(),
        "theirs": theirs.into_iter().map(LockJson::from).collect::<Vec<_>>(),
    });
    if let Some(next) = next {
        out["next_cursor"] = Value::String(next.to_string());
    }
    Ok(lfs_json(StatusCode::OK, &out))
}

/// `POST {repo}/info/lfs/locks/{id}/unlock`.
async fn unlock(
    state: &Arc<AppState>,
    repo: &Repo,
    id: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let grant = authorize_user(state, headers, repo, Scope::Write, "unlocking")?;
    let me = user_of(&grant)?;
    let request = read_object(state, headers, body, "unlock request").await?;
    let force = match request.get("force") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidForce,
                format!("force must be true or false, not {other}"),
            ))
        }
    };
    let shown: String = id.chars().take(40).collect();
    let not_found = || {
        ApiError::new(
            ErrorCode::LockNotFound,
            format!("repository {} has no lock {shown:?}", repo.id),
        )
    };
    let Some(n) = parse_id(id) else {
        return Err(not_found());
    };
    let (repo_id, who) = (repo.id.clone(), me.clone());
    let outcome = with_db_write(state, move |db| {
        db.remove(&repo_id, n, |l| force || l.owner == who)
    })
    .await?;
    match outcome {
        Removed::Done(lock) => {
            if lock.owner == me {
                tracing::info!(repo = %repo.id, path = %lock.path, id = lock.id, owner = %lock.owner, "lock removed");
            } else {
                tracing::warn!(repo = %repo.id, path = %lock.path, id = lock.id, owner = %lock.owner, by = %me, "lock of another user broken with force");
            }
            Ok(lfs_json(
                StatusCode::OK,
                &serde_json::json!({ "lock": LockJson::from(&lock) }),
            ))
        }
        Removed::NotFound => Err(not_found()),
        Removed::Refused(lock) => Err(ApiError::new(
            ErrorCode::LockOwnedByAnotherUser,
            format!(
                "{} is locked by {} (lock {}), not by {me}; `git lfs unlock --force` breaks \
                 another user's lock",
                lock.path, lock.owner, lock.id
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_463_500_146), "2016-05-17T15:49:06Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn ids_cursors_and_limits() {
        assert_eq!(parse_id("17"), Some(17));
        for bad in [
            "",
            "0",
            "017",
            "-1",
            "1a",
            "abc",
            "99999999999999999999999",
            "1 ",
        ] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
        assert!(parse_cursor("x").is_err());
        assert_eq!(page_size(None), DEFAULT_PAGE);
        assert_eq!(page_size(Some(0)), DEFAULT_PAGE);
        assert_eq!(page_size(Some(7)), 7);
        assert_eq!(page_size(Some(u64::MAX)), MAX_PAGE);
    }

    #[test]
    fn lock_paths() {
        let ok = |p: &str| check_path(Some(&Value::String(p.into())));
        assert_eq!(ok("a/b c/d.bin").unwrap(), "a/b c/d.bin");
        assert!(ok("weird\\name..bin").is_ok());
        for bad in [
            "", "/abs", "a//b", "a/", "./a", "a/../b", "..", "a\nb", "a\0b",
        ] {
            let e = ok(bad).unwrap_err();
            assert_eq!(
                (e.status().as_u16(), e.code),
                (422, ErrorCode::InvalidPath),
                "{bad:?}"
            );
        }
        let e = ok(&"x".repeat(MAX_PATH + 1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::PathTooLong);
        assert!(ok(&"x".repeat(MAX_PATH)).is_ok());
        assert_eq!(check_path(None).unwrap_err().code, ErrorCode::MissingPath);
        assert_eq!(
            check_path(Some(&serde_json::json!(3))).unwrap_err().code,
            ErrorCode::InvalidPath
        );
    }
}
