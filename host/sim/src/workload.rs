//! Realistic pods and containers, shaped like what containerd sends.
//!
//! The captured containerd requests show what a hand-written fixture misses:
//! CRI annotations and labels, `PATH`/`HOSTNAME` first in env, args that are
//! command plus args, default mounts before bind mounts, namespace paths under
//! the pause process, swap equal to the memory limit. The generator follows
//! that shape and scales it, so large synchronisations and benchmarks see the
//! same kind of data a node does.

use nri_wasm_api::api as pb;
use protobuf::MessageField;

/// A set of pods, each with its containers.
#[derive(Debug, Clone, Default)]
pub struct Workload {
    pub pods: Vec<pb::PodSandbox>,
    pub containers: Vec<pb::Container>,
}

impl Workload {
    /// `pods` pods with `per_pod` running containers each.
    pub fn generate(pods: usize, per_pod: usize) -> Self {
        let mut w = Workload::default();
        for p in 0..pods {
            let pod = pod(p);
            for c in 0..per_pod {
                w.containers.push(container(&pod, c));
            }
            w.pods.push(pod);
        }
        w
    }
}

fn id(kind: u64, n: usize) -> String {
    format!("{:016x}{:016x}{:016x}{:016x}", kind, n as u64 * 0x9e37_79b9, 0x5eed ^ n as u64, n as u64)
}

fn opt_i64(v: i64) -> MessageField<pb::OptionalInt64> {
    MessageField::some(pb::OptionalInt64 { value: v, ..Default::default() })
}

fn opt_u64(v: u64) -> MessageField<pb::OptionalUInt64> {
    MessageField::some(pb::OptionalUInt64 { value: v, ..Default::default() })
}

/// A pod with 20 labels and 20 annotations, like a Deployment's pod.
pub fn pod(n: usize) -> pb::PodSandbox {
    let name = format!("app-{n}-7f9c5");
    let namespace = format!("team-{}", n % 7);
    let uid = format!("3b1f6c2e-8d4a-4e4b-9a57-{:012x}", n);
    let pod_id = id(1, n);
    let mut labels: Vec<(String, String)> = vec![
        ("app".into(), format!("app-{n}")),
        ("io.cri-containerd.kind".into(), "sandbox".into()),
        ("io.kubernetes.pod.name".into(), name.clone()),
        ("io.kubernetes.pod.namespace".into(), namespace.clone()),
        ("io.kubernetes.pod.uid".into(), uid.clone()),
        ("pod-template-hash".into(), "7f9c5".into()),
    ];
    labels.extend((labels.len()..20).map(|i| (format!("example.com/label-{i}"), format!("value-{i}"))));
    let mut annotations: Vec<(String, String)> = vec![
        ("io.kubernetes.cri.container-type".into(), "sandbox".into()),
        ("io.kubernetes.cri.sandbox-id".into(), pod_id.clone()),
        ("io.kubernetes.cri.sandbox-name".into(), name.clone()),
        ("io.kubernetes.cri.sandbox-namespace".into(), namespace.clone()),
        ("io.kubernetes.cri.sandbox-uid".into(), uid.clone()),
        ("io.kubernetes.cri.sandbox-memory".into(), "201326592".into()),
        ("io.kubernetes.cri.sandbox-cpu-shares".into(), "768".into()),
        ("kubernetes.io/config.source".into(), "api".into()),
    ];
    annotations
        .extend((annotations.len()..20).map(|i| (format!("example.com/note-{i}"), format!("note {i} of pod {n}"))));
    let resources = pb::LinuxResources {
        memory: MessageField::some(pb::LinuxMemory { limit: opt_i64(201_326_592), ..Default::default() }),
        cpu: MessageField::some(pb::LinuxCPU {
            shares: opt_u64(768),
            quota: opt_i64(75_000),
            period: opt_u64(100_000),
            ..Default::default()
        }),
        ..Default::default()
    };
    pb::PodSandbox {
        id: pod_id.clone(),
        name,
        uid,
        namespace,
        labels: labels.into_iter().collect(),
        annotations: annotations.into_iter().collect(),
        runtime_handler: String::new(),
        linux: MessageField::some(pb::LinuxPodSandbox {
            pod_resources: MessageField::some(resources.clone()),
            resources: MessageField::some(resources),
            cgroup_parent: "/kubepods/burstable".into(),
            cgroups_path: format!("/kubepods/burstable/{pod_id}"),
            namespaces: ["pid", "ipc", "mount"]
                .iter()
                .map(|t| pb::LinuxNamespace { type_: t.to_string(), ..Default::default() })
                .collect(),
            ..Default::default()
        }),
        pid: 20_000 + n as u32,
        ips: vec![format!("10.244.{}.{}", n / 250, n % 250 + 2)],
        ..Default::default()
    }
}

/// A container with 30 annotations, 25 env vars, 12 mounts and full Linux
/// resources.
pub fn container(pod: &pb::PodSandbox, n: usize) -> pb::Container {
    let name = format!("ctr-{n}");
    let ctr_id = format!("{}{:02x}", &pod.id[..62], n);
    let mut annotations: Vec<(String, String)> = vec![
        ("io.kubernetes.cri.container-name".into(), name.clone()),
        ("io.kubernetes.cri.container-type".into(), "container".into()),
        ("io.kubernetes.cri.image-name".into(), "registry.local/app:1".into()),
        ("io.kubernetes.cri.sandbox-id".into(), pod.id.clone()),
        ("io.kubernetes.cri.sandbox-name".into(), pod.name.clone()),
        ("io.kubernetes.cri.sandbox-namespace".into(), pod.namespace.clone()),
        ("io.kubernetes.container.restartCount".into(), "0".into()),
    ];
    annotations.extend((annotations.len()..30).map(|i| (format!("example.com/ctr-note-{i}"), format!("v{i}"))));
    let mut env = vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()];
    env.push(format!("HOSTNAME={}", pod.name));
    env.extend((env.len()..25).map(|i| format!("APP_SETTING_{i}=value-{i}")));
    let mut mounts: Vec<pb::Mount> = [
        ("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"][..]),
        ("/dev", "tmpfs", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"]),
        ("/dev/pts", "devpts", "devpts", &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]),
        ("/dev/mqueue", "mqueue", "mqueue", &["nosuid", "noexec", "nodev"]),
        ("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", "ro"]),
        ("/sys/fs/cgroup", "cgroup", "cgroup", &["nosuid", "noexec", "nodev", "relatime", "ro"]),
    ]
    .iter()
    .map(|(d, t, s, o)| pb::Mount {
        destination: d.to_string(),
        type_: t.to_string(),
        source: s.to_string(),
        options: o.iter().map(|x| x.to_string()).collect(),
        ..Default::default()
    })
    .collect();
    let sandbox = format!("/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{}", pod.id);
    for (dest, src) in [
        ("/data", format!("/var/lib/kubelet/pods/{}/volumes/data", pod.uid)),
        ("/config", format!("/var/lib/kubelet/pods/{}/volumes/config", pod.uid)),
        ("/etc/hostname", format!("{sandbox}/hostname")),
        ("/etc/hosts", format!("{sandbox}/hosts")),
        ("/etc/resolv.conf", format!("{sandbox}/resolv.conf")),
        ("/dev/shm", format!("/run/containerd/io.containerd.grpc.v1.cri/sandboxes/{}/shm", pod.id)),
    ] {
        mounts.push(pb::Mount {
            destination: dest.into(),
            type_: "bind".into(),
            source: src,
            options: vec!["rbind".into(), "rprivate".into(), "rw".into()],
            ..Default::default()
        });
    }
    let resources = pb::LinuxResources {
        memory: MessageField::some(pb::LinuxMemory {
            limit: opt_i64(536_870_912),
            reservation: opt_i64(268_435_456),
            swap: opt_i64(536_870_912),
            ..Default::default()
        }),
        cpu: MessageField::some(pb::LinuxCPU {
            shares: opt_u64(512),
            quota: opt_i64(50_000),
            period: opt_u64(100_000),
            cpus: "0-3".into(),
            mems: "0".into(),
            ..Default::default()
        }),
        pids: MessageField::some(pb::LinuxPids { limit: 4096, ..Default::default() }),
        hugepage_limits: vec![pb::HugepageLimit { page_size: "2MB".into(), limit: 0, ..Default::default() }],
        unified: [("memory.oom.group".to_string(), "1".to_string())].into_iter().collect(),
        devices: vec![pb::LinuxDeviceCgroup { allow: false, access: "rwm".into(), ..Default::default() }],
        ..Default::default()
    };
    let pause = pod.pid;
    pb::Container {
        id: ctr_id.clone(),
        pod_sandbox_id: pod.id.clone(),
        name: name.clone(),
        state: pb::ContainerState::CONTAINER_RUNNING.into(),
        labels: [
            ("io.cri-containerd.kind".to_string(), "container".to_string()),
            ("io.kubernetes.container.name".to_string(), name.clone()),
            ("io.kubernetes.pod.name".to_string(), pod.name.clone()),
            ("io.kubernetes.pod.namespace".to_string(), pod.namespace.clone()),
        ]
        .into_iter()
        .collect(),
        annotations: annotations.into_iter().collect(),
        args: vec!["/app/server".into(), "--port=8080".into(), "--log-level=info".into()],
        env,
        mounts,
        hooks: MessageField::some(pb::Hooks::default()),
        linux: MessageField::some(pb::LinuxContainer {
            namespaces: [
                ("pid", String::new()),
                ("ipc", format!("/proc/{pause}/ns/ipc")),
                ("uts", format!("/proc/{pause}/ns/uts")),
                ("mount", String::new()),
                ("network", format!("/proc/{pause}/ns/net")),
            ]
            .into_iter()
            .map(|(t, p)| pb::LinuxNamespace { type_: t.into(), path: p, ..Default::default() })
            .collect(),
            resources: MessageField::some(resources),
            oom_score_adj: MessageField::some(pb::OptionalInt { value: 937, ..Default::default() }),
            cgroups_path: format!("/kubepods/burstable/{}/{ctr_id}", pod.id),
            ..Default::default()
        }),
        pid: pause + 1 + n as u32,
        user: MessageField::some(pb::User { uid: 1000, gid: 1000, additional_gids: vec![1000], ..Default::default() }),
        ..Default::default()
    }
}
