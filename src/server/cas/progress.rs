//! The NDJSON progress stream of `POST /v2/shards` (docs/cas-api.md §5.6): one JSON frame per line,
//! tagged by `type`, ending with `result` or `error`.
//!
//! The work runs on a blocking thread and reports through a [`Reporter`] (a watch channel: only
//! the newest frame matters). A task forwards new frames to the response body, at most one per
//! [`PROGRESS_GAP`], repeats the last one when nothing new happened for the heartbeat interval,
//! and writes the terminal frame when the work returns. If the client goes away the work still
//! finishes (registration is atomic either way); only the writing stops.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde::Serialize;
use tokio::sync::{mpsc, watch};

/// New progress frames are written at most this often.
pub(crate) const PROGRESS_GAP: Duration = Duration::from_millis(100);

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    Validating { verified: u64, total: u64 },
    Committing { stage: String },
    Result,
    Error { message: String, retryable: bool },
}

impl Frame {
    /// The frame as one NDJSON line.
    pub fn line(&self) -> Bytes {
        // Serialising a tagged enum of strings, integers and booleans cannot fail.
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        Bytes::from(v)
    }
}

/// Why the work failed, as the `error` frame says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// True when sending the same request again may succeed (a storage failure).
    pub retryable: bool,
}

/// Where the work reports its progress.
pub struct Reporter {
    tx: watch::Sender<Frame>,
}

impl Reporter {
    /// Makes `frame` the current state of the work.
    pub fn report(&self, frame: Frame) {
        self.tx.send_replace(frame);
    }
}

/// Starts `work` on a blocking thread and returns the response body streaming its frames.
pub fn stream<F>(heartbeat: Duration, work: F) -> Body
where
    F: FnOnce(&Reporter) -> Result<(), Failure> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(drive(heartbeat, work, tx));
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx))
    }))
}

/// Writes lines while the client listens.
struct Out {
    tx: mpsc::Sender<Bytes>,
    open: bool,
}

impl Out {
    async fn send(&mut self, frame: &Frame) {
        if self.open && self.tx.send(frame.line()).await.is_err() {
            tracing::info!("client left the shard progress stream; finishing the work anyway");
            self.open = false;
        }
    }
}

async fn drive<F>(heartbeat: Duration, work: F, tx: mpsc::Sender<Bytes>)
where
    F: FnOnce(&Reporter) -> Result<(), Failure> + Send + 'static,
{
    let first = Frame::Validating {
        verified: 0,
        total: 0,
    };
    let (wtx, mut wrx) = watch::channel(first.clone());
    let reporter = Reporter { tx: wtx };
    let mut job = tokio::task::spawn_blocking(move || work(&reporter));
    let mut out = Out { tx, open: true };
    let mut last = first;
    out.send(&last).await;
    let outcome = loop {
        tokio::select! {
            biased;
            done = &mut job => break done,
            changed = tokio::time::timeout(heartbeat, wrx.changed()) => match changed {
                Ok(Ok(())) => {
                    let frame = wrx.borrow_and_update().clone();
                    if frame != last {
                        last = frame;
                        out.send(&last).await;
                        tokio::time::sleep(PROGRESS_GAP).await;
                    }
                }
                // The reporter is gone, so the work has returned.
                Ok(Err(_)) => break (&mut job).await,
                // Nothing new for a while: repeat the last frame.
                Err(_) => out.send(&last).await,
            },
        }
    };
    // A frame reported just before the work returned (e.g. `committing`) is still shown.
    let latest = wrx.borrow().clone();
    if latest != last {
        out.send(&latest).await;
    }
    let end = match outcome {
        Ok(Ok(())) => Frame::Result,
        Ok(Err(f)) => Frame::Error {
            message: f.message,
            retryable: f.retryable,
        },
        Err(e) => {
            tracing::error!(error = %e, "shard registration worker failed");
            Frame::Error {
                message: format!("the server failed while registering the shard: {e}"),
                retryable: false,
            }
        }
    };
    out.send(&end).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(body: Body) -> Vec<serde_json::Value> {
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(text.ends_with('\n'));
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn frames_are_tagged_lines() {
        assert_eq!(
            Frame::Validating {
                verified: 1,
                total: 2
            }
            .line(),
            "{\"type\":\"validating\",\"verified\":1,\"total\":2}\n"
        );
        assert_eq!(Frame::Result.line(), "{\"type\":\"result\"}\n");
        assert_eq!(
            Frame::Error {
                message: "m".into(),
                retryable: true
            }
            .line(),
            "{\"type\":\"error\",\"message\":\"m\",\"retryable\":true}\n"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_work_gets_heartbeats_then_a_result() {
        let body = stream(Duration::from_millis(40), |r| {
            r.report(Frame::Validating {
                verified: 1,
                total: 2,
            });
            std::thread::sleep(Duration::from_millis(600));
            r.report(Frame::Committing {
                stage: "syncing".into(),
            });
            Ok(())
        });
        let frames = lines(body).await;
        let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
        assert_eq!(types.first(), Some(&"validating"));
        assert_eq!(types.last(), Some(&"result"));
        assert_eq!(types[types.len() - 2], "committing");
        let repeats = frames
            .iter()
            .filter(|f| f["type"] == "validating" && f["verified"] == 1)
            .count();
        // 600 ms of silence with a 40 ms heartbeat: the frame is repeated many times.
        assert!(repeats >= 5, "{frames:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failures_end_with_an_error_frame() {
        let body = stream(Duration::from_secs(20), |_| {
            Err(Failure {
                message: "term 3 of file f: verification hash mismatch".into(),
                retryable: false,
            })
        });
        let frames = lines(body).await;
        let end = frames.last().unwrap();
        assert_eq!(end["type"], "error");
        assert_eq!(end["retryable"], false);
        assert!(end["message"].as_str().unwrap().contains("term 3"));
    }
}
