//! The parity reference policy (see ../README.md), in Rust.
use nri_wasm_sdk::*;
use serde_json::{Map, Value};

const KNOWN: [&str; 6] = ["labels", "annotations", "prefix", "deny-namespaces", "deny-annotation", "memory-cap"];

struct Settings {
    /// (from a label, key, variable name), labels first, each by key.
    mappings: Vec<(bool, String, String)>,
    deny_namespaces: Vec<String>,
    deny_annotation: String,
    memory_cap: Option<i64>,
}

fn invalid(message: String) -> String {
    format!("invalid settings: {message}")
}

fn sanitize(key: &str) -> String {
    let mut name: String =
        key.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn strings_object(doc: &Map<String, Value>, key: &str) -> Result<Vec<(String, String)>, String> {
    let Some(v) = doc.get(key) else { return Ok(Vec::new()) };
    let bad = || invalid(format!("{key}: expected an object of strings"));
    let object = v.as_object().ok_or_else(bad)?;
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in object {
        out.push((k.clone(), v.as_str().ok_or_else(bad)?.to_string()));
    }
    out.sort();
    Ok(out)
}

fn parse(text: &str) -> Result<Settings, String> {
    let doc: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?
    };
    let doc = doc.as_object().ok_or_else(|| invalid("expected an object".into()))?;
    let mut keys: Vec<&String> = doc.keys().collect();
    keys.sort();
    if let Some(k) = keys.into_iter().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(invalid(format!("unknown field {k}")));
    }
    let string = |key: &str, default: &str| -> Result<String, String> {
        match doc.get(key) {
            None => Ok(default.to_string()),
            Some(v) => v.as_str().map(str::to_string).ok_or_else(|| invalid(format!("{key}: expected a string"))),
        }
    };
    let prefix = string("prefix", "POD_")?;
    if !prefix.is_empty() && !valid_name(&prefix) {
        return Err(invalid(format!("prefix {prefix} cannot start a variable name")));
    }
    let deny_annotation = string("deny-annotation", "parity.example.com/deny")?;
    let deny_namespaces = match doc.get("deny-namespaces") {
        None => Vec::new(),
        Some(v) => {
            let bad = || invalid("deny-namespaces: expected a list of strings".into());
            let list = v.as_array().ok_or_else(bad)?;
            list.iter().map(|s| s.as_str().map(str::to_string).ok_or_else(bad)).collect::<Result<_, _>>()?
        }
    };
    let memory_cap = match doc.get("memory-cap") {
        None => None,
        Some(v) => match v.as_i64() {
            // At most 2^53 - 1: what every language's JSON reads exactly.
            Some(n) if n > 0 && n < 1 << 53 => Some(n),
            _ => return Err(invalid("memory-cap: expected a positive integer".into())),
        },
    };
    let mut mappings: Vec<(bool, String, String)> = Vec::new();
    for (label, what) in [(true, "labels"), (false, "annotations")] {
        for (key, name) in strings_object(doc, what)? {
            let name = if name.is_empty() { format!("{prefix}{}", sanitize(&key)) } else { name };
            if !valid_name(&name) {
                return Err(invalid(format!("{what} {key}: {name} is not a variable name")));
            }
            if let Some((_, other, _)) = mappings.iter().find(|(_, _, n)| *n == name) {
                return Err(invalid(format!("{other} and {key} would both set {name}")));
            }
            mappings.push((label, key, name));
        }
    }
    Ok(Settings { mappings, deny_namespaces, deny_annotation, memory_cap })
}

struct Parity;

/// The settings `init` parsed: found by every call of a pre-initialised
/// instance (`preinitialize = true`), never by a call of one as built.
static PARSED: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();

impl Policy for Parity {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        // Kept for the handlers: a pre-initialised instance starts with it.
        let _ = PARSED.set(parse(settings)?);
        Ok(())
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        let parsed;
        let s = match PARSED.get() {
            Some(kept) => kept,
            None => {
                parsed = parse(settings())?;
                &parsed
            }
        };
        let pod = e.pod_meta();
        let (ns, name) = (&pod.namespace, &pod.name);
        if s.deny_namespaces.iter().any(|d| d == ns) {
            return Err(format!("pod {ns}/{name}: namespace {ns} is not allowed"));
        }
        if !s.deny_annotation.is_empty() {
            if let Some(v) = e.pod_annotation(&s.deny_annotation) {
                return Err(format!("pod {ns}/{name} is marked {}={v}", s.deny_annotation));
            }
        }
        let mut adjust = ContainerAdjustment::new();
        for (label, key, var) in &s.mappings {
            let value = if *label { e.pod_label(key) } else { e.pod_annotation(key) };
            let Some(value) = value else { continue };
            if e.env_var(var).is_some() {
                continue;
            }
            adjust = adjust.set_env(var, &value);
        }
        if let Some(cap) = s.memory_cap {
            let limit = e.resources().and_then(|r| r.memory.as_ref()).and_then(|m| m.limit);
            if limit.is_none_or(|l| l > cap) {
                adjust = adjust.set_memory_limit(cap);
            }
        }
        let seen = format!("{}/{}/{}", e.pod_labels().len(), e.pod_annotations().len(), e.env().len());
        adjust = adjust.set_annotation("parity.example.com/seen", &seen);
        log(LogLevel::Info, &format!("{}: {} variables", e.container_meta().name, adjust.env.len()));
        Ok(Reply::adjust(adjust))
    }
}

export_policy!(Parity);
