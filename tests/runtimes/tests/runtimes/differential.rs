//! Differential tests: the runtime's own merge of K native NRI plugins
//! against the host's merge of the same K adjustments as K wasm policies.
//!
//! Each case runs twice on the runtime `NRI_WASM_RUNTIME` names, each time
//! on a fresh node: once with K native reference plugins (indices 10, 11,
//! ...; `native-plugin/main.go`), once with one nri-wasm host running K
//! `mirror` policies (the same flags as settings, in the same order). The
//! OCI spec `crictl inspect` reports, with ids, pids, paths and other
//! per-run values replaced by placeholders, must be the same; a create that
//! fails must fail both ways. The host was written to merge as the runtime
//! does, so any difference here is either a defect of the host or a
//! behaviour of the runtime the host does not copy; the failure message
//! says exactly where the two specs differ.
//!
//! containerd applies some adjustments in Go map order (a removal and a
//! re-add of the same annotation by two plugins): a case that may hit this
//! runs several creates on the native side, and if they do not agree it is
//! reported as runtime-nondeterministic with the variants seen; the host's
//! result must then be one of them.

use std::collections::BTreeSet;
use std::path::Path;

use nri_wasm_runtimes::crictl::{Pod, PodSandbox};
use nri_wasm_runtimes::host::{Host, HostConfig};
use nri_wasm_runtimes::images;
use nri_wasm_runtimes::native::{self, Adjustments, NativePlugin};
use nri_wasm_runtimes::runtime::{Node, RuntimeKind};
use serde_json::{json, Value};

fn host_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_nri-wasm-host"))
}

/// What the CRI asks for, before any plugin: busybox sleeping, env, an
/// annotation and a read-only mount of its own, as a kubelet would send.
#[derive(Debug, Clone)]
struct Cri {
    env: Vec<(&'static str, &'static str)>,
    annotations: Vec<(&'static str, &'static str)>,
    /// container path, host path.
    mounts: Vec<(&'static str, &'static str)>,
    memory_limit: Option<i64>,
}

impl Default for Cri {
    fn default() -> Self {
        Cri {
            env: vec![("FROM_CRI", "1"), ("SHARED", "cri")],
            annotations: vec![("example.com/from-cri", "1")],
            mounts: vec![("/data", "/usr/share")],
            memory_limit: None,
        }
    }
}

/// One differential case.
#[derive(Debug)]
struct Case {
    name: &'static str,
    /// One entry per plugin (native) or policy (wasm), in index order.
    plugins: Vec<Adjustments>,
    cri: Cri,
    /// Creates on the native side, to see whether the runtime agrees with
    /// itself (1 for cases it is deterministic in).
    native_runs: usize,
    /// A running container named `victim` is created first (after the
    /// plugins are there), and its spec is compared too.
    victim: bool,
    /// Paths of the compared value (`/container/annotations/<key>`) where
    /// the runtime is known to decide by Go map order; results may differ
    /// there, and only there.
    racy: &'static [&'static str],
}

impl Case {
    fn new(name: &'static str, plugins: Vec<Adjustments>) -> Self {
        Case { name, plugins, cri: Cri::default(), native_runs: 1, victim: false, racy: &[] }
    }
}

/// What one create gave: a normalised spec (with the victim's, if any), or
/// crictl's error.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Created(Value),
    Failed(String),
}

impl Outcome {
    fn describe(&self) -> String {
        match self {
            Outcome::Created(v) => format!("created: {}", serde_json::to_string_pretty(v).expect("json")),
            Outcome::Failed(e) => format!("failed: {e}"),
        }
    }
}

/// Runs the case's creates on one side of the comparison.
struct Side<'a> {
    node: &'a Node,
    pod: PodSandbox,
    pod_uid: String,
}

impl<'a> Side<'a> {
    fn new(node: &'a Node) -> Self {
        let pod = node.crictl.run_pod(&Pod::new("diff")).unwrap_or_else(|e| panic!("running the pod: {e}"));
        let inspect = node.crictl.run(&["inspectp", "-o", "json", &pod.id]).expect("crictl inspectp");
        let inspect: Value = serde_json::from_str(&inspect).expect("inspectp json");
        let pod_uid = inspect.pointer("/status/metadata/uid").and_then(Value::as_str).expect("pod uid").to_string();
        Side { node, pod, pod_uid }
    }

    /// Creates container `name` (attempt `attempt`): its id, or crictl's error.
    fn create(&self, name: &str, attempt: usize, cri: &Cri) -> Result<String, String> {
        let mut resources = serde_json::Map::new();
        if let Some(m) = cri.memory_limit {
            resources.insert("memory_limit_in_bytes".into(), json!(m));
        }
        let config = json!({
            "metadata": { "name": name, "attempt": attempt },
            "image": { "image": images::BUSYBOX },
            "command": ["/bin/sleep", "100000"],
            "envs": cri.env.iter().map(|(k, v)| json!({ "key": k, "value": v })).collect::<Vec<_>>(),
            "annotations": cri.annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "mounts": cri.mounts.iter().map(|(c, h)| json!({ "container_path": c, "host_path": h, "readonly": true })).collect::<Vec<_>>(),
            "log_path": format!("{name}-{attempt}.log"),
            // As the kubelet: CRI-O names the container to plugins from this
            // label, and a PID namespace per container runs pods without the
            // infra container this machine cannot start (crictl.rs).
            "labels": { "io.kubernetes.container.name": name },
            "linux": {
                "resources": resources,
                "security_context": { "namespace_options": { "network": 2, "pid": 1 } },
            },
        });
        let path = self.node.dir().join(format!("differential-{name}-{attempt}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("writing the container config");
        let (cp, pp) = (path.to_string_lossy().into_owned(), self.pod.config.to_string_lossy().into_owned());
        self.node.crictl.run(&["create", "--no-pull", &self.pod.id, &cp, &pp]).map_err(|e| e.to_string())
    }

    /// The spec of container `id` with every per-run value replaced.
    fn spec(&self, id: &str) -> Value {
        let spec = self.node.crictl.spec(id).unwrap_or_else(|e| panic!("crictl inspect {id}: {e}"));
        let mut text = serde_json::to_string(&spec).expect("json");
        for (value, placeholder) in [
            (id, "<container-id>"),
            (self.pod.id.as_str(), "<pod-id>"),
            (self.pod_uid.as_str(), "<pod-uid>"),
            (&*self.node.dir().to_string_lossy(), "<node-dir>"),
            (self.node.cgroup_parent(), "<cgroup-parent>"),
        ] {
            text = text.replace(value, placeholder);
        }
        let mut spec: Value = serde_json::from_str(&replace_pids(&text)).expect("normalised spec");
        if self.node.kind() == RuntimeKind::Crio {
            nri_wasm_runtimes::crio::normalize_spec(&mut spec);
        }
        spec
    }

    /// One create of the case's container `c` (with attempt `attempt`).
    fn outcome(&self, attempt: usize, cri: &Cri, victim: Option<&str>) -> Outcome {
        match self.create("c", attempt, cri) {
            Err(e) => Outcome::Failed(e),
            Ok(id) => {
                let mut v = json!({ "container": self.spec(&id) });
                if let Some(victim) = victim {
                    v["victim"] = self.spec_as_victim(victim);
                }
                Outcome::Created(v)
            }
        }
    }

    fn spec_as_victim(&self, id: &str) -> Value {
        let spec = self.spec(id);
        serde_json::from_str(&serde_json::to_string(&spec).expect("json").replace("<container-id>", "<victim-id>"))
            .expect("json")
    }

    /// The running container `victim`, created before the case's container.
    fn victim(&self, cri: &Cri) -> String {
        let id = self.create("victim", 0, cri).unwrap_or_else(|e| panic!("creating the victim: {e}"));
        self.node.crictl.start(&id).unwrap_or_else(|e| panic!("starting the victim: {e}"));
        id
    }
}

/// `/proc/<digits>/` becomes `/proc/<pid>/`.
fn replace_pids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("/proc/") {
        out.push_str(&rest[..i + 6]);
        rest = &rest[i + 6..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with('/') {
            out.push_str("<pid>");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

fn start_node() -> Node {
    Node::start().unwrap_or_else(|e| panic!("starting the runtime: {e}"))
}

/// Waits until the runtime has plugin `full_name` in its list.
fn wait_runtime_synchronized(node: &Node, full_name: &str) {
    let log = node.runtime_log();
    let needle = format!("plugin \\\"{full_name}\\\" connected and synchronized");
    nri_wasm_runtimes::wait_for(
        &format!("the runtime synchronizing {full_name}"),
        std::time::Duration::from_secs(60),
        || (log.count(&needle) > 0).then_some(()),
    )
    .unwrap_or_else(|e| panic!("{e}: {}", log.tail(20)));
}

/// The native side: K native plugins, `runs` creates.
fn run_native(case: &Case) -> Vec<Outcome> {
    let node = start_node();
    let bin = native::binary(node.kind()).unwrap_or_else(|e| panic!("{e}"));
    let mut plugins = Vec::new();
    for (i, adjustments) in case.plugins.iter().enumerate() {
        let idx = format!("{}", 10 + i);
        let name = format!("p{i}");
        let mut p =
            NativePlugin::start(&bin, node.dir(), &node.nri_socket(), (&idx, &name), adjustments, &node.runtime_log())
                .unwrap_or_else(|e| panic!("starting native plugin {i}: {e}"));
        p.wait_synchronized().unwrap_or_else(|e| panic!("{e}"));
        plugins.push(p);
    }
    let side = Side::new(&node);
    let victim = case.victim.then(|| side.victim(&case.cri));
    let outcomes = (0..case.native_runs).map(|r| side.outcome(r, &case.cri, victim.as_deref())).collect();
    drop(plugins);
    outcomes
}

/// Every dangerous capability (`docs/configuration.md`, `grant`).
const GRANT_EVERYTHING: &str =
    "grant = [\"mounts\", \"hooks\", \"devices\", \"cdi-devices\", \"namespaces\", \"seccomp\", \
                                \"sysctl\", \"net-devices\", \"cgroups-path\", \"updates\", \"evictions\", \"cgroup-files\", \"oom-protect\", \
                                \"rlimits-raise\", \"realtime\", \"runtime-annotations\", \"resctrl\", \"swap-raise\", \"cpuset-any\"]\n";

/// The wasm side: one host, K `mirror` policies in the same order.
fn run_wasm(case: &Case, runs: usize) -> Vec<Outcome> {
    let node = start_node();
    let config = HostConfig::new(host_bin(), node.dir(), &node.nri_socket());
    let policies = config.policy_dir();
    for (i, adjustments) in case.plugins.iter().enumerate() {
        // The mirror guest declares nothing; it answers with whatever the
        // case asks for, so it is granted every capability the native
        // plugins have.
        let toml =
            format!("on-error = \"fail\"\n{GRANT_EVERYTHING}settings = {}\n", toml_string(&adjustments.settings()));
        policies
            .install(&format!("{}-p{i}", 10 + i), Path::new(nri_wasm_test_support::guests::MIRROR), &toml)
            .unwrap_or_else(|e| panic!("installing policy {i}: {e}"));
    }
    let mut host = Host::start(&config).unwrap_or_else(|e| panic!("starting the host: {e}"));
    let k = case.plugins.len();
    host.wait_status("every mirror policy loaded and the host registered", |s| {
        s["registered"].as_bool() == Some(true)
            && s["chain_loaded"].as_bool() == Some(true)
            && s["policies"].as_array().is_some_and(|p| p.len() == k && p.iter().all(|p| p["status"] == "loaded"))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", host.log().tail(30)));
    wait_runtime_synchronized(&node, "10-nri-wasm");
    let side = Side::new(&node);
    let victim = case.victim.then(|| side.victim(&case.cri));
    let outcomes = (0..runs).map(|r| side.outcome(r, &case.cri, victim.as_deref())).collect();
    host.stop();
    outcomes
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("json string")
}

/// Where two JSON values differ: one line per differing path, the values
/// labelled `labels`.
fn differences(labels: (&str, &str), path: &str, a: &Value, b: &Value, out: &mut Vec<(String, String)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                differences(labels, &format!("{path}/{k}"), va, vb, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(labels, &format!("{path}/{i}"), va, vb, out);
            }
        }
        _ if a != b => out.push((path.to_string(), format!("{path}: {} {a} | {} {b}", labels.0, labels.1))),
        _ => {}
    }
}

fn diff(native: &Outcome, wasm: &Outcome) -> String {
    diff_labelled(("native", "wasm"), native, wasm)
}

fn diff_labelled(labels: (&str, &str), a: &Outcome, b: &Outcome) -> String {
    match (a, b) {
        (Outcome::Created(x), Outcome::Created(y)) => {
            let mut out = Vec::new();
            differences(labels, "", x, y, &mut out);
            out.into_iter().map(|(_, line)| line).collect::<Vec<_>>().join("\n")
        }
        _ => format!("{} {}\n{} {}", labels.0, a.describe(), labels.1, b.describe()),
    }
}

/// The distinct outcomes among `all`, each with how often it was seen.
fn variants(all: &[Outcome]) -> Vec<(&Outcome, usize)> {
    let mut out: Vec<(&Outcome, usize)> = Vec::new();
    for o in all {
        match out.iter_mut().find(|(v, _)| *v == o) {
            Some((_, n)) => *n += 1,
            None => out.push((o, 1)),
        }
    }
    out
}

/// The paths at which two created outcomes differ.
fn differing_paths(a: &Outcome, b: &Outcome) -> Vec<String> {
    match (a, b) {
        (Outcome::Created(x), Outcome::Created(y)) => {
            let mut out = Vec::new();
            differences(("", ""), "", x, y, &mut out);
            out.into_iter().map(|(path, _)| path).collect()
        }
        _ => vec!["<created or failed>".into()],
    }
}

/// Runs `case` both ways and compares; the verdict is printed either way.
fn check(case: Case) -> Outcome {
    let natives = run_native(&case);
    let wasms = run_wasm(&case, case.native_runs);
    let (nv, wv) = (variants(&natives), variants(&wasms));
    // One variant each way is the common case and must then be equal, except
    // where the case names paths decided by the runtime's map order: there a
    // run of identical draws on one side says nothing, so the variant rules
    // below judge it.
    let agree_or_strict = nv.len() == 1 && wv.len() == 1 && (nv[0].0 == wv[0].0 || case.racy.is_empty());
    if agree_or_strict {
        let (native, wasm) = (nv[0].0, wv[0].0);
        match (native, wasm) {
            (Outcome::Failed(n), Outcome::Failed(w)) => {
                eprintln!("case {}: failed both ways\n  native: {n}\n  wasm:   {w}", case.name);
            }
            _ => {
                assert!(native == wasm, "case {}: native and wasm differ:\n{}", case.name, diff(native, wasm));
                eprintln!("case {}: equal", case.name);
            }
        }
        return wasm.clone();
    }
    // The runtime did not agree with itself (on either side): report the
    // variants, and require that they differ only where the case says the
    // runtime's map order decides.
    let counts = |v: &[(&Outcome, usize)]| v.iter().map(|(_, n)| n.to_string()).collect::<Vec<_>>().join("+");
    eprintln!(
        "case {}: runtime-nondeterministic: native {} creates gave {} variants ({}), wasm {} creates gave {} ({})",
        case.name,
        natives.len(),
        nv.len(),
        counts(&nv),
        wasms.len(),
        wv.len(),
        counts(&wv)
    );
    let mut all: Vec<&Outcome> = Vec::new();
    for (o, _) in nv.iter().chain(&wv) {
        if !all.contains(o) {
            all.push(o);
        }
    }
    let seen = |v: &[(&Outcome, usize)], o: &Outcome| v.iter().find(|(x, _)| *x == o).map_or(0, |(_, n)| *n);
    for (i, o) in all.iter().enumerate() {
        eprintln!("  variant {i}: native {}/{}, wasm {}/{}", seen(&nv, o), natives.len(), seen(&wv, o), wasms.len());
        if i == 0 {
            continue;
        }
        eprintln!("{}", diff_labelled(("variant 0", &format!("variant {i}")), all[0], o));
        for path in differing_paths(all[0], o) {
            assert!(
                case.racy.contains(&path.as_str()),
                "case {}: results differ at {path}, which is not where the runtime is known to be \
                 nondeterministic ({:?}):\n{}",
                case.name,
                case.racy,
                diff_labelled(("variant 0", &format!("variant {i}")), all[0], o)
            );
        }
    }
    wv[0].0.clone()
}

fn adj() -> Adjustments {
    Adjustments::new()
}

fn spec_of(o: &Outcome) -> &Value {
    match o {
        Outcome::Created(v) => &v["container"],
        Outcome::Failed(e) => panic!("expected a container, the create failed: {e}"),
    }
}

fn env_of(o: &Outcome) -> Vec<String> {
    spec_of(o)["process"]["env"].as_array().expect("env").iter().filter_map(|e| Some(e.as_str()?.to_string())).collect()
}

#[test]
fn env_set_by_two_plugins() {
    let o = check(Case::new("env-set", vec![adj().env_set("A", "1"), adj().env_set("B", "2")]));
    let env = env_of(&o);
    assert!(env.contains(&"A=1".into()) && env.contains(&"B=2".into()), "{env:?}");
}

#[test]
fn env_override_by_a_later_plugin() {
    // A later plugin takes over a variable by removing it first; SHARED is
    // also set by the CRI config.
    let o = check(Case::new(
        "env-override",
        vec![
            adj().env_set("FOO", "a").env_remove("SHARED").env_set("SHARED", "p0"),
            adj().env_remove("FOO").env_set("FOO", "b"),
        ],
    ));
    let env = env_of(&o);
    assert!(env.contains(&"FOO=b".into()), "{env:?}");
}

#[test]
fn env_removal() {
    // One set by an earlier plugin, removed by a later one.
    let o = check(Case::new("env-removal", vec![adj().env_set("GONE", "1"), adj().env_remove("GONE")]));
    assert!(!env_of(&o).iter().any(|e| e.starts_with("GONE=")), "{:?}", env_of(&o));
}

#[test]
fn env_removal_of_a_cri_variable() {
    // Known on containerd 2.3.4: a plugin's removal of a variable the CRI
    // config set leaves it in the spec. Equal means the host does the same.
    let o = check(Case::new("env-removal-of-cri", vec![adj().env_remove("FROM_CRI"), adj().env_set("OTHER", "1")]));
    let kept = env_of(&o).iter().any(|e| e.starts_with("FROM_CRI="));
    eprintln!("case env-removal-of-cri: FROM_CRI {} the spec", if kept { "stays in" } else { "is gone from" });
}

#[test]
fn env_conflict_fails_both_ways() {
    let o = check(Case::new("env-conflict", vec![adj().env_set("FOO", "a"), adj().env_set("FOO", "b")]));
    assert!(matches!(o, Outcome::Failed(_)), "{}", o.describe());
}

#[test]
fn annotations_set_and_removed() {
    let o = check(Case::new(
        "annotations",
        vec![
            adj().annotation_set("example.com/a", "1").annotation_remove("example.com/from-cri"),
            adj().annotation_set("example.com/b", "2").annotation_remove("example.com/never-set"),
        ],
    ));
    assert_eq!(spec_of(&o)["annotations"]["example.com/a"], "1");
}

#[test]
fn annotation_removed_then_readded_by_a_later_plugin() {
    // Known: containerd applies this in Go map order.
    let mut case = Case::new(
        "annotation-readd",
        vec![
            adj().annotation_set("example.com/x", "1"),
            adj().annotation_remove("example.com/x").annotation_set("example.com/x", "2"),
        ],
    );
    case.native_runs = 12;
    case.racy = &["/container/annotations/example.com/x"];
    check(case);
}

#[test]
fn annotation_of_the_cri_removed_then_readded() {
    let mut case = Case::new(
        "annotation-cri-readd",
        vec![adj().annotation_remove("example.com/from-cri"), adj().annotation_set("example.com/from-cri", "p1")],
    );
    case.native_runs = 12;
    case.racy = &["/container/annotations/example.com/from-cri"];
    check(case);
}

#[test]
fn mounts_over_a_cri_mount_and_nested() {
    check(Case::new(
        "mounts",
        vec![
            adj().mount_add("/data", "/usr/lib", &["ro", "rbind"]).mount_add("/data/nested", "/usr/bin", &["rbind"]),
            adj().mount_add("/extra", "/usr/sbin", &["ro", "rbind"]).mount_add("/extra/deeper/more", "/usr/lib", &[]),
        ],
    ));
}

#[test]
fn mount_removal() {
    check(Case::new(
        "mount-removal",
        vec![
            adj().mount_add("/added", "/usr/lib", &["ro", "rbind"]),
            adj().mount_remove("/added").mount_remove("/data"),
        ],
    ));
}

#[test]
fn memory_cpu_pids_resources() {
    let o = check(Case::new(
        "resources",
        vec![adj().memory_limit(200 << 20).cpu_shares(512), adj().cpu_quota(50_000).cpu_period(100_000).pids_limit(64)],
    ));
    assert_eq!(spec_of(&o)["linux"]["resources"]["memory"]["limit"], 200 << 20);
}

#[test]
fn rlimits() {
    check(Case::new(
        "rlimits",
        vec![
            adj().rlimit("RLIMIT_NOFILE", 1024, 4096),
            adj().rlimit("RLIMIT_NPROC", 100, 200).rlimit("RLIMIT_CORE", 0, 0),
        ],
    ));
}

#[test]
fn devices() {
    check(Case::new(
        "devices",
        vec![
            adj().device_add("/dev/xnull", "c", 1, 3, Some(0o666)).device_add("/dev/xzero", "c", 1, 5, None),
            adj().device_remove("/dev/xzero").device_add("/dev/xrandom", "c", 1, 8, Some(0o644)),
        ],
    ));
}

#[test]
fn hooks() {
    check(Case::new(
        "hooks",
        vec![
            adj().hook("prestart", "/bin/true", &["a", "b"]).hook("poststop", "/bin/true", &[]),
            adj().hook("prestart", "/bin/false", &[]).hook("create-runtime", "/bin/true", &["x"]),
        ],
    ));
}

#[test]
fn memory_conflict_fails_both_ways() {
    let o = check(Case::new("memory-conflict", vec![adj().memory_limit(100 << 20), adj().memory_limit(100 << 20)]));
    assert!(matches!(o, Outcome::Failed(_)), "{}", o.describe());
}

#[test]
fn update_of_another_container() {
    let mut case = Case::new(
        "update-other",
        vec![adj().env_set("A", "1"), adj().update("victim", &[("memory-limit", 300 << 20), ("cpu-shares", 256)])],
    );
    case.victim = true;
    let o = check(case);
    let Outcome::Created(v) = &o else { panic!("{}", o.describe()) };
    assert_eq!(v["victim"]["linux"]["resources"]["memory"]["limit"], 300 << 20, "the victim's spec: {:#}", v["victim"]);
}
