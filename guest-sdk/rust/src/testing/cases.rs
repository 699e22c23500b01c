//! Table-driven cases that start from a captured request: written once as
//! plain data, run natively here and through the real host by the
//! project's end-to-end tests (`tests/e2e/tests/examples.rs` includes the
//! same case files and runs them with a chain of compiled policies), so
//! that native and WebAssembly builds are held to the same answers.
//!
//! A case is a fixture (`CreateContainer`), edits of its pod and container,
//! optionally changes made by policies earlier in the chain (which the
//! end-to-end tests play with the test guest `replay`), the settings, and
//! what must come out: the lines ([`super::describe`]) of what the chain
//! answers, a denial, or a settings error.
//!
//! ```ignore
//! const CASES: &[Case] = &[Case {
//!     name: "an annotation of the container sets its rlimit",
//!     settings: "{}",
//!     fixture: "CreateContainer",
//!     edits: &[Edit::ContainerName("container")],
//!     expect: Expect::Lines(&["rlimit RLIMIT_NOFILE soft=1024 hard=4096"]),
//! }];
//!
//! #[test]
//! fn cases() {
//!     for case in CASES {
//!         case.check::<MyPolicy>("50-my-policy");
//!     }
//! }
//! ```

use super::{describe, TestEvent, TestHost, Validation};
use crate::*;

/// One case: a captured request, edited, run with settings.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    /// The policy's settings text.
    pub settings: &'static str,
    /// The fixture the event starts from (`CreateContainer`).
    pub fixture: &'static str,
    pub edits: &'static [Edit],
    pub expect: Expect,
}

/// A change of the fixture's event before it is run.
#[derive(Debug, Clone, Copy)]
pub enum Edit {
    PodLabel(&'static str, &'static str),
    PodAnnotation(&'static str, &'static str),
    RemovePodAnnotation(&'static str),
    Namespace(&'static str),
    ContainerName(&'static str),
    ContainerLabel(&'static str, &'static str),
    ContainerAnnotation(&'static str, &'static str),
    /// A bind mount of the container (type `bind`).
    Mount {
        destination: &'static str,
        source: &'static str,
        options: &'static [&'static str],
    },
    /// The container's image as NRI 0.12.2 reports it: name and digest.
    Image {
        name: &'static str,
        digest: &'static str,
    },
    /// A policy before this one in the chain adds an OCI hook (`stage`:
    /// `prestart`, `create-runtime`, ...) running `path`.
    EarlierHook {
        policy: &'static str,
        stage: &'static str,
        path: &'static str,
    },
    /// A policy before this one adds a bind mount.
    EarlierMount {
        policy: &'static str,
        destination: &'static str,
        source: &'static str,
        options: &'static [&'static str],
    },
    /// A policy before this one sets an annotation.
    EarlierAnnotation {
        policy: &'static str,
        key: &'static str,
        value: &'static str,
    },
}

/// What the chain answers.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// The chain's reply, line by line ([`super::describe`]), in any
    /// order; `&[]` when nothing changes.
    Lines(&'static [&'static str]),
    /// A denial with exactly this reason.
    Deny(&'static str),
    /// `configure` rejects the settings with exactly this error.
    Settings(&'static str),
}

impl Edit {
    /// The policy before this one that makes this change, if it is one.
    pub fn earlier(&self) -> Option<&'static str> {
        match self {
            Edit::EarlierHook { policy, .. }
            | Edit::EarlierMount { policy, .. }
            | Edit::EarlierAnnotation { policy, .. } => Some(policy),
            _ => None,
        }
    }

    fn apply(&self, e: TestEvent) -> TestEvent {
        match *self {
            Edit::PodLabel(k, v) => e.with_pod_label(k, v),
            Edit::PodAnnotation(k, v) => e.with_pod_annotation(k, v),
            Edit::RemovePodAnnotation(k) => e.without_pod_annotation(k),
            Edit::Namespace(ns) => e.with_namespace(ns),
            Edit::ContainerName(n) => e.with_container_name(n),
            Edit::ContainerLabel(k, v) => e.with_container_label(k, v),
            Edit::ContainerAnnotation(k, v) => e.with_container_annotation(k, v),
            Edit::Mount { destination, source, options } => e.with_mount(Mount::bind(source, destination, options)),
            Edit::Image { name, digest } => e.with_image(name, digest),
            Edit::EarlierHook { .. } | Edit::EarlierMount { .. } | Edit::EarlierAnnotation { .. } => e,
        }
    }

    fn adjust(&self, a: ContainerAdjustment) -> ContainerAdjustment {
        match *self {
            Edit::EarlierHook { stage, path, .. } => {
                let stage = HookStage::parse(stage).unwrap_or_else(|| panic!("{stage:?} is not a hook stage"));
                a.add_hook(stage, Hook::new(path))
            }
            Edit::EarlierMount { destination, source, options, .. } => {
                a.add_mount(Mount::bind(source, destination, options))
            }
            Edit::EarlierAnnotation { key, value, .. } => a.set_annotation(key, value),
            _ => a,
        }
    }
}

impl Case {
    /// The fixture's event with the edits applied.
    pub fn event(&self) -> TestEvent {
        self.edits.iter().fold(TestEvent::fixture(self.fixture), |e, edit| edit.apply(e))
    }

    /// The earlier policies of the chain, by name, and their adjustments.
    pub fn earlier(&self) -> Vec<(&'static str, ContainerAdjustment)> {
        let mut names: Vec<&'static str> = self.edits.iter().filter_map(Edit::earlier).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| {
                let adjust = self
                    .edits
                    .iter()
                    .filter(|e| e.earlier() == Some(name))
                    .fold(ContainerAdjustment::new(), |a, e| e.adjust(a));
                (name, adjust)
            })
            .collect()
    }

    /// Runs the case with policy `P`, named `name` in the chain (after the
    /// earlier policies), as the chain would: the earlier policies'
    /// adjustments, then `P`'s create-container handler if it subscribed,
    /// then its validation handler if it subscribed, on the merged result.
    /// Returns the lines of the chain's reply, or the denial.
    pub fn run<P: Policy>(&self, name: &str) -> Result<Vec<String>, String> {
        let mut host = TestHost::new().with_settings(self.settings);
        let events = host.configure::<P>().map_err(|e| format!("configure: {e}"))?;
        let create = self.event();
        let mut validation = Validation::of(&create);
        for (policy, adjust) in self.earlier() {
            validation = validation.adjusted_by(policy, &adjust);
        }
        let mut reply = Reply::none();
        if events.contains(&EventKind::CreateContainer) {
            let out = host.run::<P>(&create);
            if let Some(why) = &out.invalid {
                panic!("case {:?}: the host would refuse the reply: {why}", self.name);
            }
            reply = out.result?;
            if let Some(adjust) = &reply.adjust {
                validation = validation.adjusted_by(name, adjust);
            }
            for u in &reply.update {
                validation = validation.updated_by(name, u.clone());
            }
        }
        let merged = validation.clone().build();
        if events.contains(&EventKind::ValidateContainerAdjustment) {
            let out = host.run::<P>(&validation.into());
            out.result?;
        }
        let chain = Reply { adjust: merged.adjust, update: reply.update, evict: reply.evict };
        Ok(describe(&chain))
    }

    /// Runs the case and asserts its expectation, naming the case if it
    /// fails.
    pub fn check<P: Policy>(&self, name: &str) {
        match self.expect {
            Expect::Settings(error) => {
                let got = TestHost::new().with_settings(self.settings).configure::<P>();
                assert_eq!(got, Err(error.to_string()), "case {:?}", self.name);
            }
            Expect::Deny(reason) => {
                assert_eq!(self.run::<P>(name), Err(reason.to_string()), "case {:?}", self.name);
            }
            Expect::Lines(lines) => {
                let mut want: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                want.sort();
                assert_eq!(self.run::<P>(name), Ok(want), "case {:?}", self.name);
            }
        }
    }
}
