//! Every test selection builds what the whole workspace builds: `cargo test
//! -p X` after `cargo test --workspace` reuses the latter's artifacts
//! instead of building the host again.
//!
//! Asked of cargo itself: its unit graph (`--unit-graph`, the list of
//! compilations a command would run, each with its package, target, mode,
//! features, profile and the units it links) is what a compilation's
//! fingerprint is made of. A unit of a selection that the workspace's
//! graph lacks is a compilation `cargo test -p X` would run again. The
//! flag is unstable, so the pinned toolchain's cargo is asked with
//! `RUSTC_BOOTSTRAP=1`; the test breaks, loudly, if a new toolchain changes
//! the format.
//!
//! Every member is checked with its default features and with all of them;
//! with all of them, its own units differ by design. Not checked (see
//! [`EXEMPT`]): the SDK, which cannot depend on the hack crate because
//! policy projects outside the workspace use it by path; and the small
//! crates that link neither the host nor wasmtime, whose own tests alone
//! rebuild a few small crates (tokio, syn, serde_core) with fewer
//! features, which costs seconds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Members not held to the workspace's units (see the module docs).
const EXEMPT: &[&str] = &["nri-wasm-sdk", "nri-sim", "nri-wasm-api", "nri-wasm-components", "nri-wasm-workspace-hack"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cargo(args: &[&str]) -> Vec<u8> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(&cargo)
        .current_dir(root())
        .env("RUSTC_BOOTSTRAP", "1")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cargo}: {e}"));
    assert!(out.status.success(), "cargo {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// One compilation: what it is, and the ids (see [`Ids`]) of the units it
/// links.
#[derive(Debug, Clone)]
struct Unit {
    package: String,
    what: String,
    features: String,
    deps: Vec<usize>,
}

/// One id for each distinct compilation across graphs: a unit's own fields
/// and its dependencies' ids, which stands for its fingerprint.
#[derive(Debug, Default)]
struct Ids(HashMap<(String, Vec<(String, usize)>), usize>);

impl Ids {
    fn of(&mut self, own: String, deps: Vec<(String, usize)>) -> usize {
        let next = self.0.len();
        *self.0.entry((own, deps)).or_insert(next)
    }
}

/// The units of `cargo test <selection> --no-run`, by id.
fn units(selection: &[&str], ids: &mut Ids) -> HashMap<usize, Unit> {
    let mut args = vec!["test", "--frozen", "--no-run", "--unit-graph", "-Z", "unstable-options"];
    args.extend(selection);
    let graph: Value = serde_json::from_slice(&cargo(&args)).expect("the unit graph is JSON");
    let list = graph["units"].as_array().expect("the unit graph lists units");
    let mut known: Vec<Option<usize>> = vec![None; list.len()];
    let mut out = HashMap::new();
    fn id_of(
        i: usize,
        list: &[Value],
        known: &mut Vec<Option<usize>>,
        ids: &mut Ids,
        out: &mut HashMap<usize, Unit>,
    ) -> usize {
        if let Some(id) = known[i] {
            return id;
        }
        let u = &list[i];
        let mut deps: Vec<(String, usize)> = u["dependencies"]
            .as_array()
            .expect("a unit lists its dependencies")
            .iter()
            .map(|d| {
                let index = d["index"].as_u64().expect("a dependency has an index") as usize;
                (d["extern_crate_name"].to_string(), id_of(index, list, known, ids, out))
            })
            .collect();
        deps.sort();
        let package = u["pkg_id"].as_str().unwrap_or_default().rsplit('/').next().unwrap_or_default().to_owned();
        let what = format!("{} {} ({})", u["target"]["name"], u["target"]["kind"], u["mode"]);
        let features = u["features"].to_string();
        let own = format!("{package}|{what}|{features}|{}|{}", u["profile"], u["platform"]);
        let dep_ids = deps.iter().map(|(_, id)| *id).collect();
        let id = ids.of(own, deps);
        out.insert(id, Unit { package, what, features, deps: dep_ids });
        known[i] = Some(id);
        id
    }
    for i in 0..list.len() {
        id_of(i, list, &mut known, ids, &mut out);
    }
    out
}

/// The members' names.
fn members() -> Vec<String> {
    let meta: Value = serde_json::from_slice(&cargo(&["metadata", "--frozen", "--no-deps", "--format-version", "1"]))
        .expect("cargo metadata prints JSON");
    meta["packages"]
        .as_array()
        .expect("cargo metadata lists packages")
        .iter()
        .map(|p| p["name"].as_str().expect("a package has a name").to_owned())
        .collect()
}

/// `name@version`, the end of a unit's package id.
fn name_of(package: &str) -> &str {
    let (source, tail) = package.rsplit_once('#').unwrap_or(("", package));
    match tail.split_once('@') {
        Some((name, _version)) => name,
        // `path+file:///…/foo#0.1.0`: cargo leaves the name out when it is
        // the directory's.
        None => source.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or(tail),
    }
}

#[test]
fn every_member_builds_what_the_workspace_builds() {
    let mut ids = Ids::default();
    let workspace = units(&["--workspace"], &mut ids);
    let members = members();
    assert!(members.len() > 5, "too few members found: {members:?}");
    let mut faults = BTreeSet::new();
    for member in &members {
        if EXEMPT.contains(&member.as_str()) {
            continue;
        }
        for all_features in [false, true] {
            let mut selection = vec!["-p", member.as_str()];
            if all_features {
                selection.push("--all-features");
            }
            let units = units(&selection, &mut ids);
            for (key, unit) in &units {
                // The lowest units that differ: every unit above them
                // differs for their sake.
                if workspace.contains_key(key) || !unit.deps.iter().all(|d| workspace.contains_key(d)) {
                    continue;
                }
                if all_features && name_of(&unit.package) == member {
                    continue;
                }
                let built: BTreeMap<&str, usize> = workspace
                    .values()
                    .filter(|w| w.package == unit.package && w.what == unit.what)
                    .fold(BTreeMap::new(), |mut seen, w| {
                        *seen.entry(w.features.as_str()).or_default() += 1;
                        seen
                    });
                faults.insert(format!(
                    "`cargo test {}` builds {} {} with features {} (or other dependencies); \
                     the workspace builds it with {}",
                    selection.join(" "),
                    unit.package,
                    unit.what,
                    unit.features,
                    built.keys().copied().collect::<Vec<_>>().join(" or "),
                ));
            }
        }
    }
    assert!(
        faults.is_empty(),
        "these selections would compile crates again; add the workspace's features of each to \
         tests/workspace-hack/Cargo.toml ([dependencies] for linked code, [build-dependencies] \
         for build scripts and proc-macros; `cargo tree --workspace -e features -i <crate>` \
         shows who asks for what), or make the member depend on the hack crate:\n{}",
        faults.into_iter().collect::<Vec<_>>().join("\n")
    );
}
