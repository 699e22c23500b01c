// The cases of `exclusive-cpus`, plain data: run natively by `tests.rs` and
// through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.
//
// Both run the case on a node of 8 CPUs, NUMA node 0 with CPUs 0-3 and
// node 1 with 4-7, with an empty node view and an empty state (no CPU
// handed out yet). What happens to the other containers of a node is
// tested in `tests.rs` and in the host's tests with a runtime.

/// The policy's name in the chain.
pub const POLICY: &str = "60-exclusive-cpus";

/// The settings of policy.toml.
pub const SETTINGS: &str = "min-shared=1";

const COUNT: &str = "exclusive-cpus.nri-wasm.io/count";

pub const CASES: &[Case] = &[
    Case {
        name: "the captured container asks for nothing and runs on the shared CPUs",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&["resources.cpu.cpus=0-7"]),
    },
    Case {
        name: "two CPUs from the fullest NUMA node that has room (node 0: 1-3 free of the pool 1-7)",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "2")],
        expect: Expect::Lines(&["annotation exclusive-cpus.nri-wasm.io/cpus=1-2", "resources.cpu.cpus=1-2"]),
    },
    Case {
        name: "four CPUs fit only on NUMA node 1",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, " 4 ")],
        expect: Expect::Lines(&["annotation exclusive-cpus.nri-wasm.io/cpus=4-7", "resources.cpu.cpus=4-7"]),
    },
    Case {
        name: "five CPUs fit on no node: the lowest free ones",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "5")],
        expect: Expect::Lines(&["annotation exclusive-cpus.nri-wasm.io/cpus=1-5", "resources.cpu.cpus=1-5"]),
    },
    Case {
        name: "the whole pool, leaving CPU 0 shared",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "7")],
        expect: Expect::Lines(&["annotation exclusive-cpus.nri-wasm.io/cpus=1-7", "resources.cpu.cpus=1-7"]),
    },
    Case {
        name: "a count of 0 is a shared container",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "0")],
        expect: Expect::Lines(&["resources.cpu.cpus=0-7"]),
    },
    Case {
        name: "more CPUs than the pool has",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "8")],
        expect: Expect::Deny("pod payments/billing-worker-7f9c5: 8 exclusive CPUs requested, 7 free in the pool"),
    },
    Case {
        name: "a pool of every CPU still keeps min-shared of them shared",
        settings: "pool=0-7 min-shared=1",
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "8")],
        expect: Expect::Deny("pod payments/billing-worker-7f9c5: 8 exclusive CPUs would leave fewer than 1 shared"),
    },
    Case {
        name: "a count that is not a number",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "two")],
        expect: Expect::Deny(
            "pod billing-worker-7f9c5: annotation exclusive-cpus.nri-wasm.io/count = \"two\" is not a CPU count",
        ),
    },
    Case {
        name: "a pool of its own, and CPUs beyond the node's ignored",
        settings: "pool=4-5,64",
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation(COUNT, "2")],
        expect: Expect::Lines(&["annotation exclusive-cpus.nri-wasm.io/cpus=4-5", "resources.cpu.cpus=4-5"]),
    },
    Case {
        name: "an annotation of its own",
        settings: "annotation=cpus.example.com/exclusive",
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("cpus.example.com/exclusive", "1"), Edit::PodAnnotation(COUNT, "3")],
        expect: Expect::Lines(&["annotation exclusive-cpus.nri-wasm.io/cpus=1", "resources.cpu.cpus=1"]),
    },
    Case {
        name: "a pool that is not a CPU list",
        settings: "pool=2-x",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: pool: bad CPU number in \"2-x\""),
    },
    Case {
        name: "an empty pool",
        settings: "pool=",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: pool names no CPU (e.g. pool=2-7)"),
    },
    Case {
        name: "an empty annotation",
        settings: "annotation=",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: annotation needs a pod annotation key"),
    },
    Case {
        name: "a negative min-shared",
        settings: "min-shared=-1",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: min-shared: \"-1\" is not a number"),
    },
    Case {
        name: "a word without =",
        settings: "min-shared=1 numa",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: \"numa\" is not key=value"),
    },
    Case {
        name: "an unknown setting",
        settings: "count=2",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: unknown field `count`, expected one of `pool`, `annotation`, `min-shared`",
        ),
    },
    Case {
        name: "a setting given twice",
        settings: "pool=2-x pool=3",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: pool given twice"),
    },
];
