//! The Git LFS custom transfer protocol (docs/lfs-agent.md §3–§6): messages, the per-process state
//! machine, and the writer that owns stdout.
//!
//! git-lfs writes one JSON object per line on the agent's stdin; the agent answers on stdout,
//! one JSON object per line, flushed each time. Parsing is tolerant where git-lfs is loose
//! (`action` may be `null`, `header` may be missing, `expires_at` may be Go's zero time, unknown
//! fields are ignored) and strict where a mistake would corrupt the conversation (an unknown
//! `event`, a second `init`, a request for the other direction, a request while one is open).
//! Input is bounded: [`read_line`] keeps at most [`MAX_LINE`] bytes of a line, every piece of
//! input put in an error is clipped ([`echo`]), and every message sent is redacted and clipped
//! ([`shown_message`]).
//!
//! State machine (§5):
//!
//! ```text
//! AwaitInit --init(upload)-->   Ready(Upload)   --upload-->   Busy(oid) --complete--> Ready(Upload)
//! AwaitInit --init(download)--> Ready(Download) --download--> Busy(oid) --complete--> Ready(Download)
//! any state --terminate / EOF--> Done
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use xet_format::LfsOid;

/// Transfer direction of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Upload,
    Download,
}

/// The first message of every process.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Init {
    pub operation: Operation,
    /// A remote name or URL.
    #[serde(default)]
    pub remote: String,
    #[serde(default)]
    pub concurrent: bool,
    #[serde(default)]
    pub concurrenttransfers: u32,
}

/// What git-lfs passes through from the batch API (or `null` in standalone mode).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Action {
    #[serde(default)]
    pub href: String,
    #[serde(default)]
    pub header: BTreeMap<String, String>,
    /// RFC 3339; `0001-01-01T00:00:00Z` when the server sent none.
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub expires_in: Option<i64>,
}

impl Action {
    /// A header value, matched case-insensitively (HTTP header names are).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.header
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An `upload` or `download` request, before validation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct RawTransfer {
    oid: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    action: Option<Action>,
}

/// A validated transfer request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub oid: LfsOid,
    pub size: u64,
    /// Uploads: the object in local LFS storage (read it, never move it).
    pub path: Option<PathBuf>,
    /// `None` in standalone mode.
    pub action: Option<Action>,
}

/// A message from git-lfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Init(Init),
    Upload(Transfer),
    Download(Transfer),
    Terminate,
}

/// Why a line from git-lfs could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("line {line}: not a JSON object: {detail}")]
    NotJson { line: usize, detail: String },
    #[error("line {line}: unknown event {event:?}")]
    UnknownEvent { line: usize, event: String },
    #[error("line {line}: malformed {event} message: {detail}")]
    Malformed {
        line: usize,
        event: String,
        detail: String,
        /// The oid, when the message had a usable one (so the failure can be answered).
        oid: Option<LfsOid>,
    },
    #[error("line {line}: {event} before init")]
    BeforeInit { line: usize, event: &'static str },
    #[error("line {line}: a second init")]
    SecondInit { line: usize },
    #[error(
        "line {line}: a request line of {len} bytes, longer than the {MAX_LINE} bytes the agent \
         reads"
    )]
    TooLong {
        line: usize,
        len: u64,
        /// An oid found at the start of the line, if any.
        oid: Option<LfsOid>,
    },
    #[error("line {line}: {event} request in a process initialised for {direction:?}")]
    WrongDirection {
        line: usize,
        event: &'static str,
        direction: Operation,
        oid: LfsOid,
    },
}

impl ProtocolError {
    /// The oid of the request that failed, if any: such failures are answered with an error
    /// `complete` instead of ending the process.
    pub fn oid(&self) -> Option<LfsOid> {
        match self {
            ProtocolError::Malformed { oid, .. } | ProtocolError::TooLong { oid, .. } => *oid,
            ProtocolError::WrongDirection { oid, .. } => Some(*oid),
            _ => None,
        }
    }
}

/// Parses one line from git-lfs. `line` numbers messages in errors.
pub(crate) fn parse_request(text: &str, line: usize) -> Result<Request, ProtocolError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        // A broken line that still names an object (e.g. cut short) is answered for it.
        match find_oid(text.as_bytes()) {
            Some(oid) => ProtocolError::Malformed {
                line,
                event: "request".into(),
                detail: format!("not a JSON object: {}", echo(&e.to_string())),
                oid: Some(oid),
            },
            None => ProtocolError::NotJson {
                line,
                detail: echo(&e.to_string()),
            },
        }
    })?;
    let Some(obj) = value.as_object() else {
        return Err(ProtocolError::NotJson {
            line,
            detail: "not an object".into(),
        });
    };
    let event = echo(
        obj.get("event")
            .and_then(|e| e.as_str())
            .unwrap_or_default(),
    );
    let oid_of = |obj: &serde_json::Map<String, serde_json::Value>| {
        obj.get("oid")
            .and_then(|o| o.as_str())
            .and_then(|o| LfsOid::from_hex(o).ok())
    };
    let malformed = |detail: String| ProtocolError::Malformed {
        line,
        event: event.clone(),
        detail: echo(&detail),
        oid: oid_of(obj),
    };
    match event.as_str() {
        "init" => serde_json::from_value::<Init>(value.clone())
            .map(Request::Init)
            .map_err(|e| malformed(e.to_string())),
        "upload" | "download" => {
            let raw: RawTransfer =
                serde_json::from_value(value.clone()).map_err(|e| malformed(e.to_string()))?;
            let lowercase_hex = raw.oid.len() == 64
                && raw
                    .oid
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !lowercase_hex {
                return Err(malformed(format!(
                    "oid {:?} is not 64 lowercase hex digits",
                    echo(&raw.oid)
                )));
            }
            let oid = LfsOid::from_hex(&raw.oid).map_err(|e| malformed(e.to_string()))?;
            let t = Transfer {
                oid,
                size: raw.size,
                path: raw.path,
                action: raw.action,
            };
            if event == "upload" {
                if t.path.is_none() {
                    return Err(malformed("upload request without a path".into()));
                }
                Ok(Request::Upload(t))
            } else {
                Ok(Request::Download(t))
            }
        }
        "terminate" => Ok(Request::Terminate),
        _ => Err(ProtocolError::UnknownEvent { line, event }),
    }
}

/// The longest request line read, in bytes (git-lfs's lines are a few hundred bytes to a few
/// KiB; a line is never buffered beyond this).
pub(crate) const MAX_LINE: usize = 1 << 20;

/// What [`read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// End of input, no line.
    Eof,
    /// A whole line, without its newline, is in the buffer.
    Line,
    /// A line of `len` bytes, longer than the limit: the buffer holds its first bytes, the
    /// rest was read and dropped.
    TooLong { len: u64 },
}

/// Reads one line (up to `\n` or the end of input) into `buf`, keeping at most `max` bytes of
/// it: memory stays bounded whatever the input.
pub fn read_line(
    input: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut total: u64 = 0;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (found, used) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (Some(i), i + 1),
            None => (None, available.len()),
        };
        if available.is_empty() && total == 0 {
            return Ok(LineRead::Eof);
        }
        let content = &available[..found.unwrap_or(available.len())];
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&content[..content.len().min(room)]);
        total += content.len() as u64;
        let end = found.is_some() || available.is_empty();
        input.consume(used);
        if end {
            return Ok(if total > max as u64 {
                LineRead::TooLong { len: total }
            } else {
                LineRead::Line
            });
        }
    }
}

/// The oid of a request found in raw bytes (`"oid":"<64 lowercase hex>"`), for answering a
/// line that cannot be parsed.
pub(crate) fn find_oid(bytes: &[u8]) -> Option<LfsOid> {
    let key = b"\"oid\"";
    let mut from = 0;
    while let Some(i) = bytes[from..].windows(key.len()).position(|w| w == key) {
        let mut j = from + i + key.len();
        from = j;
        while bytes.get(j).is_some_and(|b| b.is_ascii_whitespace()) {
            j += 1;
        }
        if bytes.get(j) != Some(&b':') {
            continue;
        }
        j += 1;
        while bytes.get(j).is_some_and(|b| b.is_ascii_whitespace()) {
            j += 1;
        }
        if bytes.get(j) != Some(&b'"') {
            continue;
        }
        let hex = bytes.get(j + 1..j + 65)?;
        if bytes.get(j + 65) == Some(&b'"')
            && hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return LfsOid::from_hex(std::str::from_utf8(hex).ok()?).ok();
        }
    }
    None
}

/// Where a process is in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    AwaitInit,
    Ready(Operation),
    Done,
}

impl State {
    /// Checks that `request` may come now, and moves on. Requests complete synchronously (the
    /// agent answers each before reading the next line), so there is no separate busy state.
    pub fn accept(&mut self, request: &Request, line: usize) -> Result<(), ProtocolError> {
        match (*self, request) {
            (_, Request::Terminate) => {
                *self = State::Done;
                Ok(())
            }
            (State::AwaitInit, Request::Init(init)) => {
                *self = State::Ready(init.operation);
                Ok(())
            }
            (State::AwaitInit, Request::Upload(_)) => Err(ProtocolError::BeforeInit {
                line,
                event: "upload",
            }),
            (State::AwaitInit, Request::Download(_)) => Err(ProtocolError::BeforeInit {
                line,
                event: "download",
            }),
            (State::Ready(_) | State::Done, Request::Init(_)) => {
                Err(ProtocolError::SecondInit { line })
            }
            (State::Ready(Operation::Upload), Request::Upload(_))
            | (State::Ready(Operation::Download), Request::Download(_)) => Ok(()),
            (State::Ready(direction), Request::Upload(t)) => Err(ProtocolError::WrongDirection {
                line,
                event: "upload",
                direction,
                oid: t.oid,
            }),
            (State::Ready(direction), Request::Download(t)) => Err(ProtocolError::WrongDirection {
                line,
                event: "download",
                direction,
                oid: t.oid,
            }),
            (State::Done, Request::Upload(t) | Request::Download(t)) => {
                Err(ProtocolError::Malformed {
                    line,
                    event: "transfer".into(),
                    detail: "request after terminate".into(),
                    oid: Some(t.oid),
                })
            }
        }
    }
}

/// An error as git-lfs shows it: `[code] message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct WireError {
    pub code: i32,
    pub message: String,
}

/// Error code for a failed init (the value git-lfs's docs use).
pub(crate) const INIT_ERROR_CODE: i32 = 32;
/// Error code for a failed transfer.
pub(crate) const TRANSFER_ERROR_CODE: i32 = 2;

/// The longest error message sent to git-lfs.
pub(crate) const MAX_MESSAGE: usize = 4096;

/// The longest piece of input (a field, a path, a line) echoed in a message.
pub(crate) const MAX_ECHO: usize = 200;

/// A message as git-lfs gets it: secrets masked ([`xet_protocol::redact`]), at most [`MAX_MESSAGE`]
/// bytes.
pub(crate) fn shown_message(message: &str) -> String {
    xet_protocol::redact::clip(&xet_protocol::redact::redact(message), MAX_MESSAGE).into_owned()
}

/// A piece of input as echoed in a message: redacted, then clipped to [`MAX_ECHO`] bytes.
pub fn echo(input: &str) -> String {
    xet_protocol::redact::clip(&xet_protocol::redact::redact(input), MAX_ECHO).into_owned()
}

#[derive(Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
enum Outgoing<'a> {
    Progress {
        oid: String,
        #[serde(rename = "bytesSoFar")]
        bytes_so_far: u64,
        #[serde(rename = "bytesSinceLast")]
        bytes_since_last: u64,
    },
    Complete {
        oid: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        path: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a WireError>,
    },
}

/// Writes protocol messages to git-lfs: the only code that writes to the agent's stdout. Each
/// message is one line, flushed at once. Progress for an object is kept monotonic.
pub(crate) struct ProtocolWriter<W: Write> {
    out: W,
    /// The object whose progress is being reported, and the last `bytesSoFar` sent for it.
    progress: Option<(LfsOid, u64)>,
}

impl<W: Write> ProtocolWriter<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            progress: None,
        }
    }

    fn line(&mut self, json: &[u8]) -> std::io::Result<()> {
        self.out.write_all(json)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// Answers `init`: `{}` on success.
    pub(crate) fn init_ok(&mut self) -> std::io::Result<()> {
        self.line(b"{}")
    }

    /// Answers `init` with an error; git-lfs then aborts the adapter. The message is redacted
    /// and clipped ([`shown_message`]).
    pub(crate) fn init_error(&mut self, message: &str) -> std::io::Result<()> {
        let message = shown_message(message);
        let body = serde_json::json!({"error": {"code": INIT_ERROR_CODE, "message": message}});
        self.line(body.to_string().as_bytes())
    }

    /// Reports that `bytes_so_far` bytes of `oid` are done. Values that would go backwards are
    /// raised to the last one sent; repeats are not sent.
    pub fn progress(&mut self, oid: &LfsOid, bytes_so_far: u64) -> std::io::Result<()> {
        let last = match self.progress {
            Some((o, n)) if o == *oid => n,
            _ => 0,
        };
        if bytes_so_far <= last {
            return Ok(());
        }
        self.progress = Some((*oid, bytes_so_far));
        let msg = Outgoing::Progress {
            oid: oid.to_hex(),
            bytes_so_far,
            bytes_since_last: bytes_so_far - last,
        };
        let json = serde_json::to_vec(&msg).map_err(std::io::Error::other)?;
        self.line(&json)
    }

    /// Completes a request: success (with the downloaded file's absolute path for downloads) or
    /// a per-object error, whose message is redacted and clipped ([`shown_message`]).
    pub fn complete(
        &mut self,
        oid: &LfsOid,
        result: Result<Option<&std::path::Path>, &WireError>,
    ) -> std::io::Result<()> {
        let path_text;
        let shown;
        let (path, error) = match result {
            Ok(Some(p)) => {
                path_text = p.to_string_lossy().into_owned();
                (Some(path_text.as_str()), None)
            }
            Ok(None) => (None, None),
            Err(e) => {
                shown = WireError {
                    code: e.code,
                    message: shown_message(&e.message),
                };
                (None, Some(&shown))
            }
        };
        let msg = Outgoing::Complete {
            oid: oid.to_hex(),
            path,
            error,
        };
        let json = serde_json::to_vec(&msg).map_err(std::io::Error::other)?;
        self.progress = None;
        self.line(&json)
    }

    /// The underlying writer (for tests).
    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OID: &str = "7f83b1657ff1fc53b92dc18148a1d65dfc2d4b1fa3d677284addd200126d9069";

    #[test]
    fn parses_what_git_lfs_sends() {
        let init = r#"{"event":"init","operation":"upload","remote":"origin","concurrent":true,"concurrenttransfers":8}"#;
        assert_eq!(
            parse_request(init, 1).unwrap(),
            Request::Init(Init {
                operation: Operation::Upload,
                remote: "origin".into(),
                concurrent: true,
                concurrenttransfers: 8
            })
        );
        let up = format!(
            r#"{{"event":"upload","oid":"{OID}","size":12,"path":"/r/.git/lfs/objects/7f/83/{OID}","action":{{"href":"https://hub/refresh","header":{{"X-Xet-Access-Token":"t","x-xet-cas-url":"https://cas"}},"expires_at":"0001-01-01T00:00:00Z"}},"future_field":[1,2]}}"#
        );
        let Request::Upload(t) = parse_request(&up, 2).unwrap() else {
            panic!("upload")
        };
        assert_eq!(t.size, 12);
        let action = t.action.unwrap();
        assert_eq!(action.header("X-Xet-Cas-Url"), Some("https://cas"));
        assert_eq!(action.expires_at.as_deref(), Some("0001-01-01T00:00:00Z"));
        // Standalone: action null; download without path or header.
        let standalone = format!(r#"{{"event":"download","oid":"{OID}","size":12,"action":null}}"#);
        assert!(matches!(
            parse_request(&standalone, 3).unwrap(),
            Request::Download(Transfer { action: None, .. })
        ));
        let no_header =
            format!(r#"{{"event":"download","oid":"{OID}","size":0,"action":{{"href":"x"}}}}"#);
        let Request::Download(t) = parse_request(&no_header, 4).unwrap() else {
            panic!("download")
        };
        assert!(t.action.unwrap().header.is_empty());
        assert_eq!(
            parse_request(r#"{"event":"terminate"}"#, 5).unwrap(),
            Request::Terminate
        );
    }

    #[test]
    fn refuses_what_would_corrupt_the_conversation() {
        assert!(matches!(
            parse_request("not json", 1),
            Err(ProtocolError::NotJson { .. })
        ));
        assert!(matches!(
            parse_request("[1]", 1),
            Err(ProtocolError::NotJson { .. })
        ));
        assert!(matches!(
            parse_request(r#"{"event":"launch"}"#, 1),
            Err(ProtocolError::UnknownEvent { .. })
        ));
        let bad_oid = r#"{"event":"upload","oid":"ABC","size":1,"path":"/x"}"#;
        let err = parse_request(bad_oid, 7).unwrap_err();
        assert!(err.to_string().starts_with("line 7:"), "{err}");
        assert_eq!(err.oid(), None);
        // An upload without a path is answerable: it has an oid.
        let no_path = format!(r#"{{"event":"upload","oid":"{OID}","size":1}}"#);
        assert_eq!(
            parse_request(&no_path, 1).unwrap_err().oid(),
            Some(LfsOid::from_hex(OID).unwrap())
        );
    }

    #[test]
    fn lines_are_read_within_a_bound() {
        let long = format!("{}\nshort\n{}", "a".repeat(100), "b".repeat(7));
        let mut input = std::io::BufReader::with_capacity(16, long.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut input, &mut buf, 10).unwrap(),
            LineRead::TooLong { len: 100 }
        );
        assert_eq!(buf, b"aaaaaaaaaa");
        assert_eq!(read_line(&mut input, &mut buf, 10).unwrap(), LineRead::Line);
        assert_eq!(buf, b"short");
        assert_eq!(read_line(&mut input, &mut buf, 10).unwrap(), LineRead::Line);
        assert_eq!(buf, b"bbbbbbb", "the last line needs no newline");
        assert_eq!(read_line(&mut input, &mut buf, 10).unwrap(), LineRead::Eof);
        let mut empty = std::io::BufReader::new(&b"\n"[..]);
        assert_eq!(read_line(&mut empty, &mut buf, 10).unwrap(), LineRead::Line);
        assert!(buf.is_empty());
    }

    #[test]
    fn oids_are_found_in_broken_lines() {
        let oid = LfsOid::from_hex(OID).unwrap();
        let cut = format!(r#"{{"event":"upload","oid" : "{OID}","size":1,"path":"/x"#);
        assert_eq!(find_oid(cut.as_bytes()), Some(oid));
        let err = parse_request(&cut, 3).unwrap_err();
        assert_eq!(err.oid(), Some(oid));
        assert!(find_oid(br#"{"oid":"abc"}"#).is_none());
        assert!(find_oid(format!(r#"{{"oid":"{}"}}"#, OID.to_uppercase()).as_bytes()).is_none());
        assert!(find_oid(&br#"{"oid":"#[..]).is_none());
        // Echoed input is clipped.
        let huge = format!(r#"{{"event":"{}"}}"#, "e".repeat(100_000));
        let text = parse_request(&huge, 1).unwrap_err().to_string();
        assert!(text.len() < 1000, "{} bytes", text.len());
    }

    #[test]
    fn state_machine_enforces_ordering() {
        let init = |op| {
            Request::Init(Init {
                operation: op,
                remote: String::new(),
                concurrent: true,
                concurrenttransfers: 1,
            })
        };
        let transfer = Transfer {
            oid: LfsOid::from_hex(OID).unwrap(),
            size: 1,
            path: Some("/x".into()),
            action: None,
        };
        let mut s = State::AwaitInit;
        assert!(matches!(
            s.accept(&Request::Upload(transfer.clone()), 1),
            Err(ProtocolError::BeforeInit { .. })
        ));
        s.accept(&init(Operation::Upload), 1).unwrap();
        s.accept(&Request::Upload(transfer.clone()), 2).unwrap();
        let wrong = s
            .accept(&Request::Download(transfer.clone()), 3)
            .unwrap_err();
        assert_eq!(
            wrong.oid(),
            Some(transfer.oid),
            "answerable with an error complete"
        );
        assert!(matches!(
            s.accept(&init(Operation::Download), 4),
            Err(ProtocolError::SecondInit { .. })
        ));
        s.accept(&Request::Terminate, 5).unwrap();
        assert_eq!(s, State::Done);
    }

    #[test]
    fn writer_emits_one_flushed_line_per_message_and_keeps_progress_monotonic() {
        let oid = LfsOid::from_hex(OID).unwrap();
        let mut w = ProtocolWriter::new(Vec::new());
        w.init_ok().unwrap();
        w.progress(&oid, 1).unwrap();
        w.progress(&oid, 100).unwrap();
        w.progress(&oid, 50).unwrap(); // backwards: dropped
        w.progress(&oid, 100).unwrap(); // repeat: dropped
        w.progress(&oid, 120).unwrap();
        w.complete(&oid, Ok(None)).unwrap();
        let err = WireError {
            code: TRANSFER_ERROR_CODE,
            message: "server said no".into(),
        };
        w.complete(&oid, Err(&err)).unwrap();
        w.complete(&oid, Ok(Some(std::path::Path::new("/r/.git/lfs/tmp/x"))))
            .unwrap();
        let text = String::from_utf8(w.into_inner()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[0], serde_json::json!({}));
        assert_eq!(lines[1]["bytesSoFar"], 1);
        assert_eq!(
            (
                lines[2]["bytesSoFar"].as_u64(),
                lines[2]["bytesSinceLast"].as_u64()
            ),
            (Some(100), Some(99))
        );
        assert_eq!(
            (
                lines[3]["bytesSoFar"].as_u64(),
                lines[3]["bytesSinceLast"].as_u64()
            ),
            (Some(120), Some(20))
        );
        assert_eq!(lines[4], serde_json::json!({"event":"complete","oid":OID}));
        assert_eq!(lines[5]["error"]["code"], 2);
        assert_eq!(lines[6]["path"], "/r/.git/lfs/tmp/x");
    }
}
