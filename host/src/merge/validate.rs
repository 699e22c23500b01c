//! Structural checks of one policy's output, before it is merged.
//!
//! The runtime trusts its plugins' replies; a malformed one (a mount without
//! destination, an update without container id) would fail or misbehave only
//! once the runtime applies it, for every policy of the chain at once. These
//! checks reject it up front and name the offending field, so the chain can
//! treat it as that one policy's failure. They also reject removal markers
//! where NRI has no removal (hooks, rlimits, CDI devices, hugepage limits,
//! unified cgroup entries): the runtime would take `-x` for a literal name.

use std::collections::BTreeSet;

use nri_wasm_api::api as pb;

use super::MergeError;

/// Checks a CreateContainer reply: its adjustment, updates and evictions.
pub fn validate_create_reply(policy: &str, reply: &pb::CreateContainerResponse) -> Result<(), MergeError> {
    if let Some(adjust) = reply.adjust.as_ref() {
        check_adjustment(adjust).map_err(|reason| invalid(policy, reason))?;
    }
    validate_updates(policy, &reply.update, &reply.evict)
}

/// Checks updates of containers and evictions.
pub fn validate_updates(
    policy: &str,
    updates: &[pb::ContainerUpdate],
    evictions: &[pb::ContainerEviction],
) -> Result<(), MergeError> {
    check_updates(updates, evictions).map_err(|reason| invalid(policy, reason))
}

fn invalid(policy: &str, reason: String) -> MergeError {
    MergeError::Invalid { policy: policy.to_string(), reason }
}

fn check_updates(updates: &[pb::ContainerUpdate], evictions: &[pb::ContainerEviction]) -> Result<(), String> {
    for (i, update) in updates.iter().enumerate() {
        if update.container_id.is_empty() {
            return Err(format!("update #{i} has no container id"));
        }
        if let Some(resources) = update.linux.as_ref().and_then(|l| l.resources.as_ref()) {
            check_resources(resources, &format!("update of container {:?}", update.container_id))?;
        }
    }
    for (i, eviction) in evictions.iter().enumerate() {
        if eviction.container_id.is_empty() {
            return Err(format!("eviction #{i} has no container id"));
        }
    }
    Ok(())
}

fn check_adjustment(adjust: &pb::ContainerAdjustment) -> Result<(), String> {
    for key in adjust.annotations.keys().collect::<BTreeSet<_>>() {
        removable("annotation", "key", key)?;
    }
    for (i, mount) in adjust.mounts.iter().enumerate() {
        removable(&format!("mount #{i}"), "destination", &mount.destination)?;
    }
    for (i, kv) in adjust.env.iter().enumerate() {
        removable(&format!("environment variable #{i}"), "name", &kv.key)?;
        if kv.key.contains('=') {
            return Err(format!("environment variable {:?}: a name cannot contain '='", kv.key));
        }
    }
    for (i, arg) in adjust.args.iter().enumerate().skip(1) {
        if arg.is_empty() {
            return Err(format!("args[{i}] is empty (only args[0] may be, to replace earlier args)"));
        }
    }
    if let Some(hooks) = adjust.hooks.as_ref() {
        let lists = [
            ("prestart", &hooks.prestart),
            ("create_runtime", &hooks.create_runtime),
            ("create_container", &hooks.create_container),
            ("start_container", &hooks.start_container),
            ("poststart", &hooks.poststart),
            ("poststop", &hooks.poststop),
        ];
        for (kind, list) in lists {
            for (i, hook) in list.iter().enumerate() {
                literal(&format!("{kind} hook #{i}"), "path", &hook.path)?;
            }
        }
    }
    if let Some(linux) = adjust.linux.as_ref() {
        for (i, device) in linux.devices.iter().enumerate() {
            removable(&format!("device #{i}"), "path", &device.path)?;
        }
        if let Some(resources) = linux.resources.as_ref() {
            check_resources(resources, "resources")?;
        }
        for (i, ns) in linux.namespaces.iter().enumerate() {
            removable(&format!("namespace #{i}"), "type", &ns.type_)?;
        }
        for key in linux.sysctl.keys().collect::<BTreeSet<_>>() {
            removable("sysctl", "key", key)?;
        }
        for key in linux.net_devices.keys().collect::<BTreeSet<_>>() {
            removable("net device", "host device name", key)?;
        }
    }
    for (i, rlimit) in adjust.rlimits.iter().enumerate() {
        literal(&format!("rlimit #{i}"), "type", &rlimit.type_)?;
    }
    for (i, device) in adjust.CDI_devices.iter().enumerate() {
        literal(&format!("CDI device #{i}"), "name", &device.name)?;
    }
    Ok(())
}

fn check_resources(resources: &pb::LinuxResources, whose: &str) -> Result<(), String> {
    for (i, limit) in resources.hugepage_limits.iter().enumerate() {
        literal(&format!("{whose}: hugepage limit #{i}"), "page size", &limit.page_size)?;
    }
    for key in resources.unified.keys().collect::<BTreeSet<_>>() {
        literal(&format!("{whose}: unified cgroup entry"), "key", key)?;
    }
    Ok(())
}

/// A key that may carry a removal marker: neither empty nor a bare `-`.
fn removable(what: &str, name: &str, key: &str) -> Result<(), String> {
    match key {
        "" => Err(format!("{what} has an empty {name}")),
        "-" => Err(format!("{what}: removal marker \"-\" names no {name}")),
        _ => Ok(()),
    }
}

/// A key NRI has no removal for: neither empty nor starting with `-`.
fn literal(what: &str, name: &str, key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err(format!("{what} has an empty {name}"));
    }
    if key.starts_with('-') {
        return Err(format!("{what}: {name} {key:?} starts with '-', but NRI cannot remove these"));
    }
    Ok(())
}
