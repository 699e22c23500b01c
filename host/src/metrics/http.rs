//! A minimal HTTP/1.1 server for the metrics and health endpoints.
//!
//! Kubelet probes and Prometheus need little: a GET, a status, a body. So
//! this answers exactly that and nothing else: only GET (and HEAD) of a
//! known path, no request body is read, every response closes the
//! connection (no keep-alive), anything else gets a short error.
//!
//! What matters most is that `/healthz` and `/readyz` answer within a
//! second whatever else reaches the port: a liveness probe that times out
//! makes the kubelet restart the plugin, and every policy with it. Anyone
//! who can reach the address can open connections and never send a byte,
//! trickle a head, or flood requests, so everything a connection can hold
//! is bounded:
//!
//! - the server runs on a thread of its own (a current-thread runtime):
//!   policies loading or compiling on the policy runtime cannot delay it,
//!   and it cannot delay them. `/metrics` and `/status`, whose encoding
//!   grows with the number of policies, are encoded beside it, so a flood
//!   of them does not queue a probe behind them, and each by one job at a
//!   time that every request waiting shares ([`super::encode`]), so a flood
//!   cannot queue work either;
//! - the whole request head (at most 8 KiB) must arrive within 1 s of the
//!   connection being accepted (a probe sends it at once), a body must be
//!   encoded within 5 s (else 503), and the response must be taken within
//!   2 s; a connection therefore lives at most about 8 s;
//! - at most [`MAX_CONNECTIONS`] connections are held. A new one past the
//!   cap is never refused: the oldest connection still waiting for its head
//!   is shed instead (idle and slow connections are old by the time the cap
//!   is reached, a probe is the newest and sends its head at once);
//! - after every accept the loop yields, so a connection's head is read
//!   before many more are accepted behind it;
//! - an accept error (no file descriptors left: EMFILE, ENFILE; no memory)
//!   leaves the connection in the kernel's queue, so accepting again at once
//!   would spin: the loop sheds the oldest idle connection to free a
//!   descriptor and tries again, and with nothing left to shed backs off
//!   (5 ms doubling to 250 ms, reset by the next accept). Errors are
//!   logged at most every 10 s.
//!
//! Every shed connection and every failed accept is counted
//! (`nri_wasm_http_connections_shed_total`,
//! `nri_wasm_http_accept_errors_total`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use super::encode::Encoder;
use super::Metrics;

/// Largest request head.
const MAX_HEAD: usize = 8 << 10;
/// The whole request head must arrive within this, from the accept.
const HEAD_TIMEOUT: Duration = Duration::from_secs(1);
/// The response must be taken by the client within this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections held at once; past it the oldest idle one is shed.
const MAX_CONNECTIONS: usize = 256;
/// Threads that encode `/metrics` and `/status` (one job each at most).
const ENCODING_THREADS: usize = 2;
/// A request's body must be encoded within this.
const ENCODE_WAIT: Duration = Duration::from_secs(5);
/// The kernel's queue of connections not yet accepted.
const BACKLOG: u32 = 1024;
/// Back-off after an accept error: first and longest.
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_millis(250);
/// At most one warning per this long about shed connections or accept errors.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// How long the client ([`get`]) waits for each step.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `metrics` on `addr` until `stop`; returns the bound address. The
/// server runs on a thread of its own; binding errors are returned.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, stop: CancellationToken) -> std::io::Result<SocketAddr> {
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("nri-wasm-http".into()).spawn(move || {
        let built = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(ENCODING_THREADS)
            .thread_name("nri-wasm-http")
            .build();
        let runtime = match built {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = bound_tx.send(Err(e));
                return;
            }
        };
        runtime.block_on(async move {
            let listener = match listen(addr) {
                Ok(listener) => listener,
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                    return;
                }
            };
            let _ = bound_tx.send(listener.local_addr());
            accept_loop(listener, metrics, stop).await;
        });
    })?;
    bound_rx.await.map_err(|_| std::io::Error::other("the metrics endpoint's thread ended before it listened"))?
}

fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// One held connection, as the accept loop sees it.
#[derive(Debug)]
struct Held {
    shed: CancellationToken,
    /// Its head has arrived: it is being answered, not idle.
    answering: Arc<AtomicBool>,
}

/// The held connections, oldest first (ids grow).
#[derive(Debug, Default)]
struct Table {
    next: u64,
    held: BTreeMap<u64, Held>,
}

impl Table {
    /// Sheds the oldest connection still waiting for its head (or, if every
    /// one is being answered, the oldest); false if none is held.
    fn shed_oldest(&mut self) -> bool {
        let victim = self.held.iter().find(|(_, h)| !h.answering.load(Ordering::Relaxed)).map(|(id, _)| *id);
        let Some(id) = victim.or_else(|| self.held.keys().next().copied()) else { return false };
        if let Some(held) = self.held.remove(&id) {
            held.shed.cancel();
        }
        true
    }
}

/// Removes its connection from the table when the connection's task ends.
struct Leave {
    table: Arc<Mutex<Table>>,
    id: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        lock(&self.table).held.remove(&self.id);
    }
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts something worth a warning and says it at most every [`WARN_EVERY`].
#[derive(Debug)]
struct Quiet {
    what: &'static str,
    count: u64,
    since: Option<Instant>,
}

impl Quiet {
    fn new(what: &'static str) -> Self {
        Self { what, count: 0, since: None }
    }

    fn note(&mut self, error: Option<&std::io::Error>) {
        self.count += 1;
        let now = Instant::now();
        if self.since.is_none_or(|t| now.duration_since(t) >= WARN_EVERY) {
            match error {
                Some(e) => tracing::warn!(count = self.count, error = %e, "metrics endpoint: {}", self.what),
                None => tracing::warn!(count = self.count, limit = MAX_CONNECTIONS, "metrics endpoint: {}", self.what),
            }
            self.count = 0;
            self.since = Some(now);
        }
    }
}

/// The encoders of the bodies that grow with the number of policies.
#[derive(Debug)]
struct Bodies {
    metrics: Encoder,
    status: Encoder,
}

async fn accept_loop(listener: TcpListener, metrics: Arc<Metrics>, stop: CancellationToken) {
    let table = Arc::new(Mutex::new(Table::default()));
    let bodies = Arc::new(Bodies {
        metrics: Encoder::start({
            let metrics = metrics.clone();
            move || metrics.encode().into_bytes()
        }),
        status: Encoder::start({
            let metrics = metrics.clone();
            move || serde_json::to_vec_pretty(&metrics.status()).unwrap_or_default()
        }),
    });
    let mut backoff = BACKOFF_MIN;
    let mut shed = Quiet::new("connections past the cap shed (the oldest idle ones)");
    let mut failed = Quiet::new("accepting connections failed (idle ones are shed, or it backs off)");
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = BACKOFF_MIN;
                stream
            }
            Err(e) => {
                // Out of descriptors or memory: the connection stays queued,
                // so trying again at once would spin. Shed an idle
                // connection (its task closes it when it runs) and try
                // again; with nothing left to shed, back off.
                failed.note(Some(&e));
                metrics.http_accept_error();
                if lock(&table).shed_oldest() {
                    metrics.http_shed();
                    tokio::task::yield_now().await;
                    continue;
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop.cancelled() => break,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let (id, token, answering) = {
            let mut t = lock(&table);
            while t.held.len() >= MAX_CONNECTIONS {
                t.shed_oldest();
                shed.note(None);
                metrics.http_shed();
            }
            let id = t.next;
            t.next += 1;
            let held = Held { shed: stop.child_token(), answering: Arc::default() };
            let (token, answering) = (held.shed.clone(), held.answering.clone());
            t.held.insert(id, held);
            (id, token, answering)
        };
        let leave = Leave { table: table.clone(), id };
        let (metrics, bodies) = (metrics.clone(), bodies.clone());
        tokio::spawn(async move {
            let _leave = leave;
            tokio::select! {
                _ = answer(stream, &metrics, &bodies, &answering) => {}
                // Shed: dropping the stream closes it.
                () = token.cancelled() => {}
            }
        });
        // Let the new connection read its head before accepting more.
        tokio::task::yield_now().await;
    }
    // Stopping: every connection task ends with its token.
    for (_, held) in std::mem::take(&mut lock(&table).held) {
        held.shed.cancel();
    }
}

/// Why a request head could not be read.
enum HeadError {
    TooSlow,
    Bad,
}

/// Reads the request head (until an empty line), at most `MAX_HEAD` bytes.
async fn read_head(stream: &mut TcpStream) -> Result<String, HeadError> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await.map_err(|_| HeadError::Bad)?;
        if n == 0 {
            return Err(HeadError::Bad);
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return String::from_utf8(head).map_err(|_| HeadError::Bad);
        }
        if head.len() > MAX_HEAD {
            return Err(HeadError::Bad);
        }
    }
}

async fn answer(
    mut stream: TcpStream,
    metrics: &Metrics,
    bodies: &Bodies,
    answering: &AtomicBool,
) -> std::io::Result<()> {
    let head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await.unwrap_or(Err(HeadError::TooSlow));
    answering.store(true, Ordering::Relaxed);
    let head = match head {
        Ok(head) => head,
        Err(HeadError::TooSlow) => {
            return respond(&mut stream, "408 Request Timeout", "text/plain", b"request head too slow\n", true).await
        }
        Err(HeadError::Bad) => {
            return respond(&mut stream, "400 Bad Request", "text/plain", b"bad request\n", true).await
        }
    };
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let body_too = method == "GET";
    if method != "GET" && method != "HEAD" {
        return respond(&mut stream, "405 Method Not Allowed", "text/plain", b"GET only\n", true).await;
    }
    let path = target.split('?').next().unwrap_or("");
    let (status, kind, body): (&str, &str, Arc<[u8]>) = match path {
        "/metrics" => match bodies.metrics.get(ENCODE_WAIT).await {
            Some(body) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body),
            None => not_encoded(),
        },
        "/healthz" => ("200 OK", "text/plain", Arc::from(&b"ok\n"[..])),
        "/readyz" => match metrics.not_ready_because() {
            None => ("200 OK", "text/plain", Arc::from(&b"ready\n"[..])),
            Some(why) => ("503 Service Unavailable", "text/plain", Arc::from(format!("not ready: {why}\n").as_bytes())),
        },
        "/status" => match bodies.status.get(ENCODE_WAIT).await {
            Some(body) => ("200 OK", "application/json", body),
            None => not_encoded(),
        },
        _ => ("404 Not Found", "text/plain", Arc::from(&b"not found\n"[..])),
    };
    respond(&mut stream, status, kind, &body, body_too).await
}

/// The answer when no body was encoded in time (or the encoding failed).
fn not_encoded() -> (&'static str, &'static str, Arc<[u8]>) {
    ("503 Service Unavailable", "text/plain", Arc::from(&b"busy: the body could not be encoded in time\n"[..]))
}

/// Writes the response, within [`WRITE_TIMEOUT`], and closes.
async fn respond(
    stream: &mut TcpStream,
    status: &str,
    kind: &str,
    body: &[u8],
    with_body: bool,
) -> std::io::Result<()> {
    tokio::time::timeout(WRITE_TIMEOUT, write_response(stream, status, kind, body, with_body))
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

async fn write_response(
    stream: &mut TcpStream,
    status: &str,
    kind: &str,
    body: &[u8],
    with_body: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if with_body {
        stream.write_all(body).await?;
    }
    stream.shutdown().await
}

/// GETs `path` from an endpoint (for `nri-wasm status` and tests): the
/// status code and the body.
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::time::timeout(CLIENT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting timed out"))??;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(CLIENT_TIMEOUT, stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "reading timed out"))??;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(mut s: TcpStream) -> String {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn endpoints_answer_and_bad_requests_are_refused() {
        let metrics = Arc::new(Metrics::new());
        let stop = CancellationToken::new();
        let addr = serve("127.0.0.1:0".parse().unwrap(), metrics.clone(), stop.clone()).await.unwrap();
        let (code, body) = get(addr, "/metrics").await.unwrap();
        assert_eq!(code, 200);
        assert!(body.contains("nri_wasm_registered 0"), "{body}");
        assert_eq!(get(addr, "/healthz").await.unwrap().0, 200);
        assert_eq!(get(addr, "/readyz").await.unwrap().0, 503);
        assert_eq!(get(addr, "/nope").await.unwrap().0, 404);
        let (code, body) = get(addr, "/status").await.unwrap();
        assert_eq!(code, 200);
        let status: super::super::HostStatus = serde_json::from_str(&body).unwrap();
        assert!(!status.registered);
        // A head that never ends is cut off, not buffered for ever.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&vec![b'x'; 20 << 10]).await.unwrap();
        let out = read_all(s).await;
        assert!(out.starts_with("HTTP/1.1 400"), "{out}");
        // A POST is refused.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /healthz HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(read_all(s).await.starts_with("HTTP/1.1 405"));
        stop.cancel();
    }

    /// A head trickled a byte at a time, or never finished, is answered
    /// "too slow" once its time is up: the head timeout fired, not the cap.
    #[tokio::test]
    async fn a_slow_head_is_cut_at_the_head_timeout() {
        let stop = CancellationToken::new();
        let addr = serve("127.0.0.1:0".parse().unwrap(), Arc::new(Metrics::new()), stop.clone()).await.unwrap();
        let (mut r, mut w) = TcpStream::connect(addr).await.unwrap().into_split();
        w.write_all(b"GET /hea").await.unwrap();
        let trickle = async {
            for b in b"lthz HTTP/1.1\r\nX: y" {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if w.write_all(&[*b]).await.is_err() {
                    break;
                }
            }
            std::future::pending::<()>().await;
        };
        // The first bytes the server writes, while the head is unfinished.
        let mut buf = [0u8; 256];
        let n = tokio::select! {
            () = trickle => unreachable!(),
            n = tokio::time::timeout(Duration::from_secs(30), r.read(&mut buf)) => n.unwrap().unwrap(),
        };
        let out = String::from_utf8_lossy(&buf[..n]);
        assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        stop.cancel();
    }

    /// Past the cap, the oldest idle connection is closed by the server and
    /// a new request is still answered.
    #[tokio::test]
    async fn past_the_cap_the_oldest_idle_connection_is_shed() {
        let stop = CancellationToken::new();
        let addr = serve("127.0.0.1:0".parse().unwrap(), Arc::new(Metrics::new()), stop.clone()).await.unwrap();
        let first = TcpStream::connect(addr).await.unwrap();
        // Let the server accept it first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS + 8 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        assert_eq!(get(addr, "/healthz").await.unwrap().0, 200);
        // Shed: closed with nothing written (a head timeout would have
        // written a 408 first, and comes much later).
        assert_eq!(read_all(first).await, "", "the oldest idle connection was shed without an answer");
        let (_, text) = get(addr, "/metrics").await.unwrap();
        let shed: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("nri_wasm_http_connections_shed_total "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no shed counter in\n{text}"));
        assert!(shed >= 8, "{shed} shed connections counted, at least 8 were");
        stop.cancel();
    }
}
