//! A setting that breaks a rule its type cannot express.
//!
//! Every `validate()` of the host's settings (the configuration's tables, a
//! policy's limits) answers with an [`Invalid`]: the table and the key it is
//! about, as the operator writes them, the rule with the value, and the
//! error behind it when there is one (a key file that does not read, a CA
//! bundle, an address). `config check` points at the key's line from the
//! table and key it is given, never by reading the message back.

use std::sync::Arc;

/// The error behind a refused value, shared so that the refusal can be
/// cloned into every report that names it.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A value a rule refuses. Shown as `[table] key rule`; its cause, if it
/// has one, is its `source()` (`text::chain` shows both).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{table}{} {rule}", key.as_deref().map(shown).unwrap_or_default())]
pub struct Invalid {
    /// Where: a table as the file writes it (`[engine]`,
    /// `[policies.limits]`, a policy settings file's `[limits]`).
    pub table: String,
    /// The key to blame, in the file's spelling (`max-memory-mib`), when one
    /// key is to blame; `None` for a rule on the table as a whole.
    pub key: Option<String>,
    /// What the value breaks, with the value (`5000 must be in 1..=4096`).
    pub rule: String,
    /// Another key the rule ties this one to (`[engine] max-memory-mib` for
    /// `[policies.limits] memory-mib`), as `(table, key)`: the one to blame
    /// when the file sets that one and not this one.
    pub also: Option<Box<(String, String)>>,
    /// The error behind the refusal.
    #[source]
    pub cause: Option<Cause>,
}

/// A key as TOML writes it: bare when it may be, else quoted and escaped
/// (a key is the operator's text, and may hold anything).
fn shown(key: &str) -> String {
    match !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        true => format!(" {key}"),
        false => format!(" {key:?}"),
    }
}

impl Invalid {
    /// `key` of `table` breaks `rule`.
    pub fn key(table: impl Into<String>, key: impl Into<String>, rule: impl Into<String>) -> Self {
        Self { table: table.into(), key: Some(key.into()), rule: rule.into(), also: None, cause: None }
    }

    /// `table` as a whole breaks `rule`.
    pub fn table(table: impl Into<String>, rule: impl Into<String>) -> Self {
        Self { table: table.into(), key: None, rule: rule.into(), also: None, cause: None }
    }

    /// Tied to `key` of `table` as well.
    pub fn also(mut self, table: impl Into<String>, key: impl Into<String>) -> Self {
        self.also = Some(Box::new((table.into(), key.into())));
        self
    }

    /// With the error behind the refusal.
    pub fn because(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(Arc::new(cause));
        self
    }

    /// The refusal and its causes, as one line.
    pub fn text(&self) -> String {
        crate::text::chain(self)
    }
}

impl PartialEq for Invalid {
    fn eq(&self, other: &Self) -> bool {
        (&self.table, &self.key, &self.rule, &self.also) == (&other.table, &other.key, &other.rule, &other.also)
            && self.cause.as_ref().map(ToString::to_string) == other.cause.as_ref().map(ToString::to_string)
    }
}

impl Eq for Invalid {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_table_the_key_and_the_rule_then_the_cause() {
        let e = Invalid::key("[engine]", "max-memory-mib", "0 must be in 1..=4096");
        assert_eq!(e.to_string(), "[engine] max-memory-mib 0 must be in 1..=4096");
        let e = Invalid::key("[policies.sources]", "a b\u{1b}", "is not a policy name");
        assert_eq!(e.to_string(), "[policies.sources] \"a b\\u{1b}\" is not a policy name");
        let e = Invalid::table("[chain]", "is empty");
        assert_eq!(e.to_string(), "[chain] is empty");
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Invalid::key("[registry]", "ca-file", "/etc/x.pem cannot be used").because(io);
        assert_eq!(e.to_string(), "[registry] ca-file /etc/x.pem cannot be used");
        assert_eq!(e.text(), "[registry] ca-file /etc/x.pem cannot be used: no such file");
        assert!(std::error::Error::source(&e).is_some());
    }
}
