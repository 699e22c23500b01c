//! The recording seam: a [`Dispatcher`] around the real one that hands
//! every request to the [`Recorder`] before passing the event on, so the
//! transport does not change and nothing but the seam sees recording.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nri_wasm_api::api as pb;

use super::format::Request;
use super::writer::Recorder;
use crate::nri::dispatch::{DispatchError, Dispatcher, RuntimeInfo};
use crate::nri::version::EventMask;

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
    /// Records every request with `recorder` before `inner` handles it.
    pub fn new(inner: Arc<dyn Dispatcher>, recorder: Arc<Recorder>) -> Self {
        Self { inner, recorder }
    }

    /// The recorder, for its file and its count of dropped records.
    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }
}

/// Every event is recorded, then passed on: one method per row of the
/// event table (`nri/events.rs`).
macro_rules! recording_dispatcher {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
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

            $(
                async fn $method(
                    &self,
                    req: pb::$request,
                ) -> Result<crate::nri::events::reply_type!($reply, $response), DispatchError> {
                    self.recorder.record(|| Request::$kind(req.clone()));
                    self.inner.$method(req).await
                }
            )*

            fn answer_overrun(&self, event: &'static str, budget: Duration) {
                self.inner.answer_overrun(event, budget)
            }

            fn answered(&self, answer: &crate::nri::mux::AnswerTime) {
                self.inner.answered(answer)
            }

            async fn disconnected(&self) {
                self.inner.disconnected().await
            }
        }
    };
}
crate::nri::events::nri_events!(recording_dispatcher);

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::super::testing::{fixture, read_lines};
    use super::super::writer::RecordOptions;
    use super::*;
    use crate::nri::version::{EventKind, NriVersion, VersionSource};

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
