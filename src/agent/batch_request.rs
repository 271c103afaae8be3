//! One Git LFS batch request, sent with the credentials git-lfs would send: the headers given
//! (git's `http.extraheader`, an SSH `git-lfs-authenticate` answer), and unless one of them is
//! an `Authorization`, the URL's password, then the netrc file, then git's credential helpers
//! (never prompting): with the first request when `lfs.<url>.access` is `basic`, else after a
//! 401 or 403 (a 401 they answer sets `lfs.<url>.access` to `basic` in the repository, as
//! git-lfs does). Used by everything git-xet asks an LFS server itself ([`super::reader`], the
//! pre-push check of `git xet push-summary`).

use super::settings::{self, AccessMode, UrlCredentials};
use crate::git::Git;
use xet_client::remote::{OneShotAnswer, OneShotClient};

/// Where and how to send a batch request.
pub(crate) struct BatchRequest<'a> {
    pub git: &'a Git,
    /// The LFS URL, split from its user info.
    pub url: &'a UrlCredentials,
    /// Headers sent with every attempt.
    pub extra: &'a [(String, String)],
    pub access: AccessMode,
    /// The largest answer body read.
    pub max_answer: usize,
}

impl BatchRequest<'_> {
    /// `<LFS URL>/objects/batch`.
    pub fn target(&self) -> String {
        format!("{}/objects/batch", self.url.bare.trim_end_matches('/'))
    }

    /// POSTs `body` (the JSON batch request) and returns the last answer: after a 401 or 403
    /// to a request without credentials, the one to the request with them, if there are any.
    pub fn send(
        &self,
        client: &OneShotClient,
        body: &str,
    ) -> Result<OneShotAnswer, reqwest::Error> {
        let target = self.target();
        let authorized = self
            .extra
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("authorization"));
        let send = |auth: Option<&(String, String)>| {
            let mut r = client
                .post(&target)
                .header("Accept", "application/vnd.git-lfs+json")
                .header("Content-Type", "application/vnd.git-lfs+json")
                .body(body.to_string());
            for (name, value) in self.extra {
                r = r.header(name.as_str(), value.as_str());
            }
            if let Some((user, password)) = auth {
                r = r.basic_auth(user, Some(password));
            }
            client.send(r, self.max_answer)
        };
        // git-lfs's order: the password in the URL, then the netrc file, then the credential
        // helpers (never prompting here).
        let credential = || {
            if authorized {
                return None;
            }
            self.url
                .password
                .clone()
                .map(|p| (String::from("git"), p))
                .or_else(|| settings::lfs_credential(self.git, &self.url.with_user))
        };
        let first = (self.access == AccessMode::Basic)
            .then(credential)
            .flatten();
        let response = send(first.as_ref())?;
        if first.is_none() && matches!(response.status.as_u16(), 401 | 403) {
            if let Some(c) = credential() {
                let again = send(Some(&c))?;
                if response.status.as_u16() == 401 && again.status.is_success() {
                    self.remember_basic_access();
                }
                return Ok(again);
            }
        }
        Ok(response)
    }

    /// As git-lfs does after a 401 that credentials answered: `lfs.<url>.access = basic` in the
    /// repository's configuration, so that the next request (git-xet's or git-lfs's) sends
    /// them at once instead of paying a refusal first. Failing to write it costs only that.
    fn remember_basic_access(&self) {
        if !self.git.in_repository() {
            return;
        }
        let key = format!("lfs.{}.access", self.url.bare);
        if let Err(e) = self.git.config_set(crate::git::Scope::Local, &key, "basic") {
            tracing::debug!(error = %e, "cannot record the LFS server's access mode");
        }
    }
}
