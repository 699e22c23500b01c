//! Generates the SDK's per-event plumbing from the WIT.
//!
//! The events a policy can see are the cases of the WIT enum `event-kind`
//! (`wit/types.wit`). Everything in the SDK that lists them, once per
//! event, is written here from that enum, so that an event added to the WIT
//! reaches Rust authors without a hand-kept list to forget (Go's and
//! JavaScript's bindings are generated from the same WIT):
//! - `ALL_EVENTS` and `LIFECYCLE_EVENTS`, in the enum's order;
//! - `event_name`, each kind's WIT name;
//! - the `Policy` trait's handler methods, one per event with a default that
//!   changes nothing (the `policy_trait!` macro adds them to the trait that
//!   `policy.rs` writes);
//! - `__handle`, the dispatch from the `handle` export to those methods;
//! - `WholeEvent::kind`, from the WIT variant `event`, whose cases must be
//!   `event-kind`'s.
//!
//! Two events are steps rather than lifecycle events (`STEPS`), and one of
//! them is handled without an event to read (`NO_EVENT`): the script fails
//! if the WIT no longer has them, rather than generate something else.
//!
//! The matches it writes are exhaustive over the `EventKind` that
//! `wit_bindgen::generate!` makes from the same file, so the two cannot
//! disagree and compile.

use std::fmt::Write as _;
use std::path::PathBuf;

/// The events that are not pod or container lifecycle events.
const STEPS: [&str; 2] = ["validate-container-adjustment", "synchronize"];
/// The event whose handler takes no event (the node view holds what it reports).
const NO_EVENT: &str = "synchronize";

struct Case {
    /// WIT name, `create-container`.
    name: String,
    /// Its documentation in the WIT, if any.
    docs: Option<String>,
    /// For a case of a variant: whether it carries a value.
    payload: bool,
}

impl Case {
    /// `CreateContainer`, as `wit-bindgen` names the enum's case.
    fn variant(&self) -> String {
        self.name
            .split('-')
            .map(|w| {
                let mut c = w.chars();
                c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
            })
            .collect()
    }

    /// `create_container`, the trait method's name.
    fn method(&self) -> String {
        self.name.replace('-', "_")
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    // The same directory `wit_bindgen::generate!` reads (lib.rs).
    let wit = manifest.join("../../wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(&wit).unwrap_or_else(|e| panic!("{}: {e:#}", wit.display()));
    let cases: Vec<Case> = match find(&resolve, package, "event-kind") {
        wit_parser::TypeDefKind::Enum(e) => e
            .cases
            .iter()
            .map(|c| Case { name: c.name.clone(), docs: c.docs.contents.clone(), payload: false })
            .collect(),
        _ => panic!("{}: event-kind is not an enum", wit.display()),
    };
    for name in STEPS {
        assert!(cases.iter().any(|c| c.name == name), "{}: event-kind has no case {name}", wit.display());
    }
    // The variant `event` (the SDK's `WholeEvent`): one case per kind, in
    // the same order, each with the event's record, `NO_EVENT`'s without.
    let events: Vec<Case> = match find(&resolve, package, "event") {
        wit_parser::TypeDefKind::Variant(v) => {
            v.cases.iter().map(|c| Case { name: c.name.clone(), docs: None, payload: c.ty.is_some() }).collect()
        }
        _ => panic!("{}: event is not a variant", wit.display()),
    };
    let names = |cases: &[Case]| cases.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&events), names(&cases), "{}: the cases of event and event-kind differ", wit.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("events.rs");
    std::fs::write(&out, generate(&cases, &events)).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}

/// The type `name` of `package`'s interface `types` (other interfaces
/// `use` it under the same name).
fn find<'r>(
    resolve: &'r wit_parser::Resolve,
    package: wit_parser::PackageId,
    name: &str,
) -> &'r wit_parser::TypeDefKind {
    let found: Vec<&wit_parser::TypeDef> = resolve
        .types
        .iter()
        .map(|(_, t)| t)
        .filter(|t| t.name.as_deref() == Some(name))
        .filter(|t| match t.owner {
            wit_parser::TypeOwner::Interface(i) => {
                let i = &resolve.interfaces[i];
                i.package == Some(package) && i.name.as_deref() == Some("types")
            }
            _ => false,
        })
        .collect();
    match found.as_slice() {
        [one] => &one.kind,
        _ => panic!("expected one type {name} in the interface types of nri-wasm:policy, found {}", found.len()),
    }
}

/// A Rust string literal of `text`.
fn lit(text: &str) -> String {
    format!("{text:?}")
}

fn generate(cases: &[Case], events: &[Case]) -> String {
    let lifecycle: Vec<&Case> = cases.iter().filter(|c| !STEPS.contains(&c.name.as_str())).collect();
    let mut s = String::from("// Generated by build.rs from the WIT enum `event-kind`; not to be edited.\n\n");

    let list = |cases: &[&Case]| cases.iter().map(|c| format!("    EventKind::{},\n", c.variant())).collect::<String>();
    let _ = writeln!(
        s,
        "/// Every lifecycle event of pods and containers: what a policy that wants\n\
         /// to see everything declares as [`Policy::EVENTS`] (with\n\
         /// `ValidateContainerAdjustment` and `Synchronize` for those steps, a list\n\
         /// of its own).\n\
         pub const LIFECYCLE_EVENTS: [EventKind; {}] = [\n{}];\n",
        lifecycle.len(),
        list(&lifecycle)
    );
    let all: Vec<&Case> = cases.iter().collect();
    let _ = writeln!(
        s,
        "/// Every event kind: the lifecycle events, `ValidateContainerAdjustment`\n\
         /// and `Synchronize`, in the WIT enum's order.\n\
         pub const ALL_EVENTS: [EventKind; {}] = [\n{}];\n",
        all.len(),
        list(&all)
    );

    let _ = writeln!(
        s,
        "/// The WIT name of an event kind (`create-container`), as declarations and\n\
         /// the host's messages spell it.\n\
         pub const fn event_name(kind: EventKind) -> &'static str {{\n    match kind {{"
    );
    for c in cases {
        let _ = writeln!(s, "        EventKind::{} => {},", c.variant(), lit(&c.name));
    }
    s.push_str("    }\n}\n\n");

    // The trait: `policy.rs` writes its head, this adds a handler per event.
    s.push_str(
        "/// Writes the `Policy` trait given with a handler for every event\n\
         /// added, each with a default that changes nothing.\n\
         macro_rules! policy_trait {\n    \
         ($(#[$meta:meta])* pub trait Policy { $($head:tt)* }) => {\n        \
         $(#[$meta])*\n        pub trait Policy {\n            $($head)*\n",
    );
    for c in cases {
        let what = match &c.docs {
            Some(d) => d.lines().map(|l| format!("            /// {l}\n")).collect::<String>(),
            None => String::new(),
        };
        let _ = writeln!(s, "            /// On `{}`. By default it changes nothing.", c.name);
        if !what.is_empty() {
            s.push_str("            ///\n");
            s.push_str(&what);
        }
        let params = if c.name == NO_EVENT { "" } else { "_event: &Event" };
        let _ = writeln!(
            s,
            "            fn {}({params}) -> Result<Reply, String> {{\n                Ok(Reply::none())\n            }}",
            c.method()
        );
    }
    s.push_str("        }\n    };\n}\n\n");

    s.push_str(
        "#[doc(hidden)]\npub fn __handle<P: Policy>(kind: EventKind) -> Result<Reply, String> {\n    \
         let e = Event::__new(kind);\n    match kind {\n",
    );
    for c in cases {
        let args = if c.name == NO_EVENT { "" } else { "&e" };
        let _ = writeln!(s, "        EventKind::{} => P::{}({args}),", c.variant(), c.method());
    }
    s.push_str("    }\n}\n\n");

    s.push_str("impl WholeEvent {\n    /// The kind of this event.\n    pub fn kind(&self) -> EventKind {\n        match self {\n");
    for c in events {
        let bind = if c.payload { "(_)" } else { "" };
        let _ = writeln!(s, "            WholeEvent::{}{bind} => EventKind::{},", c.variant(), c.variant());
    }
    s.push_str("        }\n    }\n}\n");
    s
}
