//! `nri-wasm status`: what a running host is doing, from its endpoint.

use std::io::Write;

use super::StatusArgs;
use crate::metrics::HostStatus;

pub(super) async fn status(args: &StatusArgs, out: &mut dyn Write) -> anyhow::Result<std::process::ExitCode> {
    let addr: std::net::SocketAddr = args
        .address
        .parse()
        .map_err(|_| anyhow::anyhow!("--address {:?} is not an IP address and port", args.address))?;
    let (code, body) = crate::metrics::get(addr, "/status").await.map_err(|e| {
        anyhow::anyhow!("no host answers on {addr} ({e}); is it running with [metrics] address = {:?}?", args.address)
    })?;
    if code != 200 {
        anyhow::bail!("the host on {addr} answered {code}: {}", body.trim());
    }
    if args.json {
        writeln!(out, "{}", body.trim())?;
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let status: HostStatus =
        serde_json::from_str(&body).map_err(|e| anyhow::anyhow!("unexpected answer from {addr}: {e}"))?;
    print(&status, out)?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The status as a table.
pub fn print(s: &HostStatus, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "runtime: {}   chain: {}   reconnects: {}",
        if s.registered { "registered" } else { "not registered" },
        if s.chain_loaded { "loaded" } else { "loading" },
        s.reconnects
    )?;
    if !s.subscribed.is_empty() {
        writeln!(out, "subscribed: {}", s.subscribed)?;
    }
    writeln!(out, "{:<24} {:<8} {:<8} {:<6} {:>8}  calls", "POLICY", "STATUS", "MODE", "ERROR", "FAILURES")?;
    for p in &s.policies {
        let calls: Vec<String> = p.calls.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let status = if p.quarantined { "quarantined" } else { &p.status };
        writeln!(
            out,
            "{:<24} {:<8} {:<8} {:<6} {:>8}  {}",
            p.name,
            status,
            p.mode,
            p.on_error,
            p.failures,
            if calls.is_empty() { "-".into() } else { calls.join(" ") }
        )?;
        if !p.reason.is_empty() {
            writeln!(out, "    {}", p.reason)?;
        }
        if !p.refused.is_empty() {
            writeln!(out, "    new version refused, this one keeps running: {}", p.refused)?;
        }
        if !p.source.is_empty() {
            writeln!(
                out,
                "    source: {}   manifest: {}   signer: {}",
                p.source,
                p.manifest,
                if p.signer.is_empty() { "-" } else { &p.signer },
            )?;
            if p.from_cache {
                writeln!(out, "    from the node's cache: {}", cache_reason(p))?;
            }
        }
        if p.state_save_failures > 0 || p.state_unsaved || !p.state_error.is_empty() {
            writeln!(
                out,
                "    state: {} failed save(s){}{}",
                p.state_save_failures,
                if p.state_unsaved { ", newest state only in memory" } else { "" },
                if p.state_error.is_empty() { String::new() } else { format!("; last error: {}", p.state_error) }
            )?;
        }
    }
    if s.policies.is_empty() {
        writeln!(out, "(no policies)")?;
    }
    Ok(())
}

/// Why a policy came from the node's cache, in words.
fn cache_reason(p: &crate::metrics::PolicyStatus) -> String {
    match p.from_cache_reason.as_str() {
        "pinned-digest" => "its pinned digest is there; the registry was not asked".into(),
        "registry-unreachable" if p.registry_error.is_empty() => "registry unreachable".into(),
        "registry-unreachable" => format!("registry unreachable: {}", p.registry_error),
        // A host from before the reason was given.
        _ => "reason not given by this host".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PolicyStatus;

    #[test]
    fn the_table_shows_every_policy_and_why_one_is_not_loaded() {
        let s = HostStatus {
            registered: true,
            chain_loaded: true,
            reconnects: 2,
            subscribed: "CreateContainer".into(),
            policies: vec![
                PolicyStatus {
                    name: "10-a".into(),
                    status: "loaded".into(),
                    mode: "enforce".into(),
                    on_error: "ignore".into(),
                    calls: [("changed".to_string(), 3u64)].into_iter().collect(),
                    state_save_failures: 4,
                    state_unsaved: true,
                    state_error: "No space left on device".into(),
                    source: "oci://h:5000/p/a:v1".into(),
                    manifest: "sha256:ab12".into(),
                    signer: "/k.pub (sha256:0011)".into(),
                    from_cache: true,
                    from_cache_reason: "registry-unreachable".into(),
                    registry_error: "https://h:5000/v2/p/a/manifests/v1: connection refused".into(),
                    ..Default::default()
                },
                PolicyStatus {
                    name: "15-pinned".into(),
                    status: "loaded".into(),
                    source: "oci://h:5000/p/c:v1@sha256:cd34".into(),
                    manifest: "sha256:cd34".into(),
                    from_cache: true,
                    from_cache_reason: "pinned-digest".into(),
                    ..Default::default()
                },
                PolicyStatus {
                    name: "20-b".into(),
                    status: "failed".into(),
                    reason: "not a component".into(),
                    ..Default::default()
                },
            ],
        };
        let mut out = Vec::new();
        print(&s, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("registered") && out.contains("reconnects: 2"), "{out}");
        assert!(out.contains("10-a") && out.contains("changed=3"), "{out}");
        assert!(out.contains("20-b") && out.contains("not a component"), "{out}");
        assert!(
            out.contains("state: 4 failed save(s), newest state only in memory; last error: No space left on device"),
            "{out}"
        );
        assert_eq!(out.matches("state:").count(), 1, "only the policy with a problem: {out}");
        assert!(
            out.contains("source: oci://h:5000/p/a:v1   manifest: sha256:ab12   signer: /k.pub (sha256:0011)"),
            "{out}"
        );
        // Which of the two reasons, each with its policy.
        assert!(
            out.contains(
                "from the node's cache: registry unreachable: https://h:5000/v2/p/a/manifests/v1: connection refused"
            ),
            "{out}"
        );
        assert!(out.contains("from the node's cache: its pinned digest is there; the registry was not asked"), "{out}");
        assert_eq!(out.matches("from the node's cache").count(), 2, "{out}");
        assert_eq!(out.matches("source:").count(), 2, "only the policies named by reference: {out}");
    }
}
