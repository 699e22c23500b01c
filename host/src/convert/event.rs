//! Events: the WIT payload of every NRI request a policy can see, field
//! owners and plugin instances (validation only).
//!
//! Every request's WIT event, and the conversions of the requests whose
//! record is the plain pod or container event, are generated from the table
//! of events (`nri/events.rs`); the records of their own (an update's
//! resources, a validation's adjustment and owners) are written out here.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use super::{list_to_pb, list_to_wit, list_try_to_pb, opt_to_wit, opt_try_to_pb, ConvertError};
use crate::wit::wit;

/// The conversions of an event whose WIT record is the plain one of its
/// `carries` (`PodEvent`, `ContainerEvent`); an event with a record of its
/// own (any other `shape`) has its conversions written out below.
macro_rules! plain_event {
    (PodEvent, $req:ident) => {
        impl From<&pb::$req> for wit::PodEvent {
            fn from(r: &pb::$req) -> Self {
                let pb::$req { pod, special_fields: _ } = r;
                Self { pod: wit::PodSandbox::from(&**pod) }
            }
        }

        impl TryFrom<wit::PodEvent> for pb::$req {
            type Error = ConvertError;
            fn try_from(e: wit::PodEvent) -> Result<Self, ConvertError> {
                let wit::PodEvent { pod } = e;
                Ok(Self { pod: MessageField::some(pod.try_into()?), ..Default::default() })
            }
        }
    };
    (ContainerEvent, $req:ident) => {
        impl From<&pb::$req> for wit::ContainerEvent {
            fn from(r: &pb::$req) -> Self {
                let pb::$req { pod, container, special_fields: _ } = r;
                Self { pod: wit::PodSandbox::from(&**pod), container: wit::Container::from(&**container) }
            }
        }

        impl TryFrom<wit::ContainerEvent> for pb::$req {
            type Error = ConvertError;
            fn try_from(e: wit::ContainerEvent) -> Result<Self, ConvertError> {
                let wit::ContainerEvent { pod, container } = e;
                Ok(Self {
                    pod: MessageField::some(pod.try_into()?),
                    container: MessageField::some(container.try_into()?),
                    ..Default::default()
                })
            }
        }
    };
    ($own:ident, $req:ident) => {};
}

/// Every request of the event table (`nri/events.rs`) as the WIT event of
/// its kind. The record is the row's `shape`: one the WIT variant does not
/// carry, or one without a conversion from the request, does not compile.
macro_rules! wit_events {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {$(
        plain_event!($shape, $request);

        impl From<&pb::$request> for wit::Event {
            fn from(r: &pb::$request) -> Self {
                wit::Event::$kind(wit::$shape::from(r))
            }
        }
    )*};
}
crate::nri::events::nri_events!(wit_events);

impl From<&pb::UpdateContainerRequest> for wit::UpdateContainerEvent {
    fn from(r: &pb::UpdateContainerRequest) -> Self {
        let pb::UpdateContainerRequest { pod, container, linux_resources, special_fields: _ } = r;
        Self {
            pod: wit::PodSandbox::from(&**pod),
            container: wit::Container::from(&**container),
            linux_resources: opt_to_wit(linux_resources),
        }
    }
}

impl TryFrom<wit::UpdateContainerEvent> for pb::UpdateContainerRequest {
    type Error = ConvertError;
    fn try_from(e: wit::UpdateContainerEvent) -> Result<Self, ConvertError> {
        let wit::UpdateContainerEvent { pod, container, linux_resources } = e;
        Ok(Self {
            pod: MessageField::some(pod.try_into()?),
            container: MessageField::some(container.try_into()?),
            linux_resources: opt_try_to_pb(linux_resources)?,
            ..Default::default()
        })
    }
}

impl From<&pb::UpdatePodSandboxRequest> for wit::UpdatePodSandboxEvent {
    fn from(r: &pb::UpdatePodSandboxRequest) -> Self {
        let pb::UpdatePodSandboxRequest { pod, overhead_linux_resources, linux_resources, special_fields: _ } = r;
        Self {
            pod: wit::PodSandbox::from(&**pod),
            overhead_linux_resources: opt_to_wit(overhead_linux_resources),
            linux_resources: opt_to_wit(linux_resources),
        }
    }
}

impl TryFrom<wit::UpdatePodSandboxEvent> for pb::UpdatePodSandboxRequest {
    type Error = ConvertError;
    fn try_from(e: wit::UpdatePodSandboxEvent) -> Result<Self, ConvertError> {
        let wit::UpdatePodSandboxEvent { pod, overhead_linux_resources, linux_resources } = e;
        Ok(Self {
            pod: MessageField::some(pod.try_into()?),
            overhead_linux_resources: opt_try_to_pb(overhead_linux_resources)?,
            linux_resources: opt_try_to_pb(linux_resources)?,
            ..Default::default()
        })
    }
}

impl From<&pb::ValidateContainerAdjustmentRequest> for wit::ValidationEvent {
    fn from(r: &pb::ValidateContainerAdjustmentRequest) -> Self {
        let pb::ValidateContainerAdjustmentRequest {
            pod,
            container,
            adjust,
            update,
            owners,
            plugins,
            special_fields: _,
        } = r;
        Self {
            pod: wit::PodSandbox::from(&**pod),
            container: wit::Container::from(&**container),
            adjust: opt_to_wit(adjust),
            update: list_to_wit(update),
            owners: owners.as_ref().map(owners_to_wit).unwrap_or_default(),
            plugins: list_to_wit(plugins),
        }
    }
}

/// An empty owner list becomes absent `owners`.
impl TryFrom<wit::ValidationEvent> for pb::ValidateContainerAdjustmentRequest {
    type Error = ConvertError;
    fn try_from(e: wit::ValidationEvent) -> Result<Self, ConvertError> {
        let wit::ValidationEvent { pod, container, adjust, update, owners, plugins } = e;
        let owners =
            if owners.is_empty() { MessageField::none() } else { MessageField::some(owners_from_wit(owners)?) };
        Ok(Self {
            pod: MessageField::some(pod.try_into()?),
            container: MessageField::some(container.try_into()?),
            adjust: opt_try_to_pb(adjust)?,
            update: list_try_to_pb(update)?,
            owners,
            plugins: list_to_pb(plugins),
            ..Default::default()
        })
    }
}

impl From<&pb::PluginInstance> for wit::PluginInstance {
    fn from(p: &pb::PluginInstance) -> Self {
        let pb::PluginInstance { name, index, special_fields: _ } = p;
        Self { name: name.clone(), index: index.clone() }
    }
}

impl From<wit::PluginInstance> for pb::PluginInstance {
    fn from(p: wit::PluginInstance) -> Self {
        let wit::PluginInstance { name, index } = p;
        Self { name, index, ..Default::default() }
    }
}

/// Field owners as a flat list: one entry per simple field, one per key of a
/// compound field, ordered by container id, simple before compound, field
/// number, key. Containers or compound fields without any owned entry have
/// nothing to list and are left out.
pub fn owners_to_wit(owners: &pb::OwningPlugins) -> Vec<wit::FieldOwner> {
    let pb::OwningPlugins { owners, special_fields: _ } = owners;
    let mut containers: Vec<_> = owners.iter().collect();
    containers.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::new();
    for (id, fields) in containers {
        let pb::FieldOwners { simple, compound, special_fields: _ } = fields;
        let entry = |field: i32, compound: bool, key: &str, plugin: &str| wit::FieldOwner {
            container_id: id.clone(),
            field,
            compound,
            key: key.to_owned(),
            plugin: plugin.to_owned(),
        };
        let mut simple: Vec<_> = simple.iter().collect();
        simple.sort_unstable_by_key(|(field, _)| **field);
        out.extend(simple.into_iter().map(|(field, plugin)| entry(*field, false, "", plugin)));
        let mut compound: Vec<_> = compound.iter().collect();
        compound.sort_unstable_by_key(|(field, _)| **field);
        for (field, keys) in compound {
            let pb::CompoundFieldOwners { owners, special_fields: _ } = keys;
            let mut keys: Vec<_> = owners.iter().collect();
            keys.sort_unstable();
            out.extend(keys.into_iter().map(|(key, plugin)| entry(*field, true, key, plugin)));
        }
    }
    out
}

/// The flat list back into `OwningPlugins`. A field (or compound key) owned
/// twice is a [`ConvertError::DuplicateKey`]; a key on a simple field is
/// [`ConvertError::Invalid`] (protobuf has no place for it).
pub fn owners_from_wit(list: Vec<wit::FieldOwner>) -> Result<pb::OwningPlugins, ConvertError> {
    const FIELD: &str = "owners";
    let mut owners: HashMap<String, pb::FieldOwners> = HashMap::new();
    for owner in list {
        let wit::FieldOwner { container_id, field, compound, key, plugin } = owner;
        let fields = owners.entry(container_id.clone()).or_default();
        if compound {
            match fields.compound.entry(field).or_default().owners.entry(key) {
                Entry::Occupied(e) => {
                    let key = format!("container {container_id:?} field {field} key {:?}", e.key());
                    return Err(ConvertError::DuplicateKey { field: FIELD, key });
                }
                Entry::Vacant(e) => {
                    e.insert(plugin);
                }
            }
        } else {
            if !key.is_empty() {
                let reason = format!("simple field {field} of container {container_id:?} has a key ({key:?})");
                return Err(ConvertError::Invalid { field: FIELD, reason });
            }
            match fields.simple.entry(field) {
                Entry::Occupied(_) => {
                    let key = format!("container {container_id:?} field {field}");
                    return Err(ConvertError::DuplicateKey { field: FIELD, key });
                }
                Entry::Vacant(e) => {
                    e.insert(plugin);
                }
            }
        }
    }
    Ok(pb::OwningPlugins { owners, ..Default::default() })
}
