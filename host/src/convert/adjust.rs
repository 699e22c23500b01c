//! What a policy returns: adjustments, updates, evictions, and the reply that
//! carries them into the response of each event.

use nri_wasm_api::api as pb;
use protobuf::MessageField;

use super::enums::{flags_to_pb, known_flags, Informational};
use super::{
    cdi_to_pb, cdi_to_wit, get, kv_to_pb, kv_to_wit, list_to_pb, list_to_wit, list_try_to_pb, net_devices_to_pb,
    net_devices_to_wit, opt_to_pb, opt_to_wit, opt_try_to_pb, wrap, ConvertError,
};
use crate::wit::wit;

impl From<&pb::ContainerAdjustment> for wit::ContainerAdjustment {
    fn from(a: &pb::ContainerAdjustment) -> Self {
        let pb::ContainerAdjustment {
            annotations,
            mounts,
            env,
            hooks,
            linux,
            rlimits,
            CDI_devices: cdi_devices,
            args,
            special_fields: _,
        } = a;
        Self {
            annotations: kv_to_wit(annotations),
            mounts: list_to_wit(mounts),
            env: list_to_wit(env),
            hooks: opt_to_wit(hooks),
            linux: opt_to_wit(linux),
            rlimits: list_to_wit(rlimits),
            cdi_devices: cdi_to_wit(cdi_devices),
            args: args.clone(),
        }
    }
}

impl TryFrom<wit::ContainerAdjustment> for pb::ContainerAdjustment {
    type Error = ConvertError;
    fn try_from(a: wit::ContainerAdjustment) -> Result<Self, ConvertError> {
        let wit::ContainerAdjustment { annotations, mounts, env, hooks, linux, rlimits, cdi_devices, args } = a;
        Ok(Self {
            annotations: kv_to_pb("ContainerAdjustment.annotations", annotations)?,
            mounts: list_to_pb(mounts),
            env: list_to_pb(env),
            hooks: opt_to_pb(hooks),
            linux: opt_try_to_pb(linux)?,
            rlimits: list_to_pb(rlimits),
            CDI_devices: cdi_to_pb(cdi_devices),
            args,
            ..Default::default()
        })
    }
}

/// Adjustment env entries are key-values on both sides (a list, not a map:
/// order and repeats are kept as they are).
impl From<&pb::KeyValue> for wit::KeyValue {
    fn from(kv: &pb::KeyValue) -> Self {
        let pb::KeyValue { key, value, special_fields: _ } = kv;
        Self { key: key.clone(), value: value.clone() }
    }
}

impl From<wit::KeyValue> for pb::KeyValue {
    fn from(kv: wit::KeyValue) -> Self {
        let wit::KeyValue { key, value } = kv;
        Self { key, value, ..Default::default() }
    }
}

impl From<&pb::LinuxContainerAdjustment> for wit::LinuxContainerAdjustment {
    fn from(l: &pb::LinuxContainerAdjustment) -> Self {
        let pb::LinuxContainerAdjustment {
            devices,
            resources,
            cgroups_path,
            oom_score_adj,
            io_priority,
            seccomp_policy,
            namespaces,
            sysctl,
            net_devices,
            scheduler,
            rdt,
            memory_policy,
            special_fields: _,
        } = l;
        Self {
            devices: list_to_wit(devices),
            resources: opt_to_wit(resources),
            cgroups_path: cgroups_path.clone(),
            oom_score_adj: get(oom_score_adj),
            io_priority: opt_to_wit(io_priority),
            seccomp_policy: opt_to_wit(seccomp_policy),
            namespaces: list_to_wit(namespaces),
            sysctl: kv_to_wit(sysctl),
            net_devices: net_devices_to_wit(net_devices),
            scheduler: opt_to_wit(scheduler),
            rdt: opt_to_wit(rdt),
            memory_policy: opt_to_wit(memory_policy),
        }
    }
}

impl TryFrom<wit::LinuxContainerAdjustment> for pb::LinuxContainerAdjustment {
    type Error = ConvertError;
    fn try_from(l: wit::LinuxContainerAdjustment) -> Result<Self, ConvertError> {
        let wit::LinuxContainerAdjustment {
            devices,
            resources,
            cgroups_path,
            oom_score_adj,
            io_priority,
            seccomp_policy,
            namespaces,
            sysctl,
            net_devices,
            scheduler,
            rdt,
            memory_policy,
        } = l;
        Ok(Self {
            devices: list_to_pb(devices),
            resources: opt_try_to_pb(resources)?,
            cgroups_path,
            oom_score_adj: wrap(oom_score_adj),
            io_priority: opt_to_pb(io_priority),
            seccomp_policy: opt_to_pb(seccomp_policy),
            namespaces: list_to_pb(namespaces),
            sysctl: kv_to_pb("LinuxContainerAdjustment.sysctl", sysctl)?,
            net_devices: net_devices_to_pb("LinuxContainerAdjustment.net_devices", net_devices)?,
            scheduler: opt_to_pb(scheduler),
            rdt: opt_to_pb(rdt),
            memory_policy: opt_to_pb(memory_policy),
            ..Default::default()
        })
    }
}

impl From<&pb::LinuxMemoryPolicy> for wit::LinuxMemoryPolicy {
    fn from(m: &pb::LinuxMemoryPolicy) -> Self {
        let pb::LinuxMemoryPolicy { mode, nodes, flags, special_fields: _ } = m;
        Self { mode: wit::MemoryPolicyMode::informational(*mode), nodes: nodes.clone(), flags: known_flags(flags) }
    }
}

impl From<wit::LinuxMemoryPolicy> for pb::LinuxMemoryPolicy {
    fn from(m: wit::LinuxMemoryPolicy) -> Self {
        let wit::LinuxMemoryPolicy { mode, nodes, flags } = m;
        Self { mode: mode.into(), nodes, flags: flags_to_pb(flags), ..Default::default() }
    }
}

/// `linux.resources` in protobuf, `resources` in WIT. An update whose `linux`
/// is present without resources reads as `resources: none` (there is nothing
/// else in `linux` to keep).
impl From<&pb::ContainerUpdate> for wit::ContainerUpdate {
    fn from(u: &pb::ContainerUpdate) -> Self {
        let pb::ContainerUpdate { container_id, linux, ignore_failure, special_fields: _ } = u;
        let resources = linux.as_ref().and_then(|l| {
            let pb::LinuxContainerUpdate { resources, special_fields: _ } = l;
            opt_to_wit(resources)
        });
        Self { container_id: container_id.clone(), resources, ignore_failure: *ignore_failure }
    }
}

/// `resources: none` becomes an update without `linux`.
impl TryFrom<wit::ContainerUpdate> for pb::ContainerUpdate {
    type Error = ConvertError;
    fn try_from(u: wit::ContainerUpdate) -> Result<Self, ConvertError> {
        let wit::ContainerUpdate { container_id, resources, ignore_failure } = u;
        let linux = match resources {
            Some(r) => MessageField::some(pb::LinuxContainerUpdate {
                resources: MessageField::some(r.try_into()?),
                ..Default::default()
            }),
            None => MessageField::none(),
        };
        Ok(Self { container_id, linux, ignore_failure, ..Default::default() })
    }
}

impl From<&pb::ContainerEviction> for wit::ContainerEviction {
    fn from(e: &pb::ContainerEviction) -> Self {
        let pb::ContainerEviction { container_id, reason, special_fields: _ } = e;
        Self { container_id: container_id.clone(), reason: reason.clone() }
    }
}

impl From<wit::ContainerEviction> for pb::ContainerEviction {
    fn from(e: wit::ContainerEviction) -> Self {
        let wit::ContainerEviction { container_id, reason } = e;
        Self { container_id, reason, ..Default::default() }
    }
}

/// The parts of a reply in protobuf form: the adjustment of the container
/// being created, updates of containers, containers to evict.
pub type ReplyParts = (Option<pb::ContainerAdjustment>, Vec<pb::ContainerUpdate>, Vec<pb::ContainerEviction>);

/// Converts every part of a reply, whatever the event allows (that is for
/// the caller to check, or use the `TryFrom<wit::Reply>` impls of the
/// responses, which do).
pub fn reply_parts(reply: wit::Reply) -> Result<ReplyParts, ConvertError> {
    let wit::Reply { adjust, update, evict } = reply;
    let adjust = adjust.map(pb::ContainerAdjustment::try_from).transpose()?;
    Ok((adjust, list_try_to_pb(update)?, list_to_pb(evict)))
}

fn refuse(part: &'static str, response: &'static str) -> ConvertError {
    ConvertError::NotInResponse { part, response }
}

/// A CreateContainer reply: adjustment, updates and evictions.
impl TryFrom<wit::Reply> for pb::CreateContainerResponse {
    type Error = ConvertError;
    fn try_from(reply: wit::Reply) -> Result<Self, ConvertError> {
        let (adjust, update, evict) = reply_parts(reply)?;
        Ok(Self { adjust: adjust.into(), update, evict, ..Default::default() })
    }
}

/// An UpdateContainer reply: updates and evictions; an adjustment is refused.
impl TryFrom<wit::Reply> for pb::UpdateContainerResponse {
    type Error = ConvertError;
    fn try_from(reply: wit::Reply) -> Result<Self, ConvertError> {
        if reply.adjust.is_some() {
            return Err(refuse("an adjustment", "UpdateContainerResponse"));
        }
        let (_, update, evict) = reply_parts(reply)?;
        Ok(Self { update, evict, ..Default::default() })
    }
}

/// A StopContainer reply: updates only; an adjustment or eviction is refused.
impl TryFrom<wit::Reply> for pb::StopContainerResponse {
    type Error = ConvertError;
    fn try_from(reply: wit::Reply) -> Result<Self, ConvertError> {
        if reply.adjust.is_some() {
            return Err(refuse("an adjustment", "StopContainerResponse"));
        }
        if !reply.evict.is_empty() {
            return Err(refuse("evictions", "StopContainerResponse"));
        }
        let (_, update, _) = reply_parts(reply)?;
        Ok(Self { update, ..Default::default() })
    }
}

impl From<&pb::CreateContainerResponse> for wit::Reply {
    fn from(r: &pb::CreateContainerResponse) -> Self {
        let pb::CreateContainerResponse { adjust, update, evict, special_fields: _ } = r;
        Self { adjust: opt_to_wit(adjust), update: list_to_wit(update), evict: list_to_wit(evict) }
    }
}

impl From<&pb::UpdateContainerResponse> for wit::Reply {
    fn from(r: &pb::UpdateContainerResponse) -> Self {
        let pb::UpdateContainerResponse { update, evict, special_fields: _ } = r;
        Self { adjust: None, update: list_to_wit(update), evict: list_to_wit(evict) }
    }
}

impl From<&pb::StopContainerResponse> for wit::Reply {
    fn from(r: &pb::StopContainerResponse) -> Self {
        let pb::StopContainerResponse { update, special_fields: _ } = r;
        Self { adjust: None, update: list_to_wit(update), evict: Vec::new() }
    }
}
