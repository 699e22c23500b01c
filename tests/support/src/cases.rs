//! An example policy's case (`nri_wasm_sdk::testing::cases::Case`) in the
//! two forms the tests run it in: the captured request with the case's
//! edits applied, and the policies the case puts before the example, as
//! scripts of the `replay` test guest.

use nri_wasm_api::api as pb;
use nri_wasm_sdk::testing::cases::{Case, Edit};
use protobuf::MessageField;

/// The case's fixture (a CreateContainer the runtime simulator captured)
/// with the case's edits applied. The edits that describe earlier policies
/// are left to [`earlier`].
///
/// # Panics
///
/// When the case names a fixture that does not exist or does not parse: a
/// mistake in the case, which the test should report at once.
pub fn request(case: &Case) -> pb::CreateContainerRequest {
    let mut req: pb::CreateContainerRequest = nri_sim::fixtures::load(case.fixture)
        .unwrap_or_else(|e| panic!("case {:?}: fixture {:?}: {e}", case.name, case.fixture));
    for edit in case.edits {
        let pod = req.pod.mut_or_insert_default();
        match *edit {
            Edit::PodLabel(k, v) => {
                pod.labels.insert(k.into(), v.into());
            }
            Edit::PodAnnotation(k, v) => {
                pod.annotations.insert(k.into(), v.into());
            }
            Edit::RemovePodAnnotation(k) => {
                pod.annotations.remove(k);
            }
            Edit::Namespace(ns) => pod.namespace = ns.into(),
            Edit::ContainerName(n) => req.container.mut_or_insert_default().name = n.into(),
            Edit::ContainerLabel(k, v) => {
                req.container.mut_or_insert_default().labels.insert(k.into(), v.into());
            }
            Edit::ContainerAnnotation(k, v) => {
                req.container.mut_or_insert_default().annotations.insert(k.into(), v.into());
            }
            Edit::Mount { destination, source, options } => {
                req.container.mut_or_insert_default().mounts.push(pb::Mount {
                    destination: destination.into(),
                    type_: "bind".into(),
                    source: source.into(),
                    options: options.iter().map(|o| o.to_string()).collect(),
                    ..Default::default()
                })
            }
            Edit::Image { name, digest } => {
                req.container.mut_or_insert_default().image =
                    MessageField::some(pb::Image { name: name.into(), digest: digest.into(), ..Default::default() })
            }
            Edit::EarlierHook { .. } | Edit::EarlierMount { .. } | Edit::EarlierAnnotation { .. } => {}
        }
    }
    req
}

/// The policies the case puts before the example: for each policy name,
/// the script of the `replay` test guest that makes the changes the case
/// says it made (one line per change), sorted by name (the chain's order).
pub fn earlier(case: &Case) -> Vec<(&'static str, String)> {
    let mut scripts: Vec<(&'static str, String)> = Vec::new();
    for edit in case.edits {
        let (policy, line) = match *edit {
            Edit::EarlierHook { policy, stage, path } => (policy, format!("hook {stage} {path}")),
            Edit::EarlierMount { policy, destination, source, options } => {
                (policy, format!("mount {destination} {source} {}", options.join(",")))
            }
            Edit::EarlierAnnotation { policy, key, value } => (policy, format!("annotation {key}={value}")),
            _ => continue,
        };
        match scripts.iter_mut().find(|(p, _)| *p == policy) {
            Some((_, script)) => script.push_str(&format!("\n{line}")),
            None => scripts.push((policy, line)),
        }
    }
    scripts.sort();
    scripts
}
