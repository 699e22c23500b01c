//! Round trips pb → WIT → pb of fully populated messages (every field set, by
//! reflection), the real containerd request, every enum value, and the edge
//! cases the module documents.

use std::fmt::Debug;

use nri_sim::populate::{populated, unset_fields};
use nri_wasm_api::api as pb;
use protobuf::{Enum, EnumOrUnknown, MessageField, MessageFull};

use super::enums::Informational;
use super::*;

/// Seeds for the populated messages: the populator picks enum values by
/// counter, so several seeds exercise several values of each enum.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

/// A message with every field set (checked, so a change of the populator
/// cannot silently weaken these tests).
fn full<M: MessageFull>(seed: u64) -> M {
    let m: M = populated(seed);
    assert!(unset_fields(&m).is_empty(), "{} not fully populated: {:?}", M::NAME, unset_fields(&m));
    m
}

#[test]
fn create_container_request_round_trips() {
    for seed in SEEDS {
        let req: pb::CreateContainerRequest = full(seed);

        let pod = pb::PodSandbox::try_from(wit::PodSandbox::from(&*req.pod)).unwrap();
        assert_eq!(pod, *req.pod);
        let container = pb::Container::try_from(wit::Container::from(&*req.container)).unwrap();
        assert_eq!(container, *req.container);

        let wit::Event::CreateContainer(event) = wit::Event::from(&req) else { panic!("wrong event variant") };
        assert_eq!(pb::CreateContainerRequest::try_from(event).unwrap(), req);
    }
}

#[test]
fn container_adjustment_round_trips() {
    for seed in SEEDS {
        let adjust: pb::ContainerAdjustment = full(seed);
        let back = pb::ContainerAdjustment::try_from(wit::ContainerAdjustment::from(&adjust)).unwrap();
        assert_eq!(back, adjust);
    }
}

#[test]
fn container_update_and_eviction_round_trip() {
    for seed in SEEDS {
        let update: pb::ContainerUpdate = full(seed);
        assert_eq!(pb::ContainerUpdate::try_from(wit::ContainerUpdate::from(&update)).unwrap(), update);
        let evict: pb::ContainerEviction = full(seed);
        assert_eq!(pb::ContainerEviction::from(wit::ContainerEviction::from(&evict)), evict);
    }
}

#[test]
fn update_container_request_round_trips() {
    for seed in SEEDS {
        let req: pb::UpdateContainerRequest = full(seed);
        let resources = pb::LinuxResources::try_from(wit::LinuxResources::from(&*req.linux_resources)).unwrap();
        assert_eq!(resources, *req.linux_resources);

        let wit::Event::UpdateContainer(event) = wit::Event::from(&req) else { panic!("wrong event variant") };
        assert_eq!(pb::UpdateContainerRequest::try_from(event).unwrap(), req);
    }
}

#[test]
fn update_pod_sandbox_request_round_trips() {
    for seed in SEEDS {
        let req: pb::UpdatePodSandboxRequest = full(seed);
        let wit::Event::UpdatePodSandbox(event) = wit::Event::from(&req) else { panic!("wrong event variant") };
        assert_eq!(pb::UpdatePodSandboxRequest::try_from(event).unwrap(), req);
    }
}

#[test]
fn validate_container_adjustment_request_round_trips() {
    for seed in SEEDS {
        let req: pb::ValidateContainerAdjustmentRequest = full(seed);
        let wit::Event::ValidateContainerAdjustment(event) = wit::Event::from(&req) else {
            panic!("wrong event variant")
        };
        // 2 containers × (2 simple + 2 compound fields × 2 keys).
        assert_eq!(event.owners.len(), 12);
        assert_eq!(event.plugins.len(), 2);
        assert_eq!(pb::ValidateContainerAdjustmentRequest::try_from(event).unwrap(), req);
    }
}

/// Every request type becomes its own event variant and comes back intact.
#[test]
fn every_request_becomes_its_event() {
    macro_rules! check {
        ($($req:ident => $variant:ident),* $(,)?) => {$(
            let req: pb::$req = full(3);
            let wit::Event::$variant(event) = wit::Event::from(&req) else {
                panic!(concat!(stringify!($req), ": wrong event variant"))
            };
            assert_eq!(pb::$req::try_from(event).unwrap(), req, stringify!($req));
        )*};
    }
    check! {
        RunPodSandboxRequest => RunPodSandbox,
        StopPodSandboxRequest => StopPodSandbox,
        RemovePodSandboxRequest => RemovePodSandbox,
        PostUpdatePodSandboxRequest => PostUpdatePodSandbox,
        CreateContainerRequest => CreateContainer,
        PostCreateContainerRequest => PostCreateContainer,
        StartContainerRequest => StartContainer,
        PostStartContainerRequest => PostStartContainer,
        PostUpdateContainerRequest => PostUpdateContainer,
        StopContainerRequest => StopContainer,
        RemoveContainerRequest => RemoveContainer,
        UpdateContainerRequest => UpdateContainer,
        UpdatePodSandboxRequest => UpdatePodSandbox,
        ValidateContainerAdjustmentRequest => ValidateContainerAdjustment,
    }
}

#[test]
fn missing_pod_and_container_are_empty_records() {
    let req = pb::StopContainerRequest::default();
    let wit::Event::StopContainer(event) = wit::Event::from(&req) else { panic!("wrong event variant") };
    assert_eq!(event.pod, wit::PodSandbox::from(&pb::PodSandbox::default()));
    assert_eq!(event.container, wit::Container::from(&pb::Container::default()));
    assert!(event.pod.id.is_empty() && event.pod.linux.is_none());
    assert!(event.container.id.is_empty() && event.container.linux.is_none());
    assert_eq!(event.container.state, wit::ContainerState::Unknown);
}

#[test]
fn containerd_fixture_round_trips() {
    let req: pb::CreateContainerRequest =
        nri_sim::fixtures::load("CreateContainer").expect("containerd CreateContainer fixture");
    let wit::Event::CreateContainer(event) = wit::Event::from(&req) else { panic!("wrong event variant") };
    assert!(!event.container.env.is_empty() && event.container.linux.is_some());
    assert_eq!(pb::CreateContainerRequest::try_from(event).unwrap(), req);
}

/// Every value of every enum maps to a distinct WIT variant and back, and
/// every WIT variant maps to an NRI value and back.
#[test]
fn every_enum_value_round_trips() {
    fn check<E, W>(wits: &[W])
    where
        E: Enum + Debug + From<W>,
        EnumOrUnknown<E>: From<W>,
        W: TryFrom<EnumOrUnknown<E>, Error = ConvertError> + Informational<E> + Copy + PartialEq + Debug,
    {
        assert_eq!(E::VALUES.len(), wits.len(), "{}: variant count", E::NAME);
        let mut seen = Vec::new();
        for v in E::VALUES {
            let w = W::try_from(EnumOrUnknown::new(*v)).unwrap();
            assert_eq!(E::from(w), *v, "{}", E::NAME);
            assert_eq!(W::informational(EnumOrUnknown::new(*v)), w);
            assert!(!seen.contains(&w), "{}: {w:?} twice", E::NAME);
            seen.push(w);
        }
        for w in wits {
            assert_eq!(W::try_from(EnumOrUnknown::new(E::from(*w))).unwrap(), *w, "{}", E::NAME);
            assert_eq!(EnumOrUnknown::<E>::from(*w), EnumOrUnknown::new(E::from(*w)));
        }
    }
    fn check_flags<E, W>(wits: &[W])
    where
        E: Enum + Debug + From<W>,
        EnumOrUnknown<E>: From<W>,
        W: TryFrom<EnumOrUnknown<E>, Error = ConvertError> + Copy + PartialEq + Debug,
    {
        assert_eq!(E::VALUES.len(), wits.len(), "{}: variant count", E::NAME);
        let pb: Vec<EnumOrUnknown<E>> = E::VALUES.iter().map(|v| EnumOrUnknown::new(*v)).collect();
        let w: Vec<W> = enums::known_flags(&pb);
        assert_eq!(w.len(), wits.len());
        for x in wits {
            assert!(w.contains(x), "{}: {x:?} not reached", E::NAME);
        }
        assert_eq!(enums::flags_to_pb::<W, E>(w), pb);
    }

    use wit::ContainerState as S;
    check::<pb::ContainerState, _>(&[S::Unknown, S::Created, S::Paused, S::Running, S::Stopped]);
    use wit::IoPriorityClass as I;
    check::<pb::IOPrioClass, _>(&[I::None, I::Rt, I::Be, I::Idle]);
    use wit::SeccompProfileType as T;
    check::<pb::security_profile::ProfileType, _>(&[T::RuntimeDefault, T::Unconfined, T::Localhost]);
    use wit::SchedulerPolicy as P;
    check::<pb::LinuxSchedulerPolicy, _>(&[P::None, P::Other, P::Fifo, P::Rr, P::Batch, P::Iso, P::Idle, P::Deadline]);
    use wit::MemoryPolicyMode as M;
    check::<pb::MpolMode, _>(&[
        M::Default,
        M::Preferred,
        M::Bind,
        M::Interleave,
        M::Local,
        M::PreferredMany,
        M::WeightedInterleave,
    ]);
    use wit::SchedulerFlag as F;
    check_flags::<pb::LinuxSchedulerFlag, _>(&[
        F::ResetOnFork,
        F::Reclaim,
        F::DlOverrun,
        F::KeepPolicy,
        F::KeepParams,
        F::UtilClampMin,
        F::UtilClampMax,
    ]);
    use wit::MemoryPolicyFlag as G;
    check_flags::<pb::MpolFlag, _>(&[G::StaticNodes, G::RelativeNodes, G::NumaBalancing]);
}

#[test]
fn unknown_enum_values_are_errors() {
    let err = wit::SchedulerPolicy::try_from(EnumOrUnknown::<pb::LinuxSchedulerPolicy>::from_i32(42)).unwrap_err();
    assert_eq!(err, ConvertError::UnknownEnum { field: "LinuxScheduler.policy", value: 42 });
    assert_eq!(err.to_string(), "LinuxScheduler.policy: enum value 42 is not known to the policy interface");
    assert_eq!(
        wit::ContainerState::try_from(EnumOrUnknown::<pb::ContainerState>::from_i32(-1)),
        Err(ConvertError::UnknownEnum { field: "Container.state", value: -1 })
    );
    assert_eq!(
        wit::MemoryPolicyFlag::try_from(EnumOrUnknown::<pb::MpolFlag>::from_i32(9)),
        Err(ConvertError::UnknownEnum { field: "LinuxMemoryPolicy.flags", value: 9 })
    );
}

/// In records, an enum value the WIT package does not know reads as the
/// proto's zero value, and unknown flags are left out.
#[test]
fn unknown_enum_values_in_records_are_informational() {
    let container = pb::Container {
        state: EnumOrUnknown::from_i32(77),
        linux: MessageField::some(pb::LinuxContainer {
            io_priority: MessageField::some(pb::LinuxIOPriority {
                class: EnumOrUnknown::from_i32(9),
                priority: 4,
                ..Default::default()
            }),
            seccomp_profile: MessageField::some(pb::SecurityProfile {
                profile_type: EnumOrUnknown::from_i32(5),
                localhost_ref: "p".into(),
                ..Default::default()
            }),
            scheduler: MessageField::some(pb::LinuxScheduler {
                policy: EnumOrUnknown::from_i32(99),
                flags: vec![
                    EnumOrUnknown::from_i32(100),
                    EnumOrUnknown::new(pb::LinuxSchedulerFlag::SCHED_FLAG_RECLAIM),
                ],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let c = wit::Container::from(&container);
    assert_eq!(c.state, wit::ContainerState::Unknown);
    let linux = c.linux.unwrap();
    assert_eq!(linux.io_priority.unwrap().class, wit::IoPriorityClass::None);
    assert_eq!(linux.seccomp_profile.unwrap().profile_type, wit::SeccompProfileType::RuntimeDefault);
    let scheduler = linux.scheduler.unwrap();
    assert_eq!(scheduler.policy, wit::SchedulerPolicy::None);
    assert_eq!(scheduler.flags, vec![wit::SchedulerFlag::Reclaim]);

    let policy = pb::LinuxMemoryPolicy {
        mode: EnumOrUnknown::from_i32(12),
        flags: vec![EnumOrUnknown::new(pb::MpolFlag::MPOL_F_NUMA_BALANCING), EnumOrUnknown::from_i32(-3)],
        ..Default::default()
    };
    let p = wit::LinuxMemoryPolicy::from(&policy);
    assert_eq!(p.mode, wit::MemoryPolicyMode::Default);
    assert_eq!(p.flags, vec![wit::MemoryPolicyFlag::NumaBalancing]);
}

/// Wrappers: absent ↔ `none`, present zero ↔ `some(0)`; sub-messages present
/// but empty stay present.
#[test]
fn presence_is_preserved() {
    let zero = pb::LinuxResources {
        memory: MessageField::some(pb::LinuxMemory {
            limit: MessageField::some(pb::OptionalInt64::default()),
            disable_oom_killer: MessageField::some(pb::OptionalBool::default()),
            ..Default::default()
        }),
        cpu: MessageField::some(pb::LinuxCPU::default()),
        blockio_class: MessageField::some(pb::OptionalString::default()),
        pids: MessageField::some(pb::LinuxPids::default()),
        ..Default::default()
    };
    let w = wit::LinuxResources::from(&zero);
    let memory = w.memory.as_ref().unwrap();
    assert_eq!(memory.limit, Some(0));
    assert_eq!(memory.reservation, None);
    assert_eq!(memory.disable_oom_killer, Some(false));
    assert_eq!(memory.use_hierarchy, None);
    assert_eq!(w.blockio_class.as_deref(), Some(""));
    assert_eq!(w.rdt_class, None);
    assert_eq!(pb::LinuxResources::try_from(w).unwrap(), zero);

    let empty = pb::Container {
        hooks: MessageField::some(Default::default()),
        linux: MessageField::some(pb::LinuxContainer {
            resources: MessageField::some(Default::default()),
            oom_score_adj: MessageField::some(Default::default()),
            io_priority: MessageField::some(Default::default()),
            seccomp_profile: MessageField::some(Default::default()),
            seccomp_policy: MessageField::some(Default::default()),
            scheduler: MessageField::some(Default::default()),
            rdt: MessageField::some(pb::LinuxRdt {
                schemata: MessageField::some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        user: MessageField::some(Default::default()),
        image: MessageField::some(Default::default()),
        ..Default::default()
    };
    let w = wit::Container::from(&empty);
    assert_eq!(w.linux.as_ref().unwrap().oom_score_adj, Some(0));
    assert_eq!(w.linux.as_ref().unwrap().rdt.as_ref().unwrap().schemata, Some(vec![]));
    assert_eq!(pb::Container::try_from(w).unwrap(), empty);

    // NRI 0.12.2's image, both ways.
    let with_image = pb::Container {
        image: MessageField::some(pb::Image {
            name: "registry.example.com/app@sha256:00".into(),
            digest: "sha256:00".into(),
            config_digest: "sha256:11".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let w = wit::Container::from(&with_image);
    let image = w.image.as_ref().expect("the image reaches the policy");
    assert_eq!(
        (image.name.as_str(), image.digest.as_str(), image.config_digest.as_str()),
        ("registry.example.com/app@sha256:00", "sha256:00", "sha256:11")
    );
    assert_eq!(pb::Container::try_from(w).unwrap(), with_image);

    let absent = pb::Container::default();
    let w = wit::Container::from(&absent);
    assert!(w.hooks.is_none() && w.linux.is_none() && w.user.is_none() && w.image.is_none());
    assert_eq!(pb::Container::try_from(w).unwrap(), absent);

    let adjust = pb::ContainerAdjustment {
        linux: MessageField::some(pb::LinuxContainerAdjustment {
            memory_policy: MessageField::some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(pb::ContainerAdjustment::try_from(wit::ContainerAdjustment::from(&adjust)).unwrap(), adjust);
}

/// The one presence WIT does not mirror: `linux` without `resources`.
#[test]
fn update_without_resources_has_no_linux() {
    let update = pb::ContainerUpdate {
        container_id: "c".into(),
        linux: MessageField::some(pb::LinuxContainerUpdate::default()),
        ..Default::default()
    };
    let w = wit::ContainerUpdate::from(&update);
    assert_eq!(w.resources, None);
    let back = pb::ContainerUpdate::try_from(w).unwrap();
    assert!(back.linux.is_none());
    assert_eq!(back.container_id, "c");
}

#[test]
fn maps_are_sorted_lists_and_keys_must_be_unique() {
    let pod = pb::PodSandbox {
        labels: [("b", "2"), ("a", "1"), ("c", "3")].into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        ..Default::default()
    };
    let w = wit::PodSandbox::from(&pod);
    let keys: Vec<_> = w.labels.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c"]);

    let kv = |k: &str, v: &str| wit::KeyValue { key: k.into(), value: v.into() };
    let mut adjust = wit::ContainerAdjustment::from(&pb::ContainerAdjustment::default());
    adjust.annotations = vec![kv("x", "1"), kv("y", "2"), kv("x", "3")];
    assert_eq!(
        pb::ContainerAdjustment::try_from(adjust.clone()),
        Err(ConvertError::DuplicateKey { field: "ContainerAdjustment.annotations", key: "x".into() })
    );

    // Adjustment env is a list on both sides: repeats are kept in order.
    adjust.annotations.clear();
    adjust.env = vec![kv("A", "1"), kv("-A", ""), kv("A", "2")];
    let env: Vec<_> = pb::ContainerAdjustment::try_from(adjust).unwrap().env.into_iter().map(|e| e.key).collect();
    assert_eq!(env, ["A", "-A", "A"]);

    let mut linux = wit::LinuxContainerAdjustment::from(&pb::LinuxContainerAdjustment::default());
    let dev = |h: &str, n: &str| wit::NetDeviceEntry { host_name: h.into(), name: n.into() };
    linux.net_devices = vec![dev("eth1", "net0"), dev("eth1", "net1")];
    assert_eq!(
        pb::LinuxContainerAdjustment::try_from(linux.clone()),
        Err(ConvertError::DuplicateKey { field: "LinuxContainerAdjustment.net_devices", key: "eth1".into() })
    );
    linux.net_devices = vec![dev("eth2", "net1"), dev("eth1", "net0")];
    let back = pb::LinuxContainerAdjustment::try_from(linux).unwrap();
    assert_eq!(back.net_devices["eth1"].name, "net0");
    assert_eq!(back.net_devices["eth2"].name, "net1");
    let again: Vec<_> = wit::LinuxContainerAdjustment::from(&back).net_devices;
    assert_eq!(again, [dev("eth1", "net0"), dev("eth2", "net1")]);

    let mut resources = wit::LinuxResources::from(&pb::LinuxResources::default());
    resources.unified = vec![kv("memory.high", "1"), kv("memory.high", "2")];
    let update = wit::ContainerUpdate { container_id: "c".into(), resources: Some(resources), ignore_failure: false };
    assert!(matches!(
        pb::ContainerUpdate::try_from(update),
        Err(ConvertError::DuplicateKey { field: "LinuxResources.unified", .. })
    ));
}

#[test]
fn owners_flatten_in_order_and_refuse_ambiguity() {
    let owners: pb::OwningPlugins = full(5);
    let flat = owners_to_wit(&owners);
    let order: Vec<_> = flat.iter().map(|o| (o.container_id.clone(), o.compound, o.field, o.key.clone())).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert!(flat.iter().filter(|o| !o.compound).all(|o| o.key.is_empty()));
    assert_eq!(owners_from_wit(flat.clone()).unwrap(), owners);

    let owner = |field: i32, compound: bool, key: &str, plugin: &str| wit::FieldOwner {
        container_id: "c1".into(),
        field,
        compound,
        key: key.into(),
        plugin: plugin.into(),
    };
    // The same key of two compound fields, and a simple and a compound field
    // of the same number, are distinct.
    let ok = vec![owner(1, true, "k", "10-a"), owner(2, true, "k", "10-a"), owner(1, false, "", "20-b")];
    let back = owners_from_wit(ok.clone()).unwrap();
    assert_eq!(owners_to_wit(&back), [ok[2].clone(), ok[0].clone(), ok[1].clone()]);

    assert!(matches!(
        owners_from_wit(vec![owner(8, false, "", "10-a"), owner(8, false, "", "20-b")]),
        Err(ConvertError::DuplicateKey { field: "owners", .. })
    ));
    assert!(matches!(
        owners_from_wit(vec![owner(1, true, "k", "10-a"), owner(1, true, "k", "20-b")]),
        Err(ConvertError::DuplicateKey { field: "owners", .. })
    ));
    assert!(matches!(owners_from_wit(vec![owner(8, false, "k", "10-a")]), Err(ConvertError::Invalid { .. })));

    // Entries without an owned field have nothing to list.
    let mut sparse = pb::OwningPlugins::default();
    sparse.owners.insert("idle".into(), pb::FieldOwners::default());
    assert!(owners_to_wit(&sparse).is_empty());

    // Validation: no owners ↔ an empty list.
    let req = pb::ValidateContainerAdjustmentRequest::default();
    let event = wit::ValidationEvent::from(&req);
    assert!(event.owners.is_empty());
    assert!(pb::ValidateContainerAdjustmentRequest::try_from(event).unwrap().owners.is_none());
}

#[test]
fn replies_become_responses() {
    for seed in SEEDS {
        let create: pb::CreateContainerResponse = full(seed);
        let reply = wit::Reply::from(&create);
        let (adjust, update, evict) = reply_parts(reply.clone()).unwrap();
        assert_eq!(adjust.as_ref(), create.adjust.as_ref());
        assert_eq!((update, evict), (create.update.clone(), create.evict.clone()));
        assert_eq!(pb::CreateContainerResponse::try_from(reply).unwrap(), create);

        let update: pb::UpdateContainerResponse = full(seed);
        assert_eq!(pb::UpdateContainerResponse::try_from(wit::Reply::from(&update)).unwrap(), update);

        let stop: pb::StopContainerResponse = full(seed);
        assert_eq!(pb::StopContainerResponse::try_from(wit::Reply::from(&stop)).unwrap(), stop);
    }

    let empty = wit::Reply { adjust: None, update: vec![], evict: vec![] };
    assert_eq!(reply_parts(empty.clone()).unwrap(), (None, vec![], vec![]));
    assert_eq!(pb::CreateContainerResponse::try_from(empty.clone()).unwrap(), pb::CreateContainerResponse::default());

    let adjust = wit::ContainerAdjustment::from(&pb::ContainerAdjustment::default());
    let with_adjust = wit::Reply { adjust: Some(adjust), ..empty.clone() };
    // An empty adjustment is still an adjustment: it stays present.
    assert!(pb::CreateContainerResponse::try_from(with_adjust.clone()).unwrap().adjust.is_some());
    assert_eq!(
        pb::UpdateContainerResponse::try_from(with_adjust.clone()),
        Err(ConvertError::NotInResponse { part: "an adjustment", response: "UpdateContainerResponse" })
    );
    assert!(pb::StopContainerResponse::try_from(with_adjust).is_err());
    let evict = wit::ContainerEviction { container_id: "c".into(), reason: "r".into() };
    let with_evict = wit::Reply { evict: vec![evict], ..empty };
    assert_eq!(pb::UpdateContainerResponse::try_from(with_evict.clone()).unwrap().evict.len(), 1);
    let err = pb::StopContainerResponse::try_from(with_evict).unwrap_err();
    assert_eq!(err, ConvertError::NotInResponse { part: "evictions", response: "StopContainerResponse" });
    assert_eq!(err.to_string(), "StopContainerResponse has no place for evictions");
}
