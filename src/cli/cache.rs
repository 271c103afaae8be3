//! `git xet cache [show|prune|clear]`: the local shard cache ([`xet_client::shard_cache`]).
//!
//! `show` (the default) prints the cache root and, per endpoint directory, the number and size
//! of its shards; `prune` deletes least recently used shards of every endpoint until each fits a
//! size; `clear` deletes every cached shard. Exit status 0 on success, 1 (with a message on
//! stderr) when the cache cannot be found, listed or changed.

use std::io::Write;
use std::process::ExitCode;

use super::CmdResult;
use crate::agent::settings::{
    self, CACHE_DIR_ENV, CACHE_MAX_SIZE_ENV, CHUNK_CACHE_MAX_SIZE_ENV as CHUNK_MAX_SIZE_ENV,
};
use xet_client::chunk_cache::CHUNKS_SUBDIR;
use xet_client::shard_cache::SHARDS_SUBDIR;
use xet_client::{ChunkCache, ShardCache};
use xet_protocol::util::size::format_size;

#[derive(Debug, clap::Args)]
// The one-line description is the `about` of `Command::Cache` in `cli/mod.rs`; the details
// follow it in the long help (`--help`, the man page).
#[command(
    after_help = "Location: $GIT_XET_CACHE_DIR, else the user's cache directory; limit: \
$GIT_XET_CACHE_MAX_SIZE per endpoint (default 1G). See --help for more.",
    after_long_help = "When git-xet uploads, it keeps the shards of its uploads and the server's dedup answers in the \
user's cache directory, one directory per endpoint, so that later uploads (of an edited file, \
say) find the chunks the server already has without asking it. Each endpoint directory is \
limited in size; the least recently used shards are deleted first.\n\n\
Location: $GIT_XET_CACHE_DIR if set, else the user's cache directory (~/.cache/git-xet on Linux, \
~/Library/Caches/git-xet on macOS, %LOCALAPPDATA%\\git-xet\\cache on Windows), then \
shards/<endpoint>/.\n\
Limit: $GIT_XET_CACHE_MAX_SIZE per endpoint (e.g. 500M, 2G), 1G if unset.\n\n\
Downloads keep the xorb ranges they fetch in chunks/<endpoint>/, so that later downloads \
(the next version of a file, other versions in the same fetch) fetch only chunks not seen \
before; limit $GIT_XET_CHUNK_CACHE_MAX_SIZE per endpoint (default 4G; 0 turns it off). `show` \
and `clear` include it; it prunes itself after downloads.\n\n\
Deleting the cache is always safe: it only costs deduplication until it fills again.\n\n\
Examples:\n  git xet cache\n  git xet cache prune --max-size 200M\n  git xet cache clear"
)]
pub(crate) struct CacheArgs {
    #[command(subcommand)]
    pub action: Option<CacheAction>,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum CacheAction {
    /// Print the cache root and each endpoint's number of shards and bytes (the default).
    Show,
    /// Delete the least recently used shards of every endpoint until each fits a size.
    #[command(
        long_about = "Delete the least recently used shards of every endpoint directory until \
each holds at most --max-size bytes. Also deletes leftover temporary files, damaged shards and \
dedup answers whose key expired more than 7 days ago. Safe while uploads run."
    )]
    Prune(PruneArgs),
    /// Delete every cached shard of every endpoint.
    Clear,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PruneArgs {
    /// Keep at most SIZE per endpoint: bytes, or with a binary suffix K, M, G or T (500M, 2G).
    /// Default: $GIT_XET_CACHE_MAX_SIZE, or 1G.
    #[arg(long, value_name = "SIZE", value_parser = super::args::size)]
    pub max_size: Option<u64>,
}

pub fn run(args: &CacheArgs) -> CmdResult {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &args.action {
        None | Some(CacheAction::Show) => show(&mut out),
        Some(CacheAction::Prune(p)) => prune(p, &mut out),
        Some(CacheAction::Clear) => clear(&mut out),
    }
}

fn shards_line(n: u64, bytes: u64) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{n} shard{s}, {bytes} bytes ({})", format_size(bytes))
}

fn show(out: &mut impl Write) -> CmdResult {
    let config = settings::cache_config()?;
    let root = config.root.clone();
    let limit = config.shard_max_bytes;
    let from_env = std::env::var_os(CACHE_DIR_ENV).is_some_and(|v| !v.is_empty());
    writeln!(
        out,
        "cache root: {}{}",
        root.display(),
        if from_env {
            format!(" (from {CACHE_DIR_ENV})")
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "shard cache: {} (limit {} per endpoint)",
        root.join(SHARDS_SUBDIR).display(),
        format_size(limit)
    )?;
    let caches = ShardCache::all_under(&root)?;
    let (mut shards, mut bytes) = (0, 0);
    for cache in &caches {
        let stats = cache.stats()?;
        writeln!(
            out,
            "  {}: {}",
            dir_name(cache),
            shards_line(stats.shards, stats.bytes)
        )?;
        shards += stats.shards;
        bytes += stats.bytes;
    }
    let dirs = caches.len();
    writeln!(
        out,
        "total: {} in {dirs} endpoint director{}",
        shards_line(shards, bytes),
        if dirs == 1 { "y" } else { "ies" }
    )?;
    let (mut entries, mut chunk_bytes) = (0, 0);
    for c in ChunkCache::all_under(&root) {
        let (n, b) = c.stats();
        entries += n;
        chunk_bytes += b;
    }
    let chunk_limit = config.chunk_max_bytes;
    writeln!(
        out,
        "download chunk cache: {} ({}): {entries} xorb ranges, {}",
        root.join(CHUNKS_SUBDIR).display(),
        if chunk_limit == 0 {
            format!("off: {CHUNK_MAX_SIZE_ENV}=0")
        } else {
            format!("limit {} per endpoint", format_size(chunk_limit))
        },
        format_size(chunk_bytes)
    )?;
    Ok(ExitCode::SUCCESS)
}

fn dir_name(cache: &ShardCache) -> String {
    cache.dir().file_name().map_or_else(
        || cache.dir().display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn prune(args: &PruneArgs, out: &mut impl Write) -> CmdResult {
    let max = match args.max_size {
        Some(m) => m,
        None => {
            settings::cache_config()
                .map_err(|e| format!("{e}; fix {CACHE_MAX_SIZE_ENV} or pass --max-size"))?
                .shard_max_bytes
        }
    };
    let root = settings::cache_root()?;
    let mut failed = false;
    let (mut removed, mut removed_bytes, mut kept, mut kept_bytes) = (0, 0, 0, 0);
    for cache in ShardCache::all_under(&root)? {
        match cache.prune(max) {
            Ok(r) => {
                writeln!(
                    out,
                    "  {}: removed {}; kept {}",
                    dir_name(&cache),
                    shards_line(r.removed_shards, r.removed_bytes),
                    shards_line(r.kept_shards, r.kept_bytes)
                )?;
                removed += r.removed_shards;
                removed_bytes += r.removed_bytes;
                kept += r.kept_shards;
                kept_bytes += r.kept_bytes;
            }
            Err(e) => {
                eprintln!("git-xet: error: pruning {}: {e}", cache.dir().display());
                failed = true;
            }
        }
    }
    writeln!(
        out,
        "pruned to {} per endpoint: removed {}; kept {}",
        format_size(max),
        shards_line(removed, removed_bytes),
        shards_line(kept, kept_bytes)
    )?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn clear(out: &mut impl Write) -> CmdResult {
    let root = settings::cache_root()?;
    let mut failed = false;
    let (mut removed, mut removed_bytes) = (0, 0);
    for cache in ShardCache::all_under(&root)? {
        match cache.clear() {
            Ok(r) => {
                removed += r.removed_shards;
                removed_bytes += r.removed_bytes;
                if r.kept_shards > 0 {
                    eprintln!(
                        "git-xet: error: {} still holds {} (written meanwhile, or not deletable)",
                        cache.dir().display(),
                        shards_line(r.kept_shards, r.kept_bytes)
                    );
                    failed = true;
                }
            }
            Err(e) => {
                eprintln!("git-xet: error: clearing {}: {e}", cache.dir().display());
                failed = true;
            }
        }
    }
    // Only if empty; harmless otherwise.
    let _ = std::fs::remove_dir(root.join(SHARDS_SUBDIR));
    // The download chunk cache: any entry may go at any time (a download in flight re-fetches).
    let chunks_dir = root.join(CHUNKS_SUBDIR);
    let chunk_bytes: u64 = ChunkCache::all_under(&root)
        .iter()
        .map(|c| c.stats().1)
        .sum();
    if chunks_dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&chunks_dir) {
            eprintln!("git-xet: error: clearing {}: {e}", chunks_dir.display());
            failed = true;
        }
    }
    writeln!(
        out,
        "removed {} of downloaded chunks from {}",
        format_size(chunk_bytes),
        chunks_dir.display()
    )?;
    writeln!(
        out,
        "removed {} from {}",
        shards_line(removed, removed_bytes),
        root.join(SHARDS_SUBDIR).display()
    )?;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
