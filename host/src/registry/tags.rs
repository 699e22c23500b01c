//! Where the tags of the running policies point: the bookkeeping of the
//! tag check.
//!
//! A policy named by a tag alone (`oci://host/repo:v1`, no digest) runs the
//! version the tag pointed to when it loaded. The host asks the registry
//! now and then where each such tag points (one manifest request each,
//! nothing downloaded); a tag that moved marks its policy, and the next
//! reload resolves it again. What has to be remembered between checks is
//! all here, so that the reloader holds one value for it, under one lock:
//! - the policies marked moved, until a reload takes them;
//! - where each moved tag was last found (a move is logged once, and a
//!   tag still elsewhere is resolved again at each reload until it loads);
//! - versions a tag moved to that verified but failed to load: not
//!   resolved again until the tag moves elsewhere (or back);
//! - registries that did not answer (an outage is logged once, and its end);
//! - why a registry refused to say where a tag points (logged once per reason).
//!
//! What no tagged policy uses any more is forgotten at each check, so a
//! registry or a policy that comes back later is new again. Asking is
//! [`TagWatch::check`]; what the answers mean is [`TagWatch::record`], which
//! needs no network and is tested on its own.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::client::{Registry, TagCheckError};
use super::{OciRef, RegistryError};

/// A running policy named by a tag alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tagged {
    /// The policy's name.
    pub policy: String,
    /// Its reference, with a tag and no digest.
    pub reference: OciRef,
    /// The manifest (hex) of the version that runs.
    pub running: String,
}

/// What the tag checks remember; see the module's docs.
#[derive(Debug, Default)]
pub struct TagWatch {
    state: Mutex<Remembered>,
}

#[derive(Debug, Default)]
struct Remembered {
    /// Policies whose tag was found moved: resolved again at the next reload.
    moved: HashSet<String>,
    /// Per policy, the manifest (hex) its tag was last found moved to.
    tried: HashMap<String, String>,
    /// Per policy, the manifest (hex) its tag moved to that verified but
    /// failed to load.
    failed: HashMap<String, String>,
    /// Registries (`host[:port]`) that did not answer the last check.
    unreachable: HashSet<String>,
    /// Per policy, why the registry refused to say where its tag points.
    cannot_check: HashMap<String, String>,
}

impl TagWatch {
    fn state(&self) -> MutexGuard<'_, Remembered> {
        // Plain sets and maps, each change a single insert or remove:
        // nothing a panic could leave half done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets what concerns policies and registries that `tagged` (the
    /// running chain's tagged policies) no longer names.
    pub fn keep_only(&self, tagged: &[Tagged]) {
        let hosts: HashSet<&str> = tagged.iter().map(|t| t.reference.registry.as_str()).collect();
        let named = |n: &String| tagged.iter().any(|t| t.policy == *n);
        let mut s = self.state();
        s.unreachable.retain(|h| hosts.contains(h.as_str()));
        s.tried.retain(|n, _| named(n));
        s.failed.retain(|n, _| named(n));
        s.cannot_check.retain(|n, _| named(n));
    }

    /// Asks `registry` where each tag of `tagged` points now, all at once
    /// under one deadline of `budget`, and records the answers
    /// ([`TagWatch::record`]). Returns the policies whose tag moved.
    pub async fn check(&self, registry: &Registry, tagged: &[Tagged], budget: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + budget;
        let checks = tagged.iter().map(|t| async move {
            match tokio::time::timeout_at(deadline, registry.check_tag(&t.reference)).await {
                Ok(result) => result,
                Err(_) => Err(TagCheckError {
                    error: RegistryError {
                        reference: t.reference.to_string(),
                        reason: format!("no answer within the tag check's {} ms", budget.as_millis()),
                    },
                    answered: false,
                }),
            }
        });
        let results = futures::future::join_all(checks).await;
        self.record(tagged, &results)
    }

    /// Records the registry's answers, `results[i]` for `tagged[i]` (the
    /// manifest, hex, the tag points to, or why that is not known), logs
    /// what changed, and marks the policies whose tag moved to a version
    /// that was not found failing. Returns those.
    pub fn record(&self, tagged: &[Tagged], results: &[Result<String, TagCheckError>]) -> Vec<String> {
        let mut s = self.state();
        // A host that answered anything this round is reachable; one that
        // answered nothing to any of its tags is not.
        let answered: HashSet<&str> = tagged
            .iter()
            .zip(results)
            .filter(|(_, r)| r.as_ref().map_or_else(|e| e.answered, |_| true))
            .map(|(t, _)| t.reference.registry.as_str())
            .collect();
        for (t, result) in tagged.iter().zip(results) {
            let host = t.reference.registry.as_str();
            match result {
                Err(e) if !e.answered && !answered.contains(host) => {
                    if s.unreachable.insert(host.to_string()) {
                        tracing::warn!(
                            registry = host,
                            policy = t.policy,
                            error = %e.error,
                            "registry unreachable: tags not checked, the running versions stay (said once until it \
                             answers again)"
                        );
                    } else {
                        tracing::debug!(registry = host, policy = t.policy, error = %e.error, "registry still unreachable");
                    }
                }
                _ => {
                    if s.unreachable.remove(host) {
                        tracing::info!(registry = host, "registry reachable again: tags are checked");
                    }
                }
            }
        }

        let mut moved = Vec::new();
        for (t, result) in tagged.iter().zip(results) {
            let name = &t.policy;
            let now = match result {
                Ok(now) => {
                    s.cannot_check.remove(name);
                    now
                }
                Err(e) if e.answered => {
                    // The registry said no (no such tag, no access, a manifest
                    // that is not its digest): said once per policy and reason.
                    let why = e.error.reason.clone();
                    if s.cannot_check.insert(name.clone(), why.clone()).as_ref() != Some(&why) {
                        tracing::warn!(
                            policy = name,
                            reference = %t.reference,
                            error = %e.error,
                            "tag cannot be checked: the running version stays (said once until the answer changes)"
                        );
                    } else {
                        tracing::debug!(policy = name, error = %e.error, "tag still cannot be checked");
                    }
                    continue;
                }
                // Unreachable, or an answer for another tag of the same host
                // this round: logged above.
                Err(e) => {
                    tracing::debug!(policy = name, error = %e.error, "tag not checked this round");
                    continue;
                }
            };
            if *now == t.running {
                s.tried.remove(name);
                s.failed.remove(name);
                continue;
            }
            if s.failed.get(name) == Some(now) {
                tracing::debug!(policy = name, reference = %t.reference, "tag still at a version that failed to load");
                continue;
            }
            if s.tried.get(name) != Some(now) {
                tracing::info!(
                    policy = name,
                    reference = %t.reference,
                    running = %format!("sha256:{}", t.running),
                    now = %format!("sha256:{now}"),
                    "tag moved: the policy is resolved again"
                );
                s.tried.insert(name.clone(), now.clone());
            } else {
                tracing::debug!(policy = name, reference = %t.reference, "tag still elsewhere: resolved again");
            }
            moved.push(name.clone());
        }
        s.moved.extend(moved.iter().cloned());
        moved
    }

    /// The policies marked moved since the last call: a reload takes them
    /// to resolve them again.
    pub fn take_moved(&self) -> HashSet<String> {
        std::mem::take(&mut self.state().moved)
    }

    /// The version `policy`'s tag was found moved to verified but failed to
    /// load: it is not resolved again until the tag moves elsewhere.
    pub fn failed_to_load(&self, policy: &str) {
        let mut s = self.state();
        if let Some(at) = s.tried.get(policy).cloned() {
            s.failed.insert(policy.to_string(), at);
        }
    }

    /// The registries found unreachable, sorted.
    #[cfg(test)]
    fn unreachable(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self.state().unreachable.iter().cloned().collect();
        hosts.sort();
        hosts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(policy: &str, reference: &str, running: char) -> Tagged {
        Tagged {
            policy: policy.into(),
            reference: OciRef::parse(reference).expect("reference"),
            running: running.to_string().repeat(64),
        }
    }

    fn at(version: char) -> Result<String, TagCheckError> {
        Ok(version.to_string().repeat(64))
    }

    fn failed(reference: &str, answered: bool) -> Result<String, TagCheckError> {
        Err(TagCheckError { error: RegistryError { reference: reference.into(), reason: "refused".into() }, answered })
    }

    #[test]
    fn a_tag_that_moved_marks_its_policy_until_a_reload_takes_it() {
        let w = TagWatch::default();
        let p = [tagged("10-a", "oci://r.test/a:v1", 'a')];
        assert!(w.record(&p, &[at('a')]).is_empty(), "still at the running version");
        assert!(w.take_moved().is_empty());
        assert_eq!(w.record(&p, &[at('b')]), ["10-a"]);
        // Found again at the same place before the reload: still marked (once).
        assert_eq!(w.record(&p, &[at('b')]), ["10-a"]);
        assert_eq!(w.take_moved(), HashSet::from(["10-a".to_string()]));
        assert!(w.take_moved().is_empty(), "a reload takes the marks");
    }

    #[test]
    fn a_version_that_failed_to_load_is_not_tried_again_until_the_tag_moves_elsewhere() {
        let w = TagWatch::default();
        let p = [tagged("10-a", "oci://r.test/a:v1", 'a')];
        assert_eq!(w.record(&p, &[at('b')]), ["10-a"]);
        w.take_moved();
        w.failed_to_load("10-a");
        assert!(w.record(&p, &[at('b')]).is_empty(), "b failed: not resolved again");
        assert_eq!(w.record(&p, &[at('c')]), ["10-a"], "elsewhere now: tried");
        // Back at the running version: everything about the move is forgotten,
        // so a later move to b is tried again.
        w.take_moved();
        assert!(w.record(&p, &[at('a')]).is_empty());
        assert_eq!(w.record(&p, &[at('b')]), ["10-a"]);
        // A policy that left the chain and came back is new again.
        w.failed_to_load("10-a");
        w.keep_only(&[]);
        assert_eq!(w.record(&p, &[at('b')]), ["10-a"]);
    }

    #[test]
    fn a_failure_to_load_without_a_moved_tag_changes_nothing() {
        let w = TagWatch::default();
        let p = [tagged("10-a", "oci://r.test/a:v1", 'a')];
        w.failed_to_load("10-a");
        assert_eq!(w.record(&p, &[at('b')]), ["10-a"]);
    }

    #[test]
    fn a_registry_is_unreachable_only_when_it_answered_none_of_its_tags() {
        let w = TagWatch::default();
        let p = [
            tagged("10-a", "oci://one.test/a:v1", 'a'),
            tagged("20-b", "oci://one.test/b:v1", 'b'),
            tagged("30-c", "oci://two.test/c:v1", 'c'),
        ];
        let moved = w.record(
            &p,
            &[failed("one.test/a:v1", false), failed("one.test/b:v1", false), failed("two.test/c:v1", false)],
        );
        assert!(moved.is_empty());
        assert_eq!(w.unreachable(), ["one.test", "two.test"]);
        // one.test answers one tag (with a refusal): reachable again; the
        // other tag's timeout is not an outage.
        let moved = w.record(&p, &[failed("one.test/a:v1", true), failed("one.test/b:v1", false), at('d')]);
        assert_eq!(moved, ["30-c"]);
        assert_eq!(w.unreachable(), Vec::<String>::new());
        // A registry no running policy names any more is forgotten.
        w.record(&p, &[at('a'), at('b'), failed("two.test/c:v1", false)]);
        assert_eq!(w.unreachable(), ["two.test"]);
        w.keep_only(&p[..2]);
        assert_eq!(w.unreachable(), Vec::<String>::new());
    }
}
