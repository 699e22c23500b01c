//! Containers and the parts they share with adjustments (mounts, hooks,
//! devices, rlimits, I/O priority, seccomp, scheduler, RDT).

use nri_wasm_api::api as pb;

use super::enums::{flags_to_pb, known_flags, Informational};
use super::{
    cdi_to_pb, cdi_to_wit, get, kv_to_pb, kv_to_wit, list_to_pb, list_to_wit, net_devices_to_pb, net_devices_to_wit,
    opt_to_pb, opt_to_wit, opt_try_to_pb, wrap, ConvertError,
};
use crate::wit::{event, wit};

impl From<&pb::Container> for wit::Container {
    fn from(c: &pb::Container) -> Self {
        let pb::Container {
            id,
            pod_sandbox_id,
            name,
            state,
            labels,
            annotations,
            args,
            env,
            mounts,
            hooks,
            linux,
            pid,
            rlimits,
            created_at,
            started_at,
            finished_at,
            exit_code,
            status_reason,
            status_message,
            CDI_devices: cdi_devices,
            user,
            image,
            special_fields: _,
        } = c;
        Self {
            id: id.clone(),
            pod_sandbox_id: pod_sandbox_id.clone(),
            name: name.clone(),
            state: wit::ContainerState::informational(*state),
            labels: kv_to_wit(labels),
            annotations: kv_to_wit(annotations),
            args: args.clone(),
            env: env.clone(),
            mounts: list_to_wit(mounts),
            hooks: opt_to_wit(hooks),
            linux: opt_to_wit(linux),
            pid: *pid,
            rlimits: list_to_wit(rlimits),
            created_at: *created_at,
            started_at: *started_at,
            finished_at: *finished_at,
            exit_code: *exit_code,
            status_reason: status_reason.clone(),
            status_message: status_message.clone(),
            cdi_devices: cdi_to_wit(cdi_devices),
            user: opt_to_wit(user),
            image: opt_to_wit(image),
        }
    }
}

/// The container's scalar fields, what `event.container-metadata` returns.
impl From<&pb::Container> for event::ContainerMeta {
    fn from(c: &pb::Container) -> Self {
        Self {
            id: c.id.clone(),
            pod_sandbox_id: c.pod_sandbox_id.clone(),
            name: c.name.clone(),
            state: wit::ContainerState::informational(c.state),
            pid: c.pid,
        }
    }
}

impl TryFrom<wit::Container> for pb::Container {
    type Error = ConvertError;
    fn try_from(c: wit::Container) -> Result<Self, ConvertError> {
        let wit::Container {
            id,
            pod_sandbox_id,
            name,
            state,
            labels,
            annotations,
            args,
            env,
            mounts,
            hooks,
            linux,
            pid,
            rlimits,
            created_at,
            started_at,
            finished_at,
            exit_code,
            status_reason,
            status_message,
            cdi_devices,
            user,
            image,
        } = c;
        Ok(Self {
            id,
            pod_sandbox_id,
            name,
            state: state.into(),
            labels: kv_to_pb("Container.labels", labels)?,
            annotations: kv_to_pb("Container.annotations", annotations)?,
            args,
            env,
            mounts: list_to_pb(mounts),
            hooks: opt_to_pb(hooks),
            linux: opt_try_to_pb(linux)?,
            pid,
            rlimits: list_to_pb(rlimits),
            created_at,
            started_at,
            finished_at,
            exit_code,
            status_reason,
            status_message,
            CDI_devices: cdi_to_pb(cdi_devices),
            user: opt_to_pb(user),
            image: opt_to_pb(image),
            ..Default::default()
        })
    }
}

impl From<&pb::Image> for wit::Image {
    fn from(i: &pb::Image) -> Self {
        let pb::Image { name, digest, config_digest, special_fields: _ } = i;
        Self { name: name.clone(), digest: digest.clone(), config_digest: config_digest.clone() }
    }
}

impl From<wit::Image> for pb::Image {
    fn from(i: wit::Image) -> Self {
        let wit::Image { name, digest, config_digest } = i;
        Self { name, digest, config_digest, ..Default::default() }
    }
}

impl From<&pb::User> for wit::User {
    fn from(u: &pb::User) -> Self {
        let pb::User { uid, gid, additional_gids, special_fields: _ } = u;
        Self { uid: *uid, gid: *gid, additional_gids: additional_gids.clone() }
    }
}

impl From<wit::User> for pb::User {
    fn from(u: wit::User) -> Self {
        let wit::User { uid, gid, additional_gids } = u;
        Self { uid, gid, additional_gids, ..Default::default() }
    }
}

impl From<&pb::Mount> for wit::Mount {
    fn from(m: &pb::Mount) -> Self {
        let pb::Mount { destination, type_, source, options, special_fields: _ } = m;
        Self {
            destination: destination.clone(),
            type_: type_.clone(),
            source: source.clone(),
            options: options.clone(),
        }
    }
}

impl From<wit::Mount> for pb::Mount {
    fn from(m: wit::Mount) -> Self {
        let wit::Mount { destination, type_, source, options } = m;
        Self { destination, type_, source, options, ..Default::default() }
    }
}

impl From<&pb::Hooks> for wit::Hooks {
    fn from(h: &pb::Hooks) -> Self {
        let pb::Hooks {
            prestart,
            create_runtime,
            create_container,
            start_container,
            poststart,
            poststop,
            special_fields: _,
        } = h;
        Self {
            prestart: list_to_wit(prestart),
            create_runtime: list_to_wit(create_runtime),
            create_container: list_to_wit(create_container),
            start_container: list_to_wit(start_container),
            poststart: list_to_wit(poststart),
            poststop: list_to_wit(poststop),
        }
    }
}

impl From<wit::Hooks> for pb::Hooks {
    fn from(h: wit::Hooks) -> Self {
        let wit::Hooks { prestart, create_runtime, create_container, start_container, poststart, poststop } = h;
        Self {
            prestart: list_to_pb(prestart),
            create_runtime: list_to_pb(create_runtime),
            create_container: list_to_pb(create_container),
            start_container: list_to_pb(start_container),
            poststart: list_to_pb(poststart),
            poststop: list_to_pb(poststop),
            ..Default::default()
        }
    }
}

impl From<&pb::Hook> for wit::Hook {
    fn from(h: &pb::Hook) -> Self {
        let pb::Hook { path, args, env, timeout, special_fields: _ } = h;
        Self { path: path.clone(), args: args.clone(), env: env.clone(), timeout: get(timeout) }
    }
}

impl From<wit::Hook> for pb::Hook {
    fn from(h: wit::Hook) -> Self {
        let wit::Hook { path, args, env, timeout } = h;
        Self { path, args, env, timeout: wrap(timeout), ..Default::default() }
    }
}

impl From<&pb::POSIXRlimit> for wit::PosixRlimit {
    fn from(r: &pb::POSIXRlimit) -> Self {
        let pb::POSIXRlimit { type_, hard, soft, special_fields: _ } = r;
        Self { type_: type_.clone(), hard: *hard, soft: *soft }
    }
}

impl From<wit::PosixRlimit> for pb::POSIXRlimit {
    fn from(r: wit::PosixRlimit) -> Self {
        let wit::PosixRlimit { type_, hard, soft } = r;
        Self { type_, hard, soft, ..Default::default() }
    }
}

impl From<&pb::LinuxContainer> for wit::LinuxContainer {
    fn from(l: &pb::LinuxContainer) -> Self {
        let pb::LinuxContainer {
            namespaces,
            devices,
            resources,
            oom_score_adj,
            cgroups_path,
            io_priority,
            seccomp_profile,
            seccomp_policy,
            sysctl,
            net_devices,
            scheduler,
            rdt,
            special_fields: _,
        } = l;
        Self {
            namespaces: list_to_wit(namespaces),
            devices: list_to_wit(devices),
            resources: opt_to_wit(resources),
            oom_score_adj: get(oom_score_adj),
            cgroups_path: cgroups_path.clone(),
            io_priority: opt_to_wit(io_priority),
            seccomp_profile: opt_to_wit(seccomp_profile),
            seccomp_policy: opt_to_wit(seccomp_policy),
            sysctl: kv_to_wit(sysctl),
            net_devices: net_devices_to_wit(net_devices),
            scheduler: opt_to_wit(scheduler),
            rdt: opt_to_wit(rdt),
        }
    }
}

impl TryFrom<wit::LinuxContainer> for pb::LinuxContainer {
    type Error = ConvertError;
    fn try_from(l: wit::LinuxContainer) -> Result<Self, ConvertError> {
        let wit::LinuxContainer {
            namespaces,
            devices,
            resources,
            oom_score_adj,
            cgroups_path,
            io_priority,
            seccomp_profile,
            seccomp_policy,
            sysctl,
            net_devices,
            scheduler,
            rdt,
        } = l;
        Ok(Self {
            namespaces: list_to_pb(namespaces),
            devices: list_to_pb(devices),
            resources: opt_try_to_pb(resources)?,
            oom_score_adj: wrap(oom_score_adj),
            cgroups_path,
            io_priority: opt_to_pb(io_priority),
            seccomp_profile: opt_to_pb(seccomp_profile),
            seccomp_policy: opt_to_pb(seccomp_policy),
            sysctl: kv_to_pb("LinuxContainer.sysctl", sysctl)?,
            net_devices: net_devices_to_pb("LinuxContainer.net_devices", net_devices)?,
            scheduler: opt_to_pb(scheduler),
            rdt: opt_to_pb(rdt),
            ..Default::default()
        })
    }
}

impl From<&pb::LinuxDevice> for wit::LinuxDevice {
    fn from(d: &pb::LinuxDevice) -> Self {
        let pb::LinuxDevice { path, type_, major, minor, file_mode, uid, gid, special_fields: _ } = d;
        Self {
            path: path.clone(),
            type_: type_.clone(),
            major: *major,
            minor: *minor,
            file_mode: get(file_mode),
            uid: get(uid),
            gid: get(gid),
        }
    }
}

impl From<wit::LinuxDevice> for pb::LinuxDevice {
    fn from(d: wit::LinuxDevice) -> Self {
        let wit::LinuxDevice { path, type_, major, minor, file_mode, uid, gid } = d;
        Self {
            path,
            type_,
            major,
            minor,
            file_mode: wrap(file_mode),
            uid: wrap(uid),
            gid: wrap(gid),
            ..Default::default()
        }
    }
}

impl From<&pb::LinuxIOPriority> for wit::IoPriority {
    fn from(p: &pb::LinuxIOPriority) -> Self {
        let pb::LinuxIOPriority { class, priority, special_fields: _ } = p;
        Self { class: wit::IoPriorityClass::informational(*class), priority: *priority }
    }
}

impl From<wit::IoPriority> for pb::LinuxIOPriority {
    fn from(p: wit::IoPriority) -> Self {
        let wit::IoPriority { class, priority } = p;
        Self { class: class.into(), priority, ..Default::default() }
    }
}

impl From<&pb::SecurityProfile> for wit::SecurityProfile {
    fn from(p: &pb::SecurityProfile) -> Self {
        let pb::SecurityProfile { profile_type, localhost_ref, special_fields: _ } = p;
        Self {
            profile_type: wit::SeccompProfileType::informational(*profile_type),
            localhost_ref: localhost_ref.clone(),
        }
    }
}

impl From<wit::SecurityProfile> for pb::SecurityProfile {
    fn from(p: wit::SecurityProfile) -> Self {
        let wit::SecurityProfile { profile_type, localhost_ref } = p;
        Self { profile_type: profile_type.into(), localhost_ref, ..Default::default() }
    }
}

impl From<&pb::LinuxSeccomp> for wit::LinuxSeccomp {
    fn from(s: &pb::LinuxSeccomp) -> Self {
        let pb::LinuxSeccomp {
            default_action,
            default_errno,
            architectures,
            flags,
            listener_path,
            listener_metadata,
            syscalls,
            special_fields: _,
        } = s;
        Self {
            default_action: default_action.clone(),
            default_errno: get(default_errno),
            architectures: architectures.clone(),
            flags: flags.clone(),
            listener_path: listener_path.clone(),
            listener_metadata: listener_metadata.clone(),
            syscalls: list_to_wit(syscalls),
        }
    }
}

impl From<wit::LinuxSeccomp> for pb::LinuxSeccomp {
    fn from(s: wit::LinuxSeccomp) -> Self {
        let wit::LinuxSeccomp {
            default_action,
            default_errno,
            architectures,
            flags,
            listener_path,
            listener_metadata,
            syscalls,
        } = s;
        Self {
            default_action,
            default_errno: wrap(default_errno),
            architectures,
            flags,
            listener_path,
            listener_metadata,
            syscalls: list_to_pb(syscalls),
            ..Default::default()
        }
    }
}

impl From<&pb::LinuxSyscall> for wit::LinuxSyscall {
    fn from(s: &pb::LinuxSyscall) -> Self {
        let pb::LinuxSyscall { names, action, errno_ret, args, special_fields: _ } = s;
        Self { names: names.clone(), action: action.clone(), errno_ret: get(errno_ret), args: list_to_wit(args) }
    }
}

impl From<wit::LinuxSyscall> for pb::LinuxSyscall {
    fn from(s: wit::LinuxSyscall) -> Self {
        let wit::LinuxSyscall { names, action, errno_ret, args } = s;
        Self { names, action, errno_ret: wrap(errno_ret), args: list_to_pb(args), ..Default::default() }
    }
}

impl From<&pb::LinuxSeccompArg> for wit::LinuxSeccompArg {
    fn from(a: &pb::LinuxSeccompArg) -> Self {
        let pb::LinuxSeccompArg { index, value, value_two, op, special_fields: _ } = a;
        Self { index: *index, value: *value, value_two: *value_two, op: op.clone() }
    }
}

impl From<wit::LinuxSeccompArg> for pb::LinuxSeccompArg {
    fn from(a: wit::LinuxSeccompArg) -> Self {
        let wit::LinuxSeccompArg { index, value, value_two, op } = a;
        Self { index, value, value_two, op, ..Default::default() }
    }
}

impl From<&pb::LinuxScheduler> for wit::LinuxScheduler {
    fn from(s: &pb::LinuxScheduler) -> Self {
        let pb::LinuxScheduler { policy, nice, priority, flags, runtime, deadline, period, special_fields: _ } = s;
        Self {
            policy: wit::SchedulerPolicy::informational(*policy),
            nice: *nice,
            priority: *priority,
            flags: known_flags(flags),
            runtime: *runtime,
            deadline: *deadline,
            period: *period,
        }
    }
}

impl From<wit::LinuxScheduler> for pb::LinuxScheduler {
    fn from(s: wit::LinuxScheduler) -> Self {
        let wit::LinuxScheduler { policy, nice, priority, flags, runtime, deadline, period } = s;
        Self {
            policy: policy.into(),
            nice,
            priority,
            flags: flags_to_pb(flags),
            runtime,
            deadline,
            period,
            ..Default::default()
        }
    }
}

impl From<&pb::LinuxRdt> for wit::LinuxRdt {
    fn from(r: &pb::LinuxRdt) -> Self {
        let pb::LinuxRdt { clos_id, schemata, enable_monitoring, remove, special_fields: _ } = r;
        Self {
            clos_id: get(clos_id),
            schemata: get(schemata),
            enable_monitoring: get(enable_monitoring),
            remove: *remove,
        }
    }
}

impl From<wit::LinuxRdt> for pb::LinuxRdt {
    fn from(r: wit::LinuxRdt) -> Self {
        let wit::LinuxRdt { clos_id, schemata, enable_monitoring, remove } = r;
        Self {
            clos_id: wrap(clos_id),
            schemata: wrap(schemata),
            enable_monitoring: wrap(enable_monitoring),
            remove,
            ..Default::default()
        }
    }
}
