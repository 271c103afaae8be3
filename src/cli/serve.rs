//! `git-xet serve`: runs the self-hosted Xet CAS and Git LFS server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::CmdResult;
use crate::server::auth::{Scope, Secret};
use crate::server::{ServeConfig, Server};

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Run a self-hosted Xet CAS server and Git LFS server.\n\n\
Stores xorbs, shards and its index under --data. Git clients point `lfs.url` at \
<public URL>/<repo path>/info/lfs; the batch API hands Xet-capable agents a CAS URL and short-lived \
tokens, and serves plain `basic` LFS transfers too. The reference client (hf-xet) can use the CAS \
API at the public URL directly, with a token as bearer.\n\n\
Tokens: --token grants read and write, --read-token read only (each at least 16 characters). \
Tokens given on the command line are visible to other local users in the process list; prefer \
--token-file (lines `write <secret>` / `read <secret>`) or the environment variables \
GIT_XET_TOKEN and GIT_XET_READ_TOKEN (comma-separated).\n\n\
Logs go to stderr (RUST_LOG sets the level, default info). SIGINT or SIGTERM stops the server \
after the requests in flight.",
    after_long_help = "Example:\n  git-xet serve --data /srv/xet --listen 0.0.0.0:8080 \\\n      --public-url https://xet.example.org --token-file /etc/git-xet/tokens"
)]
pub struct ServeArgs {
    /// Directory of the store (created if missing; must be empty or an existing store).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
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
    /// A file of tokens, one `write <secret>` or `read <secret>` per line.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Lifetime of CAS access tokens handed out by the batch API, in seconds.
    #[arg(long, default_value_t = 900, value_name = "SECS")]
    pub token_ttl: u64,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Stop after this many seconds (for tests and demos).
    #[arg(long, hide = true, value_name = "SECS")]
    pub max_lifetime: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

fn secrets(args: &ServeArgs) -> Result<Vec<Secret>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for t in &args.tokens {
        out.push(Secret::new(t, Scope::Write, "--token")?);
    }
    for t in &args.read_tokens {
        out.push(Secret::new(t, Scope::Read, "--read-token")?);
    }
    for (var, scope) in [
        ("GIT_XET_TOKEN", Scope::Write),
        ("GIT_XET_READ_TOKEN", Scope::Read),
    ] {
        if let Ok(value) = std::env::var(var) {
            for t in value.split(',').filter(|t| !t.trim().is_empty()) {
                out.push(Secret::new(t, scope, var)?);
            }
        }
    }
    if let Some(path) = &args.token_file {
        out.extend(Secret::parse_file(path)?);
    }
    Ok(out)
}

pub fn run(args: &ServeArgs) -> CmdResult {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // Another subscriber may be set already (in tests); that is fine.
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    let secrets = secrets(args)?;
    if secrets.is_empty() {
        return Err(
            "no tokens configured: give --token, --read-token, --token-file, or set \
                    GIT_XET_TOKEN / GIT_XET_READ_TOKEN"
                .into(),
        );
    }
    let mut config = ServeConfig::new(args.data.clone(), secrets);
    config.listen = args.listen;
    config.public_url = args.public_url.clone();
    config.token_ttl = Duration::from_secs(args.token_ttl);
    config.max_lifetime = args.max_lifetime.map(Duration::from_secs);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = Server::bind(config).await?;
        tracing::info!(
            listen = %server.local_addr(),
            public_url = server.public_url(),
            data = %args.data.display(),
            "git-xet serve ready"
        );
        // The first line on stdout says where the server listens, for scripts and tests.
        println!("listening on {}", server.public_url());
        server.run(std::future::pending()).await
    })?;
    Ok(ExitCode::SUCCESS)
}
