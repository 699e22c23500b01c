//! Writing the recording: a bounded queue off the event path, a thread of
//! its own that writes whole lines, the file's mode and its rotation.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::format::Request;

/// Records waiting for the writer at most; more are dropped.
const QUEUE: usize = 1024;

/// Where and how much to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordOptions {
    /// The recording file (`--record`), created with mode 0600.
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

    /// The recording file.
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

#[cfg(test)]
mod tests {
    use super::super::testing::{fixture, read_lines};
    use super::*;

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
}
