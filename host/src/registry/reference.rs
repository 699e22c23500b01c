//! `oci://host[:port]/repository[:tag][@sha256:hex]`: the names a policy's
//! settings file may give instead of a `.wasm` file.
//!
//! The grammar is the distribution reference's (host, a lowercase path,
//! a tag, a digest); only `sha256` digests are accepted, since that is what
//! the cache and the signatures are keyed by. The host part is required: a
//! node must never guess a default registry.

use std::fmt;

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciRef {
    /// `host` or `host:port`.
    pub registry: String,
    /// `path/of/repository`.
    pub repository: String,
    /// The tag, if the reference has one.
    pub tag: Option<String>,
    /// 64 lowercase hex digits (the `sha256:` prefix is implied).
    pub digest: Option<String>,
}

/// Why a reference was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reference {reference:?}: {reason}")]
pub struct RefError {
    /// The reference as written.
    pub reference: String,
    /// Why it was refused.
    pub reason: String,
}

fn component_ok(c: &str) -> bool {
    // [a-z0-9]+ separated by `.`, `_`, `__` or `-`s.
    !c.is_empty()
        && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && c.as_bytes()[0].is_ascii_alphanumeric()
        && c.as_bytes()[c.len() - 1].is_ascii_alphanumeric()
}

/// A registry as references name it: a DNS name, an IPv4 address, or an
/// IPv6 address in brackets written as a URL writes it (`[::1]`: RFC
/// 5952's lowercase form with zeros compressed, an IPv4-mapped address in
/// hex), each with an optional `:port` (no leading zero). A name a URL
/// would give back otherwise could never match: `plain-http`, the
/// credentials and the redirects are matched by the name a URL gives back.
/// Answers why `h` is not such a name, if it is not.
pub(crate) fn host_problem(h: &str) -> Option<String> {
    let port_ok = |p: &str| !p.starts_with('0') && p.len() <= 5 && p.parse::<u16>().is_ok_and(|n| n > 0);
    let rule = || Some(format!("the host must be {HOST_RULE}"));
    if let Some(rest) = h.strip_prefix('[') {
        let Some((address, after)) = rest.split_once(']') else { return rule() };
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(port_ok))
            || address.parse::<std::net::Ipv6Addr>().is_err()
        {
            return rule();
        }
        let written = reqwest::Url::parse(&format!("http://[{address}]/"))
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        if written != format!("[{address}]") {
            return Some(format!(
                "the IPv6 address must be written as URLs write it (RFC 5952: lowercase, zeros compressed): \
                 {written}{after}"
            ));
        }
        return None;
    }
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (h, None),
    };
    let name_ok = !name.is_empty()
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if name_ok && port.is_none_or(port_ok) {
        None
    } else {
        rule()
    }
}

/// What [`host_problem`] accepts, in words, for the messages that refuse a host.
pub(crate) const HOST_RULE: &str = "a DNS name, an IPv4 address or an IPv6 address in brackets as URLs write it \
                                    ([::1], RFC 5952), with an optional :port";

impl OciRef {
    /// Parses `oci://…` (the scheme is required).
    pub fn parse(text: &str) -> Result<Self, RefError> {
        let bad = |reason: &str| RefError { reference: text.to_string(), reason: reason.to_string() };
        let rest = text
            .strip_prefix("oci://")
            .ok_or_else(|| bad("must start with oci:// (oci://host[:port]/repository[:tag][@sha256:digest])"))?;
        if rest.len() > 1024 {
            return Err(bad("is longer than 1024 characters"));
        }
        let (rest, digest) = match rest.split_once('@') {
            Some((r, d)) => {
                let hex = d.strip_prefix("sha256:").ok_or_else(|| bad("the digest must be sha256:<64 hex digits>"))?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                    return Err(bad("the digest must be sha256:<64 lowercase hex digits>"));
                }
                (r, Some(hex.to_string()))
            }
            None => (rest, None),
        };
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("names no repository after the host"))?;
        if let Some(why) = host_problem(registry) {
            return Err(bad(&why));
        }
        let (repository, tag) = match path.rsplit_once(':') {
            Some((r, t)) => (r, Some(t.to_string())),
            None => (path, None),
        };
        if !repository.split('/').all(component_ok) {
            return Err(bad("the repository must be lowercase path components ([a-z0-9], separated by . _ -)"));
        }
        if let Some(t) = &tag {
            let ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && !t.starts_with(['.', '-']);
            if !ok {
                return Err(bad("the tag must be [A-Za-z0-9_.-], at most 128, not starting with . or -"));
            }
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad("names neither a tag nor a digest"));
        }
        Ok(Self { registry: registry.to_string(), repository: repository.to_string(), tag, digest })
    }

    /// What the registry's manifest endpoint is asked for: the digest when
    /// there is one (the tag is then only a label).
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => format!("sha256:{d}"),
            (None, Some(t)) => t.clone(),
            (None, None) => unreachable!("parse requires a tag or a digest"),
        }
    }

    /// The same repository at another tag (where cosign keeps signatures).
    pub fn with_tag(&self, tag: &str) -> Self {
        Self { tag: Some(tag.to_string()), digest: None, ..self.clone() }
    }

    /// `host/repository[:tag][@sha256:digest]`, as other OCI tools write it.
    pub fn plain(&self) -> String {
        self.to_string().trim_start_matches("oci://").to_string()
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@sha256:{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print_back() {
        let d = "ab".repeat(32);
        for text in [
            format!("oci://registry.example:5000/policies/ulimit@sha256:{d}"),
            format!("oci://127.0.0.1:5000/a/b-c/d_e:v1.2@sha256:{d}"),
            "oci://host/p:latest".to_string(),
            format!("oci://[::1]:5000/policies/ulimit:v1@sha256:{d}"),
            "oci://[fd00::2]/p:v1".to_string(),
            "oci://[::ffff:a00:1]:443/p:v1".to_string(),
        ] {
            let r = OciRef::parse(&text).unwrap();
            assert_eq!(r.to_string(), text);
        }
        let r = OciRef::parse(&format!("oci://h:5000/p/u:v1@sha256:{d}")).unwrap();
        assert_eq!((r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()), ("h:5000", "p/u", Some("v1")));
        assert_eq!(r.manifest_ref(), format!("sha256:{d}"));
        assert_eq!(r.with_tag("x.sig").to_string(), "oci://h:5000/p/u:x.sig");
        let r = OciRef::parse("oci://[::1]:5000/p/u:v1").unwrap();
        assert_eq!((r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()), ("[::1]:5000", "p/u", Some("v1")));
        assert_eq!(r.plain(), "[::1]:5000/p/u:v1");
    }

    #[test]
    fn bad_references_say_why() {
        for (text, why) in [
            ("registry/p:v1", "oci://"),
            ("oci://host:v1", "no repository"),
            ("oci://host/p", "neither a tag nor a digest"),
            ("oci://host/P:v1", "lowercase"),
            ("oci://host/p@sha512:00", "sha256"),
            ("oci://host/p@sha256:AB", "64 lowercase"),
            ("oci://ho st/p:v", "host"),
            ("oci://host:99999/p:v", "host"),
            ("oci://host/p:-v", "tag"),
            ("oci://host//p:v", "lowercase"),
            ("oci://::1/p:v", "IPv6 address in brackets"),
            ("oci://[::1/p:v", "host"),
            ("oci://[0:0:0:0:0:0:0:1]:5000/p:v", "write it (RFC 5952: lowercase, zeros compressed): [::1]:5000"),
            ("oci://[FD00::2]/p:v", "zeros compressed): [fd00::2]"),
            ("oci://[::ffff:10.0.0.1]/p:v", "zeros compressed): [::ffff:a00:1]"),
            ("oci://[::1]:05000/p:v", "host"),
            ("oci://host:080/p:v", "host"),
            ("oci://[fe80::1%eth0]/p:v", "host"),
            ("oci://[::1]:0/p:v", "host"),
            ("oci://[::1]:70000/p:v", "host"),
            ("oci://[::1]x/p:v", "host"),
            ("oci://[127.0.0.1]/p:v", "host"),
        ] {
            let e = OciRef::parse(text).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(text), "{text}: {e}");
        }
    }
}
