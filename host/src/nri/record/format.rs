//! The recording's line format: one request a line, as NRI's JSON with the
//! proto field names, named by its RPC and stamped with its time of receipt.
//! `eval` reads the same documents (a bare request, or a captured fixture).

use std::time::{SystemTime, UNIX_EPOCH};

use nri_wasm_api::api as pb;

use crate::nri::dispatch::RuntimeInfo;
use crate::nri::version::VersionSource;

/// A request line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The text is not a JSON object (why, as the parser says).
    #[error("not JSON: {0}")]
    Json(String),
    /// The event named (given) is none of NRI's.
    #[error("unknown event {0:?} (events: {names})", names = Request::NAMES.join(", "))]
    UnknownEvent(String),
    /// A bare request, and no `--event` to say what it is.
    #[error("a bare request needs its event named (--event); or use {{\"event\": ..., \"request\": {{...}}}}")]
    NoEvent,
    /// The event expected and the event the document names differ.
    #[error("the document is a {document} request, not {given}")]
    EventMismatch {
        /// The event expected (`--event`, or Synchronize for `eval --node`).
        given: String,
        /// The event the document names.
        document: String,
    },
    /// The request does not decode as the event's protobuf message.
    #[error("not a valid {event} request: {reason}")]
    Request {
        /// The event's RPC name.
        event: &'static str,
        /// What the protobuf JSON decoder refused.
        reason: String,
    },
}

macro_rules! requests {
    ($($event:ident => $message:ident),* $(,)?) => {
        /// A request of the runtime, by event.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request {
            $(#[doc = concat!("A `", stringify!($event), "` request.")]
            $event(pb::$message)),*
        }

        impl Request {
            /// Every event's RPC name.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($event)),*];

            /// The RPC name of the request's event.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$event(_) => stringify!($event)),*
                }
            }

            /// The request message.
            pub fn message(&self) -> &dyn protobuf::MessageDyn {
                match self {
                    $(Self::$event(m) => m),*
                }
            }

            /// Parses a request of the event `name` (one of [`Self::NAMES`]).
            fn parse_as(name: &'static str, json: &str) -> Result<Self, FormatError> {
                let invalid = |e: protobuf_json_mapping::ParseError| FormatError::Request {
                    event: name,
                    reason: e.to_string(),
                };
                match name {
                    $(stringify!($event) => {
                        protobuf_json_mapping::parse_from_str::<pb::$message>(json).map(Self::$event).map_err(invalid)
                    })*
                    other => Err(FormatError::UnknownEvent(other.to_string())),
                }
            }
        }
    };
}

/// The requests of the recording: Configure and Synchronize, then every
/// event of the table (`nri/events.rs`), in its order.
macro_rules! requests_of_events {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        requests! {
            Configure => ConfigureRequest,
            Synchronize => SynchronizeRequest,
            $($kind => $request,)*
        }
    };
}
crate::nri::events::nri_events!(requests_of_events);

/// An event's RPC name from what a user may type: `CreateContainer`,
/// `create-container`, `create_container`, in any case.
pub fn event_name(input: &str) -> Option<&'static str> {
    let squash = |s: &str| s.chars().filter(|c| *c != '-' && *c != '_').collect::<String>().to_ascii_lowercase();
    let wanted = squash(input);
    Request::NAMES.iter().copied().find(|n| squash(n) == wanted)
}

/// A message as NRI's protobuf JSON with the proto field names, on one line.
pub fn to_json(message: &dyn protobuf::MessageDyn) -> String {
    let options = protobuf_json_mapping::PrintOptions { proto_field_name: true, ..Default::default() };
    // Printing fails only for values JSON cannot hold (a NaN float); NRI
    // messages have no floats.
    protobuf_json_mapping::print_to_string_with_options(message, &options)
        .unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
}

impl Request {
    /// Parses the request of event `event` (any spelling [`event_name`] takes).
    pub fn parse(event: &str, json: &str) -> Result<Self, FormatError> {
        let name = event_name(event).ok_or_else(|| FormatError::UnknownEvent(event.to_string()))?;
        Self::parse_as(name, json)
    }

    /// The request as NRI's protobuf JSON, proto field names, one line.
    pub fn to_json(&self) -> String {
        to_json(self.message())
    }

    /// One line of a recording (without the newline).
    pub fn to_line(&self, time: SystemTime) -> String {
        format!("{{\"event\":\"{}\",\"time\":\"{}\",\"request\":{}}}", self.name(), rfc3339(time), self.to_json())
    }

    /// The Configure request behind what the host made of one.
    pub fn configure(runtime: &RuntimeInfo) -> Self {
        Self::Configure(pb::ConfigureRequest {
            config: runtime.config.clone(),
            runtime_name: runtime.name.clone(),
            runtime_version: runtime.version.clone(),
            registration_timeout: runtime.registration_timeout.as_millis() as i64,
            request_timeout: runtime.request_timeout.as_millis() as i64,
            // An inferred version is inferred again from name and version.
            NRI_version: match runtime.nri_version_source {
                VersionSource::Announced => runtime.nri_version.to_string(),
                _ => String::new(),
            },
            ..Default::default()
        })
    }
}

/// A request read from a document or a recording line.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The request, decoded.
    pub request: Request,
    /// When it was received, if the line says.
    pub time: Option<String>,
}

/// Reads a document: `{"event": NAME, "request": {...}}` (a fixture, a
/// recording line, with an optional `time`), or a bare request of the event
/// `event`. When both name the event they must agree.
pub fn parse_document(text: &str, event: Option<&str>) -> Result<Recorded, FormatError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| FormatError::Json(e.to_string()))?;
    let object = value.as_object().ok_or_else(|| FormatError::Json("not a JSON object".into()))?;
    let wrapped = match (object.get("event"), object.get("request")) {
        (Some(serde_json::Value::String(name)), Some(request @ serde_json::Value::Object(_))) => Some((name, request)),
        _ => None,
    };
    let Some((name, request)) = wrapped else {
        let event = event.ok_or(FormatError::NoEvent)?;
        return Ok(Recorded { request: Request::parse(event, text)?, time: None });
    };
    let document = event_name(name).ok_or_else(|| FormatError::UnknownEvent(name.clone()))?;
    if let Some(given) = event {
        if event_name(given) != Some(document) {
            return Err(FormatError::EventMismatch { given: given.to_string(), document: document.to_string() });
        }
    }
    let time = object.get("time").and_then(|t| t.as_str()).map(str::to_string);
    Ok(Recorded { request: Request::parse_as(document, &request.to_string())?, time })
}

/// `t` as RFC 3339 in UTC, to the microsecond.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::fixture;
    use super::*;

    #[test]
    fn the_captured_requests_read_back_as_they_were_written() {
        let dir = nri_sim::fixtures::dir().unwrap();
        for event in ["CreateContainer", "RunPodSandbox", "Synchronize"] {
            let text = std::fs::read_to_string(dir.join(format!("{event}.json"))).unwrap();
            let recorded = parse_document(&text, None).unwrap();
            assert_eq!(recorded.request.name(), event);
            // What the recorder writes is what protojson would write: the
            // document's request, field for field.
            let ours: serde_json::Value = serde_json::from_str(&recorded.request.to_json()).unwrap();
            let theirs: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(ours, theirs["request"], "{event}");
            let line = recorded.request.to_line(UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456));
            assert!(!line.contains('\n'));
            let again = parse_document(&line, Some(event)).unwrap();
            assert_eq!(again.request, recorded.request);
            assert_eq!(again.time.as_deref(), Some("2023-11-14T22:13:20.123456Z"));
        }
        let req: pb::CreateContainerRequest = fixture("CreateContainer");
        let bare = to_json(&req);
        let recorded = parse_document(&bare, Some("create-container")).unwrap();
        assert_eq!(recorded.request, Request::CreateContainer(req));
    }

    #[test]
    fn documents_that_cannot_be_used_say_why() {
        let bare = r#"{"pod": {"id": "p"}}"#;
        assert_eq!(parse_document(bare, None), Err(FormatError::NoEvent));
        let e = parse_document(bare, Some("CreateBanana")).unwrap_err();
        assert!(e.to_string().contains("unknown event \"CreateBanana\"") && e.to_string().contains("RunPodSandbox"));
        let wrapped = r#"{"event": "RunPodSandbox", "request": {"pod": {"id": "p"}}}"#;
        let e = parse_document(wrapped, Some("CreateContainer")).unwrap_err();
        assert_eq!(e.to_string(), "the document is a RunPodSandbox request, not CreateContainer");
        let e = parse_document(r#"{"pod": {"id": 7}}"#, Some("RunPodSandbox")).unwrap_err();
        assert!(matches!(e, FormatError::Request { event: "RunPodSandbox", .. }), "{e}");
        let e = parse_document(r#"{"pod": {"idd": "x"}}"#, Some("RunPodSandbox")).unwrap_err();
        assert!(e.to_string().contains("idd"), "{e}");
        assert!(matches!(parse_document("[1]", None), Err(FormatError::Json(_))));
        assert!(matches!(parse_document("password=hunter2", None), Err(FormatError::Json(_))));
        assert_eq!(event_name("post_start-CONTAINER"), Some("PostStartContainer"));
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        // 2024-02-29 (a leap day) 23:59:59.5
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_millis(1_709_251_199_500)), "2024-02-29T23:59:59.500000Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(4_102_444_800)), "2100-01-01T00:00:00.000000Z");
    }
}
