//! `git-xet serve`: runs the self-hosted Xet CAS and Git LFS server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::args;
use super::CmdResult;
use crate::server::auth::{AdminToken, Scope, ServerToken, TokenFile};
use crate::server::{Limits, Maintenance, ServeConfig, Server, BLOCKING_GRACE};

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run a self-hosted Xet CAS server and Git LFS server.\n\n\
Stores xorbs, shards and its index under --data, or with --storage s3://BUCKET/PREFIX its xorbs \
and shards in an S3-compatible bucket that several servers (nodes) can share, each with its own \
--data directory for its cache of the index, temporary files, locks and copies of xorbs \
(--xorb-cache: what it stored, read whole or reads again is served from its disk). The bucket's endpoint, \
region and keys come from the standard AWS_* variables (AWS_ENDPOINT, AWS_REGION, \
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; path-style addressing unless \
AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true); GIT_XET_S3_ENDPOINTS=URL,URL,... names several endpoints \
of one store instead of AWS_ENDPOINT, tried in turn when one fails. Nodes find each other's uploads within about a second \
(at once when a lookup misses) and sign tokens with one key kept in the bucket, so any node \
serves what any other stored.\n\n\
URL layout: the server has no list of repositories. Every path of the form \
<public URL>/<repo>/info/lfs is a Git LFS endpoint, where <repo> is any path of one or more \
segments you choose (team/models, team/models.git); set it as the repository's lfs.url, \
e.g. `git config -f .lfsconfig lfs.url https://xet.example.org/team/models.git/info/lfs`, and \
commit .lfsconfig so that clones use it too. All repositories share one store (a chunk stored \
for one is deduplicated for all) and one set of tokens; <repo> separates their locks. The batch \
API (<repo>/info/lfs/objects/batch) offers the `xet` transfer to git-xet's agent, with a CAS URL \
(<public URL>) and short-lived tokens refreshed at <repo>/info/lfs/xet-token/…, \
and plain `basic` transfers to other clients. For standalone mode (`git xet install --endpoint \
URL`), URL is the public URL itself. The reference client (hf-xet) can use the CAS API at the \
public URL directly, with a token as bearer.\n\n\
Credentials: git sends a token as the password of the LFS URL (any user name), through its \
credential helper (`git config --global credential.helper store`, or your platform's), e.g. \
`printf 'url=https://xet.example.org\\nusername=git\\npassword=TOKEN\\n\\n' | git credential \
approve`.\n\n\
Tokens: --token grants read and write, --read-token read only (each at least 16 characters). \
Tokens given on the command line are visible to other local users in the process list; prefer \
--token-file (lines `write <secret> [<name>] [<repos>]` / `read <secret> [<name>] [<repos>]`) or \
the environment variables GIT_XET_TOKEN and GIT_XET_READ_TOKEN (comma-separated). <repos> limits \
a token to some repositories (team-a/*, team-a/models, or *): it then works only on their LFS \
API, and reads only files registered through the repository it asks for (a push or upload \
registers them; deduplication stays global). Tokens without <repos> are server-wide.\n\n\
Status page: with an admin token (--admin-token, GIT_XET_ADMIN_TOKEN, or an `admin <secret>` \
line in --token-file; a secret of its own, at least 16 characters), <public URL>/status shows the \
operator this node and the other nodes of --storage, each repository's logical and stored bytes, \
the deduplication ratio over time, recent pushes, the SHA-256 claims not checked yet and garbage \
collections; the browser asks for credentials: any user name, the admin token as password. \
<public URL>/status.json answers the same as JSON (the admin token as bearer or Basic password). \
The admin token opens nothing else, and read and write tokens do not open the page; without an \
admin token the page answers 404.\n\n\
Locks (the Git LFS File Locking API, per repository, kept in DIR/locks.redb): a lock's owner is \
the <name> its token has in the token file, else the user name git sends with the token (set it \
with `git config credential.<url>.username alice`), else a pseudonym of the token. Read tokens \
may list locks; creating, verifying and unlocking need a write token, and any write token may \
break someone else's lock with `git lfs unlock --force` (logged). The server keeps at most \
10,000 locks per repository, 10,000 created by the tokens of one <repos> pattern in all its \
repositories together (so one team cannot take them all), and 100,000 in all; beyond, a new \
lock is refused with 507 naming the limit.\n\n\
Limits: every client gets bounded resources whatever it does. At most --max-connections \
connections are open (one more is answered 503 and closed); uploads, downloads and other requests \
each have a number of slots (--max-uploads, --max-downloads, --max-requests), and a request of a \
saturated class is answered 503 with Retry-After, which clients retry. Response bodies stream \
from storage in pieces of 256 KiB; upload bodies are spooled to disk and stored --max-ingest at a \
time; small bodies (shards, batch requests) share --body-memory MiB of memory. A request head \
must arrive within --header-timeout (also the idle keep-alive time), a request body may pause at \
most --body-timeout (then 408), a response the client does not read is dropped after \
--send-timeout. A full disk is answered 507, which clients do not retry; --min-free keeps a \
reserve.\n\n\
Storage: every stored xorb is verified whole once, and again whenever its file changed on disk; \
damaged ones are quarantined under DIR/quarantine and repaired by the next upload of the same \
data. The server removes xorbs no file uses (interrupted pushes) every --gc-interval (default \
24h) once older than --gc-grace (with --storage, one node at a time: the one holding the gc \
lease), and verifies the whole store every --scrub-interval if set; while it runs, `git xet gc` \
and `git xet scrub` cannot open DIR.\n\n\
Logs go to stderr (RUST_LOG sets the level, default info). SIGINT or SIGTERM stops accepting \
connections, lets the requests in flight finish for at most --shutdown-timeout seconds, then \
closes what is left.",
    after_long_help = "Examples:\n  git xet serve --data ~/xet-data --token \"$(openssl rand -hex 16)\"\n  \
git-xet serve --data /srv/xet --listen 0.0.0.0:8080 \\\n      --public-url https://xet.example.org --token-file /etc/git-xet/tokens\n  \
# then, in a repository:\n  \
git config -f .lfsconfig lfs.url https://xet.example.org/team/models.git/info/lfs"
)]
pub(crate) struct ServeArgs {
    /// Directory of the store (created if missing; must be empty or an existing store). With
    /// --storage, this node's own directory (cache of the index, temporary files, locks).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Keep xorbs and shards in an S3-compatible bucket (s3://BUCKET/PREFIX) instead of --data;
    /// settings from the AWS_* environment.
    #[arg(long, value_name = "URL")]
    pub storage: Option<xet_store::storage_url::StorageUrl>,
    /// With --storage: reconstructions name presigned URLs of the bucket, so downloads go
    /// straight to the object storage (clients must reach its endpoint) instead of through
    /// this server.
    #[arg(long, requires = "storage")]
    pub storage_urls: bool,
    /// With several nodes on one --storage: the URL of the node that keeps Git LFS locks.
    /// Every other node forwards the locking API to it (one lock database decides); give the
    /// owner itself none (or its own --public-url). Clients' Authorization headers (their
    /// tokens) are forwarded to it as they came, so it must be https:// unless it is this
    /// machine (localhost, 127.0.0.1, ::1).
    #[arg(long, value_name = "URL")]
    pub lock_owner: Option<String>,
    /// Allow a --lock-owner URL of plain http:// to another machine: clients' tokens then cross
    /// the network between the nodes unencrypted (only for a private network you trust).
    #[arg(long, requires = "lock_owner")]
    pub lock_owner_insecure_http: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// URL clients reach the server at (behind a proxy, for instance); default http://<listen>.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// A read-write token (repeatable).
    #[arg(long = "token", value_name = "SECRET")]
    pub tokens: Vec<String>,
    /// A read-only token (repeatable).
    #[arg(long = "read-token", value_name = "SECRET")]
    pub read_tokens: Vec<String>,
    /// A file of tokens, one `write <secret> [<name>]` or `read <secret> [<name>]` per line;
    /// <name> is the user the token speaks for (owner of the Git LFS locks it creates).
    /// `admin <secret>` lines are admin tokens (see --admin-token).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A token that opens the status page (/status, /status.json) and nothing else; repeatable.
    /// Also GIT_XET_ADMIN_TOKEN (comma-separated) or `admin <secret>` lines of --token-file.
    #[arg(long = "admin-token", value_name = "SECRET")]
    pub admin_tokens: Vec<String>,
    /// Lifetime of CAS access tokens handed out by the batch API, in seconds.
    #[arg(long, default_value = "900", value_name = "SECS", value_parser = args::positive_duration)]
    pub token_ttl: Duration,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Stop after this many seconds (for tests and demos).
    #[arg(long, hide = true, value_name = "SECS", value_parser = args::positive_duration)]
    pub max_lifetime: Option<Duration>,
    /// Stop once no connection has been open for this many seconds (the private server agents
    /// share for a directory store), and the SHA-256 claims registered so far are checked.
    #[arg(long, hide = true, value_name = "SECS", value_parser = args::positive_duration)]
    pub idle_exit: Option<Duration>,
    /// Make up a write token and write it, with the URL and the process id, to
    /// DIR/local-server.json (mode 0600); remove that file at exit. What an agent starts for a
    /// directory store.
    #[arg(long, hide = true)]
    pub announce: bool,
    #[command(flatten)]
    pub limits: Box<LimitArgs>,
    #[command(flatten)]
    pub store: Box<StoreArgs>,
}

/// The store's disk reserve and maintenance schedule.
#[derive(Debug, clap::Args)]
pub(crate) struct StoreArgs {
    /// Keep SIZE of the store's filesystem free (500M, 2G): uploads that would leave less are
    /// refused with 507 Insufficient Storage, as on a full disk [default: 0].
    #[arg(long, value_name = "SIZE", value_parser = args::size, help_heading = "Storage")]
    pub min_free: Option<u64>,
    /// Remove xorbs no registered file uses (interrupted pushes) this often, e.g. 24h; 0 turns
    /// it off [default: 24h]. Nodes sharing object storage take turns: one collects, the others
    /// leave it to that node while its lease runs.
    #[arg(long, value_name = "DURATION", value_parser = args::duration, help_heading = "Storage")]
    pub gc_interval: Option<Duration>,
    /// Keep unused xorbs younger than this, so uploads in flight are not harmed; at least 10m
    /// [default: 24h].
    #[arg(long, value_name = "DURATION", value_parser = args::grace, help_heading = "Storage")]
    pub gc_grace: Option<Duration>,
    /// With --storage: answer /ready with 503 once this node's last successful catch-up with
    /// the other nodes is older than this and its catch-ups fail (or five times older, however
    /// it is going), so that a load balancer stops sending it requests [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = args::positive_duration, help_heading = "Storage")]
    pub ready_max_lag: Option<Duration>,
    /// With --storage: write a checkpoint of the shard log this often, so that a node on an
    /// empty disk reads one object instead of every shard, and delete the log entries, claim
    /// batches and shards an hour-old checkpoint covers; 0 turns it off (the bucket's metadata
    /// then grows with every push) [default: 1h]. Nodes take turns, as for --gc-interval.
    #[arg(long, value_name = "DURATION", value_parser = args::duration, help_heading = "Storage")]
    pub checkpoint_interval: Option<Duration>,
    /// Verify every stored object this often (reads the whole store), e.g. 7d; 0 turns it off
    /// [default: 0].
    #[arg(long, value_name = "DURATION", value_parser = args::duration, help_heading = "Storage")]
    pub scrub_interval: Option<Duration>,
    /// With --storage: keep copies of up to SIZE of xorbs on this node's disk, under
    /// DIR/xorb-cache, and serve downloads from them (xorbs this node stored, small xorbs it
    /// read whole, and xorbs it read from the bucket more than once); the least recently used go first, and no copy takes
    /// the disk below 1G free or the --min-free reserve; 0 turns it off [default: 8G].
    #[arg(long, value_name = "SIZE", value_parser = args::size, help_heading = "Storage")]
    pub xorb_cache: Option<u64>,
}

/// The store options and maintenance schedule: the defaults, with what was given. On shared
/// object storage, scheduled garbage collection runs on one node of a cluster at a time, the
/// one that holds the lease on it (see `server::maintenance`).
fn store_settings(args: &StoreArgs) -> Result<(xet_store::StoreOptions, Maintenance), String> {
    let mut m = Maintenance::default();
    let every = |d: Duration| (!d.is_zero()).then_some(d);
    if let Some(d) = args.gc_interval {
        m.gc_interval = every(d);
    }
    if let Some(d) = args.gc_grace {
        m.gc_grace = d;
    }
    if let Some(d) = args.ready_max_lag {
        m.ready_max_lag = d;
    }
    if let Some(d) = args.scrub_interval {
        m.scrub_interval = every(d);
    }
    if let Some(d) = args.checkpoint_interval {
        m.checkpoint_interval = every(d);
    }
    let options = xet_store::StoreOptions {
        min_free_bytes: args.min_free.unwrap_or(0),
        xorb_cache_bytes: args
            .xorb_cache
            .unwrap_or(xet_store::xorb_cache::DEFAULT_BYTES),
        ..Default::default()
    };
    Ok((options, m))
}

/// The `Limits` flags (boxed in [`ServeArgs`] to keep the command enum small).
#[derive(Debug, clap::Args)]
pub(crate) struct LimitArgs {
    /// Open connections at most [default: 1024].
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub max_connections: Option<usize>,
    /// Uploads (xorbs, shards, basic PUTs) in progress at most; more are 503 [default: 256].
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub max_uploads: Option<usize>,
    /// Downloads (xorb data, basic GETs) in progress at most; more are 503 [default: 256].
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub max_downloads: Option<usize>,
    /// Other requests (reconstructions, batch, dedup, …) in progress at most; more are 503
    /// [default: 512].
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub max_requests: Option<usize>,
    /// Uploads validated and stored at once (the others wait) [default: CPUs, 1 to 4].
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub max_ingest: Option<usize>,
    /// Memory for small request bodies (shards, batch, verify), all requests together, in MiB;
    /// beyond it requests are 503 [default: 256].
    #[arg(long, value_name = "MIB", help_heading = "Limits")]
    pub body_memory: Option<u64>,
    /// Seconds for a request head to arrive; also how long an idle keep-alive connection stays
    /// open [default: 30].
    #[arg(long, value_name = "SECS", value_parser = args::positive_duration, help_heading = "Limits")]
    pub header_timeout: Option<Duration>,
    /// Seconds a request body may pause before the request fails with 408 [default: 60].
    #[arg(long, value_name = "SECS", value_parser = args::positive_duration, help_heading = "Limits")]
    pub body_timeout: Option<Duration>,
    /// Seconds a response may stall because the client does not read it; then the connection
    /// is closed [default: 60].
    #[arg(long, value_name = "SECS", value_parser = args::positive_duration, help_heading = "Limits")]
    pub send_timeout: Option<Duration>,
    /// On SIGINT/SIGTERM, seconds the requests in flight get to finish [default: 10].
    #[arg(long, value_name = "SECS", value_parser = args::positive_duration, help_heading = "Limits")]
    pub shutdown_timeout: Option<Duration>,
}

/// The limits: the defaults, with what was given on the command line.
fn limits(args: &LimitArgs) -> Result<Limits, Box<dyn std::error::Error>> {
    let mut l = Limits::default();
    let positive = |name: &str, v: usize| -> Result<usize, Box<dyn std::error::Error>> {
        if v == 0 {
            return Err(format!("--{name} must be at least 1").into());
        }
        Ok(v)
    };
    if let Some(v) = args.max_connections {
        l.max_connections = positive("max-connections", v)?;
    }
    if let Some(v) = args.max_uploads {
        l.max_uploads = positive("max-uploads", v)?;
    }
    if let Some(v) = args.max_downloads {
        l.max_downloads = positive("max-downloads", v)?;
    }
    if let Some(v) = args.max_requests {
        l.max_requests = positive("max-requests", v)?;
    }
    if let Some(v) = args.max_ingest {
        l.max_ingest = positive("max-ingest", v)?;
    }
    if let Some(mib) = args.body_memory {
        // The largest small body (a shard) must fit, or it would be told "busy" forever.
        let least = xet_format::shard::MAX_SHARD_SIZE >> 20;
        if mib < least {
            return Err(format!(
                "--body-memory must be at least {least} (MiB): a shard may be that large"
            )
            .into());
        }
        l.body_memory = mib
            .checked_mul(1 << 20)
            .ok_or("--body-memory is too large")?;
    }
    l.header_timeout = args.header_timeout.unwrap_or(l.header_timeout);
    l.body_timeout = args.body_timeout.unwrap_or(l.body_timeout);
    l.send_timeout = args.send_timeout.unwrap_or(l.send_timeout);
    l.shutdown_timeout = args.shutdown_timeout.unwrap_or(l.shutdown_timeout);
    Ok(l)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// The read and write secrets, and the admin tokens, from the flags, the environment and the
/// token file.
type Secrets = (Vec<ServerToken>, Vec<AdminToken>);

fn secrets(args: &ServeArgs) -> Result<Secrets, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    let mut admin = Vec::new();
    for t in &args.admin_tokens {
        admin.push(AdminToken::new(t, "--admin-token")?);
    }
    if let Ok(value) = std::env::var("GIT_XET_ADMIN_TOKEN") {
        for t in value.split(',').filter(|t| !t.trim().is_empty()) {
            admin.push(AdminToken::new(t, "GIT_XET_ADMIN_TOKEN")?);
        }
    }
    for t in &args.tokens {
        out.push(ServerToken::new(t, Scope::Write, "--token")?);
    }
    for t in &args.read_tokens {
        out.push(ServerToken::new(t, Scope::Read, "--read-token")?);
    }
    for (var, scope) in [
        ("GIT_XET_TOKEN", Scope::Write),
        ("GIT_XET_READ_TOKEN", Scope::Read),
    ] {
        if let Ok(value) = std::env::var(var) {
            for t in value.split(',').filter(|t| !t.trim().is_empty()) {
                out.push(ServerToken::new(t, scope, var)?);
            }
        }
    }
    if let Some(path) = &args.token_file {
        let file = TokenFile::parse(path)?;
        out.extend(file.tokens);
        admin.extend(file.admin);
    }
    Ok((out, admin))
}

pub fn run(args: &ServeArgs) -> CmdResult {
    init_logging(args.log_format);
    crate::agent::settings::register_env_secrets();
    let (mut secrets, admin_tokens) = secrets(args)?;
    let announce_token = if args.announce {
        let bytes = xet_protocol::random_bytes::<32>()
            .map_err(|e| format!("cannot make up a token: {e}"))?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        xet_protocol::redact::register_secret(&token);
        secrets.push(ServerToken::new(&token, Scope::Write, "--announce")?);
        Some(token)
    } else {
        None
    };
    if secrets.is_empty() {
        return Err(
            "no tokens configured: give --token, --read-token, --token-file, or set \
                    GIT_XET_TOKEN / GIT_XET_READ_TOKEN"
                .into(),
        );
    }
    let mut config = serve_config(args, secrets)?;
    config.admin_tokens = admin_tokens;
    // Workers mark themselves, so that blocking work on one is caught (see
    // xet_protocol::util::worker).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(xet_protocol::util::worker::mark_async_worker)
        .build()?;
    let served = runtime.block_on(async {
        let server = Server::bind(config).await?;
        tracing::info!(
            listen = %server.local_addr(),
            public_url = server.public_url(),
            data = %args.data.display(),
            "git-xet serve ready"
        );
        if let Some(token) = &announce_token {
            let announce = xet_store::announce::Announce {
                url: server.public_url().to_string(),
                token: token.clone(),
                pid: std::process::id(),
            };
            xet_store::announce::write(&args.data, &announce).map_err(|e| {
                crate::server::ServeError::Serve(std::io::Error::other(format!(
                    "cannot announce the server in {}: {e}",
                    args.data.display()
                )))
            })?;
        }
        // The first line on stdout says where the server listens, for scripts and tests.
        println!("listening on {}", server.public_url());
        let served = server.run(std::future::pending()).await;
        if announce_token.is_some() {
            xet_store::announce::withdraw(&args.data, std::process::id());
        }
        served
    });
    // Blocking work still running (an upload pipeline) is not waited for long: the store is
    // crash-safe, and the deadline of the shutdown has passed.
    runtime.shutdown_timeout(BLOCKING_GRACE);
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Logs to stderr (`RUST_LOG` sets the level, default info) in `format`, through the redaction
/// every other command uses (tokens, URL passwords, signatures), without colour codes, which
/// would end up in log files.
fn init_logging(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| super::transfer::log_filter(&f))
        .or_else(|| super::transfer::log_filter("info"))
        .unwrap_or_default();
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(super::transfer::Redacting(std::io::stderr));
    let layer = match format {
        LogFormat::Text => layer.with_filter(filter).boxed(),
        LogFormat::Json => layer.json().with_filter(filter).boxed(),
    };
    // Another subscriber may be set already (in tests); that is fine.
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

/// The server's configuration from the command line (and the environment, for object storage
/// credentials).
fn serve_config(
    args: &ServeArgs,
    secrets: Vec<ServerToken>,
) -> Result<ServeConfig, Box<dyn std::error::Error>> {
    let mut config = ServeConfig::new(args.data.clone(), secrets);
    config.storage = args
        .storage
        .clone()
        .map(|url| xet_store::storage_url::S3Config::from_vars(url, std::env::vars()));
    config.storage_urls = args.storage_urls;
    config.lock_owner = args.lock_owner.clone();
    config.lock_owner_insecure_http = args.lock_owner_insecure_http;
    config.listen = args.listen;
    config.public_url = args.public_url.clone();
    config.token_ttl = args.token_ttl;
    config.max_lifetime = args.max_lifetime;
    config.idle_exit = args.idle_exit;
    config.limits = limits(&args.limits)?;
    (config.store, config.maintenance) = store_settings(&args.store)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parse(args: &[&str]) -> Result<Limits, String> {
        let mut all = vec!["serve", "--data", "/tmp/x"];
        all.extend_from_slice(args);
        let cli = Cli::try_parse_from(all).map_err(|e| e.to_string())?;
        limits(&cli.serve.limits).map_err(|e| e.to_string())
    }

    #[test]
    fn admin_tokens_come_from_the_flag_and_the_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(
            &file,
            "write wwwwwwwwwwwwwwwwwwww\nadmin aaaaaaaaaaaaaaaaaaaa\n",
        )
        .unwrap();
        let parse = |args: &[&str]| {
            let mut all = vec!["serve", "--data", "/tmp/x"];
            all.extend_from_slice(args);
            let cli = Cli::try_parse_from(all).map_err(|e| e.to_string())?;
            secrets(&cli.serve).map_err(|e| e.to_string())
        };
        let path = file.to_str().unwrap();
        let (tokens, admin) = parse(&[
            "--admin-token",
            "bbbbbbbbbbbbbbbbbbbb",
            "--token-file",
            path,
        ])
        .unwrap();
        assert_eq!((tokens.len(), admin.len()), (1, 2));
        let e = parse(&["--admin-token", "short"]).unwrap_err();
        assert!(e.contains("--admin-token") && e.contains("16"), "{e}");
    }

    #[test]
    fn storage_flags() {
        let settings = |args: &[&str]| {
            let mut all = vec!["serve", "--data", "/tmp/x"];
            all.extend_from_slice(args);
            let cli = Cli::try_parse_from(all).map_err(|e| e.to_string())?;
            store_settings(&cli.serve.store)
        };
        let (options, m) = settings(&[]).unwrap();
        assert_eq!(options.min_free_bytes, 0);
        assert_eq!(options.xorb_cache_bytes, 8 << 30);
        assert_eq!(
            settings(&["--xorb-cache", "0"]).unwrap().0.xorb_cache_bytes,
            0
        );
        assert_eq!(m, Maintenance::default());
        assert_eq!(m.gc_interval, Some(Duration::from_secs(86400)));
        assert_eq!(m.scrub_interval, None);
        let (options, m) = settings(&[
            "--min-free",
            "2G",
            "--gc-interval",
            "0",
            "--gc-grace",
            "2h",
            "--scrub-interval",
            "7d",
        ])
        .unwrap();
        assert_eq!(options.min_free_bytes, 2 << 30);
        assert_eq!(m.gc_interval, None);
        assert_eq!(m.gc_grace, Duration::from_secs(7200));
        assert_eq!(m.scrub_interval, Some(Duration::from_secs(7 * 86400)));
        assert_eq!(m.ready_max_lag, Duration::from_secs(60));
        let (_, m) = settings(&["--ready-max-lag", "2m"]).unwrap();
        assert_eq!(m.ready_max_lag, Duration::from_secs(120));
        assert!(settings(&["--ready-max-lag", "0"]).is_err());
        // On object storage as well (the nodes take turns through a lease in the bucket).
        let shared = |args: &[&str]| {
            let mut all = vec!["serve", "--data", "/tmp/x", "--storage", "s3://bucket/p"];
            all.extend_from_slice(args);
            let cli = Cli::try_parse_from(all).unwrap();
            store_settings(&cli.serve.store).unwrap().1
        };
        assert_eq!(shared(&[]).gc_interval, Some(Duration::from_secs(86400)));
        assert_eq!(
            shared(&["--gc-interval", "12h"]).gc_interval,
            Some(Duration::from_secs(12 * 3600))
        );
        assert_eq!(
            shared(&[]).checkpoint_interval,
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            shared(&["--checkpoint-interval", "15m"]).checkpoint_interval,
            Some(Duration::from_secs(900))
        );
        assert_eq!(
            shared(&["--checkpoint-interval", "0"]).checkpoint_interval,
            None
        );
        let e = settings(&["--min-free", "lots"]).unwrap_err();
        assert!(e.contains("not a size"), "{e}");
        let e = settings(&["--gc-interval", "soon"]).unwrap_err();
        assert!(e.contains("not a duration"), "{e}");
        let e = settings(&["--gc-grace", "5m"]).unwrap_err();
        assert!(e.contains("shortest grace period, 10m"), "{e}");
    }

    #[test]
    fn limit_flags() {
        assert_eq!(parse(&[]).unwrap(), Limits::default());
        let l = parse(&[
            "--max-connections",
            "10",
            "--max-uploads",
            "3",
            "--body-memory",
            "80",
            "--send-timeout",
            "0.25",
            "--shutdown-timeout",
            "5",
        ])
        .unwrap();
        assert_eq!(l.max_connections, 10);
        assert_eq!(l.max_uploads, 3);
        assert_eq!(l.body_memory, 80 << 20);
        assert_eq!(l.send_timeout, Duration::from_millis(250));
        assert_eq!(l.shutdown_timeout, Duration::from_secs(5));
        assert_eq!(l.body_timeout, Limits::default().body_timeout);
        for bad in [
            &["--send-timeout", "0"][..],
            &["--body-timeout", "-1"],
            &["--header-timeout", "soon"],
            &["--max-downloads", "0"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
