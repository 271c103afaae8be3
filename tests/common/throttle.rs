//! TCP proxies on 127.0.0.1 that forward to a server on this machine:
//!
//! - [`Throttle`]: what the client sends limited to a rate, a slow uplink, for tests that
//!   watch an upload go out;
//! - [`Valve`]: what the server sends counted, and held back once a total has gone through
//!   (a link that stalls half way), for tests that interrupt a download at a known point.
//!
//! They stop accepting when dropped (a throttle also three minutes after it started); their
//! connections end with the peers' (and after a minute without traffic).
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Throttle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Throttle {
    /// A proxy to `target` passing at most `bytes_per_sec` from the client to the server.
    pub fn start(target: SocketAddr, bytes_per_sec: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(180) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(target) else {
                            continue;
                        };
                        let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        std::thread::spawn(move || pump(client, server, Some(bytes_per_sec)));
                        std::thread::spawn(move || pump(s2, c2, None));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self { addr, stop }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies `from` to `to`, at most `rate` bytes a second, until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream, rate: Option<u64>) {
    let _ = from.set_read_timeout(Some(Duration::from_secs(60)));
    let started = Instant::now();
    let mut total = 0u64;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        total += n as u64;
        if let Some(rate) = rate {
            let due = Duration::from_secs_f64(total as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// See the module documentation. Bind it first ([`Valve::start`]), so that a server can be
/// told its URL as the public one, then name the server ([`Valve::forward_to`]).
pub struct Valve {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    target: Arc<Mutex<Option<SocketAddr>>>,
    /// Bytes passed from the server to clients so far.
    delivered: Arc<AtomicU64>,
    /// The total of `delivered` at which the valve holds.
    limit: Arc<AtomicU64>,
}

impl Valve {
    /// A valve, open, forwarding nowhere yet (connections wait for [`Valve::forward_to`]).
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let valve = Self {
            addr,
            stop: Arc::new(AtomicBool::new(false)),
            target: Arc::new(Mutex::new(None)),
            delivered: Arc::new(AtomicU64::new(0)),
            limit: Arc::new(AtomicU64::new(u64::MAX)),
        };
        let (stop, target) = (Arc::clone(&valve.stop), Arc::clone(&valve.target));
        let (delivered, limit) = (Arc::clone(&valve.delivered), Arc::clone(&valve.limit));
        std::thread::spawn(move || {
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(900) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                client.set_nonblocking(false).unwrap();
                let to = loop {
                    if let Some(to) = *target.lock().unwrap() {
                        break to;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                };
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pump(client, server, None));
                let (stop, delivered, limit) = (
                    Arc::clone(&stop),
                    Arc::clone(&delivered),
                    Arc::clone(&limit),
                );
                std::thread::spawn(move || pump_held(s2, c2, &delivered, &limit, &stop));
            }
        });
        valve
    }

    /// Forwards what comes in to `target` from now on.
    pub fn forward_to(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = Some(target);
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Bytes passed from the server to clients so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::SeqCst)
    }

    /// Holds what the server sends once `total` bytes have been delivered (counting from the
    /// valve's start).
    pub fn hold_at(&self, total: u64) {
        self.limit.store(total, Ordering::SeqCst);
    }

    /// Whether the valve holds: it has delivered all it may.
    pub fn holding(&self) -> bool {
        self.delivered() >= self.limit.load(Ordering::SeqCst)
    }

    /// Lets everything through again.
    pub fn open(&self) {
        self.limit.store(u64::MAX, Ordering::SeqCst);
    }
}

impl Drop for Valve {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies `from` (the server) to `to` (the client) while `delivered` stays within `limit`,
/// waiting while it would not, until either side closes or the valve stops.
fn pump_held(
    mut from: TcpStream,
    mut to: TcpStream,
    delivered: &AtomicU64,
    limit: &AtomicU64,
    stop: &AtomicBool,
) {
    let _ = from.set_read_timeout(Some(Duration::from_secs(300)));
    let mut buf = vec![0u8; 16 << 10];
    'conn: loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut at = 0;
        while at < n {
            let now = delivered.load(Ordering::SeqCst);
            let room = limit.load(Ordering::SeqCst).saturating_sub(now);
            if room == 0 {
                if stop.load(Ordering::Relaxed) {
                    break 'conn;
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            let k = (n - at).min(usize::try_from(room).unwrap_or(usize::MAX));
            if delivered
                .compare_exchange(now, now + k as u64, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            if to.write_all(&buf[at..at + k]).is_err() {
                break 'conn;
            }
            at += k;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
