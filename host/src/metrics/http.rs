//! A minimal HTTP/1.1 server for the metrics and health endpoints.
//!
//! Kubelet probes and Prometheus need little: a GET, a status, a body. So
//! this answers exactly that and nothing else: the request head is read up
//! to 8 KiB within 5 seconds, only GET (and HEAD) of a known path is
//! served, every response closes the connection, and at most 64
//! connections are served at once. Anything else gets a short error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::Metrics;

const MAX_HEAD: usize = 8 << 10;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CONNECTIONS: usize = 64;

/// Serves `metrics` on `addr` until `stop`; returns the bound address.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, stop: CancellationToken) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.cancelled() => return,
            };
            let Ok((stream, _)) = accepted else { continue };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let _ = tokio::time::timeout(HEAD_TIMEOUT * 2, answer(stream, &metrics)).await;
            });
        }
    });
    tracing::info!(address = %bound, "metrics and health endpoint listening");
    Ok(bound)
}

/// Reads the request head (until an empty line), at most `MAX_HEAD` bytes.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(HEAD_TIMEOUT, stream.read(&mut buf)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return String::from_utf8(head).ok();
        }
        if head.len() > MAX_HEAD {
            return None;
        }
    }
}

async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let Some(head) = read_head(&mut stream).await else {
        return respond(&mut stream, "400 Bad Request", "text/plain", b"bad request\n", false).await;
    };
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let body_too = method == "GET";
    if method != "GET" && method != "HEAD" {
        return respond(&mut stream, "405 Method Not Allowed", "text/plain", b"GET only\n", true).await;
    }
    let path = target.split('?').next().unwrap_or("");
    let (status, kind, body): (&str, &str, Vec<u8>) = match path {
        "/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics.encode().into_bytes()),
        "/healthz" => ("200 OK", "text/plain", b"ok\n".to_vec()),
        "/readyz" if metrics.ready() => ("200 OK", "text/plain", b"ready\n".to_vec()),
        "/readyz" => {
            ("503 Service Unavailable", "text/plain", b"not ready: not registered or policies loading\n".to_vec())
        }
        "/status" => ("200 OK", "application/json", serde_json::to_vec_pretty(&metrics.status()).unwrap_or_default()),
        _ => ("404 Not Found", "text/plain", b"not found\n".to_vec()),
    };
    respond(&mut stream, status, kind, &body, body_too).await
}

async fn respond(
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
    let mut stream = tokio::time::timeout(HEAD_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting timed out"))??;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(HEAD_TIMEOUT, stream.read_to_end(&mut response))
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
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 400"), "{}", String::from_utf8_lossy(&out));
        stop.cancel();
    }
}
