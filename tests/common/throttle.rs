//! A TCP proxy on 127.0.0.1 that forwards to a server on this machine, with what the client
//! sends limited to a rate: a slow uplink, for tests that watch an upload go out. It stops
//! accepting when dropped (or three minutes after it started); its connections end with the
//! peers' (and after a minute without traffic).
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
