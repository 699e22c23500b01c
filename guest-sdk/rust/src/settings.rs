//! The operator's settings for this policy, as text ([`settings()`]) or
//! deserialised into the policy's own type ([`parse`], [`get`]).
//!
//! The host hands a policy its settings as one string: a `settings` string
//! in the policy's file as it is, a `[settings]` table as its JSON text
//! (docs/configuration.md). Every call runs in a fresh instance, so the
//! handlers read them again rather than keeping what `configure` saw,
//! unless the operator sets `preinitialize = true`: every call then starts
//! from the instance `configure` left, and a policy that keeps its parsed
//! settings in a `static` (a `std::sync::OnceLock` set in `init`) finds
//! them there instead of parsing again.
//!
//! Why typed settings live in the SDK: every policy with settings needs the
//! same three things, and each hand-written parser got them slightly
//! differently: unknown keys refused (a typo must not be silently ignored),
//! defaults for what is left out, and an error that names the key at
//! fault. [`parse`] gives them to any `#[derive(Deserialize)]` type:
//!
//! ```ignore
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields, rename_all = "kebab-case")]
//! struct Settings {
//!     #[serde(default = "twenty")]
//!     cpu_percent: u64,
//!     label: String,
//! }
//!
//! fn init(text: &str) -> Result<(), String> {
//!     let s: Settings = nri_wasm_sdk::settings::parse(text)?;
//!     // ... check what types cannot say, with errors of the same form ...
//!     Ok(())
//! }
//! ```
//!
//! Two forms of text are read, chosen by its first character:
//!
//! - a JSON object (`{...}`: what a `[settings]` table becomes), read with
//!   `serde_json`; an error names the path of the value at fault
//!   (`invalid settings: max.nofile.soft: invalid type: ...`);
//! - words `key=value` separated by white space (a `settings` string such
//!   as `"cpu-percent=20 label=tier"`), every value a string that numbers
//!   and booleans are parsed from. There is no quoting: a value cannot
//!   hold white space, and everything after the first `=` is the value. A
//!   key given twice is refused (`pool given twice`). Words are flat: a
//!   field that wants a list, a map or a struct cannot be given this way.
//!
//! In both forms an error names the key at fault (`cpu-percent: "20%" is
//! not a number`, `limits.nofile.soft: invalid type: ...`; a key that is
//! not letters, digits, `_` and `-` quoted: `devices."/dev/fuse".major`).
//! Unknown keys are refused only if the type says
//! `#[serde(deny_unknown_fields)]` (serde ignores them otherwise), in the
//! same words in both forms: ``unknown field `x`, expected one of ...``.
//!
//! Empty text (no settings given) is read as an empty object, so the type's
//! defaults decide, and a field without one is reported missing (with no
//! position: there is no text to point into).

use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer as _, Visitor};

#[cfg(target_arch = "wasm32")]
static SETTINGS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The operator's settings for this policy (empty if none were given),
/// asked of the host on first use.
#[cfg(target_arch = "wasm32")]
pub fn settings() -> &'static str {
    SETTINGS.get_or_init(crate::sys::host::settings)
}

/// The operator's settings for this policy (empty if none were given): in
/// a native build, those of the [`crate::testing::TestHost`] running the call.
#[cfg(not(target_arch = "wasm32"))]
pub fn settings() -> &'static str {
    crate::testing::fake::settings()
}

/// This policy's settings (those [`settings()`] returns) as a `T`: see
/// [`parse`].
pub fn get<T: DeserializeOwned>() -> Result<T, SettingsError> {
    parse(settings())
}

/// Settings text as a `T`: a JSON object, or `key=value` words, or empty
/// (an empty object); see the module's documentation.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, SettingsError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        // No text to point into: positions in the stand-in `{}` would
        // only mislead.
        return from_json("{}", false);
    }
    if trimmed.starts_with('{') {
        return from_json(text, true);
    }
    serde_path_to_error::deserialize(Words::parse(text)?).map_err(|e| {
        let message = e.inner().message.clone();
        located(e.path(), message)
    })
}

fn from_json<T: DeserializeOwned>(text: &str, positions: bool) -> Result<T, SettingsError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        let mut message = inner.to_string();
        // An unknown key reads the same in both forms: no position.
        if !positions || message.starts_with("unknown field `") {
            let at = format!(" at line {} column {}", inner.line(), inner.column());
            if let Some(bare) = message.strip_suffix(&at) {
                message = bare.to_string();
            }
        }
        located(e.path(), message)
    })?;
    de.end().map_err(|e| SettingsError { path: String::new(), message: e.to_string() })?;
    Ok(value)
}

/// The error at `path`, written as dotted keys and `[i]` for list items;
/// a key that is not all letters, digits, `_` and `-` is quoted
/// (`devices."/dev/fuse".major`).
fn located(path: &serde_path_to_error::Path, message: String) -> SettingsError {
    use serde_path_to_error::Segment;

    let mut segments: Vec<&Segment> = path.iter().collect();
    // An unknown field is recorded as a step into it, which the message
    // names already: the path is where it was found.
    if let Some(Segment::Map { key }) = segments.last() {
        if message.starts_with(&format!("unknown field `{key}`")) {
            segments.pop();
        }
    }
    let mut out = String::new();
    for segment in segments {
        let key = match segment {
            Segment::Seq { index } => {
                out.push_str(&format!("[{index}]"));
                continue;
            }
            Segment::Map { key } | Segment::Enum { variant: key } => key.as_str(),
            Segment::Unknown => "?",
        };
        if !out.is_empty() {
            out.push('.');
        }
        let plain = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if plain || key == "?" {
            out.push_str(key);
        } else {
            out.push_str(&format!("{key:?}"));
        }
    }
    SettingsError { path: out, message }
}

/// Settings a policy cannot use: what is wrong, and where.
///
/// Shown as `invalid settings: <path>: <message>` (the path left out when
/// the fault is not in one value), the form the host passes on to the
/// operator when `configure` refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    path: String,
    message: String,
}

// Written by hand rather than derived: one Display does not pay for a
// derive crate in every guest.
impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid settings: ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for SettingsError {}

impl SettingsError {
    /// An error about the value at `path` (dotted keys, `[i]` for list
    /// items; empty for the settings as a whole): for the checks a policy
    /// makes after deserialising, so that its errors read like these.
    pub fn new(path: &str, message: impl fmt::Display) -> Self {
        SettingsError { path: path.to_string(), message: message.to_string() }
    }

    /// Where the fault is (empty when it is not in one value).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Unknown keys keep serde's wording, which is also `serde_json`'s: the
/// two forms report them alike.
impl de::Error for SettingsError {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        SettingsError::new("", msg)
    }
}

/// For handlers and `init`, which return `Result<_, String>`: `?` works.
impl From<SettingsError> for String {
    fn from(e: SettingsError) -> String {
        e.to_string()
    }
}

/// `key=value` words, as a map of strings.
struct Words<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Words<'a> {
    fn parse(text: &'a str) -> Result<Self, SettingsError> {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for word in text.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| SettingsError::new("", format_args!("{word:?} is not key=value")))?;
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(SettingsError::new("", format_args!("{key} given twice")));
            }
            pairs.push((key, value));
        }
        Ok(Words { pairs })
    }
}

impl<'de> de::Deserializer<'de> for Words<'de> {
    type Error = SettingsError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingsError> {
        let pairs = self.pairs.into_iter().map(|(key, value)| (key, Word { value }));
        visitor.visit_map(de::value::MapDeserializer::new(pairs))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// One word's value: a string, parsed as the field's type asks (its key
/// is added to an error by `serde_path_to_error`).
struct Word<'a> {
    value: &'a str,
}

impl<'de> de::IntoDeserializer<'de, SettingsError> for Word<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl Word<'_> {
    fn parsed<N: std::str::FromStr>(&self, what: &str) -> Result<N, SettingsError> {
        self.value.parse().map_err(|_| SettingsError::new("", format_args!("{:?} is not {what}", self.value)))
    }
}

macro_rules! parse_as {
    ($($method:ident $visit:ident $ty:ty, $what:literal;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingsError> {
                visitor.$visit(self.parsed::<$ty>($what)?)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Word<'de> {
    type Error = SettingsError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingsError> {
        visitor.visit_borrowed_str(self.value)
    }

    parse_as! {
        deserialize_bool visit_bool bool, "true or false";
        deserialize_i8 visit_i8 i8, "a number";
        deserialize_i16 visit_i16 i16, "a number";
        deserialize_i32 visit_i32 i32, "a number";
        deserialize_i64 visit_i64 i64, "a number";
        deserialize_i128 visit_i128 i128, "a number";
        deserialize_u8 visit_u8 u8, "a number";
        deserialize_u16 visit_u16 u16, "a number";
        deserialize_u32 visit_u32 u32, "a number";
        deserialize_u64 visit_u64 u64, "a number";
        deserialize_u128 visit_u128 u128, "a number";
        deserialize_f32 visit_f32 f32, "a number";
        deserialize_f64 visit_f64 f64, "a number";
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingsError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, SettingsError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SettingsError> {
        visitor.visit_enum(self.value.into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    struct Example {
        #[serde(default = "twenty")]
        cpu_percent: u64,
        memory_high: Option<String>,
        #[serde(default)]
        strict: bool,
        #[serde(default)]
        limits: std::collections::BTreeMap<String, Limit>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Limit {
        soft: u64,
        hard: u64,
    }

    fn twenty() -> u64 {
        20
    }

    fn err(text: &str) -> String {
        parse::<Example>(text).unwrap_err().to_string()
    }

    #[test]
    fn empty_text_is_every_default() {
        let want = Example { cpu_percent: 20, memory_high: None, strict: false, limits: Default::default() };
        assert_eq!(parse::<Example>("").unwrap(), want);
        assert_eq!(parse::<Example>("  \n").unwrap(), want);
        assert_eq!(parse::<Example>("{}").unwrap(), want);
    }

    #[test]
    fn words_become_typed_fields_and_a_repeat_is_refused() {
        let s: Example = parse("cpu-percent=5 memory-high=256M strict=true").unwrap();
        assert_eq!((s.cpu_percent, s.memory_high.as_deref(), s.strict), (5, Some("256M"), true));
        assert_eq!(err("cpu-percent=5 strict=true cpu-percent=7"), "invalid settings: cpu-percent given twice");
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    enum Mode {
        Strict,
        Lenient,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    struct Kinds {
        mode: Option<Mode>,
        list: Option<Vec<String>>,
        big: Option<u128>,
        small: Option<i128>,
        count: Option<u8>,
    }

    #[test]
    fn word_errors_name_the_key() {
        assert_eq!(err("cpu-percent=20%"), "invalid settings: cpu-percent: \"20%\" is not a number");
        assert_eq!(err("strict=yes"), "invalid settings: strict: \"yes\" is not true or false");
        assert_eq!(err("strict"), "invalid settings: \"strict\" is not key=value");
        let kinds = |text: &str| parse::<Kinds>(text).unwrap_err().to_string();
        assert_eq!(
            kinds("mode=loose"),
            "invalid settings: mode: unknown variant `loose`, expected `strict` or `lenient`"
        );
        assert_eq!(kinds("list=a,b"), "invalid settings: list: invalid type: string \"a,b\", expected a sequence");
        assert_eq!(kinds("count=300"), "invalid settings: count: \"300\" is not a number");
        let s: Kinds = parse("mode=lenient big=340282366920938463463374607431768211455 small=-5").unwrap();
        assert_eq!((s.mode, s.big, s.small), (Some(Mode::Lenient), Some(u128::MAX), Some(-5)));
    }

    #[test]
    fn unknown_keys_read_alike_in_both_forms() {
        let want = "invalid settings: unknown field `memory-max`, expected one of `cpu-percent`, `memory-high`, \
                    `strict`, `limits`";
        assert_eq!(err("cpu-percent=1 memory-max=1G"), want);
        assert_eq!(err(r#"{"cpu-percent": 1, "memory-max": "1G"}"#), want);
    }

    #[test]
    fn json_paths_quote_keys_that_are_not_plain() {
        let e = parse::<Example>(r#"{"limits": {"/dev/fuse": {"soft": "x", "hard": 2}}}"#).unwrap_err();
        assert_eq!(e.path(), "limits.\"/dev/fuse\".soft");
    }

    #[test]
    fn empty_text_has_no_position() {
        let e = parse::<Limit>("").unwrap_err();
        assert_eq!(e.to_string(), "invalid settings: missing field `soft`");
    }

    #[test]
    fn json_is_read_with_the_path_of_a_fault() {
        let s: Example = parse(r#"{"cpu-percent": 3, "limits": {"nofile": {"soft": 1, "hard": 2}}}"#).unwrap();
        assert_eq!(s.cpu_percent, 3);
        assert_eq!(s.limits["nofile"], Limit { soft: 1, hard: 2 });

        let e = parse::<Example>(r#"{"limits": {"nofile": {"soft": "many", "hard": 2}}}"#).unwrap_err();
        assert_eq!(e.path(), "limits.nofile.soft");
        assert!(
            e.to_string().starts_with("invalid settings: limits.nofile.soft: invalid type: string \"many\""),
            "{e}"
        );

        let e = parse::<Example>(r#"{"limits": {"nofile": {"soft": 1}}}"#).unwrap_err();
        assert_eq!(e.to_string(), "invalid settings: limits.nofile: missing field `hard` at line 1 column 33");
        // deny_unknown_fields is honoured, naming the field and where.
        let e = parse::<Example>(r#"{"cpu-precent": 3}"#).unwrap_err();
        assert_eq!(e.path(), "");
        assert!(e.to_string().starts_with("invalid settings: unknown field `cpu-precent`, expected one of"), "{e}");
        assert!(!e.to_string().contains(" at line "), "{e}");
        let e = parse::<Example>(r#"{"limits": {"nofile": {"soft": 1, "hard": 2, "firm": 3}}}"#).unwrap_err();
        assert_eq!(e.to_string(), "invalid settings: limits.nofile: unknown field `firm`, expected `soft` or `hard`");
        let e = parse::<std::collections::BTreeMap<String, Vec<Limit>>>(r#"{"a": [{"soft": 1, "hard": "x"}]}"#)
            .unwrap_err();
        assert_eq!(e.path(), "a[0].hard");
        // A fault of the whole text has no path.
        assert_eq!(
            parse::<Example>(r#"{"strict": true} x"#).unwrap_err().to_string(),
            "invalid settings: trailing characters at line 1 column 18"
        );
    }

    #[test]
    fn errors_convert_to_the_handlers_string() {
        fn init(text: &str) -> Result<u64, String> {
            Ok(parse::<Example>(text)?.cpu_percent)
        }
        assert_eq!(init("cpu-percent=x"), Err("invalid settings: cpu-percent: \"x\" is not a number".to_string()));
        assert_eq!(SettingsError::new("a.b", "no").to_string(), "invalid settings: a.b: no");
    }
}
