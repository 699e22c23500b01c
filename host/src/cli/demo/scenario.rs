//! The demo's node: what is running before the plugin connects, and the
//! pods that arrive afterwards, each made to show one policy at work.
//!
//! The pods are the simulator's realistic ones (20 labels, 20 annotations,
//! a container with 25 env variables, 12 mounts and full resources), renamed
//! and annotated the way their users would ask for what the policies give.

use nri_sim::workload;
use nri_wasm_api::api as pb;

/// What the built-in chain should do with a scenario's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expect {
    /// Created, changed by (at least) these policies, named without their
    /// `NN-` prefix.
    Created(&'static [&'static str]),
    /// Refused, by this policy.
    Denied(&'static str),
    /// Refused because this policy's reply needs a capability its settings
    /// file does not grant: (policy, capability).
    Ungranted(&'static str, &'static str),
}

/// One pod of the demo, with one container.
#[derive(Debug, Clone)]
pub(super) struct Scenario {
    /// What the pod shows, in a few words.
    pub shows: String,
    pub pod: pb::PodSandbox,
    pub container: pb::Container,
    /// What the built-in chain should do; `None` for pods of a file, which
    /// nothing is expected of.
    pub expect: Option<Expect>,
    /// Stopped and removed at the end of the demo.
    pub removed_at_end: bool,
}

/// The pods running on the node before the plugin connects (it learns of
/// them in Synchronize).
pub(super) fn existing() -> (Vec<pb::PodSandbox>, Vec<pb::Container>) {
    let mut pods = Vec::new();
    let mut containers = Vec::new();
    for (n, (name, ctr)) in
        [("coredns-5d78c9869d-x2kq4", "coredns"), ("kube-proxy-7xk2p", "kube-proxy")].into_iter().enumerate()
    {
        let mut pod = workload::pod(900 + n);
        rename_pod(&mut pod, "kube-system", name);
        let mut c = workload::container(&pod, 0);
        rename_container(&mut c, ctr);
        c.state = pb::ContainerState::CONTAINER_RUNNING.into();
        pods.push(pod);
        containers.push(c);
    }
    (pods, containers)
}

/// The pods that arrive while the demo runs, in order.
pub(super) fn arriving(cpus: usize) -> Vec<Scenario> {
    let mut out = Vec::new();
    let mut add = |shows, ns, name, ctr: &str, edit: &dyn Fn(&mut pb::PodSandbox, &mut pb::Container), expect| {
        let mut pod = workload::pod(100 + out.len());
        rename_pod(&mut pod, ns, name);
        let mut container = workload::container(&pod, 0);
        rename_container(&mut container, ctr);
        edit(&mut pod, &mut container);
        out.push(Scenario { shows: String::from(shows), pod, container, expect: Some(expect), removed_at_end: false });
    };
    add(
        "pod labels and annotations become environment variables",
        "shop",
        "storefront-6c9f7b-kx2lp",
        "web",
        &|pod, _| {
            label(pod, "app", "storefront");
            label(pod, "tier", "frontend");
            label(pod, "app.kubernetes.io/version", "1.4.2");
            annotate(pod, "example.com/owner", "team-shop");
        },
        Expect::Created(&["pod-metadata-env"]),
    );
    add(
        "a build pod asks for more open files, /dev/fuse and the shared cache",
        "ci",
        "image-build-41-8h2jd",
        "builder",
        &|pod, _| {
            annotate(pod, "ulimits.example.com/builder.nofile", "soft=16384,hard=65536");
            annotate(pod, "devices.example.com/builder.devices", "/dev/fuse");
            annotate(pod, "devices.example.com/builder.mounts", "shared-cache");
        },
        Expect::Created(&["ulimit-adjuster", "device-injector"]),
    );
    add(
        "a backend pod of the payments team gets the audit hook, and opts in to hooks",
        "payments",
        "ledger-api-74d9c5-qq7zt",
        "api",
        &|pod, _| {
            label(pod, "tier", "backend");
            annotate(pod, "adjustments.example.com/allow", "hooks");
        },
        Expect::Created(&["hook-injector"]),
    );
    add(
        "the same hook on a pod that did not opt in: the validator refuses it",
        "payments",
        "ledger-worker-5b8f6d-m4n9c",
        "worker",
        &|pod, _| label(pod, "tier", "backend"),
        Expect::Denied("adjustment-validator"),
    );
    add(
        "an offline batch pod is created with the offline QoS class",
        "analytics",
        "nightly-report-29184-zt5wq",
        "report",
        &|pod, _| annotate(pod, "qos.example.com/class", "offline"),
        Expect::Created(&["qos-class"]),
    );
    add(
        "a database asks for a CPU of its own; every other container's cpuset shrinks",
        "shop",
        "orders-db-0",
        "postgres",
        &|pod, _| annotate(pod, "exclusive-cpus.nri-wasm.io/count", "1"),
        match cpus {
            0 | 1 => Expect::Denied("exclusive-cpus"),
            _ => Expect::Created(&["exclusive-cpus"]),
        },
    );
    add(
        "offline work that yields while latency-critical work runs",
        "analytics",
        "log-compactor-7f5d9-2hx8r",
        "compactor",
        &|pod, _| label(pod, "qos.nri-wasm.io/class", "offline"),
        Expect::Created(&[]),
    );
    add(
        "latency-critical work starts: the offline container is throttled",
        "shop",
        "search-5c7d8b-w8p2k",
        "search",
        &|pod, _| label(pod, "qos.nri-wasm.io/class", "latency-critical"),
        Expect::Created(&[]),
    );
    add(
        "a debug pod mounts the runtime's socket: refused",
        "default",
        "debug-shell",
        "shell",
        &|_, c| {
            c.mounts.push(pb::Mount {
                destination: "/run/containerd/containerd.sock".into(),
                type_: "bind".into(),
                source: "/run/containerd/containerd.sock".into(),
                options: vec!["rbind".into(), "rw".into()],
                ..Default::default()
            })
        },
        Expect::Denied("deny-host-sockets"),
    );
    add(
        "a pod asks for /dev/mem, which the allow-list does not have: refused",
        "ci",
        "kernel-probe-4k2m1",
        "probe",
        &|pod, _| annotate(pod, "devices.example.com/probe.devices", "/dev/mem"),
        Expect::Denied("device-injector"),
    );
    add(
        "a pod asks for a CDI GPU: allowed by the policy, but the demo's operator granted it no cdi-devices",
        "ml",
        "trainer-5f7c8d-w9x2q",
        "trainer",
        &|pod, _| annotate(pod, "devices.example.com/trainer.cdi", "vendor.com/gpu=0"),
        Expect::Ungranted("device-injector", "cdi-devices"),
    );
    for s in &mut out {
        s.removed_at_end = matches!(s.container.name.as_str(), "search" | "postgres");
    }
    out
}

/// An ordinary pod of the workload, beyond the scenarios.
pub(super) fn ordinary(n: usize) -> Scenario {
    let pod = workload::pod(200 + n);
    let container = workload::container(&pod, 0);
    Scenario {
        shows: "an ordinary pod".into(),
        pod,
        container,
        expect: Some(Expect::Created(&["pod-metadata-env"])),
        removed_at_end: false,
    }
}

/// The pods of a file to play instead of the built-in ones: CreateContainer
/// requests in NRI's JSON, `{"event": "CreateContainer", "request": {...}}`
/// as `eval --input` reads them (one per line, or pretty-printed one after
/// another). Nothing is expected of them.
pub(super) fn from_file(path: &std::path::Path) -> Result<Vec<Scenario>, PodsFileError> {
    let err = |why: String| PodsFileError { path: path.to_path_buf(), why };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    for (i, value) in serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>().enumerate() {
        let value = value.map_err(|e| err(format!("document {}: {e}", i + 1)))?;
        let doc = crate::nri::record::parse_document(&value.to_string(), None)
            .map_err(|e| err(format!("document {}: {e}", i + 1)))?;
        let crate::nri::record::Request::CreateContainer(req) = doc.request else {
            return Err(err(format!(
                "document {}: a {} request; the demo plays CreateContainer requests (a pod and its container)",
                i + 1,
                doc.request.name()
            )));
        };
        let (Some(pod), Some(container)) = (req.pod.into_option(), req.container.into_option()) else {
            return Err(err(format!("document {}: the request needs a pod and a container", i + 1)));
        };
        out.push(Scenario {
            shows: format!("from {}", path.display()),
            pod,
            container,
            expect: None,
            removed_at_end: false,
        });
    }
    if out.is_empty() {
        return Err(err("no CreateContainer request in it".into()));
    }
    Ok(out)
}

/// A pods file the demo cannot play.
#[derive(Debug, thiserror::Error)]
#[error("pods file {}: {why}", path.display())]
pub(super) struct PodsFileError {
    pub path: std::path::PathBuf,
    pub why: String,
}

fn rename_pod(pod: &mut pb::PodSandbox, namespace: &str, name: &str) {
    let (old_ns, old_name) = (pod.namespace.clone(), pod.name.clone());
    pod.namespace = namespace.into();
    pod.name = name.into();
    for v in pod.labels.values_mut().chain(pod.annotations.values_mut()) {
        if *v == old_ns {
            *v = namespace.into();
        } else if *v == old_name {
            *v = name.into();
        }
    }
    let app = name.rsplitn(3, '-').last().unwrap_or(name).to_string();
    pod.labels.insert("app".into(), app);
}

fn rename_container(c: &mut pb::Container, name: &str) {
    c.name = name.into();
    c.annotations.insert("io.kubernetes.cri.container-name".into(), name.into());
}

fn label(pod: &mut pb::PodSandbox, key: &str, value: &str) {
    pod.labels.insert(key.into(), value.into());
}

fn annotate(pod: &mut pb::PodSandbox, key: &str, value: &str) {
    pod.annotations.insert(key.into(), value.into());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_are_distinct_pods_with_their_names() {
        let all = arriving(4);
        let mut ids: Vec<_> = all.iter().map(|s| s.container.id.clone()).collect();
        ids.extend(existing().1.into_iter().map(|c| c.id));
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "container ids collide");
        for s in &all {
            assert_eq!(s.container.pod_sandbox_id, s.pod.id);
            assert_eq!(s.container.annotations["io.kubernetes.cri.container-name"], s.container.name);
            assert_eq!(s.pod.labels["io.kubernetes.pod.namespace"], s.pod.namespace);
        }
        assert_eq!(arriving(1)[5].expect, Some(Expect::Denied("exclusive-cpus")));
    }
}
