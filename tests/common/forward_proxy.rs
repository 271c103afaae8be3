//! A forward HTTP proxy on 127.0.0.1 for tests: tunnels `CONNECT host:port` (to 127.0.0.1 only)
//! and records every target asked for. Stops accepting when dropped (and within two minutes).
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct ForwardProxy {
    port: u16,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl ForwardProxy {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (flag, log) = (Arc::clone(&stop), Arc::clone(&seen));
        std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let log = Arc::clone(&log);
                        std::thread::spawn(move || tunnel(client, &log));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self { port, stop, seen }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `CONNECT` targets asked for so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn tunnel(client: TcpStream, log: &Mutex<Vec<String>>) {
    client.set_nonblocking(false).unwrap();
    let _ = client.set_read_timeout(Some(Duration::from_secs(60)));
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let mut words = first.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        let _ =
            (&client).write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    log.lock().unwrap().push(target.to_string());
    // Only this machine: the proxy never reaches out.
    let upstream = match target.strip_prefix("127.0.0.1:") {
        Some(port) => TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap_or(0))),
        None => Err(std::io::Error::other("not 127.0.0.1")),
    };
    let Ok(upstream) = upstream else {
        let _ = (&client).write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let _ = (&client).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    // The reader hands over what it buffered first, then the rest of the client's bytes.
    let up = std::thread::spawn(move || {
        let mut upstream = u2;
        let mut reader = reader;
        let _ = std::io::copy(&mut reader, &mut upstream);
        let _ = upstream.shutdown(Shutdown::Write);
    });
    let mut upstream = upstream;
    let mut c2 = c2;
    let _ = std::io::copy(&mut upstream, &mut c2);
    let _ = c2.shutdown(Shutdown::Write);
    let _ = up.join();
}
