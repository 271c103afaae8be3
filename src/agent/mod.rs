//! The Git LFS custom transfer agent (`git-xet transfer`), which git-lfs runs and talks to over
//! stdin/stdout.
//!
//! | module | owns |
//! |---|---|
//! | [`protocol`] | messages, the per-process state machine, and the stdout writer |
//! | [`journal`] | the per-repository record of transferred objects (Xet hash, dedup) behind `git xet ls-files` |
//! | [`environment`] | the process environment as the command line captured it at start: the only source of variables below the CLI |
//! | [`settings`] | the standalone endpoint, its token, and the download temp dir, from env and git config |
//! | `netrc` | the user's netrc file, parsed and searched as git-lfs does |
//! | `ssh_auth` | `git-lfs-authenticate` over SSH for SSH remotes: the LFS URL and the headers of git-xet's own requests |
//! | [`http_settings`] | git's `http.*` settings (CAs, certificate checks, client certificate, proxy) for git-xet's own requests |
//! | [`error`] | [`TransferError`](error::TransferError), why a request failed, in words git-lfs shows the user |
//! | [`transfer`] | the protocol loop: one request at a time, uploads and downloads through an [`Endpoint`](xet_protocol::Endpoint) |
//! | [`shared_server`] | the private `git xet serve` the agents of one directory store share, started by the first that needs it |
//! | [`reader`] | reading LFS objects outside a transfer (`git xet cat`, `mount`): the local copy, or the remote's endpoint and the object's Xet file |
//! | [`terminal`] | the few lines the agent shows on the user's terminal (once per git-lfs command), and finding the git-lfs that started it |
//! | [`prune`] | pruning local objects safely in standalone mode: the check `git lfs prune --verify-remote` cannot do, and the agent's refusal to fake it |

pub(crate) mod batch_request;
pub mod environment;
pub mod error;
pub(crate) mod fetch;
pub mod http_settings;
pub mod journal;
pub(crate) mod netrc;
pub mod protocol;
pub mod prune;
pub mod reader;
pub mod settings;
pub mod shared_server;
pub(crate) mod ssh_auth;
pub mod terminal;
pub mod transfer;
