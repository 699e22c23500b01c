//! Recording what the runtime sends (`nri-wasm run --record FILE.jsonl`),
//! in the format `nri-wasm eval` reads.
//!
//! An operator tries a new policy against last week's traffic before
//! deploying it: the host records every request it receives, and `eval
//! --replay` runs the recording through any set of policies. The recorder
//! is a [`Dispatcher`] wrapped around the real one, so the transport does
//! not change and nothing but the seam sees it.
//!
//! The format is one JSON object per line, the captured fixtures' format
//! with the time of receipt:
//!
//! ```text
//! {"event":"CreateContainer","time":"2026-11-22T11:40:00.123456Z","request":{"pod":{...},"container":{...}}}
//! ```
//!
//! `request` is NRI's protobuf JSON mapping with the proto field names (what
//! Go's `protojson` writes with `UseProtoNames`: 64-bit integers as strings,
//! zero values left out), so requests logged elsewhere paste in. `event` is
//! the RPC name; a split Synchronize is recorded once, whole, and
//! `Configure` is recorded from what the host made of it (the runtime's
//! name and version, its timeouts), which a replay needs for the chain's
//! time budget.
//!
//! Recording must never cost an event its answer: the event's task only
//! clones the request into a bounded queue (dropping it, counted, when the
//! queue is full); a thread of its own writes the lines. A file that cannot
//! be opened or written (a bad path, a full disk) is reported once and
//! recording stops; the host serves on. The file is created with mode 0600:
//! requests carry the containers' environment, secrets included. When the
//! next line would take the file past its size bound, the file is renamed
//! to `FILE.1` (replacing an older one) and a new file is started, so a
//! recording never holds more than about twice the bound.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use nri_wasm_api::api as pb;

use super::dispatch::{DispatchError, Dispatcher, RuntimeInfo};
use super::version::{EventMask, VersionSource};

/// Records waiting for the writer at most; more are dropped.
const QUEUE: usize = 1024;

/// A request line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("not JSON: {0}")]
    Json(String),
    #[error("unknown event {0:?} (events: {names})", names = Request::NAMES.join(", "))]
    UnknownEvent(String),
    #[error("a bare request needs its event named (--event); or use {{\"event\": ..., \"request\": {{...}}}}")]
    NoEvent,
    #[error("the document is a {document} request, not {given}")]
    EventMismatch { given: String, document: String },
    #[error("not a valid {event} request: {reason}")]
    Request { event: &'static str, reason: String },
}

macro_rules! requests {
    ($($event:ident => $message:ident),* $(,)?) => {
        /// A request of the runtime, by event.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request {
            $($event(pb::$message)),*
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

requests! {
    Configure => ConfigureRequest,
    Synchronize => SynchronizeRequest,
    RunPodSandbox => RunPodSandboxRequest,
    UpdatePodSandbox => UpdatePodSandboxRequest,
    PostUpdatePodSandbox => PostUpdatePodSandboxRequest,
    StopPodSandbox => StopPodSandboxRequest,
    RemovePodSandbox => RemovePodSandboxRequest,
    CreateContainer => CreateContainerRequest,
    PostCreateContainer => PostCreateContainerRequest,
    StartContainer => StartContainerRequest,
    PostStartContainer => PostStartContainerRequest,
    UpdateContainer => UpdateContainerRequest,
    PostUpdateContainer => PostUpdateContainerRequest,
    StopContainer => StopContainerRequest,
    RemoveContainer => RemoveContainerRequest,
    ValidateContainerAdjustment => ValidateContainerAdjustmentRequest,
}

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

/// Where and how much to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordOptions {
    pub path: PathBuf,
    /// Past this many bytes the file is rotated to `FILE.1`; 0: never.
    pub max_bytes: u64,
}

/// The file being written, rotated when it reaches its bound.
#[derive(Debug)]
struct Sink {
    path: PathBuf,
    file: File,
    written: u64,
    max: u64,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    File::options().append(true).create(true).mode(0o600).open(path)
}

/// `FILE.1`, where a full recording goes.
pub fn rotated_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

impl Sink {
    fn open(options: &RecordOptions) -> std::io::Result<Self> {
        let file = open_append(&options.path)?;
        let written = file.metadata()?.len();
        Ok(Self { path: options.path.clone(), file, written, max: options.max_bytes })
    }

    /// Writes one whole line (one write call: a line is never split with
    /// another writer's), rotating first if it would pass the bound.
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.max > 0 && self.written > 0 && self.written + line.len() as u64 > self.max {
            std::fs::rename(&self.path, rotated_path(&self.path))?;
            self.file = open_append(&self.path)?;
            self.written = 0;
        }
        self.file.write_all(line)?;
        self.written += line.len() as u64;
        Ok(())
    }
}

/// Takes requests off the event path and writes them from a thread of its own.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    queue: Mutex<Option<SyncSender<(SystemTime, Request)>>>,
    /// False once the writer stopped (or never started).
    active: Arc<AtomicBool>,
    dropped: AtomicU64,
    /// Closed by the writer thread when it ends.
    finished: Mutex<Option<Receiver<()>>>,
}

impl Recorder {
    /// Opens the file and starts the writer. A file that cannot be opened
    /// is reported and the recorder records nothing: recording is never a
    /// reason for the host not to serve.
    pub fn start(options: RecordOptions) -> Self {
        let path = options.path.clone();
        let inactive = |path: PathBuf| Self {
            path,
            queue: Mutex::new(None),
            active: Arc::new(AtomicBool::new(false)),
            dropped: AtomicU64::new(0),
            finished: Mutex::new(None),
        };
        let mut sink = match Sink::open(&options) {
            Ok(sink) => sink,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot record requests: the file cannot be opened; serving without recording");
                return inactive(path);
            }
        };
        let (tx, rx) = std::sync::mpsc::sync_channel::<(SystemTime, Request)>(QUEUE);
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let active = Arc::new(AtomicBool::new(true));
        let writer_active = active.clone();
        let spawned = std::thread::Builder::new().name("nri-wasm-record".into()).spawn(move || {
            let _done = done_tx;
            for (time, request) in rx {
                let mut line = request.to_line(time);
                line.push('\n');
                if let Err(e) = sink.write(line.as_bytes()) {
                    writer_active.store(false, Ordering::Relaxed);
                    tracing::warn!(path = %sink.path.display(), error = %e, "recording of requests stopped: the file cannot be written");
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot record requests: no writer thread; serving without recording");
            return inactive(path);
        }
        tracing::info!(path = %path.display(), max_bytes = options.max_bytes, "recording every request");
        Self {
            path,
            queue: Mutex::new(Some(tx)),
            active,
            dropped: AtomicU64::new(0),
            finished: Mutex::new(Some(done_rx)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether requests are being recorded.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Requests not recorded because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues the request `f` builds (it is not built when recording is
    /// off). Never waits.
    pub fn record(&self, f: impl FnOnce() -> Request) {
        if !self.is_active() {
            return;
        }
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let Some(queue) = queue.as_ref() else { return };
        match queue.try_send((SystemTime::now(), f())) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(path = %self.path.display(), "the recording falls behind: requests are left out of it");
                }
            }
            Err(TrySendError::Disconnected(_)) => self.active.store(false, Ordering::Relaxed),
        }
    }

    /// Stops recording and waits, at most `wait`, for the queued requests
    /// to be written.
    pub fn close(&self, wait: Duration) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(finished) = self.finished.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // Disconnected (the thread ended) or timed out: either way done waiting.
            let _ = finished.recv_timeout(wait);
        }
        self.active.store(false, Ordering::Relaxed);
        let dropped = self.dropped();
        if dropped > 0 {
            tracing::warn!(path = %self.path.display(), dropped, "requests left out of the recording");
        }
    }
}

/// A dispatcher that records every request, then hands it to `inner`.
pub struct RecordingDispatcher {
    inner: Arc<dyn Dispatcher>,
    recorder: Arc<Recorder>,
}

impl std::fmt::Debug for RecordingDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingDispatcher").field("recorder", &self.recorder).finish_non_exhaustive()
    }
}

impl RecordingDispatcher {
    pub fn new(inner: Arc<dyn Dispatcher>, recorder: Arc<Recorder>) -> Self {
        Self { inner, recorder }
    }

    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }
}

#[async_trait]
impl Dispatcher for RecordingDispatcher {
    fn events(&self) -> EventMask {
        self.inner.events()
    }

    fn events_version(&self) -> u64 {
        self.inner.events_version()
    }

    async fn events_changed(&self, since: u64) {
        self.inner.events_changed(since).await
    }

    async fn configure(&self, runtime: &RuntimeInfo) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::configure(runtime));
        self.inner.configure(runtime).await
    }

    async fn synchronize(
        &self,
        pods: Vec<pb::PodSandbox>,
        containers: Vec<pb::Container>,
    ) -> Result<Vec<pb::ContainerUpdate>, DispatchError> {
        self.recorder.record(|| {
            Request::Synchronize(pb::SynchronizeRequest {
                pods: pods.clone(),
                containers: containers.clone(),
                ..Default::default()
            })
        });
        self.inner.synchronize(pods, containers).await
    }

    async fn run_pod_sandbox(&self, req: pb::RunPodSandboxRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::RunPodSandbox(req.clone()));
        self.inner.run_pod_sandbox(req).await
    }

    async fn update_pod_sandbox(&self, req: pb::UpdatePodSandboxRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::UpdatePodSandbox(req.clone()));
        self.inner.update_pod_sandbox(req).await
    }

    async fn post_update_pod_sandbox(&self, req: pb::PostUpdatePodSandboxRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::PostUpdatePodSandbox(req.clone()));
        self.inner.post_update_pod_sandbox(req).await
    }

    async fn stop_pod_sandbox(&self, req: pb::StopPodSandboxRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::StopPodSandbox(req.clone()));
        self.inner.stop_pod_sandbox(req).await
    }

    async fn remove_pod_sandbox(&self, req: pb::RemovePodSandboxRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::RemovePodSandbox(req.clone()));
        self.inner.remove_pod_sandbox(req).await
    }

    async fn create_container(
        &self,
        req: pb::CreateContainerRequest,
    ) -> Result<pb::CreateContainerResponse, DispatchError> {
        self.recorder.record(|| Request::CreateContainer(req.clone()));
        self.inner.create_container(req).await
    }

    async fn post_create_container(&self, req: pb::PostCreateContainerRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::PostCreateContainer(req.clone()));
        self.inner.post_create_container(req).await
    }

    async fn start_container(&self, req: pb::StartContainerRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::StartContainer(req.clone()));
        self.inner.start_container(req).await
    }

    async fn post_start_container(&self, req: pb::PostStartContainerRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::PostStartContainer(req.clone()));
        self.inner.post_start_container(req).await
    }

    async fn update_container(
        &self,
        req: pb::UpdateContainerRequest,
    ) -> Result<pb::UpdateContainerResponse, DispatchError> {
        self.recorder.record(|| Request::UpdateContainer(req.clone()));
        self.inner.update_container(req).await
    }

    async fn post_update_container(&self, req: pb::PostUpdateContainerRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::PostUpdateContainer(req.clone()));
        self.inner.post_update_container(req).await
    }

    async fn stop_container(&self, req: pb::StopContainerRequest) -> Result<pb::StopContainerResponse, DispatchError> {
        self.recorder.record(|| Request::StopContainer(req.clone()));
        self.inner.stop_container(req).await
    }

    async fn remove_container(&self, req: pb::RemoveContainerRequest) -> Result<(), DispatchError> {
        self.recorder.record(|| Request::RemoveContainer(req.clone()));
        self.inner.remove_container(req).await
    }

    async fn validate_container_adjustment(
        &self,
        req: pb::ValidateContainerAdjustmentRequest,
    ) -> Result<pb::ValidateContainerAdjustmentResponse, DispatchError> {
        self.recorder.record(|| Request::ValidateContainerAdjustment(req.clone()));
        self.inner.validate_container_adjustment(req).await
    }

    fn answer_overrun(&self, event: &'static str, budget: Duration) {
        self.inner.answer_overrun(event, budget)
    }

    fn answered(&self, answer: &super::mux::AnswerTime) {
        self.inner.answered(answer)
    }

    async fn disconnected(&self) {
        self.inner.disconnected().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nri::version::{EventKind, NriVersion};

    fn fixture<M: protobuf::MessageFull>(event: &str) -> M {
        nri_sim::fixtures::load(event).expect("fixture")
    }

    fn read_lines(path: &Path) -> Vec<Recorded> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| parse_document(l, None).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

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

    #[test]
    fn a_full_file_is_rotated_once_past_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.jsonl");
        let req = Request::RunPodSandbox(fixture("RunPodSandbox"));
        let line_len = req.to_line(SystemTime::now()).len() as u64 + 1;
        let recorder = Recorder::start(RecordOptions { path: path.clone(), max_bytes: line_len * 3 });
        for _ in 0..5 {
            recorder.record(|| req.clone());
        }
        recorder.close(Duration::from_secs(10));
        let (old, new) = (read_lines(&rotated_path(&path)), read_lines(&path));
        assert_eq!((old.len(), new.len()), (3, 2));
        assert!(old.iter().chain(&new).all(|r| r.request == req));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        recorder.record(|| panic!("a closed recorder builds no request"));
    }

    /// Answers every event, counting calls; wants what it is told.
    #[derive(Debug, Default)]
    struct Counting {
        calls: AtomicU64,
        version: AtomicU64,
    }

    #[async_trait]
    impl Dispatcher for Counting {
        fn events(&self) -> EventMask {
            EventMask::EMPTY.with(EventKind::StopContainer)
        }
        fn events_version(&self) -> u64 {
            self.version.load(Ordering::SeqCst)
        }
        async fn events_changed(&self, since: u64) {
            if self.version.load(Ordering::SeqCst) <= since {
                std::future::pending::<()>().await
            }
        }
        async fn create_container(
            &self,
            _req: pb::CreateContainerRequest,
        ) -> Result<pb::CreateContainerResponse, DispatchError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Err(DispatchError::Denied("no".into()))
        }
        async fn synchronize(
            &self,
            pods: Vec<pb::PodSandbox>,
            _containers: Vec<pb::Container>,
        ) -> Result<Vec<pb::ContainerUpdate>, DispatchError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(pods.iter().map(|p| pb::ContainerUpdate { container_id: p.id.clone(), ..Default::default() }).collect())
        }
    }

    fn runtime() -> RuntimeInfo {
        RuntimeInfo {
            name: "containerd".into(),
            version: "v2.3.4".into(),
            nri_version: NriVersion { major: 0, minor: 12, patch: 0 },
            nri_version_source: VersionSource::Announced,
            config: String::new(),
            registration_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
        }
    }

    #[tokio::test]
    async fn the_wrapper_records_in_order_and_answers_as_the_inner_dispatcher() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let inner = Arc::new(Counting::default());
        let recorder = Arc::new(Recorder::start(RecordOptions { path: path.clone(), max_bytes: 0 }));
        let d = RecordingDispatcher::new(inner.clone(), recorder.clone());
        assert_eq!(d.events(), inner.events());
        inner.version.store(3, Ordering::SeqCst);
        assert_eq!(d.events_version(), 3);
        tokio::time::timeout(Duration::from_secs(5), d.events_changed(2)).await.expect("passed on");

        d.configure(&runtime()).await.unwrap();
        let sync: pb::SynchronizeRequest = fixture("Synchronize");
        let updates = d.synchronize(sync.pods.clone(), sync.containers.clone()).await.unwrap();
        assert_eq!(updates.len(), sync.pods.len());
        let create: pb::CreateContainerRequest = fixture("CreateContainer");
        assert_eq!(d.create_container(create.clone()).await.unwrap_err(), DispatchError::Denied("no".into()));
        assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
        recorder.close(Duration::from_secs(10));

        let lines = read_lines(&path);
        let names: Vec<&str> = lines.iter().map(|r| r.request.name()).collect();
        assert_eq!(names, ["Configure", "Synchronize", "CreateContainer"]);
        let Request::Configure(c) = &lines[0].request else { unreachable!() };
        assert_eq!(
            (c.runtime_name.as_str(), c.NRI_version.as_str(), c.request_timeout),
            ("containerd", "v0.12.0", 2000)
        );
        assert_eq!(lines[1].request, Request::Synchronize(pb::SynchronizeRequest { more: false, ..sync }));
        assert_eq!(lines[2].request, Request::CreateContainer(create));
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_written_costs_no_event() {
        let dir = tempfile::tempdir().unwrap();
        let recorder =
            Arc::new(Recorder::start(RecordOptions { path: dir.path().join("missing/dir/r.jsonl"), max_bytes: 0 }));
        assert!(!recorder.is_active());
        let d = RecordingDispatcher::new(Arc::new(Counting::default()), recorder.clone());
        let create: pb::CreateContainerRequest = fixture("CreateContainer");
        assert!(d.create_container(create).await.is_err(), "the inner dispatcher's answer, as without recording");
        recorder.record(|| panic!("an inactive recorder builds no request"));
        // A full disk: writes to /dev/full fail once the file is open.
        if Path::new("/dev/full").exists() {
            let full = Recorder::start(RecordOptions { path: "/dev/full".into(), max_bytes: 0 });
            assert!(full.is_active(), "opening /dev/full succeeds");
            full.record(|| Request::RunPodSandbox(fixture("RunPodSandbox")));
            // The writer stops on its own; waited for, not timed.
            let waited = std::time::Instant::now();
            while full.is_active() && waited.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(!full.is_active(), "the writer stopped at the failed write");
            full.record(|| panic!("a stopped recorder builds no request"));
        }
    }
}
