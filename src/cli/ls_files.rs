//! `git xet ls-files [REF]`: the LFS files of a tree with their oids, sizes, Xet hashes and how
//! much of each was deduplicated.
//!
//! The files are the Git LFS pointers of the tree `REF` names (`HEAD` by default), read
//! in-process with `git2` ([`crate::git::objects`]): no journal, no git-lfs and no checkout are
//! needed, so a fresh clone (even one made with `GIT_LFS_SKIP_SMUDGE=1`) lists every file. Each
//! oid is joined with the transfer journal ([`crate::agent::journal`]), which the agent writes as
//! it uploads and downloads. An object the journal does not know but that is in the local LFS
//! store (`<lfs storage>/objects/xx/yy/<oid>`) is hashed on the spot and marked `(computed)`;
//! its dedup is unknown. Besides dedup (uploads), each row shows the bytes that went over the
//! wire and, for downloads, the bytes taken from this machine instead (earlier versions, the
//! download chunk cache, an interrupted download's partial file). Endpoints are shown redacted ([`xet_protocol::redact`]), also those of
//! journals written before redaction (the rest is hashes, sizes and the user's own paths, shown
//! as they are).

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

use super::CmdResult;
use crate::agent::journal::{self, Direction, Record};
use crate::git::{objects, Git};
use xet_client::pipeline::hasher::hash_file;
use xet_format::{FileHash, LfsOid};
use xet_protocol::util::size::format_size;

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Lists the Git LFS files of the tree REF names (HEAD by default; any \
commit, branch, tag or tree, such as HEAD~1 or main:data). The pointers are read from the \
repository's objects, so a fresh clone lists every file, downloaded or not.\n\n\
Columns: the Xet file hash (first 12 digits; all 64 with --long), the LFS oid (SHA-256, \
likewise), the size, the share of the file that was already stored when it was uploaded \
(DEDUP), the bytes that went over the wire for the upload or download (WIRE: xorb bytes as \
stored, compressed), the bytes of a download taken from this machine instead (REUSED: earlier \
versions of the file, the download chunk cache, an interrupted download's partial file), all \
from the transfer journal .git/xet/transfers.jsonl, and the path. Downloads recorded by \
versions of git-xet before REUSED existed count what they read from the chunk cache under WIRE, \
as file bytes.\n\n\
A file with no journal record but whose object is in the local LFS store is hashed now and \
marked \"(computed)\"; its dedup is unknown (\"-\"). A file that is neither is marked \
\"(not downloaded)\". A path with a control character (a newline, say), `\"` or `\\` is shown \
quoted as git quotes it (\"a\\nb.bin\"); --json has it exactly.\n\n\
With --json, one object {\"files\": [...]} with, per file: path, oid, size, xet_hash, \
hash_source (journal, computed or null), direction (upload, download or null), dedup_bytes, \
dedup_percent, transferred_bytes (the wire), reused_bytes (downloads) and endpoint (null when \
unknown).\n\n\
Examples:\n  git xet ls-files\n  git xet ls-files --long v1.0\n  git xet ls-files --json | jq '.files[] | select(.dedup_percent > 50)'"
)]
pub(crate) struct LsFilesArgs {
    /// The commit or tree to list (default: HEAD).
    #[arg(value_name = "REF", default_value = "HEAD")]
    pub rev: String,
    /// Show whole hashes and oids, and sizes in bytes.
    #[arg(short, long)]
    pub long: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One LFS file of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LfsFile {
    name: String,
    oid: LfsOid,
    size: u64,
}

/// One output row; field order is the JSON key order.
#[derive(Debug, Serialize)]
struct Row {
    path: String,
    oid: LfsOid,
    size: u64,
    xet_hash: Option<FileHash>,
    /// `journal`, `computed`, or `None` when the hash is unknown.
    hash_source: Option<&'static str>,
    direction: Option<Direction>,
    dedup_bytes: Option<u64>,
    dedup_percent: Option<f64>,
    /// Bytes on the wire.
    transferred_bytes: Option<u64>,
    /// Bytes of a download taken from this machine.
    reused_bytes: Option<u64>,
    endpoint: Option<String>,
}

#[derive(Debug, Serialize)]
struct Listing {
    files: Vec<Row>,
}

pub fn run(args: &LsFilesArgs) -> CmdResult {
    let git = Git::new();
    if !git.in_repository() {
        return Err("`git xet ls-files` needs to run inside a git repository".into());
    }
    let files = lfs_files(&git, &args.rev)?;
    let common = git.common_dir()?;
    let records = journal::read(&common).map_err(|e| {
        format!(
            "cannot read the transfer journal {}: {e}",
            journal::path(&common).display()
        )
    })?;
    let objects = crate::agent::prune::objects_dir(&git)?;

    let mut rows = Vec::with_capacity(files.len());
    for file in files {
        let row = match records.get(&file.oid) {
            Some(record) => from_record(file, record),
            None => {
                let local = xet_client::object_chunks::object_path(&objects, &file.oid);
                let hash = match local {
                    p if p.is_file() => match hash_file(&p) {
                        Ok(h) => Some(h.file_hash),
                        Err(e) => {
                            eprintln!(
                                "git-xet: {}: {}",
                                file.name,
                                xet_protocol::redact::redact(&e.to_string())
                            );
                            None
                        }
                    },
                    _ => None,
                };
                Row {
                    path: file.name,
                    oid: file.oid,
                    size: file.size,
                    hash_source: hash.as_ref().map(|_| "computed"),
                    xet_hash: hash,
                    direction: None,
                    dedup_bytes: None,
                    dedup_percent: None,
                    transferred_bytes: None,
                    reused_bytes: None,
                    endpoint: None,
                }
            }
        };
        rows.push(row);
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &Listing { files: rows })?;
        writeln!(out)?;
    } else {
        render(&rows, args.long, &args.rev, &mut out)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn from_record(file: LfsFile, record: &Record) -> Row {
    // Dedup means something only for uploads: how much of the file the server already had.
    let dedup = (record.direction == Direction::Upload).then_some(record.dedup_bytes);
    let size = if record.size > 0 {
        record.size
    } else {
        file.size
    };
    Row {
        path: file.name,
        oid: file.oid,
        size: file.size,
        xet_hash: Some(record.xet_hash),
        hash_source: Some("journal"),
        direction: Some(record.direction),
        dedup_bytes: dedup,
        dedup_percent: dedup.filter(|_| size > 0).map(|d| {
            let pct = d.min(size) as f64 * 100.0 / size as f64;
            (pct * 10.0).round() / 10.0
        }),
        transferred_bytes: Some(record.transferred_bytes),
        // Only downloads take bytes from this machine.
        reused_bytes: (record.direction == Direction::Download).then(|| record.reused()),
        // Journals written before endpoints were redacted may hold a password.
        endpoint: Some(xet_protocol::redact::redact(&record.endpoint)).filter(|e| !e.is_empty()),
    }
}

/// The LFS files of the tree `rev` names, in tree order.
fn lfs_files(git: &Git, rev: &str) -> Result<Vec<LfsFile>, objects::ObjectsError> {
    let repo = objects::open(git.dir())?;
    Ok(objects::lfs_pointers(&repo, rev)?
        .into_iter()
        .map(|p| LfsFile {
            name: p.path,
            oid: p.pointer.oid,
            size: p.pointer.size,
        })
        .collect())
}

fn render(rows: &[Row], long: bool, rev: &str, out: &mut impl Write) -> std::io::Result<()> {
    if rows.is_empty() {
        writeln!(out, "no Git LFS files in {}", quote_path(rev))?;
        return Ok(());
    }
    let hash_width = if long { 64 } else { 12 };
    let bytes = |n: u64| {
        if long {
            n.to_string()
        } else {
            format_size(n)
        }
    };
    let cells = |f: fn(&Row) -> Option<u64>| -> Vec<String> {
        rows.iter()
            .map(|r| f(r).map_or_else(|| "-".to_string(), bytes))
            .collect()
    };
    let sizes: Vec<String> = rows.iter().map(|r| bytes(r.size)).collect();
    let wire = cells(|r| r.transferred_bytes);
    let reused = cells(|r| r.reused_bytes);
    let width = |cells: &[String], header: &str| {
        cells
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(header.len())
    };
    let size_width = width(&sizes, "SIZE");
    let wire_width = width(&wire, "WIRE");
    let reused_width = width(&reused, "REUSED");
    writeln!(
        out,
        "{:<hash_width$}  {:<hash_width$}  {:>size_width$}  {:>6}  {:>wire_width$}  \
         {:>reused_width$}  PATH",
        "XET HASH", "OID", "SIZE", "DEDUP", "WIRE", "REUSED"
    )?;
    let short = |mut h: String| {
        h.truncate(hash_width);
        h
    };
    for (((row, size), wire), reused) in rows.iter().zip(&sizes).zip(&wire).zip(&reused) {
        let hash = row
            .xet_hash
            .map_or_else(|| "-".to_string(), |h| short(h.to_hex()));
        let oid = short(row.oid.to_hex());
        let dedup = row
            .dedup_percent
            .map_or_else(|| "-".to_string(), |p| format!("{p:.1}%"));
        let note = match row.hash_source {
            Some("computed") => "  (computed)",
            None => "  (not downloaded)",
            _ => "",
        };
        writeln!(
            out,
            "{hash:<hash_width$}  {oid:<hash_width$}  {size:>size_width$}  {dedup:>6}  \
             {wire:>wire_width$}  {reused:>reused_width$}  {}{note}",
            quote_path(&row.path)
        )?;
    }
    Ok(())
}

/// A path as one table cell, quoted as git quotes paths: as it is when it has no control
/// character, `"` or `\`; else in double quotes with `\n`, `\t`, `\"`, `\\` and octal escapes
/// (`\033`), so that a newline or an escape sequence in a file name cannot break the table or
/// the terminal. `--json` keeps the name exact.
fn quote_path(path: &str) -> std::borrow::Cow<'_, str> {
    if !path
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return path.into();
    }
    let mut quoted = String::with_capacity(path.len() + 2);
    quoted.push('"');
    for c in path.chars() {
        match c {
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    quoted.push_str(&format!("\\{b:03o}"));
                }
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_names_cannot_break_the_table() {
        assert_eq!(quote_path("data/a b.bin"), "data/a b.bin");
        assert_eq!(quote_path("ä.bin"), "ä.bin");
        assert_eq!(quote_path("a\nb.bin"), r#""a\nb.bin""#);
        assert_eq!(
            quote_path("x\u{1b}[31m\t\"q\"\\"),
            r#""x\033[31m\t\"q\"\\""#
        );
        assert_eq!(quote_path("c1\u{85}"), r#""c1\302\205""#);

        let row = |path: &str| Row {
            path: path.into(),
            oid: LfsOid::from_hex(&"ab".repeat(32)).unwrap(),
            size: 5,
            xet_hash: None,
            hash_source: None,
            direction: None,
            dedup_bytes: None,
            dedup_percent: None,
            transferred_bytes: None,
            reused_bytes: None,
            endpoint: None,
        };
        let mut out = Vec::new();
        render(
            &[row("evil\nXET HASH.bin"), row("ok.bin")],
            false,
            "HEAD",
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.contains(r#""evil\nXET HASH.bin"  (not downloaded)"#),
            "{text}"
        );
    }

    #[test]
    fn dedup_percent_comes_from_upload_records_only() {
        let oid = LfsOid::from_hex(&"ab".repeat(32)).unwrap();
        let file = LfsFile {
            name: "x".into(),
            oid,
            size: 200,
        };
        let hash = FileHash::from_hex(&"cd".repeat(32)).unwrap();
        let mut up = Record::new(Direction::Upload, &oid, &hash, 200);
        up.dedup_bytes = 150;
        let row = from_record(file.clone(), &up);
        assert_eq!(row.dedup_percent, Some(75.0));
        assert_eq!(row.reused_bytes, None, "uploads reuse nothing");
        let mut down = Record::new(Direction::Download, &oid, &hash, 200);
        down.transferred_bytes = 30;
        down.reused_bytes = 180;
        let row = from_record(file, &down);
        assert_eq!(row.dedup_percent, None);
        assert_eq!(
            (row.transferred_bytes, row.reused_bytes),
            (Some(30), Some(180))
        );
        let mut out = Vec::new();
        render(&[row], true, "HEAD", &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            ["XET", "HASH", "OID", "SIZE", "DEDUP", "WIRE", "REUSED", "PATH"]
        );
        let cells: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(cells[2..], ["200", "-", "30", "180", "x"], "{text}");
    }
}
