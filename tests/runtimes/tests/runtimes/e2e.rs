//! End-to-end on the runtime `NRI_WASM_RUNTIME` names (containerd 2.3.4 by
//! default): the host as an operator runs it, pods and containers created
//! with crictl, and what the policies did read back from the OCI spec the
//! runtime made and from inside the running container.

use std::path::Path;

use nri_wasm_runtimes::crictl::{env_value, spec_env, Container, Pod};
use nri_wasm_runtimes::host::{Host, HostConfig};
use nri_wasm_runtimes::runtime::Node;

fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_nri-wasm-host"))
}

fn node() -> Node {
    Node::start().unwrap_or_else(|e| panic!("starting the runtime: {e}"))
}

/// The `policy.toml` an example ships.
fn example_toml(name: &str) -> &'static str {
    nri_wasm_components::examples::POLICY_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("example {name} has no policy.toml"))
}

/// The pod the pod-metadata-env example maps to three variables.
fn billing_pod(name: &str) -> Pod {
    Pod::new(name).label("app", "billing").label("tier", "backend").annotation("example.com/owner", "team-payments")
}

#[test]
fn adjustments_reach_the_spec_and_the_running_container() {
    let node = node();
    let config = HostConfig::new(host_bin(), node.dir(), &node.nri_socket());
    config
        .policy_dir()
        .install(
            "60-pod-metadata-env",
            Path::new(nri_wasm_components::examples::POD_METADATA_ENV),
            example_toml("pod-metadata-env"),
        )
        .unwrap();
    let mut host = Host::start(&config).unwrap();
    host.wait_registered().unwrap();

    let pod = node.crictl.run_pod(&billing_pod("billing")).unwrap();
    let id = node.crictl.create_and_start(&pod, &Container::sleeper("worker")).unwrap();

    let spec = node.crictl.spec(&id).unwrap();
    for (name, value) in
        [("APP_NAME", "billing"), ("POD_TIER", "backend"), ("TEAM", "team-payments"), ("FROM_CRI", "1")]
    {
        assert_eq!(
            spec_env(&spec, name).as_deref(),
            Some(value),
            "{name} in the OCI spec: {:#}",
            spec["process"]["env"]
        );
    }
    let env = node.crictl.exec(&id, &["env"]).unwrap();
    for (name, value) in [("APP_NAME", "billing"), ("POD_TIER", "backend"), ("TEAM", "team-payments")] {
        assert_eq!(env_value(&env, name).as_deref(), Some(value), "{name} in the container's environment:\n{env}");
    }
    assert_eq!(node.runtime_log().count(nri_wasm_runtimes::log::CLOSING_PLUGIN), 0, "{}", node.runtime_log().tail(20));
}
