//! Conversions between the NRI protobuf messages (`pb`) and the WIT types a
//! policy sees (`wit`), as `From`/`TryFrom` impls.
//!
//! # Why one module, and why lossless
//!
//! The WIT interface mirrors NRI field for field, so that a policy is exactly
//! as capable as a native NRI plugin. That promise only holds if nothing is
//! lost crossing the boundary: a field dropped here is a field no policy can
//! read or set, and nobody notices until an operator needs it. Keeping every
//! conversion in this module (and nowhere else) makes that checkable in one
//! place:
//! - each conversion destructures its source exhaustively, so a field added
//!   to `nri.proto` or to the WIT package fails to compile here until it is
//!   mapped;
//! - the tests round-trip fully populated messages (every field set, see
//!   `nri_sim::populate`) and a real containerd request, pb → WIT → pb, and
//!   require equality.
//!
//! Conversions are trait impls rather than ad-hoc functions so that call
//! sites read as what they are (`wit::Container::from(&req.container)`,
//! `pb::ContainerAdjustment::try_from(reply.adjust)`) and compose through
//! `Option`/`Vec` with `map`.
//!
//! # Directions
//!
//! - pb → WIT: `impl From<&pb::X> for wit::X`, borrowing (the host keeps the
//!   request, e.g. to build the next policy's view or the validation request).
//!   Infallible: these carry what the runtime reports, and an event must not
//!   fail because the runtime is newer than the WIT package (see *Enums*).
//!   Event payloads are built from each request the same way
//!   (`wit::Event::from(&pb::CreateContainerRequest)`); a request without a
//!   pod or container yields the empty WIT value.
//! - WIT → pb: `From<wit::X>` (owned: the host owns a policy's reply) where
//!   nothing can go wrong, `TryFrom<wit::X, Error = ConvertError>` where the
//!   WIT value can say something protobuf cannot: a `list<key-value>` that
//!   stands for a map must not repeat a key ([`ConvertError::DuplicateKey`]),
//!   and field owners must be well formed. A reply becomes a response with
//!   `TryFrom<wit::Reply>` for `pb::CreateContainerResponse`,
//!   `pb::UpdateContainerResponse` and `pb::StopContainerResponse`, which
//!   refuse parts the response cannot carry ([`ConvertError::NotInResponse`]);
//!   [`reply_parts`] gives the three parts unchecked.
//!
//! # Presence
//!
//! - An optional scalar wrapper (`OptionalInt64`, `OptionalString`, ...) is
//!   an `option<T>`: `MessageField::none()` ↔ `none`, `some({value: 0})` ↔
//!   `some(0)`.
//! - An optional sub-message (`linux`, `hooks`, `user`, `resources`, ...) is
//!   an `option<record>`: `none` ↔ `none`, and `some(default)` ↔
//!   `some(empty record)`, so presence round-trips exactly.
//! - NRI maps are `list<key-value>` (net devices: `list<net-device-entry>`,
//!   owners: a flat `list<field-owner>`), sorted by key so that what a policy
//!   sees is deterministic (protobuf maps have no order).
//!
//! Known shapes WIT does not mirror, by design of the WIT package:
//! - `ContainerUpdate.linux` present without `resources` reads as
//!   `resources: none` and comes back without `linux` (the runtime treats both
//!   alike);
//! - `OwningPlugins` entries without a single owned field (a container with
//!   empty `FieldOwners`, a compound field with no key) have no flat entry and
//!   are dropped; an empty owner list comes back as absent `owners`;
//! - events always carry a pod (and container): an absent one is the empty
//!   record.
//!
//! # Enums
//!
//! WIT enums are closed, protobuf enums are open: a runtime newer than the
//! WIT package may send a value it does not know. The enum conversions
//! themselves are strict: `TryFrom<EnumOrUnknown<pb::E>> for wit::E` fails
//! with [`ConvertError::UnknownEnum`] naming the field and number. The record
//! conversions (pb → WIT), which carry what the runtime *reports*, treat these
//! fields as informational and map an unknown value to the proto's zero
//! value — container state `unknown`, I/O class `none`, seccomp profile
//! `runtime-default`, scheduler policy `none`, memory policy mode `default` —
//! and drop unknown entries of flag lists (mapping an unknown flag to a known
//! one would invent a setting), with a debug log line. Failing the whole
//! event instead would stop every container on a node the moment its runtime
//! is upgraded. WIT → pb never fails on enums: every WIT value has its NRI
//! value, mapped variant by variant.

mod adjust;
mod container;
mod enums;
mod event;
mod kind;
mod node;
mod pod;
mod resources;

#[cfg(test)]
mod tests;

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use crate::wit::wit;

pub use adjust::{reply_parts, ReplyParts};
pub use event::{owners_from_wit, owners_to_wit};
pub use kind::event_kind;

/// Why a value could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A protobuf enum value the WIT package has no variant for.
    #[error("{field}: enum value {value} is not known to the policy interface")]
    UnknownEnum {
        /// The field, as a path in the message.
        field: &'static str,
        /// The value the runtime sent.
        value: i32,
    },
    /// A `list<key-value>` (or keyed list) standing for a map repeats a key.
    #[error("{field}: key {key:?} appears more than once")]
    DuplicateKey {
        /// The field.
        field: &'static str,
        /// The key given twice.
        key: String,
    },
    /// A value that has no protobuf form (e.g. a key on a simple field owner).
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why the value has no protobuf form.
        reason: String,
    },
    /// A reply carries a part the response of its event cannot carry.
    #[error("{response} has no place for {part}")]
    NotInResponse {
        /// The part of the reply (an adjustment, updates, evictions).
        part: &'static str,
        /// The response message of the event.
        response: &'static str,
    },
}

/// NRI's optional scalar wrappers (`OptionalInt64 { value }`, ...).
trait Wrapper: Sized {
    type Value;
    fn get(&self) -> Self::Value;
    fn wrap(value: Self::Value) -> Self;
}

macro_rules! wrapper {
    (copy $($t:ident: $v:ty),* $(,)?) => {$(
        impl Wrapper for pb::$t {
            type Value = $v;
            fn get(&self) -> $v {
                self.value
            }
            fn wrap(value: $v) -> Self {
                Self { value, ..Default::default() }
            }
        }
    )*};
    (clone $($t:ident: $v:ty),* $(,)?) => {$(
        impl Wrapper for pb::$t {
            type Value = $v;
            fn get(&self) -> $v {
                self.value.clone()
            }
            fn wrap(value: $v) -> Self {
                Self { value, ..Default::default() }
            }
        }
    )*};
}

wrapper!(copy OptionalInt: i64, OptionalInt64: i64, OptionalUInt32: u32, OptionalUInt64: u64, OptionalBool: bool,
    OptionalFileMode: u32);
wrapper!(clone OptionalString: String, OptionalRepeatedString: Vec<String>);

/// `MessageField<OptionalX>` → `option<x>`.
fn get<W: Wrapper>(field: &MessageField<W>) -> Option<W::Value> {
    field.as_ref().map(W::get)
}

/// `option<x>` → `MessageField<OptionalX>`.
fn wrap<W: Wrapper>(value: Option<W::Value>) -> MessageField<W> {
    value.map(W::wrap).into()
}

/// An optional sub-message, pb → WIT.
fn opt_to_wit<'a, P: 'a, W: From<&'a P>>(field: &'a MessageField<P>) -> Option<W> {
    field.as_ref().map(W::from)
}

/// An optional sub-message, WIT → pb.
fn opt_to_pb<W, P: From<W>>(value: Option<W>) -> MessageField<P> {
    value.map(P::from).into()
}

/// An optional sub-message, WIT → pb, where the conversion can fail.
fn opt_try_to_pb<W, P: TryFrom<W, Error = ConvertError>>(value: Option<W>) -> Result<MessageField<P>, ConvertError> {
    Ok(value.map(P::try_from).transpose()?.into())
}

/// A repeated message, pb → WIT.
fn list_to_wit<'a, P: 'a, W: From<&'a P>>(list: &'a [P]) -> Vec<W> {
    list.iter().map(W::from).collect()
}

/// A list, WIT → pb.
fn list_to_pb<W, P: From<W>>(list: Vec<W>) -> Vec<P> {
    list.into_iter().map(P::from).collect()
}

/// A list, WIT → pb, where the conversion can fail.
fn list_try_to_pb<W, P: TryFrom<W, Error = ConvertError>>(list: Vec<W>) -> Result<Vec<P>, ConvertError> {
    list.into_iter().map(P::try_from).collect()
}

/// A string map as a list of key-values, sorted by key.
pub fn kv_to_wit(map: &HashMap<String, String>) -> Vec<wit::KeyValue> {
    let mut list: Vec<_> = map.iter().map(|(k, v)| wit::KeyValue { key: k.clone(), value: v.clone() }).collect();
    list.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    list
}

/// A list of key-values back into a map; a repeated key is an error.
fn kv_to_pb(field: &'static str, list: Vec<wit::KeyValue>) -> Result<HashMap<String, String>, ConvertError> {
    unique(field, list.into_iter().map(|kv| (kv.key, kv.value)))
}

/// Collects keyed entries into a map, refusing a repeated key.
fn unique<V>(
    field: &'static str,
    entries: impl IntoIterator<Item = (String, V)>,
) -> Result<HashMap<String, V>, ConvertError> {
    let entries = entries.into_iter();
    let mut map = HashMap::with_capacity(entries.size_hint().0);
    for (key, value) in entries {
        match map.entry(key) {
            Entry::Occupied(e) => return Err(ConvertError::DuplicateKey { field, key: e.key().clone() }),
            Entry::Vacant(e) => {
                e.insert(value);
            }
        }
    }
    Ok(map)
}

/// CDI devices are plain names in WIT.
fn cdi_to_wit(devices: &[pb::CDIDevice]) -> Vec<String> {
    devices.iter().map(|d| d.name.clone()).collect()
}

fn cdi_to_pb(names: Vec<String>) -> Vec<pb::CDIDevice> {
    names.into_iter().map(|name| pb::CDIDevice { name, ..Default::default() }).collect()
}

/// Network devices: host name → device inside, as entries sorted by host name.
fn net_devices_to_wit(map: &HashMap<String, pb::LinuxNetDevice>) -> Vec<wit::NetDeviceEntry> {
    let mut list: Vec<_> =
        map.iter().map(|(host, dev)| wit::NetDeviceEntry { host_name: host.clone(), name: dev.name.clone() }).collect();
    list.sort_unstable_by(|a, b| a.host_name.cmp(&b.host_name));
    list
}

fn net_devices_to_pb(
    field: &'static str,
    list: Vec<wit::NetDeviceEntry>,
) -> Result<HashMap<String, pb::LinuxNetDevice>, ConvertError> {
    unique(field, list.into_iter().map(|e| (e.host_name, pb::LinuxNetDevice { name: e.name, ..Default::default() })))
}
