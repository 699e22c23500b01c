//! A plain HTTP/1.0 GET, for the host's `/metrics`, `/readyz` and
//! `/status` on the pod network (from a thread inside the node's network
//! namespace: [`crate::ns::Namespaces::in_net`]).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The status code and body of `GET path`, if the server answered.
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The value of the first sample of `metric` whose labels contain every
/// `label="value"` pair given, in Prometheus text.
pub fn sample(metrics: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (name_labels, value) = line.rsplit_once(' ')?;
        let (name, rest) = match name_labels.split_once('{') {
            Some((n, r)) => (n, r),
            None => (name_labels, ""),
        };
        if name != metric {
            return None;
        }
        labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))).then(|| value.parse().ok())?
    })
}
