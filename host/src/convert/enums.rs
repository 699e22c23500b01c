//! Enums, variant by variant.
//!
//! Each mapping is one table in [`enum_map!`]: the strict `TryFrom` from the
//! open protobuf enum, the total `From` back, and the lenient reading used by
//! the record conversions (unknown → the documented fallback, see the module
//! docs of `convert`). Both matches are exhaustive, so a variant added on
//! either side fails to compile until it is mapped.

use nri_wasm_api::api as pb;
use protobuf::EnumOrUnknown;

use super::ConvertError;
use crate::wit::wit;

/// Reading an enum the runtime reports, where an unknown value must not fail
/// the event.
pub(super) trait Informational<P>: Sized {
    /// The WIT value, or the fallback for a value WIT does not know.
    fn informational(value: EnumOrUnknown<P>) -> Self;
}

macro_rules! enum_map {
    ($field:literal, $pb:ty, $wit:ty, fallback $fallback:ident, { $($p:ident <=> $w:ident),* $(,)? }) => {
        enum_map!($field, $pb, $wit, { $($p <=> $w),* });

        impl Informational<$pb> for $wit {
            fn informational(value: EnumOrUnknown<$pb>) -> Self {
                Self::try_from(value).unwrap_or_else(|e| {
                    tracing::debug!(error = %e, "reading it as {:?}", <$wit>::$fallback);
                    <$wit>::$fallback
                })
            }
        }
    };
    ($field:literal, $pb:ty, $wit:ty, { $($p:ident <=> $w:ident),* $(,)? }) => {
        impl TryFrom<EnumOrUnknown<$pb>> for $wit {
            type Error = ConvertError;
            fn try_from(value: EnumOrUnknown<$pb>) -> Result<Self, ConvertError> {
                match value.enum_value() {
                    $(Ok(<$pb>::$p) => Ok(<$wit>::$w),)*
                    Err(value) => Err(ConvertError::UnknownEnum { field: $field, value }),
                }
            }
        }

        impl From<$wit> for $pb {
            fn from(value: $wit) -> Self {
                match value {
                    $(<$wit>::$w => <$pb>::$p,)*
                }
            }
        }

        impl From<$wit> for EnumOrUnknown<$pb> {
            fn from(value: $wit) -> Self {
                EnumOrUnknown::new(value.into())
            }
        }
    };
}

enum_map!("Container.state", pb::ContainerState, wit::ContainerState, fallback Unknown, {
    CONTAINER_UNKNOWN <=> Unknown,
    CONTAINER_CREATED <=> Created,
    CONTAINER_PAUSED <=> Paused,
    CONTAINER_RUNNING <=> Running,
    CONTAINER_STOPPED <=> Stopped,
});

enum_map!("LinuxIOPriority.class", pb::IOPrioClass, wit::IoPriorityClass, fallback None, {
    IOPRIO_CLASS_NONE <=> None,
    IOPRIO_CLASS_RT <=> Rt,
    IOPRIO_CLASS_BE <=> Be,
    IOPRIO_CLASS_IDLE <=> Idle,
});

enum_map!("SecurityProfile.profile_type", pb::security_profile::ProfileType, wit::SeccompProfileType,
    fallback RuntimeDefault, {
    RUNTIME_DEFAULT <=> RuntimeDefault,
    UNCONFINED <=> Unconfined,
    LOCALHOST <=> Localhost,
});

enum_map!("LinuxScheduler.policy", pb::LinuxSchedulerPolicy, wit::SchedulerPolicy, fallback None, {
    SCHED_NONE <=> None,
    SCHED_OTHER <=> Other,
    SCHED_FIFO <=> Fifo,
    SCHED_RR <=> Rr,
    SCHED_BATCH <=> Batch,
    SCHED_ISO <=> Iso,
    SCHED_IDLE <=> Idle,
    SCHED_DEADLINE <=> Deadline,
});

enum_map!("LinuxScheduler.flags", pb::LinuxSchedulerFlag, wit::SchedulerFlag, {
    SCHED_FLAG_RESET_ON_FORK <=> ResetOnFork,
    SCHED_FLAG_RECLAIM <=> Reclaim,
    SCHED_FLAG_DL_OVERRUN <=> DlOverrun,
    SCHED_FLAG_KEEP_POLICY <=> KeepPolicy,
    SCHED_FLAG_KEEP_PARAMS <=> KeepParams,
    SCHED_FLAG_UTIL_CLAMP_MIN <=> UtilClampMin,
    SCHED_FLAG_UTIL_CLAMP_MAX <=> UtilClampMax,
});

enum_map!("LinuxMemoryPolicy.mode", pb::MpolMode, wit::MemoryPolicyMode, fallback Default, {
    MPOL_DEFAULT <=> Default,
    MPOL_PREFERRED <=> Preferred,
    MPOL_BIND <=> Bind,
    MPOL_INTERLEAVE <=> Interleave,
    MPOL_LOCAL <=> Local,
    MPOL_PREFERRED_MANY <=> PreferredMany,
    MPOL_WEIGHTED_INTERLEAVE <=> WeightedInterleave,
});

enum_map!("LinuxMemoryPolicy.flags", pb::MpolFlag, wit::MemoryPolicyFlag, {
    MPOL_F_STATIC_NODES <=> StaticNodes,
    MPOL_F_RELATIVE_NODES <=> RelativeNodes,
    MPOL_F_NUMA_BALANCING <=> NumaBalancing,
});

/// A list of flags the runtime reports: unknown flags are left out (mapping
/// one to a known flag would invent a setting).
pub(super) fn known_flags<P, W>(flags: &[EnumOrUnknown<P>]) -> Vec<W>
where
    P: protobuf::Enum,
    W: TryFrom<EnumOrUnknown<P>, Error = ConvertError>,
{
    flags
        .iter()
        .filter_map(|f| W::try_from(*f).map_err(|e| tracing::debug!(error = %e, "leaving the flag out")).ok())
        .collect()
}

/// A list of flags back to protobuf.
pub(super) fn flags_to_pb<W, P>(flags: Vec<W>) -> Vec<EnumOrUnknown<P>>
where
    P: protobuf::Enum,
    EnumOrUnknown<P>: From<W>,
{
    flags.into_iter().map(EnumOrUnknown::from).collect()
}
