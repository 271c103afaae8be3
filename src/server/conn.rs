//! Connections: the accept loop, the cap on open connections, the HTTP/1.1 settings of every
//! connection (header timeout, buffer sizes, keep-alive), the stall guard on responses, and
//! graceful shutdown with a deadline.
//!
//! - **Cap.** At most [`Limits::max_connections`] connections are open at once; one more is
//!   answered `503` with `Retry-After` (written without waiting) and closed.
//! - **Header timeout.** A request head must arrive within [`Limits::header_timeout`] of the
//!   server starting to wait for it, which also closes keep-alive connections idle that long.
//! - **Buffers.** hyper reads and queues at most [`CONN_BUF`] bytes per connection, so a client
//!   that stops reading holds one response piece and this buffer, not more.
//! - **Stall guard.** A write to the socket that stays pending for [`Limits::send_timeout`] (the
//!   client stopped reading the response) fails the connection, which drops the response body
//!   and whatever it held (a concurrency permit, a piece of a file).
//! - **Shutdown.** When asked to stop, the listener closes, every connection finishes the request
//!   in flight (idle keep-alive connections close at once), and after
//!   [`Limits::shutdown_timeout`] whatever is left is closed.
//! - **Idle exit** (optional, [`IdleExit`]): with no connection open for a while, the server
//!   stops, unless background work it must finish is running (checking SHA-256 claims).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use super::Limits;

/// hyper's read buffer limit and write queue threshold per connection (its minimum is 8 KiB).
/// Request heads must fit in it.
pub(crate) const CONN_BUF: usize = 64 * 1024;

/// What a connection over the cap is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: application/json\r\nContent-Length: 91\r\nConnection: close\r\n\r\n\
{\"error\":\"server_busy\",\"message\":\"too many open connections to this server; retry shortly\"}";

/// When a server with no connection open stops by itself.
#[derive(Debug, Clone)]
pub struct IdleExit {
    /// After this long without a connection...
    pub after: Duration,
    /// ...unless this is true then (background work the server must finish first); the wait
    /// starts again.
    pub unless: Arc<std::sync::atomic::AtomicBool>,
}

/// Serves `router` on `listener` until `stop` completes, then shuts down gracefully within
/// `limits.shutdown_timeout`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &Limits,
    idle_exit: Option<IdleExit>,
    stop: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let builder = Arc::new(http1_builder(limits));
    let (stopping_tx, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        // With no connection open, the idle time starts (again).
        let idle_for = idle_exit
            .as_ref()
            .map(|i| i.after)
            .filter(|_| connections.is_empty());
        let idle = async {
            match idle_for {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let accepted = tokio::select! {
            biased;
            _ = &mut stop => break,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
            () = idle => {
                if idle_exit
                    .as_ref()
                    .is_some_and(|i| i.unless.load(std::sync::atomic::Ordering::Relaxed))
                {
                    continue;
                }
                tracing::info!("no connection for the idle time, shutting down");
                break;
            }
        };
        let Some((stream, peer)) = accepted_or_wait(accepted).await else {
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(%peer, max = limits.max_connections, "connection refused: too many open connections");
            // The socket's send buffer is empty, so this write does not block; a client that
            // misses it sees a closed connection, which it retries too.
            let _ = stream.try_write(BUSY);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = StallGuard::new(TokioIo::new(stream), limits.send_timeout);
        let service = TowerToHyperService::new(router.clone());
        connections.spawn(connection(
            Arc::clone(&builder),
            io,
            service,
            stopping.clone(),
            peer,
            slot,
        ));
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    drain(connections, limits.shutdown_timeout).await;
}

/// The HTTP/1 settings of every connection: the header timeout, keep-alive, the buffer size.
fn http1_builder(limits: &Limits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true)
        .max_buf_size(CONN_BUF);
    builder
}

/// The accepted connection, or `None` after a failed accept: at once for a peer's error (it
/// reset the connection), after a short wait otherwise (out of file descriptors or memory,
/// which usually lasts a moment: waiting beats spinning).
async fn accepted_or_wait(
    accepted: std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)>,
) -> Option<(tokio::net::TcpStream, std::net::SocketAddr)> {
    match accepted {
        Ok(a) => Some(a),
        Err(e) if is_peer_error(&e) => None,
        Err(e) => {
            tracing::warn!(error = %e, "cannot accept a connection");
            tokio::time::sleep(Duration::from_millis(100)).await;
            None
        }
    }
}

/// One connection, served until the client closes it or the server stops (then gracefully:
/// the request in flight finishes); `slot` is its place among the open connections.
async fn connection(
    builder: Arc<http1::Builder>,
    io: StallGuard<TokioIo<tokio::net::TcpStream>>,
    service: TowerToHyperService<Router>,
    stopping: watch::Receiver<bool>,
    peer: std::net::SocketAddr,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stopped(stopping) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection closed with an error");
    }
    drop(slot);
}

/// Waits up to `deadline` for the open connections to finish their requests, then closes what
/// is left.
async fn drain(mut connections: JoinSet<()>, deadline: Duration) {
    let open = connections.len();
    if open > 0 {
        tracing::info!(
            open,
            deadline_s = deadline.as_secs_f64(),
            "finishing the requests in flight"
        );
    }
    let drained = tokio::time::timeout(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "shutdown deadline passed: closing the connections still open"
        );
        connections.shutdown().await;
    }
}

/// An accept error that concerns one peer only (it gave up during the handshake).
fn is_peer_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Completes when the server starts shutting down.
async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

/// A connection's IO whose writes may not stay pending longer than a timeout: a client that
/// stops reading its response gets its connection closed instead of holding it forever.
pub(crate) struct StallGuard<T> {
    inner: T,
    timeout: Duration,
    /// Armed while a write (or flush) is pending; created on the first stall.
    deadline: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl<T> StallGuard<T> {
    pub fn new(inner: T, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: None,
            armed: false,
        }
    }

    /// Passes a ready result through (progress: disarm), or arms the deadline on a pending
    /// one and fails once it has passed.
    fn watch<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if r.is_ready() {
            self.armed = false;
            return r;
        }
        let at = Instant::now() + self.timeout;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if !self.armed {
            deadline.as_mut().reset(at);
            self.armed = true;
        }
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing of the response for {} s",
                    self.timeout.as_secs_f64()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for StallGuard<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for StallGuard<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_answer_is_well_framed() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"], "server_busy");
    }

    /// A writer that is never ready, like a socket whose peer stopped reading.
    struct Stuck;

    impl hyper::rt::Write for Stuck {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_write_pending_past_the_timeout_fails() {
        let mut io = StallGuard::new(Stuck, Duration::from_millis(50));
        let started = std::time::Instant::now();
        let r =
            std::future::poll_fn(|cx| hyper::rt::Write::poll_write(Pin::new(&mut io), cx, b"x"))
                .await;
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(50) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }
}
