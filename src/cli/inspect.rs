//! `git-xet inspect`: a readable, validated dump of a xorb or a shard.
//!
//! The kind is told from the bytes: a shard starts with its 32-byte header tag; anything else is
//! read as a xorb (upload form or stored form). Every field is validated by the format layer's
//! readers; the first problem is reported with its byte offset and the command exits 1.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use super::CmdResult;
use xet_format::shard::{ParsedShard, Shard, HEADER_TAG};
use xet_format::xorb::{FooterVersion, ParsedXorb, XorbForm, MAX_ACCEPTED_BODY};
use xet_format::ShardHash;

/// Nothing larger can be a valid xorb (body limit plus the largest footer) or shard (64 MiB).
const MAX_INSPECT_BYTES: u64 = MAX_ACCEPTED_BODY + 1024 * 1024;

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Print a readable dump of a xorb or a shard, validating every field.\n\n\
Accepts a xorb in upload form (chunk region only) or stored form (with its footer), and a shard \
in upload form (no lookup tables or footer) or complete form. The kind is detected from the \
bytes. Chunk data is decompressed and every chunk hash, the xorb hash, offsets, counts and \
lookup tables are checked. On malformed input the command prints what was wrong and at which \
byte offset, and exits 1.",
    after_long_help = "Examples:\n  git xet inspect /srv/xet/xorbs/ab/<xorb hash>\n  \
git xet inspect --verbose /srv/xet/shards/<hash>.mdb"
)]
pub(crate) struct InspectArgs {
    /// A xorb or shard file.
    pub file: PathBuf,
    /// Also list every chunk of every xorb (shards) or every chunk of the xorb.
    #[arg(long, short)]
    pub verbose: bool,
}

pub fn run(args: &InspectArgs) -> CmdResult {
    let path = &args.file;
    let len = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    if len > MAX_INSPECT_BYTES {
        return Err(format!(
            "{}: {len} bytes is larger than any valid xorb or shard",
            path.display()
        )
        .into());
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = if bytes.starts_with(&HEADER_TAG) {
        let parsed = ParsedShard::parse(&bytes)
            .map_err(|e| format!("{}: invalid shard: {e}", path.display()))?;
        render_shard(&parsed, &bytes, args.verbose)
    } else {
        let parsed = ParsedXorb::parse(&bytes)
            .map_err(|e| format!("{}: invalid xorb: {e}", path.display()))?;
        render_xorb(&parsed, bytes.len(), args.verbose)
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

fn render_xorb(x: &ParsedXorb<'_>, total_len: usize, verbose: bool) -> String {
    let mut out = String::new();
    let form = match x.form() {
        XorbForm::Upload => "upload form (chunk region, no footer)",
        XorbForm::Stored => "stored form (chunk region + footer)",
        XorbForm::UploadWithFooter => "upload body ending in a footer without info_length",
    };
    // Writing to a String cannot fail.
    let _ = writeln!(out, "xorb {}", x.hash());
    let _ = writeln!(out, "  form:          {form}, {total_len} bytes");
    let _ = writeln!(
        out,
        "  chunks:        {} ({} bytes uncompressed, {} bytes in the chunk region)",
        x.num_chunks(),
        x.uncompressed_len(),
        x.chunk_region().len()
    );
    if let Some(footer) = x.footer() {
        let version = match footer.version() {
            FooterVersion::V0 => "0 (legacy)",
            FooterVersion::V1 => "1",
        };
        let nonce = footer.nonce();
        let _ = writeln!(
            out,
            "  footer:        version {version}, nonce {:02x}{:02x}{:02x}{:02x}",
            nonce[0], nonce[1], nonce[2], nonce[3]
        );
    }
    let mut schemes = std::collections::BTreeMap::new();
    for c in x.chunks() {
        *schemes.entry(format!("{:?}", c.scheme)).or_insert(0usize) += 1;
    }
    let summary: Vec<String> = schemes.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let _ = writeln!(out, "  schemes:       {}", summary.join(", "));
    let _ = writeln!(
        out,
        "  valid:         every chunk header, length and hash; the xorb hash"
    );
    if verbose || x.num_chunks() <= 32 {
        let _ = writeln!(
            out,
            "  {:>5}  {:>10}  {:>10}  {:>12}  {:<8}  chunk hash",
            "#", "offset", "compressed", "uncompressed", "scheme"
        );
        for (i, c) in x.chunks().iter().enumerate() {
            let _ = writeln!(
                out,
                "  {:>5}  {:>10}  {:>10}  {:>12}  {:<8}  {}",
                i,
                c.start,
                c.compressed_len(),
                c.uncompressed_len,
                format!("{:?}", c.scheme),
                c.hash
            );
        }
    } else {
        let _ = writeln!(out, "  ({} chunks; --verbose lists them)", x.num_chunks());
    }
    out
}

fn timestamp(t: u64) -> String {
    match t {
        0 => "0 (unset)".to_string(),
        u64::MAX => "never (u64::MAX)".to_string(),
        t => format!("{t} (unix seconds)"),
    }
}

fn render_shard(parsed: &ParsedShard, bytes: &[u8], verbose: bool) -> String {
    let shard: &Shard = &parsed.shard;
    let mut out = String::new();
    let form = if parsed.is_upload_form() {
        format!(
            "upload form (no lookup tables or footer; header footer_size {})",
            parsed.footer_size
        )
    } else {
        "complete form (with lookup tables and footer)".to_string()
    };
    let _ = writeln!(out, "shard {}", ShardHash::of(bytes));
    let _ = writeln!(out, "  form:          {form}, {} bytes", bytes.len());
    if parsed.footer.is_some() {
        render_shard_footer(parsed, &mut out);
    }
    let _ = writeln!(out, "  files:         {}", shard.files.len());
    for f in &shard.files {
        render_shard_file(f, &mut out);
    }
    let _ = writeln!(out, "  xorbs:         {}", shard.xorbs.len());
    for x in &shard.xorbs {
        render_shard_xorb(x, verbose, &mut out);
    }
    let _ = writeln!(
        out,
        "  valid:         header, sections, counts, offsets and lookup tables"
    );
    out
}

/// A complete shard's key, times, lookup tables and totals.
fn render_shard_footer(parsed: &ParsedShard, out: &mut String) {
    let Some(footer) = &parsed.footer else {
        return;
    };
    let meta = &parsed.shard.meta;
    let key = if meta.hmac_key.is_zero() {
        "none (chunk hashes not keyed)".to_string()
    } else {
        format!("{} (chunk hashes keyed)", meta.hmac_key)
    };
    let t = footer.lookup_tables;
    let tables: Vec<&str> = [(t.file, "file"), (t.xorb, "xorb"), (t.chunk, "chunk")]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
    let _ = writeln!(out, "  hmac key:      {key}");
    let _ = writeln!(
        out,
        "  created:       {}",
        timestamp(meta.creation_timestamp)
    );
    let _ = writeln!(out, "  key expiry:    {}", timestamp(meta.key_expiry));
    let tables = if tables.is_empty() {
        "none".to_string()
    } else {
        tables.join(", ")
    };
    let _ = writeln!(out, "  lookup tables: {tables}");
    let totals = footer.totals;
    let check = if parsed.totals_match() {
        "match the content"
    } else {
        "DO NOT match the content"
    };
    let _ = writeln!(
        out,
        "  totals:        materialized {} bytes, stored {} bytes, on disk {} bytes ({check})",
        totals.materialized_bytes, totals.stored_bytes, totals.stored_bytes_on_disk
    );
}

/// One file of a shard: its size, SHA-256 and terms.
fn render_shard_file(f: &xet_format::shard::FileInfo, out: &mut String) {
    let size: u64 = f
        .terms
        .iter()
        .map(|t| u64::from(t.unpacked_segment_bytes))
        .sum();
    let _ = writeln!(
        out,
        "    file {}  {} bytes, {} term(s), verification {}",
        f.hash,
        size,
        f.terms.len(),
        if f.verification.is_some() {
            "yes"
        } else {
            "no"
        }
    );
    if let Some(oid) = f.sha256 {
        let _ = writeln!(out, "      sha256 {oid}");
    }
    for (i, t) in f.terms.iter().enumerate() {
        let verify = f
            .verification
            .as_ref()
            .and_then(|v| v.get(i))
            .map(|h| format!("  verify {h}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "      term {i}: xorb {} chunks [{}, {}) {} bytes{verify}",
            t.xorb_hash, t.chunk_index_start, t.chunk_index_end, t.unpacked_segment_bytes
        );
    }
}

/// One xorb block of a shard (`verbose`: with its chunks).
fn render_shard_xorb(x: &xet_format::shard::XorbInfo, verbose: bool, out: &mut String) {
    let eligible = x
        .chunks
        .iter()
        .filter(|c| c.flags & xet_format::shard::CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE != 0)
        .count();
    let _ = writeln!(
        out,
        "    xorb {}  {} chunk(s), {} bytes, on disk {} bytes, {} flagged dedup-eligible",
        x.hash,
        x.chunks.len(),
        x.num_bytes_in_xorb,
        x.num_bytes_on_disk,
        eligible
    );
    if verbose {
        for (i, c) in x.chunks.iter().enumerate() {
            let _ = writeln!(
                out,
                "      chunk {i}: {}  offset {} len {} flags {:#010x}",
                c.hash, c.chunk_byte_range_start, c.unpacked_segment_bytes, c.flags
            );
        }
    }
}
